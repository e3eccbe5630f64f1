"""The validity test's numbers as text where they can mislead (fedsde.validity.text): an interval without an upper
bound says why, a 1/ℓ ratio that is not defined says so instead of ``nan``, an extrapolated accuracy outside
[0, 1] is shown clipped with a note; and ``fedsde sde`` on a network leads with its metrics."""

from __future__ import annotations

import math

from test_module_cli import _files

from fedsde.cli import main
from fedsde.validity.text import bounded_value, bounds_text, ratio_text


def test_an_interval_without_an_upper_bound_says_why():
    assert bounds_text(0.0177, 0.0237) == "[0.0177, 0.0237]"
    text = bounds_text(0.0, math.inf, "train_loss")
    assert text.startswith("[0, ∞) (no upper bound:") and "train_loss" in text and "not resolved" in text
    assert "inf" not in text


def test_a_ratio_that_is_not_defined_is_not_printed_as_nan():
    row = {"metric": "test_accuracy", "ells": [2, 4, 8], "ratio": math.nan, "off": False}
    text = ratio_text(row)
    assert "nan" not in text and text.startswith("test_accuracy ℓ=2,4,8: n/a") and "ℓ = 4 and ℓ = 8" in text
    assert ratio_text({**row, "ratio": 1.96, "off": True}) == "test_accuracy ℓ=2,4,8: 1.96 (off)"


def test_an_extrapolated_accuracy_outside_the_unit_interval_is_clipped_with_a_note():
    assert bounded_value("test_accuracy", 0.93) == (0.93, "")
    value, note = bounded_value("test_accuracy", 1.0125)
    assert value == 1.0 and "1.012" in note and "Richardson" in note
    assert bounded_value("test_accuracy", -0.02)[0] == 0.0
    assert bounded_value("train_loss", -0.5) == (-0.5, "")  # a loss is not confined: left as it is


def test_sde_on_a_network_leads_with_its_metrics(tmp_path, capsys):
    code = main(["sde", "--problem", _files(tmp_path), "--eta", "0.1", "--local-steps", "2", "--rounds", "2",
                 "--replicates", "3", "--seed", "0", "--variant", "general", "--integrator", "svag", "--ell", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    first_metric = next(i for i, line in enumerate(lines) if line.startswith("E train_loss at T"))
    first_weights = next(i for i, line in enumerate(lines) if line.startswith("final mean"))
    assert first_metric == 2 and first_weights > first_metric  # after the two header lines


def test_the_map_report_writes_an_unbounded_interval_as_such():
    from fedsde.report.map_report import _inconclusive, _interval

    assert _interval({"lower": 0.01, "upper": 0.2}) == "[0.01, 0.2]"
    assert _interval({"lower": 0.0, "upper": None}) == "[0, ∞)"  # JSON's null for an infinite bound
    assert _interval({"lower": None, "upper": None}) == "[—, —]"  # a failed cell has no interval
    cell = {"outcome": "inconclusive", "eta": 0.1, "local_steps": 2, "server_lr": 1.0, "gap": 0.03, "lower": 0.0,
            "upper": None, "metric": "train_loss", "metric_tolerance": 0.05, "replicates": 4,
            "replicates_needed": 40}
    assert "not resolved from its noise" in _inconclusive({"cells": [cell]})
