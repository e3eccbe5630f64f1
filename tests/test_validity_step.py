"""The step measure κ = s·λ_max(B) (fedsde.validity.step) against dense computations, and its reproducibility."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fedsde._tolerances import LANCZOS_RTOL
from fedsde.problems import paper_table_problem
from fedsde.problems.data_files import data_problem_from_dict
from fedsde.validity.step import approximate_optimum, round_contraction

CANCER = {"kind": "classification", "dataset": "breast_cancer", "model": "logistic", "clients": 3,
          "partition": "iid", "batch_size": 8, "seed": 0}


def test_quadratic_clients_closed_form():
    """Scalar clients: κ = s·Σ_k p_k [1 − (1 − η u_k)^E]."""
    pb = paper_table_problem()
    eta, E, s = 0.05, 5, 0.7
    u = pb.U[:, 0, 0]
    expected = s * float(np.sum(pb.p * (1.0 - (1.0 - eta * u) ** E)))
    assert round_contraction(pb, eta=eta, local_steps=E, server_lr=s) == pytest.approx(expected, rel=1e-13)


def test_data_problem_matches_the_dense_round_matrix():
    """Lanczos on the matrix-free round map against the largest eigenvalue of the dense B at the same point."""
    pb = data_problem_from_dict(CANCER)
    eta, steps, s = 0.1, [2, 3, 4], 0.5
    w = approximate_optimum(pb)
    H = np.asarray(pb.client_hessian(w))
    eye = np.eye(pb.d)
    B = sum(p * (eye - np.linalg.matrix_power(eye - eta * Hk, e)) for p, Hk, e in zip(pb.p, H, steps, strict=True))
    dense = s * float(np.linalg.eigvalsh(0.5 * (B + B.T))[-1])
    got = round_contraction(pb, eta=eta, local_steps=steps, server_lr=s, at=w)
    assert got == pytest.approx(dense, rel=10 * LANCZOS_RTOL)
    assert round_contraction(pb, eta=eta, local_steps=steps, server_lr=s) == pytest.approx(dense, rel=1e-6)


def test_the_same_number_every_time():
    """A fixed Lanczos start: the same κ, bit for bit, within a process and in a fresh one."""
    pb = data_problem_from_dict(CANCER)
    first = round_contraction(pb, eta=0.1, local_steps=2, server_lr=1.0)
    assert round_contraction(pb, eta=0.1, local_steps=2, server_lr=1.0) == first
    code = ("from fedsde.problems.data_files import data_problem_from_dict; "
            "from fedsde.validity.step import round_contraction; "
            f"print(repr(round_contraction(data_problem_from_dict({CANCER!r}), eta=0.1, local_steps=2, "
            "server_lr=1.0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) == first


def test_a_networks_kappa_reads_both_ends_of_the_round_matrix():
    """A small non-convex network (d = 27) at a random point: κ = s·max|λ(B)| against the dense B built from its
    Hessian-vector products, λ_max to Lanczos' tolerance and the lower end (30 steps ≥ d: exact) to rounding."""
    import torch

    from fedsde.problems.module import module_problem
    from fedsde.validity.step import contraction

    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((60, 4)), rng.integers(0, 3, 60)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 3))
    pb = module_problem(net, x, y, np.repeat(np.arange(3), 20), batch_size=4)
    w = rng.standard_normal(pb.d)
    eta, E, s = 0.5, 3, 0.7
    eye = np.eye(pb.d)
    H = np.stack([pb.client_hvp(w, np.broadcast_to(e, (pb.Q, pb.d))) for e in eye], axis=-1)  # (Q, d, d)
    B = sum(p * (eye - np.linalg.matrix_power(eye - eta * 0.5 * (Hk + Hk.T), E)) for p, Hk in zip(pb.p, H,
                                                                                                  strict=True))
    lam = np.linalg.eigvalsh(0.5 * (B + B.T))
    c = contraction(pb, eta=eta, local_steps=E, server_lr=s, at=w)
    assert lam[0] < 0 < lam[-1]  # the point has negative curvature: both ends matter here
    assert c.lam_max == pytest.approx(lam[-1], rel=10 * LANCZOS_RTOL)
    assert c.lam_min == pytest.approx(lam[0], rel=1e-8, abs=1e-10)
    assert c.kappa == pytest.approx(s * max(lam[-1], -lam[0]), rel=10 * LANCZOS_RTOL)
    assert "non-convex" in c.note and ("λ_min(B)" in c.note) == (lam[0] < -1e-3 * lam[-1])
