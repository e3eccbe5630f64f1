"""The discrete federated simulator, vectorised over replicates × clients."""

from fedsde.sim.data_oracles import (
    FullGradientOracle,
    GaussianMinibatchOracle,
    MinibatchOracle,
    full_gradient_oracle,
    gaussian_oracle,
    minibatch_oracle,
)
from fedsde.sim.fedavg import WEIGHTINGS, SimulationResult, simulate
from fedsde.sim.oracles import GaussianQuadraticOracle, GradientOracle
from fedsde.sim.solvers import SGD, LocalSolver, momentum_solver, prox_solver
from fedsde.sim.steps import EpochSteps, RandomSteps
from fedsde.sim.streams import BLOCK, ReplicateStreams, resolve_seed

__all__ = [
    "BLOCK",
    "SGD",
    "WEIGHTINGS",
    "EpochSteps",
    "FullGradientOracle",
    "GaussianMinibatchOracle",
    "GaussianQuadraticOracle",
    "GradientOracle",
    "LocalSolver",
    "MinibatchOracle",
    "RandomSteps",
    "ReplicateStreams",
    "SimulationResult",
    "full_gradient_oracle",
    "gaussian_oracle",
    "minibatch_oracle",
    "momentum_solver",
    "prox_solver",
    "resolve_seed",
    "simulate",
]
