"""The general SDE (2) on a data problem: cost of a sample path to a given weak error, relative to one FedAvg run.

Digits softmax (d = 650, Dirichlet(0.5) over Q clients, batch 16), η, E, s fixed; every scheme runs R paths:

(a) FedAvg (the SVAG chain at ℓ = 1) — the unit of cost;
(b) the SVAG integrator at ℓ = 2, 4, 8, 16 (step h/ℓ, two client rounds per step: nominal cost 2ℓ);
(c) Euler–Maruyama with Monte-Carlo coefficients (S rollouts per path and step, k substeps: nominal cost S·k;
    rollouts in blocks of min(R, 128) paths, as the simulator).

Weak error of E F(w_T) (and of the test accuracy) against the Richardson limit of the two finest SVAG chains, with
95 % intervals; the slopes are fitted on the steps independent of that reference (FedAvg and the other SVAG chains;
every Monte-Carlo Euler run).  The target weak error is half of FedAvg's own distance from the SDE (what order 1
gives at half the step).  Cost = wall time of one run (best of ``--repeats`` over a few rounds, same R) relative
to FedAvg's; the target is met by the cheapest step whose error is within its 95 % interval of the target or below
(also reported: by the point estimate alone).  All ratios come from one run of this script; the thread count is
pinned and printed.

Usage: ``python benchmarks/bench_general_sde.py [--quick] [--threads 1] [--device cuda]``
"""

from __future__ import annotations

import argparse
import time

import torch

from fedsde.problems import data_problem_from_dict
from fedsde.sde.integrate import simulate_sde
from fedsde.sde.svag import default_oracle_factory, svag_chain
from fedsde.validity.general import Z95, cost_to_error, general_sde_study


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Q=5, 4 rounds, R=32, ℓ ≤ 8 (smoke run)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    q = args.quick
    Q, R, rounds = (5, 32, 4) if q else (10, 128, 10)
    ells = [1, 2, 4, 8] if q else [1, 2, 4, 8, 16]
    subs, S = ([1], 4) if q else ([1, 2], 16)
    eta, E, s = 0.2, 5, 1.0
    pb = data_problem_from_dict({"kind": "classification", "dataset": "digits", "model": "softmax", "clients": Q,
                                 "partition": "dirichlet", "alpha": 0.5, "batch_size": 16, "seed": 0})
    print(f"digits softmax d={pb.d}, Q={Q}, η={eta}, E={E}, s={s}, rounds={rounds} (T = {rounds * eta:g}), R={R}, "
          f"threads={torch.get_num_threads()}, device={args.device}")
    st = general_sde_study(pb, eta=eta, local_steps=E, rounds=rounds, replicates=R, seed=0, server_lr=s, ells=ells,
                           mc_substeps=subs, inner_samples=S, device=args.device)
    # timings: best of --repeats over 3 rounds, same R, relative to FedAvg
    oracle = default_oracle_factory(pb)
    kw = dict(eta=eta, local_steps=E, rounds=3, server_lr=s, oracle_factory=oracle, device=args.device)
    t_fed = best_time(lambda: svag_chain(pb, ell=1, replicates=R, seed=1, **kw), args.repeats)
    cost = {("svag", 1): 1.0}
    for ell in ells[1:]:
        cost[("svag", ell)] = best_time(lambda ell=ell: svag_chain(pb, ell=ell, replicates=R, seed=1, **kw),
                                        args.repeats) / t_fed
    for k in subs:
        cost[("mc-euler", k)] = best_time(lambda k=k: simulate_sde(
            pb, variant="general", replicates=R, seed=1, substeps=k, inner_samples=S, record=[3], **kw),
            args.repeats) / t_fed
    for r in st.rows:
        r.cost_ratio = cost[(r.scheme, r.param)]
    print(f"FedAvg: {t_fed / 3 * 1e3:.1f} ms per round ({R} replicates)")
    print(f"SDE reference E F(w_T) = {st.reference['train_loss']['mean']:.5f} ± "
          f"{Z95 * st.reference['train_loss']['se']:.5f} (Richardson ℓ = {ells[-2]}, {ells[-1]})")
    print(f"{'scheme':14s}{'step':>8s}{'nominal':>9s}{'cost×':>8s}   E F − SDE (95 % CI)     E acc − SDE (95 % CI)")
    for r in st.rows:
        nominal = (2 * r.param if r.param > 1 else 1) if r.scheme == "svag" else S * r.param
        name = "FedAvg" if (r.scheme, r.param) == ("svag", 1) else f"{r.scheme} {'ℓ' if r.scheme == 'svag' else 'k'}" \
            f"={r.param}"
        print(f"{name:14s}{r.step:8.4g}{nominal:9d}{r.cost_ratio:8.1f}   "
              f"{r.error['train_loss']:+.5f} ± {Z95 * r.error_se['train_loss']:.5f}   "
              f"{r.error['test_accuracy']:+.5f} ± {Z95 * r.error_se['test_accuracy']:.5f}")
    print(f"slope of |E F error| vs step: SVAG {st.slopes['svag']['train_loss']:+.2f}, "
          f"MC Euler {st.slopes['mc-euler']['train_loss']:+.2f}")
    target = 0.5 * abs(st.row("svag", 1).error["train_loss"])
    reach = cost_to_error(st, "train_loss", target, z=-Z95)  # error consistent with the target at 95 % or below
    point = cost_to_error(st, "train_loss", target)
    print(f"cost of an SDE path to weak error {target:.5f} (half FedAvg's; cheapest step whose error is within its "
          f"95 % interval of the target or below) relative to one FedAvg run: SVAG {reach['svag']:.1f}×, "
          f"MC Euler {reach['mc-euler']:.1f}× (target ≤ 4×); point estimate at or below the target: SVAG "
          f"{point['svag']:.1f}×, MC Euler {point['mc-euler']:.1f}× (nan: no tried step reaches it)")


if __name__ == "__main__":
    main()
