"""Sweeps: any ``fedsde`` command over a grid of options, on Dask, with a resumable per-cell store.

* :mod:`fedsde.sweep.spec`: the TOML spec (``[run]``, ``[base]``, ``[grid]``, ``[zip]``), its validation
  (:func:`load_spec`), the cells of the grid and each cell's seed (:func:`cell_seed`, derived from the spec's seed
  and the cell's coordinates only);
* :mod:`fedsde.sweep.command`: the one link to the command line: a cell runs ``fedsde COMMAND <flags> --json``
  in-process through that command's own handler and parser;
* :mod:`fedsde.sweep.store`: the sweep folder: ``spec.toml``, its hash, one atomically written file per cell;
* :mod:`fedsde.sweep.execute`: :func:`run`, in-process, on a ``dask.distributed.LocalCluster`` or on a running
  Dask cluster;
* :mod:`fedsde.sweep.load`: :func:`load` (``xarray.Dataset``) and :func:`load_frame` (``pandas.DataFrame``).

Why cells go through the command line handlers: every command, including commands added later, becomes sweepable
with no per-command code, and a cell gives exactly what ``fedsde COMMAND --json`` prints.  The link is the
subcommand modules ``fedsde._cli.<name>`` (their ``register(subparsers)`` contract), loaded by name when a cell
needs one; ``fedsde.cli``, the entry point, is never imported (nothing imports it), and only
:mod:`fedsde.sweep.command` touches ``fedsde._cli``.

``import fedsde.sweep`` is light: dask, xarray and pandas are imported when a sweep runs or loads.
"""

from fedsde.sweep.execute import run, run_cell
from fedsde.sweep.load import load, load_frame
from fedsde.sweep.spec import Cell, SweepSpec, cell_seed, load_spec

__all__ = ["Cell", "SweepSpec", "cell_seed", "load", "load_frame", "load_spec", "run", "run_cell"]
