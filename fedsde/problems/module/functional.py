"""A user's ``nn.Module`` prepared for batched functional calls on flat weight vectors (``torch.func``).

:class:`FunctionalModule` holds its own copy of the module on one device and dtype and evaluates, for a batch of
``M`` weight vectors ``w`` (M, d) with ``M`` minibatches of rows, the gradients of the weighted minibatch losses
``Σ_i c_i ℓ(f_w(x_i), y_i)``: in one ``torch.func.vmap`` of ``torch.func.grad`` of ``torch.func.functional_call``,
or entry by entry, a plain forward and ``torch.autograd.grad`` pass of the copy with its parameters pointed at the
entry's weights — whichever is faster for the shape (``batching``, :mod:`fedsde.problems.module.batching`).

Conventions (a contract):

* the weight vector is ``torch.nn.utils.parameters_to_vector(module.parameters())``: the parameters in the order of
  ``module.parameters()``, each flattened row-major; :meth:`FunctionalModule.unflatten` gives them back as views;
* dropout: every ``nn.Dropout`` (and ``nn.Dropout1d/2d/3d``) is replaced in the copy by :class:`MaskedDropout`, which
  multiplies by a mask handed in as a buffer (``keep / (1 − p)``, ``keep ~ Bernoulli(1 − p)`` elementwise, or per
  channel for the 1d/2d/3d kinds).  The masks are drawn by the caller **outside** ``vmap`` from the per-replicate
  streams, so a replicate's dropout does not depend on the other entries of the batch; in eval mode (metrics) it
  is the identity.  A module that draws random numbers itself in its forward pass (``torch.nn.functional.dropout``
  called directly, ``nn.AlphaDropout``, ``torch.rand``) is refused;
* BatchNorm (with or without ``track_running_stats``) and any module with buffers are refused, in one line naming
  the fix (``nn.GroupNorm``, ``nn.LayerNorm``): batch statistics couple the rows of a minibatch (padded rows of small
  clients would enter them, and an eval-mode loss would depend on how rows are grouped), running statistics change
  state outside the weight vector;
* a module that ``vmap`` cannot batch (a Python ``float(tensor)``, ``.item()``, a branch on a tensor's value, an
  operator without a batching rule) is run in a loop over the batch, one forward and backward pass per entry: the same
  formulas, entry by entry; a :class:`ModuleLoopWarning` says so once per module.

Losses ``ℓ`` per row: ``cross-entropy`` (``torch.nn.functional.cross_entropy`` of logits (C,) and an integer label),
``nll`` (``torch.nn.functional.nll_loss`` of log-probabilities, a model that ends in ``log_softmax``: the same value
as the cross-entropy of those outputs, since ``log_softmax`` leaves log-probabilities unchanged) and ``mse`` (the
mean over the output's entries of ``(f_w(x) − y)²``, ``torch.nn.functional.mse_loss``'s row term).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings

import torch
from torch import nn

from fedsde.errors import FedsdeInputError
from fedsde.problems.module.options import LABEL_LOSSES, LOSSES  # noqa: F401 (their home: options)

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)
_CHANNEL_DROPOUTS = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


class ModuleLoopWarning(UserWarning):
    """A module that ``vmap`` cannot batch runs in a loop over the batch (same formulas)."""


class MaskedDropout(nn.Module):
    """Dropout with a mask handed in (buffer ``mask``: ``keep/(1 − p)``, shape of one row's input or its channels);
    the identity in eval mode or while no mask is set."""

    def __init__(self, p: float, channelwise: bool):
        super().__init__()
        self.p = float(p)
        self.channelwise = bool(channelwise)
        self.register_buffer("mask", torch.empty(0), persistent=False)

    def mask_shape(self, row_shape: torch.Size) -> tuple[int, ...]:
        """The mask of one row whose input has ``row_shape``: the full shape, or (C, 1, …) per channel."""
        if self.channelwise:
            return (int(row_shape[0]),) + (1,) * (len(row_shape) - 1)
        return tuple(int(s) for s in row_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.mask.numel() == 0:
            return x
        return x * self.mask


def refuse_running_stats(module: nn.Module, where: str = "model") -> None:
    """One-line refusal of BatchNorm and any other module with running statistics (buffers)."""
    for name, sub in module.named_modules():
        label = name or "the model"
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):  # with track_running_stats=False too
            raise FedsdeInputError(
                f"{where}: {label} ({type(sub).__name__}) normalises by batch statistics, which couple the rows of a "
                "minibatch (padded rows of small clients would enter them) and, when tracked, change outside the "
                "weight vector; use nn.GroupNorm or nn.LayerNorm instead")
        if any(True for _ in sub.buffers(recurse=False)):
            raise FedsdeInputError(
                f"{where}: {label} ({type(sub).__name__}) keeps buffers (running statistics), which change outside "
                "the weight vector; use modules whose state is all parameters (nn.GroupNorm for BatchNorm)")
        if isinstance(sub, nn.AlphaDropout | nn.FeatureAlphaDropout):
            raise FedsdeInputError(f"{where}: {name or type(sub).__name__} ({type(sub).__name__}) draws its own random "
                                   "numbers; use nn.Dropout (its masks are drawn from the run's streams)")


def _replace_dropouts(module: nn.Module) -> list[tuple[str, MaskedDropout]]:
    """Replace every dropout of ``module`` (in place) by a :class:`MaskedDropout`; returns (name, module) of each."""
    out = []
    for name, sub in list(module.named_modules()):
        if isinstance(sub, MaskedDropout):
            out.append((name, sub))
        elif isinstance(sub, _DROPOUTS) and sub.p > 0:
            new = MaskedDropout(sub.p, isinstance(sub, _CHANNEL_DROPOUTS))
            parent_name, _, attr = name.rpartition(".")
            parent = module.get_submodule(parent_name) if parent_name else module
            if not name:
                raise FedsdeInputError("model: a bare nn.Dropout is not a model")
            setattr(parent, attr, new)
            out.append((name, new))
    return out


def row_loss(loss: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``ℓ`` of every row, shape (b,), for outputs ``out`` (b, …) and targets ``y`` (b,) or (b, …); outputs whose
    first dimension is not the rows', or (mse) whose entries do not match the targets', are refused (never
    broadcast)."""
    if out.ndim == 0 or out.shape[0] != y.shape[0]:
        raise FedsdeInputError(f"model: forward returns shape {tuple(out.shape)} for {y.shape[0]} rows; its first "
                               "dimension must be the batch, one output per row")
    if loss == "cross-entropy":
        return torch.nn.functional.cross_entropy(out.reshape(out.shape[0], -1), y, reduction="none")
    if loss == "nll":  # log-probabilities (checked when the problem is built)
        return torch.nn.functional.nll_loss(out.reshape(out.shape[0], -1), y, reduction="none")
    if out.numel() != y.numel():
        raise FedsdeInputError(f"model: forward returns shape {tuple(out.shape)}, the targets have shape "
                               f"{tuple(y.shape)} (mse needs one output per target entry)")
    diff = out.reshape(y.shape) - y
    return diff.square().reshape(diff.shape[0], -1).mean(-1)


class FunctionalModule:
    """A private copy of ``module`` on ``device`` in ``dtype``, called on flat weight vectors.

    Gradients of a batch of entries run through ``torch.func.vmap`` or one entry at a time (:mod:`.batching`:
    ``batching``); one entry at a time, the copy's parameters are made views of the entry's weight vector (no
    copy of the weights).

    Parameters
    ----------
    module : nn.Module
        The template (not modified).
    loss : {"cross-entropy", "nll", "mse"}
    device, dtype
    row_shape : tuple of int
        Shape of one input row (to find the dropout masks' shapes).
    batching : {"auto", "vmap", "loop"}
        ``auto``: the faster of the two for every shape, timed on its first call (:mod:`.batching`); the loop where
        ``vmap`` cannot batch the module (with a :class:`ModuleLoopWarning`).
    state : dict, optional
        Shared by the copies of one problem: once ``vmap`` failed, every later copy loops at once and the warning
        is given once.
    """

    def __init__(self, module: nn.Module, loss: str, device, dtype, row_shape: tuple[int, ...],
                 batching: str = "auto", state: dict | None = None):
        self.module = copy.deepcopy(module).to(device=device, dtype=dtype)
        self.loss, self.device, self.dtype = loss, torch.device(device), dtype
        self.state = {} if state is None else state
        self.requested = batching
        self.batching = "loop" if batching == "auto" and self.state.get("loop") else batching
        self.dropouts = _replace_dropouts(self.module)
        named = list(self.module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.numels = [int(p.numel()) for _, p in named]
        self.d = sum(self.numels)
        self.params = [p.requires_grad_(True) for _, p in named]
        self.mask_shapes = self._probe_masks(row_shape) if self.dropouts else []
        self.signature = (type(module), tuple(self.names), tuple(self.shapes), loss, tuple(row_shape),
                          tuple(self.mask_shapes), str(self.device), str(dtype))
        #: the path of every shape this copy evaluated: key -> :class:`~.batching.Choice`
        self.made: dict = {}
        self._batched = None
        self._shared_rows = None
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ shapes
    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        """Parameters as views of one weight vector ``w`` (d,)."""
        return {n: t.view(s) for n, t, s in zip(self.names, torch.split(w, self.numels), self.shapes, strict=True)}

    def _probe_masks(self, row_shape) -> list[tuple[int, ...]]:
        """The mask shape of every dropout for one row (a forward pass on a zero row, recording the inputs)."""
        seen: dict[str, torch.Size] = {}
        hooks = [m.register_forward_pre_hook(lambda mod, args, name=name: seen.__setitem__(name, args[0].shape[1:]))
                 for name, m in self.dropouts]
        try:
            with torch.no_grad():
                self.module.eval()(torch.zeros((1, *row_shape), dtype=self.dtype, device=self.device))
        finally:
            for h in hooks:
                h.remove()
        missing = [name for name, _ in self.dropouts if name not in seen]
        if missing:
            raise FedsdeInputError(f"model: dropout module(s) {', '.join(missing)} are not called in the forward pass "
                                   "(or called more than once); give each call its own nn.Dropout")
        return [m.mask_shape(seen[name]) for name, m in self.dropouts]

    # ------------------------------------------------------------------ calls
    def outputs(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Eval-mode outputs of rows ``x`` (n, …) for one weight vector ``w`` (d,) (dropout off)."""
        self.module.eval()
        return torch.func.functional_call(self.module, self.unflatten(w), (x,))

    def row_losses(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Eval-mode ``ℓ`` of every row, shape (n,), for one ``w`` (d,)."""
        return row_loss(self.loss, self.outputs(w, x), y)

    def _load(self, w: torch.Tensor) -> None:
        """Make the copy's parameters views of ``w`` (d,) (callers hold :attr:`lock` when the copy is shared)."""
        w = w.detach()
        if not w.is_contiguous():
            w = w.contiguous()
        for p, t, s in zip(self.params, torch.split(w, self.numels), self.shapes, strict=True):
            p.data = t.view(s)

    def forward_loaded(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Eval-mode outputs of rows ``x`` for ``w`` (d,), without autograd, through the copy with ``w`` loaded
        (callers hold :attr:`lock` when the copy is shared)."""
        self.module.eval()
        self._load(w)
        with torch.no_grad():
            return self.module(x)

    def _weighted(self, w, x, y, c, masks):
        buffers = {f"{name}.mask": m for (name, _), m in zip(self.dropouts, masks, strict=True)}
        out = torch.func.functional_call(self.module, (self.unflatten(w), buffers), (x,))
        return torch.sum(row_loss(self.loss, out, y) * c)

    def _weighted_rows(self, w, x, y, c, masks):
        """``(Σ_i c_i ℓ_i, ℓ)``: the weighted loss and the row losses (as an auxiliary output of ``grad``)."""
        buffers = {f"{name}.mask": m for (name, _), m in zip(self.dropouts, masks, strict=True)}
        ell = row_loss(self.loss, torch.func.functional_call(self.module, (self.unflatten(w), buffers), (x,)), y)
        return torch.sum(ell * c), ell.detach()

    def _loaded_pass(self, w, x, y, c, masks, i=None):
        """Gradient (d,) and row losses of one entry through the copy itself: ``w`` loaded into its parameters, a
        plain forward and ``torch.autograd.grad`` (the loop path)."""
        self._load(w)
        for (_, mod), m in zip(self.dropouts, masks, strict=True):
            mod._buffers["mask"] = m if i is None else m[i]  # (nn.Module.__setattr__ costs more than the step's add)
        ell = row_loss(self.loss, self.module(x), y)
        grads = torch.autograd.grad(torch.sum(ell * c), self.params, allow_unused=True, materialize_grads=True)
        return grads, ell.detach()

    def grads(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor,
              masks: list[torch.Tensor] | None = None, *, train: bool = True,
              out: torch.Tensor | None = None) -> torch.Tensor:
        """``∇_w Σ_i c_i ℓ(f_w(x_i), y_i)`` of ``M`` entries, shape (M, d).

        Parameters
        ----------
        w : Tensor, shape (M, d)
        x : Tensor, shape (M, b, …)
            Each entry's rows.
        y : Tensor, shape (M, b) or (M, b, …)
        c : Tensor, shape (M, b)
            Row weights (``1/batch`` on the rows of the minibatch, 0 on padding).
        masks : list of Tensor, shapes (M, b, *mask_shape), optional
            Dropout masks (``keep/(1 − p)``), one per :attr:`dropouts` entry (train mode only).
        train : bool
            Train mode (dropout active, with ``masks``) or eval mode.
        out : Tensor, shape (M, d), optional
            Where to write the gradients (returned); default a new tensor.
        """
        masks = list(masks) if (train and self.dropouts) else []
        if train and self.dropouts and len(masks) != len(self.dropouts):
            raise FedsdeInputError("masks: one per dropout module is needed in train mode")
        self.module.train(train)
        if self.dropouts and not train:
            masks = [torch.empty((w.shape[0], 0), dtype=w.dtype, device=w.device) for _ in self.dropouts]
        M, b = int(w.shape[0]), int(x.shape[1])

        def run_vmap():
            self.module.train(train)
            if self._batched is None:
                self._batched = torch.func.vmap(torch.func.grad(self._weighted), randomness="error")
            g = self._batched(w, x, y, c, masks)
            return g if out is None else out.copy_(g)

        def run_loop(a, z):
            self.module.train(train)
            dest = w.new_empty((z - a, self.d)) if out is None or (a, z) != (0, M) else out
            with _differentiable(self.module):
                for i in range(a, z):
                    grads, _ = self._loaded_pass(w[i], x[i], y[i], c[i], masks, i)
                    torch.cat([g.reshape(-1) for g in grads], out=dest[i - a])
            return dest

        def combine(head, tail):
            if out is None:
                return torch.cat([head, tail])
            out[:head.shape[0]] = head
            out[head.shape[0]:] = tail
            return out

        return self._dispatch((self.signature, "train" if train else "eval", M, b), M, run_vmap, run_loop, combine)

    def grads_and_losses(self, W: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, *,
                         nominal: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval mode, rows shared by every weight vector: ``∇_w Σ_i c_i ℓ_i`` and the row losses ``ℓ`` of every
        piece of rows, for every ``w`` of ``W``.

        Parameters
        ----------
        W : Tensor, shape (m, d)
        x : Tensor, shape (K, r, …)
            ``K`` pieces of ``r`` rows each (the same for every weight vector).
        y, c : Tensors, shapes (K, r) (or (K, r, …) for ``y``)
        nominal : int, optional
            The chunk of weight vectors this call is one of (its shape for :mod:`.batching`; default ``m``): a
            shorter last chunk runs on the path chosen for the full ones.

        Returns
        -------
        (Tensor (m, K, d), Tensor (m, K, r))
        """
        self.module.eval()
        masks = [torch.empty(0, dtype=W.dtype, device=W.device) for _ in self.dropouts]
        m, K, r = int(W.shape[0]), int(x.shape[0]), int(x.shape[1])

        def run_vmap():
            self.module.eval()
            if self._shared_rows is None:
                per_piece = torch.func.vmap(torch.func.grad(self._weighted_rows, has_aux=True),
                                            in_dims=(None, 0, 0, 0, None))
                self._shared_rows = torch.func.vmap(per_piece, in_dims=(0, None, None, None, None))
            return self._shared_rows(W, x, y, c, masks)

        def run_loop(a, z):
            self.module.eval()
            G, L = W.new_empty((z - a, K, self.d)), W.new_empty((z - a, K, r))
            for i in range(a, z):
                for k in range(K):
                    grads, L[i - a, k] = self._loaded_pass(W[i], x[k], y[k], c[k], masks)
                    torch.cat([g.reshape(-1) for g in grads], out=G[i - a, k])
            return G, L

        return self._dispatch((self.signature, "eval-shared", int(nominal or m), K * r), m, run_vmap, run_loop,
                              lambda h, t: (torch.cat([h[0], t[0]]), torch.cat([h[1], t[1]])))

    def _dispatch(self, key: tuple, count: int, run_vmap, run_loop, combine):
        """The ``count`` entries of a batch of shape ``key`` (signature, purpose, entries, rows) by the requested or
        the chosen path."""
        from fedsde.problems.module.batching import Choice, decide, lookup

        _, purpose, entries, rows = key
        if self.batching == "loop":
            how = "requested" if self.requested == "loop" else "vmap cannot batch the module"
            self.made.setdefault(key, Choice("loop", how, None, None, entries, rows, purpose))
            return run_loop(0, count)
        try:
            if self.batching == "vmap":
                self.made.setdefault(key, Choice("vmap", "requested", None, None, entries, rows, purpose))
                return run_vmap()
            choice = lookup(key)
            if choice is None:
                out, choice = decide(key, entries=count, rows=rows, purpose=purpose, device=self.device,
                                     run_vmap=run_vmap, run_loop=run_loop, combine=combine)
                self.made.setdefault(key, choice)
                if out is not None:
                    return out
            self.made.setdefault(key, choice)
            if choice.used == "vmap":
                return run_vmap()
        except FedsdeInputError:
            raise
        except (RuntimeError, ValueError, NotImplementedError, TypeError) as exc:
            self._vmap_failed(exc)
            self.made[key] = Choice("loop", "vmap cannot batch the module", None, None, entries, rows, purpose)
        return run_loop(0, count)

    def _vmap_failed(self, exc: BaseException) -> None:
        """``vmap`` cannot batch the module: refused (``batching = "vmap"``, or random numbers drawn in the forward
        pass) or the loop from now on, with one warning per problem."""
        if self.batching == "vmap":
            raise FedsdeInputError(f"model: torch.func.vmap cannot batch this module ({_first_line(exc)})") from None
        if "random" in str(exc).lower():
            raise FedsdeInputError(
                "model: the forward pass draws random numbers itself (e.g. torch.nn.functional.dropout); "
                "use nn.Dropout modules, whose masks fedsde draws from the run's streams") from None
        self.batching = "loop"
        if not self.state.get("loop"):
            self.state["loop"] = True
            warnings.warn(f"model {type(self.module).__name__}: torch.func.vmap cannot batch it "
                          f"({_first_line(exc)}); running a loop over the (replicate, client) entries "
                          "instead (same formulas)", ModuleLoopWarning, stacklevel=4)

    def grad_and_value(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor):
        """Eval mode: ``(∇_w Σ_i c_i ℓ_i, Σ_i c_i ℓ_i)`` for one ``w`` (d,) and rows ``x`` (n, …) (no vmap)."""
        self.module.eval()
        masks = [torch.empty(0, dtype=w.dtype, device=w.device) for _ in self.dropouts]
        g, f = torch.func.grad_and_value(self._weighted)(w, x, y, c, masks)
        return g.detach(), f.detach()

    def hvp(self, w: torch.Tensor, v: torch.Tensor, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Eval-mode Hessian-vector product ``∇²_w (Σ_i c_i ℓ_i) v`` for one ``w``, ``v`` (d,) (forward over
        reverse: ``torch.func.jvp`` of ``torch.func.grad``)."""
        self.module.eval()
        masks = [torch.empty(0, dtype=w.dtype, device=w.device) for _ in self.dropouts]
        return torch.func.jvp(lambda u: torch.func.grad(self._weighted)(u, x, y, c, masks), (w,), (v,))[1]


@contextlib.contextmanager
def _differentiable(module: nn.Module):
    """Refuse in one line a forward pass that cannot be differentiated entry by entry (a ``.numpy()`` call, tensors
    built from Python numbers of the weights, in-place changes of the parameters); out of memory passes through."""
    try:
        yield
    except (RuntimeError, ValueError, NotImplementedError, TypeError) as exc:
        if "out of memory" in str(exc):
            raise
        raise FedsdeInputError(f"model: torch cannot differentiate {type(module).__name__} "
                               f"({_first_line(exc)}); {NOT_FUNCTIONAL}") from None


#: what a forward pass must not do to be differentiated functionally (the refusal's advice)
NOT_FUNCTIONAL = ("fedsde differentiates the forward pass with torch.func (functional_call and grad): keep it in torch "
                  "operations on its input and parameters (no .numpy(), no tensors built from Python numbers of the "
                  "weights, no in-place changes of the parameters)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
