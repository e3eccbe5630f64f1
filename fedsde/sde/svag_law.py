"""The exact law of the SVAG chain on quadratic clients (:func:`fedsde.sde.svag.svag_chain`, Li, Malladi & Arora
2021): one step's round law and the chain's transient moments at the base rounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fedsde._validate import positive_float, positive_int, record_rounds, start_point
from fedsde.problems.quadratic.problem import QuadraticProblem


def svag_round_law(problem: QuadraticProblem, eta: float, local_steps, server_lr: float, ell: int):
    """Exact law of one SVAG step on quadratic clients, as a :class:`~fedsde.exact.round_law.RoundLaw`.

    The mean map is FedAvg's at server step ``s/ℓ`` (``c₁ + c₂ = 1``); the two rollouts' noises are independent,
    so the noise covariance is ``(c₁² + c₂²) Cov ε = ℓ Cov ε`` and the server noise ``(s/ℓ)² ℓ Cov ε``.
    """
    from fedsde.exact.round_law import round_law

    ell = positive_int("ell", ell)
    law = round_law(problem, eta, local_steps, positive_float("server_lr", server_lr) / ell, warn=False)
    return dataclasses.replace(law, noise_cov=ell * law.noise_cov)


def svag_transient_moments(problem: QuadraticProblem, eta: float, local_steps, rounds: int, server_lr: float,
                           ell: int, *, w0=None, record: Sequence[int] | None = None):
    """Exact mean and covariance of the SVAG chain at base rounds (every ``ℓ`` steps), as
    :class:`~fedsde.exact.moments.Moments`."""
    from fedsde.exact.moments import Moments

    rounds = positive_int("rounds", rounds, minimum=0)
    law = svag_round_law(problem, eta, local_steps, server_lr, ell)
    keep = record_rounds("record", record, rounds)
    m = start_point(w0, problem.d)
    P = np.zeros((problem.d, problem.d))
    idx = {int(k): i for i, k in enumerate(keep)}
    means, covs = np.empty((keep.size, problem.d)), np.empty((keep.size, problem.d, problem.d))
    for n in range(rounds + 1):
        if n in idx:
            means[idx[n]], covs[idx[n]] = m, P
        if n < rounds:
            for _ in range(ell):
                m, P = law.step(m, P)
    return Moments(rounds=keep, mean=means, cov=covs)
