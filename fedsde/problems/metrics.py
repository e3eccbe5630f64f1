"""Metrics of server weights, evaluated for a whole batch of weights at once, in torch on the weights' device.

| name | value | problems |
|---|---|---|
| ``train_loss`` | global objective ``F(w) = Σ_k p_k F_k(w)`` (with the ridge) | all |
| ``grad_norm_sq`` | ``‖∇F(w)‖²`` | all |
| ``test_accuracy`` | fraction of the global test set classified correctly | data (with a test set) |
| ``distance_from_start`` | ``‖w − w₀‖`` | all |

:func:`evaluate_metrics_torch` takes weights of any leading shape ``(..., d)`` (e.g. rounds × replicates) as a
tensor and returns tensors on its device and in its dtype (no transfer to the host: the caller decides when);
:func:`evaluate_metrics` is the same for NumPy arrays (the torch path on the CPU in float64).  Both return a
:class:`MetricValues`: name → values, with the standard errors of sampled metrics and how they were evaluated.
:func:`summarise` turns per-replicate values into means and standard errors.

**Data problems** (:class:`~fedsde.problems.classification.problem.ClassificationProblem`): ``F(w) = Σ_n s_n ℓ_n(w) +
(λ/2)‖w‖²`` over the ``N`` training samples with ``s_n = p_k/N_k`` for the samples of client ``k`` (seed 002, Sec. 3).
The model's forward and backward passes (:mod:`fedsde.problems.classification.models`) run for a chunk of weight vectors
at once (at most :data:`CHUNK`, and at most :data:`CHUNK_BYTES` of work space, sized from the rows and the model); the
rows live on the device once per device and dtype (cached on the problem).

* ``N <= metric_samples`` (default :data:`METRIC_SAMPLES` = 65536, or the problem's ``metric_samples``): every
  metric is exact (standard error 0).
* ``N > metric_samples``: the training metrics are estimated on a fixed subsample of ``m = metric_samples`` draws
  (rounded down to a multiple of :data:`GROUPS`), i.i.d. from the distribution ``s`` (a client ``k`` with
  probability ``p_k``, then one of its ``N_k`` samples uniformly; so each sample weighs what it weighs in ``F``).
  The draws come from ``metric_seed`` (default 0, separate from every run's seed) once per problem: every weight,
  round and replicate is evaluated on the same sample.

  - ``train_loss``: ``F̂ = (1/m) Σ_j ℓ_{n_j} + (λ/2)‖w‖²`` (unbiased), standard error ``sd(ℓ_{n_j})/√m``;
  - ``grad_norm_sq``: the draws form :data:`GROUPS` groups whose mean gradients ``ĝ_b`` (with ``λw``) are
    independent and unbiased for ``∇F``, so ``Σ_{b≠c} ĝ_b·ĝ_c / (G(G − 1))`` is unbiased for ``‖∇F‖²`` (a
    U-statistic, Hoeffding 1948; the plug-in ``‖ḡ‖²`` is biased upward by ``tr Cov/m``); its 95 % interval
    inverts the test of ``‖∇F‖²`` with the variance at the tested value
    (:func:`fedsde.problems.estimates.gram_norm_sq`): asymmetric, in :attr:`MetricValues.bounds`, with ``se`` its
    half-width over 1.96.  The estimate is negative when ``‖∇F‖²`` is below its noise;
  - ``test_accuracy``: with ``M > metric_samples`` test samples, ``m`` uniform draws of the test set, standard
    error ``sd/√m``.

Client populations (:class:`~fedsde.problems.populations.base.PopulationProblem`): exactly when small, else on a seeded
subsample of clients and blocks of their rows (:mod:`fedsde.problems.populations.metrics`).

Quadratic problems are evaluated in closed form in torch; module problems (a user's ``nn.Module``) through their
own ``torch_metrics`` on the same rows (:mod:`fedsde.problems.module.metrics`); other problems (least squares)
through their NumPy ``loss`` and ``grad``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedsde._progress import advance
from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.classification.models import segment_starts
from fedsde.problems.classification.problem import ClassificationProblem
from fedsde.problems.estimates import grouped_norm_sq, t_factor  # noqa: F401 — t_factor re-exported
from fedsde.problems.quadratic.problem import QuadraticProblem

METRICS = ("train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start")

#: most weight vectors evaluated per forward pass
CHUNK = 64
#: work space of one chunk's forward and backward pass (bytes); the chunk shrinks to fit
CHUNK_BYTES = 1 << 28
#: default cap on the samples a metric is evaluated on: exact up to this many, a seeded subsample of this many above
METRIC_SAMPLES = 1 << 16
#: groups of a subsample's gradient draws (unbiased ``‖∇F‖²`` and its interval)
GROUPS = 16
_SEED_TAG = 0x6D657472  # separates the metric sample's stream from every other use of the same seed


class MetricValues(dict):
    """name → values, shape (...) (NumPy arrays or tensors), with

    * ``se``: name → standard errors of the values from a subsample (zero where evaluated exactly);
    * ``bounds``: name → (lower, upper), the 95 % interval of a subsampled metric whose interval is not
      ``value ± 1.96·se`` (``grad_norm_sq``: asymmetric, :func:`fedsde.problems.estimates.gram_norm_sq`; there
      ``se`` is its half-width over 1.96);
    * ``sampling``: how a data problem's metrics were evaluated,
      ``{"train": {"exact", "samples", "of"}, "test": {…}, "seed", "scheme"}`` (empty for other problems).
    """

    def __init__(self, values: dict, se: dict | None = None, sampling: dict | None = None,
                 bounds: dict | None = None):
        super().__init__(values)
        self.se = dict(se or {})
        self.sampling = dict(sampling or {})
        self.bounds = dict(bounds or {})

    def mapped(self, f) -> MetricValues:
        """The same record with ``f`` applied to every array (values, standard errors, bounds)."""
        return MetricValues({n: f(v) for n, v in self.items()}, {n: f(v) for n, v in self.se.items()},
                            self.sampling, {n: (f(lo), f(hi)) for n, (lo, hi) in self.bounds.items()})

    @property
    def sampled(self) -> bool:
        """Whether any metric was estimated on a subsample."""
        return any(not part["exact"] for part in (self.sampling.get("train"), self.sampling.get("test")) if part)


def metric_names(problem) -> tuple[str, ...]:
    """The metrics defined for ``problem`` (``test_accuracy`` needs a data problem with test samples)."""
    if hasattr(problem, "torch_metrics"):  # a problem with its own metric passes (module problems)
        return problem.metric_names()
    if isinstance(problem, ClassificationProblem) and problem.y_test.size > 0:
        return METRICS
    if hasattr(problem, "population") and int(np.sum(problem.test_sizes)) > 0:
        return METRICS
    return tuple(m for m in METRICS if m != "test_accuracy")


def _checked_names(problem, names) -> tuple[str, ...]:
    allowed = metric_names(problem)
    names = allowed if names is None else tuple(names)
    bad = [n for n in names if n not in allowed]
    if bad:
        raise FedsdeInputError(f"names={bad}: not defined for this problem (available: {', '.join(allowed)})")
    return names


def evaluate_metrics(problem, w, w0=None, names: Sequence[str] | None = None, *, metric_samples: int | None = None,
                     metric_seed: int = 0, metric_groups: int | None = None) -> MetricValues:
    """Metrics of a batch of server weights, NumPy in and out (:func:`evaluate_metrics_torch` on the CPU, float64).

    Parameters
    ----------
    problem : QuadraticProblem, ClassificationProblem or another problem with ``loss`` and ``grad``
    w : array, shape (..., d)
        Server weights (any leading shape, e.g. (T, R, d)).
    w0 : array, shape (d,), optional
        Start point for ``distance_from_start`` (default: ``problem.initial_weights()`` where it exists, else zero).
    names : sequence of str, optional
        Metrics to compute (default :func:`metric_names`).
    metric_samples, metric_seed, metric_groups
        Data problems: exact up to ``metric_samples`` samples, else a subsample (module docstring).

    Returns
    -------
    MetricValues
        name -> ndarray, shape (...), with ``se`` and ``sampling``.
    """
    import torch

    w = np.asarray(w, dtype=np.float64)
    _checked_shape(w.shape, problem.d)
    res = evaluate_metrics_torch(problem, torch.from_numpy(np.ascontiguousarray(w)), w0, names,
                                 metric_samples=metric_samples, metric_seed=metric_seed, metric_groups=metric_groups)
    return res.mapped(lambda v: v.numpy())


def _checked_shape(shape, d: int) -> None:
    if len(shape) == 0 or shape[-1] != d:
        raise FedsdeInputError(f"w: shape {tuple(shape)} must end with d={d}")


def evaluate_metrics_torch(problem, w, w0=None, names: Sequence[str] | None = None, *,
                           metric_samples: int | None = None, metric_seed: int = 0,
                           metric_groups: int | None = None) -> MetricValues:
    """Metrics of a batch of server weights on their device and in their dtype (see the module docstring).

    Parameters
    ----------
    problem : QuadraticProblem, ClassificationProblem or another problem with ``loss`` and ``grad``
    w : Tensor, shape (..., d)
        Server weights (floating point; any leading shape, e.g. (T, R, d)).
    w0 : array or Tensor, shape (d,), optional
        Start point for ``distance_from_start`` (default: ``problem.initial_weights()`` where it exists, else zero).
    names : sequence of str, optional
        Metrics to compute (default :func:`metric_names`).
    metric_samples : int, optional
        Data problems: evaluate exactly up to this many training (and test) samples, else on a subsample of this
        size (default: the problem's ``metric_samples``, else :data:`METRIC_SAMPLES`; at least ``2·GROUPS``).
    metric_seed : int
        Seed of the subsample (default 0).
    metric_groups : int, optional
        Data and module problems: groups of the subsample's ``grad_norm_sq`` estimate (default :data:`GROUPS`; at
        least 3, at most half the subsample).  Fewer groups cost less (one gradient per group and weight vector) at
        the price of a wider interval (fewer degrees of freedom); the estimate stays unbiased.

    Returns
    -------
    MetricValues
        name -> Tensor, shape (...), on ``w``'s device and in its dtype; ``se`` likewise; ``sampling``.
    """
    import torch

    names = _checked_names(problem, names)
    w = torch.as_tensor(w).detach()
    if not w.is_floating_point():
        w = w.to(torch.float64)
    d = problem.d
    _checked_shape(w.shape, d)
    lead, flat = w.shape[:-1], w.reshape(-1, d)
    vals: dict = {}
    if "distance_from_start" in names:
        vals["distance_from_start"] = torch.linalg.vector_norm(flat - _start(problem, w0, flat), dim=-1)
    need = [n for n in ("train_loss", "grad_norm_sq", "test_accuracy") if n in names]
    se: dict = {}
    bounds: dict = {}
    sampling: dict = {}
    if need and hasattr(problem, "population"):  # a client population (fedsde.problems.populations.metrics)
        from fedsde.problems.populations.metrics import POPULATION_SAMPLES, population_is_small, population_metrics

        m = metric_samples if metric_samples is not None else problem.metric_samples
        m = POPULATION_SAMPLES if m is None else positive_int("metric_samples", m, minimum=2 * GROUPS)
        if population_is_small(problem, m):  # exact, on the materialised problem
            problem = problem.materialise()
        else:
            got, se, bounds, sampling = population_metrics(
                problem, flat, need, m=m, seed=positive_int("metric_seed", metric_seed, minimum=0), groups=GROUPS,
                chunk_size=chunk_size, grouped_norm_sq=grouped_norm_sq)
            vals |= got
            need = []
    if need and (isinstance(problem, ClassificationProblem) or hasattr(problem, "torch_metrics")):
        plan = metric_sample(problem, metric_samples, metric_seed, metric_groups)
        own = not isinstance(problem, ClassificationProblem)  # module problems: their own functional calls
        got, se, *rest = problem.torch_metrics(flat, need, plan) if own else _data_metrics(problem, flat, need, plan)
        sampling, bounds = plan["describe"], (rest[0] if rest else {})
        vals |= got
    elif need and _plain_quadratic(problem):
        vals |= _quadratic_metrics(problem, flat, need)
    elif need:
        host = flat.detach().cpu().to(torch.float64).numpy()
        if "train_loss" in need:
            vals["train_loss"] = torch.as_tensor(np.asarray(problem.loss(host)).reshape(-1)).to(flat)
        if "grad_norm_sq" in need:
            vals["grad_norm_sq"] = torch.as_tensor(np.sum(problem.grad(host) ** 2, axis=-1)).to(flat)
    out = {n: vals[n].reshape(lead) for n in names}
    errs = {n: (se[n] if n in se else torch.zeros_like(vals[n])).reshape(lead) for n in names}
    return MetricValues(out, errs, sampling, {n: (lo.reshape(lead), hi.reshape(lead)) for n, (lo, hi) in bounds.items()
                                              if n in names})


def _plain_quadratic(problem) -> bool:
    """A quadratic problem whose loss and gradient are the class's own (a subclass that changes them, e.g. by a
    constant in every client loss, is evaluated through its own ``loss``/``grad`` instead of the closed form)."""
    if not isinstance(problem, QuadraticProblem):
        return False
    cls = type(problem)
    return all(getattr(cls, m) is getattr(QuadraticProblem, m) for m in ("loss", "grad", "client_loss"))


def _start(problem, w0, like):
    import torch

    d = problem.d
    if w0 is None:
        start = problem.initial_weights() if hasattr(problem, "initial_weights") else np.zeros(d)
    else:
        start = w0.detach().reshape(-1) if isinstance(w0, torch.Tensor) else np.asarray(w0, np.float64).reshape(-1)
        if tuple(start.shape) != (d,):
            raise FedsdeInputError(f"w0: shape {tuple(np.shape(w0))} must be ({d},)")
    return torch.as_tensor(start).to(device=like.device, dtype=like.dtype)


# ---------------------------------------------------------------------------------------------- data problems
def metric_sample(problem: ClassificationProblem, metric_samples: int | None = None, metric_seed: int = 0,
                  groups: int | None = None) -> dict:
    """Which training and test rows the metrics of ``problem`` are evaluated on (cached on the problem).

    Returns a dict with ``rows`` (training row indices, group-major, or ``None``: all, exact), ``test_rows``
    (likewise), ``groups`` (:data:`GROUPS` unless given; at most ``m/2``) and ``describe`` (what
    :attr:`MetricValues.sampling` reports).  See the module docstring.  The arguments are checked once per problem
    (every later call with the same plain ints finds its plan); the problem's own ``metric_samples`` is trusted.
    """
    m = (getattr(problem, "metric_samples", None) or METRIC_SAMPLES) if metric_samples is None else metric_samples
    given = ("metric_sample_given", m, metric_seed, groups)  # (a problem's metric_samples: checked by its Evaluation)
    if all(v is None or type(v) is int for v in given[1:]) and given in problem._cache:
        return problem._cache[given]
    m = m if metric_samples is None else positive_int("metric_samples", m, minimum=2 * GROUPS)
    seed = positive_int("metric_seed", metric_seed, minimum=0)
    G = GROUPS if groups is None else min(positive_int("metric_groups", groups, minimum=3), m // 2)
    key = ("metric_sample", m, seed) if G == GROUPS else ("metric_sample", m, seed, G)
    if key not in problem._cache:
        N, M = int(problem.y.shape[0]), int(problem.y_test.shape[0])
        draws = G * (m // G)
        rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG]))
        rows = test_rows = None
        if N > m:
            k = rng.choice(problem.Q, size=draws, p=problem.p)
            within = np.minimum((rng.random(draws) * problem.sizes[k]).astype(np.int64), problem.sizes[k] - 1)
            rows = segment_starts(problem.sizes)[k] + within
        if M > m:
            test_rows = rng.integers(0, M, draws)
        describe = {
            "train": {"exact": rows is None, "samples": N if rows is None else draws, "of": N},
            "test": {"exact": test_rows is None, "samples": M if test_rows is None else draws, "of": M},
            "seed": seed, "metric_samples": m,
            "scheme": "exact" if rows is None and test_rows is None else
            f"i.i.d. draws, training rows with probability p_k/N_k; {G} groups for grad_norm_sq",
        }
        problem._cache[key] = {"rows": rows, "test_rows": test_rows, "groups": G,
                               "describe": describe | ({"groups": G} if G != GROUPS else {})}
    if all(v is None or type(v) is int for v in given[1:]):
        problem._cache[given] = problem._cache[key]
    return problem._cache[key]


def _device_data(problem: ClassificationProblem, plan: dict, device, dtype) -> dict:
    """The plan's design rows, labels and sample weights as tensors on ``device`` (cached on the problem)."""
    import torch

    key = ("metric_data", plan["describe"]["metric_samples"], plan["describe"]["seed"], str(device), str(dtype))
    if key not in problem._cache:
        rows, test_rows = plan["rows"], plan["test_rows"]

        def put(a, kind=dtype):
            return torch.as_tensor(np.ascontiguousarray(a)).to(device=device, dtype=kind)

        X, y = (problem.X, problem.y) if rows is None else (problem.X[rows], problem.y[rows])
        data = {"X": put(problem.design(X)), "y": put(y, torch.int64)}
        if rows is None:
            data["s"] = put(np.repeat(problem.p / problem.sizes, problem.sizes))
        if problem.y_test.size:
            Xt, yt = ((problem.X_test, problem.y_test) if test_rows is None
                      else (problem.X_test[test_rows], problem.y_test[test_rows]))
            data |= {"Xt": put(problem.design(Xt)), "yt": put(yt, torch.int64), "test_sampled": test_rows is not None}
        problem._cache[key] = data
    return problem._cache[key]


def chunk_size(rows: int, floats_per_row: int, itemsize: int) -> int:
    """Weight vectors per pass: at most :data:`CHUNK`, with ``rows · floats_per_row`` work floats each fitting in
    :data:`CHUNK_BYTES` (at least one)."""
    return int(max(1, min(CHUNK, CHUNK_BYTES // max(1, rows * floats_per_row * itemsize))))


def _data_metrics(problem: ClassificationProblem, W, need: list[str], plan: dict) -> tuple[dict, dict, dict]:
    """Metrics ``need``, their standard errors and the bounds of those with an asymmetric interval
    (:attr:`MetricValues.bounds`) for weights ``W`` (m, d), chunk by chunk."""

    data = _device_data(problem, plan, W.device, W.dtype)
    model = problem.classifier
    train = "train_loss" in need or "grad_norm_sq" in need
    test = "test_accuracy" in need
    per_row = 4 * model.n_outputs + 4 * int(problem.hidden) + 4
    rows = max(data["X"].shape[0] if train else 0, data["Xt"].shape[0] if test else 0)
    step = chunk_size(rows, per_row, W.element_size())
    parts: dict[str, list] = {n: [] for n in need}
    errs: dict[str, list] = {n: [] for n in need}
    ends: dict[str, list] = {}
    for a in range(0, W.shape[0], step):
        Wc = W[a:a + step]
        got = _train_chunk(problem, model, Wc, data, plan, need) if train else {}
        if test:
            got["test_accuracy"] = _accuracy_chunk(model, Wc, data)
        for n in need:
            parts[n].append(got[n][0])
            errs[n].append(got[n][1])
            if len(got[n]) > 2:
                ends.setdefault(n, []).append(got[n][2:])
        advance(Wc.shape[0])  # a progress bar the caller installed (fedsde._progress.counting), if any
    bounds = {n: (_cat([e[0] for e in v], W), _cat([e[1] for e in v], W)) for n, v in ends.items()}
    return ({n: _cat(v, W) for n, v in parts.items()}, {n: _cat(v, W) for n, v in errs.items()}, bounds)


def _cat(parts: list, W):
    import torch

    return torch.cat(parts) if parts else W.new_zeros(0)


def _train_chunk(problem, model, Wc, data: dict, plan: dict, need: list[str]) -> dict:
    """``train_loss`` and ``grad_norm_sq`` (value, standard error) of a chunk of weights (c, d): one forward pass."""
    import torch

    X, y = data["X"], data["y"]
    exact = plan["rows"] is None
    A, Z = model.forward(Wc, X)
    reg = problem.l2 * Wc
    out = {}
    if "train_loss" in need:
        ell = model.losses(Z, y)  # (c, n)
        ridge = 0.5 * torch.sum(reg * Wc, dim=-1)
        if exact:
            out["train_loss"] = (torch.sum(ell * data["s"], dim=-1) + ridge, torch.zeros_like(ridge))
        else:
            out["train_loss"] = (ell.mean(-1) + ridge, ell.std(-1) / math.sqrt(ell.shape[-1]))
    if "grad_norm_sq" in need:
        E = model.residuals(Z, y)
        if exact:
            g = model.backward(Wc, X, A, E.mul_(data["s"][:, None])) + reg
            val = torch.sum(g * g, dim=-1)
            out["grad_norm_sq"] = (val, torch.zeros_like(val))
        else:
            G = plan["groups"]
            nb = X.shape[0] // G
            E.mul_(1.0 / nb)
            cut = [slice(b * nb, (b + 1) * nb) for b in range(G)]
            gb = torch.stack([model.backward(Wc, X[c], None if A is None else A[:, c], E[:, c]) for c in cut]) + reg
            out["grad_norm_sq"] = grouped_norm_sq(gb)
    return out


def _accuracy_chunk(model, Wc, data: dict):
    """Test accuracy (value, standard error) of a chunk of weights (c, d)."""
    import torch

    hits = (model.predict(model.forward(Wc, data["Xt"])[1]) == data["yt"]).to(Wc.dtype)  # (c, M)
    M = hits.shape[-1]
    acc = hits.sum(-1) / M
    return acc, (hits.std(-1) / math.sqrt(M) if data["test_sampled"] else torch.zeros_like(acc))


# ---------------------------------------------------------------------------------------------- quadratic problems
def _quadratic_metrics(problem: QuadraticProblem, W, need: list[str]) -> dict:
    """``F(w) = Σ_k p_k ½(w − a_k)ᵀU_k(w − a_k)`` and ``‖Σ_k p_k U_k (w − a_k)‖²`` (seed 002, Assumption 6.1) of
    weights ``W`` (m, d), chunk by chunk."""
    import torch

    key = ("metric_data", str(W.device), str(W.dtype))
    if key not in problem._cache:
        problem._cache[key] = tuple(torch.as_tensor(a).to(W) for a in (problem.U, problem.a, problem.p))
    U, a, p = problem._cache[key]
    Q, d = a.shape
    step = chunk_size(Q, 3 * d, W.element_size())
    out: dict[str, list] = {n: [] for n in need}
    for s in range(0, W.shape[0], step):
        diff = W[s:s + step, None, :] - a  # (c, Q, d)
        if "train_loss" in need:
            out["train_loss"].append((0.5 * torch.einsum("cqi,qij,cqj->cq", diff, U, diff)) @ p)
        if "grad_norm_sq" in need:
            g = torch.einsum("q,qij,cqj->ci", p, U, diff)
            out["grad_norm_sq"].append(torch.sum(g * g, dim=-1))
        advance(diff.shape[0])
    return {n: _cat(v, W) for n, v in out.items()}


def summarise(values: dict, axis: int = -1) -> dict[str, dict[str, np.ndarray]]:
    """Mean and standard error (``std(ddof=1)/√R``) over the replicate ``axis`` of every metric.

    ``values``: name -> ndarray (e.g. (T, R)); returns name -> {"mean": (T,), "se": (T,)} (se NaN for R < 2).  When
    ``values`` is a :class:`MetricValues` with subsampled metrics, each also gets ``"sample_se"``: the mean over
    the replicates of the subsample's standard errors, an upper bound on the subsample's share of the error of
    the mean (every replicate is evaluated on the same sample, so these errors are correlated, not averaged out).
    """
    out = {}
    sample_se = values.se if isinstance(values, MetricValues) and values.sampled else {}
    for name, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        R = v.shape[axis]
        se = (np.std(v, axis=axis, ddof=1) / np.sqrt(R)) if R > 1 else np.full(np.mean(v, axis=axis).shape, np.nan)
        out[name] = {"mean": np.mean(v, axis=axis), "se": se}
        if name in sample_se:
            out[name]["sample_se"] = np.mean(np.asarray(sample_se[name], dtype=np.float64), axis=axis)
    return out
