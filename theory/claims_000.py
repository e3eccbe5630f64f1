"""Seed 000 (Zeng et al., FedAWARE, gradient-diversity maximisation): its claims as executable checks.

These are the claims ``fedsde claims --paper 000`` checks.

The claims (id, statement, source, documented problem) and their checks live in the installed package,
:mod:`fedsde.theory.claims.claims_000`, so that ``fedsde claims`` works from any directory.  This file is the
readable entry point of the seed in the repository: run it to list the claims (``--list``) or to check them

    python theory/claims_000.py [--list] [--seed N] [--scale S] [--json] [--figures DIR]

which is ``fedsde claims --paper 000`` with the same options.

Derivations and errata in readable math: theory/errata_000.md.
"""

from __future__ import annotations

import sys

from fedsde.cli import main
from fedsde.theory.claims.claims_000 import CLAIMS

__all__ = ["CLAIMS"]

if __name__ == "__main__":
    raise SystemExit(main(["claims", "--paper", "000", *sys.argv[1:]]))
