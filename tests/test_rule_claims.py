"""The claims of the rules' SDEs (fedsde.theory.claims.rules_sde) hold, their margins agree with their verdicts, and
perturbing what they measure flips them."""

from __future__ import annotations

import pytest

from fedsde.theory.claims import CheckOptions, get_claim
from fedsde.theory.results import FAILS, HOLDS

IDS = ("003/sde-fednova-fixed-point", "000/sde-fedavgm-step")


@pytest.mark.parametrize("cid", IDS)
def test_claim_holds_with_a_positive_margin(cid):
    v = get_claim(cid).run(CheckOptions())[0].printed
    assert v.verdict == HOLDS and v.margin > 0 and v.margin_note


def test_fednova_claim_fails_when_the_sde_is_centred_at_fedavgs_point(monkeypatch):
    import fedsde.sde.rules as rules

    real = rules.rule_sde
    monkeypatch.setattr(rules, "rule_sde", lambda pb, agg, *a, **k: real(pb, "fedavg", *a, **k))
    v = get_claim(IDS[0]).run(CheckOptions())[0].printed
    assert v.verdict == FAILS and v.margin <= 0


def test_fedavgm_claim_fails_with_the_step_s(monkeypatch):
    from fedsde.aggregators import MomentumForm

    monkeypatch.setattr(MomentumForm, "step_factor", property(lambda self: self.gain))
    v = get_claim(IDS[1]).run(CheckOptions())[0].printed
    assert v.verdict == FAILS and v.margin <= 0
