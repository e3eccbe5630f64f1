"""Problem files of a user's own model (``kind = "module"``) through the command line: every command that takes data
problems accepts one (tiny sizes), ``fedsde validity`` gives one of its three outcomes, and every bad key or value
of a file is a one-line error naming the file, the key, the value and the constraint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.problems import load_problem

MODEL = '''
import torch
from torch import nn


class TinyMLP(nn.Module):
    def __init__(self, hidden=4, dropout=0.2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)


def make_regressor(width=3):
    return nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 1))
'''


def _files(tmp_path, **keys) -> str:
    (tmp_path / "tiny.py").write_text(MODEL)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((36, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    client = np.array(["b", "a", "c"])[np.arange(36) % 3]
    np.savez(tmp_path / "tiny.npz", x=x, y=y, client=client, x_test=rng.standard_normal((12, 4)),
             y_test=rng.integers(0, 3, 12))
    np.savez(tmp_path / "reg.npz", x=x, y=x[:, 0] - x[:, 2], client=client)
    lines = {"kind": '"module"', "model": '"tiny.py:TinyMLP"', "model_options": "{ hidden = 4 }",
             "data": '"tiny.npz"', "batch_size": "4", "l2": "1e-3"}
    lines |= keys
    text = "".join(f"{k} = {v}\n" for k, v in lines.items() if v is not None)
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return str(path)


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_every_command_accepts_a_module_file(tmp_path, capsys):
    path = _files(tmp_path)
    base = ["--problem", path, "--eta", "0.1", "--local-steps", "2"]
    sim = _run(capsys, ["simulate", *base, "--rounds", "2", "--replicates", "3", "--seed", "0", "--json"])
    assert set(sim["metrics"]) == {"train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start"}
    assert sim["problem"]["model"] == "module" and sim["problem"]["client_names"] == ["b", "a", "c"]
    for extra in (["--integrator", "mc-euler"], ["--integrator", "svag", "--ell", "2"]):
        sde = _run(capsys, ["sde", *base, "--rounds", "2", "--replicates", "3", "--seed", "0", "--variant",
                            "general", *extra, "--json"])
        assert np.all(np.isfinite(sde["final"]["mean"]))
    val = _run(capsys, ["validity", *base, "--rounds", "2", "--replicates", "4", "--seed", "0", "--ells", "1,2",
                        "--json"])
    assert val["verdict"]["outcome"] in ("tracks", "does not track", "inconclusive")
    assert val["verdict"]["reference"] == "svag"
    cmp = _run(capsys, ["compare", *base, "--rounds", "2", "--replicates", "3", "--seed", "0", "--ells", "1,2,4",
                        "--mc-substeps", "1", "--json"])
    assert cmp["kind"] == "data"
    for rule in ("local-steps", "clients", "batch"):
        sc = _run(capsys, ["scaling", *base, "--rounds", "2", "--replicates", "2", "--seed", "0", "--rule", rule,
                           "--kappa", "2", "--json"])
        assert sc["rule"] == rule
    out = tmp_path / "agg"
    agg = _run(capsys, ["compare-aggregators", "--problem", path, "--rounds", "2", "--runs", "2", "--epochs", "1",
                        "--no-plot", "--out", str(out), "--json"])
    names = {r["aggregator"] for r in agg["summary"]}
    assert {"fedavg", "fedavgm", "fedprox", "scaffold", "fednova", "feddisco", "fedaware", "fedadam"} <= names
    spec = tmp_path / "sweep.toml"
    spec.write_text(f'[run]\ncommand = "simulate"\nseed = 0\n\n[base]\nproblem = "{path}"\nlocal_steps = 2\n'
                    "rounds = 1\nreplicates = 2\n\n[grid]\neta = [0.05, 0.1]\n")
    sw = _run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "sw"), "--json"])
    assert sw["done"] == 2 and sw["failed"] == 0


def test_every_aggregator_runs_on_a_module_problem(tmp_path):
    from fedsde.aggregators import AGGREGATORS
    from fedsde.sim import simulate

    pb = load_problem(_files(tmp_path))
    for name in AGGREGATORS:
        res = simulate(pb, eta=0.1, local_steps=2, rounds=2, replicates=2, seed=0, aggregator=name,
                       participation=2)
        assert np.all(np.isfinite(res.weights)), name


def test_mse_module_file_and_full_batches(tmp_path, capsys):
    path = _files(tmp_path, model='"tiny.py:make_regressor"', model_options="{ width = 3 }", data='"reg.npz"',
                  loss='"mse"', batch_size='"full"', sampling='"with-replacement"')
    pb = load_problem(path)
    assert pb.loss_name == "mse" and pb.batch_size is None and pb.d == 4 * 3 + 3 + 3 + 1
    sim = _run(capsys, ["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "2", "--rounds", "2",
                        "--replicates", "2", "--seed", "0", "--json"])
    assert "test_accuracy" not in sim["metrics"]
    loss = sim["metrics"]["train_loss"]["mean"]
    assert loss[-1] < loss[0]


def test_digits_images_from_a_bundled_set(tmp_path):
    path = _files(tmp_path, data=None, dataset='"digits"', shape='"image"', clients="3", seed="0",
                  model='"cnn.py:Net"', model_options=None)
    (tmp_path / "cnn.py").write_text("from torch import nn\n\n\ndef Net():\n"
                                     "    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(72, 10))\n")
    pb = load_problem(path)
    assert pb.row_shape == (1, 8, 8) and pb.Q == 3 and pb.X_test.shape[1:] == (1, 8, 8)
    assert pb.info["dataset"] == "digits"


@pytest.mark.parametrize(("keys", "needles"), [
    ({"model": None}, ["missing key 'model'"]),
    ({"model": '"tiny.py"'}, ["model='tiny.py'", "FILE.py:NAME"]),
    ({"model": '"nope.py:TinyMLP"'}, ["no Python file"]),
    ({"model": '"tiny.py:Nope"'}, ["no class or function 'Nope'"]),
    ({"model_options": "{ depth = 2 }"}, ["model_options", "depth"]),
    ({"model_options": "3"}, ["model_options=3"]),
    ({"batch_size": None}, ["missing key 'batch_size'"]),
    ({"batch_size": "0"}, ["batch_size"]),
    ({"batch_size": '"half"'}, ["batch_size='half'"]),
    ({"loss": '"hinge"'}, ["loss", "hinge"]),
    ({"sampling": '"epoch"'}, ["sampling", "epoch"]),
    ({"l2": "-1"}, ["l2"]),
    ({"init_seed": "-2"}, ["init_seed"]),
    ({"p": "[1, 2]"}, ["p=[1, 2]", "3 weights"]),
    ({"p": "{ b = 1, a = 1, x = 2 }"}, ["no client(s) 'x'"]),
    ({"data": '"missing.npz"'}, ["no such file"]),
    ({"data": None}, ["missing key 'data'"]),
    ({"dataset": '"digits"'}, ["data, dataset"]),
    ({"colour": '"red"'}, ["unknown key(s) colour"]),
    ({"partition": '"iid"'}, ["has no key(s) partition"]),
    ({"data": '"bad.npz"'}, ["missing array(s) client"]),
    ({"model": '"broken.py:X"'}, ["importing", "ZeroDivisionError"]),
    ({"model": '"raising.py:Boom"', "model_options": None}, ["Boom(**model_options) fails", "RuntimeError",
                                                            "negative dimension"]),
    ({"data": '"reg.npz"'}, ["labels must be integers"]),
])
def test_bad_module_files_are_one_line_errors(tmp_path, capsys, keys, needles):
    path = _files(tmp_path, **keys)
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 2)), y=np.zeros(3))
    (tmp_path / "broken.py").write_text("X = 1 / 0\n")
    (tmp_path / "raising.py").write_text("def Boom():\n    raise RuntimeError('negative dimension -4')\n")
    with pytest.raises(FedsdeInputError) as err:
        load_problem(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("problem file"), msg
    for n in needles:
        assert n in msg, msg
    code = main(["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "1", "--rounds", "1",
                 "--replicates", "2", "--seed", "0"])
    cap = capsys.readouterr()
    assert code == 2 and cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err


def test_a_quadratic_figure_refuses_a_module_problem_in_one_line(tmp_path, capsys):
    path = _files(tmp_path)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[run]\nproblem = "{path}"\n')
    code = main(["reproduce", "--quick", "--config", str(cfg), "--only", "F2", "--out", str(tmp_path / "r"),
                 "--no-claims", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "quadratic" in err, err


def test_memory_is_estimated_up_front(tmp_path, monkeypatch):
    from fedsde.sim import simulate

    pb = load_problem(_files(tmp_path))
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1000")
    with pytest.raises(FedsdeInputError, match="module TinyMLP") as err:
        simulate(pb, eta=0.1, local_steps=1, rounds=1, replicates=64, seed=0)
    assert "\n" not in str(err.value)


@pytest.mark.cuda
def test_simulate_on_cuda_and_float32(tmp_path, capsys):
    path = _files(tmp_path)
    for extra in ([], ["--float32"]):
        sim = _run(capsys, ["simulate", "--problem", path, "--eta", "0.1", "--local-steps", "2", "--rounds", "2",
                            "--replicates", "3", "--seed", "0", "--device", "cuda", *extra, "--json"])
        assert np.all(np.isfinite(sim["metrics"]["train_loss"]["mean"]))


@pytest.mark.parametrize(("argv", "needle"), [
    (["validity", "--rounds", "2", "--replicates", "4", "--seed", "0", "--reference", "exact"], "svag"),
    (["exact"], "kind='module'"),
    (["derive"], "kind='module'"),
    (["sde", "--rounds", "2", "--replicates", "3", "--seed", "0"], "--variant general"),
])
def test_closed_forms_refuse_a_module_file_in_one_line(tmp_path, capsys, argv, needle):
    path = _files(tmp_path)
    code = main([argv[0], "--problem", path, "--eta", "0.1", "--local-steps", "2", *argv[1:]])
    cap = capsys.readouterr()
    assert code == 2 and cap.out == "" and cap.err.count("\n") == 1 and needle in cap.err, cap.err
