"""A user's nn.Module trained by a client population: an on-demand run gives the materialised ModuleProblem's numbers
bit for bit (participant slots and the cross-device regime, dropout, minibatches, whole clients), npz files are read
client by client from the memory-mapped file, the metrics are estimated within their standard errors (exact when
the population is small), and memory is planned from the participants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsde.errors import FedsdeInputError
from fedsde.problems import is_data_problem, load_problem
from fedsde.problems.metrics import evaluate_metrics
from fedsde.problems.module import is_module_problem
from fedsde.problems.module.population import ModulePopulationProblem, module_population_problem
from fedsde.problems.populations.synthetic import SyntheticPopulation
from fedsde.sim import simulate


class Net(nn.Module):
    def __init__(self, inputs: int = 6, dropout: float = 0.0):
        super().__init__()
        layers = [nn.Linear(inputs, 8), nn.Tanh()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(8, 3)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def _population(Q=300, **kw):
    return SyntheticPopulation(1.0, 1.0, seed=4, n_clients=Q, dim=6, n_classes=3, max_samples=40, **kw)


@pytest.mark.parametrize(("regime", "dropout", "batch", "sampling"), [
    ("slots", 0.2, 4, "without-replacement"),
    ("slots", 0.0, 4, "with-replacement"),
    ("cross-device", 0.2, 4, "without-replacement"),
    ("cross-device", 0.0, "full", "without-replacement"),
])
def test_on_demand_simulation_gives_the_materialised_module_problems_numbers(regime, dropout, batch, sampling,
                                                                           monkeypatch):
    import fedsde.sim.participation as part
    from fedsde.sim.plan import make_plan

    if regime == "cross-device":  # the regime of many clients, at a size a test affords
        monkeypatch.setattr(part, "CROSS_DEVICE_Q", 100)
    pb = module_population_problem(lambda: Net(dropout=dropout), _population(), batch_size=batch, sampling=sampling,
                                   l2=1e-3)
    assert is_module_problem(pb) and is_data_problem(pb) and pb.Q == 300
    kw = dict(eta=0.05, local_steps=2, rounds=2, replicates=6, seed=2, participation=5, record=[0, 2])
    assert make_plan(pb, **kw).sparse == (regime == "cross-device")
    lazy = simulate(pb, **kw)
    mat = pb.materialise()
    assert mat.Q == pb.Q and mat.d == pb.d and np.array_equal(mat.sizes, pb.sizes)
    np.testing.assert_array_equal(lazy.weights, simulate(mat, **kw).weights)
    assert pb.rows_cache.misses < pb.Q  # only participants' rows were produced


def test_a_module_population_reads_only_participants_and_keeps_its_settings():
    pb = module_population_problem(Net, _population(Q=50), batch_size=4, init_seed=3, l2=1e-2, name="net")
    np.testing.assert_array_equal(pb.initial_weights(), pb.materialise().initial_weights())
    assert pb.summary()["population"] == "on demand" and pb.summary()["Q"] == 50
    assert pb.replace(l2=0.5).l2 == 0.5 and pb.replace(l2=0.5).rows_cache is pb.rows_cache
    w = pb.initial_weights()
    assert pb.loss(w) == pytest.approx(pb.materialise().loss(w))
    with pytest.raises(FedsdeInputError, match="gives 2 outputs per row"):
        module_population_problem(lambda: nn.Linear(6, 2), _population(Q=5), batch_size=4)


def test_population_metrics_of_a_module_are_estimated_within_their_standard_errors():
    rng = np.random.default_rng(0)
    pb = module_population_problem(Net, _population(Q=40), batch_size=4, l2=1e-3, metric_samples=512)
    assert pb.n_rows > 512  # just above the exact threshold: estimated
    W = pb.initial_weights() + 0.3 * rng.standard_normal((4, pb.d))
    est = evaluate_metrics(pb, W)
    exact = evaluate_metrics(pb.materialise(), W, metric_samples=10**6)
    assert est.sampled and est.sampling["train"]["clients"] == 32
    for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
        assert np.all(est.se[name] > 0)
        assert np.all(np.abs(est[name] - exact[name]) < 5 * est.se[name]), name
    small = module_population_problem(Net, _population(Q=8), batch_size=4, l2=1e-3, metric_samples=512)
    assert small.n_rows <= 512  # below: the materialised problem's exact metrics
    got, ref = evaluate_metrics(small, W), evaluate_metrics(small.materialise(), W)
    assert not got.sampled
    for name in ("train_loss", "grad_norm_sq", "test_accuracy"):
        np.testing.assert_array_equal(got[name], ref[name])
        assert np.all(got.se[name] == 0)


def test_population_runs_are_planned_from_the_participants(monkeypatch):
    from fedsde.sim.plan import make_plan

    pb = module_population_problem(Net, SyntheticPopulation(1.0, 1.0, seed=0, n_clients=10**5, dim=6, n_classes=3),
                                   batch_size=8)
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "2G")
    make_plan(pb, eta=0.05, local_steps=2, rounds=1, replicates=4, seed=0, participation=10)
    with pytest.raises(FedsdeInputError, match=r"the population materialised has \d+ rows"):
        pb.materialise()


def _write_npz(path, compressed=False):
    rng = np.random.default_rng(1)
    n = 300
    client = rng.choice(np.array([7, 3, 11, 5, 2, 9]), size=n)  # interleaved, values not in order
    x = rng.standard_normal((n, 6)).astype(np.float32)
    y = rng.integers(0, 3, n)
    test = dict(x_test=rng.standard_normal((40, 6)), y_test=rng.integers(0, 3, 40))
    (np.savez_compressed if compressed else np.savez)(path, x=x, y=y, client=client, **test)


def test_npz_population_is_read_client_by_client_and_gives_the_numbers_of_the_npz_problem(tmp_path):
    from fedsde.problems.module.npz import NpzPopulation

    (tmp_path / "net.py").write_text("from torch import nn\n\ndef Net():\n    return nn.Sequential(nn.Linear(6, 8), "
                                     "nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 3))\n")
    _write_npz(tmp_path / "rows.npz")
    text = 'kind = "module"\nmodel = "net.py:Net"\ndata = "rows.npz"\nbatch_size = 4\nl2 = 1e-3\n'
    (tmp_path / "plain.toml").write_text(text)
    (tmp_path / "pop.toml").write_text(text + "population = true\n")
    pop = NpzPopulation(tmp_path / "rows.npz")
    assert isinstance(pop.x, np.memmap)
    plain = load_problem(tmp_path / "plain.toml")
    pb = load_problem(tmp_path / "pop.toml", population=True)
    assert isinstance(pb, ModulePopulationProblem) and pb.Q == plain.Q == 6
    np.testing.assert_array_equal(pb.sizes, plain.sizes)
    starts = np.concatenate([[0], np.cumsum(plain.sizes)])
    for k in (0, 3, 5):  # client k's rows: its slice of the file, in file order
        X, y = pop.client_rows(k)
        np.testing.assert_array_equal(X, plain.X[starts[k]:starts[k + 1]])
        np.testing.assert_array_equal(y, plain.y[starts[k]:starts[k + 1]])
    kw = dict(eta=0.05, local_steps=2, rounds=2, replicates=4, seed=1, participation=3)
    np.testing.assert_array_equal(simulate(pb, **kw).weights, simulate(plain, **kw).weights)
    order = np.argsort(np.load(tmp_path / "rows.npz")["client"], kind="stable")  # every client's rows together
    with np.load(tmp_path / "rows.npz") as z:
        np.savez(tmp_path / "sorted.npz", **{name: (z[name][order] if name in ("x", "y", "client") else z[name])
                                             for name in z.files})
    together = NpzPopulation(tmp_path / "sorted.npz")
    assert together._order is None and together.Q == 6
    k = int(np.flatnonzero(np.array(together.client_names) == pop.client_names[0])[0])
    np.testing.assert_array_equal(together.client_rows(k)[0], pop.client_rows(0)[0])
    mat = load_problem(tmp_path / "pop.toml")  # commands that do not sample participants: materialised
    np.testing.assert_array_equal(mat.X, plain.X)
    np.testing.assert_array_equal(mat.X_test, plain.X_test)
    _write_npz(tmp_path / "rows.npz", compressed=True)
    with pytest.raises(FedsdeInputError, match=r"is compressed.*save the file with np.savez"):
        load_problem(tmp_path / "pop.toml", population=True)


def test_synthetic_module_files(tmp_path):
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).parents[1] / "examples" / "models" / "mlp.py", tmp_path / "mlp.py")
    base = ('kind = "module"\nmodel = "mlp.py:MLP"\nmodel_options = { inputs = 5, hidden = 4, outputs = 3 }\n'
            'dataset = "synthetic"\ndim = 5\nn_classes = 3\nmax_samples = 30\nseed = 2\nbatch_size = 4\n')
    (tmp_path / "a.toml").write_text(base + "clients = 40\npopulation = true\n")
    pb = load_problem(tmp_path / "a.toml", population=True)
    assert isinstance(pb, ModulePopulationProblem) and pb.Q == 40 and pb.info["dataset"] == "synthetic"
    ref = SyntheticPopulation(1.0, 1.0, seed=2, n_clients=40, dim=5, n_classes=3, max_samples=30)
    np.testing.assert_array_equal(pb.sizes, ref.sizes)
    mat = load_problem(tmp_path / "a.toml")
    np.testing.assert_array_equal(mat.X[:pb.sizes[0]], ref.client_rows(0)[0])
    (tmp_path / "b.toml").write_text(base + "clients = 10000\n")  # a population from 10⁴ clients
    assert isinstance(load_problem(tmp_path / "b.toml", population=True), ModulePopulationProblem)
    (tmp_path / "c.toml").write_text(base + "clients = 12\n")  # the one-stream generator below
    small = load_problem(tmp_path / "c.toml", population=True)
    assert not hasattr(small, "population") and small.Q == 12
    (tmp_path / "d.toml").write_text(base + "clients = 12\nshape = \"image\"\n")
    with pytest.raises(FedsdeInputError, match=r"dataset='synthetic' has no key\(s\) shape"):
        load_problem(tmp_path / "d.toml")


@pytest.mark.cuda
def test_module_population_on_cuda_gives_the_materialised_numbers_there():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pb = module_population_problem(lambda: Net(dropout=0.2), _population(), batch_size=4)
    kw = dict(eta=0.05, local_steps=2, rounds=2, replicates=6, seed=2, participation=5, device="cuda")
    np.testing.assert_array_equal(simulate(pb, **kw).weights, simulate(pb.materialise(), **kw).weights)


@pytest.mark.parametrize(("y", "x_bad", "match"), [
    (lambda n, r: np.where(np.arange(n) == 0, 1.0, r.uniform(0, 2.9, n)), False, "labels must be integers"),
    (lambda n, r: np.where(np.arange(n) == 7, -100, r.integers(0, 3, n)), False, "labels must be integers"),
    (lambda n, r: np.where(np.arange(n) == 250, -1, r.integers(0, 3, n)), False, "labels must be integers"),
    (lambda n, r: r.integers(0, 3, n), True, "x: contains NaN or inf"),
])
def test_npz_population_checks_every_row_as_the_npz_problem_does(tmp_path, y, x_bad, match):
    """Labels that are not whole numbers >= 0 (cross-entropy's ignored -100 included) and NaN rows anywhere in the
    file are refused before the run, with the npz problem's messages, not read later as wrong numbers."""
    rng = np.random.default_rng(0)
    n = 300
    x = rng.standard_normal((n, 6))
    if x_bad:
        x[299, 2] = np.nan
    np.savez(tmp_path / "rows.npz", x=x, y=y(n, rng), client=rng.integers(0, 6, n))
    (tmp_path / "net.py").write_text("from torch import nn\n\ndef Net():\n    return nn.Linear(6, 3)\n")
    text = 'kind = "module"\nmodel = "net.py:Net"\ndata = "rows.npz"\nbatch_size = 4\n'
    (tmp_path / "plain.toml").write_text(text)
    (tmp_path / "pop.toml").write_text(text + "population = true\n")
    for path, population in (("plain.toml", False), ("pop.toml", True)):
        with pytest.raises(FedsdeInputError, match=match):
            load_problem(tmp_path / path, population=population)


def test_npz_population_of_whole_float_labels_counts_its_classes():
    """Cross-entropy labels stored as floats (0.0, 1.0, …) are classes: counted from the largest, held as int64."""
    import tempfile
    from pathlib import Path

    from fedsde.problems.module.npz import NpzPopulation

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.npz"
        np.savez(path, x=rng.standard_normal((50, 4)), y=rng.integers(0, 5, 50).astype(np.float64),
                 client=rng.integers(0, 3, 50))
        pop = NpzPopulation(path)
        pb = module_population_problem(lambda: nn.Linear(4, 5), pop, batch_size=4)
        assert pop.n_classes == pb.n_classes == 5
        assert pop.client_rows(0)[1].dtype == np.int64


def test_multinomial_estimate_counts_the_rows_not_the_weights():
    """The extra rows a multinomial slot holds (size-biased draws) are priced per row of the population, whatever
    the model's size: a large model on 6 features is planned like a small one."""
    from fedsde.sim.plan import make_plan

    pop = SyntheticPopulation(1.0, 1.0, seed=0, n_clients=10**4, dim=6, n_classes=3)
    kw = dict(eta=0.01, local_steps=2, rounds=2, replicates=8, seed=0, participation=10, weighting="multinomial",
              memory_limit="4G")
    for model in (lambda: nn.Linear(6, 3), lambda: nn.Sequential(nn.Linear(6, 3000), nn.Linear(3000, 3))):
        assert make_plan(module_population_problem(model, pop, batch_size=8), **kw).sparse
