"""Seeded partitioners of a labelled data set among federated clients.

Each partitioner returns a list of ``Q`` integer index arrays (one per client, into the ``labels`` array it
was given); together they cover each sample at most once.  All randomness comes from
``numpy.random.default_rng(seed)``.

* :func:`iid_partition` — uniform random split into (almost) equal parts;
* :func:`dirichlet_partition` — per-class Dirichlet(α) label skew (the "hetero-dir" scheme of NIID-Bench, used
  by seed 003's code, seed 004's NIID-1 and seed 000's Hybrid setting), with the balance cap and resampling
  until every client holds ``min_size`` samples, guarded against endless resampling;
* :func:`shard_partition` — the pathological split of McMahan et al.: sort by label, cut into equal shards, give
  each client ``shards_per_client`` of them (seed 000's "Statistical only" setting);
* :func:`quantity_skew_partition` — IID labels, client sizes from Dirichlet(β) proportions;
* :func:`niid2_partition` — seed 004's NIID-2: equal-size clients, ``n_biased`` of them holding ``C/5`` classes
  each and ``n_uniform`` holding every class.

:class:`Partition` holds a scheme and its parameters as one checked value (what
:func:`~fedsde.problems.classification.datasets.federated_classification` and the ``partition`` keys of a problem
file describe); :meth:`Partition.split` runs its partitioner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError


def _labels(labels) -> tuple[np.ndarray, int]:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise FedsdeInputError(f"labels: shape {y.shape} must be a non-empty vector")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.mod(y, 1) == 0):
            raise FedsdeInputError("labels: must be integers 0..C-1")
        y = y.astype(np.int64)
    if y.min() < 0:
        raise FedsdeInputError(f"labels: must be integers >= 0 (found {int(y.min())})")
    return y, int(y.max()) + 1


def label_histogram(labels, parts: list[np.ndarray], n_classes: int | None = None) -> np.ndarray:
    """Label counts of each client, shape (Q, C)."""
    y, C = _labels(labels)
    C = C if n_classes is None else int(n_classes)
    return np.stack([np.bincount(y[idx], minlength=C) for idx in parts])


def iid_partition(n_samples: int, n_clients: int, *, seed: int) -> list[np.ndarray]:
    """A uniform random split of ``range(n_samples)`` into ``n_clients`` parts whose sizes differ by at most one."""
    return _iid(positive_int("n_samples", n_samples), positive_int("n_clients", n_clients), seed)


def _iid(n_samples: int, n_clients: int, seed: int) -> list[np.ndarray]:
    if n_clients > n_samples:
        raise FedsdeInputError(f"n_clients={n_clients}: cannot exceed the number of samples ({n_samples})")
    perm = np.random.default_rng(seed).permutation(n_samples)
    base, extra = divmod(n_samples, n_clients)
    return _sorted_parts(perm, np.where(np.arange(n_clients) < extra, base + 1, base))


def _sorted_parts(values: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """``values`` cut into consecutive parts of ``counts``, each sorted (one sort for all parts)."""
    owner = np.repeat(np.arange(counts.size), counts)
    return np.split(values[np.lexsort((values, owner))], np.cumsum(counts)[:-1])


#: rejected draws of the Dirichlet partitioners before they give up (their default ``max_tries``)
DIRICHLET_TRIES = 1000


def dirichlet_partition(
    labels,
    n_clients: int,
    alpha: float,
    *,
    seed: int,
    min_size: int = 10,
    balance: bool = True,
    max_tries: int = DIRICHLET_TRIES,
) -> list[np.ndarray]:
    """Per-class Dirichlet(α) label skew ("hetero-dir"; seed 003 App. B, seed 004 NIID-1, seed 000 Hybrid).

    For every class ``c``: shuffle its samples, draw proportions ``q ~ Dir(α·1_Q)``, set to zero the
    proportions of clients that already hold at least ``N/Q`` samples (``balance``), renormalise, and cut the
    class at the cumulative proportions.  The whole draw is repeated until every client holds at least
    ``min_size`` samples.  Client sizes are unequal (which, with fixed batch size and epochs, is the system
    heterogeneity of seed 000's Hybrid setting).

    Parameters
    ----------
    labels : array of int, shape (N,)
    n_clients : int
        ``Q``.
    alpha : float
        Dirichlet concentration (small = strong label skew).
    seed : int
    min_size : int
        Smallest acceptable client size.
    balance : bool
        Apply the ``N/Q`` cap of the reference code.
    max_tries : int
        Stall guard: after this many rejected draws a :class:`FedsdeInputError` is raised instead of looping.

    Returns
    -------
    list of ndarray of int
        ``Q`` index arrays into ``labels`` (each shuffled).
    """
    return _dirichlet(_labels(labels), positive_int("n_clients", n_clients), positive_float("alpha", alpha), seed,
                      positive_int("min_size", min_size, minimum=0), bool(balance),
                      positive_int("max_tries", max_tries))


def _dirichlet(labels: tuple[np.ndarray, int], Q: int, alpha: float, seed: int, min_size: int, balance: bool,
               max_tries: int) -> list[np.ndarray]:
    y, C = labels
    N = y.size
    if Q * min_size > N:
        raise FedsdeInputError(
            f"min_size={min_size}: {Q} clients x {min_size} samples exceeds the {N} samples available"
        )
    rng = np.random.default_rng(seed)
    by_class = [np.flatnonzero(y == c) for c in range(C)]
    cap = N / Q
    smallest = 0
    for _ in range(max_tries):
        taken, owners = [], []
        sizes = np.zeros(Q)
        for idx_c in by_class:
            if idx_c.size == 0:
                continue
            idx_c = rng.permutation(idx_c)
            prop = rng.dirichlet(np.full(Q, alpha))
            if balance:
                prop = prop * (sizes < cap)
            total = prop.sum()
            prop = prop / total if total > 0 else np.full(Q, 1.0 / Q)
            cuts = (np.cumsum(prop) * idx_c.size).astype(np.int64)[:-1]
            owner = np.searchsorted(cuts, np.arange(idx_c.size), side="right")  # client k gets [cuts[k-1], cuts[k])
            sizes += np.bincount(owner, minlength=Q)
            taken.append(idx_c)
            owners.append(owner)
        smallest = int(sizes.min())
        if smallest >= min_size:
            owner = np.concatenate(owners)
            # each client's samples in class order, then shuffled (one permutation per client, in client order)
            parts = np.split(np.concatenate(taken)[np.argsort(owner, kind="stable")],
                             np.cumsum(np.bincount(owner, minlength=Q))[:-1])
            return [rng.permutation(part) for part in parts]
    raise FedsdeInputError(
        f"max_tries={max_tries}: no Dirichlet draw gave every client >= min_size={min_size} samples "
        f"(alpha={alpha}, n_clients={Q}, N={N}; smallest client in the last draw: {smallest}); "
        "raise alpha or max_tries, or lower min_size or n_clients"
    )


def shard_partition(labels, n_clients: int, shards_per_client: int = 2, *, seed: int) -> list[np.ndarray]:
    """Pathological label skew (McMahan et al. 2017; seed 000 "Statistical only").

    Samples are sorted by label (ties in random order) and cut into ``n_clients · shards_per_client`` shards of
    ``⌊N / n_shards⌋`` samples (the last ``N mod n_shards`` samples of the sorted order are left out, so every
    client has the same size); each client receives ``shards_per_client`` shards chosen at random.

    Returns
    -------
    list of ndarray of int
        ``Q`` index arrays of equal size ``shards_per_client · ⌊N / n_shards⌋``.
    """
    y, _ = _labels(labels)
    return _shards(y, positive_int("n_clients", n_clients), positive_int("shards_per_client", shards_per_client), seed)


def _shards(y: np.ndarray, Q: int, spc: int, seed: int) -> list[np.ndarray]:
    n_shards = Q * spc
    size = y.size // n_shards
    if size < 1:
        raise FedsdeInputError(
            f"n_clients={Q}, shards_per_client={spc}: {n_shards} shards need at least {n_shards} samples "
            f"(have {y.size})"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(y.size)
    order = perm[np.argsort(y[perm], kind="stable")]
    shards = order[: n_shards * size].reshape(n_shards, size)
    assign = rng.permutation(n_shards).reshape(Q, spc)
    return [rng.permutation(shards[a].reshape(-1)) for a in assign]


def quantity_skew_partition(
    n_samples: int,
    n_clients: int,
    beta: float,
    *,
    seed: int,
    min_size: int = 10,
    max_tries: int = DIRICHLET_TRIES,
) -> list[np.ndarray]:
    """Quantity skew with IID labels (NIID-Bench "iid-diff-quantity").

    Client proportions ``q ~ Dir(β·1_Q)`` are redrawn until every client gets at least ``min_size`` samples
    (stall guard ``max_tries``); a random permutation of the samples is cut at the cumulative proportions.
    """
    return _quantity(positive_int("n_samples", n_samples), positive_int("n_clients", n_clients),
                     positive_float("beta", beta), seed, positive_int("min_size", min_size, minimum=0),
                     positive_int("max_tries", max_tries))


def _quantity(N: int, Q: int, beta: float, seed: int, min_size: int, max_tries: int) -> list[np.ndarray]:
    if Q * min_size > N:
        raise FedsdeInputError(
            f"min_size={min_size}: {Q} clients x {min_size} samples exceeds the {N} samples available"
        )
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        prop = rng.dirichlet(np.full(Q, beta))
        cuts = (np.cumsum(prop) * N).astype(np.int64)[:-1]
        sizes = np.diff(np.concatenate([[0], cuts, [N]]))
        if sizes.min() >= min_size:
            return _sorted_parts(rng.permutation(N), sizes)
    raise FedsdeInputError(
        f"max_tries={max_tries}: no Dirichlet(beta={beta}) draw gave every one of {Q} clients >= "
        f"min_size={min_size} of the {N} samples; raise beta or max_tries, or lower min_size"
    )


def niid2_partition(
    labels,
    n_biased: int = 5,
    n_uniform: int = 1,
    *,
    seed: int,
    classes_per_biased: int | None = None,
) -> list[np.ndarray]:
    """Seed 004's NIID-2: equal-size clients, ``n_biased`` label-skewed and ``n_uniform`` uniform.

    With ``C`` classes and ``g = classes_per_biased`` (default ``C/5``, so 2 for ``C = 10``), biased client
    ``i`` holds classes ``(g·i + j) mod C`` for ``j < g``, ``C/g`` shards of each; every uniform client holds one
    shard of every class.  All clients therefore hold ``C`` shards.  The shard size is the largest that every
    class can supply (``⌊N_c / demand_c⌋`` minimised over classes; ``⌊N/(C·K)⌋`` for balanced classes, as in the
    reference code).  Biased clients come first, uniform clients last.
    """
    nb = positive_int("n_biased", n_biased, minimum=0)
    nu = positive_int("n_uniform", n_uniform, minimum=0)
    if nb + nu < 1:
        raise FedsdeInputError("n_biased + n_uniform: need at least one client")
    g = None if classes_per_biased is None else positive_int("classes_per_biased", classes_per_biased)
    return _niid2(_labels(labels), nb, nu, seed, g)


def _niid2(labels: tuple[np.ndarray, int], nb: int, nu: int, seed: int, g: int | None) -> list[np.ndarray]:
    y, C = labels
    g = C // 5 if g is None else g
    if nb and (g < 1 or C % g):
        raise FedsdeInputError(
            f"classes_per_biased={g}: must be >= 1 and divide the number of classes C={C}"
        )
    per_class = C // g if nb else 0  # shards of each held class
    holds = [[(g * i + j) % C for j in range(g)] for i in range(nb)]
    demand = np.full(C, nu, dtype=np.int64)
    for cls in holds:
        for c in cls:
            demand[c] += per_class
    counts = np.bincount(y, minlength=C)
    used = demand > 0
    shard = int(np.min(counts[used] // demand[used]))
    if shard < 1:
        raise FedsdeInputError(
            f"n_biased={nb}, n_uniform={nu}: some class has fewer samples than the {int(demand.max())} shards "
            "it must supply"
        )
    rng = np.random.default_rng(seed)
    pools = [list(np.split(rng.permutation(np.flatnonzero(y == c))[: demand[c] * shard], demand[c]))
             if demand[c] else [] for c in range(C)]
    parts = []
    for cls in holds:
        parts.append(np.concatenate([pools[c].pop() for c in cls for _ in range(per_class)]))
    for _ in range(nu):
        parts.append(np.concatenate([pools[c].pop() for c in range(C)]))
    return [rng.permutation(p) for p in parts]


#: the partition schemes and the parameters each reads (the keys a problem file may give with it)
SCHEME_KEYS: dict[str, tuple[str, ...]] = {
    "iid": (), "dirichlet": ("alpha", "min_size"), "shards": ("shards_per_client",),
    "quantity": ("quantity_beta", "min_size"), "niid2": ("n_biased", "n_uniform")}
PARTITIONS = tuple(SCHEME_KEYS)


@dataclass(frozen=True)
class Partition:
    """How a labelled data set is split among clients: a scheme of this module and its parameters, checked once.

    Parameters
    ----------
    partition : {"iid", "dirichlet", "shards", "quantity", "niid2"}
        :func:`iid_partition`, :func:`dirichlet_partition`, :func:`shard_partition`,
        :func:`quantity_skew_partition` or :func:`niid2_partition`.
    n_clients : int
        ``Q`` (not read by ``niid2``, which has ``n_biased + n_uniform`` clients).
    alpha : float
        dirichlet: concentration α > 0 (small = strong label skew).
    shards_per_client : int
        shards: shards per client.
    quantity_beta : float
        quantity: Dirichlet concentration β > 0 of the client sizes.
    n_biased, n_uniform : int
        niid2: clients holding ``C/5`` classes, and holding every class (at least one client in all).
    min_size : int
        dirichlet, quantity: least samples per client.

    Notes
    -----
    Every field is checked whatever the scheme; those the scheme does not read (:data:`SCHEME_KEYS`) are ignored,
    as by :func:`~fedsde.problems.classification.datasets.federated_classification` before it took this value
    (a problem file refuses them instead: :mod:`fedsde.problems.data_files`).
    """

    partition: str = "dirichlet"
    n_clients: int = 10
    alpha: float = 0.5
    shards_per_client: int = 2
    quantity_beta: float = 1.0
    n_biased: int = 5
    n_uniform: int = 1
    min_size: int = 10
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        choice("partition", self.partition, PARTITIONS)
        for name, minimum in (("n_clients", 1), ("shards_per_client", 1), ("n_biased", 0), ("n_uniform", 0),
                              ("min_size", 0)):
            object.__setattr__(self, name, positive_int(name, getattr(self, name), minimum=minimum))
        for name in ("alpha", "quantity_beta"):
            object.__setattr__(self, name, positive_float(name, getattr(self, name)))
        if self.partition == "niid2" and self.n_biased + self.n_uniform < 1:
            raise FedsdeInputError("n_biased + n_uniform: need at least one client")
        object.__setattr__(self, "validated", True)

    def keys(self) -> dict:
        """The parameters the scheme reads, by name (for records: ``{"alpha": 0.5, "min_size": 10}``)."""
        return {key: getattr(self, key) for key in SCHEME_KEYS[self.partition]}

    def split(self, labels, *, seed: int) -> list[np.ndarray]:
        """The clients' index arrays into ``labels`` (shape (N,)), drawn from ``seed`` by the scheme's
        partitioner (the same draw as calling it with these parameters; the value's fields are not checked
        again)."""
        y, C = _labels(labels)
        if self.partition == "iid":
            return _iid(y.size, self.n_clients, seed)
        if self.partition == "dirichlet":
            return _dirichlet((y, C), self.n_clients, self.alpha, seed, self.min_size, True, DIRICHLET_TRIES)
        if self.partition == "shards":
            return _shards(y, self.n_clients, self.shards_per_client, seed)
        if self.partition == "quantity":
            return _quantity(y.size, self.n_clients, self.quantity_beta, seed, self.min_size, DIRICHLET_TRIES)
        return _niid2((y, C), self.n_biased, self.n_uniform, seed, None)
