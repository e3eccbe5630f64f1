"""The ``Net`` of pytorch/examples' ``mnist/main.py``, sized for scikit-learn's 8×8 digits (a model file of a
``kind = "module"`` problem: ``model = "mnist_net.py:Net"``).

Two 3×3 convolutions (1 → 32 → 64 channels, ReLU), 2×2 max pooling, ``nn.Dropout(0.25)``, ``fc1``, ReLU,
``nn.Dropout(0.5)``, ``fc2`` and ``log_softmax``, as in the original; only ``fc1``'s input changes with the image:
a 28×28 image leaves 64·12·12 = 9216 features, an 8×8 one 64·2·2 = 256.  With the defaults (``width = 1``) it has
320 + 18,496 + 32,896 + 1,290 = 53,002 parameters; ``width`` divides every width (``width = 4``: 3,658).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """pytorch/examples' MNIST network on ``side``×``side`` single-channel images; every width divided by ``width``."""

    def __init__(self, side: int = 8, width: int = 1, classes: int = 10):
        super().__init__()
        c1, c2, hidden = 32 // width, 64 // width, 128 // width
        self.conv1 = nn.Conv2d(1, c1, 3, 1)
        self.conv2 = nn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        pooled = (side - 4) // 2
        self.fc1 = nn.Linear(c2 * pooled * pooled, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)
