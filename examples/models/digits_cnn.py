"""A small convolutional network for scikit-learn's digits as 1×8×8 images (a model file of a ``kind = "module"``
problem: ``model = "digits_cnn.py:DigitsCNN"``).

Conv2d(1 → c, 3×3, padding 1) → GroupNorm → activation → dropout → linear (64·c → classes).  With the defaults
(c = 4 channels, 2 groups, 10 classes) it has 40 + 8 + 2570 = 2618 parameters.  GroupNorm
normalises each image on its own, so the network keeps no running statistics (BatchNorm would: its batch
statistics tie the samples of a minibatch together and its running means are state outside the weight vector).
Dropout is active in train mode (local steps) and off in eval mode (metrics).
"""

from __future__ import annotations

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class DigitsCNN(nn.Module):
    """``(n, 1, 8, 8)`` images → ``(n, classes)`` logits."""

    def __init__(self, channels: int = 4, groups: int = 2, dropout: float = 0.1, activation: str = "tanh",
                 classes: int = 10):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: choose from {', '.join(ACTIVATIONS)}")
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, kernel_size=3, padding=1),
            nn.GroupNorm(groups, channels),
            ACTIVATIONS[activation](),
            nn.Dropout(dropout),
            nn.Flatten(),
        )
        self.head = nn.Linear(channels * 64, classes)

    def forward(self, x):
        return self.head(self.features(x))
