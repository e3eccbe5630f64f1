"""Metrics of a :class:`~fedsde.problems.module.ModuleProblem` for a batch of weight vectors, on their device and in
their dtype, through the problem's functional copy of its module in eval mode (what
:func:`fedsde.problems.metrics.evaluate_metrics_torch` calls for module problems).

The rows are those of :func:`fedsde.problems.metrics.metric_sample`, as for the classification problems: every
training (and test) row while there are at most ``metric_samples`` (exact, standard error 0), else a seeded i.i.d.
subsample drawn with probability ``p_k/N_k`` per row, in ``GROUPS`` groups: ``train_loss`` the mean row loss plus
the ridge (standard error ``sd/√m``), ``grad_norm_sq`` the unbiased U-statistic of the groups' mean gradients with
its asymmetric 95 % interval (:func:`fedsde.problems.estimates.gram_norm_sq`), ``test_accuracy`` the fraction of
correct predictions (``sd/√m`` when subsampled).

One forward and backward pass per weight vector gives both training metrics: the rows are cut into pieces of equal
length (within :data:`METRIC_BYTES`; the last piece of a group padded with rows of
weight 0), and :meth:`~fedsde.problems.module.functional.FunctionalModule.grads_and_losses` returns every piece's
gradient and row losses for a chunk of weight vectors at once — batched over vectors and pieces by ``vmap`` or one
piece after the other, whichever the problem's ``batching`` chooses (:mod:`fedsde.problems.module.batching`).
``test_accuracy`` is a forward pass per vector.  What a run may spend on its metrics is set by
:func:`metric_budget`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsde._progress import advance
from fedsde.problems.estimates import gram_norm_sq

#: work space of one metric pass (bytes); the rows and weight vectors per pass shrink to fit
METRIC_BYTES = 1 << 27
#: the share of a run's local-training work its metrics may take (a fifth of the run, a margin under the quarter)
METRIC_SHARE = 0.25


def _rows(problem, plan: dict | None, device, dtype) -> dict:
    """The plan's training and test rows on ``device`` (cached on the problem)."""
    _, data = problem._shared(device, dtype)
    if plan is None or (plan["rows"] is None and plan["test_rows"] is None):
        return data
    key = ("module_metric_rows", plan["describe"]["metric_samples"], plan["describe"]["seed"], plan["groups"],
           str(device), str(dtype))
    if key not in problem._cache:
        out = dict(data)
        if plan["rows"] is not None:
            idx = torch.as_tensor(np.asarray(plan["rows"]), device=device)
            out |= {"X": data["X"].index_select(0, idx), "y": data["y"].index_select(0, idx), "s": None}
        if plan["test_rows"] is not None:
            idx = torch.as_tensor(np.asarray(plan["test_rows"]), device=device)
            out |= {"Xt": data["Xt"].index_select(0, idx), "yt": data["yt"].index_select(0, idx)}
        problem._cache[key] = out
    return problem._cache[key]


def _pieces(X, y, weights, groups: int, step: int):
    """Rows ``X`` (n, …) cut into ``groups`` equal groups, each into pieces of at most ``step`` rows padded to one
    length (padding: row 0 with weight 0).  Returns the pieces' rows (K, r, …), targets, weights (K, r), the mask of
    real rows (K, r) and the pieces per group."""
    n = X.shape[0]
    per = n // groups
    r = max(1, min(per, step))
    P = -(-per // r)
    pos = torch.arange(P * r, device=X.device)
    base = (torch.arange(groups, device=X.device) * per)[:, None]
    real = (pos < per).expand(groups, P * r)
    idx = torch.where(real, base + pos, 0).reshape(groups * P, r)
    real = real.reshape(groups * P, r)
    return X[idx], y[idx], torch.where(real, weights[idx], 0.0), real, P


def module_metrics(problem, W: torch.Tensor, need: list[str], plan: dict | None = None) -> tuple[dict, dict, dict]:
    """``(values, standard errors, bounds)`` of the metrics ``need`` for weights ``W`` (m, d): name -> Tensor (m,)
    (``bounds``: ``grad_norm_sq`` on a subsample -> its interval (lower, upper),
    :func:`fedsde.problems.estimates.gram_norm_sq`)."""

    fm, _ = problem._shared(W.device, W.dtype)
    data = _rows(problem, plan, W.device, W.dtype)
    X, y, s = data["X"], data["y"], data["s"]
    sampled = s is None
    n, m = X.shape[0], W.shape[0]
    step = problem._rows_per_pass(W)
    G = plan["groups"] if sampled else 1
    vals: dict[str, list] = {k: [] for k in need}
    errs: dict[str, list] = {k: [] for k in need}
    ends: list = []
    train = [k for k in ("train_loss", "grad_norm_sq") if k in need]
    with fm.lock:
        if train:
            weights = X.new_full((n,), 1.0 / (n // G)) if sampled else s
            Xp, yp, cp, real, P = _pieces(X, y, weights, G, step)
            K, r = real.shape
            grad_bytes = K * problem.d * W.element_size()
            vc = int(max(1, min(m, step // (K * r), METRIC_BYTES // grad_bytes)))
            keep = real.reshape(-1)
            for a in range(0, m, vc):
                Wc = W[a:a + vc]
                ridge = 0.5 * problem.l2 * torch.sum(Wc * Wc, dim=-1)
                if "grad_norm_sq" in need:
                    gk, ell = fm.grads_and_losses(Wc, Xp, yp, cp, nominal=vc)  # (c, K, d), (c, K, r)
                else:
                    ell = torch.stack([torch.stack([_losses(fm, w, Xp[k], yp[k]) for k in range(K)]) for w in Wc])
                ell = ell.reshape(ell.shape[0], -1)[:, keep]  # (c, n): the real rows in order
                if "train_loss" in need and sampled:
                    vals["train_loss"].append(ell.mean(-1) + ridge)
                    errs["train_loss"].append(ell.std(-1) / math.sqrt(n))
                elif "train_loss" in need:
                    vals["train_loss"].append(ell @ s + ridge)
                    errs["train_loss"].append(torch.zeros_like(ridge))
                if "grad_norm_sq" in need:
                    gb = gk if P == 1 else gk.view(gk.shape[0], G, P, -1).sum(2)  # (c, G, d)
                    if problem.l2:
                        gb.add_(Wc[:, None, :], alpha=problem.l2)
                    if sampled:
                        U, se, lower, upper = gram_norm_sq(torch.bmm(gb, gb.transpose(1, 2)))
                        ends.append((lower, upper))
                    else:
                        U = torch.sum(gb[:, 0] * gb[:, 0], dim=-1)
                        se = torch.zeros_like(U)
                    vals["grad_norm_sq"].append(U)
                    errs["grad_norm_sq"].append(se)
                advance(Wc.shape[0] if "test_accuracy" not in need else Wc.shape[0] / 2)  # a bar the caller installed
        if "test_accuracy" in need:
            Xt, yt = data["Xt"], data["yt"]
            test_sampled = plan is not None and plan["test_rows"] is not None
            for w in W:
                hits = torch.cat([torch.argmax(fm.forward_loaded(w, Xt[a:a + step]).reshape(-1, problem._logits), -1)
                                  == yt[a:a + step] for a in range(0, Xt.shape[0], step)]).to(W.dtype)
                vals["test_accuracy"].append(hits.mean()[None])
                errs["test_accuracy"].append((hits.std() / math.sqrt(hits.numel()) if test_sampled
                                              else W.new_zeros(()))[None])
                advance(1 if not train else 0.5)
    bounds = {"grad_norm_sq": (torch.cat([e[0] for e in ends]), torch.cat([e[1] for e in ends]))} if ends else {}
    return ({k: torch.cat(v) for k, v in vals.items()}, {k: torch.cat(v) for k, v in errs.items()}, bounds)


def _losses(fm, w, x, y):
    from fedsde.problems.module.functional import row_loss

    return row_loss(fm.loss, fm.forward_loaded(w, x), y)


def metric_budget(problem, *, train_rows: float, train_steps: float, records: int,
                  share: float = METRIC_SHARE) -> tuple[int | None, int | None]:
    """``(metric_samples, metric_groups)`` that keep a run's metrics within ``share`` of its local training
    (``(None, None)``: every row fits, evaluate exactly).

    Cost model.  Local training, per replicate: ``train_steps`` client steps, each a pass of its minibatch's rows
    and one gradient (``train_rows`` rows in all).  Metrics, per replicate and recorded round: ``m`` training rows
    (one forward and backward pass gives ``train_loss`` and ``grad_norm_sq``), ``m/2`` for the test rows (forward
    only), and one gradient per group of the unbiased ``‖∇F‖²`` (``G`` groups; one when exact).  Rows and gradients
    are budgeted separately (a model may be dominated by either: a small convolution net on few rows by its
    gradients' size, a large one on many rows by its rows), each within ``share`` of training:

    * exact when ``records·(N + M/2) <= share·train_rows`` (``N`` training, ``M`` test rows);
    * else ``G = ⌊share·train_steps/records⌋`` clipped to [3, :data:`~fedsde.problems.metrics.GROUPS`] and ``m =
      ⌊share·train_rows/(1.5·records)⌋`` rounded down to a multiple of ``G``, at least 32 (rounded up to a
      multiple of ``G``) and ``2G``.

    The floors (3 groups, 32 rows) can exceed the share in runs of one or two short rounds.  A metric row is
    counted as dear as a training row, which overstates it: a metric pass runs many rows at once, a local step a
    minibatch.

    Parameters
    ----------
    problem : ModuleProblem
    train_rows, train_steps : float
        Rows and client steps one replicate runs over the run (``Σ_rounds Σ_k τ_k b_k`` and ``Σ_rounds Σ_k τ_k``,
        the participants' only).
    records : int
        Rounds at which the metrics are evaluated.
    share : float
    """
    from fedsde.problems.metrics import GROUPS

    records = max(1, int(records))
    rows = int(problem.sizes.sum())
    test = int(problem.y_test.shape[0]) if "test_accuracy" in problem.metric_names() else 0
    if (rows + 0.5 * test) * records <= share * train_rows:
        return None, None
    G = int(min(GROUPS, max(3, share * train_steps // records)))
    m = int(share * train_rows / (1.5 * records))
    return G * max(-(-32 // G), 2, m // G), G
