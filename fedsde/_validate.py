"""Small validators shared by public entry points (internal): numbers, schedules, client steps, devices, start
points and distributions.  Memory estimates live in :mod:`fedsde._memory`; settings known to diverge in
:mod:`fedsde.exact.stability`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedsde.errors import FedsdeInputError

if TYPE_CHECKING:
    import torch


def positive_float(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, raising if it is not finite and positive (or >= 0)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}={value!r}: must be a number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise FedsdeInputError(f"{name}={value!r}: must be finite and {bound}")
    return v


def positive_int(name: str, value: int, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, raising if it is not an integer >= ``minimum``."""
    return _integer(name, value, minimum)


def distinct_ints(name: str, values: Sequence[int], *, minimum: int = 1) -> tuple[int, ...]:
    """Distinct integers >= ``minimum`` in increasing order from a sequence of at least one (e.g. the SVAG
    parameters ``ells``); an entry is refused as :func:`positive_int` refuses it, named ``name``."""
    try:
        items = [] if isinstance(values, str | bytes) else list(values)
    except TypeError:
        items = []
    if not items and (isinstance(values, str | bytes) or np.ndim(values) == 0):
        raise FedsdeInputError(f"{name}={values!r}: must be a sequence of integers >= {minimum}")
    out = tuple(sorted({_integer(name, v, minimum) for v in items}))
    if not out:
        raise FedsdeInputError(f"{name}={values!r}: must hold at least one integer >= {minimum}")
    return out


def _integer(name: str, value, minimum: int) -> int:
    if isinstance(value, bool):
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}")
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}") from None
    if v != value or v < minimum:
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}")
    return v


def schedule(name: str, value: float | Sequence[float] | np.ndarray, rounds: int) -> np.ndarray:
    """A per-round schedule of length ``rounds`` from a constant or a sequence (values > 0).

    Returns
    -------
    ndarray, shape (rounds,)
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        positive_float(name, float(arr))
        return np.full(rounds, float(arr))
    if arr.ndim != 1 or arr.shape[0] != rounds:
        raise FedsdeInputError(
            f"{name}: schedule of shape {arr.shape} must be a scalar or have one value per round ({rounds})"
        )
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise FedsdeInputError(f"{name}[{i}]={float(arr[i])!r}: learning rates must be finite and > 0")
    return arr


def constant_or_schedule(name: str, value, rounds: int) -> np.ndarray:
    """:func:`schedule`, but a constant becomes a read-only broadcast view (no memory per round, so an exact
    recursion asked for ``rounds = 10⁸`` does not allocate ``10⁸`` numbers); for read-only use."""
    if np.ndim(value) == 0:
        return np.broadcast_to(positive_float(name, float(value)), (rounds,))
    return schedule(name, value, rounds)


def client_steps(name: str, value: int | Sequence[int] | np.ndarray, Q: int) -> np.ndarray:
    """Per-client local step counts (ints >= 1) from an int or a length-Q sequence.

    Returns
    -------
    ndarray of int64, shape (Q,)
    """
    arr = np.asarray(value)
    if arr.ndim == 0:
        return np.full(Q, positive_int(name, value.item() if hasattr(value, "item") else value), np.int64)
    if arr.ndim != 1 or arr.shape[0] != Q:
        raise FedsdeInputError(f"{name}: shape {arr.shape} must be a scalar or one value per client ({Q})")
    out = np.empty(Q, np.int64)
    for k, v in enumerate(arr.tolist()):
        out[k] = positive_int(f"{name}[{k}]", v)
    return out


def seed(name: str, value) -> int:
    """A non-negative integer seed from an int or a ``torch.Generator`` (one draw from it); ``None`` is refused
    (fedsde never uses the global RNG)."""
    if type(value).__name__ == "Generator" and type(value).__module__.startswith("torch"):
        import torch  # only for a Generator: an int seed does not load torch

        return int(torch.randint(0, 2**62, (1,), generator=value).item())
    if value is None:
        raise FedsdeInputError(f"{name}: required (an int or a torch.Generator); fedsde never uses global RNG")
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise FedsdeInputError(f"{name}={value!r}: must be a non-negative integer or a torch.Generator")
    return int(value)


def device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """A usable torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, …) and a float dtype (float64 or float32)."""
    import torch  # here, so that the validators of light modules (symbolic, report, CLI flags) do not load torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise FedsdeInputError(f"device={device!r}: not a torch device ({_first_line(exc)})") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise FedsdeInputError(f"device={device!r}: must be a cpu, cuda or mps device")
    try:
        torch.empty(0, device=dev)
        torch.Generator(device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise FedsdeInputError(f"device={device!r}: not available ({_first_line(exc)})") from None
    if dtype not in (torch.float64, torch.float32):
        raise FedsdeInputError(f"dtype={dtype}: must be torch.float64 or torch.float32")
    return dev, dtype


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's text (torch's backend errors run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def start_point(w0, d: int) -> np.ndarray:
    """Starting weights of shape (d,) from ``None`` (zero), a scalar (broadcast) or a length-d vector."""
    if w0 is None:
        return np.zeros(d)
    arr = np.asarray(w0, dtype=np.float64).reshape(-1)
    if arr.shape == (1,) and d > 1:
        arr = np.full(d, arr[0])
    if arr.shape != (d,) or not np.all(np.isfinite(arr)):
        raise FedsdeInputError(f"w0: shape {np.shape(w0)} must be ({d},) with finite entries")
    return arr


def distributions(name: str, value, Q: int | None = None) -> np.ndarray:
    """Rows normalised to sum to one; every entry finite and >= 0, every row sum > 0 (named by row)."""
    try:
        D = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}: could not be read as an array of numbers") from None
    if D.ndim != 2 or D.shape[1] < 1 or (Q is not None and D.shape[0] != Q):
        raise FedsdeInputError(f"{name}: shape {D.shape} must be (Q, C)" + (f" with Q={Q}" if Q else ""))
    bad = ~np.isfinite(D) | (D < 0)
    if bad.any():
        k, c = (int(i) for i in np.argwhere(bad)[0])
        raise FedsdeInputError(f"{name}[{k}][{c}]={float(D[k, c])!r}: must be finite and >= 0")
    empty = np.flatnonzero(D.sum(1) <= 0)
    if empty.size:
        raise FedsdeInputError(f"{name}[{int(empty[0])}]: sums to 0; every row (client) needs a sum > 0")
    return D / D.sum(1, keepdims=True)


def client_weights(name: str, value, Q: int | None = None, *, normalise: bool = True, noun: str = "weights",
                   detail: bool = False) -> np.ndarray:
    """Client weights as a float vector, shape (Q,): readable as numbers, one per client when ``Q`` is given,
    every entry finite and >= 0 (the first bad entry named), not all zero; divided by their sum when
    ``normalise``.

    ``noun`` names the values in the messages (``p[1]=-1.0: weights must be finite and >= 0``, ``p: all weights
    are zero``), ``""`` leaves it out (``weights[1]=-1.0: must be finite and >= 0``, ``weights: all zero``);
    ``detail`` says which of the two conditions the entry fails (``sizes[1]=nan: must be finite``).
    """
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}: could not be read as an array of numbers") from None
    if Q is not None and arr.shape != (Q,):
        raise FedsdeInputError(f"{name}: shape {np.shape(value)} must be ({Q},), one per client")
    subject = f"{noun} " if noun else ""
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        k = int(np.argmax(bad))
        v = float(arr[k])
        why = ("must be >= 0" if math.isfinite(v) else "must be finite") if detail else "must be finite and >= 0"
        raise FedsdeInputError(f"{name}[{k}]={v!r}: {subject}{why}")
    total = float(arr.sum())
    if arr.size == 0 or total <= 0:
        what = f"all {noun} are zero" if noun else "all zero"
        raise FedsdeInputError(f"{name}: {what} (or none given); at least one must be > 0")
    return arr / total if normalise else arr


def record_rounds(name: str, value, rounds: int, *, default_all: bool = True, first: int = 0) -> np.ndarray:
    """Sorted unique round indices in ``[first, rounds]`` (int64): ``None``/``True`` → every round (``first`` to
    ``rounds`` when ``default_all``, else none), ``False`` → none, or a sequence of integers."""
    if value is None or value is True:
        return np.arange(first, rounds + 1, dtype=np.int64) if default_all else np.zeros(0, np.int64)
    if value is False:
        return np.zeros(0, np.int64)
    try:
        raw = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}: must be a sequence of round indices") from None
    if raw.size and (not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw))):
        raise FedsdeInputError(f"{name}: round indices must be integers")
    arr = np.unique(raw.astype(np.int64))
    if arr.size and (arr.min() < first or arr.max() > rounds):
        raise FedsdeInputError(f"{name}: rounds must lie in [{first}, {rounds}]")
    return arr


def unit_interval(name: str, value: float, *, closed_right: bool = False, open_left: bool = False) -> float:
    """``value`` as a float in ``[0, 1)`` (``[0, 1]`` with ``closed_right``; ``(0, …`` with ``open_left``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}={value!r}: must be a number") from None
    lo_ok = v > 0 if open_left else v >= 0
    hi_ok = v <= 1 if closed_right else v < 1
    if not (math.isfinite(v) and lo_ok and hi_ok):
        interval = ("(0" if open_left else "[0") + (", 1]" if closed_right else ", 1)")
        raise FedsdeInputError(f"{name}={value!r}: must lie in {interval}")
    return v


def choice(name: str, value, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed`` (a variant, a method, a scheme), else a one-line error listing them."""
    if not isinstance(value, str) or value not in allowed:
        raise FedsdeInputError(f"{name}={value!r}: must be one of {', '.join(map(str, allowed))}")
    return value
