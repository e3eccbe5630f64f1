"""Weak error ``|E φ(w_n) − E φ(w(n·h))|`` between the discrete chain and an SDE, and its order in the step.

Test functions ``φ``: ``"dist2"`` = ``‖w − w*‖²`` and ``"loss"`` = ``F(w)`` (with its constant, so ``F(w*) = F*``),
or any callable of ``w`` (Monte-Carlo only).

* **Exact** (quadratic clients): both expectations from exact moments, ``E‖w − w*‖² = ‖m − w*‖² + Tr P`` and
  ``E F(w) = F(m) + ½ Tr(H P)``; the chain from :func:`fedsde.exact.transient_moments`, the SDE from its moment
  ODEs (:func:`fedsde.compare.moments.sde_moments`).  No sampling.
* **Monte-Carlo** (any loss with a gradient oracle): the difference of sample means with a normal confidence
  interval.

Step refinement (:func:`weak_error_vs_step`): fixed end time ``t`` (clock ``t = n·h``), fixed client rate ``η`` and
local steps ``E``, fixed server rate ``η₀``; the step ``h`` shrinks, so the server step ``s = h·η₀ → 0`` and
``n = t/h`` rounds.  Two noise scalings:

* ``"fixed"`` — the problem as given.  The chain's per-round noise ``s²·Cov ε`` then vanishes like ``h²`` and its
  covariance like ``h``: a small-noise limit, in which *every* SDE with the right drift (even the ODE, and the
  ``paper`` variant) has weak error ``O(h)``; the corrected SDE's is smaller by the size of the diffusion error.
* ``"diffusive"`` — the gradient-noise covariances are scaled by ``h_ref/h`` (``h_ref`` = the largest step), so
  the noise injected per unit time is fixed and the chain is the Euler–Maruyama scheme, with step ``h``, of one
  fixed SDE.  The corrected SDE's weak error is then ``O(h)``; a wrong diffusion (``paper``) leaves an error
  that does not vanish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.stats

from fedsde._compat import renamed
from fedsde._stats import SLOPE_LEVEL, SlopeFit, fit_slope_interval
from fedsde._validate import positive_float
from fedsde.compare.moments import initial_law
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import Moments, transient_moments
from fedsde.params import (
    DEFAULT_INTEGRATOR,
    DEFAULT_RECORDING,
    Integrator,
    Precision,
    Replication,
    StepRefinement,
    derive,
    takes_values,
)
from fedsde.params.refinement import rounds_for as _rounds_for
from fedsde.params.refinement import step_sizes as _step_sizes
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.coefficients import quadratic_sde_coefficients

#: named test functions
PHIS = ("dist2", "loss")
#: noise scalings of the step refinement
NOISE_SCALINGS = ("fixed", "diffusive")


def _check_phi(phi) -> None:
    if not callable(phi) and phi not in PHIS:
        raise FedsdeInputError(f"phi={phi!r}: must be one of {', '.join(PHIS)} or a callable of w")


def expected_phi(problem: QuadraticProblem, mean, cov, phi: str = "dist2") -> np.ndarray:
    """``E φ(w)`` for ``w`` with the given moments: mean (..., d), cov (..., d, d) → shape (...).

    ``dist2``: ``‖m − w*‖² + Tr P``;  ``loss``: ``F(m) + ½ Tr(H P)`` (``H = Σ p_k U_k``; any problem whose loss is
    quadratic with a constant Hessian ``hessian`` — an array, or a method as on least-squares clients).
    """
    if phi not in PHIS:
        raise FedsdeInputError(f"phi={phi!r}: exact expectations exist for {', '.join(PHIS)}")
    m = np.asarray(mean, dtype=np.float64)
    P = np.asarray(cov, dtype=np.float64)
    if phi == "dist2":
        return np.sum((m - problem.optimum) ** 2, axis=-1) + np.trace(P, axis1=-2, axis2=-1)
    H = problem.hessian() if callable(problem.hessian) else problem.hessian
    return np.asarray(problem.loss(m)) + 0.5 * np.einsum("ij,...ji->...", H, P)


def phi_function(problem, phi: str | Callable) -> Callable[[np.ndarray], np.ndarray]:
    """``φ`` as a function of samples ``w`` (..., d) → (...) (names need ``problem.optimum``/``problem.loss``)."""
    _check_phi(phi)
    if callable(phi):
        return phi
    if phi == "dist2":
        w_star = np.asarray(problem.optimum, dtype=np.float64)
        return lambda w: np.sum((np.asarray(w) - w_star) ** 2, axis=-1)
    return lambda w: np.asarray(problem.loss(np.asarray(w)))


def weak_error_exact(problem: QuadraticProblem, a: Moments, b: Moments, phi: str = "dist2") -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
    """``|E_a φ − E_b φ|`` at the rounds both moment sets hold.

    Returns
    -------
    rounds : ndarray of int, shape (T,)
    error : ndarray, shape (T,)
    """
    common, ia, ib = np.intersect1d(a.rounds, b.rounds, return_indices=True)
    ea = expected_phi(problem, a.mean[ia], a.cov[ia], phi)
    eb = expected_phi(problem, b.mean[ib], b.cov[ib], phi)
    return common, np.abs(ea - eb)


def fit_loglog_slope(x, y) -> tuple[float, float]:
    """Least-squares fit ``log y = slope·log x + intercept``; ``x``, ``y`` > 0, at least two points."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        raise FedsdeInputError("fit_loglog_slope: needs at least two points with x > 0 and y > 0")
    slope, intercept = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(slope), float(intercept)


@dataclass(frozen=True)
class WeakErrorCurve:
    """Weak error against the time step ``h`` at a fixed end time ``t`` (clock ``t = n·h``).

    Attributes
    ----------
    steps : ndarray, shape (J,)
        Time steps ``h`` (server step ``s = h·η₀``).
    rounds : ndarray of int, shape (J,)
        ``n = t/h``.
    errors : ndarray, shape (J,)
        ``|E φ(w_n) − E φ(w(t))|``.
    slope, intercept : float
        Least-squares fit of ``log error`` against ``log h``; NaN when the errors are at rounding level
        (``exact_at_grid``), where a slope would be fitted to noise.
    chain, sde : ndarray, shape (J,)
        ``E φ`` of the chain and of the SDE (Monte-Carlo: sample means).
    stderr : ndarray, shape (J,) or None
        Standard error of the Monte-Carlo difference (``None`` when exact).
    ci : ndarray, shape (J, 2) or None
        Confidence interval of the signed difference ``E φ(w_n) − E φ(w(t))`` (Monte-Carlo only).
    config : dict
    exact_at_grid : bool
        True when every error is at rounding level (:func:`at_rounding_level`): the SDE's law equals the chain's
        at the grid times (the ``"matched"`` variant), so there is no order to fit.
    """

    steps: np.ndarray
    rounds: np.ndarray
    errors: np.ndarray
    slope: float
    intercept: float
    chain: np.ndarray
    sde: np.ndarray
    stderr: np.ndarray | None = None
    ci: np.ndarray | None = None
    config: dict | None = None
    exact_at_grid: bool = False

    @cached_property
    def slope_fit(self) -> SlopeFit:
        """The slope with its 95 % interval (:func:`fedsde._stats.fit_slope_interval`: the Monte-Carlo errors'
        s.e. where there are some, the fit's residuals); NaN where the errors are at rounding level."""
        if self.exact_at_grid:
            return SlopeFit(float("nan"), float("nan"), float("nan"), SLOPE_LEVEL,
                            "errors at rounding level: no order to fit", int(np.size(self.steps)))
        return fit_slope_interval(self.steps, self.errors, self.stderr)


def at_rounding_level(errors, chain, sde, *, ulps: float = 1e3) -> bool:
    """Whether every ``|E φ_chain − E φ_SDE|`` is within ``ulps`` machine epsilons of the values compared.

    Exact moments carry relative rounding errors of a few hundred ulps after many rounds; a difference below
    ``1e3·eps·max(|E φ_chain|, |E φ_SDE|)`` is zero to working precision.
    """
    errors, chain, sde = (np.abs(np.asarray(v, dtype=np.float64)) for v in (errors, chain, sde))
    scale = np.maximum(np.maximum(chain, sde), np.finfo(np.float64).tiny)
    return bool(np.all(errors <= ulps * np.finfo(np.float64).eps * scale))


def local_loglog_slopes(x, y) -> np.ndarray:
    """Slopes ``Δ log y / Δ log x`` between consecutive points in order of decreasing ``x``, shape (J − 1,).

    NaN where a point has ``y <= 0`` or a non-finite value.  Compared with the fitted slope they show whether the
    error is in its asymptotic regime (all local slopes close to the fit) or not.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    order = np.argsort(-x, kind="stable")
    x, y = x[order], y[order]
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.where((y > 0) & np.isfinite(y), np.log(np.where(y > 0, y, 1.0)), np.nan)
        return np.diff(ly) / np.diff(np.log(x))


def _scaled(problem: QuadraticProblem, factor: float) -> QuadraticProblem:
    if factor == 1.0:
        return problem
    return QuadraticProblem.from_arrays(problem.U, problem.a, problem.Sigma * factor, problem.p, name=problem.name)


@renamed(steps="time_steps")
def weak_error_vs_step(
    problem: QuadraticProblem,
    eta: float,
    local_steps: int | np.ndarray,
    *,
    t_end: float,
    time_steps: Sequence[float],
    server_rate: float = 1.0,
    variant: str = "corrected",
    phi: str = "dist2",
    w0=None,
    cov0=None,
    noise_scaling: str = "fixed",
) -> WeakErrorCurve:
    """Exact weak error of a quadratic SDE variant against the chain as ``h → 0`` (see the module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float
        Client learning rate (fixed).
    local_steps : int or array of int, shape (Q,)
    t_end : float
        End time ``t`` (every ``t_end/h`` must be a whole number of rounds).
    time_steps : sequence of float
        Time steps ``h``: at least two, each finite and > 0, no two equal (old name: ``steps``).
    server_rate : float
        ``η₀`` (fixed): the server step is ``s = h·η₀``.
    variant : {"corrected", "paper", "matched"}
    phi : {"dist2", "loss"}
    w0, cov0 : optional
        Initial mean (d,) and covariance (d, d) (default: the origin, zero covariance).
    noise_scaling : {"fixed", "diffusive"}

    Returns
    -------
    WeakErrorCurve
    """
    m0, P0 = initial_law(problem.d, w0, cov0)

    def laws(pb: QuadraticProblem, h: float, n: int):
        s = h * server_rate
        ch = transient_moments(pb, eta, local_steps, n, s, w0=m0, cov0=P0, record=[n])
        law = quadratic_sde_coefficients(pb, eta, local_steps, s, h, variant).moments(n * h, m0, P0)
        return ch.mean[-1], ch.cov[-1], law.mean, law.cov

    config = {"eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "variant": variant}
    return exact_weak_curve(problem, laws, t_end=t_end, time_steps=time_steps, server_rate=server_rate, phi=phi,
                            noise_scaling=noise_scaling, config=config)


def exact_weak_curve(problem: QuadraticProblem, laws, *, t_end: float, time_steps: Sequence[float],
                     server_rate: float, phi: str, noise_scaling: str, config: dict) -> WeakErrorCurve:
    """The exact weak-error curve shared by every chain with a closed-form law and its SDE.

    ``laws(pb, h, n)`` returns the chain's mean and covariance after ``n`` rounds of step ``h`` on ``pb`` (the
    problem with its noise scaled by ``h_ref/h`` under ``noise_scaling="diffusive"``) and the SDE's at ``t = n·h``;
    the curve is ``|E φ(chain) − E φ(SDE)|`` over the steps, with its log-log slope (NaN where every error is at
    rounding level).  ``config`` is completed with the run's settings.
    """
    if noise_scaling not in NOISE_SCALINGS:
        raise FedsdeInputError(f"noise_scaling={noise_scaling!r}: must be one of {', '.join(NOISE_SCALINGS)}")
    if phi not in PHIS:
        raise FedsdeInputError(f"phi={phi!r}: exact weak errors exist for {', '.join(PHIS)}")
    t_end = positive_float("t_end", t_end)
    server_rate = positive_float("server_rate", server_rate)
    hs = _step_sizes(time_steps)
    h_ref = float(hs.max())
    rounds = np.empty(hs.size, np.int64)
    chain_e, sde_e, errs = np.empty(hs.size), np.empty(hs.size), np.empty(hs.size)
    for j, h in enumerate(hs):
        n = rounds[j] = _rounds_for(t_end, float(h))
        pb = _scaled(problem, h_ref / h) if noise_scaling == "diffusive" else problem
        cm, cc, sm, sc = laws(pb, float(h), int(n))
        chain_e[j] = expected_phi(pb, cm, cc, phi)
        sde_e[j] = expected_phi(pb, sm, sc, phi)
        errs[j] = abs(chain_e[j] - sde_e[j])
    exact = at_rounding_level(errs, chain_e, sde_e)
    slope, intercept = (float("nan"), float("nan")) if exact else fit_loglog_slope(hs, errs)
    config = {**config, "t_end": t_end, "server_rate": server_rate, "phi": phi, "noise_scaling": noise_scaling,
              "method": "exact"}
    return WeakErrorCurve(hs, rounds, errs, slope, intercept, chain_e, sde_e, config=config, exact_at_grid=exact)


@dataclass(frozen=True)
class MCDifference:
    """Monte-Carlo estimate of ``E φ(a) − E φ(b)`` from independent samples.

    Attributes
    ----------
    value : float
        Difference of sample means (signed).
    stderr : float
        ``√(var_a/R_a + var_b/R_b)``.
    ci : (float, float)
        Normal confidence interval of the difference at ``level``.
    mean_a, mean_b : float
        The two sample means.
    level : float
    """

    value: float
    stderr: float
    ci: tuple[float, float]
    mean_a: float
    mean_b: float
    level: float

    @property
    def abs(self) -> float:
        return abs(self.value)


def mc_difference(samples_a, samples_b, phi: Callable[[np.ndarray], np.ndarray], level: float = 0.95) -> MCDifference:
    """``E φ(a) − E φ(b)`` with a normal confidence interval; samples of shape (R_a, d) and (R_b, d)."""
    fa = np.asarray(phi(np.asarray(samples_a, dtype=np.float64)), dtype=np.float64).reshape(-1)
    fb = np.asarray(phi(np.asarray(samples_b, dtype=np.float64)), dtype=np.float64).reshape(-1)
    if fa.size < 2 or fb.size < 2:
        raise FedsdeInputError("mc_difference: needs at least two samples on each side")
    if not 0 < level < 1:
        raise FedsdeInputError(f"level={level!r}: must lie in (0, 1)")
    value = float(fa.mean() - fb.mean())
    se = float(np.sqrt(fa.var(ddof=1) / fa.size + fb.var(ddof=1) / fb.size))
    z = float(scipy.stats.norm.ppf(0.5 + level / 2))
    return MCDifference(value, se, (value - z * se, value + z * se), float(fa.mean()), float(fb.mean()), level)


@renamed(steps="time_steps", paths="replicates")
@takes_values(("eta", "local_steps"), types={"refinement": StepRefinement},
              refinement=("eta", "local_steps", "t_end", "time_steps", "server_rate"),
              replication=("replicates", "seed"), precision=("device",), integrator=("substeps", "inner_samples"))
def weak_error_mc_vs_step(
    problem,
    refinement: StepRefinement,
    replication: Replication,
    precision: Precision | None = None,
    *,
    phi: str | Callable = "loss",
    variant: str = "general",
    integrator: Integrator | None = None,
    oracle_factory=None,
    w0=None,
    level: float = 0.95,
    progress: bool = False,
) -> WeakErrorCurve:
    """Monte-Carlo weak error of an SDE against the discrete chain (any loss with a gradient oracle).

    For each step ``h_j`` of the refinement: ``replicates`` runs of the chain (:func:`fedsde.sim.simulate`, server
    step ``s = h_j·η₀``, ``n_j = t/h_j`` rounds) and ``replicates`` SDE paths (:func:`fedsde.sde.integrate.
    simulate_sde`, ``substeps`` Euler steps per round), each given FedAvg's schedule at that step whole
    (:meth:`~fedsde.params.StepRefinement.schedule`); the error is the difference of the sample means of ``φ`` at
    ``t``, with a confidence interval.  The fitted slope uses the absolute estimates, so it flattens once the error
    falls below the Monte-Carlo noise (compare ``errors`` with ``stderr``).

    Parameters
    ----------
    problem
        Any problem with a gradient oracle (``oracle_factory`` where it has no default).
    refinement, replication, precision, integrator : values of :mod:`fedsde.params`
        :class:`~fedsde.params.StepRefinement` (``eta``, ``local_steps``, ``t_end``, ``time_steps``,
        ``server_rate``), :class:`~fedsde.params.Replication` (``replicates``, ``seed``),
        :class:`~fedsde.params.Precision` (``device``) and :class:`~fedsde.params.Integrator` (``substeps``,
        ``inner_samples``).  Each field may be given instead as the keyword of its name (``eta`` and
        ``local_steps`` also in their old positions), the call of earlier releases
        (:func:`fedsde.params.takes_values`); old names: ``steps`` for ``time_steps``, ``paths`` for
        ``replicates``.  ``server_rate`` is ``η₀ = s/h``, fixed as ``h`` shrinks (not a server step).
    phi : {"dist2", "loss"} or callable of w
    variant : str
        The SDE (:func:`fedsde.sde.integrate.simulate_sde`; ``"general"``: eq. (2) with Monte-Carlo
        coefficients from ``inner_samples`` rollouts per path and step).
    oracle_factory, w0, progress
        As :func:`fedsde.sim.simulate` and :func:`~fedsde.sde.integrate.simulate_sde`.
    level : float
        Level of the normal confidence intervals, in (0, 1).

    Returns
    -------
    WeakErrorCurve
    """
    from fedsde.sde.integrate import simulate_sde
    from fedsde.sim import simulate

    _check_phi(phi)
    precision, integrator = precision or Precision(), integrator or DEFAULT_INTEGRATOR
    seed = replication.need_seed()
    hs, rounds = refinement.time_steps, refinement.rounds
    fn = phi_function(problem, phi)
    errs, ses, cis = np.empty(hs.size), np.empty(hs.size), np.empty((hs.size, 2))
    ea, eb = np.empty(hs.size), np.empty(hs.size)
    for j in range(hs.size):
        recording = derive(DEFAULT_RECORDING, record=[int(rounds[j])])
        chain = simulate(problem, refinement.schedule(j, with_h=False), replication, precision, w0=w0,
                         recording=recording, oracle_factory=oracle_factory, progress=progress)
        sde = simulate_sde(problem, refinement.schedule(j), replication, precision, variant=variant, w0=w0,
                           integrator=integrator, oracle_factory=oracle_factory, recording=recording,
                           progress=progress)
        diff = mc_difference(chain.weights[-1], sde.weights[-1], fn, level)
        errs[j], ses[j], cis[j] = diff.abs, diff.stderr, diff.ci
        ea[j], eb[j] = diff.mean_a, diff.mean_b
    slope, intercept = fit_loglog_slope(hs, errs)
    config = {"eta": refinement.eta, "local_steps": np.atleast_1d(refinement.local_steps).tolist(),
              "t_end": refinement.t_end, "server_rate": refinement.server_rate, "variant": variant,
              "phi": phi if isinstance(phi, str) else "callable", "paths": replication.replicates, "seed": seed,
              "substeps": integrator.substeps, "inner_samples": integrator.inner_samples, "method": "monte-carlo",
              "level": level}
    return WeakErrorCurve(np.array(hs), np.array(rounds), errs, slope, intercept, ea, eb, ses, cis, config)
