"""Claims the SDE view of the server rules speaks to (:mod:`fedsde.sde.rules`): FedNova's fixed point (seed 003)
and FedAvgM's effective server step (Hsu et al. 2019, the baseline of seeds 000 and 004).

* ``003/sde-fednova-fixed-point`` — FedNova's first-order SDE is centred at FedNova's own fixed point: its
  stationary mean equals the exact stationary mean of FedNova's chain (unequal ``τ_i``, the case study of seed 003),
  and that point is neither FedAvg's nor ``x*`` (objective inconsistency at finite ``ητ`` is a property of the SDE).
  Margin: ``min(log10(1e-10/‖c_SDE − E_∞ w‖), log10(‖c_SDE − c_FedAvg‖/1e-6), log10(‖c_SDE − x*‖/1e-6))``.
* ``000/sde-fedavgm-step`` — FedAvgM with server step ``s`` and momentum ``β`` follows FedAvg's first-order SDE with
  step ``s/(1 − β)``: the exact weak error of that SDE against the momentum chain vanishes with slope 1 as
  ``h → 0``.  Margin: ``0.1 − |slope − 1|`` (the printed claim: heavy ball with ``s`` is FedAvg with ``s/(1 − β)``).
  A wrong step (e.g. ``s``) leaves an error that does not vanish, slope near 0: the claim fails.
"""

from __future__ import annotations

import numpy as np

from fedsde.theory.claims._common import log_margin, predicate
from fedsde.theory.claims.base import CheckOptions, Claim, ClaimResult

#: the case study of seed 003 (five clients, τ = 1, 2, 5, 10, 50) at a finite client rate
TAU_003 = np.array([1, 2, 5, 10, 50])
ETA_003 = 0.01
#: tolerance of the agreement between the SDE's centre and the chain's exact stationary mean
AGREE = 1e-10
#: the smallest distance that counts as "a different point"
APART = 1e-6
#: FedAvgM setting of the effective-step check
BETA = 0.8
STEPS_H = (0.004, 0.002, 0.001, 0.0005)


def check_fednova_sde_fixed_point(opt: CheckOptions) -> ClaimResult:
    from fedsde.exact.aggregators import aggregator_stationary_law
    from fedsde.sde.rules import rule_sde
    from fedsde.theory.problems import fednova_quadratic

    pb = fednova_quadratic()
    nova = rule_sde(pb, "fednova", ETA_003, TAU_003, 1.0, ETA_003)
    avg = rule_sde(pb, "fedavg", ETA_003, TAU_003, 1.0, ETA_003)
    chain = aggregator_stationary_law(pb, "fednova", ETA_003, TAU_003, 1.0).mean
    c = nova.sde.c
    dev = float(np.linalg.norm(c - chain))
    d_avg, d_opt = float(np.linalg.norm(c - avg.sde.c)), float(np.linalg.norm(c - pb.optimum))
    nums = {"sde_centre": c, "chain_stationary_mean": chain, "fedavg_centre": avg.sde.c, "optimum": pb.optimum,
            "distance_to_chain_mean": dev, "distance_to_fedavg": d_avg, "distance_to_optimum": d_opt,
            "eta": ETA_003, "tau": TAU_003}
    margin = min(log_margin(AGREE, dev), float(np.log10(max(d_avg, 1e-300) / APART)),
                 float(np.log10(max(d_opt, 1e-300) / APART)))
    v = predicate(margin, f"min(log10({AGREE:g}/‖c_SDE − E_∞w‖), log10(‖c_SDE − c_FedAvg‖/{APART:g}), "
                  f"log10(‖c_SDE − x*‖/{APART:g}))", nums,
                  f"FedNova's SDE is centred at FedNova's own fixed point (the chain's stationary mean to {dev:.1e}), "
                  f"{d_avg:.3g} from FedAvg's and {d_opt:.3g} from x*",
                  "FedNova's SDE is not centred at its chain's own fixed point, or that point is FedAvg's or x*")
    return ClaimResult(v, None)


def check_fedavgm_effective_step(opt: CheckOptions) -> ClaimResult:
    from fedsde.aggregators import FedAvgM
    from fedsde.compare.rule_weak import rule_weak_error_vs_step
    from fedsde.theory.problems import fednova_quadratic

    pb = fednova_quadratic()
    tau = np.array([2, 3, 4, 5, 6])
    curve = rule_weak_error_vs_step(pb, FedAvgM(BETA), 0.05, tau, t_end=0.5, time_steps=STEPS_H,
                                    w0=np.array([2.0, 2.0]))
    nums = {"beta": BETA, "effective_step_factor": 1.0 / (1.0 - BETA), "steps": np.array(STEPS_H),
            "errors": curve.errors, "slope": curve.slope}
    v = predicate(0.1 - abs(curve.slope - 1.0), "0.1 − |slope − 1| (exact weak error of the SDE with step "
                  "s/(1 − β) against the momentum chain)", nums,
                  f"the momentum chain follows the first-order SDE with step s/(1 − β) (weak-error slope "
                  f"{curve.slope:.3f})", f"weak-error slope {curve.slope:.3f}: not the SDE with step s/(1 − β)")
    return ClaimResult(v, None)


CLAIM_003 = Claim(
    "003/sde-fednova-fixed-point", "FedNova's first-order SDE is centred at FedNova's own fixed point (objective "
    "inconsistency at finite ητ is the SDE's stationary mean), not at FedAvg's nor at x*",
    "seed 003, Sec. III/IV (objective inconsistency), with seed 002 eq. (2) on FedNova's exact round",
    f"the case study of seed 003 (τ = {TAU_003.tolist()}), η = {ETA_003}, s = 1, exact laws",
    check_fednova_sde_fixed_point)

CLAIM_000 = Claim(
    "000/sde-fedavgm-step", "FedAvgM (server heavy ball β, step s), the baseline of seeds 000/004, follows FedAvg's "
    "first-order SDE with server step s/(1 − β)",
    "Hsu, Qi & Brown 2019 (effective learning rate); Li, Tai & E 2019 (momentum SDE)",
    f"seed 003's case study, β = {BETA}, η = 0.05, τ = 2 … 6, exact weak error at t = 0.5 for h = "
    f"{', '.join(map(str, STEPS_H))}", check_fedavgm_effective_step)
