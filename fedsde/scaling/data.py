"""Both ends of a scaling rule on a data problem, by simulation: metric curves vs ``τ`` and where they separate.

The two ends run the discrete simulator (:func:`fedsde.sim.simulate`, minibatch SGD clients) from the same start;
their server weights are recorded at common values of the SDE clock ``τ = n·s·η·E`` and evaluated on the *base*
problem's data (:func:`fedsde.problems.metrics.evaluate_metrics`), so both ends are measured on the same training
objective and the same test set.  Each metric curve carries its standard error over replicates.

Common random numbers: both ends run with the same seed and one random stream per replicate (``block_size=1`` of
:func:`fedsde.sim.simulate`), so replicate ``r`` of the base and replicate ``r`` of the scaled end form a pair, the
pairs are independent across ``r``, and ``κ = 1`` reproduces the base exactly (zero discrepancy).  The difference
of the ends is estimated from the per-replicate differences ``D_r = X_r^s − X_r^b``: mean ``D̄`` and standard error
``sd(D)/√R`` (:func:`paired_difference`); the ends *separate* at the first ``τ`` where ``|D̄| > z·se(D̄)``.

The ``clients`` rule splits every client's training samples at random into ``κ`` clients of (nearly) equal size
with weight ``p_k/κ`` each (:func:`split_clients`; each client's test samples stay with the first of its parts); the
``batch`` rule sets the minibatch size to ``κ·b``.  On data the temperature ``s·η·Σ_k p_k² Σ_k(w)`` is kept only
approximately (``Σ_k ∝ 1/b − 1/N_k``, so one client's temperature changes by the factor
``(1 − κb/N_k)/(1 − b/N_k)`` instead of 1): :func:`temperature_trace` measures it at both ends, and
:func:`invariant_notes` says when the two ends differ by more than :data:`TEMPERATURE_TOL`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedsde._tolerances import INT_TOL, ROUNDING_SLACK
from fedsde._validate import positive_int
from fedsde.errors import FedsdeInputError
from fedsde.scaling.batch_rule import BatchFactor, map_config, problem_batch_factor
from fedsde.scaling.rules import FedAvgConfig, ScalingRule, check_client_step, get_rule

#: relative change of the measured temperature between the two ends above which a note is issued
TEMPERATURE_TOL = 0.05


def split_clients(problem, parts: int, *, seed: int = 0):
    """Each client's training samples split at random into ``parts`` clients with weight ``p_k/parts``.

    Parameters
    ----------
    problem : ClassificationProblem
    parts : int
        ``κ >= 1``; every client needs at least ``κ`` training samples.
    seed : int
        Seed of the random split.
    """
    from fedsde.problems import ClassificationProblem

    if hasattr(problem, "split_clients"):  # a module problem splits its own rows
        return problem.split_clients(parts, seed=seed)
    parts = positive_int("kappa", parts)
    if parts == 1:
        return problem
    Xs, ys = problem.client_data()
    Xt, yt = problem.client_data("test")
    small = [k for k, y in enumerate(ys) if y.size < parts]
    if small:
        raise FedsdeInputError(f"kappa={parts}: client {small[0]} has {ys[small[0]].size} training samples, fewer "
                               f"than κ, so it cannot be split into {parts} clients")
    rng = np.random.default_rng(seed)
    X_new, y_new, Xt_new, yt_new, p_new = [], [], [], [], []
    empty_X, empty_y = Xt[0][:0], yt[0][:0]
    for k in range(problem.Q):
        for j, idx in enumerate(np.array_split(rng.permutation(ys[k].size), parts)):
            X_new.append(Xs[k][idx])
            y_new.append(ys[k][idx])
            Xt_new.append(Xt[k] if j == 0 else empty_X)
            yt_new.append(yt[k] if j == 0 else empty_y)
            p_new.append(problem.p[k] / parts)
    return ClassificationProblem.from_clients(
        X_new, y_new, Xt_new, yt_new, n_classes=problem.n_classes, fit_intercept=problem.fit_intercept,
        model=problem.model, hidden=problem.hidden or None, l2=problem.l2, p=np.asarray(p_new),
        batch_size=problem.batch_size, sampling=problem.sampling, init_seed=problem.init_seed,
        name=f"{problem.name} (clients split ×{parts})", info=problem.info | {"split_clients": parts},
    )


def end_problem(problem, config: FedAvgConfig, *, split_seed: int = 0, cache: dict | None = None):
    """The data problem a configuration runs on: ``clients = κQ`` splits the clients, ``batch_size`` sets ``b``.

    ``cache`` (a dict) reuses the problem built for the same ``(clients, batch_size)``, with what it has computed.
    """
    key = (config.clients, config.batch_size, split_seed)
    if cache is not None and key in cache:
        return cache[key]
    out = _end_problem(problem, config, split_seed=split_seed)
    if cache is not None:
        cache[key] = out
    return out


def _end_problem(problem, config: FedAvgConfig, *, split_seed: int):
    out = problem
    if config.clients is not None and config.clients != problem.Q:
        if config.clients % problem.Q:
            raise FedsdeInputError(f"clients={config.clients}: on a data problem the clients are split, so it must "
                                   f"be a multiple of Q={problem.Q}")
        out = split_clients(out, config.clients // problem.Q, seed=split_seed)
    if config.batch_size is not None and config.batch_size != out.batch_size:
        out = out.replace(batch_size=config.batch_size)
    return out


def temperature_trace(problem, config: FedAvgConfig, w) -> float:
    """``Tr(s·η·Σ_k p_k² Σ_k(w))`` with the minibatch covariance ``Σ_k(w)`` of seed 002, Sec. 3.

    ``Tr Σ_k = (1/b − 1/N_k)/(N_k − 1)·Σ_i ‖∇ℓ_i − ∇F_k‖²`` (0 when ``b >= N_k``), from per-sample gradients; the
    trace avoids the ``(d, d)`` matrices.
    """
    b = problem.batch_size
    total = 0.0
    if b is None:  # full batches: no minibatch noise
        return 0.0
    for k in range(problem.Q):
        Nk = int(problem.sizes[k])
        if b >= Nk or Nk < 2:
            continue
        G = problem.per_sample_grads(w, k)
        total += problem.p[k] ** 2 * (1.0 / b - 1.0 / Nk) * float(np.sum((G - G.mean(0)) ** 2)) / (Nk - 1)
    return config.server_lr * config.eta * total


def tau_grid(base: FedAvgConfig, scaled: FedAvgConfig, points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Common record points: ``K + 1`` values of ``τ`` reached by both ends at whole rounds.

    ``K`` is the largest divisor of ``gcd(n_b, n_s)`` not above ``points``; returns ``(tau, rounds_b, rounds_s)``.
    """
    g = math.gcd(base.rounds, scaled.rounds)
    K = max(k for k in range(1, min(g, max(points, 1)) + 1) if g % k == 0)
    j = np.arange(K + 1)
    rb, rs = j * (base.rounds // K), j * (scaled.rounds // K)
    return rb * base.tau_per_round, rb, rs


@dataclass(frozen=True)
class MetricCurves:
    """Metric curves of one end: ``mean[name]`` and ``se[name]`` of shape (K + 1,) at ``tau``.

    ``values[name]`` (shape (K + 1, R)) keeps the per-replicate values for paired comparisons (``None`` if not
    kept).
    """

    config: FedAvgConfig
    tau: np.ndarray
    rounds: np.ndarray
    mean: dict
    se: dict
    temperature_trace: float
    notes: list = field(default_factory=list)
    values: dict | None = field(default=None, repr=False)


def simulate_end(problem, eval_problem, config: FedAvgConfig, rounds=None, *, replicates: int, seed: int,
                 w0, metrics=None, device: str = "cpu", progress: bool = False) -> MetricCurves:
    """Simulate one end on ``device`` and evaluate its metrics on ``eval_problem`` at ``rounds`` (default: every
    round).

    ``metrics`` names the metrics (default: all of :func:`fedsde.problems.metrics.metric_names`); the temperature
    trace is measured at ``w0``; ``progress``: bars on stderr for the run and its metrics.
    """
    rounds = np.arange(config.rounds + 1) if rounds is None else np.asarray(rounds, dtype=np.int64)
    tau = rounds * config.tau_per_round
    from fedsde._progress import counting
    from fedsde.problems.metrics import evaluate_metrics
    from fedsde.sim import simulate

    res = simulate(problem, eta=config.eta, local_steps=config.local_steps, rounds=config.rounds,
                   replicates=replicates, seed=seed, server_lr=config.server_lr, w0=w0, record=rounds.tolist(),
                   block_size=1, device=device, progress=progress)  # one stream per replicate: pairs with the other end
    with counting(res.weights.shape[0] * res.weights.shape[1], "metrics", enabled=progress, unit="model"):
        vals = evaluate_metrics(eval_problem, res.weights, w0, names=metrics)
    mean = {k: v.mean(-1) for k, v in vals.items()}
    se = {k: v.std(-1, ddof=1) / np.sqrt(v.shape[-1]) if v.shape[-1] > 1 else np.full(v.shape[0], np.inf)
          for k, v in vals.items()}
    notes = []
    if problem.batch_size is not None and np.any(problem.sizes <= problem.batch_size):
        n = int(np.sum(problem.sizes <= problem.batch_size))
        notes.append(f"{n} of {problem.Q} clients have no more samples than batch_size={problem.batch_size}: "
                     "their local steps are full-gradient steps (no noise)")
    return MetricCurves(config, tau, rounds, mean, se, temperature_trace(problem, config, w0), notes, vals)


def paired_difference(base: MetricCurves, scaled: MetricCurves) -> tuple[np.ndarray, dict, dict]:
    """Mean difference ``scaled − base`` of each metric and its standard error, at the ``τ`` both ends reach.

    Returns ``(tau, diff, se)`` with ``diff[name]``, ``se[name]`` of shape (K',).  When both ends kept their
    per-replicate values with the same ``R`` (paired replicates, module docstring) the standard error is that of
    the per-replicate differences, ``sd(D)/√R``; otherwise the ends are treated as independent,
    ``√(se_b² + se_s²)``.  Two times are the same ``τ`` when they agree to :data:`~fedsde._tolerances.INT_TOL`
    relatively (:data:`~fedsde._tolerances.ROUNDING_SLACK` absolutely).
    """
    ib, is_ = np.nonzero(np.isclose(base.tau[:, None], scaled.tau[None, :], rtol=INT_TOL, atol=ROUNDING_SLACK))
    diff, se = {}, {}
    for name in base.mean:
        vb = None if base.values is None else base.values.get(name)
        vs = None if scaled.values is None else scaled.values.get(name)
        if vb is not None and vs is not None and vb.shape[-1] == vs.shape[-1]:
            D = vs[is_] - vb[ib]
            R = D.shape[-1]
            diff[name] = D.mean(-1)
            se[name] = D.std(-1, ddof=1) / np.sqrt(R) if R > 1 else np.full(D.shape[0], np.inf)
        else:
            diff[name] = scaled.mean[name][is_] - base.mean[name][ib]
            se[name] = np.sqrt(base.se[name][ib] ** 2 + scaled.se[name][is_] ** 2)
    return base.tau[ib], diff, se


def separation(base: MetricCurves, scaled: MetricCurves, z: float = 3.5) -> dict:
    """First ``τ`` at which each metric's ends differ by more than ``z`` standard errors of the difference (or
    ``None``); the standard error is the paired one when both ends kept their replicates
    (:func:`paired_difference`).

    Only the values of ``τ`` that both curves reach (to rounding) are compared.  A difference without noise
    (standard error 0) counts when it exceeds rounding, :data:`~fedsde._tolerances.ROUNDING_SLACK` relative to
    ``max(1, max|base|)``.
    """
    tau, diffs, ses = paired_difference(base, scaled)
    out = {}
    for name in base.mean:
        diff, se = np.abs(diffs[name]), ses[name]
        scale = max(1.0, float(np.max(np.abs(base.mean[name]))))
        hit = np.flatnonzero(np.where(se > 0, diff > z * se, diff > ROUNDING_SLACK * scale))
        out[name] = float(tau[hit[0]]) if hit.size else None
    return out


def invariant_notes(rule: ScalingRule, kappa: float, problem, other, base: MetricCurves, scaled: MetricCurves,
                    tol: float = TEMPERATURE_TOL) -> list[str]:
    """Notes for first-order invariants that the rule should keep but the measured ends do not (to within ``tol``).

    The temperature traces of the two ends are measured at the start point.  For rules that change the batch size
    or split the clients (``batch``, ``clients``, ``client-lr``) the note gives the reason: the minibatch
    covariance is ``∝ 1/b − 1/N_k``, not ``1/b``, so a client's temperature changes by
    ``(1 − κb/N_k)/(1 − b/N_k)``, evaluated at the mean client size.
    """
    Tb, Ts = base.temperature_trace, scaled.temperature_trace
    if not Tb > 0 or "temperature" not in rule.keeps:
        return []
    rel = (Ts - Tb) / Tb
    if abs(rel) <= tol:
        return []
    note = (f"the temperature Tr(s·η·Σ_k p_k²Σ_k) at the start changes by {rel:+.1%} between the ends ({Tb:.4g} → "
            f"{Ts:.4g}), more than the {tol:.0%} tolerance, although rule {rule.name!r} keeps it to first order")
    b, bs = base.config.batch_size, scaled.config.batch_size
    if rule.finite_population:
        note += (": the batch rule's one factor g keeps the trace at the start point; it moves where the clients' "
                 "ratios f_k(b)/f_k(κb) differ and their gradient spreads change, or with the whole rounds")
    elif ("batch_size" in rule.changes or "clients" in rule.changes) and b is not None:
        N = float(np.mean(problem.sizes))
        Ns = float(np.mean(other.sizes))
        f_b = max(0.0, 1.0 / b - 1.0 / N)
        pred = max(0.0, 1.0 - kappa * b / N) / (1.0 - b / N) if N > b else float("nan")
        note += (f": the minibatch covariance is ∝ 1/b − 1/N_k, not 1/b (b = {b} → {bs}, mean N_k = {N:.4g} → "
                 f"{Ns:.4g}; 1/b − 1/N_k = {f_b:.4g} at the base), so each client's temperature changes by "
                 f"(1 − κb/N_k)/(1 − b/N_k) = {pred - 1:+.1%} at the mean N_k; the rule holds only while κ·b ≪ N_k")
        if "clients" in rule.changes:
            note += " (the split also changes each client's gradient spread)"
    return [note]


@dataclass(frozen=True)
class DataScaling:
    """Both ends of a rule on a data problem: metric curves vs ``τ`` and where they separate."""

    rule: ScalingRule
    kappa: float
    base: MetricCurves
    scaled: MetricCurves
    separation: dict
    z: float
    notes: list = field(default_factory=list)
    batch: BatchFactor | None = None  # the batch rule's factor g (fedsde.scaling.batch_rule)


def compare_data(problem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float, *, replicates: int = 16,
                 seed: int = 0, w0=None, points: int = 20, z: float = 3.5, memory_limit=None,
                 device: str = "cpu", progress: bool = False) -> DataScaling:
    """Simulate both ends of ``rule`` with factor ``kappa`` on a data problem (module docstring).

    ``config.clients``/``config.batch_size`` default to the problem's; ``w0`` to ``problem.initial_weights()``.
    Both ends use ``seed`` with one stream per replicate (common random numbers, paired replicates: ``κ = 1``
    gives exactly the base); both run on ``device``.  What the run needs (:func:`memory_need`) is checked against
    ``memory_limit`` (default: what is free, see :func:`fedsde._memory.available_memory`) before anything is built
    or simulated.  ``progress``: bars on stderr for each end's run and metrics.
    """
    rule = get_rule(rule)
    w_start = problem.initial_weights() if w0 is None else np.asarray(w0, dtype=np.float64)
    config, new = map_end(problem, config, rule, kappa, w_ref=w_start)
    check_memory(problem, config, new, replicates=replicates, points=points, memory_limit=memory_limit)
    other = end_problem(problem, new, split_seed=seed)
    _, rb, rs = tau_grid(config, new, points)
    base = simulate_end(problem, problem, config, rb, replicates=replicates, seed=seed, w0=w_start, device=device,
                        progress=progress)
    scaled = simulate_end(other, problem, new, rs, replicates=replicates, seed=seed, w0=w_start, device=device,
                          progress=progress)
    batch = problem_batch_factor(problem, kappa, w_start) if rule.finite_population else None
    notes = ([] if batch is None or kappa == 1 else [batch.sentence(config.rounds, "horizon")]) + invariant_notes(
        rule, float(kappa), problem, other, base, scaled)
    return DataScaling(rule, float(kappa), base, scaled, separation(base, scaled, z), z, notes, batch)


def map_end(problem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float, *,
            w_ref=None) -> tuple[FedAvgConfig, FedAvgConfig]:
    """Validate and map without building anything: ``(base config, scaled config)`` for a data problem.

    ``batch`` puts ``g = f(b)/f(κb)`` on the server step (:mod:`fedsde.scaling.batch_rule`; clients of different
    sizes: the trace-matched ``g`` at ``w_ref``, default the problem's initial weights).  Raises a
    :class:`FedsdeInputError` when the rule cannot apply (non-integer fields, a ``clients`` factor that is not a
    whole number, ``κb`` above a client's samples for ``batch``, ``η·λ_max ≥ 2`` at either end for the linear
    models).
    """
    from dataclasses import replace

    rule = get_rule(rule)
    if problem.batch_size is None:
        raise FedsdeInputError("problem: a data problem needs batch_size for the scaling rules (set it in the file)")
    config = replace(config, clients=config.clients or problem.Q, batch_size=config.batch_size or problem.batch_size)
    if "clients" in rule.changes and (round(kappa) != kappa or kappa < 1):
        raise FedsdeInputError(f"kappa={float(kappa)!r}: rule {rule.name!r} on a data problem splits each client "
                               "into κ clients, so κ must be a whole number >= 1")
    # batch: g on the server step, whole rounds that keep τ (the curves are compared at common τ)
    new = map_config(problem, config, rule, kappa, keep="horizon", w_ref=w_ref)[0]
    model = getattr(problem, "classifier", None)  # module problems: a network, no global curvature bound
    if model is not None and model.curvature is not None:  # a network has no global curvature bound
        lam = float(np.max(problem.max_curvature()))
        check_client_step(config.eta, lam, which="base")
        check_client_step(new.eta, lam, which=f"kappa={float(kappa)!r} (rule {rule.name!r}, eta={new.eta:g})")
    return config, new


def prepare_end(problem, config: FedAvgConfig, rule: str | ScalingRule, kappa: float, *, split_seed: int = 0,
                cache: dict | None = None):
    """Validate, map and build: ``(base config, scaled config, scaled problem)`` for a data problem
    (:func:`map_end`, then :func:`end_problem`)."""
    config, new = map_end(problem, config, rule, kappa)
    return config, new, end_problem(problem, new, split_seed=split_seed, cache=cache)


def memory_need(problem, base: FedAvgConfig, scaled: FedAvgConfig, *, replicates: int, points: int) -> int:
    """Bytes that :func:`compare_data` needs at its peak (float64; an estimate, like the simulator's).

    The sum of: the split copy of the data (rules that change ``Q``); for the larger end, the simulator's padded
    client data (features, their transpose, labels: ``Q·N_max·(2F + C)``), one replicate's working set (about ten
    ``(Q, d)`` tensors and the forward pass of a minibatch, ``Q·rows·(F + 3·max(C, H))`` with ``rows = N_max`` when
    the oracle shares client rows, else ``b``; the simulator chunks the replicates to fit the rest) and the recorded
    weights ``(K + 1, R, d)``; the larger of the metric evaluation (forward and backward passes of a chunk of
    :data:`fedsde.problems.metrics.CHUNK` weights over the ``N`` training and ``M`` test samples) and the
    per-sample gradients of the temperature trace; and the per-replicate metric values of both ends.  Measured
    on digits (64 replicates; softmax, clients rule κ = 4: 51 MiB against 54 estimated; MLP, batch rule κ = 2:
    154 MiB against 170) the peak stays below this estimate when the run is left only that much memory (the
    simulator then runs fewer replicates at once).
    """
    from fedsde.clients.data_oracles import DENSE_FACTOR
    from fedsde.problems import metrics

    item = 8
    if hasattr(problem, "functional"):  # a module problem: its oracle's work space per block
        return _module_memory_need(problem, base, scaled, replicates=replicates, points=points)
    F = problem.n_features + int(problem.fit_intercept)
    C, d = problem.n_outputs, problem.d
    width = max(C, int(problem.hidden or 0))
    T = len(tau_grid(base, scaled, points)[0])
    parts = max(1, (scaled.clients or problem.Q) // (base.clients or problem.Q))
    N, M = problem.X.shape[0], problem.X_test.shape[0]
    n_max = int(np.max(problem.sizes))

    def end(cfg: FedAvgConfig, Q: int, rows_max: int) -> int:
        b = min(cfg.batch_size or rows_max, rows_max)
        rows = rows_max if rows_max <= DENSE_FACTOR * b else b
        layout = item * Q * rows_max * (2 * F + C)
        per_rep = item * (10 * Q * d + 6 * Q + 6 * d) + item * Q * rows * (F + 3 * width)
        return layout + per_rep + item * T * replicates * d

    split = item * (N + M) * (F + 1) if parts > 1 else 0
    ends = max(end(base, problem.Q, n_max), end(scaled, problem.Q * parts, -(-n_max // parts)))
    # metrics: about five (CHUNK, N + M, width) arrays at once (measured: 6.4× CHUNK·N·C on digits softmax), on at
    # most METRIC_SAMPLES samples and within the chunk's work space CHUNK_BYTES where the metrics module caps them
    n_eval = min(N + M, 2 * getattr(metrics, "METRIC_SAMPLES", N + M))
    forward = item * getattr(metrics, "CHUNK", 64) * n_eval * 5 * width
    forward = min(forward, getattr(metrics, "CHUNK_BYTES", forward))
    evaluate = max(forward + item * N * F, item * 2 * n_max * d)
    return int(split + ends + evaluate + item * 2 * T * replicates * len(metrics.METRICS))


def _module_memory_need(problem, base: FedAvgConfig, scaled: FedAvgConfig, *, replicates: int, points: int) -> int:
    """:func:`memory_need` of a module problem: the rows (copied once when split), the larger end's local step
    (:func:`fedsde.clients.module_oracle.step_bytes`, one replicate per block as :func:`simulate_end` runs) and
    about ten ``(Q, d)`` tensors per replicate, the recorded weights and the metrics' per-replicate values."""
    import torch

    from fedsde.clients.module_oracle import step_bytes

    item, d = 8, problem.d
    T = len(tau_grid(base, scaled, points)[0])
    parts = max(1, (scaled.clients or problem.Q) // (base.clients or problem.Q))
    Qs = problem.Q * parts
    rows = item * (problem.X.size + problem.X_test.size) * (2 if parts > 1 else 1)
    step = max(step_bytes(problem, problem.Q, 1, torch.float64), step_bytes(problem, Qs, 1, torch.float64))
    return int(rows + step + item * replicates * (10 * Qs * d + T * d) + item * 2 * T * replicates * 4)


def check_memory(problem, base: FedAvgConfig, scaled: FedAvgConfig, *, replicates: int, points: int,
                 concurrent: int = 1, memory_limit=None) -> int:
    """Refuse, with the estimate, a comparison whose :func:`memory_need` (times ``concurrent`` runs at once) does
    not fit in what is available; returns the estimate in bytes."""
    from fedsde._memory import available_memory, memory_fits

    need = concurrent * memory_need(problem, base, scaled, replicates=replicates, points=points)
    what = f"replicates={replicates}" + (f" on {concurrent} workers" if concurrent > 1 else "")
    memory_fits(what, need, available_memory("cpu", memory_limit),
                "use fewer replicates or points" + (", fewer workers" if concurrent > 1 else "")
                + " or a smaller kappa, or set FEDSDE_MEMORY_LIMIT if more memory is free than detected")
    return need
