"""The documented problems the claims registry checks on (each with its source and parameters).

* :func:`sec4_quadratic` — the clients of seed 002's stationary table with curvatures divided by 4
  (``U = [0.25, 0.5, 1]``, ``a = [−1, 0, 2]``, ``Σ = [0.5, 1, 2]``, uniform ``p``; ``w* = 1``) so that the
  schedules of Cor. 4.6 (``η(0) = 1``) keep ``η λ_max(U_k) <= 1``.
* :func:`thm49_counterexample` — identical isotropic clients ``F_k = ½‖w‖²`` with small noise, started at
  distance 10 from ``w* = 0``: where the printed first term of Thm 4.9 (``‖w₀ − w*‖/(τφ)``, reference
  erratum 7 (i)) is smaller than the optimality gap the algorithm actually has.
* :func:`synthetic_logistic` — federated logistic regression in ``d = 2`` (no intercept, no ridge) with ``Q``
  clients of ``N_k`` samples: features ``x ~ N(μ_k, I)`` with client-specific means (``kind="noniid"``) or a
  common mean (``"iid"``), labels ``y ~ Bernoulli(σ(xᵀw_true))``, ``w_true = (1.3, −2.5)`` (the setting of
  reference/seed-fedsde.md §3f–§3g).
* :func:`fednova_quadratic` — seed 003's quadratic case study (``F_i = ½ λ‖x − e_i‖²``), five clients with
  ``e = (1,0), (0,1), (−1,0), (0,−1), (½,½)``, uniform ``p``, ``x* = (0.1, 0.1)`` (reference/seed-fednova.md §2.6).
"""

from __future__ import annotations

import numpy as np

from fedsde.problems.quadratic.problem import QuadraticProblem

#: the client means of the non-IID synthetic logistic problem (cycled when Q > 3)
_LOGISTIC_MEANS = np.array([[-1.0, 0.5], [0.5, 1.0], [1.0, -1.0]])
W_TRUE = np.array([1.3, -2.5])


def sec4_quadratic() -> QuadraticProblem:
    """Seed 002's table clients with ``U/4``: ``U = [0.25, 0.5, 1]``, ``a = [−1, 0, 2]``, ``Σ = [0.5, 1, 2]``."""
    return QuadraticProblem.from_arrays([0.25, 0.5, 1.0], [-1.0, 0.0, 2.0], [0.5, 1.0, 2.0],
                                        name="seed-002 table clients, U/4")


def thm49_counterexample() -> QuadraticProblem:
    """Two identical clients ``F_k = ½‖w‖²`` in ``d = 2`` with noise ``Σ_k = 0.01·I`` (``w* = 0``)."""
    return QuadraticProblem.from_arrays(np.ones((2, 2)), np.zeros((2, 2)), np.full((2, 2), 0.01),
                                        name="identical isotropic clients (Thm 4.9 counterexample)")


THM49_W0 = np.array([10.0, 10.0]) / np.sqrt(2.0)


def fednova_quadratic(curvature: float = 1.0, noise: float = 0.5) -> QuadraticProblem:
    """Seed 003's case study: ``F_i = ½ λ‖x − e_i‖²`` for five clients, ``Σ_i = noise·I``, uniform ``p``."""
    e = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [0.5, 0.5]])
    return QuadraticProblem.from_arrays(np.full((5, 2), curvature), e, np.full((5, 2), noise),
                                        name=f"seed-003 quadratic case study (λ={curvature:g})")


def synthetic_logistic(Q: int = 3, n_per_client: int = 50, *, kind: str = "noniid", seed: int = 0,
                       replicate: int = 1):
    """Federated logistic regression on synthetic 2-d data (see the module docstring).

    ``replicate`` repeats the ``Q`` clients that many times (``Q·replicate`` clients with the same data), which
    is how the CLT checks let the number of clients grow with fixed client distributions.
    """
    from fedsde.problems.classification.problem import ClassificationProblem

    rng = np.random.default_rng(seed)
    Xs, ys = [], []
    for k in range(Q):
        mean = _LOGISTIC_MEANS[k % 3] if kind == "noniid" else np.zeros(2)
        X = mean + rng.standard_normal((n_per_client, 2))
        y = (rng.uniform(size=n_per_client) < 1.0 / (1.0 + np.exp(-X @ W_TRUE))).astype(np.int64)
        Xs.append(X)
        ys.append(y)
    Xs, ys = Xs * replicate, ys * replicate
    return ClassificationProblem.from_clients(Xs, ys, model="logistic", n_classes=2, l2=0.0, fit_intercept=False,
                                              name=f"synthetic logistic d=2 ({kind}, Q={Q * replicate})",
                                              info={"kind": kind, "seed": seed, "n_per_client": n_per_client})
