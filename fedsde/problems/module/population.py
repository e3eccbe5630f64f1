"""A user's own ``nn.Module`` trained by a client population: :class:`ModulePopulationProblem` and
:func:`module_population_problem`.

The clients and their rows come from any :class:`~fedsde.problems.populations.base.ClientPopulation` (FedProx's
synthetic(α, β) produced client by client, the clients of an npz read from their slices of the file, …); the model,
the loss, the local steps and the initial weights are those of :class:`~fedsde.problems.module.ModuleProblem`
(``F = Σ_k p_k F_k``, ``F_k`` client ``k``'s mean row loss plus ``(λ/2)‖w‖²``).  What it adds is that nothing of
the size of the population's rows is formed:

* the simulator (:class:`fedsde.clients.module_oracle.ModuleOracle`) reads, at the start of every round, the rows
  of the round's participants only, through the problem's bounded cache
  (:class:`~fedsde.problems.populations.base.ClientCache`), so an on-demand run gives the numbers of the materialised
  problem (:meth:`ModulePopulationProblem.materialise`: the :class:`ModuleProblem` of all clients, the same rows)
  bit for bit, in memory that grows with the participants;
* the metrics are those of the materialised problem while the population is small, else estimated on the seeded
  subsample of clients and blocks of rows of :mod:`fedsde.problems.populations.metrics` (the module's per-row losses,
  gradients and predictions through :class:`~fedsde.problems.module.functional.FunctionalModule` in eval mode);
* everything else (Hessians, κ, the optimum) needs :meth:`ModulePopulationProblem.materialise`, refused up front
  in one line when the population's rows do not fit in memory.

A population's rows are flat features ``(n, F)`` unless it has a ``row_shape`` attribute (e.g. the images of an npz,
``(1, 8, 8)``); its labels are the targets (integer labels for cross-entropy).  The test set is the clients' test
rows together (a global test set, as the materialised problem's).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsde._progress import advance
from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.problems.evaluation import Evaluation
from fedsde.problems.module.options import VALUE_FIELDS, VALUE_TYPES, ModuleBatches, ModuleTraining
from fedsde.problems.populations.base import CACHE_BYTES, OnDemandRows

_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class ModulePopulationProblem(OnDemandRows):
    """A module trained by the clients of ``population`` (see the module docstring).

    Attributes
    ----------
    population : ClientPopulation
    template : ModuleProblem
        The module, its settings and initial weights, built on one row of client 0 (what :meth:`functional`,
        :attr:`d` and :meth:`initial_weights` read).
    p : ndarray, shape (Q,)
        Client weights (normalised; default ``N_k/N``).
    metric_samples : int or None
        Rows of the metrics' subsample (default :data:`fedsde.problems.populations.metrics.POPULATION_SAMPLES`).
    cache_bytes : int
        Bound of the client rows kept produced.
    """

    population: Any
    template: Any
    p: np.ndarray
    metric_samples: int | None = None
    cache_bytes: int = CACHE_BYTES
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    model = "module"

    # ------------------------------------------------------------------ settings of the template
    def __getattr__(self, name: str):
        if name in ("module", "loss_name", "l2", "batch_size", "sampling", "init_seed", "batching", "name", "info",
                    "factory", "d", "_logits", "uses_labels"):
            return getattr(self.template, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(self.template.row_shape)

    @property
    def n_classes(self) -> int | None:
        return int(self.population.n_classes) if self.uses_labels else None

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """The module's initial weights (those of the materialised problem)."""
        return self.template.initial_weights(seed)

    def functional(self, device="cpu", dtype=torch.float64):
        """A fresh :class:`~fedsde.problems.module.functional.FunctionalModule` on ``device`` in ``dtype``."""
        return self.template.functional(device, dtype)

    def replace(self, **changes) -> ModulePopulationProblem:
        """A copy with other settings (those of :meth:`ModuleProblem.replace`, and ``p``, ``metric_samples``,
        ``cache_bytes``); the population and its cache stay shared."""
        own = {k: changes.pop(k) for k in ("p", "metric_samples", "cache_bytes") if k in changes}
        bad = sorted(set(changes) - {"loss_name", "l2", "batch_size", "sampling", "init_seed", "batching", "name",
                                     "info"})
        if bad:
            raise FedsdeInputError(f"replace: unknown field(s) {', '.join(bad)}")
        template = self.template.replace(**changes) if changes else self.template
        metric_samples = (Evaluation(own["metric_samples"]).metric_samples if "metric_samples" in own
                          else self.metric_samples)
        out = _create(self.population, template, own.get("p", self._given_p()), metric_samples,
                      own.get("cache_bytes", self.cache_bytes))
        out._cache["rows"] = self.rows_cache
        return out

    def with_weights(self, p) -> ModulePopulationProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    # ------------------------------------------------------------------ rows on demand
    def design(self, X) -> np.ndarray:
        """Rows as the module takes them: float64, shape (n, *row_shape)."""
        X = np.asarray(X, dtype=np.float64)
        return X.reshape(X.shape[0], *self.row_shape)

    # ------------------------------------------------------------------ the materialised problem
    def _given_p(self):
        return None if np.array_equal(self.p, self.sizes / self.sizes.sum()) else self.p

    def materialise(self):
        """The :class:`~fedsde.problems.module.ModuleProblem` of all clients with the same rows (cached), refused
        up front when they do not fit in memory."""
        if "materialised" not in self._cache:
            from fedsde.problems.classification.models import check_memory
            from fedsde.problems.module.problem import module_problem

            row = int(np.prod(self.row_shape, dtype=np.int64))
            N, M = self.n_rows, int(np.sum(self.test_sizes))
            # rows and targets, their concatenation and the oracle's padded copy (Q·N_max rows)
            padded = self.Q * int(np.max(self.sizes))
            check_memory(f"n_clients={self.Q}, row of {row} numbers", 8 * (row + 1) * (3 * (N + M) + padded),
                         f"the population materialised has {N + M} rows (padded: {padded}); use a command that "
                         "samples participants (simulate with --participation) or fewer clients")
            pop, Q = self.population, self.Q
            tr = [pop.client_rows(k, "train") for k in range(Q)]
            te = [pop.client_rows(k, "test") for k in range(Q)] if M else []
            t = self.template
            source = t.module if t.factory is None else t.factory
            self._cache["materialised"] = module_problem(
                source, self.design(np.concatenate([x for x, _ in tr])), np.concatenate([y for _, y in tr]),
                np.repeat(np.arange(Q), self.sizes),
                x_test=self.design(np.concatenate([x for x, _ in te])) if M else None,
                y_test=np.concatenate([y for _, y in te]) if M else None, loss=t.loss_name,
                batch_size="full" if t.batch_size is None else t.batch_size, sampling=t.sampling, l2=t.l2,
                p=self._given_p(), init_seed=t.init_seed, batching=t.batching, name=t.name, info=t.info)
        return self._cache["materialised"]

    def loss(self, w):
        """``F(w)`` of the materialised problem (exact)."""
        return self.materialise().loss(w)

    def grad(self, w):
        """``∇F(w)`` of the materialised problem (exact)."""
        return self.materialise().grad(w)

    def label_distributions(self) -> np.ndarray:
        return self.materialise().label_distributions()

    def torch_metrics(self, W, need, plan=None):
        """The materialised problem's metrics (exact; the simulator's metrics of a large population are estimated
        instead, :mod:`fedsde.problems.populations.metrics`)."""
        return self.materialise().torch_metrics(W, need, plan)

    def metric_names(self) -> tuple[str, ...]:
        names = ["train_loss", "grad_norm_sq"]
        if self.uses_labels and int(np.sum(self.test_sizes)) > 0:
            names.append("test_accuracy")
        return (*names, "distance_from_start")

    # ------------------------------------------------------------------ memory and records
    def round_memory(self, slots: int, *, whole_clients: bool = False) -> tuple[int, str]:
        """Bytes a simulated round needs for ``slots`` participant slots: the slots' rows (the mean client's rows
        per slot, three copies: produced, gathered, on the device; the largest client's, two copies), the bounded
        cache and the per-client vectors; with ``whole_clients`` (the oracle draws a minibatch as the ``b`` smallest
        of ``N_max`` keys, see :mod:`fedsde.clients.module_oracle`) ``N_max`` keys per slot, and with the whole
        client's rows per step (``batch_size = "full"``) ``N_max`` padded rows per slot."""
        row = int(np.prod(self.row_shape, dtype=np.int64))
        mean, largest = float(np.mean(self.sizes)), int(np.max(self.sizes))
        cache = min(self.cache_bytes, 8 * (row + 1) * int(np.sum(self.sizes)))  # the cache holds at most every row
        need = 8 * (row + 1) * (3 * slots * mean + 2 * largest) + cache + 8 * 5 * self.Q
        what = (f"{slots} participant slots a round holding about {slots * mean + largest:.3g} rows of {row} numbers "
                f"(mean client {mean:.3g} rows, largest {largest})")
        b = self.batch_size
        if whole_clients or b is None:
            need += 8 * slots * largest * (2 if b is not None else row + 2)
            what += f"; every slot drawing from (or padded to) the largest client ({largest} rows)"
        return int(need), what

    def summary(self) -> dict:
        """Sizes and settings in brief (quantiles, not one entry per client), for records."""
        t = self.template
        q = np.quantile(self.sizes, [0.0, 0.5, 0.99, 1.0]).tolist()
        return {"name": t.name, "model": "module", "module": type(t.module).__name__, "Q": self.Q, "d": self.d,
                "loss": t.loss_name, "l2": t.l2, "batch_size": "full" if t.batch_size is None else t.batch_size,
                "sampling": t.sampling, "init_seed": t.init_seed, "row_shape": list(self.row_shape),
                "population": "on demand", "n_rows": self.n_rows, "n_test_rows": int(np.sum(self.test_sizes)),
                "sizes_quantiles": {"min": q[0], "median": q[1], "q99": q[2], "max": q[3]}, **t.info}

    # ------------------------------------------------------------------ metrics on a subsample
    def _metric_module(self, device, dtype):
        key = ("metric_module", str(device), str(dtype))
        with _LOCK:
            if key not in self._cache:
                self._cache[key] = self.functional(device, dtype)
        return self._cache[key]

    def sample_passes(self, W: torch.Tensor, rows: dict, need, *, train: bool):
        """Per weight vector of ``W`` (m, d), the per-draw sums the population metrics take on their drawn ``rows``
        (:func:`fedsde.problems.populations.metrics.population_metrics`; as its ``_classifier_passes``): ``L`` (m, c)
        of ``loss``-weighted row losses, ``gb`` (groups, m, d) of the groups' gradients of ``Σ_i grad_i ℓ_i`` and
        ``H`` (m, c) of ``loss``-weighted hits; eval mode, in row chunks."""
        X, y, draw, bounds, inv = rows["X"], rows["y"], rows["draw"], rows.get("bounds"), rows
        fm = self._metric_module(W.device, W.dtype)
        step = self.template._rows_per_pass(W)
        c = int(draw.max()) + 1 if draw.numel() else 0
        out: dict[str, list] = {"L": [], "gb": [], "H": []}
        n = X.shape[0]
        grouped = None
        if train and "grad_norm_sq" in need:  # the groups' rows padded to the longest (weight 0) when they fit
            lo, hi = torch.as_tensor(bounds[:-1], device=W.device), torch.as_tensor(bounds[1:], device=W.device)
            width = int((hi - lo).max())
            if width * lo.numel() <= step:
                idx = lo[:, None] + torch.arange(width, device=W.device)
                valid = idx < hi[:, None]
                idx = torch.minimum(idx, hi[:, None] - 1)
                grouped = (X[idx], y[idx], torch.where(valid, inv["grad"][idx], 0.0))
        share = 0.5 if "test_accuracy" in need and {"train_loss", "grad_norm_sq"} & set(need) else 1.0  # of a pass
        with fm.lock:
            for w in W:
                if train and "train_loss" in need:
                    with torch.no_grad():
                        ell = torch.cat([fm.row_losses(w, X[a:a + step], y[a:a + step]) for a in range(0, n, step)])
                    out["L"].append(w.new_zeros(c).index_add_(0, draw, ell * inv["loss"]))
                if train and "grad_norm_sq" in need and grouped is not None:  # the groups in one vmap pass
                    out["gb"].append(fm.grads(w.expand(grouped[0].shape[0], -1), *grouped, train=False))
                elif train and "grad_norm_sq" in need:
                    gw = inv["grad"]
                    out["gb"].append(torch.stack([
                        sum(fm.grad_and_value(w, X[lo:hi], y[lo:hi], gw[lo:hi])[0]
                            for lo, hi in ((a, min(a + step, int(e))) for a in range(int(s), int(e), step)))
                        for s, e in itertools.pairwise(bounds)]))
                if not train:
                    with torch.no_grad():
                        hits = torch.cat([torch.argmax(fm.outputs(w, X[a:a + step]).reshape(-1, self._logits), -1)
                                          == y[a:a + step] for a in range(0, n, step)]).to(W.dtype)
                    out["H"].append(w.new_zeros(c).index_add_(0, draw, hits * inv["loss"]))
                advance(share)  # a progress bar the caller installed (fedsde._progress.counting), if any
        return {k: (torch.stack(v, 1 if k == "gb" else 0) if v else None) for k, v in out.items()}


def _create(population, template, p, metric_samples: int | None, cache_bytes) -> ModulePopulationProblem:
    """The problem of ``population`` and its ``template`` (``metric_samples`` checked, an
    :class:`~fedsde.problems.evaluation.Evaluation`'s)."""
    from fedsde.problems.classification.labelled import checked_client_weights

    sizes = np.asarray(population.sizes)
    if sizes.ndim != 1 or sizes.size < 1 or sizes.min() < 1:
        raise FedsdeInputError("population: every client needs at least one training sample")
    out = ModulePopulationProblem(population=population, template=template, p=checked_client_weights(p, sizes),
                                  metric_samples=metric_samples, cache_bytes=positive_int("cache_bytes", cache_bytes))
    out._cache["act_floats"] = template._cache["act_floats"]  # a row's activations (the oracle's memory check)
    return out


@takes_values(types=VALUE_TYPES, **VALUE_FIELDS)
def module_population_problem(module_or_factory, population, *, training: ModuleTraining | None = None,
                              batches: ModuleBatches | None = None, evaluation: Evaluation | None = None, p=None,
                              name: str = "", info: dict | None = None,
                              cache_bytes: int = CACHE_BYTES) -> ModulePopulationProblem:
    """A :class:`ModulePopulationProblem`: the values (or their fields' keywords) of
    :func:`fedsde.problems.module.module_problem` (``evaluation.metric_samples``: rows of the metrics' subsample),
    the clients and rows of ``population`` (a :class:`~fedsde.problems.populations.base.ClientPopulation`), the
    weights ``p`` (default ``∝ N_k``) and ``cache_bytes``."""
    import warnings

    from fedsde.problems.module.checks import BatchSizeWarning, warn_small_clients
    from fedsde.problems.module.problem import module_problem

    training, evaluation = training or ModuleTraining(), evaluation or Evaluation()
    if not all(hasattr(population, a) for a in ("Q", "sizes", "test_sizes", "client_rows")):
        raise FedsdeInputError(f"population: a {type(population).__name__} is not a ClientPopulation (needs Q, "
                               "sizes, test_sizes, n_features, n_classes, client_rows)")
    check = getattr(population, "check_rows", None)
    if check is not None:  # a file's rows are checked once, streamed, before any is used (NpzPopulation)
        check(training.loss)
    X0, y0 = population.client_rows(0, "train", np.arange(1))
    shape = tuple(getattr(population, "row_shape", (int(population.n_features),)))
    info = dict(info or {}) | {k: v for k, v in population.describe().items() if k not in ("population",)}
    with warnings.catch_warnings():  # the template's one row is not a client: its batch is not warned about
        warnings.simplefilter("ignore", BatchSizeWarning)
        template = module_problem(module_or_factory, np.asarray(X0, dtype=np.float64).reshape(1, *shape), y0,
                                  np.zeros(1, dtype=np.int64), training=training, batches=batches,
                                  evaluation=evaluation, name=name or "module", info=info)
    warn_small_clients(template.batch_size, template.sampling, population.sizes)
    if template.uses_labels and template._logits < int(population.n_classes):
        raise FedsdeInputError(f"model: gives {template._logits} outputs per row, the population has "
                               f"{int(population.n_classes)} classes ({training.loss} needs one output per class)")
    return _create(population, template, p, evaluation.metric_samples, cache_bytes)


__all__ = ["ModulePopulationProblem", "module_population_problem"]
