"""fedsde._threads: the exact least-squares laws compute on one BLAS thread (small d × d products) and leave the
caller's BLAS settings as they were."""

import numpy as np
import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]


def test_small_products_run_on_one_blas_thread_and_restore():
    from fedsde._threads import SMALL_PRODUCTS_D, small_products

    class Pb:
        d = 3

    seen = []

    @small_products
    def f(problem):
        np.ones((4, 4)) @ np.ones((4, 4))
        seen.append(_blas_threads())
        return problem.d

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        assert f(Pb()) == 3
        assert seen[-1] and all(n == 1 for n in seen[-1])
        assert _blas_threads() == before  # restored
        Pb.d = SMALL_PRODUCTS_D + 1  # large products: the caller's threads are kept
        f(Pb())
        assert seen[-1] == before


def test_exact_least_squares_law_is_the_same_on_one_thread():
    from fedsde.exact import least_squares_stationary_law
    from fedsde.problems.regression.problem import RegressionProblem

    rng = np.random.default_rng(3)
    X = [rng.normal(size=(n, 4)) for n in (9, 12, 7)]
    y = [x @ [1.0, -0.5, 0.2, 0.0] + k + 0.3 * rng.normal(size=len(x)) for k, x in enumerate(X)]
    pb = RegressionProblem.from_clients(X, y, l2=0.1, batch_size=3)
    law = least_squares_stationary_law(pb, 0.05, 3, 0.5)
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        again = least_squares_stationary_law.__wrapped__(pb, 0.05, 3, 0.5)
    np.testing.assert_allclose(law.cov, again.cov, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(law.mean, again.mean, rtol=1e-12, atol=1e-15)
