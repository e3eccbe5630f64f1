"""Subcommands of the ``fedsde`` command line, one module each (see :mod:`fedsde.cli`)."""
