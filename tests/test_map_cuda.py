"""``fedsde map --device cuda``: the cells run on the GPU, in-process and on a LocalCluster whose GPU worker takes
them (skipped without a CUDA device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsde.cli import main

TABLE = str(Path(__file__).resolve().parents[1] / "examples" / "problems" / "paper_table.toml")


@pytest.mark.cuda
@pytest.mark.parametrize("workers", ["1", "2"])
def test_map_cells_run_on_the_gpu(tmp_path, capsys, workers):
    out = tmp_path / "m"
    assert main(["map", "--problem", TABLE, "--eta", "0.02,0.2", "--local-steps", "2", "--rounds", "6",
                 "--replicates", "16", "--seed", "1", "--fedavg", "sampled", "--device", "cuda", "--workers", workers,
                 "--out", str(out),
                 "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["counts"]["failed"] == 0 and len(rec["cells"]) == 2
    for c in rec["cells"]:
        stored = json.loads((out / c["record"]).read_text(encoding="utf-8"))
        assert stored["result"]["config"]["device"].startswith("cuda")
        if workers == "2":
            assert stored["resources"] == {"GPU": 1}
