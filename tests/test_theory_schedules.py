"""Schedule integrals of Thms 4.5/4.9: closed forms against quadrature (reference/seed-fedsde.md §3e)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from fedsde.errors import FedsdeInputError
from fedsde.theory.schedules import PowerSchedule


def _num(f, t):
    return integrate.quad(f, 0.0, t, limit=400, epsabs=0, epsrel=1e-12)[0]


@pytest.mark.parametrize("b", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_integrals_against_quadrature(b, scale):
    s = PowerSchedule(scale, b)
    for t in (0.5, 7.0, 120.0):
        assert s.phi(t) == pytest.approx(_num(s.eta, t), rel=1e-9)
        assert s.int_eta2(t) == pytest.approx(_num(lambda x: s.eta(x) ** 2, t), rel=1e-9)
        assert s.int_eta2_phi(t) == pytest.approx(_num(lambda x: s.eta(x) ** 2 * s.phi(x), t), rel=1e-8)
        assert s.int_eta2_sqrt_int_eta2(t) == pytest.approx(
            _num(lambda x: s.eta(x) ** 2 * np.sqrt(s.int_eta2(x)), t), rel=1e-8)
    assert s.method == ("closed form" if b in (0.0, 0.5, 1.0) else "quadrature")
    ints = s.integrals(3.0)
    assert ints["phi"].method == "closed form" and ints["int_eta2_phi"].method == s.method
    assert ints["int_eta2"].value == pytest.approx(s.int_eta2(3.0))


def test_reference_closed_forms_and_vectorisation():
    s = PowerSchedule(1.0, 1.0)
    t = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(s.phi(t), np.log1p(t))
    np.testing.assert_allclose(s.int_eta2(t), t / (t + 1))
    np.testing.assert_allclose(s.int_eta2_phi(t), (t - np.log1p(t)) / (t + 1))
    np.testing.assert_allclose(s.int_eta2_sqrt_int_eta2(t), 2 / 3 * (t / (t + 1)) ** 1.5)
    q = PowerSchedule(1.0, 0.6)
    np.testing.assert_allclose(q.int_eta2_phi(t[::-1]), [q.int_eta2_phi(x) for x in t[::-1]], rtol=1e-10)


def test_validation():
    with pytest.raises(FedsdeInputError, match="b="):
        PowerSchedule(1.0, 1.5)
    with pytest.raises(FedsdeInputError, match="scale"):
        PowerSchedule(0.0, 1.0)
