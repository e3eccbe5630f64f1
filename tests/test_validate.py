"""The shared validators of fedsde._validate: values accepted, and one-line errors naming argument and constraint."""

from __future__ import annotations

import numpy as np
import pytest

from fedsde._validate import choice, client_weights, record_rounds, unit_interval
from fedsde.errors import FedsdeInputError


def test_client_weights_normalise_and_name_the_bad_entry():
    np.testing.assert_allclose(client_weights("p", [1, 3], 2), [0.25, 0.75])
    np.testing.assert_allclose(client_weights("p", [1, 3], normalise=False), [1.0, 3.0])
    for bad, match in [([1, -1], r"p\[1\]=-1.0: weights must be finite and >= 0"),
                       ([0, 0], "p: all weights are zero"), ([1, np.nan], r"p\[1\]=nan"),
                       ([1, 2, 3], r"p: shape \(3,\) must be \(2,\)"), (["x"], "could not be read")]:
        with pytest.raises(FedsdeInputError, match=match):
            client_weights("p", bad, 2 if len(bad) != 1 else None)


def test_record_rounds_defaults_bounds_and_integers():
    np.testing.assert_array_equal(record_rounds("record", None, 3), [0, 1, 2, 3])
    np.testing.assert_array_equal(record_rounds("record", None, 3, default_all=False), [])
    np.testing.assert_array_equal(record_rounds("record", False, 3), [])
    np.testing.assert_array_equal(record_rounds("record", [3, 1, 1], 3), [1, 3])
    with pytest.raises(FedsdeInputError, match=r"record: rounds must lie in \[0, 3\]"):
        record_rounds("record", [4], 3)
    with pytest.raises(FedsdeInputError, match="must be integers"):
        record_rounds("record", [1.5], 3)


def test_unit_interval_and_choice():
    assert unit_interval("q", 0.0) == 0.0 and unit_interval("q", 1.0, closed_right=True) == 1.0
    for v, kw in [(1.0, {}), (-0.1, {}), (0.0, {"open_left": True}), (float("nan"), {}), ("a", {})]:
        with pytest.raises(FedsdeInputError, match="q="):
            unit_interval("q", v, **kw)
    assert choice("variant", "paper", ("paper", "corrected")) == "paper"
    with pytest.raises(FedsdeInputError, match="variant='x': must be one of paper, corrected"):
        choice("variant", "x", ("paper", "corrected"))


def test_the_validators_at_their_call_sites():
    from fedsde.clients.data_oracles import minibatch_oracle
    from fedsde.clients.least_squares_oracle import least_squares_oracle
    from fedsde.clients.solvers import LocalSolver
    from fedsde.problems import paper_table_problem
    from fedsde.problems.classification.datasets import load_dataset
    from fedsde.problems.classification.labelled import checked_client_weights
    from fedsde.problems.io import problem_from_dict
    from fedsde.scaling.rules import get_rule
    from fedsde.sde.coefficients import quadratic_sde_coefficients
    from fedsde.sde.integrate import simulate_sde
    from fedsde.sde.svag import svag_transient_moments

    pb = paper_table_problem()
    cases = [
        (lambda: quadratic_sde_coefficients(pb, 0.05, 2, variant="x"), "variant='x': must be one of paper, corrected"),
        (lambda: simulate_sde(pb, eta=0.05, local_steps=2, rounds=3, paths=2, seed=0, method="x"),
         "method='x': must be one of"),
        (lambda: simulate_sde(pb, eta=0.05, local_steps=2, rounds=3, paths=2, seed=0, record=[4]),
         r"record: rounds must lie in \[0, 3\]"),
        (lambda: svag_transient_moments(pb, 0.05, 2, 3, 1.0, 2, record=[-1]), r"record: rounds must lie in \[0, 3\]"),
        (lambda: LocalSolver(momentum=1.0), r"momentum=1.0: must lie in \[0, 1\)"),
        (lambda: get_rule("nope"), "rule='nope': must be one of local-steps"),
        (lambda: minibatch_oracle(sampling="x"), "sampling='x': must be one of minibatch, epoch"),
        (lambda: least_squares_oracle(sampling="x"), "sampling='x': must be one of without-replacement"),
        (lambda: load_dataset("iris"), "dataset='iris': must be one of digits, breast_cancer"),
        (lambda: problem_from_dict({"kind": "x"}, source="f.toml"),
         "f.toml: kind='x': must be one of quadratic, classification, regression"),
        (lambda: checked_client_weights([1, -1], np.array([2, 2])), r"p\[1\]=-1.0: weights must be finite and >= 0"),
    ]
    for call, match in cases:
        with pytest.raises(FedsdeInputError, match=match):
            call()
    np.testing.assert_array_equal(simulate_sde(pb, eta=0.05, local_steps=2, rounds=3, paths=2, seed=0,
                                               record=[3, 1, 1]).rounds, [1, 3])
