"""F18 (the SDE of every aggregator): it runs on a tiny configuration, checks each rule's round law against the
simulator, gives FedAvgM's exact weak error with its local slopes and FedAdam's slope with an interval, and its
caption states FedNova's own fixed point."""

from __future__ import annotations

import numpy as np

from fedsde.report.config import load_config, validate
from fedsde.report.gallery import GALLERY, RunContext, run_figure

TINY = {"eta": 0.05, "server_lr": 0.1, "horizon": 1.0, "sim_replicates": 100, "weak_h": 0.004, "weak_t": 0.512,
        "levels": 3, "adam_server_lr": 0.1, "adam_rounds": 3, "adam_replicates": 40, "adam_substeps": 1,
        "adam_max_substeps": 4, "adam_ref_max_substeps": 2, "adam_ks": [1, 2]}


def test_f18_is_registered_with_a_schema():
    assert GALLERY["F18"].module == "f18_rule_sdes"
    for quick in (True, False):
        assert set(load_config(quick=quick)["F18"]) == set(TINY)


def test_f18_runs_and_states_its_numbers(tmp_path):
    from fedsde.report.figures.f18_rule_sdes import rules_problem
    from fedsde.sde.rules import rule_sde

    validate({"F18": TINY}, partial=True)
    ctx = RunContext(seed=0, device="cpu", problem=None, progress=False, quick=True)
    rec = run_figure("F18", {"F18": TINY}, ctx, tmp_path)
    assert rec.error is None, rec.error
    nums = rec.output.numbers
    assert all(z < 5 for z in nums["round_law_max_z"].values()), nums["round_law_max_z"]
    assert 0.9 <= nums["fedavgm"]["slope"] <= 1.1 and len(nums["fedavgm"]["local_slopes"]) == 2
    lo, hi = nums["fedadam"]["slope_interval"]
    assert lo <= hi and f"[{lo:.2f}, {hi:.2f}]" in rec.output.caption
    assert "slope 1.000" not in rec.output.caption
    nova = rule_sde(rules_problem(), "fednova", 0.05, np.array([2, 4, 7]), 0.1, 0.1).sde.c
    np.testing.assert_allclose(nums["fixed_points"]["FedNova"], nova)
    assert f"FedNova ({nova[0]:.4f}, {nova[1]:.4f})" in rec.output.caption
    assert len(nums["fedadam"]["errors"]) == 2
