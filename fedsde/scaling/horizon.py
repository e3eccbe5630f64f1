"""Where a rule's horizon ends: both ends of a rule over a long horizon on a non-quadratic problem.

On quadratic clients that share one Hessian the ``local-steps`` rule at ``s = 1`` is exact (``docs/scaling.md``):
the local maps are affine with a common linear part, so averaging commutes with them.  A loss with a third
derivative breaks this: the clients' local iterates spread (their noise) and the mean of ``∇F`` over that spread
is ``∇F(w̄) + ½∇³F[Cov] + …``, a drift that grows with the length ``E`` of the round over which the spread builds
up.  Doubling ``E`` (and halving the rounds) therefore moves the mean path by ``O(η)`` relative to the first-order
SDE's noise-driven terms, however alike the clients; Gu, Lyu, Huang & Arora (ICLR 2023, "Why (and when) does local
SGD generalize better than SGD?") identify this drift near a manifold of minima, where it accumulates over
``O(η⁻²)`` steps and grows with ``ηE``.

:func:`horizon_discrepancy` runs both ends of a rule with common random numbers (same seed, one stream per
replicate, as :func:`fedsde.scaling.compare_data`) and records, at common values of ``τ = n·s·η·E`` on a
geometric grid, the distance between the two ends' mean server weights and the paired change of the train loss,
each with its standard error.  :func:`noisy_logistic_problem` is the small problem the documentation and gallery
F15 use: identical clients (one loss, one Hessian at every point, no client drift), so that on its quadratic model
(:func:`quadratic_model`) the rule is exact and whatever separates the ends comes from ``∇³F``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsde.scaling.rules import FedAvgConfig, ScalingRule, get_rule


def noisy_logistic_problem(*, clients: int = 4, samples: int = 400, seed: int = 0, batch_size: int = 1,
                           l2: float = 1e-2):
    """Logistic regression on two skewed features, every client holding the same ``samples`` points.

    ``x = g − 1`` with ``g ~ Gamma(2, 1)`` per feature (skewed, so the loss's third derivative at ``w*`` does not
    vanish), labels ``y ~ Bernoulli(σ(1.5 x₁ − x₂ + 0.5))`` (noisy: a unique, finite minimiser), intercept, ridge
    ``l2``; ``d = 3``.  All clients share the data and have weight ``1/Q``: ``F_k = F`` for every ``k``.  No test
    set.

    Parameters
    ----------
    clients : int
        ``Q``.
    samples : int
        ``N``, samples of the (shared) training set.
    seed : int
        Seed of the data.
    batch_size : int
        Minibatch size ``b`` of every client (1: the noisiest).
    l2 : float
        Ridge coefficient.
    """
    from fedsde._validate import positive_int
    from fedsde.problems import ClassificationProblem

    Q, N = positive_int("clients", clients), positive_int("samples", samples, minimum=2)
    rng = np.random.default_rng(seed)
    X = rng.gamma(2.0, 1.0, size=(N, 2)) - 1.0
    z = X @ np.array([1.5, -1.0]) + 0.5
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)
    return ClassificationProblem.from_clients(
        [X] * Q, [y] * Q, model="logistic", l2=l2, batch_size=batch_size, p=np.full(Q, 1.0 / Q),
        name=f"noisy logistic (identical clients, Q = {Q}, N = {N}, b = {batch_size})",
        info={"generator": "fedsde.scaling.horizon.noisy_logistic_problem", "seed": seed},
    )


def quadratic_model(problem, w=None):
    """The quadratic clients that match ``problem`` to second order at ``w`` (default its optimum).

    ``U_k = ∇²F_k(w)``, ``a_k = w − U_k⁻¹∇F_k(w)`` and ``Σ_k`` the minibatch covariance at ``w`` (seed 002,
    Sec. 3), same weights ``p_k``: a :class:`~fedsde.problems.QuadraticProblem` with no third derivative, on which
    :func:`fedsde.scaling.compare_quadratic` gives the exact laws of both ends.
    """
    from fedsde.problems import QuadraticProblem

    w = problem.optimum if w is None else np.asarray(w, dtype=np.float64).reshape(problem.d)
    U = problem.client_hessian(w)
    G = problem.client_grad(w)
    a = w - np.linalg.solve(U, G[..., None])[..., 0]
    Sigma = problem.minibatch_covariance(w, problem.batch_size)
    return QuadraticProblem.from_arrays(U, a, Sigma, problem.p, name=f"quadratic model of {problem.name}")


@dataclass(frozen=True)
class HorizonCurves:
    """Both ends of a rule over ``τ``: how far apart their mean server weights and their train loss are.

    Attributes
    ----------
    rule : ScalingRule
    kappa : float
    base, scaled : FedAvgConfig
    tau : ndarray, shape (K,)
        Common SDE times ``τ = n·s·η·E`` (a geometric grid of rounds both ends reach).
    distance, distance_se : ndarray, shape (K,)
        ``‖E w_s − E w_b‖`` estimated from the ``R`` paired differences ``D_r = w_s,r − w_b,r`` without the
        upward bias of the norm of a noisy mean: ``√max(0, ‖D̄‖² − Tr S/R)`` (``E‖D̄‖² = ‖E D‖² + Tr Cov(D)/R``;
        ``S`` the sample covariance of the ``D_r``), and its standard error (delta method: ``√(uᵀ S u / R)``,
        ``u = D̄/‖D̄‖``).
    noise_floor : ndarray, shape (K,)
        ``√(Tr S / R)``: what ``‖D̄‖`` shows on average when the ends do not differ at all.
    spread : ndarray, shape (K,)
        ``√Tr Cov(w_b)``: the spread of the base's server weights, the unit in which the distance matters.
    loss_diff, loss_diff_se : ndarray, shape (K,)
        Paired change of the train loss ``F(w_s) − F(w_b)`` and its standard error.
    replicates : int
    """

    rule: ScalingRule
    kappa: float
    base: FedAvgConfig
    scaled: FedAvgConfig
    tau: np.ndarray
    distance: np.ndarray
    distance_se: np.ndarray
    noise_floor: np.ndarray
    spread: np.ndarray
    loss_diff: np.ndarray
    loss_diff_se: np.ndarray
    replicates: int


def geometric_rounds(base: FedAvgConfig, scaled: FedAvgConfig, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Rounds ``(r_b, r_s)`` at which both ends reach the same ``τ``: ``0`` and about ``points`` values spaced
    geometrically up to the horizon (``r_b = j·n_b/g``, ``r_s = j·n_s/g``, ``g = gcd(n_b, n_s)``)."""
    g = math.gcd(base.rounds, scaled.rounds)
    j = np.unique(np.round(np.geomspace(1, g, max(1, int(points)))).astype(np.int64))
    j = np.concatenate([[0], j[(j >= 1) & (j <= g)]])
    return j * (base.rounds // g), j * (scaled.rounds // g)


def horizon_discrepancy(problem, config: FedAvgConfig, rule: str | ScalingRule = "local-steps", kappa: float = 2,
                        *, replicates: int = 64, seed: int = 0, w0=None, points: int = 12,
                        memory_limit=None) -> HorizonCurves:
    """Simulate both ends of ``rule`` on a data problem and measure how far apart they are at each ``τ``.

    Parameters
    ----------
    problem : ClassificationProblem
    config : FedAvgConfig
        The base run; its ``rounds`` set the horizon ``τ = n·s·η·E``.
    rule, kappa
        The rule and its factor (:data:`fedsde.scaling.RULES`).
    replicates : int
        ``R`` paired runs per end (common random numbers: the same ``seed``, one stream per replicate).
    seed : int
    w0 : array, shape (d,), optional
        Start of both ends (default ``problem.initial_weights()``).
    points : int
        About this many values of ``τ`` after 0, spaced geometrically (:func:`geometric_rounds`).
    memory_limit : int or str, optional
        Refuse up front, with the estimate, a run that does not fit (:func:`fedsde.scaling.data.check_memory`).

    Returns
    -------
    HorizonCurves
    """
    from fedsde._validate import positive_int
    from fedsde.scaling.data import check_memory, end_problem, map_end
    from fedsde.sim import simulate

    rule = get_rule(rule)
    R = positive_int("replicates", replicates, minimum=2)
    base, new = map_end(problem, config, rule, kappa)
    check_memory(problem, base, new, replicates=R, points=points, memory_limit=memory_limit)
    other = end_problem(problem, new, split_seed=seed)
    rb, rs = geometric_rounds(base, new, points)
    start = problem.initial_weights() if w0 is None else np.asarray(w0, dtype=np.float64).reshape(problem.d)
    ends = []
    for prob, cfg, rec in ((problem, base, rb), (other, new, rs)):
        res = simulate(prob, eta=cfg.eta, local_steps=cfg.local_steps, rounds=cfg.rounds, replicates=R, seed=seed,
                       server_lr=cfg.server_lr, w0=start, record=rec.tolist(), block_size=1)
        ends.append(np.asarray(res.weights))  # (K, R, d)
    Wb, Ws = ends
    D = Ws - Wb
    mean = D.mean(1)
    norm = np.linalg.norm(mean, axis=-1)
    S = np.einsum("kri,krj->kij", D - mean[:, None], D - mean[:, None]) / (R - 1)
    unit = np.divide(mean, norm[:, None], out=np.zeros_like(mean), where=norm[:, None] > 0)
    dist_se = np.sqrt(np.maximum(np.einsum("ki,kij,kj->k", unit, S, unit), 0.0) / R)
    floor = np.sqrt(np.maximum(np.trace(S, axis1=1, axis2=2), 0.0) / R)
    dist = np.sqrt(np.maximum(norm**2 - floor**2, 0.0))
    spread = np.sqrt(np.maximum(np.trace(np.einsum("kri,krj->kij", Wb - Wb.mean(1, keepdims=True),
                                                   Wb - Wb.mean(1, keepdims=True)) / (R - 1), axis1=1, axis2=2), 0))
    K, d = Wb.shape[0], problem.d
    Lb = np.asarray(problem.loss(Wb.reshape(-1, d))).reshape(K, R)
    Ls = np.asarray(problem.loss(Ws.reshape(-1, d))).reshape(K, R)
    dL = Ls - Lb
    return HorizonCurves(rule, float(kappa), base, new, rb * base.tau_per_round, dist, dist_se, floor, spread,
                         dL.mean(1), dL.std(1, ddof=1) / np.sqrt(R), R)
