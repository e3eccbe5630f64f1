"""Local-step schedules: fixed ``E``, fixed per-client ``τ_k``, or redrawn every round."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedsde._validate import client_steps, positive_int
from fedsde.errors import FedsdeInputError
from fedsde.sim.streams import BLOCK, ReplicateStreams


@dataclass(frozen=True)
class RandomSteps:
    """Local steps redrawn every round, independently per client and replicate.

    ``τ = multiplier · U{low, …, high}`` — e.g. epochs uniform in {2, …, 5} times the number of minibatches
    per epoch (the system heterogeneity of seeds 000/003).

    Parameters
    ----------
    low, high : int
        Inclusive range of the uniform draw (``1 <= low <= high``).
    multiplier : int or array of int, shape (Q,)
        Steps per unit drawn (e.g. batches per epoch of each client).
    """

    low: int
    high: int
    multiplier: int | tuple[int, ...] = 1

    def __post_init__(self):
        positive_int("low", self.low)
        positive_int("high", self.high)
        if self.low > self.high:
            raise FedsdeInputError(f"low={self.low}, high={self.high}: need low <= high")
        mult = np.atleast_1d(np.asarray(self.multiplier))
        for k, m in enumerate(mult.tolist()):
            positive_int(f"multiplier[{k}]", m)

    def max_steps(self) -> int:
        return int(self.high * int(np.max(np.asarray(self.multiplier))))

    def draw(self, streams: ReplicateStreams, Q: int) -> torch.Tensor:
        """Steps of shape (nblocks·BLOCK, Q)."""
        draw = streams.randint(self.low, self.high + 1, (BLOCK, Q)).reshape(-1, Q)
        mult = torch.as_tensor(np.broadcast_to(np.asarray(self.multiplier), (Q,)).copy(), device=draw.device)
        return draw * mult


LocalSteps = int | np.ndarray | RandomSteps


def normalise_steps(local_steps, Q: int) -> np.ndarray | RandomSteps:
    """Fixed steps as an int array (Q,), or the :class:`RandomSteps` object unchanged."""
    if isinstance(local_steps, RandomSteps):
        return local_steps
    return client_steps("local_steps", local_steps, Q)
