"""The rows of a round's participants, read from a client population on demand (internal).

:class:`PopulationRows` is :class:`~fedsde.clients.data_rows.ClientRows` for a
:class:`~fedsde.problems.populations.base.PopulationProblem`: at the start of every round
(:meth:`PopulationRows.select`) it gathers the rows of the clients that the round's slots hold (through the problem's
bounded cache, :class:`~fedsde.problems.populations.base.ClientCache`) into one ragged block on the device and renumbers
the slots' clients into it; the gathers of the oracles then read that block exactly as they read the ragged rows of a
materialised problem, so the numbers are those of the materialised problem.  Memory and work per round grow with the
participants' rows, not with the population.  :func:`gather_clients` is the gather itself (the least-squares
oracle reads a least-squares population's participants through it).
"""

from __future__ import annotations

import numpy as np
import torch

from fedsde.clients.data_rows import ClientRows


def gather_clients(problem, clients: torch.Tensor | None, device: torch.device, dtype: torch.dtype):
    """:func:`participant_rows` on ``device``: ``X`` (n, F) in ``dtype``, ``y`` (n, …) as the problem gives it, the
    first row of every loaded client (int64 tensor), their sizes (int64 array) and ``clients`` renumbered into the
    loaded clients (``None`` for ``None``)."""
    local, X, y, starts = participant_rows(problem, clients)
    sizes = np.diff(np.append(starts, X.shape[0])).astype(np.int64)
    return (torch.as_tensor(X).to(device=device, dtype=dtype), torch.as_tensor(y, device=device),
            torch.as_tensor(starts, device=device), sizes, local)


class PopulationRows(ClientRows):
    """Ragged rows of the round's participants (see the module docstring)."""

    def __init__(self, problem, device: torch.device, dtype: torch.dtype):
        super().__init__(problem, device, dtype)
        self.ragged = True

    def select(self, clients: torch.Tensor | None) -> torch.Tensor | None:
        """Load the rows of the clients in ``clients`` (any shape; ``None``: every client) and return ``clients``
        renumbered into the loaded block (the oracle's gathers take these)."""
        X, y, starts, _, local = gather_clients(self.problem, clients, self.device, self.dtype)
        self._flat = (X, y, starts, int(X.shape[0]))
        return local

    def _build_padded(self):
        """Every client's padded rows (rounds without sampling that share each client's rows among replicates): those
        of the materialised problem."""
        if self._padded is None:
            Xp, yp = self.problem.materialise().padded()
            X = torch.as_tensor(Xp, dtype=self.dtype, device=self.device)
            self._padded = (X, X.transpose(1, 2).contiguous(), self.targets(torch.as_tensor(yp, device=self.device)))
        return self._padded

    def _build_flat(self):
        if self._flat is None:
            self.select(None)
        return self._flat


def participant_rows(problem, clients: torch.Tensor | None):
    """The rows of the clients in ``clients`` (any shape; ``None``: every client), read through ``problem``'s
    ``client_data`` (its bounded cache): ``(local, X, y, starts)`` with ``local`` the clients renumbered into the
    block (``None`` for ``None``), ``X`` (n, …) and ``y`` (n, …) their rows concatenated in increasing client order
    (NumPy) and ``starts`` (int64) every client's first row in them."""
    if clients is None:
        ids, local = np.arange(int(problem.Q)), None
    else:
        uniq, local = torch.unique(clients, sorted=True, return_inverse=True)
        ids, local = uniq.cpu().numpy(), local.to(clients.device)
    parts = [problem.client_data(int(k)) for k in ids]
    sizes = np.array([np.shape(y)[0] for _, y in parts], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return local, np.concatenate([x for x, _ in parts]), np.concatenate([v for _, v in parts]), starts
