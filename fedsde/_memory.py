"""Memory a run may plan for (internal): free memory on a device, a user's cap (``FEDSDE_MEMORY_LIMIT``), the
one-line refusal when an estimate does not fit, and one budget per command (:class:`MemoryBudget`) that every part
of the command charges, so that parts which each fit cannot together take more than the machine has."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fedsde.errors import FedsdeInputError

if TYPE_CHECKING:
    import torch

#: environment variable that caps the memory a run may plan for (bytes, or with a K/M/G/T suffix, e.g. "6G")
MEMORY_LIMIT_ENV = "FEDSDE_MEMORY_LIMIT"


def parse_bytes(name: str, text) -> int:
    """``"6G"``, ``"512M"``, ``"1.5e9"`` or a number of bytes as an int (> 0)."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if s and s[-1] in "KMGT":
        mult, s = 1024 ** ("KMGT".index(s[-1]) + 1), s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise FedsdeInputError(f"{name}={text!r}: must be a number of bytes (e.g. 6G, 512M)") from None
    if not math.isfinite(v) or v <= 0:
        raise FedsdeInputError(f"{name}={text!r}: must be a number of bytes > 0")
    return int(v)


def available_memory(device: torch.device | str = "cpu", limit: int | str | None = None) -> int:
    """Bytes a run may still allocate on ``device``: free memory (CPU: ``MemAvailable``, the cgroup's remaining
    ``memory.max`` and the address-space limit ``RLIMIT_AS`` left to this process, whichever is least; CUDA: free
    device memory), capped by ``limit`` or the environment variable ``FEDSDE_MEMORY_LIMIT``; inside a command, on the
    CPU, also by what its :class:`MemoryBudget` leaves after the memory it keeps."""
    import os

    caps = []
    if limit is None and os.environ.get(MEMORY_LIMIT_ENV):
        limit = os.environ[MEMORY_LIMIT_ENV]
    if limit is not None:
        caps.append(parse_bytes("memory_limit" if not isinstance(limit, str) else MEMORY_LIMIT_ENV, limit))
    kind = str(device)
    if kind.startswith("cuda"):  # torch only where a device asks for it: building a problem stays light
        import torch

        dev = torch.device(device)
        caps.append(int(torch.cuda.mem_get_info(dev)[0]))
        return min(caps)
    caps += _cpu_memory_caps()
    if _CURRENT is not None:  # inside a command: what its budget leaves after the memory it keeps
        caps.append(_CURRENT.left())
    return min(caps) if caps else 1 << 62


def _cpu_memory_caps() -> list[int]:
    caps: list[int] = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    caps.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            mx = fh.read().strip()
        if mx != "max":
            with open("/sys/fs/cgroup/memory.current") as fh:
                caps.append(max(0, int(mx) - int(fh.read().strip())))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            used = 0
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmSize:"):
                        used = int(line.split()[1]) * 1024
            caps.append(max(0, soft - used))
    except (OSError, ValueError, ImportError):
        pass
    return caps


def memory_fits(what: str, need: int, available: int, hint: str, *, device=None) -> None:
    """Raise a one-line error when ``need`` bytes exceed ``available`` (the message gives the estimate).

    Inside a command (:func:`current_budget`), ``need`` on the CPU (``device`` None or a CPU) is also charged to its
    budget as a working set (:meth:`MemoryBudget.peak`), and refused there with what the command keeps beside it."""
    if _CURRENT is not None and (device is None or str(device).startswith("cpu")):
        _CURRENT.peak(what, need, hint)
    if need > available:
        raise FedsdeInputError(
            f"{what}: needs about {_gib(need)} of memory but about {_gib(available)} is available; {hint}"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**27 else f"{n / 2**20:.3g} MiB"


# ---------------------------------------------------------------------------------------------- one budget per command
#: bytes of one number in a printed JSON object at its peak: the Python float (24) and the list slots (8 each) that
#: ``to_jsonable`` builds, and its ~20 characters of text several times over (``json.dumps``' pieces, the joined
#: string, the line written); ``tests/test_memory_budget.py`` measures about 95 on a (100, 1000) array
JSON_BYTES_PER_NUMBER = 128
#: the budget of the command running in this process (internal: a process runs one command at a time; sweep cells
#: run in-process one after the other under their lock, each with a budget of its own inside the sweep's)
_CURRENT = None


class MemoryBudget:
    """The memory one command may plan for, and what its parts have planned so far (CPU memory, bytes).

    A command creates one when it starts (:func:`command_budget`: what is free, or ``FEDSDE_MEMORY_LIMIT``); every
    part that allocates charges its estimate to it before it allocates, so the parts of one command are checked
    together rather than each against the whole machine:

    * :meth:`keep` — memory held until the command ends (the problem's arrays, results, the printed JSON);
    * :meth:`peak` — a working set held while one part runs (a chain's replicates, a solver's matrices), checked
      against what the kept parts leave (:func:`memory_fits` charges its ``need`` here while a budget is active).

    ``planned`` is the largest sum of the kept memory and one part's working set seen so far: the command's
    estimated peak.  A charge that does not fit raises a one-line :class:`~fedsde.errors.FedsdeInputError` with the
    total, the largest kept parts and the hint (the option that helps) of the part refused and of the largest kept
    part.
    """

    def __init__(self, total: int):
        self.total = int(total)
        self.kept: list[tuple[str, int, str]] = []  # (what, bytes, hint)
        self.planned = 0
        self._kept_bytes = 0

    def left(self) -> int:
        """Bytes the kept parts leave for a working set."""
        return max(0, self.total - self._kept_bytes)

    def keep(self, what: str, need: int, hint: str = "") -> int:
        """Charge ``need`` bytes held until the command ends (refused when they do not fit); returns ``need``."""
        need = max(0, int(need))
        self._refuse(what, need, hint)
        self.kept.append((what, need, hint))
        self._kept_bytes += need
        self.planned = max(self.planned, self._kept_bytes)
        return need

    def peak(self, what: str, need: int, hint: str = "") -> int:
        """Check a working set of ``need`` bytes held while one part runs; returns ``need``."""
        need = max(0, int(need))
        self._refuse(what, need, hint)
        self.planned = max(self.planned, self._kept_bytes + need)
        return need

    def note(self, need: int) -> None:
        """Count ``need`` bytes held beside the kept memory in ``planned`` without refusing (what a command finds
        it holds only at its end, such as the JSON of results it could not size up front)."""
        self.planned = max(self.planned, self._kept_bytes + max(0, int(need)))

    def _refuse(self, what: str, need: int, hint: str) -> None:
        if self._kept_bytes + need <= self.total:
            return
        parts = sorted(self.kept, key=lambda k: -k[1])
        held = "; ".join(f"{w}: {_gib(b)}" for w, b, _ in parts[:3] if b > 0)
        other = next((h for _, b, h in parts if h and b > 0), "")
        helps = hint + (f"; or for {parts[0][0]}: {other}" if other and other != hint and
                        self._kept_bytes >= need / 4 else "")
        raise FedsdeInputError(
            f"{what}: needs about {_gib(need)} of memory but about {_gib(self.total)} is available to the command (its "
            "memory budget: what was free when it started, or FEDSDE_MEMORY_LIMIT)"
            + (f", which keeps {_gib(self._kept_bytes)} beside it ({held})" if held else "")
            + f"; {helps}".rstrip("; "))

    def to_dict(self) -> dict:
        """``{"memory_budget_bytes", "memory_planned_bytes"}``: the JSON ``resources`` of a command."""
        return {"memory_budget_bytes": self.total, "memory_planned_bytes": int(self.planned)}


def current_budget() -> MemoryBudget | None:
    """The budget of the command running in this process, or ``None`` (a Python call outside any command)."""
    return _CURRENT


class command_budget:
    """``with command_budget() as budget:`` — make a :class:`MemoryBudget` the current one for a command's run
    (``total`` default: :func:`available_memory` on the CPU, which honours ``FEDSDE_MEMORY_LIMIT``; inside another
    command's budget — a sweep cell run in-process — at most what that one leaves).  The previous budget is restored
    on exit."""

    def __init__(self, total: int | None = None):
        self.total = total

    def __enter__(self) -> MemoryBudget:
        global _CURRENT
        self.previous = _CURRENT
        if self.total is None:
            free = available_memory("cpu")  # with a budget active: what it leaves (a cell inside a sweep)
        else:
            free = int(self.total)
        _CURRENT = MemoryBudget(free)
        return _CURRENT

    def __exit__(self, *exc) -> None:
        global _CURRENT
        _CURRENT = self.previous


def json_bytes(numbers: int) -> int:
    """Memory of printing ``numbers`` numbers as one JSON object (:data:`JSON_BYTES_PER_NUMBER` each)."""
    return int(JSON_BYTES_PER_NUMBER * max(0, int(numbers)))


def keep_memory(what: str, need: int, hint: str) -> int:
    """Memory held until the end of a command (results, their JSON): charged to the command's budget
    (:meth:`MemoryBudget.keep`), or outside any command checked against what is free (:func:`memory_fits`)."""
    if _CURRENT is not None:
        return _CURRENT.keep(what, need, hint)
    memory_fits(what, need, available_memory("cpu"), hint)
    return int(need)
