"""Seed 002 (Overman & Klabjan, "Continuous-Time Analysis of Federated Averaging"): its claims as checks.

These are the claims ``fedsde claims --paper 002`` checks.

The claims (id, statement, source, documented problem) live in the installed package, so that ``fedsde claims``
works from any directory: the registry :mod:`fedsde.theory.claims.claims_002`, the checks of Section 4 and
Lemma A.1 (:mod:`~fedsde.theory.claims.sec4_002`), of Sections 5 and 6 (:mod:`~fedsde.theory.claims.sec56_002`)
and over families of problems (:mod:`~fedsde.theory.claims.families_002`), the SVAG validity check of eq. (2)
(:mod:`~fedsde.theory.claims.validity_002`), and the problems and laws they share
(:mod:`~fedsde.theory.claims.cases_002`).  This file is the readable entry point of the seed in the repository:
run it to list the claims (``--list``) or to check them

    python theory/claims_002.py [--list] [--seed N] [--scale S] [--json] [--figures DIR]

which is ``fedsde claims --paper 002`` with the same options.

Derivations and errata in readable math: theory/derivations_002.md and theory/errata_002.md.
"""

from __future__ import annotations

import sys

from fedsde.cli import main
from fedsde.theory.claims.claims_002 import CLAIMS

__all__ = ["CLAIMS"]

if __name__ == "__main__":
    raise SystemExit(main(["claims", "--paper", "002", *sys.argv[1:]]))
