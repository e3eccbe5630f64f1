"""The NumPy face of a :class:`~fedsde.problems.module.ModuleProblem` (CPU, float64): per-client and global
losses, gradients, Hessian-vector products, per-row gradients and accuracy, through the problem's functional copy
of its module (:meth:`~fedsde.problems.module.ModuleProblem.functional`), in eval mode."""

from __future__ import annotations

import numpy as np
import torch

from fedsde.errors import FedsdeInputError


class ModuleViews:
    """Methods of :class:`~fedsde.problems.module.ModuleProblem` on NumPy weights (a mixin: the problem supplies
    ``d``, ``Q``, ``sizes``, ``l2``, ``p``, ``loss_name``, ``X``, ``y``, ``X_test``, ``y_test`` and ``_shared``)."""

    def _wt(self, w) -> torch.Tensor:
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 0 or w.shape[-1] != self.d:
            raise FedsdeInputError(f"w: last axis has {w.shape[-1] if w.ndim else 0} entries, the problem has "
                                   f"d={self.d}")
        return torch.from_numpy(np.require(w.reshape(-1, self.d), requirements=["C", "W"]))

    def client_loss(self, w) -> np.ndarray:
        """``F_k(w)`` (with the ridge) for every client; ``w`` (..., d) gives (..., Q)."""
        lead = np.shape(w)[:-1]
        W = self._wt(w)
        fm, data = self._shared("cpu", torch.float64)
        with fm.lock, torch.no_grad():
            ell = torch.stack([fm.row_losses(v, data["X"], data["y"]) for v in W]).numpy()
        out = np.add.reduceat(ell, data["starts"], axis=-1) / self.sizes
        out += 0.5 * self.l2 * np.sum(W.numpy() ** 2, axis=-1)[:, None]
        return out.reshape(*lead, self.Q)

    def loss(self, w) -> np.ndarray | float:
        """``F(w) = Σ_k p_k F_k(w) + (λ/2)‖w‖²``; ``w`` (..., d)."""
        out = self.client_loss(w) @ self.p
        return float(out) if np.ndim(out) == 0 else out

    def client_grad(self, w) -> np.ndarray:
        """``∇F_k(w)`` (with ``λw``) for every client; ``w`` (..., d) gives (..., Q, d)."""
        lead = np.shape(w)[:-1]
        W = self._wt(w)
        fm, data = self._shared("cpu", torch.float64)
        out = np.empty((W.shape[0], self.Q, self.d))
        with fm.lock:
            for k, (a, n) in enumerate(zip(data["starts"], self.sizes, strict=True)):
                c = torch.full((W.shape[0], int(n)), 1.0 / n, dtype=torch.float64)
                xk, yk = data["X"][a:a + n], data["y"][a:a + n]
                out[:, k] = fm.grads(W, xk.expand(W.shape[0], *xk.shape), yk.expand(W.shape[0], *yk.shape), c,
                                     train=False).numpy()
        out += self.l2 * W.numpy()[:, None, :]
        return out.reshape(*lead, self.Q, self.d)

    def grad(self, w) -> np.ndarray:
        """``∇F(w)``; ``w`` (..., d)."""
        lead = np.shape(w)[:-1]
        W = self._wt(w)
        fm, data = self._shared("cpu", torch.float64)
        m = W.shape[0]
        with fm.lock:
            g = fm.grads(W, data["X"].expand(m, *data["X"].shape), data["y"].expand(m, *data["y"].shape),
                         data["s"].expand(m, -1), train=False)
        return (g.numpy() + self.l2 * W.numpy()).reshape(*lead, self.d)

    def client_hvp(self, w, v) -> np.ndarray:
        """``∇²F_k(w) v_k`` (with ``λv_k``) for every client, shape (Q, d), for ``w`` (d,) and ``v`` (d,) (the same
        vector for every client) or (Q, d) (eval mode; ``torch.func`` forward-over-reverse products)."""
        W = self._wt(w)[0]
        V = self._wt(np.broadcast_to(np.asarray(v, dtype=np.float64), (self.Q, self.d)))
        fm, data = self._shared("cpu", torch.float64)
        out = np.empty((self.Q, self.d))
        with fm.lock:
            for k, (a, n) in enumerate(zip(data["starts"], self.sizes, strict=True)):
                c = torch.full((int(n),), 1.0 / n, dtype=torch.float64)
                out[k] = fm.hvp(W, V[k], data["X"][a:a + n], data["y"][a:a + n], c).numpy()
        return out + self.l2 * V.numpy()

    def per_sample_grads(self, w, client: int) -> np.ndarray:
        """``∇ℓ_i(w) + λw`` of every training row of ``client`` (eval mode), shape (N_k, d)."""
        k = int(client)
        if not 0 <= k < self.Q:
            raise FedsdeInputError(f"client={client}: must lie in [0, {self.Q - 1}]")
        W = self._wt(w)[0]
        fm, data = self._shared("cpu", torch.float64)
        a, n = int(data["starts"][k]), int(self.sizes[k])
        xk, yk = data["X"][a:a + n], data["y"][a:a + n]
        with fm.lock:
            g = fm.grads(W.expand(n, -1), xk.unsqueeze(1), yk.unsqueeze(1), torch.ones((n, 1), dtype=torch.float64),
                         train=False)
        return g.numpy() + self.l2 * W.numpy()

    def accuracy(self, w, split: str = "test") -> np.ndarray | float:
        """Fraction of correctly classified rows of the global test (or train) set; ``w`` (..., d) gives (...)."""
        if not self.uses_labels:
            raise FedsdeInputError(f"accuracy: defined for class labels (loss='cross-entropy' or 'nll'; "
                                   f"loss={self.loss_name!r})")
        X, y = (self.X_test, self.y_test) if split == "test" else (self.X, self.y)
        if y.shape[0] == 0:
            raise FedsdeInputError(f"split={split!r}: the problem has no {split} samples")
        lead = np.shape(w)[:-1]
        fm, _ = self._shared("cpu", torch.float64)
        xt, yt = torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(np.asarray(y))
        with fm.lock, torch.no_grad():
            acc = [float((torch.argmax(fm.outputs(v, xt).reshape(len(yt), -1), -1) == yt).double().mean())
                   for v in self._wt(w)]
        out = np.asarray(acc).reshape(lead)
        return float(out) if out.ndim == 0 else out

    def split_clients(self, parts: int, *, seed: int = 0):
        """Each client's rows split at random into ``parts`` clients with weight ``p_k/parts`` (the global test set
        kept), for the scaling rules that change ``Q``."""
        from fedsde._validate import positive_int

        parts = positive_int("kappa", parts)
        if parts == 1:
            return self
        small = [k for k in range(self.Q) if self.sizes[k] < parts]
        if small:
            raise FedsdeInputError(f"kappa={parts}: client {small[0]} has {int(self.sizes[small[0]])} training rows, "
                                   f"fewer than κ, so it cannot be split into {parts} clients")
        rng = np.random.default_rng(seed)
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        rows, sizes, p, names = [], [], [], []
        for k in range(self.Q):
            for j, idx in enumerate(np.array_split(rng.permutation(int(self.sizes[k])), parts)):
                rows.append(starts[k] + idx)
                sizes.append(idx.size)
                p.append(self.p[k] / parts)
                names.append(f"{self.client_names[k] if self.client_names else k}/{j}")
        rows = np.concatenate(rows)
        return self.replace(X=self.X[rows], y=self.y[rows], sizes=np.asarray(sizes), p=np.asarray(p),
                            client_names=tuple(names), name=f"{self.name} (clients split ×{parts})",
                            info=self.info | {"split_clients": parts})

