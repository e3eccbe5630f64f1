"""The discrete federated simulator, vectorised over replicates × clients."""

from fedsde.clients.data_oracles import (
    FullGradientOracle,
    GaussianMinibatchOracle,
    MinibatchOracle,
    full_gradient_oracle,
    gaussian_oracle,
    minibatch_oracle,
)
from fedsde.clients.module_oracle import ModuleOracle, module_oracle
from fedsde.clients.oracles import GaussianQuadraticOracle, GradientOracle
from fedsde.clients.solvers import SGD, LocalSolver, momentum_solver, prox_solver
from fedsde.clients.steps import EpochSteps, RandomSteps
from fedsde.clients.streams import BLOCK, ReplicateStreams, resolve_seed
from fedsde.sim.participation import WEIGHTINGS
from fedsde.sim.result import MetricRequest, SimulationResult
from fedsde.sim.runner import simulate

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
    "MetricRequest",
    "MinibatchOracle",
    "ModuleOracle",
    "RandomSteps",
    "ReplicateStreams",
    "SimulationResult",
    "full_gradient_oracle",
    "gaussian_oracle",
    "minibatch_oracle",
    "module_oracle",
    "momentum_solver",
    "prox_solver",
    "resolve_seed",
    "simulate",
]
