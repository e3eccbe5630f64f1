"""Sweeps: any ``fedsde`` command over a grid of options, on Dask, with a resumable per-cell store.

* :mod:`fedsde.sweep.spec`: the TOML spec (``[run]``, ``[base]``, ``[grid]``, ``[zip]``), its validation
  (:func:`load_spec`), the size of the grid (counted from the axis lengths, refused past a limit), the cells (one
  at a time) and each cell's seed (:func:`cell_seed`, derived from the spec's seed and the cell's coordinates only);
* :mod:`fedsde.sweep.command`: the link to the commands: a cell runs ``fedsde COMMAND <flags> --json``
  in-process through that command's own handler and parser, taken from a table of commands;
* :mod:`fedsde.sweep.store`: the sweep folder: ``spec.toml``, its hash, one atomically written file per cell;
* :mod:`fedsde.sweep.execute`: :func:`run`, in-process, on a ``dask.distributed.LocalCluster`` (its workers warm,
  :mod:`fedsde.sweep.warm`) or on a running Dask cluster;
* :mod:`fedsde.sweep.options`: :class:`SweepExecution`, how the cells run (workers, scheduler, resume, …) as one
  value checked once, which :func:`run` and :func:`fedsde.maps.run_map` take whole;
* :mod:`fedsde.sweep.resources`: cells on an accelerator (``--device cuda``) run only on workers that declare the
  Dask resource ``GPU``; the GPU workers of a LocalCluster; a cluster without such a worker is refused;
* :mod:`fedsde.sweep.load`: :func:`load` (``xarray.Dataset``) and :func:`load_frame` (``pandas.DataFrame``).

Why cells go through the command line handlers: every command, including commands added later, becomes sweepable
with no per-command code, and a cell gives exactly what ``fedsde COMMAND --json`` prints.  The commands come as a
table, name → ``register(subparsers)``, that the command line declares (:data:`fedsde.cli.SUBCOMMANDS`, which
marks the cell commands) and hands over (:func:`fedsde.cli.cell_commands`, the ``commands=`` of :func:`run` and
:func:`load_spec`).  Nothing in this package imports ``fedsde._cli``; the only import up to the command line is the
Python API's default table (:func:`fedsde.sweep.command.default_commands`).

``import fedsde.sweep`` is light: dask, xarray and pandas are imported when a sweep runs or loads.
"""

from fedsde.sweep.execute import run, run_cell
from fedsde.sweep.load import load, load_frame
from fedsde.sweep.options import SweepExecution
from fedsde.sweep.spec import MAX_CELLS, Cell, SweepSpec, cell_seed, load_spec

__all__ = ["MAX_CELLS", "Cell", "SweepExecution", "SweepSpec", "cell_seed", "load", "load_frame", "load_spec", "run",
           "run_cell"]
