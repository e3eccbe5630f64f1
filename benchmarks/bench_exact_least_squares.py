"""Speed of the exact least-squares laws of minibatch FedAvg: matrix-free against the dense d²×d² path.

Problem: Q = 20 least-squares clients with 100–200 Gaussian rows each (about 3,000 rows), d features, minibatches
of 8 rows without replacement, η = 0.05, E = 5 local steps.  Reported for every d: the seconds of the stationary
law (preconditioned CG plus the Lanczos spectral radius), of the transient after 50 rounds (round by round) and
after 10⁸ rounds (tail bound), the CG fixed-point residual ``‖P − T(P) − K‖_F/‖K‖_F``; and at the smallest d the
dense path's seconds, the ratio dense/matrix-free and the largest relative difference of the two covariances.
Threads are pinned (``--threads``, default 1) so the numbers compare within one run.

Usage: python benchmarks/bench_exact_least_squares.py [--threads 1] [--dims 20,40,60,80,100] [--quick]
"""

from __future__ import annotations

import argparse
import os
import time


def problem(d: int, Q: int = 20, seed: int = 0):
    import numpy as np

    from fedsde.problems.regression.problem import RegressionProblem

    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    X = [rng.normal(size=(int(rng.integers(100, 200)), d)) + 0.3 * rng.normal(size=d) for _ in range(Q)]
    y = [x @ w + rng.normal(size=x.shape[0]) + 0.1 * k for k, x in enumerate(X)]
    Xs = np.concatenate(X)
    mu, sd = Xs.mean(0), Xs.std(0)
    return RegressionProblem.from_clients([(x - mu) / sd for x in X], y, batch_size=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dims", default="20,40,60,80,100")
    ap.add_argument("--quick", action="store_true", help="d = 20 and 40 only")
    a = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import numpy as np

    from fedsde.exact.least_squares import least_squares_stationary_law
    from fedsde.exact.least_squares_transient import least_squares_transient_moments

    dims = [20, 40] if a.quick else [int(x) for x in a.dims.split(",")]
    print(f"threads={a.threads}; eta=0.05, E=5, b=8, Q=20")
    for i, d in enumerate(dims):
        pb = problem(d)
        t0 = time.perf_counter()
        st = least_squares_stationary_law(pb, 0.05, 5, method="matrix-free")
        t1 = time.perf_counter()
        least_squares_transient_moments(pb, 0.05, 5, 50, record=[50], stationary=st)
        t2 = time.perf_counter()
        least_squares_transient_moments(pb, 0.05, 5, 10**8, record=[10**8], stationary=st)
        t3 = time.perf_counter()
        line = (f"d={d:3d} rows={int(pb.sizes.sum())}: stationary {t1 - t0:6.2f} s (residual {st.residual:.1e}, "
                f"rho {st.spectral_radius:.6f}), 50 rounds {t2 - t1:6.2f} s, 1e8 rounds {t3 - t2:6.2f} s")
        if i == 0:
            t4 = time.perf_counter()
            dense = least_squares_stationary_law(pb, 0.05, 5, method="dense")
            t5 = time.perf_counter()
            diff = float(np.abs(dense.cov - st.cov).max() / np.abs(dense.cov).max())
            line += (f"; dense {t5 - t4:.2f} s, ratio dense/matrix-free {(t5 - t4) / (t1 - t0):.1f}, "
                     f"max rel diff {diff:.1e}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
