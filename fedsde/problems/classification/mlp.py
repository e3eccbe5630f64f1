"""A one-hidden-layer tanh network (``model="mlp"`` of
:class:`~fedsde.problems.classification.problem.ClassificationProblem`): the NumPy code behind
:class:`~fedsde.problems.classification.models.MLPModel`.

For a design row ``x̃ = (x, 1)`` (``n_features = F + 1`` entries) and ``H`` hidden units:

    a = tanh(x̃ W₁),   z = (a, 1) W₂,   ℓ = logsumexp(z) − z_y,

with ``W₁`` of shape ``(n_features, H)`` (its last row is the hidden bias) and ``W₂`` of shape ``(H + 1, C)`` (its
last row is the output bias).  **Layout of the parameter vector** ``w`` (length ``d = n_features·H + (H + 1)·C``):

    w = [ vec(W₁) (row-major, n_features·H entries) , vec(W₂) (row-major, (H + 1)·C entries) ].

Gradients (backpropagation) for residuals ``e = softmax(z) − e_y`` (already multiplied by sample weights):

    ∂/∂W₂ = (a, 1)ᵀ e,   δ = (e W₂[:H]ᵀ) ⊙ (1 − a²),   ∂/∂W₁ = x̃ᵀ δ.

Initialisation (:func:`init_weights`): Glorot/Xavier normal weights ``N(0, 2/(fan_in + fan_out))`` and zero
biases, from a seed.  Zero weights are a degenerate start for this model (the hidden layer never learns: the
gradient of ``W₁`` vanishes while ``W₂[:H] = 0`` and that of ``W₂[:H]`` vanishes while ``a = 0``).

All functions take ``w`` with leading batch axes ``(..., d)`` and are vectorised over them.  :func:`forward_torch`
and :func:`backward_torch` are the same passes in torch for ``m`` weight vectors at once (one batched matrix
product per layer, see :mod:`fedsde.problems.classification.torch_models`).
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from fedsde._compat import renamed


def n_params(n_features: int, hidden: int, n_classes: int) -> int:
    """``d = n_features·H + (H + 1)·C``."""
    return n_features * hidden + (hidden + 1) * n_classes


def unpack(w: np.ndarray, n_features: int, hidden: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``W₁`` (..., n_features, H) and ``W₂`` (..., H + 1, C) as views of ``w`` (..., d)."""
    w = np.asarray(w, dtype=np.float64)
    cut = n_features * hidden
    lead = w.shape[:-1]
    return (w[..., :cut].reshape(*lead, n_features, hidden),
            w[..., cut:].reshape(*lead, hidden + 1, n_classes))


def forward(w: np.ndarray, Xd: np.ndarray, n_features: int, hidden: int, n_classes: int):
    """Hidden activations ``a`` (..., n, H) and logits ``z`` (..., n, C) for design rows ``Xd`` (n, n_features)."""
    W1, W2 = unpack(w, n_features, hidden, n_classes)
    A = np.tanh(np.einsum("nf,...fh->...nh", Xd, W1))
    Z = A @ W2[..., :hidden, :] + W2[..., hidden:, :]
    return A, Z


@renamed(E="resid")
def backward(w: np.ndarray, Xd: np.ndarray, A: np.ndarray, resid: np.ndarray, n_features: int, hidden: int,
             n_classes: int) -> np.ndarray:
    """``Σ_n ∇_w ℓ_n`` for residuals ``resid`` (..., n, C) (weights already applied), shape (..., d)."""
    _, W2 = unpack(w, n_features, hidden, n_classes)
    g2 = np.concatenate([np.swapaxes(A, -1, -2) @ resid, resid.sum(-2, keepdims=True)], axis=-2)  # (..., H+1, C)
    D = (resid @ np.swapaxes(W2[..., :hidden, :], -1, -2)) * (1.0 - A * A)  # (..., n, H)
    g1 = np.einsum("nf,...nh->...fh", Xd, D)
    lead = g1.shape[:-2]
    return np.concatenate([g1.reshape(*lead, -1), g2.reshape(*lead, -1)], axis=-1)


@renamed(E="resid")
def per_sample_grads(w: np.ndarray, Xd: np.ndarray, resid: np.ndarray, n_features: int, hidden: int,
                     n_classes: int) -> np.ndarray:
    """``∇_w ℓ_n`` of every sample, shape (n, d), for one ``w`` (d,) and residuals ``resid`` (n, C)."""
    W1, W2 = unpack(w, n_features, hidden, n_classes)
    A = np.tanh(Xd @ W1)
    D = (resid @ W2[:hidden].T) * (1.0 - A * A)
    A1 = np.hstack([A, np.ones((A.shape[0], 1))])
    g1 = (Xd[:, :, None] * D[:, None, :]).reshape(Xd.shape[0], -1)
    g2 = (A1[:, :, None] * resid[:, None, :]).reshape(Xd.shape[0], -1)
    return np.hstack([g1, g2])


def forward_torch(w, Xd, n_features: int, hidden: int, n_classes: int):
    """:func:`forward` in torch: hidden activations (..., n, H) and logits (..., n, C) for weights ``w`` (..., d) and
    design rows ``Xd`` (n, n_features), tensors on one device."""
    import torch

    from fedsde.problems.classification.torch_models import bmm, shared_rows

    lead, n = w.shape[:-1], Xd.shape[0]
    W = w.reshape(-1, n_params(n_features, hidden, n_classes))
    m, cut = W.shape[0], n_features * hidden
    A = torch.tanh(bmm(shared_rows(Xd, m), W[:, :cut].reshape(m, n_features, hidden)))  # (m, n, H)
    W2 = W[:, cut:].reshape(m, hidden + 1, n_classes)
    Z = torch.baddbmm(W2[:, hidden:], A, W2[:, :hidden])  # (m, n, C)
    return A.reshape(*lead, n, hidden), Z.reshape(*lead, n, n_classes)


@renamed(E="resid")
def backward_torch(w, Xd, A, resid, n_features: int, hidden: int, n_classes: int):
    """:func:`backward` in torch: ``Σ_n ∇_w ℓ_n`` for residuals ``resid`` (..., n, C) (weights applied), shape
    (..., d)."""
    import torch

    from fedsde.problems.classification.torch_models import bmm, shared_rows

    lead, n = resid.shape[:-2], resid.shape[-2]
    d = n_params(n_features, hidden, n_classes)
    W = w.reshape(-1, d)
    m, cut = W.shape[0], n_features * hidden
    A3, res3 = A.reshape(m, n, hidden), resid.reshape(m, n, n_classes)
    W2h = W[:, cut:].reshape(m, hidden + 1, n_classes)[:, :hidden]
    g2 = torch.cat([torch.bmm(A3.transpose(1, 2), res3), res3.sum(1, keepdim=True)], dim=1)  # (m, H+1, C)
    D = torch.ops.aten.tanh_backward(bmm(res3, W2h.transpose(1, 2)), A3)  # (e W₂ᵀ) ⊙ (1 − a²), (m, n, H)
    g1 = bmm(shared_rows(Xd.T, m), D)  # (m, F, H)
    return torch.cat([g1.reshape(m, cut), g2.reshape(m, -1)], dim=1).reshape(*lead, d)


def residuals(Z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``softmax(z) − e_y``, shape of ``Z`` (..., n, C)."""
    R = softmax(Z, axis=-1)
    R[..., np.arange(y.size), y] -= 1.0
    return R


def init_weights(n_features: int, hidden: int, n_classes: int, seed: int, *, intercept: bool = True) -> np.ndarray:
    """Glorot-normal weights with zero biases (see the module docstring), shape (d,).

    ``intercept``: whether the last design column is the constant 1 (then the last row of ``W₁`` is a bias).
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x6D6C70]))
    F, H, C = n_features, hidden, n_classes
    W1 = rng.standard_normal((F, H)) * np.sqrt(2.0 / (F - int(intercept) + H))
    if intercept:
        W1[-1] = 0.0  # hidden bias
    W2 = rng.standard_normal((H + 1, C)) * np.sqrt(2.0 / (H + C))
    W2[-1] = 0.0  # output bias
    return np.concatenate([W1.reshape(-1), W2.reshape(-1)])
