"""Speed of the least-squares CSV reader (:func:`fedsde.problems.regression.csv_reader.csv_blocks`): plain stretches
parsed at once by pandas, against the same reader with every stretch read record by record by the csv module (the reader
before the stretches), on one generated file, in one process.

The file is :func:`bench_regression_population.write_csv`'s (clients of LogNormal row counts, 3 features and a
target written with ``%.6g``, rows shuffled; in the system's temporary folder, removed after).  The two readers
alternate ``--repeats`` times; printed: CPU seconds of each (median, min–max), nanoseconds a row, the ratio per
repeat (median, min–max), and a check that both gave the same blocks bit for bit.  Threads pinned to 1 (the pandas
parser is single-threaded); the load average is printed before and after (the machine may be shared).

Usage: python benchmarks/bench_csv_reader.py [--clients 210000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_regression_population import write_csv  # noqa: E402

from fedsde.problems.regression import csv_reader  # noqa: E402


def read(path) -> tuple[float, list]:
    t = time.process_time()
    blocks = list(csv_reader.csv_blocks(path, ["x1", "x2", "x3"], "y", "site"))
    return time.process_time() - t, blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=210000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        rows = write_csv(path, args.clients)
        print(f"{rows} rows, {path.stat().st_size / 2**20:.1f} MiB")
        read(path)  # imports pandas
        fast, slow, same = [], [], True
        for _ in range(args.repeats):
            t_fast, got = read(path)
            with mock.patch.object(csv_reader, "_plain_stretch", lambda *a: None):
                t_slow, want = read(path)
            fast.append(t_fast)
            slow.append(t_slow)
            same &= [c for c, _ in got] == [c for c, _ in want] and all(
                a.tobytes() == b.tobytes() for (_, a), (_, b) in zip(got, want, strict=True))
            del got, want
    ratios = [s / f for s, f in zip(slow, fast, strict=True)]
    for name, ts in (("stretches (pandas)", fast), ("record by record (csv)", slow)):
        print(f"{name:>24}: {statistics.median(ts):.2f} s CPU (min {min(ts):.2f}, max {max(ts):.2f}), "
              f"{1e9 * statistics.median(ts) / rows:.0f} ns a row")
    print(f"ratio record by record / stretches: median {statistics.median(ratios):.1f} "
          f"(min {min(ratios):.1f}, max {max(ratios):.1f}); same blocks bit for bit: {same}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
