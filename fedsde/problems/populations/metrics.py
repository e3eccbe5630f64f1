"""Metrics of server weights over a client population (:class:`~fedsde.problems.populations.base.PopulationProblem`),
estimated on a seeded subsample of clients and rows.

A population of at most ``metric_samples`` training and test rows is evaluated exactly, on its materialised problem
(:mod:`fedsde.problems.metrics`).  Above, the metrics are estimated from ``c`` independent **draws**, each a client
and a block of its rows, so that only the drawn blocks are produced (a client's rows come in blocks of
:data:`BLOCK_ROWS`):

* a training draw takes client ``k`` with probability ``p_k``, then one of its ``N_k`` rows uniformly, and keeps the
  whole block of (up to) :data:`BLOCK_ROWS` rows holding it; the block's mean ``L_j`` of any per-row quantity is
  unbiased for the client's mean (a block is chosen with probability proportional to its rows), so
  ``E L_j = Σ_k p_k (1/N_k) Σ_i ℓ_i`` — the term of ``F``;
* ``train_loss``: ``F̂ = (1/c) Σ_j L_j + (λ/2)‖w‖²``, standard error ``sd(L_j)/√c``;
* ``grad_norm_sq``: the draws form :data:`~fedsde.problems.metrics.GROUPS` groups whose mean gradients ``ĝ_b``
  (with ``λw``) are independent and unbiased for ``∇F``; the U-statistic and its asymmetric 95 % interval of
  :func:`~fedsde.problems.estimates.gram_norm_sq`;
* ``test_accuracy``: draws of a client with probability ``M_k/M`` (its test rows) and a block of its test rows;
  the mean of the blocks' hit rates, standard error ``sd/√c``.

``c = metric_samples / BLOCK_ROWS`` (``metric_samples``: the problem's, else :data:`POPULATION_SAMPLES`; rounded
down to a multiple of the groups; at least two per group).  The draws come from ``metric_seed`` (default 0) and are
fixed per problem: every weight, round and replicate is evaluated on the same subsample.  ``sampling`` in the result
gives the draws (``clients``) and the rows they hold (``samples``).
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np

from fedsde._validate import positive_int

#: default ``metric_samples`` of a population: rows evaluated exactly up to this many, and rows of the subsample above
#: (fewer than a materialised problem's 65536: a metric costs rows × weights × d, evaluated at every recorded round)
POPULATION_SAMPLES = 1 << 14
#: rows of a client a draw evaluates (a block of consecutive rows of its split)
BLOCK_ROWS = 64
_SEED_TAG = 0x706F70  # the population sample's stream, apart from every other use of the seed


def population_is_small(problem, m: int) -> bool:
    """Whether the population is evaluated exactly (at most ``m`` training and at most ``m`` test rows)."""
    return problem.n_rows <= m and int(np.sum(problem.test_sizes)) <= m


def _draws(rng, weights: np.ndarray, sizes: np.ndarray, c: int):
    """``c`` draws: clients with probability ``weights``, a uniform row, its block; returns (clients, block starts,
    block lengths)."""
    cdf = np.cumsum(weights / weights.sum())
    k = np.minimum(np.searchsorted(cdf, rng.random(c), side="right"), weights.size - 1)
    row = np.minimum((rng.random(c) * sizes[k]).astype(np.int64), sizes[k] - 1)
    start = (row // BLOCK_ROWS) * BLOCK_ROWS
    return k, start, np.minimum(BLOCK_ROWS, sizes[k] - start)


def population_sample(problem, m: int, seed: int, groups: int) -> dict:
    """The draws the metrics of ``problem`` are evaluated on, their rows and labels (cached on the problem)."""
    m = positive_int("metric_samples", m, minimum=2 * groups)
    key = ("population_sample", m, seed)
    if key not in problem._cache:
        c = max(2, m // BLOCK_ROWS // groups) * groups
        rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG]))
        pop = problem.population
        out = {"clients": c}
        for split, weights, sizes in (("train", problem.p, problem.sizes), ("test", problem.test_sizes,
                                                                              problem.test_sizes)):
            if split == "test" and int(np.sum(sizes)) == 0:
                out[split] = None
                continue
            k, start, n = _draws(rng, np.asarray(weights, dtype=np.float64), np.asarray(sizes), c)
            parts = [pop.client_rows(int(kk), split, np.arange(s, s + nn)) for kk, s, nn in zip(k, start, n,
                                                                                                 strict=True)]
            out[split] = {"X": problem.design(np.concatenate([x for x, _ in parts])),
                          "y": np.concatenate([y for _, y in parts]), "n": n.astype(np.int64),
                          "of": int(np.sum(sizes))}
        problem._cache[key] = out
    return problem._cache[key]


def population_metrics(problem, W, need: list[str], *, m: int, seed: int, groups: int, chunk_size, grouped_norm_sq):
    """Estimates of the metrics ``need`` for weights ``W`` (c_w, d) (a torch tensor) over ``problem``'s population,
    their standard errors, the bounds of ``grad_norm_sq`` and the ``sampling`` record (see the module docstring);
    ``chunk_size`` and ``grouped_norm_sq`` are those of :mod:`fedsde.problems.metrics` (its caller).

    The per-draw sums come from the problem's ``sample_passes`` where it has one (a module trained by a population,
    :class:`~fedsde.problems.module.population.ModulePopulationProblem`), else from the built-in classifier
    (:func:`_classifier_passes`); the estimates and their standard errors are formed here for both."""
    import torch

    sample = population_sample(problem, m, seed, groups)
    c = sample["clients"]
    passes = getattr(problem, "sample_passes", None) or partial(_classifier_passes, problem, chunk_size=chunk_size)
    ydt = torch.int64 if getattr(problem, "uses_labels", True) else W.dtype

    def put(a, kind=W.dtype):
        return torch.as_tensor(np.ascontiguousarray(a)).to(device=W.device, dtype=kind)

    vals: dict[str, list] = {n: [] for n in need}
    errs: dict[str, list] = {n: [] for n in need}
    ends: dict = {}  # the bounds of grad_norm_sq
    tr = sample["train"]
    if "train_loss" in need or "grad_norm_sq" in need:
        X, y, n = put(tr["X"]), put(tr["y"], ydt), tr["n"]
        draw = put(np.repeat(np.arange(c), n), torch.int64)
        inv = put(np.repeat(1.0 / n, n))  # a row's weight in its draw's mean
        bounds = np.concatenate([[0], np.cumsum(n)])[:: c // groups]  # the rows of each group of draws
        got = passes(W, {"X": X, "y": y, "draw": draw, "loss": inv, "grad": inv * (groups / c), "bounds": bounds},
                     need, train=True)
        reg = problem.l2 * W
        if "train_loss" in need:
            L = got["L"]  # per-draw block means (c_w, c)
            vals["train_loss"].append(L.mean(-1) + 0.5 * torch.sum(reg * W, dim=-1))
            errs["train_loss"].append(L.std(-1) / math.sqrt(c))
        if "grad_norm_sq" in need:
            U, se, lower, upper = grouped_norm_sq(got["gb"] + reg)
            vals["grad_norm_sq"].append(U)
            errs["grad_norm_sq"].append(se)
            ends["grad_norm_sq"] = (lower, upper)
    te = sample["test"]
    if "test_accuracy" in need:
        Xt, yt = put(te["X"]), put(te["y"], torch.int64)
        draw_t = put(np.repeat(np.arange(c), te["n"]), torch.int64)
        inv_t = put(np.repeat(1.0 / te["n"], te["n"]))
        H = passes(W, {"X": Xt, "y": yt, "draw": draw_t, "loss": inv_t}, need, train=False)["H"]
        vals["test_accuracy"].append(H.mean(-1))
        errs["test_accuracy"].append(H.std(-1) / math.sqrt(c))
    cat = {n: torch.cat(v) for n, v in vals.items()}
    se = {n: torch.cat(v) for n, v in errs.items()}
    sampling = {
        "train": {"exact": False, "clients": c, "samples": int(tr["n"].sum()), "of": tr["of"]},
        "test": None if te is None else {"exact": False, "clients": c, "samples": int(te["n"].sum()), "of": te["of"]},
        "seed": seed, "metric_samples": m,
        "scheme": f"{c} i.i.d. draws of a client (probability p_k; test: M_k/M) and a block of up to {BLOCK_ROWS} of "
                  f"its rows; {groups} groups of draws for grad_norm_sq",
    }
    return cat, se, ends, sampling


def _classifier_passes(problem, W, rows: dict, need, *, train: bool, chunk_size) -> dict:
    """The per-draw sums of a built-in classifier for weights ``W`` (c_w, d), chunks of weights at a time, on the
    drawn ``rows`` (``X``, ``y``, the draw of every row ``draw``, its weights ``loss`` and ``grad``, the groups'
    row ``bounds``): ``L`` (c_w, c) of ``loss``-weighted row losses, ``gb`` (groups, c_w, d) of the groups'
    gradients with the row weights ``grad``, ``H`` (c_w, c) of ``loss``-weighted hits (``train=False``: the test
    rows)."""
    import torch

    X, y, draw, bounds = rows["X"], rows["y"], rows["draw"], rows.get("bounds")
    inv = rows
    model = problem.classifier
    c = int(draw.max()) + 1
    step = chunk_size(X.shape[0], 4 * model.n_outputs + 4 * int(problem.hidden) + 4, W.element_size())
    out: dict[str, list] = {"L": [], "gb": [], "H": []}
    for a in range(0, W.shape[0], step):
        Wc = W[a:a + step]
        A, Z = model.forward(Wc, X)
        if not train:
            hits = (model.predict(Z) == y).to(W.dtype) * inv["loss"]
            out["H"].append(torch.zeros((Wc.shape[0], c), dtype=W.dtype, device=W.device).index_add_(1, draw, hits))
            continue
        if "train_loss" in need:
            L = torch.zeros((Wc.shape[0], c), dtype=W.dtype, device=W.device)
            out["L"].append(L.index_add_(1, draw, model.losses(Z, y) * inv["loss"]))
        if "grad_norm_sq" in need:
            E = model.residuals(Z, y) * inv["grad"][:, None]
            out["gb"].append(torch.stack([model.backward(Wc, X[s:e], None if A is None else A[:, s:e], E[:, s:e])
                                          for s, e in itertools.pairwise(bounds)]))
    return {k: (torch.cat(v, 1 if k == "gb" else 0) if v else None) for k, v in out.items()}
