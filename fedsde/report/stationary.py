"""Stationary bias and variance of FedAvg vs local steps E, for several client learning rates η.

Three sources side by side on one quadratic problem (Section 6 convention: server step s = 1, t = n·η):

* the exact stationary law of the discrete chain (:func:`fedsde.exact.stationary_law`);
* a Monte-Carlo simulation of the algorithm (:func:`fedsde.sim.simulate`), run from ``w0`` until the exact
  transient law is within ``tol`` of stationarity, moments over replicates with standard errors;
* the paper's printed ``C4`` and ``v0(∞)`` (seed 002, Thm 6.3 / eq. (4) as printed) and the corrected SDE's
  stationary variance, from the lambdified symbolic formulas
  (:func:`fedsde.symbolic.numeric.sde_coefficients_numeric`; full-matrix problems take its matrix path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsde._progress import progress_bar
from fedsde._tolerances import BURN_IN_TOL
from fedsde.exact import stationary_law
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sim import simulate

COLUMNS = (
    "eta", "E", "rounds_simulated", "exact_mean", "sim_mean", "sim_mean_se", "paper_C4", "bias_exact",
    "exact_var", "sim_var", "sim_var_se", "paper_v0_inf", "corrected_sde_var", "paper_over_exact",
)


@dataclass(frozen=True)
class StationaryRow:
    """One (η, E) point. For d > 1, "mean" is the first coordinate's, "var" is the trace of the covariance."""

    eta: float
    E: int
    rounds_simulated: int
    exact_mean: float
    sim_mean: float
    sim_mean_se: float
    paper_C4: float
    bias_exact: float
    exact_var: float
    sim_var: float
    sim_var_se: float
    paper_v0_inf: float
    corrected_sde_var: float

    @property
    def paper_over_exact(self) -> float:
        return self.paper_v0_inf / self.exact_var

    def as_row(self) -> list:
        return [getattr(self, c) for c in COLUMNS]


def _bias(mean: np.ndarray, w_star: np.ndarray) -> float:
    """Signed bias for d = 1, Euclidean norm of the bias otherwise."""
    diff = mean - w_star
    return float(diff[0]) if diff.size == 1 else float(np.linalg.norm(diff))


def burn_in_rounds(rho: float, tol: float = BURN_IN_TOL, minimum: int = 10) -> int:
    """Rounds after which the mean's transient, decaying like ``rho^n``, is below ``tol`` of its start (default
    :data:`~fedsde._tolerances.BURN_IN_TOL`), at least ``minimum``."""
    if rho <= 0:
        return minimum
    return max(minimum, math.ceil(math.log(tol) / math.log(rho)))


def stationary_scan(
    problem: QuadraticProblem,
    etas: Sequence[float],
    Es: Sequence[int],
    *,
    replicates: int,
    seed: int,
    server_lr: float = 1.0,
    tol: float = BURN_IN_TOL,
    progress: bool = False,
    device: str = "cpu",
) -> list[StationaryRow]:
    """Exact, simulated and printed stationary moments on the (η, E) grid (see module docstring)."""
    from fedsde.symbolic.numeric import sde_coefficients_numeric

    rows = []
    w_star = problem.optimum
    grid = [(float(eta), int(E)) for eta in etas for E in Es]
    bar = progress_bar(len(grid), "stationary scan", unit="cell", enabled=progress)
    for i, (eta, E) in enumerate(grid):
        st = stationary_law(problem, eta, E, server_lr)
        n = burn_in_rounds(st.law.spectral_radius, tol)
        sim = simulate(problem, eta=eta, local_steps=E, rounds=n, replicates=replicates, seed=seed + i,
                       server_lr=server_lr, record=[n], device=device)
        x = sim.final
        xc = x - x.mean(0)
        tr_samples = np.einsum("ri,ri->r", xc, xc)
        sim_var = float(tr_samples.sum() / (replicates - 1))
        paper = sde_coefficients_numeric(problem, eta, E, server_lr, h=eta, variant="paper").stationary()
        corr = sde_coefficients_numeric(problem, eta, E, server_lr, h=eta, variant="corrected").stationary()
        rows.append(StationaryRow(
            eta=eta, E=E, rounds_simulated=n,
            exact_mean=float(st.mean[0]), sim_mean=float(x[:, 0].mean()),
            sim_mean_se=float(x[:, 0].std(ddof=1) / math.sqrt(replicates)),
            paper_C4=float(paper[0][0]), bias_exact=_bias(st.mean, w_star),
            exact_var=float(np.trace(st.cov)), sim_var=sim_var,
            sim_var_se=float(tr_samples.std(ddof=1) / math.sqrt(replicates)),
            paper_v0_inf=float(np.trace(paper[1])), corrected_sde_var=float(np.trace(corr[1])),
        ))
        bar.update()
    bar.close()
    return rows


def log_slopes(Es: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Local log–log slopes d log(value)/d log(E) between consecutive grid points."""
    return np.diff(np.log(values)) / np.diff(np.log(Es))

