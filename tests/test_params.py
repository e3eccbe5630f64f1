"""Run parameters as frozen values (fedsde.params): checked once where built, passed whole; the old keyword calls of
every function that takes them give the same result; a value given twice, a field a function does not read, and a
bad value are refused in one line; one `fedsde validity` run checks each value once."""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import sys

import numpy as np
import pytest
import torch

import fedsde._validate as validators
from fedsde import exact
from fedsde.aggregators import get_aggregator
from fedsde.cli import main
from fedsde.clients.local import RoundBatches, run_local_steps
from fedsde.compare.order2_mc import coupled_order_study
from fedsde.compare.rule_svag_weak import rule_svag_weak_error
from fedsde.compare.study import quadratic_sde_study
from fedsde.compare.weak_error import weak_error_mc_vs_step
from fedsde.errors import FedsdeInputError
from fedsde.exact import least_squares_transient_moments
from fedsde.maps import run_map
from fedsde.params import (
    ChainHooks,
    ClientSampling,
    Equivalence,
    EtaRefinement,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    SDEReference,
    StepRefinement,
    derive,
    takes_values,
)
from fedsde.problems import QuadraticProblem, save_problem
from fedsde.problems.classification.datasets import federated_classification
from fedsde.problems.classification.options import Classifier, Minibatches
from fedsde.problems.classification.partition import Partition
from fedsde.problems.evaluation import Evaluation
from fedsde.problems.module.options import ModuleBatches, ModuleTraining
from fedsde.problems.module.population import module_population_problem
from fedsde.problems.module.problem import module_problem
from fedsde.sde import simulate_sde
from fedsde.sde.adaptive import adaptive_sde_paths
from fedsde.sde.order2_paths import coupled_paths, simulate_order2
from fedsde.sde.rule_svag import rule_svag_chain
from fedsde.sde.svag import simulate_svag, svag_chain
from fedsde.sim import simulate
from fedsde.sim.plan import make_plan
from fedsde.sweep import SweepExecution
from fedsde.sweep import run as sweep_run
from fedsde.theory.empirical import simulated_path
from fedsde.theory.fedaware import FedAwareConstants, FedAwareSettings, thm_4_1
from fedsde.validity import validity_test
from fedsde.validity.adaptive import adaptive_svag_chain, adaptive_weak_error
from fedsde.validity.general import general_sde_study
from fedsde.validity.rule_general import rule_general_study
from fedsde.validity.rules import rule_validity_test


@pytest.fixture(scope="module")
def problem() -> QuadraticProblem:
    U = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]]])
    Sigma = np.array([[[1.0, 0.3], [0.3, 0.5]], [[0.5, 0.0], [0.0, 2.0]]])
    return QuadraticProblem.from_arrays(U, [[1.0, -1.0], [0.0, 2.0]], Sigma, [0.5, 0.5])


# --- the values --------------------------------------------------------------------------------------------------

BAD = [
    (Schedule, dict(eta=-0.1, local_steps=2, rounds=3), "eta=-0.1"),
    (Schedule, dict(eta=[0.1, float("nan")], local_steps=2, rounds=2), "eta[1]=nan"),
    (Schedule, dict(eta=0.1, local_steps=0, rounds=3), "local_steps=0"),
    (Schedule, dict(eta=0.1, local_steps=[2, 0], rounds=3), "local_steps[1]=0"),
    (Schedule, dict(eta=0.1, local_steps=2, rounds=-1), "rounds=-1"),
    (Schedule, dict(eta=0.1, local_steps=2, rounds=3, server_lr=float("inf")), "server_lr=inf"),
    (Schedule, dict(eta=0.1, local_steps=2, rounds=3, h=0.0), "h=0.0"),
    (Replication, dict(replicates=0, seed=0), "replicates=0"),
    (Replication, dict(replicates=4, seed=-1), "seed=-1"),
    (Replication, dict(replicates=4, seed=0, chunk_size=0), "chunk_size=0"),
    (Replication, dict(replicates=4, seed=0, workers=1.5), "workers=1.5"),
    (Replication, dict(replicates=4, seed=0, memory_limit="lots"), "memory_limit='lots'"),
    (Precision, dict(dtype=torch.int32), "dtype=torch.int32"),
    (Precision, dict(device="abacus"), "device='abacus'"),
    (Recording, dict(record_every=0), "record_every=0"),
    (Recording, dict(final_cov="half"), "final_cov='half'"),
    (Integrator, dict(method="rk4"), "method='rk4'"),
    (Integrator, dict(substeps=0), "substeps=0"),
    (Integrator, dict(inner_samples=0), "inner_samples=0"),
    (Integrator, dict(estimator="biased"), "estimator='biased'"),
    (StepRefinement, dict(eta=0.1, local_steps=2, t_end=0.0, time_steps=[0.1, 0.05]), "t_end=0.0"),
    (StepRefinement, dict(eta=0.1, local_steps=2, t_end=0.2, time_steps=[0.1, 0.0]), "time_steps[1]=0.0"),
    (StepRefinement, dict(eta=0.1, local_steps=2, t_end=0.2, time_steps=[0.1, 0.05], server_rate=-1),
     "server_rate=-1"),
    (EtaRefinement, dict(order=3), "order=3"),
    (EtaRefinement, dict(order=2, etas=[0.1, -0.05, 0.025]), "etas[1]=-0.05"),
    (SweepExecution, dict(workers=0), "--workers=0"),
    (SweepExecution, dict(max_cells=0), "--max-cells=0"),
    (Equivalence, dict(tolerance=0.0), "tolerance=0.0"),
    (Equivalence, dict(alpha=1.5), "alpha=1.5"),
    (ClientSampling, dict(participation=0), "participation=0"),
    (ClientSampling, dict(participation=2, weighting="uniform"), "weighting='uniform'"),
    (SDEReference, dict(reference="law"), "reference='law'"),
    (SDEReference, dict(ells=[1, 0]), "ells=0"),
    (SDEReference, dict(ells=[]), "ells=[]"),
    (SDEReference, dict(ells=4), "ells=4"),
    (SDEReference, dict(order=3), "order=3"),
    (ChainHooks, dict(on_grid=3), "on_grid=3"),
    (ChainHooks, dict(bar="bar"), "bar='bar'"),
]
BAD += [  # the problems' options (fedsde.problems)
    (Classifier, dict(model="svm"), "model='svm'"),
    (Classifier, dict(model="mlp", hidden=0), "hidden=0"),
    (Classifier, dict(l2=-1.0), "l2=-1.0"),
    (Minibatches, dict(sampling="shuffle"), "sampling='shuffle'"),
    (Evaluation, dict(metric_samples=8), "metric_samples=8"),
    (Evaluation, dict(batching="jit"), "batching='jit'"),
    (ModuleTraining, dict(loss="hinge"), "loss='hinge'"),
    (ModuleBatches, dict(batch_size="all"), "batch_size='all'"),
    (Partition, dict(alpha=0.0), "alpha=0.0"),
    (Partition, dict(partition="pathological"), "partition='pathological'"),
]


@pytest.mark.parametrize(("cls", "kwargs", "named"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_value_is_refused_in_one_line_naming_it(cls, kwargs, named):
    with pytest.raises(FedsdeInputError) as err:
        cls(**kwargs)
    text = str(err.value)
    assert text.startswith(named) and "\n" not in text and ("must" in text or ": not" in text)


def test_values_are_frozen_checked_and_normalised():
    s = Schedule(np.float32(0.5), np.int64(3), 4, server_lr=[1.0, 1.0, 0.5, 0.5])
    assert s.validated and type(s.eta) is float and s.local_steps == 3 and s.time_step == 0.5
    assert not s.server_lr.flags.writeable and s.per_round("server_lr").tolist() == [1.0, 1.0, 0.5, 0.5]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.eta = 1.0
    assert Schedule(0.1, [1, 2], 3).steps_for(2).tolist() == [1, 2]
    with pytest.raises(FedsdeInputError, match=r"local_steps: shape \(2,\) must be a scalar or one value per client"):
        Schedule(0.1, [1, 2], 3).steps_for(3)
    with pytest.raises(FedsdeInputError, match="h: required when eta is a schedule"):
        _ = Schedule([0.1, 0.2], 1, 2).time_step
    p = Precision("float32")
    assert p.dtype is torch.float32 and p.device == torch.device("cpu")
    assert Replication(4, 0, memory_limit="1K").memory_limit == 1024
    with pytest.raises(FedsdeInputError, match="seed: required"):
        Replication(4).need_seed()


def test_a_generator_seed_is_drawn_once_where_the_value_is_built():
    gen, again = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    rep = Replication(4, gen)
    assert isinstance(rep.seed, int) and rep.seed == validators.seed("seed", again)
    assert rep.seed == rep.need_seed()  # the value holds the int: the same seed every time it is used


def test_derive_copies_without_checking_again(monkeypatch):
    s = Schedule(0.1, 2, 3)
    calls = []
    monkeypatch.setattr(validators, "positive_float", lambda *a, **k: calls.append(a))
    t = derive(s, rounds=1)
    assert (t.rounds, t.eta, t.validated, calls) == (1, 0.1, True, [])
    assert s.with_server_lr(0.25).server_lr == 0.25 and s.server_lr == 1.0
    with pytest.raises(TypeError, match="no field"):
        derive(s, gamma=1)


# --- the adapter ---------------------------------------------------------------------------------------------------

#: every public function that takes the values, with a call that needs nothing but the problem
TAKERS = {
    "simulate": simulate, "make_plan": make_plan, "simulate_sde": simulate_sde, "svag_chain": svag_chain,
    "simulate_svag": simulate_svag, "validity_test": validity_test, "general_sde_study": general_sde_study,
    "quadratic_sde_study": quadratic_sde_study, "rule_validity_test": rule_validity_test,
    "adaptive_weak_error": adaptive_weak_error, "adaptive_svag_chain": adaptive_svag_chain,
    "adaptive_sde_paths": adaptive_sde_paths, "simulated_path": simulated_path,
    "least_squares_transient_moments": least_squares_transient_moments,
    "rule_svag_chain": rule_svag_chain, "rule_general_study": rule_general_study,
    "rule_svag_weak_error": rule_svag_weak_error, "coupled_paths": coupled_paths, "simulate_order2": simulate_order2,
    "coupled_order_study": coupled_order_study, "thm_4_1": thm_4_1,
    "run_local_steps": run_local_steps,
    "weak_error_mc_vs_step": weak_error_mc_vs_step, "run_map": run_map, "run": sweep_run,
}


def _is_taker(obj) -> bool:
    return callable(obj) and hasattr(obj, "values_fields")


def test_every_function_that_takes_values_is_covered_here():
    found = {name for mod in list(sys.modules.values()) if getattr(mod, "__name__", "").startswith("fedsde")
             for name, obj in vars(mod).items() if _is_taker(obj) and not name.startswith("_")}
    assert found == set(TAKERS)


#: a checked value of each class, and one of its fields with a value
SAMPLES = {"schedule": (Schedule(0.1, 2, 3), "eta", 0.1), "replication": (Replication(4, 0), "replicates", 4),
           "precision": (Precision(), "device", "cpu"), "recording": (Recording(), "record_every", 1),
           "integrator": (Integrator(), "substeps", 1), "equivalence": (Equivalence(), "tolerance", 0.1),
           "settings": (FedAwareSettings(eta=1.0, eta_l=0.1, K=2, alpha=0.5, p=1.0), "eta", 1.0),
           "constants": (FedAwareConstants(L=1.0, sigma_l2=0.0, sigma_g2=1.0), "L", 1.0),
           "round_batches": (RoundBatches(), "max_batch", 4)}
SAMPLES["refinement"] = (StepRefinement(0.1, 2, t_end=0.2, time_steps=[0.1, 0.05]), "t_end", 0.2)
SAMPLES["eta_refinement"] = (EtaRefinement(order=1), "order", 1)
SAMPLES["execution"] = (SweepExecution(), "workers", 1)
SAMPLES |= {"sampling": (ClientSampling(), "participation", 1), "sde": (SDEReference(), "reference", "svag"),
            "hooks": (ChainHooks(), "what", "a chain")}
# the problems' constructors and their options (classmethods, which the scan above does not see, are covered in
# tests/test_problem_options.py)
TAKERS.update({"federated_classification": federated_classification, "module_problem": module_problem,
               "module_population_problem": module_population_problem})
SAMPLES.update({"classifier": (Classifier(), "l2", 0.1), "minibatches": (Minibatches(), "batch_size", 4),
                "evaluation": (Evaluation(), "metric_samples", 64), "partitioning": (Partition(), "alpha", 0.3),
                "training": (ModuleTraining(), "l2", 0.1), "batches": (ModuleBatches(), "batch_size", 4)})
# the exact least-squares laws take the client sampling whole (``clients``), or its fields
TAKERS.update({"least_squares_round_law": exact.least_squares_round_law, "least_squares_sde": exact.least_squares_sde,
               "least_squares_stationary_law": exact.least_squares_stationary_law})
SAMPLES["clients"] = (ClientSampling(), "participation", 1)


@pytest.mark.parametrize("name", sorted(TAKERS))
def test_a_value_given_both_ways_is_refused(name, problem):
    f = TAKERS[name]
    lead = {"rule": (problem, "fedavgm"), "adaptive": (problem, "fedadam"), "simulated_path": (problem, None)}
    args = next((v for k, v in lead.items() if k in name), (problem,))
    every = {value: SAMPLES[value][0] for value in f.values_fields}
    for value, fields in f.values_fields.items():
        _, field, x = SAMPLES[value]
        field = field if field in fields else fields[0]
        with pytest.raises(FedsdeInputError, match=rf"{field}= and {value}= both given"):
            f(*args, **every, **{field: x})


@pytest.mark.parametrize("name", sorted(TAKERS))
def test_the_signature_lists_the_old_keywords_with_their_defaults(name):
    f = TAKERS[name]
    params = inspect.signature(f).parameters
    for value, fields in f.values_fields.items():
        assert value in params
        for field in fields:
            assert params[field].kind is inspect.Parameter.KEYWORD_ONLY
            default = {x.name: x.default for x in dataclasses.fields(f.value_types[value])}[field]
            assert params[field].default == (None if default is dataclasses.MISSING else default)


def test_a_field_the_function_does_not_read_and_a_wrong_class_are_refused(problem):
    with pytest.raises(FedsdeInputError, match=r"schedule.h=0.5: not used by simulate"):
        simulate(problem, Schedule(0.1, 2, 3, h=0.5), Replication(4, 0))
    with pytest.raises(FedsdeInputError, match=r"replication.chunk_size=8: not used by validity_test"):
        validity_test(problem, Schedule(0.1, 2, 3), Replication(4, 0, chunk_size=8))
    with pytest.raises(FedsdeInputError, match=r"schedule=Replication\(.*must be a fedsde.params.Schedule"):
        simulate(problem, Replication(4, 0), Replication(4, 0))
    with pytest.raises(TypeError, match=r"missing argument 'schedule' \(or the keywords eta=, local_steps="):
        simulate(problem, replicates=4, seed=0)
    with pytest.raises(TypeError, match=r"missing keyword argument\(s\): 'rounds' \(or schedule=\)"):
        simulate(problem, eta=0.1, local_steps=2, replicates=4, seed=0)
    with pytest.raises(FedsdeInputError, match="seed: required"):
        simulate(problem, eta=0.1, local_steps=2, rounds=2, replicates=4)


def test_a_value_class_beyond_the_registry_is_taken_by_its_own_name():
    @dataclasses.dataclass(frozen=True)
    class Window:
        start: int = 0
        stop: int = 1

        def __post_init__(self):
            if self.stop <= self.start:
                raise FedsdeInputError(f"stop={self.stop}: must be > start={self.start}")

    @takes_values(types={"window": Window}, window=("start", "stop"))
    def span(x, window: Window | None = None):
        window = window or Window()
        return x * (window.stop - window.start)

    assert span(2, start=1, stop=4) == span(2, Window(1, 4)) == 6 and span(2) == 2
    assert span.value_types == {"window": Window}
    with pytest.raises(FedsdeInputError, match="stop=1: must be > start=3"):
        span(2, start=3)
    with pytest.raises(FedsdeInputError, match=r"window=3: must be a .*Window"):
        span(2, window=3)
    with pytest.raises(TypeError, match="no value parameter 'frame'"):
        takes_values(types={"frame": Window}, frame=("start",))(span.__wrapped__)


def test_the_adapter_refuses_what_it_cannot_fold():
    with pytest.raises(TypeError, match="no value parameter 'schedule'"):
        takes_values(schedule=("eta",))(lambda problem, eta: None)
    with pytest.raises(TypeError, match="not free fields"):
        takes_values(schedule=("eta", "gamma"))(lambda problem, schedule: None)
    with pytest.raises(TypeError, match="not free fields"):
        takes_values(schedule=("eta",))(lambda problem, schedule, eta=1: None)


def test_errors_of_old_keywords_name_them_as_before(problem):
    with pytest.raises(FedsdeInputError, match=r"^eta=-1: must be finite and > 0$"):
        simulate(problem, eta=-1, local_steps=2, rounds=2, replicates=4, seed=0)
    with pytest.raises(FedsdeInputError, match=r"^paths=0: must be an integer >= 1$"):
        with pytest.warns(DeprecationWarning):
            simulate_sde(problem, eta=0.1, local_steps=2, rounds=2, paths=0, seed=0)
    with pytest.raises(FedsdeInputError, match=r"^replicates=1: must be an integer >= 2$"):
        validity_test(problem, eta=0.1, local_steps=2, rounds=2, replicates=1, seed=0, fedavg="sampled")


# --- old keyword calls and value calls: the same numbers ------------------------------------------------------------

def _same(a, b) -> None:
    """Bitwise equal (docs/determinism.md: the same call reruns bit-identically on the CPU)."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple) and not np.isscalar(a):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    else:
        assert a == b


def test_simulate_and_make_plan_old_keywords_give_the_same_run(problem):
    old = dict(eta=0.05, local_steps=[1, 3], rounds=4, server_lr=0.5, replicates=12, seed=3, block_size=4,
               chunk_size=4, workers=2, record=[0, 2, 4], device="cpu", dtype=torch.float64)
    a = simulate(problem, participation=1, **old)
    b = simulate(problem, Schedule(0.05, [1, 3], 4, 0.5), Replication(12, 3, chunk_size=4, block_size=4, workers=2),
                 Precision(), participation=1, recording=Recording(record=[0, 2, 4]))
    _same(a.weights, b.weights)
    _same(a.config, b.config)
    pa = make_plan(problem, **{k: v for k, v in old.items()})
    pb = make_plan(problem, Schedule(0.05, [1, 3], 4, 0.5), Replication(12, 3, chunk_size=4, block_size=4, workers=2),
                   recording=Recording(record=[0, 2, 4]))
    for f in ("etas", "server_lrs", "steps", "record", "block_size", "chunk_size", "workers", "seed", "replicates"):
        _same(getattr(pa, f), getattr(pb, f))
    m = simulate(problem, eta=0.05, local_steps=2, rounds=3, replicates=8, seed=1, moments_only=True)
    n = simulate(problem, Schedule(0.05, 2, 3), Replication(8, 1), recording=Recording(moments_only=True))
    _same(m.mean(), n.mean())


def test_sde_and_svag_old_keywords_give_the_same_paths(problem):
    a = simulate_sde(problem, eta=0.1, local_steps=2, rounds=3, replicates=8, seed=2, substeps=2, record=[3])
    b = simulate_sde(problem, Schedule(0.1, 2, 3), Replication(8, 2), integrator=Integrator(substeps=2),
                     recording=Recording(record=[3]))
    _same(a.weights, b.weights)
    _same(a.config, b.config)
    c = svag_chain(problem, eta=0.1, local_steps=2, rounds=3, ell=2, replicates=8, seed=2, record=[1, 3])
    d = svag_chain(problem, Schedule(0.1, 2, 3), Replication(8, 2), ell=2, recording=Recording(record=[1, 3]))
    _same(c.weights, d.weights)
    _same(c.config, d.config)
    e = simulate_svag(problem, eta=0.1, local_steps=2, rounds=2, ell=2, replicates=8, seed=2)
    f = simulate_svag(problem, Schedule(0.1, 2, 2), Replication(8, 2), ell=2)
    _same(e.weights, f.weights)


@pytest.mark.parametrize("fedavg", ["sampled", "exact"])
def test_validity_test_old_keywords_give_the_same_result(problem, fedavg):
    rep = dict(replicates=8, seed=4) if fedavg == "sampled" else {}
    a = validity_test(problem, eta=0.05, local_steps=2, rounds=3, server_lr=0.5, h=0.1, tolerance=0.2, alpha=0.1,
                      record_every=2, fedavg=fedavg, **rep)
    b = validity_test(problem, Schedule(0.05, 2, 3, 0.5, 0.1), Replication(8, 4) if rep else None,
                      equivalence=Equivalence(tolerance=0.2, alpha=0.1), recording=Recording(record_every=2),
                      fedavg=fedavg)
    da, db = a.to_dict(), b.to_dict()
    da["config"].pop("seconds"), db["config"].pop("seconds")
    _same(da, db)


def test_studies_old_keywords_give_the_same_result(problem):
    a = quadratic_sde_study(problem, eta=0.1, local_steps=2, rounds=4, record_every=2, h_grid=[0.1, 0.05])
    b = quadratic_sde_study(problem, Schedule(0.1, 2, 4), recording=Recording(record_every=2), h_grid=[0.1, 0.05])
    _same(a.chain.mean, b.chain.mean)
    _same(a.sde.cov, b.sde.cov)
    _same(a.config, b.config)
    old = dict(eta=0.1, local_steps=1, rounds=1, replicates=4, seed=1)
    g = general_sde_study(problem, ells=(1, 2, 4), mc_substeps=(), metrics=["train_loss"], **old)
    h = general_sde_study(problem, Schedule(0.1, 1, 1), Replication(4, 1), ells=(1, 2, 4), mc_substeps=(),
                          recording=Recording(metrics=["train_loss"]))
    _same([r.mean for r in g.rows], [r.mean for r in h.rows])


def test_adaptive_rules_old_keywords_give_the_same_result(problem):
    old = dict(eta=0.05, local_steps=1, rounds=2, replicates=6, seed=0, server_lr=0.1)
    sched, rep, adam = Schedule(0.05, 1, 2, 0.1), Replication(6, 0), get_aggregator("fedadam")
    _same(adaptive_svag_chain(problem, adam, k=2, **old), adaptive_svag_chain(problem, adam, sched, rep, k=2))
    _same(adaptive_sde_paths(problem, "fedadam", substeps=2, **old)["weights"],
          adaptive_sde_paths(problem, "fedadam", sched, rep, integrator=Integrator(substeps=2))["weights"])
    a = adaptive_weak_error(problem, "fedadam", ks=(1, 2), substeps=1, **old)
    b = adaptive_weak_error(problem, "fedadam", sched, rep, ks=(1, 2), integrator=Integrator(substeps=1))
    _same(a.errors, b.errors)
    r = rule_validity_test(problem, "fednova", record_every=2, tolerance=0.3, **old)
    s = rule_validity_test(problem, "fednova", sched, rep, recording=Recording(record_every=2),
                           equivalence=Equivalence(tolerance=0.3))
    dr, ds = r.to_dict(), s.to_dict()
    dr["config"].pop("seconds"), ds["config"].pop("seconds")  # wall-clock time per chain
    _same(dr, ds)


# --- validated once per command ------------------------------------------------------------------------------------

#: the values' fields a `fedsde validity` run checks, each exactly once
CHECKED_ONCE = ("eta", "local_steps", "rounds", "server_lr", "replicates", "seed", "record_every", "tolerance",
                "accuracy_tolerance", "alpha")
#: and the start point w0, given or not (its validator is counted by its own name: its first argument is the point)
CHECKED_ONCE += ("start_point",)


def _count_validations(monkeypatch) -> collections.Counter:
    """Wrap every validator of fedsde._validate, where it is defined and wherever a module of fedsde holds it, to
    count its calls by the argument name it checks (the first argument; ``device_dtype`` by its own name)."""
    counts: collections.Counter = collections.Counter()
    originals = {f: n for n, f in vars(validators).items()
                 if inspect.isfunction(f) and f.__module__ == validators.__name__ and not n.startswith("_")}

    def counted(name, f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            counts[args[0] if args and isinstance(args[0], str) and name != "device_dtype" else name] += 1
            return f(*args, **kwargs)
        return wrapper

    wrapped = {f: counted(n, f) for f, n in originals.items()}
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("fedsde"):
            for attr, obj in list(vars(mod).items()):
                if inspect.isfunction(obj) and obj in wrapped:
                    monkeypatch.setattr(mod, attr, wrapped[obj])
    return counts


@pytest.mark.parametrize("fedavg", ["sampled", "exact"])
def test_one_validity_command_checks_each_value_once(problem, tmp_path, monkeypatch, capsys, fedavg):
    path = tmp_path / "q.toml"
    save_problem(problem, path)
    argv = ["validity", "--problem", str(path), "--eta", "0.05", "--local-steps", "2", "--server-lr", "0.5",
            "--rounds", "3", "--replicates", "8", "--seed", "1", "--fedavg", fedavg, "--json"]
    assert main(argv) == 0  # everything the command imports, imported
    capsys.readouterr()
    counts = _count_validations(monkeypatch)
    assert main(argv) == 0
    capsys.readouterr()
    assert {k: counts[k] for k in CHECKED_ONCE} == dict.fromkeys(CHECKED_ONCE, 1), counts
    assert counts["device_dtype"] == 1  # the Precision


def test_the_counter_sees_a_second_check(problem, monkeypatch):
    # the count is not vacuous: an old keyword call that then passes raw numbers on checks eta twice
    from fedsde.exact import round_law

    s = Schedule(0.1, 2, 3)
    counts = _count_validations(monkeypatch)

    round_law(problem, s)
    assert counts["eta"] == 0
    round_law(problem, 0.1, 2, 1.0)
    assert counts["eta"] == 1


def test_warnings_are_attributed_to_the_callers_line_past_the_adapter(problem):
    with pytest.warns(UserWarning, match="not used") as rec:
        validity_test(problem, eta=0.05, local_steps=2, rounds=2, replicates=8, fedavg="exact")
    assert rec[0].filename == __file__
    with pytest.warns(UserWarning, match="diverges with these settings") as rec:
        quadratic_sde_study(problem, eta=0.5, local_steps=4, rounds=2, server_lr=3.0, h_grid=[0.5, 0.25])
    assert {r.filename for r in rec if "diverges" in str(r.message)} == {__file__}


def test_the_inner_layers_take_a_schedule_for_their_rates_and_give_the_same_numbers(problem):
    from fedsde.exact import round_law, transient_moments
    from fedsde.exact.stability import known_divergence
    from fedsde.sde import quadratic_sde_coefficients
    from fedsde.validity.exact_fedavg import exact_fedavg_paths
    from fedsde.validity.reference import exact_sde_law

    s = Schedule(0.1, [2, 3], 4, 0.5, h=0.2)
    _same(round_law(problem, s).B, round_law(problem, 0.1, [2, 3], 0.5).B)
    _same(quadratic_sde_coefficients(problem, s).A, quadratic_sde_coefficients(problem, 0.1, [2, 3], 0.5, 0.2).A)
    _same(transient_moments(problem, s).cov, transient_moments(problem, 0.1, [2, 3], 4, 0.5).cov)
    _same(exact_sde_law(problem, s).diffusion_cov,
          exact_sde_law(problem, eta=0.1, local_steps=[2, 3], server_lr=0.5, h=0.2).diffusion_cov)
    grid = np.arange(5)
    _same(exact_fedavg_paths(problem, eta=s, grid=grid, w0=np.ones(2), names=["train_loss"])[0],
          exact_fedavg_paths(problem, eta=0.1, local_steps=[2, 3], server_lr=0.5, grid=grid, w0=np.ones(2),
                             names=["train_loss"])[0])
    fast = Schedule(0.5, 4, 2, 3.0)
    assert known_divergence(problem, fast) == known_divergence(problem, 0.5, 4, 3.0) != []
    per_round = Schedule([0.1, 0.05, 0.05], 2, 3)
    _same(transient_moments(problem, per_round).mean, transient_moments(problem, [0.1, 0.05, 0.05], 2, 3).mean)


def test_positional_old_calls_and_simulated_path_give_the_same_numbers():
    from fedsde.exact import least_squares_transient_moments
    from fedsde.problems import load_problem
    from fedsde.theory.problems import sec4_quadratic
    from fedsde.theory.schedules import PowerSchedule

    reg = load_problem("examples/problems/my_data.toml")
    a = least_squares_transient_moments(reg, 0.05, 2, 3, 0.5, record=[3])
    b = least_squares_transient_moments(reg, Schedule(0.05, 2, 3, 0.5), record=[3])
    c = least_squares_transient_moments(reg, eta=0.05, local_steps=2, rounds=3, server_lr=0.5, record=[3])
    _same(a.final_cov, b.final_cov)
    _same(a.final_mean, c.final_mean)
    with pytest.raises(TypeError, match="multiple values for argument 'rounds'"):
        least_squares_transient_moments(reg, 0.05, 2, 3, rounds=3)
    pr, ps = sec4_quadratic(), PowerSchedule(0.5, 1.0)
    kw = dict(local_steps=2, h=0.5, rounds=5, w0=[3.0])
    _same(simulated_path(pr, ps, replicates=16, seed=7, **kw).gap, simulated_path(pr, ps, Replication(16, 7), **kw).gap)


# --- client sampling, the SDE side and a chain's hooks as values ---------------------------------------------------

def test_the_new_values_are_frozen_checked_and_normalised():
    s = ClientSampling(np.int64(2), "multinomial")
    assert s.validated and type(s.participation) is int and ClientSampling() == ClientSampling(None, "unbiased")
    r = SDEReference("svag", [8, 2, np.int64(4), 2, 1], 1, 0)
    assert r.ells == (1, 2, 4, 8) and r.common_random is False and r.validated
    assert SDEReference(order=2.0).order == 2 and type(SDEReference(order=2.0).order) is int
    with pytest.raises(FedsdeInputError, match=r"^order=True: must be 1 or 2$"):
        SDEReference(order=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.weighting = "renormalised"
    calls = []
    ChainHooks(on_grid=lambda n, start, w: calls.append(n), bar=tqdm_like(), what="x", on_error=calls.clear)
    with pytest.raises(FedsdeInputError, match=r"^what=3: must be a string$"):
        ChainHooks(what=3)


def tqdm_like():
    return type("Bar", (), {"update": lambda self, n=1: None})()


def test_the_svag_chains_take_hooks_and_sampling_as_values_and_give_the_same_numbers(problem):
    seen_old, seen_new = [], []
    kw = dict(eta=0.1, local_steps=2, rounds=3, replicates=8, seed=2, block_size=4, workers=2)
    a = svag_chain(problem, ell=2, on_grid=lambda n, start, w: seen_old.append((n, start, w.sum().item())),
                   what="chain a", common=True, **kw)
    b = svag_chain(problem, Schedule(0.1, 2, 3), Replication(8, 2, block_size=4, workers=2), ell=2, common=True,
                   hooks=ChainHooks(on_grid=lambda n, start, w: seen_new.append((n, start, w.sum().item()))))
    _same(a.final, b.final)
    _same(a.config, b.config)
    assert sorted(seen_old) == sorted(seen_new) and {n for n, *_ in seen_old} == {0, 1, 2, 3}
    with pytest.raises(FedsdeInputError, match="on_grid= and hooks= both given"):
        svag_chain(problem, ell=2, on_grid=print, hooks=ChainHooks(), **kw)
    old = dict(eta=0.1, local_steps=[1, 2], rounds=3, server_lr=0.5, replicates=10, seed=3)
    c = rule_svag_chain(problem, "fednova", ell=2, w0=[0.5, -0.5], participation=1, weighting="renormalised", **old)
    d = rule_svag_chain(problem, "fednova", Schedule(0.1, [1, 2], 3, 0.5), Replication(10, 3), ell=2,
                        w0=[0.5, -0.5], sampling=ClientSampling(1, "renormalised"))
    _same(c.final, d.final)
    _same(c.config, d.config)
    assert c.config["participation"] == 1 and c.config["weighting"] == "renormalised"
    with pytest.raises(FedsdeInputError, match=r"^weighting='all': must be one of unbiased, renormalised"):
        rule_svag_chain(problem, "fednova", ell=2, weighting="all", **old)
    with pytest.raises(FedsdeInputError, match=r"participation=3: cannot sample more clients than there are"):
        rule_svag_chain(problem, "fednova", ell=2, sampling=ClientSampling(3), **old)


def test_validity_tests_take_the_sde_side_and_sampling_as_values_and_give_the_same_result(problem):
    def same(a, b):
        da, db = a.to_dict(), b.to_dict()
        da["config"].pop("seconds"), db["config"].pop("seconds")  # wall-clock time per chain
        _same(da, db)

    old = dict(eta=0.05, local_steps=2, rounds=3, server_lr=0.5, replicates=8, seed=4)
    sched, rep = Schedule(0.05, 2, 3, 0.5), Replication(8, 4)
    same(validity_test(problem, reference="svag", ells=[4, 1, 2], common_random=False, w0=[1.0, 0.0], **old),
         validity_test(problem, sched, rep, sde=SDEReference("svag", (1, 2, 4), common_random=False), w0=[1.0, 0.0]))
    same(validity_test(problem, ells=[1, 2], order=1, fedavg="sampled", **old),
         validity_test(problem, sched, rep, sde=SDEReference(ells=[1, 2]), fedavg="sampled"))
    with pytest.raises(FedsdeInputError, match="order= and sde= both given"):
        validity_test(problem, sched, rep, sde=SDEReference(), order=2)
    r = rule_validity_test(problem, "fednova", reference="svag", ells=[1, 2], participation=1, **old)
    s = rule_validity_test(problem, "fednova", sched, rep, sde=SDEReference("svag", [1, 2]),
                           sampling=ClientSampling(participation=1))
    same(r, s)
    assert r.config["participation"] == 1 and r.config["ells"] == [1, 2]
    with pytest.raises(FedsdeInputError, match=r"sde.common_random=False: not used by rule_validity_test"):
        rule_validity_test(problem, "fednova", sched, rep, sde=SDEReference(common_random=False))


@pytest.mark.parametrize("extra", [["--fedavg", "sampled", "--ells", "4,1,2", "--w0", "0.5,-0.5"],
                                   ["--fedavg", "exact", "--ells", "1", "--w0", "0.5", "--reference", "exact"],
                                   # a rule against its own SDE (under client sampling, participation and weighting
                                   # are checked again by the weights' moments of its SDE, sde.sampled.weight_moments)
                                   ["--aggregator", "fednova", "--ells", "1,2", "--w0", "0.5", "--participation", "1"],
                                   ["--aggregator", "fedavgm", "--reference", "svag", "--ells", "2,1"]])
def test_a_validity_command_with_ells_and_a_start_checks_them_once(problem, tmp_path, monkeypatch, capsys, extra):
    path = tmp_path / "q.toml"
    save_problem(problem, path)
    argv = ["validity", "--problem", str(path), "--eta", "0.05", "--local-steps", "2", "--server-lr", "0.5",
            "--rounds", "3", "--replicates", "8", "--seed", "1", "--json", *extra]
    assert main(argv) == 0
    capsys.readouterr()
    counts = _count_validations(monkeypatch)
    assert main(argv) == 0
    capsys.readouterr()
    once = (*CHECKED_ONCE, "ells")
    assert {k: counts[k] for k in once} == dict.fromkeys(once, 1), counts
    assert counts["ell"] == counts["record"] == 0, counts  # every chain's ℓ is one of the checked ells
