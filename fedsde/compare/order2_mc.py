"""The order refinement on any client loss: FedAvg against the order-1 and order-2 SDEs by coupled Monte Carlo.

For each client step ``η`` of the refinement (``h = η·h_ratio``, server step ``s`` fixed, horizon ``t = rounds·η_max``
fixed, as :mod:`fedsde.compare.order2`), :func:`fedsde.sde.order2_paths.coupled_paths` runs ``R`` replicates of
FedAvg and of both SDEs on shared random streams; the weak error of a test function ``φ`` is the mean over
replicates of the paired difference ``φ(chain_r) − φ(SDE_r)``, its standard error the paired one, and the slope
against ``η`` is the weighted fit of :func:`fedsde._stats.loglog_slope_interval` (delta-method weights, Birge-ratio
inflation), with its 95 % interval.  The test functions:

* ``mean``: ``uᵀ(w − w₀)`` with ``u = −∇F(w₀)/‖∇F(w₀)‖`` (the first moment along the initial descent direction);
* ``second_moment``: ``‖w − w₀‖²``;
* ``loss``: the training loss ``F(w)`` (:func:`fedsde.problems.metrics.evaluate_metrics_torch`).

A slope is only meaningful where the errors exclude zero (``resolved``); the record says so per order and ``φ``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from fedsde._stats import loglog_slope_interval
from fedsde._validate import positive_float, start_point
from fedsde.compare.order2 import refinement_etas
from fedsde.errors import FedsdeInputError
from fedsde.params import (
    DEFAULT_INTEGRATOR,
    PRECISION_FIELDS,
    Integrator,
    Precision,
    Replication,
    Schedule,
    derive,
    fedavg_rates,
    takes_values,
)

#: the test functions of the Monte-Carlo refinement
PHIS = ("mean", "second_moment", "loss")
#: default levels on data problems: η, η/2, η/4, η/8
DEFAULT_LEVELS = 4
#: the normal quantile of the 95 % intervals
Z95 = 1.959963984540054


def _phis(problem, W: np.ndarray, w0: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    from fedsde.problems.metrics import evaluate_metrics_torch

    Wt = torch.as_tensor(W, dtype=torch.float64)
    loss = evaluate_metrics_torch(problem, Wt, torch.as_tensor(w0), names=["train_loss"])["train_loss"]
    D = W - w0
    return {"mean": D @ u, "second_moment": np.sum(D * D, axis=-1), "loss": np.asarray(loss, dtype=np.float64)}


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr"), replication=("replicates", "seed"),
              precision=PRECISION_FIELDS, integrator=("substeps",))
def coupled_order_study(problem, schedule: Schedule, replication: Replication, precision: Precision | None = None, *,
                        etas: Sequence[float] | None = None, levels: int = DEFAULT_LEVELS, h_ratio: float = 1.0,
                        w0=None, oracle_factory=None, integrator: Integrator | None = None,
                        progress: bool = False) -> dict:
    """Weak errors of the order-1 and order-2 SDEs against FedAvg as ``η → 0``, by coupled Monte Carlo.

    Parameters
    ----------
    problem
        Any problem with torch client losses (:func:`fedsde.sde.order2_general.client_loss`) and a gradient oracle.
    schedule, replication, precision, integrator : values of :mod:`fedsde.params`
        :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``; ``h`` is ``η·h_ratio``
        at each level), :class:`~fedsde.params.Replication` (``replicates``, ``seed``),
        :class:`~fedsde.params.Precision` (``device``, ``dtype``) and :class:`~fedsde.params.Integrator`
        (``substeps``); each field may be given instead as the keyword of its name, the call of earlier releases
        (:func:`fedsde.params.takes_values`); the fields mean:
    eta, local_steps, rounds, server_lr, etas, levels, h_ratio
        As :func:`fedsde.compare.order2.order_refinement` (``levels`` defaults to 4 here: η … η/8).
    replicates, seed
        ``R`` coupled replicates per ``η`` (each ``η`` reuses the seed: its streams are its own by construction of
        the rounds).
    w0 : array (d,), optional
        Start (default zero; pass the problem's initial weights for a network).
    oracle_factory, substeps, device, dtype, progress
        As :func:`fedsde.sde.order2_paths.coupled_paths`; a progress bar on stderr.

    Returns
    -------
    dict
        ``etas`` (J,), ``rounds`` (J,), ``t_end``, ``integrator``, ``substeps``, ``replicates``, ``order1`` and
        ``order2`` (φ → ``errors`` = ``|mean difference|`` (J,), ``signed`` (J,), ``stderr`` (J,), ``ci95`` (J, 2),
        ``slope``, ``slope_ci95``, ``chi2_dof``, ``resolved``), ``chain`` (φ → mean (J,)) and ``config``.
    """
    from fedsde.sde.order2_paths import coupled_paths

    eta, local_steps, rounds = schedule.eta, schedule.local_steps, schedule.rounds
    R, seed, precision = replication.replicates, replication.need_seed(), precision or Precision()
    substeps = DEFAULT_INTEGRATOR.substeps if integrator is None else integrator.substeps
    if rounds < 1:
        raise FedsdeInputError(f"rounds={rounds}: must be an integer >= 1")
    if R < 2:
        raise FedsdeInputError(f"replicates={R}: must be an integer >= 2")
    _, _, server_lr = fedavg_rates(schedule, None, None, problem.Q)  # one number each, τ one per client
    h_ratio = positive_float("h_ratio", h_ratio)
    grid = refinement_etas(eta, etas, levels)
    ns = np.rint(rounds * grid[0] / grid).astype(np.int64)
    start = start_point(w0, problem.d)
    g0 = np.asarray(problem.grad(start), dtype=np.float64).reshape(problem.d)
    norm = float(np.linalg.norm(g0))
    if norm == 0.0:
        raise FedsdeInputError("w0: ∇F(w0) = 0, so the test function along the descent direction is undefined; start "
                               "away from a stationary point")
    u = -g0 / norm
    diffs = {o: {phi: [] for phi in PHIS} for o in ("order1", "order2")}
    chain_means = {phi: [] for phi in PHIS}
    bar = tqdm(total=int(ns.sum()), desc="compare[order 1, 2]", unit="round", disable=not progress, leave=False)
    try:
        for e, n in zip(grid, ns, strict=True):
            level = derive(schedule, eta=float(e), rounds=int(n), h=float(e) * h_ratio)  # from checked numbers
            out = coupled_paths(problem, level, replication, precision, w0=start, orders=(1, 2),
                                oracle_factory=oracle_factory, integrator=integrator, bar=bar)
            ch = _phis(problem, out["chain"], start, u)
            for phi in PHIS:
                chain_means[phi].append(float(ch[phi].mean()))
            for o in ("order1", "order2"):
                sd = _phis(problem, out[o], start, u)
                for phi in PHIS:
                    diffs[o][phi].append(ch[phi] - sd[phi])
    finally:
        bar.close()
    result = {"etas": grid, "rounds": ns, "t_end": float(rounds * grid[0] * h_ratio),
              "integrator": "Runge-Kutta drift (Hessian-vector products) + the oracle's own noise: weak order 2 in the "
                            "small-noise regime", "substeps": int(substeps), "replicates": R, "coupled": True,
              "chain": chain_means}
    for o in ("order1", "order2"):
        result[o] = {}
        for phi in PHIS:
            d = np.stack(diffs[o][phi])  # (J, R)
            signed = d.mean(-1)
            se = d.std(-1, ddof=1) / np.sqrt(R)
            fit = loglog_slope_interval(grid, np.abs(signed), se)
            result[o][phi] = {"errors": np.abs(signed), "signed": signed, "stderr": se,
                              "ci95": np.stack([signed - Z95 * se, signed + Z95 * se], axis=-1),
                              "slope": fit["slope"], "slope_ci95": fit["ci"], "chi2_dof": fit["chi2_dof"],
                              "resolved": fit["resolved"]}
    result["config"] = {"eta": float(grid[0]), "local_steps": np.atleast_1d(local_steps).tolist(),
                        "server_lr": server_lr, "rounds": rounds, "h_ratio": float(h_ratio), "seed": int(seed),
                        "direction": "u = -grad F(w0)/|grad F(w0)|", "method": "coupled Monte Carlo"}
    return result
