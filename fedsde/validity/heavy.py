"""Heavy tails both ways: what a sampled verdict still decides when the per-replicate values are heavy-tailed.

A heavy-tailed metric (:mod:`fedsde.validity.tails`) carries its mean in draws rarer than ``1/R``: no interval from
``R`` values certifies where that mean lies, so its sampled intervals decide nothing.  Two things still do.

**The exact side, where FedAvg's moments close** (quadratic and least-squares clients against the SDE's exact law,
:mod:`fedsde.validity.exact_fedavg`).  The metrics judged there are functions of FedAvg's exact mean and covariance,
so a heavy-tailed metric is judged on FedAvg's exact mean instead of its sample mean: its gap is exact
(``lower = upper = gap``) and ``tails[m]["decided_by"]`` is ``"exact"``.  So is a metric whose sampled bounds exclude
the exact gap: a tail so rare that none of the ``R`` draws shows it leaves the sample looking light-tailed (the share
rule cannot flag what is not there) and its mean biased, with a confident interval; on Grunfeld at ``η = 0.15``,
``E = 10`` over 3 rounds, ``R = 200``, two seeds of three were not flagged and said "does not track" where the exact
gap is within tolerance.  With these two replacements every decision on such a problem agrees with the exact gap:
the bounds kept contain it, and the others are it (:func:`resolve`).  Where FedAvg's second moment grows
without bound (:func:`fedsde.exact.stability.least_squares_stability`: the mean map or the second-moment operator
has spectral radius ``>= 1``) this is the only answer: the sample mean is carried by ever rarer expanding paths and
settles for no ``R``.  On Grunfeld at ``η = 0.3`` (``E = 2, 4``; exact gaps 16× and 20× the tolerance) the sampled
verdict said "inconclusive — heavy tails"; it now says "does not track", with the growth in ``verdict.divergence``.

**A divergence test, otherwise** (:func:`mean_lower_bound`).  A nonnegative metric's mean is bounded below without
any tail assumption: by the one-sided Dvoretzky–Kiefer–Wolfowitz inequality with Massart's constant,
``P(sup_x (F(x) − F_R(x)) > ε) <= exp(−2Rε²)`` for the empirical distribution function ``F_R`` of ``R``
independent values, so with probability ``>= 1 − δ`` the survival function is at least ``S_R(x) − ε`` at every
``x`` (``ε = √(log(1/δ)/(2R))``), and

    E X = floor + ∫ P(X − floor > x) dx >= floor + ∫ (S_R(x) − ε)₊ dx,

the mean of the sample with its top ``εR`` values removed and the next one trimmed.  Heavy tails only make it
conservative: the rare large draws it drops raise the mean.  Where that bound exceeds the SDE's value (its exact
mean, or the upper end of its interval where the SDE's side is sampled and light-tailed) by more than the tolerance
at some time, FedAvg runs away from the SDE: "does not track", with error rate at most ``α/K`` per comparison
whatever the law of the values (``α/(2K)`` for each side where the SDE's is sampled; Bonferroni over the verdict's
``K`` comparisons, as its intervals).  FedAvg *below* the SDE would need an upper bound of a heavy-tailed mean,
which no sample gives: such a metric stays undecided.  The metrics' floors are known (:func:`metric_floor`):
``‖∇F‖²``, ``‖w − w₀‖`` and the accuracy are nonnegative, and so is every training loss of the project's problems
but the quadratic one, whose floor is ``F(w*)``.

References: A. Dvoretzky, J. Kiefer & J. Wolfowitz, Ann. Math. Statist. 27 (1956) 642–669; P. Massart, *The tight
constant in the Dvoretzky–Kiefer–Wolfowitz inequality*, Ann. Probab. 18 (1990) 1269–1283.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fedsde.validity.intervals import richardson_weights
from fedsde.validity.tails import summarise_tails, tail_diagnostic

#: added to the planning basis of ``replicates_needed`` when a judged metric is heavy-tailed
HEAVY_PLANNING = ("; heavy tails: planned from the width the intervals reached, as if the values were light-tailed "
                  "at R' (the heavy-tail check runs again there; a tail too heavy for any R keeps it undecided)")


def divergence_record(known) -> dict:
    """``verdict.divergence`` from a :class:`~fedsde.exact.stability.LeastSquaresStability` (``{}`` for ``None``)."""
    if known is None:
        return {}
    return {"grows": bool(known.grows), "mean_radius": known.mean_radius,
            "second_moment_radius": known.second_moment_radius, "how": "exact", "text": known.growth}


def metric_floor(problem, name: str) -> float | None:
    """A lower bound of the metric ``name`` on ``problem`` that holds for every weight vector (``None``: unknown)."""
    if name in ("grad_norm_sq", "distance_from_start", "test_accuracy"):
        return 0.0
    if name != "train_loss":
        return None
    from fedsde.problems.quadratic import QuadraticProblem

    if isinstance(problem, QuadraticProblem):
        return float(problem.loss(problem.optimum))
    # least squares, logistic/softmax/MLP cross-entropy, module losses (cross-entropy, mse), with l2 >= 0
    return 0.0


def dkw_epsilon(R: int, delta: float) -> float:
    """``ε = √(log(1/δ)/(2R))``: ``P(sup_x (F(x) − F_R(x)) > ε) <= δ`` (one-sided DKW, Massart 1990; ``δ <= 1/2``)."""
    return math.sqrt(math.log(1.0 / min(delta, 0.5)) / (2.0 * R))


def mean_lower_bound(values: np.ndarray, floor: float, delta: float) -> np.ndarray:
    """``floor + ∫ (S_R(x) − ε)₊ dx`` along the last axis (module docstring): a lower confidence bound at level
    ``1 − δ`` of the mean of values ``>= floor``, whatever their law.  Shapes (..., R) → (...)."""
    y = np.sort(np.asarray(values, dtype=np.float64) - floor, axis=-1)
    R = y.shape[-1]
    eps = dkw_epsilon(R, delta)
    steps = np.diff(np.concatenate([np.zeros((*y.shape[:-1], 1)), np.clip(y, 0.0, None)], axis=-1), axis=-1)
    weight = np.clip((R - np.arange(R)) / R - eps, 0.0, None)  # S_R on [y_(j), y_(j+1)) is (R − j)/R
    return floor + steps @ weight


def robust_side(problem, name: str, base_values: np.ndarray, sde_values: np.ndarray | None = None) -> dict | None:
    """What :func:`robust_lower` needs for one metric: FedAvg's per-replicate values (T, R), the metric's floor and,
    where the SDE's side is sampled, its values' tail diagnostic (``None`` without a known floor)."""
    floor = metric_floor(problem, name)
    if floor is None:
        return None
    return {"values": np.asarray(base_values, dtype=np.float64), "floor": floor,
            "sde_tails": None if sde_values is None else tail_diagnostic(sde_values)}


def robust_lower(path, judged: dict, q: float, alpha: float, comparisons: int, times: np.ndarray) -> np.ndarray:
    """The divergence test's lower bound of ``d(t)`` for a heavy-tailed metric (0 where nothing is certified):
    ``(L_FedAvg(t) − U_SDE(t))₊ / scale_upper`` (module docstring)."""
    zero = np.zeros(np.shape(path.estimate))
    rob = path.robust
    if rob is None:
        return zero
    sampled = bool(np.any(np.asarray(path.sde_se) > 0))
    if sampled:  # the SDE's side from chains: its upper end only where its own values are light-tailed
        if rob["sde_tails"] is None or summarise_tails(rob["sde_tails"], times, times > 0)["heavy"]:
            return zero
        upper = np.asarray(path.sde_mean) + q * np.asarray(path.sde_se)  # one-sided at α/(2K)
        delta = alpha / (2.0 * max(1, comparisons))
    else:
        upper, delta = np.asarray(path.sde_mean, dtype=np.float64), alpha / max(1, comparisons)
    low = mean_lower_bound(rob["values"], rob["floor"], delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(low - upper, 0.0, None) / judged["scale_upper"]


def resolve(paths: dict, judged: dict, heavy: set, tails: dict, *, q: float, alpha: float, comparisons: int,
            times: np.ndarray, absolute: dict, judge) -> tuple[dict, set]:
    """The judged entries of the metrics whose sampled intervals cannot be trusted, replaced.

    Where FedAvg's exact mean is known (:attr:`~fedsde.validity.verdict.GapPath.exact`) the exact gap judges a
    metric whose values are heavy-tailed, and one whose sampled bounds of ``d`` exclude the exact ``d`` at some time
    (the sample missed the mean: a tail too rare to show in it, which the share rule cannot see), with
    ``tails[m]["decided_by"] = "exact"`` (and ``"sample_missed"``).  So where the exact side is known a decision is
    never wrong: the bounds kept contain the exact ``d``, and those replaced are it.  A heavy-tailed metric without
    it gets the divergence test's lower bound and an unbounded upper one (``"divergence test"``: it can say "does
    not track", never "tracks").  Returns the new ``judged`` and the metrics still heavy-tailed."""
    judged, still = dict(judged), set()
    active = np.asarray(times) > 0
    for m, p in paths.items():
        if p.exact is not None:
            zero = np.zeros_like(np.asarray(p.exact, dtype=np.float64))
            exact = judge(replace(p, estimate=p.exact, se=zero, sde_se=zero, tails=None), q, 1.0, absolute[m])
            slack = 1e-12 * np.maximum(1.0, np.abs(exact["gap"]))
            missed = bool(np.any(active & ((exact["gap"] < judged[m]["lower"] - slack)
                                           | (exact["gap"] > judged[m]["upper"] + slack))))
            if m in heavy or missed:
                judged[m] = exact
                if m in tails:
                    tails[m]["decided_by"] = "exact"
                    tails[m]["sample_missed"] = missed
            continue
        if m not in heavy:
            continue
        entry = dict(judged[m])
        entry["lower"] = robust_lower(p, entry, q, alpha, comparisons, times)
        entry["upper"] = np.full(entry["lower"].shape, np.inf)
        judged[m] = entry
        tails[m]["decided_by"] = "divergence test" if p.robust is not None else "nothing"
        still.add(m)
    return judged, still


def exact_reason(decided: list[str], tails: dict, R: int, divergence: dict | None) -> str:
    """The clause a verdict adds when the exact side decided metrics (heavy-tailed, or missed by the sample)."""
    heavy = [m for m in decided if tails[m]["heavy"]]
    missed = [m for m in decided if tails[m].get("sample_missed") and not tails[m]["heavy"]]
    k = math.ceil(math.sqrt(R))
    text = ""
    if heavy:
        m = max(heavy, key=lambda x: tails[x]["share"])
        text += (f"; heavy tails: {', '.join(sorted(heavy))} judged on FedAvg's exact moments (the top {k} of R = {R} "
                 f"replicates carry {tails[m]['share']:.0%} of the spread of {m}, so their sample means cannot be "
                 "trusted)")
    if missed:
        text += (f"; {', '.join(sorted(missed))} judged on FedAvg's exact moments: the sampled bounds exclude the "
                 "exact gap (a tail too rare to show in R replicates)")
    if divergence and divergence.get("grows"):
        text += f"; FedAvg's second moment grows without bound ({divergence['text']})"
    return text


def divergence_reason(m: str, lower: float, tol: float) -> str:
    """The clause of a "does not track" decided by the divergence test."""
    return (f"; {m} is heavy-tailed: decided by the divergence test (FedAvg's mean bounded below without tail "
            f"assumptions, DKW: d >= {lower:.3g} > {tol:g})")


def with_exact_side(gaps: dict, exact_means) -> dict:
    """``gaps`` with :attr:`~fedsde.validity.verdict.GapPath.exact` (FedAvg's exact mean minus the SDE's) on every
    metric with an exact mean; ``exact_means`` (a callable: name → (T,) or ``None``; ``None`` when there are none)."""
    fed = exact_means()
    if fed is None:
        return gaps
    out = dict(gaps)
    for m, p in gaps.items():
        if not p.unjudged and fed.get(m) is not None:
            out[m] = replace(p, exact=np.asarray(fed[m], dtype=np.float64) - np.asarray(p.sde_mean))
    return out


def sampled_sides(problem, gaps: dict, values: dict, ells, exact_means=None) -> dict:
    """The sampled gaps with what their heavy tails need: every path's :func:`robust_side` (FedAvg's values
    ``values[m][0]``; the SDE's per-replicate Richardson values where it comes from SVAG chains) and, where
    ``exact_means`` is given and the chain judged is FedAvg (``ℓ = 1``), :func:`with_exact_side`."""
    out = {}
    for m, p in gaps.items():
        if p.unjudged:
            out[m] = p
            continue
        v = values[m]
        sde = None
        if np.any(np.asarray(p.sde_se) > 0) and v.shape[0] >= 2:
            wa, wb = richardson_weights(ells)
            sde = wa * v[-2] + wb * v[-1]
        out[m] = replace(p, robust=robust_side(problem, m, v[0], sde))
    if exact_means is not None and int(ells[0]) == 1:
        out = with_exact_side(out, exact_means)
    return out


__all__ = [
    "HEAVY_PLANNING",
    "divergence_reason",
    "divergence_record",
    "dkw_epsilon",
    "exact_reason",
    "mean_lower_bound",
    "metric_floor",
    "resolve",
    "robust_lower",
    "robust_side",
    "sampled_sides",
    "with_exact_side",
]
