"""Subcommands of the ``fedsde`` command line, one module each (see :mod:`fedsde.cli`), and their table.

:data:`SUBCOMMANDS` declares every command in one place: its name, its one-line help (the text ``fedsde --help``
lists; a module gives it to its parser through :func:`one_line_help`) and whether a sweep cell can run it.  A
command's module ``fedsde._cli.<name>`` (``_`` for ``-``) exposes ``register(subparsers)``, which adds the
command's parser with its description and flags, sets its handler as ``func``, and is cheap to import and call:
the handler imports what the command needs.  :func:`cell_commands` is the table of cell commands that the ``sweep``
command hands to :func:`fedsde.sweep.run`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from fedsde._cli._names import GALLERY_RANGE


@dataclass(frozen=True)
class Subcommand:
    """One ``fedsde`` command, as the command line declares it.

    Attributes
    ----------
    name : str
        what the user types (``compare-aggregators``); its module is ``fedsde._cli.<name with '_' for '-'>``.
    help : str
        the one line ``fedsde --help`` shows for it.
    cell : bool
        whether a sweep cell can run it: its whole output is its ``--json`` object and it writes no files of its
        own outside a sweep folder.
    not_cell : str
        for a command that is not a cell command, why (the sweep's refusal says it).
    """

    name: str
    help: str
    cell: bool = True
    not_cell: str = ""

    @property
    def module(self) -> str:
        return "fedsde._cli." + self.name.replace("-", "_")

    def shipped(self) -> bool:
        """Whether this build has the command's module (found without importing it)."""
        return importlib.util.find_spec(self.module) is not None

    def register(self, subparsers) -> None:
        """Add the command's parser, with all its flags, to ``subparsers`` (imports its module, which is light)."""
        importlib.import_module(self.module).register(subparsers)


class CommandTable(dict):
    """The commands a sweep cell can run: name → ``register(subparsers)`` (the table :func:`fedsde.sweep.run`
    takes), and ``refused``: the other commands, name → why a cell cannot run them."""

    def __init__(self, cells=(), *, refused=None):
        super().__init__(cells)
        self.refused = dict(refused or {})


_OWN_FILES = "it writes files of its own outside the sweep folder"

#: the commands, in the order ``--help`` lists them
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("exact", "exact laws of the discrete chain (no sampling)"),
    Subcommand("simulate", "simulate the discrete algorithm (replicates × clients, vectorised)"),
    Subcommand("derive", "symbolic derivation of the SDE (paper / corrected / matched), or its coefficients on a "
               "problem"),
    Subcommand("sde", "simulate the SDE of FedAvg (torchsde Euler–Maruyama on the round grid, or exact OU)"),
    Subcommand("compare", "compare the discrete chain with an SDE (moments, distances, weak error vs step)"),
    Subcommand("claims", "check the seed papers' claims (bounds, constants, CLT, Section 6) as printed and corrected"),
    Subcommand("compare-aggregators", "compare server rules on digits under FedAWARE's heterogeneity settings",
               cell=False, not_cell=_OWN_FILES),
    Subcommand("validity", "does the SDE of FedAvg track FedAvg on this problem? (FedAvg against the SDE's exact law "
               "or SVAG)"),
    Subcommand("scaling", "first-order SDE scaling rules: the scaled configuration and how far it is from the base"),
    Subcommand("sweep", "run a command over a grid of options (in-process or on Dask), one stored file per cell",
               cell=False, not_cell="it runs sweeps itself"),
    Subcommand("map", "where does the SDE describe FedAvg? the validity test over a grid of (η, E, s), drawn as a "
               "map with a report", cell=False, not_cell="it runs sweeps itself and writes its own files"),
    Subcommand("reproduce", f"run the main job: the gallery {GALLERY_RANGE} and report.html", cell=False,
               not_cell=_OWN_FILES),
)


def one_line_help(name: str) -> str:
    """The one-line help of the command ``name`` (what its module gives ``add_parser(help=…)``)."""
    return next(c.help for c in SUBCOMMANDS if c.name == name)


def cell_commands() -> CommandTable:
    """The commands a sweep cell can run, as the table :func:`fedsde.sweep.run` takes (``commands=``).

    Returns
    -------
    CommandTable
        name → ``register(subparsers)`` of every cell command of :data:`SUBCOMMANDS` (bound methods of frozen
        :class:`Subcommand` instances, which pickle by reference, so cells run on Dask workers), and the other
        commands with the reason a cell cannot run them.
    """
    return CommandTable({c.name: c.register for c in SUBCOMMANDS if c.cell and c.shipped()},
                        refused={c.name: c.not_cell for c in SUBCOMMANDS if not c.cell})
