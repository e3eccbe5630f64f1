"""A server rule's round under client sampling: the law of its weights and the sampling term of its SDE's diffusion.

The simulator draws the round's participation weights ``W`` (shape (Q,), zero off the sample;
:mod:`fedsde.sim.participation`): ``"unbiased"`` — a uniform ``m``-subset ``S`` without replacement, ``W_k =
p_k Q/m`` on ``S``; ``"renormalised"`` — the same subsets, ``W_k = p_k/Σ_{j∈S} p_j``; ``"multinomial"`` — ``m`` draws
with replacement ``∝ p``, ``W_k = c_k/m`` (``c_k`` draws of client ``k``, who trains once).  The rule's SDE weights
are ``ω = ω(W)`` (:class:`~fedsde.aggregators.sde_forms.SampledWeights`: ``ω_k = scale_k W_k`` or
``scale_k W_k ⟨inner, W⟩``, FedNova's ``τ_eff``).  With ``μ = E ω`` and ``K = E ωωᵀ``, the round's step
``U = Σ_k ω_k Δ_k`` on quadratic clients (``E Δ_k = −M_k(w − a_k)``, ``Cov Δ_k = η²Γ_k``, independent of ``S``)
has, by total expectation and covariance over ``S`` (seed 003 §1.8 for the schemes; the FedAvg case is
:meth:`fedsde.exact.RoundLaw.step`),

    E U = −B(w − c),            B = Σ_k μ_k M_k,   c = B⁻¹ Σ_k μ_k M_k a_k,
    Cov U = N₀ + Σ_kl C_kl M_k (w − a_k)(w − a_l)ᵀ M_lᵀ,   N₀ = η² Σ_k K_kk Γ_k,   C = K − μμᵀ,

so the rule's SDE (seed 002 eq. (2) with these moments) has the OU drift of full participation with ``μ`` for
``ω`` and a diffusion quadratic in ``w``: ``(s²/h)·Cov U(w)`` (:class:`SamplingTerm` holds ``C``, ``M``, ``a``).

**The law of ω.**  Closed forms from the moments of ``W`` (``inner`` needs them to fourth order):

* unbiased: ``W_k = α_k I_k`` with ``α = pQ/m`` and ``E Π_{j∈J} I_j = (m)_r/(Q)_r`` for ``r`` distinct clients
  (falling factorials: the chance that ``r`` given clients are all among the ``m``);
* multinomial: ``W = m⁻¹ Σ_t e_{X_t}`` with ``m`` independent draws ``X_t ∝ p``: a product of ``n`` linear
  functionals of ``W`` is ``m⁻ⁿ Σ_π (m)_{|π|} Π_{B∈π} E[Π_{r∈B} f_r(X)]`` over the set partitions ``π`` of the
  ``n`` factors (the draws that coincide);
* renormalised with equal ``p``: ``W = I/m``, the unbiased scheme's law; with unequal ``p`` no closed form, so the
  ``C(Q, m)`` subsets are enumerated (up to :data:`ENUMERATION_LIMIT`, else refused in one line).

Without sampling (``m`` None, or ``m = Q`` not multinomial) ``ω = ω(p)`` and ``C = 0``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from fedsde._validate import choice, positive_int
from fedsde.aggregators.sde_forms import SampledWeights
from fedsde.errors import FedsdeInputError
from fedsde.exact.round_law import RoundLaw
from fedsde.sim.participation import WEIGHTINGS, is_sampled

#: most subsets enumerated for the renormalised scheme with unequal client weights
ENUMERATION_LIMIT = 200_000


def _falling(m: int, r: int) -> float:
    """``(m)_r = m (m − 1) … (m − r + 1)`` as a float (0 when ``r > m``)."""
    return float(math.prod(range(m - r + 1, m + 1))) if r <= m else 0.0


def _unbiased_moments(alpha: np.ndarray, m: int, Q: int, v: np.ndarray | None):
    """``E W``, ``E WWᵀ`` and, with ``v``, ``E W⟨v, W⟩`` and ``E WWᵀ⟨v, W⟩²`` for ``W = α ∘ I`` (module docstring)."""
    pi = [_falling(m, r) / _falling(Q, r) if r <= m else 0.0 for r in range(5)]
    first = alpha * pi[1]
    second = np.outer(alpha, alpha) * pi[2]
    np.fill_diagonal(second, alpha * alpha * pi[1])
    if v is None:
        return first, second, None, None
    b = v * alpha
    S, Sq = b.sum(), (b * b).sum()
    bk, bl = b[:, None], b[None, :]
    be, sqe = bk + bl, bk * bk + bl * bl  # pairs k ≠ l: the two clients' b and b²
    four = (be * be * pi[2] + 2.0 * be * (S - be) * pi[3] + (Sq - sqe) * pi[3]
            + ((S - be) ** 2 - (Sq - sqe)) * pi[4])
    b1 = b
    diag = (b1 * b1 * pi[1] + 2.0 * b1 * (S - b1) * pi[2] + (Sq - b1 * b1) * pi[2]
            + ((S - b1) ** 2 - (Sq - b1 * b1)) * pi[3])
    np.fill_diagonal(four, diag)
    return first, second, second @ v, np.outer(alpha, alpha) * four


def _partitions(items: list):
    """Every set partition of ``items`` (lists of blocks)."""
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[head], *part]
        for i in range(len(part)):
            yield [*part[:i], [head, *part[i]], *part[i + 1:]]


def _multinomial_expect(p: np.ndarray, m: int, roles: list) -> np.ndarray:
    """``E Π_r ⟨f_r, W⟩`` for ``W = m⁻¹ Σ_t e_{X_t}``: a role is ``"k"``/``"l"`` (the indicator of client ``k`` or
    ``l``, the result's axes (Q, Q)) or a vector ``v`` (module docstring); shape (Q, Q)."""
    n, Q = len(roles), p.shape[0]
    total = np.zeros((Q, Q))
    for part in _partitions(list(range(n))):
        term = np.full((Q, Q), _falling(m, len(part)) / float(m) ** n)
        for block in part:
            vprod = np.ones(Q)
            for r in block:
                if not isinstance(roles[r], str):
                    vprod = vprod * roles[r]
            has_k = any(isinstance(roles[r], str) and roles[r] == "k" for r in block)
            has_l = any(isinstance(roles[r], str) and roles[r] == "l" for r in block)
            if has_k and has_l:
                term = term * np.diag(p * vprod)
            elif has_k:
                term = term * (p * vprod)[:, None]
            elif has_l:
                term = term * (p * vprod)[None, :]
            else:
                term = term * float(np.sum(p * vprod))
        total += term
    return total


def _enumerated(form: SampledWeights, p: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``(E ω, E ωωᵀ)`` of the renormalised scheme over all ``C(Q, m)`` subsets (equally likely)."""
    Q = p.shape[0]
    mu, K = np.zeros(Q), np.zeros((Q, Q))
    count = math.comb(Q, m)
    subsets = itertools.combinations(range(Q), m)
    while True:
        chunk = np.array(list(itertools.islice(subsets, 20_000)), dtype=np.int64).reshape(-1, m)
        if chunk.shape[0] == 0:
            break
        W = np.zeros((chunk.shape[0], Q))
        np.put_along_axis(W, chunk, p[chunk], axis=1)
        W /= W.sum(1, keepdims=True)
        om = form(W)
        mu += om.sum(0) / count
        K += om.T @ om / count
    return mu, K


def weight_moments(form: SampledWeights, p, participation: int | None, weighting: str = "unbiased"
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(μ, K) = (E ω, E ωωᵀ)`` of a rule's SDE weights under a participation scheme (module docstring).

    Parameters
    ----------
    form : SampledWeights
        ``ω`` as a function of the participation weights ``W``.
    p : array, shape (Q,)
        Client weights (summing to one).
    participation : int or None
        ``m`` clients (draws) per round; ``None``: all.
    weighting : {"unbiased", "renormalised", "multinomial"}

    Returns
    -------
    mu : ndarray, shape (Q,)
    K : ndarray, shape (Q, Q)
    """
    p = np.asarray(p, dtype=np.float64)
    Q = p.shape[0]
    choice("weighting", weighting, WEIGHTINGS)
    if participation is not None:
        participation = positive_int("participation", participation)
        if participation > Q and weighting != "multinomial":
            raise FedsdeInputError(f"participation={participation}: cannot sample more clients than there are "
                                   f"(Q={Q}) without replacement")
    if not is_sampled(participation, Q, weighting):
        om = form(p)
        return om, np.outer(om, om)
    m, v, sc = int(participation), form.inner, form.scale
    if weighting == "renormalised" and np.ptp(p) > 1e-12 * float(p.max()):
        if math.comb(Q, m) > ENUMERATION_LIMIT:
            raise FedsdeInputError(
                f"participation={m}, weighting='renormalised': with unequal client weights the law of the weights "
                f"p_k/Σ_S p_j has no closed form and the C({Q}, {m}) = {math.comb(Q, m)} subsets exceed "
                f"{ENUMERATION_LIMIT} to enumerate; use weighting='unbiased' or 'multinomial', or equal weights")
        return _enumerated(form, p, m)
    if weighting == "multinomial":
        first = _multinomial_expect(p, m, ["k"])[:, 0]
        second = _multinomial_expect(p, m, ["k", "l"])
        third = None if v is None else _multinomial_expect(p, m, ["k", v])[:, 0]
        fourth = None if v is None else _multinomial_expect(p, m, ["k", "l", v, v])
    else:  # unbiased, or renormalised with equal weights (W = I/m: the same law)
        alpha = p * Q / m if weighting == "unbiased" else np.full(Q, 1.0 / m)
        first, second, third, fourth = _unbiased_moments(alpha, m, Q, v)
    if v is None:
        return sc * first, np.outer(sc, sc) * second
    return sc * third, np.outer(sc, sc) * fourth


@dataclass(frozen=True)
class SamplingTerm:
    """``Cov_S E[U | S, w] = Σ_kl C_kl M_k (w − a_k)(w − a_l)ᵀ M_lᵀ``: the between-sample part of the round's
    covariance (module docstring).

    Attributes
    ----------
    C : ndarray, shape (Q, Q)
        ``Cov ω`` (positive semi-definite).
    M : ndarray, shape (Q, d, d)
        The clients' mean maps ``M_k``.
    a : ndarray, shape (Q, d)
        Client minimisers.
    participation : int
    weighting : str
    """

    C: np.ndarray
    M: np.ndarray = field(repr=False)
    a: np.ndarray = field(repr=False)
    participation: int = 0
    weighting: str = "unbiased"

    @property
    def root(self) -> np.ndarray:
        """``L`` (Q, Q) with ``L Lᵀ = C`` (symmetric square root)."""
        lam, V = np.linalg.eigh(0.5 * (self.C + self.C.T))
        return (V * np.sqrt(np.clip(lam, 0.0, None))) @ V.T

    def mixed(self) -> np.ndarray:
        """``N_j = Σ_k L_kj M_k`` (Q, d, d): ``Σ_kl C_kl M_k P M_lᵀ = Σ_j N_j P N_jᵀ``."""
        return np.einsum("kj,kab->jab", self.root, self.M)

    def factor(self, w: np.ndarray) -> np.ndarray:
        """``Y(w) L`` (..., d, Q) with ``Y(w) = [M_k (w − a_k)]_k``: the term is ``(Y L)(Y L)ᵀ``."""
        Y = np.einsum("kab,...kb->...ak", self.M, np.asarray(w, dtype=np.float64)[..., None, :] - self.a)
        return Y @ self.root

    def at(self, w: np.ndarray) -> np.ndarray:
        """The term at the points ``w`` (..., d), shape (..., d, d)."""
        F = self.factor(w)
        return F @ np.swapaxes(F, -1, -2)

    def expected(self, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
        """``E`` of the term for ``w`` with the given mean (d,) and covariance (d, d) (any law), shape (d, d)."""
        N = self.mixed()
        out = np.einsum("jab,bc,jdc->ad", N, cov, N) + self.at(mean)
        return 0.5 * (out + out.T)

    def operator(self) -> np.ndarray:
        """Matrix of ``P ↦ Σ_kl C_kl M_k P M_lᵀ`` on row-major ``vec(P)``, shape (d², d²)."""
        N = self.mixed()
        d = N.shape[1]
        return np.einsum("jab,jcd->acbd", N, N).reshape(d * d, d * d)


@dataclass(frozen=True)
class SampledRoundLaw(RoundLaw):
    """The exact law of a rule's linear step under client sampling: :class:`~fedsde.exact.round_law.RoundLaw` with
    ``p = μ`` (so ``B``, ``Ba``, ``c`` are the mean's), ``noise_cov = N₀`` (the clients' own noise, averaged over the
    samples) and the between-sample term ``sampling`` (module docstring); the round's covariance at ``w`` is
    ``noise_cov + sampling.at(w)`` (:meth:`noise_at`)."""

    sampling: SamplingTerm | None = None

    def noise_at(self, mean: np.ndarray, cov: np.ndarray | None = None) -> np.ndarray:
        """``E Cov U`` for ``w`` of the given mean and covariance (a point when ``cov`` is None), shape (d, d)."""
        cov = np.zeros((self.d, self.d)) if cov is None else cov
        return self.noise_cov + self.sampling.expected(np.asarray(mean, dtype=np.float64), cov)

    def step(self, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance after one round (``w' = w + sU``): ``A m + sBc`` and ``A P Aᵀ + s² E Cov U``."""
        A, s = self.transition, self.server_lr
        P = A @ cov @ A.T + s * s * self.noise_at(mean, cov)
        return A @ mean + s * self.Ba, 0.5 * (P + P.T)

    def second_moment_map(self, P: np.ndarray) -> np.ndarray:
        """The homogeneous part of :meth:`step`'s covariance map, ``P ↦ A P Aᵀ + s² Σ_kl C_kl M_k P M_lᵀ``."""
        A, N = self.transition, self.sampling.mixed()
        return A @ P @ A.T + self.server_lr**2 * np.einsum("jab,bc,jdc->ad", N, P, N)

    def second_moment_operator(self) -> np.ndarray:
        """Matrix of :meth:`second_moment_map` on row-major ``vec(P)``, shape (d², d²)."""
        A = self.transition
        return np.kron(A, A) + self.server_lr**2 * self.sampling.operator()


__all__ = ["ENUMERATION_LIMIT", "SampledRoundLaw", "SamplingTerm", "weight_moments"]
