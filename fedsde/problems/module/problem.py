"""Clients that train a user's ``nn.Module`` on their own rows: :class:`ModuleProblem` and :func:`module_problem`.

Client ``k`` holds ``N_k`` rows ``(x_i, y_i)`` and minimises

    F_k(w) = (1/N_k) Σ_{i∈I_k} ℓ(f_w(x_i), y_i) + (λ/2) ‖w‖²,        F(w) = Σ_k p_k F_k(w),

(so ``F = Σ_k p_k (1/N_k) Σ_i ℓ_i + (λ/2)‖w‖²``, the ridge in every client's loss as for the classification
problems), with ``f_w`` the module with weight vector ``w`` (``parameters_to_vector(module.parameters())``), ``ℓ`` the
cross-entropy (of logits, or ``nll`` of log-probabilities) or the squared error
(:mod:`fedsde.problems.module.functional`), ``p_k ∝ N_k`` unless given and ``λ``
the ``l2`` coefficient.  A local step is ``w ← w − η(∇ (1/b) Σ_{i∈S} ℓ(f_w(x_i), y_i) + λw)`` on a minibatch ``S``
of ``b`` rows (``batch_size``; ``None`` = the client's whole data) drawn without or with replacement, with the module
in train mode (dropout active, masks from the run's streams); metrics are evaluated in eval mode.  The initial
weights are those of the module built after ``torch.manual_seed(init_seed)``, in float64 (cast to the run's dtype).

The simulator reaches the module through :class:`fedsde.clients.module_oracle.ModuleOracle` (one batched
``torch.func`` pass over replicates × clients); the metrics of :mod:`fedsde.problems.metrics` through
:meth:`ModuleProblem.torch_metrics`, on the weights' device.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsde._validate import client_weights
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.problems.classification.models import segment_starts
from fedsde.problems.evaluation import BATCHINGS, Evaluation
from fedsde.problems.module.checks import (
    activation_floats,
    check_numeric,
    check_outputs,
    check_parameters,
    meta_parameter_count,
    user_code,
    warn_small_clients,
)
from fedsde.problems.module.functional import LABEL_LOSSES, FunctionalModule, refuse_running_stats
from fedsde.problems.module.metrics import METRIC_BYTES, module_metrics
from fedsde.problems.module.options import SAMPLINGS, VALUE_FIELDS, VALUE_TYPES, ModuleBatches, ModuleTraining
from fedsde.problems.module.views import ModuleViews

__all__ = ["BATCHINGS", "SAMPLINGS", "ModuleProblem", "client_order", "module_problem"]

_LOCK = threading.Lock()


@dataclass(frozen=True, eq=False)
class ModuleProblem(ModuleViews):
    """``Q`` clients training one ``nn.Module`` on their own rows (see the module docstring).

    Build with :func:`module_problem` or from a problem file (``kind = "module"``,
    :mod:`fedsde.problems.module.files`).

    Attributes
    ----------
    module : nn.Module
        The model at its initial weights, float64 on the CPU (a template: never trained in place).
    X : ndarray, shape (N, …)
        Input rows of all clients, concatenated in client order (float64).
    y : ndarray, shape (N,) or (N, …)
        Targets: integer labels (cross-entropy) or numbers (mse).
    sizes : ndarray of int, shape (Q,)
    X_test, y_test : ndarrays (M, …), (M,) or (M, …)
        The global test set (``M = 0``: none).
    p : ndarray, shape (Q,)
        Client weights (normalised; default ``N_k/N``).
    loss_name : {"cross-entropy", "nll", "mse"}
    l2 : float
    batch_size : int or None
        Rows per local step (``None``: the client's whole data, ``"full"`` in a file).
    sampling : {"without-replacement", "with-replacement"}
    init_seed : int
    client_names : tuple of str
    batching : {"auto", "vmap", "loop"}
        How a batch of (replicate, client) entries is evaluated (``auto``: the faster of the two, timed on the first
        call of every shape, :mod:`fedsde.problems.module.batching`; the loop where vmap cannot batch the module).
    metric_samples : int or None
        Rows the metrics are estimated on (:func:`fedsde.problems.metrics.metric_sample`: exact up to this many;
        default None: :data:`~fedsde.problems.metrics.METRIC_SAMPLES`, or what a command's metric budget sets).
    name : str
    info : dict
    factory : callable or None
        What built the module (for :meth:`replace` with another ``init_seed``).
    """

    module: Any
    X: np.ndarray
    y: np.ndarray
    sizes: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    p: np.ndarray
    loss_name: str = "cross-entropy"
    l2: float = 0.0
    batch_size: int | None = None
    sampling: str = "without-replacement"
    init_seed: int = 0
    client_names: tuple = ()
    batching: str = "auto"
    metric_samples: int | None = None
    name: str = ""
    info: dict = field(default_factory=dict)
    factory: Callable | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    model = "module"

    # ------------------------------------------------------------------ shapes
    @property
    def Q(self) -> int:
        return int(self.sizes.size)

    @property
    def d(self) -> int:
        return int(self._cache["d"])

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one input row."""
        return tuple(int(s) for s in self.X.shape[1:])

    @property
    def uses_labels(self) -> bool:
        """Whether the targets are class labels (``cross-entropy`` or ``nll``)."""
        return self.loss_name in LABEL_LOSSES

    @property
    def n_classes(self) -> int | None:
        """Classes of a label problem (``1 + max label``), else None."""
        if not self.uses_labels:
            return None
        return int(max(self.y.max(), self.y_test.max() if self.y_test.size else 0)) + 1

    @property
    def client_ids(self) -> np.ndarray:
        """Client of every training row, shape (N,)."""
        return np.repeat(np.arange(self.Q), self.sizes)

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """``w₀ = parameters_to_vector(module.parameters())`` in float64, shape (d,)."""
        if seed is not None and seed != self.init_seed:
            return self.replace(init_seed=seed).initial_weights()
        return self._cache["w0"].copy()

    def replace(self, **changes) -> ModuleProblem:
        """A copy with other settings (validated; a new ``init_seed`` rebuilds the module from its factory)."""
        kw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_cache"}
        if "init_seed" in changes and changes["init_seed"] != self.init_seed:
            if self.factory is None:
                raise FedsdeInputError("init_seed: the problem was built from a module, not a factory; pass a "
                                       "factory (a class or function) to module_problem to change init_seed")
            kw["module"] = None
        kw |= changes
        return _build(training=ModuleTraining(kw.pop("loss_name"), kw.pop("l2"), kw.pop("init_seed")),
                      batches=ModuleBatches(kw.pop("batch_size"), kw.pop("sampling")),
                      evaluation=Evaluation(kw.pop("metric_samples"), kw.pop("batching")), **kw)

    def with_weights(self, p) -> ModuleProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    # ------------------------------------------------------------------ device copies
    def functional(self, device="cpu", dtype=torch.float64) -> FunctionalModule:
        """A :class:`FunctionalModule` of this problem on ``device`` in ``dtype`` (a fresh private copy)."""
        return FunctionalModule(self.module, self.loss_name, device, dtype, self.row_shape, self.batching,
                                state=self._cache.setdefault("vmap_state", {}))

    def _shared(self, device, dtype) -> tuple[FunctionalModule, dict]:
        """A cached functional copy and the rows on ``device`` (for metrics; callers hold its lock)."""
        key = ("module_metric", str(device), str(dtype))
        with _LOCK:
            if key not in self._cache:
                fm = self.functional(device, dtype)

                def put(a, dt=dtype):
                    return torch.as_tensor(np.ascontiguousarray(a)).to(device=device, dtype=dt)

                ydt = torch.int64 if self.uses_labels else dtype
                s = np.repeat(self.p / self.sizes, self.sizes)
                data = {"X": put(self.X), "y": put(self.y, ydt), "s": put(s),
                        "Xt": put(self.X_test), "yt": put(self.y_test, ydt),
                        "starts": segment_starts(self.sizes)}
                self._cache[key] = (fm, data)
        return self._cache[key]

    def _rows_per_pass(self, W: torch.Tensor) -> int:
        """Rows of one metric pass within :data:`METRIC_BYTES` (about four copies of a row's activations)."""
        per = max(1, int(self._cache["act_floats"])) * 4 * W.element_size()
        return int(max(1, METRIC_BYTES // per))

    @property
    def _logits(self) -> int:
        return int(self._cache.get("logits", 1))

    # ------------------------------------------------------------------ metrics (torch)
    def torch_metrics(self, W: torch.Tensor, need: list[str], plan: dict | None = None) -> tuple[dict, dict, dict]:
        """``(values, standard errors, bounds)`` of ``train_loss`` (``F`` with the ridge), ``grad_norm_sq``
        (``‖∇F‖²``; ``bounds``: its interval on a subsample) and ``test_accuracy`` (cross-entropy) for weights ``W``
        (m, d), eval mode, on ``W``'s device and in its dtype, on the rows of ``plan``
        (:func:`fedsde.problems.metrics.metric_sample`; ``None``: all rows, exact); see
        :mod:`fedsde.problems.module.metrics`."""
        return module_metrics(self, W, need, plan)

    def metric_choices(self, device="cpu", dtype=torch.float64) -> list:
        """How the metric passes on ``device`` in ``dtype`` were batched so far
        (:class:`~fedsde.problems.module.batching.Choice` of every shape)."""
        key = ("module_metric", str(device), str(dtype))
        return list(self._cache[key][0].made.values()) if key in self._cache else []

    def metric_names(self) -> tuple[str, ...]:
        """The metrics this problem defines (``test_accuracy`` needs labels and a test set)."""
        names = ["train_loss", "grad_norm_sq"]
        if self.uses_labels and self.y_test.shape[0] > 0:
            names.append("test_accuracy")
        return (*names, "distance_from_start")

    def label_distributions(self) -> np.ndarray:
        """Training label distribution of every client (label losses), shape (Q, C)."""
        if not self.uses_labels:
            raise FedsdeInputError("label_distributions: need integer labels (loss='cross-entropy' or 'nll')")
        C = self.n_classes
        counts = np.bincount(self.client_ids * C + self.y.astype(np.int64), minlength=self.Q * C).reshape(self.Q, C)
        return counts / counts.sum(1, keepdims=True)

    def summary(self) -> dict:
        """Sizes, weights and settings, for records."""
        return {"name": self.name, "model": "module", "module": type(self.module).__name__, "Q": self.Q,
                "d": self.d, "loss": self.loss_name, "l2": self.l2,
                "batch_size": "full" if self.batch_size is None else self.batch_size, "sampling": self.sampling,
                "init_seed": self.init_seed, "row_shape": list(self.row_shape), "sizes": self.sizes.tolist(),
                "p": self.p.tolist(), "client_names": list(self.client_names), **self.info}


# ---------------------------------------------------------------------------------------------- construction
def _build(*, module, X, y, sizes, X_test, y_test, p, training: ModuleTraining, batches: ModuleBatches,
           evaluation: Evaluation, client_names, name, info, factory) -> ModuleProblem:
    """A :class:`ModuleProblem` of checked rows and values (the module built from ``factory`` after
    ``torch.manual_seed(init_seed)`` when ``module`` is None); the module itself is checked here."""
    if module is None:
        module = _instantiate(factory, training.init_seed)
    check_parameters(sum(int(t.numel()) for t in module.parameters()), type(module).__name__)
    module = module.to(dtype=torch.float64)
    refuse_running_stats(module)
    w0 = torch.nn.utils.parameters_to_vector(module.parameters()).detach().cpu().numpy().copy()
    sizes = np.asarray(sizes, dtype=np.int64)
    p = sizes / sizes.sum() if p is None else client_weights("p", p, sizes.size)
    pb = ModuleProblem(module=module, X=X, y=y, sizes=sizes, X_test=X_test, y_test=y_test, p=p,
                       loss_name=training.loss, l2=training.l2, batch_size=batches.batch_size,
                       sampling=batches.sampling, init_seed=training.init_seed, client_names=tuple(client_names),
                       batching=evaluation.batching, metric_samples=evaluation.metric_samples, name=name,
                       info=dict(info), factory=factory)
    pb._cache["d"] = int(w0.size)
    pb._cache["w0"] = w0
    pb._cache["act_floats"] = activation_floats(module, pb.row_shape)
    check_outputs(pb)
    return pb


def _instantiate(factory, init_seed: int):
    """``factory()`` after ``torch.manual_seed(init_seed)``, the global RNG state restored afterwards; a factory
    whose module is too large is refused from its build on the meta device, before it allocates
    (:func:`~fedsde.problems.module.checks.check_parameters`)."""
    if not callable(factory):
        raise FedsdeInputError(f"model: {factory!r} is neither an nn.Module nor a class/function returning one")
    label = getattr(factory, "__name__", type(factory).__name__)
    state = torch.random.get_rng_state()
    try:
        count = meta_parameter_count(factory)
        if count is not None:
            check_parameters(count, label)
        torch.manual_seed(int(init_seed))
        with user_code(f"{label}()"):
            module = factory()
    finally:
        torch.random.set_rng_state(state)
    if not isinstance(module, torch.nn.Module):
        raise FedsdeInputError(f"model: {label!r} returned a {type(module).__name__}, not a torch.nn.Module")
    return module


def client_order(client) -> tuple[np.ndarray, list]:
    """Client index of every row (clients in order of first appearance) and the distinct values in that order."""
    client = np.asarray(client)
    if client.ndim != 1:
        raise FedsdeInputError(f"client: shape {client.shape} must be (n,)")
    values, first, inverse = np.unique(client, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse.reshape(-1)], [values[i].item() if hasattr(values[i], "item") else values[i] for i in order]


@takes_values(types=VALUE_TYPES, **VALUE_FIELDS)
def module_problem(module_or_factory, x, y, client, *, x_test=None, y_test=None, training: ModuleTraining | None = None,
                   batches: ModuleBatches | None = None, evaluation: Evaluation | None = None, p=None,
                   name: str = "", info: dict | None = None) -> ModuleProblem:
    """A :class:`ModuleProblem` (what :func:`fedsde.problems.load_problem` returns for ``kind = "module"``).

    Parameters
    ----------
    module_or_factory : nn.Module, or a class / function returning one
        A factory is called after ``torch.manual_seed(init_seed)`` (the global RNG state is restored afterwards);
        a module is used at its current weights (copied, cast to float64).
    x : array, shape (n, …)
        Input rows (finite numbers).
    y : array, shape (n,) (or (n, …) for mse)
        Integer labels ``0..C−1`` (cross-entropy) or targets (mse).
    client : array, shape (n,)
        Client of every row; every distinct value is a client, in order of first appearance.
    x_test, y_test : arrays, optional
        A global test set (test accuracy for cross-entropy).
    training : ModuleTraining, optional
        The loss, the ridge and the initial weights' seed (:class:`~fedsde.problems.module.options.ModuleTraining`;
        default: cross-entropy, ``l2 = 0``, ``init_seed = 0``), or the keywords ``loss``, ``l2``, ``init_seed``.
    batches : ModuleBatches, optional
        Rows per local step and how they are drawn (:class:`~fedsde.problems.module.options.ModuleBatches`; default:
        the client's whole data), or the keywords ``batch_size`` (an integer or ``"full"``), ``sampling``.
    evaluation : Evaluation, optional
        The metrics' rows and the batching of the module's passes (:class:`~fedsde.problems.evaluation.Evaluation`),
        or the keywords ``metric_samples``, ``batching``.
    p : array, shape (Q,), optional
        Client weights (normalised; default ``∝ N_k``).
    name : str
    info : dict, optional
    """
    training, batches, evaluation = (training or ModuleTraining(), batches or ModuleBatches(),
                                     evaluation or Evaluation())
    loss = training.loss
    X = np.asarray(check_numeric("x", x), dtype=np.float64)
    if X.ndim < 2 or X.shape[0] < 1:
        raise FedsdeInputError(f"x: shape {X.shape} must be (n, …) with n >= 1 rows")
    if not np.isfinite(X).all():
        raise FedsdeInputError("x: contains NaN or inf")
    Y = _targets("y", y, X.shape[0], loss)
    ids, names = client_order(client)
    if ids.size != X.shape[0]:
        raise FedsdeInputError(f"client: {ids.size} entries, x has {X.shape[0]} rows")
    order = np.argsort(ids, kind="stable")
    sizes = np.bincount(ids, minlength=len(names)).astype(np.int64)
    if x_test is None:
        Xt, Yt = np.zeros((0, *X.shape[1:])), _targets("y_test", np.zeros((0, *Y.shape[1:])), 0, loss)
    else:
        if y_test is None:
            raise FedsdeInputError("x_test, y_test: give both or neither")
        Xt = np.asarray(check_numeric("x_test", x_test), dtype=np.float64)
        if Xt.shape[1:] != X.shape[1:] or not np.isfinite(Xt).all():
            raise FedsdeInputError(f"x_test: shape {Xt.shape} must be (m, {', '.join(map(str, X.shape[1:]))}) "
                                   "with finite numbers")
        Yt = _targets("y_test", y_test, Xt.shape[0], loss)
    factory = None if isinstance(module_or_factory, torch.nn.Module) else module_or_factory
    module = None if factory is not None else _copy_module(module_or_factory)
    pb = _build(module=module, X=X[order], y=Y[order], sizes=sizes, X_test=Xt, y_test=Yt, p=p, training=training,
                batches=batches, evaluation=evaluation, client_names=tuple(str(n) for n in names),
                name=name or "module", info=info or {}, factory=factory)
    warn_small_clients(pb.batch_size, pb.sampling, pb.sizes)
    return pb


def _copy_module(module):
    import copy

    return copy.deepcopy(module)


def _targets(name: str, y, n: int, loss: str) -> np.ndarray:
    y = check_numeric(name, y, role="numeric targets")
    if y.ndim < 1 or y.shape[0] != n:
        raise FedsdeInputError(f"{name}: shape {y.shape} must start with the {n} rows of x")
    if loss in LABEL_LOSSES:
        if y.ndim != 1:
            raise FedsdeInputError(f"{name}: shape {y.shape} must be (n,): integer labels for {loss}")
        with np.errstate(invalid="ignore"):
            whole = np.issubdtype(y.dtype, np.integer) or bool(np.all(np.mod(y, 1) == 0))
        if y.size and (not whole or y.min() < 0 or y.max() > np.iinfo(np.int64).max):
            raise FedsdeInputError(f"{name}: labels must be integers 0..C-1 for {loss}")
        return y.astype(np.int64)
    y = y.astype(np.float64)
    if not np.isfinite(y).all():
        raise FedsdeInputError(f"{name}: contains NaN or inf")
    return y
