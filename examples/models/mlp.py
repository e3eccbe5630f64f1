"""A one-hidden-layer tanh network as an ``nn.Module`` (``model = "mlp.py:MLP"``): flatten → linear (inputs →
hidden) → tanh → linear (hidden → outputs).  On digits (64 inputs, 10 classes) it has the shape of fedsde's built-in
MLP (``model = "mlp"``): ``d = 65·hidden + (hidden + 1)·10`` weights (2410 with 32 hidden units).
"""

from __future__ import annotations

from torch import nn


class MLP(nn.Module):
    """``(n, ...)`` inputs (flattened to ``inputs`` features) → ``(n, outputs)``."""

    def __init__(self, inputs: int = 64, hidden: int = 32, outputs: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))

    def forward(self, x):
        return self.net(x)
