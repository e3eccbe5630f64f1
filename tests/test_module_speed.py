"""What the speed machinery of a user's module must not change (``fedsde.problems.module.batching``, the metric
passes, the GPU launch groups): ``batching = "auto"`` runs the faster path and gives that path's numbers bit for bit
(the random streams do not depend on the choice), says so in ``--json``; the two paths of the metric passes agree
to rounding; a subsample's ``‖∇F‖²`` with few groups stays unbiased with a calibrated standard error; the metric
budget follows its rule; blocks grouped per call keep the chunk invariance.  No timing is asserted (speed lives in
``benchmarks/bench_module.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from fedsde.cli import main
from fedsde.problems import federated_classification, load_problem, module_problem
from fedsde.problems import metrics as M
from fedsde.problems.metrics import evaluate_metrics
from fedsde.problems.module import batching
from fedsde.problems.module.metrics import gram_norm_sq
from fedsde.sim import simulate

CNN = '''
import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, channels=2, dropout=0.3):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(channels * 16, 3)

    def forward(self, x):
        return self.head(torch.flatten(self.drop(torch.relu(self.conv(x))), 1))
'''


@pytest.fixture
def fresh_choices(monkeypatch):
    """An empty cache of batching choices (the process-wide one is left as it was)."""
    monkeypatch.setattr(batching, "_CHOICES", {})


def _write(tmp_path, extra: str = "") -> str:
    (tmp_path / "tiny_cnn.py").write_text(CNN)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 1, 6, 6))
    y = (x[:, 0, :3].sum((1, 2)) > 0).astype(np.int64) + (x[:, 0, 3:, 3:].mean((1, 2)) > 0.3)
    np.savez(tmp_path / "rows.npz", x=x, y=y, client=np.arange(60) % 3, x_test=rng.standard_normal((20, 1, 6, 6)),
             y_test=rng.integers(0, 3, 20))
    path = tmp_path / "tiny.toml"
    path.write_text(f'kind = "module"\nmodel = "tiny_cnn.py:TinyCNN"\ndata = "rows.npz"\nbatch_size = 4\n'
                    f"l2 = 1e-3\n{extra}")
    return str(path)


def _fake_timer(faster: str):
    """Seconds that make ``faster`` win: the vmap call takes 1, each looped entry 0.01 or 10."""
    def timer(fn, device, path):
        out = fn()
        return out, 1.0 if path == "vmap" else out.shape[0] * (0.01 if faster == "loop" else 10.0)
    return timer


@pytest.mark.parametrize("faster", ["vmap", "loop"])
def test_auto_runs_the_faster_path_and_gives_its_numbers_bit_for_bit(tmp_path, fresh_choices, monkeypatch, faster):
    monkeypatch.setattr(batching, "_seconds", _fake_timer(faster))
    pb = load_problem(_write(tmp_path))
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 3, "seed": 4}
    auto = simulate(pb, **kw)  # the first step decides (and returns the chosen path's numbers)
    forced = simulate(pb.replace(batching=faster), **kw)
    assert auto.weights.tobytes() == forced.weights.tobytes()
    info = auto.config["batching"]
    assert info["requested"] == "auto" and info["used"] == faster
    (choice,) = info["timings"]
    assert choice["how"] == "timed" and choice["purpose"] == "train" and choice["entries"] == 3 * 3
    assert choice["vmap_s"] == 1.0 and choice["loop_s"] == pytest.approx(9 * (0.01 if faster == "loop" else 10))
    other = simulate(pb.replace(batching="loop" if faster == "vmap" else "vmap"), **kw).weights
    assert other.tobytes() != forced.weights.tobytes()  # the two paths round differently …
    assert np.max(np.abs(other - forced.weights)) <= 1e-12 * np.max(np.abs(forced.weights))  # … and agree to it
    again = simulate(pb, **kw)  # the choice is kept: no new timing, the same numbers
    assert again.weights.tobytes() == auto.weights.tobytes() and len(batching._CHOICES) == 1


def test_simulate_json_says_how_it_batched_and_on_which_rows_it_measured(tmp_path, capsys, fresh_choices):
    path = _write(tmp_path)
    argv = ["simulate", "--problem", path, "--eta", "0.2", "--local-steps", "1", "--rounds", "1", "--replicates",
            "2", "--seed", "0", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batching"]["requested"] == "auto" and out["batching"]["used"] in ("vmap", "loop")
    assert {c["purpose"] for c in out["batching"]["timings"]} == {"train", "eval-shared"}
    sampling = out["metrics_sampling"]
    # 2 records of one step of 3 clients × 4 rows: below the floors, 3 groups of 11 draws
    assert sampling["train"] == {"exact": False, "samples": 33, "of": 60} and sampling["groups"] == 3
    assert "quarter of the run" in sampling["chosen_by"]
    assert "sample_se" in out["metrics"]["train_loss"]
    assert main([*argv, "--metric-samples", "all"]) == 0
    exact = json.loads(capsys.readouterr().out)["metrics_sampling"]
    assert exact["train"]["exact"] and exact["test"]["exact"] and exact["chosen_by"] == "--metric-samples all"
    assert main([*argv[:-1], "--metric-samples", "8"]) == 2
    assert "--metric-samples=8" in capsys.readouterr().err


def test_metric_budget_follows_its_rule(tmp_path):
    from fedsde.problems.module.metrics import metric_budget

    pb = load_problem(_write(tmp_path))  # 60 training rows, 20 test rows
    # exact while records·(N + M/2) = 2·70 <= a quarter of the training rows
    assert metric_budget(pb, train_rows=560, train_steps=100, records=2) == (None, None)
    # G = ⌊0.25·200/4⌋ = 12, m = ⌊0.25·480/6⌋ = 20 → at least 32, rounded up to a multiple of 12
    assert metric_budget(pb, train_rows=480, train_steps=200, records=4) == (36, 12)
    # 10·70 > 0.25·2400: G = 3 at least, m = ⌊0.25·2400/15⌋ = 40 → 39 (a multiple of 3)
    assert metric_budget(pb, train_rows=2400, train_steps=20, records=10) == (39, 3)
    assert metric_budget(pb, train_rows=400, train_steps=6, records=2) == (33, 3)  # the floors


def test_metric_samples_in_a_problem_file_is_checked_and_used(tmp_path):
    from fedsde.errors import FedsdeInputError

    pb = load_problem(_write(tmp_path, "metric_samples = 40\n"))
    got = evaluate_metrics(pb, pb.initial_weights()[None])
    assert got.sampling["train"] == {"exact": False, "samples": 32, "of": 60}  # 2 groups of 16 draws
    with pytest.raises(FedsdeInputError, match="metric_samples"):
        load_problem(_write(tmp_path, "metric_samples = 8\n"))


def test_gram_form_equals_the_grouped_norm_and_few_groups_stay_unbiased_and_cover():
    gen = torch.Generator().manual_seed(1)
    mu = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    truth = float(mu @ mu)
    for G, lo in ((3, 0.92), (4, 0.94), (16, 0.94)):
        draws = mu + torch.randn((4000, G, 3), generator=gen, dtype=torch.float64)  # 4000 replications
        got = gram_norm_sq(draws @ draws.transpose(1, 2))
        for a, b in zip(got, M.grouped_norm_sq(draws.transpose(0, 1)), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
        U, _, lower, upper = got
        assert abs(float(U.mean()) - truth) <= 5 * float(U.std()) / np.sqrt(4000), G
        # the interval covers with few groups too (0.934 at G = 3, 0.966 at 4, 0.946 at 16; ± 0.0035 from the
        # replications), at 3 groups a little short (Student tails of 2 degrees of freedom, widened as √2)
        cover = float(((lower <= truth) & (truth <= upper)).double().mean())
        assert lo <= cover <= 0.975, (G, cover)


class SoftmaxModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(64, 10))
        self.b = nn.Parameter(torch.zeros(1, 10))

    def forward(self, x):
        return x @ self.W + self.b


@pytest.mark.parametrize("groups", [3, 5])
def test_few_group_estimates_equal_the_builtin_softmax_and_both_metric_paths_agree(groups, fresh_choices):
    builtin = federated_classification("digits", n_clients=3, partition="dirichlet", seed=0, model="softmax",
                                       l2=1e-3).replace(batch_size=8)
    W = np.random.default_rng(1).standard_normal((4, builtin.d)) * 0.05
    ref = evaluate_metrics(builtin, W, metric_samples=60, metric_seed=2, metric_groups=groups)
    assert ref.sampling["groups"] == groups and ref.sampling["train"]["samples"] == groups * (60 // groups)
    for path in ("vmap", "loop"):
        mine = module_problem(SoftmaxModule(), builtin.X, builtin.y, builtin.client_ids, x_test=builtin.X_test,
                              y_test=builtin.y_test, l2=builtin.l2, batch_size=8, batching=path)
        got = evaluate_metrics(mine, W, metric_samples=60, metric_seed=2, metric_groups=groups)
        assert got.sampling == ref.sampling
        for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-11, err_msg=f"{path} {name}")
            np.testing.assert_allclose(got.se[name], ref.se[name], rtol=1e-9, err_msg=f"{path} {name}")


def test_blocks_grouped_per_call_keep_the_chunk_invariance(tmp_path, monkeypatch):
    """The GPU's launch groups, forced on the CPU: three blocks in calls of two (the last padded) give the numbers
    of any chunking bit for bit, and those of one block per call to rounding."""
    pb = load_problem(_write(tmp_path, 'batching = "vmap"\n'))
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 6, "seed": 9, "block_size": 2}
    single = simulate(pb, **kw).weights
    monkeypatch.setattr("fedsde.clients.module_oracle.launch_blocks", lambda *a: 2)  # (of 3 in the run)
    grouped = simulate(pb, **kw).weights
    assert simulate(pb, chunk_size=2, **kw).weights.tobytes() == grouped.tobytes()
    assert simulate(pb, chunk_size=4, **kw).weights.tobytes() == grouped.tobytes()
    assert np.max(np.abs(grouped - single)) <= 1e-12 * np.max(np.abs(single))


@pytest.mark.cuda
def test_cuda_groups_blocks_per_call_and_agrees_with_the_cpu(tmp_path):
    """On a GPU: several blocks per call (at most the run's), the auto choice reported, and the same law as the
    CPU (full batch: the same numbers to rounding)."""
    from fedsde.clients.module_oracle import launch_blocks

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pb = load_problem(_write(tmp_path, "model_options = { dropout = 0.0 }\n")).replace(batch_size=None)
    kw = {"eta": 0.2, "local_steps": 2, "rounds": 2, "replicates": 256, "seed": 0, "record": [2]}
    assert launch_blocks(pb, pb.Q, 128, "cuda", torch.float64) > 1
    gpu = simulate(pb, device="cuda", **kw)
    assert gpu.config["batching"]["used"] in ("vmap", "loop")
    cpu = simulate(pb, **kw)
    assert np.max(np.abs(gpu.weights - cpu.weights)) <= 1e-10 * np.max(np.abs(cpu.weights))
