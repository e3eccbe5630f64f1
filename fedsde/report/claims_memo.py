"""Claim checks shared by the gallery and the report's claims table (each check runs once per reproduce run)."""

from __future__ import annotations

from fedsde.report.gallery import RunContext


def claim_result(ctx: RunContext, claim_id: str, scale: float = 1.0):
    """``(claim, ClaimResult, seconds)`` of one check of ``fedsde claims``, memoised on the run context."""
    from fedsde.theory.claims import CheckOptions, get_claim

    def run():
        claim = get_claim(claim_id)
        res, sec = claim.run(CheckOptions(seed=ctx.seed, scale=scale))
        return claim, res, sec

    return ctx.memo(("claim", claim_id, scale), run)


def verdict_text(v) -> str:
    """``"holds (margin +0.99)"`` from a Verdict."""
    d = v.to_dict()
    m = d.get("margin")
    return f"{d.get('verdict')} (margin {m:+.3g})" if isinstance(m, float) else str(d.get("verdict"))
