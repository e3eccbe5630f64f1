"""The discrete federated simulator, vectorised over replicates × clients.

One round (seed 002, Sec. 3; FedAvg when the server rule is :class:`~fedsde.aggregators.FedAvg`):

1. every client starts from the server weights, ``w_k^{(0)} = w_n``;
2. client ``k`` runs ``τ_k`` local steps ``w ← w − η(∇F_k(w) + ξ)`` (the gradient oracle supplies
   ``∇F_k(w) + ξ``; clients with fewer steps stop early);
3. the server rule receives the displacements ``Δ_k = w_k^{(τ_k)} − w_n`` and the participation weights and
   returns ``w_{n+1}``.

The server rule also fixes the clients' local solver (SGD, momentum, prox; :mod:`fedsde.clients.solvers`), an
optional per-round gradient correction (SCAFFOLD) and whether the first round runs with every client (FedAWARE);
see :mod:`fedsde.aggregators.base`.  Local steps may be fixed per client, redrawn every round
(:class:`~fedsde.clients.steps.RandomSteps`) or derived from epochs and (redrawn) batch sizes
(:class:`~fedsde.clients.steps.EpochSteps`, whose batch sizes reach the gradient oracle).  Problems with data
(:class:`~fedsde.problems.logistic.ClassificationProblem`) use the oracles of :mod:`fedsde.clients.data_oracles`.

All ``R`` replicates and ``Q`` clients advance together: one batched tensor operation per local step, no
Python loop over clients or replicates.  Randomness comes from per-block streams
(:mod:`fedsde.clients.streams`): the same seed gives bit-identical results on CPU, however the replicates are
chunked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from fedsde._memory import available_memory
from fedsde._samples import ReplicateMoments
from fedsde._validate import device_dtype, positive_int, schedule, start_point
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.steps import EpochSteps, RandomSteps, normalise_steps
from fedsde.clients.streams import BLOCK, ReplicateStreams, resolve_block_size, resolve_seed, split_chunks
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.sim.moments import BlowUpWatch, StreamingMoments, plan_chunks, problem_scale

if TYPE_CHECKING:  # the aggregators import the local solvers from this package: import them lazily
    from fedsde.aggregators import Aggregator

# stream families (independent for the same seed)
_NOISE, _PARTICIPATION, _STEPS = 0, 1, 2

#: participation schemes: uniform m-subsets weighted p_k Q/m or p_k/Σ_S p_j; m draws with replacement ∝ p, 1/m each
WEIGHTINGS = ("unbiased", "renormalised", "multinomial")


@dataclass
class SimulationResult(ReplicateMoments):
    """Server weights (and optionally client drift) recorded during a simulation.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
        Recorded round indices (round 0 is the start).
    weights : ndarray, shape (T, R, d)
        Server weights of every replicate at the recorded rounds.
    drift_rounds : ndarray of int, shape (T_d,)
        Rounds whose local training was recorded (empty unless ``record_drift``).
    drift : ndarray, shape (T_d, S, R, Q) or None
        ``‖w_k^{(i)} − w_n‖`` after local step ``i = 1..S`` (``S`` = most local steps); entries past a
        client's ``τ_k`` repeat its final value.
    config : dict
        The arguments of the run (for records).
    streamed : StreamingMoments or None
        With ``moments_only=True``: the moments accumulated over chunks (``weights`` is then None).
    """

    rounds: np.ndarray
    weights: np.ndarray | None
    drift_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drift: np.ndarray | None = None
    config: dict = field(default_factory=dict)
    streamed: StreamingMoments | None = None


def _record_set(name: str, record, rounds: int, default_all: bool) -> np.ndarray:
    if record is None or record is True:
        return np.arange(rounds + 1) if default_all else np.arange(rounds)
    if record is False:
        return np.zeros(0, np.int64)
    arr = np.unique(np.asarray(record, dtype=np.int64).reshape(-1))
    hi = rounds if default_all else rounds - 1
    if arr.size and (arr.min() < 0 or arr.max() > hi):
        raise FedsdeInputError(f"{name}: rounds must lie in [0, {hi}]")
    return arr


def simulate(
    problem: QuadraticProblem,
    *,
    eta: float | Sequence[float] | np.ndarray,
    local_steps: int | Sequence[int] | np.ndarray | RandomSteps | EpochSteps,
    rounds: int,
    replicates: int,
    seed: int | torch.Generator,
    server_lr: float | Sequence[float] | np.ndarray = 1.0,
    w0=None,
    participation: int | None = None,
    weighting: str = "unbiased",
    aggregator: str | Aggregator = "fedavg",
    record: Sequence[int] | None = None,
    record_drift: bool | Sequence[int] = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float64,
    chunk_size: int | None = None,
    progress: bool = False,
    oracle_factory=None,
    block_size: int | None = None,
    moments_only: bool = False,
    memory_limit: int | str | None = None,
) -> SimulationResult:
    """Simulate ``replicates`` independent runs of a federated algorithm on ``problem``.

    Parameters
    ----------
    problem : QuadraticProblem or ClassificationProblem
        Anything with ``Q``, ``d`` and client weights ``p``; data problems need a data oracle.
    eta : float or array, shape (rounds,)
        Client learning rate, constant or per round.
    local_steps : int, array of int (Q,), RandomSteps or EpochSteps
        ``E`` for every client, fixed per-client ``τ_k``, steps redrawn every round, or epochs × batches.
    rounds : int
        Number of communication rounds ``n``.
    replicates : int
        Number of independent runs ``R``.
    seed : int or torch.Generator
        Source of all randomness (never the global RNG).
    server_lr : float or array, shape (rounds,)
        Actual server step ``s`` per round (``h·η₀`` in seed 002's notation).
    w0 : array, shape (d,), optional
        Starting server weights (default zero; for a data problem its ``initial_weights()``: zero for the linear
        models, the seeded Glorot start for the MLP, whose zero point is a saddle that never trains).
    participation : int, optional
        ``m``: clients sampled uniformly without replacement each round (default: all).
    weighting : {"unbiased", "renormalised", "multinomial"}
        Uniform ``m``-subsets weighted ``p_k Q/m`` (unbiased) or ``p_k / Σ_{j∈S} p_j`` (renormalised); or ``m``
        draws with replacement with probabilities ``p_k``, each weighted ``1/m`` (seed 003, eq. (14)).
    aggregator : str or Aggregator
        Server rule (registry name or instance); default FedAvg.
    record : sequence of int, optional
        Rounds (0..rounds) at which to keep the server weights; default every round.
    record_drift : bool or sequence of int
        Also record ``‖w_k^{(i)} − w_n‖`` at every local step, for all rounds (True) or the given ones.
    device, dtype
        Torch device (``"cpu"``, ``"cuda"``) and precision (float64 by default).
    chunk_size : int, optional
        Simulate at most this many replicates at once (rounded up to a multiple of
        :data:`fedsde.clients.streams.BLOCK`); results do not depend on it.
    progress : bool
        Show a progress bar.
    oracle_factory : callable, optional
        ``(problem, nblocks, device, dtype) -> oracle`` (see :mod:`fedsde.clients.oracles`), replacing the
        Gaussian quadratic oracle.  Default for data problems: minibatches of the problem's ``batch_size``.
    block_size : int, optional
        Replicates per random stream; default ``min(replicates, BLOCK)``, so a run never computes replicates it
        did not ask for below one block (see :mod:`fedsde.clients.streams` for the prefix property).
    moments_only : bool
        Keep only the mean and covariance at the recorded rounds, accumulated chunk by chunk
        (:class:`fedsde.sim.moments.StreamingMoments`, bit-identical however chunked): memory does not grow with
        ``replicates``.  ``weights`` of the result is then None.
    memory_limit : int or str, optional
        Bytes the run may plan for (default: what is free; see :func:`fedsde._memory.available_memory`).  Without
        ``chunk_size`` the replicates are chunked to fit; a run whose stored samples alone cannot fit is refused up
        front with the estimate.

    Returns
    -------
    SimulationResult

    Notes
    -----
    A run whose largest ``|w|`` exceeds ``1e6 ×`` the problem's scale (start, optimum, client optima, noise) issues
    one :class:`fedsde.errors.DivergenceWarning` and goes on; NaN/inf raises
    :class:`fedsde.errors.SimulationDivergedError`.
    """
    from fedsde.aggregators import get_aggregator

    rounds = positive_int("rounds", rounds, minimum=0)
    replicates = positive_int("replicates", replicates)
    block_size = resolve_block_size(block_size, replicates)  # default min(replicates, BLOCK)
    base_seed = resolve_seed(seed)
    etas = schedule("eta", eta, rounds) if rounds else np.zeros(0)
    lrs = schedule("server_lr", server_lr, rounds) if rounds else np.zeros(0)
    Q, d = problem.Q, problem.d
    steps = normalise_steps(local_steps, Q)
    if participation is not None:
        participation = positive_int("participation", participation)
        if participation > Q:
            raise FedsdeInputError(f"participation={participation}: cannot exceed the number of clients Q={Q}")
    if weighting not in WEIGHTINGS:
        raise FedsdeInputError(f"weighting={weighting!r}: must be one of {', '.join(WEIGHTINGS)}")
    agg = get_aggregator(aggregator)
    if etas.size:
        agg.local_solver.check_eta(float(etas.max()))
    agg.bind(problem)
    dev, dtype = device_dtype(device, dtype)
    keep = _record_set("record", record, rounds, default_all=True)
    drift_keep = _record_set("record_drift", record_drift, rounds, default_all=False)
    if w0 is None and hasattr(problem, "initial_weights"):
        w_start = problem.initial_weights()  # data problems: zero for linear models, seeded Glorot for the MLP
    else:
        w_start = start_point(w0, d)
    make_oracle = oracle_factory or _default_oracle(problem, steps)

    max_steps = steps.max_steps() if isinstance(steps, RandomSteps | EpochSteps) else int(steps.max())
    if moments_only and drift_keep.size:
        raise FedsdeInputError("record_drift: needs the samples; not available with moments_only=True")
    chunk_size = _plan_chunks(replicates, chunk_size, block_size, Q, d, keep.size, drift_keep.size * max_steps,
                              moments_only, dev, dtype, memory_limit)
    chunks = split_chunks(replicates, chunk_size, block_size)
    out_w = StreamingMoments(keep.size, d, block_size) if moments_only else np.empty((keep.size, replicates, d))
    out_drift = np.empty((drift_keep.size, max_steps, replicates, Q)) if drift_keep.size else None
    watch = BlowUpWatch(problem_scale(problem, w_start), "the simulation")
    bar = tqdm(total=rounds * len(chunks), desc="simulate", unit="round", disable=not progress, leave=False)
    try:
        for start, stop in chunks:
            _run_chunk(
                problem, agg, make_oracle, base_seed, start, stop - start, dev, dtype, etas, lrs, steps,
                participation, weighting, w_start, keep, drift_keep, out_w, out_drift, bar, block_size,
                replicates, watch,
            )
    finally:
        bar.close()
    config = {
        "eta": etas.tolist() if np.ndim(eta) else float(eta),
        "local_steps": steps if isinstance(steps, RandomSteps | EpochSteps) else steps.tolist(),
        "rounds": rounds, "replicates": replicates, "seed": base_seed,
        "server_lr": lrs.tolist() if np.ndim(server_lr) else float(server_lr),
        "participation": participation, "weighting": weighting, "aggregator": agg.name,
        "device": str(dev), "dtype": str(dtype).replace("torch.", ""), "block_size": block_size,
        "aggregator_config": agg.describe(),
        "oracle": getattr(make_oracle, "describe", getattr(make_oracle, "__name__", repr(make_oracle))),
        "chunk_size": chunk_size, "moments_only": bool(moments_only),
    }
    if moments_only:
        return SimulationResult(rounds=keep, weights=None, config=config, streamed=out_w)
    return SimulationResult(rounds=keep, weights=out_w, drift_rounds=drift_keep, drift=out_drift, config=config)


def _plan_chunks(R, chunk_size, block, Q, d, T, drift_cols, moments_only, dev, dtype, memory_limit) -> int | None:
    """Chunk size that fits (``chunk_size`` if given) or a one-line error; per replicate: about ten (Q, d) tensors
    of the local round, the aggregator's state, a copy of the weights and the per-block moment sums (d² per block);
    stored: weights (T, R, d) and drift (T_d, S, R, Q)."""
    item = torch.finfo(dtype).bits // 8
    per_rep = item * (10 * Q * d + 6 * Q + 4 * d) + 16 * d + (16 * d * d // block + 8 * d if moments_only else 0)
    stored = 0 if moments_only else 8 * R * (T * d + drift_cols * Q)
    hint = ("keep moments only (moments_only=True; the simulate command does), record fewer rounds, or use fewer "
            "replicates") if not moments_only else "use a smaller problem or another device"
    return plan_chunks(f"replicates={R}", R, chunk_size, block, per_rep, stored, available_memory(dev, memory_limit),
                       hint)


def _default_oracle(problem, steps):
    """Quadratic clients: Gaussian gradient noise; data problems: minibatch SGD with the problem's
    ``batch_size`` and ``sampling`` (batch sizes from :class:`EpochSteps` when given)."""
    if isinstance(problem, QuadraticProblem):
        return GaussianQuadraticOracle
    from fedsde.clients.data_oracles import minibatch_oracle

    sampling = getattr(problem, "sampling", "minibatch")
    if isinstance(steps, EpochSteps):
        return minibatch_oracle(sampling=sampling)
    if getattr(problem, "batch_size", None) is None:
        raise FedsdeInputError(
            "oracle_factory: a data problem needs a gradient oracle; give the problem a batch_size, pass "
            "local_steps=EpochSteps(...) (batch sizes) or oracle_factory=fedsde.sim.minibatch_oracle(batch_size=...)"
        )
    return minibatch_oracle(problem.batch_size, sampling=sampling)


def _participation(
    streams: ReplicateStreams | None, nb: int, Q: int, m: int | None, weighting: str, p: torch.Tensor,
    block: int = BLOCK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Participation mask and aggregation weights, both of shape (nb·block, Q), for one round."""
    R = nb * block
    if weighting == "multinomial" and m is not None:
        u = streams.uniform_(torch.empty((nb, block, m), dtype=torch.float64, device=p.device)).view(R, m)
        cdf = torch.cumsum(p.to(torch.float64), 0)
        cdf = cdf / cdf[-1]
        idx = torch.searchsorted(cdf, u, right=True).clamp(max=Q - 1)  # P(idx = k) = p_k
        counts = torch.zeros((R, Q), dtype=p.dtype, device=p.device).scatter_add_(
            1, idx, torch.ones((R, m), dtype=p.dtype, device=p.device))
        return counts > 0, counts / m
    if m is None or m == Q:
        mask = torch.ones((R, Q), dtype=torch.bool, device=p.device)
        return mask, p.expand(R, Q)
    u = streams.uniform_(torch.empty((nb, block, Q), dtype=p.dtype, device=p.device)).view(R, Q)
    idx = torch.topk(u, m, dim=1, largest=False).indices  # uniform m-subset per replicate
    mask = torch.zeros((R, Q), dtype=torch.bool, device=p.device).scatter_(1, idx, True)
    pm = p.expand(R, Q) * mask
    if weighting == "unbiased":
        return mask, pm * (Q / m)
    tot = pm.sum(1, keepdim=True)
    # a sample whose weights are all zero contributes nothing (avoid 0/0)
    return mask, torch.where(tot > 0, pm / tot.clamp_min(torch.finfo(p.dtype).tiny), pm)


def _run_chunk(problem, agg, make_oracle, seed, start, R, dev, dtype, etas, lrs, steps, m, weighting,
               w_start, keep, drift_keep, out_w, out_drift, bar, block=BLOCK, total=None, watch=None):
    """Simulate replicates ``[start, start + R)`` (``start`` a multiple of the block), padded to whole blocks.

    Shapes that decide how many random numbers are drawn (local steps per round, padded batch length) are the
    same for every chunk: fixed, an upper bound (:class:`RandomSteps`), or the maximum over the draws of *all*
    replicates (:class:`EpochSteps`, whose cheap per-round draws are made for every block in every chunk).
    """
    from fedsde.aggregators import RoundContext

    Q, d = problem.Q, problem.d
    nb = -(-R // block)
    Rp = nb * block
    first = start // block
    noise = ReplicateStreams(seed, first, nb, dev, _NOISE, block)
    sampled = m is not None and (m != Q or weighting == "multinomial")
    part = ReplicateStreams(seed, first, nb, dev, _PARTICIPATION, block) if sampled else None
    epoch_steps = isinstance(steps, EpochSteps)
    step_streams = None
    if isinstance(steps, RandomSteps):
        step_streams = ReplicateStreams(seed, first, nb, dev, _STEPS, block)
    elif epoch_steps and steps.random:  # draws of all blocks, sliced to this chunk
        nb_all = -(-(total or R) // block)
        step_streams = ReplicateStreams(seed, 0, nb_all, dev, _STEPS, block)
    oracle = make_oracle(problem, nb, dev, dtype)
    begin_round = getattr(oracle, "begin_round", None)
    slots_ok = (getattr(oracle, "participants_only", False) and m is not None and m < Q
                and weighting != "multinomial" and out_drift is None)
    p = torch.as_tensor(problem.p, dtype=dtype, device=dev)
    w = torch.as_tensor(w_start, dtype=dtype, device=dev).expand(Rp, d).clone()
    state = agg.init(w)
    solver = agg.local_solver
    keep_idx = {int(k): i for i, k in enumerate(keep)}
    drift_idx = {int(k): i for i, k in enumerate(drift_keep)}
    if 0 in keep_idx:
        _store(out_w, keep_idx[0], start, w[:R])
    batch_fixed, max_batch, uniform_steps = None, None, False
    if epoch_steps:
        max_batch = steps.max_batch()
        if not steps.random:
            tau_q, b_q = steps.fixed()
            fixed = torch.as_tensor(tau_q, device=dev).expand(Rp, Q)
            batch_fixed = torch.as_tensor(b_q, device=dev).expand(Rp, Q)
            max_batch = int(b_q.max())
    elif isinstance(steps, np.ndarray):
        uniform_steps = bool(np.all(steps == steps[0]))
        fixed = torch.as_tensor(steps, device=dev).expand(Rp, Q)
    for n in range(len(etas)):
        eta, s = float(etas[n]), float(lrs[n])
        batch = batch_fixed
        if step_streams is None:
            tau = fixed
            n_steps = int(steps[0]) if uniform_steps else int(tau.max())
        elif epoch_steps:
            tau_all, batch_all = steps.draw_round(step_streams, Q)
            n_steps, max_batch = int(tau_all.max()), int(batch_all.max())
            tau, batch = tau_all[start:start + Rp], batch_all[start:start + Rp]
        else:
            tau = steps.draw(step_streams, Q)  # (Rp, Q)
            n_steps = steps.max_steps()
        mask, weights = _participation(part, nb, Q, m, weighting, p, block)
        full = n < agg.warm_start_rounds
        if full:  # the draws above keep the streams aligned with other rules
            mask = torch.ones((Rp, Q), dtype=torch.bool, device=dev)
            weights = p.expand(Rp, Q)
        wb = w.view(nb, 1, block, d)
        corr = agg.correction(state)  # (Rp, Q, d) or None
        if slots_ok and not full:  # train only the m participants of each replicate
            cid = torch.nonzero(mask)[:, 1].view(Rp, m)  # participants in increasing order
            S = m
            clients = cid.view(nb, block, m).transpose(1, 2)
            tau_s = tau.gather(1, cid)
            if batch is not None:
                batch = batch.gather(1, cid)
            if corr is not None:
                corr = corr.gather(1, cid.unsqueeze(-1).expand(Rp, m, d))
        else:
            cid, S, clients, tau_s = None, Q, None, tau
        if begin_round is not None:
            if cid is None:
                begin_round(batch, max_batch)
            else:
                begin_round(batch, max_batch, clients=clients)
        x = wb.expand(nb, S, block, d).clone()  # (nb, S, B, d)
        # (nb, S, B, 1): local steps of each client, to stop clients with fewer steps
        tau_b = None if uniform_steps else tau_s.view(nb, block, S).transpose(1, 2).unsqueeze(-1)
        rec = drift_idx.get(n)
        first_grad = [] if agg.needs_first_grads else None
        if solver.plain and corr is None and first_grad is None:
            for i in range(n_steps):
                g = oracle.sample(x, noise)
                if tau_b is None:
                    x.sub_(g, alpha=eta)
                else:
                    x.sub_(g * (tau_b > i).to(dtype), alpha=eta)
                if rec is not None:
                    _record_drift(out_drift, rec, i, x, wb=wb, start=start, R=R, Rp=Rp, Q=Q)
        else:
            corr_b = None if corr is None else corr.view(nb, block, S, d).transpose(1, 2)
            on_step = None if rec is None else partial(_record_drift, out_drift, rec, wb=wb, start=start, R=R,
                                                       Rp=Rp, Q=Q)
            solver.run(x, wb, oracle, noise, eta, n_steps, tau_b, corr_b, first_grad, on_step)
        if rec is not None and n_steps < out_drift.shape[1]:
            out_drift[rec, n_steps:, start:start + R] = out_drift[rec, n_steps - 1, start:start + R]
        delta = (x - wb).transpose(1, 2).reshape(Rp, S, d)  # (Rp, S, d)
        g0 = None if first_grad is None else first_grad[0].transpose(1, 2).reshape(Rp, S, d)
        if cid is not None:
            index = cid.unsqueeze(-1).expand(Rp, m, d)
            delta = torch.zeros((Rp, Q, d), dtype=dtype, device=dev).scatter_(1, index, delta)
            if g0 is not None:
                g0 = torch.zeros((Rp, Q, d), dtype=dtype, device=dev).scatter_(1, index, g0)
        elif m is not None and not bool(mask.all()):
            delta = delta * mask.unsqueeze(-1).to(dtype)
        norms = solver.accumulation_norm(tau, eta).to(dtype) if agg.needs_norms else None
        ctx = RoundContext(round=n, server_lr=s, eta=eta, local_steps=tau, participating=mask, p=p,
                           norms=norms, first_grads=g0)
        w, state = agg.apply(w, delta, weights, state, ctx)
        biggest = float(w[:R].abs().amax())  # NaN propagates: one reduction for both checks
        if not math.isfinite(biggest):
            _raise_diverged(n, start, delta[:R], w[:R])
        if watch is not None and biggest > watch.limit:
            r = int(torch.nonzero(w[:R].abs().amax(-1) > watch.limit)[0, 0])
            watch.check(biggest, f"round {n + 1} (replicate {start + r})")
        if n + 1 in keep_idx:
            _store(out_w, keep_idx[n + 1], start, w[:R])
        bar.update(1)


def _store(out_w, t: int, start: int, w: torch.Tensor) -> None:
    """Keep the server weights of rows ``[start, start + len(w))`` at recorded index ``t`` (samples or moments)."""
    if isinstance(out_w, StreamingMoments):
        out_w.add(t, start, w)
    else:
        out_w[t, start:start + w.shape[0]] = w.cpu().numpy()


def _record_drift(out_drift, rec, i, x, *, wb, start, R, Rp, Q):
    dist = torch.linalg.vector_norm(x - wb, dim=-1)  # (nb, Q, B)
    out_drift[rec, i, start:start + R] = dist.transpose(1, 2).reshape(Rp, Q)[:R].cpu().numpy()


def _raise_diverged(n: int, start: int, delta: torch.Tensor, w: torch.Tensor) -> None:
    bad = ~torch.isfinite(delta).all(-1)  # (R, Q)
    if bool(bad.any()):
        r, k = (int(v) for v in torch.nonzero(bad)[0])
        where = f"client {k} (replicate {start + r})"
    else:
        r = int(torch.nonzero(~torch.isfinite(w).all(-1))[0, 0])
        where = f"the server update (replicate {start + r})"
    raise SimulationDivergedError(
        f"simulation produced NaN/inf at round {n} in {where}; reduce eta or server_lr"
    )
