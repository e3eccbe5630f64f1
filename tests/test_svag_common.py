"""Common random numbers between SVAG chains (fedsde.sde.svag_streams): which draws are shared, each chain's law
unchanged, and the paired difference of the validity test varies less."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from fedsde.cli import main
from fedsde.clients.streams import ReplicateStreams
from fedsde.problems import QuadraticProblem, module_problem, save_problem
from fedsde.sde.svag import default_oracle_factory, svag_chain, svag_transient_moments
from fedsde.sde.svag_streams import chain_streams, common_purpose
from fedsde.validity import validity_test
from fedsde.validity.verdict import richardson_weights
from tests.helpers import assert_moments_within

W0 = [3.0, 3.0]


@pytest.fixture(scope="module")
def problem() -> QuadraticProblem:
    """Three clients in d = 2 with full curvatures and noise covariances (as tests/test_validity.py)."""
    U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]], [[0.5, 0.2], [0.2, 2.0]]])
    Sigma = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]], [[2.0, -0.4], [-0.4, 1.0]]])
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0], [-2.0, 0.5]], Sigma, [0.5, 0.3, 0.2])


def _draw(streams, shape=(3, 5)) -> torch.Tensor:
    return streams.uniform_(torch.empty((streams.nblocks, *shape), dtype=torch.float64))


def test_steps_that_begin_together_share_their_draws_and_no_others():
    dev = torch.device("cpu")
    s2, s4, s8 = (chain_streams(7, 0, 3, dev, 4, ell, 99, True) for ell in (2, 4, 8))
    a4, a8 = _draw(s4[1]), _draw(s8[2])  # t = 1/4 of the round: step 1 of ℓ = 4, step 2 of ℓ = 8
    torch.testing.assert_close(a4, a8, rtol=0, atol=0)
    torch.testing.assert_close(_draw(s2[1]), _draw(s8[4]), rtol=0, atol=0)  # t = 1/2
    # rollouts: block b's at rows 2b, 2b + 1, from different streams
    assert not torch.equal(a4[0], a4[1])
    # within a chain every step (and rollout) draws its own numbers
    draws = torch.stack([_draw(s) for s in chain_streams(7, 0, 3, dev, 4, 8, 99, True)])
    flat = draws.reshape(-1, 15)
    assert torch.unique(flat, dim=0).shape[0] == flat.shape[0]
    # step 0's rollout 0 draws FedAvg's numbers: the simulator's stream (purpose 0)
    fed = _draw(ReplicateStreams(7, 0, 3, dev, 0, 4))
    torch.testing.assert_close(_draw(s8[0]).view(3, 2, 3, 5)[:, 0], fed, rtol=0, atol=0)
    assert common_purpose(2, 8, 1) == common_purpose(1, 4, 1) != common_purpose(1, 4, 0)


def test_chunks_draw_the_blocks_of_the_whole_run():
    dev = torch.device("cpu")
    whole = _draw(chain_streams(3, 0, 4, dev, 2, 4, 0, True)[3])
    part = _draw(chain_streams(3, 2, 2, dev, 2, 4, 0, True)[3])  # blocks 2, 3 of the same run
    torch.testing.assert_close(part, whole[4:], rtol=0, atol=0)


def test_fedavg_and_independent_chains_keep_their_numbers(problem):
    kw = dict(eta=0.1, local_steps=np.array([2, 3, 1]), rounds=3, replicates=20, seed=11, server_lr=0.7, w0=W0)
    np.testing.assert_array_equal(svag_chain(problem, **kw, ell=1, common=True).final,
                                  svag_chain(problem, **kw, ell=1).final)
    assert not np.array_equal(svag_chain(problem, **kw, ell=4, common=True).final,
                              svag_chain(problem, **kw, ell=4).final)


@pytest.mark.parametrize("ell", [2, 8])
def test_each_chain_keeps_its_exact_law(problem, ell):
    """Sharing between chains must not change a chain's law: mean and covariance of the final weights against the
    exact SVAG moments (5 s.e.), as tests/test_validity.py checks the independent chains."""
    rounds = 4
    res = svag_chain(problem, eta=0.1, local_steps=3, rounds=rounds, ell=ell, replicates=3000, seed=5,
                     server_lr=0.8, w0=W0, common=True)
    law = svag_transient_moments(problem, 0.1, 3, rounds, 0.8, ell, w0=W0, record=[rounds])
    assert_moments_within(res.final, law.final_mean, law.final_cov)


def test_chains_are_correlated_as_the_first_order_noise_predicts(problem):
    """Chains ℓ = 4 and 8 share both rollouts of every step of ℓ = 4: per round their noises correlate by
    (c₁c₁' + c₂c₂')/8 = 0.70 (fedsde.sde.svag_streams); independent chains by 0 (here 5/√R = 0.25)."""
    kw = dict(eta=0.1, local_steps=3, rounds=4, replicates=400, seed=5, server_lr=0.8, w0=W0)
    for common, lo, hi in ((True, 0.5, 0.9), (False, -0.25, 0.25)):
        a = svag_chain(problem, **kw, ell=4, common=common).final
        b = svag_chain(problem, **kw, ell=8, common=common).final
        corr = [np.corrcoef(a[:, i], b[:, i])[0, 1] for i in range(2)]
        assert lo < min(corr) and max(corr) < hi, (common, corr)


def test_paired_difference_varies_less(problem):
    """The verdict's paired difference FedAvg − (2E₈ − E₄) of the train loss: about half the variance with common
    random numbers (first-order prediction 2.9/6, measured 0.5 at R = 400).  With R = 300 the ratio of two sample
    variances has a 5σ-wide band of about ×/÷ 1.8, so the bound 0.75 holds for the expected 0.5 and fails for 1."""
    kw = dict(eta=0.1, local_steps=3, server_lr=0.8, rounds=4, replicates=300, seed=5, w0=W0, reference="svag",
              fedavg="sampled", verdict_metrics=["train_loss"], metrics=["train_loss"], ells=[1, 4, 8])
    var = {}
    for common in (False, True):
        res = validity_test(problem, **kw, common_random=common)
        assert res.config["common_random"] is common
        v = res.values["train_loss"]
        wa, wb = richardson_weights(res.ells)
        var[common] = (v[0] - (wa * v[-2] + wb * v[-1]))[1:].var(-1, ddof=1).sum()
    assert var[True] / var[False] < 0.75


def test_module_chain_means_agree_with_and_without_sharing():
    """On a module with dropout (minibatches and masks shared): the chain's mean final weights with and without
    common random numbers agree within 5 s.e. of their difference (two independent samples), and the draws do
    differ (not the same numbers)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4))
    y = (x[:, 0] - x[:, 1] > 0).astype(np.int64)
    client = np.repeat(["a", "b", "c"], 20)
    problem = module_problem(lambda: nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Dropout(0.3), nn.Linear(6, 2)),
                             x, y, client, batch_size=4, l2=1e-3, init_seed=0)
    kw = dict(eta=0.3, local_steps=2, rounds=3, replicates=64, seed=2, ell=4,
              oracle_factory=default_oracle_factory(problem), w0=problem.initial_weights())
    a = svag_chain(problem, **kw, common=False).final
    b = svag_chain(problem, **kw, common=True).final
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    z = np.abs(a.mean(0) - b.mean(0)) / se
    assert np.all(z < 5.0), z.max()
    assert not np.array_equal(a, b)


def test_cli_shares_by_default_and_independent_chains_on_request(problem, tmp_path, capsys):
    path = tmp_path / "q.toml"
    save_problem(problem, path)
    argv = ["validity", "--problem", str(path), "--eta", "0.05", "--local-steps", "2", "--rounds", "2", "--ells",
            "1,2,4", "--replicates", "8", "--seed", "1", "--w0", "3,3", "--reference", "svag", "--fedavg", "sampled",
            "--json"]
    got = {}
    for extra in ([], ["--independent-chains"]):
        assert main([*argv, *extra]) == 0
        obj = json.loads(capsys.readouterr().out)
        got[bool(extra)] = obj
        assert obj["config"]["common_random"] is not bool(extra)
    # FedAvg (ℓ = 1) has the same numbers either way; the SVAG chains do not
    a, b = (np.asarray(got[k]["metrics"]["train_loss"]["mean"]) for k in (False, True))
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[1:, 1:], b[1:, 1:])


def test_the_common_start_is_evaluated_once(problem, monkeypatch):
    """Round 0 is w₀ for every replicate of every chain: its metrics are one evaluation, copied to all, and equal the
    metrics of w₀; every later grid time evaluates every replicate."""
    import fedsde.validity.metric_grid as grid

    rows = []
    real = grid.evaluate_metrics

    def counting(pb, w, w0, names):
        rows.append(w.shape[0])
        return real(pb, w, w0, names)

    monkeypatch.setattr(grid, "evaluate_metrics", counting)
    R, rounds, ells = 6, 3, [1, 2, 4]
    res = validity_test(problem, eta=0.05, local_steps=2, rounds=rounds, replicates=R, seed=1, w0=W0, ells=ells,
                        reference="svag", fedavg="sampled")
    assert sum(rows) == 1 + len(ells) * rounds * R
    start = real(problem, torch.tensor([W0], dtype=torch.float64), np.asarray(W0), list(res.values))
    for m, v in res.values.items():
        np.testing.assert_array_equal(v[:, 0], np.full((len(ells), R), float(start[m][0])))
