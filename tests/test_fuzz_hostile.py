"""Property-based fuzzing (hypothesis) of the surfaces a hostile user reaches with files of their own, in the
contract of ``tests/test_fuzz.py`` (exit 0 with one JSON object of finite numbers on stdout, or exit 2 with nothing
on stdout and one line on stderr; no traceback, no hang, nothing left as if complete):

* model files of ``kind = "module"``: code at import that raises, exits or prints; constructors that raise or exit;
  no parameters, BatchNorm, buffers, dropout drawn by hand, 10⁸ parameters against the memory budget; outputs that
  lose the batch dimension, are not tensors, not finite, print, or are log-probabilities; factories that return no
  module; misspelt names; every loss;
* npz files: object, string, complex and boolean arrays, missing and unknown keys, mismatched lengths, no rows,
  NaN and inf, labels out of range, negative, fractional or NaN, test sets that do not fit, compressed files, on
  the materialised path and as a population (with more participants than clients);
* populations of 0, 1 and 10⁹ clients;
* ``map`` grids with NaN, negative, zero and tiny η (1e-17 on Grunfeld, 1e-300), 10⁴ cells, and ``--refine`` values;
* every ``--aggregator`` name on every command that takes one and every problem kind (quadratic, least squares,
  classification, module): only the contract is asserted here, not what each combination answers.

The default run draws a few dozen cases (seconds); the ``slow`` tests draw about 10⁴ cases (4000 model files, 4500
npz files, 1000 populations, 300 maps) and run the aggregator product exhaustively (another 360).  Both are
derandomised (profiles of ``tests/test_fuzz.py``).  What a model file prints passes through to stderr by design;
the cases' own prints start with ``user: `` and are set apart.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_fuzz import FAST, PAPER, SLOW, check_cli, mostly

ROOT = Path(__file__).resolve().parents[1]
GRUNFELD = str(ROOT / "examples" / "problems" / "grunfeld.toml")
#: how the model files of these cases start the lines they print (theirs, passed through to stderr)
USER = ("user: ",)
#: the memory budget of the module-file cases: a model of 10⁸ parameters (3 GiB of float64 copies) exceeds it
BUDGET = "1G"


def hostile(valid: list, rare: list) -> st.SearchStrategy:
    """A valid value about 40 % of the time, else one of the hostile ones (each about equally likely): every case
    still has a fair chance to get past the other checks, and every hostile value comes up often."""
    return st.sampled_from(valid * max(1, round(0.67 * len(rare) / len(valid))) + rare)


# ---------------------------------------------------------------------------------------------- model files
IMPORTS = {
    "none": "",
    "print": "print('user: loading the model file')\n",
    "raise": "raise ValueError('cannot import')\n",
    "exit0": "sys.exit(0)\n",
    "exit_text": "sys.exit('stop here')\n",
    "argparse_required": "_p = argparse.ArgumentParser()\n_p.add_argument('--lr', required=True)\n_p.parse_args()\n",
    "argparse_defaults": "_p = argparse.ArgumentParser()\n_p.add_argument('--lr', default=0.1)\n"
                         "ARGS = _p.parse_args()\n",
}
LAYERS = {
    "linear": "self.l = nn.Linear(4, W)",
    "mlp": "self.l = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, W))",
    "none": "self.l = nn.Identity()",
    "batchnorm": "self.l = nn.Sequential(nn.Linear(4, W), nn.BatchNorm1d(W))",
    "buffer": "self.l = nn.Linear(4, W)\n        self.register_buffer('count', torch.zeros(1))",
    "dropout": "self.l = nn.Sequential(nn.Linear(4, W), nn.Dropout(0.3))",
    "raise": "raise RuntimeError('constructor fails')",
    "exit": "sys.exit(3)",
    "huge": "self.big = nn.Linear(10_000, 10_000)\n        self.l = nn.Linear(4, W)",
}
OUTPUTS = {
    "plain": "h",
    "first_row": "h[:1]",
    "mean0": "h.mean(0)",
    "sum": "h.sum()",
    "nan": "h * float('nan')",
    "inf": "h + float('inf')",
    "print": "print('user: forward', tuple(h.shape)) or h",
    "tuple": "(h, h)",
    "list": "[h]",
    "log_softmax": "torch.log_softmax(h, dim=1)",
    "fdropout": "torch.nn.functional.dropout(h, 0.5, training=self.training)",
    "rand": "h + torch.rand_like(h)",
    "item": "h * (1.0 + 0.0 * float(h.sum().item()))",
    "numpy": "torch.as_tensor(h.detach().numpy())",
}
FACTORIES = {
    "class": ("M", ""),
    "function": ("make", "def make(**kw):\n    return M(**kw)\n"),
    "not_module": ("make_int", "def make_int():\n    return 3\n"),
    "constant": ("CONST", "CONST = 7\n"),
    "misspelt": ("Mm", ""),
}


#: what a module-file case makes hostile: one aspect at a time (or none), so that each comes up often and the other
#: checks still pass
ASPECTS = ("none", "none", "import", "layer", "output", "output", "width", "factory", "keys")


@st.composite
def model_source(draw, aspect: str) -> tuple[str, str]:
    """A model file's text and the NAME of ``model = "m.py:NAME"``, hostile in ``aspect`` only."""

    def pick(mine: str, valid: list, rare: list):
        return draw(st.sampled_from(rare if aspect == mine else valid))

    imp = pick("import", ["none"], [k for k in IMPORTS if k != "none"])
    layer = pick("layer", ["linear", "mlp", "dropout"], ["none", "batchnorm", "buffer", "raise", "exit", "huge"])
    out = pick("output", ["plain", "log_softmax"], [k for k in OUTPUTS if k not in ("plain", "log_softmax")])
    width = pick("width", [3], [1, 2, 10])
    name, extra = FACTORIES[pick("factory", ["class", "function"], ["not_module", "constant", "misspelt"])]
    text = ("import argparse\nimport sys\n\nimport torch\nfrom torch import nn\n\n" + IMPORTS[imp]
            + f"\n\nW = {width}\n\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        {LAYERS[layer]}\n\n    def forward(self, x):\n        h = self.l(x)\n"
            f"        return {OUTPUTS[out]}\n\n\n" + extra)
    return text, name


def _data(tmp: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    np.savez(tmp / "d.npz", x=x, y=y, client=np.array(["a", "b", "c"])[np.arange(24) % 3],
             x_test=rng.standard_normal((6, 4)), y_test=rng.integers(0, 3, 6))


@st.composite
def module_case(draw, tmp: Path, commands=("simulate",)) -> list[str]:
    aspect = draw(st.sampled_from(ASPECTS))
    text, name = draw(model_source(aspect))
    (tmp / "m.py").write_text(text)
    _data(tmp)
    keys = aspect == "keys"

    def key(valid: list, rare: list):
        return draw(st.sampled_from(rare + valid[:1] if keys else valid))

    spec = {"kind": "module", "model": f"m.py:{name}", "data": "d.npz",
            "batch_size": key([4, "full", 100], [0, "half", -3]),
            "loss": draw(st.sampled_from(["cross-entropy", "nll"])) if not keys else key([], ["mse", "hinge"])}
    for k, valid, rare in (("l2", [1e-3], [-1.0, "x"]), ("sampling", ["with-replacement"], ["epoch"]),
                           ("batching", ["loop", "vmap"], ["fast"]), ("model_options", [{}], [{"depth": 2}, 3]),
                           ("population", [True, False], ["yes"])):
        if draw(st.booleans()):
            spec[k] = key(valid, rare)
    (tmp / "pb.toml").write_text(tomli_w.dumps(spec))
    return _command(draw, str(tmp / "pb.toml"), draw(st.sampled_from(commands)), tmp)


def _command(draw, problem: str, command: str, tmp: Path) -> list[str]:
    base = [command, "--problem", problem, "--eta", draw(mostly(["0.05", "0.1"], ["50", "1e-20"])),
            "--local-steps", "1"]
    extra = {"simulate": ["--rounds", "1", "--replicates", "2", "--seed", "0"],
             "validity": ["--rounds", "1", "--replicates", "2", "--seed", "0", "--metrics", "train_loss"],
             "sde": ["--variant", "general", "--rounds", "1", "--paths", "2", "--seed", "0"],
             "compare": ["--rounds", "1", "--replicates", "2", "--ells", "1,2,4", "--mc-substeps", "0"],
             "scaling": ["--rounds", "2", "--rule", "local-steps", "--kappa", "2", "--replicates", "2"],
             "map": ["--rounds", "1", "--replicates", "2", "--seed", "0", "--metrics", "train_loss", "--out",
                     str(tmp / "map")]}[command]
    if command == "map":
        base[4] = draw(mostly(["0.05"], ["0.05,1e-17", "nan"]))
    return [*base, *extra, "--json"]


def _module_case(tmp_path_factory, data, commands=("simulate",)):
    tmp = tmp_path_factory.mktemp("fuzz-module")
    argv = data.draw(module_case(tmp, commands))
    check_cli(argv, outputs=(tmp / "map" / "map.json",), user_lines=USER)


@settings(FAST, max_examples=10)
@given(data=st.data())
def test_fuzz_module_files(tmp_path_factory, monkeypatch, data):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", BUDGET)
    _module_case(tmp_path_factory, data)


@pytest.mark.slow
@settings(SLOW, max_examples=4000)
@given(data=st.data())
def test_fuzz_module_files_slow(tmp_path_factory, monkeypatch, data):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", BUDGET)
    _module_case(tmp_path_factory, data, ("simulate", "simulate", "validity", "sde", "scaling", "map"))


# ---------------------------------------------------------------------------------------------- npz files
def _x(draw, n: int) -> np.ndarray:
    rng = np.random.default_rng(draw(st.integers(0, 3)))
    x = rng.standard_normal((n, 4))
    kind = draw(hostile(["float"], ["str", "object", "int", "bool", "nan", "inf", "complex", "flat", "image",
                                    "float32", "huge"]))
    return {"float": lambda: x, "str": lambda: x.astype(str), "object": lambda: x.astype(object),
            "int": lambda: (10 * x).astype(np.int64), "bool": lambda: x > 0,
            "nan": lambda: np.where(rng.random(x.shape) < 0.1, np.nan, x), "inf": lambda: x * np.inf,
            "complex": lambda: x + 1j, "flat": lambda: x[:, 0], "image": lambda: x.reshape(n, 1, 2, 2),
            "float32": lambda: x.astype(np.float32), "huge": lambda: x * 1e300}[kind]()


def _y(draw, n: int) -> np.ndarray:
    y = np.arange(n) % 3
    kind = draw(hostile(["int"], ["float_whole", "fraction", "names", "digits", "object", "negative", "large",
                                  "nan", "short", "matrix", "bool", "uint8", "huge_float"]))
    return {"int": lambda: y, "float_whole": lambda: y.astype(float), "fraction": lambda: y + 0.5,
            "names": lambda: np.array(["cat", "dog", "eel"])[y], "digits": lambda: y.astype(str),
            "object": lambda: y.astype(object), "negative": lambda: y - 1, "large": lambda: y * 7,
            "nan": lambda: np.where(y == 1, np.nan, y), "short": lambda: y[:-1], "matrix": lambda: np.stack([y, y], 1),
            "bool": lambda: y > 0, "uint8": lambda: y.astype(np.uint8),
            "huge_float": lambda: np.where(y == 1, 1e300, y)}[kind]()


@st.composite
def npz_case(draw, tmp: Path) -> list[str]:
    n = draw(mostly([12, 30], [0, 1, 2]))
    arrays = {"x": _x(draw, n), "y": _y(draw, n)}
    ckind = draw(hostile(["int", "str"], ["float", "short", "one", "object", "matrix", "nan"]))
    c = np.arange(n) % 3
    arrays["client"] = {"int": c, "str": np.array(["a", "b", "c"])[c], "float": c + 0.5, "short": c[:-1],
                        "one": np.zeros(n), "object": c.astype(object), "matrix": np.stack([c, c], 1),
                        "nan": np.where(c == 0, np.nan, c)}[ckind]
    test = draw(hostile(["none", "good"], ["x_only", "y_only", "wide", "str", "empty", "labels"]))
    rng = np.random.default_rng(5)
    arrays |= {"none": {}, "good": {"x_test": rng.standard_normal((5, 4)), "y_test": np.arange(5) % 3},
               "x_only": {"x_test": rng.standard_normal((5, 4))}, "y_only": {"y_test": np.arange(5) % 3},
               "wide": {"x_test": rng.standard_normal((5, 6)), "y_test": np.arange(5) % 3},
               "str": {"x_test": np.full((5, 4), "a"), "y_test": np.arange(5) % 3},
               "empty": {"x_test": np.zeros((0, 4)), "y_test": np.zeros(0, dtype=np.int64)},
               "labels": {"x_test": rng.standard_normal((5, 4)), "y_test": np.arange(5) + 5}}[test]
    if draw(mostly([False], [True])):
        arrays["extra"] = np.zeros(3)
    if draw(mostly([False], [True])):
        arrays.pop(draw(st.sampled_from(["x", "y", "client"])))
    save = np.savez_compressed if draw(mostly([False], [True])) else np.savez
    has_objects = any(a.dtype == object for a in arrays.values())
    save(tmp / "d.npz", **arrays, **({"allow_pickle": True} if has_objects and save is np.savez else {}))
    (tmp / "m.py").write_text("import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n"
                              "    def __init__(self):\n        super().__init__()\n"
                              "        self.l = nn.Linear(4, 3)\n\n"
                              "    def forward(self, x):\n        return self.l(x.reshape(x.shape[0], -1)[:, :4])\n")
    population = draw(st.booleans())
    spec = {"kind": "module", "model": "m.py:M", "data": "d.npz", "batch_size": draw(mostly([4], [50, "full"])),
            "loss": draw(mostly(["cross-entropy"], ["mse", "nll"])), "population": population}
    (tmp / "pb.toml").write_text(tomli_w.dumps(spec))
    argv = ["simulate", "--problem", str(tmp / "pb.toml"), "--eta", "0.05", "--local-steps", "1", "--rounds", "1",
            "--replicates", "2", "--seed", "0", "--json"]
    if population or draw(mostly([False], [True])):
        argv += ["--participation", draw(mostly(["1", "2"], ["3", "4", "1000", "0"]))]
    return argv


def _npz_case(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fuzz-npz")
    check_cli(data.draw(npz_case(tmp)))


@settings(FAST, max_examples=15)
@given(data=st.data())
def test_fuzz_npz_files(tmp_path_factory, data):
    _npz_case(tmp_path_factory, data)


@pytest.mark.slow
@settings(SLOW, max_examples=4500)
@given(data=st.data())
def test_fuzz_npz_files_slow(tmp_path_factory, data):
    _npz_case(tmp_path_factory, data)


# ---------------------------------------------------------------------------------------------- populations
@st.composite
def population_case(draw, tmp: Path) -> list[str]:
    (tmp / "m.py").write_text("from torch import nn\n\n\ndef M():\n    return nn.Linear(4, 3)\n")
    spec = {"kind": draw(st.sampled_from(["module", "classification"])), "dataset": "synthetic",
            "clients": draw(mostly([20_000, 3], [0, 1, 10**9, -5])), "seed": 0, "dim": 4, "n_classes": 3,
            "batch_size": draw(mostly([4], [0, 10**6])), "max_samples": draw(mostly([20], [1]))}
    if spec["kind"] == "module":
        spec["model"] = "m.py:M"
    if draw(st.booleans()):
        spec["population"] = draw(mostly([True], [False]))
    (tmp / "pb.toml").write_text(tomli_w.dumps(spec))
    return ["simulate", "--problem", str(tmp / "pb.toml"), "--eta", "0.05", "--local-steps", "1", "--rounds", "1",
            "--replicates", "2", "--seed", "0", "--participation",
            draw(mostly(["1", "5"], ["0", "4", "20001", str(10**9), str(2 * 10**9)])), "--json"]


@settings(FAST, max_examples=4)
@given(data=st.data())
def test_fuzz_populations(tmp_path_factory, data):
    check_cli(data.draw(population_case(tmp_path_factory.mktemp("fuzz-pop"))))


@pytest.mark.slow
@settings(SLOW, max_examples=1000)
@given(data=st.data())
def test_fuzz_populations_slow(tmp_path_factory, data):
    check_cli(data.draw(population_case(tmp_path_factory.mktemp("fuzz-pop"))))


# ---------------------------------------------------------------------------------------------- map grids
@st.composite
def map_grid_argv(draw, out: Path) -> list[str]:
    problem = draw(st.sampled_from([PAPER, GRUNFELD]))
    many = draw(mostly([False], [True]))  # 10⁴ cells: refused up front by --max-cells or a bad value
    if many:
        etas = ",".join(f"{0.001 * (i + 1):g}" for i in range(100))
        steps = ",".join(str(i + 1) for i in range(100))
        bad = draw(st.sampled_from([["--max-cells", "100"], ["--max-cells", "9999"], ["--refine", "0"],
                                    ["--alpha", "nan"]]))
        etas += draw(st.sampled_from(["", ",nan"])) if bad[0] != "--max-cells" else ""
    else:
        etas = draw(mostly(["0.05", "1e-17", "0.01,0.1"], ["nan", "-0.1", "0", "1e-300", "5e-324", "0.05,nan",
                                                           "1e-17,1e-300", "inf"]))
        steps = draw(mostly(["1", "2"], ["0", "-1", "nan", "1,1"]))
        bad = []
    argv = ["map", "--problem", problem, "--eta", etas, "--local-steps", steps, "--rounds", draw(mostly(["1"], ["0"])),
            "--seed", "0", "--out", str(out), "--json", *bad]
    if draw(st.booleans()):
        argv += ["--refine", draw(mostly(["4", "50"], ["0", "-1", "1", "x", "1e9", str(10**12)]))]
    if draw(st.booleans()):
        argv += ["--replicates", draw(mostly(["2", "4"], ["1", "0"])), "--fedavg", "sampled"]
    return argv


def _map_case(tmp_path_factory, data):
    out = tmp_path_factory.mktemp("fuzz-map-grid") / "m"
    argv = data.draw(map_grid_argv(out))
    if check_cli(argv, outputs=(out / "map.json", out / "map.png")) == 0:
        cells = json.loads((out / "map.json").read_text(encoding="utf-8"))["cells"]
        for c in cells:  # every cell of a map that finished has a κ (a tiny η included), or says why not
            assert c["kappa"] is not None or c.get("kappa_note"), c


@settings(FAST, max_examples=2)
@given(data=st.data())
def test_fuzz_map_grids(tmp_path_factory, data):
    _map_case(tmp_path_factory, data)


@pytest.mark.slow
@settings(SLOW, max_examples=300)
@given(data=st.data())
def test_fuzz_map_grids_slow(tmp_path_factory, data):
    _map_case(tmp_path_factory, data)


# ---------------------------------------------------------------------------------------------- --aggregator
AGGREGATOR_COMMANDS = ("simulate", "exact", "derive", "sde", "compare", "validity", "scaling")
KINDS = ("quadratic", "regression", "classification", "module")


def _aggregator_names() -> list[str]:
    from fedsde.aggregators import AGGREGATORS

    return [*sorted(AGGREGATORS), "nope"]


def _kind_file(kind: str, tmp: Path) -> str:
    if kind == "quadratic":
        return PAPER
    if kind == "regression":
        return GRUNFELD
    if kind == "classification":
        spec = {"kind": "classification", "dataset": "synthetic", "clients": 3, "seed": 0, "dim": 3, "n_classes": 3,
                "batch_size": 4, "max_samples": 20}
    else:
        (tmp / "m.py").write_text("from torch import nn\n\n\ndef M():\n    return nn.Linear(4, 3)\n")
        _data(tmp)
        spec = {"kind": "module", "model": "m.py:M", "data": "d.npz", "batch_size": 4}
    path = tmp / f"{kind}.toml"
    path.write_text(tomli_w.dumps(spec))
    return str(path)


def aggregator_argv(command: str, kind: str, name: str, tmp: Path, variant_general: bool = False) -> list[str]:
    problem = _kind_file(kind, tmp)
    base = [command, "--problem", problem, "--eta", "0.05", "--local-steps", "1", "--aggregator", name]
    data = kind in ("classification", "module")
    extra = {"simulate": ["--rounds", "1", "--replicates", "2", "--seed", "0"], "exact": ["--rounds", "1"],
             "derive": [], "sde": ["--rounds", "1", "--paths", "2", "--seed", "0"]
             + (["--variant", "general"] if variant_general else []),
             "compare": ["--rounds", "1"] + (["--replicates", "2", "--ells", "1,2,4", "--mc-substeps", "0"]
                                            if data else []),
             "validity": ["--rounds", "1", "--replicates", "2", "--seed", "0"],
             "scaling": ["--rounds", "2", "--rule", "local-steps", "--kappa", "2", "--replicates", "2"]}[command]
    return [*base, *extra, "--json"]


@settings(FAST, max_examples=6)
@given(command=st.sampled_from(AGGREGATOR_COMMANDS), kind=st.sampled_from(KINDS),
       name=st.sampled_from(_aggregator_names()), general=st.booleans())
def test_fuzz_aggregators_on_every_command_and_kind(tmp_path_factory, command, kind, name, general):
    check_cli(aggregator_argv(command, kind, name, tmp_path_factory.mktemp("fuzz-agg"), general))


@pytest.mark.slow
@pytest.mark.parametrize(("command", "kind", "name", "general"),
                         [(c, k, n, g) for c, k, n in itertools.product(AGGREGATOR_COMMANDS, KINDS,
                                                                         _aggregator_names())
                          for g in ((False, True) if c == "sde" and k in ("classification", "module") else (False,))])
def test_every_aggregator_on_every_command_and_kind(tmp_path, monkeypatch, command, kind, name, general):
    monkeypatch.setattr("tests.test_fuzz.event", lambda *a: None)  # hypothesis' event() outside a given test
    check_cli(aggregator_argv(command, kind, name, tmp_path, general))
