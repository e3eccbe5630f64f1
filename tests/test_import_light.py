"""The numpy-only layers import no torch: the exact laws, the theory, the quadratic problems and the symbolic
derivations load and compute without it (torch takes seconds to import on some machines); torch is imported by the
code that needs it (a server rule's class, the simulator, the SDE), when it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: modules meant to work on numpy (and scipy, sympy) alone
NUMPY_ONLY = ("fedsde.exact", "fedsde.exact.stability", "fedsde.theory", "fedsde.problems.quadratic",
              "fedsde.problems.regression", "fedsde.symbolic")


def _torch_loaded_after(code: str) -> dict:
    res = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                          "print(json.dumps({'torch': sorted(m for m in sys.modules if m.split('.')[0] in "
                          "('torch', 'torchsde'))}))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.splitlines()[-1])


def test_numpy_only_modules_import_no_torch():
    got = _torch_loaded_after("\n".join(f"import {m}" for m in NUMPY_ONLY))
    assert got["torch"] == []


def test_exact_laws_of_quadratic_and_least_squares_clients_compute_without_torch():
    got = _torch_loaded_after(
        "import numpy as np\n"
        "from fedsde.exact import least_squares_stationary_law, stationary_law, transient_moments\n"
        "from fedsde.exact.stability import known_divergence\n"
        "from fedsde.problems.quadratic import random_quadratic_problem\n"
        "from fedsde.problems.regression import RegressionProblem\n"
        "p = random_quadratic_problem(3, 2, seed=0)\n"
        "stationary_law(p, 0.05, 3); transient_moments(p, 0.05, 3, rounds=4)\n"
        "rng = np.random.default_rng(0)\n"
        "ls = RegressionProblem.from_clients([rng.normal(size=(6, 2)), rng.normal(size=(5, 2))],\n"
        "                                   [rng.normal(size=6), rng.normal(size=5)], batch_size=2)\n"
        "least_squares_stationary_law(ls, 0.05, 2)\n"
        "assert known_divergence(ls, 0.05, 2) == []")
    assert got["torch"] == []
