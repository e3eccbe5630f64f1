"""How a batch of (weight vector, rows) entries of a user's module is evaluated: ``vmap`` or a loop, and, with
``batching = "auto"``, the choice between them **measured** on the first call of every shape.

Two ways to compute the gradients of ``M`` entries (:class:`~fedsde.problems.module.functional.FunctionalModule`):

* ``vmap`` — one ``torch.func.vmap`` of ``torch.func.grad`` over the entries: every layer becomes one batched
  operation (a convolution with ``M`` weight sets becomes a grouped convolution); what a GPU runs fastest, and on a
  CPU a win for small layers, a loss for some convolutions (measured: 0.3–2.5× the loop on CPUs, by model, dtype
  and CPU);
* ``loop`` — the entries one after the other, each a plain forward and ``torch.autograd.grad`` pass of the module
  with its parameters loaded from the weight vector (what a per-client ``torch.optim.SGD`` loop does, without the
  optimiser).

Both compute the same formulas on the same rows, dropout masks and weights, so they agree to rounding (about
``10⁻¹⁵`` relative in float64, ``10⁻⁷`` in float32 per step), not bit for bit: the batched kernels sum in another
order.  The random streams do not depend on the choice (every draw is made before, outside the call).

``auto`` decides as ``torch.backends.cudnn.benchmark`` does: the first call of a shape (module signature, device,
dtype, purpose, entries, rows per entry) runs ``vmap`` twice on the whole batch (a warm-up, then timed) and the loop
on :data:`LOOP_PROBE` entries (timed after a one-entry warm-up, scaled to ``M``), and keeps the faster for every
later call of that shape in the process (:data:`_CHOICES`).  On a CPU with one torch thread the clock is the
thread's CPU time (other processes on a shared machine do not enter it), else the wall clock (CUDA synchronised).
The call that decides returns the chosen path's numbers, so a run's numbers are those of one path.  A module that
``vmap`` cannot batch goes to the loop at once (one :class:`~fedsde.problems.module.functional.ModuleLoopWarning`).
:func:`report` says what was chosen, with the timings (what ``--json`` prints as ``batching``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

#: entries the loop is timed on (after a one-entry warm-up); its time is scaled to the whole batch
LOOP_PROBE = 4

_LOCK = threading.RLock()
#: (signature, purpose, entries, rows) -> Choice, for the life of the process
_CHOICES: dict[tuple, Choice] = {}


@dataclass(frozen=True)
class Choice:
    """The path a shape runs on and why.

    Attributes
    ----------
    used : {"vmap", "loop"}
    how : str
        ``"timed"`` (``auto``), ``"requested"`` (``batching`` set) or ``"vmap cannot batch the module"``.
    vmap_s, loop_s : float or None
        Seconds of one call of the whole batch by each path (the loop's scaled from its probe); None when not timed.
    entries, rows : int
        Entries of the batch and rows per entry (the shape).
    purpose : str
        ``"train"`` (local steps: train mode, each entry its rows) or ``"eval"`` (metrics: eval mode, rows shared by
        the entries).
    """

    used: str
    how: str
    vmap_s: float | None
    loop_s: float | None
    entries: int
    rows: int
    purpose: str

    def describe(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def lookup(key: tuple) -> Choice | None:
    return _CHOICES.get(key)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(device: torch.device) -> Callable[[], float]:
    """The CPU time of the calling thread when it does all the work (a CPU run with one torch thread: other
    processes on a shared machine do not enter it), else the wall clock."""
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _seconds(fn: Callable, device: torch.device, path: str):
    """``(fn(), seconds)`` on :func:`_clock` (``path``: which path ``fn`` runs, "vmap" or "loop")."""
    clock = _clock(device)
    _sync(device)
    t0 = clock()
    out = fn()
    _sync(device)
    return out, clock() - t0


def decide(key: tuple, *, entries: int, rows: int, purpose: str, device: torch.device,
           run_vmap: Callable[[], torch.Tensor], run_loop: Callable[[int, int], torch.Tensor],
           combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """The result of the first call of shape ``key`` by the faster path, and that path kept for the shape.

    ``run_vmap()`` computes the whole batch batched (it raises where ``vmap`` cannot batch: the caller handles
    that), ``run_loop(a, b)`` entries ``[a, b)`` one by one, ``combine(head, tail)`` joins two parts of the loop's
    result.  Returns ``(result, Choice)``; a choice another thread made meanwhile is returned as ``(None, Choice)``.
    """
    with _LOCK:
        made = _CHOICES.get(key)
        if made is not None:
            return None, made
        run_vmap()  # warm-up (and the caller's proof that vmap can batch the module)
        run_loop(0, 1)  # warm-up
        k = min(entries, LOOP_PROBE)
        head, t_loop = _seconds(lambda: run_loop(0, k), device, "loop")
        t_loop *= entries / k
        batched, t_vmap = _seconds(run_vmap, device, "vmap")
        if t_vmap <= t_loop:
            out, used = batched, "vmap"
        else:
            out = head if k == entries else combine(head, run_loop(k, entries))
            used = "loop"
        choice = Choice(used, "timed", t_vmap, t_loop, int(key[2]), int(rows), purpose)
        _CHOICES[key] = choice
        return out, choice


def remember(key: tuple, choice: Choice) -> Choice:
    """Keep ``choice`` for ``key`` (a requested path, or the loop of a module vmap cannot batch)."""
    with _LOCK:
        return _CHOICES.setdefault(key, choice)


def report(requested: str, made: list[Choice]) -> dict:
    """``{"requested", "used", "timings"}`` for a run's JSON: ``used`` is the path of the local steps (``"train"``
    calls; ``"mixed"`` if their shapes went different ways, None if none ran), ``timings`` every choice made."""
    train = sorted({c.used for c in made if c.purpose == "train"})
    used = train[0] if len(train) == 1 else ("mixed" if train else None)
    return {"requested": requested, "used": used, "timings": [c.describe() for c in made]}
