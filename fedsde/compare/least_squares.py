"""The chain-vs-SDE study on least-squares clients, exactly (no sampling): what ``fedsde compare`` reports for a
regression file.

FedAvg on :class:`~fedsde.problems.RegressionProblem` clients has real minibatch noise, quadratic in ``w``; the
first two moments of the chain close exactly (:func:`fedsde.exact.least_squares_transient_moments`), and so do
those of its SDE (seed 002 eq. (2) with the exact round moments, :func:`fedsde.exact.least_squares_sde`: linear
drift, diffusion quadratic in ``w``).  :func:`least_squares_sde_study` puts them side by side on the clock
``t = n·h``:

* means and covariances of both at the recorded rounds, their mean and covariance errors and ``w2``, the
  Wasserstein-2 distance between Gaussians with these moments (neither law is Gaussian; by Gelbrich's bound it is a
  lower bound on the W2 distance of the true laws);
* the weak error ``|E φ(w_n) − E φ(w(n·h))|`` over time for ``φ`` in :data:`~fedsde.compare.weak_error.PHIS`
  (``E‖w − w*‖² = ‖m − w*‖² + tr P``, ``E F(w) = F(m) + ½ tr(H P)``: ``F`` is quadratic with the constant Hessian
  ``H``, so both are exact functions of the moments);
* the weak error at ``t = n·h`` against the step ``h`` at fixed ``t`` and server rate ``η₀ = s/h``: for every step
  ``h_j``, the chain with server step ``s_j = h_j·η₀`` for ``t/h_j`` rounds against the SDE of that chain at ``t``,
  with the fitted log–log slope.  The data's minibatch noise is used as it is (the ``"fixed"`` noise scaling of
  :mod:`fedsde.compare.weak_error`: there is no knob that scales real minibatch noise with ``h``), so as ``h → 0``
  the per-round noise vanishes like ``h²`` and the expected order is 1;
* the stationary laws of the chain and of the SDE, where they exist.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from fedsde._stats import fit_slope_interval
from fedsde._threads import small_products
from fedsde._validate import positive_float, positive_int
from fedsde.compare.distances import gaussian_w2
from fedsde.compare.moments import compare_moments
from fedsde.compare.study import DEFAULT_REFINEMENT, UNSETTLED_SLOPE, ExactSDEStudy, refinement_grid
from fedsde.compare.weak_error import PHIS, at_rounding_level, expected_phi, fit_loglog_slope, local_loglog_slopes
from fedsde.errors import NoStationaryLawError
from fedsde.exact import least_squares_sde, least_squares_stationary_law, least_squares_transient_moments
from fedsde.exact.moments import Moments


@dataclass
class LeastSquaresSDEStudy(ExactSDEStudy):
    """Result of :func:`least_squares_sde_study` (T recorded rounds, J refinement steps, d dimension).

    Attributes
    ----------
    chain, sde : Moments
        Exact moments of the chain and of its SDE at the recorded rounds: ``rounds`` (T,), ``mean`` (T, d),
        ``cov`` (T, d, d).
    distances : MomentComparison
        Their mean and covariance errors and Gaussian W2 (a lower bound, see the module docstring), each (T,).
    weak_error : dict
        φ → ``|E φ(w_n) − E φ(w(n·h))|`` at the recorded rounds, (T,).
    slope : dict
        φ → ``steps`` (J,), ``rounds`` (J,), ``errors`` (J,), ``chain`` and ``sde`` (J,: ``E φ`` of each),
        ``slope`` (fitted log–log slope, ``None`` when ``exact_at_grid``) with ``slope_interval`` (95 %, the fit's
        residuals: the errors are exact; ``slope_basis``), ``local_slopes`` (J − 1,) and ``exact_at_grid``.
    stationary : dict
        ``chain`` and ``sde`` (``{"mean", "cov"}`` or ``None``), ``w2`` (Gaussian, or ``None``), ``cov_rel_error``
        and ``notes``.
    h : float
    h_grid : ndarray, shape (J,)
    config : dict
    """

    def to_dict(self) -> dict:
        """The JSON layout of ``fedsde compare --json`` on a regression file (without its ``warnings``)."""
        return {"kind": "regression",
                "sde": "eq. (2) with the exact round moments of the least-squares chain (state-dependent diffusion)",
                **self._layout("w2_gaussian_lower_bound")}


def _chain_and_sde(problem, eta, local_steps, rounds: int, record, *, server_lr, h, w0, kw,
                   base) -> tuple[Moments, Moments]:
    """Exact moments of the chain (server step ``server_lr``) and of its SDE (step ``h``, ``base`` rescaled) at the
    rounds ``record``."""
    chain = least_squares_transient_moments(problem, eta, local_steps, rounds, server_lr, w0=w0, record=record, **kw)
    sde = base.rescaled(server_lr, h)
    law = sde.moments(np.asarray(chain.rounds, dtype=np.float64) * h, w0)
    return chain, Moments(rounds=chain.rounds.copy(), mean=law.mean, cov=law.cov)


@small_products
def least_squares_sde_study(problem, *, eta: float, local_steps, rounds: int, server_lr: float = 1.0,
                            h: float | None = None, w0=None, record_every: int | None = None, h_grid=None,
                            participation: int | None = None, weights=None) -> LeastSquaresSDEStudy:
    """Compare FedAvg on least-squares clients with its SDE, exactly (see the module docstring).

    Parameters
    ----------
    problem : RegressionProblem
        With a ``batch_size`` and ``sampling``.
    eta : float
        Client learning rate ``η``.
    local_steps : int or array of int, shape (Q,)
    rounds : int
        Compare up to round ``n`` (``t = n·h``).
    server_lr : float
        Actual server step ``s = h·η₀``.
    h : float, optional
        Time step of one round (default ``η``, seed 002, Section 6).
    w0 : array, shape (d,), optional
        Start point (default: the problem's ``initial_weights()``).
    record_every : int, optional
        Record every m rounds (default about 20 records; round ``n`` always).
    h_grid : sequence of float, optional
        Steps of the refinement at fixed ``t`` (:func:`fedsde.compare.study.refinement_grid`); default
        ``h, h/2, …, h/16``.
    participation, weights
        As :func:`fedsde.exact.least_squares_round_law` (uniform ``m``-subsets with unbiased weights; base weights
        of a linear server rule).

    Returns
    -------
    LeastSquaresSDEStudy

    Warns
    -----
    UserWarning
        The fitted slope is unreliable (local slopes differ from it by more than
        :data:`fedsde.compare.study.UNSETTLED_SLOPE`).
    """
    n = positive_int("rounds", rounds)
    problem.optimum  # noqa: B018 — a one-line error when the least-squares solution is not unique (singular H)
    eta = positive_float("eta", eta)
    server_lr = positive_float("server_lr", server_lr)
    h = eta if h is None else positive_float("h", h)
    t_end = n * h
    hs = (h / 2.0 ** np.arange(DEFAULT_REFINEMENT) if h_grid is None
          else refinement_grid(h_grid, t_end, name=f"h_grid={h_grid!r}"))
    every = max(1, n // 20) if record_every is None else positive_int("record_every", record_every)
    record = sorted(set(range(0, n + 1, every)) | {n})
    start = problem.initial_weights() if w0 is None else np.asarray(w0, dtype=np.float64)
    kw = {"participation": participation, "weights": weights}
    base = least_squares_sde(problem, eta, local_steps, server_lr, h, **kw)  # the dense or matrix-free moments
    chain, sde = _chain_and_sde(problem, eta, local_steps, n, record, server_lr=server_lr, h=h, w0=start, kw=kw,
                                base=base)
    weak = {phi: np.abs(expected_phi(problem, chain.mean, chain.cov, phi) - expected_phi(problem, sde.mean,
                                                                                         sde.cov, phi))
            for phi in PHIS}
    rate = server_lr / h
    ends = []
    for hj in hs:
        nj = round(t_end / hj)
        c, s = _chain_and_sde(problem, eta, local_steps, nj, [nj], server_lr=float(hj) * rate, h=float(hj), w0=start,
                              kw=kw, base=base)
        ends.append((nj, c, s))
    _check_finite(problem, eta, local_steps, server_lr, [chain, sde] + [m for _, *pair in ends for m in pair], kw)
    slopes = {}
    for phi in PHIS:
        ce = np.array([float(expected_phi(problem, c.mean[-1], c.cov[-1], phi)) for _, c, _ in ends])
        se = np.array([float(expected_phi(problem, s.mean[-1], s.cov[-1], phi)) for _, _, s in ends])
        errs = np.abs(ce - se)
        exact = at_rounding_level(errs, ce, se)
        fit = fit_slope_interval(hs, errs)  # exact errors: the interval is the fit's misfit
        slopes[phi] = {"steps": hs, "rounds": np.array([nj for nj, _, _ in ends]), "errors": errs, "chain": ce,
                       "sde": se, "exact_at_grid": exact, "slope": None if exact else fit_loglog_slope(hs, errs)[0],
                       "slope_interval": None if exact else [fit.lower, fit.upper], "slope_basis": fit.basis,
                       "local_slopes": None if exact else local_loglog_slopes(hs, errs)}
    unsettled = [f"{phi} local {np.round(v['local_slopes'], 2).tolist()} vs fitted {v['slope']:.2f}"
                 for phi, v in slopes.items()
                 if not v["exact_at_grid"] and np.any(np.abs(v["local_slopes"] - v["slope"]) > UNSETTLED_SLOPE)]
    if unsettled:
        warnings.warn("the weak error is not in its asymptotic regime over these steps (local log–log slopes differ "
                      f"from the fit by more than {UNSETTLED_SLOPE}: {'; '.join(unsettled)}); the fitted slope is "
                      "unreliable", UserWarning, stacklevel=2)
    config = {"eta": eta, "server_lr": server_lr, "h": h, "rounds": n, "local_steps":
              np.atleast_1d(local_steps).tolist(), "w0": start, "participation": participation,
              "noise_scaling": "fixed", "batch_size": problem.batch_size, "sampling": problem.sampling}
    return LeastSquaresSDEStudy(chain=chain, sde=sde, distances=compare_moments(chain, sde, h), weak_error=weak,
                                slope=slopes, stationary=_stationary(problem, eta, local_steps, server_lr, base, kw),
                                h=h, h_grid=hs, config=config)


def _check_finite(problem, eta, local_steps, server_lr, moments: list, kw) -> None:
    """A one-line error when some moments overflowed (the chain or its SDE diverges with these settings)."""
    if all(np.all(np.isfinite(m.mean)) and np.all(np.isfinite(m.cov)) for m in moments):
        return
    from fedsde.errors import FedsdeInputError
    from fedsde.exact import least_squares_round_law

    rho = least_squares_round_law(problem, eta, local_steps, server_lr, **kw).spectral_radius
    raise FedsdeInputError(f"eta={eta:g}, local_steps={np.atleast_1d(local_steps).tolist()}, server_lr={server_lr:g}: "
                           f"the exact moments overflow (spectral radius of the mean map {rho:.6g}; the minibatch "
                           "noise can make the second moments grow even when the mean contracts): the chain or its "
                           "SDE diverges; use a smaller eta or server_lr")


def _stationary(problem, eta, local_steps, server_lr, sde, kw) -> dict:
    """Stationary laws of the chain and of its SDE where they exist, and how far apart their moments are."""
    out: dict = {"chain": None, "sde": None, "w2": None, "cov_rel_error": None, "notes": []}
    try:
        st = least_squares_stationary_law(problem, eta, local_steps, server_lr, **kw)
        out["chain"] = {"mean": st.mean, "cov": st.cov}
    except NoStationaryLawError as exc:
        out["notes"].append(f"chain: {exc}")
    try:
        m, P = sde.stationary()
        out["sde"] = {"mean": m, "cov": P}
    except NoStationaryLawError as exc:
        out["notes"].append(f"SDE: {exc}")
    if out["chain"] is not None and out["sde"] is not None:
        c, s = out["chain"], out["sde"]
        out["w2"] = gaussian_w2(c["mean"], c["cov"], s["mean"], s["cov"])
        out["cov_rel_error"] = float(np.linalg.norm(s["cov"] - c["cov"]) / np.linalg.norm(c["cov"]))
    return out
