"""Problem files of a user's own model (TOML/JSON, ``kind = "module"``), read by :func:`fedsde.problems.load_problem`.

A model file and an npz of rows with natural clients::

    kind = "module"
    model = "my_model.py:SmallCNN"     # FILE.py:NAME, relative to this file; NAME a class or function
    model_options = { channels = 4 }   # keyword arguments of NAME
    data = "my_data.npz"               # arrays x (n, …), y (n,), client (n,) [, x_test, y_test]
    loss = "cross-entropy"
    batch_size = 16                    # or "full"
    sampling = "without-replacement"
    l2 = 1e-4
    init_seed = 0

or a bundled set partitioned as in ``kind = "classification"`` files (``dataset = "digits"``, ``shape = "image"``
for 1×8×8 inputs, and the ``partition`` keys).  Keys (every other key is an error):

| key | meaning (default) |
|---|---|
| ``kind`` | ``"module"`` (required) |
| ``model`` | ``"FILE.py:NAME"`` (required): a class or function returning an ``nn.Module`` |
| ``model_options`` | keyword arguments of ``NAME`` (a table; none) |
| ``data`` | an ``.npz`` file relative to the problem file: ``x``, ``y``, ``client`` [, ``x_test``, ``y_test``] |
| ``dataset`` | ``digits`` (instead of ``data``) |
| ``shape`` | digits: ``flat`` (64 features) or ``image`` (1×8×8) (``flat``) |
| ``loss`` | ``cross-entropy`` (integer labels), ``nll`` (a model ending in ``log_softmax``) or ``mse`` |
| ``batch_size`` | rows per local step, or ``"full"`` (required) |
| ``sampling`` | ``without-replacement`` or ``with-replacement`` (``without-replacement``) |
| ``l2`` | ridge ``λ >= 0`` (0) |
| ``p`` | client weights: a list (clients in order of first appearance) or a table ``{client = weight}`` (``∝ N_k``) |
| ``init_seed`` | ``torch.manual_seed`` before the model is built (0) |
| ``batching`` | ``auto``, ``vmap`` or ``loop`` (``auto``: the faster, timed on the first steps of a run) |
| ``metric_samples`` | rows the metrics are estimated on, exact up to this many (>= 32; default: see below) |
| ``name`` | free text |
| ``seed``, ``clients``, ``partition`` | digits: as in ``kind = "classification"`` files (``seed`` required) |
| ``alpha``, ``min_size``, ``shards_per_client`` | digits: the partition's keys, as there |
| ``quantity_beta``, ``n_biased``, ``n_uniform`` | digits: likewise |
| ``test_fraction``, ``standardise`` | digits: likewise (0.25, true) |
| ``population`` | clients on demand (:mod:`.population`): ``data`` read per client from the npz (false) |
| ``alpha``, ``beta``, ``iid``, ``dim`` | synthetic (``dataset = "synthetic"``): as in classification files |
| ``n_classes``, ``max_samples`` | synthetic: likewise (10, none), with ``seed``, ``clients`` (30), ``test_fraction`` |

Without ``metric_samples``, ``simulate`` estimates the metrics on a subsample sized to cost at most a quarter of the
run (:func:`fedsde.problems.module.metrics.metric_budget`) and other commands evaluate up to 65536 rows exactly.
``population = true`` (synthetic: the default from 10⁴ clients) makes the clients a population: ``simulate`` reads
only the participants' rows and estimates the metrics on a subsample; an npz is then read from each client's slice
of the memory-mapped file (saved with ``np.savez``, not compressed); other commands get the problem materialised.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import io
import sys
from pathlib import Path

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.problems._file_keys import _Keys
from fedsde.problems.evaluation import MIN_METRIC_SAMPLES, Evaluation
from fedsde.problems.module.checks import check_numeric, first_line
from fedsde.problems.module.options import ModuleBatches, ModuleTraining
from fedsde.problems.module.problem import ModuleProblem, client_order, module_problem

_COMMON = ("kind", "model", "model_options", "loss", "batch_size", "sampling", "l2", "p", "init_seed", "batching",
           "metric_samples", "name")
_DIGITS = ("dataset", "shape", "seed", "clients", "partition", "alpha", "min_size", "shards_per_client",
           "quantity_beta", "n_biased", "n_uniform", "test_fraction", "standardise")
_SYNTHETIC = ("dataset", "seed", "clients", "population", "alpha", "beta", "iid", "dim", "n_classes", "max_samples",
              "test_fraction")
DATASETS = ("digits", "synthetic")
SHAPES = ("flat", "image")


def module_problem_from_dict(data: dict, *, source: str = "problem", base_dir=None,
                             population: bool = False) -> ModuleProblem:
    """A :class:`ModuleProblem` from the keys of a problem file (see the module docstring); ``base_dir`` is the
    folder ``model`` and ``data`` paths start from (default: the working directory).  ``population=True``: a file
    that asks for a population gives a :class:`~fedsde.problems.module.population.ModulePopulationProblem` (else
    its materialised problem).  Errors are one line naming the file, the key, its value and the constraint."""
    k = _Keys(data, source)
    if data.get("kind") != "module":
        raise k.fail(f"kind={data.get('kind')!r}: must be 'module' for a problem of your own model")
    if k.has("data") and k.has("dataset"):
        raise k.fail("data, dataset: give one of them (an npz file of your own, or a bundled set)")
    if not k.has("data") and not k.has("dataset"):
        raise k.fail(f"missing key 'data' (an .npz file) or 'dataset' (one of {', '.join(DATASETS)})")
    synthetic = data.get("dataset") == "synthetic"
    allowed = set(_COMMON) | ({"data", "population"} if k.has("data") else set(_SYNTHETIC if synthetic else _DIGITS))
    unknown = sorted(set(data) - allowed)
    if unknown:
        what = ("data (an npz file)" if k.has("data") else f"dataset={data.get('dataset')!r}")
        why = (f"{what} has no key(s) {', '.join(unknown)}"
               if set(unknown) <= set(_DIGITS) | set(_SYNTHETIC) | {"data"} else f"unknown key(s) {', '.join(unknown)}")
        raise k.fail(f"{why} (allowed: {', '.join(sorted(allowed))})")
    if not k.has("batch_size"):
        raise k.fail("missing key 'batch_size' (an integer >= 1, or \"full\")")
    # the keys of the values, typed here and checked once by the values they build
    training = k.build(ModuleTraining, data.get("loss", "cross-entropy"),
                       k.number("l2", 0.0, allow_zero=True, raw=True), k.integer("init_seed", 0, minimum=0, raw=True))
    batch = data["batch_size"]
    batches = k.build(ModuleBatches, batch if batch == "full" else k.integer("batch_size", raw=True),
                      data.get("sampling", "without-replacement"))
    evaluation = k.build(Evaluation, k.integer("metric_samples", None, minimum=MIN_METRIC_SAMPLES, raw=True),
                         data.get("batching", "auto"))
    options = data.get("model_options", {})
    if not isinstance(options, dict):
        raise k.fail(f"model_options={options!r}: must be a table of keyword arguments")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    factory = _model_factory(k, base, options)
    settings = dict(training=training, batches=batches, evaluation=evaluation,
                    name=str(data.get("name", Path(str(data["model"]).partition(":")[0]).stem)))
    pop = _population(k, base)
    if pop is not None:
        from fedsde.problems.module.population import module_population_problem

        info = {"model_spec": str(data["model"]), "model_options": dict(options)}
        try:
            pb = module_population_problem(factory, pop, info=info, **settings)
            return pb if population else pb.materialise()
        except FedsdeInputError as exc:
            msg = str(exc)
            raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    if synthetic:
        arrays, info = _synthetic_rows(k)
    elif k.has("data"):
        arrays, info = _npz(k, base)
        info["data"] = str(data["data"])
    else:
        arrays, info = _digits(k)
    x, y, client, x_test, y_test = arrays
    from fedsde.problems.regression.files import _weights

    _, names = client_order(client)
    p = _weights(k, [str(n) for n in names])
    info |= {"model_spec": str(data["model"]), "model_options": dict(options)}
    try:
        return module_problem(factory, x, y, client, x_test=x_test, y_test=y_test, p=p, info=info, **settings)
    except FedsdeInputError as exc:
        msg = str(exc)
        raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None


def _model_factory(k: _Keys, base: Path, options: dict):
    """``lambda: NAME(**model_options)`` of the ``model = "FILE.py:NAME"`` key."""
    spec_text = k.data.get("model")
    if not isinstance(spec_text, str) or spec_text.count(":") != 1 or not spec_text.partition(":")[2]:
        raise k.fail(f"model={spec_text!r}: must be \"FILE.py:NAME\" (a Python file relative to the problem file "
                     "and a class or function in it)" if k.has("model") else
                     "missing key 'model' (\"FILE.py:NAME\", a class or function returning an nn.Module)")
    rel, _, name = spec_text.partition(":")
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    if path.suffix != ".py" or not path.is_file():
        raise k.fail(f"model={spec_text!r}: no Python file {str(path)!r}")
    mod = _import_model_file(k, spec_text, rel, path)
    obj = getattr(mod, name, None)
    if obj is None:
        raise k.fail(f"model={spec_text!r}: {rel!r} has no class or function {name!r}{_did_you_mean(mod, name)}")
    if not callable(obj):
        raise k.fail(f"model={spec_text!r}: {name!r} in {rel!r} is a {type(obj).__name__}, not a class or function "
                     "returning an nn.Module")

    def factory():
        try:
            return obj(**options)
        except (Exception, SystemExit) as exc:  # the user's constructor: any failure is a file mistake, in one line
            raise k.fail(f"model_options={options!r}: {name}(**model_options) fails ({first_line(exc)})") from None

    factory.__name__ = name
    return factory


def _import_model_file(k: _Keys, spec_text: str, rel: str, path: Path):
    """The model file imported as a module of its own.  Its top-level code runs with ``sys.argv`` = [the file] (a
    script's module-level ``argparse`` reads an empty command line, not fedsde's) and its output captured: replayed
    after a successful import (on stderr under ``--json``, :mod:`fedsde.cli`), quoted in the one-line error when the
    import fails, ``SystemExit`` included (``sys.exit`` or an ``argparse`` error at import)."""
    mod_name = f"fedsde_user_model_{abs(hash(str(path.resolve())))}"
    out, err, argv = io.StringIO(), io.StringIO(), sys.argv
    try:
        spec = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod  # dataclasses and pickling look a class's module up here
        sys.argv = [str(path)]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            spec.loader.exec_module(mod)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(mod_name, None)
        said = [line.strip() for line in (err.getvalue() + out.getvalue()).splitlines() if line.strip()]
        quote = f"; it printed {said[-1][:200]!r}" if said else ""
        hint = ("; a model file is imported, so its top-level code runs: keep a script's own code (argparse, "
                "sys.exit, training) under `if __name__ == \"__main__\":`" if isinstance(exc, SystemExit) else "")
        raise k.fail(f"model={spec_text!r}: importing {rel!r} fails ({first_line(exc)}){quote}{hint}") from None
    finally:
        sys.argv = argv
    sys.stdout.write(out.getvalue())
    sys.stderr.write(err.getvalue())
    return mod


def _did_you_mean(mod, name: str) -> str:
    """``; did you mean 'X'?`` for the closest public class or function of the model file (difflib), else the
    classes and functions it defines."""
    public = {n: v for n, v in vars(mod).items() if not n.startswith("_") and callable(v)}
    close = difflib.get_close_matches(name, list(public), n=1, cutoff=0.6)
    if not close:
        close = [n for n in public if n.lower() == name.lower()]
    if close:
        return f"; did you mean {close[0]!r}?"
    own = sorted(n for n, v in public.items() if getattr(v, "__module__", None) == mod.__name__)
    return f" (it defines {', '.join(own[:12])}{', …' if len(own) > 12 else ''})" if own else ""


def _npz_path(k: _Keys, base: Path) -> tuple[str, Path]:
    """The ``data`` key as given and the file it names (relative to the problem file's folder), checked to exist."""
    rel = k.data["data"]
    if not isinstance(rel, str) or not rel.strip():
        raise k.fail(f"data={rel!r}: must be the path of an .npz file")
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    if not path.is_file():
        raise k.fail(f"data={rel!r}: no such file ({str(path)!r})")
    return rel, path


def _npz(k: _Keys, base: Path):
    rel, path = _npz_path(k, base)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: _member(k, rel, z, name) for name in z.files}
    except FedsdeInputError:
        raise
    except Exception as exc:
        raise k.fail(f"data={rel!r}: cannot be read as an .npz of plain arrays ({type(exc).__name__})") from None
    missing = [a for a in ("x", "y", "client") if a not in arrays]
    if missing:
        raise k.fail(f"data={rel!r}: missing array(s) {', '.join(missing)} (need x, y, client; x_test, y_test "
                     f"optional; found {', '.join(sorted(arrays)) or 'none'})")
    extra = sorted(set(arrays) - {"x", "y", "client", "x_test", "y_test"})
    if extra:
        raise k.fail(f"data={rel!r}: unknown array(s) {', '.join(extra)} (allowed: x, y, client, x_test, y_test)")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise k.fail(f"data={rel!r}: x_test and y_test go together (found only one)")
    x, y, client = arrays["x"], arrays["y"], arrays["client"]
    if x.ndim < 2 or y.shape[:1] != x.shape[:1] or client.shape != x.shape[:1]:
        raise k.fail(f"data={rel!r}: shapes x {x.shape}, y {y.shape}, client {client.shape} must be (n, …), (n,) "
                     "and (n,)")
    for name in ("x", "y", "x_test", "y_test"):
        if name in arrays:
            try:
                check_numeric(name, arrays[name])
            except FedsdeInputError as exc:
                raise k.fail(f"data={rel!r}: {exc}") from None
    return (x, y, client, arrays.get("x_test"), arrays.get("y_test")), {}


def _member(k: _Keys, rel: str, z, name: str) -> np.ndarray:
    """One array of an npz; an array of Python objects (refused unread: unpickling can run code) named."""
    try:
        return z[name]
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise
        raise k.fail(f"data={rel!r}: array {name!r} holds Python objects (dtype=object), which are not read "
                     "(unpickling can run code); save plain numeric arrays (e.g. np.asarray(x, dtype=np.float64), "
                     "labels as integers; client ids may be strings)") from None


def _digits(k: _Keys):
    from fedsde.problems.data_files import _sklearn

    k.choice("dataset", DATASETS)
    shape = k.choice("shape", SHAPES, "flat")
    seed = k.integer("seed", minimum=0, required=True)
    test_fraction = k.number("test_fraction", 0.25, allow_zero=True)
    if test_fraction >= 1.0:
        raise k.fail(f"test_fraction={test_fraction!r}: must lie in [0, 1)")
    pb = _sklearn(k, "digits", seed, test_fraction, "size")
    lead = (1, 8, 8) if shape == "image" else (64,)
    x, xt = pb.X.reshape(-1, *lead), pb.X_test.reshape(-1, *lead)
    info = {"dataset": "digits", "shape": shape, "seed": seed, **{key: v for key, v in pb.info.items()
                                                                   if key not in ("model", "l2")}}
    return (x, pb.y, pb.client_ids, xt if xt.shape[0] else None, pb.y_test if xt.shape[0] else None), info


def _population(k: _Keys, base: Path):
    """The client population the file asks for (``population = true``; synthetic files of
    :data:`~fedsde.problems.data_files.POPULATION_CLIENTS` clients or more unless ``population = false``), else
    None."""
    from fedsde.problems.data_files import POPULATION_CLIENTS

    synthetic = k.data.get("dataset") == "synthetic"
    if not k.boolean("population", synthetic and k.integer("clients", 30) >= POPULATION_CLIENTS):
        return None
    if k.has("p"):
        raise k.fail("p: a population's clients are weighted by their sizes (p_k = N_k/N); drop p or set "
                     "population = false")
    if synthetic:
        return _synthetic_problem(k, True)
    from fedsde.problems.module.npz import NpzPopulation

    rel, path = _npz_path(k, base)
    try:
        return NpzPopulation(path, label=rel)
    except FedsdeInputError as exc:
        raise k.fail(str(exc)) from None


def _synthetic_problem(k: _Keys, population: bool):
    """FedProx's synthetic(α, β) of the file's keys, parsed as ``kind = "classification"`` files do
    (:func:`fedsde.problems.data_files._synthetic_law`): its population, or the one-stream generator's problem."""
    from fedsde.problems.classification.options import Classifier
    from fedsde.problems.classification.synthetic import synthetic_data_problem
    from fedsde.problems.data_files import _synthetic_law
    from fedsde.problems.populations.synthetic import SyntheticPopulation

    seed = k.integer("seed", minimum=0, required=True)
    test_fraction = k.number("test_fraction", 0.1, allow_zero=True)
    if test_fraction >= 1.0:
        raise k.fail(f"test_fraction={test_fraction!r}: must lie in [0, 1)")
    law = _synthetic_law(k)
    if population:
        return SyntheticPopulation.from_data(law, seed)
    return synthetic_data_problem(law, seed, classifier=Classifier("softmax", l2=0.0))


def _synthetic_rows(k: _Keys):
    """The rows of a synthetic file with ``population = false`` (the one-stream generator below 10⁴ clients)."""
    pb = _synthetic_problem(k, False)
    info = {key: v for key, v in pb.info.items() if key not in ("model", "l2")}
    return (pb.X, pb.y, pb.client_ids, pb.X_test if pb.X_test.shape[0] else None,
            pb.y_test if pb.X_test.shape[0] else None), info
