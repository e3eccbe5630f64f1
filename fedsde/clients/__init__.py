"""What one client does in a round, below both the simulator and the server rules.

:mod:`~fedsde.clients.local` (the one local-training loop, :func:`~fedsde.clients.local.run_local_steps`),
:mod:`~fedsde.clients.streams` (per-block random streams), :mod:`~fedsde.clients.steps` (fixed, random and
epoch-based local step counts), :mod:`~fedsde.clients.solvers` (local SGD, momentum, prox),
:mod:`~fedsde.clients.oracles` (the gradient-oracle protocol and Gaussian quadratic clients),
:mod:`~fedsde.clients.data_oracles` (minibatch oracles of data problems) and :mod:`~fedsde.clients.data_rows` (their
training rows on a device, padded or ragged).  :mod:`fedsde.sim` (the simulator),
:mod:`fedsde.aggregators` (server rules, which choose the local solver) and :mod:`fedsde.sde` (SVAG and
Monte-Carlo rollouts) import from here; nothing here imports them.
"""
