"""SVAG lifted to the server round: a sampler of seed 002's SDE (2) for any client loss.

Stochastic Variance Amplified Gradient (Li, Malladi & Arora, NeurIPS 2021, "On the validity of modeling SGD with
stochastic differential equations", Sec. 4) applied to the FedAvg round.  With parameter ``ℓ >= 1`` the chain runs
``ℓ`` times more rounds with server step ``s/ℓ`` (time step ``h/ℓ`` on the clock ``t = n·h``) and round
displacement

    Â_ℓ(w) = c₁ Â⁽¹⁾(w) + c₂ Â⁽²⁾(w),      c₁,₂ = (1 ± √(2ℓ − 1))/2,

where ``Â⁽¹⁾`` and ``Â⁽²⁾`` are the displacements ``Σ_k p_k (w_k^{(τ_k)} − w)`` of two *independent* client rounds
from the same server weights ``w``.  Since ``c₁ + c₂ = 1`` and ``c₁² + c₂² = ℓ``, one step has conditional mean
``(s/ℓ) M(w)`` and covariance ``(s/ℓ)² ℓ V(w) = s² V(w)/ℓ``: per unit of time ``t`` the drift ``η₀ M`` and the
covariance ``h η₀² V`` of eq. (2) (``η₀ = s/h``), for every ``ℓ``.  As ``ℓ → ∞`` the chain converges weakly, with
order 1 in ``1/ℓ``, to the SDE (Li, Malladi & Arora 2021), so it samples eq. (2) without estimating ``M̂`` and ``V̂``.
``ℓ = 1`` is FedAvg itself (one round, not the two-rollout combination).  For quadratic clients the step is an
Euler–Maruyama step of size ``h/ℓ`` of the corrected linear SDE (in law), whose exact law is
:func:`svag_transient_moments`.

Clocks: base rounds ``n = 0..rounds`` at ``t = n·h``; SVAG step ``j`` at ``t = j·h/ℓ``; the chain reports on the
base grid (every ``ℓ`` steps).  Memory: the state ``(R, d)`` plus the clients' weights ``(2, Q, R, d)``;
nothing grows with the number of rounds unless weights are recorded.

Randomness: ``ℓ = 1`` draws from the simulator's noise streams (same seed, same ``block_size`` → the numbers of
:func:`fedsde.sim.simulate` with FedAvg and full participation); ``ℓ > 1`` from a stream family of its own per
``ℓ`` (so different ``ℓ`` are independent), block ``b`` of replicates using generators ``2b`` and ``2b + 1`` for
its two rollouts; with ``common=True`` the chains share random numbers where their steps begin at the same time
(:mod:`fedsde.sde.svag_streams`: each chain's law unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from fedsde._compat import renamed
from fedsde._memory import available_memory
from fedsde._progress import progress_bar
from fedsde._validate import (
    positive_int,
    record_rounds,
    start_point,
)
from fedsde.clients.least_squares_oracle import problem_least_squares_oracle
from fedsde.clients.local import run_local_steps, step_limits
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.streams import resolve_block_size
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.params import (
    DEFAULT_RECORDING,
    NO_HOOKS,
    PRECISION_FIELDS,
    ChainHooks,
    Precision,
    Recording,
    Replication,
    Schedule,
    takes_values,
)
from fedsde.problems.module.problem import ModuleProblem
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.problems.regression.problem import RegressionProblem
from fedsde.sde.svag_law import svag_round_law, svag_transient_moments  # noqa: F401 — re-exported
from fedsde.sde.svag_streams import chain_streams
from fedsde.sim.moments import BlowUpWatch, plan_chunks, problem_scale, working_set
from fedsde.sim.workers import diverged, plan_workers, resolve_workers, run_chunks

#: stream family of the SVAG rollouts: purpose = _SVAG + ℓ (disjoint from the simulator's 0, 1, 2, the general
#: SDE's 1 << 19 and the Brownian motion's 1 << 20 + window)
_SVAG = 3 << 20


def svag_coefficients(ell: int) -> tuple[float, float]:
    """SVAG weights ``(c₁, c₂) = ((1 + √(2ℓ−1))/2, (1 − √(2ℓ−1))/2)`` (Li, Malladi & Arora 2021).

    ``c₁ + c₂ = 1`` (the mean is kept) and ``c₁² + c₂² = ℓ`` (the variance of two independent rounds is amplified
    ``ℓ`` times); ``ℓ = 1`` gives ``(1, 0)``.
    """
    return _coefficients(positive_int("ell", ell))


def _coefficients(ell: int) -> tuple[float, float]:
    r = math.sqrt(2 * ell - 1)
    return (1.0 + r) / 2.0, (1.0 - r) / 2.0


def default_oracle_factory(problem) -> Callable | None:
    """Gradient oracle of ``problem``: ``None`` (the Gaussian quadratic default) for quadratic clients, else
    minibatches of the problem's ``batch_size`` (:func:`fedsde.sim.minibatch_oracle`)."""
    if isinstance(problem, QuadraticProblem):
        return None
    if isinstance(problem, RegressionProblem):
        return problem_least_squares_oracle(problem)  # its batch size and sampling, checked already
    if isinstance(problem, ModuleProblem):
        from fedsde.clients.module_oracle import module_oracle

        return module_oracle()
    batch = getattr(problem, "batch_size", None)
    if batch is None:
        raise FedsdeInputError(
            f"problem: a {type(problem).__name__} needs a batch size for its minibatch gradients (batch_size in the "
            "problem file, or pass oracle_factory=fedsde.sim.minibatch_oracle(batch_size=...))"
        )
    from fedsde.clients.data_oracles import minibatch_oracle, minibatches_oracle
    from fedsde.problems.classification.options import Minibatches

    if isinstance(getattr(problem, "minibatches", None), Minibatches):  # the problem's checked value, trusted
        return minibatches_oracle(problem.minibatches)
    return minibatch_oracle(batch_size=int(batch), sampling=getattr(problem, "sampling", None) or "minibatch")


@dataclass
class SVAGPaths:
    """Result of :func:`svag_chain`.

    Attributes
    ----------
    ell : int
    h : float
        Time step of one base round (the SVAG step is ``h/ℓ``).
    rounds : ndarray of int, shape (T,)
        Base rounds at which weights were recorded (empty unless asked).
    times : ndarray, shape (T,)
        ``t = n·h`` of those rounds.
    weights : ndarray, shape (T, R, d)
        Recorded weights (``T = 0`` unless ``record`` was given).
    final : ndarray, shape (R, d)
        Weights at ``t = rounds·h``.
    config : dict
    """

    ell: int
    h: float
    rounds: np.ndarray
    times: np.ndarray
    weights: np.ndarray
    final: np.ndarray
    config: dict = field(default_factory=dict)

    @property
    def replicates(self) -> int:
        return int(self.final.shape[0])


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"),
              replication=("replicates", "seed", "block_size", "workers"), precision=PRECISION_FIELDS,
              recording=("record",), types={"hooks": ChainHooks}, hooks=("on_grid", "bar", "what", "on_error"))
def svag_chain(
    problem,
    schedule: Schedule,
    replication: Replication,
    precision: Precision | None = None,
    *,
    ell: int,
    w0=None,
    oracle_factory: Callable | None = None,
    recording: Recording | None = None,
    hooks: ChainHooks | None = None,
    common: bool = False,
) -> SVAGPaths:
    """Run the SVAG chain with parameter ``ell`` for ``rounds`` base rounds (``ell·rounds`` SVAG steps).

    Parameters
    ----------
    problem : QuadraticProblem or a data problem
        ``Q``, ``d``, weights ``p``; non-quadratic problems need ``oracle_factory``.
    schedule, replication, precision, recording, hooks : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``, ``block_size``, ``workers``),
        :class:`~fedsde.params.Precision` (``device``, ``dtype``), :class:`~fedsde.params.Recording`
        (``record``) and :class:`~fedsde.params.ChainHooks` (``on_grid``, ``bar``, ``what``, ``on_error``); each
        field may be given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`); the fields mean:
    eta : float or array, shape (rounds,)
        Client learning rate (base round ``n`` uses ``eta[n]`` for its ``ℓ`` steps); unchanged by ``ℓ``.
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k``.
    rounds : int
        Base rounds ``n``: the chain runs to ``t = n·h``.
    ell : int
        SVAG parameter ``ℓ >= 1`` (1: FedAvg).
    replicates : int
        Independent chains ``R``.
    seed : int or torch.Generator
    server_lr : float or array, shape (rounds,)
        Server step ``s`` of the base run (the chain uses ``s/ℓ``).
    h : float, optional
        Time step of one base round (default ``eta`` when constant); only labels times.
    w0 : array, shape (d,), optional
        Start (default zero).
    oracle_factory : callable, optional
        ``(problem, nblocks, device, dtype) -> oracle`` (:mod:`fedsde.clients.oracles`); default the Gaussian
        quadratic oracle.  Data oracles must have a fixed batch size.
    record : sequence of int, optional
        Base rounds (0..rounds) whose weights are kept (memory ``O(T·R·d)``); default none.
    on_grid : callable, optional
        ``on_grid(n, start, w)`` at every base round ``n = 0..rounds`` with the weights ``w`` (R_c, d) of the
        replicates ``start … start + R_c − 1`` (a chunk: the chains run in chunks of replicate blocks, in parallel
        threads on the CPU; a view on the run's device and dtype: copy what you keep).
    device, dtype
    block_size : int, optional
        Replicates per random stream (default ``min(R, BLOCK)``, as in :func:`fedsde.sim.simulate`); ``R`` is padded
        to whole blocks.  Equal ``seed`` and block size give ``ℓ = 1`` the simulator's numbers.
    bar : tqdm, optional
        Progress bar advanced by one per SVAG step.
    what : str, optional
        Name of the run in the blow-up warning (default ``"the SVAG chain (ell=ℓ)"``).
    workers : int, optional
        Threads that run chunks of replicates at the same time (default: the threads torch may use on the CPU, 1 on a
        GPU; :mod:`fedsde.sim.workers`).  The chains are bit-identical for every value.
    on_error : callable, optional
        Called when a chunk fails (e.g. to release chunks that ``on_grid`` made wait on another,
        :meth:`fedsde.sim.moments.StreamingMoments.abort`).
    common : bool
        Draw from the streams keyed by the time a step begins (:mod:`fedsde.sde.svag_streams`): chains with other
        ``ℓ`` and the same seed share the numbers of steps that begin together (common random numbers).

    Returns
    -------
    SVAGPaths

    Notes
    -----
    NaN/inf weights raise :class:`~fedsde.errors.SimulationDivergedError` naming the base round, step and
    replicate; growth of ``max |w|`` far beyond the problem's scale issues one
    :class:`~fedsde.errors.DivergenceWarning` per chain (:class:`fedsde.sim.moments.BlowUpWatch`, as in the
    simulator).
    """
    ell = positive_int("ell", ell)
    if oracle_factory is None and not isinstance(problem, QuadraticProblem):
        raise FedsdeInputError(
            f"oracle_factory: required for a {type(problem).__name__} (only quadratic problems have a default)"
        )
    keep = record_rounds("record", (recording or DEFAULT_RECORDING).record, schedule.rounds, default_all=False)
    return run_svag_chain(problem, schedule, replication, precision or Precision(), ell=ell,
                          start=start_point(w0, problem.d), keep=keep, oracle_factory=oracle_factory,
                          hooks=hooks or NO_HOOKS, common=bool(common))


def run_svag_chain(problem, schedule: Schedule, replication: Replication, precision: Precision, *, ell: int,
                   start: np.ndarray, keep: np.ndarray, oracle_factory: Callable | None, hooks: ChainHooks,
                   common: bool) -> SVAGPaths:
    """:func:`svag_chain` with its arguments checked where they were built, not again: ``ell`` an int >= 1,
    ``start`` the start point, float64 of shape (d,) (:func:`fedsde._validate.start_point`), ``keep`` the recorded
    base rounds (:func:`fedsde._validate.record_rounds`), ``oracle_factory`` given unless the problem is quadratic
    (for the caller that checked them once for many chains: :func:`fedsde.validity.validity_test`)."""
    eta, server_lr, rounds = schedule.eta, schedule.server_lr, schedule.rounds
    R, workers = replication.replicates, replication.workers
    block = resolve_block_size(replication.block_size, R)  # default min(R, BLOCK): no replicates not asked for
    base_seed = replication.need_seed()
    etas = schedule.per_round("eta") if rounds else np.zeros(0)
    lrs = schedule.per_round("server_lr") if rounds else np.zeros(0)
    h = schedule.time_step
    Q, d = problem.Q, problem.d
    steps = schedule.steps_for(Q)
    oracle_factory = GaussianQuadraticOracle if oracle_factory is None else oracle_factory
    dev, dtype = precision.device, precision.dtype
    rollouts = 1 if ell == 1 else 2
    w_start = start
    # per replicate: the clients' weights and a few (rollouts, Q, d) work tensors of the local round; stored: the
    # recorded weights; chunks of blocks run in parallel threads (fedsde.sim.workers: the same numbers)
    item = torch.finfo(dtype).bits // 8
    available = available_memory(dev, None)
    check = getattr(oracle_factory, "check_memory", None)
    # an oracle with a work space of its own per block (module problems): refused up front, and held beside the
    # chunks' working set (one budget: both at once)
    work = 0 if check is None else int(check(problem, slots=Q, block=block, device=dev, dtype=dtype) or 0)
    copies = getattr(oracle_factory, "slot_copies", 10)  # (Q, d) tensors per replicate and rollout in a round
    chunk_size = plan_chunks(f"replicates={R}", R, None, block, item * (copies * rollouts * Q * d + 6 * d),
                             8 * (keep.size + 1) * R * d + work, available,
                             "use fewer replicates or record fewer rounds", working_set=working_set(dev, available),
                             device=dev)
    workers = resolve_workers(workers, dev)
    chunks = plan_workers(R, chunk_size, block, workers, rollouts * Q * d)
    run = _Chain(problem=problem, ell=ell, R=R, block=block, seed=base_seed, oracle_factory=oracle_factory, dev=dev,
                 dtype=dtype, etas=etas, lrs=lrs, steps=steps, w_start=w_start, keep=keep, on_grid=hooks.on_grid,
                 bar=hooks.bar, watch=BlowUpWatch(problem_scale(problem, w_start),
                                                  hooks.what or f"the SVAG chain (ell={ell})"),
                 common=common)
    run_chunks(run, chunks, workers, on_error=hooks.on_error,
               before_raise=lambda exc: run.watch.flush(before=getattr(exc, "fedsde_when", -1), stacklevel=8))
    run.watch.flush(stacklevel=6)  # the caller of svag_chain (or validity_test), past the keywords' adapter
    config = {"ell": ell, "eta": etas.tolist() if np.ndim(eta) else float(eta), "local_steps": steps.tolist(),
              "rounds": rounds, "replicates": R, "seed": base_seed, "h": h,
              "server_lr": lrs.tolist() if np.ndim(server_lr) else float(server_lr), "device": str(dev),
              "dtype": str(dtype).replace("torch.", ""), "block_size": block, "common_random": common,
              "oracle": getattr(oracle_factory, "describe", getattr(oracle_factory, "__name__", repr(oracle_factory)))}
    return SVAGPaths(ell=ell, h=h, rounds=keep, times=keep * h, weights=run.out, final=run.final, config=config)


@dataclass
class _Chain:
    """The SVAG chain of :func:`svag_chain` on one chunk of replicates, ``run(start, stop)`` (start on a block
    boundary): recorded weights into ``out`` (T, R, d) and the final ones into ``final`` (R, d), on the host in one
    transfer per chunk."""

    problem: object
    ell: int
    R: int
    block: int
    seed: int
    oracle_factory: Callable
    dev: torch.device
    dtype: torch.dtype
    etas: np.ndarray
    lrs: np.ndarray
    steps: np.ndarray
    w_start: np.ndarray
    keep: np.ndarray
    on_grid: Callable | None
    bar: object
    watch: BlowUpWatch
    common: bool = False

    def __post_init__(self):
        self.out = np.empty((self.keep.size, self.R, self.problem.d))
        self.final = np.empty((self.R, self.problem.d))

    def __call__(self, start: int, stop: int, halt=None) -> None:
        ell, block, dev, dtype = self.ell, self.block, self.dev, self.dtype
        Q, d, R = self.problem.Q, self.problem.d, stop - start
        nb = -(-R // block)
        Rp = nb * block
        rollouts = 1 if ell == 1 else 2
        nbi = nb * rollouts
        b0 = start // block
        streams = chain_streams(self.seed, b0, nb, dev, block, ell, 0 if ell == 1 else _SVAG + ell, self.common)
        oracle = self.oracle_factory(self.problem, nbi, dev, dtype)
        p = torch.as_tensor(np.asarray(self.problem.p, dtype=np.float64), dtype=dtype, device=dev)
        limits = step_limits(self.steps, device=dev)  # None when every client runs the same number of steps
        n_steps = int(self.steps.max())
        c1, c2 = _coefficients(ell)
        coef = torch.tensor([c1, c2], dtype=dtype, device=dev).view(1, 2, 1, 1)
        w = torch.as_tensor(self.w_start, dtype=dtype, device=dev).expand(Rp, d).clone()
        weights_p = p.expand(Rp, Q)
        keep_idx = {int(k): i for i, k in enumerate(self.keep)}
        kept: dict[int, torch.Tensor] = {}
        share = R / self.R  # of one step of the progress bar

        def emit(n: int) -> None:
            if n in keep_idx:
                kept[keep_idx[n]] = w[:R].clone()
            if self.on_grid is not None:
                self.on_grid(n, start, w[:R])

        emit(0)
        for n in range(self.etas.size):
            eta_n, s = float(self.etas[n]), float(self.lrs[n]) / ell
            for j in range(ell):
                if halt is not None:
                    halt.check(n * ell + j)
                if ell == 1:  # the simulator's round, operation for operation
                    wb = w.view(nb, 1, block, d)
                    x = wb.expand(nb, Q, block, d).clone()
                else:  # block b's two rollouts sit at blocks 2b, 2b + 1
                    wb = w.view(nb, 1, 1, block, d)
                    x = wb.expand(nb, 2, Q, block, d).clone().view(nbi, Q, block, d)
                run_local_steps(x=x, oracle=oracle, streams=streams[j % len(streams)], eta=eta_n, n_steps=n_steps,
                                local_steps=limits)
                if ell == 1:  # the displacements in place (the same numbers, one (Q, d) copy per replicate less)
                    delta = x.sub_(wb).transpose(1, 2).reshape(Rp, Q, d)
                    w = w + s * torch.bmm(weights_p.unsqueeze(1), delta).squeeze(1)
                    del delta
                else:
                    disp = x.view(nb, 2, Q, block, d).sub_(wb)
                    A = torch.einsum("q,njqbd->njbd", p, disp)  # (nb, 2, B, d)
                    w = w + s * (A * coef).sum(1).reshape(Rp, d)
                    del disp
                del x  # before the next step's copy is made
                if not self.watch.scan(w[:R], f"base round {n + 1}, step {j}", first=start, order=start,
                                       when=n * ell + j):
                    r = start + int(torch.nonzero(~torch.isfinite(w[:R]).all(-1))[0, 0])
                    raise diverged(SimulationDivergedError(
                        f"SVAG chain (ell={ell}) produced NaN/inf at base round {n}, step {j} (replicate {r}); "
                        "reduce eta or server_lr"
                    ), n * ell + j, r)
                if self.bar is not None:
                    self.bar.update(share)
            emit(n + 1)
        if kept:
            self.out[:, start:stop] = torch.stack([kept[i] for i in range(self.keep.size)]).cpu().numpy()
        self.final[start:stop] = w[:R].cpu().numpy()


@renamed(paths="replicates")
@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, recording=("record", "moments_only", "full_cov_rounds", "on_record"))
def simulate_svag(problem, schedule: Schedule, replication: Replication, precision: Precision | None = None, *,
                  ell: int, w0=None, oracle_factory=None, recording: Recording | None = None, progress: bool = False):
    """Paths of SDE (2) by the SVAG integrator (step ``h/ℓ``), as :class:`~fedsde.sde.integrate.SDEPaths`.

    The SVAG counterpart of ``simulate_sde(variant="general")``: each step costs two client rounds per path
    (against ``inner_samples`` for the Monte-Carlo-coefficient Euler scheme), and the weak error is ``O(h/ℓ)``.
    ``replicates`` (old name: ``paths``) independent paths; ``record`` defaults to every base round.
    ``moments_only``, ``full_cov_rounds`` and ``on_record`` as in :func:`~fedsde.sde.integrate.simulate_sde`: the
    moments streamed over chunks of replicates (:class:`~fedsde.sim.moments.StreamingMoments`, memory ``O(T·d)``
    without full covariances) and the recorded states handed to ``on_record(n, start, w)`` instead of kept.
    """
    from fedsde._memory import keep_memory
    from fedsde.sde.integrate import SDEPaths
    from fedsde.sim.moments import StreamingMoments

    recording = recording or DEFAULT_RECORDING
    rounds, R = schedule.rounds, replication.replicates
    record, moments_only = recording.record, recording.moments_only
    full_cov_rounds, on_record = recording.full_cov_rounds, recording.on_record
    keep = record_rounds("record", record, rounds) if record is not None else np.arange(rounds + 1)
    index = {int(n): i for i, n in enumerate(keep)}
    moments = None
    if moments_only:
        full = None if full_cov_rounds is None else [index[int(n)] for n in full_cov_rounds if int(n) in index]
        n_full, d = keep.size if full is None else len(full), int(problem.d)
        keep_memory(f"the streamed moments of {keep.size} recorded rounds ({n_full} full covariances)",
                    8 * (3 * keep.size * d + n_full * d * d), "record fewer rounds or keep variances only")
        moments = StreamingMoments(keep.size, d, resolve_block_size(None, R), full)

    def on_grid(n: int, start: int, w: torch.Tensor) -> None:
        if n in index:
            if moments is not None:
                moments.add(index[n], start, w)
            if on_record is not None:
                on_record(n, start, w)

    hook = on_grid if moments is not None or on_record is not None else None
    bar = progress_bar(rounds * positive_int("ell", ell), f"sde[svag ℓ={ell}]", unit="step", enabled=progress)
    try:
        res = svag_chain(problem, schedule, replication, precision, ell=ell, w0=w0, oracle_factory=oracle_factory,
                         recording=Recording(record=None if moments_only else keep),
                         hooks=ChainHooks(on_grid=hook, bar=bar, what=f"the SDE (general, svag ell={ell})",
                                          on_error=None if moments is None else moments.abort))
    finally:
        bar.close()
    config = {("paths" if k == "replicates" else k): v for k, v in res.config.items()}  # the keys of mc-euler's
    config |= {"variant": "general", "integrator": "svag"}
    if moments is not None:
        return SDEPaths(rounds=keep, times=keep * res.h, weights=None, h=res.h, config=config, streamed=moments)
    return SDEPaths(rounds=res.rounds, times=res.times, weights=res.weights, h=res.h, config=config)
