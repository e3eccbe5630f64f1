"""Both ends of a scaling rule on a least-squares regression problem, computed exactly (no sampling).

Least-squares clients with real minibatch sampling (:class:`~fedsde.problems.RegressionProblem`) have exact first
and second moments of minibatch FedAvg (:mod:`fedsde.exact.least_squares`: the noise is quadratic in the iterate,
yet ``(E w, E wwᵀ)`` closes).  Each end of a rule is that chain with its own ``(η, E, s, n)`` and its own clients
and batch size (:mod:`fedsde.scaling.least_squares_clients`): its stationary mean and covariance
(:func:`~fedsde.exact.least_squares_stationary_law`, where the second-moment operator contracts) and its mean and
covariance after its own number of rounds, i.e. at the common horizon ``τ = n·s·η·E``
(:func:`~fedsde.exact.least_squares_transient_moments`, from the same start).  The discrepancy of the two ends is
that of quadratic clients (:func:`fedsde.scaling.quadratic.moment_discrepancy`: ``excess_loss_rel``, ``cov_rel``,
``mean_shift_sd``, ``w2_rel``) with the problem's ``H = Σ_k p_k (Ā_k + λI)`` and least-squares optimum ``w*``.

The first-order invariants: the horizon ``τ`` and the temperature ``T = s·η·Σ_k p_k² Σ_k(w)``, which on least
squares depends on ``w``; it is reported at the optimum ``w*`` (:func:`~fedsde.scaling.least_squares_clients.
temperature_matrix`).  ``local-steps`` and ``server-client`` keep it exactly; ``clients`` and ``client-lr`` with
copied clients (the default) too; ``batch`` with sampling with replacement too, without replacement only
approximately (``Σ_k ∝ (n_k − b)/(b(n_k − 1))``); ``clients`` and ``client-lr`` with split rows only approximately.
The notes give the measured change.  ``server-client`` at ``E = 1`` is exact to every order (the round depends on
``s·η`` only, ``docs/scaling.md``); ``local-steps`` at ``s = 1`` is not, even with one Hessian, because the
minibatch noise depends on the iterate (``docs/scaling.md``, "What is exact").

Memory: the exact laws are matrix-free and grow with the rows times ``d`` (:func:`fedsde.exact.least_squares.
work_bytes`); :func:`check_memory` refuses, with the estimate, before anything is computed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fedsde._validate import start_point
from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.scaling.batch_rule import BatchFactor, map_config, problem_batch_factor
from fedsde.scaling.least_squares_clients import (
    NEW_CLIENTS,
    check_new_clients,
    end_problem,
    regression_notes,
    temperature_matrix,
)
from fedsde.scaling.quadratic import moment_discrepancy
from fedsde.scaling.rules import FedAvgConfig, ScalingRule, check_client_step, get_rule


def _check_problem(problem) -> None:
    if getattr(problem, "model", None) != "least-squares" or not hasattr(problem, "minibatch_covariance"):
        raise FedsdeInputError(f"problem: {type(problem).__name__} is not a least-squares RegressionProblem")
    if problem.batch_size is None:
        raise FedsdeInputError("problem: a regression problem needs batch_size for the exact minibatch moments "
                               "(set it in the file)")


def map_ends(problem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float, *,
             new_clients: str = "copy") -> tuple[FedAvgConfig, FedAvgConfig]:
    """Validate and map without building anything: ``(base config, scaled config)``.

    ``config.clients``/``config.batch_size`` default to the problem's.  Raises a :class:`FedsdeInputError` when the
    rule cannot apply: an integer field (``E``, ``n``, ``Q``, ``b``) that would not stay a positive integer, a
    whole ``κ`` needed to multiply the clients, ``κb`` above a client's rows without replacement, a split client
    with too few rows, or ``η·λ_max ≥ 2`` at either end.
    """
    from fedsde._validate import choice

    _check_problem(problem)
    rule = get_rule(rule)
    choice("new_clients", new_clients, NEW_CLIENTS)
    if config.clients is not None and config.clients != problem.Q:
        raise FedsdeInputError(f"clients={config.clients}: the problem has Q={problem.Q} clients")
    if config.batch_size is not None and config.batch_size != problem.batch_size:
        raise FedsdeInputError(f"batch_size={config.batch_size}: the problem has batch_size={problem.batch_size}")
    config = replace(config, clients=problem.Q, batch_size=problem.batch_size)
    if "clients" in rule.changes and (round(kappa) != kappa or kappa < 1):
        raise FedsdeInputError(
            f"kappa={float(kappa)!r}: rule {rule.name!r} on a regression problem makes κ clients of each client "
            f"(new_clients={new_clients!r}), so κ must be a whole number >= 1")
    # the batch size (and clients) first: g needs a valid κb
    check_new_clients(problem, rule, kappa, rule.apply(config, kappa, factor=1.0 if rule.finite_population
                                                       else None), new_clients)
    new = map_config(problem, config, rule, kappa, keep="temperature")[0]
    lam = float(np.max(problem.max_curvature()))
    check_client_step(config.eta, lam, which="base")
    check_client_step(new.eta, lam, which=f"kappa={float(kappa)!r} (rule {rule.name!r}, eta={new.eta:g})")
    return config, new


def memory_need(problem, base: FedAvgConfig, scaled: FedAvgConfig) -> int:
    """Bytes the exact laws of the larger end need at their peak (float64; an estimate).

    The matrix-free second-moment map of :func:`~fedsde.exact.least_squares_stationary_law` works on the rows
    (:func:`fedsde.exact.least_squares.work_bytes`: ``O(N d)``, clients grouped by size) plus ``O(Q d²)`` for the
    clients' maps, and the dense ``d² × d²`` operator only where ``d`` is small.  Splitting clients keeps the
    rows, so the larger ``Q`` sets the peak.
    """
    from fedsde.exact.least_squares import DENSE_MAX_D, work_bytes

    d, rows = problem.d, int(np.sum(problem.sizes))

    def end(cfg: FedAvgConfig) -> int:
        parts = max(1, (cfg.clients or problem.Q) // problem.Q)
        Q = problem.Q * parts
        dense = 8 * 3 * d**4 if d <= DENSE_MAX_D else 0
        return work_bytes(d, rows) + 8 * 8 * Q * (d + 1) ** 2 + dense + 8 * rows * (2 * d + 3)

    return int(max(end(base), end(scaled)))


def check_memory(problem, pairs: Sequence[tuple[FedAvgConfig, FedAvgConfig]], *, memory_limit=None) -> int:
    """Refuse, with the estimate, exact laws whose :func:`memory_need` (largest over the ``(base, scaled)`` pairs)
    does not fit in what is available (:func:`fedsde._memory.available_memory`); returns the estimate in bytes."""
    from fedsde._memory import available_memory, memory_fits

    need = max(memory_need(problem, b, s) for b, s in pairs)
    rows = int(np.sum(problem.sizes))
    memory_fits(f"exact least-squares laws ({rows} rows × d={problem.d})", need,
                available_memory("cpu", memory_limit),
                "the cost grows with the rows times the features (and the clients' d×d maps); use fewer rows or a "
                "smaller kappa, or set FEDSDE_MEMORY_LIMIT if more memory is free than detected")
    return need


@dataclass(frozen=True)
class LeastSquaresEnd:
    """Exact laws of one end of a rule on a regression problem.

    Attributes
    ----------
    config : FedAvgConfig
    problem : RegressionProblem
        The clients and batch size this end runs on.
    stationary_mean, stationary_cov : ndarray, shapes (d,), (d, d), or None
        ``None`` when the chain has no stationary law (``no_stationary`` says why).
    spectral_radius : float
        Of the mean map ``E[w_{n+1} | w_n] = A w_n + a``.
    second_moment_radius : float or None
        Of the second-moment operator (``None`` where it was not built: the mean map does not contract).
    transient_mean, transient_cov : ndarray, shapes (d,), (d, d)
        Moments after ``config.rounds`` rounds from ``w0``.
    temperature : ndarray, shape (d, d)
        ``s·η·Σ_k p_k² Σ_k(w*)`` of this end, at the base problem's optimum.
    no_stationary : str or None
    """

    config: FedAvgConfig
    problem: object = field(repr=False)
    stationary_mean: np.ndarray | None
    stationary_cov: np.ndarray | None
    spectral_radius: float
    second_moment_radius: float | None
    transient_mean: np.ndarray
    transient_cov: np.ndarray
    temperature: np.ndarray
    no_stationary: str | None = None


def end_law(problem, config: FedAvgConfig, *, w0, optimum, memory_limit=None) -> LeastSquaresEnd:
    """Exact stationary and transient (at ``config.rounds``) moments of one end; ``optimum`` is where the
    temperature is evaluated."""
    from fedsde.exact import least_squares_round_law, least_squares_stationary_law, least_squares_transient_moments

    eta, steps, s = config.eta, config.local_steps, config.server_lr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reason = rho2 = mean = cov = None
        try:
            st = least_squares_stationary_law(problem, eta, steps, s, memory_limit=memory_limit)
            mean, cov, rho1, rho2 = st.mean, st.cov, st.law.spectral_radius, st.spectral_radius
        except NoStationaryLawError as exc:
            reason = str(exc)
            rho1 = least_squares_round_law(problem, eta, steps, s).spectral_radius
        tr = least_squares_transient_moments(problem, eta, steps, config.rounds, s, w0=w0, record=[config.rounds])
    return LeastSquaresEnd(config, problem, mean, cov, float(rho1), rho2, tr.final_mean, tr.final_cov,
                           temperature_matrix(problem, config, optimum), reason)


@dataclass(frozen=True)
class LeastSquaresScaling:
    """Both ends of a rule on a regression problem and their discrepancy (the keys of
    :class:`~fedsde.scaling.QuadraticScaling`, plus notes).

    Attributes
    ----------
    rule : ScalingRule
    kappa : float
    base, scaled : LeastSquaresEnd
    stationary, transient : dict[str, float]
        :func:`~fedsde.scaling.quadratic.moment_discrepancy` of the stationary laws (``inf`` where one is missing)
        and of the laws at the horizon.
    new_clients : str
        How the ``clients`` and ``client-lr`` rules made ``κQ`` clients (``"copy"`` or ``"split"``).
    notes : list of str
        What the scaled clients are and the measured change of an invariant the rule keeps only approximately.
    batch : BatchFactor or None
        The ``batch`` rule's factor ``g`` on the server step and the rounds (:mod:`fedsde.scaling.batch_rule`).
    """

    rule: ScalingRule
    kappa: float
    base: LeastSquaresEnd
    scaled: LeastSquaresEnd
    stationary: dict
    transient: dict
    new_clients: str = "copy"
    notes: list = field(default_factory=list)
    batch: BatchFactor | None = None

    @property
    def max_rel(self) -> float:
        """Largest of ``excess_loss_rel`` and ``cov_rel`` over the stationary and horizon laws."""
        return max(d[k] for d in (self.stationary, self.transient) for k in ("excess_loss_rel", "cov_rel"))


def compare_least_squares(problem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float | Sequence[float], *,
                          w0=None, new_clients: str = "copy", seed: int = 0, memory_limit=None):
    """Exact moments at both ends of ``rule`` with factor ``kappa`` (or each of a list) and their discrepancy.

    Parameters
    ----------
    problem : RegressionProblem
        With a ``batch_size``; its ``Q`` clients and ``b`` are the base's.
    config : FedAvgConfig
        The base run (``clients`` and ``batch_size`` default to the problem's).
    rule : str or ScalingRule
    kappa : float or sequence of float
        A list gives one result per ``κ``, with every ``κ`` validated and the memory of the largest checked before
        any law is computed (the base's laws computed once).
    w0 : array, shape (d,), optional
        Start of both chains (default: the problem's ``initial_weights()``).
    new_clients : {"copy", "split"}
        How ``clients`` and ``client-lr`` make ``κQ`` clients (:mod:`fedsde.scaling.least_squares_clients`).
    seed : int
        Seed of the random split (``new_clients="split"``).
    memory_limit : int or str, optional
        Cap on the memory the laws may use (default: what is free, or ``FEDSDE_MEMORY_LIMIT``).

    Returns
    -------
    LeastSquaresScaling, or a list of them for a list of ``κ``

    Raises
    ------
    FedsdeInputError
        If the rule cannot apply (:func:`map_ends`) or the laws do not fit in memory (:func:`check_memory`).
    """
    rule = get_rule(rule)
    many = np.ndim(kappa) > 0
    kappas = [float(k) for k in np.atleast_1d(np.asarray(kappa, dtype=np.float64))]
    pairs = [map_ends(problem, config, rule, k, new_clients=new_clients) for k in kappas]
    check_memory(problem, pairs, memory_limit=memory_limit)
    w_start = problem.initial_weights() if w0 is None else start_point(w0, problem.d)
    H, w_star = problem.hessian(), problem.optimum
    base = end_law(problem, pairs[0][0], w0=w_start, optimum=w_star, memory_limit=memory_limit)
    out = []
    for k, (_, new) in zip(kappas, pairs, strict=True):
        other = end_problem(problem, new, new_clients=new_clients, seed=seed)
        scaled = end_law(other, new, w0=w_start, optimum=w_star, memory_limit=memory_limit)
        stat = moment_discrepancy(H, w_star, base.stationary_mean, base.stationary_cov, scaled.stationary_mean,
                                  scaled.stationary_cov)
        trans = moment_discrepancy(H, w_star, base.transient_mean, base.transient_cov, scaled.transient_mean,
                                   scaled.transient_cov)
        batch = problem_batch_factor(problem, k) if rule.finite_population else None
        notes = regression_notes(rule, k, problem, other, base.temperature, scaled.temperature,
                                 new_clients=new_clients, seed=seed, batch=batch, rounds=config.rounds)
        out.append(LeastSquaresScaling(rule, k, base, scaled, stat, trans, new_clients, notes, batch))
    return out if many else out[0]
