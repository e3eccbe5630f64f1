"""Commands that run chains estimate their memory before any work and refuse with the figure under a small
``FEDSDE_MEMORY_LIMIT`` (one line, exit 2): validity, compare on a data problem, the general SDE, and problem files
too large to build.  Nothing runs first: the chains' entry points are replaced by a function that fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import one_line_error, run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "problems"
SOFTMAX = str(EXAMPLES / "digits_softmax.toml")


def _never(*args, **kwargs):
    raise AssertionError("a chain ran before its memory was checked")


@pytest.mark.parametrize("argv", [
    ["validity", "--problem", SOFTMAX, "--eta", "0.05", "--local-steps", "2", "--rounds", "3", "--replicates",
     "64", "--seed", "0", "--json"],
    ["compare", "--problem", SOFTMAX, "--eta", "0.05", "--local-steps", "2", "--rounds", "3", "--paths", "64",
     "--seed", "0", "--json"],
    ["sde", "--problem", SOFTMAX, "--variant", "general", "--eta", "0.05", "--local-steps", "2", "--rounds", "3",
     "--paths", "64", "--seed", "0", "--json"],
])
def test_chains_refused_before_they_run(argv, capsys, monkeypatch):
    import fedsde.sde.models
    import fedsde.sde.svag
    import fedsde.sim.runner

    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "1M")
    for module in (fedsde.sim.runner, fedsde.sde.svag, fedsde.sde.models):  # the callers of the one local-SGD loop
        monkeypatch.setattr(module, "run_local_steps", _never)
    one_line_error(*run_cli(capsys, argv), "needs about", "available")


def test_the_guard_sees_a_chain_that_runs(capsys, monkeypatch):
    # without a memory limit the same replaced loop is reached: the test above cannot pass vacuously
    import fedsde.sde.svag
    import fedsde.sim.runner

    for module in (fedsde.sim.runner, fedsde.sde.svag):
        monkeypatch.setattr(module, "run_local_steps", _never)
    with pytest.raises(AssertionError, match="before its memory was checked"):
        run_cli(capsys, ["validity", "--problem", SOFTMAX, "--eta", "0.05", "--local-steps", "2", "--rounds", "1",
                         "--replicates", "2", "--seed", "0", "--json"])


def test_problem_file_too_large_to_build(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDSDE_MEMORY_LIMIT", "64M")
    path = tmp_path / "big.toml"
    path.write_text('kind = "classification"\ndataset = "digits"\nmodel = "mlp"\nhidden = 200000\nbatch_size = 8\n'
                    "seed = 0\n")
    one_line_error(*run_cli(capsys, ["simulate", "--problem", str(path), "--eta", "0.05", "--local-steps", "1",
                                     "--rounds", "1", "--replicates", "2", "--seed", "0"]), "needs about")
