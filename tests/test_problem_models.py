"""The models of a classification problem (fedsde.problems.classification.models): per-sample derivatives against finite
differences, closed-form Hessians, the curvature bound, and the model chosen from the problem's settings."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde.errors import FedsdeInputError
from fedsde.problems import federated_classification
from fedsde.problems.classification.models import (
    MODEL_TYPES,
    MODELS,
    LogisticModel,
    MLPModel,
    SoftmaxModel,
    central_difference_hessian,
    checked_model,
    model_type,
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    Xd = np.hstack([rng.standard_normal((12, 3)), np.ones((12, 1))])
    return Xd, rng.integers(0, 3, 12), rng


def _models(n_features):
    return [LogisticModel(n_features, 2), SoftmaxModel(n_features, 3), MLPModel(n_features, 3, hidden=4)]


def _labels(model, y):
    return y % 2 if isinstance(model, LogisticModel) else y


@pytest.mark.parametrize("kind", MODELS)
def test_per_sample_gradients_are_derivatives_of_the_losses(data, kind):
    Xd, y, rng = data
    model = next(m for m in _models(Xd.shape[1]) if m.name == kind)
    y = _labels(model, y)
    w = model.init(1) + 0.3 * rng.standard_normal(model.d)
    G = model.per_sample_grads(w, Xd, y)
    assert G.shape == (Xd.shape[0], model.d)
    def losses(v):
        return model.losses(model.forward(v, Xd)[1], y)

    h = 1e-6
    fd = np.stack([(losses(w + h * e) - losses(w - h * e)) / (2 * h) for e in np.eye(model.d)], axis=-1)
    np.testing.assert_allclose(G, fd, rtol=1e-6, atol=1e-8)
    # backward with unit weights sums the per-sample gradients; client blocks average them
    A, Z = model.forward(w, Xd)
    np.testing.assert_allclose(model.backward(w, Xd, A, model.residuals(Z, y)), G.sum(0), rtol=1e-12, atol=1e-12)
    sizes = np.array([5, 7])
    blocks = model.client_grads(w, Xd, y, sizes)
    np.testing.assert_allclose(blocks, [G[:5].mean(0), G[5:].mean(0)], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("model", [LogisticModel(4, 2), SoftmaxModel(4, 3)], ids=["logistic", "softmax"])
def test_closed_form_hessians_match_differences_of_the_gradient(data, model):
    Xd, y, rng = data
    y = _labels(model, y)
    w = 0.5 * rng.standard_normal(model.d)
    s = rng.uniform(0.5, 1.5, Xd.shape[0])
    sizes = np.array([4, 8])

    def grads(v):  # (m, d) -> (m, Q, d): block sums of s_n ∇ℓ_n
        E = model.residuals(model.forward(v, Xd)[1], y) * s[:, None]
        return np.stack([model.backward(v, Xd[a:b], None, E[..., a:b, :]) for a, b in ((0, 4), (4, 12))], axis=-2)

    H = model.hessians(w, Xd, s, sizes)
    assert H.shape == (2, model.d, model.d) and model.closed_form_hessian
    np.testing.assert_allclose(H, central_difference_hessian(w, grads), rtol=1e-6, atol=1e-8)
    # the curvature bound holds at any w for unit weights: λ_max(mean Hessian) <= c λ_max(mean x̃x̃ᵀ)
    for v in (w, 5 * rng.standard_normal(model.d)):
        top = np.linalg.eigvalsh(model.hessians(v, Xd, np.full(12, 1 / 12), np.array([12]))[0])[-1]
        assert top <= model.curvature_bound(Xd) * (1 + 1e-12)


def test_the_mlp_has_no_curvature_bound_and_no_closed_form_hessian(data):
    Xd, _, _ = data
    net = MLPModel(4, 3, hidden=2)
    assert not net.convex and not net.closed_form_hessian and net.hidden_layer
    with pytest.raises(FedsdeInputError, match="model='mlp': no global curvature bound"):
        net.curvature_bound(Xd)
    with pytest.raises(NotImplementedError):
        net.hessians(net.init(0), Xd, np.ones(12), np.array([12]))
    assert np.array_equal(net.init(None), net.init(0)) and not np.array_equal(net.init(0), net.init(1))
    assert np.array_equal(SoftmaxModel(4, 3).init(5), np.zeros(12))


def test_model_choice_and_its_errors():
    assert MODELS == ("logistic", "softmax", "mlp") and MODEL_TYPES["mlp"] is MLPModel
    assert checked_model(None, 2, None) == ("logistic", 0) and checked_model(None, 5, None) == ("softmax", 0)
    assert checked_model("mlp", 5, 7) == ("mlp", 7)
    assert model_type("softmax") is SoftmaxModel and model_type("nope") is None and model_type(["mlp"]) is None
    for args, match in ((("svm", 2, None), "model='svm': must be one of logistic, softmax, mlp"),
                        (("logistic", 3, None), "needs binary labels, found n_classes=3"),
                        (("mlp", 3, None), "hidden: required for model='mlp'"),
                        (("mlp", 3, 0), "hidden=0: must be an integer >= 1"),
                        (("softmax", 3, 4), "hidden=4: only allowed with model='mlp' \\(model='softmax'\\)")):
        with pytest.raises(FedsdeInputError, match=match):
            checked_model(*args)


def test_the_problem_dispatches_to_its_model():
    pb = federated_classification("digits", n_clients=3, partition="iid", seed=0)
    assert isinstance(pb.classifier, SoftmaxModel) and pb.classifier is pb.classifier
    assert (pb.classifier.n_features, pb.classifier.n_classes, pb.d) == (65, 10, 650)
    net = pb.replace(model="mlp", hidden=3, init_seed=2)
    assert isinstance(net.classifier, MLPModel) and net.d == net.classifier.d == 65 * 3 + 4 * 10
    np.testing.assert_array_equal(net.initial_weights(), net.classifier.init(2))
