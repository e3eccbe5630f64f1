"""A Brownian motion on a fixed time grid, for torchsde's Euler–Maruyama.

:class:`GridBrownian` answers ``W(ta, tb)`` for grid-aligned times ``ta = t0 + i·dt``, ``tb = t0 + j·dt``.  The
increments over the grid steps are drawn in windows of :data:`STEPS_PER_WINDOW` steps; window ``w`` of replicate
block ``b`` (:data:`fedsde.clients.streams.BLOCK` paths) is drawn from its own ``torch.Generator`` seeded from
``(seed, b, w)`` through :class:`fedsde.clients.streams.ReplicateStreams`.  Hence

* the same seed gives the same path, whatever order the increments are asked for in;
* simulating paths ``[0, R)`` in one batch or in chunks that start on block boundaries gives the same
  increments (every block is drawn in full; paths past ``R`` are padding);
* one window of all paths is held in memory at a time;
* a time is mapped to its step by ``round((t − t0)/dt)`` on a clock that never runs long: the integrator
  (:func:`fedsde.sde.segments.sdeint_rounds`) restarts the clock at every segment of at most
  :data:`fedsde.sde.segments.SEGMENT_STEPS` steps and asks :meth:`GridBrownian.view` for the increments from the
  segment's first step on (an integer), so no float time is accumulated over the whole run and any number of steps
  stays on the grid.

The normals come from the inverse CDF of the block's uniforms, ``z = √2 erfinv(v)`` with ``v`` uniform on the
symmetric grid ``{−1 + 2⁻⁵³ + j·2⁻⁵²}`` (53 random bits, tails to ``|z| ≈ 8.3``): one uniform per normal and two
vectorised tensor passes, about twice as fast on CPU as ``Tensor.normal_`` in float64.  With
``float32_draws=True`` the normals are drawn by torch's vectorised float32 generator and promoted to the path
dtype: faster still, at the price of 24-bit uniforms (``|z| <= 5.8``).

The last window of a grid with a known number of ``steps`` draws only the steps the grid has (on the CPU: a block's
uniforms fill its window step by step, so the steps drawn are the first ones of a full window, bit for bit; the
``float32_draws`` generator and other devices always draw whole windows, whose numbers depend on the window's
size).  On a GPU the blocks of a window are drawn :data:`~fedsde.clients.streams.DEVICE_GROUP` at a time
(:class:`~fedsde.clients.streams.ReplicateStreams`).
"""

from __future__ import annotations

import math

import torch
import torchsde

from fedsde._tolerances import GRID_TOL
from fedsde.clients.streams import BLOCK, ReplicateStreams, resolve_seed
from fedsde.errors import FedsdeInputError

#: grid steps drawn together (per block) — part of the definition of the path for a given seed
STEPS_PER_WINDOW = 32

# stream family of the Brownian increments: purpose = _PURPOSE + window (disjoint from the simulator's 0, 1, 2)
_PURPOSE = 1 << 20


class GridBrownian(torchsde.BaseBrownian):
    """Brownian motion of shape ``(paths, channels)`` on the grid ``t0 + j·dt``, ``j = 0, 1, …``.

    Parameters
    ----------
    t0 : float
        Start of the grid (on the clock the SDE uses).
    dt : float
        Grid step; each increment over one step is ``N(0, dt·I)``.
    size : (int, int)
        ``(paths, channels)``: ``paths`` rows (the SDE's batch) and ``channels`` independent components.
    seed : int or torch.Generator
        Source of randomness (a generator is drawn from once to get an integer seed).
    first_block : int
        Index of the first replicate block: path ``i`` of this object is global path ``first_block·BLOCK + i``
        (so chunks of paths reproduce the corresponding rows of one big batch).
    steps : int, optional
        Number of grid steps; later times are rejected.
    first_step : int
        Global step of ``t0``: the increment over local step ``j`` is the global increment ``first_step + j`` (see
        :meth:`view`).
    dtype, device
        Of the increments (the SDE's state dtype and device).
    float32_draws : bool
        Draw float32 normals and promote them (faster on CPU; see the module docstring).

    Notes
    -----
    ``levy_area_approximation`` is ``"none"``: only solvers that need increments alone (Euler–Maruyama) can
    use it.  Times off the grid raise :class:`fedsde.errors.FedsdeInputError`.
    """

    def __init__(
        self,
        t0: float,
        dt: float,
        size: tuple[int, int],
        *,
        seed: int | torch.Generator,
        first_block: int = 0,
        steps: int | None = None,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
        float32_draws: bool = False,
        first_step: int = 0,
    ):
        super().__init__()
        if len(size) != 2 or int(size[0]) < 1 or int(size[1]) < 1:
            raise FedsdeInputError(f"size={tuple(size)!r}: must be (paths, channels) with both >= 1")
        if not (math.isfinite(dt) and dt > 0):
            raise FedsdeInputError(f"dt={dt!r}: must be finite and > 0")
        self._t0 = float(t0)
        self._dt = float(dt)
        self._shape = torch.Size((int(size[0]), int(size[1])))
        self._seed = resolve_seed(seed)
        self._first_block = int(first_block)
        self._steps = None if steps is None else int(steps)
        self._dtype = dtype
        self._device = torch.device(device)
        self._float32_draws = bool(float32_draws)
        self._first_step = int(first_step)
        if self._first_step < 0:
            raise FedsdeInputError(f"first_step={first_step!r}: must be an integer >= 0")
        self._nblocks = -(-self._shape[0] // BLOCK)
        self._contiguous = self._device.type != "cpu"  # draw (blocks, steps, ·) then transpose: see _draw_window
        self._window = -1
        self._buf: torch.Tensor | None = None

    # ------------------------------------------------------------------ torchsde's contract
    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def shape(self) -> torch.Size:
        return self._shape

    @property
    def levy_area_approximation(self) -> str:
        return "none"

    @property
    def dt(self) -> float:
        return self._dt

    @property
    def t0(self) -> float:
        return self._t0

    def __repr__(self) -> str:
        return (f"GridBrownian(t0={self._t0}, dt={self._dt}, size={tuple(self._shape)}, seed={self._seed}, "
                f"first_block={self._first_block}, first_step={self._first_step}, dtype={self._dtype}, "
                f"device={self._device})")

    def __call__(self, ta, tb=None, return_U: bool = False, return_A: bool = False) -> torch.Tensor:
        """``W(tb) − W(ta)`` (or ``W(ta) − W(t0)`` when ``tb`` is None), shape (paths, channels)."""
        if return_U or return_A:
            raise ValueError("GridBrownian has levy_area_approximation='none': no space-time or Lévy area")
        if tb is None:
            ta, tb = self._t0, ta
        i, j = self.index(ta), self.index(tb)
        if j < i:
            raise FedsdeInputError(f"ta={float(ta)!r} > tb={float(tb)!r}: Brownian increments need ta <= tb")
        if j == i + 1:
            return self.increment(i)
        out = torch.zeros(self._shape, dtype=self._dtype, device=self._device)
        for k in range(i, j):
            out += self.increment(k)
        return out

    # ------------------------------------------------------------------ grid access
    def view(self, step: int, t0: float = 0.0) -> GridBrownian:
        """The same Brownian motion from grid step ``step`` on, on a clock restarted at ``t0``.

        ``view(j).increment(i)`` equals ``increment(j + i)`` bit for bit; the view's time ``t0 + i·dt`` is step
        ``j + i`` of this grid.
        """
        step = int(step)
        if step < 0 or (self._steps is not None and step > self._steps):
            raise FedsdeInputError(f"step={step}: must lie in [0, {self._steps}]")
        v = GridBrownian(t0, self._dt, tuple(self._shape), seed=self._seed, first_block=self._first_block,
                         steps=None if self._steps is None else self._steps - step, dtype=self._dtype,
                         device=self._device, float32_draws=self._float32_draws, first_step=self._first_step + step)
        if self._window >= 0:  # share the window already drawn
            v._window, v._buf = self._window, self._buf
        return v

    def index(self, t) -> int:
        """Grid index ``j`` of a time ``t = t0 + j·dt`` (raises if ``t`` is off the grid by more than
        :data:`~fedsde._tolerances.GRID_TOL` steps)."""
        x = (float(t) - self._t0) / self._dt
        j = round(x)
        if abs(x - j) > GRID_TOL or j < 0:
            raise FedsdeInputError(f"t={float(t)!r}: not on the grid t0 + j·dt (t0={self._t0}, dt={self._dt})")
        if self._steps is not None and j > self._steps:
            raise FedsdeInputError(f"t={float(t)!r}: beyond the last grid time (step {self._steps})")
        return int(j)

    def increment(self, j: int) -> torch.Tensor:
        """The increment over grid step ``j`` (from ``t0 + j·dt`` to ``t0 + (j+1)·dt``), shape (paths, channels).

        The tensor is a view of an internal buffer: do not modify it in place.
        """
        w, r = divmod(int(j) + self._first_step, STEPS_PER_WINDOW)
        if w != self._window:
            self._buf = self._draw_window(w)
            self._window = w
        return self._buf[r, : self._shape[0]]

    def _draw_window(self, w: int) -> torch.Tensor:
        nb, m, W = self._nblocks, self._shape[1], STEPS_PER_WINDOW
        streams = ReplicateStreams(self._seed, self._first_block, nb, self._device, _PURPOSE + w)
        K = BLOCK * m
        left = None if self._steps is None else self._first_step + self._steps - w * STEPS_PER_WINDOW
        if left is not None and left > 0 and not self._float32_draws and self._device.type == "cpu":
            W = min(W, left)  # the grid's steps in this window
        if self._float32_draws:
            z32 = torch.empty((nb, W, K), dtype=torch.float32, device=self._device)
            streams.normal_(z32)
            out = torch.empty((W, nb, K), dtype=self._dtype, device=self._device)
            out.copy_(z32.transpose(0, 1)).mul_(math.sqrt(self._dt))
        elif not self._contiguous:
            out = torch.empty((W, nb, K), dtype=self._dtype, device=self._device)
            streams.uniform_(out.transpose(0, 1))  # block b fills out[:, b] with U ∈ [0, 1), 53-bit grid
            self._symmetric(out).erfinv_().mul_(math.sqrt(2.0 * self._dt))
        else:  # groups of blocks drawn contiguous (no staging copy), transposed by the erfinv pass itself
            u = streams.uniform_(torch.empty((nb, W, K), dtype=self._dtype, device=self._device))
            out = torch.empty((W, nb, K), dtype=self._dtype, device=self._device)
            torch.erfinv(self._symmetric(u).transpose(0, 1), out=out).mul_(math.sqrt(2.0 * self._dt))
        return out.view(W, nb * BLOCK, m)

    def _symmetric(self, u: torch.Tensor) -> torch.Tensor:
        """``v = 2U − (1 − 2⁻⁵³)`` in place, one pass (float64; ``2⁻²⁴`` in float32): symmetric, never ±1.

        Exact, so one fused pass gives the numbers of ``u.mul_(2).sub_(1 − 2⁻⁵³)``: for ``U = j·2⁻⁵³`` the result is
        ``(2j + 1 − 2⁵³)·2⁻⁵³``, an odd integer below ``2⁵³`` in magnitude times a power of two, which a double holds
        (with or without a fused multiply-add)."""
        shift = torch.tensor(-(1.0 - torch.finfo(self._dtype).eps / 2), dtype=self._dtype, device=self._device)
        return torch.add(shift, u, alpha=2.0, out=u)
