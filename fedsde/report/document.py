"""The written report: ``report.html`` (self-contained, figures embedded) and ``report.md``."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedsde.report.gallery import FigureRecord

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.7em}h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.92em;color:#333;margin-top:.4em}
table{border-collapse:collapse;font-size:.85em;margin:.8em 0}td,th{border:1px solid #ccc;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f4f4f4}
.holds{color:#176317;font-weight:600}.fails{color:#a31515;font-weight:600}.na{color:#666}
.err{background:#fff0f0;border:1px solid #e99;padding:.5em;white-space:pre-wrap;font-family:monospace}
code{background:#f6f6f6;padding:0 .2em}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _verdict_class(v: str | None) -> str:
    return {"holds": "holds", "fails": "fails"}.get(str(v), "na")


def _claims_rows(claims: Sequence[dict]) -> list[list[str]]:
    rows = []
    for c in claims:
        pr = c.get("printed") or {}
        co = c.get("corrected") or {}
        rows.append([c.get("id", ""), c.get("statement", ""), pr.get("verdict", ""), _fmt(pr.get("margin", "")),
                     co.get("verdict", "—") if co else "—", _fmt(co.get("margin", "")) if co else ""])
    return rows


def build_html(title: str, intro: str, records: Sequence[FigureRecord], claims: Sequence[dict] | None,
               errata: Sequence[dict] | None, metadata: dict[str, Any], scratch: Path) -> str:
    """The self-contained HTML report (PNG figures embedded as base64)."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{_esc(title)}</h1>", f"<p>{_esc(intro)}</p>",
             "<h2>Contents</h2><ul>"]
    for r in records:
        parts.append(f"<li><a href='#{r.spec.id}'>{r.spec.id}: {_esc(r.spec.title)}</a>"
                     + (" <span class='fails'>(failed)</span>" if r.error else "") + "</li>")
    parts.append("<li><a href='#claims'>Claims of the papers</a></li><li><a href='#errata'>Errata</a></li>"
                 "<li><a href='#meta'>Run metadata</a></li></ul>")
    for r in records:
        parts.append(f"<h2 id='{r.spec.id}'>{r.spec.id}: {_esc(r.spec.title)}</h2>")
        if r.error:
            parts.append(f"<div class='err'>This figure could not be made:\n{_esc(r.error)}</div>")
            continue
        png = scratch / "figures" / f"{r.spec.id}_{r.spec.slug}.png"
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f"<figure><img alt='{_esc(r.spec.title)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{_esc(r.output.caption)}</figcaption></figure>")
        csvs = ", ".join(f"<code>data/{r.spec.id}_{n}.csv</code>" for n in r.output.tables)
        parts.append(f"<p>Data: {csvs or '—'}; made in {r.wall_time_s:.1f} s.</p>")
    parts.append("<h2 id='claims'>Claims of the papers</h2>")
    if claims:
        parts.append("<p>Each verdict is computed when the check runs (<code>fedsde claims</code>).</p><table>"
                     "<tr><th>claim</th><th>statement</th><th>as printed</th><th>margin</th><th>corrected</th>"
                     "<th>margin</th></tr>")
        for row in _claims_rows(claims):
            parts.append("<tr>" + "".join(
                f"<td class='{_verdict_class(v)}'>{_esc(v)}</td>" if i in (2, 4) else f"<td>{_esc(v)}</td>"
                for i, v in enumerate(row)) + "</tr>")
        parts.append("</table>")
    else:
        parts.append("<p class='na'>The claims checks were not run.</p>")
    parts.append("<h2 id='errata'>Errata (printed vs corrected, with numbers)</h2>")
    if errata:
        parts.append("<p>Generated from the symbolic derivations (<code>fedsde derive --errata</code>); every value "
                     "is computed, the exact value comes from the law of the discrete chain.</p>"
                     "<table><tr><th>item</th><th>as printed</th><th>corrected</th><th>quantity</th>"
                     "<th>printed</th><th>corrected</th><th>exact chain</th></tr>")
        for e in errata:
            parts.append(
                f"<tr><td><b>{_esc(e.get('id', ''))}</b> [{_esc(e.get('severity', ''))}]<br>"
                f"{_esc(e.get('location', ''))}<br><i>{_esc(e.get('title', ''))}</i></td>"
                f"<td><code>{_esc(e.get('printed', ''))}</code></td>"
                f"<td><code>{_esc(e.get('corrected', ''))}</code></td>"
                f"<td>{_esc(e.get('quantity', ''))}<br>at {_esc(e.get('example', ''))}</td>"
                f"<td>{_esc(_fmt(e.get('printed_value', '')))}</td><td>{_esc(_fmt(e.get('corrected_value', '')))}</td>"
                f"<td>{_esc(_fmt(e.get('exact_value', '')))}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p class='na'>No errata entries were produced.</p>")
    parts.append("<h2 id='meta'>Run metadata</h2><table>")
    for k, v in metadata.items():
        parts.append(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>")
    # marks <body data-images="decoded/total"> once loaded (used by the headless-browser test)
    parts.append("</table><script>window.addEventListener('load',function(){var im=document.images,ok=0;"
                 "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0){ok++;}}"
                 "document.body.setAttribute('data-images',ok+'/'+im.length);});</script></body></html>")
    return "\n".join(parts)


def build_markdown(title: str, intro: str, records: Sequence[FigureRecord], claims: Sequence[dict] | None,
                   errata: Sequence[dict] | None, metadata: dict[str, Any]) -> str:
    """The Markdown report (figures linked from ``figures/``)."""
    lines = [f"# {title}", "", intro, ""]
    for r in records:
        lines += [f"## {r.spec.id}: {r.spec.title}", ""]
        if r.error:
            lines += ["This figure could not be made:", "", "```", r.error.strip(), "```", ""]
            continue
        lines += [f"![{r.spec.title}](figures/{r.spec.id}_{r.spec.slug}.png)", "", r.output.caption, "",
                  "Data: " + ", ".join(f"`data/{r.spec.id}_{n}.csv`" for n in r.output.tables)
                  + f" (made in {r.wall_time_s:.1f} s)", ""]
    lines += ["## Claims of the papers", ""]
    if claims:
        lines += ["| claim | statement | as printed | margin | corrected | margin |", "|---|---|---|---|---|---|"]
        for row in _claims_rows(claims):
            lines.append("| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |")
    else:
        lines.append("The claims checks were not run.")
    lines += ["", "## Errata", ""]
    if errata:
        lines += ["| item | quantity (example) | printed | corrected | exact chain |", "|---|---|---|---|---|"]
        for e in errata:
            lines.append(f"| **{e.get('id', '')}** ({e.get('location', '')}): {e.get('title', '')} | "
                         f"{e.get('quantity', '')} at {e.get('example', '')} | {_fmt(e.get('printed_value', ''))} | "
                         f"{_fmt(e.get('corrected_value', ''))} | {_fmt(e.get('exact_value', ''))} |")
    else:
        lines.append("No errata entries were produced.")
    lines += ["", "## Run metadata", "", "| key | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in metadata.items()]
    return "\n".join(lines) + "\n"
