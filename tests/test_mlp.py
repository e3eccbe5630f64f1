"""The one-hidden-layer tanh MLP: derivatives, a hand-computed local step, the vectorised oracles, and the
simulator's law against a per-client loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.clients.data_oracles import FullGradientOracle, GaussianMinibatchOracle, MinibatchOracle, floyd_sample
from fedsde.errors import FedsdeInputError
from fedsde.problems import federated_classification
from fedsde.problems.classification import mlp
from fedsde.sim import ReplicateStreams, full_gradient_oracle, gaussian_oracle, simulate
from tests.helpers import assert_within_se

D = torch.float64


@pytest.fixture(scope="module")
def net():
    base = federated_classification("digits", n_clients=4, partition="dirichlet", alpha=0.5, seed=0, l2=1e-3)
    return base.replace(model="mlp", hidden=5, init_seed=3, batch_size=8)


def _fd(f, w, i, h=1e-6):
    e = np.zeros_like(w)
    e[i] = h
    return (f(w + e) - f(w - e)) / (2 * h)


def test_layout_and_initialisation(net):
    F, H, C = net.n_features, net.hidden, net.n_classes
    assert net.d == F * H + (H + 1) * C == mlp.n_params(F, H, C)
    w = net.initial_weights()
    W1, W2 = mlp.unpack(w, F, H, C)
    assert np.all(W1[-1] == 0) and np.all(W2[-1] == 0)  # biases start at zero
    assert np.array_equal(w, net.initial_weights(3)) and not np.array_equal(w, net.initial_weights(4))
    assert abs(W1[:-1].std() - np.sqrt(2 / (F - 1 + H))) < 0.2 * np.sqrt(2 / (F - 1 + H))
    assert np.array_equal(net.replace(model="softmax").initial_weights(), np.zeros(F * C))


def test_gradients_match_finite_differences(net):
    rng = np.random.default_rng(0)
    w = net.initial_weights() + 0.1 * rng.standard_normal(net.d)
    idx = rng.choice(net.d, 10, replace=False)
    np.testing.assert_allclose(net.grad(w)[idx], [_fd(net.loss, w, i) for i in idx], rtol=1e-6, atol=1e-9)
    Gk = net.client_grad(w)
    k = 2
    np.testing.assert_allclose(Gk[k][idx], [_fd(lambda v: net.client_loss(v)[k], w, i) for i in idx],
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(Gk.T @ net.p, net.grad(w), atol=1e-13)
    np.testing.assert_allclose(net.per_sample_grads(w, k).mean(0), Gk[k], atol=1e-13)
    W = np.stack([w, 0.5 * w])  # batched evaluation
    np.testing.assert_allclose(net.loss(W), [net.loss(w), net.loss(0.5 * w)], rtol=1e-14)
    np.testing.assert_allclose(net.grad(W)[1], net.grad(0.5 * w), rtol=1e-13)
    small = federated_classification("breast_cancer", n_clients=2, partition="iid", seed=0)
    small = small.replace(model="mlp", hidden=2)
    v = small.initial_weights() + 0.1 * rng.standard_normal(small.d)
    H = small.hessian(v)
    np.testing.assert_allclose(H[:, 5], _fd(small.grad, v, 5, 1e-5), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(small.client_hessian(v).T @ small.p, H, atol=1e-8)


def test_one_local_step_by_hand(net):
    """One full-batch step of client 0 written out with explicit loops over samples."""
    w0 = net.initial_weights()
    eta, k = 0.3, 0
    Xk, yk = (v[k] for v in net.client_data())
    F, H, C = net.n_features, net.hidden, net.n_classes
    W1, W2 = (a.copy() for a in mlp.unpack(w0, F, H, C))
    g1, g2 = np.zeros_like(W1), np.zeros_like(W2)
    for x, y in zip(net.design(Xk), yk, strict=True):
        a = np.tanh(x @ W1)
        a1 = np.append(a, 1.0)
        z = a1 @ W2
        e = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        e[y] -= 1.0
        g2 += np.outer(a1, e)
        g1 += np.outer(x, (W2[:H] @ e) * (1 - a * a))
    n = len(yk)
    grad = np.concatenate([(g1 / n).ravel(), (g2 / n).ravel()]) + net.l2 * w0
    expected = w0 - eta * grad
    res = simulate(net.replace(p=np.eye(net.Q)[k]), eta=eta, local_steps=1, rounds=1, replicates=2, seed=0,
                   w0=w0, oracle_factory=full_gradient_oracle())
    np.testing.assert_allclose(res.weights[1, 0], expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("participants", [False, True])
def test_oracles_match_client_gradients(net, participants):
    rng = np.random.default_rng(1)
    nb, B = 2, 3
    S = 3 if participants else net.Q
    x = torch.tensor(net.initial_weights() + 0.1 * rng.standard_normal((nb, S, B, net.d)))
    clients = torch.tensor(rng.integers(0, net.Q, (nb, S, B))) if participants else None
    held = clients.numpy() if participants else np.broadcast_to(np.arange(S)[None, :, None], (nb, S, B))
    expected = np.stack([[[net.client_grad(x[a, s, b].numpy())[held[a, s, b]] for b in range(B)]
                          for s in range(S)] for a in range(nb)])
    streams = ReplicateStreams(0, 0, nb, "cpu")
    full = FullGradientOracle(net, nb, "cpu", D)
    full.begin_round(clients=clients)
    np.testing.assert_allclose(full.sample(x, streams).numpy(), expected, atol=1e-13)
    whole = MinibatchOracle(net, nb, "cpu", D, batch_size=10**6)  # batch >= N_k: the whole client
    whole.begin_round(clients=clients)
    np.testing.assert_allclose(whole.sample(x, streams).numpy(), expected, atol=1e-13)


@pytest.mark.parametrize("batch", [6, 40, 250])  # Floyd; the smallest keys; shared rows (N_max <= 2·batch)
def test_minibatch_gradient_is_unbiased_with_the_exact_covariance(net, batch):
    """Mean and per-coordinate variance of the minibatch gradient against ∇F_k and Σ_k (without replacement)."""
    k, reps = 1, 1000
    w = net.initial_weights()
    orc = MinibatchOracle(net, 1, "cpu", D, batch_size=batch)
    orc.begin_round()
    x = torch.tensor(w).expand(1, net.Q, reps, net.d).contiguous()
    g = orc.sample(x, ReplicateStreams(5, 0, 1, "cpu", block=reps))[0, k].numpy()  # (reps, d)
    idx = np.argsort(-np.abs(net.client_grad(w)[k]))[:6]
    assert_within_se(g[:, idx].mean(0), net.client_grad(w)[k, idx], g[:, idx].std(0, ddof=1) / np.sqrt(reps))
    var = np.diag(net.minibatch_covariance(w, batch)[k])[idx]
    v_se = np.sqrt(np.var((g[:, idx] - g[:, idx].mean(0)) ** 2, axis=0, ddof=1) / reps)
    assert_within_se(g[:, idx].var(0, ddof=1), var, v_se, what="variance")


def test_floyd_sampling_is_uniform_over_subsets():
    u = torch.rand((60000, 2), generator=torch.Generator().manual_seed(0), dtype=D)
    idx = floyd_sample(u, torch.full((60000,), 4), torch.full((60000,), 2))
    assert bool((idx[:, 0] != idx[:, 1]).all()) and int(idx.max()) == 3
    pair = torch.sort(idx, 1).values
    counts = torch.bincount(pair[:, 0] * 4 + pair[:, 1], minlength=16)[[1, 2, 3, 6, 7, 11]].double().numpy()
    assert_within_se(counts / 60000, np.full(6, 1 / 6), np.sqrt((1 / 6) * (5 / 6) / 60000), what="frequencies")


def test_gaussian_oracle_mean_is_the_client_gradient(net):
    w = net.initial_weights()
    g = GaussianMinibatchOracle(net, 1, "cpu", D, batch_size=4)
    g.begin_round()
    x = torch.tensor(w).expand(1, net.Q, 500, net.d).contiguous()
    out = g.sample(x, ReplicateStreams(2, 0, 1, "cpu", block=500))[0].numpy()  # (Q, R, d)
    G = net.client_grad(w)
    i = np.argmax(np.abs(G[0]))
    assert_within_se(out[:, :, i].mean(1), G[:, i], out[:, :, i].std(1, ddof=1) / np.sqrt(500))
    assert gaussian_oracle(4).describe["oracle"] == "gaussian"


def _loop(problem, w0, eta, E, rounds, R, seed):
    """Per-client reference: numpy loops over replicates, rounds, clients and steps (own random numbers)."""
    rng = np.random.default_rng(seed)
    Xs, ys = problem.client_data()
    out = np.empty((R, problem.d))
    for r in range(R):
        w = w0.copy()
        for _ in range(rounds):
            new = np.zeros_like(w)
            for k in range(problem.Q):
                wk = w.copy()
                b = min(problem.batch_size, len(ys[k]))
                for _ in range(E):
                    idx = rng.choice(len(ys[k]), b, replace=False)
                    Xd = problem.design(Xs[k][idx])
                    A, Z = mlp.forward(wk, Xd, problem.n_features, problem.hidden, problem.n_classes)
                    Eres = mlp.residuals(Z, ys[k][idx]) / b
                    g = mlp.backward(wk, Xd, A, Eres, problem.n_features, problem.hidden, problem.n_classes)
                    wk = wk - eta * (g + problem.l2 * wk)
                new += problem.p[k] * wk
            w = new
        out[r] = w
    return out


def test_simulator_law_matches_a_per_client_loop():
    """Mean and variance of F(w_n) and of two weights after 3 rounds: vectorised simulator vs a per-client loop."""
    pb = federated_classification("breast_cancer", n_clients=3, partition="iid", seed=1, l2=1e-2)
    pb = pb.replace(model="mlp", hidden=3, batch_size=5, init_seed=0)
    w0, eta, E, rounds, R = pb.initial_weights(), 0.5, 2, 3, 600
    sim = simulate(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=3, w0=w0, record=[rounds])
    a = sim.weights[0]
    b = _loop(pb, w0, eta, E, rounds, R, seed=4)
    fa, fb = pb.loss(a), pb.loss(b)
    i = np.argsort(-np.abs(a.mean(0) - w0))[:2]
    for ya, yb in ((fa, fb), (a[:, i[0]], b[:, i[0]]), (a[:, i[1]], b[:, i[1]])):
        se = np.sqrt(ya.var(ddof=1) / R + yb.var(ddof=1) / R)
        assert_within_se(ya.mean(), yb.mean(), se, what="mean")
        va, vb = ya.var(ddof=1), yb.var(ddof=1)
        v_se = np.sqrt(np.var((ya - ya.mean()) ** 2, ddof=1) / R + np.var((yb - yb.mean()) ** 2, ddof=1) / R)
        assert_within_se(va, vb, v_se, what="variance")
    assert fa.std() > 0 and np.abs(a.mean(0) - w0).max() > 1e-3  # the runs moved and are random


def test_mlp_validation(net):
    with pytest.raises(FedsdeInputError, match="hidden"):
        net.replace(model="mlp", hidden=None)
    with pytest.raises(FedsdeInputError, match="hidden=4: only allowed with model='mlp'"):
        net.replace(model="softmax", hidden=4)
    with pytest.raises(FedsdeInputError, match="no global curvature bound"):
        net.max_curvature()


def test_simulate_starts_a_data_problem_at_its_initial_weights(net):
    """``w0=None`` on a data problem is the problem's seeded start (the MLP's zero point is a saddle), not zero."""
    kw = dict(eta=0.1, local_steps=1, rounds=1, replicates=2, seed=0, record=[0])
    start = simulate(net, **kw).weights[0, 0]
    np.testing.assert_array_equal(start, net.initial_weights())
    assert np.abs(start).max() > 0
    np.testing.assert_array_equal(simulate(net, w0=np.zeros(net.d), **kw).weights[0, 0], np.zeros(net.d))
