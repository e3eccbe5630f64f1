"""Constants of seed 002's bounds (L, μ, Tr Σ_k, V*, τ, F*, w*), each with how it was obtained.

Quadratic clients ``F_k(w) = ½ (w − a_k)ᵀ U_k (w − a_k)`` (reference/seed-fedsde.md §5):

* gradients are unbounded on ℝᵈ, so ``L`` is taken on a stated region ``W = B(w*, R)`` (erratum 6):
  ``L = max_k (‖U_k (w* − a_k)‖₂ + λ_max(U_k) R)`` (triangle inequality, attained up to alignment) and the
  ∞-norm version ``L_∞ = max_{k,j} (|[U_k (w* − a_k)]_j| + R ‖(U_k)_{j,:}‖₂)`` (exact sup over the ball);
* ``μ = max_k λ_max(U_k)``;
* ``V̂₁(η) = Σ_k p_k² Σ_{m<E} (I − ηU_k)^m Σ_k (I − ηU_k)^m`` exactly; ``V*`` is its sup over the client
  learning rates the schedule visits (evaluated on a grid of η);
* ``τ = 2`` (WQC of the aggregate quadratic about its minimiser: ``⟨∇F, w − w*⟩ = 2(F − F*)``).

Use :func:`quadratic_region_radius` for a radius that covers the exact transient law (mean ± z s.d.) and every
local iterate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsde._compat import renamed
from fedsde._tolerances import OPTIMUM_GTOL, label
from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.exact import client_round_maps, transient_moments
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.theory.bounds_002 import BoundInputs
from fedsde.theory.results import CLOSED_FORM, GIVEN, Constant
from fedsde.theory.schedules import PowerSchedule


@dataclass(frozen=True)
class ConstantsReport:
    """Named constants with provenance, and the region on which they hold.

    Attributes
    ----------
    constants : dict of str → Constant
    region : str
        Description of the region ``W`` (where gradient bounds hold).
    """

    constants: dict
    region: str

    def __getitem__(self, name: str):
        return self.constants[name].value

    def __contains__(self, name: str) -> bool:
        return name in self.constants

    def to_dict(self) -> dict:
        return {"region": self.region, "constants": {k: c.to_dict() for k, c in self.constants.items()}}

    @renamed(E="local_steps")
    def bound_inputs(self, *, local_steps: int, h: float, eta0: float = 1.0) -> BoundInputs:
        """The plain numbers :mod:`fedsde.theory.bounds_002` needs (``local_steps``: ``E``, old name ``E``)."""
        c = self.constants
        return BoundInputs(
            L=float(c["L"].value), mu=float(c["mu"].value), trace_sigma=np.asarray(c["trace_sigma"].value),
            p=np.asarray(c["p"].value), V_star=float(c["V_star"].value), d=int(c["d"].value), E=int(local_steps),
            h=float(h), F0_gap=float(c["F0_gap"].value), dist0=float(c["dist0"].value),
            tau=float(c["tau"].value), eta0=float(eta0), L_inf=float(c["L_inf"].value),
            trace_V_star=float(c["trace_V_star"].value) if "trace_V_star" in c else None,
        )


@renamed(E="local_steps")
def v_hat_1(problem: QuadraticProblem, eta: float, local_steps: int) -> np.ndarray:
    """``V̂₁ = Cov(A)/η² = Σ_k p_k² Σ_{m<E} (I − ηU_k)^m Σ_k (I − ηU_k)^m`` (seed 002, Asm. 4.3), shape (d, d)."""
    _, Gamma = client_round_maps(problem, eta, np.full(problem.Q, int(local_steps)))
    return np.einsum("q,qij->ij", problem.p**2, Gamma)


@renamed(E="local_steps")
def quadratic_constants(
    problem: QuadraticProblem,
    *,
    radius: float,
    local_steps: int,
    eta_max: float,
    eta_min: float | None = None,
    w0=None,
) -> ConstantsReport:
    """Constants of Thms 4.5/4.9 for quadratic clients on the ball ``B(w*, radius)``.

    Parameters
    ----------
    problem : QuadraticProblem
    radius : float
        Radius ``R`` of the region around ``w*`` on which ``L`` holds.
    local_steps : int
        Local steps ``E`` (old name: ``E``).
    eta_max, eta_min : float
        Range of client learning rates visited (``V*`` is the sup over it; ``eta_min`` defaults to
        ``1e-6·eta_max``, i.e. a decaying schedule).
    w0 : array, shape (d,), optional
        Start point (for ``ΔF₀`` and ``R₀``); default zero.
    """
    radius = positive_float("radius", radius, allow_zero=True)
    local_steps = positive_int("local_steps", local_steps)
    eta_max = positive_float("eta_max", eta_max)
    eta_min = 1e-6 * eta_max if eta_min is None else positive_float("eta_min", eta_min)
    if eta_min > eta_max:
        raise FedsdeInputError(f"eta_min={eta_min}: must not exceed eta_max={eta_max}")
    d = problem.d
    w0 = np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64).reshape(d)
    ws = problem.optimum
    g_star = np.einsum("qij,qj->qi", problem.U, ws[None, :] - problem.a)  # ∇F_k(w*), (Q, d)
    lam_max = problem.max_curvature()
    L2 = float(np.max(np.linalg.norm(g_star, axis=1) + lam_max * radius))
    row_norms = np.linalg.norm(problem.U, axis=2)  # (Q, d)
    Linf = float(np.max(np.abs(g_star) + radius * row_norms))
    etas = np.unique(np.concatenate([np.geomspace(eta_min, eta_max, 60), [eta_max]]))
    Vs = np.stack([v_hat_1(problem, float(e), local_steps) for e in etas])
    norms = np.linalg.eigvalsh(Vs)[:, -1]
    traces = np.einsum("kii->k", Vs)
    k = int(np.argmax(norms))
    note_v = (f"sup over {etas.size} client lrs in [{eta_min:.3g}, {eta_max:.3g}] of ‖Σ p_k² Γ_k(η)‖_S "
              f"(attained at η={etas[k]:.3g})")
    region = f"ball B(w*, R={radius:.6g}) around w* = {np.array2string(ws, precision=6)}"
    c = {
        "d": Constant(d, GIVEN),
        "p": Constant(problem.p.copy(), GIVEN),
        "w_star": Constant(ws, CLOSED_FORM, note="(Σ p_k U_k)⁻¹ Σ p_k U_k a_k"),
        "F_star": Constant(problem.min_loss, CLOSED_FORM, note="F(w*)"),
        "L": Constant(L2, CLOSED_FORM, note=f"max_k ‖U_k(w*−a_k)‖₂ + λ_max(U_k)·R on the {region}"),
        "L_inf": Constant(Linf, CLOSED_FORM, note=f"sup of ‖∇F_k‖_∞ on the {region} (Assumption 4.1 as printed)"),
        "mu": Constant(float(lam_max.max()), CLOSED_FORM, note="max_k λ_max(U_k)"),
        "trace_sigma": Constant(np.einsum("qii->q", problem.Sigma), GIVEN, note="Tr Σ_k (constant, Asm. 4.4)"),
        "V_star": Constant(float(norms[k]), CLOSED_FORM, note=note_v),
        "trace_V_star": Constant(float(traces.max()), CLOSED_FORM, note="sup of Tr V̂₁ over the same grid"),
        "tau": Constant(2.0, CLOSED_FORM, note="aggregate quadratic: ⟨∇F(w), w − w*⟩ = 2(F(w) − F*)"),
        "F0_gap": Constant(float(problem.loss(w0) - problem.min_loss), CLOSED_FORM, note="F(w₀) − F*"),
        "dist0": Constant(float(np.linalg.norm(w0 - ws)), CLOSED_FORM, note="‖w₀ − w*‖"),
        "radius": Constant(radius, GIVEN, note="region radius R"),
    }
    return ConstantsReport(c, region)


@renamed(E="local_steps")
def quadratic_region_radius(
    problem: QuadraticProblem,
    schedule: PowerSchedule,
    *,
    local_steps: int,
    h: float,
    rounds: int,
    w0=None,
    server_schedule: PowerSchedule | None = None,
    z: float = 4.0,
) -> float:
    """A radius ``R`` around ``w*`` covering the chain's exact law (mean ± ``z`` s.d.) and every local iterate.

    The server weights after round ``n`` (clock ``t_n = n·h``, client lr ``η(t_n)``, server step
    ``h·η₀(t_n)``; ``η₀ ≡ 1`` unless ``server_schedule`` is given) have exact mean ``m_n`` and covariance
    ``P_n``; ``R_server = max_n ‖m_n − w*‖ + z √λ_max(P_n)``.  When ``η λ_max(U_k) <= 1`` a local iterate
    satisfies ``‖w^k_i − a_k‖ <= ‖w_n − a_k‖`` up to noise, so it stays within
    ``R_server + 2 max_k ‖a_k − w*‖ + z η √(max_k Tr Γ_k)`` of ``w*``; that is returned.
    """
    rounds = positive_int("rounds", rounds)
    tn = np.arange(rounds) * h
    etas = schedule.eta(tn)
    s = h * (server_schedule.eta(tn) if server_schedule is not None else np.ones(rounds))
    if np.max(etas) * problem.max_curvature().max() > 1.0:
        raise FedsdeInputError("eta*max_eig(U_k) > 1: the local-iterate region argument needs eta*λ_max <= 1")
    mom = transient_moments(problem, etas, int(local_steps), rounds, s, w0=w0)
    ws = problem.optimum
    dev = np.linalg.norm(mom.mean - ws, axis=1) + z * np.sqrt(np.clip(np.linalg.eigvalsh(mom.cov)[:, -1], 0, None))
    r_server = float(dev.max())
    _, Gamma = client_round_maps(problem, float(etas.max()), np.full(problem.Q, int(local_steps)))
    noise = z * float(etas.max()) * float(np.sqrt(np.einsum("qii->q", Gamma).max()))
    spread = 2.0 * float(np.linalg.norm(problem.a - ws, axis=1).max())
    return r_server + spread + noise


@renamed(E="local_steps")
def classification_constants(
    problem,
    *,
    batch_size: int,
    local_steps: int,
    eta_max: float,
    pilot_points: np.ndarray,
    seed: int,
    replicates: int = 2000,
    n_vstar_points: int = 4,
    w0=None,
) -> ConstantsReport:
    """Constants of Thms 4.5/4.9 for logistic/softmax clients with minibatch noise (reference §5).

    * ``L = r·max_i ‖x̃_i‖₂ + λ·max‖w‖`` with ``r = 1`` (logistic, ``|σ − y| ≤ 1``) or ``√2`` (softmax,
      ``‖softmax − e_y‖ ≤ √2``), the ridge part over the pilot points (closed-form bound);
      ``L_∞`` the same with ``‖x̃_i‖_∞``;
    * ``μ = c·max_i ‖x̃_i‖₂² + λ`` with ``c = ¼`` (logistic) or ``½`` (softmax);
    * ``Tr Σ_k``: the exact minibatch covariance ``(1/b − 1/N_k)·Cov_i ∇ℓ_i(w)`` maximised over the pilot points
      (points visited by simulated trajectories; a lower estimate of the sup over the region);
    * ``V*``: Monte Carlo — at ``n_vstar_points`` pilot points, ``replicates`` independent rounds at
      ``η = eta_max`` and ``η = eta_max/20`` with true minibatches; the largest eigenvalue of
      ``Cov(A)/η²`` (``A`` = the server update), its standard error by the delta method;
    * ``τ = 1`` (each ``F_i`` is convex, so Assumption 4.8 holds with ``τ = 1``);
    * ``w*``, ``F*``: full-batch L-BFGS polished by Newton (:attr:`ClassificationProblem.optimum`).

    Parameters
    ----------
    problem : ClassificationProblem
    batch_size : int
        Minibatch size ``b``.
    local_steps : int
        Local steps ``E`` (old name: ``E``).
    eta_max : float
        Largest client learning rate the schedule uses.
    pilot_points : ndarray, shape (M, d)
        Server weights visited by pilot runs.
    seed : int
        Seed of the Monte-Carlo rounds for ``V*``.

    Raises
    ------
    FedsdeInputError
        For a non-convex model (the MLP): ``r``, ``c`` and ``τ = 1`` above hold for logistic and softmax only.
    """
    from fedsde.clients.data_oracles import minibatch_oracle
    from fedsde.theory.clt import client_update_samples
    from fedsde.theory.results import MONTE_CARLO, OPTIMISATION

    local_steps = positive_int("local_steps", local_steps)
    eta_max = positive_float("eta_max", eta_max)
    batch = positive_int("batch_size", batch_size)
    pts = np.asarray(pilot_points, dtype=np.float64).reshape(-1, problem.d)
    Xd = problem.design(problem.X)
    model = problem.classifier
    if not model.convex or model.curvature is None:
        raise FedsdeInputError(f"problem: model={model.name!r} is not convex; the constants of Thms 4.5/4.9 need a "
                               "logistic or softmax model")
    # ‖∂ℓ/∂z‖ <= 1 for one logit (|σ − y|), √2 for C logits (‖softmax − e_y‖); ∂²ℓ/∂z² ≼ curvature·I
    r, c = (1.0 if model.n_outputs == 1 else np.sqrt(2.0)), model.curvature
    ws = problem.optimum
    wmax = float(max(np.linalg.norm(pts, axis=1).max(), np.linalg.norm(ws)))
    lam = float(problem.l2)
    L2 = r * float(np.linalg.norm(Xd, axis=1).max()) + lam * wmax
    Linf = r * float(np.abs(Xd).max()) + lam * wmax
    mu = c * float(np.max(np.sum(Xd**2, axis=1))) + lam
    traces = np.stack([np.einsum("qii->q", problem.minibatch_covariance(w, batch)) for w in pts])
    tr_sigma = traces.max(axis=0)
    # V* by Monte Carlo at a few pilot points (spread along the trajectory) and two step sizes
    idx = np.unique(np.linspace(0, pts.shape[0] - 1, n_vstar_points).round().astype(int))
    best, best_se, best_tr, where = -np.inf, 0.0, -np.inf, None
    factory = minibatch_oracle(batch_size=batch)
    for j, i in enumerate(idx):
        for m, eta in enumerate((eta_max, eta_max / 20.0)):
            terms = client_update_samples(problem, eta=eta, local_steps=local_steps, replicates=replicates,
                                          seed=seed + 10 * j + m, w=pts[i], oracle_factory=factory)
            A = terms.sum(axis=1) / eta
            Ac = A - A.mean(0)
            V = Ac.T @ Ac / (A.shape[0] - 1)
            lam_v, vec = np.linalg.eigh(V)
            proj = (Ac @ vec[:, -1]) ** 2
            se = float(proj.std(ddof=1) / np.sqrt(A.shape[0]))
            if lam_v[-1] > best:
                best, best_se, where = float(lam_v[-1]), se, (int(i), eta)
            best_tr = max(best_tr, float(np.trace(V)))
    w0 = np.zeros(problem.d) if w0 is None else np.asarray(w0, dtype=np.float64).reshape(problem.d)
    region = f"the {pts.shape[0]} pilot points visited by simulated trajectories (‖w‖ <= {wmax:.4g})"
    apriori = (1.0 / batch) * 4.0 * L2**2
    cs = {
        "d": Constant(problem.d, GIVEN),
        "p": Constant(problem.p.copy(), GIVEN),
        "w_star": Constant(ws, OPTIMISATION, note=f"full-batch L-BFGS + Newton, ‖∇F(w*)‖ < {label(OPTIMUM_GTOL)}"),
        "F_star": Constant(problem.min_loss, OPTIMISATION, note="F(w*)"),
        "L": Constant(L2, CLOSED_FORM, note=f"{r:.4g}·max_i‖x̃_i‖₂ + λ·max‖w‖ (bound on ‖∇ℓ_i‖₂; global when λ=0)"),
        "L_inf": Constant(Linf, CLOSED_FORM, note=f"{r:.4g}·max_i‖x̃_i‖_∞ + λ·max‖w‖"),
        "mu": Constant(mu, CLOSED_FORM, note=f"{c:g}·max_i‖x̃_i‖₂² + λ"),
        "trace_sigma": Constant(tr_sigma, OPTIMISATION,
                                note=f"max over {pts.shape[0]} pilot points of Tr Σ_k(w) (minibatch formula, "
                                     f"S={batch}); a-priori bound (1/S)·4L² = {apriori:.4g}"),
        "V_star": Constant(best, MONTE_CARLO, stderr=best_se,
                           note=f"max eigenvalue of Cov(A)/η² over {idx.size} pilot points × 2 step sizes, "
                                f"{replicates} rounds each (attained at point {where[0]}, η={where[1]:.3g})"),
        "trace_V_star": Constant(best_tr, MONTE_CARLO, note="max of Tr Cov(A)/η² over the same runs"),
        "tau": Constant(1.0, CLOSED_FORM, note="convex F_i: ⟨∇F_i(w), w − w*⟩ >= F_i(w) − F_i(w*)"),
        "F0_gap": Constant(float(problem.loss(w0) - problem.min_loss), OPTIMISATION, note="F(w₀) − F*"),
        "dist0": Constant(float(np.linalg.norm(w0 - ws)), OPTIMISATION, note="‖w₀ − w*‖"),
    }
    return ConstantsReport(cs, region)
