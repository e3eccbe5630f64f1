"""SDE models of FedAvg (seed 002, eqs. (2) and (4)) on torchsde, a fixed-grid Brownian motion, the integrator.

Clock: round ``n`` sits at ``t = n·h``; the actual server step is ``s = h·η₀``.

* :mod:`fedsde.sde.coefficients` — drift and diffusion of the linear variants ``paper | corrected | matched``;
* :mod:`fedsde.sde.models` — torchsde modules: :class:`QuadraticSDE` and the Monte-Carlo :class:`FedAvgSDE`;
* :mod:`fedsde.sde.brownian` — :class:`GridBrownian`, a seeded, chunk-invariant Brownian motion on a fixed grid;
* :mod:`fedsde.sde.integrate` — :func:`simulate_sde` (Euler–Maruyama on the round grid, or exact OU transitions;
  chunks of paths in parallel threads, :mod:`fedsde.sim.workers`);
* :mod:`fedsde.sde.euler` — the Euler–Maruyama loop: torchsde's ``sdeint(method="euler")`` bit for bit, without its
  per-step machinery;
* :mod:`fedsde.sde.segments` — :func:`sdeint_rounds`: one torchsde run on the round grid, cut into segments on
  restarted clocks so that any number of steps stays on the grid;
* :mod:`fedsde.sde.schedules` — time-varying rates ``η(t)``, ``s(t)``;
* :mod:`fedsde.sde.rules` — the SDE of each linear or momentum server rule from its exact round law (FedNova around
  its own fixed point, FedAvgM with step s/(1 − β) and its underdamped SDE);
* :mod:`fedsde.sde.adaptive` — the SDE of the adaptive server rules (Malladi et al. 2022) as a torchsde module;
* :mod:`fedsde.sde.order2`, :mod:`fedsde.sde.order2_general`, :mod:`fedsde.sde.order2_paths` — the order-2 SDE:
  linear on quadratic clients, closed moments on least-squares clients, Hessian-vector-product drift and a
  weak-order-2 scheme coupled with FedAvg on any loss;
* :mod:`fedsde.sde.svag` — the SVAG chain lifted to the server round: a sampler of eq. (2) for any loss
  (:func:`simulate_svag`, two client rounds per step of size ``h/ℓ``) and its exact law on quadratic clients.
"""

from fedsde.sde.brownian import GridBrownian
from fedsde.sde.coefficients import (
    ORDER2_VARIANTS,
    VARIANTS,
    GaussianLaw,
    LinearSDE,
    order2_sde_coefficients,
    psd_sqrt,
    quadratic_sde_coefficients,
)
from fedsde.sde.integrate import METHODS, MODELS, SDEPaths, simulate_sde
from fedsde.sde.models import ESTIMATORS, ClientProblem, FedAvgSDE, QuadraticSDE
from fedsde.sde.schedules import RateSchedule, as_schedule
from fedsde.sde.segments import sdeint_rounds, time_grid
from fedsde.sde.svag import simulate_svag, svag_chain

__all__ = [
    "ESTIMATORS",
    "METHODS",
    "MODELS",
    "ORDER2_VARIANTS",
    "VARIANTS",
    "ClientProblem",
    "FedAvgSDE",
    "GaussianLaw",
    "GridBrownian",
    "LinearSDE",
    "QuadraticSDE",
    "RateSchedule",
    "SDEPaths",
    "as_schedule",
    "order2_sde_coefficients",
    "psd_sqrt",
    "quadratic_sde_coefficients",
    "sdeint_rounds",
    "simulate_sde",
    "simulate_svag",
    "svag_chain",
    "time_grid",
]
