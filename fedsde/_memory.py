"""Memory a run may plan for (internal): free memory on a device, a user's cap (``FEDSDE_MEMORY_LIMIT``), and the
one-line refusal when an estimate does not fit."""

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
    device memory), capped by ``limit`` or the environment variable ``FEDSDE_MEMORY_LIMIT``."""
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


def memory_fits(what: str, need: int, available: int, hint: str) -> None:
    """Raise a one-line error when ``need`` bytes exceed ``available`` (the message gives the estimate)."""
    if need > available:
        raise FedsdeInputError(
            f"{what}: needs about {_gib(need)} of memory but about {_gib(available)} is available; {hint}"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**27 else f"{n / 2**20:.3g} MiB"
