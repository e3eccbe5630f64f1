"""The scaled end of a rule on a least-squares regression problem: more clients, another batch size, its
temperature and what the rule does not keep (notes).

How the ``clients`` and ``client-lr`` rules make ``κQ`` clients out of ``Q`` (``new_clients``):

* ``"copy"`` (default): every client is held by ``κ`` clients with weight ``p_k/κ`` each, all with the client's
  own rows, each drawing its own minibatches (independent).  The objective ``F``, its optimum and Hessian stay,
  and ``Σ_k p_k² Σ_k(w) → Σ_k p_k² Σ_k(w)/κ`` at every ``w`` for either sampling scheme, so the temperature is kept
  exactly and the discrepancy of the two ends is the rule's own ``O(η)`` error: "κ times as many clients like the
  ones you had", as quadratic clients are copied (:meth:`fedsde.problems.QuadraticProblem.replicated`).
* ``"split"``: every client's ``n_k`` rows are split at random (``seed``) into ``κ`` clients of ``⌊n_k/κ⌋`` or
  ``⌈n_k/κ⌉`` rows with weights ``p_k·n_kj/n_k`` (``F`` and its optimum stay): the same data spread over more
  clients, as :func:`fedsde.scaling.data.split_clients` does on classification data.  A part's minibatch
  covariance has its own finite-population factor ``(n_kj − b)/(b(n_kj − 1))`` (without replacement,
  :func:`fedsde.problems.regression.problem.noise_factors`) and its own rows' spread, so the temperature is kept only
  approximately (measured and reported, :func:`regression_notes`).

The ``batch`` rule sets ``b → κb`` (:meth:`fedsde.problems.RegressionProblem.replace`).  With replacement the
minibatch covariance is ``∝ 1/b`` and the rule keeps the temperature exactly; without replacement it is
``∝ (n_k − b)/(b(n_k − 1))`` (seed 002 Sec. 3's ``1/S − 1/N_k``), so client ``k``'s temperature is multiplied by
``(n_k − κb)/(n_k − b)`` and ``κb`` may not exceed any ``n_k``.
"""

from __future__ import annotations

import numpy as np

from fedsde._tolerances import EXACT_AGREEMENT
from fedsde.errors import FedsdeInputError
from fedsde.scaling.rules import FedAvgConfig, ScalingRule

#: how the ``clients`` and ``client-lr`` rules make κQ clients on a regression problem (module docstring)
NEW_CLIENTS = ("copy", "split")


def _rebuild(problem, Xs, ys, p, names, *, what: str):
    """A :class:`~fedsde.problems.RegressionProblem` with other clients, the rest of ``problem``'s settings kept."""
    from fedsde.problems import RegressionProblem

    if problem.intercept:  # from_clients appends the column of ones again
        Xs = [x[:, :-1] for x in Xs]
    feats = problem.feature_names[:-1] if problem.intercept else problem.feature_names
    return RegressionProblem.from_clients(
        Xs, ys, l2=problem.l2, intercept=problem.intercept, p=np.asarray(p), batch_size=problem.batch_size,
        sampling=problem.sampling, w0=problem.w0, feature_names=feats, client_names=names,
        name=f"{problem.name} ({what})", info=problem.info | {"scaling_clients": what},
    )


def copy_clients(problem, copies: int):
    """Every client held by ``copies`` clients with weight ``p_k/copies`` (module docstring), ``κQ`` clients.

    Parameters
    ----------
    problem : RegressionProblem
        ``Q`` clients, ``N`` rows.
    copies : int
        ``κ >= 1``.

    Returns
    -------
    RegressionProblem
        ``κQ`` clients (client ``k``'s copies next to each other), ``κN`` rows.
    """
    if copies == 1:
        return problem
    Xs, ys = problem.client_data()
    rep = [k for k in range(problem.Q) for _ in range(copies)]
    names = [f"{problem.client_names[k]}#{j}" for k in range(problem.Q) for j in range(copies)]
    return _rebuild(problem, [Xs[k] for k in rep], [ys[k] for k in rep], np.repeat(problem.p / copies, copies),
                    names, what=f"clients copied ×{copies}")


def split_rows(problem, parts: int, *, seed: int = 0):
    """Every client's rows split at random into ``parts`` clients with weights ``p_k·n_kj/n_k`` (module docstring).

    Parameters
    ----------
    problem : RegressionProblem
    parts : int
        ``κ >= 1``; every client needs ``κ`` rows (and ``κ·b`` without replacement, checked by
        :func:`check_new_clients`).
    seed : int
        Seed of the random split (one permutation of each client's rows).

    Returns
    -------
    RegressionProblem
        ``κQ`` clients (client ``k``'s parts next to each other), the same ``N`` rows.
    """
    if parts == 1:
        return problem
    Xs, ys = problem.client_data()
    rng = np.random.default_rng(seed)
    X_new, y_new, p_new, names = [], [], [], []
    for k in range(problem.Q):
        for j, idx in enumerate(np.array_split(rng.permutation(ys[k].size), parts)):
            X_new.append(Xs[k][idx])
            y_new.append(ys[k][idx])
            p_new.append(problem.p[k] * idx.size / ys[k].size)
            names.append(f"{problem.client_names[k]}/{j}")
    return _rebuild(problem, X_new, y_new, p_new, names, what=f"rows split ×{parts}, seed {seed}")


def check_new_clients(problem, rule: ScalingRule, kappa: float, new: FedAvgConfig, new_clients: str) -> None:
    """Refuse (one line) a scaled end whose clients cannot be built: a split client with fewer than ``κ`` rows (or
    ``κ·b`` without replacement), or ``κb`` above a client's rows under sampling without replacement (``κ`` is a
    whole number where the rule multiplies the clients)."""
    b_old = problem.batch_size
    if "clients" in rule.changes:
        parts = round(kappa)
        if new_clients == "split":
            need = parts * (b_old if problem.sampling == "without-replacement" else 1)
            k = int(np.argmin(problem.sizes))
            if problem.sizes[k] < need:
                why = (f"fewer than κ·batch_size = {need} (sampling='without-replacement' needs batch_size <= "
                       "every client's rows)" if problem.sampling == "without-replacement" else "fewer than κ")
                raise FedsdeInputError(
                    f"kappa={float(kappa)!r}: rule {rule.name!r} splits the {int(problem.sizes[k])} rows of client "
                    f"{problem.client_names[k]!r} into {parts} clients, {why}; use new_clients='copy' or a "
                    "smaller κ")
    b = new.batch_size
    if problem.sampling == "without-replacement" and b is not None and b > problem.sizes.min():
        k = int(np.argmin(problem.sizes))
        raise FedsdeInputError(
            f"kappa={float(kappa)!r}: rule {rule.name!r} maps batch_size={b_old} to {b}, more than the "
            f"{int(problem.sizes[k])} rows of client {problem.client_names[k]!r} (sampling='without-replacement' "
            "needs batch_size <= every client's rows)")


def end_problem(problem, new: FedAvgConfig, *, new_clients: str = "copy", seed: int = 0):
    """The regression problem the scaled configuration runs on (``new.clients`` and ``new.batch_size``), already
    checked by :func:`check_new_clients`."""
    out = problem
    if new.clients is not None and new.clients != problem.Q:
        parts = new.clients // problem.Q
        out = copy_clients(problem, parts) if new_clients == "copy" else split_rows(problem, parts, seed=seed)
    if new.batch_size is not None and new.batch_size != out.batch_size:
        out = out.replace(batch_size=new.batch_size)
    return out


def temperature_matrix(problem, config: FedAvgConfig, w) -> np.ndarray:
    """``s·η·Σ_k p_k² Σ_k(w)`` with the exact minibatch covariance ``Σ_k(w)`` of
    :meth:`~fedsde.problems.RegressionProblem.minibatch_covariance` (seed 002 Sec. 3), shape (d, d)."""
    Sig = problem.minibatch_covariance(w)
    return config.server_lr * config.eta * np.einsum("q,qij->ij", problem.p**2, Sig)


def regression_notes(rule: ScalingRule, kappa: float, problem, other, base_T: np.ndarray, scaled_T: np.ndarray,
                     *, new_clients: str, seed: int, batch=None, rounds: int | None = None) -> list[str]:
    """What the scaled clients are, and the measured change of the temperature ``Tr T(w*)`` between the ends
    when a rule that keeps it to first order does not keep it exactly (beyond :data:`EXACT_AGREEMENT`);
    ``batch`` (the ``batch`` rule's :class:`~fedsde.scaling.batch_rule.BatchFactor`): what ``g`` is, first."""
    notes = [] if batch is None or kappa == 1 else [batch.sentence(rounds)]
    parts = (other.Q // problem.Q) if "clients" in rule.changes else 1
    if parts > 1 and new_clients == "copy":
        notes.append(f"the {other.Q} clients are copies: each client's rows are held by {parts} clients with weight "
                     f"p_k/{parts}, each drawing its own minibatches, so Σ_k p_k²Σ_k(w) → /{parts} at every w and the "
                     "objective, its optimum and the temperature are kept exactly")
    elif parts > 1:
        notes.append(f"the {other.Q} clients are each client's rows split at random (seed {seed}) into {parts} "
                     f"clients with weights p_k·n_kj/n_k (the objective and its optimum are kept); each part has "
                     "its own minibatch covariance, so the temperature is kept only approximately")
    Tb, Ts = float(np.trace(base_T)), float(np.trace(scaled_T))
    if "temperature" not in rule.keeps or not Tb > 0 or abs(Ts - Tb) <= EXACT_AGREEMENT * Tb:
        return notes
    rel = (Ts - Tb) / Tb
    note = (f"the temperature Tr(s·η·Σ_k p_k²Σ_k(w*)) at the optimum changes by {rel:+.2%} between the ends "
            f"({Tb:.4g} → {Ts:.4g}), although rule {rule.name!r} keeps it to first order")
    b, n = problem.batch_size, problem.sizes.astype(np.float64)
    if batch is not None:
        note += (": one factor g keeps tr T(w*) (hence the first-order stationary excess loss) only up to the whole "
                 "rounds; the clients' own ratios f_k(b)/f_k(κb) differ, so the matrix T(w*) and T away from w* "
                 "move" if not batch.exact else ": the whole rounds move the server step off g")
    elif "batch_size" in rule.changes:
        noisy = n > b  # clients with minibatch noise at the base
        fac = (n[noisy] - kappa * b) / (n[noisy] - b) - 1.0 if noisy.any() else np.zeros(1)
        full = int(np.sum(noisy & (n <= kappa * b)))
        span = (f"{fac.min():+.1%} for every client" if np.ptp(fac) <= EXACT_AGREEMENT
                else f"{fac.min():+.1%} to {fac.max():+.1%} across clients")
        note += (f": sampling without replacement makes the minibatch covariance ∝ (n_k − b)/(b(n_k − 1)), not "
                 f"1/b, so client k's temperature changes by (n_k − κb)/(n_k − b) − 1 = {span} (b = {b} → "
                 f"{other.batch_size}); sampling='with-replacement' keeps it exactly")
        if full:
            note += f"; {full} of {problem.Q} clients then take full-batch steps (no minibatch noise)"
    elif parts > 1:
        note += ("; the split changes each client's finite-population factor and its rows' spread; "
                 "new_clients='copy' keeps it exactly")
    return [*notes, note]
