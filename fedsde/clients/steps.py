"""Local-step schedules: fixed ``E``, fixed per-client ``τ_k``, or redrawn every round."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedsde._validate import choice, client_steps, positive_int
from fedsde.clients.streams import BLOCK, ReplicateStreams
from fedsde.errors import FedsdeInputError


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
        """Steps of shape (nblocks·block, Q)."""
        draw = streams.randint(self.low, self.high + 1, (getattr(streams, "block", BLOCK), Q)).reshape(-1, Q)
        mult = torch.as_tensor(np.broadcast_to(np.asarray(self.multiplier), (Q,)).copy(), device=draw.device)
        return draw * mult


def _range(name: str, value) -> tuple[int, int | None]:
    """``value`` as an inclusive range ``(low, high)`` (``high`` may be None); a scalar gives ``(v, v)``."""
    if isinstance(value, tuple | list):
        if len(value) != 2:
            raise FedsdeInputError(f"{name}={value!r}: must be an int or an inclusive range (low, high)")
        low = positive_int(f"{name}[0]", value[0])
        high = None if value[1] is None else positive_int(f"{name}[1]", value[1])
        if high is not None and high < low:
            raise FedsdeInputError(f"{name}={value!r}: need low <= high")
        return low, high
    v = positive_int(name, value)
    return v, v


@dataclass(frozen=True)
class EpochSteps:
    """Local steps from epochs and minibatches: ``τ_k = E_k · ⌈N_k / B_k⌉`` (``"ceil"``) or ``⌊E_k N_k / B_k⌋``.

    Epochs ``E_k`` and batch sizes ``B_k`` are fixed or drawn uniformly from inclusive ranges, independently per
    client, round and replicate.  This covers the system heterogeneity of the seeds:

    * fixed ``E`` and ``B`` with unequal client sizes ``N_k`` (seed 000 "Hybrid", seed 003 ``E_i = 2``);
    * ``epochs=(2, 5)`` redrawn every round (seed 003 ``E_i(t) ~ U{2..5}``);
    * ``epochs=(2, 5), batch_size=(10, None)``: seed 000's "Hybrid+", ``B_k ~ U{10, …, N_k − 1}`` (the
      reference code's ``randint(10, N_k)``; ``B_k = N_k`` when ``N_k <= 10``).

    Batch sizes are capped at ``N_k``.  ``rounding="ceil"`` matches data loaders that keep the last partial
    batch (seeds 000/003 code); ``"floor"`` is seed 000's printed ``K_i = ⌊E_i N_k / B_k⌋`` (at least 1).
    The drawn batch sizes are handed to the gradient oracle each round (``begin_round``).

    Parameters
    ----------
    sizes : sequence of int, shape (Q,)
        Training samples ``N_k`` per client.
    epochs : int or (low, high)
    batch_size : int or (low, high); ``high=None`` means ``N_k − 1``
    rounding : {"ceil", "floor"}
    """

    sizes: tuple[int, ...]
    epochs: int | tuple[int, int] = 1
    batch_size: int | tuple[int, int | None] = 32
    rounding: str = "ceil"

    def __post_init__(self):
        sizes = tuple(int(positive_int(f"sizes[{k}]", v)) for k, v in enumerate(np.asarray(self.sizes).tolist()))
        object.__setattr__(self, "sizes", sizes)
        if _range("epochs", self.epochs)[1] is None:
            raise FedsdeInputError(f"epochs={self.epochs!r}: the upper end must be given")
        _range("batch_size", self.batch_size)
        choice("rounding", self.rounding, ("ceil", "floor"))

    @property
    def random(self) -> bool:
        """True when epochs or batch sizes are redrawn every round."""
        e0, e1 = _range("epochs", self.epochs)
        b0, b1 = _range("batch_size", self.batch_size)
        return e0 != e1 or b0 != b1

    def batch_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-client inclusive batch-size range ``(low_k, high_k)``, each of shape (Q,)."""
        n = np.asarray(self.sizes)
        b0, b1 = _range("batch_size", self.batch_size)
        low = np.minimum(b0, n)
        high = np.minimum(n - 1 if b1 is None else b1, n)
        return low, np.maximum(low, high)

    def _steps(self, epochs, batch, n):
        if self.rounding == "ceil":
            return epochs * (-(-n // batch))
        out = (epochs * n) // batch
        return np.maximum(out, 1) if isinstance(out, np.ndarray) else out.clamp(min=1)

    def max_steps(self) -> int:
        e1 = _range("epochs", self.epochs)[1]
        low, _ = self.batch_bounds()
        return int(np.max(self._steps(e1, low, np.asarray(self.sizes))))

    def max_batch(self) -> int:
        """Largest batch any client can draw (fixes the padded batch length of minibatch oracles)."""
        return int(self.batch_bounds()[1].max())

    def fixed(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps and batch sizes, each of shape (Q,), when nothing is redrawn."""
        e0, _ = _range("epochs", self.epochs)
        low, _ = self.batch_bounds()
        return self._steps(e0, low, np.asarray(self.sizes)).astype(np.int64), low.astype(np.int64)

    def draw_round(self, streams: ReplicateStreams, Q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps and batch sizes of one round, each of shape (nblocks·block, Q) (int64)."""
        block = getattr(streams, "block", BLOCK)
        dev = streams.device
        e0, e1 = _range("epochs", self.epochs)
        low, high = (torch.as_tensor(v, device=dev) for v in self.batch_bounds())
        u = streams.uniform_(torch.empty((streams.nblocks, block, 2, Q), dtype=torch.float64, device=dev))
        u = u.reshape(-1, 2, Q)
        epochs = e0 + torch.floor(u[:, 0] * (e1 - e0 + 1)).long().clamp(max=e1 - e0)
        batch = low + torch.floor(u[:, 1] * (high - low + 1)).long().clamp(max=(high - low))
        n = torch.as_tensor(self.sizes, device=dev)
        return self._steps(epochs, batch, n), batch


LocalSteps = int | np.ndarray | RandomSteps | EpochSteps


def normalise_steps(local_steps, Q: int) -> np.ndarray | RandomSteps | EpochSteps:
    """Fixed steps as an int array (Q,), or the :class:`RandomSteps` / :class:`EpochSteps` object unchanged."""
    if isinstance(local_steps, RandomSteps):
        return local_steps
    if isinstance(local_steps, EpochSteps):
        if len(local_steps.sizes) != Q:
            raise FedsdeInputError(f"local_steps: EpochSteps has {len(local_steps.sizes)} client sizes, need Q={Q}")
        return local_steps
    return client_steps("local_steps", local_steps, Q)
