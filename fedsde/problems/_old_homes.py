"""The modules' old homes, from before ``fedsde.problems`` had one package per idea: ``import
fedsde.problems.logistic`` (and the other flat names) still works, gives the module at its new home and warns once
(``DeprecationWarning``) naming it.  Installed on the first import of :mod:`fedsde.problems`."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module name (under ``fedsde.problems``) → its home now
MOVED = {
    "generate": "quadratic.generate",
    "labelled": "classification.labelled",
    "logistic": "classification.problem",
    "models": "classification.models",
    "mlp": "classification.mlp",
    "torch_models": "classification.torch_models",
    "datasets": "classification.datasets",
    "bundled": "classification.bundled",
    "partition": "classification.partition",
    "synthetic": "classification.synthetic",
    "regression_data": "regression.data",
    "regression_files": "regression.files",
    "csv_reader": "regression.csv_reader",
    "regression_store": "regression.store",
    "regression_population": "regression.population",
    "population": "populations.base",
    "population_metrics": "populations.metrics",
    "synthetic_population": "populations.synthetic",
}
PREFIX = "fedsde.problems."


class _OldHomes(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``fedsde.problems.<old name>`` and loads it as the module at its new home."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(PREFIX) and fullname[len(PREFIX):] in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = PREFIX + MOVED[spec.name[len(PREFIX):]]
        warnings.warn(f"{spec.name} is the old home of {new}; import {new}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """The module at its new home is executed already."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _OldHomes) for f in sys.meta_path):
        sys.meta_path.append(_OldHomes())
