"""The discrete federated simulator, vectorised over replicates × clients."""

from fedsde.sim.fedavg import WEIGHTINGS, SimulationResult, simulate
from fedsde.sim.oracles import GaussianQuadraticOracle, GradientOracle
from fedsde.sim.steps import RandomSteps
from fedsde.sim.streams import BLOCK, ReplicateStreams, resolve_seed

__all__ = [
    "BLOCK",
    "WEIGHTINGS",
    "GaussianQuadraticOracle",
    "GradientOracle",
    "RandomSteps",
    "ReplicateStreams",
    "SimulationResult",
    "resolve_seed",
    "simulate",
]
