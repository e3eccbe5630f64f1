"""Everything :func:`fedsde.sim.simulate` resolves before it runs, in one frozen :class:`SimulationPlan`.

:func:`make_plan` validates the arguments at the boundary (each error names the argument, its value and the
constraint) and resolves the defaults: server rule, gradient oracle, start point, recorded rounds, block and chunk
sizes.  The chunk loop (:func:`fedsde.sim.runner.run_chunk`) then reads the plan and trusts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsde._compat import renamed
from fedsde._memory import available_memory, memory_fits
from fedsde._validate import choice, positive_int, record_rounds, start_point
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.clients.data_oracles import DENSE_FACTOR, FLOYD_MAX, minibatch_oracle
from fedsde.clients.least_squares_oracle import FLOYD_MAX as LS_FLOYD_MAX
from fedsde.clients.least_squares_oracle import least_squares_oracle
from fedsde.clients.module_oracle import module_oracle
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.steps import EpochSteps, RandomSteps, normalise_steps
from fedsde.clients.streams import resolve_block_size
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_RECORDING,
    REPLICATION_FIELDS,
    Precision,
    Recording,
    Replication,
    Schedule,
    takes_values,
)
from fedsde.problems.module import is_module_problem
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.problems.regression.problem import RegressionProblem
from fedsde.sim.moments import BlowUpWatch, plan_chunks, problem_scale, working_set
from fedsde.sim.participation import WEIGHTINGS, is_cross_device, is_sampled
from fedsde.sim.workers import resolve_workers


@dataclass(frozen=True)
class SimulationPlan:
    """A resolved simulation: what every chunk of replicates needs, fixed before the first one runs.

    Attributes
    ----------
    problem : QuadraticProblem or ClassificationProblem
        ``Q`` clients of dimension ``d`` with weights ``p``.
    aggregator : Aggregator
        The server rule, bound to the problem (it also fixes the local solver).
    make_oracle : callable
        ``(problem, nblocks, device, dtype) -> GradientOracle``.
    seed : int
        Base seed of every random stream.
    device, dtype
        Where and in what precision the chunks compute.
    etas, server_lrs : ndarray, shape (rounds,)
        Client learning rate ``η`` and server step ``s`` of every round.
    steps : ndarray of int (Q,), RandomSteps or EpochSteps
        The local-step law: fixed ``τ_k``, redrawn every round, or from epochs and batch sizes.
    participation : int or None
        ``m`` clients per round (``None``: all).
    weighting : str
        One of :data:`fedsde.sim.participation.WEIGHTINGS`.
    w_start : ndarray, shape (d,)
        Start point of every replicate.
    record : ndarray of int, shape (T,)
        Rounds (0..rounds) whose server weights are kept.
    drift_rounds : ndarray of int, shape (T_d,)
        Rounds (0..rounds − 1) whose client drift is recorded.
    block_size : int
        Replicates per random stream.
    replicates : int
        ``R`` of the whole run (chunks cover ``[0, R)``).
    chunk_size : int or None
        Replicates per chunk (``None``: one chunk).
    moments_only : bool
        Keep streamed moments instead of the samples.
    watch : BlowUpWatch
        The run's blow-up watch (one warning per run).
    workers : int
        Threads that may simulate chunks at once (:mod:`fedsde.sim.workers`).
    sparse : bool
        The cross-device regime (:mod:`fedsde.sim.participation`): only the ``m`` participants are drawn, trained
        and aggregated.
    """

    problem: Any
    aggregator: Aggregator
    make_oracle: Callable
    seed: int
    device: torch.device
    dtype: torch.dtype
    etas: np.ndarray
    server_lrs: np.ndarray
    steps: np.ndarray | RandomSteps | EpochSteps
    participation: int | None
    weighting: str
    w_start: np.ndarray
    record: np.ndarray
    drift_rounds: np.ndarray
    block_size: int
    replicates: int
    chunk_size: int | None
    moments_only: bool
    watch: BlowUpWatch
    workers: int = 1
    sparse: bool = False

    @property
    def Q(self) -> int:
        return int(self.problem.Q)

    @property
    def d(self) -> int:
        return int(self.problem.d)

    @property
    def rounds(self) -> int:
        return int(self.etas.size)

    @property
    def max_steps(self) -> int:
        """Most local steps any client can run in a round (the drift record's length)."""
        return max_local_steps(self.steps)

    @property
    def slots(self) -> int:
        """Client slots trained per replicate: ``m`` in the cross-device regime, else ``Q``."""
        return int(self.participation) if self.sparse else self.Q

    @property
    def sampled(self) -> bool:
        """True when participants are drawn every round (see :func:`fedsde.sim.participation.is_sampled`)."""
        return is_sampled(self.participation, self.Q, self.weighting)


def compact_rule(agg: Aggregator) -> bool:
    """True when the rule's step is ``w + s Σ_k ω_k Δ_k`` with ``ω`` the participation scheme's own weights and
    nothing kept per client: no server state, correction, norms, first gradients or warm start, and
    ``exact_under_sampling`` (:mod:`fedsde.aggregators.base`).  Such a rule gives the same step on the ``m``
    participants' slots as on all ``Q`` clients (the others have zero weight), which the cross-device regime uses.
    So does a rule with server state only that reads the displacements through that weighted mean
    (:attr:`~fedsde.aggregators.Aggregator.mean_only`: FedAvgM, FedAdam, FedYogi, FedAdagrad), and a rule that keeps
    per-client state for the participants on their slots (:attr:`~fedsde.aggregators.Aggregator.participant_state`:
    SCAFFOLD, FedAWARE without its full first round).
    """
    if agg.warm_start_rounds:
        return False
    if agg.participant_state:  # per-client state of the participants, on slots (SCAFFOLD)
        return True
    linear = agg.exact_under_sampling and not agg.stateful
    return bool((linear or agg.mean_only) and not agg.needs_norms and not agg.needs_first_grads
                and agg.correction(None) is None)


@renamed(steps="local_steps")
def max_local_steps(local_steps: np.ndarray | RandomSteps | EpochSteps) -> int:
    """The most local steps a client may run in a round (old name of ``local_steps``: ``steps``)."""
    if isinstance(local_steps, RandomSteps | EpochSteps):
        return local_steps.max_steps()
    return int(local_steps.max())


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr"), replication=REPLICATION_FIELDS,
              precision=("device", "dtype"), recording=("record", "record_drift", "moments_only"))
def make_plan(
    problem,
    schedule: Schedule,
    replication: Replication,
    precision: Precision | None = None,
    *,
    w0=None,
    participation: int | None = None,
    weighting: str = "unbiased",
    aggregator: str | Aggregator = "fedavg",
    recording: Recording | None = None,
    oracle_factory: Callable | None = None,
) -> SimulationPlan:
    """Resolve the arguments of :func:`fedsde.sim.simulate` (same names and meaning; the values checked where they
    were built, the rest here)."""
    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    rounds, replicates = schedule.rounds, replication.replicates
    chunk_size, memory_limit, workers = replication.chunk_size, replication.memory_limit, replication.workers
    record, record_drift, moments_only = recording.record, recording.record_drift, recording.moments_only
    block_size = resolve_block_size(replication.block_size, replicates)  # default min(replicates, BLOCK)
    base_seed = replication.need_seed()
    etas = schedule.per_round("eta") if rounds else np.zeros(0)
    lrs = schedule.per_round("server_lr") if rounds else np.zeros(0)
    Q, d = problem.Q, problem.d
    local_steps = schedule.local_steps
    steps = normalise_steps(local_steps, Q) if hasattr(local_steps, "max_steps") else schedule.steps_for(Q)
    if participation is not None:
        participation = positive_int("participation", participation)
        if participation > Q:
            raise FedsdeInputError(f"participation={participation}: cannot exceed the number of clients Q={Q}")
    choice("weighting", weighting, WEIGHTINGS)
    agg = get_aggregator(aggregator)
    if etas.size:
        agg.local_solver.check_eta(float(etas.max()))
    agg.bind(problem)
    dev, dtype = precision.device, precision.dtype
    keep = record_rounds("record", record, rounds)
    drift_keep = record_rounds("record_drift", record_drift, rounds - 1)  # local training of rounds 0..rounds − 1
    if w0 is None and hasattr(problem, "initial_weights"):
        w_start = problem.initial_weights()  # data problems: zero for linear models, seeded Glorot for the MLP
    else:
        w_start = start_point(w0, d)
    make_oracle = oracle_factory or _default_oracle(problem, steps)
    if moments_only and drift_keep.size:
        raise FedsdeInputError("record_drift: needs the samples; not available with moments_only=True")
    workers = resolve_workers(workers, dev)
    sparse = is_cross_device(participation, Q, weighting) and compact_rule(agg) and not drift_keep.size
    check = getattr(make_oracle, "check_memory", None)
    if check is not None:  # an oracle with a work space of its own per block (module problems): refused up front
        # the oracle trains the participants' slots only when they are handed over (runner.run_chunk)
        part_slots = (participation is not None and (participation < Q or weighting == "multinomial")
                      and not agg.warm_start_rounds)
        work = check(problem, slots=participation if sparse or (part_slots and not drift_keep.size) else Q,
                     block=block_size, device=dev, dtype=dtype, memory_limit=memory_limit)
    else:
        work = 0
    # a round on all Q clients although few take part: a warm start or the drift record (multinomial draws train
    # their m slots, as uniform subsets do)
    given_chunk = chunk_size
    trains_all = participation is None or (not sparse and (
        (participation >= Q and weighting != "multinomial") or agg.warm_start_rounds > 0 or drift_keep.size > 0))
    try:
        # the rule's own step on all Q clients (FedAWARE's min-norm problem): on slots only once a replicate has
        # seen every client, which needs rounds·m >= Q
        step = agg.step_memory(Q) if not sparse or rounds * participation >= Q else 0
        chunk_size = _chunk_size(replicates=replicates, chunk_size=chunk_size, block=block_size,
                                 Q=participation if sparse else Q, d=d, step=step, recorded=keep.size,
                                 drift_cols=drift_keep.size * max_local_steps(steps), moments_only=moments_only,
                                 device=dev, dtype=dtype, memory_limit=memory_limit, work=int(work or 0),
                                 copies=getattr(make_oracle, "slot_copies", 10))
        if hasattr(problem, "round_memory"):  # clients on demand: what a round's participants need, not the population
            _check_population(problem, make_oracle, None if trains_all else participation,
                              min(replicates, (chunk_size or replicates) * workers), dev, memory_limit, weighting)
    except FedsdeInputError as exc:
        if not sparse and is_cross_device(participation, Q, weighting) and agg.cross_device_hint:
            raise FedsdeInputError(f"{agg.cross_device_hint}: {exc}") from None
        raise
    if sparse and agg.participant_state:
        chunk_size = _client_state_chunk(agg, replicates, chunk_size, given_chunk is not None, block_size, workers,
                                         rounds, participation, Q, d, dtype,
                                         available=available_memory(dev, memory_limit))
    return SimulationPlan(
        problem=problem, aggregator=agg, make_oracle=make_oracle, seed=base_seed, device=dev, dtype=dtype,
        etas=etas, server_lrs=lrs, steps=steps, participation=participation, weighting=weighting, w_start=w_start,
        record=keep, drift_rounds=drift_keep, block_size=block_size, replicates=replicates, chunk_size=chunk_size,
        moments_only=bool(moments_only), watch=BlowUpWatch(problem_scale(problem, w_start), "the simulation"),
        workers=workers, sparse=sparse,
    )


def _chunk_size(*, replicates: int, chunk_size: int | None, block: int, Q: int, d: int, recorded: int,
                drift_cols: int, moments_only: bool, device: torch.device, dtype: torch.dtype,
                memory_limit: int | str | None, step: int = 0, work: int = 0, copies: int = 10) -> int | None:
    """Chunk size that fits (``chunk_size`` if given) or a one-line error; per replicate: about ten (Q, d) tensors
    (``copies``: an oracle with a work space of its own declares fewer) of the local round (``Q`` the slots
    trained: ``m`` in the cross-device regime), the aggregator's state, a copy of the weights and the per-block
    moment sums (d² per block), the rule's ``step`` bytes, and on a GPU the chunk's recorded weights (T, d) until
    its end; stored: weights (T, R, d) and drift (T_d, E_max, R, Q), and the oracle's own ``work`` space (module
    problems), held beside the chunks."""
    item = torch.finfo(dtype).bits // 8
    per_rep = (item * (copies * Q * d + 6 * Q + 4 * d) + 16 * d + step
               + (16 * d * d // block + 8 * d if moments_only else 0))
    if device.type != "cpu" and not moments_only:
        per_rep += item * recorded * d
    stored = 0 if moments_only else 8 * replicates * (recorded * d + drift_cols * Q)
    hint = ("keep moments only (moments_only=True; the simulate command does), record fewer rounds, or use fewer "
            "replicates") if not moments_only else "use a smaller problem or another device"
    available = available_memory(device, memory_limit)
    return plan_chunks(f"replicates={replicates}", replicates, chunk_size, block, per_rep, stored + work, available,
                       hint, working_set=working_set(device, available), device=device)


def _client_state_chunk(agg: Aggregator, replicates: int, chunk_size: int | None, given: bool, block: int,
                        workers: int, *shape, available: int) -> int | None:
    """The chunk size (``chunk_size`` if ``given``, else the largest block multiple up to it) whose per-client state
    fits, or a one-line refusal naming what drives it; ``shape`` is ``(rounds, m, Q, d, dtype)``.

    A rule with :attr:`~fedsde.aggregators.Aggregator.participant_state` keeps one row of ``d + 1`` numbers (at
    most: SCAFFOLD's control, FedAWARE's momentum and seen flag) per replicate for every client that any replicate
    of the chunk has drawn (:class:`~fedsde.aggregators.client_table.ClientTable`): at most
    ``K = min(Q, rounds·m·C)`` clients for ``C`` replicates in a chunk (padded to whole blocks), ``C·K·(d + 1)``
    numbers, three copies while a round updates it, for each of the ``workers`` chunks in flight.
    """
    rounds, m, Q, d, dtype = shape
    item = torch.finfo(dtype).bits // 8

    def need(c: int) -> tuple[int, int]:
        cp = -(-c // block) * block
        k = min(Q, rounds * m * cp)
        return 3 * min(workers, -(-replicates // c)) * cp * k * (d + 1) * item, k

    size = min(replicates, chunk_size or replicates)
    if not given:
        while size > block and need(size)[0] > available:
            size = max(block, (size - 1) // block * block)
    total, k = need(size)
    memory_fits(f"aggregator={agg.name!r} keeps per-client state for the clients that have taken part: up to "
                f"min(Q={Q}, rounds·participation·replicates in flight = {rounds}·{m}·{-(-size // block) * block}) = "
                f"{k} clients × {d + 1} numbers per replicate", total, available,
                "use fewer rounds, participants or replicates at once (chunk_size)")
    return None if size >= replicates else size


def _check_population(problem, make_oracle, m: int | None, in_flight: int, device, memory_limit,
                      weighting: str = "unbiased") -> None:
    """Refuse up front, in one line naming what drives it, a population run whose participants' rows do not fit
    (:meth:`fedsde.problems.populations.base.PopulationProblem.round_memory` and its kin for least-squares and module
    populations; ``m`` None: a round of all ``Q`` clients).  Multinomial draws take client ``k`` with probability
    ``p_k``, so a slot holds ``Σ_k p_k n_k`` rows on average (the size-biased mean when ``p_k ∝ n_k``), not the mean
    client's: the difference is added."""
    how = getattr(make_oracle, "describe", {}) if isinstance(getattr(make_oracle, "describe", None), dict) else {}
    batch, largest = how.get("batch_size"), int(np.max(problem.sizes))
    whole = how.get("oracle") in ("full", "gaussian") or how.get("sampling") == "epoch" or (
        batch is not None and largest <= 2 * batch)
    if is_module_problem(problem):  # keys of every row of the largest client per slot (ModuleOracle._draw)
        b = problem.batch_size
        whole = b is None or (problem.sampling == "without-replacement" and (largest <= DENSE_FACTOR * b
                                                                          or b > FLOYD_MAX))
    elif getattr(problem, "model", None) == "least-squares":  # LeastSquaresMinibatchOracle: N_max keys per slot
        b = batch or problem.batch_size
        whole = whole or ((how.get("sampling") or problem.sampling) == "without-replacement"
                          and (b is None or b > LS_FLOYD_MAX))
    slots = in_flight * (problem.Q if m is None else m)
    need, what = problem.round_memory(slots, whole_clients=whole)
    if weighting == "multinomial" and m is not None:
        drawn, mean = float(np.dot(problem.p, problem.sizes)) / float(np.sum(problem.p)), float(np.mean(problem.sizes))
        if drawn > mean:  # the rows a slot holds grow from the mean client's to the size-biased mean
            per_slot = problem.round_memory(slots + 1)[0] - problem.round_memory(slots)[0]
            need += int(slots * per_slot * (drawn / mean - 1.0))
            what += f"; multinomial draws take client k with probability p_k: about {drawn:.3g} rows a slot"
    taking = f"participation={m}" if m is not None else f"every one of the Q={problem.Q} clients training"
    memory_fits(f"replicates in flight={in_flight}, {taking}: {what}", need,
                available_memory(device, memory_limit),
                "use fewer participants or replicates (chunk_size), cap the client sizes (max_samples) or a "
                "minibatch oracle")


def _default_oracle(problem, local_steps):
    """Quadratic clients: Gaussian gradient noise; least-squares clients: minibatches with or without replacement
    as the problem says; classification problems: minibatch SGD with the problem's ``batch_size`` and ``sampling``
    (batch sizes from :class:`EpochSteps` when given)."""
    if isinstance(problem, QuadraticProblem):
        return GaussianQuadraticOracle
    if isinstance(problem, RegressionProblem) or getattr(problem, "model", None) == "least-squares":  # on demand too
        return least_squares_oracle(problem.batch_size, sampling=problem.sampling)
    if is_module_problem(problem):  # a ModuleProblem, or a module trained by a client population
        return module_oracle()
    sampling = getattr(problem, "sampling", "minibatch")
    if isinstance(local_steps, EpochSteps):
        return minibatch_oracle(sampling=sampling)
    if getattr(problem, "batch_size", None) is None:
        raise FedsdeInputError(
            "oracle_factory: a data problem needs a gradient oracle; give the problem a batch_size, pass "
            "local_steps=EpochSteps(...) (batch sizes) or oracle_factory=fedsde.sim.minibatch_oracle(batch_size=...)"
        )
    return minibatch_oracle(problem.batch_size, sampling=sampling)
