"""``fedsde exact`` on a least-squares regression file: exact moments of FedAvg with real minibatch noise.

The JSON keys are those of quadratic clients where they apply (``optimum``, ``weights``, ``stationary`` {``mean``,
``cov``}, ``transient`` {``rounds``, ``mean``, ``cov``}, ``notes``) plus

* ``round_law``: the mean map ``E[w_{n+1} | w_n] = A w_n + a`` (``mean_map`` A, ``mean_offset`` a), its spectral
  radius and, with a stationary law, the spectral radius of the second-moment operator;
* ``surrogate``: seed 002's constant-noise model fitted to the same data (:func:`fedsde.exact.
  constant_noise_surrogate`: the same client Hessians and optima, ``Σ_k`` the minibatch covariance at ``w*``), its
  ``stationary`` law and how far it is from the exact one (``cov_rel_error`` ``‖P_sur − P‖_F/‖P‖_F``,
  ``variance_ratio`` ``tr P_sur / tr P``, ``mean_error`` in units of the exact spread), and with ``--rounds`` its
  ``transient`` law and ``transient_cov_rel_error``.

Conventions (:mod:`fedsde.problems.regression.problem`): ``p_k ∝ n_k`` unless the file gives ``p``; a local step's
gradient is the mean of the ``b`` sampled rows' gradients plus ``l2·w``; the start is ``w = 0`` (or the file's ``w0``)
unless ``--w0``; the server step is ``w + s Σ_k ω_k Δ_k`` with ``ω = p`` (FedAvg) or the rule's exact-law weights.

Without a stationary law (the mean map or the second-moment operator does not contract) the command is a one-line
error naming the spectral radius, unless ``--rounds`` asks for the transient law: then ``stationary`` is null and
``notes`` says why (with a warning, as on quadratic clients when the chain diverges).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedsde._cli.common import (
    aggregator_from_args,
    aggregator_options,
    emit,
    fmt_array,
    local_steps_from_args,
    parse_vector,
    warn,
)
from fedsde.errors import FedsdeInputError


def _rule_weights(args: argparse.Namespace, problem, local_steps) -> np.ndarray:
    """The exact-law weights ``ω`` of ``--aggregator``; a rule that needs data a regression file does not carry
    (FedDisco's label distributions) is a one-line error saying how to give them."""
    from fedsde.aggregators import get_aggregator
    from fedsde.exact import aggregator_round_weights

    agg = aggregator_from_args(args)
    try:
        get_aggregator(agg).check_problem(problem, args.problem)
    except FedsdeInputError:
        raise FedsdeInputError(
            f"--aggregator={args.aggregator}: the rule needs each client's label distribution and a regression "
            f"problem has no labels; give them with --aggregator-option label_distributions=[[...], ...] "
            f"({problem.Q} rows, one per client)") from None
    return aggregator_round_weights(problem, agg, local_steps, participation=args.participation)


def _surrogate(problem, args, local_steps, omega, w0, exact, transient) -> tuple[dict, list[str]]:
    """The constant-noise surrogate's laws and their errors against the exact ones."""
    from fedsde.errors import NoStationaryLawError
    from fedsde.exact import constant_noise_surrogate, stationary_law, surrogate_gap, transient_moments

    sur = constant_noise_surrogate(problem)
    kw = {"participation": args.participation, "weights": omega}
    out: dict = {"model": "seed 002, Assumption 6.1 with constant noise: U_k = A_k + l2 I, a_k = U_k^-1 c_k, "
                          "Sigma_k = minibatch covariance at w*", "Sigma": sur.Sigma, "stationary": None}
    notes: list[str] = []
    try:
        if exact is not None:
            gap = surrogate_gap(problem, args.eta, local_steps, args.server_lr, exact=exact, **kw)
            out["stationary"] = {"mean": gap.surrogate.mean, "cov": gap.surrogate.cov}
            out |= {"cov_rel_error": gap.cov_rel_error, "variance_ratio": gap.variance_ratio,
                    "mean_error": gap.mean_error, "worst_direction_ratio": None if gap.worst_direction_ratio is None
                    else list(gap.worst_direction_ratio)}
            if gap.note:
                notes.append(f"surrogate: {gap.note}")
        else:
            st = stationary_law(sur, args.eta, local_steps, args.server_lr, **kw)
            out["stationary"] = {"mean": st.mean, "cov": st.cov}
    except NoStationaryLawError as exc:
        notes.append(f"surrogate: {exc}")
    if transient is not None:
        tr = transient_moments(sur, args.eta, local_steps, args.rounds, args.server_lr, w0=w0, record=[args.rounds],
                               **kw)
        out["transient"] = {"rounds": args.rounds, "mean": tr.final_mean, "cov": tr.final_cov}
        P = np.asarray(transient["cov"])
        den = float(np.linalg.norm(P))
        out["transient_cov_rel_error"] = float(np.linalg.norm(tr.final_cov - P) / den) if den > 0 else None
        if den == 0:
            notes.append(f"surrogate: the exact covariance after {args.rounds} rounds is zero, so "
                         "transient_cov_rel_error is 0/0 and reported as None")
    return out, notes


def run_regression(args: argparse.Namespace, problem) -> int:
    """``fedsde exact`` on a :class:`~fedsde.problems.RegressionProblem` (see the module docstring), on one BLAS
    thread where its products are small (:mod:`fedsde._threads`)."""
    from fedsde._threads import SMALL_PRODUCTS_D, one_blas_thread

    with one_blas_thread(problem.d <= SMALL_PRODUCTS_D):
        return _run_regression(args, problem)


def _run_regression(args: argparse.Namespace, problem) -> int:
    from fedsde.errors import NoStationaryLawError
    from fedsde.exact import least_squares_round_law, least_squares_stationary_law, least_squares_transient_moments

    steps = local_steps_from_args(args, problem.Q)
    if args.rounds is not None and args.rounds < 0:
        raise FedsdeInputError(f"--rounds={args.rounds}: must be an integer >= 0")
    given = parse_vector("--w0", args.w0, problem.d)
    w0 = problem.initial_weights() if given is None else given
    omega = _rule_weights(args, problem, steps)
    kw = {"participation": args.participation, "weights": omega}
    law = least_squares_round_law(problem, args.eta, steps, args.server_lr, **kw)
    optimum = problem.optimum
    notes: list[str] = []
    stationary, rho2, st = None, None, None
    try:
        st = least_squares_stationary_law(problem, args.eta, steps, args.server_lr, **kw)
        stationary, rho2 = {"mean": st.mean, "cov": st.cov}, st.spectral_radius
    except NoStationaryLawError as exc:
        if args.rounds is None:
            raise NoStationaryLawError(f"{exc}; --rounds n gives the transient law after n rounds") from None
        notes.append(str(exc))
        warn(f"the chain's variance or mean grows without bound with these settings: {exc}")
    transient = None
    if args.rounds is not None:
        tr = least_squares_transient_moments(problem, args.eta, steps, args.rounds, args.server_lr, w0=w0,
                                             record=[args.rounds], stationary=st, **kw)
        transient = {"rounds": args.rounds, "mean": tr.final_mean, "cov": tr.final_cov}
    try:
        surrogate, more = _surrogate(problem, args, steps, omega, w0, st, transient)
    except FedsdeInputError as exc:  # e.g. a client whose own solution is not unique: no surrogate, still an answer
        surrogate, more = {"stationary": None}, [f"surrogate: {exc}"]
    notes += more
    A, a = law.mean_map
    result: dict = {
        "kind": "regression",
        "noise": "state-dependent minibatch noise (least squares): exact first and second moments",
        "problem": problem.summary(),
        "aggregator": args.aggregator,
        "aggregator_options": aggregator_options(args),
        "weights": omega,
        "w0": w0,
        "optimum": optimum,
        "round_law": {"mean_map": A, "mean_offset": a, "spectral_radius": law.spectral_radius,
                      "second_moment_spectral_radius": rho2},
        "stationary": stationary,
        "surrogate": surrogate,
        "notes": notes,
    }
    if transient is not None:
        result["transient"] = transient
    return emit(args, result, _human(args, problem, result))


def _human(args: argparse.Namespace, problem, r: dict) -> str:
    steps = local_steps_from_args(args, problem.Q)
    rl, sur = r["round_law"], r["surrogate"]
    lines = [
        f"problem: {problem.name} (least squares), Q={problem.Q}, d={problem.d}, batch {problem.batch_size} "
        f"({problem.sampling})  eta={args.eta}  server_lr={args.server_lr}  local steps="
        f"{np.atleast_1d(steps).tolist()}  aggregator={args.aggregator}",
        f"aggregation weights    {fmt_array(r['weights'])}",
        f"optimum w*             {fmt_array(r['optimum'])}",
        f"mean map A (E[w'|w] = A w + a)  {fmt_array(rl['mean_map'])}",
        f"rho(A)                 {rl['spectral_radius']:.6g}",
    ]
    if r["stationary"] is not None:
        lines += [f"stationary mean        {fmt_array(r['stationary']['mean'])}",
                  f"stationary cov         {fmt_array(r['stationary']['cov'])}",
                  f"rho(second moments)    {rl['second_moment_spectral_radius']:.6g}"]
    if "transient" in r:
        t = r["transient"]
        lines += [f"after {t['rounds']} rounds: mean {fmt_array(t['mean'])}",
                  f"                   cov  {fmt_array(t['cov'])}"]
    if sur["stationary"] is not None:
        lines.append(f"constant-noise surrogate: stationary cov {fmt_array(sur['stationary']['cov'])}")
        if sur.get("cov_rel_error") is not None:
            lines.append(f"  relative error of its stationary cov {sur['cov_rel_error']:.4g}, variance ratio "
                         f"tr P_sur / tr P = {sur['variance_ratio']:.4g}")
    if "transient_cov_rel_error" in sur and sur["transient_cov_rel_error"] is not None:
        lines.append(f"  relative error of its cov after {args.rounds} rounds {sur['transient_cov_rel_error']:.4g}")
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)
