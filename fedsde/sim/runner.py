"""The discrete federated simulator, vectorised over replicates × clients.

One round (seed 002, Sec. 3; FedAvg when the server rule is :class:`~fedsde.aggregators.FedAvg`):

1. every client starts from the server weights, ``w_k^{(0)} = w_n``;
2. client ``k`` runs ``τ_k`` local steps ``w ← w − η(∇F_k(w) + ξ)`` (the gradient oracle supplies
   ``∇F_k(w) + ξ``; clients with fewer steps stop early; :func:`fedsde.clients.local.run_local_steps`);
3. the server rule receives the displacements ``Δ_k = w_k^{(τ_k)} − w_n`` and the participation weights and
   returns ``w_{n+1}``.

The server rule also fixes the clients' local solver (SGD, momentum, prox; :mod:`fedsde.clients.solvers`), an
optional per-round gradient correction (SCAFFOLD) and whether the first round runs with every client (FedAWARE);
see :mod:`fedsde.aggregators.base`.  Local steps may be fixed per client, redrawn every round
(:class:`~fedsde.clients.steps.RandomSteps`) or derived from epochs and (redrawn) batch sizes
(:class:`~fedsde.clients.steps.EpochSteps`, whose batch sizes reach the gradient oracle).  Problems with data
(:class:`~fedsde.problems.classification.problem.ClassificationProblem`) use the oracles of
:mod:`fedsde.clients.data_oracles`.

All ``R`` replicates and ``Q`` clients advance together: one batched tensor operation per local step, no
Python loop over clients or replicates.  Randomness comes from per-block streams
(:mod:`fedsde.clients.streams`): the same seed gives bit-identical results on CPU, however the replicates are
chunked.  :func:`simulate` resolves its arguments once into a :class:`~fedsde.sim.plan.SimulationPlan` and runs
the replicates chunk by chunk (:func:`run_chunk`), the chunks in parallel threads on the CPU
(:mod:`fedsde.sim.workers`, ``workers=``: the same numbers whatever the number of threads); participation is drawn
by :mod:`fedsde.sim.participation`.  In its cross-device regime (many clients, few participants; server rules whose
step is the scheme's weighted mean, :func:`fedsde.sim.plan.compact_rule`) a round costs in proportion to the
participants: they alone are drawn, trained and aggregated, as ``(R, m, d)`` slots.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from fedsde._progress import progress_bar
from fedsde.aggregators import Aggregator, RoundContext
from fedsde.clients.local import RoundBatches, run_local_steps
from fedsde.clients.steps import EpochSteps, RandomSteps
from fedsde.clients.streams import ReplicateStreams
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.params import (
    DEFAULT_RECORDING,
    PRECISION_FIELDS,
    REPLICATION_FIELDS,
    Precision,
    Recording,
    Replication,
    Schedule,
    derive,
    takes_values,
)
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sim.health import growth_warning, rise_warning, weights_warning
from fedsde.sim.metric_budget import default_metric_request
from fedsde.sim.moments import StreamingMoments
from fedsde.sim.participation import (
    draw_participation,
    draw_subsets,
    first_occurrences,
    multinomial_slots,
    participant_slots,
    scatter_slots,
)
from fedsde.sim.plan import SimulationPlan, make_plan
from fedsde.sim.result import MetricRequest, SimulationResult
from fedsde.sim.workers import SMALL_KERNELS, Stop, diverged, plan_workers, run_chunks

# stream families (independent for the same seed)
_NOISE, _PARTICIPATION, _STEPS = 0, 1, 2


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr"), replication=REPLICATION_FIELDS,
              precision=PRECISION_FIELDS, recording=("record", "record_drift", "moments_only", "metrics"))
def simulate(
    problem: QuadraticProblem,
    schedule: Schedule,
    replication: Replication,
    precision: Precision | None = None,
    *,
    w0=None,
    participation: int | None = None,
    weighting: str = "unbiased",
    aggregator: str | Aggregator = "fedavg",
    recording: Recording | None = None,
    progress: bool = False,
    oracle_factory=None,
) -> SimulationResult:
    """Simulate ``replicates`` independent runs of a federated algorithm on ``problem``.

    Parameters
    ----------
    problem : QuadraticProblem or ClassificationProblem
        Anything with ``Q``, ``d`` and client weights ``p``; data problems need a data oracle.
    schedule, replication, precision, recording : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``, ``chunk_size``, ``block_size``, ``workers``,
        ``memory_limit``), :class:`~fedsde.params.Precision` (``device``, ``dtype``; default float64 on the CPU)
        and :class:`~fedsde.params.Recording` (``record``, ``record_drift``, ``moments_only``, ``metrics``).  Each
        field may be given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`); the fields mean:
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
    device : str or torch.device
        Torch device (``"cpu"``, ``"cuda"``).  On a GPU the chunk is sized to its free memory (usually one chunk),
        the random draws of :data:`~fedsde.clients.streams.DEVICE_GROUP` blocks come from one generator call, and the
        streamed moments are reduced on the device and reach the host once (docs/determinism.md: same law as the
        CPU, other numbers).
    dtype : torch.dtype
        Precision of the whole simulation: ``torch.float64`` (default; what the exact laws and the theory are
        compared with) or ``torch.float32`` (about twice as fast, half the memory, and what a GPU computes fastest).
        float32 rounds each step to about 6·10⁻⁸ relative; over the runs of this package its mean and covariance
        agree with float64's within their standard errors (``tests/test_float32.py``: quadratic clients, digits
        softmax and MLP, 5 s.e.), but not in bits, and the random draws are float32 draws (other numbers than
        float64's for the same seed).  Streamed moments are accumulated in float64 either way.
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
    workers : int, optional
        Threads that simulate chunks of replicates at the same time, one CPU core each (default: the threads torch
        may use, ``torch.get_num_threads()``, on the CPU; 1 on a GPU).  Runs too small to share stay in one thread
        (:func:`fedsde.sim.workers.plan_workers`).  Results are bit-identical for every value, given server rules
        and oracles whose ``apply``/``sample`` have no side effects (every rule of :mod:`fedsde.aggregators`); a
        custom rule that records what it sees must run with ``workers=1`` (chunks finish in any order).

    metrics : bool, sequence of str or MetricRequest, optional
        Also evaluate the metrics of the recorded weights (``True``: every metric the problem defines,
        :func:`fedsde.problems.metrics.metric_names`; or their names; or a
        :class:`~fedsde.sim.result.MetricRequest` naming the evaluation subsample too), as ``fedsde simulate`` does:
        the result's ``metrics`` (name → (T, R)) and :meth:`~fedsde.sim.result.SimulationResult.metric_summary`.  Needs
        the weights (not ``moments_only``); ``progress`` shows a bar for them too.

    Returns
    -------
    SimulationResult

    Notes
    -----
    A run whose largest ``|w|`` exceeds ``1e6 ×`` the problem's scale (start, optimum, client optima, noise) issues
    one :class:`fedsde.errors.DivergenceWarning` and goes on; NaN/inf raises
    :class:`fedsde.errors.SimulationDivergedError`.  Unbiased participation weights whose sum has a large variance
    give a :class:`fedsde.errors.TrainingWarning` before the run; with ``metrics`` holding the train loss, a mean
    loss that grows :data:`~fedsde.sim.health.GROWTH_FACTOR`-fold or stops being finite gives a
    :class:`~fedsde.errors.DivergenceWarning` naming the round, and one that ends above its start a
    :class:`~fedsde.errors.TrainingWarning` with the likely cause (:mod:`fedsde.sim.health`).
    """
    recording = recording or DEFAULT_RECORDING
    eta, server_lr, local_steps, rounds = schedule.eta, schedule.server_lr, schedule.local_steps, schedule.rounds
    metrics, moments_only = recording.metrics, recording.moments_only
    if metrics is not None and metrics is not False and moments_only:
        raise FedsdeInputError("metrics: needs the weights of every replicate; drop moments_only=True")
    plan = make_plan(
        problem, schedule, replication, precision, w0=w0, participation=participation, weighting=weighting,
        aggregator=aggregator, recording=derive(recording, metrics=None), oracle_factory=oracle_factory,
    )
    keep, drift_keep, R = plan.record, plan.drift_rounds, plan.replicates
    if getattr(problem, "p", None) is not None:
        weights_warning(problem.p, plan.participation, plan.weighting, stacklevel=4)
    chunks = plan_workers(R, plan.chunk_size, plan.block_size, plan.workers, plan.slots * plan.d)
    out_w = StreamingMoments(keep.size, plan.d, plan.block_size) if moments_only else np.empty((keep.size, R, plan.d))
    out_drift = np.empty((drift_keep.size, plan.max_steps, R, plan.Q)) if drift_keep.size else None
    bar = progress_bar(plan.rounds * len(chunks), "simulate", unit="round", enabled=progress)
    try:
        run_chunks(lambda a, b, halt: run_chunk(plan, a, b - a, out_w, out_drift, bar, halt), chunks, plan.workers,
                   on_error=out_w.abort if moments_only else None,
                   before_raise=lambda exc: plan.watch.flush(before=getattr(exc, "fedsde_when", -1), stacklevel=7),
                   one_thread=plan.device.type == "cpu" and plan.sparse and R * plan.slots * plan.d < SMALL_KERNELS)
    finally:
        bar.close()
    plan.watch.flush(stacklevel=5)  # the caller of simulate, past the keywords' adapter (takes_values)
    config = _config(plan, eta, server_lr)
    if moments_only:
        return SimulationResult(rounds=keep, weights=None, config=config, streamed=out_w)
    res = SimulationResult(rounds=keep, weights=out_w, drift_rounds=drift_keep, drift=out_drift, config=config)
    if metrics is not None and metrics is not False:
        request = metrics if isinstance(metrics, MetricRequest) else default_metric_request(
            problem, local_steps, rounds, participation, keep.size, None if metrics is True else metrics)
        res.metric_request = request
        res.metrics = res.evaluate(problem, w0=plan.w_start, progress=progress)
        if "train_loss" in res.metrics and keep.size > 1:
            loss = res.metrics["train_loss"]
            if growth_warning(keep, loss, stacklevel=4) is None:
                rise_warning(keep, loss, stacklevel=4, p=getattr(problem, "p", None), participation=plan.participation,
                             weighting=plan.weighting)
    return res


def _config(plan: SimulationPlan, eta, server_lr) -> dict:
    """The arguments of the run, resolved (for records)."""
    steps, agg, make_oracle = plan.steps, plan.aggregator, plan.make_oracle
    return {
        "eta": plan.etas.tolist() if np.ndim(eta) else float(eta),
        "local_steps": steps if isinstance(steps, RandomSteps | EpochSteps) else steps.tolist(),
        "rounds": plan.rounds, "replicates": plan.replicates, "seed": plan.seed,
        "server_lr": plan.server_lrs.tolist() if np.ndim(server_lr) else float(server_lr),
        "participation": plan.participation, "weighting": plan.weighting, "aggregator": agg.name,
        "device": str(plan.device), "dtype": str(plan.dtype).replace("torch.", ""), "block_size": plan.block_size,
        "aggregator_config": agg.describe(),
        "oracle": getattr(make_oracle, "describe", getattr(make_oracle, "__name__", repr(make_oracle))),
        "chunk_size": plan.chunk_size, "moments_only": plan.moments_only,
        # what the oracle decided while running (module problems: how the steps were batched)
        **(make_oracle.run_info() if callable(getattr(make_oracle, "run_info", None)) else {}),
    }


class _StepDraws:
    """Local steps of every round for one chunk of ``nb`` blocks (``Rp`` padded replicates).

    :meth:`next` gives ``tau`` (Rp, Q), the longest ``n_steps``, the batch sizes (Rp, Q) or None and their padded
    length.  Shapes that decide how many random numbers are drawn (local steps per round, padded batch length) are
    the same for every chunk: fixed, an upper bound (:class:`RandomSteps`), or the maximum over the draws of *all*
    replicates (:class:`EpochSteps`, whose cheap per-round draws are made for every block in every chunk).
    """

    def __init__(self, plan: SimulationPlan, start: int, nb: int):
        steps, Q, dev, block = plan.steps, plan.Q, plan.device, plan.block_size
        self.steps, self.Q, self.start, self.Rp = steps, Q, start, nb * block
        self.streams = None
        self.uniform = False  # every client of every replicate runs the same number (no stop mask)
        self.tau, self.n_steps, self.batch, self.max_batch = None, 0, None, None
        if isinstance(steps, RandomSteps):
            self.streams = ReplicateStreams(plan.seed, start // block, nb, dev, _STEPS, block)
        elif isinstance(steps, EpochSteps) and steps.random:  # draws of all blocks, sliced to this chunk
            self.streams = ReplicateStreams(plan.seed, 0, -(-plan.replicates // block), dev, _STEPS, block)
        elif isinstance(steps, EpochSteps):
            tau_q, b_q = steps.fixed()
            self.tau = torch.as_tensor(tau_q, device=dev).expand(self.Rp, Q)
            self.batch = torch.as_tensor(b_q, device=dev).expand(self.Rp, Q)
            self.max_batch = int(b_q.max())
        else:
            self.uniform = bool(np.all(steps == steps[0]))
            self.tau = torch.as_tensor(steps, device=dev).expand(self.Rp, Q)
        if self.tau is not None:
            self.n_steps = int(steps[0]) if self.uniform else int(self.tau.max())

    def next(self) -> tuple[torch.Tensor, int, torch.Tensor | None, int | None]:
        if self.streams is None:
            return self.tau, self.n_steps, self.batch, self.max_batch
        if isinstance(self.steps, EpochSteps):
            tau_all, batch_all = self.steps.draw_round(self.streams, self.Q)
            rows = slice(self.start, self.start + self.Rp)
            return tau_all[rows], int(tau_all.max()), batch_all[rows], int(batch_all.max())
        return self.steps.draw(self.streams, self.Q), self.steps.max_steps(), None, None


def run_chunk(plan: SimulationPlan, start: int, R: int, out_w, out_drift: np.ndarray | None, bar,
              halt: Stop | None = None) -> None:
    """Simulate replicates ``[start, start + R)`` (``start`` a multiple of the block), padded to whole blocks.

    The server weights of the recorded rounds go to ``out_w`` (an array (T, R_total, d) or
    :class:`~fedsde.sim.moments.StreamingMoments`), the drift to ``out_drift`` (T_d, E_max, R_total, Q); ``bar``
    advances by one per round.  Blow-up events go to ``plan.watch`` under the chunk's ``start``; the chunk stops
    past the step of another chunk's failure (``halt``, :class:`fedsde.sim.workers.Stop`).
    """
    Q, d, block, dev, dtype = plan.Q, plan.d, plan.block_size, plan.device, plan.dtype
    agg: Aggregator = plan.aggregator
    m, weighting = plan.participation, plan.weighting
    nb = -(-R // block)
    Rp = nb * block
    noise = ReplicateStreams(plan.seed, start // block, nb, dev, _NOISE, block)
    part = ReplicateStreams(plan.seed, start // block, nb, dev, _PARTICIPATION, block) if plan.sampled else None
    draws = _StepDraws(plan, start, nb)
    oracle = plan.make_oracle(plan.problem, nb, dev, dtype)
    if hasattr(oracle, "run_blocks"):  # an oracle that groups blocks per call: at most the run's
        oracle.run_blocks = -(-plan.replicates // block)
    # train only the m participants of each replicate (m slots instead of Q) when the oracle allows it; in the
    # cross-device regime also draw and aggregate only them (plan.sparse)
    takes_clients = getattr(oracle, "participants_only", False)
    sparse = plan.sparse and (takes_clients or getattr(oracle, "accepts_clients", False))
    # multinomial draws: m slots, a client's repeats idle (any Q: a round reads only the drawn clients' rows)
    slots_ok = (takes_clients and m is not None and (m < Q or weighting == "multinomial") and out_drift is None)
    p = torch.as_tensor(plan.problem.p, dtype=dtype, device=dev)
    w = torch.as_tensor(plan.w_start, dtype=dtype, device=dev).expand(Rp, d).clone()
    state = agg.init(w)
    solver = agg.local_solver
    keep_idx = {int(k): i for i, k in enumerate(plan.record)}
    drift_idx = {int(k): i for i, k in enumerate(plan.drift_rounds)}
    store = _Recorder(out_w, start, R, len(keep_idx), dev)
    xbuf = None
    if 0 in keep_idx:
        store(keep_idx[0], w[:R])
    for n in range(plan.rounds):
        if halt is not None:
            halt.check(n)
        eta, s = float(plan.etas[n]), float(plan.server_lrs[n])
        tau, n_steps, batch, max_batch = draws.next()
        full = n < agg.warm_start_rounds
        cid, clients, tau_s, mask, drawn, keep = None, None, tau, None, None, None
        if sparse:  # compact rules only (fedsde.sim.plan.compact_rule): no warm start; per-client state on slots
            cid, weights = draw_subsets(part, nb, Q, m, weighting, p, block)
            mask = first_occurrences(cid)  # a multinomial draw's repeats: idle slots
        elif slots_ok and weighting == "multinomial":
            mask, weights, drawn, keep = multinomial_slots(part, nb, Q, m, p, block)
        else:
            mask, weights = draw_participation(part, nb, Q, m, weighting, p, block)
        if full:  # the draws above keep the streams aligned with other rules
            mask = torch.ones((Rp, Q), dtype=torch.bool, device=dev)
            weights = p.expand(Rp, Q)
        wb = w.view(nb, 1, block, d)
        corr = agg.correction(state, cid) if sparse else agg.correction(state)  # (Rp, Q|m, d) or None
        if slots_ok and not full and not sparse:
            if drawn is None:
                cid, clients = participant_slots(mask, m, block)
            else:
                cid, clients = drawn, drawn.view(nb, block, m).transpose(1, 2)
            if corr is not None:
                corr = corr.gather(1, cid.unsqueeze(-1).expand(Rp, m, d))
        elif sparse:
            clients = cid.view(nb, block, m).transpose(1, 2)
        if cid is not None:
            tau_s = tau.gather(1, cid)
            if batch is not None:
                batch = batch.gather(1, cid)
        slots = Q if cid is None else m  # clients, or participant slots
        if xbuf is None or xbuf.shape != (nb, slots, block, d):  # the clients' weights, reused round after round
            xbuf = torch.empty((nb, slots, block, d), dtype=dtype, device=dev)
        x = xbuf.copy_(wb.expand(nb, slots, block, d))  # (nb, slots, B, d)
        rec = drift_idx.get(n)
        first_grads = run_local_steps(
            x=x, oracle=oracle, streams=noise, eta=eta, n_steps=n_steps,
            # (nb, slots, B, 1): local steps of each client, to stop clients with fewer steps
            local_steps=None if draws.uniform else tau_s.view(nb, block, slots).transpose(1, 2).unsqueeze(-1),
            round_batches=RoundBatches(batch, max_batch, clients), solver=solver, anchor=wb,
            correction=None if corr is None else corr.view(nb, block, slots, d).transpose(1, 2),
            keep_first_grad=agg.needs_first_grads,
            on_step=None if rec is None else partial(_record_drift, out_drift, rec, wb=wb, start=start, R=R),
        )
        if rec is not None and n_steps < out_drift.shape[1]:
            out_drift[rec, n_steps:, start:start + R] = out_drift[rec, n_steps - 1, start:start + R]
        # (Rp, slots, d) in one pass (a fresh tensor: a rule may keep it)
        delta = torch.sub(x.transpose(1, 2), wb.transpose(1, 2), out=x.new_empty((nb, block, slots, d)))
        delta = delta.view(Rp, slots, d)
        g0 = None if first_grads is None else first_grads.transpose(1, 2).reshape(Rp, slots, d)
        if sparse:  # the rule sees the m participants as its clients (ctx.clients: theirs)
            norms = solver.accumulation_norm(tau_s, eta).to(dtype) if agg.needs_norms else None
            ctx = RoundContext(round=n, server_lr=s, eta=eta, local_steps=tau_s, participating=mask, p=p,
                               norms=norms, first_grads=g0, clients=cid)
        else:
            if cid is not None:
                delta = scatter_slots(delta, cid, Q, keep)
                if g0 is not None:
                    g0 = scatter_slots(g0, cid, Q, keep)
            elif m is not None and not bool(mask.all()):
                delta = delta * mask.unsqueeze(-1).to(dtype)
            norms = solver.accumulation_norm(tau, eta).to(dtype) if agg.needs_norms else None
            ctx = RoundContext(round=n, server_lr=s, eta=eta, local_steps=tau, participating=mask, p=p,
                               norms=norms, first_grads=g0)
        w, state = agg.apply(w, delta, weights, state, ctx)
        if not plan.watch.scan(w[:R], f"round {n + 1}", first=start, order=start, when=n):
            _raise_diverged(n, start, delta[:R], w[:R], cid[:R] if sparse else None)
        if n + 1 in keep_idx:
            store(keep_idx[n + 1], w[:R])
        bar.update(1)
    store.close()


class _Recorder:
    """Server weights of the recorded rounds into ``out_w`` (samples (T, R_total, d) or
    :class:`~fedsde.sim.moments.StreamingMoments`) for the rows ``[start, start + R)``.  Samples computed on a GPU
    stay there until :meth:`close` (one transfer per chunk, not one per recorded round)."""

    def __init__(self, out_w, start: int, R: int, T: int, device: torch.device):
        self.out_w, self.start, self.R = out_w, start, R
        self.moments = isinstance(out_w, StreamingMoments)
        self.buffer = {} if device.type != "cpu" and not self.moments else None

    def __call__(self, t: int, w: torch.Tensor) -> None:
        if self.moments:
            self.out_w.add(t, self.start, w)
        elif self.buffer is not None:
            self.buffer[t] = w.clone()
        else:
            self.out_w[t, self.start:self.start + self.R] = w.numpy()

    def close(self) -> None:
        if self.buffer:
            ts = sorted(self.buffer)
            host = torch.stack([self.buffer[t] for t in ts]).cpu().numpy()
            self.out_w[ts, self.start:self.start + self.R] = host


def _record_drift(out_drift, rec, i, x, *, wb, start, R):
    """``‖w_k^{(i+1)} − w_n‖`` of every client after local step ``i`` into ``out_drift[rec, i]`` (rows of the chunk)."""
    dist = torch.linalg.vector_norm(x - wb, dim=-1)  # (nb, Q, B)
    out_drift[rec, i, start:start + R] = dist.transpose(1, 2).reshape(-1, dist.shape[1])[:R].cpu().numpy()


def _raise_diverged(n: int, start: int, delta: torch.Tensor, w: torch.Tensor, cid: torch.Tensor | None = None):
    """Raise :class:`SimulationDivergedError` naming the round and the first client (or the server update) whose
    numbers are not finite; ``delta`` (R, slots, d) per client or per participant slot (``cid`` (R, slots): their
    clients)."""
    bad = ~torch.isfinite(delta).all(-1)  # (R, slots)
    if bool(bad.any()):
        r, k = (int(v) for v in torch.nonzero(bad)[0])
        where = f"client {k if cid is None else int(cid[r, k])} (replicate {start + r})"
    else:
        r = int(torch.nonzero(~torch.isfinite(w).all(-1))[0, 0])
        where = f"the server update (replicate {start + r})"
    raise diverged(SimulationDivergedError(
        f"simulation produced NaN/inf at round {n} in {where}; reduce eta or server_lr"
    ), n, start + r)
