"""The models of :class:`~fedsde.problems.classification.problem.ClassificationProblem`: logistic, softmax and a
one-hidden-layer MLP, each one small class with the forward pass, the per-sample losses and gradients, the Hessian and
the start.

For a design row ``x̃`` (``n_features`` entries: the features and, with an intercept, a trailing 1):

* :class:`LogisticModel` (binary labels 0/1): ``z = x̃ᵀw``, ``ℓ = log(1 + e^z) − y z``, ``d = n_features``;
  ``∂ℓ/∂z = σ(z) − y``;
* :class:`SoftmaxModel` (``C`` classes): ``z = Wᵀx̃``, ``ℓ = logsumexp(z) − z_y``, ``W`` of shape
  ``(n_features, C)`` stored row-major in ``w`` (``d = n_features·C``); ``∂ℓ/∂z = softmax(z) − e_y``;
* :class:`MLPModel` (``C`` classes, ``H`` hidden units): ``z = (tanh(x̃ᵀW₁), 1) W₂``, ``ℓ = logsumexp(z) − z_y``,
  ``d = n_features·H + (H + 1)·C`` (non-convex; layout, backpropagation and initialisation in
  :mod:`fedsde.problems.classification.mlp`).

The linear models' gradients are ``∇ℓ = x̃ ⊗ ∂ℓ/∂z``.  Every model follows :class:`ClassificationModel`: the
problem holds the data, the weights ``p_k`` and the ridge ``λ`` and calls its model for everything that depends
on the model.  Shapes: ``w`` (..., d) with any leading batch axes, design rows ``Xd`` (n, n_features), logits and
residuals (..., n, K) with ``K`` = :attr:`~ClassificationModel.n_outputs`.

:meth:`~ClassificationModel.forward`, :meth:`~ClassificationModel.backward`, :meth:`~ClassificationModel.losses`,
:meth:`~ClassificationModel.residuals` and :meth:`~ClassificationModel.predict` also take torch tensors (weights,
design rows and labels on one device; the dtype of the weights): they then run the same formulas in torch
(:mod:`fedsde.problems.classification.torch_models`, :func:`fedsde.problems.classification.mlp.forward_torch`), one
batched matrix product per layer for all the weight vectors, and return tensors.
"""

from __future__ import annotations

import abc
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from scipy.special import expit, log_expit, logsumexp, softmax

from fedsde._compat import renamed
from fedsde._validate import choice, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.classification import mlp as _mlp


def is_tensor(x) -> bool:
    """Whether ``x`` is a torch tensor (torch is not imported for the check)."""
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(x, mod.Tensor)


def _torch():
    from fedsde.problems.classification import torch_models

    return torch_models


def segment_starts(sizes: np.ndarray) -> np.ndarray:
    """First index of each of the consecutive blocks of ``sizes``, shape (Q,)."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def segment_sum(a: np.ndarray, sizes: np.ndarray, axis: int) -> np.ndarray:
    """Sums of consecutive blocks of ``sizes`` along ``axis`` (empty blocks give 0)."""
    a = np.moveaxis(a, axis, 0)
    out = np.zeros((sizes.size, *a.shape[1:]))
    nz = sizes > 0
    if nz.any():
        out[nz] = np.add.reduceat(a, segment_starts(sizes)[nz], axis=0)
    return np.moveaxis(out, 0, axis)


#: Relative step of central finite differences, ``h = FD_STEP·max(1, ‖w‖_∞)``: truncation error ``O(h²) ≈ 1e-10``
#: relative, rounding error ``O(ε/h) ≈ 2e-11`` (a step, not a tolerance).
FD_STEP = 1e-5


def central_difference_hessian(w: np.ndarray, grad: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Central differences of an analytic gradient ``grad`` ((m, d) -> (m, …, d)), symmetrised, shape (…, d, d).

    Step ``h = FD_STEP·max(1, ‖w‖_∞)`` (:data:`FD_STEP` = 1e-5): truncation error O(h²) ≈ 1e-10 relative.
    """
    d = w.size
    h = FD_STEP * max(1.0, float(np.abs(w).max()))
    cols = []
    for a in range(0, d, 64):
        eye = np.eye(d)[a:a + 64] * h
        cols.append((grad(w + eye) - grad(w - eye)) / (2 * h))  # (m, …, d)
    H = np.moveaxis(np.concatenate(cols, axis=0), 0, -1)
    return 0.5 * (H + np.swapaxes(H, -1, -2))


class ClassificationModel(Protocol):
    """What a :class:`~fedsde.problems.classification.problem.ClassificationProblem` asks of its model.

    Losses and gradients here are per sample and without the ridge ``λ`` (the problem adds it and weighs the
    samples).  ``convex``: the loss is convex in ``w`` (the optimum is polished by Newton steps).
    ``closed_form_hessian``: :meth:`hessians` is implemented (else the problem differentiates its gradient
    numerically).  ``hidden_layer``: the model has ``hidden`` units.
    """

    name: ClassVar[str]
    convex: ClassVar[bool]
    closed_form_hessian: ClassVar[bool]
    hidden_layer: ClassVar[bool]
    n_features: int
    n_classes: int
    hidden: int

    @property
    def n_outputs(self) -> int: ...

    @property
    def d(self) -> int: ...

    def init(self, seed: int | None) -> np.ndarray: ...

    def forward(self, w: np.ndarray, Xd: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]: ...

    def backward(self, w: np.ndarray, Xd: np.ndarray, A: np.ndarray | None, resid: np.ndarray) -> np.ndarray: ...

    def losses(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def residuals(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def predict(self, Z: np.ndarray) -> np.ndarray: ...

    def curvature_bound(self, Xd: np.ndarray) -> float: ...

    def client_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray, sizes: np.ndarray) -> np.ndarray: ...

    def per_sample_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def hessians(self, w: np.ndarray, Xd: np.ndarray, s: np.ndarray, sizes: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class _Model:
    """Sizes shared by every model: ``n_features`` design columns, ``n_classes`` labels, ``hidden`` units."""

    n_features: int
    n_classes: int
    hidden: int = 0
    intercept: bool = True

    name: ClassVar[str] = ""
    convex: ClassVar[bool] = True
    curvature: ClassVar[float | None] = None
    closed_form_hessian: ClassVar[bool] = True
    hidden_layer: ClassVar[bool] = False

    @classmethod
    def check_classes(cls, n_classes: int) -> None:
        """Refuse a number of classes this kind cannot fit (the logistic model needs two)."""

    @classmethod
    def checked_hidden(cls, n_classes: int, hidden: int | None) -> int:
        """The hidden units of a model of this kind (validated; 0 for the linear models)."""
        cls.check_classes(n_classes)
        if hidden is not None:
            raise FedsdeInputError(f"hidden={hidden!r}: only allowed with model='mlp' (model={cls.name!r})")
        return 0

    def curvature_bound(self, Xd: np.ndarray) -> float:
        """``c·λ_max((1/n) Σ_n x̃_n x̃_nᵀ)``, an upper bound on the largest eigenvalue of the mean Hessian of ``ℓ``
        over the rows ``Xd`` at any ``w`` (``c`` = :attr:`curvature`: ``∂²ℓ/∂z² ≼ c·I``)."""
        if self.curvature is None:
            raise FedsdeInputError(f"model={self.name!r}: no global curvature bound exists for a neural network "
                                   "(max_curvature is defined for logistic and softmax models)")
        return self.curvature * np.linalg.eigvalsh(Xd.T @ Xd / Xd.shape[0])[-1]


class _MulticlassOutput:
    """``ℓ = logsumexp(z) − z_y`` on ``C`` logits: losses, residuals ``softmax(z) − e_y`` and predictions."""

    def losses(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``ℓ_n``, shape (..., n), for logits ``Z`` (..., n, C) and labels ``y`` (n,)."""
        if is_tensor(Z):
            return _torch().multiclass_losses(Z, y)
        idx = np.broadcast_to(y[:, None], (*Z.shape[:-1], 1))
        return logsumexp(Z, axis=-1) - np.take_along_axis(Z, idx, axis=-1)[..., 0]

    def residuals(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``∂ℓ/∂z = softmax(z) − e_y``, shape of ``Z``."""
        if is_tensor(Z):
            return _torch().multiclass_residuals(Z, y)
        R = softmax(Z, axis=-1)
        R[..., np.arange(y.size), y] -= 1.0
        return R

    def predict(self, Z: np.ndarray) -> np.ndarray:
        """Labels ``argmax z``, shape (..., n)."""
        if is_tensor(Z):
            return _torch().multiclass_predict(Z)
        return np.argmax(Z, axis=-1)


class _LinearModel(_Model, abc.ABC):
    """``z = Wᵀx̃`` with ``W`` (n_features, n_outputs) row-major in ``w``: ``∇ℓ = x̃ ⊗ ∂ℓ/∂z``, start at zero.

    A model (logistic, softmax) supplies :attr:`n_outputs` and :meth:`_weighted_hessian`."""

    @property
    @abc.abstractmethod
    def n_outputs(self) -> int:
        """Outputs ``K`` of the logits."""

    @property
    def d(self) -> int:
        """``n_features · n_outputs``."""
        return self.n_features * self.n_outputs

    def _matrix(self, w: np.ndarray) -> np.ndarray:
        return w.reshape(*w.shape[:-1], self.n_features, self.n_outputs)

    def init(self, seed: int | None) -> np.ndarray:
        """Zero weights, shape (d,) (``seed`` is not used)."""
        return np.zeros(self.d)

    def forward(self, w: np.ndarray, Xd: np.ndarray) -> tuple[None, np.ndarray]:
        """``(None, Z)`` with logits ``Z = Xd W`` of shape (..., n, K)."""
        if is_tensor(w):
            return None, _torch().linear_forward(w, Xd, self.n_features, self.n_outputs)
        return None, np.einsum("nf,...fk->...nk", Xd, self._matrix(w))

    def backward(self, w: np.ndarray, Xd: np.ndarray, A: None, resid: np.ndarray) -> np.ndarray:
        """``Σ_n x̃_n ⊗ r_n`` for residuals ``resid`` (..., n, K) with rows ``r_n``, the sample weights applied;
        shape (..., d)."""
        if is_tensor(resid):
            return _torch().linear_backward(Xd, resid, self.n_features, self.n_outputs)
        return np.einsum("nf,...nk->...fk", Xd, resid).reshape(*resid.shape[:-2], self.d)

    def client_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Mean ``∇ℓ`` over each consecutive block of ``sizes`` rows, shape (..., Q, d), for ``w`` (..., d)."""
        resid = self.residuals(self.forward(w, Xd)[1], y)  # (..., N, K)
        per = np.einsum("nf,...nk->...nfk", Xd, resid)
        G = segment_sum(per, sizes, per.ndim - 3) / sizes.reshape(-1, 1, 1)
        return G.reshape(*G.shape[:-2], self.d)

    def per_sample_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``∇ℓ_n(w)`` of every row, shape (n, d), for one ``w`` (d,)."""
        resid = self.residuals(Xd @ self._matrix(w), y)
        return np.einsum("nf,nk->nfk", Xd, resid).reshape(-1, self.d)

    def hessians(self, w: np.ndarray, Xd: np.ndarray, s: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """``Σ_n s_n ∇²ℓ_n(w)`` over each consecutive block of ``sizes`` rows, shape (Q, d, d), for ``w`` (d,)."""
        Z = Xd @ self._matrix(w)
        starts = segment_starts(sizes)
        out = np.empty((sizes.size, self.d, self.d))
        for k, (a, b) in enumerate(zip(starts, starts + sizes, strict=True)):
            out[k] = self._weighted_hessian(Xd[a:b], Z[a:b], s[a:b])
        return out

    @abc.abstractmethod
    def _weighted_hessian(self, Xd: np.ndarray, Z: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``Σ_n s_n ∇²ℓ_n`` of one client's rows ``Xd`` with logits ``Z``, shape (d, d)."""


class LogisticModel(_LinearModel):
    """Binary logistic regression (see the module docstring); ``∂²ℓ/∂z² = σ(z)(1 − σ(z)) <= 1/4``."""

    name: ClassVar[str] = "logistic"
    curvature: ClassVar[float | None] = 0.25

    @classmethod
    def check_classes(cls, n_classes: int) -> None:
        if n_classes != 2:
            raise FedsdeInputError(f"model='logistic': needs binary labels, found n_classes={n_classes}")

    @property
    def n_outputs(self) -> int:
        """One logit per sample."""
        return 1

    def losses(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``ℓ_n = log(1 + e^z) − y z``, shape (..., n), for logits ``Z`` (..., n, 1)."""
        if is_tensor(Z):
            return _torch().logistic_losses(Z, y)
        z = Z[..., 0]
        return -log_expit(z) + (1 - y) * z

    def residuals(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``∂ℓ/∂z = σ(z) − y``, shape of ``Z``."""
        if is_tensor(Z):
            return _torch().logistic_residuals(Z, y)
        return expit(Z) - y[:, None]

    def predict(self, Z: np.ndarray) -> np.ndarray:
        """Labels ``1[z > 0]``, shape (..., n)."""
        if is_tensor(Z):
            return _torch().logistic_predict(Z)
        return (Z[..., 0] > 0).astype(np.int64)

    def _weighted_hessian(self, Xd: np.ndarray, Z: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``Σ_n s_n σ_n(1 − σ_n) x̃_n x̃_nᵀ``, shape (d, d)."""
        sig = expit(Z[:, 0])
        return (Xd * (s * sig * (1 - sig))[:, None]).T @ Xd


class SoftmaxModel(_MulticlassOutput, _LinearModel):
    """Multinomial (softmax) regression (see the module docstring); ``∂²ℓ/∂z² = diag(P) − PPᵀ ≼ I/2``."""

    name: ClassVar[str] = "softmax"
    curvature: ClassVar[float | None] = 0.5

    @property
    def n_outputs(self) -> int:
        """``C`` logits per sample."""
        return int(self.n_classes)

    def _weighted_hessian(self, Xd: np.ndarray, Z: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``Σ_n s_n (x̃_n x̃_nᵀ) ⊗ (diag(P_n) − P_nP_nᵀ)`` in the layout of ``w`` (row-major ``(F, C)``).

        Computed as ``blockdiag_k(X̃ᵀ diag(s P_k) X̃) − YᵀYs`` with ``Y_n = x̃_n ⊗ P_n`` (two BLAS products instead
        of a four-index contraction), shape (d, d).
        """
        F, K = self.n_features, self.n_outputs
        P = softmax(Z, axis=-1)
        H = np.zeros((F, K, F, K))
        for k in range(K):
            H[:, k, :, k] = (Xd * (s * P[:, k])[:, None]).T @ Xd
        Y = (Xd[:, :, None] * P[:, None, :]).reshape(-1, F * K)
        return H.reshape(F * K, F * K) - (Y * s[:, None]).T @ Y


class MLPModel(_MulticlassOutput, _Model):
    """One-hidden-layer tanh network (:mod:`fedsde.problems.classification.mlp`): non-convex, no global curvature bound,
    Hessians by central differences of the gradient, seeded Glorot start."""

    name: ClassVar[str] = "mlp"
    convex: ClassVar[bool] = False
    closed_form_hessian: ClassVar[bool] = False
    hidden_layer: ClassVar[bool] = True

    @classmethod
    def checked_hidden(cls, n_classes: int, hidden: int | None) -> int:
        if hidden is None:
            raise FedsdeInputError("hidden: required for model='mlp' (number of hidden units, an integer >= 1)")
        return positive_int("hidden", hidden)

    @property
    def n_outputs(self) -> int:
        """``C`` logits per sample."""
        return int(self.n_classes)

    @property
    def d(self) -> int:
        """``n_features·H + (H + 1)·C``."""
        return _mlp.n_params(self.n_features, self.hidden, self.n_outputs)

    def init(self, seed: int | None) -> np.ndarray:
        """Glorot-normal weights with zero biases drawn from ``seed`` (default 0; checked by the caller, a problem's
        ``initial_weights``), shape (d,)."""
        return _mlp.init_weights(self.n_features, self.hidden, self.n_classes, 0 if seed is None else seed,
                                 intercept=self.intercept)

    def forward(self, w: np.ndarray, Xd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hidden activations (..., n, H) and logits (..., n, C) of design rows ``Xd``."""
        if is_tensor(w):
            return _mlp.forward_torch(w, Xd, self.n_features, self.hidden, self.n_outputs)
        return _mlp.forward(w, Xd, self.n_features, self.hidden, self.n_outputs)

    @renamed(E="resid")
    def backward(self, w: np.ndarray, Xd: np.ndarray, A: np.ndarray, resid: np.ndarray) -> np.ndarray:
        """``Σ_n ∇_w ℓ_n`` for residuals ``resid`` (..., n, C) with the sample weights applied, shape (..., d)."""
        if is_tensor(resid):
            return _mlp.backward_torch(w, Xd, A, resid, self.n_features, self.hidden, self.n_outputs)
        return _mlp.backward(w, Xd, A, resid, self.n_features, self.hidden, self.n_outputs)

    def client_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Mean ``∇ℓ`` over each consecutive block of ``sizes`` rows, shape (..., Q, d), for ``w`` (..., d)."""
        A, Z = self.forward(w, Xd)
        resid = self.residuals(Z, y)
        cuts = np.concatenate([[0], np.cumsum(sizes)])
        return np.stack([self.backward(w, Xd[a:b], A[..., a:b, :], resid[..., a:b, :]) / (b - a)
                         for a, b in itertools.pairwise(cuts)], axis=-2)

    def per_sample_grads(self, w: np.ndarray, Xd: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``∇ℓ_n(w)`` of every row, shape (n, d), for one ``w`` (d,)."""
        resid = self.residuals(self.forward(w, Xd)[1], y)
        return _mlp.per_sample_grads(w, Xd, resid, self.n_features, self.hidden, self.n_outputs)

    def hessians(self, w: np.ndarray, Xd: np.ndarray, s: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        raise NotImplementedError("the MLP has no closed-form Hessian (see closed_form_hessian)")


#: model name -> class, in the order the problem lists them
MODEL_TYPES: dict[str, type[_Model]] = {m.name: m for m in (LogisticModel, SoftmaxModel, MLPModel)}
MODELS = tuple(MODEL_TYPES)


def checked_model(model: str | None, n_classes: int, hidden: int | None) -> tuple[str, int]:
    """The model name (default: logistic for two classes, softmax otherwise) and its validated hidden units."""
    if model is None:
        model = "logistic" if n_classes == 2 else "softmax"
    choice("model", model, MODELS)
    return model, MODEL_TYPES[model].checked_hidden(n_classes, hidden)


def check_memory(what: str, need: int, hint: str) -> None:
    """Refuse in one line, with the estimate, ``need`` bytes that exceed the memory available to this process
    (:func:`fedsde._memory.available_memory`: free memory, cgroup and address-space limits, ``FEDSDE_MEMORY_LIMIT``)."""
    from fedsde._memory import available_memory, memory_fits

    memory_fits(what, int(need), available_memory("cpu"), hint)


#: weight vectors of length ``d`` a problem plans to hold at once (start, optimum, gradients and a few iterates)
MODEL_COPIES = 16


def check_model_memory(n_features: int, n_classes: int, model: str, hidden: int) -> int:
    """Refuse, with the estimate, a model whose :data:`MODEL_COPIES` float64 weight vectors do not fit in the memory
    available (:func:`check_memory`); returns the estimate in bytes."""
    d = MODEL_TYPES[model](n_features=int(n_features), n_classes=int(n_classes), hidden=int(hidden)).d
    need = 8 * MODEL_COPIES * d
    what = f"model={model!r}" + (f", hidden={hidden}" if hidden else "") + f" (d={d} weights)"
    check_memory(what, need, "use fewer hidden units or features")
    return need


def model_type(name) -> type[_Model] | None:
    """The model class called ``name`` (``None`` for anything else)."""
    return MODEL_TYPES.get(name) if isinstance(name, str) else None
