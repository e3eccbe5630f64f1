"""The chain-vs-SDE study on quadratic clients: everything ``fedsde compare`` reports, callable from Python.

:func:`quadratic_sde_study` compares FedAvg on quadratic clients with a linear SDE variant of seed 002, Section 6
(``paper``: eq. (4) and Thm 6.3 as printed; ``corrected``: the exact one-round variance; ``matched``: the OU equal
in law to the chain at grid times; :func:`fedsde.sde.quadratic_sde_coefficients`) on the clock ``t = n·h``,
exactly (no sampling):

* the means and covariances of both laws at the recorded rounds, and the Wasserstein-2 distance and moment errors
  between them (:func:`~fedsde.compare.moments.compare_moments`);
* the weak error ``|E φ(w_n) − E φ(w(n·h))|`` over time, ``φ`` in :data:`~fedsde.compare.weak_error.PHIS`
  (:func:`~fedsde.compare.weak_error.weak_error_exact`);
* the weak error at ``t = n·h`` against the step ``h`` at fixed ``t`` and server rate ``η₀ = s/h``
  (:func:`~fedsde.compare.weak_error.weak_error_vs_step`), its fitted log–log slope, and the local slopes between
  successive steps.  Where a local slope differs from the fit by more than :data:`UNSETTLED_SLOPE`, the error is
  not in its asymptotic regime over these steps and a warning says the fitted slope is unreliable;
* the stationary laws of the chain (:func:`fedsde.exact.stationary_law`) and of the SDE, and their W2 distance;
* optionally (``replicates``), Monte-Carlo: SDE paths (:func:`fedsde.sde.integrate.simulate_sde`) against the chain's
  exact law at round ``n``: per-coordinate Kolmogorov–Smirnov statistics, the W2 distance of a Gaussian fit, and
  the difference of ``E φ`` with a normal 95 % interval, ``± 1.96·s.e.`` (:data:`Z95`).

Settings the chain is known to diverge with are reported as a warning (:func:`fedsde.exact.stability.
known_divergence`).  The data-problem twin, on the general SDE (2) by sampling, is
:func:`fedsde.validity.general.general_sde_study`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from fedsde._compat import renamed
from fedsde.compare.distances import gaussian_w2, ks_per_coordinate
from fedsde.compare.moments import MomentComparison, compare_moments, sde_moments
from fedsde.compare.weak_error import (
    PHIS,
    expected_phi,
    local_loglog_slopes,
    phi_function,
    weak_error_exact,
    weak_error_vs_step,
)
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact import stationary_law, transient_moments
from fedsde.exact.moments import Moments
from fedsde.params import (
    DEFAULT_INTEGRATOR,
    EtaRefinement,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    takes_values,
)
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.coefficients import quadratic_sde_coefficients

#: a local log–log slope further than this from the fitted one: the weak error is not yet in its asymptotic regime
UNSETTLED_SLOPE = 0.5
#: the 0.975 quantile of the standard normal, rounded to two decimals, of the 95 % intervals of the Monte-Carlo part
Z95 = 1.96
#: most rounds one refinement step may need (``t/h_j``), to keep a mistyped tiny step from running for hours
MAX_REFINEMENT_ROUNDS = 1_000_000
#: steps of the default refinement: ``h, h/2, …, h/16``
DEFAULT_REFINEMENT = 5


def refinement_grid(h_grid, t_end: float, *, name: str = "h_grid") -> np.ndarray:
    """The time steps of a weak-error refinement at fixed ``t_end``, snapped so that ``t_end`` is a whole number of
    rounds: ``h_j → t_end/round(t_end/h_j)``, largest first.

    Parameters
    ----------
    h_grid : sequence of float, shape (J,)
        at least two steps, each finite and > 0, distinct after snapping.
    t_end : float
        the end time ``t = n·h`` of the comparison.
    name : str
        how error messages name ``h_grid`` (with its value).

    Returns
    -------
    ndarray, shape (J,)
        ``t_end/k_j`` for the rounds ``k_j`` in increasing order.

    Raises
    ------
    FedsdeInputError
        a step that is not finite and > 0, fewer than two steps, a step needing more than
        :data:`MAX_REFINEMENT_ROUNDS` rounds, or two steps that snap to the same one.
    """
    raw = np.atleast_1d(np.asarray(h_grid, dtype=np.float64))
    bad = np.flatnonzero(~(np.isfinite(raw) & (raw > 0)))
    if bad.size:
        raise FedsdeInputError(f"{name}: every step must be finite and > 0 (entry {bad[0] + 1} is {raw[bad[0]]:g})")
    if raw.size < 2:
        raise FedsdeInputError(f"{name}: need at least two steps for a slope")
    rounds = [max(1, round(t_end / hj)) for hj in raw]
    big = int(np.argmax(rounds))
    if rounds[big] > MAX_REFINEMENT_ROUNDS:
        raise FedsdeInputError(f"{name}: step {raw[big]:g} needs {rounds[big]} rounds to reach "
                               f"t = {t_end:.6g}; at most {MAX_REFINEMENT_ROUNDS} rounds per step")
    seen: dict[int, float] = {}
    for hj, k in zip(raw, rounds, strict=True):
        if k in seen and seen[k] == hj:
            raise FedsdeInputError(f"{name}: step {hj:g} is given twice; the steps must be distinct")
        if k in seen:
            raise FedsdeInputError(
                f"{name}: steps {seen[k]:g} and {hj:g} both snap to h = {t_end / k:.6g} ({k} rounds to "
                f"t = {t_end:.6g}, which must be a whole number of rounds); give distinct steps"
            )
        seen[k] = float(hj)
    return np.array([t_end / k for k in sorted(rounds)])


@dataclass
class ExactSDEStudy:
    """What the exact chain-vs-SDE studies share (:class:`QuadraticSDEStudy`,
    :class:`fedsde.compare.least_squares.LeastSquaresSDEStudy`): the moments of both at the recorded rounds, their
    distances, weak errors, the refinement slope and the stationary laws, on the clock ``t = n·h``."""

    chain: Moments
    sde: Moments
    distances: MomentComparison
    weak_error: dict
    slope: dict
    stationary: dict
    h: float
    h_grid: np.ndarray
    config: dict = field(default_factory=dict)

    @property
    def t_end(self) -> float:
        return self.config["rounds"] * self.h

    def _layout(self, w2_key: str) -> dict:
        """The JSON layout of both studies, the W2 distance under ``w2_key``."""
        times = self.chain.rounds * self.h
        return {
            "moments": {
                "rounds": self.chain.rounds, "times": times,
                "chain": {"mean": self.chain.mean, "cov": self.chain.cov},
                "sde": {"mean": self.sde.mean, "cov": self.sde.cov},
            },
            "distances": {w2_key: self.distances.w2, "mean_error": self.distances.mean_error,
                          "cov_error": self.distances.cov_error, "cov_rel_error": self.distances.cov_rel_error},
            "weak_error": {phi: {"times": times, "error": err} for phi, err in self.weak_error.items()},
            "slope": self.slope,
            "stationary": self.stationary,
            "config": self.config,
        }


@dataclass
class QuadraticSDEStudy(ExactSDEStudy):
    """Result of :func:`quadratic_sde_study` (T recorded rounds, J refinement steps, d dimension, R paths).

    Attributes
    ----------
    chain, sde : Moments
        exact moments of the chain and of the SDE at the recorded rounds: ``rounds`` (T,), ``mean`` (T, d),
        ``cov`` (T, d, d).
    distances : MomentComparison
        W2 distance, mean and covariance errors between them, each (T,).
    weak_error : dict
        φ → ``|E φ(w_n) − E φ(w(n·h))|`` at the recorded rounds, (T,).
    slope : dict
        φ → the refinement at ``t = n·h``: ``steps`` (J,), ``rounds`` (J,), ``errors`` (J,), ``chain`` and ``sde``
        (J,: ``E φ`` of each), ``slope`` (fitted log–log slope) with ``slope_interval`` (95 %, and
        ``slope_basis``: :func:`fedsde._stats.fit_slope_interval`), ``local_slopes`` (J − 1,) and ``exact_at_grid``
        (errors at rounding level, so no order to fit: slopes ``None``).
    stationary : dict
        ``sde`` and ``chain`` (``{"mean", "cov"}`` or ``None``), their ``w2`` (or ``None``) and, when the chain has
        no stationary law, ``note``.
    order_refinement : OrderRefinement or None
        with ``order``: the exact weak errors of the order-``order`` SDE as ``η → 0`` (:mod:`fedsde.compare.order2`).
    monte_carlo : dict or None
        with ``replicates``: ``paths``, ``seed``, ``substeps``, ``ks_vs_chain_law`` (``statistic``, ``pvalue``, (d,)),
        the paths' ``mean`` (d,) and ``cov`` (d, d), ``w2_gaussian_fit_vs_chain`` and, per φ, ``weak_error``:
        ``value`` (exact chain minus sample mean), ``stderr`` and ``ci95``.
    h : float
        the time step of one round; ``t_end = rounds·h``.
    h_grid : ndarray (J,)
        the refinement steps, largest first.
    config : dict
    """

    monte_carlo: dict | None = None
    order_refinement: object | None = None

    def to_dict(self) -> dict:
        """The JSON layout of ``fedsde compare --json`` (without its ``warnings``)."""
        out = self._layout("w2")
        if self.monte_carlo is not None:
            out["monte_carlo"] = self.monte_carlo
        if self.order_refinement is not None:
            out["order_refinement"] = self.order_refinement.to_dict()
        return out


@renamed(paths="replicates")
@takes_values(types={"eta_refinement": EtaRefinement},
              schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=("device",), integrator=("substeps",), recording=("record_every",),
              eta_refinement=("order", "etas"))
def quadratic_sde_study(problem: QuadraticProblem, schedule: Schedule, replication: Replication | None = None,
                        precision: Precision | None = None, *, variant: str = "corrected", w0=None,
                        recording: Recording | None = None, h_grid=None, noise_scaling: str = "diffusive",
                        integrator: Integrator | None = None, progress: bool = False,
                        eta_refinement: EtaRefinement | None = None) -> QuadraticSDEStudy:
    """Compare FedAvg on quadratic clients with a linear SDE variant, exactly and optionally by sampling.

    Parameters
    ----------
    problem : QuadraticProblem
    schedule, replication, precision, recording, integrator, eta_refinement : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``; none: no Monte Carlo),
        :class:`~fedsde.params.Precision` (``device``), :class:`~fedsde.params.Recording` (``record_every``; none:
        about 20 records), :class:`~fedsde.params.Integrator` (``substeps``) and
        :class:`~fedsde.params.EtaRefinement` (``order``, ``etas``; none: no order refinement).  Each field may be
        given instead as the keyword of its name, the call of earlier releases (:func:`fedsde.params.takes_values`);
        the fields mean:
    eta : float
        client learning rate ``η``.
    local_steps : int or array of int, shape (Q,)
        ``E``, or per-client local steps.
    rounds : int
        compare up to round ``n`` (``t = n·h``).
    server_lr : float
        actual server step ``s = h·η₀`` (1: plain FedAvg).
    h : float, optional
        time step of one round (default ``η``, seed 002, Section 6).
    variant : {"corrected", "paper", "matched"}
    w0 : array, shape (d,), optional
        start point (default zero).
    record_every : int, optional
        record the moments every m rounds (default about 20 records; round ``n`` always).
    h_grid : sequence of float, optional
        time steps of the weak-error refinement at fixed ``t = n·h`` (:func:`refinement_grid`); default ``h, h/2,
        …, h/16``.
    noise_scaling : {"diffusive", "fixed"}
        how the problem changes as the refinement shrinks ``h`` (see :mod:`fedsde.compare.weak_error`).
    replicates : int, optional
        also simulate this many SDE paths (>= 2) and compare them with the chain's law at round ``n`` (old name:
        ``paths``).
    seed, substeps, device, progress
        of the Monte-Carlo part: seed (default 0), Euler steps per round, torch device, a progress bar on stderr.
    order : {1, 2}, optional
        also the order refinement of the order-``order`` SDE (:func:`fedsde.compare.order2.order_refinement`: ``η``
        shrinks with ``h/η`` and ``s`` fixed at ``t = rounds·h``; client steps ``etas``, default ``η, η/2, …,
        η/32``; ``etas`` without ``order``: none).  The SDE of the rest of the study is ``variant``'s (``order2``
        for the order-2 SDE).

    Returns
    -------
    QuadraticSDEStudy

    Warns
    -----
    UserWarning
        the fitted slope is unreliable (local slopes differ from it by more than :data:`UNSETTLED_SLOPE`); the
        chain is known to diverge with these settings.
    """
    eta, local_steps, n, server_lr = schedule.eta, schedule.local_steps, schedule.rounds, schedule.server_lr
    replicates, seed = (None, 0) if replication is None else (replication.replicates, replication.seed or 0)
    record_every = None if recording is None else recording.record_every
    substeps, device = (integrator or DEFAULT_INTEGRATOR).substeps, (precision or Precision()).device
    if n < 1:
        raise FedsdeInputError(f"rounds={n}: must be an integer >= 1")
    lin = quadratic_sde_coefficients(problem, schedule, variant=variant)
    h = lin.h
    t_end = n * h
    if h_grid is None:
        hs = h / 2.0 ** np.arange(DEFAULT_REFINEMENT)
    else:
        hs = refinement_grid(h_grid, t_end, name=f"h_grid={h_grid!r}")
    if replicates is not None and replicates < 2:  # a covariance needs two paths
        raise FedsdeInputError(f"replicates={replicates}: must be an integer >= 2")
    every = max(1, n // 20) if record_every is None else record_every
    record = sorted(set(range(0, n + 1, every)) | {n})
    chain = transient_moments(problem, schedule, w0=w0, record=record)
    sde = sde_moments(problem, eta, local_steps, n, server_lr, h, variant, w0=w0, record=record)
    weak = {phi: weak_error_exact(problem, chain, sde, phi)[1] for phi in PHIS}
    slopes = {}
    for phi in PHIS:
        curve = weak_error_vs_step(problem, eta, local_steps, t_end=t_end, time_steps=hs, server_rate=server_lr / h,
                                   variant=variant, phi=phi, w0=w0, noise_scaling=noise_scaling)
        exact = curve.exact_at_grid  # errors at rounding level: no order to fit
        fit = curve.slope_fit
        slopes[phi] = {"steps": curve.steps, "rounds": curve.rounds, "errors": curve.errors,
                       "slope": None if exact else curve.slope, "exact_at_grid": exact,
                       "slope_interval": None if exact else [fit.lower, fit.upper], "slope_basis": fit.basis,
                       "local_slopes": None if exact else local_loglog_slopes(curve.steps, curve.errors),
                       "chain": curve.chain, "sde": curve.sde}
    unsettled = [f"{phi} local {np.round(v['local_slopes'], 2).tolist()} vs fitted {v['slope']:.2f}"
                 for phi, v in slopes.items()
                 if not v["exact_at_grid"] and np.any(np.abs(v["local_slopes"] - v["slope"]) > UNSETTLED_SLOPE)]
    if unsettled:
        warnings.warn("the weak error is not in its asymptotic regime over the time steps h (local log–log "
                      f"slopes differ from the fit by more than {UNSETTLED_SLOPE}: {'; '.join(unsettled)}); the "
                      "fitted slope is unreliable", UserWarning, stacklevel=4)  # past renamed and takes_values
    from fedsde.exact.stability import known_divergence

    for why in known_divergence(problem, schedule):
        warnings.warn(f"the chain diverges with these settings: {why}", UserWarning, stacklevel=4)
    config = {"variant": variant, "eta": eta, "server_lr": server_lr, "h": h, "rounds": n,
              "local_steps": np.atleast_1d(local_steps).tolist(), "noise_scaling": noise_scaling}
    study = QuadraticSDEStudy(chain=chain, sde=sde, distances=compare_moments(chain, sde, h), weak_error=weak,
                              slope=slopes, stationary=_stationary(problem, lin, eta, local_steps, server_lr), h=h,
                              h_grid=hs, config=config)
    if eta_refinement is not None:
        from fedsde.compare.order2 import order_refinement

        study.order_refinement = order_refinement(problem, eta=eta, local_steps=local_steps, rounds=n,
                                                  server_lr=server_lr, order=eta_refinement, h_ratio=h / eta, w0=w0)
    if replicates is not None:
        study.monte_carlo = _monte_carlo(problem, chain, eta=eta, local_steps=local_steps, rounds=n,
                                         replicates=replicates, seed=seed, variant=variant, server_lr=server_lr,
                                         h=h, substeps=substeps, w0=w0, device=device, progress=progress)
    return study


def _stationary(problem: QuadraticProblem, lin, eta, local_steps, server_lr) -> dict:
    """The stationary laws of the SDE and the chain, and their W2 distance, where they exist."""
    stationary: dict = {"sde": None, "chain": None, "w2": None}
    st_sde = lin.stationary()
    if st_sde is not None:
        stationary["sde"] = {"mean": st_sde.mean, "cov": st_sde.cov}
    try:
        st_chain = stationary_law(problem, eta, local_steps, server_lr)
        stationary["chain"] = {"mean": st_chain.mean, "cov": st_chain.cov}
        if st_sde is not None:
            stationary["w2"] = gaussian_w2(st_chain.mean, st_chain.cov, st_sde.mean, st_sde.cov)
    except NoStationaryLawError as exc:
        stationary["note"] = str(exc)
    return stationary


def _monte_carlo(problem: QuadraticProblem, chain: Moments, *, eta, local_steps, rounds: int, replicates: int,
                 seed: int, variant: str, server_lr, h: float, substeps: int, w0, device: str, progress: bool) -> dict:
    """SDE paths at round ``rounds`` against the chain's exact law there: KS, Gaussian-fit W2, ``E φ`` ± 1.96 s.e."""
    from fedsde.sde.coefficients import ORDER2_VARIANTS
    from fedsde.sde.integrate import simulate_sde

    # the order-2 SDE by exact OU transitions: Euler–Maruyama's bias O(h/substeps) would make it first order
    method = "exact" if variant in ORDER2_VARIANTS else "euler"
    sim = simulate_sde(problem, eta=eta, local_steps=local_steps, rounds=rounds, replicates=replicates, seed=seed,
                       variant=variant, server_lr=server_lr, h=h, substeps=substeps, w0=w0, device=device,
                       record=[rounds], progress=progress, method=method)
    final = sim.final
    chain_law = (chain.mean[-1], chain.cov[-1])
    ks = ks_per_coordinate(final, chain_law)
    mc: dict = {"paths": sim.replicates, "seed": seed, "substeps": substeps, "method": method,
                "ks_vs_chain_law": {"statistic": ks.statistic, "pvalue": ks.pvalue},
                "mean": final.mean(0), "cov": np.cov(final, rowvar=False).reshape(problem.d, problem.d)}
    mc["w2_gaussian_fit_vs_chain"] = gaussian_w2(mc["mean"], mc["cov"], *chain_law)
    mc["weak_error"] = {}
    for phi in PHIS:
        vals = phi_function(problem, phi)(final)
        exact_chain = float(expected_phi(problem, chain.mean[-1], chain.cov[-1], phi))
        se = float(vals.std(ddof=1) / np.sqrt(vals.size))
        diff = exact_chain - float(vals.mean())
        mc["weak_error"][phi] = {"value": diff, "stderr": se, "ci95": [diff - Z95 * se, diff + Z95 * se]}
    return mc
