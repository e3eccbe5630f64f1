"""The fixed-grid Brownian motion: law of the increments, reproducibility, chunk invariance, torchsde contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchsde

from fedsde.clients.streams import BLOCK
from fedsde.errors import FedsdeInputError
from fedsde.sde.brownian import STEPS_PER_WINDOW, GridBrownian


def _increments(bm: GridBrownian, steps: int) -> np.ndarray:
    return torch.stack([bm.increment(j) for j in range(steps)]).numpy()  # (steps, R, m)


@pytest.mark.parametrize("float32_draws", [False, True])
def test_increments_have_the_brownian_law(float32_draws):
    dt = 0.01
    bm = GridBrownian(0.0, dt, (1024, 3), seed=7, float32_draws=float32_draws)
    z = _increments(bm, 2 * STEPS_PER_WINDOW) / np.sqrt(dt)  # standard normals, (64, 1024, 3)
    x = z.reshape(-1)
    N = x.size
    assert abs(x.mean()) < 5 / np.sqrt(N)
    assert abs(x.var() - 1.0) < 5 * np.sqrt(2.0 / N)
    assert abs(np.mean(x**4) - 3.0) < 5 * np.sqrt(96.0 / N)  # Var(z⁴) = 105 − 9
    # independence across steps (lag 1 and across a window boundary), channels and paths
    for a, b in [(z[1:], z[:-1]), (z[STEPS_PER_WINDOW:], z[:STEPS_PER_WINDOW]), (z[..., 1], z[..., 0]),
                 (z[:, 1:], z[:, :-1])]:
        r = float(np.mean(a * b))
        assert abs(r) < 5 / np.sqrt(a.size), r
    # the two Box–Muller halves of a window are independent too
    half = STEPS_PER_WINDOW // 2
    assert abs(np.mean(z[:half] * z[half:2 * half])) < 5 / np.sqrt(z[:half].size)
    # per path and channel, the increments over the steps are N(0, dt) (KS against the normal)
    import scipy.stats

    assert scipy.stats.kstest(x[:20000], "norm").pvalue > 1e-6


def test_same_seed_same_path_and_query_order_does_not_matter():
    a = GridBrownian(0.0, 0.1, (200, 2), seed=3)
    b = GridBrownian(0.0, 0.1, (200, 2), seed=3)
    fwd = _increments(a, 70)
    rev = np.stack([b.increment(j).numpy() for j in reversed(range(70))])[::-1]
    np.testing.assert_array_equal(fwd, rev)
    c = GridBrownian(0.0, 0.1, (200, 2), seed=4)
    assert not np.allclose(fwd, _increments(c, 70))


def test_generator_seed():
    g1, g2 = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    a = GridBrownian(0.0, 1.0, (5, 1), seed=g1).increment(0)
    b = GridBrownian(0.0, 1.0, (5, 1), seed=g2).increment(0)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("float32_draws", [False, True])
def test_chunking_paths_does_not_change_them(float32_draws):
    R = 2 * BLOCK + 44
    full = _increments(GridBrownian(0.0, 0.5, (R, 2), seed=5, float32_draws=float32_draws), 40)
    first = _increments(GridBrownian(0.0, 0.5, (100, 2), seed=5, float32_draws=float32_draws), 40)
    rest = _increments(GridBrownian(0.0, 0.5, (R - BLOCK, 2), seed=5, first_block=1,
                                    float32_draws=float32_draws), 40)
    np.testing.assert_array_equal(full[:, :100], first)
    np.testing.assert_array_equal(full[:, BLOCK:], rest)


def test_increments_over_several_steps_add_up():
    bm = GridBrownian(1.0, 0.25, (10, 2), seed=2)
    total = bm(1.0, 1.0 + 40 * 0.25)
    parts = sum(bm(1.0 + j * 0.25, 1.0 + (j + 1) * 0.25) for j in range(40))
    torch.testing.assert_close(total, parts)
    torch.testing.assert_close(bm(1.75), bm(1.0, 1.75))
    assert torch.count_nonzero(bm(1.5, 1.5)) == 0


def test_grid_and_contract_errors():
    bm = GridBrownian(0.0, 0.1, (4, 2), seed=0, steps=10)
    with pytest.raises(FedsdeInputError, match="not on the grid"):
        bm(0.0, 0.15)
    with pytest.raises(FedsdeInputError, match="beyond"):
        bm(0.0, 1.2)
    with pytest.raises(FedsdeInputError, match="ta <= tb"):
        bm(0.3, 0.1)
    with pytest.raises(ValueError, match="levy"):
        bm(0.0, 0.1, return_U=True)
    with pytest.raises(FedsdeInputError, match="size"):
        GridBrownian(0.0, 0.1, (0, 2), seed=0)
    with pytest.raises(FedsdeInputError, match="seed"):
        GridBrownian(0.0, 0.1, (4, 2), seed=None)
    assert bm.shape == torch.Size((4, 2)) and bm.levy_area_approximation == "none"
    assert bm.dtype == torch.float64 and bm.device == torch.device("cpu")
    assert "GridBrownian" in repr(bm)


def test_accumulated_times_map_to_grid_steps():
    """torchsde accumulates t ← t + dt; those times must hit the grid steps (no off-by-one)."""
    bm = GridBrownian(0.0, 0.1, (3, 1), seed=1)
    t = 0.0
    for j in range(1000):
        assert bm.index(t) == j
        t = t + 0.1


def test_usable_as_torchsde_bm():
    class Additive(torch.nn.Module):
        noise_type, sde_type = "additive", "ito"

        def f(self, t, y):
            return torch.zeros_like(y)

        def g(self, t, y):
            return torch.eye(2, dtype=y.dtype).expand(y.shape[0], 2, 2)

    bm = GridBrownian(0.0, 0.1, (6, 2), seed=9)
    ys = torchsde.sdeint(Additive(), torch.zeros(6, 2, dtype=torch.float64), [0.0, 1.0], bm=bm, method="euler",
                         dt=0.1)
    torch.testing.assert_close(ys[-1], bm(0.0, 1.0))


@pytest.mark.cuda
def test_cuda_brownian_is_reproducible_and_normal():
    bm = GridBrownian(0.0, 0.01, (2048, 4), seed=1, device="cuda")
    z = torch.stack([bm.increment(j) for j in range(64)])
    assert z.device.type == "cuda"
    z2 = torch.stack([GridBrownian(0.0, 0.01, (2048, 4), seed=1, device="cuda").increment(j) for j in range(64)])
    torch.testing.assert_close(z, z2, rtol=0, atol=0)
    x = (z / 0.1).cpu().numpy().reshape(-1)
    assert abs(x.mean()) < 5 / np.sqrt(x.size) and abs(x.var() - 1) < 5 * np.sqrt(2 / x.size)
    rest = GridBrownian(0.0, 0.01, (2048 - BLOCK, 4), seed=1, first_block=1, device="cuda").increment(3)
    torch.testing.assert_close(z[3, BLOCK:], rest, rtol=0, atol=0)


def test_last_window_draws_only_the_grid_steps_and_the_same_numbers():
    """A grid of 40 steps draws 32 + 8 steps (not 64); its increments are those of a longer grid, bit for bit."""
    short = GridBrownian(0.0, 0.1, (300, 3), seed=5, steps=40)
    long = GridBrownian(0.0, 0.1, (300, 3), seed=5, steps=1000)
    long_free = GridBrownian(0.0, 0.1, (300, 3), seed=5)
    np.testing.assert_array_equal(_increments(short, 40), _increments(long, 40))
    np.testing.assert_array_equal(_increments(short, 40), _increments(long_free, 40))
    short.increment(39)
    assert short._buf.shape[0] == 40 - STEPS_PER_WINDOW
    view = long.view(37)  # a view's last window ends where its parent's does
    np.testing.assert_array_equal(view.increment(2).numpy(), long.increment(39).numpy())
    np.testing.assert_array_equal(GridBrownian(0.0, 0.1, (300, 3), seed=5, steps=40).view(35).increment(4).numpy(),
                                  short.increment(39).numpy())


def test_the_device_layout_of_a_window_gives_the_same_increments():
    """The GPU's draw (blocks drawn contiguous, transposed by the erfinv pass), run on the CPU with one generator per
    block: the same numbers as the CPU's strided draw."""
    ref = GridBrownian(0.0, 0.1, (300, 3), seed=5, steps=40)
    dev = GridBrownian(0.0, 0.1, (300, 3), seed=5, steps=40)
    dev._contiguous = True
    np.testing.assert_array_equal(_increments(dev, 40), _increments(ref, 40))
