"""Multinomial participation trains its m drawn slots (a client's repeats idle), at any number of clients: a
population round reads only the drawn clients' rows, and the law is the exact one of the chain."""

from __future__ import annotations

import numpy as np

from fedsde.problems.populations.base import PopulationProblem
from fedsde.problems.populations.synthetic import synthetic_population_problem
from fedsde.sim import simulate


def test_multinomial_rounds_read_only_the_drawn_clients_of_a_population(monkeypatch):
    import fedsde.clients.data_rows as rows

    pb = synthetic_population_problem(1.0, 1.0, seed=4, n_clients=1000, dim=6, n_classes=3, max_samples=60,
                                      batch_size=4)
    kw = dict(eta=0.05, local_steps=3, rounds=3, replicates=16, seed=2, participation=5, record=[0, 3],
              weighting="multinomial")
    read: set[int] = set()
    client_data = type(pb).client_data

    def spy(self, k, *args, **kwargs):
        read.add(int(k))
        return client_data(self, k, *args, **kwargs)

    def refuse(self):
        raise AssertionError("the population was materialised")

    with monkeypatch.context() as patch:
        patch.setattr(type(pb), "client_data", spy)
        patch.setattr(PopulationProblem, "materialise", refuse)
        lazy = simulate(pb, **kw)
    assert 0 < len(read) <= 3 * 16 * 5  # rounds × replicates × draws, of 1000 clients
    assert pb.rows_cache.misses <= 3 * 16 * 5
    # the numbers of the materialised problem, bit for bit (docs/determinism.md, client populations), whether its
    # rows are padded or ragged
    np.testing.assert_array_equal(lazy.weights, simulate(pb.materialise(), **kw).weights)
    monkeypatch.setattr(rows, "RAGGED_FLOATS", 0)
    np.testing.assert_array_equal(lazy.weights, simulate(pb.materialise(), **kw).weights)


def test_multinomial_slots_have_the_exact_law_of_the_chain():
    """Least-squares clients: the simulated mean and variance after 3 rounds against the exact moments under
    multinomial participation (3 draws from 4 clients: most rounds draw a client twice), within 5 s.e."""
    from fedsde.exact import least_squares_transient_moments
    from fedsde.problems.regression.problem import RegressionProblem

    rng = np.random.default_rng(3)
    Xs = [rng.normal(size=(5 + k, 2)) + k for k in range(4)]
    ys = [X @ np.array([1.0, -2.0]) + rng.normal(size=X.shape[0]) for X in Xs]
    pb = RegressionProblem.from_clients(Xs, ys, batch_size=2, sampling="with-replacement", l2=0.1,
                                        p=[0.1, 0.2, 0.3, 0.4])
    kw = dict(participation=3, weighting="multinomial", w0=[2.0, 2.0])
    R = 4000
    res = simulate(pb, eta=0.05, local_steps=2, rounds=3, replicates=R, seed=0, record=[3], **kw)
    exact = least_squares_transient_moments(pb, 0.05, 2, 3, record=[3], **kw)
    w = res.final
    mean, var = exact.mean[-1], np.diag(exact.cov[-1])
    assert np.all(np.abs(w.mean(0) - mean) < 5 * np.sqrt(var / R))
    dev = w - w.mean(0)
    se_var = np.sqrt(((dev**2 - var) ** 2).mean(0) / R)  # the sample variance's standard error, 4th moment
    assert np.all(np.abs((dev**2).sum(0) / (R - 1) - var) < 5 * se_var)
    assert np.all(np.abs(mean - np.array([2.0, 2.0])) > 20 * np.sqrt(var / R))  # the chain moved: not vacuous
