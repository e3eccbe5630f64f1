"""Heavy tails of the per-replicate values behind the validity test's intervals: a diagnostic and its rule.

The sampled test's intervals ``D̂ ± q·se`` (:mod:`fedsde.validity.verdict`) rest on the mean of ``R`` per-replicate
values being near-normal with a standard error that reflects their spread.  When one replicate carries most of the
spread, neither holds: the mean is governed by rare draws that a sample of ``R`` mostly misses (the typical sample
mean of a right-heavy variable lies *below* its expectation, with a standard error that is too small), and the
interval's coverage fails silently.  FedAvg produces such values where some minibatch paths expand (products of
random local-step matrices with norm above 1): on Grunfeld at ``η = 0.15``, ``E = 10`` the per-replicate train loss
has median 0.20 and a maximum of 884 in ``2·10⁵`` replicates, and Student-t intervals from ``R = 200`` exclude the
exact mean in about half the seeds.

**Diagnostic**, per judged metric and grid time ``t > 0``, from the ``R`` per-replicate values ``x`` whose mean is
``D̂`` (:func:`tail_diagnostic`):

* ``share`` — the share of the sum of squared deviations ``Σ_r (x_r − x̄)²`` (the variance estimate behind ``se``)
  carried by its ``k = ⌈√R⌉`` largest terms (:func:`top_share`);
* ``hill`` — Hill's (1975) estimate ``α̂ = 1 / mean_{i ≤ k} log(y_(i)/y_(k+1))`` of the tail index of
  ``y = |x − median x|`` from its ``k`` largest values (reported, not used by the rule: at ``R = 200`` it has a
  relative noise of about ``1/√k ≈ 27 %`` and reads 2–4 on exponential tails, so it does not separate them from the
  heavy ones).

**Rule** (:func:`share_threshold`): the values are *heavy-tailed* where ``share`` exceeds ``τ(R)``, the upper
``β = 10⁻³`` quantile of the share in samples of ``R`` independent ``χ²₁`` draws (squared standard normals).  The
metrics judged on quadratic and least-squares problems are quadratic forms of the weights; for Gaussian weights such
a form is a weighted sum of (non-central) ``χ²`` variables, whose relative tail is heaviest when one term dominates
— a ``χ²₁``.  So a sample that a Gaussian law of the weights would produce more rarely than once in a thousand is
flagged.  The top ``√R`` terms, not the single largest, are counted because the tail's weight, not one draw, is what
the sample mean misses: at ``R = 200`` the single largest share flags 41 % of lognormal(σ = 2) samples, the
top-``√R`` share 97 %.  ``τ(R)`` is tabulated by simulation (:data:`SHARE_TABLE`, seed 20261127, ``4·10⁵`` samples
per ``R`` below 256, ``2·10⁵`` to 1024, ``5·10⁴`` above; between two entries the larger of the two, above the last
the last, which only lowers the rule's power).  Below ``R = 16`` the rule is not applied (it has
no power there, and the top ``⌈√R⌉`` of fewer than 16 values exceed ``τ`` more often for Gaussian values than for
``χ²₁`` ones: 0.7 % of samples at ``R = 8``); the verdict reports that (``tails.checked``, :func:`checkable`).

What a flag does is decided by the verdict (:func:`fedsde.validity.verdict.validity_verdict`): a heavy-tailed
metric's intervals decide nothing, because no interval from ``R`` values certifies where a mean dominated by draws
rarer than ``1/R`` lies.  Where FedAvg's exact moments are known they judge it instead; otherwise only a
distribution-free lower bound can still say "does not track" (:mod:`fedsde.validity.heavy`), and the verdict is
"inconclusive — heavy tails" with these numbers.  Coverage of the rule is checked by
simulation on Pareto, lognormal, normal, exponential and ``χ²₁`` values (``tests/test_validity_tails.py``).

References: B. M. Hill, *A simple general approach to inference about the tail of a distribution*, Ann. Statist.
3 (1975) 1163–1174; on the failure of the t interval under heavy tails and skewness, P. Hall, *The Bootstrap and
Edgeworth Expansion*, Springer (1992), Sec. 3.
"""

from __future__ import annotations

import math

import numpy as np

#: level of the share rule: the chance that R squared Gaussians are flagged
SHARE_LEVEL = 1e-3
#: ``τ(R)``: the upper :data:`SHARE_LEVEL` quantile of the top-``⌈√R⌉`` share of the sum of squared deviations in
#: samples of ``R`` independent χ²₁ draws (simulated, see the module docstring), to 4 digits
SHARE_TABLE = {16: 0.9494, 24: 0.9429, 32: 0.9348, 48: 0.9199,
               64: 0.9076, 96: 0.8899, 128: 0.8733, 192: 0.8394, 256: 0.8103, 384: 0.7644, 512: 0.7282,
               768: 0.6732, 1024: 0.6313, 1536: 0.5780, 2048: 0.5368, 3072: 0.4812, 4096: 0.4441}


def share_threshold(R: int) -> float:
    """``τ(R)``: above it the top-``⌈√R⌉`` share of the sum of squared deviations of ``R`` values is heavy-tailed
    (see the module docstring)."""
    keys = sorted(SHARE_TABLE)
    if R < keys[0]:
        return 1.0  # never exceeded
    if R >= keys[-1]:
        return float(SHARE_TABLE[keys[-1]])
    lo = max(k for k in keys if k <= R)
    hi = min(k for k in keys if k >= R)
    return float(max(SHARE_TABLE[lo], SHARE_TABLE[hi]))


def hill_index(x: np.ndarray, k: int | None = None) -> np.ndarray:
    """Hill's tail-index estimate of ``|x − median x|`` along the last axis from its ``k`` largest values
    (default ``⌈√R⌉``); ``inf`` where the top values do not spread (e.g. constant values)."""
    x = np.asarray(x, dtype=np.float64)
    R = x.shape[-1]
    k = min(R - 1, max(1, math.ceil(math.sqrt(R)) if k is None else int(k)))
    if k < 1:
        return np.full(x.shape[:-1], np.inf)
    y = np.sort(np.abs(x - np.median(x, axis=-1, keepdims=True)), axis=-1)[..., ::-1]
    ref = y[..., k:k + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(y[..., :k] / ref)
        mean = np.mean(logs, axis=-1)
        out = np.where((ref[..., 0] > 0) & (mean > 0), 1.0 / mean, np.inf)
    return out


def top_share(x: np.ndarray, k: int | None = None) -> np.ndarray:
    """The share of ``Σ_r (x_r − x̄)²`` carried by its ``k`` largest terms (default ``⌈√R⌉``) along the last axis
    (0 where every value is the same)."""
    x = np.asarray(x, dtype=np.float64)
    R = x.shape[-1]
    k = min(R, max(1, math.ceil(math.sqrt(R)) if k is None else int(k)))
    d2 = (x - x.mean(axis=-1, keepdims=True)) ** 2
    tot = d2.sum(axis=-1)
    top = -np.partition(-d2, k - 1, axis=-1)[..., :k]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tot > 0, top.sum(axis=-1) / tot, 0.0)


def tail_diagnostic(x: np.ndarray) -> dict:
    """The diagnostic of values ``x`` (T, R): ``share`` (T,), ``hill`` (T,), ``threshold`` (``τ(R)``),
    ``replicates`` (``R``) and ``skew`` (T,), the sample skewness used by :func:`skew_corrected`."""
    x = np.asarray(x, dtype=np.float64)
    R = x.shape[-1]
    d = x - x.mean(axis=-1, keepdims=True)
    m2 = np.mean(d * d, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(m2 > 0, np.mean(d**3, axis=-1) / m2**1.5, 0.0)
    return {"share": top_share(x), "hill": hill_index(x), "threshold": share_threshold(R), "replicates": R,
            "skew": skew}


def _hall_inverse(y: float, a: np.ndarray) -> np.ndarray:
    """``g⁻¹(y)`` for Hall's ``g(t) = t + a t² + a² t³/3 + a/2 = ((1 + a t)³ − 1)/(3a) + a/2`` (``y`` at ``a = 0``)."""
    small = np.abs(a) < 1e-12
    safe = np.where(small, 1.0, a)
    return np.where(small, y, (np.cbrt(1.0 + 3.0 * safe * (y - safe / 2.0)) - 1.0) / safe)


def skew_corrected(est: np.ndarray, se: np.ndarray, q: float, diag: dict | None,
                   factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The interval ``[lo, hi]`` of a mean at the two-sided quantile ``q``, corrected for the skewness of the values.

    Hall (1992, *On the removal of skewness by transformation*, J. R. Statist. Soc. B 54, 221–228): for the
    studentised mean ``T = (x̄ − μ)/se`` and ``a = γ̂/(3√n)`` (``γ̂`` the sample skewness), ``g(T) = T + aT² + a²T³/3
    + a/2`` is normal to second order, and ``g`` is monotone, so ``μ ∈ [x̄ − se·g⁻¹(q), x̄ − se·g⁻¹(−q)]``.  A
    right-skewed sample (``γ̂ > 0``), whose mean tends to fall short of ``μ``, gets a longer upper side.  ``n`` is
    the diagnostic's ``R`` divided by ``factor²`` (the replicates an s.e. scaled by ``factor`` stands for); without
    a diagnostic (``diag`` ``None``, or no ``skew``) the interval is ``est ± q·se``.  Simulated at ``R = 200`` and the
    Bonferroni level ``0.05/40``, it misses ``χ²₁`` means in 0.13 % of samples (Student ``t``: 0.47 %) and
    lognormal(σ = 1.5) means in 0.6 % (``t``: 3.4 %).
    """
    if diag is None or "skew" not in diag:
        return est - q * se, est + q * se
    a = np.asarray(diag["skew"], dtype=np.float64) / (3.0 * math.sqrt(diag["replicates"] / factor**2))
    return est - se * _hall_inverse(q, a), est - se * _hall_inverse(-q, a)


def checkable(R: int) -> bool:
    """Whether the rule is applied at ``R`` (``R >= 16``, the first entry of :data:`SHARE_TABLE`)."""
    return share_threshold(R) < 1.0


def summarise_tails(diag: dict, times: np.ndarray, active: np.ndarray) -> dict:
    """The verdict's summary of one metric's tail diagnostic: at the time of its largest share."""
    share = np.asarray(diag["share"], dtype=np.float64)
    thr = float(diag["threshold"])
    i = int(np.argmax(np.where(active, share, -np.inf))) if active.any() else 0
    flagged = active & (share > thr)
    return {"heavy": bool(flagged.any()), "share": float(share[i]), "threshold": thr,
            "hill": float(np.asarray(diag["hill"])[i]), "time": float(times[i]), "times_flagged": int(flagged.sum()),
            "checked": checkable(int(diag["replicates"]))}


def heavy_reason(heavy: set, tails: dict, base: str, T: float, R: int, fallback: str,
                 needed: int | None = None) -> str:
    """'inconclusive — heavy tails': the metric whose largest share is largest, with the diagnostic's numbers, and
    the replicates the intervals' achieved width plans for (``needed``)."""
    m = max(heavy, key=lambda k: tails[k]["share"])
    tl = tails[m]
    k = math.ceil(math.sqrt(R))
    text = (f"whether the SDE tracks {base} on [0, {T:.4g}] is undecided: heavy tails — the top {k} of R = {R} "
            f"replicates carry {tl['share']:.0%} of the spread of {m} at t = {tl['time']:.4g} (at most "
            f"{tl['threshold']:.0%} for Gaussian weights at level 1e-3; Hill tail index {tl['hill']:.2g}; flagged "
            f"at {tl['times_flagged']} times), so its mean and s.e. from R replicates cannot be trusted and "
            f"{', '.join(sorted(heavy))} cannot say \"tracks\" (and no divergence test says \"does not track\")")
    if needed is not None:
        text += (f"; about {needed} replicates per chain would decide from the width the intervals reached, if the "
                 "values are no longer heavy-tailed there (the check runs again)")
    rest = fallback.split("; not judged:", 1)
    return text + ("; not judged:" + rest[1] if len(rest) == 2 else "")

