"""fedsde — continuous-time (SDE) analysis and simulation of federated optimisation.

Subpackages: :mod:`fedsde.problems` (client problems), :mod:`fedsde.exact` (closed-form laws of the discrete
chain for quadratic clients), :mod:`fedsde.sim` (vectorised simulator), :mod:`fedsde.aggregators` (server
rules).  Importing :mod:`fedsde` does no heavy work.
"""

__version__ = "0.1.0"
