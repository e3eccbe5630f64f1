"""Seed 002 (Overman & Klabjan, "Continuous-Time Analysis of Federated Averaging"): its claims as checks.

These are the claims ``fedsde claims --paper 002`` checks.

The claims (id, statement, source, documented problem) and their checks live in the installed package,
:mod:`fedsde.theory.claims.claims_002`, so that ``fedsde claims`` works from any directory.  This file is the
readable entry point of the seed in the repository: run it to list the claims (``--list``) or to check them

    python theory/claims_002.py [--list] [--seed N] [--scale S]

Derivations and errata in readable math: theory/derivations_002.md and theory/errata_002.md.
"""

from __future__ import annotations

import argparse

from fedsde.theory.claims import CheckOptions, run_claims
from fedsde.theory.claims.claims_002 import CLAIMS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the claims without running them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    for claim in CLAIMS if args.list else ():
        print(f"{claim.id}  [{claim.source}]\n    {claim.statement}\n    problem: {claim.problem}")
        if claim.corrected_statement:
            print(f"    corrected: {claim.corrected_statement}")
    if args.list:
        return 0
    for claim, res, sec in run_claims(CLAIMS, CheckOptions(seed=args.seed, scale=args.scale)):
        corr = "—" if res.corrected is None else f"{res.corrected.verdict} ({res.corrected.margin})"
        print(f"{claim.id:<30s} printed: {res.printed.verdict} ({res.printed.margin})   corrected: {corr}   "
              f"[{sec:.1f} s]")
        print(f"    {res.printed.reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
