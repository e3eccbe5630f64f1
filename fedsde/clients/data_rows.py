"""The training rows of a data problem on a device, in the layout each oracle pass needs (internal).

Two layouts of the design rows ``x̃ = (x, 1)`` (:meth:`~fedsde.problems.classification.labelled.LabelledProblem.design`)
and the targets (``y`` for logistic models, one-hot ``e_y`` otherwise):

* **padded** — ``X`` of shape ``(Q, N_max, F)`` (client ``k`` in ``X[k, :N_k]``, zeros after; the problem's
  :meth:`padded`), its transpose and the targets ``(Q, N_max, K)``: what the shared-row passes of
  :mod:`fedsde.clients.data_oracles` multiply with, built on first use;
* **ragged** — the problem's own rows ``(N, F − 1)`` (no copy on the CPU in float64), their labels and the first
  row of every client: a minibatch is gathered row by row and gets its intercept column and one-hot targets
  after the gather, so nothing of size ``Q·N_max`` is ever formed.

Gathers (:meth:`ClientRows.gather`, :meth:`ClientRows.slot_rows`) read the padded layout when the problem is small
(it is built anyway for shared rows) and the ragged one when the padded layout would exceed :data:`RAGGED_FLOATS`
(cross-device client counts: 10⁵ clients of 60 samples in 61 dimensions would pad to 3 GB).  Both give the same
rows; entries past a client's ``N_k`` (which carry zero weight) read zeros in the padded layout and another row
in the ragged one.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde.problems.classification.models import LogisticModel

#: padded layouts above this many floats are never formed for gathers (the ragged rows are read instead)
RAGGED_FLOATS = 1 << 24


class ClientRows:
    """Design rows and targets of ``problem`` (a :class:`~fedsde.problems.classification.problem.ClassificationProblem`)
    on ``device`` in ``dtype`` (see the module docstring).

    Attributes
    ----------
    Q, n_max, F, K : int
        Clients, most samples of a client, design columns (features + intercept), target columns.
    ragged : bool
        Gathers read the ragged rows.
    """

    def __init__(self, problem, device: torch.device, dtype: torch.dtype):
        self.problem, self.device, self.dtype = problem, device, dtype
        self.Q = int(problem.Q)
        self.n_max = int(np.max(problem.sizes))
        self.F = int(problem.n_features)
        self.logistic = isinstance(problem.classifier, LogisticModel)
        self.K = 1 if self.logistic else int(problem.n_outputs)
        self.ragged = self.Q * self.n_max * self.F > RAGGED_FLOATS
        self._padded = None
        self._flat = None

    # ------------------------------------------------------------------ padded layout
    def _build_padded(self):
        if self._padded is None:
            Xp, yp = self.problem.padded()
            X = torch.as_tensor(Xp, dtype=self.dtype, device=self.device)  # (Q, N, F)
            self._padded = (X, X.transpose(1, 2).contiguous(), self.targets(torch.as_tensor(yp, device=self.device)))
        return self._padded

    @property
    def X(self) -> torch.Tensor:
        """Padded design rows, shape (Q, N_max, F)."""
        return self._build_padded()[0]

    @property
    def Xt(self) -> torch.Tensor:
        """Their transpose, shape (Q, F, N_max) (contiguous)."""
        return self._build_padded()[1]

    @property
    def Y(self) -> torch.Tensor:
        """Padded targets, shape (Q, N_max, K)."""
        return self._build_padded()[2]

    def targets(self, y: torch.Tensor) -> torch.Tensor:
        """Labels (…) as targets (…, K): ``y`` itself for the logistic model, one-hot ``e_y`` otherwise."""
        if self.logistic:
            return y.to(self.dtype).unsqueeze(-1)
        return torch.nn.functional.one_hot(y, self.K).to(self.dtype)

    # ------------------------------------------------------------------ ragged layout
    def _build_flat(self):
        if self._flat is None:
            pb = self.problem
            X = torch.as_tensor(np.asarray(pb.X), device=self.device).to(self.dtype)  # (N, F − intercept)
            starts = np.concatenate([[0], np.cumsum(pb.sizes)[:-1]]).astype(np.int64)
            self._flat = (X, torch.as_tensor(np.asarray(pb.y), device=self.device),
                          torch.as_tensor(starts, device=self.device), int(X.shape[0]))
        return self._flat

    def _ragged_rows(self, flat_idx: torch.Tensor, shape: tuple[int, int]):
        """Design rows and targets of the ragged row numbers ``flat_idx`` viewed as (M, n, ·)."""
        X, y, _, N = self._build_flat()
        flat_idx = flat_idx.clamp(max=N - 1)  # entries past the last client's N_k carry zero weight
        M, n = shape
        Xb = X.index_select(0, flat_idx).view(M, n, -1)
        if Xb.shape[-1] < self.F:  # the intercept column of the design
            Xb = torch.cat([Xb, Xb.new_ones((M, n, 1))], dim=-1)
        return Xb, self.targets(y.index_select(0, flat_idx)).view(M, n, -1)

    # ------------------------------------------------------------------ gathers
    def gather(self, idx: torch.Tensor, clients: torch.Tensor | None):
        """Rows ``idx`` (nb, slots, B, n) of every slot's client (slot ``k`` holds client ``k`` when ``clients`` is
        None, else ``clients`` (nb, slots, B)): rows (M, n, F), their transpose and targets (M, n, K),
        ``M = nb·slots·B``."""
        nb, slots, B, n = idx.shape
        M = nb * slots * B
        if self.ragged:
            starts = self._build_flat()[2]
            base = starts.view(1, slots, 1, 1) if clients is None else starts[clients].unsqueeze(-1)
            Xb, Yb = self._ragged_rows((idx + base).reshape(-1), (M, n))
        else:
            X, _, Y = self._build_padded()
            if clients is None:
                base = (torch.arange(self.Q, device=self.device) * self.n_max).view(1, slots, 1, 1)
            else:
                base = (clients * self.n_max).unsqueeze(-1)
            flat = (idx + base).reshape(-1)
            Xb = X.view(-1, self.F).index_select(0, flat).view(M, n, self.F)
            Yb = Y.view(-1, Y.shape[-1]).index_select(0, flat).view(M, n, -1)
        return Xb, Xb.transpose(1, 2).contiguous(), Yb

    def slot_rows(self, clients: torch.Tensor):
        """All (padded) rows of the client of every slot, ``clients`` (nb, slots, B): rows (M, N_max, F), their
        transpose and targets (M, N_max, K)."""
        if self.ragged:
            starts = self._build_flat()[2]
            M = clients.numel()
            idx = starts[clients].reshape(-1, 1) + torch.arange(self.n_max, device=self.device)
            Xr, Yr = self._ragged_rows(idx.reshape(-1), (M, self.n_max))
        else:
            X, _, Y = self._build_padded()
            Xr, Yr = X[clients].flatten(0, 2), Y[clients].flatten(0, 2)
        return Xr, Xr.transpose(1, 2).contiguous(), Yr
