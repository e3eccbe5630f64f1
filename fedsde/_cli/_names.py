"""Names the command line offers as choices, available without importing the library that defines them.

A command's ``register()`` only declares its flags and must stay cheap (``fedsde --help`` and a mistyped flag
answer at once), but most vocabularies live in modules that import torch or scipy.  Two ways out:

* fixed vocabularies are spelled out here, each beside the library name it mirrors;
  ``tests/test_cli_startup.py`` checks every mirror against its source;
* the server rules, a registry that grows, are read from :mod:`fedsde.aggregators` when first needed
  (:class:`LazyChoices`: a value is checked or help is shown); their flag sets a ``metavar``, since argparse
  formats the choices of a flag without one as soon as it is declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

#: :data:`fedsde.sim.WEIGHTINGS`
WEIGHTINGS = ("unbiased", "renormalised", "multinomial")
#: :data:`fedsde.sde.VARIANTS`
SDE_VARIANTS = ("paper", "corrected", "matched")
#: :data:`fedsde.sde.integrate.MODELS`
SDE_MODELS = (*SDE_VARIANTS, "general")
#: :data:`fedsde.sde.integrate.METHODS`
SDE_METHODS = ("euler", "exact")
#: :data:`fedsde.sde.models.ESTIMATORS`
SDE_ESTIMATORS = ("compensated", "unbiased")
#: :data:`fedsde.compare.NOISE_SCALINGS`
NOISE_SCALINGS = ("fixed", "diffusive")
#: :data:`fedsde.theory.claims.PAPERS`
CLAIM_PAPERS = ("002", "003", "004", "000")
#: first and last figure of :data:`fedsde.report.gallery.GALLERY`
GALLERY_RANGE = "F1–F19"


class LazyChoices(Sequence):
    """The choices of a flag, loaded by ``load()`` the first time they are needed, then kept."""

    def __init__(self, load: Callable[[], Sequence[str]]):
        self._load = load
        self._values: tuple[str, ...] | None = None

    def _get(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    def __getitem__(self, index):
        return self._get()[index]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __contains__(self, value) -> bool:
        return value in self._get()

    def __repr__(self) -> str:
        return f"LazyChoices({list(self._get())!r})"


def _aggregator_names() -> list[str]:
    from fedsde.aggregators import AGGREGATORS

    return sorted(AGGREGATORS)


#: the names of :data:`fedsde.aggregators.AGGREGATORS`, sorted
AGGREGATOR_NAMES = LazyChoices(_aggregator_names)
