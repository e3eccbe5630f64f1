"""The claims registry: every claim of the seed papers as an executable check (``fedsde claims``).

One module per seed — :mod:`~fedsde.theory.claims.claims_002` (continuous-time FedAvg),
:mod:`~fedsde.theory.claims.claims_003` (FedNova), :mod:`~fedsde.theory.claims.claims_004` (FedDisco),
:mod:`~fedsde.theory.claims.claims_000` (FedAWARE) — each exposing ``CLAIMS``, a list of
:class:`~fedsde.theory.claims.base.Claim`.  Seed 002's registry points to checks split by idea: Section 4
(:mod:`~fedsde.theory.claims.sec4_002`), Sections 5–6 (:mod:`~fedsde.theory.claims.sec56_002`), families of
problems (:mod:`~fedsde.theory.claims.families_002`) and the SDE's validity
(:mod:`~fedsde.theory.claims.validity_002`), sharing problems and laws from
:mod:`~fedsde.theory.claims.cases_002`.  The readable per-seed files, derivations and errata live in the
repository's top-level ``theory/`` folder and point here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from fedsde._validate import choice
from fedsde.errors import FedsdeInputError
from fedsde.theory.claims.base import CheckOptions, Claim, ClaimResult, Figure, Series

#: seed numbers in the order the registry lists them
PAPERS = ("002", "003", "004", "000")


def claims_of(paper: str) -> list[Claim]:
    """The claims of one seed (``"002"``, ``"003"``, ``"004"`` or ``"000"``)."""
    choice("paper", paper, PAPERS)
    return list(importlib.import_module(f"fedsde.theory.claims.claims_{paper}").CLAIMS)


def all_claims(papers: Iterable[str] | str | None = None) -> list[Claim]:
    """Claims of the given seeds (default: all, in :data:`PAPERS` order)."""
    if papers is None:
        papers = PAPERS
    elif isinstance(papers, str):
        papers = (papers,)
    out = []
    for p in papers:
        out += claims_of(p)
    return out


def get_claim(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (e.g. ``"002/thm-4.5"``: seed, ``/``, name)."""
    paper, sep, name = str(claim_id).partition("/")
    if not sep or not paper or not name:
        raise FedsdeInputError(f"claim id {claim_id!r}: malformed; ids are seed/name, e.g. 002/thm-4.5 "
                               "(list them with fedsde claims --list)")
    if paper not in PAPERS:
        raise FedsdeInputError(f"claim id {claim_id!r}: unknown seed {paper!r}; seeds: {', '.join(PAPERS)}")
    for c in claims_of(paper):
        if c.id == claim_id:
            return c
    raise FedsdeInputError(f"claim id {claim_id!r}: unknown; ids of seed {paper}: "
                           + ", ".join(c.id for c in claims_of(paper)))


def run_claims(claims: Iterable[Claim], options: CheckOptions | None = None, *, progress: bool = False):
    """Run checks; yields ``(claim, ClaimResult, seconds)`` one claim at a time."""
    from fedsde._progress import progress_bar

    claims = list(claims)
    options = options or CheckOptions()
    with progress_bar(len(claims), "claims", unit="claim", enabled=progress) as bar:
        for c in claims:
            res, sec = c.run(options)
            bar.update()
            yield c, res, sec


__all__ = ["PAPERS", "CheckOptions", "Claim", "ClaimResult", "Figure", "Series", "all_claims", "claims_of",
           "get_claim", "run_claims"]
