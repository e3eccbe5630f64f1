"""Metrics of server weights, evaluated for a whole batch of weights at once.

| name | value | problems |
|---|---|---|
| ``train_loss`` | global objective ``F(w) = Σ_k p_k F_k(w)`` (with the ridge) | all |
| ``grad_norm_sq`` | ``‖∇F(w)‖²`` | all |
| ``test_accuracy`` | fraction of the global test set classified correctly | data (with a test set) |
| ``distance_from_start`` | ``‖w − w₀‖`` | all |

:func:`evaluate_metrics` takes weights of any leading shape ``(..., d)`` (e.g. rounds × replicates) and evaluates
all of them with batched array operations (one forward pass per batch of at most :data:`CHUNK` weight vectors for
data problems, to bound memory); :func:`summarise` turns per-replicate values into means and standard errors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.problems.logistic import ClassificationProblem

METRICS = ("train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start")

#: weight vectors evaluated per forward pass on a data problem (bounds memory at CHUNK·N·max(K, H) floats)
CHUNK = 64


def metric_names(problem) -> tuple[str, ...]:
    """The metrics defined for ``problem`` (``test_accuracy`` needs a data problem with test samples)."""
    if isinstance(problem, ClassificationProblem) and problem.y_test.size > 0:
        return METRICS
    return tuple(m for m in METRICS if m != "test_accuracy")


def evaluate_metrics(problem, w, w0=None, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Metrics of a batch of server weights.

    Parameters
    ----------
    problem : QuadraticProblem or ClassificationProblem
    w : array, shape (..., d)
        Server weights (any leading shape, e.g. (T, R, d)).
    w0 : array, shape (d,), optional
        Start point for ``distance_from_start`` (default: ``problem.initial_weights()`` for data problems,
        zero otherwise).
    names : sequence of str, optional
        Metrics to compute (default :func:`metric_names`).

    Returns
    -------
    dict name -> ndarray, shape (...)
    """
    allowed = metric_names(problem)
    names = allowed if names is None else tuple(names)
    bad = [n for n in names if n not in allowed]
    if bad:
        raise FedsdeInputError(f"names={bad}: not defined for this problem (available: {', '.join(allowed)})")
    w = np.asarray(w, dtype=np.float64)
    d = problem.d
    if w.ndim == 0 or w.shape[-1] != d:
        raise FedsdeInputError(f"w: shape {w.shape} must end with d={d}")
    lead = w.shape[:-1]
    out: dict[str, np.ndarray] = {}
    if "distance_from_start" in names:
        if w0 is None:
            start = problem.initial_weights() if hasattr(problem, "initial_weights") else np.zeros(d)
        else:
            start = np.asarray(w0, dtype=np.float64).reshape(-1)
            if start.shape != (d,):
                raise FedsdeInputError(f"w0: shape {np.shape(w0)} must be ({d},)")
        out["distance_from_start"] = np.linalg.norm(w - start, axis=-1)
    need = [n for n in ("train_loss", "grad_norm_sq", "test_accuracy") if n in names]
    if not need:
        return {n: out[n] for n in names}
    flat = w.reshape(-1, d)
    if isinstance(problem, ClassificationProblem):
        parts = [_data_metrics(problem, flat[a:a + CHUNK], need) for a in range(0, flat.shape[0], CHUNK)]
        vals = {n: np.concatenate([p[n] for p in parts]) if parts else np.zeros(0) for n in need}
    else:
        vals = {}
        if "train_loss" in need:
            vals["train_loss"] = np.asarray(problem.loss(flat)).reshape(-1)
        if "grad_norm_sq" in need:
            vals["grad_norm_sq"] = np.sum(problem.grad(flat) ** 2, axis=-1)
    for n in need:
        out[n] = vals[n].reshape(lead)
    return {n: out[n] for n in names}


def _data_metrics(problem: ClassificationProblem, w: np.ndarray, need: list[str]) -> dict[str, np.ndarray]:
    """Loss, squared gradient norm (one shared forward pass) and test accuracy of weights ``w`` (m, d)."""
    res = {}
    if "train_loss" in need or "grad_norm_sq" in need:
        Xd = problem.design(problem.X)
        s = np.repeat(problem.p / problem.sizes, problem.sizes)  # per-sample weight p_k / N_k
        A, Z = problem._forward(w, Xd)
        reg = problem.l2 * w
        if "train_loss" in need:
            res["train_loss"] = problem._sample_losses(Z, problem.y) @ s + 0.5 * np.sum(reg * w, axis=-1)
        if "grad_norm_sq" in need:
            g = problem._backward(w, Xd, A, problem._residuals(Z, problem.y) * s[:, None]) + reg
            res["grad_norm_sq"] = np.sum(g * g, axis=-1)
    if "test_accuracy" in need:
        res["test_accuracy"] = np.atleast_1d(problem.accuracy(w, "test"))
    return res


def summarise(values: dict[str, np.ndarray], axis: int = -1) -> dict[str, dict[str, np.ndarray]]:
    """Mean and standard error (``std(ddof=1)/√R``) over the replicate ``axis`` of every metric.

    ``values``: name -> ndarray (e.g. (T, R)); returns name -> {"mean": (T,), "se": (T,)} (se NaN for R < 2).
    """
    out = {}
    for name, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        R = v.shape[axis]
        se = (np.std(v, axis=axis, ddof=1) / np.sqrt(R)) if R > 1 else np.full(np.mean(v, axis=axis).shape, np.nan)
        out[name] = {"mean": np.mean(v, axis=axis), "se": se}
    return out
