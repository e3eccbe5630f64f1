"""FedAWARE on participant slots (the cross-device regime): the dense rule's step, momenta kept for the clients
that have taken part only."""

import numpy as np
import pytest
import torch

from fedsde.aggregators import RoundContext, get_aggregator
from fedsde.aggregators.client_table import ClientTable


def _rounds(R, Q, m, d, n, seed, repeats=False):
    """``n`` rounds of sorted participants (R, m), their updates and weights; with ``repeats`` a multinomial-like
    draw (with replacement: repeated clients' later slots idle)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        if repeats:
            cid = torch.sort(torch.randint(0, Q, (R, m), generator=g), dim=1).values
        else:
            cid = torch.sort(torch.stack([torch.randperm(Q, generator=g)[:m] for _ in range(R)]), dim=1).values
        yield cid, torch.randn((R, m, d), generator=g, dtype=torch.float64)


@pytest.mark.parametrize("warm_start", ["none", "fedavg"])
@pytest.mark.parametrize("variant", ["normalized", "literal"])
@pytest.mark.parametrize("repeats", [False, True])
def test_fedaware_on_participant_slots_is_the_dense_rule(warm_start, variant, repeats):
    # the same rounds once on all Q clients (non-participants: zero updates, mask False) and once on the m slots
    # with the momenta of the clients that took part in a table: the same server weights; with warm_start="none"
    # bit for bit (zero steps until a replicate has seen every client, then the same min-norm problem), with
    # "fedavg" to rounding (its average sums m slots instead of Q clients)
    from fedsde.sim.participation import first_occurrences

    R, Q, m, d = 4, 7, 3, 3
    agg = get_aggregator("fedaware", variant=variant, warm_start=warm_start)
    assert agg.participant_state
    p = torch.linspace(0.5, 1.5, Q, dtype=torch.float64)
    p = p / p.sum()
    w = torch.zeros((R, d), dtype=torch.float64)
    dense, slots = agg.init(w), agg.init(w)
    wd = ws = w
    moved = torch.zeros(R, dtype=torch.bool)
    for n, (cid, upd) in enumerate(_rounds(R, Q, m, d, 14, seed=1, repeats=repeats)):
        keep = first_occurrences(cid)
        upd = upd * keep.unsqueeze(-1)
        full = torch.zeros((R, Q, d), dtype=torch.float64).scatter_add_(1, cid.unsqueeze(-1).expand(R, m, d), upd)
        mask = torch.zeros((R, Q), dtype=torch.bool).scatter_(1, cid, True)
        wts = p[cid] * keep
        ctx_d = RoundContext(round=n, server_lr=0.5, eta=0.1, local_steps=torch.full((R, Q), 3), participating=mask,
                             p=p)
        ctx_s = RoundContext(round=n, server_lr=0.5, eta=0.1, local_steps=torch.full((R, m), 3), participating=keep,
                             p=p, clients=cid)
        w_before = wd
        wd, dense = agg.apply(wd, full, wts.new_zeros((R, Q)).scatter_(1, cid, wts), dense, ctx_d)
        ws, slots = agg.apply(ws, upd, wts, slots, ctx_s)
        if warm_start == "none":
            np.testing.assert_array_equal(ws.numpy(), wd.numpy())
        else:
            torch.testing.assert_close(ws, wd, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(slots.step_norm, dense.step_norm, rtol=1e-12, atol=1e-12)
        moved |= (wd != w_before).any(1)
    assert bool(moved.all())  # every replicate took FedAWARE (or FedAvg) steps: the comparison is not vacuous
    table = slots.m
    assert isinstance(table, ClientTable) and table.ids.numel() <= Q
    torch.testing.assert_close(dense.m[:, table.ids], table.values[..., :d], rtol=0, atol=0)


def test_fedaware_on_slots_keeps_only_the_clients_seen_and_does_not_move_before_all_are():
    # a cross-device population: the table grows with the participants; with a client not seen the hull holds 0
    from fedsde.sim.participation import first_occurrences

    Q, R, m, d = 10**6, 2, 5, 4
    agg = get_aggregator("fedaware", warm_start="none")
    p = torch.full((Q,), 1.0 / Q, dtype=torch.float64)
    w = torch.ones((R, d), dtype=torch.float64)
    state = agg.init(w)
    g = torch.Generator().manual_seed(0)
    for n in range(3):
        cid = torch.sort(torch.randint(0, Q, (R, m), generator=g), dim=1).values
        ctx = RoundContext(round=n, server_lr=1.0, eta=0.1, local_steps=torch.full((R, m), 2),
                           participating=first_occurrences(cid), p=p, clients=cid)
        w_next, state = agg.apply(w, torch.randn((R, m, d), generator=g, dtype=torch.float64), p[cid], state, ctx)
        np.testing.assert_array_equal(w_next.numpy(), w.numpy())
    assert state.m.ids.numel() <= 3 * R * m and state.m.values.shape == (R, state.m.ids.numel(), d + 1)
