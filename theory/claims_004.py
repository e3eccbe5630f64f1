"""Seed 004 (Ye et al., FedDisco, ICML 2023): its claims as executable checks.

These are the claims ``fedsde claims --paper 004`` checks.

The claims (id, statement, source, documented problem) and their checks live in the installed package,
:mod:`fedsde.theory.claims.claims_004`, so that ``fedsde claims`` works from any directory.  This file is the
readable entry point of the seed in the repository: run it to list the claims (``--list``) or to check them

    python theory/claims_004.py [--list] [--seed N] [--scale S] [--json] [--figures DIR]

which is ``fedsde claims --paper 004`` with the same options.

Derivations and errata in readable math: theory/errata_004.md.
"""

from __future__ import annotations

import sys

from fedsde.cli import main
from fedsde.theory.claims.claims_004 import CLAIMS

__all__ = ["CLAIMS"]

if __name__ == "__main__":
    raise SystemExit(main(["claims", "--paper", "004", *sys.argv[1:]]))
