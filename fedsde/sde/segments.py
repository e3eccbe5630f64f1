"""torchsde Euler–Maruyama on the round grid for any number of steps: segments on restarted clocks.

Clock: ``t = n·h``; with ``substeps = k`` the solver step is ``dt = h/k``.  Time is kept by integer index: the run is
cut into segments of at most :data:`SEGMENT_STEPS` steps starting on round boundaries; each segment is one torchsde
call on a clock restarted at 0 (its grid accumulated exactly as torchsde accumulates it, ``t ← t + dt``, so the
solver lands on every recorded round time without interpolation), the SDE sees the time ``t_seg + t`` with
``t_seg = n_seg·h``, and the Brownian motion is asked for the increments from the segment's first step on
(:meth:`~fedsde.sde.brownian.GridBrownian.view`).  Rounding never accumulates over more than one segment, so any
number of steps stays on the grid (a single accumulated clock drifts off it after about 2.6·10⁵ steps of h = 0.05).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import torch
import torchsde

from fedsde._validate import record_rounds
from fedsde.errors import FedsdeInputError
from fedsde.sde.brownian import GridBrownian

#: most solver steps on one restarted clock (one torchsde call); segments start on round boundaries
SEGMENT_STEPS = 4096


def time_grid(h: float, rounds: int, substeps: int = 1, t0: float = 0.0) -> np.ndarray:
    """Solver grid ``t0, t0 + dt, …`` (``dt = h/substeps``, ``rounds·substeps`` steps) accumulated like torchsde.

    Returns
    -------
    ndarray, shape (rounds·substeps + 1,)
        Entry ``n·substeps`` is the (floating-point) time of round ``n``.
    """
    dt = h / substeps
    out = np.empty(rounds * substeps + 1)
    t = float(t0)
    out[0] = t
    for j in range(1, out.size):
        t = t + dt
        out[j] = t
    return out


def sdeint_rounds(
    sde: torch.nn.Module,
    y0: torch.Tensor,
    bm: GridBrownian,
    *,
    h: float,
    rounds: int,
    substeps: int = 1,
    record: Sequence[int] | None = None,
    t0: float = 0.0,
) -> torch.Tensor:
    """``torchsde.sdeint(sde, y0, ts, bm=bm, method="euler", dt=h/substeps)`` on the round grid.

    Parameters
    ----------
    sde : torch.nn.Module
        A torchsde module (``f``, ``g``/``g_prod``, ``noise_type``, ``sde_type="ito"``).
    y0 : Tensor, shape (R, d)
        State at ``t0`` (round 0).
    bm : GridBrownian
        Brownian motion of shape (R, m) on the grid ``t0 + j·h/substeps``.
    h : float
        Time step of one round.
    rounds : int
        Rounds to integrate (time ``t0 + rounds·h``).
    substeps : int
        Euler steps per round.
    record : sequence of int, optional
        Rounds (0..rounds) to return; default all.

    Returns
    -------
    Tensor, shape (T, R, d)
        The state at the recorded rounds (round 0 is ``y0``).

    Notes
    -----
    With a :class:`GridBrownian`, runs longer than :data:`SEGMENT_STEPS` steps are integrated segment by segment on
    restarted clocks (module docstring), so any number of steps works; other Brownian motions get one torchsde
    call on the accumulated clock.
    """
    keep = record_rounds("record", record, rounds)
    if keep.size == 0:
        raise FedsdeInputError(f"record: rounds must lie in [0, {rounds}] (and at least one)")
    if rounds == 0:
        return y0.unsqueeze(0).expand(keep.size, *y0.shape).clone()
    if not isinstance(bm, GridBrownian):
        return _sdeint_segment(sde, y0, bm, h, rounds, substeps, keep, t0)
    j0 = bm.index(t0)
    seg = max(1, SEGMENT_STEPS // substeps)  # rounds per segment
    out: list[torch.Tensor] = [y0] if keep[0] == 0 else []
    y = y0
    for lo in range(0, rounds, seg):
        hi = min(rounds, lo + seg)
        rec = np.unique(np.concatenate([keep[(keep > lo) & (keep <= hi)] - lo, [hi - lo]]))
        module = sde if lo == 0 and t0 == 0.0 else ShiftedClock(sde, t0 + lo * h)
        ys = _sdeint_segment(module, y, bm.view(j0 + lo * substeps), h, hi - lo, substeps, rec, 0.0)
        out += [ys[i] for i, r in enumerate(rec) if r + lo in keep]
        y = ys[-1]
    return torch.stack(out)


def _sdeint_segment(sde, y0, bm, h, rounds, substeps, keep, t0) -> torch.Tensor:
    """One torchsde call from ``t0`` over ``rounds`` rounds, the state at the rounds ``keep`` (sorted, >= 0)."""
    grid = time_grid(h, rounds, substeps, t0)
    ts_rounds = np.unique(np.concatenate([[0], keep]))
    ts = torch.tensor(grid[ts_rounds * substeps], dtype=torch.float64)
    devices = [y0.device] if y0.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        ys = torchsde.sdeint(sde, y0, ts, bm=bm, method="euler", dt=h / substeps)
    pos = np.searchsorted(ts_rounds, keep)
    return ys[torch.as_tensor(pos, device=ys.device)]


class ShiftedClock(torch.nn.Module):
    """``sde`` seen on a clock that starts at ``offset``: every method gets ``t + offset`` (same torchsde contract)."""

    def __init__(self, sde: torch.nn.Module, offset: float):
        super().__init__()
        self.inner = sde
        self.offset = float(offset)
        self.sde_type, self.noise_type = sde.sde_type, sde.noise_type
        for name in ("f", "g", "g_prod", "f_and_g", "f_and_g_prod"):
            fn = getattr(sde, name, None)
            if fn is not None:
                setattr(self, name, partial(_shifted_call, fn, self.offset))


def _shifted_call(fn, offset, t, *rest):
    return fn(t + offset, *rest)
