"""Whether a run trains: the warnings a simulation gives about its own course (the rules and their constants).

Three checks, each a Python warning (the command line reports it on stderr and in the JSON ``warnings`` list, and
turns it into an error, exit 2, under ``--strict``):

* **unequal participation weights** (before the run, :func:`weights_warning`): partial participation with the
  ``unbiased`` weighting moves the server by ``Σ_{k∈S} (Q p_k/m) Δ_k``.  The weights' sum ``W = Σ_{k∈S} Q p_k/m`` has
  mean 1 and, for a uniform ``m``-subset ``S`` of ``Q`` clients (:func:`weight_sum_variance`, exact from the client
  weights ``p``), ``Var W = (Q − m)/(m (Q − 1)) · (Q Σ_k p_k² − 1)``.  With clients of equal weight it is 0; with
  LogNormal client sizes (``p_k ∝ n_k``) it grows with the largest ``Q p_k``.  Each round's pull towards its few
  clients is then scaled by the random ``W`` (on a loss with curvature the expected second-order term of a step
  grows by ``E W² = 1 + Var W``); on heterogeneous clients that raises the loss, while on i.i.d. clients the same
  spread was harmless at the measured step (docs/cross_device.md).  ``Var W >=`` :data:`WEIGHT_VARIANCE_LIMIT` (a
  standard deviation of the step length as large as the step itself) gives a
  :class:`~fedsde.errors.TrainingWarning` naming the remedies:
  ``renormalised`` weights (sum 1: ``W ≡ 1``), more participants (``Var W ∝ 1/m``; it names the ``m`` that reaches
  the limit) or a smaller ``η``.  The ``renormalised`` and ``multinomial`` schemes have ``W ≡ 1``.
* **growth** (:func:`growth_warning`, a :class:`~fedsde.errors.DivergenceWarning`): the first recorded round where
  the replicates' mean train loss is not finite, or exceeds :data:`GROWTH_FACTOR` × its value at the start in a run
  whose loss does not come back below its start (a spike that does is the catapult of a step near the edge of
  stability, not divergence).
* **a loss that rises** (:func:`rise_warning`, a :class:`~fedsde.errors.TrainingWarning`): the mean train loss at
  the last recorded round above its start by more than :data:`RISE_Z` standard errors, or so many replicates ending
  above their start that a one-sided sign test rejects "no rise" at level :data:`RISE_SIGN_LEVEL` (heavy-tailed
  losses, e.g. under unequal weights, widen the standard error but not the sign test), with the likely cause
  (unequal weights when ``Var W >=`` :data:`WEIGHT_VARIANCE_NOTE`; sampling few clients of many; a step too long)
  and the remedies.

Both loss checks read the train loss at the recorded rounds (``fedsde simulate`` records about 20; every round for
runs of up to 20 rounds), so "the first round" is the first *recorded* round; they apply to problems with a train
loss that the simulator does not watch through their weights alone (data and module problems:
:func:`fedsde.sim.simulate` with ``metrics``).  docs/cross_device.md and docs/own_model.md give the measurements
behind the constants.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from fedsde.errors import DivergenceWarning, TrainingWarning

#: ``Var W`` at or above which unbiased participation weights are reported (sd of the step length = the step)
WEIGHT_VARIANCE_LIMIT = 1.0
#: ``Var W`` at or above which a rising loss names the unequal weights among its causes (sd = half the step)
WEIGHT_VARIANCE_NOTE = 0.25
#: growth of the mean train loss over its start that counts as divergence
GROWTH_FACTOR = 10.0
#: standard errors by which the final mean train loss must exceed its start to count as risen
RISE_Z = 2.0
#: level of the one-sided sign test of the replicates' final losses against their start (robust to heavy tails)
RISE_SIGN_LEVEL = 0.01
#: remedies of a run whose unequal weights or sampled clients keep it from training
REMEDIES = ("renormalised weighting (--weighting renormalised: weights summing to 1)",
            "more participants per round (--participation)", "a smaller client learning rate (--eta)")


def weight_sum_variance(p, participation: int | None, weighting: str = "unbiased") -> float:
    """``Var W`` of the participation weights' sum ``W`` (mean 1) for ``participation = m`` of ``Q = len(p)`` clients.

    ``unbiased``: a uniform ``m``-subset ``S`` weighted ``Q p_k/m``, so ``W`` is the mean of ``m`` draws without
    replacement of ``x_k = Q p_k`` (mean 1): ``Var W = (1 − m/Q) S²/m`` with ``S² = Σ_k (x_k − 1)²/(Q − 1)``
    (Cochran 1977, *Sampling Techniques*, Thm 2.2), i.e. ``(Q − m)/(m (Q − 1)) · (Q Σ_k p_k² − 1)``.
    ``renormalised`` and ``multinomial`` weights sum to 1 (``Var W = 0``), and so does full participation
    (``m`` None or ``>= Q``).
    """
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    Q = p.size
    if participation is None or participation >= Q or weighting != "unbiased" or Q < 2:
        return 0.0
    m = int(participation)
    spread = max(0.0, Q * float(np.dot(p, p)) / float(p.sum()) ** 2 - 1.0)  # Q Σ p_k² − 1, p normalised
    return (Q - m) / (m * (Q - 1)) * spread


def participants_for(p, limit: float = WEIGHT_VARIANCE_LIMIT) -> int:
    """The fewest participants ``m`` with unbiased ``Var W <= limit`` (:func:`weight_sum_variance`):
    ``m >= Q c / (limit (Q − 1) + c)`` with ``c = Q Σ p_k² − 1``."""
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    Q = p.size
    c = max(0.0, Q * float(np.dot(p, p)) / float(p.sum()) ** 2 - 1.0)
    return int(min(Q, max(1, math.ceil(Q * c / (limit * (Q - 1) + c) - 1e-9))))


def weights_warning(p, participation: int | None, weighting: str, *, stacklevel: int = 3) -> float:
    """Warn (:class:`~fedsde.errors.TrainingWarning`) when the unbiased weights' ``Var W`` reaches
    :data:`WEIGHT_VARIANCE_LIMIT`; returns ``Var W``."""
    v = weight_sum_variance(p, participation, weighting)
    if v >= WEIGHT_VARIANCE_LIMIT:
        p = np.asarray(p, dtype=np.float64).reshape(-1)
        Q, m = p.size, int(participation)
        largest = Q * float(p.max() / p.sum()) / m
        warnings.warn(
            f"unequal participation weights: the unbiased weights Q·p_k/m of m = {m} of Q = {Q} clients sum to W "
            f"with E W = 1 and Var W = {v:.3g} (exact, from the client weights; the largest single weight is "
            f"{largest:.3g}), so each round's pull towards its few clients is scaled by a random W and the run may "
            f"not train (on heterogeneous clients its loss can rise); remedies: {REMEDIES[0]}, at least "
            f"{participants_for(p)} participants per round (Var W <= {WEIGHT_VARIANCE_LIMIT:g}; it falls as 1/m), or "
            f"{REMEDIES[2]}",
            TrainingWarning, stacklevel=stacklevel)
    return v


def growth_warning(rounds, loss, *, what: str = "the simulation", stacklevel: int = 3) -> int | None:
    """Warn (:class:`~fedsde.errors.DivergenceWarning`) when the mean train loss over replicates stops being finite,
    or grows beyond :data:`GROWTH_FACTOR` × its value at ``rounds[0]`` and does not come back below its start by the
    last recorded round; the message names the first recorded round where it happened, which is returned.

    ``rounds`` (T,), ``loss`` (T, R): the train loss of every replicate at the recorded rounds.  A spike that comes
    back below the start (the catapult of a step near the edge of stability, which measured up to 34-fold on a small
    CNN: docs/own_model.md) is not divergence.  A start whose loss is not positive is judged by finiteness only.
    """
    rounds = np.asarray(rounds).reshape(-1)
    with np.errstate(all="ignore"):
        mean = np.asarray(loss, dtype=np.float64).mean(axis=-1)
    start, end = float(mean[0]), float(mean[-1])
    bad = [i for i in range(1, mean.size) if not math.isfinite(mean[i])]
    grown = [i for i in range(1, mean.size) if start > 0 and math.isfinite(start) and mean[i] > GROWTH_FACTOR * start]
    if not bad and not (grown and not end < start):
        return None
    i = min(bad + grown)
    value, n = float(mean[i]), int(rounds[i])
    how = (f"is not finite at round {n}" if not math.isfinite(value) else
           f"grew {value / start:.3g}-fold by round {n} ({start:.4g} at round {int(rounds[0])} → {value:.4g}), "
           f"beyond {GROWTH_FACTOR:g}× its start")
    last = f"{end:.4g}" if math.isfinite(end) else "not finite"
    warnings.warn(f"{what} is diverging: its mean train loss {how} (the first recorded round where it does) and is "
                  f"{last} at round {int(rounds[-1])}; reduce eta or server_lr", DivergenceWarning,
                  stacklevel=stacklevel)
    return int(rounds[i])


def rise_warning(rounds, loss, *, p=None, participation: int | None = None, weighting: str = "unbiased",
                 stacklevel: int = 3) -> bool:
    """Warn (:class:`~fedsde.errors.TrainingWarning`) when the mean train loss at the last recorded round exceeds
    its start by more than :data:`RISE_Z` standard errors (over replicates), or when ``k`` of the ``R`` replicates end
    above their start with ``P(Binomial(R, 1/2) >= k) <`` :data:`RISE_SIGN_LEVEL` (a sign test: under "no rise" a
    replicate ends above its start with probability at most 1/2); returns whether it warned.

    The message names the likely causes: unbiased weights with ``Var W >=`` :data:`WEIGHT_VARIANCE_NOTE` (from
    ``p``, ``participation``, ``weighting``), few participants of many clients, or a step too long.
    """
    rounds = np.asarray(rounds).reshape(-1)
    loss = np.asarray(loss, dtype=np.float64)
    if rounds.size < 2 or not np.all(np.isfinite(loss[[0, -1]])):
        return False  # a loss that is not finite is the growth check's
    start, end = float(loss[0].mean()), float(loss[-1].mean())
    R = loss.shape[-1]
    se = float(loss[-1].std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    above = int(np.sum(loss[-1] > loss[0]))
    sign_p = math.fsum(math.comb(R, k) for k in range(above, R + 1)) / 2.0**R
    if not (end - start > RISE_Z * se or (end > start and sign_p < RISE_SIGN_LEVEL)):
        return False
    causes = []
    v = weight_sum_variance(p, participation, weighting) if p is not None else 0.0
    if v >= WEIGHT_VARIANCE_NOTE:
        causes.append(f"the unbiased participation weights Q·p_k/m, whose sum W has Var W = {v:.3g}: they scale each "
                      "round's pull towards its few clients by a random W (renormalised weights have W = 1)")
    Q = None if p is None else int(np.size(p))
    partial = participation is not None and Q is not None and participation < Q
    if partial:
        causes.append(f"sampling m = {participation} of Q = {Q} clients a round (each round pulls towards its few "
                      "clients' optima)")
    causes.append("a step (η, local steps, server step) too long for this loss, or a start already near a minimum")
    remedies = [r for r in REMEDIES if partial and (weighting == "unbiased" or "renormalised" not in r)]
    remedies = remedies or [REMEDIES[-1] + " or server step (--server-lr)"]
    warnings.warn(
        f"the train loss rose: {start:.4g} at round {int(rounds[0])}, {end:.4g} ± {se:.2g} (s.e.) at round "
        f"{int(rounds[-1])} ({above} of {R} replicates above their start), so the run did not train; likely causes: "
        + "; ".join(causes) + "; remedies: " + ", ".join(remedies),
        TrainingWarning, stacklevel=stacklevel)
    return True
