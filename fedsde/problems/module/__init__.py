"""A user's own PyTorch model as the clients' model: :class:`ModuleProblem` (any ``nn.Module`` on a user's rows),
:func:`module_problem` (its constructor), the problem files of ``kind = "module"`` (:mod:`.files`) and the
functional, batched calls behind it (:mod:`.functional`, ``torch.func``); the module trained by a client population
(:mod:`.population`, npz files read client by client: :mod:`.npz`); what a model and its rows must satisfy, checked
once when a problem is built (:mod:`.checks`); the options the constructors take as values (:mod:`.options`).
The simulator reaches it through :class:`fedsde.clients.module_oracle.ModuleOracle`.

Names are imported on first use (torch is loaded only by what needs it).
"""

from __future__ import annotations

import importlib

_NAMES = {"LOSSES": "functional", "MaskedDropout": "functional", "ModuleLoopWarning": "functional",
          "SAMPLINGS": "problem", "ModuleProblem": "problem", "module_problem": "problem",
          "module_problem_from_dict": "files", "ModulePopulationProblem": "population",
          "module_population_problem": "population", "NpzPopulation": "npz", "LABEL_LOSSES": "functional",
          "BatchSizeWarning": "checks", "ModuleTraining": "options", "ModuleBatches": "options"}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f"fedsde.problems.module.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'fedsde.problems.module' has no attribute {name!r}")


def is_module_problem(problem) -> bool:
    """Whether ``problem`` is a :class:`ModuleProblem` (checked without importing torch)."""
    return getattr(type(problem), "model", None) == "module" and hasattr(problem, "functional")
