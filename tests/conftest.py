"""Shared pytest configuration: float64 by default, one torch thread (``FEDSDE_TEST_THREADS=n`` runs the suite
with ``n``, to check that no test depends on the thread count), CUDA skip marker, and the number of test processes
of ``pytest -n auto`` (pytest-xdist): the CPUs this process may use, at most ``FEDSDE_TEST_WORKERS`` (default 4:
each process holds its own torch)."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _torch_defaults():
    torch.set_num_threads(int(os.environ.get("FEDSDE_TEST_THREADS", "1")))
    yield


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown where it is not installed
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one test process per usable CPU, at most ``FEDSDE_TEST_WORKERS`` (4)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, int(os.environ.get("FEDSDE_TEST_WORKERS", "4"))))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
