"""The order-2 SDE of FedAvg on any client loss: the drift by Hessian-vector products, and a weak-order-2 scheme.

**Drift** (:class:`Order2Drift`; :mod:`fedsde.symbolic.order2`, per-client local steps ``τ_k``, clock ``t = n·h``)::

    b(w) = −(sη/h) v + (1/h)[sη² Σ_k p_k τ_k(τ_k−1)/2 · ∇²f_k ∇f_k − (sη)²/2 · Σ_k p_kτ_k ∇²f_k v],
    v = Σ_k p_kτ_k ∇f_k(w),

i.e. ``b = −(sη/h)∇F̃`` with the modified loss ``F̃ = Σ_k p_kτ_k f_k + (sη/4)‖v‖² − (η/4) Σ_k p_kτ_k(τ_k−1)‖∇f_k‖²``.
The products ``∇²f_k u`` are forward-over-reverse Hessian-vector products (``torch.func.jvp`` of ``torch.func.grad``),
vectorised over clients and paths with ``torch.func.vmap``: no ``d × d`` matrix is formed, memory
``O(paths·Q·rows·activations)`` per chunk of paths.  Order 1 keeps ``−(sη/h)v``.

**Client losses** (:func:`client_loss`): ``f_k(w) = Σ_i c_ki ℓ(w; x_ki, y_ki) + (λ/2)‖w‖²`` on the client's rows in a
padded client-major layout, for quadratic clients (one "row" ``(U_k, a_k)``), least-squares clients (one row
``(U_k, c̄_k)``: ``½wᵀU_kw − c̄_kᵀw``), classification problems (the model's torch forward pass) and module problems
(the problem's functional copy of its network, eval mode).

**Scheme** (:class:`Order2Scheme`): ``k`` substeps of ``δ = h/k`` per round,

    X ← X + δ·RK4_δ[b](X) + k^{−1/2}·N(X),      N(X) = −sη Σ_k p_k Σ_{i<τ_k} (g_k^{(i)}(X) − ∇f_k(X)),

the drift's classical Runge–Kutta increment (four evaluations of ``b``) and ``g_k^{(i)}`` independent draws of the
problem's own gradient oracle at ``X`` (minibatches; the Gaussian noise of quadratic clients): ``N`` has mean 0 and
covariance ``s²η² Σ_k p_k² τ_k Σ_k(X)`` (= ``h·D`` to leading order).  For ``dX = b dt + ε σ dB`` a deterministic
method of order ``p`` for the drift with one-step noise has weak error ``O(δ^p + ε²δ)`` (Milstein & Tretyakov,
*Stochastic Numerics for Mathematical Physics*, 2004, §3.4: small-noise schemes; the noise need not be Gaussian, its
third moment is ``O(δ^{3/2}ε³)``); here ``ε² = η`` and ``δ <= h = η``, so **one substep per round keeps order 2**.
(A midpoint drift would too, but at a per-round contraction ``sηE·λ`` near 1 its ``O(δ²)`` term is about ten times
the SDE's own error on the tests' quadratic problems; Runge–Kutta's leaves the ``O(ηδ)`` noise–drift term.)
With ``k = 1`` and the chain's seed the oracle draws are FedAvg's own minibatches (the same streams): the SDE and the
chain are coupled path by path, which is what makes the weak-error differences resolvable at modest replicates.
The diffusion's ``O(η)`` correction (state-dependent ``Σ_k``) is not sampled: on data problems the covariance is then
matched to ``O(η³)`` per round (weak order 2 for every test function; the covariance's relative error is ``O(η)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedsde._validate import client_steps, positive_float
from fedsde.errors import FedsdeInputError
from fedsde.problems import ClassificationProblem, QuadraticProblem, RegressionProblem, is_module_problem

#: floats of the per-chunk work space of the drift (rows × paths × clients × activations), about 400 MB in float64
WORK_FLOATS = 50_000_000


@dataclass
class ClientLoss:
    """``f_k(w) = Σ_i c_ki ℓ(w; x_ki, y_ki) + (λ/2)‖w‖²`` (module docstring).

    Attributes
    ----------
    X, Y, C : Tensor
        Rows (Q, N, …), targets (Q, N, …) and row weights (Q, N) (``1/N_k`` on real rows, 0 on padding).
    row_loss : callable
        ``(w (d,), x (N, …), y (N, …)) -> (N,)``: one weight vector's loss on every row.
    l2 : float
    row_floats : int
        Floats of one row's forward and backward work per path (for chunking).
    """

    X: torch.Tensor
    Y: torch.Tensor
    C: torch.Tensor
    row_loss: Callable
    l2: float
    row_floats: int

    def client(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """``f_k(w)`` for one weight vector ``w`` (d,) and one client's rows (a scalar)."""
        out = torch.sum(self.row_loss(w, x, y) * c)
        return out + 0.5 * self.l2 * torch.sum(w * w) if self.l2 else out


def _t(a, device, dtype):
    return torch.as_tensor(np.ascontiguousarray(a)).to(device=device, dtype=dtype)


def _quadratic_rows(w, x, y):
    """``½(w − a)ᵀU(w − a)`` with the one row ``x = U`` (1, d, d), ``y = a`` (1, d): shape (1,)."""
    u = w - y[0]
    return (0.5 * u @ x[0] @ u).reshape(1)


def _least_squares_rows(w, x, y):
    """``½wᵀUw − c̄ᵀw`` with ``x = U`` (1, d, d), ``y = c̄`` (1, d): shape (1,) (``∇ = Uw − c̄``)."""
    return (0.5 * w @ x[0] @ w - y[0] @ w).reshape(1)


def client_loss(problem, device="cpu", dtype=torch.float64) -> ClientLoss:
    """The torch client losses of ``problem`` (quadratic, least-squares, classification or module clients)."""
    Q = problem.Q
    ones = torch.ones((Q, 1), dtype=dtype, device=device)
    if isinstance(problem, QuadraticProblem):
        return ClientLoss(_t(problem.U[:, None], device, dtype), _t(problem.a[:, None], device, dtype), ones,
                          _quadratic_rows, 0.0, 4 * problem.d)
    if isinstance(problem, RegressionProblem):
        U, cbar = problem.moments()  # ∇f_k = (Ā_k + λI) w − c̄_k
        return ClientLoss(_t(U[:, None], device, dtype), _t(cbar[:, None], device, dtype), ones,
                          _least_squares_rows, float(problem.l2), 4 * problem.d)
    sizes = np.asarray(problem.sizes)
    real = np.arange(int(sizes.max())) < sizes[:, None]
    C = _t(real / sizes[:, None], device, dtype)
    if is_module_problem(problem):
        from fedsde.clients.module_oracle import padded_rows

        X, Y = padded_rows(problem)
        fm = problem.functional(device, dtype)
        if fm.dropouts:
            names = ", ".join(n for n, _ in fm.dropouts)
            raise FedsdeInputError(f"problem: the module has dropout ({names}); its local steps follow the "
                                   "dropout-averaged loss, whose gradient and Hessian have no closed form, so the "
                                   "order-2 drift (eval-mode losses) would be off at first order; use the module "
                                   "without dropout")
        ydt = torch.int64 if problem.loss_name == "cross-entropy" else dtype
        act = int(getattr(problem, "_cache", {}).get("act_floats", problem.d))
        return ClientLoss(_t(X, device, dtype), _t(Y, device, ydt), C, fm.row_losses, float(problem.l2),
                          int(np.prod(problem.row_shape)) + 4 * act)
    if isinstance(problem, ClassificationProblem):
        X, Y = problem.padded()
        model = problem.classifier

        def cls(w, x, y):
            return model.losses(model.forward(w, x)[1], y)

        row = int(X.shape[-1]) + 4 * (model.n_outputs + getattr(model, "hidden", 0))
        return ClientLoss(_t(X, device, dtype), _t(Y, device, torch.int64), C, cls, float(problem.l2), row)
    raise FedsdeInputError(f"problem: no torch client losses for a {type(problem).__name__} (quadratic, "
                           "least-squares, classification and module problems have them)")


class Order2Drift:
    """``b(w)`` of the order-``order`` SDE for a batch of paths (module docstring).

    Parameters
    ----------
    loss : ClientLoss
    p : array, shape (Q,)
    local_steps : array of int, shape (Q,)
    eta, server_lr, h : float
        Client step ``η``, server step ``s``, time step ``h`` of the clock ``t = n·h``.
    order : {1, 2}
    """

    def __init__(self, loss: ClientLoss, p, local_steps, *, eta: float, server_lr: float, h: float, order: int = 2):
        if order not in (1, 2):
            raise FedsdeInputError(f"order={order!r}: must be 1 or 2")
        self.loss, self.order = loss, order
        self.eta, self.s, self.h = (positive_float("eta", eta), positive_float("server_lr", server_lr),
                                    positive_float("h", h))
        dev, dt = loss.C.device, loss.C.dtype
        tau = np.asarray(local_steps, dtype=np.float64)
        pv = np.asarray(p, dtype=np.float64)
        self.ptau = torch.as_tensor(pv * tau, dtype=dt, device=dev)
        self.ppair = torch.as_tensor(pv * tau * (tau - 1) / 2, dtype=dt, device=dev)
        grad = torch.func.grad(loss.client)

        def hvp(w, x, y, c, u):
            return torch.func.jvp(lambda v: grad(v, x, y, c), (w,), (u,))[1]

        # clients inside, paths outside; a client's two tangents (∇f_k and v) share its rows
        self._grads = torch.func.vmap(torch.func.vmap(grad, in_dims=(None, 0, 0, 0)), in_dims=(0, None, None, None))
        two = torch.func.vmap(hvp, in_dims=(None, None, None, None, 0))
        self._hvps = torch.func.vmap(torch.func.vmap(two, in_dims=(None, 0, 0, 0, 0)),
                                     in_dims=(0, None, None, None, 0))
        rows = int(np.prod(loss.C.shape))
        self.chunk = max(1, WORK_FLOATS // max(1, rows * loss.row_floats * (3 if order == 2 else 1)))

    def __call__(self, W: torch.Tensor, *, first_order: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(b(W), ∇f_k(W))`` for paths ``W`` (R, d): shapes (R, d) and (R, Q, d); ``first_order``: only the
        leading term ``−(sη/h)v`` (no Hessian-vector products)."""
        out, grads = [], []
        for a in range(0, W.shape[0], self.chunk):
            b, g = self._chunk(W[a:a + self.chunk], first_order)
            out.append(b)
            grads.append(g)
        return torch.cat(out), torch.cat(grads)

    def _chunk(self, W: torch.Tensor, first_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
        L = self.loss
        G = self._grads(W, L.X, L.Y, L.C)  # (R, Q, d)
        v = torch.einsum("q,rqd->rd", self.ptau, G)
        se, h = self.s * self.eta, self.h
        b = -(se / h) * v
        if self.order == 2 and not first_order:
            tangents = torch.stack([G, v.unsqueeze(1).expand_as(G)], dim=2)  # (R, Q, 2, d)
            HV = self._hvps(W, L.X, L.Y, L.C, tangents)  # (R, Q, 2, d): ∇²f_k ∇f_k and ∇²f_k v
            b = b + (se * self.eta / h) * torch.einsum("q,rqd->rd", self.ppair, HV[:, :, 0]) \
                - (se * se / (2 * h)) * torch.einsum("q,rqd->rd", self.ptau, HV[:, :, 1])
        return b, G

    def modified_loss(self, w: torch.Tensor) -> torch.Tensor:
        """``F̃(w)`` for one ``w`` (d,) (module docstring): ``b = −(sη/h)∇F̃`` (an independent path for tests)."""
        L = self.loss
        fs = torch.stack([L.client(w, L.X[k], L.Y[k], L.C[k]) for k in range(L.C.shape[0])])
        out = self.ptau @ fs
        if self.order == 2:
            gs = torch.stack([torch.func.grad(L.client)(w, L.X[k], L.Y[k], L.C[k]) for k in range(L.C.shape[0])])
            v = self.ptau @ gs
            out = out + (self.s * self.eta / 4) * (v @ v) - (self.eta / 2) * (self.ppair @ (gs * gs).sum(-1))
        return out


class Order2Scheme:
    """The scheme of the module docstring on ``nb`` blocks of ``B`` paths (state ``(nb·B, d)``, block-major).

    Per substep: the drift's classical Runge–Kutta step (four evaluations of ``b``, Hessian-vector products in each)
    and the noise ``N(X)`` from ``τ_k`` draws of ``oracle`` at ``X`` with ``streams`` (substep 0) or ``extra`` (the
    later substeps, so that substep 0 of every round draws what the chain of the same seed draws).
    """

    def __init__(self, drift: Order2Drift, oracle, streams, *, p, local_steps, substeps: int = 1, extra=None):
        self.drift, self.oracle, self.streams, self.extra = drift, oracle, streams, extra
        self.substeps = int(substeps)
        if self.substeps > 1 and extra is None:
            raise FedsdeInputError("extra: streams for the substeps after the first are needed with substeps > 1")
        dev, dt = drift.loss.C.device, drift.loss.C.dtype
        self.p = torch.as_tensor(np.asarray(p, dtype=np.float64), dtype=dt, device=dev)
        self.tau = np.asarray(local_steps)
        self.n_steps = int(self.tau.max())
        self.limits = None if np.all(self.tau == self.tau[0]) else torch.as_tensor(
            self.tau.astype(np.int64), device=dev).view(1, -1, 1, 1)

    def noise(self, X: torch.Tensor, G: torch.Tensor, streams, nb: int) -> torch.Tensor:
        """``N(X)`` (R, d) from the oracle's draws at ``X`` (R, d) and the exact gradients ``G`` (R, Q, d)."""
        R, d = X.shape
        B, Q = R // nb, G.shape[1]
        x = X.view(nb, 1, B, d).expand(nb, Q, B, d).contiguous()
        full = G.view(nb, B, Q, d).transpose(1, 2)
        begin = getattr(self.oracle, "begin_round", None)
        if begin is not None:
            begin(batch=None, max_batch=None, clients=None)
        acc = torch.zeros_like(x)
        for i in range(self.n_steps):
            g = self.oracle.sample(x, streams)
            acc += (g - full) if self.limits is None else (g - full) * (self.limits > i).to(x.dtype)
        se = self.drift.s * self.drift.eta
        return -se * torch.einsum("q,nqbd->nbd", self.p, acc).reshape(R, d)

    def round(self, X: torch.Tensor, nb: int) -> torch.Tensor:
        """One round (``substeps`` substeps of ``h/substeps``) from ``X`` (R, d)."""
        k = self.substeps
        dt = self.drift.h / k
        for j in range(k):
            k1, G = self.drift(X)
            k2 = self.drift(X + 0.5 * dt * k1)[0]
            k3 = self.drift(X + 0.5 * dt * k2)[0]
            k4 = self.drift(X + dt * k3)[0]
            N = self.noise(X, G, self.streams if j == 0 else self.extra, nb)
            X = X + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4) + N / np.sqrt(k)
        return X


def steps_of(problem, local_steps) -> np.ndarray:
    """Per-client local steps ``τ_k`` (Q,) as float."""
    return client_steps("local_steps", local_steps, problem.Q).astype(np.float64)
