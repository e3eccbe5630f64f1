"""From a cell where the SDE tracks FedAvg: what the first-order scaling rules allow from there.

Each rule of :data:`fedsde.scaling.RULES` (``fedsde scaling``) changes ``(η, E, s, n, Q, b)`` by powers of a
factor while keeping the SDE's temperature and horizon (:mod:`fedsde.scaling.rules`); the map applies each with
the factor :data:`FACTOR` to the tracking cell's configuration (:func:`fedsde.scaling.apply_rule`) and gives the
scaled configuration's step measure ``κ' = s'·λ_max(B')``: the rules that copy or split clients (``clients``,
``client-lr``) keep every client's curvature, and ``batch`` changes only the noise, so ``B'`` is the round map of the
problem at ``(η', E')`` (:func:`fedsde.validity.step.round_contraction`; on split data clients the halves' Hessians
are those of the whole up to sampling).  Where ``κ' <= κ*`` the claim ``002/eq-2-model`` expects the SDE, hence the
rule's premise, to hold at the scaled end too; where ``κ' > κ*`` the rule leaves the region where the SDE is known to
describe FedAvg.
"""

from __future__ import annotations

from fedsde.errors import FedsdeInputError

#: the factor each rule is applied with (its ``κ`` in :mod:`fedsde.scaling.rules`)
FACTOR = 2.0


def scaling_moves(problem, cell: dict, *, rounds: int, kappa_star: float | None, cache: dict | None = None) -> list:
    """One entry per rule: ``rule``, ``change`` (in words), and either ``config`` (the scaled ``eta``,
    ``local_steps``, ``server_lr``, ``rounds`` and, where the rule changes them, ``clients``/``batch_size``),
    ``kappa`` (``κ'``) and ``within`` (``κ' <= κ*``; ``None`` without a threshold or ``κ'``), or ``error`` (why the
    rule does not apply: an integer that would not stay one, a problem without minibatches, …).  ``cache``:
    ``(η, E, s)`` → ``κ`` shared between calls."""
    from fedsde.maps.grid import cell_kappa
    from fedsde.scaling import RULES, FedAvgConfig
    from fedsde.scaling.batch_rule import map_config

    cache = {} if cache is None else cache
    batch = getattr(problem, "batch_size", None)
    base = FedAvgConfig(eta=cell["eta"], local_steps=int(cell["local_steps"]), server_lr=cell["server_lr"],
                        rounds=int(rounds), clients=int(problem.Q), batch_size=int(batch) if batch else None)
    out = []
    for name, rule in RULES.items():
        row = {"rule": name, "change": rule.change}
        try:
            new = map_config(problem, base, rule, FACTOR)[0]  # batch: the problem's g on the server step
        except FedsdeInputError as exc:
            out.append({**row, "error": str(exc).split(": ", 1)[-1]})
            continue
        key = (new.eta, new.local_steps, new.server_lr)
        if key not in cache:
            cache[key] = cell_kappa(problem, {"eta": new.eta, "local_steps": new.local_steps,
                                              "server_lr": new.server_lr})[0]
        kappa = cache[key]
        within = None if kappa is None or kappa_star is None else bool(kappa <= kappa_star)
        out.append({**row, "config": new.as_dict(keep=tuple(k for k in ("clients", "batch_size")
                                                             if k in rule.changes)),
                    "kappa": kappa, "within": within})
    return out
