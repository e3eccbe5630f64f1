"""Normality of the server update as the number of clients grows (seed 002, Sec. 5, Thm 5.4).

The server update of one round is ``A = Σ_k ω_k Δ_k`` with independent client displacements ``Δ_k``.
Thm 5.4 proves ``A → N(M, V)`` through Lyapunov's CLT with ``δ = 2``; the corrected statement is the
standardised ``V^{-1/2}(A − M) ⇒ N(0, I)`` (erratum 10).  This module measures, from simulated rounds:

* per coordinate: skewness, excess kurtosis, the Kolmogorov–Smirnov distance to the fitted normal;
* jointly: Mardia's multivariate skewness and kurtosis with their asymptotic p-values;
* the empirical Lyapunov ratio ``Σ_k E|X_k − EX_k|^{2+δ} / (Σ_k Var X_k)^{1+δ/2}`` of the client terms
  ``X_k = ω_k Δ_{k,j}`` (it must tend to 0; for ``Q`` copies of fixed clients it is ``c/Q``), and its
  log–log slope against ``Q``.

Gaussian gradient noise on quadratics makes ``A`` exactly normal, so the interesting cases use skewed noise
(:class:`SkewedQuadraticOracle`, centred exponential) or true minibatches on real data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats

from fedsde._stats import loglog_slope
from fedsde._tolerances import RANK_TOL
from fedsde._validate import positive_int
from fedsde.aggregators import FedAvg
from fedsde.clients.streams import BLOCK, ReplicateStreams
from fedsde.errors import FedsdeInputError
from fedsde.problems.quadratic.problem import QuadraticProblem


class SkewedQuadraticOracle:
    """Quadratic gradients with centred-exponential noise: ``g_k(x) = U_k(x − a_k) + L_k (e − 1)``.

    ``e`` has i.i.d. Exp(1) coordinates (drawn as ``−log(1 − u)`` from the replicate streams), so the noise
    has mean 0 and covariance ``L_k L_kᵀ = Σ_k`` like the Gaussian oracle, but skewness 2 and excess kurtosis 6
    per coordinate.  Follows the oracle protocol of :mod:`fedsde.clients.oracles` (``x`` of shape (nb, Q, B, d)).
    """

    def __init__(self, problem: QuadraticProblem, nblocks: int, device: torch.device, dtype: torch.dtype):
        self.U = torch.as_tensor(problem.U, dtype=dtype, device=device)  # (Q, d, d)
        self.a = torch.as_tensor(problem.a, dtype=dtype, device=device)[None, :, None, :]
        self.L = torch.as_tensor(problem.noise_factors(), dtype=dtype, device=device)
        self._u = torch.empty((nblocks, problem.Q, BLOCK, problem.d), dtype=dtype, device=device)

    def sample(self, x: torch.Tensor, streams: ReplicateStreams) -> torch.Tensor:
        if self._u.shape != x.shape:  # blocks of another size than BLOCK
            self._u = torch.empty_like(x)
        u = streams.uniform_(self._u)
        z = -torch.log1p(-u) - 1.0
        return torch.einsum("qij,nqbj->nqbi", self.U, x - self.a) + torch.einsum("qij,nqbj->nqbi", self.L, z)


class _RecordingFedAvg(FedAvg):
    """FedAvg that keeps the weighted client displacements ``ω_k Δ_k`` of every round it applies."""

    name = "fedavg-recording"

    def __init__(self):
        self.terms: list[np.ndarray] = []

    def apply(self, w, updates, weights, state, ctx):
        self.terms.append((weights.unsqueeze(-1) * updates).detach().cpu().numpy())
        return super().apply(w, updates, weights, state, ctx)


def client_update_samples(problem, *, eta: float, local_steps, replicates: int, seed: int, w=None,
                          oracle_factory: Callable | None = None, **simulate_kwargs) -> np.ndarray:
    """``R`` independent draws of the weighted client displacements ``ω_k Δ_k`` of one round from ``w``.

    Returns
    -------
    ndarray, shape (R, Q, d)
        Their sum over clients is the server update ``A`` (server step 1).
    """
    from fedsde.sim import simulate

    replicates = positive_int("replicates", replicates)
    rec = _RecordingFedAvg()
    simulate_kwargs.pop("chunk_size", None)  # one chunk on one worker: the recorded rows are the replicates in order
    simulate_kwargs.pop("workers", None)
    simulate(problem, eta=eta, local_steps=local_steps, rounds=1, replicates=replicates, seed=seed, w0=w,
             aggregator=rec, record=[1], oracle_factory=oracle_factory, workers=1, **simulate_kwargs)
    return rec.terms[0][:replicates]


def mardia(x: np.ndarray) -> dict:
    """Mardia's multivariate skewness ``b₁`` and kurtosis ``b₂`` of ``x`` (shape (R, d)) with p-values.

    With whitened rows ``z_i = S^{-1/2}(x_i − x̄)`` (``S`` the biased covariance):
    ``b₁ = Σ_{abc} (n⁻¹Σ_i z_ia z_ib z_ic)²`` (equal to ``n⁻² Σ_ij (z_iᵀz_j)³``), ``b₂ = n⁻¹ Σ_i ‖z_i‖⁴``;
    ``n b₁/6 ~ χ²(d(d+1)(d+2)/6)`` and ``(b₂ − d(d+2))/√(8d(d+2)/n) ~ N(0, 1)`` under normality.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n, d = x.shape
    y = x - x.mean(0)
    S = y.T @ y / n
    lam, V = np.linalg.eigh(S)
    if lam[0] <= RANK_TOL * max(1.0, lam[-1]):
        raise FedsdeInputError("x: sample covariance is singular; Mardia's test needs full rank")
    z = y @ V / np.sqrt(lam)
    M = np.einsum("ia,ib,ic->abc", z, z, z) / n
    b1 = float(np.sum(M**2))
    b2 = float(np.mean(np.sum(z**2, axis=1) ** 2))
    df = d * (d + 1) * (d + 2) / 6
    skew_stat = n * b1 / 6
    kurt_z = (b2 - d * (d + 2)) / np.sqrt(8 * d * (d + 2) / n)
    return {"b1": b1, "b2": b2, "skew_stat": skew_stat, "skew_p": float(stats.chi2.sf(skew_stat, df)),
            "kurt_z": float(kurt_z), "kurt_p": float(2 * stats.norm.sf(abs(kurt_z)))}


def normality_diagnostics(x: np.ndarray) -> dict:
    """Skewness, excess kurtosis and KS distance to the fitted normal per coordinate, plus Mardia's test.

    Parameters
    ----------
    x : ndarray, shape (R,) or (R, d)

    Returns
    -------
    dict
        ``skewness``, ``excess_kurtosis``, ``ks`` (arrays of shape (d,)), ``ks_reference`` (the KS distance
        expected for a normal sample of the same size, ≈ 0.87/√R), and ``mardia`` (dict; for d = 1 the
        univariate special case).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    R = x.shape[0]
    zc = (x - x.mean(0)) / x.std(0, ddof=1)
    ks = np.array([stats.kstest(zc[:, j], "norm").statistic for j in range(x.shape[1])])
    return {
        "skewness": stats.skew(x, axis=0),
        "excess_kurtosis": stats.kurtosis(x, axis=0, fisher=True),
        "ks": ks,
        "ks_reference": 0.8687 / np.sqrt(R),  # mean of the KS statistic under H0 is ≈ 0.8687/√R
        "mardia": mardia(x),
    }


def lyapunov_ratio(terms: np.ndarray, delta: float = 2.0) -> np.ndarray:
    """Empirical Lyapunov ratio ``Σ_k E|X_k − EX_k|^{2+δ} / (Σ_k Var X_k)^{1+δ/2}`` per coordinate.

    Parameters
    ----------
    terms : ndarray, shape (R, Q, d)
        Samples of the independent client terms ``X_k`` (e.g. ``ω_k Δ_k``).
    delta : float
        The ``δ`` of Lyapunov's condition (Thm 5.4 uses 2).

    Returns
    -------
    ndarray, shape (d,)
    """
    X = np.asarray(terms, dtype=np.float64)
    if X.ndim != 3:
        raise FedsdeInputError(f"terms: shape {X.shape} must be (R, Q, d)")
    c = X - X.mean(axis=0)
    m = np.mean(np.abs(c) ** (2.0 + delta), axis=0).sum(axis=0)  # (d,)
    s2 = c.var(axis=0, ddof=1).sum(axis=0)
    return m / s2 ** (1.0 + delta / 2.0)


@dataclass
class CLTStudy:
    """Normality diagnostics of the server update for several numbers of clients ``Q``.

    Attributes
    ----------
    Q : ndarray of int, shape (n,)
    rows : list of dict
        Per ``Q``: ``skewness``, ``excess_kurtosis``, ``ks`` (max over coordinates), ``lyapunov``
        (max over coordinates), ``mardia_b1``, ``mardia_skew_p``, ``mardia_kurt_p``, ``ks_reference``.
    lyapunov_slope : float
        Least-squares slope of log(Lyapunov ratio) against log Q (Thm 5.4's proof: −1).
    label : str
    """

    Q: np.ndarray
    rows: list
    lyapunov_slope: float
    label: str = ""
    extra: dict = field(default_factory=dict)

    def column(self, name: str) -> np.ndarray:
        return np.array([r[name] for r in self.rows], dtype=np.float64)

    def to_dict(self) -> dict:
        return {"label": self.label, "Q": self.Q.tolist(), "rows": self.rows, "lyapunov_slope": self.lyapunov_slope}


def clt_study(
    make_problem: Callable[[int], object],
    Qs: Sequence[int],
    *,
    eta: float,
    local_steps: int,
    replicates: int,
    seed: int,
    w=None,
    oracle_factory: Callable | None = None,
    label: str = "",
    **simulate_kwargs,
) -> CLTStudy:
    """Diagnostics of the one-round server update for each ``Q`` in ``Qs`` (``make_problem(Q)`` builds the problem).

    The same ``replicates`` and ``seed`` are used for every ``Q``; ``w`` is the server weights the round starts
    from (default zero); ``oracle_factory`` replaces the Gaussian quadratic oracle (e.g. :class:`SkewedQuadraticOracle`
    or a minibatch oracle on real data).
    """
    Qs = np.asarray([positive_int("Q", q) for q in Qs], dtype=np.int64)
    if Qs.size < 2:
        raise FedsdeInputError("Qs: need at least two numbers of clients to fit a slope")
    rows = []
    for i, Q in enumerate(Qs.tolist()):
        prob = make_problem(Q)
        terms = client_update_samples(prob, eta=eta, local_steps=local_steps, replicates=replicates,
                                      seed=seed + i, w=w, oracle_factory=oracle_factory, **simulate_kwargs)
        A = terms.sum(axis=1)
        diag = normality_diagnostics(A)
        lyap = lyapunov_ratio(terms)
        rows.append({
            "Q": int(Q),
            "skewness": float(np.max(np.abs(diag["skewness"]))),
            "excess_kurtosis": float(diag["excess_kurtosis"][np.argmax(np.abs(diag["excess_kurtosis"]))]),
            "ks": float(diag["ks"].max()),
            "ks_reference": float(diag["ks_reference"]),
            "lyapunov": float(lyap.max()),
            "mardia_b1": diag["mardia"]["b1"],
            "mardia_skew_p": diag["mardia"]["skew_p"],
            "mardia_kurt_p": diag["mardia"]["kurt_p"],
        })
    lyap = np.array([r["lyapunov"] for r in rows])
    slope = loglog_slope(Qs, lyap)
    return CLTStudy(Qs, rows, slope, label)
