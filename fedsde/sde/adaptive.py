"""The SDE of the adaptive server rules (FedAdam, FedYogi) after Malladi, Lyu, Panigrahi & Arora (NeurIPS 2022).

Malladi et al. ("On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", Definitions 4.1 and 4.3, Theorems
4.2 and 4.4) model RMSprop and Adam with step ``η``, ``1 − β_i = c_i η²``, ``ε = ε₀/η`` … on the clock ``t = k·η²``
in the regime where the gradient noise dominates (``σ ∝ 1/η``).  The server rules run Adam on the round's averaged
displacement ``Δ = Σ_k p_k Δ_k``; on quadratic clients ``−Δ = B(w − c) + ε`` with ``Cov ε = N`` exactly
(:func:`fedsde.sde.rules.rule_round_law`), so the "stochastic gradient" is ``g = −Δ``, its mean ``G(w) = B(w − c)``
and its covariance ``N`` (``σ₀Σ^{1/2} = s N^{1/2}`` in their notation).  With server step ``s``,
``c_i = (1 − β_i)/s²``, ``τ`` the adaptivity and clock ``t = n·s²`` (round ``n``), state ``(w, m, v)``:

    dw = −γ(t) · m / (s(√v + τ)) dt
    dm = c₁ (G(w) − m) dt + c₁ s N^{1/2} dW
    dv = c₂ (diag N − v) dt                                 (FedAdam)
    dv = c₂ E[g² sign(g² − v)] dt,  g ~ N(0, N_ii)          (FedYogi; = c₂ N_ii (4(a φ(a) + 1 − Φ(a)) − 1),
                                                             a = √(v/N_ii))

with ``γ = 1`` (``variant="paper"``, ``v₀ = τ²``), the bias corrections ``m̂ = m/γ₁``, ``v̂ = v/γ₂``,
``γ_i = 1 − e^{−c_i t}`` (``"bias_corrected"``: ``dw = −(m/γ₁)/(s(√(v/γ₂) + τ)) dt``) or Flower's step factor
``√γ₂/γ₁`` at ``t + 2s²`` (``"flower"`` FedAdam).  With ``β₁ = 0`` (no ``m``) it is their RMSprop SDE,
``dw = −(G dt + s N^{1/2} dW)/(s(√v + τ))``.  As in their SDE, ``v`` tracks ``diag N``, not ``E g² = G² + diag N``:
the mean's square is of lower order in their scaling (where it is not, the SDE does not hold, and the SVAG test
of :mod:`fedsde.validity.adaptive` says so).  Another clock ``t = n·h`` rescales time by ``s²/h``.

FedAdagrad has no SDE here (its ``v`` is a sum: nothing to scale); the rule says so itself.

Integrated with ``torchsde.sdeint(method="euler")`` and a seeded :class:`~fedsde.sde.brownian.GridBrownian`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torchsde

from fedsde._validate import positive_float, positive_int
from fedsde.aggregators import Aggregator
from fedsde.params import (
    DEFAULT_INTEGRATOR,
    DEFAULT_RECORDING,
    Integrator,
    Precision,
    Recording,
    Replication,
    Schedule,
    takes_values,
)
from fedsde.problems.quadratic.problem import QuadraticProblem
from fedsde.sde.brownian import GridBrownian
from fedsde.sde.coefficients import psd_sqrt
from fedsde.sde.rules import rule_kind, rule_round_law


class AdaptiveSDE(torch.nn.Module):
    """The SDE of the module docstring as a torchsde module (Itô, general noise), state ``(w, m, v)`` of shape
    ``(R, 3d)`` (``(w, v)``, ``(R, 2d)``, when ``β₁ = 0``).

    Parameters
    ----------
    B, c, N : Tensor, shapes (d, d), (d,), (d, d)
        Mean map, fixed point and covariance of ``−Δ`` (:func:`fedsde.sde.rules.rule_round_law`).
    form : AdaptiveForm
        The rule's parameters (:meth:`~fedsde.aggregators._adaptive.AdaptiveServer.adaptive_form`).
    server_lr : float
        ``s``.
    h : float
        Clock step: round ``n`` at ``t = n·h`` (default of the callers: ``s²``).
    sampling : SamplingTerm, optional
        Under client sampling (:mod:`fedsde.sde.sampled`) ``N`` is the clients' own noise ``N₀`` and the round's
        covariance at ``w`` is ``N₀ + Y(w) C Y(w)ᵀ``: the noise of ``m`` (and ``diag N`` in ``v``'s drift) then
        depend on ``w``, with the factor ``[N₀^{1/2}, Y(w) C^{1/2}]`` on ``d + Q`` Brownian motions.
    """

    noise_type = "general"
    sde_type = "ito"

    def __init__(self, B: torch.Tensor, c: torch.Tensor, N: torch.Tensor, form, server_lr: float, h: float,
                 sampling=None):
        super().__init__()
        self.B, self.c, self.form = B, c, form
        self.d = int(c.shape[0])
        self.s = float(server_lr)
        self.kappa = self.s**2 / float(h)  # d t_Malladi / d t
        self.c1 = (1.0 - form.beta1) / self.s**2
        self.c2 = (1.0 - form.beta2) / self.s**2
        self.has_m = form.beta1 > 0.0
        root = torch.as_tensor(psd_sqrt(N.cpu().numpy(), name="N"), dtype=N.dtype, device=N.device)
        self.noise = root
        self.ndiag = torch.diagonal(N).clamp_min(torch.finfo(N.dtype).tiny)
        self.sampling = None
        if sampling is not None:
            as_t = lambda a: torch.as_tensor(np.asarray(a), dtype=N.dtype, device=N.device)  # noqa: E731
            self.sampling = (as_t(sampling.M), as_t(sampling.a), as_t(sampling.root))
        self.noise_dim = self.d + (0 if sampling is None else int(sampling.C.shape[0]))

    def _factor(self, w: torch.Tensor) -> torch.Tensor:
        """``N(w)^{1/2}`` as a factor (R, d, noise_dim): ``N₀^{1/2}``, and ``Y(w) C^{1/2}`` under sampling."""
        R = w.shape[0]
        base = self.noise.unsqueeze(0).expand(R, self.d, self.d)
        if self.sampling is None:
            return base
        M, a, L = self.sampling
        Y = torch.einsum("kab,rkb->rak", M, w.unsqueeze(1) - a)  # (R, d, Q)
        return torch.cat([base, Y @ L], dim=2)

    def _ndiag(self, w: torch.Tensor) -> torch.Tensor:
        """``diag N(w)`` (R, d) or ``diag N₀`` (d,)."""
        if self.sampling is None:
            return self.ndiag
        fac = self._factor(w)[:, :, self.d:]
        return (self.ndiag + (fac * fac).sum(-1)).clamp_min(torch.finfo(w.dtype).tiny)

    def _gammas(self, t: float) -> tuple[float, float]:
        tm = t * self.kappa
        corr = self.form.correction
        if corr == "none":
            return 1.0, 1.0
        if corr == "step":
            tm += 2.0 * self.s**2
        g1 = -math.expm1(-self.c1 * tm) if self.has_m else 1.0
        g2 = -math.expm1(-self.c2 * tm)
        return max(g1, 1e-300), max(g2, 1e-300)

    def _v_drift(self, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        nd = self._ndiag(w)
        if self.form.second_moment == "ema":
            return self.c2 * (nd - v)
        a = torch.sqrt(v.clamp_min(0.0) / nd)
        phi = torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
        return self.c2 * nd * (4.0 * (a * phi + 1.0 - torch.special.ndtr(a)) - 1.0)

    def _precond(self, t: float, v: torch.Tensor) -> tuple[torch.Tensor, float]:
        g1, g2 = self._gammas(t)
        if self.form.correction == "moments":
            return self.s * (torch.sqrt(v.clamp_min(0.0) / g2) + self.form.tau), 1.0 / g1
        return self.s * (torch.sqrt(v.clamp_min(0.0)) + self.form.tau), math.sqrt(g2) / g1

    def f(self, t, y: torch.Tensor) -> torch.Tensor:
        d = self.d
        w = y[:, :d]
        G = (w - self.c) @ self.B.T
        v = y[:, -d:]
        P, scale = self._precond(float(t), v)
        if self.has_m:
            m = y[:, d:2 * d]
            out = [-scale * m / P, self.c1 * (G - m), self._v_drift(v, w)]
        else:
            out = [-scale * G / P, self._v_drift(v, w)]
        return self.kappa * torch.cat(out, dim=1)

    def g(self, t, y: torch.Tensor) -> torch.Tensor:
        d, R = self.d, y.shape[0]
        out = torch.zeros((R, y.shape[1], self.noise_dim), dtype=y.dtype, device=y.device)
        root = math.sqrt(self.kappa)
        fac = self._factor(y[:, :d])
        if self.has_m:
            out[:, d:2 * d, :] = root * self.c1 * self.s * fac
        else:
            P, scale = self._precond(float(t), y[:, -d:])
            out[:, :d, :] = -root * scale * self.s * fac / P.unsqueeze(-1)
        return out


def adaptive_sde(problem: QuadraticProblem, aggregator: str | Aggregator, *, eta: float, local_steps,
                 server_lr: float, h: float | None = None, device: str = "cpu", participation: int | None = None,
                 weighting: str = "unbiased") -> AdaptiveSDE:
    """The :class:`AdaptiveSDE` of an adaptive rule on quadratic clients (float64; ``h`` default ``s²``), under
    client sampling with ``participation``/``weighting`` (:func:`fedsde.sde.rules.rule_round_law`).

    Raises
    ------
    NoSDEError
        The rule declares no adaptive SDE (FedAdagrad, and rules of other kinds).
    """
    agg = rule_kind(aggregator, ("adaptive",))
    server_lr = positive_float("server_lr", server_lr)
    h = server_lr**2 if h is None else positive_float("h", h)
    law = rule_round_law(problem, agg, eta, local_steps, server_lr, participation=participation, weighting=weighting)
    as_t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64, device=device)  # noqa: E731
    return AdaptiveSDE(as_t(law.B), as_t(law.c), as_t(law.noise_cov), agg.adaptive_form(), server_lr, h,
                       getattr(law, "sampling", None))


def adaptive_sde_dict(sde: AdaptiveSDE) -> dict:
    """The coefficients of an :class:`AdaptiveSDE` as ``derive --aggregator fedadam --json`` prints them (under client
    sampling also ``sampling``: ``M``, ``a``, ``C``; ``noise_cov`` is then ``N₀``)."""
    f = sde.form
    extra = {}
    if sde.sampling is not None:
        M, a, L = (x.cpu().numpy() for x in sde.sampling)
        extra = {"sampling": {"M": M, "a": a, "C": L @ L.T, "noise": "N(w) = noise_cov + Y(w) C Y(w)^T, "
                              "Y(w) = [M_k (w - a_k)]_k"}}
    return extra | {"sde": "adaptive", "clock": "t = n*s^2" if sde.kappa == 1.0 else "t = n*h",
            "state": "(w, m, v)" if sde.has_m else "(w, v)", "server_lr": sde.s, "time_factor": sde.kappa,
            "drift": {"B": sde.B.cpu().numpy(), "c": sde.c.cpu().numpy()}, "noise_cov": (sde.noise @ sde.noise).cpu(
            ).numpy(), "c1": sde.c1 if sde.has_m else None, "c2": sde.c2, "tau": f.tau, "v0": f.v0,
            "second_moment": f.second_moment, "correction": f.correction,
            "equations": ["dw = -gamma(t) m / (s (sqrt(v) + tau)) dt", "dm = c1 (B (w - c) - m) dt + c1 s N^(1/2) dW",
                          "dv = c2 (diag N - v) dt" if f.second_moment == "ema" else
                          "dv = c2 E[g^2 sign(g^2 - v)] dt, g ~ N(0, N_ii)"]}


@takes_values(schedule=("eta", "local_steps", "rounds", "server_lr", "h"), replication=("replicates", "seed"),
              precision=("device",), integrator=("substeps",), recording=("record",))
def adaptive_sde_paths(problem: QuadraticProblem, aggregator: str | Aggregator, schedule: Schedule,
                       replication: Replication, precision: Precision | None = None, *, w0=None,
                       integrator: Integrator | None = None, recording: Recording | None = None,
                       participation: int | None = None, weighting: str = "unbiased") -> dict:
    """``replicates`` paths of the adaptive SDE on the round grid, by ``torchsde.sdeint(method="euler")``.

    Parameters as :func:`adaptive_sde`; ``substeps`` Euler steps per round; ``record`` the rounds kept (default all).
    The values: :class:`~fedsde.params.Schedule` (``eta``, ``local_steps``, ``rounds``, ``server_lr``, ``h``),
    :class:`~fedsde.params.Replication` (``replicates``, ``seed``), :class:`~fedsde.params.Precision` (``device``),
    :class:`~fedsde.params.Integrator` (``substeps``) and :class:`~fedsde.params.Recording` (``record``); each
    field may be given instead as the keyword of its name (:func:`fedsde.params.takes_values`).

    Returns
    -------
    dict
        ``rounds`` (T,), ``weights`` (T, R, d) ndarray, ``state`` (``m``, ``v`` at the last round, (R, d)), ``h``.
    """
    precision = precision or Precision()
    eta, local_steps, rounds, server_lr, h = (schedule.eta, schedule.local_steps, schedule.rounds, schedule.server_lr,
                                              schedule.h)
    R, seed, device = replication.replicates, replication.need_seed(), precision.device
    substeps = (integrator or DEFAULT_INTEGRATOR).substeps
    record = (recording or DEFAULT_RECORDING).record
    sde = adaptive_sde(problem, aggregator, eta=eta, local_steps=local_steps, server_lr=server_lr, h=h,
                       device=device, participation=participation, weighting=weighting)
    hh = server_lr**2 if h is None else float(h)
    d = problem.d
    w_start = torch.zeros(d, dtype=torch.float64) if w0 is None else torch.as_tensor(w0, dtype=torch.float64)
    parts = [w_start.expand(R, d)]
    if sde.has_m:
        parts.append(torch.zeros(R, d, dtype=torch.float64))
    parts.append(torch.full((R, d), sde.form.v0, dtype=torch.float64))
    y0 = torch.cat(parts, dim=1).to(device)
    keep = np.arange(rounds + 1) if record is None else np.unique(np.asarray(record, dtype=np.int64))
    grid = np.union1d([0], keep)  # sdeint starts at ts[0]
    ts = torch.as_tensor(grid * hh, dtype=torch.float64)
    dt = hh / substeps
    bm = GridBrownian(0.0, dt, (R, sde.noise_dim), seed=seed, steps=rounds * substeps + 1, device=device)
    with torch.no_grad():
        ys = torchsde.sdeint(sde, y0, ts, bm=bm, method="euler", dt=dt)
    ys = ys.cpu().numpy()[np.isin(grid, keep)]
    state = {"v": ys[-1, :, -d:]}
    if sde.has_m:
        state["m"] = ys[-1, :, d:2 * d]
    return {"rounds": keep, "weights": ys[:, :, :d], "state": state, "h": hh}


def svag_aggregator(aggregator: Aggregator, k: int) -> Aggregator:
    """The rule of the SVAG chain with ``ℓ = k²`` (Malladi et al. 2022; their code, ``cifar_main.py`` for the
    ``adamsvag``/``rmspropsvag`` optimizers, sets learning rate ``lr/k``, ``1 − ρ → (1 − ρ)/k²`` for both betas and
    ``ε → k·ε``): ``1 − β_i → (1 − β_i)/k²``, ``τ → k·τ`` (and ``v₀ → k²v₀``); the caller runs it with server step
    ``s/k``, ``k²`` times the rounds and the noise covariance ``×k²``."""
    k = positive_int("k", k)
    return aggregator.rescaled(one_minus_beta=1.0 / k**2, tau=float(k))


__all__ = ["AdaptiveSDE", "adaptive_sde", "adaptive_sde_dict", "adaptive_sde_paths", "svag_aggregator"]
