"""One measurement per fresh process for the population benchmarks (``bench_population``, ``bench_module_population``,
``bench_regression_population``): peak memory (``ru_maxrss``) and CPU time are those of the process, so each size
or path runs in its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_child(code: str, *args, threads: int) -> dict:
    """Run ``python -c code args…`` with ``threads`` OpenMP threads and return the JSON object its last line of
    standard output prints (the child measures itself)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
