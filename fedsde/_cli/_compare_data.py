"""``fedsde compare`` on a data problem: discrete FedAvg against the general SDE (2), by sampling."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import emit


def _ints(option: str, text: str, *, minimum: int) -> list[int]:
    from fedsde.errors import FedsdeInputError

    try:
        vals = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated integers >= {minimum}") from None
    if not vals or min(vals) < minimum:
        raise FedsdeInputError(f"{option}={text!r}: must be comma-separated integers >= {minimum}")
    return vals


def run_data(args: argparse.Namespace, problem, steps, w0) -> int:
    """FedAvg vs SDE (2) on ``problem`` (see :func:`fedsde.validity.general.general_sde_study`)."""
    from fedsde.errors import FedsdeInputError
    from fedsde.validity.general import Z95, general_sde_study

    if args.paths is None or args.paths < 2:
        raise FedsdeInputError(f"--paths={args.paths}: a data problem is compared by sampling; give --paths B "
                               "(>= 2 paths per scheme)")
    if args.variant != "corrected":
        raise FedsdeInputError(f"--variant={args.variant}: the linear SDE variants need quadratic clients; a data "
                               "problem is compared with the general SDE (2) (leave --variant out)")
    ells = _ints("--ells", args.ells, minimum=1)
    subs = [k for k in _ints("--mc-substeps", args.mc_substeps, minimum=0) if k > 0]
    if args.inner_samples is None or args.inner_samples < 1:
        raise FedsdeInputError(f"--inner-samples={args.inner_samples}: must be an integer >= 1")
    every = args.record_every if args.record_every is not None else max(1, args.rounds // 20)
    if every < 1:
        raise FedsdeInputError(f"--record-every={every}: must be an integer >= 1")
    st = general_sde_study(problem, eta=args.eta, local_steps=steps, rounds=args.rounds, replicates=args.paths,
                           seed=args.seed, server_lr=args.server_lr, h=args.h, ells=ells, mc_substeps=subs,
                           inner_samples=args.inner_samples, record_every=every, w0=w0, device=args.device)
    result = {"kind": "data", "sde": "general (eq. (2))", **st.to_dict()}
    T = st.times[-1]
    lines = [f"problem: Q={problem.Q}, d={problem.d}  eta={args.eta}  server_lr={args.server_lr}  "
             f"h={st.config['h']}  rounds={args.rounds} (t = {T:.6g})  paths={args.paths} per scheme",
             "SDE reference (Richardson from the two finest SVAG chains): "
             + ", ".join(f"{m} {v['mean']:.5g} ± {Z95 * v['se']:.2g}" for m, v in st.reference.items()),
             f"{'scheme':10s}{'step':>10s}{'cost×':>8s}  " + "  ".join(f"{m} − SDE (95 % CI)".ljust(30)
                                                                       for m in st.reference)]
    for r in st.rows:
        name = "FedAvg" if (r.scheme == "svag" and r.param == 1) else (
            f"svag ℓ={r.param}" if r.scheme == "svag" else f"mc k={r.param}")
        cells = "  ".join(f"{r.error[m]:+.4g} ± {Z95 * r.error_se[m]:.2g}".ljust(30) for m in st.reference)
        lines.append(f"{name:10s}{r.step:10.4g}{r.cost_ratio:8.1f}  {cells}")
    lines.append("slopes of |error| vs step: " + "; ".join(
        f"{s}: " + ", ".join(f"{m} {v:+.2f}" for m, v in d.items() if np.isfinite(v)) for s, d in st.slopes.items()))
    return emit(args, result, "\n".join(lines))
