"""A user's ``nn.Module`` as the clients' model (``fedsde.problems.module``): the proofs that the generic path is right.

* the built-in softmax and MLP written as ``nn.Module``s give the built-in path's trajectories (whole trajectories
  through ``simulate``, minibatches from the same streams) and metrics, to 1e-12 relative in float64;
* a small convolutional network on natural clients (an npz with a ``client`` array) trains in ``simulate`` exactly as a
  plain per-client torch loop with FedAvg averaging (full batch; 1e-9 on the weights and the train-loss path);
* with dropout and minibatches a replicate does not depend on R or the chunking (bit for bit), and the mean train
  loss agrees with an independent Monte-Carlo loop (torch's own dropout and ``randperm`` minibatches) within 5σ;
* BatchNorm is refused, a module vmap cannot batch runs in a loop with the same numbers and one warning, an LSTM
  gives the numbers of a plain loop.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fedsde.errors import FedsdeInputError
from fedsde.problems import federated_classification, load_problem, module_problem
from fedsde.problems.classification.mlp import init_weights
from fedsde.problems.metrics import evaluate_metrics
from fedsde.problems.module import ModuleLoopWarning
from fedsde.sim import simulate

REL = 1e-12


class SoftmaxModule(nn.Module):
    """``z = x W + b`` with ``W`` (F, C), ``b`` (1, C): ``parameters_to_vector`` is the built-in layout (the rows of
    ``W̃ = [W; b]`` row-major), zero start as the built-in linear models."""

    def __init__(self, features: int, classes: int):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(features, classes))
        self.b = nn.Parameter(torch.zeros(1, classes))

    def forward(self, x):
        return x @ self.W + self.b


class MLPModule(nn.Module):
    """``z = tanh(x W₁ + b₁) W₂ + b₂``, parameters in the built-in layout and at the built-in Glorot start."""

    def __init__(self, features: int, hidden: int, classes: int, seed: int):
        super().__init__()
        w = torch.as_tensor(init_weights(features + 1, hidden, classes, seed))
        cut = (features + 1) * hidden
        W1, W2 = w[:cut].reshape(features + 1, hidden), w[cut:].reshape(hidden + 1, classes)
        self.W1, self.b1 = nn.Parameter(W1[:features].clone()), nn.Parameter(W1[features:].clone())
        self.W2, self.b2 = nn.Parameter(W2[:hidden].clone()), nn.Parameter(W2[hidden:].clone())

    def forward(self, x):
        return torch.tanh(x @ self.W1 + self.b1) @ self.W2 + self.b2


def _as_module(builtin, module, **kw):
    return module_problem(module, builtin.X, builtin.y, builtin.client_ids, x_test=builtin.X_test,
                          y_test=builtin.y_test, l2=builtin.l2, **kw)


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / max(np.max(np.abs(np.asarray(b))), 1e-300))


@pytest.fixture(scope="module")
def digits():
    return federated_classification("digits", n_clients=3, partition="dirichlet", seed=0, model="softmax", l2=1e-3)


@pytest.mark.parametrize("batch", [8, 40, 300])  # Floyd (b <= 32), the smallest keys (b > 32), dense (N_k <= 2b)
def test_softmax_module_gives_the_builtin_trajectories(digits, batch):
    builtin = digits.replace(batch_size=batch)
    mine = _as_module(builtin, SoftmaxModule(64, 10), batch_size=batch)
    assert mine.d == builtin.d and mine.Q == builtin.Q
    np.testing.assert_array_equal(mine.p, builtin.p)
    kw = {"eta": 0.1, "local_steps": 3, "rounds": 3, "replicates": 3, "seed": 4, "record": [0, 1, 2, 3]}
    a, b = simulate(builtin, **kw).weights, simulate(mine, **kw).weights
    assert np.max(np.abs(a[-1] - a[0])) > 0.1  # the weights move
    assert _rel(b, a) <= REL
    got, ref = evaluate_metrics(mine, b[-1]), evaluate_metrics(builtin, a[-1])
    for name in ("train_loss", "grad_norm_sq", "test_accuracy", "distance_from_start"):
        assert _rel(got[name], ref[name]) <= REL, name


def test_mlp_module_gives_the_builtin_trajectories(digits):
    builtin = digits.replace(model="mlp", hidden=6, init_seed=3, batch_size=8)
    mine = _as_module(builtin, lambda: MLPModule(64, 6, 10, 3), batch_size=8, init_seed=3)
    np.testing.assert_array_equal(mine.initial_weights(), builtin.initial_weights())
    kw = {"eta": 0.1, "local_steps": 2, "rounds": 3, "replicates": 2, "seed": 1, "record": [0, 1, 2, 3]}
    a, b = simulate(builtin, **kw).weights, simulate(mine, **kw).weights
    assert _rel(b, a) <= REL
    w = a[-1, 0]
    assert abs(mine.loss(w) - builtin.loss(w)) <= REL * abs(builtin.loss(w))
    assert _rel(mine.grad(w), builtin.grad(w)) <= 1e-11
    assert _rel(mine.client_grad(w), builtin.client_grad(w)) <= 1e-11


# ---------------------------------------------------------------------------------------------- natural clients
CNN = '''
import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, channels=2, classes=3, dropout=0.0):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, padding=1)
        self.norm = nn.GroupNorm(1, channels)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(channels * 9, classes)

    def forward(self, x):
        h = torch.nn.functional.avg_pool2d(torch.tanh(self.norm(self.conv(x))), 2)
        return self.fc(self.drop(h.flatten(1)))
'''


def write_cnn_problem(tmp_path, *, batch='"full"', dropout=0.0, extra=""):
    """A conv net file, an npz of 6×6 images of three natural clients (named out of order) and its problem file."""
    (tmp_path / "cnn.py").write_text(CNN)
    rng = np.random.default_rng(0)
    n = 45
    x = rng.standard_normal((n, 1, 6, 6))
    y = (x[:, 0, :3].sum((1, 2)) > 0).astype(np.int64) + (x[:, 0, 3:, 3:].mean((1, 2)) > 0.3)
    client = np.array(["north", "east", "south"])[rng.permutation(np.arange(n) % 3)]
    client[:2] = ["south", "north"]  # first appearances: south, north, east
    np.savez(tmp_path / "rows.npz", x=x, y=y, client=client, x_test=rng.standard_normal((12, 1, 6, 6)),
             y_test=rng.integers(0, 3, 12))
    path = tmp_path / "cnn.toml"
    path.write_text('kind = "module"\nmodel = "cnn.py:SmallCNN"\n'
                    f"model_options = {{ channels = 2, dropout = {dropout} }}\n"
                    f'data = "rows.npz"\nbatch_size = {batch}\nl2 = 1e-3\ninit_seed = 5\n{extra}')
    return path, (x, y, client)


def _reference_fedavg(problem, x, y, client, *, eta, steps, rounds):
    """A plain per-client torch loop: each client copies the server module, takes ``steps`` full-batch SGD steps
    ``w ← w − η(∇ mean CE + λw)`` with ``torch.autograd``, the server averages with ``p_k = N_k/N``."""
    import importlib.util

    names = list(dict.fromkeys(client.tolist()))
    spec = importlib.util.spec_from_file_location("ref_cnn", problem.info["model_file"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(5)
    server = mod.SmallCNN(channels=2).double()
    X, Y = torch.as_tensor(x), torch.as_tensor(y)
    rows = [torch.as_tensor(np.flatnonzero(client == c)) for c in names]
    p = torch.tensor([r.numel() for r in rows], dtype=torch.float64) / len(client)
    vec = torch.nn.utils.parameters_to_vector

    def objective(m):
        m.eval()
        with torch.no_grad():
            f = sum(p[k] * nn.functional.cross_entropy(m(X[r]), Y[r]) for k, r in enumerate(rows))
            return float(f + 0.5 * problem.l2 * vec(m.parameters()).square().sum())

    path, losses = [vec(server.parameters()).detach().clone()], [objective(server)]
    for _ in range(rounds):
        new = torch.zeros_like(path[-1])
        for k, r in enumerate(rows):
            m = copy.deepcopy(server).train()
            for _ in range(steps):
                loss = nn.functional.cross_entropy(m(X[r]), Y[r])
                grads = torch.autograd.grad(loss, list(m.parameters()))
                with torch.no_grad():
                    for prm, g in zip(m.parameters(), grads, strict=True):
                        prm -= eta * (g + problem.l2 * prm)
            new += p[k] * vec(m.parameters()).detach()
        torch.nn.utils.vector_to_parameters(new, server.parameters())
        path.append(new.clone())
        losses.append(objective(server))
    return torch.stack(path).numpy(), np.array(losses)


def test_conv_net_on_natural_clients_trains_as_a_plain_per_client_loop(tmp_path):
    path, (x, y, client) = write_cnn_problem(tmp_path)
    problem = load_problem(path)
    problem.info["model_file"] = str(tmp_path / "cnn.py")
    assert problem.client_names == ("south", "north", "east") and problem.batch_size is None
    assert problem.sizes.tolist() == [int(np.sum(client == c)) for c in ("south", "north", "east")]
    res = simulate(problem, eta=0.2, local_steps=3, rounds=4, replicates=2, seed=0, record=[0, 1, 2, 3, 4])
    W, F = _reference_fedavg(problem, x, y, client, eta=0.2, steps=3, rounds=4)
    assert np.max(np.abs(W[-1] - W[0])) > 0.05
    for r in range(2):
        assert _rel(res.weights[:, r], W) <= 1e-9
    loss = evaluate_metrics(problem, res.weights[:, 0])["train_loss"]
    assert _rel(loss, F) <= 1e-9


# ---------------------------------------------------------------------------------------------- dropout, minibatches
def test_dropout_minibatch_replicate_does_not_depend_on_R_or_chunks(tmp_path, monkeypatch):
    path, _ = write_cnn_problem(tmp_path, batch=4, dropout=0.3)
    # one path for every shape (docs/determinism.md): with "auto" each shape is timed, and a run on more than one
    # thread cuts its blocks into chunks of other shapes, which may time the other way (equal to rounding only)
    problem = load_problem(path).replace(batching="vmap")
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "seed": 9, "block_size": 2}
    full = simulate(problem, replicates=6, **kw).weights
    assert simulate(problem, replicates=6, chunk_size=2, **kw).weights.tobytes() == full.tobytes()
    assert simulate(problem, replicates=2, **kw).weights.tobytes() == full[:, :2].tobytes()
    assert np.ptp(full[-1], axis=0).max() > 0  # replicates differ (minibatches and masks)
    monkeypatch.setattr("fedsde.sim.workers.MIN_CHUNK_WORK", 1)  # small chunks in parallel threads
    threads = simulate(problem, replicates=6, workers=3, **kw).weights
    assert threads.tobytes() == full.tobytes()


def test_dropout_minibatch_mean_loss_agrees_with_an_independent_monte_carlo_loop(tmp_path):
    """The mean train loss after two rounds against a loop that draws minibatches with ``torch.randperm`` and
    dropout with torch's own ``nn.Dropout`` (another generator): equal in law, within 5 standard errors."""
    path, (x, y, client) = write_cnn_problem(tmp_path, batch=4, dropout=0.3)
    problem = load_problem(path)
    R, eta, steps, rounds = 96, 0.3, 2, 2
    res = simulate(problem, eta=eta, local_steps=steps, rounds=rounds, replicates=R, seed=2)
    mine = evaluate_metrics(problem, res.weights[-1])["train_loss"]
    import importlib.util

    spec = importlib.util.spec_from_file_location("mc_cnn", tmp_path / "cnn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gen = torch.Generator().manual_seed(123)
    X, Y = torch.as_tensor(x), torch.as_tensor(y)
    rows = [torch.as_tensor(np.flatnonzero(client == c)) for c in ("south", "north", "east")]
    p = torch.tensor([r.numel() for r in rows], dtype=torch.float64) / len(client)
    vec = torch.nn.utils.parameters_to_vector
    ref = []
    for _ in range(R):
        torch.manual_seed(5)
        server = mod.SmallCNN(channels=2, dropout=0.3).double()
        for _ in range(rounds):
            new = 0.0
            for k, r in enumerate(rows):
                m = copy.deepcopy(server).train()
                for _ in range(steps):
                    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))  # nn.Dropout's own draws
                    batch = r[torch.randperm(r.numel(), generator=gen)[:4]]
                    loss = nn.functional.cross_entropy(m(X[batch]), Y[batch])
                    grads = torch.autograd.grad(loss, list(m.parameters()))
                    with torch.no_grad():
                        for prm, g in zip(m.parameters(), grads, strict=True):
                            prm -= eta * (g + problem.l2 * prm)
                new = new + p[k] * vec(m.parameters()).detach()
            torch.nn.utils.vector_to_parameters(new, server.parameters())
        ref.append(vec(server.parameters()).detach().numpy())
    theirs = evaluate_metrics(problem, np.stack(ref))["train_loss"]
    se = np.sqrt(mine.var(ddof=1) / R + theirs.var(ddof=1) / R)
    assert se > 0
    assert abs(mine.mean() - theirs.mean()) <= 5 * se, (mine.mean(), theirs.mean(), se)


# ---------------------------------------------------------------------------------------------- policies
def _rows(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n), np.arange(n) % 3


def test_batchnorm_is_refused_in_one_line_naming_the_fix():
    x, y, c = _rows()
    with pytest.raises(FedsdeInputError, match="GroupNorm") as err:
        module_problem(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)), x, y, c)
    assert "\n" not in str(err.value)
    with pytest.raises(FedsdeInputError, match="GroupNorm"):
        module_problem(nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, track_running_stats=False),
                                     nn.Linear(5, 3)), x, y, c)
    with pytest.raises(FedsdeInputError, match=r"nn\.Dropout"):
        module_problem(nn.Sequential(nn.Linear(4, 3), nn.AlphaDropout(0.2)), x, y, c)


class OwnDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return nn.functional.dropout(self.fc(x), 0.5, self.training)


def test_a_forward_pass_that_draws_its_own_random_numbers_is_refused():
    x, y, c = _rows()
    pb = module_problem(OwnDropout(), x, y, c, batch_size=2)
    with pytest.raises(FedsdeInputError, match="draws random numbers"):
        simulate(pb, eta=0.1, local_steps=1, rounds=1, replicates=2, seed=0)


class ItemScaled(nn.Module):
    """A forward pass vmap cannot batch (a Python float of a tensor)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) / (1.0 + float(x.abs().max()))


def _plain_loop(module, x, y, c, *, eta, steps, rounds, scale=None):
    """Full-batch FedAvg with torch.autograd, client by client (clients 0, 1, 2 in order), equal weights by size."""
    server = copy.deepcopy(module).double()
    X, Y = torch.as_tensor(x), torch.as_tensor(y)
    rows = [torch.as_tensor(np.flatnonzero(c == k)) for k in range(3)]
    vec = torch.nn.utils.parameters_to_vector
    for _ in range(rounds):
        new = 0.0
        for r in rows:
            m = copy.deepcopy(server)
            for _ in range(steps):
                out = m(X[r])
                out = out[0][:, -1] if isinstance(out, tuple) else out
                grads = torch.autograd.grad(nn.functional.cross_entropy(out, Y[r]), list(m.parameters()))
                with torch.no_grad():
                    for prm, g in zip(m.parameters(), grads, strict=True):
                        prm -= eta * g
            new = new + (r.numel() / len(c)) * vec(m.parameters()).detach()
        torch.nn.utils.vector_to_parameters(new, server.parameters())
    return vec(server.parameters()).detach().numpy()


def test_a_module_vmap_cannot_batch_runs_in_a_loop_with_the_same_numbers_and_one_warning():
    x, y, c = _rows()
    torch.manual_seed(0)
    module = ItemScaled()
    pb = module_problem(copy.deepcopy(module), x, y, c)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = simulate(pb, eta=0.3, local_steps=2, rounds=3, replicates=2, seed=0, workers=1)
        simulate(pb, eta=0.3, local_steps=2, rounds=1, replicates=4, block_size=1, chunk_size=1, seed=0)  # again
    loops = [w for w in seen if issubclass(w.category, ModuleLoopWarning)]
    assert len(loops) == 1 and "loop" in str(loops[0].message)
    ref = _plain_loop(module, x, y, c, eta=0.3, steps=2, rounds=3)
    assert _rel(res.weights[-1, 0], ref) <= REL
    forced = simulate(module_problem(copy.deepcopy(module), x, y, c, batching="loop"), eta=0.3, local_steps=2,
                      rounds=3, replicates=2, seed=0)
    assert forced.weights.tobytes() == res.weights.tobytes()


class TinyLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(2, 3, batch_first=True)
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


def test_an_lstm_gives_the_numbers_of_a_plain_loop_batched_or_looped():
    rng = np.random.default_rng(1)
    x, y, c = rng.standard_normal((18, 4, 2)), rng.integers(0, 3, 18), np.arange(18) % 3
    torch.manual_seed(1)
    module = TinyLSTM()
    ref = _plain_loop(module, x, y, c, eta=0.3, steps=2, rounds=2)
    for batching in ("auto", "loop"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModuleLoopWarning)
            res = simulate(module_problem(copy.deepcopy(module), x, y, c, batching=batching), eta=0.3, local_steps=2,
                           rounds=2, replicates=2, seed=0)
        assert _rel(res.weights[-1, 0], ref) <= REL, batching


def test_vmap_and_loop_agree_with_dropout_and_minibatches(tmp_path):
    path, _ = write_cnn_problem(tmp_path, batch=4, dropout=0.3)
    a = load_problem(path)
    b = a.replace(batching="loop")
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 3, "seed": 3}
    assert _rel(simulate(b, **kw).weights, simulate(a, **kw).weights) <= REL


def test_initial_weights_follow_the_manual_seed_convention_and_leave_the_global_rng_alone():
    x, y, c = _rows()
    state = torch.random.get_rng_state()
    pb = module_problem(lambda: nn.Linear(4, 3), x, y, c, init_seed=11)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(11)
    expected = torch.nn.utils.parameters_to_vector(nn.Linear(4, 3).parameters()).double().detach().numpy()
    np.testing.assert_array_equal(pb.initial_weights(), expected)
    np.testing.assert_array_equal(pb.replace(init_seed=11).initial_weights(), expected)
    assert not np.array_equal(pb.replace(init_seed=12).initial_weights(), expected)


def test_float32_runs_and_is_close_to_float64(tmp_path):
    path, _ = write_cnn_problem(tmp_path)
    pb = load_problem(path)
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 2, "seed": 0}
    a = simulate(pb, **kw).weights
    b = simulate(pb, dtype=torch.float32, **kw).weights
    assert b.dtype == np.float64 or b.dtype == np.float32
    assert _rel(b, a) <= 1e-5


@pytest.mark.cuda
def test_cuda_module_run_matches_the_cpu_full_batch(tmp_path):
    path, _ = write_cnn_problem(tmp_path)
    pb = load_problem(path)
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 2, "seed": 0}
    a = simulate(pb, **kw).weights
    b = simulate(pb, device="cuda", **kw).weights
    assert _rel(b, a) <= 1e-10
    m = evaluate_metrics(pb, b[-1])
    assert np.all(np.isfinite(m["train_loss"]))


def test_validity_on_the_conv_net_gives_one_of_its_three_outcomes(tmp_path):
    from fedsde.validity import validity_test

    path, _ = write_cnn_problem(tmp_path, batch=4, dropout=0.3)
    res = validity_test(load_problem(path), eta=0.2, local_steps=2, rounds=2, replicates=4, seed=0, ells=[1, 2])
    assert res.verdict.outcome in ("tracks", "does not track", "inconclusive")


def test_round_contraction_by_hessian_vector_products_equals_the_closed_form_hessians(digits):
    from fedsde.validity.step import round_contraction

    builtin = digits.replace(batch_size=8)
    mine = _as_module(builtin, SoftmaxModule(64, 10), batch_size=8)
    w = np.random.default_rng(0).standard_normal(builtin.d) * 0.1
    np.testing.assert_allclose(mine.client_hvp(w, np.ones(builtin.d)), builtin.client_hessian(w) @ np.ones(builtin.d),
                               rtol=1e-10, atol=1e-12)
    a = round_contraction(builtin, eta=0.1, local_steps=2, server_lr=1.0, at=w)
    b = round_contraction(mine, eta=0.1, local_steps=2, server_lr=1.0, at=w)
    assert abs(a - b) <= 1e-8 * abs(a)


def test_a_forward_pass_that_returns_no_tensor_is_one_line():
    x, y, c = _rows()
    with pytest.raises(FedsdeInputError, match="not a tensor") as err:
        module_problem(nn.LSTM(4, 3, batch_first=True), x[:, None, :], y, c)
    assert "\n" not in str(err.value)
    with pytest.raises(FedsdeInputError, match="outputs per row"):
        module_problem(nn.Linear(4, 2), x, y, c)  # labels go up to 2: three logits needed


def test_epoch_steps_give_the_builtin_trajectories(digits):
    """Local epochs (batch sizes handed over every round by EpochSteps, the last batch of an epoch smaller)."""
    from fedsde.sim import EpochSteps, minibatch_oracle, module_oracle

    builtin = digits.replace(batch_size=None)
    mine = _as_module(builtin, SoftmaxModule(64, 10), batch_size=None)
    steps = EpochSteps(tuple(builtin.sizes), 1, (20, 60))  # batch sizes drawn per client and round
    kw = {"eta": 0.1, "local_steps": steps, "rounds": 2, "replicates": 2, "seed": 3, "record": [0, 1, 2]}
    a = simulate(builtin, oracle_factory=minibatch_oracle(sampling="minibatch"), **kw).weights
    b = simulate(mine, oracle_factory=module_oracle(), **kw).weights
    assert np.max(np.abs(a[-1] - a[0])) > 0.1
    assert _rel(b, a) <= REL


def test_subsampled_metrics_equal_the_builtin_estimates_and_their_standard_errors(digits):
    """Above ``metric_samples`` rows both paths estimate on the same seeded subsample (rows drawn with p_k/N_k, 16
    groups for the unbiased ‖∇F‖²): equal values and standard errors."""
    builtin = digits.replace(batch_size=8)
    mine = _as_module(builtin, SoftmaxModule(64, 10), batch_size=8)
    W = np.random.default_rng(1).standard_normal((3, builtin.d)) * 0.05
    ref = evaluate_metrics(builtin, W, metric_samples=64, metric_seed=2)
    got = evaluate_metrics(mine, W, metric_samples=64, metric_seed=2)
    assert got.sampled and got.sampling == ref.sampling
    for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
        assert _rel(got[name], ref[name]) <= 1e-11, name
        assert np.all(ref.se[name] > 0) and _rel(got.se[name], ref.se[name]) <= 1e-9, name
