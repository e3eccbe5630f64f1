"""Claims of seed 002 (Overman & Klabjan, "Continuous-Time Analysis of Federated Averaging"): the registry.

Each :class:`~fedsde.theory.claims.base.Claim` names its statement, its source, the problems it is checked on and
the correction, and points to its check:

* Section 4 and Lemma A.1 — :mod:`~fedsde.theory.claims.sec4_002` (bounds against the chain on the documented
  problems: the table clients with ``U/4``, the Thm 4.9 counterexample, synthetic logistic regression with true
  minibatches, seeded random quadratic clients);
* Sections 5 and 6 — :mod:`~fedsde.theory.claims.sec56_002` (normality diagnostics; exact laws against the
  printed formulas);
* Lemma A.2, Assumption 5.2 and Section 6's claims in ``E``, ``η`` and ``Q`` —
  :mod:`~fedsde.theory.claims.families_002` (families of problems, exact laws);
* the modelling claim of Sec. 3 (eq. (2)) — :mod:`~fedsde.theory.claims.validity_002` (SVAG validity test).

The problems and laws they share are in :mod:`~fedsde.theory.claims.cases_002`.  Clock: ``t = n·h``.
"""

from __future__ import annotations

from fedsde.theory.claims.base import Claim
from fedsde.theory.claims.families_002 import (
    check_asm_5_2,
    check_claim_bias_E,
    check_claim_eta_limit,
    check_claim_variance_E2,
    check_claim_variance_Q,
    check_lemma_a_2,
)
from fedsde.theory.claims.sec4_002 import (
    check_cor_4_6,
    check_cor_4_7,
    check_cor_4_10,
    check_lemma_a_1,
    check_thm_4_5,
    check_thm_4_9,
)
from fedsde.theory.claims.sec56_002 import check_eq_4, check_thm_5_4, check_thm_6_2, check_thm_6_3
from fedsde.theory.claims.validity_002 import CLAIMS as _VALIDITY_CLAIMS

# ---------------------------------------------------------------------------------------------- registry
_SEC4 = "table clients with U/4 (exact chain, w₀=3) and synthetic logistic d=2, Q=3 non-IID, S=5 of N_k=50 " \
        "(Monte Carlo, w₀=(3,3)); E=5, h=0.5 (server step h·η₀), horizons t = 5, 20, 50, 200"
_RAND4 = ("; plus seeded random heterogeneous quadratic clients (Q=3, d ∈ {1,2,3}, U ∈ [0.1,1], a ~ N(0, 1.5²), "
          "Σ ∈ [0.1,2], p ~ Dirichlet(1), w₀ = w* + N(0, 4), exact chain)")

CLAIMS = [
    Claim("002/thm-4.5",
          "Non-convex bound: E_t̃‖∇F(w₀(t̃))‖² <= (F(w₀(0)) − F*)/(Eφ(t)) + (1/(Eφ(t)))∫₀ᵗ[C₁η² + hη²V*L/2]",
          "seed 002, Sec. 4, Thm 4.5", _SEC4 + "; η = 0.5/(1+t)" + _RAND4, check_thm_4_5,
          "Itô term d·hη²V*μ/2 (Lemma A.2's d, ‖∇²F‖_S <= μ; erratum 5)"),
    Claim("002/cor-4.6", "Thm 4.5 with η = 1/(t+1): O(1/log t); 1/√(t+1): O(log t/√t); (t+1)^(−b): piecewise rates",
          "seed 002, Sec. 4, Cor 4.6",
          "table clients with U/4 (exact chain), E=5, h=0.5, schedules b = 1, ½, ¾" + _RAND4,
          check_cor_4_6, "same with erratum 5; A.4's 'O(t^(−b))' for the noise term at b ∈ (½, 1) is O(t^(b−1))"),
    Claim("002/cor-4.7", "Constant client lr η_c, server lr 1/(t+1): E‖∇F‖² <= (ΔF₀ + η_c²hV*L/2)/(Eη_c log(t+1)) "
          "+ η_c C₁", "seed 002, Sec. 4, Cor 4.7", "table clients with U/4 (exact chain), η_c=0.1, E=5, h=0.5" + _RAND4,
          check_cor_4_7, "t̃ with density η₀/∫η₀, last term η_c C₁/E, erratum 5 (erratum 9)"),
    Claim("002/thm-4.9", "Weakly quasi-convex bound on E_t̃[F(w₀(t̃)) − F*] with first term ‖w₀(0) − w*‖/(τφ(t))",
          "seed 002, Sec. 4, Thm 4.9", _SEC4 + "; plus identical clients started at ‖w₀ − w*‖ = 10, E = 1" + _RAND4,
          check_thm_4_9, "first term ‖w₀−w*‖²/(2τη₀φ), the proof's η₀, √(dV*) in the Itô term (erratum 7)"),
    Claim("002/cor-4.10", "Thm 4.9 with η = 1/(t+1): O(1/log t) with the printed constants",
          "seed 002, Sec. 4, Cor 4.10", "table clients with U/4 and the Thm 4.9 counterexample (exact chain)" + _RAND4,
          check_cor_4_10, "corrected Thm 4.9 with the exact integrals (erratum 8)"),
    Claim("002/lemma-a.1", "Client drift: E‖w₀(t) − w^k(t,i)‖ <= iη(L + √Tr Σ_k)", "seed 002, App. A, Lemma A.1",
          "3 clients in d=2, η=0.1, E=10, w₀=(2,2), 10 rounds (Monte Carlo)", check_lemma_a_1,
          "L the 2-norm gradient bound (erratum 6); as printed L is the ∞-norm bound of Assumption 4.1"),
    Claim("002/lemma-a.2", "Tr(AB) <= d‖A‖_S‖B‖_S for symmetric A, B (Thm 4.5's B₂ step uses it without d)",
          "seed 002, App. A, Lemma A.2 and proof of Thm 4.5", "A = B = I₅ and 2000 random PSD pairs in d = 5",
          check_lemma_a_2, "Tr(AB) <= d‖A‖‖B‖ (keep the d)"),
    Claim("002/thm-5.4", "The server update A_T is asymptotically normal as Q → ∞ (Lyapunov CLT, δ = 2)",
          "seed 002, Sec. 5, Thm 5.4", "quadratics with centred-exponential noise (d=2, Q=3..192) and logistic "
          "regression with true minibatches, IID and non-IID (Q=3..48); η=0.1, E=5", check_thm_5_4,
          "standardised V^(−1/2)(A − M) ⇒ N(0, I) jointly (Cramér–Wold), Lyapunov ratio ∝ 1/Q (erratum 10)"),
    Claim("002/asm-5.2", "There is C > 0 with C <= x_k² − (1/2Q)Σ_j(x_k − x_j)² for all k (x_k = p_k²η²E[(N+R)²])",
          "seed 002, Sec. 5, Assumption 5.2", "identical scalar clients U=1, Σ=1 replicated Q = 1…1000, η=0.1, E=5",
          check_asm_5_2, "state it for scale-free x̃_k = x_k/x̄ (erratum 10)"),
    Claim("002/thm-6.2", "Client law after E steps: noise −η Σ_j Σ_{i<=j} (1−ηU)^{j−i} U N(0,Σ) + Eη N(0,Σ)",
          "seed 002, Sec. 6, Thm 6.2", "one client η=0.1, U=4, Σ=2, a=2, E=5 from w=0.5 (Monte Carlo) and a table "
          "of (η, U, Σ, E) against the exact round law",
          check_thm_6_2, "N(w − (1 − r^E)(w − a), η²Σ(1 − r^{2E})/(1 − r²)), r = 1 − ηU (erratum 1)"),
    Claim("002/eq-4", "Scalar SDE with diffusion √η[E + Σ_k p_k √Σ_k S_k]", "seed 002, Sec. 6, eq. (4)",
          "table problem, η=0.05, E=5, rescaled w → λw (λ = 1, 2, 10, 0.1)", check_eq_4,
          "diffusion √(η Σ_k p_k² Γ_k) (erratum 2)"),
    Claim("002/thm-6.3", "w₀(t) ~ N(m₀(t), v₀(t)) with v₀ = −η b_p²(e^{−Dt} − 1)/(2D)", "seed 002, Sec. 6, Thm 6.3",
          "table problem (U=[1,2,4], a=[−1,0,2], Σ=[0.5,1,2]), η ∈ {0.01,0.05,0.1}, E ∈ {1,2,5,10,20}",
          check_thm_6_3, "v(t) = b²(1 − e^{−2Dt})/(2D) with the corrected b (erratum 3)"),
    Claim("002/claim-variance-E2", "As E grows the variance increases as O(E²)", "seed 002, Sec. 6, after Thm 6.3",
          "table problem at η ∈ {0.01, 0.05, 0.1}, the audit problem and 40 seeded random heterogeneous scalar "
          "problems (ηU_max < 0.9), E ∈ {1, …, 400} and E → ∞ (exact stationary law)",
          check_claim_variance_E2, "the exact stationary variance stays bounded in E and tends to "
          "η Σ p_k² Σ_k/(U_k(2 − ηU_k)); on the table problem it is nearly flat (erratum 4)"),
    Claim("002/claim-bias-E", "As E grows the mean moves away from the true solution (it 'diverges')",
          "seed 002, Sec. 6",
          "table problem at η ∈ {0.01, …, 0.45} (every ηU_max < 2), the audit counterexample and 400 seeded random "
          "scalar 3-client problems (U ∈ [0.2, 4], a ~ N(0, 4), p ~ Dirichlet(1), ηU_max < 0.9); E on a geometric "
          "grid from 1 to saturation (exact C4)", check_claim_bias_E,
          "the bias C4 − w* is 0 at E = 1 and tends to Σ p_k a_k − w* as E → ∞ (no divergence); |C4 − w*| is "
          "monotone in E on some problems and not on others, where it can overshoot its limit (erratum 4)"),
    Claim("002/claim-eta-limit", "As η → 0 and t → ∞, w₀ → N(Σp_kU_ka_k/Σp_kU_k, 0)", "seed 002, Sec. 6",
          "table problem, the audit problem and 12 seeded random scalar problems, E ∈ {5, 20}, η = 1e-2 … 1e-5 "
          "(exact stationary law)", check_claim_eta_limit,
          "true at fixed E, with Var/η → Σp²Σ/(2ΣpU); at fixed ηE the bias survives"),
    Claim("002/claim-variance-Q", "The stationary variance of Thm 6.3 / eq. (4) does not depend on the number of "
          "clients (p_k in place of p_k²)", "seed 002, Sec. 6, eq. (4) (implied)",
          "table problem, the audit problem and 8 seeded random scalar problems, replicated ×1, ×4, ×16; η=0.05 "
          "(random: their own η), E=5", check_claim_variance_Q,
          "the variance falls as 1/Q for uniform p (erratum 4)"),
]

# the modelling claim of Sec. 3 (eq. (2)), judged by the SVAG validity test
CLAIMS += _VALIDITY_CLAIMS
