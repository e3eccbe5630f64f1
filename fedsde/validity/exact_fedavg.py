"""FedAvg's side of the validity test without sampling, where the chain's moments close (``fedavg="exact"``).

On quadratic clients with constant Gaussian gradient noise the FedAvg chain is linear-Gaussian: its law at every
round is Gaussian with the mean and covariance of :func:`fedsde.exact.transient_moments` (seed 002, Assumption 6.1;
reference/seed-fedsde.md §3b), so every metric of :data:`~fedsde.validity.reference.GAUSSIAN_METRICS` has a closed
form (:func:`fedsde.validity.reference.gaussian_metric_means`).  On least-squares clients with real minibatch
noise the first two moments close (:func:`fedsde.exact.least_squares_transient_moments`), and the loss and
``‖∇F‖²`` are exact functions of them (:func:`fedsde.validity.reference.moment_metric_means`; ``‖w − w₀‖`` is not,
and is left out on both sides).  Against the SDE's exact law this compares two exact paths: no replicates, the gap
is the exact gap and its bounds collapse onto it (``lower = upper = gap``), and the outcome is "tracks" or "does not
track".  Every other problem needs the Monte-Carlo test (``fedavg="sampled"``).
"""

from __future__ import annotations

import numpy as np

from fedsde.errors import FedsdeInputError
from fedsde.params import unpack

#: values of ``fedavg``
FEDAVG_MODES = ("exact", "sampled")


def moments_close(problem) -> bool:
    """Whether FedAvg's moments on ``problem`` are exact: quadratic or least-squares regression clients."""
    from fedsde.problems.quadratic.problem import QuadraticProblem
    from fedsde.validity.reference import _is_least_squares

    return isinstance(problem, QuadraticProblem) or _is_least_squares(problem)


def resolve_fedavg(problem, fedavg: str | None, reference: str, ells) -> str:
    """``fedavg`` checked against ``problem``: the default is ``"exact"`` where the chain's moments close, the
    reference is the SDE's exact law and no SVAG chain (``ℓ > 1``) is asked for; else ``"sampled"``."""
    exact_ok = moments_close(problem)
    if fedavg is None:
        plain = ells is None or sorted(set(int(e) for e in ells)) == [1]
        return "exact" if exact_ok and reference == "exact" and plain else "sampled"
    if fedavg not in FEDAVG_MODES:
        raise FedsdeInputError(f"fedavg={fedavg!r}: must be one of {', '.join(FEDAVG_MODES)}")
    if fedavg == "exact":
        if not exact_ok:
            raise FedsdeInputError(f"fedavg='exact': FedAvg's moments do not close on a {type(problem).__name__} "
                                   "(only quadratic and least-squares regression clients); use fedavg='sampled'")
        if reference != "exact":
            raise FedsdeInputError("fedavg='exact': needs the SDE's exact law (reference='exact'), not the SVAG "
                                   "chains' limit; use fedavg='sampled' with reference='svag'")
        if ells is not None and sorted(set(int(e) for e in ells)) != [1]:
            raise FedsdeInputError(f"fedavg='exact': runs no SVAG chain, but ells={list(ells)} asks for ℓ > 1; use "
                                   "fedavg='sampled' for the 1/ℓ report")
    return fedavg


def exact_fedavg_paths(problem, *, eta, local_steps=None, server_lr: float = 1.0, grid: np.ndarray, w0: np.ndarray,
                       names) -> tuple[dict, np.ndarray, np.ndarray]:
    """``E φ_FedAvg`` at the grid rounds (name → (T,) or ``None`` without a closed form), and the chain's mean (d,)
    and covariance (d, d) at the last round, exactly (``eta``: a number, or a :class:`~fedsde.params.Schedule`
    holding the rates, checked where it was built; ``w0`` the start point and ``grid`` the sorted rounds, checked
    by the caller: quadratic clients with a schedule check neither again)."""
    from fedsde.validity.reference import _is_least_squares, gaussian_metric_means, moment_metric_means

    sched, eta, local_steps, server_lr = unpack(eta, local_steps, server_lr)
    rounds = int(grid[-1])
    record = [int(n) for n in grid]
    if _is_least_squares(problem):
        from fedsde.exact import least_squares_transient_moments
        from fedsde.exact.least_squares_transient import least_squares_schedule_moments

        mom = (least_squares_schedule_moments(problem, sched, w0, np.asarray(grid, np.int64)) if sched is not None
               and rounds == sched.rounds else
               least_squares_transient_moments(problem, eta, local_steps, rounds, server_lr, w0=w0, record=record))
        means = moment_metric_means(problem, mom.mean, mom.cov, names)
    else:
        from fedsde.exact import transient_moments
        from fedsde.exact.moments import schedule_moments

        mom = (schedule_moments(problem, sched, w0, np.asarray(grid, np.int64)) if sched is not None
               and rounds == sched.rounds else
               transient_moments(problem, sched or eta, local_steps, rounds, server_lr, w0=w0, record=record))
        means = gaussian_metric_means(problem, mom.mean, mom.cov, w0, names)
    if not (np.all(np.isfinite(mom.mean)) and np.all(np.isfinite(mom.cov))):
        raise FedsdeInputError(f"eta={eta:g}, server_lr={server_lr:g}: FedAvg's exact moments overflow within "
                               f"{rounds} rounds (the chain diverges with these settings); use a smaller eta or "
                               "server_lr")
    return means, mom.mean[-1], 0.5 * (mom.cov[-1] + mom.cov[-1].T)
