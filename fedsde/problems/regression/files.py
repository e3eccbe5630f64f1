"""Least-squares problem files (TOML/JSON, ``kind = "regression"``), read by :func:`fedsde.problems.load_problem`.

A user's own CSV file (``examples/problems/my_data.toml``)::

    kind = "regression"
    model = "least-squares"
    data = "my_data.csv"          # relative to this file
    features = ["x1", "x2"]
    target = "y"
    client_column = "site"        # every distinct value is a client
    batch_size = 4
    sampling = "without-replacement"

or a set shipped with an installed package (``dataset = "grunfeld"`` or ``"diabetes"``, see
:mod:`fedsde.problems.regression.data`).  Keys (every other key is an error):

| key | meaning (default) |
|---|---|
| ``kind`` | ``"regression"`` (required) |
| ``model`` | ``"least-squares"`` (the only model; default) |
| ``data`` | path of a CSV file, relative to the problem file (or ``dataset``) |
| ``dataset`` | ``grunfeld`` (11 firms) or ``diabetes`` (or ``data``) |
| ``batch_size`` | rows per local step ``b`` (required); ``<= n_k`` for every client without replacement |
| ``sampling`` | ``without-replacement`` (a uniform b-subset) or ``with-replacement`` (``without-replacement``) |
| ``l2`` | ridge coefficient ``λ >= 0`` (0) |
| ``intercept`` | append a column of ones to the design (false) |
| ``standardise`` | centre and scale features and target by pooled statistics (CSV: false; packaged: true) |
| ``p`` | client weights: a list (clients in order) or a table ``{client = weight}`` (``∝ n_k``) |
| ``w0`` | starting weights, ``d`` numbers (zero) |
| ``name`` | free text |
| ``features``, ``target``, ``client_column`` | CSV: column names (required with ``data``) |
| ``population`` | CSV: clients read from disk when needed (:mod:`fedsde.problems.regression.population`) (false) |
| ``clients`` | diabetes: number of clients (10) |
| ``partition`` | diabetes: ``iid``, ``dirichlet`` (over the target's quantile bins) or ``quantity`` (``iid``) |
| ``seed`` | diabetes: seed of the partition (required) |
| ``alpha``, ``bins`` | diabetes, dirichlet: concentration (0.5) and quantile bins of the target (5) |
| ``quantity_beta`` | diabetes, quantity: Dirichlet concentration of the client sizes (1.0) |
| ``min_size`` | diabetes, dirichlet/quantity: least rows per client (10) |

The spelling ``standardize`` is accepted for ``standardise`` (not both).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedsde._validate import client_weights
from fedsde.errors import FedsdeInputError
from fedsde.problems._file_keys import _Keys
from fedsde.problems.regression.data import (
    DATASETS,
    DIABETES_PARTITIONS,
    GRUNFELD_FEATURES,
    csv_clients,
    diabetes_clients,
    grunfeld_clients,
    standardise,
)
from fedsde.problems.regression.problem import MODELS, RegressionProblem

_COMMON = ("kind", "model", "batch_size", "sampling", "l2", "intercept", "standardise", "standardize", "p", "w0",
           "name")
_SOURCE_KEYS = {
    "csv": ("data", "features", "target", "client_column", "population"),
    "grunfeld": ("dataset",),
    "diabetes": ("dataset", "clients", "partition", "seed", "alpha", "bins", "quantity_beta", "min_size"),
}
_PARTITION_KEYS = {"iid": (), "dirichlet": ("alpha", "bins", "min_size"), "quantity": ("quantity_beta", "min_size")}


def regression_problem_from_dict(data: dict, *, source: str = "problem", base_dir=None,
                                 population: bool = False) -> RegressionProblem:
    """Build a :class:`RegressionProblem` from the keys of a problem file (see the module docstring).

    ``base_dir``: the folder a relative ``data`` path starts from (default: the working directory).
    ``population=True``: a file with ``population = true`` gives a
    :class:`~fedsde.problems.regression.population.RegressionPopulation` (rows read from disk when needed); without
    it such a file gives the materialised problem, refused up front when it does not fit in memory.  Raises
    :class:`FedsdeInputError` with one line naming the key, its value and the constraint.
    """
    k = _Keys(data, source)
    if data.get("kind") != "regression":
        raise k.fail(f"kind={data.get('kind')!r}: must be 'regression' for a least-squares problem")
    k.choice("model", MODELS, "least-squares")
    if k.has("data") and k.has("dataset"):
        raise k.fail("data, dataset: give one of them (a CSV file of your own, or a packaged set)")
    if k.has("data"):
        src = "csv"
    elif k.has("dataset"):
        src = k.choice("dataset", DATASETS)
    else:
        raise k.fail(f"missing key 'data' (a CSV file) or 'dataset' (one of {', '.join(DATASETS)})")
    allowed = set(_COMMON) | set(_SOURCE_KEYS[src])
    unknown = sorted(set(data) - allowed)
    if unknown:
        other = set().union(*_SOURCE_KEYS.values())
        what = "data (a CSV file)" if src == "csv" else f"dataset={src!r}"
        why = (f"{what} has no key(s) {', '.join(unknown)}" if set(unknown) <= other
               else f"unknown key(s) {', '.join(unknown)}")
        raise k.fail(f"{why} (allowed: {', '.join(sorted(allowed))})")
    if k.has("standardise") and k.has("standardize"):
        raise k.fail("standardise, standardize: give one spelling only")
    skey = "standardize" if k.has("standardize") else "standardise"
    std = k.boolean(skey, src != "csv")
    # typed here, their values checked once by the problem's constructor (its errors name this file too)
    batch_size = _typed(k, "batch_size", int, "an integer >= 1")
    sampling = k.data.get("sampling", "without-replacement")
    l2 = _typed(k, "l2", int | float, "a number >= 0", 0.0)
    intercept = k.boolean("intercept", False)

    info: dict = {"source": src}
    if src == "csv" and k.boolean("population", False):
        try:
            return _csv_population(k, base_dir, info, std, population, batch_size=batch_size, sampling=sampling,
                                   l2=l2, intercept=intercept)
        except FedsdeInputError as exc:
            msg = str(exc)
            raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    if src == "csv":
        X, y, clients, features = _csv(k, base_dir, info)
    elif src == "grunfeld":
        X, y, clients = grunfeld_clients()
        features = list(GRUNFELD_FEATURES)
        info |= {"dataset": "grunfeld", "target": "invest"}
    else:
        X, y, clients, features = _diabetes(k, info)
    if std:
        X, y, stats = standardise(X, y)
        info["standardisation"] = stats
    info["standardise"] = std
    try:
        return RegressionProblem.from_clients(
            X, y, l2=l2, intercept=intercept, p=_weights(k, clients), batch_size=batch_size, sampling=sampling,
            w0=_w0(k, len(features) + int(intercept)), feature_names=features, client_names=clients,
            name=str(data.get("name", src if src != "csv" else Path(str(data["data"])).stem)), info=info,
        )
    except FedsdeInputError as exc:
        msg = str(exc)
        raise FedsdeInputError(msg if msg.startswith(source) else f"{source}: {msg}") from None


def _typed(k: _Keys, key: str, kinds, what: str, default=None):
    """The value of ``key`` (``default`` when absent; required without one) if of the type ``kinds`` (a ``bool`` is
    no number), as given: the value itself is the constructor's to check."""
    if key not in k.data:
        if default is None:
            raise k.fail(f"missing key {key!r} ({what})")
        return default
    v = k.data[key]
    if isinstance(v, bool) or not isinstance(v, kinds):
        raise k.fail(f"{key}={v!r}: must be {what}")
    return v


def _csv_population(k: _Keys, base_dir, info: dict, std: bool, population: bool, **kw):
    """A ``population = true`` CSV file: the on-demand problem, or (``population`` False) the materialised one when
    it fits (the file read as without the key)."""
    from fedsde.problems.classification.models import check_memory
    from fedsde.problems.regression.population import RegressionPopulation
    from fedsde.problems.regression.store import build_store, scan_csv

    full, features, names = _csv_columns(k, base_dir)
    try:
        scan = scan_csv(full, features, names["target"], names["client_column"], keep_raw=population)
    except FedsdeInputError as exc:
        raise k.fail(str(exc)) from None
    info |= {"data": str(k.data["data"]), "target": names["target"], "client_column": names["client_column"]}
    if not population:  # every row in memory, as csv_clients and standardise hold them
        N, F = scan.N, len(features)
        check_memory(f"data={k.data['data']!r} ({scan.sizes.size} clients, {N} rows, {F} features)",
                     2 * full.stat().st_size + N * (400 + 120 * (F + 1)),
                     "the file's rows do not fit in memory; commands that sample participants (simulate with "
                     "--participation) read them from disk")
        data = {key: v for key, v in k.data.items() if key != "population"}
        return regression_problem_from_dict(data, source=k.source, base_dir=base_dir)
    if std:
        info["standardisation"] = scan.stats()
    info["standardise"] = std
    store = build_store(scan, standardise=std, intercept=kw["intercept"])
    return RegressionPopulation.create(
        store, p=_weights(k, scan.clients), w0=_w0(k, len(features) + int(kw["intercept"])), feature_names=features,
        client_names=scan.clients, name=str(k.data.get("name", Path(str(k.data["data"])).stem)), info=info, **kw)


def _csv_columns(k: _Keys, base_dir) -> tuple[Path, list[str], dict]:
    path = k.data["data"]
    if not isinstance(path, str) or not path.strip():
        raise k.fail(f"data={path!r}: must be the path of a CSV file")
    full = Path(path) if Path(path).is_absolute() or base_dir is None else Path(base_dir) / path
    if not full.is_file():
        raise k.fail(f"data={path!r}: no such file ({str(full)!r})")
    features = k.data.get("features")
    if (not isinstance(features, list) or not features or not all(isinstance(f, str) and f for f in features)
            or len(set(features)) != len(features)):
        raise k.fail(f"features={features!r}: must be a non-empty list of distinct column names")
    names = {}
    for key in ("target", "client_column"):
        v = k.data.get(key)
        if not isinstance(v, str) or not v:
            raise k.fail(f"{key}={v!r}: must name a column of {path!r}" if key in k.data else
                         f"missing key {key!r} (a column name of the CSV file)")
        names[key] = v
    if names["target"] in features or names["client_column"] in features or names["target"] == names[
            "client_column"]:
        raise k.fail(f"features, target, client_column: a column may play one role only (target="
                     f"{names['target']!r}, client_column={names['client_column']!r})")
    return full, list(features), names


def _csv(k: _Keys, base_dir, info: dict) -> tuple[list, list, list[str], list[str]]:
    full, features, names = _csv_columns(k, base_dir)
    path = k.data["data"]
    try:
        X, y, clients = csv_clients(full, features, names["target"], names["client_column"])
    except FedsdeInputError as exc:
        raise k.fail(str(exc)) from None
    info |= {"data": str(path), "target": names["target"], "client_column": names["client_column"]}
    return X, y, clients, list(features)


def _diabetes(k: _Keys, info: dict) -> tuple[list, list, list[str], list[str]]:
    partition = k.choice("partition", DIABETES_PARTITIONS, "iid")
    own = _PARTITION_KEYS[partition]
    for key in ("alpha", "bins", "quantity_beta", "min_size"):
        if k.has(key) and key not in own:
            raise k.fail(f"{key}={k.data[key]!r}: not used by partition={partition!r} (its keys: "
                         f"{', '.join(own) or 'none'})")
    seed = k.integer("seed", minimum=0, required=True)
    kw = {"clients": k.integer("clients", 10), "partition": partition, "seed": seed,
          "alpha": k.number("alpha", 0.5), "bins": k.integer("bins", 5, minimum=2),
          "min_size": k.integer("min_size", 10, minimum=0), "quantity_beta": k.number("quantity_beta", 1.0)}
    try:
        X, y, clients, features = diabetes_clients(**kw)
    except FedsdeInputError as exc:
        raise k.fail(str(exc)) from None
    info |= {"dataset": "diabetes", "target": "progression"} | {key: kw[key] for key in ("clients", "partition",
                                                                                         "seed", *own)}
    return X, y, clients, features


def _weights(k: _Keys, clients: list[str]) -> np.ndarray | None:
    if not k.has("p"):
        return None
    v = k.data["p"]
    if isinstance(v, dict):
        extra = sorted(set(map(str, v)) - set(clients))
        if extra:
            raise k.fail(f"p: no client(s) {', '.join(map(repr, extra))} in the data (clients: {', '.join(clients)})")
        absent = [c for c in clients if c not in v]
        if absent:
            raise k.fail(f"p: no weight for client(s) {', '.join(map(repr, absent))}")
        v = [v[c] for c in clients]
    if not isinstance(v, list) or len(v) != len(clients):
        raise k.fail(f"p={k.data['p']!r}: must give {len(clients)} weights (a list in client order, or a table "
                     "client = weight)")
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0:
            raise k.fail(f"p[{i}]={x!r}: weights must be finite numbers >= 0")
    try:
        return client_weights("p", v, normalise=False)
    except FedsdeInputError as exc:  # all zero
        raise k.fail(str(exc)) from None


def _w0(k: _Keys, d: int) -> np.ndarray | None:
    if not k.has("w0"):
        return None
    v = k.data["w0"]
    ok = isinstance(v, list) and len(v) == d and all(
        not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x) for x in v)
    if not ok:
        raise k.fail(f"w0={v!r}: must be a list of {d} finite numbers (one per feature, the intercept last)")
    return np.asarray(v, dtype=np.float64)
