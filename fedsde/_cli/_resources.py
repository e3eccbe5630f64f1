"""What a command ran with, as every command reports it: its memory budget and threads (the JSON ``resources``
and the last line of the text output), and the warning when worker processes outnumber the threads."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import numpy as np


def note_json(result: dict) -> None:
    """Count the JSON about to be printed in the command's planned peak (:meth:`fedsde._memory.MemoryBudget.note`)."""
    from fedsde._memory import current_budget, json_bytes

    if current_budget() is not None:
        current_budget().note(json_bytes(count_numbers(result)))


def check_workers(args: argparse.Namespace) -> None:
    """Warn (a command's warning: stderr and JSON ``warnings``) when ``--workers N`` local single-threaded worker
    processes exceed the command's threads (``--threads``): more workers than threads oversubscribe the cores."""
    from fedsde._threads import applied_threads

    workers, threads = getattr(args, "workers", 1) or 1, applied_threads()
    if getattr(args, "scheduler", None) is None and workers > threads:
        warnings.warn(f"--workers={workers}: {workers} single-threaded worker processes on {threads} thread(s) "
                      f"(--threads) oversubscribe the cores; use --workers {threads} or raise --threads", UserWarning,
                      stacklevel=2)


def count_numbers(obj: Any) -> int:
    """Numbers (and other leaves) a JSON-able result holds: array sizes, list lengths, one per scalar."""
    if isinstance(obj, dict):
        return sum(count_numbers(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(count_numbers(v) for v in obj)
    size = getattr(obj, "size", None)
    return int(size) if isinstance(size, int | np.integer) and not isinstance(obj, np.generic) else 1


def resources() -> dict:
    """The ``resources`` of every command's JSON: ``memory_budget_bytes`` (what the command may plan for: what was
    free when it started, or ``FEDSDE_MEMORY_LIMIT``), ``memory_planned_bytes`` (its estimated peak: what it keeps
    plus its largest working set, each charged up front) and ``threads`` (what it computes on, ``--threads``)."""
    from fedsde._memory import current_budget
    from fedsde._threads import applied_threads

    budget = current_budget()
    memory = budget.to_dict() if budget is not None else {"memory_budget_bytes": None, "memory_planned_bytes": None}
    return {**memory, "threads": applied_threads()}


def resources_line(res: dict) -> str:
    """The one short line the text output ends with: threads and planned memory of the budget."""
    def size(n):
        return "?" if n is None else (f"{n / 2**30:.3g} GiB" if n >= 2**27 else f"{n / 2**20:.3g} MiB")

    return (f"resources: {res['threads']} thread(s), memory planned {size(res['memory_planned_bytes'])} of a "
            f"{size(res['memory_budget_bytes'])} budget")
