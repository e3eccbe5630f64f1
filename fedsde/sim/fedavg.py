"""The discrete federated simulator, vectorised over replicates × clients.

One round (seed 002, Sec. 3; FedAvg when the server rule is :class:`~fedsde.aggregators.FedAvg`):

1. every client starts from the server weights, ``w_k^{(0)} = w_n``;
2. client ``k`` runs ``τ_k`` local steps ``w ← w − η(∇F_k(w) + ξ)`` (the gradient oracle supplies
   ``∇F_k(w) + ξ``; clients with fewer steps stop early);
3. the server rule receives the displacements ``Δ_k = w_k^{(τ_k)} − w_n`` and the participation weights and
   returns ``w_{n+1}``.

All ``R`` replicates and ``Q`` clients advance together: one batched tensor operation per local step, no
Python loop over clients or replicates.  Randomness comes from per-block streams
(:mod:`fedsde.sim.streams`): the same seed gives bit-identical results on CPU, however the replicates are
chunked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from fedsde._validate import positive_int, schedule
from fedsde.aggregators import Aggregator, RoundContext, get_aggregator
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.sim.oracles import GaussianQuadraticOracle
from fedsde.sim.steps import RandomSteps, normalise_steps
from fedsde.sim.streams import BLOCK, ReplicateStreams, resolve_seed, split_chunks

# stream families (independent for the same seed)
_NOISE, _PARTICIPATION, _STEPS = 0, 1, 2

WEIGHTINGS = ("unbiased", "renormalised")


@dataclass
class SimulationResult:
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
    """

    rounds: np.ndarray
    weights: np.ndarray
    drift_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drift: np.ndarray | None = None
    config: dict = field(default_factory=dict)

    @property
    def replicates(self) -> int:
        return int(self.weights.shape[1])

    def mean(self) -> np.ndarray:
        """Mean over replicates, shape (T, d)."""
        return self.weights.mean(axis=1)

    def cov(self) -> np.ndarray:
        """Covariance over replicates (unbiased, ddof=1), shape (T, d, d)."""
        x = self.weights - self.weights.mean(axis=1, keepdims=True)
        return np.einsum("tri,trj->tij", x, x) / max(1, self.replicates - 1)

    @property
    def final(self) -> np.ndarray:
        """Server weights after the last recorded round, shape (R, d)."""
        return self.weights[-1]


def _initial_weights(w0, d: int) -> np.ndarray:
    if w0 is None:
        return np.zeros(d)
    arr = np.asarray(w0, dtype=np.float64).reshape(-1)
    if arr.shape == (1,) and d > 1:
        arr = np.full(d, arr[0])
    if arr.shape != (d,) or not np.all(np.isfinite(arr)):
        raise FedsdeInputError(f"w0: shape {np.shape(w0)} must be ({d},) with finite entries")
    return arr


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
    local_steps: int | Sequence[int] | np.ndarray | RandomSteps,
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
) -> SimulationResult:
    """Simulate ``replicates`` independent runs of a federated algorithm on ``problem``.

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float or array, shape (rounds,)
        Client learning rate, constant or per round.
    local_steps : int, array of int (Q,), or RandomSteps
        ``E`` for every client, fixed per-client ``τ_k``, or steps redrawn every round.
    rounds : int
        Number of communication rounds ``n``.
    replicates : int
        Number of independent runs ``R``.
    seed : int or torch.Generator
        Source of all randomness (never the global RNG).
    server_lr : float or array, shape (rounds,)
        Actual server step ``s`` per round (``h·η₀`` in seed 002's notation).
    w0 : array, shape (d,), optional
        Starting server weights (default zero).
    participation : int, optional
        ``m``: clients sampled uniformly without replacement each round (default: all).
    weighting : {"unbiased", "renormalised"}
        Weights on the sampled set ``S``: ``p_k Q/m`` (unbiased) or ``p_k / Σ_{j∈S} p_j``.
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
        :data:`fedsde.sim.streams.BLOCK`); results do not depend on it.
    progress : bool
        Show a progress bar.
    oracle_factory : callable, optional
        ``(problem, nblocks, device, dtype) -> oracle`` (see :mod:`fedsde.sim.oracles`), replacing the
        Gaussian quadratic oracle.

    Returns
    -------
    SimulationResult
    """
    rounds = positive_int("rounds", rounds, minimum=0)
    replicates = positive_int("replicates", replicates)
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
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise FedsdeInputError(f"device={device!r}: not available ({exc})") from None
    if dtype not in (torch.float64, torch.float32):
        raise FedsdeInputError(f"dtype={dtype}: must be torch.float64 or torch.float32")
    keep = _record_set("record", record, rounds, default_all=True)
    drift_keep = _record_set("record_drift", record_drift, rounds, default_all=False)
    w_start = _initial_weights(w0, d)
    make_oracle = oracle_factory or GaussianQuadraticOracle

    chunks = split_chunks(replicates, chunk_size)
    out_w = np.empty((keep.size, replicates, d))
    max_steps = steps.max_steps() if isinstance(steps, RandomSteps) else int(steps.max())
    out_drift = np.empty((drift_keep.size, max_steps, replicates, Q)) if drift_keep.size else None
    bar = tqdm(total=rounds * len(chunks), desc="simulate", unit="round", disable=not progress, leave=False)
    try:
        for start, stop in chunks:
            _run_chunk(
                problem, agg, make_oracle, base_seed, start, stop - start, dev, dtype, etas, lrs, steps,
                participation, weighting, w_start, keep, drift_keep, out_w, out_drift, bar,
            )
    finally:
        bar.close()
    config = {
        "eta": etas.tolist() if np.ndim(eta) else float(eta),
        "local_steps": steps if isinstance(steps, RandomSteps) else steps.tolist(),
        "rounds": rounds, "replicates": replicates, "seed": base_seed,
        "server_lr": lrs.tolist() if np.ndim(server_lr) else float(server_lr),
        "participation": participation, "weighting": weighting, "aggregator": agg.name,
        "device": str(dev), "dtype": str(dtype).replace("torch.", ""),
    }
    return SimulationResult(rounds=keep, weights=out_w, drift_rounds=drift_keep, drift=out_drift, config=config)


def _participation(
    streams: ReplicateStreams | None, nb: int, Q: int, m: int | None, weighting: str, p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Participation mask and aggregation weights, both of shape (nb·BLOCK, Q), for one round."""
    R = nb * BLOCK
    if m is None or m == Q:
        mask = torch.ones((R, Q), dtype=torch.bool, device=p.device)
        return mask, p.expand(R, Q)
    u = streams.uniform_(torch.empty((nb, BLOCK, Q), dtype=p.dtype, device=p.device)).view(R, Q)
    idx = torch.topk(u, m, dim=1, largest=False).indices  # uniform m-subset per replicate
    mask = torch.zeros((R, Q), dtype=torch.bool, device=p.device).scatter_(1, idx, True)
    pm = p.expand(R, Q) * mask
    if weighting == "unbiased":
        return mask, pm * (Q / m)
    tot = pm.sum(1, keepdim=True)
    # a sample whose weights are all zero contributes nothing (avoid 0/0)
    return mask, torch.where(tot > 0, pm / tot.clamp_min(torch.finfo(p.dtype).tiny), pm)


def _run_chunk(problem, agg, make_oracle, seed, start, R, dev, dtype, etas, lrs, steps, m, weighting,
               w_start, keep, drift_keep, out_w, out_drift, bar):
    """Simulate replicates ``[start, start + R)`` (``start`` a multiple of BLOCK), padded to whole blocks."""
    Q, d = problem.Q, problem.d
    nb = -(-R // BLOCK)
    Rp = nb * BLOCK
    first = start // BLOCK
    noise = ReplicateStreams(seed, first, nb, dev, _NOISE)
    part = ReplicateStreams(seed, first, nb, dev, _PARTICIPATION) if m not in (None, Q) else None
    step_streams = ReplicateStreams(seed, first, nb, dev, _STEPS) if isinstance(steps, RandomSteps) else None
    oracle = make_oracle(problem, nb, dev, dtype)
    p = torch.as_tensor(problem.p, dtype=dtype, device=dev)
    w = torch.as_tensor(w_start, dtype=dtype, device=dev).expand(Rp, d).clone()
    state = agg.init(w)
    keep_idx = {int(k): i for i, k in enumerate(keep)}
    drift_idx = {int(k): i for i, k in enumerate(drift_keep)}
    if 0 in keep_idx:
        out_w[keep_idx[0], start:start + R] = w[:R].cpu().numpy()
    uniform_steps = isinstance(steps, np.ndarray) and bool(np.all(steps == steps[0]))
    if isinstance(steps, np.ndarray):
        fixed = torch.as_tensor(steps, device=dev).expand(Rp, Q)
    for n in range(len(etas)):
        eta, s = float(etas[n]), float(lrs[n])
        tau = steps.draw(step_streams, Q) if step_streams is not None else fixed  # (Rp, Q)
        mask, weights = _participation(part, nb, Q, m, weighting, p)
        n_steps = int(steps[0]) if uniform_steps else int(tau.max())
        wb = w.view(nb, 1, BLOCK, d)
        x = wb.expand(nb, Q, BLOCK, d).clone()  # (nb, Q, B, d)
        # (nb, Q, B, 1): local steps of each client, to stop clients with fewer steps
        tau_b = None if uniform_steps else tau.view(nb, BLOCK, Q).transpose(1, 2).unsqueeze(-1)
        rec = drift_idx.get(n)
        for i in range(n_steps):
            g = oracle.sample(x, noise)
            if tau_b is None:
                x.sub_(g, alpha=eta)
            else:
                x.sub_(g * (tau_b > i).to(dtype), alpha=eta)
            if rec is not None:
                dist = torch.linalg.vector_norm(x - wb, dim=-1)  # (nb, Q, B)
                out_drift[rec, i, start:start + R] = dist.transpose(1, 2).reshape(Rp, Q)[:R].cpu().numpy()
        if rec is not None and n_steps < out_drift.shape[1]:
            out_drift[rec, n_steps:, start:start + R] = out_drift[rec, n_steps - 1, start:start + R]
        delta = (x - wb).transpose(1, 2).reshape(Rp, Q, d)  # (Rp, Q, d)
        if m not in (None, Q):
            delta = delta * mask.unsqueeze(-1).to(dtype)
        ctx = RoundContext(round=n, server_lr=s, eta=eta, local_steps=tau, participating=mask, p=p)
        w, state = agg.apply(w, delta, weights, state, ctx)
        if not bool(torch.isfinite(w[:R]).all()):
            _raise_diverged(n, start, delta[:R], w[:R])
        if n + 1 in keep_idx:
            out_w[keep_idx[n + 1], start:start + R] = w[:R].cpu().numpy()
        bar.update(1)


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
