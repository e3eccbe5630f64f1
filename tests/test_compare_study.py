"""``fedsde.compare.quadratic_sde_study``: the chain-vs-SDE study of ``fedsde compare``, from Python."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsde._cli.common import to_jsonable
from fedsde.cli import main
from fedsde.compare import quadratic_sde_study, refinement_grid
from fedsde.errors import FedsdeInputError
from fedsde.exact import transient_moments
from fedsde.problems import paper_table_problem

ROOT = Path(__file__).resolve().parents[1]
PAPER = str(ROOT / "examples" / "problems" / "paper_table.toml")


def test_the_study_is_what_the_command_prints(capsys):
    st = quadratic_sde_study(paper_table_problem(), eta=0.05, local_steps=5, rounds=20, server_lr=0.5, h=0.1,
                             w0=[2.0], paths=64, seed=3)
    assert main(["compare", "--problem", PAPER, "--eta", "0.05", "--local-steps", "5", "--rounds", "20",
                 "--server-lr", "0.5", "--h", "0.1", "--w0", "2", "--paths", "64", "--seed", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed.pop("warnings") == []
    assert printed.pop("resources")["threads"] >= 1  # what the command ran with, beside the study
    assert to_jsonable(st.to_dict()) == printed
    # the chain's moments are the exact law's, on the clock t = n·h
    tr = transient_moments(paper_table_problem(), 0.05, 5, 20, 0.5, w0=[2.0], record=[20])
    assert st.chain.mean[-1, 0] == tr.final_mean[0] and st.t_end == pytest.approx(2.0)
    assert list(st.h_grid) == pytest.approx([0.1 / 2**k for k in range(5)])


def test_an_unsettled_slope_is_a_warning():
    with pytest.warns(UserWarning, match=r"local log–log slopes differ from the fit by more than 0.5"):
        st = quadratic_sde_study(paper_table_problem(), eta=0.05, local_steps=5, rounds=4, w0=[3.0],
                                 h_grid=[0.2, 0.1, 0.01, 0.001])
    local = np.asarray(st.slope["dist2"]["local_slopes"])
    assert np.max(np.abs(local - st.slope["dist2"]["slope"])) > 0.5


@pytest.mark.parametrize(("h_grid", "match"), [
    ([0.05, 0.0], r"h_grid=\[0.05, 0.0\]: every step must be finite and > 0 \(entry 2 is 0\)"),
    ([0.05], r"h_grid=\[0.05\]: need at least two steps"),
    ([0.05, 0.049], r"steps 0.05 and 0.049 both snap to h = 0.05"),
    ([0.05, 1e-12], r"at most 1000000 rounds per step"),
])
def test_refinement_steps_are_checked(h_grid, match):
    with pytest.raises(FedsdeInputError, match=match):
        quadratic_sde_study(paper_table_problem(), eta=0.05, local_steps=5, rounds=20, h_grid=h_grid)


def test_refinement_grid_snaps_and_is_idempotent():
    grid = refinement_grid([0.0101, 0.05, 0.03], 1.0)
    assert list(grid) == [1 / 20, 1 / 33, 1 / 99]
    assert np.array_equal(refinement_grid(grid, 1.0), grid)  # snapped steps snap to themselves, bit for bit
    with pytest.raises(FedsdeInputError, match=r"^--steps='x': step 0.05 is given twice"):
        refinement_grid([0.05, 0.05], 1.0, name="--steps='x'")
    with pytest.raises(FedsdeInputError, match=r"paths=1: must be an integer >= 2"):
        quadratic_sde_study(paper_table_problem(), eta=0.05, local_steps=5, rounds=2, paths=1)
