"""The server rules' and the order-2 SDE's entry points take the run's values (fedsde.params): the old keyword call
and the value call give the same numbers (bitwise: the same call reruns bit-identically on the CPU,
docs/determinism.md), a value given both ways is refused, and the edge cases the keywords allowed (rounds = 0, a
torch.Generator seed, h=None for the default clock) behave as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsde._validate as validators
from fedsde.compare.order2_mc import coupled_order_study
from fedsde.compare.rule_svag_weak import rule_svag_weak_error
from fedsde.errors import FedsdeInputError
from fedsde.params import Equivalence, Integrator, Precision, Recording, Replication, Schedule
from fedsde.problems import QuadraticProblem
from fedsde.sde.order2_paths import coupled_paths, simulate_order2
from fedsde.sde.rule_svag import rule_svag_chain
from fedsde.validity.rule_general import rule_general_study
from fedsde.validity.rules import rule_validity_test


@pytest.fixture(scope="module")
def problem() -> QuadraticProblem:
    U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]]])
    Sigma = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]]])
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0]], Sigma, [0.5, 0.5])


def _same(a, b) -> None:
    """Bitwise equal, recursively (dicts, lists, arrays, numbers)."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    else:
        assert a == b


def _no_seconds(d: dict) -> dict:
    d["config"].pop("seconds", None)  # wall-clock time
    return d


W0 = np.array([1.0, -0.5])


# --- the old keyword call and the value call: the same numbers ------------------------------------------------------

def test_rule_svag_chain(problem):
    old = dict(eta=0.1, local_steps=[1, 2], rounds=3, server_lr=0.5, replicates=10, seed=3, block_size=4, workers=2)
    a = rule_svag_chain(problem, "fednova", ell=2, w0=W0, participation=1, record=[0, 3], **old)
    b = rule_svag_chain(problem, "fednova", Schedule(0.1, [1, 2], 3, 0.5), Replication(10, 3, block_size=4, workers=2),
                        Precision(), ell=2, w0=W0, participation=1, recording=Recording(record=[0, 3]))
    _same(a.weights, b.weights)
    _same(a.final, b.final)
    _same(a.config, b.config)


def test_rule_validity_test(problem):
    old = dict(eta=0.05, local_steps=2, rounds=3, server_lr=0.5, replicates=8, seed=4, h=0.1)
    a = rule_validity_test(problem, "fedavgm", ells=(1, 2, 4), reference="svag", tolerance=0.2, alpha=0.1,
                           accuracy_tolerance=0.02, record_every=2, final_cov="diag", metrics=["train_loss"], **old)
    b = rule_validity_test(problem, "fedavgm", Schedule(0.05, 2, 3, 0.5, 0.1), Replication(8, 4), ells=(1, 2, 4),
                           reference="svag", equivalence=Equivalence(0.2, 0.02, 0.1),
                           recording=Recording(record_every=2, final_cov="diag", metrics=["train_loss"]))
    _same(_no_seconds(a.to_dict()), _no_seconds(b.to_dict()))
    assert a.final_cov.shape == (3, 2)  # "diag": d variances per ℓ


def test_rule_validity_test_keeps_the_full_covariance_by_default(problem):
    res = rule_validity_test(problem, "fednova", Schedule(0.05, 1, 1), Replication(4, 0))
    assert res.final_cov.shape == (1, 2, 2)


def test_rule_general_study(problem):
    old = dict(eta=0.1, local_steps=1, rounds=2, replicates=4, seed=1, server_lr=0.5)
    a = rule_general_study(problem, "fedavgm", ells=(1, 2, 4), metrics=["train_loss"], record_every=2, **old)
    b = rule_general_study(problem, "fedavgm", Schedule(0.1, 1, 2, 0.5), Replication(4, 1), ells=(1, 2, 4),
                           recording=Recording(metrics=["train_loss"], record_every=2))
    _same([r.mean for r in a.rows], [r.mean for r in b.rows])
    _same([r.error for r in a.rows], [r.error for r in b.rows])
    da, db = a.config, b.config
    _same({k: v for k, v in da.items() if k != "threads"}, {k: v for k, v in db.items() if k != "threads"})


def test_rule_svag_weak_error(problem):
    old = dict(eta=0.1, local_steps=2, rounds=3, replicates=40, seed=2, server_lr=0.3)
    a = rule_svag_weak_error(problem, "fednova", ells=(1, 2), w0=W0, **old)
    b = rule_svag_weak_error(problem, "fednova", Schedule(0.1, 2, 3, 0.3), Replication(40, 2), ells=(1, 2), w0=W0)
    _same(a.errors, b.errors)
    _same(a.stderr, b.stderr)
    _same(a.config, b.config)


def test_client_sampling_as_a_value_or_its_keywords_gives_the_same_numbers(problem):
    from fedsde.params import ClientSampling

    old = dict(eta=0.1, local_steps=1, rounds=2, replicates=6, seed=1, server_lr=0.5)
    sched, rep, sampling = Schedule(0.1, 1, 2, 0.5), Replication(6, 1), ClientSampling(1, "renormalised")
    a = rule_general_study(problem, "fednova", ells=(1, 2, 4), metrics=["train_loss"], participation=1,
                           weighting="renormalised", **old)
    b = rule_general_study(problem, "fednova", sched, rep, ells=(1, 2, 4), sampling=sampling,
                           recording=Recording(metrics=["train_loss"]))
    _same([r.mean for r in a.rows], [r.mean for r in b.rows])
    assert a.config["participation"] == b.config["participation"] == 1
    c = rule_svag_weak_error(problem, "fednova", ells=(1, 2), w0=W0, participation=1, weighting="renormalised",
                             **old)
    d = rule_svag_weak_error(problem, "fednova", sched, rep, ells=(1, 2), w0=W0, sampling=sampling)
    _same(c.errors, d.errors)
    _same(c.config, d.config)
    assert c.config["weighting"] == "renormalised"
    with pytest.raises(FedsdeInputError, match="participation= and sampling= both given"):
        rule_svag_weak_error(problem, "fednova", sched, rep, sampling=sampling, participation=1)


def test_the_rules_sde_takes_a_schedule_for_its_rates_and_gives_the_same_numbers(problem):
    from fedsde.sde.rules import rule_round_law, rule_sde

    s = Schedule(0.1, [1, 2], 3, 0.5)
    _same(rule_round_law(problem, "fednova", s, None, None).B, rule_round_law(problem, "fednova", 0.1, [1, 2], 0.5).B)
    a = rule_sde(problem, "fedavgm", s, None, None, 0.2, participation=1)
    b = rule_sde(problem, "fedavgm", 0.1, [1, 2], 0.5, 0.2, participation=1)
    _same(a.sde.diffusion_cov, b.sde.diffusion_cov)
    _same(a.sde.A, b.sde.A)
    with pytest.raises(FedsdeInputError, match=r"^eta: a schedule; this needs one number"):
        rule_round_law(problem, "fednova", Schedule([0.1, 0.1], 1, 2), None, None)


def test_coupled_paths_and_simulate_order2(problem):
    old = dict(eta=0.05, local_steps=[1, 2], rounds=3, server_lr=0.5, replicates=6, seed=3)
    a = coupled_paths(problem, w0=W0, substeps=2, record=[0, 3], **old)
    b = coupled_paths(problem, Schedule(0.05, [1, 2], 3, 0.5), Replication(6, 3), w0=W0,
                      integrator=Integrator(substeps=2), recording=Recording(record=[0, 3]))
    _same(a, b)
    c = simulate_order2(problem, h=0.1, w0=W0, **old)
    d = simulate_order2(problem, Schedule(0.05, [1, 2], 3, 0.5, 0.1), Replication(6, 3), w0=W0)
    _same(c.weights, d.weights)
    _same(c.config, d.config)
    assert c.config["h"] == 0.1 and c.weights.shape == (4, 6, 2)


def test_coupled_order_study(problem):
    old = dict(eta=0.05, local_steps=1, rounds=2, replicates=4, seed=0)
    a = coupled_order_study(problem, levels=3, h_ratio=0.5, w0=W0, **old)
    b = coupled_order_study(problem, Schedule(0.05, 1, 2), Replication(4, 0), levels=3, h_ratio=0.5, w0=W0)
    _same(a, b)


# --- refused and kept -----------------------------------------------------------------------------------------------

BOTH = [
    (rule_svag_chain, dict(ell=1), "eta"), (rule_validity_test, {}, "seed"), (rule_general_study, {}, "rounds"),
    (rule_svag_weak_error, {}, "server_lr"), (coupled_paths, {}, "local_steps"), (simulate_order2, {}, "h"),
    (coupled_order_study, {}, "replicates"),
]


@pytest.mark.parametrize(("f", "kw", "field"), BOTH, ids=[b[0].__name__ for b in BOTH])
def test_a_value_and_its_field_together_are_refused(problem, f, kw, field):
    lead = (problem, "fednova") if f.__name__.startswith("rule") else (problem,)
    sched = Schedule(0.05, 1, 2)
    value = "replication" if field in ("seed", "replicates") else "schedule"
    with pytest.raises(FedsdeInputError, match=rf"^{f.__name__}: {field}= and {value}= both given"):
        f(*lead, sched, Replication(4, 0), **kw, **{field: 1})


def test_zero_rounds_as_before(problem):
    # the chains and paths run no round (and return the start); the tests and studies want one, in the same words
    a = rule_svag_chain(problem, "fednova", eta=0.1, local_steps=1, rounds=0, ell=2, replicates=4, seed=0, w0=W0,
                        record=[0])
    assert np.array_equal(a.final, np.tile(W0, (4, 1))) and a.config["rounds"] == 0
    b = coupled_paths(problem, eta=0.1, local_steps=1, rounds=0, replicates=4, seed=0, w0=W0)
    assert all(np.array_equal(v, np.tile(W0, (4, 1))) for v in b.values())
    assert simulate_order2(problem, eta=0.1, local_steps=1, rounds=0, replicates=4, seed=0).weights.shape == (1, 4, 2)
    for f in (rule_validity_test, rule_general_study):
        with pytest.raises(FedsdeInputError, match=r"^rounds=0: must be an integer >= 1$"):
            f(problem, "fednova", eta=0.1, local_steps=1, rounds=0, replicates=4, seed=0)
    with pytest.raises(FedsdeInputError, match=r"^rounds=0: must be an integer >= 1$"):
        coupled_order_study(problem, eta=0.1, local_steps=1, rounds=0, replicates=4, seed=0)
    with pytest.raises(FedsdeInputError, match=r"^replicates=1: must be an integer >= 2$"):
        coupled_paths(problem, eta=0.1, local_steps=1, rounds=1, replicates=1, seed=0)


def test_a_generator_seed_is_one_draw_as_before(problem):
    # the chain drew its seed from the generator once; the value draws it once where it is built: the same seed
    kw = dict(eta=0.1, local_steps=1, rounds=2, ell=2, replicates=4, record=[2])
    a = rule_svag_chain(problem, "fedavgm", seed=torch.Generator().manual_seed(5), **kw)
    b = rule_svag_chain(problem, "fedavgm", seed=validators.seed("seed", torch.Generator().manual_seed(5)), **kw)
    _same(a.weights, b.weights)
    assert a.config["seed"] == b.config["seed"]
    c = coupled_paths(problem, eta=0.1, local_steps=1, rounds=2, replicates=4, seed=torch.Generator().manual_seed(5))
    d = coupled_paths(problem, eta=0.1, local_steps=1, rounds=2, replicates=4, seed=b.config["seed"])
    _same(c, d)


def test_the_default_clock_as_before(problem):
    # h=None: η for linear and momentum rules and the order-2 SDE, s² for adaptive rules
    kw = dict(eta=0.1, local_steps=1, rounds=1, replicates=4, seed=0, server_lr=0.3, record=[1])
    assert rule_svag_chain(problem, "fedavgm", ell=1, **kw).h == 0.1
    assert rule_svag_chain(problem, "fedadam", ell=4, **kw).h == pytest.approx(0.09, rel=0, abs=1e-15)
    assert rule_svag_chain(problem, "fedadam", ell=1, h=0.5, **kw).h == 0.5
    assert simulate_order2(problem, **kw).h == 0.1
    with pytest.raises(FedsdeInputError, match="eta: a schedule; this needs one number"):
        rule_svag_chain(problem, "fedavgm", ell=1, **{**kw, "eta": [0.1]})


def test_the_blow_up_warning_names_the_callers_line_past_the_adapter(problem):
    # FedAvg with s = 3 grows without bound: warned at the caller's line, whether the chain ends or raises on NaN
    from fedsde.errors import DivergenceWarning, SimulationDivergedError

    kw = dict(eta=0.9, local_steps=1, ell=1, replicates=4, seed=0, server_lr=3.0)
    with pytest.warns(DivergenceWarning, match="blowing up") as caught:
        rule_svag_chain(problem, "fedavg", rounds=60, **kw)
    assert {w.filename for w in caught} == {__file__}
    with pytest.warns(DivergenceWarning, match="blowing up") as caught, pytest.raises(SimulationDivergedError):
        rule_svag_chain(problem, "fedavg", rounds=2000, **kw)
    assert {w.filename for w in caught} == {__file__}


def test_order2_coefficients_read_a_schedule(problem):
    # the order-2 variants took the Schedule itself as η (fedsde compare --order 2 failed); now its numbers
    from fedsde.sde.coefficients import quadratic_sde_coefficients

    a = quadratic_sde_coefficients(problem, Schedule(0.05, [1, 2], 3, 0.5, 0.1), variant="order2")
    b = quadratic_sde_coefficients(problem, 0.05, [1, 2], 0.5, 0.1, variant="order2")
    assert a.h == b.h == 0.1
    _same(a.A, b.A)
    _same(a.diffusion_cov, b.diffusion_cov)
    _same(a.c, b.c)
    assert a.variant == b.variant == "order2"
