"""The validity test's metrics on its time grid: :class:`MetricGrid` evaluates them as the chains pass the grid's
rounds, on the chains' device (no paths kept), the start once for every chain."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedsde._memory import available_memory
from fedsde.problems.metrics import evaluate_metrics_torch

#: work space of one metric pass of a module problem over the data (its ``METRIC_BYTES``)
METRIC_WORK = 1 << 27


def evaluate_metrics(problem, w: torch.Tensor, w0, names: Sequence[str]):
    """Metrics of weights ``w`` (…, d) on their device and in their dtype, name → Tensor (…): the one place the
    validity test evaluates them (:func:`fedsde.problems.metrics.evaluate_metrics_torch`)."""
    return evaluate_metrics_torch(problem, w, w0, names=names)


class MetricGrid:
    """Metrics of ``R`` replicates at the grid times ``grid`` (base rounds), on ``device`` in ``dtype``.

    Called as ``on_grid(n, start, w)`` by :func:`fedsde.sde.svag.svag_chain` (rows ``start … start + len(w) − 1``,
    any thread), it evaluates :func:`evaluate_metrics` at the grid's rounds into one
    tensor (M, T, R) on the device; :meth:`host` moves it once: name → ndarray (T, R), float64.

    Round 0 is the same start for every replicate and every chain: its metrics are evaluated once, for one weight
    vector, kept in ``start`` (a dict shared by the chains of one test) and copied to every replicate.
    """

    def __init__(self, problem, names: Sequence[str], grid: np.ndarray, R: int, w0: np.ndarray, device, dtype,
                 start: dict | None = None):
        self.problem, self.names, self.w0 = problem, list(names), w0
        self.start = {} if start is None else start
        self.gidx = {int(n): i for i, n in enumerate(grid)}
        self.values = torch.empty((len(self.names), len(grid), R), dtype=dtype, device=device)
        if torch.device(device).type == "cpu":  # one pass at a time: its rows' work space and the gradients
            from fedsde._memory import memory_fits

            item = torch.finfo(dtype).bits // 8
            rows = len(getattr(problem, "X", ()))  # a data problem's pass: about 16 numbers per row and weight
            work = METRIC_WORK if hasattr(problem, "functional") else 16 * item * R * rows
            memory_fits(f"the metrics of {R} replicates (d={problem.d})", work + 4 * R * problem.d * item,
                        available_memory("cpu"), "use fewer replicates or fewer metrics (metrics=…)")

    def __call__(self, n: int, start: int, w: torch.Tensor) -> None:
        t = self.gidx.get(int(n))
        if t is not None and int(n) == 0:  # every row is the start (svag_chain's emit(0))
            if not self.start:
                self.start |= evaluate_metrics(self.problem, w[:1], self.w0, self.names)
            for i, m in enumerate(self.names):
                self.values[i, t, start:start + w.shape[0]] = self.start[m][0]
        elif t is not None:
            got = evaluate_metrics(self.problem, w, self.w0, self.names)
            for i, m in enumerate(self.names):
                self.values[i, t, start:start + w.shape[0]] = got[m]

    def host(self) -> dict[str, np.ndarray]:
        vals = self.values.to(torch.float64).cpu().numpy()
        return {m: vals[i] for i, m in enumerate(self.names)}
