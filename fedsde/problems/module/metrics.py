"""Metrics of a :class:`~fedsde.problems.module.ModuleProblem` for a batch of weight vectors, on their device and in
their dtype, through the problem's functional copy of its module in eval mode (what
:func:`fedsde.problems.metrics.evaluate_metrics_torch` calls for module problems).

The rows are those of :func:`fedsde.problems.metrics.metric_sample`, as for the classification problems: every
training (and test) row while there are at most ``metric_samples`` (exact, standard error 0), else a seeded i.i.d.
subsample drawn with probability ``p_k/N_k`` per row, in ``GROUPS`` groups: ``train_loss`` the mean row loss plus
the ridge (standard error ``sd/√m``), ``grad_norm_sq`` the unbiased U-statistic of the groups' mean gradients with
its jackknife standard error (:func:`fedsde.problems.metrics.grouped_norm_sq`), ``test_accuracy`` the fraction of
correct predictions (``sd/√m`` when subsampled).  One forward (and backward) pass per weight vector, over chunks of
rows that fit :data:`fedsde.problems.module.problem.METRIC_BYTES`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsde._progress import advance


def _rows(problem, plan: dict | None, device, dtype) -> dict:
    """The plan's training and test rows on ``device`` (cached on the problem)."""
    _, data = problem._shared(device, dtype)
    if plan is None or (plan["rows"] is None and plan["test_rows"] is None):
        return data
    key = ("module_metric_rows", plan["describe"]["metric_samples"], plan["describe"]["seed"], str(device),
           str(dtype))
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


def module_metrics(problem, W: torch.Tensor, need: list[str], plan: dict | None = None) -> tuple[dict, dict]:
    """``(values, standard errors)`` of the metrics ``need`` for weights ``W`` (m, d): name -> Tensor (m,)."""
    from fedsde.problems.metrics import grouped_norm_sq

    fm, _ = problem._shared(W.device, W.dtype)
    data = _rows(problem, plan, W.device, W.dtype)
    X, y, s = data["X"], data["y"], data["s"]
    sampled = s is None
    n = X.shape[0]
    step = problem._rows_per_pass(W)
    cuts = [(a, min(a + step, n)) for a in range(0, n, step)]
    G = plan["groups"] if sampled else 1
    nb = n // G
    groups = [(b * nb, (b + 1) * nb) for b in range(G)]
    vals: dict[str, list] = {k: [] for k in need}
    errs: dict[str, list] = {k: [] for k in need}
    zero = W.new_zeros(())
    with fm.lock:
        for w in W:
            ridge = 0.5 * problem.l2 * torch.sum(w * w)
            if "train_loss" in need and (sampled or "grad_norm_sq" not in need):
                with torch.no_grad():
                    ell = torch.cat([fm.row_losses(w, X[a:b], y[a:b]) for a, b in cuts])
                if sampled:
                    vals["train_loss"].append(ell.mean() + ridge)
                    errs["train_loss"].append(ell.std() / math.sqrt(n))
                else:
                    vals["train_loss"].append(torch.sum(ell * s) + ridge)
                    errs["train_loss"].append(zero)
            if "grad_norm_sq" in need and sampled:
                gb = []
                for a, b in groups:
                    c = W.new_full((b - a,), 1.0 / nb)
                    gb.append(sum(fm.grad_and_value(w, X[lo:hi], y[lo:hi], c[lo - a:hi - a])[0]
                                  for lo, hi in _within(a, b, step)) + problem.l2 * w)
                U, se = grouped_norm_sq(torch.stack(gb))
                vals["grad_norm_sq"].append(U)
                errs["grad_norm_sq"].append(se)
            elif "grad_norm_sq" in need:
                g, f = w.new_zeros(w.shape), w.new_zeros(())
                for a, b in cuts:
                    ga, fa = fm.grad_and_value(w, X[a:b], y[a:b], s[a:b])
                    g, f = g + ga, f + fa
                g = g + problem.l2 * w
                vals["grad_norm_sq"].append(torch.sum(g * g))
                errs["grad_norm_sq"].append(zero)
                if "train_loss" in need:
                    vals["train_loss"].append(f + ridge)
                    errs["train_loss"].append(zero)
            if "test_accuracy" in need:
                Xt, yt = data["Xt"], data["yt"]
                with torch.no_grad():
                    hits = torch.cat([torch.argmax(fm.outputs(w, Xt[a:a + step]).reshape(-1, problem._logits), -1)
                                      == yt[a:a + step] for a in range(0, Xt.shape[0], step)]).to(W.dtype)
                vals["test_accuracy"].append(hits.mean())
                test_sampled = plan is not None and plan["test_rows"] is not None
                errs["test_accuracy"].append(hits.std() / math.sqrt(hits.numel()) if test_sampled else zero)
            advance()  # a progress bar the caller installed (fedsde._progress.counting), if any
    return ({k: torch.stack(v) for k, v in vals.items()}, {k: torch.stack(v) for k, v in errs.items()})


def _within(a: int, b: int, step: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + step, b)) for lo in range(a, b, step)]
