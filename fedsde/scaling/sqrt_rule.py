"""The square-root scaling rule of the adaptive server rules (FedAdam, FedYogi).

Source: Malladi, Lyu, Panigrahi & Arora, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms" (NeurIPS
2022), Definition 4.5 / Theorem 4.6: when the batch grows by ``κ`` (gradient-noise covariance ``Σ → Σ/κ``), take

    η → √κ·η,   1 − β₁ → κ(1 − β₁),   1 − β₂ → κ(1 − β₂),   ε → ε/√κ,   and κ times fewer steps,

and the SDE of RMSprop/Adam is unchanged (its clock ``t = k·η²`` advances ``κ`` times faster per step).  For the
server rules the "batch" is whatever divides the round's noise covariance ``N`` by ``κ`` (``κ`` times the clients'
minibatch, or ``κ`` times the clients each copied with weight ``p_k/κ``), the step is the server step ``s`` and
``ε`` is ``τ`` (``v₀ → v₀/κ`` with it).  In the SDE of :mod:`fedsde.sde.adaptive` every coefficient is unchanged
under this map with ``v → v/κ`` (``c_i = (1 − β_i)/s²``, ``s(√v + τ)``, ``c₁ s N^{1/2}``):
:func:`sqrt_sde_invariance` measures that, and :func:`sqrt_scaling_check` the two chains by Monte Carlo.
Flower's FedAdam step factor (evaluated at ``t + 2s²``) shifts with ``s`` and is invariant only to ``O(s²)``.
The rule needs ``κ(1 − β_i) <= 1``; the chains agree to ``O(s)`` only where the SDE holds (noise-dominated
rounds), which is what the check is for.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsde._validate import positive_float, positive_int
from fedsde.aggregators import Aggregator, get_aggregator
from fedsde.errors import FedsdeInputError
from fedsde.problems.quadratic.problem import QuadraticProblem

#: where the rule comes from
SOURCE = "Malladi, Lyu, Panigrahi & Arora, NeurIPS 2022, Definition 4.5 / Theorem 4.6 (square-root scaling rule)"


def sqrt_scaled(aggregator: str | Aggregator, server_lr: float, rounds: int | None, kappa: float
                ) -> tuple[Aggregator, float, int | None]:
    """The rule, server step and rounds after the square-root rule with factor ``κ`` (module docstring; ``rounds``
    ``None``: not mapped).

    Raises
    ------
    FedsdeInputError
        ``κ(1 − β_i) > 1``, ``rounds/κ`` not a whole number, or a rule without an adaptive SDE.
    """
    from fedsde.sde.rules import rule_kind

    agg = rule_kind(aggregator, ("adaptive",))
    kappa = positive_float("kappa", kappa)
    server_lr = positive_float("server_lr", server_lr)
    form = agg.adaptive_form()
    worst = kappa * (1.0 - min(form.beta1 if form.beta1 > 0 else 1.0, form.beta2))
    if worst > 1.0:
        raise FedsdeInputError(f"kappa={kappa:g}: κ(1 − β) = {worst:.4g} > 1, so some β would be negative; the "
                               f"square-root rule needs κ <= 1/(1 − β)")
    scaled = agg.rescaled(one_minus_beta=kappa, tau=1.0 / math.sqrt(kappa))
    if rounds is None:
        return scaled, server_lr * math.sqrt(kappa), None
    n = positive_int("rounds", rounds) / kappa
    if abs(n - round(n)) > 1e-9 * max(1.0, n) or round(n) < 1:
        raise FedsdeInputError(f"kappa={kappa:g}, rounds={rounds}: rounds/κ = {n:.6g} must be a whole number >= 1")
    return scaled, server_lr * math.sqrt(kappa), round(n)


def _noise(problem: QuadraticProblem, factor: float) -> QuadraticProblem:
    return QuadraticProblem.from_arrays(problem.U, problem.a, problem.Sigma * factor, problem.p, name=problem.name,
                                        label_distributions=problem.label_distributions)


def sqrt_sde_invariance(problem: QuadraticProblem, aggregator: str | Aggregator, *, eta: float, local_steps,
                        server_lr: float, kappa: float, w=None, seed: int = 0, noise: float | None = None) -> float:
    """Largest relative difference between the SDE's drift and diffusion of the base rule and of its square-root
    scaled twin (noise ``N/noise``, default ``N/κ``), at random states ``(w, m, v)`` and ``(w, m, v/κ)`` (0 up to
    rounding where ``noise = κ``; a batch drawn without replacement divides the noise by ``g = f(b)/f(κb)``, not
    by the batch factor, :mod:`fedsde.scaling.batch_rule`)."""
    from fedsde.sde.adaptive import adaptive_sde

    agg = get_aggregator(aggregator)
    scaled, s2, _ = sqrt_scaled(agg, server_lr, None, kappa)
    a = adaptive_sde(problem, agg, eta=eta, local_steps=local_steps, server_lr=server_lr)
    b = adaptive_sde(_noise(problem, 1.0 / (kappa if noise is None else noise)), scaled, eta=eta,
                     local_steps=local_steps, server_lr=s2)
    d = problem.d
    gen = torch.Generator().manual_seed(seed)
    blocks = 3 if a.has_m else 2
    y = torch.randn(8, blocks * d, generator=gen, dtype=torch.float64)
    y[:, -d:] = y[:, -d:].abs() + 0.1
    yb = y.clone()
    yb[:, -d:] /= kappa
    worst = 0.0
    for t in (0.3, 1.7):
        fa, fb = a.f(t, y), b.f(t, yb)
        fb[:, -d:] *= kappa
        ga, gb = a.g(t, y), b.g(t, yb)
        for x, z in ((fa, fb), (ga, gb)):
            worst = max(worst, float((x - z).abs().max() / x.abs().max().clamp_min(1e-300)))
    return worst


def sqrt_scaling_check(problem: QuadraticProblem, aggregator: str | Aggregator, *, eta: float, local_steps,
                       server_lr: float, rounds: int, kappa: float, replicates: int, seed: int, w0=None) -> dict:
    """Both ends of the square-root rule run by the simulator (the rule's own code): ``E F(w_T)`` of the base run
    and of the scaled run (noise ``N/κ``, step ``√κ s``, ``κ(1 − β)``, ``τ/√κ``, ``n/κ`` rounds) at the same time
    ``t = n·s²``, with their difference and its s.e.; plus :func:`sqrt_sde_invariance`."""
    from fedsde.sim import simulate

    agg = get_aggregator(aggregator)
    scaled, s2, n2 = sqrt_scaled(agg, server_lr, rounds, kappa)
    replicates = positive_int("replicates", replicates, minimum=2)
    ends = {}
    for key, pb, rule, s, n in (("base", problem, agg, server_lr, rounds),
                                ("scaled", _noise(problem, 1.0 / kappa), scaled, s2, n2)):
        res = simulate(pb, eta=eta, local_steps=local_steps, rounds=n, replicates=replicates, seed=seed,
                       server_lr=s, w0=w0, aggregator=rule, record=[n])
        loss = np.asarray(problem.loss(res.weights[-1]), dtype=np.float64)
        form = rule.adaptive_form()
        ends[key] = {"server_lr": s, "rounds": n, "beta1": form.beta1, "beta2": form.beta2, "tau": form.tau,
                     "v0": form.v0, "noise_factor": 1.0 if key == "base" else 1.0 / kappa, "time": n * s * s,
                     "loss_mean": float(loss.mean()), "loss_se": float(loss.std(ddof=1) / np.sqrt(loss.size))}
    diff = ends["scaled"]["loss_mean"] - ends["base"]["loss_mean"]
    se = math.hypot(ends["scaled"]["loss_se"], ends["base"]["loss_se"])
    return {"rule": "sqrt", "source": SOURCE, "kappa": float(kappa), "aggregator": agg.describe(), **ends,
            "loss_difference": diff, "loss_difference_se": se,
            "sde_invariance": sqrt_sde_invariance(problem, agg, eta=eta, local_steps=local_steps,
                                                  server_lr=server_lr, kappa=kappa)}


__all__ = ["SOURCE", "sqrt_scaled", "sqrt_scaling_check", "sqrt_sde_invariance"]
