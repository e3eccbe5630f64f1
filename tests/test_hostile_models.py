"""Hostile model files and npz files of a user's own model (``kind = "module"``), each refused in one line naming
the model or the array, exit 2, nothing on stdout: a model with no parameters, one whose own output is not finite,
one that loses the batch dimension, a file that exits at import, a misspelt class name, string and object arrays,
an empty npz as a population, a model far too large for the memory; and what is accepted: ``loss = "nll"`` on
log-probabilities (the cross-entropy's objective), a model that prints under ``--json`` (stdout stays one JSON
object), a batch larger than some clients (a warning)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.problems import load_problem
from fedsde.problems.module import module_problem
from fedsde.problems.module.checks import BatchSizeWarning

MODELS = '''
import sys
import torch
from torch import nn

BUILT = []


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, x):
        return self.l(x)


class NoParams(nn.Module):
    def forward(self, x):
        return x[:, :3]


class NaNOut(TinyMLP):
    def forward(self, x):
        return self.l(x) * float("nan")


class FirstRow(TinyMLP):
    def forward(self, x):
        return self.l(x)[:1]


class MeanRows(TinyMLP):
    def forward(self, x):
        return self.l(x).mean(0)


class OneOutMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 1)

    def forward(self, x):
        return self.l(x).mean(0)


class Printer(TinyMLP):
    def forward(self, x):
        print("forward", tuple(x.shape))
        return self.l(x)


class LogSoftmax(TinyMLP):
    def forward(self, x):
        return torch.log_softmax(self.l(x), dim=1)


class Exits(TinyMLP):
    def __init__(self):
        super().__init__()
        sys.exit(3)


class Numpy(TinyMLP):
    def forward(self, x):
        return torch.as_tensor(self.l(x).detach().numpy())


class SqrtZero(TinyMLP):
    def forward(self, x):
        h = self.l(x)
        return torch.sqrt(h - h)


class Huge(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(10_000, 10_000)  # 10⁸ parameters
        BUILT.append(self.l.weight.device.type)

    def forward(self, x):
        return x
'''


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def refused(argv) -> str:
    code, out, err = run(argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, \
        (code, out, err)
    return err


SIM = ["--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates", "2", "--seed", "0"]


@pytest.fixture()
def files(tmp_path):
    """A model file, an npz of three clients (12 rows each, with a test set) and a writer of problem files."""
    (tmp_path / "models.py").write_text(MODELS)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((36, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    client = np.array(["b", "a", "c"])[np.arange(36) % 3]
    np.savez(tmp_path / "d.npz", x=x, y=y, client=client, x_test=rng.standard_normal((6, 4)),
             y_test=rng.integers(0, 3, 6))
    np.savez(tmp_path / "reg.npz", x=x, y=x[:, 0] - x[:, 2], client=client)

    def write(model="TinyMLP", data="d.npz", name="pb", **keys) -> str:
        lines = {"kind": '"module"', "model": f'"{model if ".py:" in model else "models.py:" + model}"',
                 "data": f'"{data}"', "batch_size": "4"} | keys
        path = tmp_path / f"{name}.toml"
        path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        return str(path)

    write.dir = tmp_path
    return write


# ------------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize("argv", [
    ["simulate", *SIM],
    ["validity", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates", "2", "--seed", "0"],
    ["sde", "--variant", "general", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--paths", "2",
     "--seed", "0"],
    ["compare", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates", "2"],
    ["scaling", "--eta", "0.1", "--local-steps", "1", "--rounds", "2", "--rule", "local-steps", "--kappa", "2"],
    ["map", "--eta", "0.1", "--local-steps", "1", "--rounds", "1", "--replicates", "2", "--seed", "0", "--out", "M"],
])
def test_a_model_with_no_parameters_is_named_by_every_command(files, argv):
    """Was a traceback (``torch.cat(): expected a non-empty list of Tensors``) in each of these commands."""
    argv = [a if a != "M" else files.dir / "map" for a in argv]
    err = refused([argv[0], "--problem", files("NoParams"), *argv[1:], "--json"])
    assert "NoParams has no parameters" in err, err
    assert not (files.dir / "map").exists()


def test_a_model_whose_own_output_is_not_finite(files):
    """Was "simulation produced NaN/inf at round 0 … reduce eta or server_lr": the step size is not the cause."""
    err = refused(["simulate", "--problem", files("NaNOut"), *SIM])
    assert "NaNOut's own output is not finite" in err and "initial weights" in err and "reduce eta" not in err


@pytest.mark.parametrize(("model", "loss", "data"), [("FirstRow", "cross-entropy", "d.npz"),
                                                     ("MeanRows", "cross-entropy", "d.npz"),
                                                     ("OneOutMean", "mse", "reg.npz")])
def test_an_output_without_the_batch_dimension_is_refused(files, model, loss, data):
    """Cross-entropy gave a traceback; mse with one output per row silently broadcast ``out − y`` (another
    objective)."""
    err = refused(["simulate", "--problem", files(model, data=data, loss=f'"{loss}"'), *SIM])
    assert "first dimension must be the batch" in err and model in err, err


def test_the_row_loss_never_broadcasts():
    from fedsde.problems.module.functional import row_loss

    y = torch.zeros(4)
    assert row_loss("mse", torch.ones(4, 1), y).shape == (4,)
    for out in (torch.ones(1), torch.ones(4, 2), torch.ones(3, 1)):
        with pytest.raises(FedsdeInputError, match="model: forward returns shape"):
            row_loss("mse", out, y)


@pytest.mark.parametrize(("source", "needles"), [
    ("import sys\nsys.exit(0)\n", ["importing 'm.py' fails (SystemExit: 0)", "__main__"]),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', required=True)\nargs = p.parse_args()\n",
     ["(SystemExit: 2)", "the following arguments are required: --lr"]),
    ("x = 1 / 0\n", ["importing 'm.py' fails (ZeroDivisionError: division by zero)"]),
])
def test_a_model_file_that_exits_at_import(files, source, needles):
    """``sys.exit(0)`` at import ended the command with exit 0 and nothing on stdout; a module-level argparse read
    fedsde's own command line ("unrecognized arguments") and printed its usage (several lines)."""
    (files.dir / "m.py").write_text(source)
    err = refused(["simulate", "--problem", files("m.py:M"), *SIM, "--json"])
    for n in needles:
        assert n in err, err


def test_a_module_level_argparse_with_defaults_reads_an_empty_command_line(files):
    (files.dir / "m.py").write_text("import argparse\nfrom torch import nn\np = argparse.ArgumentParser()\n"
                                    "p.add_argument('--width', type=int, default=3)\nargs = p.parse_args()\n"
                                    "def M():\n    return nn.Linear(4, args.width)\n")
    code, out, err = run(["simulate", "--problem", files("m.py:M"), *SIM, "--json"])
    assert code == 0, err
    assert json.loads(out)["problem"]["d"] == 15


@pytest.mark.parametrize(("model", "needle"), [("Numpy", "torch.func.grad cannot differentiate Numpy"),
                                               ("SqrtZero", "the gradient of SqrtZero's loss is not finite")])
def test_a_forward_pass_without_a_finite_functional_gradient(files, model, needle):
    """A forward pass through NumPy gave a traceback in the first local step (found by the fuzz tests); a gradient
    that is NaN at the start is the model's, not the step size's."""
    err = refused(["simulate", "--problem", files(model), *SIM])
    assert needle in err and "reduce eta" not in err, err


def test_scaling_reads_a_run_without_gradient_noise(files):
    """A batch larger than every client: full batches, temperature 0; the text view formatted a None (found by the
    fuzz tests)."""
    code, out, err = run(["scaling", "--problem", files(batch_size="100"), "--eta", "0.05", "--local-steps", "1",
                          "--rounds", "2", "--rule", "local-steps", "--kappa", "2", "--replicates", "2"])
    assert code == 0, err
    assert "temperature rel. change undefined (the base run has no gradient noise" in out


def test_a_constructor_that_exits(files):
    err = refused(["simulate", "--problem", files("Exits"), *SIM])
    assert "Exits(**model_options) fails (SystemExit: 3)" in err, err


def test_a_misspelt_name_gets_a_suggestion(files):
    err = refused(["simulate", "--problem", files("TinyMPL"), *SIM])
    assert "no class or function 'TinyMPL'; did you mean 'TinyMLP'?" in err, err
    err = refused(["simulate", "--problem", files("Zzz"), *SIM])
    assert "(it defines " in err and "TinyMLP" in err and "did you mean" not in err, err
    err = refused(["simulate", "--problem", files("BUILT"), *SIM])
    assert "'BUILT' in 'models.py' is a list, not a class or function" in err, err


def test_a_model_too_large_for_the_memory_is_refused_before_it_is_allocated(files, monkeypatch):
    """10⁸ parameters against a 1 GiB budget: refused from the module built on the meta device (no storage)."""
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1G")
    err = refused(["simulate", "--problem", files("Huge"), *SIM])
    assert "Huge has 100,010,000 parameters" in err and "GiB" in err, err
    import sys

    (mod,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(files.dir / "models.py")]
    assert mod.BUILT == ["meta"]


def test_the_api_refuses_a_module_too_large_once_it_is_built(monkeypatch):
    """A module handed in as an object (or a factory that cannot run on the meta device): the count of the built
    module, before any copy or forward pass."""
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1M")
    x, y = np.zeros((4, 300)), np.zeros(4, dtype=np.int64)
    with pytest.raises(FedsdeInputError, match="Linear has 90,300 parameters"):
        module_problem(nn.Linear(300, 300), x, y, np.zeros(4))

    def numpy_factory():  # reads values: cannot be built on the meta device
        m = nn.Linear(300, 300)
        m.weight.detach().numpy()
        return m

    with pytest.raises(FedsdeInputError, match="Linear has 90,300 parameters"):
        module_problem(numpy_factory, x, y, np.zeros(4))


# ------------------------------------------------------------------------------------------------ nll
def test_nll_on_log_probabilities_is_the_cross_entropy_objective(files):
    """``loss = "nll"`` on a model ending in log_softmax: the same losses, gradients and runs as cross-entropy on
    it (log_softmax leaves log-probabilities unchanged), to rounding."""
    nll = load_problem(files("LogSoftmax", loss='"nll"', name="nll"))
    ce = load_problem(files("LogSoftmax", loss='"cross-entropy"', name="ce"))
    w = nll.initial_weights() + 0.3 * np.random.default_rng(1).standard_normal(nll.d)
    assert nll.loss(w) == pytest.approx(ce.loss(w), rel=1e-13)
    np.testing.assert_allclose(nll.grad(w), ce.grad(w), rtol=1e-11, atol=1e-14)
    assert nll.metric_names() == ce.metric_names() and "test_accuracy" in nll.metric_names()
    assert nll.accuracy(w) == ce.accuracy(w)
    a = json.loads(run(["simulate", "--problem", files("LogSoftmax", loss='"nll"', name="nll"), *SIM, "--json"])[1])
    b = json.loads(run(["simulate", "--problem", files("LogSoftmax", name="ce"), *SIM, "--json"])[1])
    np.testing.assert_allclose(a["final"]["mean"], b["final"]["mean"], rtol=1e-12, atol=1e-14)


def test_nll_on_logits_is_refused_with_the_cross_entropy_named(files):
    err = refused(["simulate", "--problem", files("TinyMLP", loss='"nll"'), *SIM])
    assert "loss='nll' needs log-probabilities" in err and 'loss = "cross-entropy"' in err, err


# ------------------------------------------------------------------------------------------------ output streams
def test_a_model_that_prints_leaves_stdout_one_json_object(files):
    """print() in forward landed on stdout before the JSON object (``fedsde … --json | jq`` broke)."""
    code, out, err = run(["simulate", "--problem", files("Printer"), *SIM, "--json"])
    assert code == 0, err
    assert out.count("\n") == 1 and json.loads(out)["problem"]["d"] == 15
    assert "forward (" in err
    code, out, _ = run(["simulate", "--problem", files("Printer"), *SIM])  # without --json: stdout, as printed
    assert code == 0 and "forward (" in out


def test_a_sweep_cell_of_a_printing_model_is_read(files):
    """A sweep cell parses its command's stdout as the JSON object: the model's prints go to the cell's stderr."""
    from fedsde.sweep import run as run_sweep
    from fedsde.sweep.store import read_cells

    spec = {"run": {"command": "simulate", "seed": 0},
            "base": {"problem": files("Printer"), "eta": 0.1, "local-steps": 1, "rounds": 1, "replicates": 2},
            "grid": {"server-lr": [1.0]}}
    summary = run_sweep(spec, files.dir / "sweep", progress=False)
    assert (summary["done"], summary["failed"]) == (1, 0)
    (rec,) = read_cells(files.dir / "sweep").values()
    assert rec["result"]["problem"]["d"] == 15


# ------------------------------------------------------------------------------------------------ npz files
def _npz(files, name, **arrays) -> str:
    np.savez(files.dir / f"{name}.npz", **arrays)
    return name + ".npz"


@pytest.mark.parametrize("population", [False, True])
@pytest.mark.parametrize(("arrays", "needle"), [
    ({"y": np.array(["cat", "dog", "eel"] * 12)}, "y: holds strings"),
    ({"y": np.array([str(i % 3) for i in range(36)])}, "y: holds strings"),
    ({"x": np.random.default_rng(0).standard_normal((36, 4)).astype(str)}, "x: holds strings"),
    ({"x_test": np.array([["a"] * 4] * 6), "y_test": np.zeros(6, dtype=np.int64)}, "x_test: holds strings"),
    ({"y": np.arange(36) + 0.5}, "labels must be integers"),
    ({"y": np.full(36, np.nan)}, "labels must be integers"),
    ({"y": np.arange(36) % 7}, "(labels go up to 6|the population has 7 classes)"),
])
def test_npz_arrays_that_are_not_numbers(files, population, arrays, needle):
    """String arrays gave a raw TypeError or ValueError on both paths, and numeric strings in x were accepted
    silently on one."""
    rng = np.random.default_rng(0)
    base = {"x": rng.standard_normal((36, 4)), "y": np.arange(36) % 3, "client": np.arange(36) % 3}
    data = _npz(files, "bad", **(base | arrays))
    keys = {"population": "true"} if population else {}
    err = refused(["simulate", "--problem", files(data=data, **keys), *SIM])
    assert re.search(needle, err), err
    if "strings" in needle:
        assert "data='bad.npz'" in err


def test_an_npz_of_python_objects_is_named(files):
    np.savez(files.dir / "obj.npz", x=np.zeros((3, 4)).astype(object), y=np.zeros(3, dtype=np.int64),
             client=np.zeros(3), allow_pickle=True)
    for keys in ({}, {"population": "true"}):
        err = refused(["simulate", "--problem", files(data="obj.npz", **keys), *SIM])
        assert "'x'" in err and "Python objects" in err, err


def test_an_empty_npz_population_is_one_line(files):
    """``NpzPopulation.__init__`` raised a raw IndexError in every command."""
    data = _npz(files, "empty", x=np.zeros((0, 4)), y=np.zeros(0, dtype=np.int64), client=np.zeros(0))
    for keys in ({"population": "true"}, {}):
        err = refused(["simulate", "--problem", files(data=data, **keys), *SIM])
        assert "no rows" in err or "n >= 1 rows" in err, err


def test_the_api_checks_dtypes_too():
    x = np.array([["1.0", "2.0"], ["3.0", "4.0"]])
    with pytest.raises(FedsdeInputError, match="x: holds strings"):  # was read as numbers, silently
        module_problem(nn.Linear(2, 2), x, np.zeros(2, dtype=np.int64), np.zeros(2))


# ------------------------------------------------------------------------------------------------ batches
def test_a_batch_larger_than_some_clients_is_warned(files):
    rng = np.random.default_rng(0)
    sizes = [3, 12, 20]
    client = np.repeat(np.arange(3), sizes)
    x = rng.standard_normal((35, 4))
    with pytest.warns(BatchSizeWarning, match=r"batch_size=8: 1 of 3 clients hold fewer rows \(the smallest 3\)"):
        module_problem(nn.Linear(4, 2), x, np.zeros(35, dtype=np.int64), client, batch_size=8)
    with pytest.warns(BatchSizeWarning, match="every client holds fewer rows"):
        module_problem(nn.Linear(4, 2), x, np.zeros(35, dtype=np.int64), client, batch_size=21)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module_problem(nn.Linear(4, 2), x, np.zeros(35, dtype=np.int64), client, batch_size=3)
        module_problem(nn.Linear(4, 2), x, np.zeros(35, dtype=np.int64), client, batch_size=8,
                       sampling="with-replacement")
    code, out, err = run(["simulate", "--problem", files(batch_size="13"), *SIM, "--json"])
    assert code == 0 and any("batch_size=13" in w for w in json.loads(out)["warnings"]), err
    err = refused(["simulate", "--problem", files(batch_size="13"), *SIM, "--strict"])
    assert "batch_size=13" in err


def test_a_population_warns_of_its_small_clients_not_of_its_template(files):
    rng = np.random.default_rng(0)
    client = np.repeat(np.arange(3), [2, 5, 5])
    data = _npz(files, "pop", x=rng.standard_normal((12, 4)), y=np.arange(12) % 3, client=client)
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        load_problem(files(data=data, population="true", batch_size="4"), population=True)
    msgs = [str(w.message) for w in log if issubclass(w.category, BatchSizeWarning)]
    assert msgs == ["batch_size=4: 1 of 3 clients hold fewer rows (the smallest 2); without replacement each of "
                    "their local steps uses all their rows (a full-batch step, no minibatch noise), unlike the other "
                    "clients; to keep 4 rows per step use sampling = \"with-replacement\", or a batch_size <= 2"]
