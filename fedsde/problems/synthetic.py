"""The synthetic(α, β) federated data set of FedProx (Li et al. 2020), used in seed 003's Fig. 5.

Generator (reference/seed-fednova.md §4.1, following ``litian96/FedProx`` ``generate_synthetic.py``), for each
client ``k``:

* size ``n_k = ⌊LogNormal(4, 2)⌋ + 50`` (power-law-like), split train/test ``1 − test_fraction`` / ``test_fraction``;
* model heterogeneity: ``u_k ~ N(0, α²)`` (α is the *standard deviation*, as in the reference code);
  ``W_k ∈ R^{F×C}`` and ``b_k ∈ R^C`` with entries ``~ N(u_k, 1)``;
* data heterogeneity: ``B_k ~ N(0, β²)``; ``v_k ∈ R^F`` with entries ``~ N(B_k, 1)``;
  ``x ~ N(v_k, Σ)`` with ``Σ = diag((j + 1)^{−1.2})``, ``j = 0..F−1``;
* labels ``y = argmax softmax(x W_k + b_k)``.

``iid=True`` gives the IID variant: one shared ``(W, b)`` drawn ``~ N(0, 1)`` and ``v = 0`` for every client.
The resulting problem is a multinomial logistic regression (:class:`ClassificationProblem`, unstandardised
features, intercept, ridge ``l2``).
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.logistic import ClassificationProblem


def synthetic_problem(
    alpha: float = 1.0,
    beta: float = 1.0,
    *,
    seed: int,
    n_clients: int = 30,
    dim: int = 60,
    n_classes: int = 10,
    iid: bool = False,
    test_fraction: float = 0.1,
    max_samples: int | None = None,
    l2: float = 1e-3,
) -> ClassificationProblem:
    """FedProx's synthetic(α, β) problem (see the module docstring).

    Parameters
    ----------
    alpha, beta : float
        Model and data heterogeneity (standard deviations, ``>= 0``).
    seed : int
    n_clients, dim, n_classes : int
        ``Q`` (30 in seeds 003/FedProx), features ``F`` (60) and classes ``C`` (10).
    iid : bool
        The IID variant.
    test_fraction : float
        Held-out fraction of every client's samples (FedProx: 0.1).
    max_samples : int, optional
        Cap on ``n_k`` (the log-normal law has a heavy tail; the cap keeps padded oracles small).  ``None``
        reproduces the generator.
    l2 : float
        Ridge coefficient of the regression.
    """
    alpha = positive_float("alpha", alpha, allow_zero=True)
    beta = positive_float("beta", beta, allow_zero=True)
    Q = positive_int("n_clients", n_clients)
    F = positive_int("dim", dim)
    C = positive_int("n_classes", n_classes, minimum=2)
    tf = float(test_fraction)
    if not 0.0 <= tf < 1.0:
        raise FedsdeInputError(f"test_fraction={test_fraction!r}: must lie in [0, 1)")
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4.0, 2.0, Q).astype(np.int64) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, positive_int("max_samples", max_samples, minimum=2))
    cov_sd = np.power(np.arange(1, F + 1, dtype=np.float64), -1.2) ** 0.5
    u = rng.normal(0.0, alpha, Q) if alpha > 0 else np.zeros(Q)
    B = rng.normal(0.0, beta, Q) if beta > 0 else np.zeros(Q)
    if iid:
        W_shared = rng.normal(0.0, 1.0, (F, C))
        b_shared = rng.normal(0.0, 1.0, C)
    Xtr, ytr, Xte, yte = [], [], [], []
    for k in range(Q):
        if iid:
            W, b, v = W_shared, b_shared, np.zeros(F)
        else:
            W = rng.normal(u[k], 1.0, (F, C))
            b = rng.normal(u[k], 1.0, C)
            v = rng.normal(B[k], 1.0, F)
        X = v + rng.standard_normal((int(sizes[k]), F)) * cov_sd
        y = np.argmax(X @ W + b, axis=1)  # argmax of softmax = argmax of the logits
        n_test = min(round(tf * X.shape[0]), X.shape[0] - 1)
        Xtr.append(X[n_test:])
        ytr.append(y[n_test:])
        Xte.append(X[:n_test])
        yte.append(y[:n_test])
    info = {"dataset": "synthetic", "alpha": alpha, "beta": beta, "iid": bool(iid), "seed": seed,
            "test_fraction": tf, "max_samples": max_samples}
    return ClassificationProblem.from_clients(
        Xtr, ytr, Xte, yte, model="softmax", n_classes=C, l2=l2,
        name=f"synthetic({alpha:g},{beta:g})" + (" iid" if iid else ""), info=info,
    )
