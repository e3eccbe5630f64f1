"""Exact first two moments of FedAvg on quadratic clients under client sampling, by enumerating the weightings.

One round with random aggregation weights ``ω`` (drawn afresh each round, independent of the state):

    w_{n+1} = A_ω w_n + b_ω + Σ_k ω_k ε_k,   A_ω = I − s Σ_k ω_k M_k,   b_ω = s Σ_k ω_k M_k a_k,
    Cov ε_k = η² Γ_k

(``M_k``, ``Γ_k`` from :func:`fedsde.exact.client_round_maps`; reference/seed-fedsde.md §3a; ``s`` the server
step).  With ``m`` the mean and ``M₂ = E[w wᵀ]`` the second moment,

    m' = E_ω[A_ω] m + E_ω[b_ω],
    M₂' = E_ω[A_ω M₂ A_ωᵀ + A_ω m b_ωᵀ + b_ω mᵀ A_ωᵀ + b_ω b_ωᵀ + s² Σ_k ω_k² η² Γ_k],

where ``E_ω`` is a finite sum over the support of ``ω`` (:func:`weighting_distribution`), so the moments are exact.
The weightings are those of :func:`fedsde.sim.simulate` (``participation=m``): ``"unbiased"`` (uniform
``m``-subsets ``S``, ``ω_k = p_k Q/m`` on ``S``), ``"renormalised"`` (``ω_k = p_k/Σ_{j∈S} p_j``) and
``"multinomial"`` (``m`` draws with replacement ``∝ p``, ``ω_k = count_k/m``; seed 003, Thm 3).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb, factorial

import numpy as np

from fedsde._validate import choice, client_steps, client_weights, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.exact import client_round_maps
from fedsde.params.sampling import WEIGHTINGS
from fedsde.problems.quadratic.problem import QuadraticProblem


def weighting_distribution(p, m: int, weighting: str) -> tuple[np.ndarray, np.ndarray]:
    """Support and probabilities of the aggregation weights ``ω`` of one round.

    ``p`` are the client weights, normalised here to sum to 1 (as every problem's ``p`` is). Returns
    ``(omega, prob)`` with ``omega`` of shape (K, Q) and ``prob`` (K,) summing to 1.
    """
    p = client_weights("p", p, noun="client weights")
    Q = p.size
    m = positive_int("participation", m)
    if m > Q and weighting != "multinomial":
        raise FedsdeInputError(f"participation={m}: cannot exceed the number of clients Q={Q}")
    choice("weighting", weighting, WEIGHTINGS)
    rows, probs = [], []
    if weighting == "multinomial":
        for counts in itertools.product(range(m + 1), repeat=Q):
            if sum(counts) != m:
                continue
            c = np.array(counts, dtype=np.float64)
            coef = factorial(m) / np.prod([factorial(int(k)) for k in counts])
            rows.append(c / m)
            probs.append(coef * float(np.prod(p**c)))
    else:
        for subset in itertools.combinations(range(Q), m):
            w = np.zeros(Q)
            idx = list(subset)
            w[idx] = p[idx] * Q / m if weighting == "unbiased" else p[idx] / p[idx].sum()
            rows.append(w)
            probs.append(1.0 / comb(Q, m))
    return np.array(rows), np.array(probs)


@dataclass(frozen=True)
class SampledMoments:
    """Exact mean ``(T+1, d)`` and covariance ``(T+1, d, d)`` of the server weights at rounds ``0 … T``."""

    mean: np.ndarray
    cov: np.ndarray


def sampled_moments(problem: QuadraticProblem, eta: float, local_steps, rounds: int, *, participation: int,
                    weighting: str = "multinomial", w0=None, server_lr: float = 1.0) -> SampledMoments:
    """Exact moments of ``rounds`` FedAvg rounds with client sampling (see the module docstring).

    Parameters
    ----------
    problem : QuadraticProblem
        ``Q`` clients in dimension ``d``; ``problem.p`` are the weights ``p_k``.
    eta : float
        Client learning rate.
    local_steps : int or array of int (Q,)
    rounds : int
    participation : int
        ``m``: clients (or draws, for ``"multinomial"``) per round.
    weighting : {"unbiased", "renormalised", "multinomial"}
    w0 : array (d,), optional
        Start (default 0).
    server_lr : float
        Server step ``s``.
    """
    rounds = positive_int("rounds", rounds)
    steps = client_steps("local_steps", local_steps, problem.Q)
    M, Gamma = client_round_maps(problem, eta, steps)
    omega, prob = weighting_distribution(problem.p, participation, weighting)
    d = problem.d
    eye = np.eye(d)
    A = eye[None] - server_lr * np.einsum("kq,qij->kij", omega, M)  # (K, d, d)
    b = server_lr * np.einsum("kq,qij,qj->ki", omega, M, problem.a)  # (K, d)
    noise = server_lr**2 * eta**2 * np.einsum("k,kq,qij->ij", prob, omega**2, Gamma)
    EA = np.einsum("k,kij->ij", prob, A)
    Eb = prob @ b
    EbbT = np.einsum("k,ki,kj->ij", prob, b, b)
    EAb = np.einsum("k,kij,kl->ijl", prob, A, b)  # E[A_ω ⊗ b_ω]: (d, d, d) with A_ij b_l
    m = np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64).reshape(d)
    M2 = np.outer(m, m)
    means, covs = [m], [np.zeros((d, d))]
    for _ in range(rounds):
        ASA = np.einsum("k,kij,jl,kml->im", prob, A, M2, A)
        cross = np.einsum("ijl,j->il", EAb, m)  # E[A_ω m b_ωᵀ]
        M2 = ASA + cross + cross.T + EbbT + noise
        m = EA @ m + Eb
        M2 = 0.5 * (M2 + M2.T)
        means.append(m)
        covs.append(M2 - np.outer(m, m))
    return SampledMoments(np.array(means), np.array(covs))


__all__ = ["WEIGHTINGS", "SampledMoments", "sampled_moments", "weighting_distribution"]
