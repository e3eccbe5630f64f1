"""``fedsde claims``: run the seed papers' claims as executable checks and print their verdicts.

Every claim is checked as printed and, where the paper needs a correction, as corrected; verdicts
(``holds`` / ``fails`` / ``not applicable``) and margins are computed when the command runs
(registry: :mod:`fedsde.theory.claims`).
"""

from __future__ import annotations

import argparse
import time

from fedsde._cli import one_line_help
from fedsde._cli._names import CLAIM_PAPERS
from fedsde._cli.common import add_json_flag, emit, show_progress, writable_folder
from fedsde.errors import FedsdeInputError


def run_claims(claims, options, *, progress: bool = False):
    """:func:`fedsde.theory.claims.run_claims`, imported when a run starts (the parser stays light)."""
    from fedsde.theory.claims import run_claims as run

    return run(claims, options, progress=progress)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "claims",
        help=one_line_help("claims"),
        description="Run the claims registry: each claim of the seed papers is checked on a documented problem, "
        "as printed and as corrected; prints claim, verdict and margin (positive when the claim holds).",
    )
    p.add_argument("--paper", choices=CLAIM_PAPERS, default=None, help="only the claims of one seed (default: all)")
    p.add_argument("--claim", action="append", default=None, metavar="ID",
                   help="only this claim id (repeatable), e.g. 002/thm-4.5")
    p.add_argument("--figures", default=None, metavar="DIR", help="save bound-vs-empirical figures (PNG) into DIR")
    p.add_argument("--seed", type=int, default=0, help="base seed of the Monte-Carlo checks (default 0)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiplier of Monte-Carlo sample sizes (default 1: about a minute for all claims)")
    p.add_argument("--list", action="store_true", help="list the claims without running them")
    add_json_flag(p)
    p.set_defaults(func=run)


def _fmt(v: dict | None) -> str:
    if v is None:
        return "—"
    m = v.get("margin")
    out = f"{v['verdict']:<14s} {m:+.3g}" if m is not None else v["verdict"]
    fam = v.get("family")
    return out + (f" ({fam['fraction_holding']:.0%} of {fam['size']})" if fam else "")


def run(args: argparse.Namespace) -> int:
    from fedsde.theory.claims import CheckOptions, all_claims, get_claim
    from fedsde.theory.claims.figures import save_claim_figure

    if args.seed < 0:
        raise FedsdeInputError(f"--seed={args.seed}: must be >= 0")
    if not args.scale > 0:
        raise FedsdeInputError(f"--scale={args.scale}: must be > 0")
    try:
        claims = [get_claim(c) for c in args.claim] if args.claim else all_claims(args.paper)
    except FedsdeInputError as exc:
        raise FedsdeInputError(f"--claim: {exc}") from None
    if args.paper and args.claim:
        other = [c.id for c in claims if c.paper != args.paper]
        if other:
            raise FedsdeInputError(f"--claim={other[0]}: belongs to seed {other[0].split('/')[0]}, not "
                                   f"--paper={args.paper}; the filters conflict (drop one)")
    if args.figures is not None and not args.list:
        writable_folder("--figures", args.figures)
    if args.list:
        rows = [{"id": c.id, "statement": c.statement, "source": c.source, "problem": c.problem} for c in claims]
        human = "\n".join(f"{c.id:<30s} {c.source}\n    {c.statement}" for c in claims)
        return emit(args, {"claims": rows}, human)
    options = CheckOptions(seed=args.seed, scale=args.scale)
    t0 = time.perf_counter()
    records, figures = [], []
    progress = show_progress(args)
    for claim, res, sec in run_claims(claims, options, progress=progress):
        records.append(claim.result_dict(res, sec))
        if args.figures and res.figure is not None and res.figure.panels:
            figures.append(str(save_claim_figure(claim.id, res.figure, args.figures)))
    total = time.perf_counter() - t0
    result = {"claims": records, "options": {"seed": args.seed, "scale": args.scale}, "figures": figures,
              "seconds": total}
    w = max(len(r["id"]) for r in records) if records else 10
    lines = [f"{'claim':<{w}s}  {'as printed (verdict, margin)':<36s} {'corrected (verdict, margin)':<36s}",
             "-" * (w + 74)]
    for r in records:
        lines.append(f"{r['id']:<{w}s}  {_fmt(r['printed']):<36s} {_fmt(r['corrected']):<36s}")
    lines.append("")
    lines.append("margin: signed distance to the decision threshold, > 0 exactly when the claim holds (its meaning per "
                 "claim: --json); (k% of n): share of the claim's family of problems where it holds.")
    for r in records:
        for form in ("printed", "corrected"):
            v = r[form]
            if v is not None and v["verdict"] != "holds":
                lines.append(f"  {r['id']} ({form}): {v['verdict']}: {v['reason']}")
    if figures:
        lines.append(f"figures: {len(figures)} written to {args.figures}")
    lines.append(f"{len(records)} claims checked in {total:.1f} s")
    return emit(args, result, "\n".join(lines))
