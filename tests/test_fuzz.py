"""Property-based fuzzing of the command line, problem files, reproduce configs and sweep specs (hypothesis).

Every case must end in exit 0 with one well-formed JSON object on stdout (finite numbers only, a ``warnings``
list) or in exit 2 with nothing on stdout and exactly one line on stderr: no traceback, no hang (each case has a
time limit), no output left as if complete.  The default run draws a few hundred cases (profile ``fuzz``); the
``slow`` tests draw more than 10⁴ in total (profile ``fuzz-slow``).  Both are derandomised: a failure reproduces.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedsde.cli import main
from fedsde.errors import FedsdeInputError

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
SOFTMAX = str(ROOT / "examples" / "problems" / "digits_softmax.toml")
CASE_SECONDS = 60  # a case running longer counts as a hang

_COMMON = {"deadline": None, "derandomize": True, "database": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much]}
settings.register_profile("fuzz", max_examples=40, **_COMMON)
settings.register_profile("fuzz-slow", max_examples=1500, **_COMMON)
FAST = settings.get_profile("fuzz")
SLOW = settings.get_profile("fuzz-slow")


# ---------------------------------------------------------------- the contract of one case
class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang(f"a case ran longer than {CASE_SECONDS} s")


def _finite(obj, where="$"):
    if isinstance(obj, float):
        assert math.isfinite(obj), f"non-finite number at {where}"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _finite(v, f"{where}[{i}]")


def _no_constant(name):
    raise AssertionError(f"JSON output contains {name}")


def check_cli(argv: list[str], outputs: tuple[Path, ...] = (), user_lines: tuple[str, ...] = ()) -> int:
    """Run ``fedsde ARGV`` in-process and check the contract; returns the exit status (0 or 2).  ``user_lines``:
    starts of lines that user code (a model file) prints; they pass through to stderr and are not fedsde's."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as exc:  # argparse: usage errors
                code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    o, e = out.getvalue(), err.getvalue()
    if user_lines:
        e = "".join(line for line in e.splitlines(keepends=True) if not line.startswith(user_lines))
    event(f"{argv[0]}: exit {code}")
    assert "Traceback" not in e, e
    if code == 0:
        assert o.count("\n") == 1 and o.endswith("\n"), o[:500]
        obj = json.loads(o, parse_constant=_no_constant)
        assert isinstance(obj, dict) and isinstance(obj.get("warnings"), list), o[:500]
        _finite(obj)
    else:
        assert code == 2, (code, o[-500:], e[-500:])
        assert o == "" and e.count("\n") == 1 and e.endswith("\n") and ": error: " in e, (o[:300], e[:500])
        for f in outputs:  # nothing that looks like a finished result
            assert not f.exists(), f
    return code


# ---------------------------------------------------------------- values
def mostly(valid: list, rare: list) -> st.SearchStrategy:
    """A valid value about 85 % of the time, else a rare (invalid, extreme or divergent) one: most cases get past
    argument checking, and every rare value still comes up."""
    return st.sampled_from(valid * max(1, round(5.7 * len(rare) / len(valid))) + rare)


ETA = mostly(["0.01", "0.05", "0.1", "0.3"], ["0.6", "2", "50", "0", "-1", "1e300", "nan", "inf", "abc", ""])
SLR = mostly(["0.5", "1", "2"], ["5", "0", "-1", "nan", "1e300"])
SMALL_INT = mostly(["1", "2", "3"], ["-1", "0", "x", "1.5", "5"])
ROUNDS = mostly(["0", "1", "3", "8"], ["-1", "x"])
REPS = mostly(["2", "50", "300"], ["-1", "0", "1"])
VEC = mostly(["1", "0.5", "-3"], ["1,2", "nan", "a,b", "", "1e308"])
SEED = mostly(["0", "1", "123456789"], ["-1", "x"])
NUM = mostly(["0.05", "0.1", "1"], ["0", "-1", "nan", "inf", "abc"])


def _opt(draw, flag, values):
    return [flag, draw(values)] if draw(st.booleans()) else []


@st.composite
def problem_args(draw, problems=(PAPER,)):
    args = ["--problem", draw(mostly(list(problems), ["/nonexistent.toml", PAPER + ".nope"]))]
    args += ["--eta", draw(ETA)]
    steps = draw(st.sampled_from(["local"] * 6 + ["client", "none"]))
    args += {"local": ["--local-steps", draw(SMALL_INT)], "client": ["--client-steps", draw(VEC)], "none": []}[steps]
    args += _opt(draw, "--server-lr", SLR)
    return args


# ---------------------------------------------------------------- per command
@st.composite
def exact_argv(draw):
    argv = ["exact", *draw(problem_args())]
    argv += _opt(draw, "--rounds", ROUNDS) + _opt(draw, "--w0", VEC) + _opt(draw, "--participation", SMALL_INT)
    argv += _opt(draw, "--aggregator", st.sampled_from(["fedavg", "fednova", "feddisco", "fedadam", "nope"]))
    return argv + ["--json"] + (["--strict"] if draw(st.booleans()) else [])


@st.composite
def simulate_argv(draw, problems=(PAPER,)):
    argv = ["simulate", *draw(problem_args(problems)), "--rounds", draw(ROUNDS), "--replicates", draw(REPS),
            "--seed", draw(SEED)]
    argv += _opt(draw, "--w0", VEC) + _opt(draw, "--participation", SMALL_INT)
    argv += _opt(draw, "--weighting", mostly(["unbiased", "renormalised", "multinomial"], ["x"]))
    argv += _opt(draw, "--aggregator", st.sampled_from(["fedavg", "fedavgm", "fedadam", "fedyogi", "scaffold",
                                                         "fednova", "fedprox", "fedaware", "nope"]))
    argv += ["--float32"] if draw(st.booleans()) else []
    return argv + ["--json"] + (["--strict"] if draw(st.booleans()) else [])


@st.composite
def sde_argv(draw):
    argv = ["sde", *draw(problem_args()), "--rounds", draw(ROUNDS), "--paths", draw(REPS), "--seed", draw(SEED)]
    argv += _opt(draw, "--variant", mostly(["corrected", "paper", "matched", "general"], ["x"]))
    argv += _opt(draw, "--method", st.sampled_from(["euler", "exact"])) + _opt(draw, "--h", NUM)
    argv += _opt(draw, "--substeps", SMALL_INT) + _opt(draw, "--w0", VEC) + _opt(draw, "--record-every", SMALL_INT)
    argv += _opt(draw, "--inner-samples", mostly(["1", "2"], ["0"])) + _opt(draw, "--chunk-size", SMALL_INT)
    return [*argv, "--json"]


@st.composite
def compare_argv(draw):
    argv = ["compare", *draw(problem_args()), "--rounds", draw(ROUNDS)]
    argv += _opt(draw, "--variant", st.sampled_from(["corrected", "paper", "matched"])) + _opt(draw, "--h", NUM)
    argv += _opt(draw, "--steps", mostly(["0.1,0.05", "0.05,0.02,0.01"], ["0.1", "0,1", "0.1,0.1", "1e-9,1"]))
    argv += _opt(draw, "--noise-scaling", st.sampled_from(["diffusive", "fixed"])) + _opt(draw, "--w0", VEC)
    argv += _opt(draw, "--paths", st.sampled_from(["1", "2", "40"]))
    return [*argv, "--json"]


@st.composite
def derive_argv(draw):
    argv = ["derive", *_opt(draw, "--variant", st.sampled_from(["paper", "corrected", "matched"]))]
    argv += _opt(draw, "--local-steps", st.sampled_from(["1", "3", "symbolic", "0", "x"]))
    if draw(st.booleans()):
        argv += ["--problem", draw(mostly([PAPER], ["/nonexistent.toml"])), "--eta", draw(ETA)]
        argv += _opt(draw, "--server-lr", SLR) + _opt(draw, "--h", NUM)
    return [*argv, "--json"]


@st.composite
def validity_argv(draw):
    argv = ["validity", *draw(problem_args()), "--rounds", draw(mostly(["1", "2"], ["0"])),
            "--replicates", draw(mostly(["2", "16"], ["1"])), "--seed", draw(SEED)]
    argv += _opt(draw, "--ells", mostly(["1,2"], ["1", "0,2", "x"]))
    return [*argv, "--json"]


@st.composite
def scaling_argv(draw):
    argv = ["scaling", *draw(problem_args()), "--rounds", draw(mostly(["2", "4"], ["0", "1", "3"])),
            "--rule", draw(st.sampled_from(["local-steps", "server-client", "clients", "batch"])),
            "--kappa", draw(mostly(["1", "2", "2,4"], ["0.5", "0", "x"]))]
    return [*argv, "--json"]


@st.composite
def aggregators_argv(draw, tmp: Path):
    # only invalid settings reach the data here (a valid run trains for tens of seconds): the checks come first
    argv = ["compare-aggregators", "--out", str(tmp / "agg"), "--rounds", draw(st.sampled_from(["0", "-1", "x"]))]
    argv += _opt(draw, "--runs", st.sampled_from(["1", "0"])) + _opt(draw, "--participation", SMALL_INT)
    return [*argv, "--json"]


COMMANDS = {"exact": exact_argv(), "simulate": simulate_argv(), "sde": sde_argv(), "compare": compare_argv()}


@pytest.mark.parametrize("name", list(COMMANDS))
@FAST
@given(data=st.data())
def test_fuzz_command(name, data):
    check_cli(data.draw(COMMANDS[name]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
@SLOW
@given(data=st.data())
def test_fuzz_command_slow(name, data):
    check_cli(data.draw(COMMANDS[name]))


OTHER = {"derive": derive_argv(), "validity": validity_argv(), "scaling": scaling_argv()}


@pytest.mark.parametrize("name", list(OTHER))
@settings(FAST, max_examples=8)
@given(data=st.data())
def test_fuzz_other_commands(name, data):
    check_cli(data.draw(OTHER[name]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OTHER))
@settings(SLOW, max_examples=300)
@given(data=st.data())
def test_fuzz_other_commands_slow(name, data):
    check_cli(data.draw(OTHER[name]))


@settings(FAST, max_examples=6)
@given(data=st.data())
def test_fuzz_compare_aggregators_arguments(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("agg")
    code = check_cli(data.draw(aggregators_argv(tmp)), outputs=(tmp / "agg" / "results.json",))
    assert code == 2


# ---------------------------------------------------------------- problem files (quadratic and data)
FLOAT = st.one_of(st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, -1.0, 1e300, 1e-300]))


@st.composite
def quadratic_file(draw):
    Q, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    shape = draw(st.sampled_from(["scalar", "vector", "matrix"]))

    def mats(pos):
        if shape == "scalar" and d == 1:
            return [draw(FLOAT if not pos else st.floats(0, 5)) for _ in range(Q)]
        if shape == "vector":
            return [[draw(FLOAT if not pos else st.floats(0, 5)) for _ in range(d)] for _ in range(Q)]
        return [[[draw(FLOAT) for _ in range(d)] for _ in range(d)] for _ in range(Q)]

    U = mats(draw(st.sampled_from([True, True, True, False])))
    data = {"U": U, "a": [[draw(FLOAT) for _ in range(d)] for _ in range(Q)], "Sigma": mats(True)}
    if draw(st.booleans()):
        data["p"] = [draw(st.floats(0, 3)) for _ in range(draw(mostly([Q], [Q - 1, Q + 1])))]
    if draw(st.booleans()):
        data["label_distributions"] = [[draw(st.floats(0, 2)) for _ in range(2)] for _ in range(Q)]
    if draw(mostly([False], [True])):
        del data[draw(st.sampled_from(["U", "a", "Sigma"]))]
    return data


@st.composite
def data_file(draw):
    data = {"kind": "classification",
            "dataset": draw(mostly(["digits", "breast_cancer", "synthetic"], ["nope"])),
            "model": draw(mostly(["logistic", "softmax", "mlp"], ["nope"])),
            "clients": draw(mostly([2, 3], [0, 1, 5000])),
            "partition": draw(mostly(["iid", "dirichlet", "shards", "quantity", "niid2"], ["nope"])),
            "batch_size": draw(mostly([1, 8], [0])), "seed": draw(mostly([0], [-1]))}
    for key, values in (("alpha", [0.5, 0.0, -1.0]), ("hidden", [2, 0]), ("l2", [1e-3, 0.0, -1.0]),
                        ("test_fraction", [0.25, 0.0, 1.0]), ("bogus", [1])):
        if draw(st.booleans()):
            data[key] = draw(mostly(values[:1], values[1:]))
    return data


@st.composite
def csv_text(draw) -> str:
    """A user's CSV: a header (sometimes missing a column), 1-3 sites of 1-6 rows, now and then a cell that is not a
    number, a NaN, an empty cell or a short row."""
    cols = draw(mostly([["site", "x1", "x2", "y"]], [["site", "x1", "y"], ["x1", "x2", "y"]]))
    rows = [",".join(cols)]
    for k in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 6))):
            cells = [f"s{k}" if c == "site" else repr(draw(st.floats(-3, 3))) for c in cols]
            if draw(mostly([False], [True])):
                cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(["abc", "nan", "", "1e400"]))
            if draw(mostly([False], [True])):
                cells = cells[:-1]
            rows.append(",".join(cells))
    return "\n".join(rows) + "\n"


@st.composite
def regression_file(draw):
    """A least-squares problem: a CSV of the user's own (written next to the file) or a packaged set."""
    data = {"kind": "regression", "model": draw(mostly(["least-squares"], ["ols"])),
            "batch_size": draw(mostly([1, 2, 3], [0, 50, "x"])),
            "sampling": draw(mostly(["with-replacement", "without-replacement"], ["epoch", "nope"]))}
    source = draw(mostly(["csv", "grunfeld"], ["diabetes", "both", "none"]))
    if source in ("csv", "both"):
        data |= {"data": "data.csv", "features": draw(mostly([["x1", "x2"]], [["x1", "zz"], [], "x1"])),
                 "target": draw(mostly(["y"], ["x1", "nope"])), "client_column": draw(mostly(["site"], ["nope"]))}
    if source in ("grunfeld", "diabetes", "both"):
        data["dataset"] = source if source != "both" else "grunfeld"
        if source == "diabetes":
            data |= {"clients": draw(mostly([3], [0, 500])), "partition": "iid", "seed": 0}
    for key, values in (("l2", [0.0, 0.1, -1.0]), ("intercept", [True, False, "yes"]),
                        ("standardise", [True, False, 3]), ("p", [[1.0, 2.0], [-1.0, 1.0]]), ("bogus", [1])):
        if draw(st.booleans()):
            data[key] = draw(mostly(values[:1], values[1:]))
    return data, draw(csv_text())


def _write(tmp: Path, data: dict, suffix: str, *, latin1: bool = False) -> Path:
    path = tmp / f"pb{suffix}"
    text = tomli_w.dumps(data) if suffix == ".toml" else json.dumps(data)
    path.write_bytes(text.encode() + (b"\n# caf\xe9\n" if latin1 and suffix == ".toml" else b""))
    return path


@st.composite
def problem_file_argv(draw, tmp: Path):
    data = draw(st.one_of(quadratic_file(), data_file(), regression_file()))
    if isinstance(data, tuple):  # a regression problem and its CSV (sometimes not UTF-8)
        data, csv = data
        (tmp / "data.csv").write_bytes(csv.encode() + (b"s9,caf\xe9,1,1\n" if draw(mostly([False], [True])) else b""))
    path = _write(tmp, data, draw(st.sampled_from([".toml", ".json"])), latin1=draw(mostly([False], [True])))
    if data.get("kind") == "regression":
        cmd = draw(st.sampled_from(["exact", "simulate"]))
        argv = [cmd, "--problem", path, "--eta", draw(st.sampled_from(["0.01", "0.05", "50"])), "--local-steps", "2",
                "--rounds", "2", "--json"]
        return argv if cmd == "exact" else [*argv, "--replicates", "2", "--seed", "0"]
    if data.get("kind") == "classification":  # a data problem: a short simulation with small minibatches
        return ["simulate", "--problem", path, "--eta", draw(st.sampled_from(["0.05", "50"])), "--local-steps", "1",
                "--rounds", "1", "--replicates", "2", "--seed", "0", "--json"]
    cmd = draw(st.sampled_from(["exact", "simulate", "sde"]))
    argv = [cmd, "--problem", path, "--eta", draw(st.sampled_from(["0.05", "0.5"])), "--local-steps", "2"]
    if cmd == "exact":
        return [*argv, "--rounds", "2", "--json"]
    n = "--replicates" if cmd == "simulate" else "--paths"
    return [*argv, "--rounds", "2", n, "4", "--seed", "0", "--json"]


@settings(FAST, max_examples=60)
@given(data=st.data())
def test_fuzz_problem_files(tmp_path_factory, data):
    check_cli(data.draw(problem_file_argv(tmp_path_factory.mktemp("pb"))))


@pytest.mark.slow
@settings(SLOW, max_examples=2500)
@given(data=st.data())
def test_fuzz_problem_files_slow(tmp_path_factory, data):
    check_cli(data.draw(problem_file_argv(tmp_path_factory.mktemp("pb"))))


# ---------------------------------------------------------------- reproduce configs (validation up front)
def _config_value(draw, field):
    kind = field.kind
    good = {"int": st.integers(-2, 40), "float": st.floats(-1, 3, allow_nan=False),
            "ints": st.lists(st.integers(-1, 30), max_size=4), "floats": st.lists(st.floats(-0.1, 1.5), max_size=4),
            "str": st.sampled_from(["cpu", "paper_table", "nope", PAPER, SOFTMAX]), "bool": st.booleans()}[kind]
    return draw(st.one_of(good, st.sampled_from(["x", True, 1.5, [], {"a": 1}])))


@st.composite
def reproduce_config(draw):
    from fedsde.report.config import SCHEMA

    cfg: dict = {}
    for table in draw(st.lists(st.sampled_from([*SCHEMA, "F99"]), max_size=3, unique=True)):
        fields = SCHEMA.get(table, {"x": None})
        keys = draw(st.lists(st.sampled_from([*fields, "nope"]), max_size=3, unique=True))
        cfg[table] = {k: (_config_value(draw, fields[k]) if fields.get(k) else 1) for k in keys}
    return cfg


def _reproduce_case(tmp: Path, cfg: dict, only: list[str], quick: bool) -> None:
    """Validation only (library): load, then every cross-field constraint; FedsdeInputError or nothing."""
    from fedsde.report.config import check_constraints, load_config
    from fedsde.report.runner import resolve_problem

    path = tmp / "cfg.toml"
    try:
        path.write_text(tomli_w.dumps(cfg))
    except (TypeError, ValueError):
        return  # not representable in TOML
    with contextlib.suppress(FedsdeInputError):
        merged = load_config(quick=quick, path=path)
        check_constraints(merged, only, resolve_problem(merged["run"]["problem"]))


@settings(FAST, max_examples=80)
@given(cfg=reproduce_config(), only=st.lists(st.sampled_from(["F1", "F2", "F4", "F5", "F6", "F7", "F9", "F12"]),
                                              min_size=1, max_size=3, unique=True), quick=st.booleans())
def test_fuzz_reproduce_config(tmp_path_factory, cfg, only, quick):
    _reproduce_case(tmp_path_factory.mktemp("cfg"), cfg, only, quick)


@pytest.mark.slow
@settings(SLOW, max_examples=3000)
@given(cfg=reproduce_config(), only=st.lists(st.sampled_from(["F1", "F2", "F4", "F5", "F6", "F7", "F9", "F12"]),
                                              min_size=1, max_size=3, unique=True), quick=st.booleans())
def test_fuzz_reproduce_config_slow(tmp_path_factory, cfg, only, quick):
    _reproduce_case(tmp_path_factory.mktemp("cfg"), cfg, only, quick)


@settings(FAST, max_examples=12)
@given(cfg=reproduce_config())
def test_fuzz_reproduce_cli_without_figures(tmp_path_factory, monkeypatch, cfg):
    # the whole command with the figures stubbed out: validation, output folder, report and summary written atomically
    import fedsde.report.runner as runner

    monkeypatch.setattr(runner, "run_figures", lambda ids, cfg, ctx, scratch, bar=None: [])
    tmp = tmp_path_factory.mktemp("rep")
    path = tmp / "cfg.toml"
    try:
        path.write_text(tomli_w.dumps(cfg))
    except (TypeError, ValueError):
        return
    out = tmp / "out"
    code = check_cli(["reproduce", "--quick", "--config", path, "--out", out, "--only", "F1,F2,F7", "--no-claims",
                      "--json"], outputs=(out / "summary.json", out / "report.html"))
    if code == 0:
        assert (out / "summary.json").exists() and not list(out.glob(".partial-*"))


# ---------------------------------------------------------------- sweep specs
@st.composite
def sweep_spec(draw):
    spec: dict = {"run": {"command": draw(st.sampled_from(["exact", "simulate", "nope", "sweep", 3]))}}
    if draw(st.booleans()):
        spec["run"]["seed"] = draw(st.sampled_from([0, 7, -1, "x"]))
    spec["base"] = {"problem": PAPER, "local-steps": draw(st.sampled_from([2, 0, "x"]))}
    if draw(st.booleans()):
        spec["base"]["rounds"] = draw(st.sampled_from([1, -1]))
    spec["grid"] = {draw(st.sampled_from(["eta", "server-lr", "json", "nope"])):
                    draw(st.sampled_from([[0.05, 0.1], [], 0.1, [0.6], ["x"]]))}
    if draw(mostly([False], [True])):  # a huge grid: refused from the axis lengths, never built
        spec["grid"] |= {"rounds": list(range(1, 1001)), "seed": list(range(draw(st.sampled_from([1000, 10**6]))))}
    if draw(st.booleans()):
        spec["zip"] = {"eta": [0.05], "local_steps": draw(st.sampled_from([[1], [1, 2]]))}
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["other", "run"]))] = draw(st.sampled_from([{}, 1]))
    return spec


def _sweep_case(spec: dict) -> None:
    from fedsde.sweep import load_spec

    with contextlib.suppress(FedsdeInputError):
        load_spec(spec)


@settings(FAST, max_examples=60)
@given(spec=sweep_spec())
def test_fuzz_sweep_spec(spec):
    _sweep_case(spec)


@pytest.mark.slow
@settings(SLOW, max_examples=2000)
@given(spec=sweep_spec())
def test_fuzz_sweep_spec_slow(spec):
    _sweep_case(spec)


@settings(FAST, max_examples=6)
@given(spec=sweep_spec())
def test_fuzz_sweep_cli(tmp_path_factory, spec):
    tmp = tmp_path_factory.mktemp("sw")
    path = tmp / "spec.toml"
    try:
        path.write_text(tomli_w.dumps(spec))
        tomllib.loads(path.read_text())
    except (TypeError, ValueError):
        return
    if spec["run"].get("seed") == -1:  # now and then a spec that is not UTF-8
        path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    check_cli(["sweep", path, "--out", tmp / "out", "--json"], outputs=(tmp / "out",))


# ---------------------------------------------------------------- a few real processes
@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--problem", PAPER, "--eta", "50", "--local-steps", "5", "--rounds", "10", "--replicates", "10",
         "--seed", "0", "--json"],
        ["exact", "--problem", PAPER, "--eta", "nan", "--local-steps", "5", "--json"],
        ["sde", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds", "3", "--paths", "2", "--seed",
         "0", "--json"],
        ["simulate", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds", "30", "--replicates", "10",
         "--seed", "0", "--aggregator", "scaffold", "--server-lr", "10", "--json", "--strict"],
    ],
)
def test_subprocess_cases(argv):
    res = subprocess.run([sys.executable, "-m", "fedsde.cli", *argv], capture_output=True, text=True,
                         timeout=600)  # hang guard
    assert "Traceback" not in res.stderr
    if res.returncode == 0:
        obj = json.loads(res.stdout, parse_constant=_no_constant)
        _finite(obj)
    else:
        assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
