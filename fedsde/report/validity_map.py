"""The figures of ``fedsde map``: the validity map (``map.png``/``.pdf``) and FedAvg against the SDE at the cells
that track best and worst.

**The map**: one panel per server step ``s``; rows are the local steps ``E``, columns the client steps ``η``; each
cell coloured by the validity test's outcome and labelled with the estimated gap ``d̂`` (the largest over the
judged metrics and times of ``|E φ_FedAvg − E φ_SDE|`` relative to the SDE's movement, accuracy in its own units),
its simultaneous interval ``[lower, upper]`` and the step measure ``κ``; undecided cells say how many replicates
would decide.  The dashed line is ``κ = κ*`` of the claim ``002/eq-2-model``, found along each row by log–log
interpolation of the cells' ``κ`` (exact where ``κ ∝ η``, as for small steps); the claim predicts "tracks" on
its low-``κ`` side.  The legend says all of this on the figure.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np

from fedsde._tolerances import Z95
from fedsde.report.figures.common import plt

#: outcome → (fill colour, legend text)
STYLE = {
    "tracks": ("#8fd18f", "tracks: the whole simultaneous interval of the gap d lies below the tolerance"),
    "does not track": ("#f09a8a", "does not track: the interval lies above the tolerance"),
    "inconclusive": ("#dcdcdc", "inconclusive: the interval straddles the tolerance (more replicates would decide)"),
    None: ("#ffffff", "failed: the cell did not run (its error is in the report and the sweep folder)"),
}


#: what the numbers in a cell are (the legend's last entry)
CELL_TEXT = ("in each cell: outcome; d̂ = largest gap |E φ_FedAvg − E φ_SDE| over the judged metrics and times, "
             "relative to the SDE's movement (test accuracy: in accuracy units, against its own tolerance); its "
             "simultaneous interval [lower, upper] ([lower, ∞) while the SDE's movement, which d̂ is relative to, is "
             "within its noise); κ = s·λ_max(B), the fraction of the distance to the fixed point "
             "one round removes; undecided cells: the replicates per chain that would decide")
#: metrics whose gap is in their own units (against their own tolerance), as a cell names them
OWN_UNITS = {"test_accuracy": "accuracy"}


def replicates_text(record: dict) -> str:
    """How FedAvg's side of the cells was computed: ``R = … per chain``, or exactly (no replicates)."""
    if record.get("replicates") is None:
        return "FedAvg exact (no replicates)"
    return f"R = {record['replicates']} per chain"


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _label(c: dict) -> str:
    outcome = c.get("outcome")
    if outcome is None:
        return "failed"
    gap, low, up = _num(c.get("gap")), _num(c.get("lower")), _num(c.get("upper"))
    if not math.isfinite(gap):
        lines = [outcome, "no finite gap", "(FedAvg or the SDE", "blew up?)"]
    else:
        lines = [outcome, f"d̂ = {gap:.3g}", f"[{low:.2g}, {up:.2g}]" if math.isfinite(up) else f"[{low:.2g}, ∞)"]
        if c.get("metric") in OWN_UNITS:
            lines.insert(2, f"({OWN_UNITS[c['metric']]}, tol {_num(c.get('metric_tolerance')):g})")
    if c.get("kappa") is not None:
        lines.append(f"κ = {c['kappa']:.2g}")
    if c.get("look") == 2:
        lines.append(f"2nd look, R = {c.get('replicates')}")
    if outcome == "inconclusive" and c.get("replicates_needed") is not None:
        lines.append(f"needs R = {c['replicates_needed']}")
    return "\n".join(lines)


def threshold_path(kappas: np.ndarray, kappa_star: float) -> tuple[np.ndarray, np.ndarray]:
    """The line ``κ = κ*`` over one panel: ``kappas`` (rows E × columns η, NaN where unknown) → ``(x, y)`` in cell
    coordinates (column i at x = i, row j spans y = j ± ½), NaN between rows where the line leaves the panel.

    Along each row ``log κ`` is interpolated linearly in the column index between neighbouring cells (and
    extrapolated half a column past the edges with the edge's slope); every crossing of ``κ*`` is a vertical
    segment across the row, consecutive rows' segments joined."""
    xs, ys = [], []
    target = math.log(kappa_star)
    for j, row in enumerate(np.asarray(kappas, dtype=np.float64)):
        with np.errstate(divide="ignore", invalid="ignore"):
            lk = np.log(row)
        found = []
        n = lk.size
        for i in range(n - 1):
            a, b = lk[i], lk[i + 1]
            if np.isfinite(a) and np.isfinite(b) and a != b and (a - target) * (b - target) <= 0:
                found.append(i + (target - a) / (b - a))
        if n >= 2 and not found:
            for i, edge, step in ((0, -0.5, lk[1] - lk[0]), (n - 1, n - 0.5, lk[-1] - lk[-2])):
                if np.isfinite(step) and step != 0:
                    x = i + (target - lk[i]) / step
                    if min(i, edge) <= x <= max(i, edge):
                        found.append(x)
        found = sorted({round(float(x), 9) for x in found})  # a cell exactly at κ* ends two intervals
        if not found:
            xs.append(np.nan)
            ys.append(np.nan)
            continue
        for x in found:
            xs += [x, x]
            ys += [j - 0.5, j + 0.5]
    return np.asarray(xs), np.asarray(ys)


def map_figure(record: dict):
    """The validity map of a ``run_map`` record (see the module docstring); a matplotlib figure."""
    import matplotlib.patches as mpatches
    import matplotlib.patheffects as pe
    from matplotlib.lines import Line2D

    grid = record["grid"]
    etas, steps, servers = grid["eta"], grid["local_steps"], grid["server_lr"]
    nE, nH = len(steps), len(etas)
    cells = {(c["server_lr"], c["local_steps"], c["eta"]): c for c in record["cells"]}
    kappa_star = record.get("kappa_threshold")
    width = max(4.2, 1.25 * nH + 1.6)
    fig, axes = plt.subplots(1, len(servers), figsize=(width * len(servers), 1.15 * nE + 1.9), squeeze=False)
    size = 7.5 if nH <= 4 else 6.5
    drew_line = False
    for ax, s in zip(axes[0], servers, strict=True):
        kappas = np.full((nE, nH), np.nan)
        for j, E in enumerate(steps):
            for i, eta in enumerate(etas):
                c = cells[(s, E, eta)]
                colour = STYLE.get(c.get("outcome"), STYLE[None])[0]
                ax.add_patch(mpatches.Rectangle((i - 0.5, j - 0.5), 1, 1, facecolor=colour, edgecolor="white",
                                                lw=2, hatch="//" if c.get("outcome") is None else None))
                ax.text(i, j, _label(c), ha="center", va="center", fontsize=size, linespacing=1.15, zorder=4,
                        bbox={"facecolor": colour, "alpha": 0.85, "edgecolor": "none", "pad": 1.5})
                if c.get("kappa") is not None:
                    kappas[j, i] = c["kappa"]
        if kappa_star is not None:
            x, y = threshold_path(kappas, kappa_star)
            if np.isfinite(x).any():
                drew_line = True
                halo = [pe.Stroke(linewidth=4.5, foreground="white"), pe.Normal()]
                ax.plot(x, y, "k--", lw=2.2, zorder=3, path_effects=halo)
        ax.set_xlim(-0.5, nH - 0.5)
        ax.set_ylim(-0.5, nE - 0.5)
        ax.set_xticks(range(nH), [f"{v:g}" for v in etas])
        ax.set_yticks(range(nE), [str(v) for v in steps])
        ax.set_xlabel("client step η")
        ax.set_ylabel("local steps E")
        ax.set_title(f"server step s = {s:g}", fontsize=10)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    outcomes = [o for o in STYLE if o is not None or any(c.get("outcome") is None for c in record["cells"])]
    handles = [mpatches.Patch(facecolor=STYLE[o][0], edgecolor="#999999", hatch="//" if o is None else None,
                              label=STYLE[o][1].replace("tolerance", f"tolerance {record['tolerance']:g}", 1))
               for o in outcomes]
    if kappa_star is not None:
        known = any(c.get("kappa") is not None for c in record["cells"])
        where = ("" if drew_line else " (outside this grid: compare the κ in each cell)" if known else
                 " (κ is not available for this problem: no client Hessians to linearise the round)")
        handles.append(Line2D([], [], color="k", ls="--", lw=2.2,
                              label=f"κ = κ* = {kappa_star:.3g}{where}: the claim {record.get('claim')} predicts "
                              "'tracks' on the side of smaller κ"))
    handles.append(mpatches.Patch(facecolor="none", edgecolor="none", label=CELL_TEXT))
    wrap = max(60, int(14 * fig.get_figwidth()))
    for h in handles:
        h.set_label(textwrap.fill(h.get_label(), wrap, subsequent_indent="  "))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False, ncol=1)
    pb = record["problem"]
    refine = record.get("refine")
    looks = f"; refined: {refine['cells']} cells on fresh replicates" if refine and refine.get("cells") else ""
    name = str(pb.get("file", "")).replace("\\", "/").rsplit("/", 1)[-1]
    fig.suptitle(f"Where does seed 002's SDE describe FedAvg?\n{name} ({pb.get('kind')}, Q = {pb.get('Q')}, d = "
                 f"{pb.get('d')}), {record['rounds']} rounds, {replicates_text(record)}, reference: "
                 f"{record['reference']}, α = {record['alpha']:g}{looks}", fontsize=10)
    fig.tight_layout()
    return fig


def _curves(result: dict) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``(metric, FedAvg mean, its s.e., SDE mean, its s.e.)`` of every judged metric of one validity result."""
    out = []
    metrics = result.get("metrics") or {}
    for c in (result.get("verdict") or {}).get("curves") or []:
        m = c.get("metric")
        if m not in metrics or c.get("sde_mean") is None:
            continue
        out.append((m, np.asarray(metrics[m]["mean"], dtype=float)[0], np.asarray(metrics[m]["se"], dtype=float)[0],
                    np.asarray(c["sde_mean"], dtype=float), np.asarray(c.get("sde_se") or 0.0, dtype=float)))
    return out


def _keep_in_view(ax, fedavg: np.ndarray, sde: np.ndarray) -> None:
    """Where one side's path runs off by orders of magnitude (it blew up), limit the axis to the other side's range
    and say on the plot how far the first one went."""
    spans = {name: float(np.nanmax(np.abs(v))) if np.isfinite(v).any() else math.inf
             for name, v in (("FedAvg", fedavg), ("SDE", sde))}
    calm, wild = sorted(spans, key=spans.get)
    if not spans[wild] > 1e3 * max(spans[calm], 1e-300):
        return
    v = fedavg if calm == "FedAvg" else sde
    lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
    pad = 0.5 * (hi - lo) + 1e-12 * max(1.0, abs(hi))
    ax.set_ylim(lo - pad, hi + pad)
    ax.text(0.02, 0.97, f"{wild} leaves the plot (|mean| up to {spans[wild]:.2g})", transform=ax.transAxes,
            fontsize=7, va="top", color="#a31515")


def paths_figure(panels: list[tuple[str, dict, dict]]):
    """FedAvg against the SDE (mean paths with 95 % bands) of each ``(title, cell, validity result)``: one row per
    cell, one column per judged metric."""
    rows = [(title, cell, result, _curves(result)) for title, cell, result in panels]
    ncols = max(1, max(len(r[3]) for r in rows))
    fig, axes = plt.subplots(len(rows), ncols, figsize=(4.3 * ncols, 3.2 * len(rows)), squeeze=False)
    for r, (title, cell, result, curves) in enumerate(rows):
        t = np.asarray(result.get("times") or [], dtype=float)
        for k in range(ncols):
            ax = axes[r, k]
            if k >= len(curves):
                ax.axis("off")
                continue
            m, fm, fs, sm, ss = curves[k]
            ss = np.broadcast_to(np.nan_to_num(ss), sm.shape)
            ax.plot(t, fm, "o-", ms=3, color="C0", label="FedAvg (mean, 95 % band)")
            ax.fill_between(t, fm - Z95 * fs, fm + Z95 * fs, color="C0", alpha=0.2, lw=0)
            ax.plot(t, sm, "k--", lw=1.4, label="SDE (mean, 95 % band)")
            ax.fill_between(t, sm - Z95 * ss, sm + Z95 * ss, color="k", alpha=0.12, lw=0)
            ax.set_xlabel("t = n·h")
            ax.set_ylabel(m)
            _keep_in_view(ax, fm, sm)
            if k == 0:
                ax.set_title(f"{title}: η = {cell['eta']:g}, E = {cell['local_steps']}, s = {cell['server_lr']:g}\n"
                             f"{cell.get('outcome')}, d̂ = {_num(cell.get('gap')):.3g}", fontsize=9, loc="left")
            if r == 0 and k == ncols - 1:
                ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
