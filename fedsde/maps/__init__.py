"""Validity maps: where does seed 002's SDE describe FedAvg on a problem, over a grid of (η, E, s)?

One validity test (:func:`fedsde.validity.validity_test`, through the ``fedsde validity`` command) per cell of the
grid client step ``η`` × local steps ``E`` × server step ``s``, run on the sweep engine (:mod:`fedsde.sweep`: one
stored file per cell, resumable, on Dask; ``fedsde.sweep.load(DIR)`` gives the cells as xarray), read back through
the command's JSON keys only (``verdict.outcome``, ``verdict.worst.gap/lower/upper``,
``verdict.replicates_needed``), so every problem kind the validity test accepts is mapped with no code here.

* :mod:`fedsde.maps.grid` — the grid, the sweep spec of a map, the step measure ``κ = s·λ_max(B)`` of every cell
  (:func:`fedsde.validity.step.round_contraction`), the threshold ``κ*`` of the claim ``002/eq-2-model``, and the
  memory a map needs, checked before anything runs;
* :mod:`fedsde.maps.refine` — more replicates for the undecided cells (``--refine BUDGET``) at the test's error
  level: Bonferroni α-spending over two looks, fresh independent replicates at each;
* :mod:`fedsde.maps.run` — :func:`run_map`: the sweeps, the refinement, and the map's JSON record.

The picture and the HTML report are made by :mod:`fedsde.report.validity_map`; the command is ``fedsde map``.
"""

from fedsde.maps.grid import MapGrid, kappa_threshold
from fedsde.maps.refine import LOOKS, combine_looks, look_alpha, plan_refinement
from fedsde.maps.run import cell_records, run_map

__all__ = ["LOOKS", "MapGrid", "cell_records", "combine_looks", "kappa_threshold", "look_alpha",
           "plan_refinement", "run_map"]
