"""The order-2 SDE of FedAvg where it is linear or has closed moments: quadratic and least-squares clients.

The quadratic forms' numbers live with the other variants in :mod:`fedsde.sde.coefficients` (their one numeric
home: :func:`~fedsde.sde.coefficients.order2_sde_coefficients`, re-exported here).  The order-2 weak approximation
(derived in :mod:`fedsde.symbolic.order2`, theory/derivations_order2.md) matches one
round's conditional mean to ``O(η³)`` and covariance to ``O(η⁴)`` on the clock ``t = n·h`` (``s`` fixed, ``h/η``
fixed; seed 002, Section 6: ``h = η``, ``s = 1``).  On quadratic clients it is an Ornstein–Uhlenbeck process
``dw = −A(w − c) dt + D^{1/2} dB``, returned as a :class:`~fedsde.sde.coefficients.LinearSDE` (exact transitions by
:meth:`~fedsde.sde.coefficients.LinearSDE.transition`), in three forms (per-client ``τ_k``; ``M₁ = Σ_k p_kτ_kU_k``,
``M₂ = Σ_k p_k τ_k(τ_k−1)/2 U_k²``, ``Σ̄ = Σ_k p_k²τ_kΣ_k``):

``"round-law"`` (variant name ``"order2"``; what the command line uses)
    The second-order truncations in ``sB`` of the exact round law (:func:`fedsde.exact.round_law`: ``B``, ``c``,
    ``Cov ε``): ``A = (s/h)(B + sB²/2)`` (of ``−ln(I − sB)/h``) and ``D = (s²/h)(Cov ε + (s/2)(B Cov ε + Cov ε B))``
    around the chain's exact fixed point ``c``.  It inherits the round law's saturation (``B`` stays bounded however
    stiff a client, ``I − (I − ηU_k)^E → I``), and its stationary mean is exact.  Its third-order remainder is
    ``(sB)³/3`` with ``sB ≈ sηEU``: at small ``ηE`` its error constant is ``E²`` times the series'.
``"centred"`` (variant name ``"order2-centred"``)
    The series' ``A`` and ``D`` (below) around the exact ``c``: the drifts differ by ``A(c − c_series) = O(η²)`` per
    unit time, within the order.  The smallest errors while every client is in its asymptotic regime
    (``ηEλ_max(U_k)`` small); a truncated series, it is off once a stiff client's local steps saturate.
``"series"`` (variant name ``"order2-series"``)
    The general drift and diffusion with ``∇f_k = U_k(w − a_k)``, ``∇²f_k = U_k``, constant ``Σ_k``:
    ``A = (1/h)[sηM₁ − sη²M₂ + (sη)²M₁²/2]``, ``b(w) = −(1/h)[sη Σ_k p_kτ_kU_k(w − a_k) − sη² Σ_k p_k
    τ_k(τ_k−1)/2 U_k²(w − a_k) + (sη)²/2 M₁ Σ_k p_kτ_kU_k(w − a_k)] = −A(w − c_series)``, ``D = (s²η²/h)[Σ̄ −
    η Σ_k p_k² τ_k(τ_k−1)/2 (U_kΣ_k + Σ_kU_k) + (sη/2)(M₁Σ̄ + Σ̄M₁)]``.  What the Hessian-vector-product drift of
    :mod:`fedsde.sde.order2_general` computes on a quadratic loss.  Its centre ``c_series`` differs from the chain's
    stationary mean ``c`` by ``O(η²)``.

Measured (docs/order2.md): at small ``ηE`` the largest W2 distance to the chain over the transient is about 7 times
smaller for ``series`` and ``centred`` than for ``round-law``; over the validity maps (tolerance 0.05) ``centred``
tracks furthest on problems whose clients have similar curvatures, but on Grunfeld (one client 10 to 40 times
stiffer than the others) it tracks *less* far than the first-order SDE for ``E >= 2``, while ``round-law``'s region
contains the first-order SDE's on every problem measured.  Hence the command line's choice.

On least-squares clients (:func:`least_squares_order2_sde`) the round's mean is affine and its covariance quadratic
in ``w`` (:mod:`fedsde.exact.least_squares_sde`), and the order-2 SDE keeps that structure: a drift matrix ``G₂``
around the chain's fixed point ``m*`` (``"round-law"``: ``G − (h/2)G²`` from the first-order ``G``; ``"centred"``:
``−A`` of the series with the client Hessians ``H_k`` in place of ``U_k``) and the diffusion operator
``K₂ = K − (h/2)[(G ⊕ G)K + K(G̃ ⊕ G̃)]`` (``G̃ = diag(G, 0)`` acts on ``(w − m*, 1)``; ``⊕`` the Kronecker sum): the
one-step covariance of ``dw = b dt + σ dB`` is ``hD + (h²/2)[GD + DGᵀ + (b·∇)D] + O(h³)``, so
``D₂ = D − (h/2)[GD + DGᵀ + (b·∇)D]`` reproduces the round's covariance to ``O(h³)``; on constant noise it is the
``"round-law"`` diffusion above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._validate import choice, client_steps
from fedsde.exact.least_squares_sde import LeastSquaresSDE, least_squares_sde
from fedsde.params.refinement import ORDERS  # noqa: F401 (the approximation orders the commands offer)
from fedsde.sde.coefficients import ORDER2_FORMS, order2_sde_coefficients  # noqa: F401 (their home: coefficients)

#: variant name → form
FORM_OF = {v: k for k, v in ORDER2_FORMS.items()}
#: the form the command line uses (docs/order2.md: its validity region contains the first-order SDE's wherever measured)
DEFAULT_FORM = "round-law"


@dataclass(frozen=True)
class LeastSquaresOrder2SDE(LeastSquaresSDE):
    """The order-2 SDE of least-squares clients (module docstring): a :class:`~fedsde.exact.LeastSquaresSDE` with
    drift matrix ``G₂`` (``drift2``; ``None``: the round-law form ``G − (h/2)G²``) and diffusion operator ``K₂``; its
    moments, stationary law and generator are the parent's."""

    drift2: np.ndarray | None = field(default=None, repr=False)

    @property
    def drift_matrix(self) -> np.ndarray:
        """``G₂``, shape (d, d)."""
        if self.drift2 is not None:
            return self.drift2
        G = self._first_order_drift()
        return G - 0.5 * self.h * G @ G

    def _first_order_drift(self) -> np.ndarray:
        d = self.d
        return self.law.L[:d, :d] / self.h

    def _blocks(self) -> tuple[np.ndarray, np.ndarray]:
        d = self.d
        if "K" not in self._cache:
            G = self._first_order_drift()
            K = self.law.noise_operator() / self.h
            Gt = np.zeros((d + 1, d + 1))
            Gt[:d, :d] = G
            left = np.kron(G, np.eye(d)) + np.kron(np.eye(d), G)
            right = np.kron(Gt, np.eye(d + 1)) + np.kron(np.eye(d + 1), Gt)
            self._cache["K"] = K - 0.5 * self.h * (left @ K + K @ right)
        G2 = self.drift_matrix
        return self._cache["K"], np.kron(G2, np.eye(d)) + np.kron(np.eye(d), G2)

    def diffusion_operator(self) -> np.ndarray:
        return self._blocks()[0]


#: the order-2 forms on least-squares clients
LEAST_SQUARES_FORMS = ("round-law", "centred")


def least_squares_order2_sde(problem, eta: float, local_steps, server_lr: float = 1.0, h: float | None = None,
                             form: str = DEFAULT_FORM) -> LeastSquaresOrder2SDE:
    """The order-2 SDE of a :class:`~fedsde.problems.RegressionProblem` (full participation, weights ``p``; module
    docstring)."""
    choice("form", form, LEAST_SQUARES_FORMS)
    first = least_squares_sde(problem, eta, local_steps, server_lr, h)
    drift2 = None
    if form == "centred":
        steps = client_steps("local_steps", local_steps, problem.Q).astype(np.float64)
        Hk = np.asarray(problem.client_hessian(), dtype=np.float64)
        p, s, e = np.asarray(problem.p, dtype=np.float64), float(server_lr), float(eta)
        M1 = np.einsum("q,qij->ij", p * steps, Hk)
        M2 = np.einsum("q,qij->ij", p * steps * (steps - 1) / 2, Hk @ Hk)
        drift2 = -(s * e * M1 - s * e**2 * M2 + 0.5 * (s * e) ** 2 * M1 @ M1) / first.h
    return LeastSquaresOrder2SDE(law=first.law, h=first.h, drift2=drift2)
