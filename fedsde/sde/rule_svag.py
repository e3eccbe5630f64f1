"""SVAG chains of a server rule on any loss: samplers of the rule's own SDE (its general-loss form).

A rule with an SDE (:attr:`~fedsde.aggregators.Aggregator.sde_kind`) reads a round through its linear step
``U = Σ_k ω_k Δ_k`` (:meth:`~fedsde.aggregators.Aggregator.sde_step`; FedNova's ``ω_k = W_k τ_eff/‖a_k‖₁``, the
others' ``ω = W``, the participation weights of the round).  On any loss the round's ``U`` given ``w`` has a mean
``M(w)`` and a covariance ``V(w)`` (client sampling included); the rule's SDE is seed 002's eq. (2) with these
moments:

* **linear and momentum rules** — ``dw = (s_eff/h) M(w) dt + √(s_eff²/h · V(w)) dB`` on the clock ``t = n·h``,
  ``s_eff = s`` or ``s·g/(1 − β)`` with server momentum (:mod:`fedsde.sde.rules` on quadratic clients).  The SVAG
  chain with ``ℓ`` (Li, Malladi & Arora, NeurIPS 2021, lifted to the server round as :mod:`fedsde.sde.svag` does for
  FedAvg) runs ``ℓ`` steps per base round with server step ``s/ℓ``; each step runs two independent client rounds
  (their own participation draws and gradient noise), takes their steps ``U⁽¹⁾, U⁽²⁾`` and hands the rule
  ``c₁U⁽¹⁾ + c₂U⁽²⁾`` (:meth:`~fedsde.aggregators.Aggregator.apply_step`), ``c₁,₂ = (1 ± √(2ℓ − 1))/2``: mean
  ``M(w)``, covariance ``ℓ V(w)``.  Per unit of time the drift and the covariance are the SDE's for every ``ℓ``; a
  momentum buffer keeps its ``β``, whose lag of ``β/(1 − β)`` steps is ``O(h/ℓ)`` in time (Li, Tai & E 2019), so
  the chain tends weakly to the first-order SDE at order 1 in ``1/ℓ``.
* **adaptive rules** (FedAdam, FedYogi) — the SDE of Malladi et al. (NeurIPS 2022, :mod:`fedsde.sde.adaptive`) with
  ``G = −M(w)`` and ``Σ = V(w)``; their SVAG chain with ``ℓ = k²`` runs the rule of
  :func:`fedsde.sde.adaptive.svag_aggregator` (``1 − β_i → (1 − β_i)/k²``, ``τ → kτ``) with server step ``s/k``
  for ``k²`` steps per base round on the same two-round combination (clock ``t = n·s²`` by default).

``ℓ = 1`` is the rule itself (one client round, the rule's own ``apply``) with the simulator's random streams: the
numbers of :func:`fedsde.sim.simulate` with that rule, seed, block size and participation (outside its
cross-device regime).  ``ℓ > 1`` draws from stream families of its own per ``ℓ`` (noise: those of
:func:`fedsde.sde.svag.svag_chain`, so FedAvg's chains agree to rounding; participation: another), block ``b`` of
replicates using blocks ``2b`` and ``2b + 1`` for its two rounds.  Memory and chunking as :func:`svag_chain`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedsde._memory import available_memory
from fedsde._validate import positive_int, record_rounds, start_point
from fedsde.aggregators import Aggregator, RoundContext, get_aggregator
from fedsde.clients.local import run_local_steps
from fedsde.clients.oracles import GaussianQuadraticOracle
from fedsde.clients.streams import ReplicateStreams, resolve_block_size
from fedsde.errors import FedsdeInputError, SimulationDivergedError
from fedsde.params import (
    DEFAULT_RECORDING,
    FULL_PARTICIPATION,
    NO_HOOKS,
    PRECISION_FIELDS,
    ChainHooks,
    ClientSampling,
    Precision,
    Recording,
    Replication,
    Schedule,
    fedavg_rates,
    takes_values,
)
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.sde.svag import _SVAG, SVAGPaths, _coefficients
from fedsde.sim.moments import BlowUpWatch, plan_chunks, problem_scale, working_set
from fedsde.sim.participation import draw_participation, is_sampled, participant_slots, scatter_slots
from fedsde.sim.workers import diverged, plan_workers, resolve_workers, run_chunks

#: stream family of the participation draws of the chains with ℓ > 1: purpose = _PART + ℓ
_PART = 5 << 20
#: the simulator's stream families (fedsde.sim.runner): noise and participation of ℓ = 1
_NOISE, _PARTICIPATION = 0, 1


def rule_steps(aggregator: Aggregator, ell: int) -> tuple[Aggregator, int, int]:
    """``(rule, k, steps per base round)`` of the SVAG chain with ``ℓ`` (module docstring): the rule itself, ``k = ℓ``
    and ``ℓ`` steps of server step ``s/ℓ`` (linear, momentum); the rescaled rule, ``k = √ℓ`` and ``ℓ`` steps of
    ``s/k`` (adaptive, ``ℓ`` a square)."""
    from fedsde.sde.rules import NoSDEError

    if aggregator.sde_kind is None:
        raise NoSDEError(aggregator.sde_refusal)
    if aggregator.sde_kind != "adaptive":
        return aggregator, ell, ell
    k = math.isqrt(ell)
    if k * k != ell:
        raise FedsdeInputError(f"ell={ell}: the adaptive SVAG chain (Malladi et al. 2022) has ℓ = k², so ℓ must be a "
                               "square (1, 4, 16, 64, …)")
    from fedsde.sde.adaptive import svag_aggregator

    return (aggregator if k == 1 else svag_aggregator(aggregator, k)), k, ell


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"),
              replication=("replicates", "seed", "block_size", "workers"), precision=PRECISION_FIELDS,
              recording=("record",), types={"sampling": ClientSampling, "hooks": ChainHooks},
              sampling=("participation", "weighting"), hooks=("on_grid", "bar", "what", "on_error"))
def rule_svag_chain(problem, aggregator: str | Aggregator, schedule: Schedule, replication: Replication,
                    precision: Precision | None = None, *, ell: int, w0=None, sampling: ClientSampling | None = None,
                    oracle_factory: Callable | None = None, recording: Recording | None = None,
                    hooks: ChainHooks | None = None) -> SVAGPaths:
    """Run the rule's SVAG chain with ``ell`` for ``rounds`` base rounds (module docstring).

    Parameters as :func:`fedsde.sde.svag.svag_chain` (the values :class:`~fedsde.params.Schedule`: ``eta``,
    ``local_steps``, ``rounds``, ``server_lr``, ``h``; :class:`~fedsde.params.Replication`: ``replicates``,
    ``seed``, ``block_size``, ``workers``; :class:`~fedsde.params.Precision`: ``device``, ``dtype``;
    :class:`~fedsde.params.Recording`: ``record``; :class:`~fedsde.params.ChainHooks`: ``on_grid``, ``bar``,
    ``what``, ``on_error``; each field may be given instead as the keyword of its name,
    :func:`fedsde.params.takes_values`), and:

    aggregator : str or Aggregator
        A rule with an SDE; adaptive rules need ``ell = k²``.
    eta, server_lr : float
        Client rate and server step ``s`` of the base run (constant).
    h : float, optional
        Time step of a base round (default ``s²`` for adaptive rules, ``η`` otherwise); only labels times.
    sampling : ClientSampling, optional
        Clients per round and their weights (``participation``, ``weighting``: also as those keywords), as
        :func:`fedsde.sim.simulate` draws them (every rollout draws its own); default every client.

    Returns
    -------
    SVAGPaths
    """
    record = (recording or DEFAULT_RECORDING).record
    keep = record_rounds("record", record, schedule.rounds, default_all=False)
    return run_rule_svag_chain(problem, aggregator, schedule, replication, precision or Precision(),
                               ell=positive_int("ell", ell), start=start_point(w0, problem.d),
                               sampling=sampling or FULL_PARTICIPATION, oracle_factory=oracle_factory, keep=keep,
                               hooks=hooks or NO_HOOKS)


def run_rule_svag_chain(problem, aggregator: str | Aggregator, schedule: Schedule, replication: Replication,
                        precision: Precision, *, ell: int, start: np.ndarray, sampling: ClientSampling,
                        oracle_factory: Callable | None, keep: np.ndarray, hooks: ChainHooks) -> SVAGPaths:
    """:func:`rule_svag_chain` with its arguments checked where they were built, not again (``ell`` an int >= 1,
    ``start`` float64 of shape (d,), ``keep`` the recorded base rounds), as :func:`fedsde.sde.svag.run_svag_chain`
    (for :func:`fedsde.validity.rules.rule_validity_test`)."""
    rounds, h, R = schedule.rounds, schedule.h, replication.replicates
    block_size, workers, seed = replication.block_size, replication.workers, replication.need_seed()
    agg = get_aggregator(aggregator)
    rule, k, per_round = rule_steps(agg, ell)
    participation, weighting = sampling.participation, sampling.weighting
    Q, d = problem.Q, problem.d
    eta, steps, server_lr = fedavg_rates(schedule, None, None, Q)  # constant rates, τ one per client
    h = (server_lr**2 if agg.sde_kind == "adaptive" else eta) if h is None else h
    if participation is not None and participation > Q and weighting != "multinomial":
        raise FedsdeInputError(f"participation={participation}: cannot sample more clients than there are (Q={Q})")
    agg.local_solver.check_eta(eta)
    agg.bind(problem)
    rule.bind(problem)
    if oracle_factory is None:
        if not isinstance(problem, QuadraticProblem):
            raise FedsdeInputError(f"oracle_factory: required for a {type(problem).__name__}")
        oracle_factory = GaussianQuadraticOracle
    block = resolve_block_size(block_size, R)
    dev, dtype = precision.device, precision.dtype
    rollouts = 1 if ell == 1 else 2
    item = torch.finfo(dtype).bits // 8
    available = available_memory(dev, None)
    check = getattr(oracle_factory, "check_memory", None)
    if check is not None:
        check(problem, slots=Q, block=block, device=dev, dtype=dtype)
    chunk_size = plan_chunks(f"replicates={R}", R, None, block, item * (12 * rollouts * Q * d + 6 * d),
                             8 * keep.size * R * d, available, "use fewer replicates or record fewer rounds",
                             working_set=working_set(dev, available))
    workers = resolve_workers(workers, dev)
    chunks = plan_workers(R, chunk_size, block, workers, rollouts * Q * d)
    w_start = start
    run = _RuleChain(problem=problem, agg=agg, rule=rule, ell=ell, k=k, per_round=per_round, R=R, block=block,
                     seed=seed, oracle_factory=oracle_factory, dev=dev, dtype=dtype, eta=eta,
                     server_lr=server_lr, rounds=rounds, steps=steps, w_start=w_start, keep=keep,
                     sampling=(participation, weighting), on_grid=hooks.on_grid, bar=hooks.bar,
                     watch=BlowUpWatch(problem_scale(problem, w_start),
                                       hooks.what or f"the {agg.name} SVAG chain (ell={ell})"))
    run_chunks(run, chunks, workers, on_error=hooks.on_error,
               before_raise=lambda exc: run.watch.flush(before=getattr(exc, "fedsde_when", -1), stacklevel=8))
    run.watch.flush(stacklevel=6)  # the caller of rule_svag_chain (or the test), past the keywords' adapter
    config = {"aggregator": agg.describe(), "sde": agg.sde_kind, "ell": ell, "k": k, "eta": eta,
              "local_steps": steps.tolist(), "rounds": rounds, "replicates": R, "seed": run.seed, "h": h,
              "server_lr": server_lr, "participation": participation, "weighting": weighting, "device": str(dev),
              "dtype": str(dtype).replace("torch.", ""), "block_size": block,
              "oracle": getattr(oracle_factory, "describe", getattr(oracle_factory, "__name__", repr(oracle_factory)))}
    return SVAGPaths(ell=ell, h=h, rounds=keep, times=keep * h, weights=run.out, final=run.final, config=config)


@dataclass
class _RuleChain:
    """The chain of :func:`rule_svag_chain` on one chunk of replicates (``run(start, stop)``, as
    :class:`fedsde.sde.svag._Chain`)."""

    problem: object
    agg: Aggregator
    rule: Aggregator
    ell: int
    k: int
    per_round: int
    R: int
    block: int
    seed: int
    oracle_factory: Callable
    dev: torch.device
    dtype: torch.dtype
    eta: float
    server_lr: float
    rounds: int
    steps: np.ndarray
    w_start: np.ndarray
    keep: np.ndarray
    sampling: tuple
    on_grid: Callable | None
    bar: object
    watch: BlowUpWatch

    def __post_init__(self):
        self.out = np.empty((self.keep.size, self.R, self.problem.d))
        self.final = np.empty((self.R, self.problem.d))

    def _round(self, w, oracle, noise, part, nbi, p, ctx_round):
        """One client round per rollout from ``w`` (Rp, d): displacements (nbi·B, Q, d), weights, mask, steps."""
        Q, d, block, dev, dtype = self.problem.Q, self.problem.d, self.block, self.dev, self.dtype
        m, weighting = self.sampling
        Rb = nbi * block
        mask, weights = draw_participation(part, nbi, Q, m, weighting, p, block)
        tau = torch.as_tensor(self.steps, device=dev).expand(Rb, Q)
        rollouts = nbi * block // w.shape[0]
        wb = w.view(nbi // rollouts, 1, 1, block, d).expand(nbi // rollouts, rollouts, 1, block, d)
        wb = wb.reshape(nbi, 1, block, d)
        slots_ok = getattr(oracle, "participants_only", False) and m is not None and m < Q and \
            weighting != "multinomial"
        cid = clients = None
        if slots_ok:
            cid, clients = participant_slots(mask, m, block)
        slots = Q if cid is None else m
        tau_s = tau if cid is None else tau.gather(1, cid)
        x = wb.expand(nbi, slots, block, d).clone()
        uniform = bool(np.all(self.steps == self.steps[0]))
        run_local_steps(x=x, oracle=oracle, streams=noise, eta=self.eta, n_steps=int(self.steps.max()),
                        local_steps=None if uniform else tau_s.view(nbi, block, slots).transpose(1, 2).unsqueeze(-1),
                        clients=clients, solver=self.agg.local_solver, anchor=wb)
        delta = (x - wb).transpose(1, 2).reshape(Rb, slots, d)
        if cid is not None:
            delta = scatter_slots(delta, cid, Q)
        elif m is not None and not bool(mask.all()):
            delta = delta * mask.unsqueeze(-1).to(dtype)
        norms = self.agg.local_solver.accumulation_norm(tau, self.eta).to(dtype) if self.agg.needs_norms else None
        ctx = RoundContext(round=ctx_round, server_lr=self.server_lr, eta=self.eta, local_steps=tau,
                           participating=mask, p=p, norms=norms)
        return delta, weights, ctx

    def __call__(self, start: int, stop: int, halt=None) -> None:
        ell, block, dev, dtype = self.ell, self.block, self.dev, self.dtype
        Q, d, R = self.problem.Q, self.problem.d, stop - start
        nb = -(-R // block)
        Rp = nb * block
        rollouts = 1 if ell == 1 else 2
        nbi, b0 = nb * rollouts, start // block
        m, weighting = self.sampling
        sampled = is_sampled(m, Q, weighting)
        noise = ReplicateStreams(self.seed, b0 * rollouts, nbi, dev, _NOISE if ell == 1 else _SVAG + ell, block)
        part = (ReplicateStreams(self.seed, b0 * rollouts, nbi, dev, _PARTICIPATION if ell == 1 else _PART + ell,
                                 block) if sampled else None)
        oracle = self.oracle_factory(self.problem, nbi, dev, dtype)
        p = torch.as_tensor(np.asarray(self.problem.p, dtype=np.float64), dtype=dtype, device=dev)
        c1, c2 = _coefficients(ell)
        s = self.server_lr / self.k
        w = torch.as_tensor(self.w_start, dtype=dtype, device=dev).expand(Rp, d).clone()
        state = self.rule.init(w)
        keep_idx = {int(k): i for i, k in enumerate(self.keep)}
        kept: dict[int, torch.Tensor] = {}
        share = R / self.R

        def emit(n: int) -> None:
            if n in keep_idx:
                kept[keep_idx[n]] = w[:R].clone()
            if self.on_grid is not None:
                self.on_grid(n, start, w[:R])

        emit(0)
        for n in range(self.rounds):
            for j in range(self.per_round):
                step = n * self.per_round + j
                if halt is not None:
                    halt.check(step)
                delta, weights, ctx = self._round(w, oracle, noise, part, nbi, p, step)
                if ell == 1:  # the rule's own round, as the simulator runs it
                    w, state = self.rule.apply(w, delta, weights, state, ctx)
                else:
                    U = self.agg.sde_step(delta, weights, ctx).view(nb, 2, block, d)
                    U = (c1 * U[:, 0] + c2 * U[:, 1]).reshape(Rp, d)
                    one = RoundContext(round=step, server_lr=s, eta=self.eta, local_steps=ctx.local_steps[:Rp],
                                       participating=ctx.participating[:Rp], p=p)
                    w, state = self.rule.apply_step(w, U, state, one)
                if not self.watch.scan(w[:R], f"base round {n + 1}, step {j}", first=start, order=start, when=step):
                    r = start + int(torch.nonzero(~torch.isfinite(w[:R]).all(-1))[0, 0])
                    raise diverged(SimulationDivergedError(
                        f"{self.agg.name} SVAG chain (ell={ell}) produced NaN/inf at base round {n}, step {j} "
                        f"(replicate {r}); reduce eta or server_lr"), step, r)
                if self.bar is not None:
                    self.bar.update(share)
            emit(n + 1)
        if kept:
            self.out[:, start:stop] = torch.stack([kept[i] for i in range(self.keep.size)]).cpu().numpy()
        self.final[start:stop] = w[:R].cpu().numpy()


__all__ = ["rule_steps", "rule_svag_chain", "run_rule_svag_chain"]
