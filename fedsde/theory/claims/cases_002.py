"""Shared laws and cases of seed 002's checks: the documented problems with their exact or simulated paths, the
stationary variances of the chain and of the SDE, and the families of scalar problems.

* Section 4 (:mod:`~fedsde.theory.claims.sec4_002`): the table clients with ``U/4``, the Thm 4.9
  counterexample and seeded random heterogeneous quadratic clients (exact chain), and synthetic logistic
  regression with true minibatches (Monte Carlo) as in reference §3g; the clock is ``t = n·h`` with ``h =``
  :data:`H` and :data:`LOCAL_STEPS` local steps.
* Section 6 (:mod:`~fedsde.theory.claims.sec56_002`, :mod:`~fedsde.theory.claims.families_002`):
  :func:`var_exact` (the chain's exact stationary variance) and :func:`var_sde` (the SDE's, as printed or
  corrected), and :func:`scalar_family` (the paper's table problem at several ``η``, the audit counterexample and
  seeded random scalar problems).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fedsde.exact import stationary_law
from fedsde.problems import QuadraticProblem, paper_table_problem
from fedsde.theory.claims._common import random_scalar_problems
from fedsde.theory.claims.base import CheckOptions
from fedsde.theory.constants import classification_constants, quadratic_constants, quadratic_region_radius
from fedsde.theory.empirical import quadratic_exact_path, simulated_path
from fedsde.theory.problems import synthetic_logistic
from fedsde.theory.schedules import PowerSchedule

#: horizons (continuous time t = n·h) at which the Section 4 bounds are compared
HORIZONS = np.array([5.0, 20.0, 50.0, 200.0])
H = 0.5  # time step of the lift: server step h·η₀ = 0.5 per round
#: local steps per round of the Section 4 checks
LOCAL_STEPS = 5
W0_QUAD = np.array([3.0])
W0_LOGISTIC = np.array([3.0, 3.0])
BATCH = 5


def n_rounds(h: float = H) -> int:
    """Rounds that reach the last horizon on the clock ``t = n·h``."""
    return round(float(HORIZONS.max()) / h) + 1


def horizon_rounds(h: float = H) -> np.ndarray:
    """Round index ``n = t/h`` of every horizon, shape (4,)."""
    return np.round(HORIZONS / h).astype(np.int64)


# ---------------------------------------------------------------------------------------------- Sec. 4 cases
def quadratic_case(problem, sched, *, w0, local_steps=LOCAL_STEPS, h=H, server_schedule=None, eta_min=None):
    """Constants of the Sec. 4 bounds and the exact path of the chain from ``w0`` under ``sched``."""
    rounds = n_rounds(h)
    R = quadratic_region_radius(problem, sched, local_steps=local_steps, h=h, rounds=rounds, w0=w0,
                                server_schedule=server_schedule)
    const = quadratic_constants(problem, radius=R, local_steps=local_steps, eta_max=sched.scale, eta_min=eta_min, w0=w0)
    path = quadratic_exact_path(problem, sched, local_steps=local_steps, h=h, rounds=rounds, w0=w0,
                                server_schedule=server_schedule)
    return const, path


#: seeded random heterogeneous quadratic problems added to every Sec. 4 check (exact chain)
N_RANDOM_SEC4 = 2


def random_sec4_problem(i: int, seed: int) -> tuple[QuadraticProblem, np.ndarray, dict]:
    """Random heterogeneous clients: Q = 3, d ∈ {1, 2, 3}, diagonal U ∈ [0.1, 1], a ~ N(0, 1.5²), Σ ∈ [0.1, 2],
    p ~ Dirichlet(1), w₀ = w* + N(0, 2²) (``ηU <= 1`` for every schedule of the Sec. 4 checks)."""
    rng = np.random.default_rng([seed, i])
    d = int(rng.choice([1, 2, 3]))
    par = {"U": rng.uniform(0.1, 1.0, (3, d)), "a": rng.normal(0.0, 1.5, (3, d)),
           "Sigma": rng.uniform(0.1, 2.0, (3, d)), "p": rng.dirichlet(np.ones(3))}
    pb = QuadraticProblem.from_arrays(par["U"], par["a"], par["Sigma"], par["p"], name=f"random #{i}")
    w0 = pb.optimum + rng.normal(0.0, 2.0, d)
    return pb, w0, {k: np.asarray(v).tolist() for k, v in par.items()} | {"w0": w0.tolist(), "seed": [seed, i]}


@lru_cache(maxsize=16)
def random_sec4_cases(seed: int, scale: float, b: float, n: int, server: bool = False):
    """``[(label, params, schedule, constants, path)]`` for ``n`` random problems under ``η = scale/(1+t)^b``."""
    out = []
    for i in range(n):
        pb, w0, par = random_sec4_problem(i, seed)
        sched = PowerSchedule(scale, b)
        kw = {"server_schedule": PowerSchedule(1.0, 1.0), "eta_min": scale} if server else {}
        const, path = quadratic_case(pb, sched, w0=w0, **kw)
        out.append((f"random #{i} (seed {seed}, d={pb.d}, exact)", par, sched, const, path))
    return out


@lru_cache(maxsize=4)
def logistic_case(seed: int, scale: float):
    """Reference §3g: logistic d=2, Q=3 non-IID, E=5, S=5 of N_k=50, h=0.5, η(t) = 0.5/(1+t), w₀ = (3, 3)."""
    from fedsde.clients.data_oracles import minibatch_oracle

    problem = synthetic_logistic(3, 50, kind="noniid", seed=2)
    sched = PowerSchedule(0.5, 1.0)
    R = CheckOptions(seed, scale).replicates(128)
    path = simulated_path(problem, sched, local_steps=LOCAL_STEPS, h=H, rounds=n_rounds(), replicates=R, seed=seed + 11,
                          w0=W0_LOGISTIC, oracle_factory=minibatch_oracle(batch_size=BATCH))
    pts = path.points[np.array([0, 2, 10, 40, 100, 400])][:, :16].reshape(-1, problem.d)
    const = classification_constants(problem, batch_size=BATCH, local_steps=LOCAL_STEPS, eta_max=sched.scale,
                                     pilot_points=pts, seed=seed + 12,
                                     replicates=CheckOptions(seed, scale).replicates(1024), w0=W0_LOGISTIC)
    return problem, sched, const, path


# ---------------------------------------------------------------------------------------------- Sec. 6 laws
def var_exact(pr: QuadraticProblem, eta: float, e: int) -> float:
    """Stationary variance of coordinate 0 of the discrete chain with ``e`` local steps (exact law)."""
    return float(stationary_law(pr, eta, e).cov[0, 0])


def var_sde(pr: QuadraticProblem, eta: float, e: int, variant: str) -> float:
    """Stationary variance of coordinate 0 of the quadratic SDE (``variant`` "paper" or "corrected"); NaN when
    it has none."""
    from fedsde.sde.coefficients import quadratic_sde_coefficients

    st = quadratic_sde_coefficients(pr, eta, e, variant=variant).stationary()
    return float("nan") if st is None else float(st[1][0, 0])


# ---------------------------------------------------------------------------------------------- scalar families
#: the seed-002 audit's counterexample to monotonicity of the bias in E (reference/seed-fedsde.md §3)
AUDIT_COUNTEREXAMPLE = {"U": np.array([2.145, 3.812, 0.748]), "a": np.array([-2.606, 1.811, 0.893]),
                        "p": np.array([0.632, 0.175, 0.193]), "Sigma": np.ones(3), "eta": 0.0091}
TABLE_ETAS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.45)


def table_params(eta: float) -> dict:
    """The paper's table problem (``U = [1, 2, 4]``, ``a = [−1, 0, 2]``, ``Σ = [0.5, 1, 2]``) as scalar parameters."""
    pr = paper_table_problem()
    return {"U": pr.U[:, 0, 0].copy(), "a": pr.a[:, 0].copy(), "p": pr.p.copy(), "Sigma": pr.Sigma[:, 0, 0].copy(),
            "eta": float(eta)}


def scalar_problem(par: dict) -> QuadraticProblem:
    """Scalar quadratic clients from ``{"U", "a", "Sigma", "p"}`` (arrays of shape (Q,))."""
    return QuadraticProblem.from_arrays(par["U"], par["a"], par["Sigma"], par["p"])


def scalar_family(n_random: int, seed: int, etas=TABLE_ETAS) -> list[tuple[str, dict]]:
    """``(label, params)``: the table problem at ``etas``, the audit counterexample, ``n_random`` random ones."""
    fam = [(f"table problem, η={e:g}", table_params(e)) for e in etas]
    fam.append(("audit counterexample", dict(AUDIT_COUNTEREXAMPLE)))
    fam += [(f"random #{i} (seed {seed})", par) for i, par in enumerate(random_scalar_problems(n_random, seed))]
    return fam
