"""Write ``clients.npz``: digits as 1×8×8 images held by six clients that each scan with their own device.

A client's scanner scales the ink (contrast 0.6–1.4) and shifts the image by one pixel in its own direction (zero
fill); each client holds 66–152 images with Dirichlet(0.5) label skew.  The held-out images, each through a
randomly chosen client's scanner, are the test set.  Arrays: ``x`` (n, 1, 8, 8) float32 in [0, 1.4], ``y`` (n,)
int64, ``client`` (n,) int64 (clients appear in order 0…5), ``x_test``, ``y_test``.  Deterministic (seed 0).

Run: python examples/models/make_clients_npz.py [--out examples/models/clients.npz]
"""

import argparse
from pathlib import Path

import numpy as np

from fedsde.problems import load_dataset

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=str(Path(__file__).with_name("clients.npz")))
args = ap.parse_args()
Path(args.out).parent.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
X, y = load_dataset("digits")
images = (X / 16.0).reshape(-1, 1, 8, 8)
order = rng.permutation(len(y))
train, test = order[:600], order[600:800]
contrast = np.array([0.6, 0.8, 1.0, 1.1, 1.25, 1.4])
shifts = [(0, 1), (1, 0), (0, -1), (-1, 0), (1, 1), (0, 0)]
Q = len(contrast)


def scan(img: np.ndarray, k: int) -> np.ndarray:
    """Client ``k``'s scanner: contrast, then a one-pixel shift with zero fill."""
    out = np.zeros_like(img)
    dy, dx = shifts[k]
    src = img[..., max(0, -dy):8 - max(0, dy), max(0, -dx):8 - max(0, dx)]
    out[..., max(0, dy):8 - max(0, -dy), max(0, dx):8 - max(0, -dx)] = src
    return contrast[k] * out


# Dirichlet(0.5) label skew: each class's training images are split among the clients by its own proportions
client = np.empty(len(train), dtype=np.int64)
for c in range(10):
    rows = np.flatnonzero(y[train] == c)
    cuts = (np.cumsum(rng.dirichlet(0.5 * np.ones(Q)))[:-1] * len(rows)).astype(int)
    for k, part in enumerate(np.split(rng.permutation(rows), cuts)):
        client[part] = k
keep = np.argsort(client, kind="stable")  # clients in order of first appearance: 0, 1, …
x_train = np.stack([scan(images[train][i], client[i]) for i in keep]).astype(np.float32)
test_client = rng.integers(Q, size=len(test))
x_test = np.stack([scan(images[i], k) for i, k in zip(test, test_client, strict=True)]).astype(np.float32)
np.savez_compressed(args.out, x=x_train, y=y[train][keep], client=client[keep], x_test=x_test, y_test=y[test])
sizes = np.bincount(client, minlength=Q)
print(f"wrote {args.out}: {len(keep)} training images on {Q} clients (sizes {sizes.tolist()}), {len(test)} test")
