"""The local-training loop (fedsde.clients.local): plain SGD against a hand-written step, the stop mask, the solver
path against the plain one and against the accumulation norms, the oracle protocol, and FedAvg with one client."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsde.clients.local import RoundBatches, run_local_steps, step_limits
from fedsde.clients.oracles import GaussianQuadraticOracle, GradientOracle, OracleBase
from fedsde.clients.solvers import LocalSolver
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError
from fedsde.problems import random_quadratic_problem
from fedsde.sim import simulate

D = torch.float64
B = 16  # replicates per block


def _setup(Q: int = 3, d: int = 2, nb: int = 2, seed: int = 0):
    pb = random_quadratic_problem(Q, d, seed=seed)
    oracle = GaussianQuadraticOracle(pb, nb, "cpu", D)
    w = torch.linspace(-1.0, 1.0, nb * B * d, dtype=D).view(nb, 1, B, d)
    return pb, oracle, w


def _streams(seed: int = 7, nb: int = 2) -> ReplicateStreams:
    return ReplicateStreams(seed, 0, nb, "cpu", 0, B)


class ConstantOracle:
    """``g ≡ c`` for every client and replicate; only ``sample`` (the protocol's other members take defaults)."""

    def __init__(self, c: torch.Tensor):
        self.c = c

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        return self.c.expand_as(x).clone()


def test_plain_steps_follow_the_quadratic_sgd_step():
    # x ← x − η (U_k (x − a_k) + L_k z), z drawn from the same streams in the same order
    pb, oracle, w = _setup()
    eta, steps = 0.1, 4
    x = w.expand(2, pb.Q, B, pb.d).clone()
    run_local_steps(x=x, oracle=oracle, streams=_streams(), eta=eta, n_steps=steps)
    U, a = torch.as_tensor(pb.U), torch.as_tensor(pb.a)
    L = torch.as_tensor(pb.noise_factors())
    ref = w.expand(2, pb.Q, B, pb.d).clone()
    st = _streams()
    for _ in range(steps):
        z = st.normal_(torch.empty_like(ref))
        g = torch.einsum("kij,nkbj->nkbi", U, ref - a[None, :, None]) + torch.einsum("kij,nkbj->nkbi", L, z)
        ref = ref - eta * g
    torch.testing.assert_close(x, ref, rtol=1e-12, atol=1e-12)


def test_a_masked_client_stops_after_its_local_steps():
    pb, oracle, w = _setup()
    tau = np.array([1, 3, 2])
    limits = step_limits(tau, device="cpu")
    assert limits.shape == (1, 3, 1, 1)
    masked = w.expand(2, 3, B, pb.d).clone()
    run_local_steps(x=masked, oracle=oracle, streams=_streams(), eta=0.1, n_steps=3, local_steps=limits)
    for k, t in enumerate(tau):  # every client ran exactly its own τ_k steps of the same draws
        alone = w.expand(2, 3, B, pb.d).clone()
        run_local_steps(x=alone, oracle=oracle, streams=_streams(), eta=0.1, n_steps=int(t))
        assert torch.equal(masked[:, k], alone[:, k])
    assert step_limits(np.array([4, 4, 4]), device="cpu") is None


@pytest.mark.parametrize("route", ["solver", "first_grad", "zero_correction", "tiny_momentum"])
def test_solver_path_with_zero_momentum_and_prox_equals_the_plain_path(route):
    pb, oracle, w = _setup()
    limits = step_limits(np.array([2, 4, 3]), device="cpu")
    plain = w.expand(2, 3, B, pb.d).clone()
    run_local_steps(x=plain, oracle=oracle, streams=_streams(), eta=0.05, n_steps=4, local_steps=limits)
    other = w.expand(2, 3, B, pb.d).clone()
    kw = {
        "solver": {"solver": LocalSolver(momentum=0.0, prox=0.0)},
        "first_grad": {"solver": LocalSolver(), "keep_first_grad": True},
        "zero_correction": {"correction": torch.zeros((2, 3, B, pb.d), dtype=D)},
        # ρ = 1e-300 leaves every step equal to its gradient bit for bit, through the momentum branch
        "tiny_momentum": {"solver": LocalSolver(momentum=1e-300), "anchor": w},
    }[route]
    first = run_local_steps(x=other, oracle=oracle, streams=_streams(), eta=0.05, n_steps=4, local_steps=limits,
                            **kw)
    assert torch.equal(plain, other)
    if route == "first_grad":
        x0 = w.expand(2, 3, B, pb.d).clone()
        torch.testing.assert_close(first, oracle.sample(x0, _streams()), rtol=0, atol=0)
    else:
        assert first is None


@pytest.mark.parametrize(("prox_in_buffer", "worked"), [(False, 15.34), (True, 8.41)])
def test_solver_displacement_is_the_accumulation_norm_times_a_constant_gradient(prox_in_buffer, worked):
    # constant gradient c: Δ = −η ‖a‖₁ c (fedsde.clients.solvers, worked numbers τ = 7, η = 0.1, μ = 2, ρ = 0.9)
    solver = LocalSolver(momentum=0.9, prox=2.0, prox_in_buffer=prox_in_buffer)
    eta, d = 0.1, 3
    c = torch.tensor([1.0, -2.0, 0.5], dtype=D)
    w = torch.zeros((1, 1, B, d), dtype=D)
    x = w.expand(1, 2, B, d).clone()
    tau = np.array([7, 4])
    run_local_steps(x=x, oracle=ConstantOracle(c), streams=_streams(nb=1), eta=eta, n_steps=7,
                    local_steps=step_limits(tau, device="cpu"), solver=solver, anchor=w)
    table = solver.norm_table(7, eta)
    assert round(float(table[7]), 2) == worked
    for k, t in enumerate(tau):
        expected = (-eta * table[t] * c).expand(B, d)
        torch.testing.assert_close(x[0, k], expected, rtol=1e-12, atol=1e-14)


def test_momentum_without_prox_follows_the_closed_form():
    # ‖a‖₁ = [τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 − ρ) for heavy-ball momentum (fedsde.clients.solvers)
    rho, tau, eta = 0.6, 5, 0.2
    c = torch.tensor([0.3, 1.0], dtype=D)
    x = torch.zeros((1, 1, B, 2), dtype=D)
    run_local_steps(x=x, oracle=ConstantOracle(c), streams=_streams(nb=1), eta=eta, n_steps=tau,
                    solver=LocalSolver(momentum=rho))
    norm = (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    torch.testing.assert_close(x[0, 0], (-eta * norm * c).expand(B, 2), rtol=1e-12, atol=1e-14)


def test_prox_needs_the_anchor():
    x = torch.zeros((1, 1, B, 2), dtype=D)
    with pytest.raises(FedsdeInputError, match="anchor"):
        run_local_steps(x=x, oracle=ConstantOracle(torch.ones(2, dtype=D)), streams=_streams(nb=1), eta=0.1,
                        n_steps=2, solver=LocalSolver(prox=1.0))


def test_begin_round_is_called_once_with_the_three_keywords():
    calls = []

    class Recording(OracleBase):
        def begin_round(self, batch=None, max_batch=None, clients=None):
            calls.append((batch, max_batch, clients))

        def sample(self, x, streams):
            return torch.zeros_like(x)

    oracle: GradientOracle = Recording()
    assert oracle.participants_only is False
    x = torch.zeros((1, 2, B, 2), dtype=D)
    batch = torch.full((B, 2), 3)
    clients = torch.zeros((1, 2, B), dtype=torch.long)
    run_local_steps(x=x, oracle=oracle, streams=_streams(nb=1), eta=0.1, n_steps=3, batch=batch, max_batch=3,
                    clients=clients)
    run_local_steps(x=x, oracle=oracle, streams=_streams(nb=1), eta=0.1, n_steps=1)
    run_local_steps(x=x, oracle=oracle, streams=_streams(nb=1), eta=0.1, n_steps=3,
                    round_batches=RoundBatches(batch, 3, clients))
    assert len(calls) == 3
    assert calls[0][0] is batch and calls[0][1] == 3 and calls[0][2] is clients
    assert calls[1] == (None, None, None)
    assert calls[2][0] is batch and calls[2][1] == 3 and calls[2][2] is clients  # the value, as the keywords


def test_local_solver_run_is_the_loop_with_keyword_only_options():
    pb, oracle, w = _setup()
    solver = LocalSolver(momentum=0.5, prox=0.3)
    a = w.expand(2, 3, B, pb.d).clone()
    b = w.expand(2, 3, B, pb.d).clone()
    solver.run(a, anchor=w, oracle=oracle, streams=_streams(), eta=0.1, n_steps=3)
    run_local_steps(x=b, oracle=oracle, streams=_streams(), eta=0.1, n_steps=3, solver=solver, anchor=w)
    assert torch.equal(a, b)
    with pytest.raises(TypeError):
        solver.run(a, w, oracle, _streams(), 0.1, 3, None, None)  # the correction is keyword-only


@pytest.mark.parametrize("steps", [1, 3])
def test_fedavg_with_one_client_and_server_lr_one_is_local_sgd(steps):
    # one client, p = 1, s = 1: w_{n+1} = w_n + (x^{(E)} − w_n), i.e. rounds·E local SGD steps of the same draws
    pb = random_quadratic_problem(1, 3, seed=4)
    rounds, R, eta = 5, 24, 0.05
    res = simulate(pb, eta=eta, local_steps=steps, rounds=rounds, replicates=R, seed=9, record=[rounds])
    oracle = GaussianQuadraticOracle(pb, 1, "cpu", D)
    x = torch.zeros((1, 1, R, pb.d), dtype=D)
    run_local_steps(x=x, oracle=oracle, streams=ReplicateStreams(9, 0, 1, "cpu", 0, R), eta=eta,
                    n_steps=rounds * steps)
    np.testing.assert_allclose(res.final, x[0, 0].numpy(), rtol=1e-12, atol=1e-14)
