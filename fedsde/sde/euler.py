"""Euler–Maruyama on the round grid without torchsde's per-step machinery: the same numbers, fewer passes.

:func:`euler_rounds` runs the fixed-step Euler–Maruyama scheme of ``torchsde.sdeint(sde, y0, ts, bm=bm,
method="euler", dt=h/substeps)`` (:func:`fedsde.sde.segments.sdeint_rounds`) as a plain loop, operation for
operation, so that the paths are **bit-identical** to torchsde's (tested on every model, in float64 and float32):

* the solver times are accumulated as torchsde accumulates them (:func:`fedsde.sde.segments.time_grid`:
  ``t ← t + dt`` from the clock's start), the step is ``dt_j = t_{j+1} − t_j`` and the SDE sees ``t_j`` (plus the
  segment's offset, as :class:`~fedsde.sde.segments.ShiftedClock` adds it);
* one step is ``y ← (y + f(t, y)·dt) + g(t, y)·ΔW`` with ``f`` and ``g·ΔW`` from the module's ``f_and_g_prod`` and
  the grid increment ``ΔW`` of :class:`~fedsde.sde.brownian.GridBrownian` (torchsde's ``euler.step``); the sums are
  done in place in ``f``'s fresh tensor (IEEE addition is commutative, so ``f·dt + y`` is ``y + f·dt`` bit for bit);
* a recorded state is torchsde's linear interpolation at a grid time, ``((t₁ − t)/(t₁ − t₀))·y₀ +
  ((t − t₀)/(t₁ − t₀))·y₁`` with ``t = t₁`` (coefficients exactly 0 and 1: ``0·y₀ + y₁``, which differs from
  ``y₁`` only in the sign of an exact zero or a NaN), and a segment continues from its recorded end, as
  :func:`~fedsde.sde.segments.sdeint_rounds` does.

What goes: torchsde's contract check (a draw from the global RNG under ``fork_rng``, a rollout of the general SDE
shared with the first step through its cache), its interpolation of unrecorded times, the stacking of outputs and
three tensor allocations per step.  Nothing in the loop waits for the device: no ``.item()``, no transfer.

CUDA graphs and ``torch.compile`` are not used.  A step is five kernels over the paths (two products, three
in-place sums) and the Brownian increments come a window of :data:`~fedsde.sde.brownian.STEPS_PER_WINDOW` steps at
a time, so at the sizes where a GPU pays (10⁵–10⁶ paths) every kernel moves megabytes and launch overhead is a few
per cent: a captured graph would save little and could not span the window draws (new generators every window).
``torch.compile`` would fuse the three sums into one pass, but with fused multiply-adds: the rounding of every step
changes, so the paths would no longer be torchsde's (nor the CPU's bit-identical ones), for a gain bounded by the
share of those sums: under a tenth of a step on the CPU (profile of the quick SDE figure of
``benchmarks/bench_gpu.py``: the Brownian draws are three quarters of it), and about a third on a GPU by memory
traffic.  Measured on an NVIDIA H100 (10⁶ paths, d = 10, 200 steps, float64, torch 2.11): 0.170 s, 2.09× the fused
loop of ``benchmarks/bench_gpu.py`` (0.082 s), the GPU busy throughout; per step about 0.30 ms in the two products,
0.21 ms in the three sums and 0.29 ms in the window's Brownian passes (uniforms, the exact shift, ``erfinv``, the
scale), against the fused loop's one ``normal_`` and two products.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedsde.sde.brownian import GridBrownian
from fedsde.sde.segments import time_grid


def euler_rounds(sde, y0: torch.Tensor, bm: GridBrownian, *, h: float, rounds: int, substeps: int = 1,
                 record: Sequence[int], offset: float = 0.0) -> list[torch.Tensor]:
    """Euler–Maruyama over ``rounds`` rounds of ``substeps`` steps on one restarted clock.

    Parameters
    ----------
    sde : torch.nn.Module
        A module with ``f_and_g_prod(t, y, dW)`` (:class:`~fedsde.sde.models.QuadraticSDE`,
        :class:`~fedsde.sde.models.FedAvgSDE`).
    y0 : Tensor, shape (R, d)
        State at the clock's start (round 0 of the segment).
    bm : GridBrownian
        Brownian motion whose step ``j`` is the segment's step ``j`` (a :meth:`GridBrownian.view`).
    h : float
        Time step of a round.
    rounds, substeps : int
        Rounds of the segment and Euler steps per round (``rounds >= 1``).
    record : sequence of int
        Rounds ``1..rounds`` (increasing) whose states are returned; the last must be ``rounds``.
    offset : float
        The SDE sees ``t + offset`` (the segment's start on the run's clock).

    Returns
    -------
    list of Tensor, each (R, d)
        The states at the rounds ``record``, as torchsde returns them.
    """
    grid = time_grid(h, rounds, substeps, 0.0)
    times = [float(t) for t in grid]
    at = {int(r) * substeps: i for i, r in enumerate(record)}
    out: list[torch.Tensor | None] = [None] * len(at)
    y = y0
    for j in range(rounds * substeps):
        t0, t1 = times[j], times[j + 1]
        dt = t1 - t0
        f, g = sde.f_and_g_prod(t0 + offset if offset else t0, y, bm.increment(j))
        y_next = f.mul_(dt).add_(y).add_(g)
        i = at.get(j + 1)
        if i is not None:  # torchsde's linear interpolation at t = t1: ((t1 − t)/dt)·y0 + ((t − t0)/dt)·y1
            out[i] = torch.mul(y, (t1 - t1) / dt).add_(torch.mul(y_next, (t1 - t0) / dt))
        y = y_next
    return out


def record_plan(keep: np.ndarray, lo: int, hi: int) -> list[int]:
    """Rounds of the segment ``(lo, hi]`` to record, relative to ``lo``: the kept ones and the segment's end."""
    return sorted({int(k) - lo for k in keep if lo < k <= hi} | {hi - lo})
