"""Classification clients: logistic or softmax regression or a one-hidden-layer tanh network on labelled data.

Client ``k`` holds ``N_k`` training samples ``(x_i, y_i)`` and minimises the regularised empirical risk

    F_k(w) = (1/N_k) Σ_{i ∈ I_k} ℓ(w; x_i, y_i) + (λ/2) ‖w‖²,        F(w) = Σ_k p_k F_k(w),

(seed 002 Sec. 3: ``F^k = (1/N_k) Σ_i F_i``, ``p_k = N_k/N`` by default).  The per-sample loss ``ℓ`` of
``model="logistic"`` (binary labels, ``d = F + 1``), ``"softmax"`` (``C`` classes, ``d = (F + 1)·C``) or ``"mlp"``
(``H`` hidden units, ``d = (F + 1)·H + (H + 1)·C``, non-convex), its forward pass, per-sample gradients and Hessian
are in :mod:`fedsde.problems.classification.models`; the problem holds the data
(:mod:`fedsde.problems.classification.labelled`), the weights and the ridge, validates its input and finds the optimum,
and asks its :attr:`~ClassificationProblem.classifier` for everything that depends on the model.  ``x̃ = (x, 1)`` when
``fit_intercept`` (the intercept is regularised).

A problem may carry the minibatch size of its clients (``batch_size``, used by default by
:func:`fedsde.sim.simulate`) and its starting point (:meth:`ClassificationProblem.initial_weights`: zero for the
linear models, seeded Glorot weights for the MLP).

The minibatch gradient covariance of seed 002, Sec. 3 (exact for a minibatch of ``b`` samples drawn without
replacement) is :meth:`ClassificationProblem.minibatch_covariance`:

    Σ_k(w) = (1/b − 1/N_k) · (1/(N_k − 1)) Σ_{i∈I_k} (∇ℓ_i(w) − ∇F_k(w)) (∇ℓ_i(w) − ∇F_k(w))ᵀ.

Besides the training data every client keeps a test split; the global test set is the union of the clients'
test splits.  :func:`fedsde.problems.classification.datasets.federated_classification` builds such a problem from
scikit-learn's bundled data sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsde._tolerances import LBFGS_FTOL, LBFGS_GTOL, LOCAL_OPTIMUM_GTOL, NEWTON_GTOL, OPTIMUM_GTOL
from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.params import takes_values
from fedsde.problems.classification.labelled import (
    LabelledClients,
    checked_arrays,
    checked_client_arrays,
    checked_client_weights,
)
from fedsde.problems.classification.models import (
    MODEL_TYPES,
    MODELS,
    ClassificationModel,
    central_difference_hessian,
    check_model_memory,
    segment_starts,
    segment_sum,
)
from fedsde.problems.classification.options import (
    DEFAULTS,
    SAMPLINGS,
    VALUE_FIELDS,
    VALUE_TYPES,
    Classifier,
    Minibatches,
    changed_values,
    values_of,
)
from fedsde.problems.evaluation import Evaluation

__all__ = ["MODELS", "SAMPLINGS", "ClassificationProblem"]


@dataclass(frozen=True, eq=False)
class ClassificationProblem(LabelledClients):
    """Q clients fitting a logistic or softmax regression or an MLP on their own data (see the module docstring).

    Build with :meth:`from_clients` or :meth:`from_arrays` (both validate) or :func:`federated_classification`.

    Attributes
    ----------
    X : ndarray, shape (N, F)
        Training features of all clients, concatenated in client order (no intercept column).
    y : ndarray of int, shape (N,)
        Training labels (``0..C−1``).
    sizes : ndarray of int, shape (Q,)
        ``N_k``: training samples per client.
    X_test, y_test : ndarray, shapes (M, F) and (M,)
        Test samples of all clients, concatenated in client order (the global test set).
    test_sizes : ndarray of int, shape (Q,)
        Test samples per client.
    n_classes : int
        ``C``.
    model : {"logistic", "softmax", "mlp"}
    l2 : float
        Ridge coefficient ``λ >= 0``.
    p : ndarray, shape (Q,)
        Client weights (default ``N_k/N``), normalised.
    fit_intercept : bool
    name : str
    info : dict
        Provenance (data set, partition, seeds, scaling) for records.
    hidden : int
        Hidden units ``H`` of the MLP (0 for the linear models).
    batch_size : int or None
        Minibatch size ``b`` of every client (capped at ``N_k``), used by the simulator's default gradient
        oracle; ``None``: none given (pass ``EpochSteps`` or an oracle).
    sampling : {"minibatch", "epoch"}
        Minibatches drawn afresh every step, or consecutive batches of a per-epoch permutation.
    init_seed : int or None
        Seed of :meth:`initial_weights` for the MLP (``None``: 0).
    metric_samples : int or None
        Training (and test) samples above which the metrics of :mod:`fedsde.problems.metrics` are estimated on a
        seeded subsample of this size (``None``: :data:`fedsde.problems.metrics.METRIC_SAMPLES`).
    """

    X: np.ndarray
    y: np.ndarray
    sizes: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    test_sizes: np.ndarray
    n_classes: int
    model: str
    l2: float
    p: np.ndarray
    fit_intercept: bool = True
    name: str = ""
    info: dict = field(default_factory=dict)
    hidden: int = 0
    batch_size: int | None = None
    sampling: str = "minibatch"
    init_seed: int | None = None
    metric_samples: int | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    @takes_values(types=VALUE_TYPES, **VALUE_FIELDS)
    def from_clients(
        cls,
        X_clients: Sequence[np.ndarray],
        y_clients: Sequence[np.ndarray],
        X_test_clients: Sequence[np.ndarray] | None = None,
        y_test_clients: Sequence[np.ndarray] | None = None,
        *,
        n_classes: int | None = None,
        classifier: Classifier | None = None,
        minibatches: Minibatches | None = None,
        evaluation: Evaluation | None = None,
        p=None,
        name: str = "",
        info: dict | None = None,
    ) -> ClassificationProblem:
        """A problem from per-client arrays.

        Parameters
        ----------
        X_clients : sequence of Q arrays, shapes (N_k, F)
        y_clients : sequence of Q int arrays, shapes (N_k,)
        X_test_clients, y_test_clients : sequences of Q arrays, optional
            Per-client test splits (default: empty).
        n_classes : int, optional
            Default: ``1 + max label``.
        classifier : Classifier, optional
            The model and its ridge (:class:`~fedsde.problems.classification.options.Classifier`; default
            ``Classifier()``: logistic for two classes, softmax otherwise, ``l2 = 1e-3``), or its fields as the
            keywords ``model``, ``hidden``, ``fit_intercept``, ``l2``, ``init_seed``.
        minibatches : Minibatches, optional
            How the clients draw their minibatches (:class:`~fedsde.problems.classification.options.Minibatches`),
            or the keywords ``batch_size``, ``sampling``.
        evaluation : Evaluation, optional
            Its ``metric_samples`` (:class:`~fedsde.problems.evaluation.Evaluation`), or that keyword.
        p : array, shape (Q,), optional
            Client weights; default ``N_k / N``.
        name, info : str, dict
            A name and the provenance, for records.
        """
        X, y, sizes, Xt, yt, tsizes, C = checked_client_arrays(X_clients, y_clients, X_test_clients,
                                                               y_test_clients, n_classes)
        return cls._with_settings(dict(X=X, y=y, sizes=sizes, X_test=Xt, y_test=yt, test_sizes=tsizes, n_classes=C),
                                  classifier, minibatches, evaluation, p=p, name=name, info=info)

    @classmethod
    @takes_values(types=VALUE_TYPES, **VALUE_FIELDS)
    def from_arrays(cls, X, y, sizes, X_test=None, y_test=None, test_sizes=None, *, n_classes: int | None = None,
                    classifier: Classifier | None = None, minibatches: Minibatches | None = None,
                    evaluation: Evaluation | None = None, **settings) -> ClassificationProblem:
        """A problem from the samples of all clients concatenated in client order (checks are vectorised: no loop
        over clients).

        Parameters
        ----------
        X : array, shape (N, F)
        y : int array, shape (N,)
        sizes : int array, shape (Q,)
            ``N_k >= 1``, summing to ``N``.
        X_test, y_test, test_sizes : arrays, shapes (M, F), (M,) and (Q,), optional
            The clients' test splits (default: empty).
        n_classes : int, optional
            Default: ``1 + max label``.
        classifier, minibatches, evaluation
            The values of :meth:`from_clients`, or the keywords of their fields.
        **settings
            ``p``, ``name``, ``info`` as in :meth:`from_clients`.
        """
        X, y, sizes, Xt, yt, tsizes, C = checked_arrays(X, y, sizes, X_test, y_test, test_sizes, n_classes)
        return cls._with_settings(dict(X=X, y=y, sizes=sizes, X_test=Xt, y_test=yt, test_sizes=tsizes, n_classes=C),
                                  classifier, minibatches, evaluation, **settings)

    @classmethod
    def _with_settings(cls, data: dict, classifier: Classifier | None, minibatches: Minibatches | None,
                       evaluation: Evaluation | None, *, p=None, name: str = "", info: dict | None = None,
                       p_checked: bool = False) -> ClassificationProblem:
        """The problem of validated ``data`` (the array fields and ``n_classes``) with checked values (``None``: the
        default value) and weights ``p`` (checked here unless ``p_checked``); refuses a model the labels do not fit
        and one whose weights cannot fit in memory (:func:`check_model_memory`).  The problem keeps its values."""
        model_, batches, ev = classifier or DEFAULTS[0], minibatches or DEFAULTS[1], evaluation or DEFAULTS[2]
        C = int(data["n_classes"])
        model, hidden = model_.for_classes(C)
        p_arr = p if p_checked else checked_client_weights(p, data["sizes"])
        check_model_memory(data["X"].shape[1] + int(model_.fit_intercept), C, model, hidden)
        out = cls(**data, model=model, l2=model_.l2, p=p_arr, fit_intercept=model_.fit_intercept, name=name,
                  info=dict(info or {}), hidden=hidden, batch_size=batches.batch_size, sampling=batches.sampling,
                  init_seed=model_.init_seed, metric_samples=ev.metric_samples)
        out._cache["options"] = (model_, batches, ev)
        return out

    @property
    def minibatches(self) -> Minibatches:
        """How the clients draw their minibatches (``batch_size``, ``sampling``), the checked value."""
        return values_of(self)[1]

    def replace(self, **changes) -> ClassificationProblem:
        """A copy with some of ``model, hidden, l2, p, batch_size, sampling, init_seed, metric_samples, name, info``
        changed (the data stay, shared with this problem); what changes is checked (with the value it belongs to:
        :func:`~fedsde.problems.classification.options.changed_values`), what stays is this problem's."""
        classifier, minibatches, evaluation = changed_values(self, changes)
        data = {f: getattr(self, f) for f in ("X", "y", "sizes", "X_test", "y_test", "test_sizes", "n_classes")}
        return ClassificationProblem._with_settings(
            data, classifier, minibatches, evaluation, p=changes.get("p", self.p), p_checked="p" not in changes,
            name=changes.get("name", self.name), info=changes.get("info", self.info))

    def with_weights(self, p) -> ClassificationProblem:
        """A copy with other client weights (normalised)."""
        return self.replace(p=p)

    def initial_weights(self, seed: int | None = None) -> np.ndarray:
        """Starting weights ``w₀``, shape (d,): zero for the linear models; for the MLP Glorot-normal weights
        with zero biases drawn from ``seed`` (default :attr:`init_seed`, else 0), see
        :mod:`fedsde.problems.classification.mlp`.
        """
        return self.classifier.init(self.init_seed if seed is None else positive_int("seed", seed, minimum=0))

    @property
    def classifier(self) -> ClassificationModel:
        """The model object of :attr:`model` (:mod:`fedsde.problems.classification.models`): forward pass, per-sample
        losses, gradients and Hessians."""
        if "classifier" not in self._cache:
            self._cache["classifier"] = MODEL_TYPES[self.model](
                n_features=self.n_features, n_classes=int(self.n_classes), hidden=int(self.hidden),
                intercept=self.fit_intercept)
        return self._cache["classifier"]

    # ------------------------------------------------------------------ shapes
    @property
    def n_outputs(self) -> int:
        """Logits per sample: 1 (logistic) or ``C`` (softmax, mlp)."""
        return self.classifier.n_outputs

    @property
    def d(self) -> int:
        """Dimension of ``w``: ``n_features · n_outputs`` (linear) or ``n_features·H + (H + 1)·C`` (mlp)."""
        return self.classifier.d

    # ------------------------------------------------------------------ per-sample pieces (the model's)
    def _w(self, w) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 0 or w.shape[-1] != self.d:
            raise FedsdeInputError(f"w: last axis has {w.shape[-1] if w.ndim else 0} entries, the problem has "
                                   f"d={self.d}")
        return w

    # ------------------------------------------------------------------ objective
    def client_loss(self, w) -> np.ndarray:
        """``F_k(w)`` for every client; ``w`` of shape (..., d) gives shape (..., Q)."""
        ell = self.classifier.losses(self.classifier.forward(self._w(w), self.design(self.X))[1], self.y)
        reg = 0.5 * self.l2 * np.sum(np.asarray(w, dtype=np.float64) ** 2, axis=-1)
        return segment_sum(ell, self.sizes, -1) / self.sizes + np.asarray(reg)[..., None]

    def loss(self, w) -> np.ndarray | float:
        """``F(w) = Σ_k p_k F_k(w)``; ``w`` of shape (..., d)."""
        out = self.client_loss(w) @ self.p
        return float(out) if np.ndim(out) == 0 else out

    def client_grad(self, w) -> np.ndarray:
        """``∇F_k(w)`` for every client; ``w`` of shape (..., d) gives shape (..., Q, d)."""
        w = self._w(w)
        G = self.classifier.client_grads(w, self.design(self.X), self.y, self.sizes)
        return G + self.l2 * w[..., None, :]

    def grad(self, w) -> np.ndarray:
        """``∇F(w) = Σ_k p_k ∇F_k(w)``; ``w`` of shape (..., d)."""
        w = self._w(w)
        Xd = self.design(self.X)
        s = np.repeat(self.p / self.sizes, self.sizes)  # per-sample weight p_k / N_k
        model = self.classifier
        A, Z = model.forward(w, Xd)
        E = model.residuals(Z, self.y) * s[:, None]
        return model.backward(w, Xd, A, E) + self.l2 * w

    def _loss_and_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        Xd = self.design(self.X)
        model = self.classifier
        A, Z = model.forward(w, Xd)
        s = np.repeat(self.p / self.sizes, self.sizes)
        f = float(s @ model.losses(Z, self.y) + 0.5 * self.l2 * w @ w)
        g = model.backward(w, Xd, A, model.residuals(Z, self.y) * s[:, None]) + self.l2 * w
        return f, g

    def per_sample_grads(self, w, client: int) -> np.ndarray:
        """``∇ℓ_i(w) + λw`` for every training sample of ``client`` (their mean is ``∇F_k``), shape (N_k, d)."""
        k = int(client)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={client}: must lie in [0, {self.Q - 1}]")
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        start = int(segment_starts(self.sizes)[k])
        Xd = self.design(self.X[start:start + self.sizes[k]])
        yk = self.y[start:start + self.sizes[k]]
        return self.classifier.per_sample_grads(w, Xd, yk) + self.l2 * w

    def minibatch_covariance(self, w, batch_size: int | Sequence[int] | np.ndarray) -> np.ndarray:
        """``Σ_k(w) = (1/b − 1/N_k) · sample covariance of the per-sample gradients`` (seed 002, Sec. 3).

        The exact covariance of the mean gradient of ``b = batch_size`` samples drawn without replacement from
        client ``k``'s ``N_k`` samples (zero when ``b >= N_k``).

        Parameters
        ----------
        w : array, shape (d,)
        batch_size : int or array of int, shape (Q,)

        Returns
        -------
        ndarray, shape (Q, d, d)
        """
        batch = np.broadcast_to(np.asarray(batch_size), (self.Q,))
        out = np.zeros((self.Q, self.d, self.d))
        for k in range(self.Q):
            Nk = int(self.sizes[k])
            bk = positive_int(f"batch_size[{k}]", int(batch[k]))
            if bk >= Nk or Nk < 2:
                continue
            G = self.per_sample_grads(w, k)
            Gc = G - G.mean(0)
            out[k] = (1.0 / bk - 1.0 / Nk) * (Gc.T @ Gc) / (Nk - 1)
        return out

    def client_hessian(self, w) -> np.ndarray:
        """``∇²F_k(w)`` for every client, shape (Q, d, d) (MLP: central differences of the gradient)."""
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        if not self.classifier.closed_form_hessian:
            return central_difference_hessian(w, self.client_grad)
        s = np.repeat(1.0 / self.sizes, self.sizes)
        return self.classifier.hessians(w, self.design(self.X), s, self.sizes) + self.l2 * np.eye(self.d)

    def hessian(self, w) -> np.ndarray:
        """``∇²F(w) = Σ_k p_k ∇²F_k(w)``, shape (d, d) (MLP: central differences of the gradient)."""
        w = np.asarray(w, dtype=np.float64).reshape(self.d)
        if not self.classifier.closed_form_hessian:
            return central_difference_hessian(w, self.grad)
        Xd = self.design(self.X)
        s = np.repeat(self.p / self.sizes, self.sizes)
        return self.classifier.hessians(w, Xd, s, np.array([Xd.shape[0]]))[0] + self.l2 * np.eye(self.d)

    # ------------------------------------------------------------------ optimum
    @property
    def optimum(self) -> np.ndarray:
        """``w* = argmin F`` by L-BFGS, polished by Newton steps (``d <= 2000``), shape (d,).

        Raises :class:`FedsdeInputError` when the gradient cannot be driven to ``1e-8``
        (:data:`~fedsde._tolerances.OPTIMUM_GTOL`; e.g. ``l2 = 0`` on separable data, where no minimiser exists).
        For the (non-convex) MLP: the local minimiser that L-BFGS reaches from :meth:`initial_weights` (no Newton
        polish; tolerance ``1e-6``, :data:`~fedsde._tolerances.LOCAL_OPTIMUM_GTOL`).
        """
        if "optimum" not in self._cache:
            import scipy.optimize  # only where an optimum is solved: loading a problem stays light

            convex = self.classifier.convex
            res = scipy.optimize.minimize(
                self._loss_and_grad, self.initial_weights(), jac=True, method="L-BFGS-B",
                options={"maxiter": 20000, "gtol": LBFGS_GTOL, "ftol": LBFGS_FTOL, "maxcor": 30},
            )
            w = res.x
            if self.d <= 2000 and convex:
                for _ in range(20):
                    g = self.grad(w)
                    if np.linalg.norm(g) < NEWTON_GTOL:
                        break
                    try:
                        w = w - np.linalg.solve(self.hessian(w), g)
                    except np.linalg.LinAlgError:
                        break
            gnorm = float(np.linalg.norm(self.grad(w)))
            if not np.isfinite(gnorm) or gnorm > (OPTIMUM_GTOL if convex else LOCAL_OPTIMUM_GTOL):
                raise FedsdeInputError(
                    f"l2={self.l2}: could not find the minimiser of F (|grad F| = {gnorm:.3g} after L-BFGS and "
                    "Newton); with l2 = 0 on separable data none exists, so use l2 > 0"
                )
            self._cache["optimum"] = w
        return self._cache["optimum"].copy()

    @property
    def min_loss(self) -> float:
        """``F* = F(w*)``."""
        return float(self.loss(self.optimum))

    # ------------------------------------------------------------------ evaluation
    def predict(self, w, X) -> np.ndarray:
        """Predicted labels for rows of ``X`` (shape (n, F)); ``w`` of shape (..., d) gives (..., n)."""
        return self.classifier.predict(self.classifier.forward(self._w(w), self.design(X))[1])

    def accuracy(self, w, split: str = "test") -> np.ndarray | float:
        """Fraction of correctly classified samples of the global ``"test"`` (or ``"train"``) set.

        ``w`` of shape (..., d) gives shape (...).
        """
        X, y, _ = self._split(split)
        if y.size == 0:
            raise FedsdeInputError(f"split={split!r}: the problem has no {split} samples")
        out = np.mean(self.predict(w, X) == y, axis=-1)
        return float(out) if np.ndim(out) == 0 else out

    def client_accuracy(self, w, split: str = "test") -> np.ndarray:
        """Accuracy on every client's own split; ``w`` of shape (..., d) gives (..., Q) (NaN for empty splits)."""
        X, y, sizes = self._split(split)
        hits = (self.predict(w, X) == y).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return segment_sum(hits, sizes, -1) / np.where(sizes > 0, sizes, np.nan)

    def max_curvature(self) -> np.ndarray:
        """Upper bound on the largest Hessian eigenvalue of each ``F_k``, shape (Q,): ``c·λ_max((1/N_k) Σ x̃x̃ᵀ) + λ``
        (:meth:`~fedsde.problems.classification.models.LogisticModel.curvature_bound`; none exists for the MLP:
        :class:`FedsdeInputError`)."""
        return np.array([self.classifier.curvature_bound(self.design(Xk)) + self.l2 for Xk in self.client_data()[0]])

    def summary(self) -> dict:
        """Sizes, weights and label counts, for records."""
        return {"name": self.name, "model": self.model, "Q": self.Q, "d": self.d, "n_classes": self.n_classes,
                "l2": self.l2, "hidden": self.hidden, "batch_size": self.batch_size, "sampling": self.sampling,
                "sizes": self.sizes.tolist(), "test_sizes": self.test_sizes.tolist(),
                "p": self.p.tolist(), "label_counts": self.label_counts().tolist(), **self.info}

