"""``fedsde reproduce``: outputs, numbers against the exact law, configuration validation, no partial output."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.exact import stationary_law
from fedsde.problems import paper_table_problem
from fedsde.report.config import FIGURE_IDS, builtin_config, load_config, parse_only, validate


@pytest.mark.long
def test_reproduce_stationary_figures(tmp_path, capsys):
    out = tmp_path / "res"
    code = main(["reproduce", "--quick", "--only", "F2,F3", "--no-claims", "--out", str(out), "--seed", "1",
                 "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert code == 0, obj["failed"]
    for name in ("F2_bias_vs_E", "F3_variance_vs_E"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (out / "figures" / f"{name}.pdf").exists()
    assert (out / "report.html").exists() and (out / "report.md").exists()
    assert not list(out.glob(".partial-*"))
    for fid in ("F2", "F3"):  # the reported files are the final ones, not the scratch copies
        files = obj["figures"][fid]["files"]
        assert len(files) >= 3 and all(".partial-" not in f for f in files)
        assert all(Path(f).is_file() and Path(f).parent.parent == out for f in files), files
    with open(out / "data" / "F3_stationary_scan.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 15
    pb = paper_table_problem()
    for r in rows:
        st = stationary_law(pb, float(r["eta"]), int(r["E"]))
        assert float(r["exact_var"]) == pytest.approx(st.cov[0, 0], rel=1e-8)
        assert abs(float(r["sim_mean"]) - st.mean[0]) < 5 * float(r["sim_mean_se"])
        assert abs(float(r["sim_var"]) - st.cov[0, 0]) < 5 * float(r["sim_var_se"])
        assert float(r["paper_C4"]) == pytest.approx(st.mean[0], rel=1e-10)  # printed C4 is right
        assert float(r["paper_over_exact"]) > 2.0  # printed v0(∞) is not
    slopes = obj["figures"]["F3"]["numbers"]["log_slopes"]["0.05"]
    assert abs(slopes["exact"]) < 0.05 and slopes["printed"] > 1.9
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2


@pytest.mark.long
def test_same_seed_same_numbers(tmp_path, capsys):
    argv = ["reproduce", "--quick", "--only", "F4", "--no-claims", "--seed", "3", "--json"]
    main([*argv, "--out", str(tmp_path / "a")])
    main([*argv, "--out", str(tmp_path / "b")])
    capsys.readouterr()
    a = (tmp_path / "a" / "data" / "F4_variance_vs_Q.csv").read_text()
    b = (tmp_path / "b" / "data" / "F4_variance_vs_Q.csv").read_text()
    assert a == b


def test_builtin_configs_are_valid_and_complete():
    for name in ("quick", "full"):
        cfg = validate(builtin_config(name), source=name)
        assert set(FIGURE_IDS) <= set(cfg)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[F9x]\na = 1\n", r"unknown table \[F9x\]"),
        ("[F2]\netas = [0.1, -0.2]\n", r"F2.etas\[1\]=-0.2: must be > 0"),
        ("[F2]\nEs = 3\n", "F2.Es=3: must be a non-empty list"),
        ("[F4]\nreplicates = 0\n", "F4.replicates=0: must be >= 1"),
        ("[F1]\nspeed = 1\n", "unknown field F1.speed"),
        ("[run]\nseed = 'x'\n", "run.seed='x': must be an integer"),
        ("not toml [", "not valid TOML"),
        ("[F6]\neta = nan\n", "F6.eta=nan: must be finite"),
        ("[F2]\netas = [0.1, inf]\n", r"F2.etas\[1\]=inf: must be finite"),
    ],
)
def test_config_errors_name_field_value_constraint(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(FedsdeInputError, match=match):
        load_config(quick=True, path=f)


def test_config_override_keeps_other_fields(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[F4]\ncopies = [1, 2]\n")
    cfg = load_config(quick=True, path=f)
    assert cfg["F4"]["copies"] == [1, 2] and cfg["F4"]["eta"] == 0.05


def test_cli_errors(tmp_path, capsys):
    assert main(["reproduce", "--only", "F99", "--out", str(tmp_path)]) == 2
    assert "--only='F99'" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["reproduce", "--quick", "--only", "F2", "--out", str(f)]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["reproduce", "--quick", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert parse_only("f3, F5") == ("F3", "F5")


def test_help_names_the_whole_gallery():
    from fedsde._cli import reproduce
    from fedsde.report.gallery import GALLERY

    parser = argparse.ArgumentParser(prog="fedsde")
    reproduce.register(parser.add_subparsers())
    ids = list(GALLERY)
    assert f"gallery {ids[0]}–{ids[-1]}" in parser.format_help()


# ---------------------------------------------------------------- figures on several processes
def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.long
def test_parallel_run_gives_the_sequential_numbers(tmp_path, monkeypatch):
    import fedsde.report.runner as runner
    from fedsde.report.runner import reproduce

    # three cheap checks stand in for the claims table: one that F10 runs itself, two that the workers run
    few = [c for c in runner._all_claims() if c.id in ("002/lemma-a.1", "002/eq-4", "003/lemma-1")]
    monkeypatch.setattr(runner, "_all_claims", lambda: few)
    cfg = load_config(quick=True)
    only = ("F2", "F5", "F6", "F10")
    res = {jobs: reproduce(cfg, only, tmp_path / f"j{jobs}", quick=True, progress=False, jobs=jobs)
           for jobs in (1, 2)}
    assert res[1].metadata["worker processes"] == 1 and res[2].metadata["worker processes"] == 2
    a, b = _summary(tmp_path / "j1"), _summary(tmp_path / "j2")
    assert list(b["figures"]) == list(only)  # the report keeps the order asked for
    for fid in only:
        assert a["figures"][fid]["error"] is None and b["figures"][fid]["error"] is None
        assert b["figures"][fid]["numbers"] == a["figures"][fid]["numbers"], fid
        assert b["figures"][fid]["caption"] == a["figures"][fid]["caption"], fid
        assert b["figures"][fid]["cpu_time_s"] > 0
    strip = [{k: v for k, v in c.items() if k != "seconds"} for c in a["claims"]]
    assert [c["id"] for c in a["claims"]] == [c.id for c in few]
    assert [{k: v for k, v in c.items() if k != "seconds"} for c in b["claims"]] == strip
    assert res[2].errata == res[1].errata and res[2].errata
    csv_a = sorted(p.name for p in (tmp_path / "j1" / "data").iterdir())
    assert csv_a == sorted(p.name for p in (tmp_path / "j2" / "data").iterdir())
    for name in csv_a:
        assert (tmp_path / "j2" / "data" / name).read_bytes() == (tmp_path / "j1" / "data" / name).read_bytes(), name
    assert not list((tmp_path / "j2").glob(".partial-*"))
    assert all(Path(f).is_file() for r in res[2].records for f in r.files)
    html = (tmp_path / "j2" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(only)
    assert [html.index(f"id='{fid}'") for fid in only] == sorted(html.index(f"id='{fid}'") for fid in only)


def test_plan_shares_work_and_runs_each_piece_once():
    from fedsde.report.gallery import BOUND_CLAIMS
    from fedsde.report.parallel import plan
    from fedsde.report.pending import ERRATA, claim_key

    cfg = load_config(quick=True)
    scale = cfg["F8"]["scale"]
    claims = [*BOUND_CLAIMS, "002/lemma-a.1", "002/thm-5.4", "003/thm-1"]
    pending = (ERRATA, *(claim_key(c, scale) for c in claims))
    units = plan(("F2", "F3", "F8", "F10", "F11"), cfg, pending)
    figures = [u.figures for u in units if u.figures]
    assert sorted(figures) == sorted([("F2", "F3"), ("F8",), ("F10",), ("F11",)])  # F2, F3: one grid
    assert sorted(k for u in units for k in u.pending) == sorted([ERRATA, claim_key("002/thm-5.4", scale),
                                                                 claim_key("003/thm-1", scale)])
    assert [u.cost for u in units] == sorted((u.cost for u in units), reverse=True)
    assert units[0].figures == ("F11",)
    # F10 checks Lemma A.1 at its own scale: the claims table, at F8's, needs its own run
    other = {**cfg, "F10": {**cfg["F10"], "scale": scale / 2}}
    keys = [k for u in plan(("F10",), other, pending) for k in u.pending]
    assert claim_key("002/lemma-a.1", scale) in keys and len(keys) == len(pending)


def test_jobs_is_checked(tmp_path):
    from fedsde.report.parallel import check_jobs, usable_cores
    from fedsde.report.runner import reproduce

    for bad in (0, -1, 1.5, True):
        with pytest.raises(FedsdeInputError, match=rf"jobs={bad!r}: must be an integer >= 1"):
            reproduce(load_config(quick=True), ("F5",), tmp_path / "x", quick=True, progress=False, jobs=bad)
    assert not (tmp_path / "x").exists()
    assert check_jobs(None) == usable_cores() >= 1 and check_jobs(3) == 3


def test_only_checks_the_claims_its_figures_use(tmp_path, capsys):
    from fedsde._cli.reproduce import figure_claims
    from fedsde.report.gallery import BOUND_CLAIMS

    assert figure_claims(("F3", "F5")) == ()
    assert figure_claims(("F10", "F8", "F3")) == ("002/lemma-a.1", *BOUND_CLAIMS)
    code = main(["reproduce", "--quick", "--only", "F3", "--out", str(tmp_path / "r"), "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "claims: none checked: the figures of --only (F3) use no claim" in out, out
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["claims"] is None
