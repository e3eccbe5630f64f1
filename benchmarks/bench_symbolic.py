"""CPU time of every symbolic derivation from a cold start (fresh process), against a 10 s budget.

Runs, in a fresh interpreter each time, what ``fedsde derive`` and ``fedsde reproduce`` build symbolically: the
three variants' derivations (symbolic E and E = 5), their lambdified coefficient functions, the moment identities
and the errata.  CPU time (``time.process_time``) is reported, so other work on a shared machine inflates it less
than wall time; the median and range over ``--repeats`` processes are printed, with the budget.

Usage: ``python benchmarks/bench_symbolic.py [--repeats 3] [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

BUDGET_S = 10.0

_CODE = (
    "import time; t0 = time.process_time()\n"
    "from fedsde.symbolic.render import derivation\n"
    "from fedsde.symbolic.errata import errata_entries\n"
    "from fedsde.symbolic import moments as M, numeric as N\n"
    "for v in ('paper', 'corrected', 'matched'):\n"
    "    derivation(v); derivation(v, 5); N.variant_functions(v)\n"
    "M.rescaling_ratios(); M.ode_residuals(); N.client_functions('numpy'); N.moment_functions('numpy')\n"
    "errata_entries()\n"
    "print(time.process_time() - t0)\n"
)


def one_run() -> float:
    out = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = [one_run() for _ in range(args.repeats)]
    res = {"cpu_s_median": statistics.median(runs), "cpu_s_min": min(runs), "cpu_s_max": max(runs),
           "budget_s": BUDGET_S, "within_budget": statistics.median(runs) <= BUDGET_S, "repeats": args.repeats}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"symbolic derivations, cold start: CPU {res['cpu_s_median']:.2f} s median "
              f"({res['cpu_s_min']:.2f}–{res['cpu_s_max']:.2f}, {args.repeats} processes); budget {BUDGET_S:g} s "
              f"({'within' if res['within_budget'] else 'OVER'})")


if __name__ == "__main__":
    main()
