"""Paths of the first- and second-order SDEs on any client loss, optionally coupled with FedAvg itself.

:func:`coupled_paths` runs, for ``R`` replicates and ``n`` rounds on the clock ``t = n·h``, any of: FedAvg (the
simulator's round: every client runs ``τ_k`` local steps of the problem's gradient oracle from the server weights,
server step ``s``), and the order-1 and order-2 SDEs by :class:`~fedsde.sde.order2_general.Order2Scheme`.  All of them
draw from their own copy of the same random streams (seed, blocks, stream family 0: the simulator's), so substep 0 of
every SDE round uses the minibatches (or Gaussian draws) of FedAvg's round: the paths are coupled, and differences of
test functions between them have a far smaller variance than between independent runs, while each path keeps its
own law.  :func:`simulate_order2` is the SDE alone (``fedsde sde --order 2`` on a data problem).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from fedsde._validate import start_point
from fedsde.clients.local import run_local_steps, step_limits
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.streams import ReplicateStreams, resolve_block_size
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.params import (
    DEFAULT_INTEGRATOR,
    DEFAULT_RECORDING,
    PRECISION_FIELDS,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    fedavg_rates,
    takes_values,
)
from fedsde.problems import QuadraticProblem
from fedsde.sde.order2_general import Order2Drift, Order2Scheme, client_loss

#: stream family of the substeps after the first (disjoint from the simulator's 0, 1, 2 and the other samplers')
_SUBSTEPS = 5 << 20


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, integrator=("substeps",), recording=("record",))
def coupled_paths(problem, schedule: Schedule, replication: Replication, precision: Precision | None = None, *,
                  w0=None, orders: Sequence[int] = (1, 2), chain: bool = True, oracle_factory: Callable | None = None,
                  integrator: Integrator | None = None, bar=None,
                  recording: Recording | None = None) -> dict[str, np.ndarray]:
    """Final weights after ``rounds`` rounds of FedAvg (``"chain"``) and of the SDEs (``"order1"``, ``"order2"``).

    Parameters
    ----------
    problem
        Quadratic, least-squares, classification or module clients (:func:`fedsde.sde.order2_general.client_loss`).
    schedule, replication, precision, integrator, recording : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``), :class:`~fedsde.params.Precision`
        (``device``, ``dtype``), :class:`~fedsde.params.Integrator` (``substeps``) and
        :class:`~fedsde.params.Recording` (``record``); each field may be given instead as the keyword of its name,
        the call of earlier releases (:func:`fedsde.params.takes_values`); the fields mean:
    eta, local_steps, server_lr
        Client step ``η``, ``E`` or per-client ``τ_k``, server step ``s``.
    rounds : int
        ``n >= 0``; the SDEs run to ``t = n·h``.
    replicates, seed
        ``R`` paths of each; the seed of every stream.
    h : float, optional
        Time step of one round (default ``η``).
    w0 : array (d,), optional
        Start (default zero).
    orders : sequence of {1, 2}
        The SDEs to run.
    chain : bool
        Also run FedAvg.
    oracle_factory : callable, optional
        The problem's gradient oracle (default: the Gaussian quadratic one; data problems must pass theirs).
    substeps : int
        Substeps of the scheme per round.
    device, dtype
        Torch device and precision.
    bar : tqdm, optional
        A progress bar advanced once per round.
    record : sequence of int, optional
        Rounds (0..rounds) whose weights are returned; default the last only.

    Returns
    -------
    dict
        ``"chain"``, ``"order1"``, ``"order2"`` (those run) → weights at the last round, ndarray (R, d), or with
        ``record`` at the recorded rounds, (T, R, d).
    """
    from fedsde._validate import record_rounds

    precision, record = precision or Precision(), (recording or DEFAULT_RECORDING).record
    substeps = DEFAULT_INTEGRATOR.substeps if integrator is None else integrator.substeps
    R, rounds, h = replication.replicates, schedule.rounds, schedule.h
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    eta, steps, s = fedavg_rates(schedule, None, None, problem.Q)  # one number each, τ one per client
    h = eta if h is None else h
    if not set(orders) <= {1, 2}:
        raise FedsdeInputError(f"orders={list(orders)}: each must be 1 or 2")
    if oracle_factory is None:
        if not isinstance(problem, QuadraticProblem):
            raise FedsdeInputError(f"oracle_factory: required for a {type(problem).__name__}")
        oracle_factory = GaussianQuadraticOracle
    dev, dt = precision.device, precision.dtype
    seed = replication.need_seed()
    tau = steps.astype(np.float64)
    block = resolve_block_size(None, R)
    nb = -(-R // block)
    Rp, d, Q = nb * block, problem.d, problem.Q
    start = torch.as_tensor(start_point(w0, d), dtype=dt, device=dev).expand(Rp, d).clone()

    def streams(purpose: int = 0) -> ReplicateStreams:
        return ReplicateStreams(seed, 0, nb, dev, purpose, block)

    loss = client_loss(problem, dev, dt)
    runs: dict[str, dict] = {}
    if chain:
        runs["chain"] = {"w": start.clone(), "oracle": oracle_factory(problem, nb, dev, dt), "streams": streams()}
    for order in sorted(set(orders)):
        drift = Order2Drift(loss, problem.p, tau, eta=eta, server_lr=s, h=h, order=order)
        scheme = Order2Scheme(drift, oracle_factory(problem, nb, dev, dt), streams(), p=problem.p, local_steps=tau,
                              substeps=substeps, extra=streams(_SUBSTEPS + order) if substeps > 1 else None)
        runs[f"order{order}"] = {"w": start.clone(), "scheme": scheme}
    p = torch.as_tensor(np.asarray(problem.p, dtype=np.float64), dtype=dt, device=dev)
    limits = step_limits(tau.astype(np.int64), device=dev)
    n_steps = int(tau.max())
    keep = None if record is None else record_rounds("record", record, rounds)
    kept: dict[str, list] = {name: [] for name in runs}

    def save(n: int) -> None:
        if keep is not None and n in keep:
            for name, run in runs.items():
                kept[name].append(run["w"][:R].cpu().numpy())

    save(0)
    for n in range(rounds):
        for name, run in runs.items():
            w = run["w"]
            if name == "chain":
                wb = w.view(nb, 1, block, d)
                x = wb.expand(nb, Q, block, d).clone()
                run_local_steps(x=x, oracle=run["oracle"], streams=run["streams"], eta=eta, n_steps=n_steps,
                                local_steps=limits)
                delta = (x - wb).transpose(1, 2).reshape(Rp, Q, d)
                w = w + s * torch.einsum("q,rqd->rd", p, delta)
            else:
                w = run["scheme"].round(w, nb)
            if not bool(torch.isfinite(w[:R]).all()):
                r = int(torch.nonzero(~torch.isfinite(w[:R]).all(-1))[0, 0])
                raise SimulationDivergedError(f"{'FedAvg' if name == 'chain' else 'the ' + name + ' SDE'} became "
                                              f"NaN/inf at round {n + 1} (replicate {r}); reduce eta or server_lr")
            run["w"] = w
        save(n + 1)
        if bar is not None:
            bar.update(1)
    if keep is not None:
        return {name: np.stack(v) for name, v in kept.items()}
    return {name: run["w"][:R].cpu().numpy() for name, run in runs.items()}


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, integrator=("substeps",), recording=("record",))
def simulate_order2(problem, schedule: Schedule, replication: Replication, precision: Precision | None = None, *,
                    w0=None, order: int = 2, oracle_factory: Callable | None = None,
                    integrator: Integrator | None = None, recording: Recording | None = None,
                    progress: bool = False):
    """Paths of the order-``order`` SDE (no chain) recorded at ``record`` rounds (default: every round), as
    :class:`~fedsde.sde.integrate.SDEPaths`; the values and their fields (each also a keyword) as
    :func:`coupled_paths`."""
    from fedsde._validate import record_rounds
    from fedsde.sde.integrate import SDEPaths

    precision, record = precision or Precision(), (recording or DEFAULT_RECORDING).record
    substeps = DEFAULT_INTEGRATOR.substeps if integrator is None else integrator.substeps
    eta, local_steps, server_lr, rounds = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.rounds
    replicates, seed, device, dtype = replication.replicates, replication.seed, precision.device, precision.dtype
    keep = record_rounds("record", record, rounds)
    hh = schedule.time_step
    bar = tqdm(total=rounds, desc=f"sde[order {order}]", unit="round", disable=not progress, leave=False)
    try:
        out = coupled_paths(problem, schedule, replication, precision, w0=w0, orders=(order,), chain=False,
                            oracle_factory=oracle_factory, integrator=integrator, bar=bar,
                            recording=Recording(record=keep))[f"order{order}"]
    finally:
        bar.close()
    config = {"variant": f"order{order}", "integrator": "Runge-Kutta drift + oracle noise (weak order 2, small noise)",
              "eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr),
              "h": hh, "rounds": rounds, "paths": int(replicates), "seed": int(seed), "substeps": int(substeps),
              "device": str(device), "dtype": str(dtype).replace("torch.", "")}
    return SDEPaths(rounds=keep, times=keep * hh, weights=out, h=hh, config=config)
