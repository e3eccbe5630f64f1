"""Work the report needs after the figures, done once per reproduce run: the claim checks of the claims table
(F8 and F10 run some of them) and the errata table.

Each piece has a key in the run context's memo: ``("claim", claim id, scale)``, the key under which
:func:`fedsde.report.claims_memo.claim_result` memoises a check, or :data:`ERRATA`. A run on several processes
computes the pieces (:attr:`RunContext.pending`) in its workers and stores them in the parent's memo
(:func:`computed`, :func:`store`), so that the report finds them done.
"""

from __future__ import annotations

from fedsde.report.gallery import RunContext

#: memo key of the errata table
ERRATA = ("errata",)


def claim_key(claim_id: str, scale: float) -> tuple:
    """Memo key of a claim check at ``scale`` (the one :func:`fedsde.report.claims_memo.claim_result` uses)."""
    return ("claim", claim_id, scale)


def errata_table(ctx: RunContext) -> list[dict]:
    """The errata entries of the symbolic derivations (``fedsde derive --errata``), memoised on the run context."""

    def run():
        from fedsde.symbolic.errata import errata_entries

        return [e.to_dict() if hasattr(e, "to_dict") else dict(e) for e in errata_entries()]

    return ctx.memo(ERRATA, run)


def compute(ctx: RunContext, key: tuple) -> None:
    """Compute the piece ``key`` (a claim key or :data:`ERRATA`) into ``ctx``'s memo."""
    from fedsde.report.claims_memo import claim_result

    if key == ERRATA:
        errata_table(ctx)
    else:
        claim_result(ctx, key[1], key[2])


def computed(ctx: RunContext) -> dict[tuple, object]:
    """The pieces already in ``ctx``'s memo, picklable (a worker process sends them back); a claim is sent as its
    result and seconds, and :func:`store` looks the claim up again by id."""
    out: dict[tuple, object] = {}
    for key, value in ctx.cache.items():
        if key == ERRATA:
            out[key] = value
        elif isinstance(key, tuple) and key[:1] == ("claim",):
            out[key] = value[1:]
    return out


def store(ctx: RunContext, pieces: dict[tuple, object]) -> None:
    """Record pieces computed elsewhere (see :func:`computed`); what ``ctx`` already has is kept."""
    from fedsde.theory.claims import get_claim

    for key, value in pieces.items():
        if key not in ctx.cache:
            ctx.cache[key] = value if key == ERRATA else (get_claim(key[1]), *value)
