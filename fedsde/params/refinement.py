"""The refinements of a weak-error study at a fixed end time ``t`` (clock ``t = n·h``): the time step ``h`` shrinks
(:class:`StepRefinement`) or the client step ``η`` does (:class:`EtaRefinement`); see :mod:`fedsde.params`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsde import _validate
from fedsde.errors import FedsdeInputError
from fedsde.params.run import Schedule, _steps

#: the approximation orders of the SDEs an order refinement compares (1: seed 002's SDE, 2: :mod:`fedsde.sde.order2`)
ORDERS = (1, 2)


def step_sizes(time_steps: Sequence[float]) -> np.ndarray:
    """The refinement's time steps as float64, in the order given: each finite and > 0, at least two, no two equal
    (one-line :class:`~fedsde.errors.FedsdeInputError` naming the entry otherwise)."""
    items = np.asarray(time_steps, dtype=object).reshape(-1)
    hs = np.asarray([_validate.positive_float(f"time_steps[{j}]", h) for j, h in enumerate(items)], dtype=np.float64)
    if hs.size < 2:
        raise FedsdeInputError(f"time_steps: need at least two step sizes, got {hs.size}")
    for j in range(1, hs.size):
        i = np.flatnonzero(hs[:j] == hs[j])
        if i.size:
            raise FedsdeInputError(
                f"time_steps[{j}]={float(hs[j])!r}: repeats time_steps[{i[0]}]; the step sizes must be distinct"
            )
    return hs


def rounds_for(t_end: float, h: float) -> int:
    """Rounds ``n = t_end/h`` of step ``h`` to the end time, refused unless a whole number ``>= 1``."""
    n = t_end / h
    k = round(n)
    if k < 1 or abs(n - k) > 1e-9 * max(1.0, n):
        raise FedsdeInputError(f"time_steps: t_end={t_end} is not a whole number of steps h={h} (t_end/h={n:.12g})")
    return k


def _checked(cls, **fields):
    """A value of ``cls`` from fields already checked (as :func:`fedsde.params.derive`, for a value built here)."""
    out = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(out, f.name, fields[f.name] if f.name in fields else f.default)
    object.__setattr__(out, "validated", True)
    return out


@dataclass(frozen=True)
class StepRefinement:
    """The weak error's refinement in the time step at a fixed end time (seed 002, Section 3: ``t = n·h``,
    ``s = h·η₀``): the client step ``η``, the local steps ``E``, the server rate ``η₀`` and the end time ``t`` are
    fixed, and the step ``h`` runs over ``time_steps``, so that step ``h_j`` is ``n_j = t/h_j`` rounds of FedAvg
    with server step ``s_j = h_j·η₀`` (:meth:`schedule`).

    Parameters
    ----------
    eta : float
        Client learning rate ``η`` (one number: fixed as ``h`` shrinks).
    local_steps : int or array of int, shape (Q,)
        ``E``, or per-client ``τ_k`` (checked against ``Q`` where the problem is known).
    t_end : float
        End time ``t``; every ``t/h_j`` must be a whole number of rounds.
    time_steps : sequence of float, shape (J,)
        The steps ``h_j``: at least two, each finite and > 0, no two equal.
    server_rate : float
        ``η₀``, the server step per unit time (fixed): not the server step of :class:`Schedule`
        (``server_lr = s``), which changes with ``h`` here (``s_j = h_j·η₀``); 1 is plain FedAvg at ``s = h``.

    Notes
    -----
    Validated once, here (``rounds``, the ``n_j`` of shape (J,), is computed here too); a function handed a
    :class:`StepRefinement` does not check its fields again.
    """

    eta: float
    local_steps: Any
    t_end: float
    time_steps: Sequence[float]
    server_rate: float = 1.0
    rounds: np.ndarray = field(default=None, init=False, repr=False, compare=False)
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", _validate.positive_float("eta", self.eta))
        object.__setattr__(self, "local_steps", _steps(self.local_steps))
        t_end = _validate.positive_float("t_end", self.t_end)
        object.__setattr__(self, "t_end", t_end)
        object.__setattr__(self, "server_rate", _validate.positive_float("server_rate", self.server_rate))
        hs = step_sizes(self.time_steps)
        rounds = np.array([rounds_for(t_end, float(h)) for h in hs], dtype=np.int64)
        for arr in (hs, rounds):
            arr.setflags(write=False)
        object.__setattr__(self, "time_steps", hs)
        object.__setattr__(self, "rounds", rounds)
        object.__setattr__(self, "validated", True)

    def schedule(self, j: int, *, with_h: bool = True) -> Schedule:
        """FedAvg's :class:`Schedule` at step ``h_j``: ``η``, ``E``, ``n_j`` rounds, server step ``h_j·η₀`` and
        (``with_h``) the SDE's time step ``h_j``; built from the checked fields, not checked again."""
        h = float(self.time_steps[j])
        return _checked(Schedule, eta=self.eta, local_steps=self.local_steps, rounds=int(self.rounds[j]),
                        server_lr=h * self.server_rate, h=h if with_h else None)


def client_step_grid(etas: Sequence[float]) -> np.ndarray:
    """The client steps of an order refinement, largest first: at least three, distinct, each finite and > 0, each
    an integer fraction ``η_max/k`` (so that the horizon is a whole number of rounds of every ``η``)."""
    vals = np.sort(np.asarray([_validate.positive_float(f"etas[{j}]", e) for j, e in enumerate(etas)],
                              dtype=np.float64))[::-1]
    if vals.size < 3 or np.unique(vals).size != vals.size:
        raise FedsdeInputError(f"etas={list(etas)}: need at least three distinct client steps for a slope with an "
                               "interval")
    ratio = vals[0] / vals
    if np.any(np.abs(ratio - np.round(ratio)) > 1e-9 * ratio):
        raise FedsdeInputError(f"etas={list(etas)}: each must be η_max/k for an integer k (η_max = {vals[0]:g}), so "
                               "that the horizon t = rounds·η_max is a whole number of rounds of every η")
    return vals


@dataclass(frozen=True)
class EtaRefinement:
    """The refinement of an approximation order (Li, Tai & E 2019, Thm 3): the client step ``η`` shrinks with
    ``h/η``, the server step and the local steps fixed, at a fixed horizon ``t``; the weak errors of the
    order-``order`` SDE against FedAvg at each ``η`` (:func:`fedsde.compare.order2.order_refinement`).

    Parameters
    ----------
    order : {1, 2}
        The SDE compared: seed 002's first-order SDE (``corrected``) or the order-2 SDE (:mod:`fedsde.sde.order2`).
    etas : sequence of float, optional
        The client steps (:func:`client_step_grid`: at least three, distinct, each ``η_max/k``); held largest first,
        shape (J,).  Default: ``η, η/2, …, η/32`` from the run's ``η``.

    Notes
    -----
    Validated once, here; a function handed an :class:`EtaRefinement` does not check its fields again.
    """

    order: int
    etas: Sequence[float] | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.order, bool) or self.order not in ORDERS:
            raise FedsdeInputError(f"order={self.order!r}: must be one of {', '.join(map(str, ORDERS))}")
        object.__setattr__(self, "order", int(self.order))
        if self.etas is not None:
            grid = client_step_grid(self.etas)
            grid.setflags(write=False)
            object.__setattr__(self, "etas", grid)
        object.__setattr__(self, "validated", True)
