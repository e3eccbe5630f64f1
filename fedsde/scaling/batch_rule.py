"""The batch rule's factor for minibatches drawn without replacement from clients of ``n_k`` rows.

The linear batch rule (:data:`fedsde.scaling.rules.BATCH_LINEAR`, ``b → κb, s → κs, n → n/κ``) keeps the temperature
``T = s·η·Σ_k p_k² Σ_k`` only when the minibatch covariance is ``∝ 1/b``, i.e. for draws with replacement.  Without
replacement from ``n_k`` rows (seed 002, Sec. 3: ``Σ_k ∝ 1/b − 1/n_k``; :func:`fedsde.problems.regression.
noise_factors`)

    Σ_k(w; b) = f_k(b)·C_k(w),     f_k(b) = (n_k − b)/(b(n_k − 1)),

with ``C_k(w)`` the covariance of client ``k``'s per-row gradients at ``w`` (over its ``n_k`` rows).  ``b → κb``
multiplies client ``k``'s temperature by ``f_k(κb)/f_k(b)``; on Grunfeld (``n_k = 20``, ``b = 5``, ``κ = 2``) by
``1/3``, not ``1/2``, an ``O(1)`` error that does not vanish as ``η → 0``.

**The corrected rule** (``batch``): ``b → κb``, ``s → g·s``, ``n → n/g`` with

    g = f(b)/f(κb) = κ(n − b)/(n − κb)        (every client with ``n`` rows; ``g = κ`` with replacement),

keeps ``T(w)`` at every ``w`` and the horizon ``τ = n·s·η·E``: the first-order SDE is the same at both ends, so
they differ by the rule's ``O(η)`` terms only.  In SGD's form (Goyal et al. 2017's ``η → κη``) it is
``η' = η·f(b)/f(κb)``; FedAvg's batch rule puts the factor on the server step, as the linear rule does.  The square-
root rule of the adaptive server rules (:mod:`fedsde.scaling.sqrt_rule`) takes the same ``g`` as its ``κ``: the round's
noise covariance is divided by ``g``, so the server step goes to ``√g·s``, ``1 − β`` to ``g(1 − β)``, ``τ`` to
``τ/√g`` and the rounds to ``n/g`` (:func:`sqrt_batch_rule`).

**Clients of different sizes.**  Then ``g_k = f_k(b)/f_k(κb)`` differs between clients and no single step keeps
``T(w) = s·η·Σ_k p_k² f_k(b) C_k(w)`` as a matrix: ``s'·Σ_k p_k² f_k(κb) C_k = s·Σ_k p_k² f_k(b) C_k`` for every
``C_k`` only if every ``g_k`` is the same.  What one factor can keep exactly is one linear functional of ``T``; the
one that matters is its trace at the optimum ``w*``: near ``w*`` the SDE is linear,
``dw = −H(w − w*)dτ + T(w*)^{1/2} dB``, its stationary covariance ``X`` solves ``HX + XH = T(w*)``, and the
stationary excess loss is ``E F − F* = ½ tr(HX) = ¼ tr T(w*)``, whatever ``H``.  So

    g = Σ_k a_k f_k(b) / Σ_k a_k f_k(κb),      a_k = p_k² tr C_k(w_ref),

keeps the first-order stationary excess loss exactly (at ``w_ref = w*``; data problems, whose optimum is not known,
use the start point, where the data route measures its temperature); the covariance's shape moves by the
Lyapunov solution of ``ΔT`` (trace zero), which the outputs measure.  ``g`` is the mean of the ``g_k`` weighted by
``a_k f_k(κb)`` (between the smallest and the largest) plus, for clients that ``κb`` leaves without noise
(``κb >= n_k``), their share ``Σ a_k f_k(b)/Σ a_j f_j(κb)``, which the other clients make up.

**Whole rounds.**  ``n/g`` need not be a whole number; the scaled end takes ``n' = round(n/g)`` rounds.  Exact
laws (least squares, ``keep="temperature"``) keep ``s' = g·s``, so the SDE is the same and the horizon
``n'·g·s·η·E`` is off by at most half a round (``|n'g/n − 1| <= g/(2n)``); simulated curves, which are compared at
common ``τ`` (``keep="horizon"``), take ``s' = s·n/n'``, so ``τ`` is kept and the temperature is off by the factor
``n/(n'·g)``.  :meth:`BatchFactor.applied` gives both and the outputs report the change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsde._tolerances import EXACT_AGREEMENT
from fedsde._validate import positive_float
from fedsde.errors import FedsdeInputError

#: how the factor was chosen (:attr:`BatchFactor.basis`)
BASES = {
    "with-replacement": "minibatches drawn with replacement: Σ_k ∝ 1/b, g = κ (the linear rule)",
    "equal": "every client with minibatch noise has the same finite-population ratio f_k(b)/f_k(κb): g keeps "
             "T(w) at every w",
    "trace": "clients of different sizes: g keeps tr T(w_ref), hence the first-order stationary excess loss "
             "¼·tr T(w*); the shape of the stationary covariance moves by the Lyapunov solution of ΔT",
}


def finite_population_factor(sizes, batch_size: float) -> np.ndarray:
    """``f_k(b) = (n_k − b)/(b(n_k − 1))`` (0 where ``b >= n_k``: full-batch steps), shape (Q,)."""
    n = np.asarray(sizes, dtype=np.float64)
    b = float(batch_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > b, (n - b) / (b * (n - 1.0)), 0.0)


@dataclass(frozen=True)
class BatchFactor:
    """The factor ``g`` the batch rule puts on the server step (and ``1/g`` on the rounds); see the module docstring.

    Attributes
    ----------
    kappa : float
        The batch-size factor ``κ``.
    factor : float
        ``g``: ``κ`` with replacement, else ``f(b)/f(κb)`` (equal ratios) or the trace-weighted mean of the ``g_k``.
    per_client : ndarray, shape (Q,)
        ``g_k = f_k(b)/f_k(κb)`` (``inf`` where ``κb`` reaches ``n_k``: no noise left; ``nan`` where client ``k``
        has none at ``b`` either).
    exact : bool
        Whether ``g`` keeps ``T(w)`` at every ``w`` (with replacement, or every noisy client with the same ratio).
    basis : str
        A key of :data:`BASES`.
    sampling : str
    weights : ndarray or None
        ``a_k = p_k² tr C_k(w_ref)`` of the trace-matched factor (``None`` otherwise).
    """

    kappa: float
    factor: float
    per_client: np.ndarray
    exact: bool
    basis: str
    sampling: str
    weights: np.ndarray | None = None

    @property
    def corrected(self) -> bool:
        """Whether ``g`` differs from ``κ`` (sampling without replacement)."""
        return self.sampling != "with-replacement"

    def applied(self, rounds: int, keep: str = "temperature") -> tuple[float, int]:
        """``(server-step factor, n')`` with ``n' = round(n/g)`` (at least 1): ``g`` itself (``keep="temperature"``)
        or ``n/n'`` (``keep="horizon"``); module docstring, "Whole rounds"."""
        new = max(1, round(rounds / self.factor))
        return (self.factor if keep == "temperature" else rounds / new), new

    def to_dict(self, rounds: int | None = None, keep: str = "temperature") -> dict:
        out = {"corrected": self.corrected, "kappa": self.kappa, "factor": self.factor,
               "per_client": self.per_client, "exact": self.exact, "basis": BASES[self.basis],
               "sampling": self.sampling}
        if rounds is not None:
            step, n_new = self.applied(rounds, keep)
            out |= {"keep": keep, "server_lr_factor": step, "rounds": n_new,
                    "temperature_factor": step / self.factor, "horizon_factor": n_new * step / rounds}
        return out

    def sentence(self, rounds: int | None = None, keep: str = "temperature") -> str:
        """One line for the text output."""
        if not self.corrected:
            return f"batch rule: {BASES['with-replacement']}"
        g = self.per_client[np.isfinite(self.per_client)]
        span = (f"f_k(b)/f_k(κb) = {g.min():.4g}" if self.exact or g.size == 0 else
                f"f_k(b)/f_k(κb) from {g.min():.4g} to {g.max():.4g} across clients")
        text = (f"batch rule corrected for sampling without replacement: Σ_k ∝ f_k(b) = (n_k − b)/(b(n_k − 1)), so "
                f"the server step × g = {self.factor:.6g} (not κ = {self.kappa:g}; {span}); "
                + ("exact: T(w) kept at every w" if self.exact else BASES["trace"]))
        if rounds is not None:
            step, n_new = self.applied(rounds, keep)
            if abs(n_new * self.factor / rounds - 1.0) > EXACT_AGREEMENT:
                text += f"; rounds {rounds}/g = {rounds / self.factor:.4g} is not whole: {n_new} rounds"
                text += (f", so the horizon τ moves by {n_new * step / rounds - 1:+.3%} (the temperature is kept)"
                         if keep == "temperature" else
                         f" with the server step × {step:.6g} keep τ, the temperature moves by "
                         f"{step / self.factor - 1:+.3%}")
        return text


def batch_factor(sizes, batch_size: int, kappa: float, sampling: str, *, weights=None) -> BatchFactor:
    """The batch rule's factor ``g`` for clients of ``sizes`` rows (module docstring).

    Parameters
    ----------
    sizes : array of int, shape (Q,)
        Rows ``n_k`` of each client.
    batch_size : int
        ``b`` at the base.
    kappa : float
        ``κ``: the scaled batch is ``κb`` (a client with ``n_k <= κb`` rows then takes full-batch steps: no noise).
    sampling : {"without-replacement", "with-replacement"}
    weights : array, shape (Q,), optional
        ``a_k = p_k² tr C_k(w_ref)`` for the trace-matched factor; needed only when the ratios ``g_k`` differ.

    Raises
    ------
    FedsdeInputError
        No client with minibatch noise at the scaled end, or differing ratios without ``weights``.
    """
    kappa = positive_float("kappa", kappa)
    n = np.asarray(sizes, dtype=np.float64)
    b = float(batch_size)
    if sampling == "with-replacement":
        return BatchFactor(kappa, kappa, np.full(n.shape, kappa), True, "with-replacement", sampling)
    fb, fk = finite_population_factor(n, b), finite_population_factor(n, kappa * b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(fb > 0, np.where(fk > 0, fb / np.where(fk > 0, fk, 1.0), np.inf), np.nan)
    noisy = fb > 0
    if not np.any(fk > 0):
        raise FedsdeInputError(f"kappa={kappa:g}: batch_size {kappa * b:g} takes every client's rows (full-batch "
                               "steps): no minibatch noise is left at the scaled end, so no step keeps the temperature")
    r = ratio[noisy]
    if np.all(np.isfinite(r)) and np.ptp(r) <= EXACT_AGREEMENT * r.max():
        return BatchFactor(kappa, float(r.max()), ratio, True, "equal", sampling)
    if weights is None:
        raise FedsdeInputError("weights: clients of different sizes need a_k = p_k² tr C_k(w) for the batch rule's "
                               "factor (fedsde.scaling.batch_rule)")
    a = np.asarray(weights, dtype=np.float64)
    den = float(np.sum(a * fk))
    if not den > 0:
        raise FedsdeInputError("weights: no client with minibatch noise at the scaled end has gradient spread at the "
                               "reference point; the temperature cannot be kept")
    return BatchFactor(kappa, float(np.sum(a * fb) / den), ratio, False, "trace", sampling, a)


def client_spread(problem, w) -> np.ndarray:
    """``tr C_k(w)``: the variance of client ``k``'s per-row gradients at ``w`` over its ``n_k`` rows, shape (Q,)."""
    out = np.zeros(problem.Q)
    for k in range(problem.Q):
        G = np.asarray(problem.per_sample_grads(w, k), dtype=np.float64)
        if G.shape[0] > 1:
            out[k] = float(np.sum((G - G.mean(0)) ** 2)) / G.shape[0]
    return out


def problem_batch_factor(problem, kappa: float, w_ref=None) -> BatchFactor:
    """:func:`batch_factor` for a regression or data problem: its sizes, batch size and sampling; where the ratios
    differ, ``a_k = p_k² tr C_k(w_ref)`` with ``w_ref`` the least-squares optimum (regression) or the given point
    (default: the problem's initial weights)."""
    if getattr(problem, "batch_size", None) is None:
        raise FedsdeInputError("problem: the batch rule needs a batch_size (set it in the file)")
    sampling = getattr(problem, "sampling", "without-replacement")
    try:
        return batch_factor(problem.sizes, problem.batch_size, kappa, sampling)
    except FedsdeInputError as exc:
        if not str(exc).startswith("weights:"):
            raise
    if w_ref is None:
        w_ref = problem.optimum if getattr(problem, "model", None) == "least-squares" else problem.initial_weights()
    a = np.asarray(problem.p, dtype=np.float64) ** 2 * client_spread(problem, w_ref)
    return batch_factor(problem.sizes, problem.batch_size, kappa, sampling, weights=a)


def map_config(problem, config, rule, kappa: float, *, keep: str = "temperature", w_ref=None):
    """``(scaled config, BatchFactor or None)``: ``rule`` applied to ``config`` with factor ``κ``, and for the
    :attr:`~fedsde.scaling.rules.ScalingRule.finite_population` rule (``batch``) the problem's ``g`` on the server
    step and ``n' = round(n/g)`` rounds (``keep``: :meth:`BatchFactor.applied`; ``w_ref``: where the trace is
    matched for clients of different sizes, :func:`problem_batch_factor`)."""
    from dataclasses import replace

    if not rule.finite_population:
        return rule.apply(config, kappa), None
    rule.apply(config, kappa, factor=1.0)  # b → κb must stay a whole number before g is computed
    factor = problem_batch_factor(problem, kappa, w_ref)
    step, rounds = factor.applied(config.rounds, keep)
    new = rule.apply(config, kappa, factor=config.rounds / rounds)
    return replace(new, server_lr=config.server_lr * step), factor


def sqrt_batch_rule(aggregator, server_lr: float, rounds: int | None, factor: BatchFactor):
    """The square-root rule (:func:`fedsde.scaling.sqrt_rule.sqrt_scaled`) for a batch ``b → κb``: its ``κ`` is the
    factor ``g`` by which the round's noise covariance falls (``g = κ`` with replacement, ``f(b)/f(κb)`` without)."""
    from fedsde.scaling.sqrt_rule import sqrt_scaled

    return sqrt_scaled(aggregator, server_lr, rounds, factor.factor)


__all__ = ["BASES", "BatchFactor", "batch_factor", "client_spread", "finite_population_factor", "map_config",
           "problem_batch_factor", "sqrt_batch_rule"]
