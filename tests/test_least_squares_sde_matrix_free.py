"""The least-squares SDE's moments without the (2d² + d + 1)² generator: the same numbers as the dense path at
small d, and ``fedsde compare`` on a 100-feature regression file without any d²-by-d² matrix."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError, NoStationaryLawError
from fedsde.exact.least_squares import LeastSquaresRoundLaw
from fedsde.exact.least_squares_sde import LeastSquaresSDE, least_squares_sde
from fedsde.problems.regression.problem import RegressionProblem

#: Both paths round ~10² products whose entries span the generator's norm, and expm_multiply truncates its Taylor
#: series at the unit roundoff: measured at most 7e-14 (relative to the largest entry) for d <= 6; 100× margin.
AGREEMENT = 1e-11


def _problem(d: int, Q: int, seed: int = 1) -> RegressionProblem:
    rng = np.random.default_rng(seed)
    Xs = [rng.normal(size=(6 + k, d)) + 0.5 * k for k in range(Q)]
    ys = [X @ rng.normal(size=d) + rng.normal(size=X.shape[0]) for X in Xs]
    return RegressionProblem.from_clients(Xs, ys, batch_size=3, l2=0.3, sampling="without-replacement")


def _rel(a, b) -> float:
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("participation", [None, 2])
def test_matrix_free_moments_and_stationary_law_are_the_dense_ones(participation):
    pb = _problem(5, 4)
    eta = 0.3 / np.max(np.linalg.eigvalsh(pb.hessian()))
    kw = {"participation": participation}
    dense = least_squares_sde(pb, eta, 3, 0.8, method="dense", **kw)
    free = least_squares_sde(pb, eta, 3, 0.8, method="matrix-free", **kw)
    assert not dense.matrix_free and free.matrix_free
    # the operator is the generator, column by column, and its transpose is the generator's
    Z, op = dense.generator(), free.generator_operator()
    basis = np.eye(Z.shape[0])
    assert _rel(np.array([op.matvec(e) for e in basis]).T, Z) < AGREEMENT
    assert _rel(np.array([op.rmatvec(e) for e in basis]).T, Z.T) < AGREEMENT
    w0 = np.random.default_rng(0).normal(size=5) * 3
    times = [0.7, 0.0, 3.0, 0.2, 3.0]  # any order, repeats, t = 0
    a, b = free.moments(times, w0=w0, cov0=0.1), dense.moments(times, w0=w0, cov0=0.1)
    for i in range(len(times)):
        assert _rel(a.mean[i], b.mean[i]) < AGREEMENT and _rel(a.cov[i], b.cov[i]) < AGREEMENT
    assert np.array_equal(a.mean[1], w0)  # t = 0 is the start itself
    (ma, Pa), (mb, Pb) = free.stationary(), dense.stationary()
    assert _rel(ma, mb) < AGREEMENT and _rel(Pa, Pb) < AGREEMENT
    # another server step and time step from the same SDE: the dense SDE of those settings
    r = free.rescaled(0.3, 0.02)
    rd = least_squares_sde(pb, eta, 3, 0.3, 0.02, method="dense", **kw)
    assert _rel(r.moments([1.0], w0=w0).cov[0], rd.moments([1.0], w0=w0).cov[0]) < AGREEMENT
    assert _rel(r.stationary()[1], rd.stationary()[1]) < AGREEMENT


def test_matrix_free_moments_are_the_same_on_every_run_and_leave_numpy_global_generator_alone():
    """expm_multiply's norm estimator draws from numpy's global generator: the draws are seeded inside the call
    (the same numbers whatever the global state) and the global state is put back."""
    sde = least_squares_sde(_problem(5, 3), 0.05, 2, method="matrix-free")
    state = np.random.get_state()  # noqa: NPY002 — what the call must leave as it found
    first = sde.moments([0.5, 2.0], w0=np.ones(5)).cov
    after = np.random.get_state()  # noqa: NPY002
    assert after[0] == state[0] and np.array_equal(after[1], state[1]) and after[2:] == state[2:]
    np.random.random(7)  # noqa: NPY002 — another global state
    again = least_squares_sde(_problem(5, 3), 0.05, 2, method="matrix-free").moments([0.5, 2.0], w0=np.ones(5)).cov
    assert np.array_equal(first, again)  # reruns of the same call: bit for bit (docs/determinism.md)


def test_no_stationary_law_is_refused_by_both_paths():
    pb = _problem(4, 2)
    eta = 1.9 / np.max(np.linalg.eigvalsh(pb.hessian()))  # the noise makes the second moments grow
    for method in ("dense", "matrix-free"):
        sde = least_squares_sde(pb, eta, 4, 1.0, method=method)
        with pytest.raises(NoStationaryLawError, match="eigenvalue with real part"):
            sde.stationary()


def _csv_problem(tmp_path, d: int) -> str:
    rng = np.random.default_rng(0)
    lines = ["client," + ",".join(f"x{i}" for i in range(d - 1)) + ",y"]
    for k in range(2):
        X = rng.normal(size=(12, d - 1)) + 0.3 * k
        y = X @ rng.normal(size=d - 1) * 0.1 + rng.normal(size=12)
        lines += [f"c{k}," + ",".join(f"{v:.4f}" for v in row) + f",{t:.4f}" for row, t in zip(X, y, strict=True)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    features = ", ".join(f'"x{i}"' for i in range(d - 1))
    (tmp_path / "p.toml").write_text(f'kind = "regression"\nmodel = "least-squares"\ndata = "data.csv"\n'
                                     f'features = [{features}]\ntarget = "y"\nclient_column = "client"\n'
                                     'intercept = true\nbatch_size = 4\nl2 = 0.5\n')
    return str(tmp_path / "p.toml")


def test_compare_on_a_hundred_features_builds_no_dense_matrix(tmp_path, monkeypatch):
    """d = 100: the dense generator would be (20101)² floats (3.2 GB); under a 300 MB cap, with every dense builder
    made to fail, ``compare`` still reports both laws."""
    from fedsde.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("a dense d²-by-d² matrix was built")

    monkeypatch.setattr(LeastSquaresSDE, "generator", refuse)
    monkeypatch.setattr(LeastSquaresSDE, "diffusion_operator", refuse)
    monkeypatch.setattr(LeastSquaresRoundLaw, "noise_operator", refuse)
    monkeypatch.setattr(LeastSquaresRoundLaw, "second_moment_operator", refuse)
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "300M")
    problem = _csv_problem(tmp_path, 100)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["compare", "--problem", problem, "--eta", "0.005", "--local-steps", "2", "--rounds", "2",
                     "--time-steps", "0.005,0.0025"])
    assert code == 0
    text = out.getvalue()
    assert "Q=2, d=100" in text and "weak error dist2 at t=0.01" in text
    assert "stationary: rel. cov error (SDE vs chain)" in text  # both stationary laws were found
    # the dense path is refused in one line under the same cap, naming the way out
    with pytest.raises(FedsdeInputError, match="method='matrix-free'"):
        from fedsde.problems import load_problem

        least_squares_sde(load_problem(problem), 0.005, 2, method="dense")
