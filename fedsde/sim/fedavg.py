"""Former home of the simulator, kept for ``from fedsde.sim.fedavg import simulate``.

The simulator lives in :mod:`fedsde.sim.runner` (:func:`~fedsde.sim.runner.simulate`), its resolved arguments in
:mod:`fedsde.sim.plan`, participation in :mod:`fedsde.sim.participation` and the result in :mod:`fedsde.sim.result`;
import from :mod:`fedsde.sim`.
"""

from fedsde.sim.participation import WEIGHTINGS
from fedsde.sim.result import SimulationResult
from fedsde.sim.runner import simulate

__all__ = ["WEIGHTINGS", "SimulationResult", "simulate"]
