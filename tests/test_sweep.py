"""Sweeps: spec validation, cell seeds, the store (resume, refusals, failed cells) and loading, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.sweep import cell_seed, load, load_frame, load_spec, run
from fedsde.sweep.spec import cell_argv

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "examples" / "problems" / "paper_table.toml")


def small_spec(**grid) -> dict:
    return {"run": {"command": "simulate", "seed": 7},
            "base": {"problem": PROBLEM, "rounds": 5, "replicates": 50},
            "grid": grid or {"eta": [0.01, 0.05], "local_steps": [1, 3]}}


@pytest.mark.parametrize(("spec", "match"), [
    ({"run": {"command": "nosuch", "seed": 1}}, r"run.command='nosuch': unknown command; cell commands: .*simulate"),
    ({"run": {"seed": 1}}, r"run.command=None: required"),
    ({"run": {"command": "simulate", "seed": -1}}, r"run.seed=-1: must be an integer >= 0"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"problem": PROBLEM, "bogus": 3}},
     r"base.bogus: unknown option of fedsde simulate; its options: .*--local-steps"),
    ({"run": {"command": "simulate", "seed": 1}, "grid": {"eta": []}}, r"grid.eta=\[\]: empty axis"),
    ({"run": {"command": "simulate", "seed": 1}, "grid": {"eta": 0.1}}, r"grid.eta=0.1: an axis must be a list"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"eta": 0.1}, "grid": {"eta": [0.1, 0.2]}},
     r"eta: given in both \[base\] and \[grid\]"),
    ({"run": {"command": "simulate", "seed": 1}, "zip": {"eta": [0.1, 0.2], "local_steps": [1]}},
     r"\[zip\]: axes that vary together need equal lengths; eta has 2, local_steps has 1 values"),
    ({"run": {"command": "simulate", "seed": 1}, "grid": {"eta": [0.1, 0.1]}}, r"value 0.1 appears twice"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"seed": 3}}, r"base.seed: the seed goes in \[run\]"),
    ({"run": {"command": "simulate"}}, r"run.seed: required, fedsde simulate takes --seed"),
    ({"run": {"command": "exact"}, "grid": {"seed": [1, 2]}}, r"grid.seed: fedsde exact takes no --seed"),
    ({"run": {"command": "simulate", "seed": 1}, "grid2": {}}, r"\[grid2\]: unknown table"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"json": True}}, r"base.json: --json is added"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"problem": PROBLEM, "local_steps": 2, "replicates": 9,
      "seed": None}}, r"base.seed=None: must be a number"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"problem": PROBLEM, "rounds": 5, "replicates": 9},
      "grid": {"eta": [0.1, "x"]}}, r"cell \{\"eta\":\"x\"\}: fedsde simulate: error: argument --eta: invalid float"),
    ({"run": {"command": "simulate", "seed": 1}, "base": {"problem": PROBLEM, "eta": 0.1}},
     r"fedsde simulate: error: the following arguments are required: --rounds, --replicates"),
])
def test_spec_errors_are_one_line(spec, match):
    with pytest.raises(FedsdeInputError, match=match) as err:
        load_spec(spec)
    assert "\n" not in str(err.value)


def test_spec_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\ncommand = 'simulate'\n")
    with pytest.raises(FedsdeInputError, match=r"not valid TOML: .*line 1") as err:
        load_spec(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(FedsdeInputError, match="cannot read it"):
        load_spec(tmp_path / "missing.toml")


def test_spec_file_relative_paths_and_spellings(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "pb.toml").write_text(Path(PROBLEM).read_text())
    f = tmp_path / "s.toml"
    f.write_text('[run]\ncommand = "simulate"\nseed = 3\n[base]\nproblem = "p/pb.toml"\nrounds = 2\n'
                 'replicates = 4\nfloat32 = false\n[grid]\nlocal-steps = [1, 2]\n[zip]\neta = [0.1, 0.2]\n'
                 'server_lr = [1.0, 0.5]\n')
    spec = load_spec(f)
    assert spec.dims == {"local_steps": 2, "zip": 2} and spec.n_cells == 4
    cell = next(spec.cells())
    argv = cell_argv(spec, cell)
    assert f"--problem={tmp_path / 'p' / 'pb.toml'}" in argv and "--float32" not in argv
    assert argv[-1] == f"--seed={cell.seed}" and "--local-steps=1" in argv and "--server-lr=1.0" in argv


def test_zip_groups_and_switches():
    spec = load_spec({"run": {"command": "simulate", "seed": 1},
                      "base": {"problem": PROBLEM, "rounds": 2, "replicates": 4, "float32": True},
                      "zip": {"kappa": {"eta": [0.1, 0.05], "local_steps": [1, 2]}}, "grid": {"seed": [0, 1]}})
    assert spec.dims == {"seed": 2, "kappa": 2}
    coords = [c.coords for c in spec.cells()]
    assert coords[1] == {"seed": 0, "eta": 0.05, "local_steps": 2}
    assert "--float32" in cell_argv(spec, next(spec.cells()))
    seeds = [c.seed for c in spec.cells()]
    assert len(set(seeds)) == 4  # the seed axis labels independent replicates


def test_cell_seed_depends_only_on_spec_seed_and_coordinates():
    a = load_spec(small_spec(eta=[0.01, 0.05], local_steps=[1, 3]))
    b = load_spec(small_spec(local_steps=[3, 2], eta=[0.05, 0.2]))  # other grid, other order
    sa = {json.dumps(c.coords, sort_keys=True): c.seed for c in a.cells()}
    sb = {json.dumps(c.coords, sort_keys=True): c.seed for c in b.cells()}
    common = sa.keys() & sb.keys()
    assert len(common) == 1 and all(sa[k] == sb[k] for k in common)
    assert len(set(sa.values())) == 4
    assert cell_seed(7, {"eta": 0.05, "local_steps": 3}) == cell_seed(7, {"local_steps": 3, "eta": 0.05})
    assert cell_seed(7, {"eta": 0.05}) != cell_seed(8, {"eta": 0.05})
    assert cell_seed(7, {"eta": 1}) != cell_seed(7, {"eta": 1.0})  # 1 and 1.0 are different coordinates
    # the derivation is SeedSequence([seed, first four little-endian words of SHA-256(canonical JSON)])
    import hashlib
    words = np.frombuffer(hashlib.sha256(b'{"eta":0.05}').digest()[:16], dtype="<u4").tolist()
    ref = int(np.random.SeedSequence([7, *words]).generate_state(1, dtype=np.uint32)[0])
    assert cell_seed(7, {"eta": 0.05}) == ref


def test_run_load_failed_cells_and_refusals(tmp_path):
    out = tmp_path / "sw"
    spec = small_spec(eta=[0.01, 0.05, 1.5], local_steps=[1, 3])  # η = 1.5 diverges: failed, the others run
    summary = run(spec, out, progress=False)
    assert {k: summary[k] for k in ("cells", "done", "skipped", "failed")} == \
        {"cells": 6, "done": 4, "skipped": 0, "failed": 2}
    assert all("local SGD diverges" in f["error"] for f in summary["failures"])
    ds = load(out)
    assert dict(ds.sizes) == {"eta": 3, "local_steps": 2, "d": 1, "d2": 1}
    assert ds.final_mean.dims == ("eta", "local_steps", "d") and ds.final_cov.dims == ("eta", "local_steps", "d", "d2")
    assert list(ds.status.sel(eta=1.5).values) == ["failed", "failed"]
    assert np.isnan(ds.final_mean.sel(eta=1.5)).all() and np.isfinite(ds.final_mean.sel(eta=0.05)).all()
    assert "diverges" in str(ds.error.sel(eta=1.5, local_steps=1).values)
    assert ds.attrs["done"] == 4 and ds.attrs["failed"] == 2 and ds.attrs["command"] == "simulate"
    cell = next(c for c in load_spec(spec).cells() if c.coords == {"eta": 0.05, "local_steps": 3})
    stored = json.loads((out / "cells" / f"{cell.id}.json").read_text())
    assert stored["seed"] == cell.seed == int(ds.cell_seed.sel(eta=0.05, local_steps=3))
    # a second run into the same folder is refused; a changed spec is refused with what changed
    with pytest.raises(FedsdeInputError, match=r"already holds this sweep \(6 finished cells\); pass --resume"):
        run(spec, out, progress=False)
    changed = small_spec(eta=[0.01, 0.02, 1.5], local_steps=[1, 3])
    changed["base"]["rounds"] = 6
    with pytest.raises(FedsdeInputError, match=r"spec differs .*base.rounds 5 -> 6; grid.eta \[0.01,0.05,1.5\] -> "
                       r"\[0.01,0.02,1.5\]"):
        run(changed, out, resume=True, progress=False)
    with pytest.raises(FedsdeInputError, match=r"already holds another sweep \(6 finished cells; spec changes: "):
        run(changed, out, progress=False)
    # --resume reruns the failed cells only
    again = run(spec, out, resume=True, progress=False)
    assert (again["skipped"], again["done"], again["failed"]) == (4, 0, 2)
    frame = load_frame(out)
    assert len(frame) == 6 and set(frame.status) == {"done", "failed"}
    row = frame[(frame.eta == 0.05) & (frame.local_steps == 3)].iloc[0]
    assert row["final_mean[0]"] == float(ds.final_mean.sel(eta=0.05, local_steps=3, d=0))
    assert row["final_cov[0,0]"] == stored["result"]["final"]["cov"][0][0]


def test_half_finished_sweep_loads_with_missing_cells(tmp_path):
    out = tmp_path / "sw"
    spec = small_spec()
    run(spec, out, progress=False)
    victim = next(iter(sorted((out / "cells").glob("*.json"))))
    victim.unlink()
    (out / "cells" / f".{victim.name}.abc.tmp").write_text('{"id": "partial')  # what a kill mid-write leaves
    ds = load(out)
    assert ds.attrs["missing"] == 1 and int((ds.status == "missing").sum()) == 1
    assert int(np.isnan(ds.final_mean).sum()) == 1
    frame = load_frame(out)
    assert (frame.status == "missing").sum() == 1
    summary = run(spec, out, resume=True, progress=False)
    assert (summary["skipped"], summary["done"]) == (3, 1)
    assert not list((out / "cells").glob(".*.tmp"))


def test_cli_sweep(tmp_path, capsys):
    from fedsde.cli import main

    spec = tmp_path / "s.toml"
    spec.write_text(f'[run]\ncommand = "exact"\n[base]\nproblem = "{PROBLEM}"\n[grid]\neta = [0.05, 0.55]\n'
                    'local_steps = [1, 2]\n')  # η = 0.55: local SGD expands on one client, the result warns
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {k: summary[k] for k in ("cells", "done", "skipped", "failed")} == \
        {"cells": 4, "done": 4, "skipped": 0, "failed": 0}
    assert summary["wall_s"] > 0 and summary["warned"] == 2
    ds = load(tmp_path / "o")
    assert (ds.n_warnings.sel(eta=0.55) > 0).all() and (ds.n_warnings.sel(eta=0.05) == 0).all()
    recs = [json.loads(p.read_text()) for p in (tmp_path / "o" / "cells").glob("*.json")]
    assert sum(bool(r.get("warnings")) for r in recs) == 2
    assert ds.stationary_cov.dims == ("eta", "local_steps", "d", "d2")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsde sweep: error: --out=") and "\n" not in err
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "0"]) == 2
    assert "--workers=0: must be an integer >= 1" in capsys.readouterr().err


def test_cell_is_what_the_command_prints(tmp_path, capsys):
    from fedsde.cli import main

    spec = small_spec(eta=[0.05], local_steps=[3])
    run(spec, tmp_path / "o", progress=False)
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "o" / "cells").glob("*.json")]
    assert main(["simulate", *rec["argv"], "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # the resources are where it ran, not what it computed: beside the cell's result (one thread, a budget of its own)
    here, cell = printed.pop("resources"), rec["run_resources"]
    assert printed == rec["result"]
    assert cell["threads"] == 1 and here["memory_planned_bytes"] == cell["memory_planned_bytes"] > 0


def test_example_spec_and_heatmap_example(tmp_path, monkeypatch, capsys):
    import runpy

    spec = load_spec(ROOT / "examples" / "sweep.toml")
    assert spec.n_cells == 12 and str(ROOT / "examples" / "problems" / "paper_table.toml") in cell_argv(
        spec, next(spec.cells()))[0]
    script = ROOT / "examples" / "sweep_heatmap.py"
    assert len(script.read_text().splitlines()) <= 60, "examples stay short"
    monkeypatch.setattr("sys.argv", [str(script), "--quick", "--out", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    assert (tmp_path / "sweep_heatmap.png").stat().st_size > 5_000
    ds = load(tmp_path / "sweep_heatmap")
    assert ds.attrs["done"] == 20 and ds.attrs["failed"] == 4  # η = 0.5 diverges for every E
    assert "local_steps" in capsys.readouterr().out


def test_zip_axes_share_one_dimension_when_loaded(tmp_path):
    spec = {"run": {"command": "exact"}, "base": {"problem": PROBLEM}, "grid": {"server_lr": [1.0, 0.5]},
            "zip": {"eta": [0.02, 0.04, 0.08], "local_steps": [4, 2, 1]}}
    assert run(spec, tmp_path / "z", progress=False)["done"] == 6
    ds = load(tmp_path / "z")
    assert ds.stationary_mean.dims == ("server_lr", "zip", "d")
    assert ds.eta.dims == ds.local_steps.dims == ("zip",) and list(ds.local_steps.values) == [4, 2, 1]
    from fedsde.exact import stationary_law
    from fedsde.problems import load_problem

    law = stationary_law(load_problem(PROBLEM), 0.04, 2, server_lr=0.5)
    got = ds.stationary_cov.sel(server_lr=0.5).isel(zip=1, d=0, d2=0)
    assert float(got) == pytest.approx(float(np.asarray(law.cov).ravel()[0]), rel=1e-12)


def test_shared_seeds_give_every_cell_the_spec_seed():
    """``seeds = "shared"``: common random numbers (every cell gets the spec's seed); the default derives one per
    cell, and a spec without the key keeps its hash."""
    base = {"run": {"command": "simulate", "seed": 11}, "base": {"problem": PROBLEM, "local-steps": 2,
            "rounds": 2, "replicates": 4}, "grid": {"eta": [0.01, 0.02, 0.05]}}
    derived = load_spec(base)
    shared = load_spec({**base, "run": {**base["run"], "seeds": "shared"}})
    assert len({c.seed for c in derived.cells()}) == 3
    assert {c.seed for c in shared.cells()} == {11}
    assert "seeds" not in derived.to_dict()["run"] and shared.to_dict()["run"]["seeds"] == "shared"
    assert derived.sha256 != shared.sha256
    with pytest.raises(FedsdeInputError, match=r"run\.seeds='same'"):
        load_spec({**base, "run": {**base["run"], "seeds": "same"}})
    with pytest.raises(FedsdeInputError, match=r"grid\.seed: with run\.seeds = 'shared'"):
        load_spec({**base, "run": {**base["run"], "seeds": "shared"}, "grid": {"eta": [0.01], "seed": [0, 1]}})
