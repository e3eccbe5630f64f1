"""FedAvg SDEs as torchsde modules (``sde_type="ito"``; ``f``, ``g``, ``g_prod`` and ``f_and_g_prod``).

Clock: ``t = n·h`` (round ``n``, time step ``h``); actual server step ``s(t) = h·η₀(t)``; client rate ``η(t)``.
Rates may be constants, per-round arrays or callables of ``t`` (:mod:`fedsde.sde.schedules`).

* :class:`QuadraticSDE` — the linear SDEs of :mod:`fedsde.sde.coefficients` (``paper``, ``corrected``,
  ``matched``; any ``d``, full matrices): ``f(t, w) = −A(t)(w − c(t))`` and additive noise ``b(t) dB``.
  ``g`` returns an expanded view of ``b`` (no ``(batch, d, d)`` tensor is materialised); ``g_prod`` is one
  matrix product.
* :class:`FedAvgSDE` — seed 002 eq. (2) for any client loss with a gradient oracle,

      dw = η₀(t) M̂(w) dt + η₀(t) √h V̂(w)^{1/2} dB(t),

  with ``M̂`` and ``V̂`` the mean and covariance of the round displacement ``Â(w) = Σ_k p_k (w_k^{(E)} − w)`` (E
  local SGD steps ``w ← w − η(t)(∇F_k(w) + ξ)`` from ``w``), estimated at every step by ``K`` Monte-Carlo
  rollouts (see :class:`FedAvgSDE` for the estimator and its bias).

Shapes: the state ``y`` is ``(paths, d)``; Brownian motion ``(paths, m)`` with ``m = d`` (quadratic) or
``m = K`` (general).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from fedsde._validate import choice, client_steps, device_dtype, positive_float, positive_int
from fedsde.clients.local import run_local_steps, step_limits
from fedsde.clients.oracles import GaussianQuadraticOracle, GradientOracle
from fedsde.clients.streams import BLOCK, ReplicateStreams, resolve_block_size, resolve_seed
from fedsde.errors import FedsdeInputError
from fedsde.params.options import ESTIMATORS  # the estimators of the diffusion of FedAvgSDE
from fedsde.problems.quadratic import QuadraticProblem
from fedsde.sde.coefficients import ORDER2_VARIANTS, VARIANTS, LinearSDE, quadratic_sde_coefficients
from fedsde.sde.schedules import RateLike, as_schedule

# stream family of the inner Monte-Carlo rollouts (disjoint from the simulator's and the Brownian motion's)
_INNER = 1 << 19

_CACHE_MAX = 4096


#: bytes of client weights a batch of rollouts of one block may hold on the CPU; above it a block's K rollouts run a
#: few at a time (:func:`rollout_group`): the general SDE's memory is then O(R·Q·d), not O(R·K·Q·d)
ROLLOUT_BYTES = 1 << 29


def rollout_group(K: int, Q: int, B: int, d: int, dtype: torch.dtype, device) -> int:
    """Inner samples of one block of ``B`` paths computed at once: all ``K`` where their client weights (K, Q, B, d)
    fit :data:`ROLLOUT_BYTES` (always on a GPU, whose memory the chunk planner sizes), else as many as fit (at
    least one).  A function of the configuration only, so that a path's numbers do not depend on the machine."""
    if torch.device(device).type != "cpu":
        return K
    per = Q * B * d * (torch.finfo(dtype).bits // 8)
    return K if K * per <= ROLLOUT_BYTES else max(1, ROLLOUT_BYTES // per)


class ClientProblem(Protocol):
    """What :class:`FedAvgSDE` needs from a problem: ``Q`` clients, dimension ``d``, weights ``p`` (Q,).

    Stochastic gradients come from a gradient oracle (:class:`fedsde.clients.oracles.GradientOracle`) built by
    ``oracle_factory(problem, nblocks, device, dtype)``; :class:`~fedsde.problems.QuadraticProblem` has a default.
    """

    @property
    def Q(self) -> int: ...

    @property
    def d(self) -> int: ...

    @property
    def p(self) -> np.ndarray: ...


def _default_h(h: float | None, eta: RateLike) -> float:
    if h is not None:
        return positive_float("h", h)
    if callable(eta) or np.ndim(eta) != 0:
        raise FedsdeInputError("h: required when eta is a schedule (h defaults to a constant eta)")
    return positive_float("eta", eta)


class QuadraticSDE(torch.nn.Module):
    """Linear FedAvg SDE ``dw = −A(w − c) dt + b dB`` on quadratic clients, as a torchsde module.

    Parameters
    ----------
    problem : QuadraticProblem
    eta : float, array (rounds,), or callable of t
        Client learning rate ``η(t)``.
    local_steps : int or array of int, shape (Q,)
    server_lr : float, array (rounds,), or callable of t
        Actual server step ``s(t) = h·η₀(t)``.
    h : float, optional
        Time step (default: ``eta`` when it is a constant).
    variant : {"corrected", "paper", "matched"} or an order-2 name
        See :mod:`fedsde.sde.coefficients` and :mod:`fedsde.sde.order2`.
    device, dtype
        Where the coefficients live (the state's device and dtype).

    Notes
    -----
    With time-varying rates the coefficients at time ``t`` are those of
    :func:`~fedsde.sde.coefficients.quadratic_sde_coefficients` at ``(η(t), s(t))`` (cached per value pair).
    """

    sde_type = "ito"
    noise_type = "additive"

    def __init__(
        self,
        problem: QuadraticProblem,
        eta: RateLike,
        local_steps: int | np.ndarray,
        server_lr: RateLike = 1.0,
        h: float | None = None,
        variant: str = "corrected",
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        choice("variant", variant, (*VARIANTS, *ORDER2_VARIANTS))
        self.h = _default_h(h, eta)
        self.problem = problem
        self.variant = variant
        self.local_steps = client_steps("local_steps", local_steps, problem.Q)
        self.eta = as_schedule("eta", eta, self.h)
        self.server_lr = as_schedule("server_lr", server_lr, self.h)
        self.device_, self.dtype_ = device_dtype(device, dtype)
        self._cache: dict[tuple[float, float], tuple] = {}
        self.coefficients(0.0)  # validate (raises for impossible variants) and warm the cache

    @property
    def d(self) -> int:
        return self.problem.d

    @property
    def brownian_channels(self) -> int:
        """``m = d``: one Brownian component per coordinate."""
        return self.problem.d

    def coefficients(self, t: float) -> LinearSDE:
        """The :class:`LinearSDE` in force at time ``t``."""
        return self._entry(float(t))[0]

    def _entry(self, t: float):
        key = (self.eta(t), self.server_lr(t))
        entry = self._cache.get(key)
        if entry is None:
            lin = quadratic_sde_coefficients(self.problem, key[0], self.local_steps, key[1], self.h, self.variant)
            b = lin.diffusion_factor()
            kw = {"dtype": self.dtype_, "device": self.device_}
            diag = not (np.any(lin.A - np.diag(np.diag(lin.A))) or np.any(b - np.diag(np.diag(b))))
            if diag:  # elementwise fast path (diagonal problems)
                negA = torch.as_tensor(-np.diag(lin.A), **kw)
                bias = torch.as_tensor(lin.A @ lin.c, **kw)
                bt = torch.as_tensor(np.diag(b).copy(), **kw)
            else:
                negA = torch.as_tensor(-lin.A.T.copy(), **kw)  # y @ (−Aᵀ)
                bias = torch.as_tensor(lin.A @ lin.c, **kw)
                bt = torch.as_tensor(b.T.copy(), **kw)  # v @ bᵀ
            bfull = torch.as_tensor(b, **kw)
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            entry = self._cache[key] = (lin, diag, negA, bias, bt, bfull)
        return entry

    # ------------------------------------------------------------------ torchsde interface
    def f(self, t, y: torch.Tensor) -> torch.Tensor:
        """Drift ``−A(w − c)``, shape (paths, d)."""
        _, diag, negA, bias, _, _ = self._entry(float(t))
        if diag:
            return torch.addcmul(bias, y, negA)
        return torch.addmm(bias, y, negA)

    def g(self, t, y: torch.Tensor) -> torch.Tensor:
        """Diffusion ``b`` as an expanded (not materialised) view, shape (paths, d, d)."""
        bfull = self._entry(float(t))[5]
        return bfull.expand(y.shape[0], *bfull.shape)

    def g_prod(self, t, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``b v`` for Brownian increments ``v`` of shape (paths, d)."""
        _, diag, _, _, bt, _ = self._entry(float(t))
        if diag:
            return v * bt
        return torch.mm(v, bt)

    def f_and_g_prod(self, t, y: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, diag, negA, bias, bt, _ = self._entry(float(t))
        if diag:
            return torch.addcmul(bias, y, negA), v * bt
        return torch.addmm(bias, y, negA), torch.mm(v, bt)


class FedAvgSDE(torch.nn.Module):
    """Seed 002 eq. (2), ``dw = η₀ M̂(w) dt + η₀ √h V̂^{1/2}(w) dB``, with Monte-Carlo coefficients.

    At each call, from every path's ``w`` the module runs ``K`` independent rounds of local training (all
    clients, ``τ_k`` local SGD steps ``x ← x − η(t)(∇F_k(x) + ξ)`` from ``x = w``) and forms the displacements
    ``Â_j = Σ_k p_k (x_k^{(τ_k)} − w)``, ``j = 1..S``.  Then

        M̂ = (1/K) Σ_j Â_j,     D = [Â_1 − M̂, …, Â_K − M̂] / √K'      (d × K),

    ``f = η₀ M̂`` and ``g = η₀ √h D`` against a ``K``-dimensional Brownian motion, so that ``g gᵀ = h η₀² D Dᵀ``
    with ``D Dᵀ`` the sample covariance of the ``Â_j`` (any square root of ``V̂`` is allowed in eq. (2); this one
    needs no factorisation and works for ``K < d``).

    Estimator and bias (conditionally on ``w``; ``M = E Â``, ``V = Cov Â``):

    * ``M̂`` is unbiased for ``M``.
    * ``estimator="compensated"`` (default): ``K' = K`` (``D Dᵀ`` has mean ``(1 − 1/K) V``).  One Euler–Maruyama
      step of size ``h`` then has conditional mean ``w + s M`` and covariance ``s² V/K + s² (1 − 1/K) V = s² V``:
      exactly the first two moments of eq. (1), for every ``K``.  With ``K = 1`` the step is one FedAvg round.
    * ``estimator="unbiased"``: ``K' = K − 1`` (``D Dᵀ`` unbiased for ``V``); the step's covariance is then
      ``s² V (1 + 1/K)``, an ``O(1/K)`` excess from the noise of ``M̂``.
    * For ``dt = h/k < h`` the drift's Monte-Carlo noise is ``O(dt)`` per step and vanishes as ``k`` grows; the
      ``compensated`` diffusion then has the ``(1 − 1/K)`` bias.
    * The step's noise is a Gaussian mixture (``D`` is random); eq. (2) assumes a Gaussian ``Â`` (Assumption
      3.1), exact for quadratic clients with Gaussian noise.

    Parameters
    ----------
    problem : QuadraticProblem or ClientProblem
    eta : float, array (rounds,), or callable of t
        Client learning rate ``η(t)``.
    local_steps : int or array of int, shape (Q,)
    server_lr : float, array (rounds,), or callable of t
        Actual server step ``s(t) = h·η₀(t)``.
    h : float, optional
        Time step (default: ``eta`` when it is a constant).
    inner_samples : int
        ``K``, rollouts per path and step (the Brownian motion has ``K`` channels).  Cost per step:
        ``paths · K · Σ_k τ_k`` stochastic gradients.
    estimator : {"compensated", "unbiased"}
    seed : int or torch.Generator
        Seed of the rollouts' noise (per block of :data:`~fedsde.clients.streams.BLOCK` paths: chunk-invariant).
    first_block : int
        Global index of the first block of paths (for chunked runs).
    oracle_factory : callable, optional
        ``(problem, nblocks, device, dtype) -> GradientOracle``; default the Gaussian quadratic oracle.
    device, dtype
        Of the state.
    block_size : int, optional
        Paths per random stream (default :data:`~fedsde.clients.streams.BLOCK`);
        :func:`fedsde.sde.integrate.simulate_sde` passes ``min(paths, BLOCK)`` as the simulator does
        (:func:`fedsde.clients.streams.resolve_block_size`), so a run of few paths never computes a padded block.

    Notes
    -----
    Rollouts run on whole blocks of paths (the batch is padded to a multiple of the block size), so a path's
    coefficients do not depend on how many paths are integrated next to it (for the same block size: the block
    size enters the streams' seeds).  The last ``(t, y)`` is cached:
    torchsde's contract check and the first step share one rollout.
    """

    sde_type = "ito"
    noise_type = "general"

    def __init__(
        self,
        problem: QuadraticProblem | ClientProblem,
        eta: RateLike,
        local_steps: int | np.ndarray,
        server_lr: RateLike = 1.0,
        h: float | None = None,
        *,
        inner_samples: int = 16,
        estimator: str = "compensated",
        seed: int | torch.Generator,
        first_block: int = 0,
        oracle_factory: Callable[..., GradientOracle] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        block_size: int | None = None,
    ):
        super().__init__()
        self.block = resolve_block_size(block_size, BLOCK)
        choice("estimator", estimator, ESTIMATORS)
        self.inner_samples = positive_int("inner_samples", inner_samples)
        if estimator == "unbiased" and self.inner_samples < 2:
            raise FedsdeInputError(f"inner_samples={inner_samples}: estimator='unbiased' needs at least 2")
        if oracle_factory is None:
            if not isinstance(problem, QuadraticProblem):
                raise FedsdeInputError(
                    f"oracle_factory: required for a {type(problem).__name__} (only quadratic problems have a default)"
                )
            oracle_factory = GaussianQuadraticOracle
        self.h = _default_h(h, eta)
        self.problem = problem
        self.estimator = estimator
        self.steps = client_steps("local_steps", local_steps, problem.Q)
        self.eta = as_schedule("eta", eta, self.h)
        self.server_lr = as_schedule("server_lr", server_lr, self.h)
        self.seed = resolve_seed(seed)
        self.first_block = int(first_block)
        self.oracle_factory = oracle_factory
        self.device_, self.dtype_ = device_dtype(device, dtype)
        self._p = torch.as_tensor(np.asarray(problem.p, dtype=np.float64), dtype=self.dtype_, device=self.device_)
        self._limits = step_limits(self.steps, device=self.device_)  # None when all clients run the same steps
        self._nb = -1
        self._oracle = None
        self._streams = None
        self._last = None  # (y, (t, version), mean (R, d), D (R, K, d))
        self._groups: dict[tuple[int, int], ReplicateStreams] = {}  # (block, first k) → streams, grouped rollouts
        self._group_oracles: dict[int, GradientOracle] = {}

    @property
    def d(self) -> int:
        return int(self.problem.d)

    @property
    def S(self) -> int:
        """Old name of :attr:`inner_samples` (goes away in the next release)."""
        import warnings

        warnings.warn("FedAvgSDE.S is the old name of FedAvgSDE.inner_samples", DeprecationWarning, stacklevel=2)
        return self.inner_samples

    @property
    def brownian_channels(self) -> int:
        """``m = K``: one Brownian component per inner sample."""
        return self.inner_samples

    def _setup(self, nb: int) -> None:
        if nb != self._nb:
            nbi = nb * self.inner_samples
            self._oracle = self.oracle_factory(self.problem, nbi, self.device_, self.dtype_)
            self._streams = ReplicateStreams(self.seed, self.first_block * self.inner_samples, nbi, self.device_,
                                             _INNER, self.block)
            self._nb = nb

    def rollouts(self, t: float, y: torch.Tensor) -> torch.Tensor:
        """Displacements ``Â_j(w)`` of ``K`` independent rounds from every path, shape (paths, K, d)."""
        R, d = y.shape
        B = self.block
        nb = -(-R // B)
        self._setup(nb)
        K, Q = self.inner_samples, self.problem.Q
        if nb * B != R:
            y = torch.cat([y, y.new_zeros((nb * B - R, d))])
        group = rollout_group(K, Q, B, d, self.dtype_, self.device_)
        if group < K:  # a block's K rollouts do not fit at once: a few at a time (the same numbers for any chunking)
            return self._grouped(t, y, nb, group)[:R]
        wb = y.view(nb, 1, 1, B, d)
        x = wb.expand(nb, K, Q, B, d).contiguous().view(nb * K, Q, B, d)
        run_local_steps(x=x, oracle=self._oracle, streams=self._streams, eta=self.eta(t),
                        n_steps=int(self.steps.max()), local_steps=self._limits)
        disp = x.view(nb, K, Q, B, d).sub_(wb)  # in place: the displacements, no second copy
        A = torch.einsum("q,nsqbd->nbsd", self._p, disp)  # (nb, B, K, d)
        return A.reshape(nb * B, K, d)[:R]

    def _grouped(self, t: float, y: torch.Tensor, nb: int, group: int) -> torch.Tensor:
        """:meth:`rollouts` of ``group`` inner samples of one block at a time (rollout ``k`` of block ``b`` draws from
        stream ``(first_block + b)·K + k`` as in one pass); ``Σ_k p_k`` summed client by client, elementwise, so that
        a path's numbers do not depend on how many paths run beside it.  Paths (padded to whole blocks), K, d."""
        K, Q, B, d = self.inner_samples, self.problem.Q, self.block, y.shape[1]
        A = y.new_empty((nb, B, K, d))
        for b in range(nb):
            wb = y[b * B:(b + 1) * B].view(1, 1, B, d)
            for k0 in range(0, K, group):
                n = min(group, K - k0)
                key = (self.first_block + b, k0)
                if key not in self._groups:
                    self._groups[key] = ReplicateStreams(self.seed, (self.first_block + b) * K + k0, n, self.device_,
                                                         _INNER, self.block)
                if n not in self._group_oracles:
                    self._group_oracles[n] = self.oracle_factory(self.problem, n, self.device_, self.dtype_)
                x = wb.expand(n, Q, B, d).contiguous()
                run_local_steps(x=x, oracle=self._group_oracles[n], streams=self._groups[key], eta=self.eta(t),
                                n_steps=int(self.steps.max()), local_steps=self._limits)
                x.sub_(wb)
                acc = x[:, 0] * self._p[0]
                for q in range(1, Q):
                    acc.add_(x[:, q] * self._p[q])
                A[b, :, k0:k0 + n] = acc.transpose(0, 1)
                del x
        return A.reshape(nb * B, K, d)

    def moments(self, t, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``M̂`` (paths, d) and the factor ``D`` (paths, K, d) at ``(t, y)`` (cached for the last pair)."""
        key = (float(t), y._version)
        if self._last is not None and self._last[0] is y and self._last[1] == key:
            return self._last[2], self._last[3]
        A = self.rollouts(float(t), y)
        mean = A.mean(dim=1)
        denom = self.inner_samples if self.estimator == "compensated" else self.inner_samples - 1
        D = (A - mean.unsqueeze(1)) / math.sqrt(denom)
        self._last = (y, key, mean, D)  # holding y keeps the identity check sound
        return mean, D

    def _rates(self, t: float) -> tuple[float, float]:
        eta0 = self.server_lr(t) / self.h
        return eta0, eta0 * math.sqrt(self.h)

    # ------------------------------------------------------------------ torchsde interface
    def f(self, t, y: torch.Tensor) -> torch.Tensor:
        """Drift ``η₀ M̂(w)``, shape (paths, d)."""
        mean, _ = self.moments(t, y)
        return mean * self._rates(float(t))[0]

    def g(self, t, y: torch.Tensor) -> torch.Tensor:
        """Diffusion ``η₀ √h D``, shape (paths, d, S) (materialised; solvers use :meth:`g_prod`)."""
        _, D = self.moments(t, y)
        return D.transpose(1, 2) * self._rates(float(t))[1]

    def g_prod(self, t, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``η₀ √h D v`` for increments ``v`` of shape (paths, S)."""
        _, D = self.moments(t, y)
        return torch.bmm(v.unsqueeze(1), D).squeeze(1) * self._rates(float(t))[1]

    def f_and_g_prod(self, t, y: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, D = self.moments(t, y)
        eta0, gscale = self._rates(float(t))
        return mean * eta0, torch.bmm(v.unsqueeze(1), D).squeeze(1).mul_(gscale)
