"""Seeded generators of heterogeneous quadratic problems, and the reference problems of seed 002."""

from __future__ import annotations

import numpy as np

from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.quadratic.problem import QuadraticProblem


def _random_spd(rng: np.random.Generator, d: int, lam_min: float, lam_max: float, diagonal: bool):
    lam = np.exp(rng.uniform(np.log(lam_min), np.log(lam_max), size=d))
    if diagonal:
        return np.diag(lam)
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (V * lam) @ V.T


def random_quadratic_problem(
    Q: int,
    d: int,
    *,
    seed: int,
    spread: float = 1.0,
    curvature: tuple[float, float] = (0.5, 4.0),
    noise: tuple[float, float] = (0.2, 2.0),
    diagonal: bool = False,
    weights: str = "uniform",
) -> QuadraticProblem:
    """A heterogeneous quadratic problem drawn from a seeded ``numpy.random.Generator``.

    Parameters
    ----------
    Q, d : int
        Number of clients and dimension.
    seed : int
        Seed of the generator (the same seed gives the same problem).
    spread : float
        Standard deviation of the client optima ``a_k ~ N(0, spread² I)`` (statistical heterogeneity).
    curvature : (float, float)
        Range of the eigenvalues of ``U_k`` (log-uniform); random eigenvectors unless ``diagonal``.
    noise : (float, float)
        Range of the eigenvalues of ``Σ_k`` (log-uniform); random eigenvectors unless ``diagonal``.
    diagonal : bool
        Diagonal ``U_k`` and ``Σ_k``.
    weights : {"uniform", "random"}
        Uniform ``p_k = 1/Q`` or Dirichlet(1)-distributed weights.
    """
    Q = positive_int("Q", Q)
    d = positive_int("d", d)
    positive_float("spread", spread, allow_zero=True)
    for name, rng_ in (("curvature", curvature), ("noise", noise)):
        lo, hi = (positive_float(f"{name}[0]", rng_[0]), positive_float(f"{name}[1]", rng_[1]))
        if lo > hi:
            raise FedsdeInputError(f"{name}={rng_!r}: lower bound must not exceed upper bound")
    choice("weights", weights, ("uniform", "random"))
    rng = np.random.default_rng(seed)
    U = np.stack([_random_spd(rng, d, *curvature, diagonal) for _ in range(Q)])
    Sigma = np.stack([_random_spd(rng, d, *noise, diagonal) for _ in range(Q)])
    a = spread * rng.standard_normal((Q, d))
    p = rng.dirichlet(np.ones(Q)) if weights == "random" else None
    return QuadraticProblem.from_arrays(U, a, Sigma, p, name=f"random(Q={Q}, d={d}, seed={seed})")


def paper_table_problem() -> QuadraticProblem:
    """The scalar problem of the stationary table (reference/seed-fedsde.md §3c).

    Q = 3, U = [1, 2, 4], a = [−1, 0, 2], Σ = [0.5, 1, 2], uniform p; w* = 1 and Σ p_k a_k = 1/3.
    """
    return QuadraticProblem.from_arrays(
        [1.0, 2.0, 4.0], [-1.0, 0.0, 2.0], [0.5, 1.0, 2.0], None, name="seed-002 stationary table"
    )
