"""Shared pytest configuration: float64 by default, one torch thread (``FEDSDE_TEST_THREADS=n`` runs the suite
with ``n``, to check that no test depends on the thread count), CUDA skip marker."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _torch_defaults():
    torch.set_num_threads(int(os.environ.get("FEDSDE_TEST_THREADS", "1")))
    yield


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
