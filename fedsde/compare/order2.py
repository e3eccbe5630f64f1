"""Weak error of the first- and second-order SDEs against FedAvg as ``η → 0``, exactly (quadratic clients).

The refinement of an approximation order (Li, Tai & E 2019, Thm 3): the client step ``η`` shrinks with the clock
``t = n·h``, ``h = η`` (``h/η`` kept fixed), the server step ``s`` and the local steps fixed, at a fixed horizon ``t``
(``rounds`` rounds of the largest ``η``, so ``rounds·η_max/η`` rounds of each).  The problem is taken as given: the
chain's per-round noise is ``O(η²)`` and its covariance at ``t`` is ``O(η)`` (the small-noise regime of the stochastic
modified equations).  At every ``η`` the chain's exact moments (:func:`fedsde.exact.transient_moments`) are
compared with the SDE's exact law at ``t`` (one exact transition, :meth:`fedsde.sde.LinearSDE.moments`) through
three errors, each with its own log–log slope and interval (:func:`fedsde._stats.loglog_slope_interval`):

* ``mean``: ``‖m_chain − m_SDE‖`` (the test function ``w``);
* ``second_moment``: ``|E‖w − w*‖²_chain − E‖w − w*‖²_SDE|``;
* ``covariance``: ``‖P_chain − P_SDE‖_F / ‖P_chain‖_F`` (relative: the covariance itself is ``O(η)``).

Order 1 (``corrected``, seed 002 eq. (2) with the exact round moments) gives slopes about 1 where the mean still
moves; the order-2 SDE (:mod:`fedsde.sde.order2`) about 2.  Near stationarity order 1's second-moment error is the
covariance's (its mean is exact there) and its slope is about 2 too: the comparison that tells the orders apart is
a horizon of a few rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsde._stats import local_loglog_slopes, loglog_slope_interval
from fedsde._validate import positive_float, positive_int
from fedsde.compare.moments import initial_law
from fedsde.compare.weak_error import at_rounding_level, expected_phi
from fedsde.errors import FedsdeInputError
from fedsde.exact.moments import transient_moments
from fedsde.params.refinement import EtaRefinement, client_step_grid
from fedsde.sde.coefficients import quadratic_sde_coefficients
from fedsde.sde.order2 import DEFAULT_FORM, ORDER2_FORMS, ORDERS, order2_sde_coefficients

#: the errors of the refinement
ERRORS = ("mean", "second_moment", "covariance")
#: default levels of the refinement: η, η/2, …, η/32 (1.5 decades)
DEFAULT_LEVELS = 6
#: most rounds the smallest η may need
MAX_ROUNDS = 200_000


def refinement_etas(eta: float, etas: Sequence[float] | None = None, levels: int = DEFAULT_LEVELS) -> np.ndarray:
    """The client steps of the refinement, largest first: ``etas`` (at least three, distinct, each > 0, each an
    integer fraction ``η_max/k`` so that the horizon is a whole number of rounds) or ``η, η/2, …, η/2^(levels−1)``."""
    if etas is None:
        levels = positive_int("levels", levels, minimum=3)
        return positive_float("eta", eta) / 2.0 ** np.arange(levels)
    return client_step_grid(etas)


@dataclass
class OrderRefinement:
    """Result of :func:`order_refinement` (J client steps).

    Attributes
    ----------
    order : int
    sde : str
        The SDE's variant name (``corrected``, ``order2``, ``order2-series``).
    etas : ndarray, shape (J,)
        Client steps, largest first (``h = η·h_ratio``).
    rounds : ndarray of int, shape (J,)
        Rounds to the horizon at each ``η``.
    t_end : float
        The horizon on the clock ``t = n·h``.
    errors : dict
        :data:`ERRORS` → ndarray (J,).
    slopes : dict
        :data:`ERRORS` → ``{"slope", "slope_ci95", "local_slopes", "exact_at_grid"}`` (``slope`` ``None`` where the
        errors are at rounding level).
    config : dict
    """

    order: int
    sde: str
    etas: np.ndarray
    rounds: np.ndarray
    t_end: float
    errors: dict
    slopes: dict
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"order": self.order, "sde": self.sde, "refinement": "eta (h = eta*h_ratio, server step fixed, "
                "t fixed)", "etas": self.etas, "rounds": self.rounds, "t_end": self.t_end,
                **{name: {"errors": self.errors[name], **self.slopes[name]} for name in ERRORS},
                "config": self.config}


def _least_squares(problem) -> bool:
    return getattr(problem, "model", None) == "least-squares" and hasattr(problem, "padded_rows")


def order_sde(problem, eta: float, local_steps, server_lr: float, h: float, order: int, form: str = DEFAULT_FORM):
    """The SDE of an approximation order: ``corrected`` (1) or :mod:`fedsde.sde.order2` (2) on quadratic clients (a
    :class:`~fedsde.sde.LinearSDE`), their least-squares counterparts on regression clients."""
    if order not in ORDERS:
        raise FedsdeInputError(f"order={order!r}: must be one of {', '.join(map(str, ORDERS))}")
    if _least_squares(problem):
        from fedsde.exact import least_squares_sde
        from fedsde.sde.order2 import least_squares_order2_sde

        if order == 1:
            return least_squares_sde(problem, eta, local_steps, server_lr, h)
        return least_squares_order2_sde(problem, eta, local_steps, server_lr, h, form)
    if order == 1:
        return quadratic_sde_coefficients(problem, eta, local_steps, server_lr, h, "corrected")
    return order2_sde_coefficients(problem, eta, local_steps, server_lr, h, form)


def _laws(problem, eta: float, local_steps, n: int, server_lr: float, h: float, *, order: int, form: str, m0, P0):
    """``(chain mean, chain cov, SDE mean, SDE cov, SDE name)`` after ``n`` rounds / at ``t = n·h``."""
    lin = order_sde(problem, eta, local_steps, server_lr, h, order, form)
    if _least_squares(problem):
        from fedsde.exact import least_squares_transient_moments

        ch = least_squares_transient_moments(problem, eta, local_steps, n, server_lr, w0=m0, record=[n])
        law = lin.moments([n * h], m0)
        name = ("least-squares order-2 (" + form + ")") if order == 2 else "least-squares corrected"
        return ch.mean[-1], ch.cov[-1], law.mean[0], law.cov[0], name
    ch = transient_moments(problem, eta, local_steps, n, server_lr, w0=m0, cov0=P0, record=[n])
    law = lin.moments(n * h, m0, P0)
    return ch.mean[-1], ch.cov[-1], law.mean, law.cov, lin.variant


def slope_record(x, errors) -> dict:
    """``slope`` with ``slope_ci95`` (exact errors: the least-squares interval), ``local_slopes``, and
    ``exact_at_grid`` (every error zero or at rounding level relative to 1: no slope)."""
    errors = np.asarray(errors, dtype=np.float64)
    if np.all(errors <= 1e3 * np.finfo(np.float64).eps):
        return {"slope": None, "slope_ci95": None, "local_slopes": None, "exact_at_grid": True}
    fit = loglog_slope_interval(x, errors)
    return {"slope": fit["slope"], "slope_ci95": fit["ci"], "local_slopes": local_loglog_slopes(x, errors),
            "exact_at_grid": False}


def order_refinement(
    problem,
    *,
    eta: float,
    local_steps,
    rounds: int,
    server_lr: float = 1.0,
    order: int | EtaRefinement = 2,
    form: str = DEFAULT_FORM,
    h_ratio: float = 1.0,
    w0=None,
    etas: Sequence[float] | None = None,
    levels: int = DEFAULT_LEVELS,
) -> OrderRefinement:
    """Exact weak errors of the order-``order`` SDE against FedAvg as ``η → 0`` (module docstring).

    Parameters
    ----------
    problem : QuadraticProblem or a least-squares RegressionProblem
        (the chain's exact moments: :func:`fedsde.exact.least_squares_transient_moments`; the SDEs':
        :meth:`fedsde.exact.LeastSquaresSDE.moments`; its minibatch noise as it is)
    eta : float
        The largest client step (the horizon is ``t = rounds·η·h_ratio``).
    local_steps : int or array of int, shape (Q,)
    rounds : int
        Rounds of the largest ``η`` to the horizon.
    server_lr : float
        Server step ``s`` (fixed).
    order : {1, 2} or EtaRefinement
        The SDE's order, or an :class:`~fedsde.params.EtaRefinement` holding it with its checked client steps
        (then ``etas`` is not given: the value's, or the default ones).
    form : {"round-law", "series"}
        Of the order-2 SDE (:mod:`fedsde.sde.order2`).
    h_ratio : float
        ``h/η`` (1: seed 002's ``h = η``).
    w0 : array (d,), optional
        Start (default zero; a point start).  Least squares: a point start only.
    etas : sequence of float, optional
        The client steps (:func:`refinement_etas`); default ``η, η/2, …`` (``levels`` of them).
    levels : int
        Number of halvings' steps when ``etas`` is not given (default 6: 1.5 decades).
    """
    rounds = positive_int("rounds", rounds)
    server_lr = positive_float("server_lr", server_lr)
    h_ratio = positive_float("h_ratio", h_ratio)
    grid = None
    if isinstance(order, EtaRefinement):  # checked where it was built
        if etas is not None:
            raise FedsdeInputError("order_refinement: etas= and an EtaRefinement as order= both given; give the "
                                   "EtaRefinement or the steps, not both")
        order, grid = order.order, order.etas  # no etas: the default steps below
    if order == 2 and form not in ORDER2_FORMS:
        raise FedsdeInputError(f"form={form!r}: must be one of {', '.join(ORDER2_FORMS)}")
    if grid is None:
        grid = refinement_etas(eta, etas, levels)
    t_end = rounds * float(grid[0]) * h_ratio
    ns = np.rint(rounds * grid[0] / grid).astype(np.int64)
    if ns.max() > MAX_ROUNDS:
        raise FedsdeInputError(f"etas: the smallest step needs {int(ns.max())} rounds to reach t = {t_end:g}; at most "
                               f"{MAX_ROUNDS}")
    m0, P0 = initial_law(problem.d, w0)
    errs = {name: np.empty(grid.size) for name in ERRORS}
    chain_phi, sde_phi = np.empty(grid.size), np.empty(grid.size)
    for j, (e, n) in enumerate(zip(grid, ns, strict=True)):
        mc, Pc, ms, Ps, name = _laws(problem, float(e), local_steps, int(n), server_lr, float(e) * h_ratio,
                                     order=order, form=form, m0=m0, P0=P0)
        errs["mean"][j] = np.linalg.norm(mc - ms)
        chain_phi[j] = expected_phi(problem, mc, Pc, "dist2")
        sde_phi[j] = expected_phi(problem, ms, Ps, "dist2")
        errs["second_moment"][j] = abs(chain_phi[j] - sde_phi[j])
        norm = np.linalg.norm(Pc)
        errs["covariance"][j] = np.linalg.norm(Pc - Ps) / norm if norm > 0 else np.nan
    slopes = {k: slope_record(grid, v) for k, v in errs.items()}
    if at_rounding_level(errs["second_moment"], chain_phi, sde_phi):
        slopes["second_moment"] = {"slope": None, "slope_ci95": None, "local_slopes": None, "exact_at_grid": True}
    config = {"eta": float(grid[0]), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": server_lr,
              "rounds": rounds, "h_ratio": h_ratio, "order": order, "form": form if order == 2 else None,
              "noise": "as given (per-round noise O(η²): the small-noise regime)", "method": "exact"}
    return OrderRefinement(order=order, sde=name, etas=grid, rounds=ns, t_end=t_end, errors=errs, slopes=slopes,
                           config=config)
