"""Integrating the FedAvg SDEs on the round grid: Euler–Maruyama with :class:`GridBrownian`, or exact OU.

Clock: ``t = n·h``; every round time ``n·h`` is a solver grid point and results are returned on the round grid.
With ``substeps = k`` the solver step is ``dt = h/k``.  Time is kept by integer index, so any number of steps stays
on the grid: the run is cut into segments on restarted clocks (:mod:`fedsde.sde.segments`).  Each segment is
integrated by :func:`fedsde.sde.euler.euler_rounds`, a plain loop that computes torchsde's ``sdeint(...,
method="euler")`` operation for operation (the same paths, bit for bit, without its per-step overhead).

Randomness: the Brownian increments come from :class:`~fedsde.sde.brownian.GridBrownian` and the general SDE's
rollouts from their own streams, both per block of :data:`~fedsde.clients.streams.BLOCK` paths, so the same seed gives
the same paths whatever ``chunk_size`` and however many threads integrate the chunks (``workers``,
:mod:`fedsde.sim.workers`); on CUDA the same draws, but products that may round differently with the chunk's size
(cuBLAS picks its kernel by the number of rows; ``docs/determinism.md``).  No global RNG is touched.

On a GPU: one chunk when the device's memory allows it, the Brownian increments of
:data:`~fedsde.clients.streams.DEVICE_GROUP` blocks drawn by one generator call, no transfer to the host inside the
loop (the recorded states stay on the device; streamed moments are reduced there and their block sums reach the
host once, :class:`fedsde.sim.moments.StreamingMoments`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from fedsde._compat import renamed
from fedsde._memory import available_memory
from fedsde._progress import progress_bar
from fedsde._samples import ReplicateMoments
from fedsde._validate import choice, record_rounds, start_point
from fedsde.clients.oracles import GradientOracle
from fedsde.clients.streams import BLOCK, resolve_block_size
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
    takes_values,
)
from fedsde.params.options import METHODS as INTEGRATION_METHODS
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.brownian import STEPS_PER_WINDOW, GridBrownian
from fedsde.sde.coefficients import ORDER2_VARIANTS, VARIANTS, psd_sqrt, quadratic_sde_coefficients
from fedsde.sde.euler import euler_rounds, record_plan
from fedsde.sde.models import ClientProblem, FedAvgSDE, QuadraticSDE, rollout_group
from fedsde.sde.segments import SEGMENT_STEPS, sdeint_rounds  # noqa: F401 (sdeint_rounds: re-exported)
from fedsde.sim.moments import BlowUpWatch, StreamingMoments, plan_chunks, problem_scale, working_set
from fedsde.sim.workers import diverged, plan_workers, resolve_workers, run_chunks

#: what :func:`simulate_sde` can integrate: the quadratic variants and the general (Monte-Carlo) SDE
MODELS = (*VARIANTS, "general")
#: the integration methods (:class:`fedsde.params.Integrator` checks them)
METHODS = INTEGRATION_METHODS
#: integration methods: torchsde Euler–Maruyama, or exact OU transitions (quadratic variants only)


@dataclass
class SDEPaths(ReplicateMoments):
    """Paths of an SDE recorded at round times.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
        Recorded rounds ``n``.
    times : ndarray, shape (T,)
        Their times ``t = n·h``.
    weights : ndarray, shape (T, R, d)
        Every path at the recorded times.
    h : float
        Time step.
    config : dict
        The arguments of the run.
    """

    rounds: np.ndarray
    times: np.ndarray
    weights: np.ndarray
    h: float
    config: dict = field(default_factory=dict)
    streamed: StreamingMoments | None = None

    _count_key = "paths"
    _noun = "paths"


def _build_module(problem, model, eta, local_steps, server_lr, h, dev, dtype, *, inner_samples, estimator, seed,
                  first_block, oracle_factory, block_size=None):
    if model == "general":
        return FedAvgSDE(problem, eta, local_steps, server_lr, h, inner_samples=inner_samples, estimator=estimator,
                         seed=seed, first_block=first_block, oracle_factory=oracle_factory, device=dev, dtype=dtype,
                         block_size=block_size)
    return QuadraticSDE(problem, eta, local_steps, server_lr, h, model, device=dev, dtype=dtype)


@renamed(paths="replicates")
@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"),
              replication=("replicates", "seed", "chunk_size", "workers", "memory_limit"),
              precision=PRECISION_FIELDS,
              integrator=("method", "substeps", "float32_draws", "inner_samples", "estimator"),
              recording=("record", "moments_only", "full_cov_rounds", "on_record"),
              joins={"integrator": ("inner_samples", "estimator")})  # its own keywords before the Integrator held them
def simulate_sde(
    problem: QuadraticProblem | ClientProblem,
    schedule: Schedule,
    replication: Replication,
    precision: Precision | None = None,
    *,
    variant: str = "corrected",
    w0=None,
    integrator: Integrator | None = None,
    oracle_factory: Callable[..., GradientOracle] | None = None,
    recording: Recording | None = None,
    progress: bool = False,
) -> SDEPaths:
    """Simulate ``replicates`` independent paths of a FedAvg SDE, returned at round times ``t = n·h``.

    Parameters
    ----------
    problem : QuadraticProblem or ClientProblem
        Clients (non-quadratic problems need ``variant="general"`` and an ``oracle_factory``).
    schedule, replication, precision, integrator, recording : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
        :class:`~fedsde.params.Replication` (``replicates``, ``seed``, ``chunk_size``, ``workers``,
        ``memory_limit``), :class:`~fedsde.params.Precision` (``device``, ``dtype``),
        :class:`~fedsde.params.Integrator` (``method``, ``substeps``, ``float32_draws``, ``inner_samples``,
        ``estimator``) and
        :class:`~fedsde.params.Recording` (``record``, ``moments_only``, ``full_cov_rounds``, ``on_record``).  Each
        field may be given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`); the fields mean:
    eta : float, array (rounds,), or callable of t
        Client learning rate ``η(t)``.
    local_steps : int or array of int, shape (Q,)
        ``E`` or per-client ``τ_k``.
    rounds : int
        Rounds ``n``: the paths run to ``t = n·h``.
    replicates : int
        Number of independent paths ``R`` (old name: ``paths``).
    seed : int or torch.Generator
        Source of all randomness.
    variant : {"corrected", "paper", "matched", "general"} or an order-2 name
        Quadratic linear SDE (:mod:`fedsde.sde.coefficients`; the order-2 names of :mod:`fedsde.sde.order2`,
        best integrated with ``method="exact"``: Euler–Maruyama's bias ``O(h/substeps)`` is first order) or the
        Monte-Carlo SDE of eq. (2) (:class:`~fedsde.sde.models.FedAvgSDE`).
    server_lr : float, array (rounds,), or callable of t
        Actual server step ``s(t) = h·η₀(t)``.
    h : float, optional
        Time step (default: ``eta`` when constant; seed 002, Section 6).
    substeps : int
        Euler steps per round (``dt = h/substeps``).
    w0 : array, shape (d,), optional
        Start (default zero).
    method : {"euler", "exact"}
        torchsde Euler–Maruyama, or exact OU transitions over each round (linear variants; rates are taken at
        the start of each round).
    inner_samples, estimator
        Of the general SDE: rollouts per path and step and the diffusion estimator (see
        :class:`~fedsde.sde.models.FedAvgSDE`).
    oracle_factory
        Of the general SDE: the clients' gradient oracle (see :class:`~fedsde.sde.models.FedAvgSDE`).
    device, dtype
        Torch device and precision (float64 by default).
    chunk_size : int, optional
        Integrate at most this many paths at once (rounded up to a multiple of BLOCK); results do not depend on
        it.
    record : sequence of int, optional
        Rounds (0..rounds) to keep; default all.
    progress : bool
        Show a progress bar (results do not depend on it).
    float32_draws : bool
        Faster float32 Brownian draws (see :class:`~fedsde.sde.brownian.GridBrownian`).
    moments_only : bool
        Keep only the mean and covariance at the recorded rounds, accumulated chunk by chunk (bit-identical however
        chunked on the CPU, to rounding on CUDA; :class:`fedsde.sim.moments.StreamingMoments`): memory does not grow
        with ``replicates``; ``weights``
        of the result is then None.
    memory_limit : int or str, optional
        Bytes the run may plan for (default: what is free); without ``chunk_size`` the paths are chunked to fit, and
        a run whose stored paths cannot fit is refused up front with the estimate.
    workers : int, optional
        Threads that integrate chunks of paths at the same time, one CPU core each (default: the threads torch may
        use on the CPU, 1 on a GPU; :mod:`fedsde.sim.workers`).  Paths are bit-identical for every value.
    full_cov_rounds : sequence of int, optional
        With ``moments_only``: the recorded rounds whose full (d, d) covariance is kept (default every one); at the
        others only the variances (``SDEPaths.var()``), so that memory is ``O(T·d)``: ``()`` keeps no d × d array.
    on_record : callable, optional
        ``on_record(n, start, w)`` at every recorded round ``n`` with the states ``w`` (R_c, d) of the paths
        ``start … start + R_c − 1`` (a chunk, on the run's device and dtype; any thread): metrics of the paths
        without keeping them (``moments_only=True``).

    Returns
    -------
    SDEPaths

    Notes
    -----
    With ``method="exact"`` the normals of round ``n`` are those of a unit-step :class:`GridBrownian` of the same
    seed, i.e. the Euler increments of round ``n`` divided by ``√h`` when ``substeps = 1``: the two methods are
    coupled path by path.
    """
    precision, recording = precision or Precision(), recording or DEFAULT_RECORDING
    integrator = integrator or DEFAULT_INTEGRATOR
    eta, local_steps, server_lr, h = schedule.eta, schedule.local_steps, schedule.server_lr, schedule.h
    rounds, replicates, chunk_size = schedule.rounds, replication.replicates, replication.chunk_size
    memory_limit, workers = replication.memory_limit, replication.workers
    method, substeps, float32_draws = integrator.method, integrator.substeps, integrator.float32_draws
    inner_samples, estimator = integrator.inner_samples, integrator.estimator
    record, moments_only = recording.record, recording.moments_only
    full_cov_rounds, on_record = recording.full_cov_rounds, recording.on_record
    choice("variant", variant, (*MODELS, *ORDER2_VARIANTS))
    if method == "exact" and variant == "general":
        raise FedsdeInputError("method='exact': only for the linear variants (paper, corrected, matched)")
    if variant != "general" and not isinstance(problem, QuadraticProblem):
        raise FedsdeInputError(f"variant={variant!r}: needs a QuadraticProblem; use variant='general' otherwise")
    base_seed = replication.need_seed()
    dev, dtype = precision.device, precision.dtype
    d = int(problem.d)
    keep = record_rounds("record", record, rounds)
    if keep.size == 0:
        raise FedsdeInputError(f"record: rounds must lie in [0, {rounds}] (and at least one)")
    start = start_point(w0, d)
    if method == "euler":
        _check_euler_stability(problem, variant, eta, local_steps, server_lr, h, substeps)
    # the general SDE's rollout streams: blocks of min(paths, BLOCK) paths, as in the simulator (a run of few paths
    # never computes a padded block of BLOCK); above BLOCK paths the block is BLOCK, the chunks' unit
    block = resolve_block_size(None, replicates)
    check = getattr(oracle_factory, "check_memory", None)
    # an oracle with a work space of its own per block (module problems): refused up front
    work = 0 if check is None else int(check(problem, slots=int(problem.Q), block=block, device=dev,
                                             dtype=dtype) or 0)
    proto = _build_module(problem, variant, eta, local_steps, server_lr, h, dev, dtype,
                          inner_samples=inner_samples, estimator=estimator, seed=base_seed, first_block=0,
                          oracle_factory=oracle_factory, block_size=block)
    hh = proto.h
    for sched in (proto.eta, proto.server_lr):
        if sched.rounds is not None and sched.rounds < rounds:
            raise FedsdeInputError(f"{sched.name}: per-round schedule has {sched.rounds} values, need {rounds}")
    # per path: the chunk's recorded states, a dozen (d,) work tensors, a window of Brownian increments, the general
    # SDE's (d, K) diffusion and rollouts (K = inner_samples); the per-block moment sums (d² per block)
    channels = inner_samples if variant == "general" else d
    full = None if full_cov_rounds is None else [i for i, n in enumerate(keep) if int(n) in
                                                 {int(r) for r in full_cov_rounds}]
    n_full = keep.size if full is None else len(full)
    # the general SDE's rollouts: (K, Q, d) per path, ``slot_copies`` of them (four unless the oracle says), and
    # the displacements and factor D (K, d); rollouts too large for one pass run a group of a block's at a time
    copies = getattr(oracle_factory, "slot_copies", 4)
    item = torch.finfo(dtype).bits // 8
    Qc = max(1, int(problem.Q))
    group = rollout_group(inner_samples, Qc, block, d, dtype, dev) if variant == "general" else inner_samples
    rollout_path = item * inner_samples * d * ((copies * Qc if group >= inner_samples else 0) + 3)
    work += 0 if group >= inner_samples else item * copies * group * Qc * block * d
    per_path = 8 * (2 * keep.size * d + 12 * d + STEPS_PER_WINDOW * channels) + (
        rollout_path if variant == "general" else 0) + (
        16 * d * d // BLOCK if moments_only and n_full else 0)
    # kept for the whole run: the paths, or the streamed sums (3 (T, d) and a (d, d) per full covariance); an
    # oracle's own work space (module problems) beside the chunks
    stored = (8 * (3 * keep.size * d + n_full * d * d) if moments_only else 8 * keep.size * replicates * d) + work
    available = available_memory(dev, memory_limit)
    chunk_size = plan_chunks(f"replicates={replicates}", replicates, chunk_size, BLOCK, per_path, stored, available,
                             ("use fewer paths or record fewer rounds" + (
                                 f", or fewer inner_samples (K={inner_samples} rollouts per path)"
                                 if variant == "general" else "")) if moments_only else
                             "keep moments only (moments_only=True; the sde command does), record fewer rounds, or "
                             "use fewer paths", working_set=working_set(dev, available), device=dev)
    workers = resolve_workers(workers, dev)
    chunks = plan_workers(replicates, chunk_size, BLOCK, workers, d * channels)
    out = StreamingMoments(keep.size, d, BLOCK, full) if moments_only else np.empty((keep.size, replicates, d))
    # checks and progress between segments of at most SEGMENT_STEPS steps (the same whether or not progress shows)
    bounds = np.unique(np.r_[np.arange(0, rounds, max(1, SEGMENT_STEPS // substeps)), rounds])
    watch = BlowUpWatch(problem_scale(problem, start), f"the SDE ({variant})")
    bar = progress_bar(max(rounds, 1) * len(chunks), f"sde[{variant}]", unit="round", enabled=progress)

    def run(a: int, b: int, halt) -> None:
        first_block = a // BLOCK
        module = proto if a == 0 else _build_module(
            problem, variant, eta, local_steps, server_lr, h, dev, dtype, inner_samples=inner_samples,
            estimator=estimator, seed=base_seed, first_block=first_block, oracle_factory=oracle_factory,
            block_size=block)
        y = torch.as_tensor(start, dtype=dtype, device=dev).expand(b - a, d).clone()
        if method == "exact":
            res = _exact_chunk(module, y, seed=base_seed, first_block=first_block, rounds=rounds, keep=keep,
                               bar=bar, watch=watch, halt=halt)
        else:
            bm = GridBrownian(0.0, hh / substeps, (b - a, module.brownian_channels), seed=base_seed,
                              first_block=first_block, steps=rounds * substeps, dtype=dtype, device=dev,
                              float32_draws=float32_draws)
            res = _euler_chunk(module, y, bm=bm, h=hh, substeps=substeps, rounds=rounds, keep=keep,
                               bounds=bounds, bar=bar, watch=watch, halt=halt)
        if on_record is not None:
            for i, n in enumerate(keep):
                on_record(int(n), a, res[i])
        if moments_only:  # reduced where the paths are (on a GPU: on the device, block sums to the host once)
            for i in range(keep.size):
                out.add(i, a, res[i])
        else:  # one transfer per chunk
            out[:, a:b] = torch.stack(res).cpu().numpy()

    try:
        run_chunks(run, chunks, workers, on_error=out.abort if moments_only else None,
                   before_raise=lambda exc: watch.flush(before=getattr(exc, "fedsde_when", -1), stacklevel=8))
    finally:
        bar.close()
    watch.flush(stacklevel=6)  # the caller, past the decorators (renamed, takes_values)
    config = {
        "variant": variant, "method": method, "eta": proto.eta.describe(), "server_lr": proto.server_lr.describe(),
        "local_steps": np.atleast_1d(local_steps).tolist(), "h": hh, "rounds": rounds, "paths": replicates,
        "seed": base_seed, "substeps": substeps, "device": str(dev), "dtype": str(dtype).replace("torch.", ""),
    }
    if variant == "general":
        config |= {"integrator": "mc-euler", "inner_samples": inner_samples, "estimator": estimator,
                   "block_size": block}
    config["chunk_size"] = chunk_size
    if moments_only:
        return SDEPaths(rounds=keep, times=keep * hh, weights=None, h=hh, config=config, streamed=out)
    return SDEPaths(rounds=keep, times=keep * hh, weights=out, h=hh, config=config)


def _check_euler_stability(problem, variant, eta, local_steps, server_lr, h, substeps) -> None:
    """Refuse an Euler–Maruyama step that amplifies the mean (spectral radius of ``I − dt·A`` >= 1).

    Checked for the linear variants with constant rates (schedules are caught by the NaN/inf check instead).
    """
    if variant not in (*VARIANTS, *ORDER2_VARIANTS) or not np.isscalar(eta) or not np.isscalar(server_lr):
        return
    lin = quadratic_sde_coefficients(problem, float(eta), local_steps, float(server_lr), h=h, variant=variant)
    dt = lin.h / substeps
    lam = np.linalg.eigvals(lin.A)
    z = dt * lam
    # |1 − z| >= 1 ⟺ |z|² >= 2·Re z: the test without the cancellation of 1 − z, which rounds to 1 at a tiny dt
    if np.any(np.abs(z) ** 2 >= 2.0 * z.real):
        rho = float(np.max(np.abs(1.0 - z)))
        need = int(np.ceil(lin.h * float(np.max(lam.real)) / 2.0)) + 1
        raise FedsdeInputError(
            f"substeps={substeps}: Euler–Maruyama with dt = h/substeps = {dt:.4g} is unstable for this SDE "
            f"(spectral radius of I − dt·A is {rho:.4g} >= 1); use substeps >= {need} or method='exact'"
        )


def _check_finite(y: torch.Tensor, t: float, watch: BlowUpWatch, first: int, when: int) -> None:
    """NaN/inf: an error naming the path and time; growth far beyond the problem's scale: one warning per run (the
    chunk starting at path ``first`` records its event at round ``when``, :meth:`BlowUpWatch.flush` warns)."""
    if not watch.scan(y, f"time t={t:.6g}", first=first, noun="path", order=first, when=when):
        r = int(torch.nonzero(~torch.isfinite(y).all(-1))[0, 0])
        raise diverged(SimulationDivergedError(f"SDE path {first + r} became NaN/inf by time t={t:.6g}; reduce the "
                                               "step or rates"), when, first + r)


def _euler_chunk(module, y: torch.Tensor, *, bm: GridBrownian, h: float, substeps: int, rounds: int, keep: np.ndarray,
                 bounds: np.ndarray, bar, watch: BlowUpWatch, halt=None) -> list[torch.Tensor]:
    """Euler–Maruyama of the paths ``y`` (R, d) over ``rounds`` rounds of ``substeps`` steps, in segments cut at
    ``bounds`` (round indices; checks and progress between them), by :func:`fedsde.sde.euler.euler_rounds` (the
    numbers of torchsde's ``sdeint``); the states at the rounds ``keep``, T tensors (R, d) on the paths' device."""
    res: list[torch.Tensor | None] = [None] * keep.size
    keep_idx = {int(k): i for i, k in enumerate(keep)}
    if 0 in keep_idx:
        res[keep_idx[0]] = y.clone()
    for lo, hi in itertools.pairwise(bounds):
        lo, hi = int(lo), int(hi)
        if halt is not None:
            halt.check(hi)
        rec = record_plan(keep, lo, hi)
        # one segment on a clock restarted at 0: the SDE sees t = lo·h + τ, the increments from step lo·substeps on
        ys = euler_rounds(module, y, bm.view(lo * substeps), h=h, rounds=hi - lo, substeps=substeps, record=rec,
                          offset=lo * h if lo else 0.0)
        _check_finite(ys[-1], hi * h, watch, bm._first_block * BLOCK, hi)
        for r, state in zip(rec, ys, strict=True):
            if r + lo in keep_idx:
                res[keep_idx[r + lo]] = state
        y = ys[-1]
        bar.update(hi - lo)
    return res


def _exact_chunk(module: QuadraticSDE, y: torch.Tensor, *, seed: int, first_block: int, rounds: int,
                 keep: np.ndarray, bar, watch: BlowUpWatch, halt=None) -> list[torch.Tensor]:
    """Exact OU transitions ``w ← c + Φ(w − c) + K^{1/2} z`` over each round (normals: unit-step GridBrownian); the
    states at the rounds ``keep``, T tensors (R, d) on the paths' device."""
    d = y.shape[1]
    res: list[torch.Tensor | None] = [None] * keep.size
    keep_idx = {int(k): i for i, k in enumerate(keep)}
    if 0 in keep_idx:
        res[keep_idx[0]] = y.clone()
    normals = GridBrownian(0.0, 1.0, (y.shape[0], d), seed=seed, first_block=first_block, steps=max(rounds, 1),
                           dtype=y.dtype, device=y.device)
    h = module.h
    cache: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    kw = {"dtype": y.dtype, "device": y.device}
    for n in range(rounds):
        if halt is not None:
            halt.check(n + 1)
        lin = module.coefficients(n * h)
        entry = cache.get(id(lin))
        if entry is None:
            Phi, K = lin.transition(h)
            entry = cache[id(lin)] = (torch.as_tensor(Phi.T.copy(), **kw), torch.as_tensor(lin.c, **kw),
                                      torch.as_tensor(psd_sqrt(K, name="transition covariance").T.copy(), **kw))
        PhiT, c, LT = entry
        y = torch.addmm(c, y - c, PhiT).addmm_(normals.increment(n), LT)
        if n + 1 in keep_idx:
            _check_finite(y, (n + 1) * h, watch, first_block * BLOCK, n + 1)
            res[keep_idx[n + 1]] = y
        bar.update(1)
    return res
