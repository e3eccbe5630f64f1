"""Torch forward and backward passes of the linear classification models (:mod:`fedsde.problems.classification.models`)
and the output layers shared with the MLP, for a batch of weight vectors on the device and dtype of the weights.

The formulas, shapes and sign conventions are those of the NumPy code (weights ``w`` (..., d), design rows ``Xd``
(n, F), logits and residuals (..., n, K)).  Each weight vector's layer is its own matrix product of one batched
product (``torch.bmm`` over the weight vectors, with the design rows shared, not copied): a weight's values do not
depend on which other weights are evaluated with it, nor on its position among them (one wide product
``Xd @ [W⁽¹⁾ … W⁽ᵐ⁾]`` is about 1.3 times faster on the CPU, but its last columns round differently).  The MLP's
torch passes are in :mod:`fedsde.problems.classification.mlp` next to its NumPy ones.

The model classes call these functions when they are handed tensors
(:func:`fedsde.problems.classification.models.is_tensor`); labels ``y`` are then integer tensors.
"""

from __future__ import annotations

import torch

from fedsde._compat import renamed


def shared_rows(Xd: torch.Tensor, m: int) -> torch.Tensor:
    """``Xd`` (n, F) seen ``m`` times, shape (m, n, F) (a stride-0 view: no copy)."""
    return Xd.expand(m, *Xd.shape)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm``, one product per batch entry also when ``b`` has one column (torch folds such a batch into one
    product, whose rounding then depends on the batch)."""
    if b.shape[-1] == 1:
        return torch.stack([x @ y for x, y in zip(a, b, strict=True)])
    return torch.bmm(a, b)


def linear_forward(w: torch.Tensor, Xd: torch.Tensor, n_features: int, n_outputs: int) -> torch.Tensor:
    """Logits ``Z = Xd W`` of shape (..., n, K) for ``w`` (..., d)."""
    lead, n = w.shape[:-1], Xd.shape[0]
    W = w.reshape(-1, n_features, n_outputs)
    return bmm(shared_rows(Xd, W.shape[0]), W).reshape(*lead, n, n_outputs)


@renamed(E="resid")
def linear_backward(Xd: torch.Tensor, resid: torch.Tensor, n_features: int, n_outputs: int) -> torch.Tensor:
    """``Σ_n x̃_n ⊗ r_n`` for residuals ``resid`` (..., n, K) with rows ``r_n``, the sample weights applied;
    shape (..., d)."""
    lead, n = resid.shape[:-2], resid.shape[-2]
    res3 = resid.reshape(-1, n, n_outputs)
    return bmm(shared_rows(Xd.T, res3.shape[0]), res3).reshape(*lead, n_features * n_outputs)


def _labels_like(y: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    return y.to(Z.device).reshape(*([1] * (Z.dim() - 2)), -1, 1).expand(*Z.shape[:-1], 1)


def multiclass_losses(Z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``ℓ_n = logsumexp(z_n) − z_{n,y_n}``, shape (..., n), for logits ``Z`` (..., n, C)."""
    return torch.logsumexp(Z, dim=-1) - Z.gather(-1, _labels_like(y, Z))[..., 0]


def multiclass_residuals(Z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``softmax(z) − e_y``, shape (and layout) of ``Z``."""
    R = (Z - Z.amax(dim=-1, keepdim=True)).exp_()  # torch.softmax is slow over a short last axis on the CPU
    R.div_(R.sum(dim=-1, keepdim=True))
    return R.sub_(torch.nn.functional.one_hot(y.to(Z.device), Z.shape[-1]).to(R.dtype))


def multiclass_predict(Z: torch.Tensor) -> torch.Tensor:
    """Labels ``argmax z`` (the first of equal maxima), shape (..., n)."""
    return torch.argmax(Z, dim=-1)


def logistic_losses(Z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``ℓ_n = log(1 + e^z) − y z``, shape (..., n), for logits ``Z`` (..., n, 1)."""
    z = Z[..., 0]
    return -torch.nn.functional.logsigmoid(z) + (1 - y.to(z.dtype)) * z


def logistic_residuals(Z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``σ(z) − y``, shape of ``Z``."""
    return torch.sigmoid(Z).sub_(y.to(Z.dtype).unsqueeze(-1))


def logistic_predict(Z: torch.Tensor) -> torch.Tensor:
    """Labels ``1[z > 0]``, shape (..., n)."""
    return (Z[..., 0] > 0).to(torch.int64)
