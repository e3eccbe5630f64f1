"""Public functions still check raw input after the validity tests moved to their trusted cores; a rate given next
to a Schedule that holds another is refused rather than ignored."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.exact import least_squares_round_law, least_squares_sde, round_law
from fedsde.params import Schedule
from fedsde.problems import load_problem, paper_table_problem
from fedsde.sde.rules import rule_round_law, rule_sde
from fedsde.validity import exact_sde_law, exact_sde_paths


@pytest.fixture(scope="module")
def reg():
    return load_problem("examples/problems/my_data.toml")


@pytest.mark.parametrize("kind", ["least_squares", "quadratic"])
def test_exact_sde_paths_checks_its_grid_step_and_start(reg, kind):
    pb = reg if kind == "least_squares" else paper_table_problem()
    law = exact_sde_law(pb, Schedule(0.05, 2, 3))
    grid = np.arange(3)
    ok = exact_sde_paths(pb, law, grid, 0.05, np.zeros(pb.d), ["train_loss"])["train_loss"]
    # a list start and a scalar start are read as the checked start point is
    np.testing.assert_array_equal(exact_sde_paths(pb, law, [0, 1, 2], 0.05, [0.0] * pb.d, ["train_loss"])["train_loss"],
                                  ok)
    np.testing.assert_array_equal(exact_sde_paths(pb, law, grid, 0.05, 0.0, ["train_loss"])["train_loss"], ok)
    for rounds in ([-2, 0, 1], [0, 2, 1], [0, 0.5], [], [[0, 1]]):
        with pytest.raises(FedsdeInputError, match=r"rounds: .* must be a sorted, non-empty grid of integers >= 0"):
            exact_sde_paths(pb, law, rounds, 0.05, None, ["train_loss"])
    with pytest.raises(FedsdeInputError, match=rf"w0: shape \({pb.d + 1},\) must be \({pb.d},\)"):
        exact_sde_paths(pb, law, grid, 0.05, np.zeros(pb.d + 1), ["train_loss"])
    with pytest.raises(FedsdeInputError, match=r"w0: .* finite"):
        exact_sde_paths(pb, law, grid, 0.05, np.full(pb.d, np.nan), ["train_loss"])
    with pytest.raises(FedsdeInputError, match="h=-1"):
        exact_sde_paths(pb, law, grid, -1.0, None, ["train_loss"])


def test_a_rate_next_to_a_schedule_is_refused_unless_it_is_the_schedules_own(reg):
    s = Schedule(0.05, 2, 5, 0.5)
    for f, pb in ((least_squares_round_law, reg), (least_squares_sde, reg), (round_law, paper_table_problem())):
        with pytest.raises(FedsdeInputError, match="local_steps=: given with a Schedule"):
            f(pb, s, 5)
        with pytest.raises(FedsdeInputError, match="server_lr=: given with a Schedule"):
            f(pb, s, None, 7.0)
        a, b = f(pb, s), f(pb, s, 2, 0.5)  # its own rates handed on with it
        assert type(a) is type(b)
    with pytest.raises(FedsdeInputError, match="local_steps=, server_lr=: given with a Schedule"):
        rule_round_law(paper_table_problem(), "fedavgm", Schedule(0.1, 2, 5), 7, 3.0)


def test_the_sdes_of_a_schedule_check_an_h_given_and_keep_the_schedules_own(reg):
    with pytest.raises(FedsdeInputError, match=r"h=-1\.0"):
        least_squares_sde(reg, Schedule(0.05, 2, 3), h=-1.0)
    assert least_squares_sde(reg, Schedule(0.05, 2, 3, h=0.5)).h == 0.5
    pb = paper_table_problem()
    assert rule_sde(pb, "fedavgm", Schedule(0.1, 2, 5, 1.0, h=0.5), None).sde.h == 0.5
    assert rule_sde(pb, "fedavgm", 0.1, 2).sde.h == 0.1
    assert rule_sde(pb, "fedavgm", Schedule(0.1, 2, 5), None, h=0.2).sde.h == 0.2


def test_simulate_sde_takes_the_rollouts_next_to_an_integrator_as_it_did_before_they_joined_it():
    from fedsde.params import Integrator, Replication
    from fedsde.sde import simulate_sde

    pb = paper_table_problem()
    sched, rep = Schedule(0.05, 2, 3), Replication(4, 0)
    old = simulate_sde(pb, sched, rep, variant="general", integrator=Integrator(substeps=2), inner_samples=4)
    new = simulate_sde(pb, sched, rep, variant="general", integrator=Integrator(substeps=2, inner_samples=4))
    np.testing.assert_array_equal(old.weights, new.weights)
    with pytest.raises(FedsdeInputError, match="inner_samples=0"):
        simulate_sde(pb, sched, rep, variant="general", integrator=Integrator(substeps=2), inner_samples=0)
    with pytest.raises(FedsdeInputError, match="substeps= and integrator= both given"):
        simulate_sde(pb, sched, rep, variant="general", integrator=Integrator(), substeps=2)


def test_a_problem_copied_by_dataclasses_replace_does_not_share_its_caches():
    import dataclasses

    from fedsde.problems import federated_classification
    from fedsde.sde.svag import default_oracle_factory

    pb = federated_classification("digits", n_clients=3, seed=0, partition="iid").replace(batch_size=8)
    pb.optimum  # noqa: B018 — fills the cache
    default_oracle_factory(pb)  # reads the options
    other = dataclasses.replace(pb, batch_size=2, sampling="epoch", l2=0.5)
    oracle = default_oracle_factory(other)
    assert (other.minibatches.batch_size, other.minibatches.sampling) == (2, "epoch")
    assert oracle is not None and other._cache is not pb._cache
    assert not np.allclose(other.optimum, pb.optimum)  # the new ridge's optimum, not the cached one


def test_the_partitioned_core_refuses_a_dataset_it_does_not_know():
    from fedsde.problems.classification.datasets import partitioned_problem
    from fedsde.problems.classification.partition import Partition

    with pytest.raises(FedsdeInputError, match="dataset='digit': must be one of digits, breast_cancer"):
        partitioned_problem("digit", Partition(), 0, 0.25)
