"""Client populations produced on demand, for cross-device client counts (10⁵–10⁶) on one machine: the protocol and
the problem that reads only a round's participants' rows (:mod:`~fedsde.problems.populations.base`), FedProx's
synthetic(α, β) client by client (:mod:`~fedsde.problems.populations.synthetic`) and metrics estimated on a seeded
subsample of clients (:mod:`~fedsde.problems.populations.metrics`).  The least-squares and module populations live
with their kinds (:mod:`fedsde.problems.regression.population`, :mod:`fedsde.problems.module.population`).

Nothing is imported here: each module is imported where it is used."""
