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

from fedsde._validate import device_dtype, positive_float, positive_int, start_point
from fedsde.clients.local import run_local_steps, step_limits
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.streams import ReplicateStreams, resolve_block_size, resolve_seed
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.problems import QuadraticProblem
from fedsde.sde.order2_general import Order2Drift, Order2Scheme, client_loss, steps_of

#: stream family of the substeps after the first (disjoint from the simulator's 0, 1, 2 and the other samplers')
_SUBSTEPS = 5 << 20


def coupled_paths(problem, *, eta: float, local_steps, rounds: int, replicates: int, seed: int, server_lr: float = 1.0,
                  h: float | None = None, w0=None, orders: Sequence[int] = (1, 2), chain: bool = True,
                  oracle_factory: Callable | None = None, substeps: int = 1, device="cpu", dtype=torch.float64,
                  bar=None, record: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Final weights after ``rounds`` rounds of FedAvg (``"chain"``) and of the SDEs (``"order1"``, ``"order2"``).

    Parameters
    ----------
    problem
        Quadratic, least-squares, classification or module clients (:func:`fedsde.sde.order2_general.client_loss`).
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
    device, dtype, bar
        Torch device and precision; a progress bar advanced once per round.
    record : sequence of int, optional
        Rounds (0..rounds) whose weights are returned; default the last only.

    Returns
    -------
    dict
        ``"chain"``, ``"order1"``, ``"order2"`` (those run) → weights at the last round, ndarray (R, d), or with
        ``record`` at the recorded rounds, (T, R, d).
    """
    from fedsde._validate import record_rounds

    R = positive_int("replicates", replicates, minimum=2)
    rounds = positive_int("rounds", rounds, minimum=0)
    eta = positive_float("eta", eta)
    s = positive_float("server_lr", server_lr)
    h = eta if h is None else positive_float("h", h)
    substeps = positive_int("substeps", substeps)
    if not set(orders) <= {1, 2}:
        raise FedsdeInputError(f"orders={list(orders)}: each must be 1 or 2")
    if oracle_factory is None:
        if not isinstance(problem, QuadraticProblem):
            raise FedsdeInputError(f"oracle_factory: required for a {type(problem).__name__}")
        oracle_factory = GaussianQuadraticOracle
    dev, dt = device_dtype(device, dtype)
    seed = resolve_seed(seed)
    tau = steps_of(problem, local_steps)
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


def simulate_order2(problem, *, eta: float, local_steps, rounds: int, replicates: int, seed: int,
                    server_lr: float = 1.0, h: float | None = None, w0=None, order: int = 2,
                    oracle_factory: Callable | None = None, substeps: int = 1, device="cpu", dtype=torch.float64,
                    record: Sequence[int] | None = None, progress: bool = False):
    """Paths of the order-``order`` SDE (no chain) recorded at ``record`` rounds (default: every round), as
    :class:`~fedsde.sde.integrate.SDEPaths`."""
    from fedsde._validate import record_rounds
    from fedsde.sde.integrate import SDEPaths

    rounds = positive_int("rounds", rounds, minimum=0)
    keep = record_rounds("record", record, rounds)
    hh = positive_float("eta", eta) if h is None else positive_float("h", h)
    bar = tqdm(total=rounds, desc=f"sde[order {order}]", unit="round", disable=not progress, leave=False)
    try:
        out = coupled_paths(problem, eta=eta, local_steps=local_steps, rounds=rounds, replicates=replicates, seed=seed,
                            server_lr=server_lr, h=hh, w0=w0, orders=(order,), chain=False,
                            oracle_factory=oracle_factory, substeps=substeps, device=device, dtype=dtype, bar=bar,
                            record=keep)[f"order{order}"]
    finally:
        bar.close()
    config = {"variant": f"order{order}", "integrator": "Runge-Kutta drift + oracle noise (weak order 2, small noise)",
              "eta": float(eta), "local_steps": np.atleast_1d(local_steps).tolist(), "server_lr": float(server_lr),
              "h": hh, "rounds": rounds, "paths": int(replicates), "seed": int(seed), "substeps": int(substeps),
              "device": str(device), "dtype": str(dtype).replace("torch.", "")}
    return SDEPaths(rounds=keep, times=keep * hh, weights=out, h=hh, config=config)
