"""What the server rules declare (exact-law weights, server recursion, flags, problem checks), checked against each
rule's own ``apply``, closed forms and simulation; and a new linear rule defined here in one place that every
exact-law, stability and theory function then handles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_moments_within

import fedsde.errors
import fedsde.exact
import fedsde.exact.aggregators
from fedsde.aggregators import (
    AGGREGATORS,
    Aggregator,
    FedAvg,
    FedAvgM,
    FedAWARE,
    FedDisco,
    FedNova,
    FedProx,
    RoundContext,
    get_aggregator,
)
from fedsde.aggregators import registry as agg_registry
from fedsde.aggregators.base import weighted_mean
from fedsde.errors import FedsdeInputError, NoExactLawError
from fedsde.exact import (
    aggregator_round_law,
    aggregator_round_weights,
    aggregator_stationary_law,
    aggregator_transient_moments,
    round_law,
    stationary_law,
    transient_moments,
)
from fedsde.exact.stability import known_divergence
from fedsde.problems import QuadraticProblem
from fedsde.sim import simulate
from fedsde.theory import fednova as fn

D = torch.float64
P = np.array([0.6, 0.3, 0.1])
TAU = np.array([1, 2, 4])
LABELS = np.array([[8.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 2.0, 5.0]])


def problem(labels=None) -> QuadraticProblem:
    """Three clients in d = 2 with distant optima and unequal weights (so ω = p and ω ∝ p² differ clearly)."""
    return QuadraticProblem.from_arrays(np.array([[1.0, 2.0], [2.0, 1.0], [1.5, 1.5]]),
                                        np.array([[2.0, 0.0], [0.0, 2.0], [-2.0, -2.0]]),
                                        np.array([[0.5, 0.5], [0.3, 0.6], [0.4, 0.4]]), P,
                                        label_distributions=labels)


class SquaredWeights(Aggregator):
    """A linear rule defined only here: ``w + s Σ_k ω_k Δ_k`` with ``ω_k = p_k² / Σ_j p_j²`` over the round's
    participants (the scheme's weights squared and renormalised)."""

    name = "squared_weights"
    paper = "test rule"

    def linear_weights(self, weights, norms, local_steps, *, p=None):
        w2 = np.asarray(weights, dtype=np.float64) ** 2
        return w2 / w2.sum()

    def apply(self, w, updates, weights, state, ctx):
        w2 = weights**2
        return w + ctx.server_lr * weighted_mean(w2 / w2.sum(1, keepdim=True), updates), state


def effective_weights(agg: Aggregator, pb: QuadraticProblem, tau) -> np.ndarray:
    """The weights ``ω`` that ``agg.apply`` uses, read off one round with unit displacements ``Δ_k = e_k``
    (plain SGD: ``‖a_k‖₁ = τ_k``; full participation, scheme weights ``p``, server step 1)."""
    Q = pb.Q
    agg.bind(pb)
    steps = torch.as_tensor(np.asarray(tau), dtype=torch.int64).reshape(1, Q)
    ctx = RoundContext(round=0, server_lr=1.0, eta=0.1, local_steps=steps,
                       participating=torch.ones((1, Q), dtype=torch.bool), p=torch.as_tensor(pb.p, dtype=D),
                       norms=steps.to(D))
    w = torch.zeros((1, Q), dtype=D)
    w1, _ = agg.apply(w, torch.eye(Q, dtype=D).unsqueeze(0), torch.as_tensor(pb.p, dtype=D).reshape(1, Q),
                      agg.init(w), ctx)
    return w1[0].numpy()


# ------------------------------------------------------------------ a new linear rule touches one file
def test_new_linear_rule_exact_laws_by_hand():
    pb, agg = problem(), SquaredWeights()
    omega = P**2 / np.sum(P**2)
    np.testing.assert_allclose(aggregator_round_weights(pb, agg, TAU), omega, rtol=1e-15)
    law, hand = aggregator_round_law(pb, agg, 0.1, TAU, 0.8), round_law(pb, 0.1, TAU, 0.8, weights=omega)
    np.testing.assert_allclose(law.B, hand.B, rtol=1e-14)
    np.testing.assert_allclose(law.c, hand.c, rtol=1e-12)
    np.testing.assert_allclose(law.noise_cov, hand.noise_cov, rtol=1e-14)
    st, st_hand = aggregator_stationary_law(pb, agg, 0.1, TAU, 0.8), stationary_law(pb, 0.1, TAU, 0.8, weights=omega)
    np.testing.assert_allclose(st.mean, st_hand.mean, rtol=1e-12)
    np.testing.assert_allclose(st.cov, st_hand.cov, rtol=1e-12)
    mom = aggregator_transient_moments(pb, agg, 0.1, TAU, 12, 0.8, w0=[1.0, -1.0])
    mom_hand = transient_moments(pb, 0.1, TAU, 12, 0.8, w0=[1.0, -1.0], weights=omega)
    np.testing.assert_allclose(mom.mean, mom_hand.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(mom.cov, mom_hand.cov, rtol=1e-12, atol=1e-15)
    # its weights differ from FedAvg's, so its stationary mean does too (the checks below can tell them apart)
    assert np.linalg.norm(st.mean - aggregator_stationary_law(pb, "fedavg", 0.1, TAU, 0.8).mean) > 0.3
    # under client sampling the weights depend on the sample: no exact law
    with pytest.raises(NoExactLawError, match="sampled"):
        aggregator_round_weights(pb, agg, TAU, participation=2)


def test_new_linear_rule_simulation_matches_its_exact_moments():
    pb, agg, rounds = problem(), SquaredWeights(), 15
    mom = aggregator_transient_moments(pb, agg, 0.1, TAU, rounds, 0.8, w0=[1.0, -1.0])
    res = simulate(pb, eta=0.1, local_steps=TAU, rounds=rounds, replicates=4000, seed=7, server_lr=0.8,
                   w0=[1.0, -1.0], aggregator=agg, record=[rounds])
    x = np.asarray(res.final)
    assert_moments_within(x, mom.mean[-1], mom.cov[-1], nsigma=5.0)
    # not vacuous: FedAvg's exact mean at the same round is far outside the sampling error
    fedavg = aggregator_transient_moments(pb, "fedavg", 0.1, TAU, rounds, 0.8, w0=[1.0, -1.0])
    se = x.std(0, ddof=1) / np.sqrt(x.shape[0])
    assert np.max(np.abs(x.mean(0) - fedavg.mean[-1]) / se) > 20


def test_new_linear_rule_stability_check():
    pb, agg, eta = problem(), SquaredWeights(), 0.1
    omega = P**2 / np.sum(P**2)
    beta_max = float(np.max(np.abs(np.linalg.eigvals(round_law(pb, eta, TAU, weights=omega).B))))
    limit = 2.0 / beta_max  # ρ(I − s·B) > 1 iff s·β_max > 2 (B symmetric positive definite)
    assert known_divergence(pb, eta, TAU, 0.95 * limit, aggregator=agg) == []
    (why,) = known_divergence(pb, eta, TAU, 1.05 * limit, aggregator=agg)
    assert "rho(I − s·B)" in why and f"need server_lr < {limit:.6g}" in why
    # its own B, not FedAvg's: the two thresholds differ
    beta_avg = float(np.max(np.abs(np.linalg.eigvals(round_law(pb, eta, TAU).B))))
    assert abs(2.0 / beta_avg - limit) > 0.05 * limit


def test_new_linear_rule_theory_functions():
    pb, agg = problem(), SquaredWeights()
    omega = P**2 / np.sum(P**2)
    np.testing.assert_allclose(fn.fixed_point(pb, 0.05, TAU, aggregator=agg),
                               round_law(pb, 0.05, TAU, weights=omega).c, rtol=1e-12)
    a_vectors = [fn.accumulation_vector(int(t)) for t in TAU]
    q = fn.fednova_quantities(P, a_vectors, aggregator=agg)
    np.testing.assert_allclose(q.w, omega * TAU / np.sum(omega * TAU), rtol=1e-14)  # w ∝ ω‖a‖₁


# ------------------------------------------------------------------ exact-law weights against each rule's apply
@pytest.mark.parametrize("make", [
    FedAvg, FedNova, lambda: FedNova(tau_eff="steps"), lambda: FedNova(tau_eff="full"),
    lambda: FedNova(tau_eff=3.0), lambda: FedNova(variant="official"),
    lambda: FedDisco("fedavg", label_distributions=LABELS), lambda: FedDisco("fednova", label_distributions=LABELS),
    lambda: FedDisco("fednova", label_distributions=LABELS, tau_eff="full"),
    lambda: FedDisco(FedNova(tau_eff=2.5), label_distributions=LABELS), SquaredWeights,
], ids=["fedavg", "fednova", "fednova-steps", "fednova-full", "fednova-fixed", "fednova-official", "disco-fedavg",
        "disco-fednova", "disco-fednova-full", "disco-fednova-fixed", "squared"])
def test_exact_weights_are_the_weights_apply_uses(make):
    pb = problem()
    np.testing.assert_allclose(make().exact_weights(pb, TAU), effective_weights(make(), pb, TAU), rtol=1e-12)


def test_fednova_and_feddisco_weights_closed_form():
    pb = problem()
    te = float(P @ TAU)
    np.testing.assert_allclose(FedNova().exact_weights(pb, TAU), P * te / TAU, rtol=1e-15)  # seed 003, eq. (20)
    disco = FedDisco(label_distributions=LABELS)
    disco.bind(pb)
    pd = disco.static_weights()
    np.testing.assert_allclose(FedDisco(label_distributions=LABELS).exact_weights(pb, TAU), pd, rtol=1e-15)
    np.testing.assert_allclose(FedDisco("fednova", label_distributions=LABELS).exact_weights(pb, TAU),
                               pd * float(pd @ TAU) / TAU, rtol=1e-14)
    # τ_eff = "full" is Σ p_k τ_k with the problem's p, as FedNova's apply has it, not with the Disco weights
    np.testing.assert_allclose(FedDisco("fednova", label_distributions=LABELS, tau_eff="full").exact_weights(pb, TAU),
                               pd * te / TAU, rtol=1e-14)


def test_no_exact_law_error_is_one_input_error():
    assert fedsde.exact.NoExactLawError is fedsde.exact.aggregators.NoExactLawError is fedsde.errors.NoExactLawError
    assert issubclass(NoExactLawError, FedsdeInputError)
    pb = problem(LABELS)
    for agg, match in [(FedAvgM(), "keeps server state"), (FedNova(server_momentum=0.5), "keeps server state"),
                       (FedDisco("scaffold"), "keeps server state"), (FedProx(), "prox"),
                       (FedNova(momentum=0.5), "momentum"), (FedNova(), "sampled")]:
        with pytest.raises(NoExactLawError, match=match):
            agg.exact_weights(pb, TAU, participation=2)

    class NotLinear(Aggregator):
        name = "not_linear"

        def apply(self, w, updates, weights, state, ctx):
            return w + torch.sign(weighted_mean(weights, updates)), state

    with pytest.raises(NoExactLawError, match="'not_linear': no exact law"):
        NotLinear().exact_weights(pb, TAU)
    with pytest.raises(NoExactLawError, match="'feddisco' over 'not_linear'"):
        FedDisco(NotLinear(), label_distributions=LABELS).exact_weights(pb, TAU)
    # FedAvg's weights are the scheme's own: exact under sampling too; bad local_steps are named
    np.testing.assert_array_equal(FedAvg().exact_weights(pb, TAU, participation=2), pb.p)
    with pytest.raises(FedsdeInputError, match=r"local_steps\[1\]"):
        FedAvg().exact_weights(pb, [1, 0, 2])


# ------------------------------------------------------------------ server recursion against apply
B2 = np.array([[0.5, 0.1], [0.1, 0.3]])


@pytest.mark.parametrize("agg", [FedAvg(), FedNova(), FedAvgM(0.7), FedAvgM(0.6, variant="nesterov"),
                                 FedAvgM(0.5, dampening=0.5)], ids=["fedavg", "fednova", "heavy", "nesterov", "damp"])
def test_server_recursion_is_the_mean_map_of_apply(agg):
    # one client whose displacement is Δ = −B w exactly (the mean map with c = 0): the rule's own apply, run for a
    # few rounds, must follow the declared recursion on (w, buffers)
    s = 0.9
    rec = agg.server_recursion(B2, s)
    w = torch.tensor([[1.0, -1.0]], dtype=D)
    state = agg.init(w)
    z = np.concatenate([w[0].numpy(), np.zeros(rec.matrix.shape[0] - 2)])
    one = torch.ones((1, 1), dtype=D)
    for n in range(4):
        ctx = RoundContext(round=n, server_lr=s, eta=0.1, local_steps=torch.ones((1, 1), dtype=torch.int64),
                           participating=torch.ones((1, 1), dtype=torch.bool), p=one[0], norms=one)
        w, state = agg.apply(w, -(w @ torch.as_tensor(B2)).unsqueeze(1), one, state, ctx)
        z = rec.matrix @ z
        got = w[0].numpy() if z.size == 2 else np.concatenate([w[0].numpy(), state.v[0].numpy()])
        np.testing.assert_allclose(got, z, rtol=1e-12, atol=1e-15)


def test_server_recursion_thresholds_and_none():
    b = np.diag([0.8, 0.2])
    lin = FedAvg().server_recursion(b, 1.0)
    assert lin.max_server_lr == pytest.approx(2.0 / 0.8) and lin.symbol == "rho(I − s·B)"
    # heavy ball with β: stable iff s·b < 2(1 + β) (the 2×2 block's root crosses −1 there)
    beta = 0.6
    for s, stable in ((0.99 * 2 * (1 + beta) / 0.8, True), (1.01 * 2 * (1 + beta) / 0.8, False)):
        rho = np.max(np.abs(np.linalg.eigvals(FedAvgM(beta).server_recursion(b, s).matrix)))
        assert bool(rho < 1) == stable
    for agg in (FedNova(server_momentum=0.5), get_aggregator("scaffold"), get_aggregator("fedadam"),
                get_aggregator("fedaware"), FedDisco("scaffold")):
        assert agg.server_recursion(b, 1.0) is None


# ------------------------------------------------------------------ flags, problem checks, registry
def test_flags_follow_parameters_and_wrapped_rules():
    assert not FedNova().stateful and FedNova(server_momentum=0.5).stateful
    assert FedDisco("scaffold", option="I").needs_first_grads and FedDisco("scaffold").stateful
    assert FedDisco("fednova").needs_norms and not FedDisco().needs_norms
    assert FedDisco("fedprox", mu=0.1).local_solver.prox == 0.1
    assert FedAvg().exact_under_sampling and not FedDisco().exact_under_sampling and not FedNova().exact_under_sampling
    aware = FedAWARE()
    assert aware.warm_start_rounds == 1 and FedAWARE(warm_start=False).warm_start_rounds == 0
    assert aware.describe()["warm_start_rounds"] == 1 and FedDisco(aware).warm_start_rounds == 1


def test_check_problem():
    bare = problem()
    with pytest.raises(FedsdeInputError, match=r"'feddisco'.*'table\.toml' has no label_distributions; add the key"):
        get_aggregator("feddisco").check_problem(bare, "table.toml")
    get_aggregator("feddisco").check_problem(problem(LABELS), "table.toml")
    FedDisco(label_distributions=LABELS).check_problem(bare, "table.toml")
    for name in AGGREGATORS:
        if name != "feddisco":
            get_aggregator(name).check_problem(bare, "table.toml")


def test_registry_module():
    assert agg_registry.AGGREGATORS is AGGREGATORS and agg_registry.get_aggregator is get_aggregator
    assert isinstance(get_aggregator("FedNova"), FedNova)
    assert "squared_weights" not in AGGREGATORS  # defining a rule does not register it


def test_generalised_weights_seed_003():
    # FedAvg: eq. (7), w_k = p_k‖a_k‖₁/Σ_j p_j‖a_j‖₁ (prox accumulation vectors); FedNova: eq. (20), w = p exactly
    a = [fn.accumulation_vector(int(t), "prox", alpha=0.2) for t in TAU]
    a1 = np.array([v.sum() for v in a])
    np.testing.assert_allclose(fn.fednova_quantities(P, a).w, P * a1 / np.sum(P * a1), rtol=1e-15)
    q = fn.fednova_quantities(P, a, aggregator=FedNova())
    assert np.array_equal(q.w, q.p) and q.chi2 == 0.0
    pb = problem()
    np.testing.assert_array_equal(fn.fixed_point(pb, 0.05, TAU, aggregator=FedNova()),
                                  fn.fixed_point(pb, 0.05, TAU, aggregator="fednova"))
    gap = fn.objective_inconsistency_gap(QuadraticProblem.from_arrays(np.ones((3, 2)), pb.a, pb.Sigma, P), 0.01,
                                         TAU, aggregator="fednova")
    np.testing.assert_allclose(gap["small_eta_limit"], P @ pb.a, rtol=1e-12)  # FedNova: the true optimum as η → 0
