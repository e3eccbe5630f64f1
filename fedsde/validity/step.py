"""A step measure comparable across problems: the per-round contraction ``κ = s·λ_max(B)`` of FedAvg's round map.

On quadratic clients one round maps the mean as ``m ↦ m − s B (m − c)`` with
``B = Σ_k p_k [I − (I − ηU_k)^{τ_k}]`` (:func:`fedsde.exact.round_law`; reference/seed-fedsde.md §3b), so
``κ = s·λ_max(B)`` is the fraction of the distance to the fixed point that one round removes along the stiffest
direction — free of units (a change of units of ``w`` or of the loss leaves it unchanged) and of the clock ``h``.
The SDE's Euler step is accurate when it is small: its stationary variance is off by the factor ``1 − sβ/2``
(§3b), and the mean path by ``O(κ)`` of its movement.  ``λ_max`` of the curvature alone (``s·η·E·λ_max(U)``) is
not comparable across problems: it ignores the contraction's saturation at ``ηU ~ 1``, client weights and ``E``.

For a data problem the analogue linearises the round at the optimum: ``H_k = ∇²F_k(w*)`` in place of ``U_k``.
``λ_max`` is found by Lanczos (``scipy.sparse.linalg.eigsh``) on ``v ↦ Σ_k p_k [v − (I − ηH_k)^{τ_k} v]`` (matrix
powers are never formed).

Every path evaluates ``B`` as ``η·Σ_k p_k Σ_{j<τ_k} (I − ηU_k)^j U_k`` (the telescoped difference
``I − (I − ηU)^τ = Σ_{j<τ} (I − ηU)^j ηU``) and takes ``λ_max`` of the sum, then multiplies by ``η``: the same
number without the cancellation of ``I − (I − ηU)^τ``, which rounds to exactly zero at a tiny ``η``
(``η = 1e-17`` on Grunfeld), where Lanczos would be handed the zero operator.  There ``κ`` is its first-order value
``s·η·λ_max(Σ_k p_k τ_k U_k)``, to rounding.
"""

from __future__ import annotations

import numpy as np

from fedsde._tolerances import LANCZOS_RTOL, LBFGS_FTOL, LOCAL_OPTIMUM_GTOL
from fedsde._validate import client_steps, positive_float
from fedsde.errors import FedsdeInputError

#: L-BFGS steps towards a module problem's linearisation point (κ of a network is a local step measure there)
MODULE_LBFGS_MAXITER = 60


def round_contraction(problem, *, eta: float, local_steps, server_lr: float = 1.0, at=None) -> float:
    """``κ = s·λ_max(B)`` (see the module docstring).

    Parameters
    ----------
    problem : QuadraticProblem or a data problem (``client_hessian``, ``loss``, ``grad``)
    eta, local_steps, server_lr
        ``η``, ``E`` (or per-client ``τ_k``), ``s``.
    at : array (d,), optional
        Data problems: where the round is linearised (default: the optimum, :func:`approximate_optimum`; its
        client Hessians are cached on the problem).
    """
    from fedsde.problems.quadratic.problem import QuadraticProblem

    eta = positive_float("eta", eta)
    s = positive_float("server_lr", server_lr)
    if isinstance(problem, QuadraticProblem):
        steps = client_steps("local_steps", local_steps, problem.Q)
        Bn = _dense_series(problem.U, problem.p, eta, steps)
        return s * eta * float(np.linalg.eigvalsh(0.5 * (Bn + Bn.T))[-1])
    if hasattr(problem, "client_hvp"):  # a module problem: Hessian-vector products, no (Q, d, d) Hessians
        return s * eta * _lanczos_top(problem, eta, client_steps("local_steps", local_steps, problem.Q), at)
    if not hasattr(problem, "client_hessian"):
        raise FedsdeInputError(f"problem: a {type(problem).__name__} has no client Hessians to linearise")

    steps = client_steps("local_steps", local_steps, problem.Q)
    cache = getattr(problem, "_cache", None) if at is None else None
    if cache is not None and "validity_client_hessian" in cache:
        H = cache["validity_client_hessian"]
    else:
        w = approximate_optimum(problem) if at is None else np.asarray(at, dtype=np.float64).reshape(problem.d)
        H = np.asarray(problem.client_hessian(w))  # (Q, d, d)
        if cache is not None:
            cache["validity_client_hessian"] = H
    d = problem.d

    def matvec(v):
        v = np.asarray(v, dtype=np.float64).reshape(d)
        out = np.zeros(d)
        for k in range(problem.Q):
            u, acc = v.copy(), np.zeros(d)
            for _ in range(int(steps[k])):
                Hu = H[k] @ u
                acc += Hu
                u = u - eta * Hu
            out += problem.p[k] * acc
        return out

    return s * eta * _top_eigenvalue(matvec, d)


def _dense_series(U: np.ndarray, p: np.ndarray, eta: float, steps: np.ndarray) -> np.ndarray:
    """``B/η = Σ_k p_k Σ_{j<τ_k} (I − ηU_k)^j U_k`` of dense client Hessians ``U`` (Q, d, d), shape (d, d)."""
    out = np.zeros(U.shape[1:])
    for k in range(U.shape[0]):
        term, acc = U[k].copy(), np.zeros(U.shape[1:])
        for _ in range(int(steps[k])):
            acc += term
            term = term - eta * (U[k] @ term)
        out += p[k] * acc
    return out


def _top_eigenvalue(matvec, d: int) -> float:
    """``λ_max`` of the symmetric operator ``matvec`` on R^d by Lanczos from a fixed start (ARPACK's default draws
    one at random, which moves λ in its last bits from run to run); 0 for the zero operator (ARPACK refuses it)."""
    import scipy.sparse.linalg as sla

    v0 = np.random.default_rng(0).standard_normal(d)
    if not np.any(matvec(v0)):
        return 0.0
    op = sla.LinearOperator((d, d), matvec=matvec, dtype=np.float64)
    return float(sla.eigsh(op, k=1, which="LA", return_eigenvectors=False, tol=LANCZOS_RTOL, v0=v0)[0])


def _lanczos_top(problem, eta: float, steps: np.ndarray, at) -> float:
    """``λ_max(B)/η`` by Lanczos with ``H_k v_k`` from ``problem.client_hvp(w, V)`` (V, result (Q, d); ``torch.func``
    forward-over-reverse products for module problems): ``Σ_{j<τ_k} (I − ηH_k)^j H_k v`` is ``τ_k`` products per
    client."""
    w = approximate_optimum(problem) if at is None else np.asarray(at, dtype=np.float64).reshape(problem.d)
    d, Q = problem.d, problem.Q

    def matvec(v):
        v = np.asarray(v, dtype=np.float64).reshape(d)
        U, acc = np.broadcast_to(v, (Q, d)).copy(), np.zeros((Q, d))
        for i in range(int(steps.max())):
            HU = problem.client_hvp(w, U)
            live = (steps > i)[:, None]
            acc = np.where(live, acc + HU, acc)
            U = np.where(live, U - eta * HU, U)
        return problem.p @ acc

    return _top_eigenvalue(matvec, d)


def approximate_optimum(problem) -> np.ndarray:
    """``w*`` of a data problem by L-BFGS on ``loss``/``grad`` from its initial weights, to ``‖∇F‖ <= 1e-6``
    (:data:`~fedsde._tolerances.LOCAL_OPTIMUM_GTOL`: enough for the curvature there; the problem's own
    ``optimum`` polishes further with Newton steps), cached."""
    cache = getattr(problem, "_cache", None)
    if cache is not None and "validity_optimum" in cache:
        return cache["validity_optimum"].copy()
    import scipy.optimize

    start = problem.initial_weights() if hasattr(problem, "initial_weights") else np.zeros(problem.d)
    # a user's network (module problem) is non-convex and each full-batch pass is costly: its linearisation point is
    # the L-BFGS iterate after at most MODULE_LBFGS_MAXITER steps, a point of small gradient rather than a minimum
    maxiter = MODULE_LBFGS_MAXITER if hasattr(problem, "client_hvp") else 5000
    options = {"gtol": LOCAL_OPTIMUM_GTOL, "ftol": LBFGS_FTOL, "maxiter": maxiter, "maxcor": 30}
    res = scipy.optimize.minimize(lambda x: (float(problem.loss(x)), np.asarray(problem.grad(x))), start, jac=True,
                                  method="L-BFGS-B", options=options)
    if cache is not None:
        cache["validity_optimum"] = res.x.copy()
    return res.x
