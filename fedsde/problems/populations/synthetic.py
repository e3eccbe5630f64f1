"""FedProx's synthetic(α, β) client by client: a :class:`~fedsde.problems.populations.base.ClientPopulation` whose
client ``k`` is produced from the seed and ``k`` alone.

The law is that of :mod:`fedsde.problems.classification.synthetic` (reference/seed-fednova.md §4.1): ``n_k =
⌊LogNormal(4, 2)⌋ + 50`` (capped at ``max_samples``), ``u_k ~ N(0, α²)``, ``B_k ~ N(0, β²)``, ``W_k, b_k`` entries ``~
N(u_k, 1)``, ``v_k`` entries ``~ N(B_k, 1)``, ``x ~ N(v_k, diag((j + 1)^{−1.2}))``, ``y = argmax(x W_k + b_k)``; the
first ``round(test_fraction · n_k)`` rows of a client are its test split.  The random numbers are laid out so that
nothing depends on the number of clients:

* ``n_k``, ``u_k``, ``B_k`` of all clients: three streams of the seed (``SeedSequence(seed, spawn_key=(0,))``,
  ``(1,)``, ``(2,)``), drawn in client order, so the first ``Q`` values are the same for every population of ``Q``
  or more clients (one integer and two floats per client: 10⁶ clients take 24 MB);
* IID variant: the shared ``(W, b)`` from stream ``(3,)``;
* client ``k``'s ``W_k, b_k, v_k``: stream ``(4, k, 0)``; its rows ``64(j − 1) … 64j − 1``: stream ``(4, k, j)``
  (:data:`ROW_CHUNK` rows per stream), so a few rows of a large client cost a few streams, not the client.

These are other random numbers than the one-stream generator of
:func:`fedsde.problems.classification.synthetic.synthetic_problem` (the same law; ``tests/test_population.py`` compares
the two simulated laws at 10³ clients within 5 standard errors).
"""

from __future__ import annotations

import numpy as np

from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.problems.classification.synthetic import SyntheticData

#: rows of a client drawn from one stream
ROW_CHUNK = 64
#: bytes per client at the peak of building a population and simulating on it (the per-client numbers, their
#: temporaries while drawn, the weights ``p`` and the participation draw's vectors; measured: about 86 bytes per
#: client between 10⁶ and 4·10⁶ clients), checked against the memory available before anything is drawn
PER_CLIENT_BYTES = 96
_SIZES, _U, _B, _SHARED, _CLIENT = range(5)


class SyntheticPopulation:
    """synthetic(α, β) of ``n_clients`` clients produced on demand (see the module docstring).

    Parameters are those of :func:`fedsde.problems.classification.synthetic.synthetic_problem` (all but ``seed``
    checked by the :class:`~fedsde.problems.classification.synthetic.SyntheticData` they build); a checked
    ``SyntheticData`` is taken whole by :meth:`from_data`.  ``rows_checked``: the rows are finite and the labels in
    ``0..C−1`` by construction (the materialised problem does not check them again).
    """

    rows_checked = True

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, *, seed: int, n_clients: int = 30, dim: int = 60,
                 n_classes: int = 10, iid: bool = False, test_fraction: float = 0.1, max_samples: int | None = None):
        data = SyntheticData(alpha, beta, n_clients, dim, n_classes, iid, test_fraction, max_samples)
        self._draw(data, positive_int("seed", seed, minimum=0))

    @classmethod
    def from_data(cls, data: SyntheticData, seed: int) -> SyntheticPopulation:
        """The population of the checked ``data`` and ``seed`` (trusted: a problem file checks them once)."""
        out = cls.__new__(cls)
        out._draw(data, seed)
        return out

    def _draw(self, data: SyntheticData, seed: int) -> None:
        """The per-client numbers of every client (sizes, shifts; the IID variant's shared model)."""
        self.data, self.seed = data, seed
        self.alpha, self.beta, self.Q, self.n_features = data.alpha, data.beta, data.n_clients, data.dim
        self.n_classes, self.iid, self.test_fraction = data.n_classes, data.iid, data.test_fraction
        self.max_samples = data.max_samples
        Q = self.Q
        from fedsde.problems.classification.models import check_memory

        check_memory(f"n_clients={Q}", PER_CLIENT_BYTES * Q, f"every client keeps about {PER_CLIENT_BYTES} bytes of "
                     "per-client numbers (sizes, shifts, weights, the participation draw's vectors); use fewer clients")
        total = self._stream(_SIZES).lognormal(4.0, 2.0, Q).astype(np.int64) + 50
        if self.max_samples is not None:
            total = np.minimum(total, self.max_samples)
        self.total = total
        self.test_sizes = np.minimum(np.round(self.test_fraction * total).astype(np.int64), total - 1)
        self.sizes = total - self.test_sizes
        self.u = self._stream(_U).normal(0.0, self.alpha, Q) if self.alpha > 0 else np.zeros(Q)
        self.B = self._stream(_B).normal(0.0, self.beta, Q) if self.beta > 0 else np.zeros(Q)
        F, C = self.n_features, self.n_classes
        if self.iid:
            g = self._stream(_SHARED)
            self.shared = (g.normal(0.0, 1.0, (F, C)), g.normal(0.0, 1.0, C))
        self.cov_sd = np.power(np.arange(1, F + 1, dtype=np.float64), -1.2) ** 0.5

    def _stream(self, *key: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))

    def parameters(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``W_k`` (F, C), ``b_k`` (C,), ``v_k`` (F,) of client ``k``."""
        F, C = self.n_features, self.n_classes
        if self.iid:
            return self.shared[0], self.shared[1], np.zeros(F)
        z = self._stream(_CLIENT, k, 0).standard_normal(F * C + C + F)
        u, B = self.u[k], self.B[k]
        return u + z[:F * C].reshape(F, C), u + z[F * C:F * C + C], B + z[F * C + C:]

    def client_rows(self, k: int, split: str = "train", rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Features (n, F) and labels (n,) of client ``k``'s ``split``: all its rows, or the rows numbered ``rows``
        within the split (only the streams holding them are drawn)."""
        k = int(k)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={k}: must lie in [0, {self.Q - 1}]")
        n_test = int(self.test_sizes[k])
        if split == "train":
            lo, hi = n_test, int(self.total[k])
        elif split == "test":
            lo, hi = 0, n_test
        else:
            raise FedsdeInputError(f"split={split!r}: must be 'train' or 'test'")
        F = self.n_features
        if rows is None:  # all rows of the split: the streams of its chunks, sliced
            first, last = lo // ROW_CHUNK, max(lo, hi - 1) // ROW_CHUNK
            chunks = np.arange(first, last + 1)
            sel = slice(lo - first * ROW_CHUNK, hi - first * ROW_CHUNK)
        else:
            want = lo + np.asarray(rows, dtype=np.int64).reshape(-1)
            if want.size and (want.min() < lo or want.max() >= hi):
                raise FedsdeInputError(f"rows: must lie in [0, {hi - lo - 1}] for client {k}'s {split} split")
            chunks = np.unique(want // ROW_CHUNK)
            sel = np.searchsorted(chunks, want // ROW_CHUNK) * ROW_CHUNK + want % ROW_CHUNK
        Z = np.empty((chunks.size * ROW_CHUNK, F))
        total = int(self.total[k])
        for i, j in enumerate(chunks.tolist()):
            n = min(ROW_CHUNK, total - j * ROW_CHUNK)
            self._stream(_CLIENT, k, j + 1).standard_normal(out=Z[i * ROW_CHUNK:i * ROW_CHUNK + n])
        X = Z[sel]
        W, b, v = self.parameters(k)
        X *= self.cov_sd
        X += v
        return X, np.argmax(X @ W + b, axis=1).astype(np.int64)

    def memory(self) -> int:
        """Bytes of the per-client vectors (sizes, test sizes, ``u``, ``B``) kept for every client."""
        return 8 * 5 * self.Q

    def describe(self) -> dict:
        return self.data.describe(self.seed) | {"population": "on demand"}


def synthetic_population_problem(alpha: float = 1.0, beta: float = 1.0, *, seed: int, n_clients: int = 30,
                                 dim: int = 60, n_classes: int = 10, iid: bool = False, test_fraction: float = 0.1,
                                 max_samples: int | None = None, l2: float = 1e-3, **settings):
    """FedProx's synthetic(α, β) as a :class:`~fedsde.problems.populations.base.PopulationProblem` (softmax regression,
    clients produced on demand); ``settings`` as :meth:`PopulationProblem.create`."""
    from fedsde.problems.populations.base import PopulationProblem

    pop = SyntheticPopulation(alpha, beta, seed=seed, n_clients=n_clients, dim=dim, n_classes=n_classes, iid=iid,
                              test_fraction=test_fraction, max_samples=max_samples)
    settings.setdefault("model", "softmax")
    return PopulationProblem.create(pop, l2=l2, name=f"synthetic({pop.alpha:g},{pop.beta:g})" + (" iid" if iid else ""),
                                    info=pop.describe(), **settings)
