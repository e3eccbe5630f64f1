"""Agreement with peers: Flower's strategies (run for real when ``flwr`` is installed, ``fedsde[peers]``), and
faithful ports of the FedNova, FedDisco and FedAWARE research codes (tests/peer_ports.py), on the same inputs.

The quadratic clients are noise-free (``Σ_k = 0``), so the simulator is deterministic and both sides compute the
same local gradient descent; unequal ``num_examples``/``p`` and unequal local steps make every weight matter.
What each test measures is listed in docs/peers.md.
"""

from __future__ import annotations

import numpy as np
import peer_ports as ports
import pytest
import torch

from fedsde.aggregators import (
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedAWARE,
    FedNova,
    FedYogi,
    RoundContext,
    feddisco_weights,
    min_norm_weights,
)
from fedsde.aggregators.fednova import official_normaliser
from fedsde.problems import QuadraticProblem
from fedsde.sde.brownian import GridBrownian
from fedsde.sim import LocalSolver, simulate

D = torch.float64
U = np.array([[1.0, 2.0, 0.5], [3.0, 0.7, 1.5], [0.4, 1.2, 2.5], [2.0, 1.0, 0.8]])  # diagonal Hessians (Q, d)
A = np.array([[1.0, -2.0, 0.5], [-1.5, 0.3, 2.0], [2.5, 1.0, -1.0], [0.2, -0.7, 1.4]])  # client optima
SIZES = np.array([10, 40, 25, 75])  # Flower's num_examples
STEPS = np.array([1, 3, 5, 2])
ETA, ROUNDS = 0.1, 5
W0 = np.array([3.0, -1.0, 2.0])


def _problem(q: int = 4) -> QuadraticProblem:
    return QuadraticProblem.from_arrays(np.stack([np.diag(u) for u in U[:q]]), A[:q], np.zeros((q, 3, 3)),
                                        SIZES[:q] / SIZES[:q].sum())


def _grad(k: int):
    """``∇F_k`` in the simulator's arithmetic (``−U_k a_k + U_k x``), so both sides round alike."""
    ua = U[k] * A[k]
    return lambda x: -ua + U[k] * x


def _local_gd(w: np.ndarray, k: int, steps: int, eta: float = ETA) -> np.ndarray:
    x, g = w.copy(), _grad(k)
    for _ in range(int(steps)):
        x = x - eta * g(x)
    return x


def _fedsde(agg, server_lr: float, q: int = 4, steps=STEPS, rounds: int = ROUNDS, eta: float = ETA) -> np.ndarray:
    res = simulate(_problem(q), eta=eta, local_steps=steps[:q], rounds=rounds, replicates=1, seed=0,
                   server_lr=server_lr, aggregator=agg, w0=W0)
    return res.weights[:, 0, :]  # (rounds + 1, d)


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


# --------------------------------------------------------------------------- Flower
@pytest.fixture(scope="module")
def flwr():
    return pytest.importorskip("flwr", reason="Flower comparisons need the optional extra fedsde[peers]")


def _flower(strategy, flwr_mod) -> np.ndarray:
    """Drive a Flower strategy's ``aggregate_fit`` for ROUNDS rounds (``server_round`` = 1, 2, …)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    w, traj = W0.copy(), [W0.copy()]
    for r in range(1, ROUNDS + 1):
        results = [(None, FitRes(status=Status(code=Code.OK, message=""),
                                 parameters=ndarrays_to_parameters([_local_gd(w, k, STEPS[k])]),
                                 num_examples=int(SIZES[k]), metrics={})) for k in range(4)]
        params, _ = strategy.aggregate_fit(r, results, [])
        w = parameters_to_ndarrays(params)[0]
        traj.append(w.copy())
    return np.array(traj)


def _flower_cases():
    # (Flower strategy name, its keyword arguments, the fedsde rule that reproduces it, fedsde server_lr)
    return [
        ("FedAvg", {}, FedAvg(), 1.0),
        ("FedAvgM", {"server_learning_rate": 0.7, "server_momentum": 0.9}, FedAvgM(0.9), 0.7),
        ("FedAdam", {}, FedAdam(variant="flower"), 0.1),
        ("FedAdam", {"eta": 0.05, "beta_1": 0.5, "beta_2": 0.9, "tau": 1e-3},
         FedAdam(variant="flower", beta1=0.5, beta2=0.9, tau=1e-3), 0.05),
        ("FedYogi", {}, FedYogi(variant="flower"), 0.01),
        ("FedYogi", {}, FedYogi(variant="paper", v0=0.0), 0.01),
        ("FedAdagrad", {}, FedAdagrad(variant="flower"), 0.1),
        ("FedAdagrad", {}, FedAdagrad(variant="paper", beta1=0.0, tau=1e-9, v0=0.0), 0.1),
    ]


@pytest.mark.parametrize("case", range(len(_flower_cases())))
def test_flower_strategies_reproduced(flwr, case):
    from flwr.common import ndarrays_to_parameters
    from flwr.server import strategy as fs

    name, kwargs, agg, lr = _flower_cases()[case]
    strategy = getattr(fs, name)(initial_parameters=ndarrays_to_parameters([W0.copy()]), **kwargs)
    ref = _flower(strategy, flwr)
    ours = _fedsde(agg, lr)
    assert np.all(np.abs(ours[-1] - ours[0]) > 1e-3)  # the runs move: the comparison is not vacuous
    assert _rel(ours, ref) < 1e-13, (name, _rel(ours, ref))


def test_flower_fedadam_differs_from_the_other_variants(flwr):
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAdam as FlowerAdam

    ref = _flower(FlowerAdam(initial_parameters=ndarrays_to_parameters([W0.copy()])), flwr)
    for agg in (FedAdam(variant="paper", tau=1e-9, v0=0.0), FedAdam(variant="bias_corrected", tau=1e-9)):
        assert _rel(_fedsde(agg, 0.1), ref) > 1e-2


def test_flower_fedadam_step_factor_by_hand():
    # round 1 (server_round r = 1): c = √(1 − 0.99²)/(1 − 0.9²) = 0.7425…; m1 = 0.1Δ, v1 = 0.01Δ², so
    # w1 = w0 + s·c·0.1Δ/(0.1|Δ| + τ) ≈ w0 + s·c·sign(Δ)
    agg = FedAdam(variant="flower")
    assert agg.step_scale(1) == pytest.approx(np.sqrt(1 - 0.99**2) / (1 - 0.9**2), rel=1e-15)
    assert FedAdam(variant="paper").step_scale(1) == 1.0 and FedYogi(variant="flower").step_scale(3) == 1.0
    w = torch.zeros((1, 2), dtype=D)
    up = torch.tensor([[[1.0, -2.0]]], dtype=D)
    c = RoundContext(round=0, server_lr=0.5, eta=0.1, local_steps=torch.ones((1, 1), dtype=torch.long),
                     participating=torch.ones((1, 1), dtype=torch.bool), p=torch.ones(1, dtype=D))
    w1, _ = agg.apply(w, up, torch.ones((1, 1), dtype=D), agg.init(w), c)
    expected = 0.5 * agg.step_scale(1) * 0.1 * np.array([1.0, -2.0]) / (np.sqrt(0.01) * np.array([1.0, 2.0]) + 1e-9)
    np.testing.assert_allclose(w1[0].numpy(), expected, rtol=1e-14)
    assert (agg.beta1, agg.beta2, agg.tau, agg.v0) == (0.9, 0.99, 1e-9, 0.0)
    assert (FedYogi(variant="flower").tau, FedAdagrad(variant="flower").beta1) == (1e-3, 0.0)


# --------------------------------------------------------------------------- FedNova (JYWa/FedNova)
NOVA_STEPS = np.array([2, 7, 4])


def _nova_port(momentum, mu, gmf, float32_tau_eff=False, rounds=4):
    pr = _problem(3)
    return ports.official_nova_run([_grad(k) for k in range(3)], W0, pr.p, NOVA_STEPS, ETA, rounds,
                                   momentum=momentum, mu=mu, gmf=gmf, float32_tau_eff=float32_tau_eff)


@pytest.mark.parametrize("momentum, mu, gmf", [(0.0, 0.0, 0.0), (0.9, 0.0, 0.0), (0.0, 2.0, 0.0), (0.9, 2.0, 0.0),
                                              (0.9, 0.0, 0.5), (0.9, 2.0, 0.5)])
def test_fednova_official_code_reproduced(momentum, mu, gmf):
    ref, info = _nova_port(momentum, mu, gmf)
    official = _fedsde(FedNova(momentum=momentum, mu=mu, server_momentum=gmf, variant="official"), 1.0, q=3,
                       steps=NOVA_STEPS, rounds=4)
    assert _rel(official, ref) < 1e-13
    paper = _fedsde(FedNova(momentum=momentum, mu=mu, server_momentum=gmf), 1.0, q=3, steps=NOVA_STEPS, rounds=4)
    if momentum and mu:  # the one place where the code and the paper part
        assert _rel(paper, ref) > 1e-2
    else:
        assert _rel(paper, ref) < 1e-13
        sol = LocalSolver(momentum=momentum, prox=mu)
        np.testing.assert_allclose(info[0]["norms"], sol.norm_table(7, ETA)[NOVA_STEPS], rtol=1e-14)
    # the code sums τ_eff in float32 (torch.tensor of a Python float): a rounding of at most ~1e-7 relative
    ref32, _ = _nova_port(momentum, mu, gmf, float32_tau_eff=True)
    assert _rel(official, ref32) < 1e-6


def test_fednova_official_normaliser_is_inconsistent_with_its_dynamics():
    tau, eta, mu, rho = 7, 0.1, 2.0, 0.9
    worker = ports.NovaWorker(np.zeros(1), 1.0, eta, rho, mu)
    for _ in range(tau):
        worker.step(np.ones(1))  # F(x) = x: every gradient is 1, so −Δ/η = Σ_s a_s
    true_sum = float(-worker.p[0] / eta)
    assert worker.local_normalizing_vec == pytest.approx(16.2249336, abs=1e-7)
    assert official_normaliser(rho, mu, tau, eta) == pytest.approx(worker.local_normalizing_vec, rel=1e-15)
    assert true_sum == pytest.approx(8.414389, abs=1e-6)
    buffered = LocalSolver(momentum=rho, prox=mu, prox_in_buffer=True)
    assert buffered.norm_table(tau, eta)[tau] == pytest.approx(true_sum, rel=1e-13)
    assert buffered.accumulation_vector(tau, eta).sum() == pytest.approx(true_sum, rel=1e-13)
    assert LocalSolver(momentum=rho, prox=mu).norm_table(tau, eta)[tau] == pytest.approx(15.341887, abs=1e-6)
    # the ratio Σa/normaliser depends on τ, so the code does not weight clients by p_k
    ratios = [LocalSolver(momentum=rho, prox=mu, prox_in_buffer=True).norm_table(t, eta)[t]
              / official_normaliser(rho, mu, t, eta) for t in (2, 7)]
    assert abs(ratios[0] - ratios[1]) > 0.1


# --------------------------------------------------------------------------- FedDisco (MediaBrain-SJTU/FedDisco)
@pytest.mark.parametrize("metric", ["kl", "l1", "l2", "cosine"])
def test_feddisco_official_weights_reproduced(metric):
    rng = np.random.default_rng(11)
    crashes, worst = 0, 0.0
    for _ in range(72):
        q, c = int(rng.integers(2, 9)), int(rng.integers(2, 11))
        counts = rng.integers(0, 50, size=(q, c)) * (rng.random((q, c)) < 0.7)
        counts[:, 0] += 1  # no empty client
        sizes = rng.integers(1, 500, size=q).astype(float)
        n = sizes / sizes.sum()
        ours = feddisco_weights(sizes, counts, metric=metric)
        d = ports.disco_difference(counts.astype(float), metric, np.full(c, 1.0 / c))
        try:
            ref = ports.disco_adjust(n, d, 0.5, 0.1)
        except NameError:  # upstream crashes when every bracket is <= 0; fedsde falls back to n
            crashes += 1
            np.testing.assert_allclose(ours, n, rtol=1e-15)
            continue
        worst = max(worst, float(np.max(np.abs(ours - ref))))
    assert worst < 1e-14
    if metric == "l1":  # raw l1 distances reach 2, so a = 0.5 drives every bracket below 0 in many cases
        assert crashes >= 5
    elif metric == "kl":
        assert crashes == 0


# --------------------------------------------------------------------------- FedAWARE (dunzeng/FedAWARE)
def test_fedaware_official_frank_wolfe_stops_early_and_fails_on_one_client():
    rng = np.random.default_rng(5)
    gap_code, gap_ours = 0.0, 0.0
    for _ in range(40):
        q = int(rng.integers(3, 7))
        v = rng.standard_normal((q, 8)) + rng.uniform(0, 2) * rng.standard_normal(8)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        best = ports.exact_min_norm(v) @ v @ v.T @ ports.exact_min_norm(v)
        lam_code, lam_ours = ports.official_fw(v), min_norm_weights(v)
        gap_code = max(gap_code, float(lam_code @ v @ v.T @ lam_code - best))
        gap_ours = max(gap_ours, float(lam_ours @ v @ v.T @ lam_ours - best))
    assert gap_ours < 1e-14
    assert gap_code > 1e-5
    with pytest.raises(NameError):
        ports.official_fw(np.ones((1, 3)))
    np.testing.assert_allclose(min_norm_weights(np.ones((1, 3))), [1.0])


def _aware_compare(warm_start, masks, alpha_code=0.3, glr=0.8, solver=ports.exact_min_norm):
    """fedsde's FedAWARE and the ported server (exact QP by default) on the same participation, own trajectories."""
    pr = _problem(4)
    ref = ports.AwareServer(W0, pr.p, alpha_code=alpha_code, glr=glr, solver=solver)
    agg = FedAWARE(alpha=1 - alpha_code, warm_start=warm_start)
    w = torch.as_tensor(W0, dtype=D).unsqueeze(0)
    st, diffs = agg.init(w), []
    for n, mask in enumerate(masks):
        idx = [k for k in range(4) if mask[k]]
        ref_w = ref.global_update(idx, [_local_gd(ref.w, k, STEPS[k]) for k in idx])
        up = np.zeros((1, 4, 3))
        for k in idx:
            up[0, k] = _local_gd(w[0].numpy(), k, STEPS[k]) - w[0].numpy()
        c = RoundContext(round=n, server_lr=glr, eta=ETA, local_steps=torch.as_tensor(STEPS).unsqueeze(0),
                         participating=torch.as_tensor(mask).unsqueeze(0), p=torch.as_tensor(pr.p))
        w, st = agg.apply(w, torch.as_tensor(up), torch.as_tensor(pr.p).unsqueeze(0), st, c)
        diffs.append(_rel(w[0].numpy(), ref_w))
    return max(diffs), w[0].numpy() - W0


def test_fedaware_official_server_reproduced_with_an_exact_solver():
    rng = np.random.default_rng(8)
    later = [rng.permutation(4) < 2 for _ in range(5)]
    # "-startup 1": everyone in round 0, then FedAWARE steps on random pairs
    diff, moved = _aware_compare("full", [np.ones(4, dtype=bool), *later])
    assert diff < 1e-13 and np.all(np.abs(moved) > 1e-3)
    # with the code's own Frank-Wolfe (stops at ‖Δλ‖₁ < 1e-5, end points 0.999/0.001) the steps drift apart a little
    assert 1e-7 < _aware_compare("full", [np.ones(4, dtype=bool), *later], solver=ports.official_fw)[0] < 1e-3
    # "-startup 0": the code's shuffled cycle covers the four clients in two rounds of two; FedAvg before that
    perm = rng.permutation(4)
    cycle = [np.isin(np.arange(4), perm[:2]), np.isin(np.arange(4), perm[2:])]
    diff, moved = _aware_compare("fedavg", [*cycle, *later])
    assert diff < 1e-13 and np.all(np.abs(moved) > 1e-3)
    # the FedAvg warm-up is not fedsde's default: the first round's steps differ
    assert _aware_compare("full", [*cycle, *later])[0] > 1e-2


def test_fedaware_fedavg_warm_start_first_round_is_the_participants_average():
    pr = _problem(4)
    agg = FedAWARE(warm_start="fedavg")
    assert agg.warm_start_rounds == 0 and FedAWARE(warm_start=True).warm_start == "full"
    w = torch.as_tensor(W0, dtype=D).unsqueeze(0)
    mask = np.array([True, False, True, False])
    up = torch.as_tensor(np.stack([_local_gd(W0, k, STEPS[k]) - W0 if mask[k] else np.zeros(3) for k in range(4)]))
    c = RoundContext(round=0, server_lr=0.3, eta=ETA, local_steps=torch.as_tensor(STEPS).unsqueeze(0),
                     participating=torch.as_tensor(mask).unsqueeze(0), p=torch.as_tensor(pr.p))
    w1, st = agg.apply(w, up.unsqueeze(0), torch.as_tensor(pr.p).unsqueeze(0), agg.init(w), c)
    p = pr.p * mask / (pr.p * mask).sum()
    np.testing.assert_allclose(w1[0].numpy(), W0 + p @ up.numpy(), rtol=1e-14)  # no server learning rate
    assert st.seen[0].tolist() == mask.tolist()


# --------------------------------------------------------------------------- torchsde's Brownian motion
def test_torchsde_brownian_interval_has_the_same_law():
    torchsde = pytest.importorskip("torchsde")
    paths, ch, steps, dt = 4000, 3, 20, 0.05
    bi = torchsde.BrownianInterval(t0=0.0, t1=steps * dt, size=(paths, ch), dtype=D, entropy=123)
    ts = [j * dt for j in range(steps + 1)]
    inc_ts = torch.stack([bi(ts[j], ts[j + 1]) for j in range(steps)]).numpy()  # (steps, paths, ch)
    gb = GridBrownian(0.0, dt, (paths, ch), seed=123)
    inc_gb = torch.stack([gb(ts[j], ts[j + 1]) for j in range(steps)]).numpy()
    z = []
    for stat in (lambda x: x, lambda x: x * x, lambda x: x[1:] * x[:-1]):  # mean, variance, lag-1 product
        a, b = stat(inc_ts), stat(inc_gb)
        se = np.sqrt(a.var(1, ddof=1) / paths + b.var(1, ddof=1) / paths)
        z.append(((a.mean(1) - b.mean(1)) / se).ravel())
    z = np.concatenate(z)
    assert z.size == 177 and np.max(np.abs(z)) < 5
    assert 0.8 < np.sqrt(np.mean(z**2)) < 1.2


def test_peer_variants_are_named_and_validated():
    from fedsde.aggregators import FedProx
    from fedsde.errors import FedsdeInputError

    for make in (lambda: FedNova(variant="code"), lambda: FedAdam(variant="flwr"), lambda: FedAWARE(warm_start=2)):
        with pytest.raises(FedsdeInputError, match=r"variant|warm_start"):
            make()
    assert FedNova(momentum=0.9, mu=2.0, variant="official").local_solver.prox_in_buffer
    assert not FedNova(momentum=0.9, mu=2.0).local_solver.prox_in_buffer
    assert FedProx(0.5, momentum=0.9, prox_in_buffer=True).local_solver.name == "momentum+prox+in-buffer"
    assert FedNova(variant="official").describe()["variant"] == "official"
