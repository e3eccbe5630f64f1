"""F11 — server rules (FedAvg, FedAvgM, FedProx, SCAFFOLD, FedNova, FedDisco, FedAWARE, FedAdam) on digits softmax
regression under statistical / hybrid / hybrid+ heterogeneity: test accuracy vs round.

Run: python examples/f11_aggregators.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

from fedsde.report.aggregator_comparison import ComparisonConfig, plot_accuracy, run_comparison, table_text

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--out", default="examples-output")
args = ap.parse_args()

cfg = ComparisonConfig.quick() if args.quick else ComparisonConfig()  # 10 clients/15 rounds, or 20/200
if args.quick:
    cfg.rounds, cfg.runs = 8, 2
    cfg.aggregators = ("fedavg", "fednova", "feddisco", "fedaware")
results = run_comparison(cfg, progress=False)  # every rule on the same partitions and participants
print(table_text(results))  # final test accuracy (%), mean ± std over runs
fig = plot_accuracy(results)
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
fig.savefig(out / "f11_aggregators.png", dpi=120, bbox_inches="tight")
print(f"wrote {out / 'f11_aggregators.png'}")
