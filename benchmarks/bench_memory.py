"""Peak memory of fedsde's commands on networks, against what each command planned up front (its JSON
``resources``), one command per fresh process.

Problems: pytorch/examples' MNIST ``Net`` sized for 8×8 digits (``examples/models/mnist_net.toml``: d = 53,002,
10 clients with Dirichlet(0.3) label skew, batches of 16) and a one-hidden-layer MLP with 13,334 hidden units
(``examples/models/wide_mlp.toml``: d = 1,000,060, the same clients).  Each command runs as ``fedsde COMMAND …
--json`` in a child process with ``FEDSDE_MEMORY_LIMIT`` set to the ceiling it must stay under (4 GiB for the
``Net``, 8 GiB for the wide MLP), so a command that plans more is refused up front rather than measured; the child's
peak resident set (``ru_maxrss`` of the waited-for process) is reported beside ``memory_planned_bytes`` and the
peak of a process that only imports fedsde and torch and loads the problem (the floor every command starts from).
The settings are small (one or two rounds, few replicates): this measures memory, not decisions.

Usage: python benchmarks/bench_memory.py [--only net|wide] [--threads 2] [--commands simulate,validity,…]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = {"net": (ROOT / "examples/models/mnist_net.toml", "4G"),
            "wide": (ROOT / "examples/models/wide_mlp.toml", "8G")}
COMMON = ["--eta", "0.05", "--local-steps", "1", "--rounds", "1", "--seed", "0"]
#: the commands of the done-when, with settings that keep each to minutes on two cores
COMMANDS = {
    "simulate": ["simulate", "--replicates", "8"],
    "validity": ["validity", "--replicates", "8", "--ells", "1,2"],
    "map": ["map", "--replicates", "4", "--ells", "1,2", "--eta", "0.05,0.1", "--local-steps", "1"],
    "compare": ["compare", "--replicates", "8", "--ells", "1,2,4", "--mc-substeps", "1", "--inner-samples", "2"],
    "sde": ["sde", "--variant", "general", "--replicates", "8", "--inner-samples", "4"],
}
FLOOR = ("import sys, resource; from fedsde.problems import load_problem; import torch; load_problem(sys.argv[1]); "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")


#: the child: fedsde's entry point, then its own peak resident set on stderr
CHILD = ("import resource, sys\nfrom fedsde.cli import main\nrc = main(sys.argv[1:])\n"
         "sys.stderr.write('peak_rss %d\\n' % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))\n"
         "sys.exit(rc)")


def run(argv: list[str], limit: str, threads: int) -> dict:
    """``fedsde argv --json`` in a child: its exit status, peak RSS, wall time and JSON ``resources``."""
    env = dict(os.environ, FEDSDE_MEMORY_LIMIT=limit, PYTHONPATH=str(ROOT))
    tic = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv, "--json", "--threads", str(threads)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - tic
    peaks = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("peak_rss ")]
    row = {"rc": proc.returncode, "wall_s": round(wall, 1), "peak_rss": peaks[-1] if peaks else None}
    if proc.returncode == 0:
        row["resources"] = json.loads(proc.stdout)["resources"]
    else:
        lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("peak_rss")]
        row["error"] = lines[-1] if lines else ""
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(PROBLEMS), default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--commands", default=",".join(COMMANDS))
    args = ap.parse_args()
    for name, (path, limit) in PROBLEMS.items():
        if args.only not in (None, name):
            continue
        floor = int(subprocess.run([sys.executable, "-c", FLOOR, str(path)], capture_output=True, text=True,
                                   check=True, env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.split()[-1])
        print(f"{name}: {path.name}, ceiling {limit}, floor (fedsde + torch + the problem) {floor / 2**30:.2f} GiB")
        for cmd in args.commands.split(","):
            argv = [*COMMANDS[cmd], "--problem", str(path), *COMMON]
            if cmd == "map":  # the map's own axes replace --eta/--local-steps; its files go to a scratch folder
                argv = [*COMMANDS[cmd], "--problem", str(path), "--rounds", "1", "--seed", "0", "--out",
                        f"/tmp/bench-memory-map-{os.getpid()}"]
            row = run(argv, limit, args.threads)
            res = row.get("resources") or {}
            planned = res.get("memory_planned_bytes")
            peak = row["peak_rss"]
            print(f"  {cmd:9s} rc={row['rc']}  peak RSS {peak / 2**30 if peak else float('nan'):.2f} GiB  "
                  + (f"planned {planned / 2**30:.2f} GiB (peak − floor = {(peak - floor) / planned:.2f} × planned)  "
                     if planned and peak else "")
                  + f"{row['wall_s']:.0f} s" + (f"  {row.get('error', '')}" if row["rc"] else ""), flush=True)


if __name__ == "__main__":
    main()
