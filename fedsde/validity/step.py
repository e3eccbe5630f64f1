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
powers are never formed), with ``H_k v`` by Hessian-vector products where the client Hessians would be large
(``torch.func`` for a module problem, finite differences of per-sample gradients for the built-in models): memory
``O(Q·d)``.  A network's loss is non-convex and its linearisation point ``w̄`` is not a minimum; there ``κ`` reads
``s·max |λ(B)|`` (:func:`contraction`, which says so in its ``note``).

Every path evaluates ``B`` as ``η·Σ_k p_k Σ_{j<τ_k} (I − ηH_k)^j H_k`` (the telescoped difference
``I − (I − ηH)^τ = Σ_{j<τ} (I − ηH)^j ηH``) and takes the ends of the sum's spectrum, then multiplies by ``η``: the
same numbers without the cancellation of ``I − (I − ηH)^τ``, which rounds to exactly zero at a tiny ``η``
(``η = 1e-17`` on Grunfeld), where Lanczos would be handed the zero operator.  There ``κ`` is its first-order value
``s·η·λ_max(Σ_k p_k τ_k H_k)``, to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsde._tolerances import LANCZOS_RTOL, LBFGS_FTOL, LOCAL_OPTIMUM_GTOL
from fedsde._validate import client_steps, positive_float
from fedsde.errors import FedsdeInputError

#: L-BFGS steps towards a module problem's linearisation point (κ of a network is a local step measure there)
MODULE_LBFGS_MAXITER = 60


def round_contraction(problem, *, eta: float, local_steps, server_lr: float = 1.0, at=None) -> float:
    """``κ = s·λ_max(B)`` (see the module docstring); a network's: :func:`contraction` (``s·max |λ(B)|``).

    Parameters
    ----------
    problem : QuadraticProblem or a data problem (``client_hessian`` or ``client_hvp``, ``loss``, ``grad``)
    eta, local_steps, server_lr
        ``η``, ``E`` (or per-client ``τ_k``), ``s``.
    at : array (d,), optional
        Data problems: where the round is linearised (default: the optimum, :func:`approximate_optimum`; its
        client Hessians are cached on the problem).
    """
    return contraction(problem, eta=eta, local_steps=local_steps, server_lr=server_lr, at=at).kappa


@dataclass(frozen=True)
class Contraction:
    """The step measure of one ``(η, E, s)``: ``kappa``, the ends ``lam_min``, ``lam_max`` of ``B``'s spectrum
    (``lam_min`` ``None`` where only the top is computed: a convex loss, whose stable round has ``B ⪰ 0``) and a
    ``note`` saying what ``κ`` means where that is not the convex reading."""

    kappa: float
    lam_max: float
    lam_min: float | None = None
    note: str = ""


def contraction(problem, *, eta: float, local_steps, server_lr: float = 1.0, at=None) -> Contraction:
    """``κ`` with the ends of ``B``'s spectrum and what it means (arguments of :func:`round_contraction`).

    A convex loss (quadratic clients, logistic and softmax regression): ``κ = s·λ_max(B)``.  A non-convex one (a
    module problem, an MLP) is linearised at ``w̄``, a point of small gradient rather than a minimum, where ``B`` may
    have negative eigenvalues: along them the linearised round moves *away* from ``w̄`` (negative curvature, or local
    steps past ``η·λ(H_k) = 2``).  There ``κ = s·max |λ(B)|``: the largest fraction by which one round changes the
    distance from ``w̄`` along any direction, which is what the SDE's step must keep small; on a stable convex round
    (``B ⪰ 0``) the two readings agree.  ``λ_max`` by Lanczos to :data:`~fedsde._tolerances.LANCZOS_RTOL`, the lower
    end from :data:`LOWER_END_STEPS` Lanczos steps on ``λ_max·I − B`` (an upper bound of ``λ_min``, exact once the
    Krylov space holds its eigenvector: a bounded cost).  It is local to ``w̄``, and ``note`` says so.
    """
    from fedsde.problems.quadratic.problem import QuadraticProblem

    eta = positive_float("eta", eta)
    s = positive_float("server_lr", server_lr)
    if isinstance(problem, QuadraticProblem):
        steps = client_steps("local_steps", local_steps, problem.Q)
        Bn = _dense_series(problem.U, problem.p, eta, steps)
        lam = eta * float(np.linalg.eigvalsh(0.5 * (Bn + Bn.T))[-1])
        return Contraction(s * lam, lam)
    if not (hasattr(problem, "client_hvp") or hasattr(problem, "client_hessian")):
        raise FedsdeInputError(f"problem: a {type(problem).__name__} has no client Hessians to linearise")
    steps = client_steps("local_steps", local_steps, problem.Q)
    w = approximate_optimum(problem) if at is None else np.asarray(at, dtype=np.float64).reshape(problem.d)
    hvp = _client_hvp(problem, w, cached=at is None)
    convex = not hasattr(problem, "client_hvp") and getattr(getattr(problem, "classifier", None), "convex", True)
    lo, hi = _lanczos_ends(problem, eta, steps, hvp, both=not convex)
    kappa = s * (hi if lo is None else max(hi, -lo))
    note = ""
    if not convex:
        note = (f"κ = s·max |λ(B)| at a point of small gradient w̄ (L-BFGS, at most {MODULE_LBFGS_MAXITER} steps) of a "
                "non-convex loss: local to w̄")
        if lo < -1e-3 * abs(hi):  # a negative end that matters beside λ_max
            note += (f"; λ_min(B) = {lo:.3g} < 0: the linearised round moves away from w̄ along some direction "
                     "(negative curvature, or local steps past η·λ(H_k) = 2)")
    return Contraction(kappa, hi, lo, note)


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


#: Lanczos steps (products with B) spent on the lower end of B's spectrum on a non-convex loss (see _lanczos_ends)
LOWER_END_STEPS = 30
#: client Hessians (Q, d, d) are formed only up to this size (bytes); above it B is applied by Hessian-vector
#: products (finite differences of per-sample gradients for the built-in models, ``torch.func`` for a module)
DENSE_CURVATURE_BYTES = 1 << 29


def _client_hvp(problem, w: np.ndarray, *, cached: bool):
    """``U ↦ [H_k u_k]_k`` (U, result (Q, d)) at ``w``: a module problem's ``client_hvp`` (``torch.func``); else the
    dense client Hessians where they fit in :data:`DENSE_CURVATURE_BYTES` and in a quarter of what the command's
    memory budget leaves (cached on the problem at the optimum; charged to the budget), else central differences
    of the per-sample gradients, ``O(N·d)`` memory."""
    from fedsde._memory import available_memory, current_budget

    if hasattr(problem, "client_hvp"):
        return lambda U: problem.client_hvp(w, U)
    Q, d = problem.Q, problem.d
    need = 8 * Q * d * d
    if need <= min(DENSE_CURVATURE_BYTES, available_memory("cpu") // 4):
        cache = getattr(problem, "_cache", None) if cached else None
        if cache is not None and "validity_client_hessian" in cache:
            H = cache["validity_client_hessian"]
        else:
            if current_budget() is not None:
                current_budget().peak(f"the client Hessians ({Q} × {d} × {d})", need)
            H = np.asarray(problem.client_hessian(w))  # (Q, d, d)
            if cache is not None:
                cache["validity_client_hessian"] = H
        return lambda U: np.einsum("qij,qj->qi", H, U)

    def by_differences(U: np.ndarray) -> np.ndarray:
        out = np.empty((Q, d))
        for k in range(Q):
            u = U[k]
            norm = float(np.linalg.norm(u))
            if norm == 0.0:
                out[k] = 0.0
                continue
            eps = 1e-5 * max(1.0, float(np.linalg.norm(w))) / norm  # central differences: O(ε²) + O(1e-16/ε)
            out[k] = (problem.per_sample_grads(w + eps * u, k).mean(0)
                      - problem.per_sample_grads(w - eps * u, k).mean(0)) / (2 * eps)
        return out

    return by_differences


def _lanczos_ends(problem, eta: float, steps: np.ndarray, hvp, *, both: bool) -> tuple[float | None, float]:
    """``(λ_min, λ_max)`` of ``B`` (``λ_min`` ``None`` unless ``both``) by Lanczos on ``B/η = v ↦ Σ_k p_k
    Σ_{j<τ_k} (I − ηH_k)^j H_k v`` with ``H_k u_k`` from ``hvp`` (matrix powers are never formed; see the module
    docstring): ``τ_k`` products per client, the ends multiplied by ``η``."""

    d, Q = problem.d, problem.Q

    def matvec(v):
        v = np.asarray(v, dtype=np.float64).reshape(d)
        U, acc = np.broadcast_to(v, (Q, d)).copy(), np.zeros((Q, d))
        for i in range(int(steps.max())):
            HU = hvp(U)
            live = (steps > i)[:, None]
            acc = np.where(live, acc + HU, acc)
            U = np.where(live, U - eta * HU, U)
        return problem.p @ acc

    v0 = np.random.default_rng(0).standard_normal(d)  # the start vector of _top_eigenvalue
    if d <= 3:  # too small for ARPACK: the dense matrix from d products
        Bn = np.stack([matvec(e) for e in np.eye(d)], axis=1)
        lam = eta * np.linalg.eigvalsh(0.5 * (Bn + Bn.T))
        return (float(lam[0]) if both else None), float(lam[-1])
    if not np.any(matvec(v0)):  # the zero operator (ARPACK refuses it)
        return (0.0 if both else None), 0.0
    hi = _top_eigenvalue(matvec, d)
    if not both:
        return None, eta * hi
    # the lower end: the top Ritz value of λ_max·I − B after LOWER_END_STEPS Lanczos steps, a bounded cost (the
    # lower end of B sits in a cluster of eigenvalues near 0 that Lanczos would take long to resolve); it bounds
    # λ_min from above, which is what κ needs: whether −λ_min is comparable with λ_max
    return eta * (hi - _top_ritz(lambda v: hi * v - matvec(v), v0, LOWER_END_STEPS)), eta * hi


def _top_eigenvalue(matvec, d: int) -> float:
    """``λ_max`` of the symmetric operator ``matvec`` on R^d by Lanczos from a fixed start (ARPACK's default draws
    one at random, which moves λ in its last bits from run to run); 0 for the zero operator (ARPACK refuses it)."""
    import scipy.sparse.linalg as sla

    v0 = np.random.default_rng(0).standard_normal(d)
    if not np.any(matvec(v0)):
        return 0.0
    op = sla.LinearOperator((d, d), matvec=matvec, dtype=np.float64)
    return float(sla.eigsh(op, k=1, which="LA", return_eigenvectors=False, tol=LANCZOS_RTOL, v0=v0)[0])


def _top_ritz(apply, v0: np.ndarray, steps: int) -> float:
    """The largest eigenvalue of the tridiagonal matrix of ``steps`` Lanczos steps of the symmetric operator
    ``apply`` from ``v0`` (full reorthogonalisation): a lower bound of its largest eigenvalue, exact in exact
    arithmetic once the Krylov space holds its eigenvector."""
    from scipy.linalg import eigh_tridiagonal

    q = v0 / np.linalg.norm(v0)
    basis, alpha, beta = [q], [], []
    for j in range(min(steps, q.size)):
        w = np.asarray(apply(basis[-1]), dtype=np.float64).reshape(-1)
        alpha.append(float(basis[-1] @ w))
        for b in basis:  # full reorthogonalisation against the basis (steps × d numbers)
            w -= (b @ w) * b
        nrm = float(np.linalg.norm(w))
        if j == steps - 1 or nrm <= 1e-12 * max(1.0, abs(alpha[-1])):
            break
        beta.append(nrm)
        basis.append(w / nrm)
    return float(eigh_tridiagonal(np.array(alpha), np.array(beta[:len(alpha) - 1]), eigvals_only=True)[-1])


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
