"""The SDE's side of the validity test: its exact law where one exists, else the SVAG chains' limit; the 1/ℓ check.

**Exact reference.**  For quadratic clients seed 002's SDE (2) with the exact round moments is linear with
constant diffusion (reference/seed-fedsde.md §3b, boxed SDE; :func:`fedsde.sde.quadratic_sde_coefficients`,
``variant="corrected"``): ``dw = −(s/h) B (w − c) dt + (s/√h) (Cov ε)^{1/2} dB``, an Ornstein–Uhlenbeck process
whose law from ``w₀`` is Gaussian with closed-form mean and covariance at every ``t``
(:meth:`fedsde.sde.LinearSDE.transition`).  The metrics of a quadratic loss are functions of them
(:func:`gaussian_metric_means`).  A problem kind supplies its own exact SDE law through a method
``exact_sde_law(*, eta, local_steps, server_lr, h) -> LinearSDE`` (and a constant ``hessian`` for a quadratic
loss); :func:`exact_sde_law` looks for it first, then dispatches by kind: :class:`~fedsde.problems.QuadraticProblem`
(the OU law above) and least-squares regression clients (:class:`~fedsde.problems.RegressionProblem`).

**Least-squares clients.**  Their SDE (eq. (2) with the exact round moments of the chain,
:func:`fedsde.exact.least_squares_sde`) has a linear drift and a diffusion quadratic in ``w``: its law is not
Gaussian, but its mean and covariance solve a closed linear ODE (:meth:`fedsde.exact.LeastSquaresSDE.moments`).
``F`` is quadratic with a constant Hessian ``H``, so ``E F(w) = F(m) + ½ tr(H P)`` and ``E‖∇F(w)‖² = ‖∇F(m)‖² +
tr(H P H)`` hold for any law with mean ``m`` and covariance ``P`` (:func:`moment_metric_means`).  ``E‖w − w₀‖`` is
not a function of the first two moments of a non-Gaussian law; against the exact reference it is left out of the
verdict with that reason (``skipped``; :attr:`fedsde.validity.verdict.GapPath.unjudged`), and the SVAG reference
(``reference="svag"``) judges it.

**SVAG reference.**  The order-1 Richardson limit ``E_∞ ≈ w_a E_{ℓ_a} + w_b E_{ℓ_b}`` of the two largest ``ℓ``
(Li, Malladi & Arora 2021).  Its difference with the chain judged is averaged over **paired** per-replicate
differences (replicate ``r`` of every chain), so its standard error is right whether or not the chains share
random numbers (:func:`svag_gaps`).

**The 1/ℓ check** (:func:`ell_ratios`): where ``E_ℓ = E_∞ + C/ℓ``, successive gaps ``g_j = E_{ℓ_j} − E_{ℓ_{j+1}}``
stand in the ratio ``ρ_j = (1/ℓ_j − 1/ℓ_{j+1})/(1/ℓ_{j+1} − 1/ℓ_{j+2})`` (2 for doubling ``ℓ``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.integrate

from fedsde._validate import positive_float, start_point
from fedsde.errors import FedsdeInputError
from fedsde.params import Schedule
from fedsde.validity.tails import tail_diagnostic
from fedsde.validity.verdict import GapPath, bonferroni_quantile, richardson_weights

#: metrics with a closed form under a Gaussian law of the weights (quadratic loss)
GAUSSIAN_METRICS = ("train_loss", "grad_norm_sq", "distance_from_start")
REFERENCES = ("exact", "svag")


def exact_sde_law(problem, schedule: Schedule | None = None, *, eta: float | None = None, local_steps=None,
                  server_lr: float = 1.0, h: float | None = None, order: int = 1):
    """The SDE (2) of ``problem`` with an exact law: a :class:`fedsde.sde.LinearSDE`, a
    :class:`fedsde.exact.LeastSquaresSDE` (least-squares clients), or ``None``.

    The rates and ``h``: a :class:`~fedsde.params.Schedule` (checked where it was built; ``h`` defaults to a
    constant ``eta``), or the keywords ``eta``, ``local_steps``, ``server_lr``, ``h`` (checked here).

    A problem's own ``exact_sde_law(eta=, local_steps=, server_lr=, h=)`` comes first; quadratic clients get
    the ``corrected`` variant (eq. (2) with the exact round moments, seed 002 §3b), least-squares clients
    :func:`fedsde.exact.least_squares_sde` (the same equation with their exact round moments).  ``order=2``: the
    order-2 SDE of :mod:`fedsde.sde.order2` (its ``round-law`` form, the command line's) on quadratic and
    least-squares clients, ``None`` elsewhere (a problem's own law is of order 1).
    """
    if schedule is not None:
        eta, local_steps, server_lr, h = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.time_step
    if order not in (1, 2):
        raise FedsdeInputError(f"order={order!r}: must be 1 or 2")
    if order == 2:
        if _is_least_squares(problem):
            from fedsde.sde.order2 import least_squares_order2_sde

            problem.optimum  # noqa: B018 — a one-line error when the solution is not unique (singular Hessian)
            return least_squares_order2_sde(problem, eta, local_steps, server_lr, h)
        if _is_quadratic(problem):
            from fedsde.sde.order2 import order2_sde_coefficients

            return order2_sde_coefficients(problem, eta, local_steps, server_lr, h)
        return None
    own = getattr(problem, "exact_sde_law", None)
    if callable(own):
        return own(eta=eta, local_steps=local_steps, server_lr=server_lr, h=h)
    if _is_least_squares(problem):
        from fedsde.exact import least_squares_sde

        problem.optimum  # noqa: B018 — a one-line error when the solution is not unique (singular Hessian)
        if schedule is not None:  # its rates and h, checked where it was built
            return least_squares_sde(problem, schedule)
        return least_squares_sde(problem, eta, local_steps, server_lr, h)
    from fedsde.problems.quadratic.problem import QuadraticProblem

    if isinstance(problem, QuadraticProblem):
        from fedsde.sde import quadratic_sde_coefficients

        return quadratic_sde_coefficients(problem, schedule or eta, local_steps, server_lr, h, variant="corrected")
    return None


def resolve_reference(problem, reference: str | None) -> str:
    """``reference`` checked against ``problem``: ``"exact"`` where an exact law exists, else ``"svag"``."""
    has_exact = (callable(getattr(problem, "exact_sde_law", None)) or _is_quadratic(problem)
                 or _is_least_squares(problem))
    if reference is None:
        return "exact" if has_exact else "svag"
    if reference not in REFERENCES:
        raise FedsdeInputError(f"reference={reference!r}: must be one of {', '.join(REFERENCES)}")
    if reference == "exact" and not has_exact:
        raise FedsdeInputError(f"reference='exact': no exact law of the SDE for a {type(problem).__name__} (only "
                               "quadratic and least-squares regression clients have one); use the SVAG reference "
                               "('svag')")
    return reference


def _is_quadratic(problem) -> bool:
    from fedsde.problems.quadratic.problem import QuadraticProblem

    return isinstance(problem, QuadraticProblem)


def _is_least_squares(problem) -> bool:
    """Least-squares regression clients (:class:`~fedsde.problems.RegressionProblem`), by their declared model."""
    return getattr(problem, "model", None) == "least-squares" and hasattr(problem, "padded_rows")


def gaussian_norm_mean(mean: np.ndarray, cov: np.ndarray) -> float:
    """``E‖X‖`` for ``X ~ N(mean, cov)`` (any ``d``), by one quadrature of the Laplace transform of ``‖X‖²``.

    ``√y = (1/(2√π)) ∫₀^∞ (1 − e^{−sy}) s^{−3/2} ds`` (substitute ``u = sy``: ``∫(1 − e^{−u}) u^{−3/2} du = 2√π``)
    and the Laplace transform of a non-central quadratic form of a Gaussian, ``E e^{−s‖X‖²} =
    Π_i (1 + 2sλ_i)^{−1/2} exp(−s ν_i²/(1 + 2sλ_i))`` (``λ``, ``V``: eigenpairs of ``cov``; ``ν = Vᵀ mean``), so
    ``E‖X‖ = (1/√π) ∫₀^∞ (1 − E e^{−x²‖X‖²}) x^{−2} dx``.
    """
    lam, V = np.linalg.eigh(0.5 * (cov + cov.T))
    lam = np.clip(lam, 0.0, None)
    nu2 = (V.T @ mean) ** 2
    second = float(nu2.sum() + lam.sum())  # E‖X‖²
    if second == 0.0:
        return 0.0
    # E‖X‖ = √E‖X‖² · E‖X/√E‖X‖²‖: the quadrature runs on the standardised law (E‖·‖² = 1), whose integrand changes
    # over x ~ 1 whatever the scale (a law of size 1e-20, as at a tiny η, would otherwise hand QUADPACK values near
    # its underflow guards)
    lam, nu2 = lam / second, nu2 / second

    def integrand(x: float) -> float:
        s = x * x
        den = 1.0 + 2.0 * s * lam
        log_mgf = -0.5 * np.sum(np.log(den)) - s * np.sum(nu2 / den)
        return -math.expm1(log_mgf) / s if s > 0 else 1.0

    val = sum(scipy.integrate.quad(integrand, a, b, limit=200, epsabs=0.0, epsrel=1e-11)[0]
              for a, b in ((0.0, 1.0), (1.0, 10.0), (10.0, np.inf)))
    return float(math.sqrt(second) * val / math.sqrt(math.pi))


def gaussian_metric_means(problem, mean: np.ndarray, cov: np.ndarray, w0: np.ndarray, names) -> dict:
    """``E φ(w)`` for ``w ~ N(mean, cov)`` on a quadratic loss, at every time.

    For ``F = Σ_k p_k ½ (w − a_k)ᵀ U_k (w − a_k) + const`` (seed 002, Assumption 6.1 and A.10):
    ``E F(w) = Σ_k p_k ½ tr(U_k (C + (m − a_k)(m − a_k)ᵀ)) + const = F(m) + ½ tr(H C)`` with ``H = Σ_k p_k U_k``;
    ``E‖∇F(w)‖² = ‖∇F(m)‖² + tr(H C H)`` (``∇F(w) = H (w − w*)``); ``E‖w − w₀‖`` by
    :func:`gaussian_norm_mean` (``H``: the constant Hessian; any constant in the loss enters through
    ``problem.loss``).  Shapes: mean (T, d), cov (T, d, d) → name → (T,).
    """
    bad = [m for m in names if m not in GAUSSIAN_METRICS]
    if bad:
        raise FedsdeInputError(f"verdict_metrics={bad}: no closed form under the SDE's exact law (closed forms: "
                               f"{', '.join(GAUSSIAN_METRICS)}); use reference='svag' or leave them out")
    H = np.asarray(problem.hessian, dtype=np.float64)
    out = {}
    if "train_loss" in names:
        out["train_loss"] = np.asarray(problem.loss(mean), dtype=np.float64).reshape(-1) + 0.5 * np.einsum(
            "ij,tji->t", H, cov)
    if "grad_norm_sq" in names:
        g = np.asarray(problem.grad(mean), dtype=np.float64)
        out["grad_norm_sq"] = np.sum(g * g, axis=-1) + np.einsum("ij,tjk,ki->t", H, cov, H)
    if "distance_from_start" in names:
        out["distance_from_start"] = np.array([gaussian_norm_mean(m - w0, C) for m, C in zip(mean, cov,
                                                                                            strict=True)])
    return {m: out[m] for m in names}


#: why ``‖w − w₀‖`` has no exact value under the least-squares SDE's law (the verdict's ``skipped``)
NO_NORM_MEAN = ("E‖w − w₀‖ is not a function of the mean and covariance of the least-squares SDE's law (not "
                "Gaussian: its diffusion depends on w); judge it against the SVAG reference (reference='svag')")


def moment_metric_means(problem, mean: np.ndarray, cov: np.ndarray, names) -> dict:
    """``E φ(w)`` for a law with mean ``m`` and covariance ``P`` (any law) on a loss quadratic in ``w`` with a constant
    Hessian ``H`` (least squares, :class:`~fedsde.problems.RegressionProblem`).

    ``E F(w) = F(m) + ½ tr(H P)`` and ``E‖∇F(w)‖² = ‖∇F(m)‖² + tr(H P H)`` (``∇F(w) = H (w − w*)``; the same
    algebra as :func:`gaussian_metric_means`, which needs no Gaussianity for these two); ``distance_from_start``:
    ``None`` (:data:`NO_NORM_MEAN`).  Shapes: mean (T, d), cov (T, d, d) → name → (T,) or ``None``.
    """
    bad = [m for m in names if m not in GAUSSIAN_METRICS]
    if bad:
        raise FedsdeInputError(f"verdict_metrics={bad}: no closed form under the SDE's exact law (closed forms: "
                               f"{', '.join(GAUSSIAN_METRICS[:2])}); use reference='svag' or leave them out")
    H = np.asarray(problem.hessian(), dtype=np.float64)
    out: dict = {}
    for m in names:
        if m == "train_loss":
            out[m] = np.asarray(problem.loss(mean), dtype=np.float64).reshape(-1) + 0.5 * np.einsum("ij,tji->t", H,
                                                                                                   cov)
        elif m == "grad_norm_sq":
            g = np.asarray(problem.grad(mean), dtype=np.float64)
            out[m] = np.sum(g * g, axis=-1) + np.einsum("ij,tjk,ki->t", H, cov, H)
        else:
            out[m] = None
    return out


def exact_sde_paths(problem, law, rounds, h: float, w0, names) -> dict:
    """``E φ_SDE(t)`` at ``t = n·h`` for the grid rounds ``n`` (increasing, from 0), from the SDE's exact law.

    A :class:`~fedsde.sde.LinearSDE`: steps the Gaussian law with the exact transition of every distinct spacing
    (:meth:`LinearSDE.transition`).  A :class:`~fedsde.exact.LeastSquaresSDE`: its exact mean and covariance at the
    grid times (:meth:`~fedsde.exact.LeastSquaresSDE.moments`) through :func:`moment_metric_means` (``None`` for a
    metric without a value).  ``rounds`` (sorted integers ``>= 0``), ``h > 0`` and the start point ``w0`` (``None``,
    a number or (d,)) are checked here; the validity tests, which checked them already, call the unchecked core.
    """
    r = np.asarray(rounds)
    if r.ndim != 1 or r.size == 0 or not np.issubdtype(r.dtype, np.number) or not np.all(np.isfinite(r)) \
            or np.any(r < 0) or np.any(r != np.round(r)) or np.any(np.diff(r) < 0):
        raise FedsdeInputError(f"rounds: {r.tolist()!r} must be a sorted, non-empty grid of integers >= 0")
    return checked_exact_sde_paths(problem, law, r.astype(np.int64), positive_float("h", h),
                                   start_point(w0, problem.d), names)


def checked_exact_sde_paths(problem, law, rounds: np.ndarray, h: float, w0: np.ndarray, names) -> dict:
    """:func:`exact_sde_paths` from checked input: ``rounds`` the sorted integer grid, ``h > 0`` and ``w0`` (d,)
    from :func:`fedsde._validate.start_point`, none checked again (the validity tests' exact side)."""
    if hasattr(law, "generator"):  # least squares: moments from the closed linear moment ODE
        d = w0.shape[0]  # the grid and the start checked by the caller
        mom = law.moments_from(np.asarray(rounds, dtype=np.float64) * h, w0, np.zeros((d, d)))
        return moment_metric_means(problem, mom.mean, mom.cov, names)
    d = w0.shape[0]
    means, covs = np.empty((rounds.size, d)), np.empty((rounds.size, d, d))
    m, P = w0.astype(np.float64), np.zeros((d, d))
    cache: dict[int, tuple] = {}
    prev = 0
    for i, n in enumerate(np.asarray(rounds, dtype=np.int64)):
        step = int(n) - prev
        if step:
            if step not in cache:
                cache[step] = law.transition(step * h)
            Phi, K = cache[step]
            m = law.c + Phi @ (m - law.c)
            P = Phi @ P @ Phi.T + K
        means[i], covs[i] = m, 0.5 * (P + P.T)
        prev = int(n)
    return gaussian_metric_means(problem, means, covs, w0, names)


def exact_gaps(values: dict, sde: dict) -> dict:
    """:class:`GapPath` per metric: the base chain's per-replicate values (T, R) against the exact means (T,); a
    metric whose exact mean is ``None`` is marked ``unjudged`` (:data:`NO_NORM_MEAN`)."""
    out = {}
    for m, mean in sde.items():
        v = values[m]
        R = v.shape[-1]
        if mean is None:
            nan = np.full(v.shape[0], np.nan)
            out[m] = GapPath(estimate=nan, se=nan, sde_mean=nan, sde_se=nan, unjudged=NO_NORM_MEAN)
            continue
        out[m] = GapPath(estimate=v.mean(-1) - mean, se=v.std(-1, ddof=1) / math.sqrt(R), sde_mean=mean,
                         sde_se=np.zeros_like(mean), tails=tail_diagnostic(v))
    return out


def svag_gaps(ells, values: dict, names) -> dict:
    """:class:`GapPath` per metric from the chains: the smallest ``ℓ`` against the Richardson limit of the two
    largest, by paired per-replicate differences.  ``values``: name → (L, T, R)."""
    wa, wb = richardson_weights(ells)
    out = {}
    for m in names:
        v = values[m]
        R = v.shape[-1]
        ref = wa * v[-2] + wb * v[-1]  # (T, R)
        diff = v[0] - ref
        out[m] = GapPath(estimate=diff.mean(-1), se=diff.std(-1, ddof=1) / math.sqrt(R), sde_mean=ref.mean(-1),
                         sde_se=ref.std(-1, ddof=1) / math.sqrt(R), tails=tail_diagnostic(diff))
    return out


def ell_ratios(ells, times: np.ndarray, values: dict, names, *, alpha: float, detect: dict | None = None) -> dict:
    """The 1/ℓ report: successive SVAG gaps and whether they keep the ratio the extrapolation assumes.

    For each metric and successive triple ``(ℓ_j, ℓ_{j+1}, ℓ_{j+2})``: per replicate
    ``r = g_j − ρ_j g_{j+1}`` (zero in expectation where ``E_ℓ = E_∞ + C/ℓ``), its mean and s.e. over replicates
    at every time ``t > 0``; the triple is **off** where some ``|r̄| > q·se`` (Student ``t``, Bonferroni over
    metrics × times × triples).  Only triples without the smallest ``ℓ`` (the chain judged) are **decisive**: the
    Richardson reference rests on the larger ones.  Each row reports the ratio ``g_j/g_{j+1}`` at the time where
    ``g_{j+1}`` is best resolved.

    **Power** (with ``detect``: metric → the tolerance in the metric's units, ``tol·scale``).  A check that cannot
    see a failure of the size that matters must not report "ok".  The failure that matters: a second-order term,
    ``E_ℓ = E_∞ + C/ℓ + D/ℓ²``, large enough to move the Richardson limit of the two largest ``ℓ_a < ℓ_b`` (whose
    error is ``−D/(ℓ_a ℓ_b)``) by the tolerance, ``|D| = tol·scale·ℓ_a·ℓ_b``.  It shifts triple ``j``'s residual
    by ``c_j·D`` with ``c_j = (ℓ_j⁻² − ℓ_{j+1}⁻²) − ρ_j (ℓ_{j+1}⁻² − ℓ_{j+2}⁻²)`` (``3/32`` for ``2, 4, 8``).  A
    decisive triple has **power** when that shift reaches its simultaneous interval at every grid time,
    ``|c_j|·|D| ≥ q·se(r̄)(t)`` (about even odds of detection, more where the interval is narrower).  Unless it is
    off, the regime is "ok" only when every metric has a decisive triple with power; otherwise it is "not
    checked" with the note "too few replicates …".  Row keys ``detectable`` (``|c_j|·|D|``), ``half_width``
    (largest ``q·se(r̄)``) and ``power``.

    Returns
    -------
    dict
        ``status`` (``"ok"``, ``"off"``, ``"not checked"``), ``note`` (one line) and ``ratios`` (rows: metric,
        ells, expected, ratio, time, z (largest ``|r̄|/se``), off, decisive, and with ``detect`` detectable,
        half_width, power).
    """
    L = len(ells)
    if L < 3:
        return {"status": "not checked", "note": "needs three values of ℓ", "ratios": []}
    inv = 1.0 / np.asarray(ells, dtype=np.float64)
    active = np.asarray(times) > 0
    triples = list(range(L - 2))
    decisive = [j for j in triples if j >= 1]
    R = next(iter(values.values())).shape[-1]
    K = max(1, len(names) * int(active.sum()) * len(triples))
    q = bonferroni_quantile(alpha, K, R - 1)
    rows = []
    big = float(ells[-2]) * float(ells[-1])
    for m in names:
        v = values[m]
        for j in triples:
            rho = (inv[j] - inv[j + 1]) / (inv[j + 1] - inv[j + 2])
            c_j = (inv[j] ** 2 - inv[j + 1] ** 2) - rho * (inv[j + 1] ** 2 - inv[j + 2] ** 2)
            g1, g2 = v[j] - v[j + 1], v[j + 1] - v[j + 2]  # (T, R)
            r = g1 - rho * g2
            rm, rs = r.mean(-1), r.std(-1, ddof=1) / math.sqrt(R)
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(rs > 0, np.abs(rm) / rs, np.where(rm == 0, 0.0, np.inf))
                res2 = np.abs(g2.mean(-1)) / (g2.std(-1, ddof=1) / math.sqrt(R))
            ti = int(np.argmax(np.where(active, np.nan_to_num(res2, nan=-1.0, posinf=1e300), -np.inf)))
            den = g2.mean(-1)[ti]
            rows.append({"metric": m, "ells": [int(ells[j]), int(ells[j + 1]), int(ells[j + 2])],
                         "expected": float(rho), "ratio": float(g1.mean(-1)[ti] / den) if den != 0 else math.nan,
                         "time": float(times[ti]), "z": float(np.max(z[active], initial=0.0)),
                         "off": bool(np.any(z[active] > q)), "decisive": j in decisive})
            if detect is not None and m in detect:
                half = float(np.max(q * rs[active], initial=0.0))
                size = abs(float(c_j)) * float(detect[m]) * big
                rows[-1] |= {"detectable": size, "half_width": half, "power": bool(half <= size)}
    bad = [r for r in rows if r["decisive"] and r["off"]]
    if not decisive:
        return {"status": "not checked", "note": "needs three values of ℓ besides the chain judged", "ratios": rows}
    if bad:
        b = max(bad, key=lambda r: r["z"])
        note = (f"{b['metric']}: gap ratio {b['ratio']:.3g} for ℓ = {', '.join(map(str, b['ells']))} where "
                f"{b['expected']:.3g} is expected, |z| = {b['z']:.3g} > {q:.3g}")
        return {"status": "off", "note": note, "ratios": rows}
    weak = [m for m in names if detect is not None and m in detect
            and not any(r["power"] for r in rows if r["metric"] == m and r["decisive"])]
    if weak:
        r = min((r for r in rows if r["metric"] == weak[0] and r["decisive"]), key=lambda r: r["half_width"])
        note = (f"too few replicates: a departure from the 1/ℓ regime that would move the Richardson limit by the "
                f"tolerance ({', '.join(weak)}: residual {r['detectable']:.3g} for ℓ = "
                f"{', '.join(map(str, r['ells']))}) is within the check's simultaneous interval "
                f"(±{r['half_width']:.3g})")
        return {"status": "not checked", "note": note, "ratios": rows}
    return {"status": "ok", "note": "successive SVAG gaps keep the 1/ℓ ratio within noise", "ratios": rows}


def check_order(problem, order: int, reference: str) -> int:
    """``order`` (1 or 2) checked against the reference: the order-2 SDE's value is its exact law, which exists on
    quadratic and least-squares clients; the SVAG chains sample the first-order SDE only."""
    if isinstance(order, bool) or order not in (1, 2):
        raise FedsdeInputError(f"order={order!r}: must be 1 or 2")
    if order == 2 and not (_is_quadratic(problem) or _is_least_squares(problem)):
        raise FedsdeInputError(f"order=2: the order-2 SDE's value is its exact law, which a {type(problem).__name__} "
                               "does not have (quadratic and least-squares clients do; the SVAG chains sample the "
                               "first-order SDE); measure it against FedAvg with `fedsde compare --order 2`")
    if order == 2 and reference != "exact":
        raise FedsdeInputError(f"order=2: needs reference='exact' (its exact law), not {reference!r} (the SVAG chains "
                               "sample the first-order SDE)")
    return int(order)
