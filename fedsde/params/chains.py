"""The SVAG chains' values: the SDE side of a validity test (:class:`SDEReference`: what FedAvg or a rule is judged
against, which chains run, how they share random numbers) and what a caller plugs into one chain's run
(:class:`ChainHooks`); see :mod:`fedsde.params`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsde import _validate
from fedsde.errors import FedsdeInputError

#: where the SDE's value comes from (:func:`fedsde.validity.reference.resolve_reference`)
REFERENCES = ("exact", "svag")
#: the SDEs a validity test judges against: seed 002's first-order SDE, or the order-2 SDE (:mod:`fedsde.sde.order2`)
ORDERS = (1, 2)


@dataclass(frozen=True)
class SDEReference:
    """The SDE side of a validity test (:func:`fedsde.validity.validity_test`,
    :func:`fedsde.validity.rules.rule_validity_test`).

    Parameters
    ----------
    reference : {"exact", "svag"}, optional
        The SDE's value: its exact law, or the order-1 Richardson limit of the SVAG chains with the two largest
        ``ℓ`` (Li, Malladi & Arora 2021); default ``"exact"`` where the problem has an exact law, else ``"svag"``.
    ells : sequence of int, optional
        SVAG parameters ``ℓ >= 1`` (held distinct and increasing; the smallest is the chain judged, 1: the
        algorithm itself); default by the reference (the test's ``DEFAULT_ELLS``).
    order : {1, 2}
        The SDE judged against: seed 002's first-order SDE, or the order-2 SDE (its exact law only).
    common_random : bool
        Replicate ``r`` of every chain draws the same random numbers where their steps begin at the same time
        (common random numbers, :mod:`fedsde.sde.svag_streams`: each chain's law unchanged, the paired gaps vary
        less); ``False``: independent chains.

    Notes
    -----
    Validated once, here; against the problem (an exact law exists, two ``ℓ`` for the SVAG reference, squares
    for an adaptive rule, ``order=2`` only with the exact law) where the test knows it, once.
    """

    reference: str | None = None
    ells: Sequence[int] | None = None
    order: int = 1
    common_random: bool = True
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.reference is not None:
            _validate.choice("reference", self.reference, REFERENCES)
        if self.ells is not None:
            object.__setattr__(self, "ells", _validate.distinct_ints("ells", self.ells))
        if isinstance(self.order, bool) or self.order not in ORDERS:
            raise FedsdeInputError(f"order={self.order!r}: must be 1 or 2")
        object.__setattr__(self, "order", int(self.order))
        object.__setattr__(self, "common_random", bool(self.common_random))
        object.__setattr__(self, "validated", True)


@dataclass(frozen=True)
class ChainHooks:
    """What a caller plugs into one SVAG chain's run (:func:`fedsde.sde.svag.svag_chain`,
    :func:`fedsde.sde.rule_svag.rule_svag_chain`): an observer of the weights, a progress bar, the chain's name in
    its warnings and a clean-up when it fails.  None changes the chain's numbers.

    Parameters
    ----------
    on_grid : callable, optional
        ``on_grid(n, start, w)`` at every base round ``n = 0..rounds`` with the weights ``w`` (R_c, d) of the
        replicates ``start … start + R_c − 1`` (a chunk, in parallel threads on the CPU; a view on the run's device
        and dtype: copy what you keep).
    bar : tqdm, optional
        Progress bar advanced by one per SVAG step (any object with ``update``).
    what : str, optional
        Name of the run in the blow-up warning (default ``"the SVAG chain (ell=ℓ)"``).
    on_error : callable, optional
        Called when a chunk fails (e.g. to release chunks that ``on_grid`` made wait on another,
        :meth:`fedsde.sim.moments.StreamingMoments.abort`).
    """

    on_grid: Callable[..., None] | None = None
    bar: Any = None
    what: str | None = None
    on_error: Callable[[], None] | None = None
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("on_grid", "on_error"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise FedsdeInputError(f"{name}={getattr(self, name)!r}: must be callable")
        if self.bar is not None and not callable(getattr(self.bar, "update", None)):
            raise FedsdeInputError(f"bar={self.bar!r}: must be a progress bar (an object with update())")
        if self.what is not None and not isinstance(self.what, str):
            raise FedsdeInputError(f"what={self.what!r}: must be a string")
        object.__setattr__(self, "validated", True)


#: the defaults, built (and checked) once: what a function uses when it is given no value
DEFAULT_SDE_REFERENCE = SDEReference()
NO_HOOKS = ChainHooks()
