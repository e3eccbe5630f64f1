"""torchsde modules: Euler–Maruyama of eq. (2) is eq. (1); the Monte-Carlo SDE's estimator; time-varying rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import assert_within_se

from fedsde.clients import data_oracles
from fedsde.clients.streams import BLOCK
from fedsde.errors import FedsdeInputError
from fedsde.exact import round_law
from fedsde.problems import QuadraticProblem, paper_table_problem, random_quadratic_problem
from fedsde.problems.classification import synthetic
from fedsde.sde import quadratic_sde_coefficients
from fedsde.sde.brownian import GridBrownian
from fedsde.sde.coefficients import psd_sqrt
from fedsde.sde.integrate import sdeint_rounds
from fedsde.sde.models import FedAvgSDE, QuadraticSDE


def test_one_euler_step_of_eq2_is_one_round_of_eq1():
    """dw = η₀M dt + η₀√h V^{1/2} dB with step h: w + sM + s V^{1/2} z, the Gaussianised chain (1), same z."""
    pb = random_quadratic_problem(4, 3, seed=2)
    eta, E, s, h = 0.05, 4, 0.7, 0.2
    law = round_law(pb, eta, E, s)
    sde = QuadraticSDE(pb, eta, E, s, h, "corrected")
    R = 300
    y0 = torch.as_tensor(np.random.default_rng(0).normal(size=(R, 3)))
    bm = GridBrownian(0.0, h, (R, 3), seed=4)
    ys = sdeint_rounds(sde, y0, bm, h=h, rounds=3)
    L = psd_sqrt(law.noise_cov)
    w = y0.numpy()
    for n in range(3):
        z = bm.increment(n).numpy() / math.sqrt(h)  # the same standard normals
        M = -(w - law.c) @ law.B.T  # M(w) = E Â = −B(w − c)
        w = w + s * M + s * z @ L.T  # eq. (1): w + s M + s N(0, V)
        np.testing.assert_allclose(ys[n + 1].numpy(), w, rtol=1e-12, atol=1e-13)


def test_quadratic_module_contract():
    pb = random_quadratic_problem(3, 2, seed=1)
    sde = QuadraticSDE(pb, 0.05, 3, 0.5, 0.1, "paper")
    lin = quadratic_sde_coefficients(pb, 0.05, 3, 0.5, 0.1, "paper")
    y = torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    v = torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(sde.f(0.0, y).numpy(), lin.drift(y.numpy()), rtol=1e-12)
    g = sde.g(0.0, y)
    assert g.shape == (7, 2, 2) and g.stride(0) == 0  # an expanded view, not materialised
    np.testing.assert_allclose(torch.bmm(g, v.unsqueeze(-1)).squeeze(-1).numpy(), sde.g_prod(0.0, y, v).numpy())
    np.testing.assert_allclose(g[0].numpy() @ g[0].numpy().T, lin.diffusion_cov, rtol=1e-10, atol=1e-15)
    f2, gp = sde.f_and_g_prod(0.0, y, v)
    torch.testing.assert_close(f2, sde.f(0.0, y))
    torch.testing.assert_close(gp, sde.g_prod(0.0, y, v))
    assert sde.noise_type == "additive" and sde.sde_type == "ito" and sde.brownian_channels == 2


def test_diagonal_fast_path_matches_full():
    pb = random_quadratic_problem(3, 4, seed=2, diagonal=True)
    sde = QuadraticSDE(pb, 0.05, 3, 0.5, 0.1)
    lin = quadratic_sde_coefficients(pb, 0.05, 3, 0.5, 0.1)
    y = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    v = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(sde.f(0.0, y).numpy(), lin.drift(y.numpy()), rtol=1e-12)
    np.testing.assert_allclose(sde.g_prod(0.0, y, v).numpy(), v.numpy() @ lin.diffusion_factor().T, rtol=1e-12)


def test_time_varying_rates():
    pb = paper_table_problem()
    h = 0.1
    etas = np.array([0.05, 0.02, 0.01])
    sde = QuadraticSDE(pb, etas, 5, lambda t: h / (1 + t), h, "corrected")
    for n, eta in enumerate(etas):
        for t in (n * h, n * h + 0.5 * h):
            lin = sde.coefficients(t)
            assert lin.eta == eta and lin.server_lr == pytest.approx(h / (1 + t))
            ref = quadratic_sde_coefficients(pb, eta, 5, h / (1 + t), h)
            np.testing.assert_allclose(lin.A, ref.A)
    with pytest.raises(FedsdeInputError, match="per-round schedule"):
        sde.coefficients(3 * h)
    with pytest.raises(FedsdeInputError, match="h: required"):
        QuadraticSDE(pb, etas, 5)
    with pytest.raises(FedsdeInputError, match=r"eta\(t="):
        QuadraticSDE(pb, lambda t: -1.0, 5, h=0.1)


def _log_cosh_factory(centres, sigma):
    """A non-quadratic client loss F_k(w) = Σ_i log cosh(w_i − a_ki) with N(0, σ²) gradient noise."""
    a = torch.as_tensor(centres)

    class Oracle:
        def __init__(self, problem, nblocks, device, dtype):
            self.a = a.to(device=device, dtype=dtype)[None, :, None, :]
            self.z = torch.empty((nblocks, problem.Q, BLOCK, problem.d), dtype=dtype, device=device)

        def sample(self, x, streams):
            g = torch.tanh(x - self.a)
            if sigma:
                g = g + sigma * streams.normal_(self.z)
            return g

    return Oracle


class _Problem:
    def __init__(self, centres):
        self.a = np.asarray(centres, dtype=np.float64)
        self.Q, self.d = self.a.shape
        self.p = np.full(self.Q, 1.0 / self.Q)


def test_general_sde_accepts_other_losses_through_the_oracle_protocol():
    centres = [[-1.0, 0.5], [2.0, 0.0], [0.5, -1.5]]
    pb = _Problem(centres)
    eta, E, s, h = 0.1, 3, 0.5, 0.2
    sde = FedAvgSDE(pb, eta, E, s, h, inner_samples=4, seed=0, oracle_factory=_log_cosh_factory(centres, 0.0))
    y = torch.as_tensor(np.random.default_rng(1).normal(size=(10, 2)))
    # no gradient noise: every rollout is the deterministic round, D = 0, f = η₀ Σ_k p_k (x_k^E − w)
    x = np.repeat(y.numpy()[:, None, :], 3, axis=1)
    for _ in range(E):
        x = x - eta * np.tanh(x - np.asarray(centres)[None])
    disp = (x - y.numpy()[:, None, :]).mean(1)
    np.testing.assert_allclose(sde.f(0.0, y).numpy(), (s / h) * disp, rtol=1e-12)
    assert torch.count_nonzero(sde.g(0.0, y)) == 0 and sde.g(0.0, y).shape == (10, 2, 4)
    with pytest.raises(FedsdeInputError, match="oracle_factory"):
        FedAvgSDE(pb, eta, E, s, h, seed=0)


@pytest.mark.parametrize(("estimator", "inflation"), [("compensated", 1.0), ("unbiased", 1.5)])
def test_general_sde_step_has_the_moments_of_eq1(estimator, inflation):
    """One Euler step of size h from a fixed w: mean w + sM and covariance s²V (compensated) or s²V(1 + 1/S)."""
    pb = paper_table_problem()
    eta, E, s, h, S = 0.05, 5, 1.0, 0.05, 2
    law = round_law(pb, eta, E, s)
    R = 8192
    w = 0.3
    sde = FedAvgSDE(pb, eta, E, s, h, inner_samples=S, estimator=estimator, seed=5)
    y0 = torch.full((R, 1), w, dtype=torch.float64)
    bm = GridBrownian(0.0, h, (R, S), seed=6)
    y1 = sdeint_rounds(sde, y0, bm, h=h, rounds=1)[-1].numpy()[:, 0]
    mean = w - s * law.B[0, 0] * (w - law.c[0])
    var = inflation * s * s * law.noise_cov[0, 0]
    se_m = np.sqrt(var / R)
    dev2 = (y1 - mean) ** 2
    se_v = dev2.std(ddof=1) / np.sqrt(R)
    assert abs(y1.mean() - mean) < 5 * se_m
    assert abs(dev2.mean() - var) < 5 * se_v


def test_general_sde_drift_estimate_is_unbiased():
    pb = random_quadratic_problem(3, 2, seed=4)
    eta, E, s, h = 0.05, 4, 0.5, 0.1
    law = round_law(pb, eta, E, s)
    sde = FedAvgSDE(pb, eta, E, s, h, inner_samples=64, seed=1)
    w = np.array([0.4, -0.2])
    y = torch.as_tensor(np.tile(w, (256, 1)))
    mean, D = sde.moments(0.0, y)
    M = -law.B @ (w - law.c)
    est = mean.numpy()
    se = np.sqrt(np.diag(law.noise_cov) / (64 * 256))
    assert np.all(np.abs(est.mean(0) - M) < 5 * se)
    # compensated: E[D Dᵀ] = (1 − 1/S) V.  The paths' D Dᵀ are independent, so the s.e. of their mean is their sd/√R.
    Vr = torch.einsum("rsi,rsj->rij", D, D).numpy()
    se_V = Vr.std(0, ddof=1) / np.sqrt(Vr.shape[0])
    assert_within_se(Vr.mean(0), (1 - 1 / 64) * law.noise_cov, se_V, what="D Dᵀ",
                     resolution=0.1 * np.abs(law.noise_cov).max())
    # the cache: the same (t, y) does not redraw
    m2, _ = sde.moments(0.0, y)
    assert m2 is mean


def test_general_sde_heterogeneous_steps_and_schedules():
    pb = paper_table_problem()
    sde = FedAvgSDE(pb, np.array([0.05, 0.01]), [1, 2, 3], [0.5, 0.25], h=0.1, inner_samples=128, seed=2)
    w = 0.3
    y = torch.full((128, 1), w, dtype=torch.float64)
    for n, (eta, s) in enumerate([(0.05, 0.5), (0.01, 0.25)]):
        law = round_law(pb, eta, [1, 2, 3], s)
        f = sde.f(n * 0.1, y).numpy()[:, 0]
        target = (s / 0.1) * (-law.B[0, 0] * (w - law.c[0]))
        se = (s / 0.1) * np.sqrt(law.noise_cov[0, 0] / (128 * 128))
        assert abs(f.mean() - target) < 5 * se


def test_general_sde_input_validation():
    pb = paper_table_problem()
    with pytest.raises(FedsdeInputError, match="estimator"):
        FedAvgSDE(pb, 0.05, 5, seed=0, estimator="biased")
    with pytest.raises(FedsdeInputError, match="inner_samples"):
        FedAvgSDE(pb, 0.05, 5, seed=0, inner_samples=1, estimator="unbiased")
    with pytest.raises(FedsdeInputError, match="seed"):
        FedAvgSDE(pb, 0.05, 5, seed=-1)
    with pytest.raises(FedsdeInputError, match="device"):
        QuadraticSDE(pb, 0.05, 5, device="nonexistent")


def test_problem_argument_must_be_quadratic_for_linear_variants():
    with pytest.raises(FedsdeInputError, match="variant"):
        QuadraticSDE(QuadraticProblem.from_arrays([1.0], [0.0], [1.0]), 0.05, 5, variant="general")


def test_general_sde_on_a_classification_problem():
    """The gradient-oracle protocol carries over to real-data losses (logistic/softmax regression)."""
    import functools

    pb = synthetic.synthetic_problem(0.5, 0.5, seed=0, n_clients=3, dim=4, n_classes=3, max_samples=40)
    eta, E, s, h = 0.1, 3, 0.5, 0.1
    # exact client gradients: every rollout is the deterministic round, f = η₀ Σ_k p_k (x_k^E − w)
    sde = FedAvgSDE(pb, eta, E, s, h, inner_samples=2, seed=0, oracle_factory=data_oracles.FullGradientOracle)
    w = np.random.default_rng(0).normal(scale=0.1, size=(5, pb.d))
    x = np.repeat(w[:, None, :], pb.Q, axis=1)
    for _ in range(E):
        x = x - eta * np.stack([pb.client_grad(x[:, k])[:, k] for k in range(pb.Q)], axis=1)
    disp = np.einsum("q,rqd->rd", pb.p, x - w[:, None, :])
    np.testing.assert_allclose(sde.f(0.0, torch.as_tensor(w)).numpy(), (s / h) * disp, rtol=1e-9, atol=1e-12)
    # minibatch noise: a short run stays finite and has spread
    factory = functools.partial(data_oracles.GaussianMinibatchOracle, batch_size=4)
    from fedsde.sde.integrate import simulate_sde

    res = simulate_sde(pb, variant="general", eta=eta, local_steps=E, server_lr=s, h=h, rounds=5, paths=64, seed=1,
                       inner_samples=4, oracle_factory=factory)
    assert np.all(np.isfinite(res.final)) and res.final.std(0).max() > 0
