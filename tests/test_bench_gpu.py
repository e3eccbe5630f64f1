"""benchmarks/bench_gpu.py runs on CPU (quick sizes) and prints one JSON object with every figure (no speed
asserted)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("sde_vs_fused", "sde_vs_cpu", "quadratic_sim", "data_softmax", "data_mlp", "validity_cli", "module")


def _numbers(node, path=""):
    """Every numeric leaf ``(path, value)`` of a JSON tree (booleans excluded)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _numbers(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{path}/{i}")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node


@pytest.mark.long
def test_bench_gpu_cpu_quick_json():
    # one torch thread, as the other tests (the CPU may be shared)
    res = subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--quick", "--json",
                          "--threads", "1"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)  # hang guard
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)  # exactly one JSON object on stdout
    assert {"device", "torch", "dtype", "threads", "quick", *FIGURES} <= set(report)
    assert report["quick"] is True and report["threads"] == 1 and report["dtype"] == "float64"
    assert isinstance(report["device"], str) and report["device"]
    for key in FIGURES:
        assert "ratio" in json.dumps(report[key]) and "baseline" in report[key], key
        numbers = list(_numbers(report[key], key))
        assert numbers, key
        for where, value in numbers:
            assert math.isfinite(value), where
            # agreement diagnostics (a difference, a standard error) may be zero; times, rates and ratios not
            assert value >= 0 if "/check/" in where else value > 0, (where, value)
    for key in ("sde_vs_fused", "sde_vs_cpu"):
        assert {"ratio", "baseline"} <= set(report[key])
    assert report["sde_vs_fused"]["check"]["agree"], report["sde_vs_fused"]["check"]
    for key in ("data_softmax", "data_mlp"):
        for dtype in ("float64", "float32"):
            fig = report[key][dtype]
            assert {"device_rate", "cpu_rate", "fused_rate", "vs_cpu", "ratio"} <= set(fig), (key, dtype)
            assert fig["check"]["agree"], (key, dtype, fig["check"])
    for name in ("mlp", "mnist_net"):
        for dtype in ("float64", "float32"):
            fig = report["module"][name][dtype]
            assert {"device_rate", "cpu_rate", "loop_rate", "ratio", "vs_cpu", "launch_blocks"} <= set(fig), name
            assert fig["batching"] in ("vmap", "loop") and fig["launch_blocks"] == 1  # one block per call on a CPU
    for key in ("quadratic_sim", "validity_cli"):
        assert {"ratio", "cpu_rate" if key == "quadratic_sim" else "cpu_s"} <= set(report[key])
