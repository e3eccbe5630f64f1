"""Former home of the simulator, kept for one release for ``from fedsde.sim.fedavg import simulate``.

Importing it warns (:class:`DeprecationWarning`). The simulator lives in :mod:`fedsde.sim.runner`
(:func:`~fedsde.sim.runner.simulate`), its resolved arguments in :mod:`fedsde.sim.plan`, participation in
:mod:`fedsde.sim.participation` and the result in :mod:`fedsde.sim.result`; import from :mod:`fedsde.sim`.
"""

import warnings

from fedsde._compat import REMOVED_IN
from fedsde.sim.participation import WEIGHTINGS
from fedsde.sim.result import SimulationResult
from fedsde.sim.runner import simulate

__all__ = ["WEIGHTINGS", "SimulationResult", "simulate"]

warnings.warn(f"fedsde.sim.fedavg is the old home of the simulator and goes away in {REMOVED_IN}; import "
              "simulate, SimulationResult and WEIGHTINGS from fedsde.sim", DeprecationWarning, stacklevel=2)
