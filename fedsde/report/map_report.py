"""The files of ``fedsde map``: ``map.png``/``map.pdf``, ``paths.png``, ``map.json`` and the self-contained
``report.html`` (figures embedded as base64 PNG, like the gallery's report).

The report holds the map; FedAvg against the SDE (mean paths with 95 % bands) at the cell with the smallest gap
and at the one with the largest; the replicates each inconclusive cell would need; and, for each cell that tracks,
what the first-order scaling rules allow from there (:func:`fedsde.maps.moves.scaling_moves`).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

from fedsde.report.output import atomic_write_text, save_figure, write_json

#: most tracking cells whose scaling moves the report lists
MAX_MOVES = 40
BEST, WORST = "tracks best (smallest d̂)", "tracks worst (largest d̂)"
FILES = {"map": "map.png", "map_pdf": "map.pdf", "paths": "paths.png", "json": "map.json", "report": "report.html"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45;overflow-wrap:anywhere}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
figure{margin:1.2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.92em;color:#333;margin-top:.4em}
table{border-collapse:collapse;font-size:.82em;margin:.8em 0;max-width:100%}
td,th{border:1px solid #ccc;padding:.25em .45em;text-align:left;vertical-align:top}th{background:#f4f4f4}
.tracks{background:#e3f5e3}.nottrack{background:#fbe3de}.inconclusive{background:#f0f0f0}
code{background:#f6f6f6;padding:0 .2em}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _g(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return "∞" if x > 0 else "—"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _where(c: dict) -> str:
    return f"η = {c['eta']:g}, E = {c['local_steps']}, s = {c['server_lr']:g}"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{_esc(alt)}' src='data:image/png;base64,{data}'>"


def extremes(cells: list[dict]) -> list[tuple[str, dict]]:
    """``(BEST, cell)`` with the smallest estimated gap and ``(WORST, cell)`` with the largest,
    among the cells that ran (one entry when they are the same cell, none when no cell ran)."""
    ran = [c for c in cells if c.get("outcome") is not None and c.get("gap") is not None and math.isfinite(c["gap"])]
    if not ran:
        return []
    best, worst = min(ran, key=lambda c: c["gap"]), max(ran, key=lambda c: c["gap"])
    return ([(BEST, best)] if best is worst else [(BEST, best), (WORST, worst)])


def _result(out: Path, cell: dict) -> dict:
    return json.loads((out / cell["record"]).read_text(encoding="utf-8")).get("result") or {}


def write_outputs(record: dict, out: str | Path, problem, *, progress: bool = False) -> dict[str, str]:
    """Write the map's files into ``out`` (the map's folder); returns name → path.  ``progress``: a bar on stderr
    over the figures, the scaling moves of the tracking cells and the report."""
    from fedsde._progress import progress_bar
    from fedsde.maps.moves import scaling_moves
    from fedsde.report.validity_map import map_figure, paths_figure, plt

    out = Path(out)
    tracking = [c for c in record["cells"] if c.get("outcome") == "tracks"][:MAX_MOVES]
    bar = progress_bar(3 + len(tracking), "map: report", unit="part", enabled=progress)
    fig = map_figure(record)
    save_figure(fig, out / "map", formats=("png", "pdf"), dpi=150)
    plt.close(fig)
    bar.update()
    panels = [(title, c, _result(out, c)) for title, c in extremes(record["cells"])]
    if panels:
        try:
            fig = paths_figure(panels)
            save_figure(fig, out / "paths", dpi=120)
            plt.close(fig)
        except (ValueError, OverflowError, FloatingPointError) as exc:  # the paths are data; the map stands alone
            record.setdefault("notes", []).append(f"paths figure not drawn: {type(exc).__name__}: {exc}")
            panels = []
    bar.update()
    cache: dict = {}
    moves = []
    for c in tracking:
        moves.append((c, scaling_moves(problem, c, rounds=record["rounds"], kappa_star=record.get("kappa_threshold"),
                                       cache=cache)))
        bar.update()
    write_json(out / FILES["json"], record)
    text = build_html(record, out, panels, moves)
    atomic_write_text(out / FILES["report"], text)
    bar.update()
    bar.close()
    return {k: str(out / v) for k, v in FILES.items() if (out / v).exists()}


def _replicates(record: dict) -> str:
    from fedsde.report.validity_map import replicates_text

    return replicates_text(record)


def _summary(record: dict) -> str:
    n = record["counts"]
    pb = record["problem"]
    ks = record.get("kappa_threshold")
    refine = record.get("refine")
    parts = [f"<p>Problem <code>{_esc(pb['file'])}</code> ({_esc(pb['kind'])}, Q = {pb['Q']}, d = {pb['d']}); "
             f"{len(record['cells'])} cells: η ∈ {{{', '.join(f'{v:g}' for v in record['grid']['eta'])}}}, "
             f"E ∈ {{{', '.join(map(str, record['grid']['local_steps']))}}}, s ∈ "
             f"{{{', '.join(f'{v:g}' for v in record['grid']['server_lr'])}}}; {record['rounds']} rounds, "
             + _replicates(record) + f", seed {record['seed']}; the SDE's value: "
             f"{_esc(record['reference'])} reference (ℓ = {', '.join(map(str, record['ells']))}).</p>",
             f"<p><b>{n['tracks']}</b> cells track, <b>{n['does not track']}</b> do not, <b>{n['inconclusive']}"
             f"</b> are inconclusive" + (f", {n['failed']} failed" if n.get("failed") else "") + ". Tolerance "
             f"{record['tolerance']:g} of each metric's movement (test accuracy: {record['accuracy_tolerance']:g} "
             f"in accuracy units); family level α = {record['alpha']:g} per cell"
             + (f" (α/2 = {record['alpha_per_look']:g} at each of two looks)" if refine else "") + ".</p>",
             "<p>Step measure: " + _esc(record["kappa_measure"]) + (f"; κ* = {ks:.3g}" if ks is not None else
                                                                      "; no threshold") + ".</p>"]
    return "\n".join(parts)


def _inconclusive(record: dict) -> str:
    rows = [c for c in record["cells"] if c.get("outcome") == "inconclusive"]
    if not rows:
        return "<p>No cell is inconclusive.</p>"
    parts = ["<p>Replicates per chain that would decide each cell at its current estimates (the validity test's "
             "<code>replicates_needed</code>; — where no finite number decides)."
             + (" Cells refined once on fresh replicates show the second look." if record.get("refine") else "")
             + "</p><table><tr><th>cell</th><th>d̂</th><th>interval</th><th>decisive metric (tolerance)</th>"
             "<th>replicates used</th>"
             "<th>replicates needed</th><th>look</th></tr>"]
    for c in rows:
        parts.append(f"<tr class='inconclusive'><td>{_where(c)}</td><td>{_g(c.get('gap'))}</td>"
                     f"<td>{_interval(c)}</td><td>{_esc(c.get('metric') or '—')} "
                     f"({_g(c.get('metric_tolerance'))})</td><td>{_g(c.get('replicates'))}</td>"
                     f"<td>{_g(c.get('replicates_needed'))}</td><td>{c.get('look', 1)}</td></tr>")
    parts.append("</table>")
    if any(_interval(c).endswith("∞)") for c in rows):
        parts.append("<p>An interval [lower, ∞) has no upper bound: the SDE's movement of the decisive metric, which "
                     "d̂ is relative to, is not resolved from its noise; more replicates resolve it.</p>")
    return "\n".join(parts)


def _interval(c: dict) -> str:
    """A cell's interval of d: ``[lower, upper]``, or ``[lower, ∞)`` (an infinite upper bound is null in JSON)."""
    lower, upper = c.get("lower"), c.get("upper")
    if lower is not None and (upper is None or not math.isfinite(upper)):
        return f"[{_g(lower)}, ∞)"
    return f"[{_g(lower)}, {_g(upper)}]"


def _moves(record: dict, moves: list) -> str:
    if not moves:
        return "<p>No cell tracks, so no scaling rule starts from a cell known to be described by the SDE.</p>"
    from fedsde.maps.moves import FACTOR

    ks = record.get("kappa_threshold")
    parts = [f"<p>Each first-order scaling rule (<code>fedsde scaling</code>) applied with factor {FACTOR:g} at each "
             "cell that tracks: the scaled configuration, its step measure κ′ and whether κ′ ≤ κ*"
             + (f" = {ks:.3g}" if ks is not None else "") + " (the claim then expects the SDE, and so the rule's "
             "premise, to hold at the scaled end).</p><table><tr><th>from</th>"]
    rules = [m["rule"] for m in moves[0][1]]
    parts.append("".join(f"<th>{_esc(r)}</th>" for r in rules) + "</tr>")
    for c, rows in moves:
        cells = []
        for m in rows:
            if "error" in m:
                cells.append(f"<td class='na'>not applicable: {_esc(m['error'])}</td>")
                continue
            cfg = m["config"]
            extra = "".join(f", {k.replace('_size', '')} {cfg[k]}" for k in ("clients", "batch_size") if k in cfg)
            verdict = {True: "κ′ ≤ κ*", False: "κ′ > κ*", None: ""}[m["within"]]
            cls = {True: "tracks", False: "nottrack", None: ""}[m["within"]]
            cells.append(f"<td class='{cls}'>η {cfg['eta']:.3g}, E {cfg['local_steps']}, s {cfg['server_lr']:.3g}, "
                         f"n {cfg['rounds']}{extra}<br>κ′ = {_g(m['kappa'], 2)} {verdict}</td>")
        parts.append(f"<tr><td>{_where(c)}<br>d̂ = {_g(c.get('gap'))}</td>{''.join(cells)}</tr>")
    parts.append("</table>")
    return "\n".join(parts)


def build_html(record: dict, out: Path, panels: list, moves: list) -> str:
    """The self-contained report (see the module docstring)."""
    title = f"Validity map: {Path(record['problem']['file']).name}"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>",
             "<p>Where does seed 002's SDE (2) describe FedAvg on this problem? Each cell is one validity test "
             "(<code>fedsde validity</code>): FedAvg by Monte Carlo against the SDE, an equivalence test with three "
             "outcomes.</p>", _summary(record), "<h2>The map</h2>",
             f"<figure>{_img(out / FILES['map'], 'validity map')}<figcaption>Colour: the outcome; in each cell the "
             "estimated gap d̂, its simultaneous interval and the step measure κ; dashed: κ = κ*.</figcaption>"
             "</figure>"]
    if panels:
        names = " and ".join(f"{t} ({_where(c)}: {c['outcome']}, d̂ = {_g(c['gap'])})" for t, c, _ in panels)
        parts += ["<h2>FedAvg against the SDE</h2>",
                  f"<figure>{_img(out / FILES['paths'], 'FedAvg against the SDE')}<figcaption>Mean paths of the "
                  f"judged metrics with 95 % bands at the cells that track best and worst: {_esc(names)}."
                  "</figcaption></figure>"]
    parts += ["<h2>Undecided cells</h2>", _inconclusive(record), "<h2>Scaling from the cells that track</h2>",
              _moves(record, moves)]
    for note in record.get("notes") or ():
        parts.append(f"<p class='na'>{_esc(note)}</p>")
    failed = [c for c in record["cells"] if c.get("outcome") is None]
    if failed:
        parts.append("<h2>Failed cells</h2><table><tr><th>cell</th><th>error</th></tr>" + "".join(
            f"<tr><td>{_where(c)}</td><td>{_esc(c.get('error', ''))}</td></tr>" for c in failed) + "</table>")
    refine = record.get("refine")
    sweep = record.get("sweep") or {}
    meta = {"folder": record["out"], "load the cells": f"fedsde.sweep.load({record['out']!r})",
            "sweep": f"{sweep.get('done', 0)} done, {sweep.get('skipped', 0)} resumed, {sweep.get('failed', 0)} "
                     f"failed in {sweep.get('wall_s', 0.0):.1f} s on {sweep.get('workers')} worker(s)",
            "memory estimate": f"{record['memory_estimate_bytes'] / 2**20:.0f} MiB"}
    if refine:
        meta["refinement"] = (f"budget {refine['budget']}, spent {refine['spent']} on {refine['cells']} cells, "
                              f"{refine.get('decided', 0)} decided; {refine['design']}")
    parts.append("<h2>Run</h2><table>" + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>"
                                               for k, v in meta.items()) + "</table>")
    # <body data-images="decoded/total" data-overflow="elements past the right edge"> once loaded (browser test)
    parts.append("<script>window.addEventListener('load',function(){var im=document.images,ok=0,bad=0;"
                 "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0){ok++;}}"
                 "var w=document.documentElement.clientWidth,all=document.body.querySelectorAll('*');"
                 "for(var j=0;j<all.length;j++){var r=all[j].getBoundingClientRect();if(r.right>w+1){bad++;}}"
                 "if(document.documentElement.scrollWidth>w+1){bad++;}"
                 "document.body.setAttribute('data-images',ok+'/'+im.length);"
                 "document.body.setAttribute('data-overflow',String(bad));});</script></body></html>")
    return "\n".join(parts)
