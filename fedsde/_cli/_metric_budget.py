"""How many rows ``fedsde simulate`` evaluates a data problem's metrics on (``--metric-samples``, or for a module
problem a subsample sized so that the metrics cost at most a quarter of the run:
:func:`fedsde.problems.module.metrics.metric_budget`)."""

from __future__ import annotations

import argparse

import numpy as np

from fedsde.errors import FedsdeInputError


def add_metric_samples_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metric-samples", default=None, metavar="m|all",
                   help="data problems: evaluate the metrics on a fixed, seeded subsample of m training (and test) "
                   "rows, or on every row (all); default: the problem file's metric_samples, else every row up to "
                   "65536, and for your own model (kind = \"module\") as many rows as keep the metrics within a "
                   "quarter of the run (the output says which)")


def parse_metric_samples(value: str | None) -> int | str | None:
    """``--metric-samples``: None, ``"all"`` or an integer >= 32."""
    if value is None or value == "all":
        return value
    try:
        m = int(value)
    except ValueError:
        m = 0
    if m < 32:
        raise FedsdeInputError(f"--metric-samples={value}: must be an integer >= 32 (two rows per group of the "
                               "unbiased ‖∇F‖² estimate) or 'all'")
    return m


def metric_samples_for(args, problem, local_steps, records: int) -> tuple[int | None, int | None, str]:
    """``(metric_samples, metric_groups, why)`` for ``evaluate_metrics``: the option, the problem file's, or
    (module problems) the budget of :func:`fedsde.problems.module.metrics.metric_budget`."""
    from fedsde.sim.metric_budget import default_metric_request

    given = parse_metric_samples(getattr(args, "metric_samples", None))
    if given == "all":
        test = getattr(problem, "y_test", None)
        test = int(np.sum(getattr(problem, "test_sizes", [0]))) if test is None else int(np.shape(test)[0])
        return max(32, int(np.sum(problem.sizes)), test), None, "--metric-samples all"
    if given is not None:
        return int(given), None, "--metric-samples"
    if getattr(problem, "metric_samples", None) is not None:
        return None, None, "the problem's metric_samples"
    req = default_metric_request(problem, local_steps, args.rounds, args.participation, records)
    return req.samples, req.groups, req.chosen_by or "default"


def sampling_line(sampling: dict) -> str | None:
    """One line saying on which rows the metrics were estimated (None when exact)."""
    if not sampling or all(sampling.get(k, {}).get("exact", True) for k in ("train", "test")):
        return None
    parts = [f"{sampling[k]['samples']} of {sampling[k]['of']} {k} rows" for k in ("train", "test")
             if k in sampling and not sampling[k]["exact"]]
    why = f"; {sampling['chosen_by']}" if sampling.get("chosen_by") else ""
    return (f"metrics on a fixed subsample: {', '.join(parts)} (seed {sampling.get('seed', 0)}{why}); ± is the "
            "replicates' standard error, the subsample's own is sample_se in --json")
