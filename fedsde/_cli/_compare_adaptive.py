"""``fedsde compare --aggregator fedadam|fedyogi|fedadagrad``: the adaptive server rules against their SDE."""

from __future__ import annotations

import argparse

from fedsde.errors import FedsdeInputError


def run_adaptive(args: argparse.Namespace, problem, agg, steps, w0) -> int:
    raise FedsdeInputError(f"--aggregator={agg.name}: compare has no adaptive SDE yet; use `fedsde validity "
                           f"--aggregator {agg.name}`")
