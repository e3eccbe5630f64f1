"""Client populations materialised on demand: cross-device client counts (10⁵–10⁶) on one machine.

A :class:`ClientPopulation` knows every client's sample counts (one integer each) and produces a client's rows only
when asked (:meth:`ClientPopulation.client_rows`).  A client's data depend only on the population's seed and the
client's index, so a population with more clients keeps the first clients' rows, and a round of the simulator reads
only its participants' rows (:mod:`fedsde.clients.population_rows`).  Rows that were produced are kept in a
:class:`ClientCache` bounded in bytes (least recently used out first).

:class:`PopulationProblem` is the classification problem of such a population (logistic, softmax or MLP clients
as in :class:`~fedsde.problems.classification.problem.ClassificationProblem`): the simulator, the metrics
(:mod:`fedsde.problems.populations.metrics`: a seeded subsample of clients and rows, exact where the population is
small) and the ``simulate`` command take it as they take a materialised problem.  Everything else (the optimum,
Hessians, the exact laws) needs the materialised problem (:meth:`PopulationProblem.materialise`, the same rows),
which is refused up front when the population's rows do not fit in memory; problem files give it to every command
that does not take populations (:func:`fedsde.problems.load_problem`).

Implementations: :class:`fedsde.problems.populations.synthetic.SyntheticPopulation` (FedProx's synthetic(α, β),
client by client) and :class:`ArrayPopulation` (the clients of a materialised problem: partitioned bundled sets,
data already in memory); :class:`fedsde.problems.module.npz.NpzPopulation` (an npz read client by client), and a
user's ``nn.Module`` trained by any population is :mod:`fedsde.problems.module.population`.  Another kind of client
data becomes a population by implementing the protocol: ``Q``, ``sizes``, ``test_sizes``, ``n_features``,
``n_classes``, ``client_rows(k, split, rows=None)`` and ``memory_per_row``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.problems.classification.labelled import checked_client_weights
from fedsde.problems.classification.models import MODEL_TYPES, check_model_memory
from fedsde.problems.classification.options import (
    DEFAULTS,
    REPLACEABLE,
    VALUE_FIELDS,
    VALUE_TYPES,
    Classifier,
    Minibatches,
    changed_values,
    values_of,
)
from fedsde.problems.evaluation import Evaluation

#: bytes of client rows a population keeps produced (least recently used out first)
CACHE_BYTES = 64 << 20
#: a population of at most this many training rows is evaluated exactly by the metrics (as a materialised problem)
EXACT_ROWS = 1 << 16


@runtime_checkable
class ClientPopulation(Protocol):
    """Clients whose rows are produced on demand (see the module docstring).

    Attributes
    ----------
    Q : int
        Number of clients.
    sizes, test_sizes : ndarray of int, shape (Q,)
        Training and test samples of every client (``sizes >= 1``).
    n_features, n_classes : int
        Feature columns ``F`` (no intercept) and classes ``C``.
    """

    Q: int
    sizes: np.ndarray
    test_sizes: np.ndarray
    n_features: int
    n_classes: int

    def client_rows(self, k: int, split: str = "train", rows: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Features (n, F) float64 and labels (n,) int64 of client ``k``'s ``split`` (``"train"`` or ``"test"``):
        all its rows, or only the rows numbered ``rows`` (within the split)."""
        ...

    def describe(self) -> dict:
        """Provenance of the population for records (seed, generator, parameters)."""
        ...


class ClientCache:
    """Client ``k`` → its arrays, bounded by ``max_bytes`` (least recently used out first; thread-safe).

    An entry larger than the bound is returned but not kept."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key, make):
        """The cached value of ``key``, else ``make()`` (kept when it fits)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
        value = make()
        size = sum(a.nbytes for a in value)
        with self._lock:
            if size <= self.max_bytes and key not in self._items:
                self._items[key] = value
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, old = self._items.popitem(last=False)
                    self._bytes -= sum(a.nbytes for a in old)
        return value

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes


class ArrayPopulation:
    """The clients of a materialised :class:`~fedsde.problems.classification.problem.ClassificationProblem` as a
    population (slices of its arrays; nothing is copied).  ``rows_checked``: the problem's rows were checked where it
    was built (its materialised problem does not check them again)."""

    rows_checked = True

    def __init__(self, problem):
        self.problem = problem
        self.Q = int(problem.Q)
        self.sizes, self.test_sizes = problem.sizes, problem.test_sizes
        self.n_features, self.n_classes = int(problem.X.shape[1]), int(problem.n_classes)
        self._starts = {"train": np.concatenate([[0], np.cumsum(problem.sizes)]),
                        "test": np.concatenate([[0], np.cumsum(problem.test_sizes)])}

    def client_rows(self, k: int, split: str = "train", rows=None):
        X, y, _ = self.problem._split(split)
        a, b = (int(v) for v in self._starts[split][k:k + 2])
        Xk, yk = X[a:b], y[a:b]
        return (Xk, yk) if rows is None else (Xk[rows], yk[rows])

    def describe(self) -> dict:
        return dict(self.problem.info)


class OnDemandRows:
    """The bounded cache and the rows of a problem whose clients' rows are read on demand (shared by
    :class:`PopulationProblem`, the module population of :mod:`fedsde.problems.module.population` and the
    least-squares population of :mod:`fedsde.problems.regression.population`).  The class provides
    ``cache_bytes`` and ``_cache``, and either a ``population`` (a :class:`ClientPopulation`: the shapes and rows
    below come from it) or its own ``Q``, ``sizes`` and :meth:`_read_client`."""

    @property
    def Q(self) -> int:
        return int(self.population.Q)

    @property
    def sizes(self) -> np.ndarray:
        return self.population.sizes

    @property
    def test_sizes(self) -> np.ndarray:
        return self.population.test_sizes

    @property
    def n_rows(self) -> int:
        """Training rows of all clients."""
        return int(np.sum(self.sizes))

    def _read_client(self, k: int):
        return self.population.client_rows(k, "train")

    @property
    def rows_cache(self) -> ClientCache:
        """The bounded cache of the clients' rows read so far."""
        if "rows" not in self._cache:
            self._cache["rows"] = ClientCache(self.cache_bytes)
        return self._cache["rows"]

    def client_data(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Training rows and targets of client ``k`` (through the bounded cache)."""
        k = int(k)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={k}: must lie in [0, {self.Q - 1}]")
        return self.rows_cache.get(k, lambda: self._read_client(k))


@dataclass(frozen=True, eq=False)
class PopulationProblem(OnDemandRows):
    """A classification problem over a :class:`ClientPopulation` (see the module docstring).

    Attributes are those of :class:`~fedsde.problems.classification.problem.ClassificationProblem` without the arrays:
    ``population``, ``model``, ``l2``, ``p`` (Q,), ``fit_intercept``, ``name``, ``info``, ``hidden``,
    ``batch_size``, ``sampling``, ``init_seed``, ``metric_samples``.  ``F_k(w)`` is client ``k``'s regularised
    empirical risk on its training rows and ``F = Σ_k p_k F_k`` (default ``p_k = N_k/N``).
    """

    population: ClientPopulation
    model: str
    l2: float
    p: np.ndarray
    fit_intercept: bool = True
    name: str = ""
    info: dict = field(default_factory=dict)
    hidden: int = 0
    batch_size: int | None = None
    sampling: str = "minibatch"
    init_seed: int | None = None
    metric_samples: int | None = None
    cache_bytes: int = CACHE_BYTES
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    @takes_values(types=VALUE_TYPES, **VALUE_FIELDS)
    def create(cls, population: ClientPopulation, *, classifier: Classifier | None = None,
               minibatches: Minibatches | None = None, evaluation: Evaluation | None = None, p=None, name: str = "",
               info: dict | None = None, cache_bytes: int = CACHE_BYTES) -> PopulationProblem:
        """A validated problem over ``population``: the values (or their fields' keywords) and ``p``, ``name``,
        ``info`` of :meth:`ClassificationProblem.from_clients`; ``cache_bytes``: bound of the rows kept produced."""
        sizes = np.asarray(population.sizes)
        if sizes.ndim != 1 or sizes.size < 1 or sizes.min() < 1:
            raise FedsdeInputError("population: every client needs at least one training sample")
        return cls._with_settings(population, (classifier or DEFAULTS[0], minibatches or DEFAULTS[1],
                                               evaluation or DEFAULTS[2]), checked_client_weights(p, sizes),
                                  name=name, info=info, cache_bytes=positive_int("cache_bytes", cache_bytes))

    @classmethod
    def _with_settings(cls, population: ClientPopulation, values: tuple[Classifier, Minibatches, Evaluation],
                       p: np.ndarray, *, name: str, info: dict | None, cache_bytes: int) -> PopulationProblem:
        """The problem of a checked population with the checked values, weights and cache bound (trusted); refuses a
        model the labels do not fit and one whose weights cannot fit in memory.  The problem keeps its values."""
        model_, batches, ev = values
        C = int(population.n_classes)
        model, hidden = model_.for_classes(C)
        check_model_memory(int(population.n_features) + int(model_.fit_intercept), C, model, hidden)
        out = cls(population=population, model=model, l2=model_.l2, p=p, fit_intercept=model_.fit_intercept,
                  name=name, info=dict(info or {}), hidden=hidden, batch_size=batches.batch_size,
                  sampling=batches.sampling, init_seed=model_.init_seed, metric_samples=ev.metric_samples,
                  cache_bytes=cache_bytes)
        out._cache["options"] = values
        return out

    def replace(self, **changes) -> PopulationProblem:
        """A validated copy with some settings changed (the population and its cache stay shared): what changes is
        checked (with the value it belongs to: :func:`~fedsde.problems.classification.options.changed_values`), what
        stays is this problem's."""
        allowed = (*REPLACEABLE, "cache_bytes")
        bad = sorted(set(changes) - set(allowed))
        if bad:
            raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)} (allowed: {', '.join(allowed)})")
        cache_bytes = changes.pop("cache_bytes", None)
        values = changed_values(self, changes)
        p = checked_client_weights(changes["p"], self.sizes) if "p" in changes else self.p
        out = PopulationProblem._with_settings(
            self.population, values, p, name=changes.get("name", self.name), info=changes.get("info", self.info),
            cache_bytes=self.cache_bytes if cache_bytes is None else positive_int("cache_bytes", cache_bytes))
        out._cache["rows"] = self.rows_cache  # one cache per population
        return out

    def with_weights(self, p) -> PopulationProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    # ------------------------------------------------------------------ shapes
    @property
    def n_classes(self) -> int:
        return int(self.population.n_classes)

    @property
    def n_features(self) -> int:
        """Columns of the design ``x̃`` (features + intercept)."""
        return int(self.population.n_features) + int(self.fit_intercept)

    @property
    def classifier(self):
        if "classifier" not in self._cache:
            self._cache["classifier"] = MODEL_TYPES[self.model](
                n_features=self.n_features, n_classes=self.n_classes, hidden=int(self.hidden),
                intercept=self.fit_intercept)
        return self._cache["classifier"]

    @property
    def n_outputs(self) -> int:
        return self.classifier.n_outputs

    @property
    def d(self) -> int:
        return self.classifier.d

    def design(self, X: np.ndarray) -> np.ndarray:
        """``x̃``: the features with the intercept column appended."""
        X = np.asarray(X, dtype=np.float64)
        return np.hstack([X, np.ones((X.shape[0], 1))]) if self.fit_intercept else X

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """Zero for the linear models, seeded Glorot weights for the MLP (as the materialised problem)."""
        return self.classifier.init(self.init_seed if seed is None else positive_int("seed", seed, minimum=0))

    def materialise(self):
        """The :class:`~fedsde.problems.classification.problem.ClassificationProblem` of all clients (cached), refused
        up front when its rows do not fit in memory."""
        if "materialised" not in self._cache:
            from fedsde.problems.classification.models import check_memory
            from fedsde.problems.classification.problem import ClassificationProblem

            F, N, M = int(self.population.n_features), self.n_rows, int(np.sum(self.test_sizes))
            check_memory(f"n_clients={self.Q}, dim={F}", 8 * 3 * (N + M) * (F + 1),
                         f"the population materialised has {N + M} rows; use a command that samples participants "
                         "(simulate with --participation) or fewer clients")
            parts = [self.population.client_rows(k, s) for s in ("train", "test") for k in range(self.Q)]
            tr, te = parts[:self.Q], parts[self.Q:]
            arrays = dict(X=np.concatenate([x for x, _ in tr]), y=np.concatenate([y for _, y in tr]), sizes=self.sizes,
                          X_test=np.concatenate([x for x, _ in te]), y_test=np.concatenate([y for _, y in te]),
                          test_sizes=self.test_sizes)
            settings = dict(p=self._given_p(), name=self.name, info=self.info)
            if getattr(self.population, "rows_checked", False):  # finite rows, labels 0..C-1, C >= 2: trusted
                self._cache["materialised"] = ClassificationProblem._with_settings(
                    arrays | {"n_classes": self.n_classes}, *values_of(self), **settings)
            else:
                self._cache["materialised"] = ClassificationProblem.from_arrays(
                    *arrays.values(), n_classes=self.n_classes, classifier=values_of(self)[0],
                    minibatches=values_of(self)[1], evaluation=values_of(self)[2], **settings)
        return self._cache["materialised"]

    def round_memory(self, slots: int, *, whole_clients: bool = False) -> tuple[int, str]:
        """Bytes a simulated round needs for ``slots`` participant slots (replicates in flight × participants), and
        what drives them: the slots' rows (float64; the mean client's rows per slot, three copies: produced, gathered,
        on the device; and the largest client's, two copies), the bounded cache and the per-client vectors; with
        ``whole_clients`` (full-gradient or Gaussian oracles, or batches close to the largest client) every slot
        also holds the largest client's padded rows."""
        F, K = self.n_features, self.n_outputs
        mean, largest = float(np.mean(self.sizes)), int(np.max(self.sizes))
        rows = slots * mean + largest
        cache = min(self.cache_bytes, 8 * F * int(np.sum(self.sizes)))  # the cache holds at most every row
        need = 8 * F * (3 * slots * mean + 2 * largest) + cache + 8 * 5 * self.Q
        what = (f"{slots} participant slots a round holding about {rows:.3g} rows of {F} columns (mean client "
                f"{mean:.3g} rows, largest {largest})")
        if whole_clients:
            need += 8 * slots * largest * (F + K + 3)
            what += f"; every slot padded to the largest client ({largest} rows)"
        return int(need), what

    def _given_p(self):
        """``p`` as the materialised problem takes it: None for the default ``N_k/N`` (normalising it again could
        move it by a rounding error)."""
        return None if np.array_equal(self.p, self.sizes / self.sizes.sum()) else self.p

    def label_distributions(self) -> np.ndarray:
        """``D_k`` of every client (Q, C), from the materialised problem (every client produced; FedDisco)."""
        return self.materialise().label_distributions()

    def loss(self, w):
        """``F(w)`` of the materialised problem (exact; see :meth:`materialise`)."""
        return self.materialise().loss(w)

    def grad(self, w):
        """``∇F(w)`` of the materialised problem (exact; see :meth:`materialise`)."""
        return self.materialise().grad(w)

    def summary(self) -> dict:
        """Sizes and weights in brief (quantiles, not one entry per client), for records."""
        q = np.quantile(self.sizes, [0.0, 0.5, 0.99, 1.0]).tolist()
        return {"name": self.name, "model": self.model, "Q": self.Q, "d": self.d, "n_classes": self.n_classes,
                "l2": self.l2, "hidden": self.hidden, "batch_size": self.batch_size, "sampling": self.sampling,
                "population": "on demand", "n_rows": self.n_rows, "n_test_rows": int(np.sum(self.test_sizes)),
                "sizes_quantiles": {"min": q[0], "median": q[1], "q99": q[2], "max": q[3]}, **self.info}
