"""Claims of seed 000 (FedAWARE, Zeng et al.) as executable checks.

The documented problem: ``N = 10`` quadratic clients ``f_i = ½‖x − e_i‖²`` in ``d = 2`` with ``e_i`` evenly
spaced on the unit circle (``x* = 0``, ``σ_g² = 1``, ``L = 1``), uniform ``λ``, local steps
``K_i = 2 + (i mod 5)``, client lr ``η_l = 0.05``, server lr ``η = 1``, momentum ``α = 0.5``, full participation,
no gradient noise, ``x⁰ = (3, 3)``, 40 rounds of FedAWARE (Algorithm 1 as printed, ``variant="literal"``,
:class:`fedsde.aggregators.FedAWARE`).  The adaptive weights ``λ̃^t`` are read from the aggregator's state.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fedsde._tolerances import DIVISION_FLOOR, ROUNDING_ATOL, ROUNDING_SLACK, SOLVER_SLACK
from fedsde._tolerances import label as tol_label
from fedsde.problems import QuadraticProblem
from fedsde.theory.claims._common import combine, predicate
from fedsde.theory.claims.base import CheckOptions, Claim, ClaimResult, Figure, Series
from fedsde.theory.fedaware import chi_quantities, lemma_b_2, thm_4_1, thm_4_2
from fedsde.theory.results import NOT_APPLICABLE, Verdict

N_CLIENTS, ROUNDS, ETA_L, ALPHA = 10, 40, 0.05, 0.5
K = 2 + np.arange(N_CLIENTS) % 5
X0 = np.array([3.0, 3.0])


def aware_problem() -> QuadraticProblem:
    ang = 2 * np.pi * np.arange(N_CLIENTS) / N_CLIENTS
    e = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    return QuadraticProblem.from_arrays(np.ones((N_CLIENTS, 2)), e, np.zeros((N_CLIENTS, 2)),
                                        name="FedAWARE toy: 10 clients on the unit circle")


#: seeded random members of the family (checks of Thm 4.2, Lemma B.2, Def. 3.2)
N_RANDOM = 2


def random_aware_problem(i: int, seed: int):
    """Ten clients ``½‖x − e_i‖²`` with ``e_i ~ N(0, I₂)``, uniform ``λ``, ``K_i`` uniform in ``2 … 6``:
    ``(problem, K, σ_g², params)`` with ``σ_g² = Σλ_i‖e_i − ē‖²`` (the gradients' heterogeneity)."""
    rng = np.random.default_rng([seed, i])
    e, k = rng.normal(size=(N_CLIENTS, 2)), rng.integers(2, 7, N_CLIENTS)
    prob = QuadraticProblem.from_arrays(np.ones((N_CLIENTS, 2)), e, np.zeros((N_CLIENTS, 2)), name=f"random #{i}")
    sg2 = float(prob.p @ np.sum((e - prob.p @ e) ** 2, axis=1))
    return prob, k, sg2, {"e": e.tolist(), "K": k.tolist(), "seed": [seed, i]}


def _members(opt: CheckOptions):
    """``(label, problem, K, σ_g², params)``: the documented problem, then the random ones."""
    out = [("documented problem", aware_problem(), K, 1.0, None)]
    for i in range(N_RANDOM):
        prob, k, sg2, par = random_aware_problem(i, opt.seed + 101)
        out.append((f"random #{i} (seed {opt.seed + 101})", prob, k, sg2, par))
    return out


@lru_cache(maxsize=8)
def _trajectory(member: int | None = None, seed: int = 0):
    """Server weights (T+1, d) and adaptive weights λ̃ (T, N) of a FedAWARE run (deterministic) on the documented
    problem (``member=None``) or on :func:`random_aware_problem` ``(member, seed)``."""
    from fedsde.aggregators import FedAWARE
    from fedsde.sim import simulate

    class _Recording(FedAWARE):
        def __init__(self):
            super().__init__(ALPHA, variant="literal")
            self.lams = []

        def apply(self, w, updates, weights, state, ctx):
            w_next, st = super().apply(w, updates, weights, state, ctx)
            self.lams.append(st.lam[0].detach().cpu().numpy().copy())
            return w_next, st

    prob, k = (aware_problem(), K) if member is None else random_aware_problem(member, seed)[:2]
    agg = _Recording()
    res = simulate(prob, eta=ETA_L, local_steps=k, rounds=ROUNDS, replicates=1, seed=0, w0=X0, aggregator=agg)
    return prob, res.weights[:, 0, :], np.array(agg.lams)


def _runs(opt: CheckOptions):
    """``(label, problem, X, λ̃, σ_g², params)`` for every member of the family."""
    out = []
    for j, (label, _, _, sg2, par) in enumerate(_members(opt)):
        prob, X, lams = _trajectory() if j == 0 else _trajectory(j - 1, opt.seed + 101)
        out.append((label, prob, X, lams, sg2, par))
    return out


def _grads(prob, X):
    return X[:, None, :] - prob.a[None, :, :]  # ∇f_i(x) = x − e_i, shape (T, N, d)


def check_thm_4_1(opt: CheckOptions) -> ClaimResult:
    prob, X, lams = _trajectory()
    lam = prob.p
    g = _grads(prob, X[:-1])
    losses = prob.loss(X)
    kw = dict(L=1.0, eta=1.0, eta_l=ETA_L, K=K, alpha=ALPHA, p=1.0, sigma_l2=0.0, sigma_g2=1.0)
    bv = thm_4_1(lams, lam, g, losses, variant="paper", **kw)
    t = bv.terms
    nums = {"rho_min": float(np.min(t["rho"])), "rho_max": float(np.max(t["rho"])), "A_t_min": float(t["A"].min()),
            "A_t_max": float(t["A"].max()), "zero_weights_per_round": t["zero_weights"],
            "rounds": ROUNDS, "conditions": t["conditions"],
            "min_t_grad_f_sq": float(np.min(np.sum(np.einsum("i,tid->td", lam, g) ** 2, axis=1)))}
    # the same condition with the ideal weights λ̃ = λ (A_t = 0): does the theorem apply whatever the weights?
    ref = thm_4_1(np.broadcast_to(lam, lams.shape), lam, g, losses, variant="paper", **kw).terms["rho"]
    nums.update({"rho_min_lambda_tilde_eq_lambda": float(np.min(ref)),
                 "rho_max_lambda_tilde_eq_lambda": float(np.max(ref))})
    if bv.valid:
        lhs = nums["min_t_grad_f_sq"]
        v = predicate((bv.value - lhs) / bv.value, "(bound − empirical)/bound", {**nums, "bound": bv.value},
                      "min_t ‖∇f‖² <= bound (9)", "bound (9) violated")
    elif np.all(ref <= 0):
        v = Verdict(NOT_APPLICABLE, None, "", nums,
                    f"validity condition ρ^t > 0 fails in every round (ρ ∈ [{np.min(t['rho']):.4g}, "
                    f"{np.max(t['rho']):.4g}]) and fails just as well with λ̃ = λ (A_t = 0, ρ ∈ [{np.min(ref):.4g}, "
                    f"{np.max(ref):.4g}]): the step-size term 6Kβ L G̃√χ²/D̃ alone exceeds 1, so on this problem the "
                    "theorem cannot apply whatever the weights; no number is reported")
    else:
        v = Verdict(NOT_APPLICABLE, None, "", nums,
                    f"validity condition ρ^t > 0 fails: {bv.notes[0]}; with λ̃ = λ it would hold in some rounds "
                    f"(max ρ = {np.max(ref):.4g}), so the algorithm's weights make the bound vacuous")
    fig = Figure(suptitle="seed 000, Thm 4.1: validity along a FedAWARE run").panel(
        "per round", "round t", "value", [Series("A_t = Σ(1 − λ̃_i/λ_i)²", np.arange(ROUNDS), t["A"], None, "o-"),
                                          Series("0.382 (A_t must be below)", np.arange(ROUNDS),
                                                 np.full(ROUNDS, 0.382), None, "--")], logy=True)
    return ClaimResult(v, None, fig)


def check_thm_4_2(opt: CheckOptions) -> ClaimResult:
    """Margin per run: ``(bound − min_t‖∇f̃‖²)/bound``; the worst run of the family decides."""
    parts, params = {}, {}
    for label, prob, X, lams, sg2, par in _runs(opt):
        g = _grads(prob, X[:-1])
        bv = thm_4_2(lams, prob.p, g, sigma_g2=sg2)
        gft = np.einsum("ti,tid->td", lams, g)
        lhs = float(np.min(np.sum(gft**2, axis=1)))
        parts[label] = predicate((bv.value - lhs) / bv.value, "(bound − empirical)/bound",
                                 {"empirical": lhs, "bound": bv.value, "terms": bv.terms, "sigma_g2": sg2},
                                 "min_t ‖∇f̃‖² <= 2Aσ_g² + 2(1+A)(1/T)Σ‖∇f‖²", f"{label}: bound violated")
        if par is not None:
            params[label] = par
    return ClaimResult(combine(parts, params=params), None)


def check_lemma_b_2(opt: CheckOptions) -> ClaimResult:
    """Margin per run: ``min over the points of (rhs(1 + ε) + ε_abs − lhs)/max lhs`` with the rounding tolerance
    ``ε`` = :data:`~fedsde._tolerances.ROUNDING_SLACK` (``ε_abs`` = :data:`~fedsde._tolerances.ROUNDING_ATOL`)."""
    out, params = {"paper": {}, "corrected": {}}, {}
    for label, prob, X, lams, sg2, par in _runs(opt):
        # the trajectory's points and weights, plus x* with the last round's weights
        pts = np.vstack([X[:-1], prob.optimum[None, :]])
        lt = np.vstack([lams, lams[-1:]])
        g = _grads(prob, pts)
        if par is not None:
            params[label] = par
        for variant in ("paper", "corrected"):
            lhs, rhs = lemma_b_2(lt, prob.p, g, sigma_g2=sg2, variant=variant)
            viol = lhs - rhs
            k = int(np.argmax(viol))
            nums = {"max_lhs_minus_rhs": float(viol[k]), "at_point": pts[k], "lhs": float(lhs[k]),
                    "rhs": float(rhs[k]), "points": "trajectory x^t with λ̃^t, and x* with the last λ̃"}
            slack = rhs * (1 + ROUNDING_SLACK) + ROUNDING_ATOL - lhs  # rounding tolerance
            nums["fraction_of_points_holding"] = float(np.mean(slack > 0))
            margin = float(np.min(slack) / np.max(lhs))
            out[variant][label] = predicate(margin, "min over the points of (rhs − lhs) / max lhs", nums,
                                            "inequality holds at every point",
                                            f"{label}: violated at x = {np.round(pts[k], 4).tolist()}: "
                                            f"‖Σ(λ̃−λ)∇f_i‖² = {lhs[k]:.3g} > {rhs[k]:.3g}")
    return ClaimResult(combine(out["paper"], params=params), combine(out["corrected"], params=params))


def check_def_3_2(opt: CheckOptions) -> ClaimResult:
    """Margin per run: ``min_t D̃(x^t) − 1`` (+ :data:`~fedsde._tolerances.ROUNDING_SLACK` as printed,
    + :data:`~fedsde._tolerances.SOLVER_SLACK` corrected: the min-norm solver's tolerance)."""
    from fedsde.aggregators.min_norm import min_norm_weights

    pr, co, params = {}, {}, {}
    for label, prob, X, lams, _, par in _runs(opt):
        g = _grads(prob, X[:-1])
        num = np.einsum("i,ti->t", prob.p, np.sum(g**2, axis=-1))

        def dtilde(weights, g=g, num=num):
            gft = np.einsum("ti,tid->td", weights, g)
            return np.sqrt(num / np.maximum(np.sum(gft**2, axis=1), DIVISION_FLOOR))

        d_alg = dtilde(lams)
        exact = np.array([min_norm_weights(gt) for gt in g])
        d_exact = dtilde(exact)
        nums = {"min_D_tilde_algorithm_weights": float(d_alg.min()),
                "min_D_tilde_exact_min_norm": float(d_exact.min()),
                "zero_weights_exact": chi_quantities(exact, prob.p)["zero_weights"]}
        pr[label] = predicate(float(d_alg.min() - 1 + ROUNDING_SLACK),
                              f"min_t D̃(x^t) − 1 (+{tol_label(ROUNDING_SLACK)} rounding)", nums,
                              "D̃ >= 1 with the algorithm's λ̃ (from momenta)",
                              f"{label}: D̃ drops to {d_alg.min():.3g} < 1 with the λ̃ the algorithm computes from "
                              "momenta")
        co[label] = predicate(float(d_exact.min() - 1 + SOLVER_SLACK),
                              f"min_t D̃(x^t) − 1 (+{tol_label(SOLVER_SLACK)} solver tolerance)", nums,
                              "D̃ >= 1 when λ̃ is the exact min-norm solution on the true gradients",
                              f"{label}: D̃ < 1 even with exact min-norm weights")
        if par is not None:
            params[label] = par
    return ClaimResult(combine(pr, params=params), combine(co, params=params))


_PROB = ("10 quadratic clients ½‖x − e_i‖² (e_i on the unit circle, d=2), uniform λ, K_i = 2 + (i mod 5), "
         "η_l = 0.05, η = 1, α = 0.5, full participation, no noise, x⁰ = (3,3), 40 rounds of FedAWARE (literal)")
_FAM = "; plus 2 seeded random runs (e_i ~ N(0, I₂), K_i uniform in 2…6)"

CLAIMS = [
    Claim("000/thm-4.1", "min_t E‖∇f(x^t)‖² <= ε_opt + Σ_t βLG̃√χ²/(Tρ^tD̃(x^t))·√(σ² + Φ_Hetero) for arbitrary λ",
          "seed 000, Sec. 4, Thm 4.1, eq. (9)", _PROB, check_thm_4_1),
    Claim("000/thm-4.2", "min_t ‖∇f̃(x^t)‖² <= 2(N+χ²−2χ)σ_g² + 2(1+N+χ²−2χ)(1/T)Σ_t‖∇f(x^t)‖²",
          "seed 000, Sec. 4, Thm 4.2", _PROB + _FAM, check_thm_4_2),
    Claim("000/lemma-b.2", "‖Σ_i(λ̃_i − λ_i)∇f_i‖² <= A‖Σ_i λ_i∇f_i‖² (A = N + χ² − 2χ; used in Thms 4.1, 4.2)",
          "seed 000, App. B, Lemma B.2 (Cauchy–Schwarz step)", _PROB + "; also at x* with the last λ̃" + _FAM,
          check_lemma_b_2, "<= A(σ_g² + ‖∇f‖²) (Cauchy–Schwarz with a_i = λ̃_i/λ_i − 1)"),
    Claim("000/def-3.2", "The surrogate gradient diversity D̃(x) = √(Σλ_i‖∇f_i‖²/‖∇f̃‖²) is >= 1",
          "seed 000, Sec. 3, Definition 3.2", _PROB + _FAM, check_def_3_2,
          "holds when λ̃ is the exact min-norm solution on the true gradients"),
]

from fedsde.theory.claims.rules_sde import CLAIM_000  # noqa: E402 - the SDE view of the rules (fedsde.sde.rules)

CLAIMS.append(CLAIM_000)
