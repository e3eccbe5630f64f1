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

Randomness: one stream from ``seed`` draws the sizes, ``u`` and ``B``, then every client's parameters and rows in
client order.  From :data:`PARALLEL_CLIENTS` clients on (cross-device sizes) the parameters and rows of each block of
clients come from its own child stream of ``seed`` and the blocks are generated in parallel threads: the same law,
results independent of the number of threads, but other numbers than the one-stream order.
The resulting problem is a multinomial logistic regression (:class:`ClassificationProblem`, unstandardised
features, intercept, ridge ``l2``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fedsde._validate import positive_float, positive_int, unit_interval
from fedsde.problems.classification.models import check_memory
from fedsde.problems.classification.options import Classifier, Minibatches
from fedsde.problems.classification.problem import ClassificationProblem


@dataclass(frozen=True)
class SyntheticData:
    """The law of FedProx's synthetic(α, β) clients (see the module docstring), checked once where it is built; the
    generators that take it whole (:func:`synthetic_data_problem`,
    :meth:`fedsde.problems.populations.synthetic.SyntheticPopulation.from_data`) trust it.

    Parameters
    ----------
    alpha, beta : float
        Model and data heterogeneity (standard deviations, ``>= 0``).
    n_clients, dim, n_classes : int
        ``Q`` (30 in seeds 003/FedProx), features ``F`` (60) and classes ``C`` (10, at least 2).
    iid : bool
        The IID variant.
    test_fraction : float
        Held-out fraction of every client's samples, in ``[0, 1)`` (FedProx: 0.1).
    max_samples : int, optional
        Cap on ``n_k`` (at least 2; the log-normal law has a heavy tail, the cap keeps padded oracles small).
        ``None`` reproduces the generator.
    """

    alpha: float = 1.0
    beta: float = 1.0
    n_clients: int = 30
    dim: int = 60
    n_classes: int = 10
    iid: bool = False
    test_fraction: float = 0.1
    max_samples: int | None = None

    def __post_init__(self) -> None:
        checked = {"alpha": positive_float("alpha", self.alpha, allow_zero=True),
                   "beta": positive_float("beta", self.beta, allow_zero=True),
                   "n_clients": positive_int("n_clients", self.n_clients), "dim": positive_int("dim", self.dim),
                   "n_classes": positive_int("n_classes", self.n_classes, minimum=2), "iid": bool(self.iid),
                   "test_fraction": unit_interval("test_fraction", self.test_fraction)}
        if self.max_samples is not None:
            checked["max_samples"] = positive_int("max_samples", self.max_samples, minimum=2)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def name(self) -> str:
        """``synthetic(α,β)``, `` iid`` appended for the IID variant."""
        return f"synthetic({self.alpha:g},{self.beta:g})" + (" iid" if self.iid else "")

    def describe(self, seed: int) -> dict:
        """Provenance of the clients drawn from ``seed``, for records."""
        return {"dataset": "synthetic", "alpha": self.alpha, "beta": self.beta, "iid": self.iid, "seed": seed,
                "test_fraction": self.test_fraction, "max_samples": self.max_samples}


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
    """FedProx's synthetic(α, β) problem (see the module docstring): softmax regression with ridge ``l2`` on the
    clients of :class:`SyntheticData` ``(alpha, beta, n_clients, dim, n_classes, iid, test_fraction, max_samples)``
    (its parameters, checked there) drawn from ``seed``."""
    data = SyntheticData(alpha, beta, n_clients, dim, n_classes, iid, test_fraction, max_samples)
    return synthetic_data_problem(data, positive_int("seed", seed, minimum=0), classifier=Classifier("softmax", l2=l2))


def synthetic_data_problem(data: SyntheticData, seed: int, *, classifier: Classifier,
                           minibatches: Minibatches | None = None, p=None, name: str | None = None,
                           info: dict | None = None) -> ClassificationProblem:
    """The problem of the clients of ``data`` drawn from ``seed`` with the checked values ``classifier`` and
    ``minibatches`` (trusted, as ``data``: a problem file builds them once), weights ``p`` (default ``N_k/N``;
    checked), ``name`` (default :attr:`SyntheticData.name`) and ``info`` added to the provenance it records.  The
    rows are finite and the labels in ``0..C−1`` by construction: they are not checked again."""
    Q, F, C, iid, tf, max_samples = (data.n_clients, data.dim, data.n_classes, data.iid, data.test_fraction,
                                     data.max_samples)
    hint = "use fewer clients, a smaller dim or a smaller max_samples"
    least = min(50, max_samples or 50)  # every client has at least this many samples
    check_memory(f"n_clients={Q}, dim={F}", synthetic_memory_need(least * Q, least, F, C, iid=iid),
                 hint)  # before the sizes are drawn: a lower bound
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4.0, 2.0, Q).astype(np.int64) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, max_samples)
    check_memory(f"n_clients={Q}, dim={F}", synthetic_memory_need(int(sizes.sum()), int(sizes.max()), F, C, iid=iid),
                 hint)
    cov_sd = np.power(np.arange(1, F + 1, dtype=np.float64), -1.2) ** 0.5
    u = rng.normal(0.0, data.alpha, Q) if data.alpha > 0 else np.zeros(Q)
    B = rng.normal(0.0, data.beta, Q) if data.beta > 0 else np.zeros(Q)
    shared = (rng.normal(0.0, 1.0, (F, C)), rng.normal(0.0, 1.0, C)) if iid else None
    n_test = np.minimum(np.round(tf * sizes).astype(np.int64), sizes - 1)  # the first n_test rows of each client
    train, test = _Split(sizes - n_test, F), _Split(n_test, F)
    per = 0 if iid else F * C + C + F
    fill = _BlockFiller(sizes=sizes, n_test=n_test, u=u, B=B, shared=shared, F=F, C=C, per=per, cov_sd=cov_sd,
                        train=train, test=test)
    # the draws of client k, in the generator's order: W_k (F·C), b_k (C), v_k (F), then its rows (N_k·F); drawn for
    # blocks of clients at once into one buffer (one standard-normal stream: the values of a client-by-client loop)
    blocks = list(_blocks(per + sizes * F))
    if Q < PARALLEL_CLIENTS:
        buf = np.empty(max(int(np.sum(per + sizes[a:b] * F)) for a, b in blocks))
        for a, b in blocks:
            fill(a, b, rng.standard_normal(out=buf[:int(np.sum(per + sizes[a:b] * F))]))
    else:  # cross-device sizes: each block of clients from its own stream, the blocks filled in parallel threads
        streams = np.random.SeedSequence(seed).spawn(len(blocks))
        local = threading.local()  # one draw buffer per thread, reused block after block (no fresh pages per block)
        need = max(int(np.sum(per + sizes[a:b] * F)) for a, b in blocks)

        def run(i: int) -> None:
            a, b = blocks[i]
            if getattr(local, "buf", None) is None:
                local.buf = np.empty(need)
            z = local.buf[:int(np.sum(per + sizes[a:b] * F))]
            fill(a, b, np.random.default_rng(streams[i]).standard_normal(out=z))

        with ThreadPoolExecutor(max_workers=max(1, min(len(blocks), len(os.sched_getaffinity(0))))) as pool:
            list(pool.map(run, range(len(blocks))))
    arrays = dict(X=train.X, y=train.y, sizes=train.sizes, X_test=test.X, y_test=test.y, test_sizes=test.sizes,
                  n_classes=C)
    return ClassificationProblem._with_settings(arrays, classifier, minibatches, None, p=p,
                                                name=data.name if name is None else name,
                                                info=data.describe(seed) | (info or {}))


def _parameters(params: np.ndarray, u: np.ndarray, B: np.ndarray, shared, F: int, C: int):
    """``W_k = u_k + z`` (k, F, C), ``b_k = u_k + z`` (k, C), ``v_k = B_k + z`` (k, F) from the standard-normal draws
    ``params`` (k, F·C + C + F) of a block of clients (``normal(μ, 1)`` is ``μ + z``); IID: the shared ``(W, b)``
    and ``v = 0``."""
    if shared is not None:
        return shared[0], shared[1][None, :], np.zeros((u.size, F))
    W = u[:, None, None] + params[:, :F * C].reshape(-1, F, C)
    return W, u[:, None] + params[:, F * C:F * C + C], B[:, None] + params[:, F * C + C:]


class _BlockFiller:
    """Turns the standard-normal draws of clients ``[a, b)`` into their parameters, rows and labels, written into
    the train and test splits at the clients' own offsets (so blocks may be filled in any order)."""

    def __init__(self, *, sizes, n_test, u, B, shared, F: int, C: int, per: int, cov_sd, train, test):
        self.sizes, self.n_test, self.u, self.B, self.shared = sizes, n_test, u, B, shared
        self.F, self.C, self.per, self.cov_sd, self.train, self.test = F, C, per, cov_sd, train, test
        self.tr_off = np.concatenate([[0], np.cumsum(sizes - n_test)])
        self.te_off = np.concatenate([[0], np.cumsum(n_test)])

    def __call__(self, a: int, b: int, z: np.ndarray) -> None:
        F, C, per, cov_sd = self.F, self.C, self.per, self.cov_sd
        n, k = self.sizes[a:b], b - a
        if n.min() == n.max():  # equal sizes: views of the buffer, written straight into the splits
            z2 = z.reshape(k, -1)
            W, bias, v = _parameters(z2[:, :per], self.u[a:b], self.B[a:b], self.shared, F, C)
            rows = z2[:, per:].reshape(k, int(n[0]), F)
            nt = int(self.n_test[a])
            for part, lo, hi, at in ((self.test, 0, nt, self.te_off[a]), (self.train, nt, int(n[0]), self.tr_off[a])):
                dest = part.X[at:at + k * (hi - lo)].reshape(k, hi - lo, F)
                np.multiply(rows[:, lo:hi], cov_sd, out=dest)
                dest += v[:, None, :]  # x = v_k + N(0, Σ)
                # labels: argmax of softmax = argmax of the logits
                part.y[at:at + k * (hi - lo)] = np.argmax(np.matmul(dest, W) + bias[:, None, :], -1).ravel()
            return
        own = np.repeat(np.tile([True, False], k), np.stack([np.full(k, per), n * F], 1).ravel())
        W, bias, v = _parameters(z[own].reshape(k, per), self.u[a:b], self.B[a:b], self.shared, F, C)
        rows = z[~own].reshape(-1, F)
        rows *= cov_sd
        rows += np.repeat(v, n, axis=0)
        labels = _argmax_logits(rows, np.broadcast_to(W, (k, F, C)), np.broadcast_to(bias, (k, C)), n)
        held = (np.arange(rows.shape[0]) - np.repeat(np.cumsum(n) - n, n)) < np.repeat(self.n_test[a:b], n)
        for part, sel, off in ((self.test, held, self.te_off), (self.train, ~held, self.tr_off)):
            part.X[off[a]:off[b]] = rows[sel]
            part.y[off[a]:off[b]] = labels[sel]


class _Split:
    """Rows and labels of one split, in client order."""

    def __init__(self, sizes: np.ndarray, F: int):
        self.sizes = sizes
        self.X = np.empty((int(sizes.sum()), F))
        self.y = np.empty(self.X.shape[0], dtype=np.int64)


#: standard-normal draws generated at once (bounds the generator's work space)
BLOCK_DRAWS = 1 << 22
#: from this many clients on, each block of clients is drawn from its own stream (``SeedSequence(seed).spawn``) and
#: the blocks are filled in parallel threads: the same law, other numbers than the one-stream generator below it
PARALLEL_CLIENTS = 10_000


def _blocks(draws: np.ndarray):
    """Consecutive client ranges ``(a, b)`` of about :data:`BLOCK_DRAWS` draws each (at least one client)."""
    cum = np.cumsum(draws)
    a, Q = 0, draws.size
    while a < Q:
        base = cum[a - 1] if a else 0
        b = max(a + 1, int(np.searchsorted(cum, base + BLOCK_DRAWS, side="right")))
        yield a, min(b, Q)
        a = b


def _argmax_logits(rows: np.ndarray, W: np.ndarray, bias: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``argmax (x W_k + b_k)`` of every row (client by client, clients of similar size batched), shape (n,)."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    out = np.empty(rows.shape[0], dtype=np.int64)
    width = np.ceil(np.log2(np.maximum(sizes, 1))).astype(np.int64)  # batch clients of sizes (2^(j-1), 2^j]
    for j in np.unique(width):
        ks = np.flatnonzero(width == j)
        n = sizes[ks]
        pad = int(n.max())
        pos = np.arange(pad)
        real = pos < n[:, None]  # (k, pad)
        idx = np.where(real, starts[ks, None] + pos, 0)
        Z = np.matmul(rows[idx], W[ks]) + bias[ks, None, :]  # (k, pad, C)
        out[idx[real]] = np.argmax(Z, axis=-1)[real]  # argmax of softmax = argmax of the logits
    return out


def synthetic_memory_need(n_rows: int, largest: int, dim: int, n_classes: int, *, iid: bool = False) -> int:
    """Bytes :func:`synthetic_problem` and a run on it need at least: the rows (float64) three times (the train and
    test splits; their design rows, which the metrics and the oracles' padded layout copy; the validation's
    temporaries), the labels, and a block of draws (:data:`BLOCK_DRAWS`, or the ``largest`` client's draws).

    ``n_rows``: samples of all clients (train and test); ``largest``: samples of the largest client."""
    per_client = 0 if iid else dim * n_classes + n_classes + dim
    block = max(BLOCK_DRAWS, per_client + largest * dim)
    return 8 * (3 * n_rows * (dim + 1) + 2 * n_rows) + 8 * 4 * block
