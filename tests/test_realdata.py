"""Real-data clients: objective derivatives, the minibatch covariance, the data oracles, system heterogeneity and
the simulator's determinism (bit-identical, chunk-invariant) with every new piece switched on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.aggregators import FedAvg, FedAWARE, FedDisco, FedNova, Scaffold
from fedsde.errors import FedsdeInputError
from fedsde.problems import (
    ClassificationProblem,
    federated_classification,
    random_quadratic_problem,
    synthetic_problem,
)
from fedsde.sim import (
    EpochSteps,
    FullGradientOracle,
    GaussianMinibatchOracle,
    LocalSolver,
    MinibatchOracle,
    RandomSteps,
    ReplicateStreams,
    minibatch_oracle,
    simulate,
)

D = torch.float64


@pytest.fixture(scope="module")
def digits():
    return federated_classification("digits", n_clients=6, partition="dirichlet", alpha=0.3, seed=0, l2=1e-3)


@pytest.fixture(scope="module")
def cancer():
    return federated_classification("breast_cancer", n_clients=3, partition="iid", seed=0, l2=1e-2)


def _fd_grad(f, w, idx, h=1e-6):
    out = []
    for i in idx:
        e = np.zeros_like(w)
        e[i] = h
        out.append((f(w + e) - f(w - e)) / (2 * h))
    return np.array(out)


@pytest.mark.parametrize("name", ["digits", "cancer"])
def test_gradient_hessian_and_optimum(name, request):
    pr = request.getfixturevalue(name)
    rng = np.random.default_rng(0)
    w = 0.1 * rng.standard_normal(pr.d)
    idx = rng.choice(pr.d, 6, replace=False)
    np.testing.assert_allclose(pr.grad(w)[idx], _fd_grad(pr.loss, w, idx), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(pr.client_grad(w).T @ pr.p, pr.grad(w), atol=1e-12)
    k = 1
    np.testing.assert_allclose(pr.per_sample_grads(w, k).mean(0), pr.client_grad(w)[k], atol=1e-12)
    H = pr.hessian(w)
    fd = np.stack([_fd_grad(lambda v, j=j: pr.grad(v)[j], w, idx) for j in idx])
    np.testing.assert_allclose(H[np.ix_(idx, idx)], fd, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(np.einsum("q,qij->ij", pr.p, pr.client_hessian(w)), H, atol=1e-10)
    ws = pr.optimum
    assert np.linalg.norm(pr.grad(ws)) < 1e-8
    assert pr.accuracy(ws) > 0.9
    assert pr.loss(ws) <= pr.loss(ws + 1e-3 * rng.standard_normal(pr.d))


def test_problem_layout(digits):
    assert digits.model == "softmax" and digits.d == 65 * 10
    assert digits.sizes.sum() + digits.test_sizes.sum() == 1797
    np.testing.assert_allclose(digits.p, digits.sizes / digits.sizes.sum())
    np.testing.assert_allclose(digits.X.mean(0), 0.0, atol=1e-12)  # standardised on the pooled train data
    assert digits.label_counts().sum() == digits.sizes.sum()
    np.testing.assert_allclose(digits.label_distributions().sum(1), 1.0)
    Xp, _ = digits.padded()
    k = int(np.argmax(digits.sizes))
    np.testing.assert_array_equal(Xp[k, :, :-1], digits.client_data()[0][k])
    acc = digits.client_accuracy(np.zeros(digits.d))
    assert acc.shape == (6,)
    with pytest.raises(FedsdeInputError, match="l2"):
        ClassificationProblem.from_clients([np.eye(2)], [np.array([0, 1])], l2=-1.0)


def test_synthetic_generator():
    pr = synthetic_problem(1.0, 1.0, seed=0, n_clients=5, max_samples=300)
    assert pr.Q == 5 and pr.d == 61 * 10
    assert np.all(pr.sizes + pr.test_sizes >= 50) and np.all(pr.sizes + pr.test_sizes <= 300)
    again = synthetic_problem(1.0, 1.0, seed=0, n_clients=5, max_samples=300)
    np.testing.assert_array_equal(pr.X, again.X)
    iid = synthetic_problem(0.0, 0.0, seed=0, n_clients=3, iid=True, max_samples=200)
    assert iid.name.endswith("iid")


def _draws(oracle, x, nblocks, calls, seed=0):
    st = ReplicateStreams(seed, 0, nblocks, "cpu", 0)
    return torch.cat([oracle.sample(x, st).clone() for _ in range(calls)], dim=2)  # (nb, Q, B·calls, d)


@pytest.mark.parametrize("kind", ["minibatch", "gaussian"])
def test_oracle_moments_match_minibatch_covariance(cancer, kind):
    # E g = ∇F_k and Cov g = (1/S − 1/N_k)·sample covariance (seed 002 §3), checked along random directions
    pr = cancer
    S = 10
    w = pr.optimum + 0.3 * np.random.default_rng(1).standard_normal(pr.d)
    nb = 8
    cls = MinibatchOracle if kind == "minibatch" else GaussianMinibatchOracle
    oracle = cls(pr, nb, "cpu", D, batch_size=S)
    oracle.begin_round()
    x = torch.as_tensor(w).expand(nb, pr.Q, 128, pr.d).clone()
    g = _draws(oracle, x, nb, 4).permute(1, 0, 2, 3).reshape(pr.Q, -1, pr.d).numpy()  # (Q, n, d)
    n = g.shape[1]
    cov = pr.minibatch_covariance(w, S)
    mean = pr.client_grad(w)
    dirs = np.random.default_rng(2).standard_normal((3, pr.d))
    for k in range(pr.Q):
        for u in dirs:
            proj = g[k] @ u
            var = u @ cov[k] @ u
            assert abs(proj.mean() - mean[k] @ u) < 5 * np.sqrt(var / n)
            assert abs(proj.var(ddof=1) - var) < 5 * var * np.sqrt(2 / (n - 1))


def test_epoch_sampling_visits_every_sample_once(cancer):
    # with S dividing N_k, the ⌈N_k/S⌉ batch gradients of one epoch average to the full gradient exactly
    pr = cancer
    S = 1
    while True:
        S += 1
        if all(n % S == 0 for n in pr.sizes) or S > 20:
            break
    S = S if S <= 20 else 1
    w = 0.1 * np.random.default_rng(0).standard_normal(pr.d)
    oracle = MinibatchOracle(pr, 1, "cpu", D, batch_size=S, sampling="epoch")
    full = FullGradientOracle(pr, 1, "cpu", D)
    oracle.begin_round()
    full.begin_round()
    x = torch.as_tensor(w).expand(1, pr.Q, 128, pr.d).clone()
    st = ReplicateStreams(0, 0, 1, "cpu", 0)
    steps = int(pr.sizes[0] // S)
    assert all(n // S == steps for n in pr.sizes)
    total = sum(oracle.sample(x, st) for _ in range(steps)) / steps
    torch.testing.assert_close(total, full.sample(x, st), rtol=1e-10, atol=1e-12)


def test_epoch_steps_rules():
    sizes = (5, 64, 130)
    st = EpochSteps(sizes, 3, 64)
    tau, b = st.fixed()
    np.testing.assert_array_equal(tau, [3 * 1, 3 * 1, 3 * 3])  # 3⌈N/64⌉ with the batch capped at N
    np.testing.assert_array_equal(b, [5, 64, 64])
    np.testing.assert_array_equal(EpochSteps(sizes, 3, 64, rounding="floor").fixed()[0], [3, 3, 6])
    plus = EpochSteps(sizes, (2, 5), (10, None))
    streams = ReplicateStreams(0, 0, 4, "cpu", 2)
    for _ in range(5):
        tau, b = plus.draw_round(streams, 3)
        assert tau.shape == (512, 3)
        assert int(b[:, 0].min()) == 5 and int(b[:, 0].max()) == 5  # N_k <= 10: the whole client
        assert int(b[:, 1:].min()) >= 10 and bool((b[:, 1:] <= torch.tensor([63, 129])).all())
        epochs = tau // torch.ceil(torch.tensor(sizes) / b).long()
        assert int(epochs.min()) >= 2 and int(epochs.max()) <= 5
    assert plus.max_batch() == 129


@pytest.mark.long
def test_simulation_on_data_is_bit_identical_and_chunk_invariant(digits):
    steps = EpochSteps(tuple(digits.sizes), (2, 5), (10, None))
    for agg in (Scaffold("I"), FedAWARE(), FedNova(momentum=0.5), FedDisco("fedavg")):
        kw = dict(eta=0.05, local_steps=steps, rounds=3, replicates=3, seed=5, participation=3,
                  weighting="renormalised", aggregator=agg, block_size=1,
                  oracle_factory=minibatch_oracle(sampling="epoch"))
        a = simulate(digits, **kw).weights
        b = simulate(digits, **kw, chunk_size=1).weights
        c = simulate(digits, **kw).weights
        assert np.array_equal(a, b) and np.array_equal(a, c), agg.name
        assert np.all(np.isfinite(a))


def test_simulation_on_data_learns(digits):
    steps = EpochSteps(tuple(digits.sizes), 2, 16)
    res = simulate(digits, eta=0.1, local_steps=steps, rounds=10, replicates=2, seed=0, block_size=1)
    acc = digits.accuracy(res.weights)  # (T, R)
    assert acc[0].max() < 0.3 and acc[-1].min() > 0.85


def test_quadratic_simulator_invariance_with_new_pieces():
    pr = random_quadratic_problem(6, 3, seed=4)
    dist = np.random.default_rng(0).integers(1, 20, (6, 4))
    cases = [
        dict(aggregator=Scaffold("I"), participation=3, local_steps=RandomSteps(1, 4)),
        dict(aggregator=FedAWARE(), participation=2, local_steps=3),
        dict(aggregator=FedNova(momentum=0.5, mu=0.5), local_steps=RandomSteps(1, 3, (1, 2, 1, 2, 1, 2))),
        dict(aggregator=FedDisco("scaffold", label_distributions=dist), participation=4, local_steps=2),
        dict(aggregator="fedavg", participation=3, weighting="multinomial", local_steps=2),
    ]
    for kw in cases:
        a = simulate(pr, eta=0.05, rounds=4, replicates=300, seed=9, **kw).weights
        b = simulate(pr, eta=0.05, rounds=4, replicates=300, seed=9, chunk_size=128, **kw).weights
        assert np.array_equal(a, b), kw
        first = simulate(pr, eta=0.05, rounds=4, replicates=130, seed=9, **kw).weights
        assert np.array_equal(a[:, :130], first), kw


def test_generic_local_loop_equals_fast_path():
    # momentum 1e-300 leaves every step equal to the gradient bit for bit, but runs the general loop
    pr = random_quadratic_problem(4, 2, seed=1)
    kw = dict(eta=0.1, local_steps=[1, 2, 3, 4], rounds=5, replicates=130, seed=3)
    fast = simulate(pr, aggregator=FedAvg(), **kw).weights
    slow = simulate(pr, aggregator=FedAvg(local_solver=LocalSolver(momentum=1e-300)), **kw).weights
    assert np.array_equal(fast, slow)


def test_multinomial_participation_weights():
    # m draws with replacement ∝ p, each weighted 1/m: E[weights] = p
    from fedsde.sim.participation import draw_participation as _participation

    p = torch.tensor([0.2, 0.3, 0.5], dtype=D)
    st = ReplicateStreams(0, 0, 40, "cpu", 1)
    mask, w = _participation(st, 40, 3, 4, "multinomial", p)
    np.testing.assert_allclose(w.sum(1).numpy(), 1.0)
    assert bool((mask == (w > 0)).all())
    np.testing.assert_allclose(w.mean(0).numpy(), p.numpy(), atol=5 * np.sqrt(0.25 / 4 / w.shape[0]))
