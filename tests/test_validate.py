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
