"""Tiny client steps η, where ``1 − ηλ`` rounds to 1: nothing refused as divergent, no Lanczos on a zero operator,
no quadrature near underflow.  Each check is against an independent closed form or a dense computation."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.integrate

from fedsde.cli import main
from fedsde.errors import FedsdeInputError
from fedsde.exact.stability import _local_step_expands, _local_step_radius, known_divergence
from fedsde.problems import load_problem, paper_table_problem
from fedsde.sde.integrate import _check_euler_stability
from fedsde.validity.reference import gaussian_norm_mean
from fedsde.validity.step import _top_eigenvalue, round_contraction

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")
GRUNFELD = str(ROOT / "examples" / "problems" / "grunfeld.toml")


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------------------ divergence
def test_a_tiny_eta_on_quadratic_clients_is_not_refused_as_divergent():
    """``1 − ηλ`` rounds to 1 at η = 1e-20 (the radius test read it as ``ρ >= 1``); ηλ >= 2 is the criterion."""
    pb = paper_table_problem()
    lam = float(pb.max_curvature().max())
    assert known_divergence(pb, 1e-20, 2) == []
    assert known_divergence(pb, 1e-300, 2) == []
    edge = 2.0 / lam
    assert known_divergence(pb, np.nextafter(edge, 0.0), 2) == []
    assert "local SGD diverges" in known_divergence(pb, edge, 2)[0]
    code, out, err = run(["simulate", "--problem", PAPER, "--eta", "1e-20", "--local-steps", "2", "--rounds", "2",
                          "--replicates", "2", "--seed", "0", "--json"])
    assert code == 0, err
    assert json.loads(out)["config"]["eta"] == 1e-20


@pytest.mark.parametrize("in_buffer", [False, True])
def test_the_expansion_test_agrees_with_the_spectral_radius_away_from_the_edge(in_buffer):
    """The Jury conditions against the eigenvalues of the 2×2 step map, on random settings (momentum, prox)."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(3000):
        eta, lam = 10 ** rng.uniform(-3, 1), rng.uniform(0, 10)
        beta, mu = rng.choice([0.0, rng.uniform(0, 0.99)]), rng.choice([0.0, rng.uniform(0, 5)])
        rho = _local_step_radius(eta, lam, beta, mu, in_buffer)
        if abs(rho - 1.0) > 1e-9:
            assert _local_step_expands(eta, lam, beta, mu, in_buffer) == (rho > 1.0), (eta, lam, beta, mu)
            checked += 1
    assert checked > 2900
    assert not _local_step_expands(1e-20, 4.0, 0.9, 1.0, in_buffer)  # the radius reads 1.0 here


def test_euler_at_a_tiny_step_is_not_refused_as_unstable():
    code, _, err = run(["sde", "--problem", PAPER, "--eta", "1e-20", "--local-steps", "2", "--rounds", "2",
                        "--paths", "2", "--seed", "0", "--json"])
    assert code == 0, err
    pb = paper_table_problem()
    _check_euler_stability(pb, "corrected", 1e-20, 2, 1.0, None, 1)
    with pytest.raises(FedsdeInputError, match="unstable"):  # |1 − dt·λ| = 1.31 for the stiffest direction
        _check_euler_stability(pb, "corrected", 0.3, 2, 3.0, None, 1)


# ------------------------------------------------------------------------------------------------ κ
def test_kappa_at_a_tiny_eta_is_its_first_order_value():
    """Grunfeld at η = 1e-17: B = Σ p_k [I − (I − ηU_k)^E] rounds to zero entrywise (ARPACK refused the zero
    operator); κ is s·η·λ_max(Σ_k p_k E U_k) to rounding."""
    pb = load_problem(GRUNFELD)
    U = pb.client_hessian()
    first = 2 * float(np.linalg.eigvalsh(np.einsum("k,kij->ij", pb.p, U))[-1])
    for eta in (1e-17, 1e-300):
        assert round_contraction(pb, eta=eta, local_steps=2, server_lr=0.5) == pytest.approx(0.5 * eta * first,
                                                                                              rel=1e-8)
    # and the exact value at a moderate η (dense matrix powers)
    eta, eye = 0.05, np.eye(pb.d)
    B = sum(p * (eye - np.linalg.matrix_power(eye - eta * Uk, 3)) for p, Uk in zip(pb.p, U, strict=True))
    assert round_contraction(pb, eta=eta, local_steps=3) == pytest.approx(np.linalg.eigvalsh(B)[-1], rel=1e-8)


def test_kappa_of_quadratic_clients_at_a_tiny_eta():
    pb = paper_table_problem()
    u = pb.U[:, 0, 0]
    assert round_contraction(pb, eta=1e-20, local_steps=5) == pytest.approx(1e-20 * 5 * float(pb.p @ u), rel=1e-12)


def test_a_zero_round_operator_has_kappa_zero():
    """Zero curvature: Lanczos is not handed the zero operator (ARPACK: "starting vector is zero"), λ_max = 0; the
    smallest η there is gives a κ, not an error."""
    assert _top_eigenvalue(lambda v: 0.0 * v, 3) == 0.0
    assert _top_eigenvalue(lambda v: np.array([2.0, 1.0, 0.0]) * v, 3) == pytest.approx(2.0, rel=1e-10)
    kappa = round_contraction(load_problem(GRUNFELD), eta=5e-324, local_steps=1)
    assert 0.0 <= kappa < 1e-320


@pytest.mark.slow
def test_map_at_a_tiny_eta_gives_every_cell_a_kappa(tmp_path):
    code, out, err = run(["map", "--problem", GRUNFELD, "--eta", "1e-17", "--local-steps", "2", "--rounds", "2",
                          "--seed", "0", "--out", tmp_path / "m", "--json"])
    assert code == 0, err
    cell = json.loads(out)["cells"][0]
    assert cell["kappa"] == pytest.approx(1e-17 * 2 * 1.5, rel=0.5) and "kappa_note" not in cell


# ------------------------------------------------------------------------------------------------ E‖X‖
@pytest.mark.parametrize("scale", [1e-20, 1.0, 1e20])
def test_the_gaussian_norm_mean_is_scale_free(scale):
    """E‖cX‖ = c·E‖X‖, without a quadrature warning at any scale (at 1e-20 QUADPACK called the integral divergent)."""
    m, C = np.array([0.3, -0.1]), np.array([[1.0, 0.2], [0.2, 0.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", scipy.integrate.IntegrationWarning)
        got = gaussian_norm_mean(scale * m, scale**2 * C)
        assert gaussian_norm_mean(np.zeros(1), np.array([[scale**2]])) == pytest.approx(scale * np.sqrt(2 / np.pi),
                                                                                         rel=1e-9)
    assert got == pytest.approx(scale * gaussian_norm_mean(m, C), rel=1e-9)
