"""The values of a run: FedAvg's :class:`Schedule`, the :class:`Replication` of independent runs and the
:class:`Precision` (dtype, device); see :mod:`fedsde.params`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsde import _validate
from fedsde._memory import parse_bytes
from fedsde.errors import FedsdeInputError


def _rate(name: str, value, rounds: int):
    """A positive rate: a number (float), a per-round array (read-only float64, 1-D, finite, > 0; its length is
    checked by the consumer: the simulator wants ``rounds`` values, the SDE at least that many) or a callable of
    ``t`` (the SDE's clock; checked where it is evaluated)."""
    if callable(value):
        return value
    if np.ndim(value) == 0:
        return _validate.positive_float(name, value)
    arr = _validate.schedule(name, value, int(np.size(value)))  # one message for shape and values, as ever
    if arr.size == 0:
        raise FedsdeInputError(f"{name}: empty schedule; give a number or one value per round ({rounds})")
    arr.setflags(write=False)
    return arr


def _steps(value):
    """Local steps: an int ``E``, per-client ints ``τ_k`` (read-only int64, shape checked against ``Q`` by
    :meth:`Schedule.steps_for`), or a step law with ``max_steps()`` (``RandomSteps``, ``EpochSteps``) kept as is."""
    if hasattr(value, "max_steps"):
        return value
    if np.ndim(value) == 0:
        return _validate.positive_int("local_steps", value.item() if hasattr(value, "item") else value)
    arr = _validate.client_steps("local_steps", value, int(np.size(value)))
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class Schedule:
    """FedAvg's schedule: what a round does and how many there are (seed 002, Section 3).

    Parameters
    ----------
    eta : float, array of shape (rounds,), or callable of t
        Client learning rate ``η`` (a callable only for the SDE, :func:`fedsde.sde.simulate_sde`).
    local_steps : int, array of int (Q,), or a step law
        ``E`` for every client, per-client ``τ_k`` (checked against ``Q`` where the problem is known), or a
        ``RandomSteps`` / ``EpochSteps`` law (simulator only).
    rounds : int
        Rounds ``n >= 0`` (a command may ask for more, e.g. ``fedsde validity`` for ``n >= 1``).
    server_lr : float, array of shape (rounds,), or callable of t
        Actual server step ``s`` (``h·η₀`` in seed 002's notation; 1 is plain FedAvg).
    h : float, optional
        SDE time step of one round, ``t = n·h`` (default: a constant ``eta``, seed 002 Section 6).

    Notes
    -----
    Validated once, here: a function handed a :class:`Schedule` does not check its fields again.
    """

    eta: Any
    local_steps: Any
    rounds: int
    server_lr: Any = 1.0
    h: float | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rounds = _validate.positive_int("rounds", self.rounds, minimum=0)
        object.__setattr__(self, "rounds", rounds)
        object.__setattr__(self, "eta", _rate("eta", self.eta, rounds))
        object.__setattr__(self, "local_steps", _steps(self.local_steps))
        object.__setattr__(self, "server_lr", _rate("server_lr", self.server_lr, rounds))
        if self.h is not None:
            object.__setattr__(self, "h", _validate.positive_float("h", self.h))
        object.__setattr__(self, "validated", True)

    def per_round(self, name: str = "eta") -> np.ndarray:
        """The rate ``name`` (``"eta"`` or ``"server_lr"``) with one value per round, shape (rounds,) (the
        simulator's and the SVAG chain's form); an array of another length is refused as
        :func:`fedsde._validate.schedule` refuses it."""
        value = getattr(self, name)
        if callable(value):
            raise FedsdeInputError(f"{name}: a callable of t is for the SDE only; give a number or one value per "
                                   "round")
        if np.ndim(value) == 0:
            return np.full(self.rounds, float(value))
        if value.shape[0] != self.rounds:
            raise FedsdeInputError(
                f"{name}: schedule of shape {value.shape} must be a scalar or have one value per round "
                f"({self.rounds})")
        return np.array(value)

    def steps_for(self, Q: int) -> np.ndarray:
        """Fixed local steps per client, int64 shape (Q,): ``E`` repeated, or ``τ_k`` (its length checked)."""
        value = self.local_steps
        if hasattr(value, "max_steps"):
            raise FedsdeInputError(f"local_steps={value!r}: a step law is for the simulator only; give an int or "
                                   "one int per client")
        if np.ndim(value) == 0:
            return np.full(Q, int(value), np.int64)
        if value.shape != (Q,):
            raise FedsdeInputError(f"local_steps: shape {value.shape} must be a scalar or one value per client ({Q})")
        return np.array(value)

    @property
    def time_step(self) -> float:
        """``h`` if given, else the constant ``eta`` (seed 002, Section 6); a schedule of ``eta`` needs ``h``."""
        if self.h is not None:
            return self.h
        if callable(self.eta) or np.ndim(self.eta) != 0:
            raise FedsdeInputError("h: required when eta is a schedule (h defaults to a constant eta)")
        return float(self.eta)

    def with_server_lr(self, server_lr: float) -> Schedule:
        """The same schedule with another constant server step derived from this one's (e.g. ``s/ℓ`` of an SVAG
        chain), without checking the other fields again."""
        if not (isinstance(server_lr, float | int) and math.isfinite(server_lr) and server_lr > 0):
            raise FedsdeInputError(f"server_lr={server_lr!r}: must be finite and > 0")
        return derive(self, server_lr=float(server_lr))


def derive(value, **changes):
    """A copy of the checked value ``value`` with ``changes``, not checked again: for a layer that narrows a value
    to what the next one reads (``derive(recording, metrics=None)``) or sets a field from checked ones; never for
    a caller's raw input (build the value then)."""
    out = object.__new__(type(value))
    for f in dataclasses.fields(value):
        object.__setattr__(out, f.name, changes.pop(f.name) if f.name in changes else getattr(value, f.name))
    if changes:
        raise TypeError(f"derive: {type(value).__name__} has no field(s) {sorted(changes)}")
    return out


@dataclass(frozen=True)
class Replication:
    """Independent runs and how they are cut; the cutting never changes a result (docs/determinism.md).

    Parameters
    ----------
    replicates : int
        Independent runs (paths, chains) ``R >= 1``.
    seed : int or torch.Generator
        Source of all randomness (never the global RNG); a ``torch.Generator`` is drawn from once, here, so the
        value holds an int.  Required to sample (:meth:`need_seed`); ``None`` only where nothing is sampled.
    chunk_size : int, optional
        Run at most this many replicates at once (rounded up to whole random blocks); default: what memory allows.
    block_size : int, optional
        Replicates per random stream (default ``min(replicates, BLOCK)``, :mod:`fedsde.clients.streams`).
    workers : int, optional
        Threads that run chunks at the same time (default: torch's threads on the CPU, 1 on a GPU).
    memory_limit : int or str, optional
        Bytes the run may plan for (``"2G"``; default: what is free, :func:`fedsde._memory.available_memory`);
        without ``chunk_size`` the replicates are chunked to fit.

    Notes
    -----
    Validated once, here: a function handed a :class:`Replication` does not check its fields again.
    """

    replicates: int
    seed: int | None = None
    chunk_size: int | None = None
    block_size: int | None = None
    workers: int | None = None
    memory_limit: int | str | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicates", _validate.positive_int("replicates", self.replicates))
        if self.seed is not None:
            object.__setattr__(self, "seed", _validate.seed("seed", self.seed))
        for name in ("chunk_size", "block_size", "workers"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _validate.positive_int(name, getattr(self, name)))
        if self.memory_limit is not None:
            object.__setattr__(self, "memory_limit", parse_bytes("memory_limit", self.memory_limit))
        object.__setattr__(self, "validated", True)

    def need_seed(self) -> int:
        """The seed, refused in one line when there is none (fedsde never uses the global RNG)."""
        if self.seed is None:
            raise FedsdeInputError("seed: required (an int or a torch.Generator); fedsde never uses global RNG")
        return self.seed


@dataclass(frozen=True)
class Precision:
    """The precision and place of a run.

    Parameters
    ----------
    dtype : torch.dtype or {"float64", "float32"}, optional
        ``torch.float64`` (default: what theory is compared with) or ``torch.float32``.
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; checked to be usable.

    Notes
    -----
    Validated once, here (:func:`fedsde._validate.device_dtype`); ``device`` then holds a ``torch.device``.
    """

    dtype: Any = None
    device: Any = "cpu"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import torch

        dtype = self.dtype
        if dtype is None:
            dtype = torch.float64
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype.removeprefix("torch."), dtype)
        dev, dt = _validate.device_dtype(self.device, dtype)
        object.__setattr__(self, "device", dev)
        object.__setattr__(self, "dtype", dt)
        object.__setattr__(self, "validated", True)


def _scalar(name: str, value) -> float:
    if callable(value) or np.ndim(value) != 0:
        raise FedsdeInputError(f"{name}: a schedule; this needs one number")
    return float(value)


def _agrees(given, held) -> bool:
    if given is held:
        return True
    if callable(given) or callable(held):
        return False
    try:
        return bool(np.shape(given) == np.shape(held) and np.all(np.asarray(given) == np.asarray(held)))
    except (TypeError, ValueError):
        return False


def _holds_them(schedule: Schedule, local_steps, server_lr) -> None:
    """Refuse ``local_steps`` or a ``server_lr`` (other than the default 1) given next to a :class:`Schedule` that
    holds others: they would be ignored.  Its own fields handed on with it are fine."""
    extra = [] if local_steps is None or _agrees(local_steps, schedule.local_steps) else ["local_steps"]
    if server_lr is not None and not _agrees(server_lr, 1.0) and not _agrees(server_lr, schedule.server_lr):
        extra.append("server_lr")
    if extra:
        raise FedsdeInputError(f"{', '.join(f'{e}=' for e in extra)}: given with a Schedule, which holds its own; "
                               "give the Schedule or the rates, not both")


def fedavg_rates(eta, local_steps, server_lr, Q: int) -> tuple[float, np.ndarray, float]:
    """``(η, τ, s)`` of one FedAvg round on ``Q`` clients, ``τ`` int64 of shape (Q,): from a :class:`Schedule`
    passed as ``eta`` (checked where it was built: only the shape against ``Q`` here), or from raw values, checked
    here (:func:`fedsde._validate.positive_float`, :func:`~fedsde._validate.client_steps`)."""
    if isinstance(eta, Schedule):
        _holds_them(eta, local_steps, server_lr)
        return _scalar("eta", eta.eta), eta.steps_for(Q), _scalar("server_lr", eta.server_lr)
    return (_validate.positive_float("eta", eta), _validate.client_steps("local_steps", local_steps, Q),
            _validate.positive_float("server_lr", server_lr))


def unpack(eta, local_steps=None, server_lr=1.0) -> tuple[Schedule | None, Any, Any, Any]:
    """``(schedule, eta, local_steps, server_lr)``: the fields of a :class:`Schedule` passed as ``eta`` (and the
    schedule, to hand on whole), or ``(None, eta, local_steps, server_lr)`` as given (with a schedule, other
    ``local_steps`` or ``server_lr`` are refused).  For functions that read the rates and pass them on:
    ``f(problem, schedule)`` or ``f(problem, eta, local_steps, server_lr)``."""
    if isinstance(eta, Schedule):
        _holds_them(eta, local_steps, server_lr)
        return eta, eta.eta, eta.local_steps, eta.server_lr
    return None, eta, local_steps, server_lr


def local_steps_of(value, Q: int) -> np.ndarray:
    """Fixed local steps, int64 of shape (Q,): a :class:`Schedule`'s (checked where it was built) or raw ones,
    checked here (:func:`fedsde._validate.client_steps`)."""
    if isinstance(value, Schedule):
        return value.steps_for(Q)
    return _validate.client_steps("local_steps", value, Q)
