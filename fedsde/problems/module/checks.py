"""What a user's model and rows must satisfy, checked once when a module problem is built, each refusal one line
naming the model or the array, the value and the constraint.

* **Arrays** (:func:`check_numeric`): inputs and targets are numbers (dtype kinds ``b``, ``i``, ``u``, ``f``):
  strings (class names, digit strings, text features) and Python objects are refused with the conversion that
  helps, on every path (the Python API, an npz read whole, an npz read client by client).
* **Size** (:func:`check_parameters`): a model with no parameters is refused by name; the parameter count is checked
  against the memory available before the module is used (:data:`BUILD_COPIES` float64 copies of the weights are
  held while a problem is built).  A factory is first built on PyTorch's ``meta`` device (shapes, no storage;
  :func:`meta_parameter_count`), so a model far too large is refused without allocating it; where the factory
  cannot run there (it touches values), the count is taken from the real module right after it is built, before
  any copy or forward pass.
* **Outputs** (:func:`check_outputs`): on the first rows of the data at the initial weights (eval mode) the output
  is a tensor whose first dimension is the batch (one row gives 1, two rows give 2 with the same trailing shape: a
  ``self.l(x)[:1]`` or ``.mean(0)`` is refused, where cross-entropy gave a traceback and ``mse`` silently
  broadcast), finite (the model's own output, not the step size, is what is wrong when it is not), with one logit
  per class (cross-entropy), log-probabilities (``loss = "nll"``: every row's ``logsumexp`` is 0) or one output per
  target entry (mse); and one gradient of their loss, taken as the runs take it (``torch.func.grad`` of the
  functional call, :func:`check_gradient`), exists (no ``.numpy()`` in the forward pass) and is finite.
* **Batches** (:func:`warn_small_clients`): a ``batch_size`` larger than some clients' rows, sampled without
  replacement, is *warned* (:class:`BatchSizeWarning`), not refused: such a client's step uses all its rows (its
  exact gradient, no minibatch noise), which is well defined and common with natural clients of unequal sizes; the
  warning says how many clients it touches and what keeps ``b`` rows per step.  (Least-squares regression files
  refuse it instead: their exact minibatch moments assume ``b <= N_k``.)
* **User code** (:func:`user_code`): the model's constructor and forward pass run inside it; any exception, and
  ``SystemExit`` (a ``sys.exit`` or a module-level ``argparse`` in a training script), become the one-line error.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from fedsde.errors import FedsdeInputError

#: float64 copies of the weight vector a problem holds while it is built (the module, the weight vector, the
#: metrics' functional copy, and the user's own build before the cast)
BUILD_COPIES = 4
#: largest |logsumexp| of a row of outputs read as log-probabilities (``loss = "nll"``)
LOG_PROB_TOL = 1e-6
#: dtype kinds of numbers (bool, signed and unsigned integers, floats)
NUMERIC_KINDS = "biuf"
_KIND_NAMES = {"U": "strings", "S": "byte strings", "O": "Python objects", "c": "complex numbers",
               "M": "dates", "m": "time spans", "V": "records"}


class BatchSizeWarning(UserWarning):
    """Clients with fewer rows than ``batch_size`` (without replacement): their steps use all their rows."""


def warn_small_clients(batch_size: int | None, sampling: str, sizes) -> None:
    """A :class:`BatchSizeWarning` when ``batch_size`` exceeds some clients' rows under sampling without replacement
    (see the module docstring)."""
    if batch_size is None or sampling != "without-replacement":
        return
    sizes = np.asarray(sizes)
    small = int(np.count_nonzero(sizes < batch_size))
    if not small:
        return
    import warnings

    least = int(sizes.min())
    if small == sizes.size:
        msg = (f"batch_size={batch_size}: every client holds fewer rows (the largest {int(sizes.max())}), so without "
               "replacement every local step uses all of a client's rows (full batches, no minibatch noise); say "
               "batch_size = \"full\" if that is meant, or give a batch_size <= the clients' rows")
    else:
        msg = (f"batch_size={batch_size}: {small} of {sizes.size} clients hold fewer rows (the smallest {least}); "
               "without replacement each of their local steps uses all their rows (a full-batch step, no minibatch "
               f"noise), unlike the other clients; to keep {batch_size} rows per step use sampling = "
               f"\"with-replacement\", or a batch_size <= {least}")
    warnings.warn(msg, BatchSizeWarning, stacklevel=3)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception (``SystemExit: 0`` for ``sys.exit(0)``)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


@contextlib.contextmanager
def user_code(what: str):
    """Run a user's model code; an exception or a ``SystemExit`` becomes ``FedsdeInputError("model: WHAT fails
    (Type: message)")`` (``KeyboardInterrupt`` passes)."""
    try:
        yield
    except FedsdeInputError:
        raise
    except (Exception, SystemExit) as exc:
        raise FedsdeInputError(f"model: {what} fails ({first_line(exc)})") from None


def check_numeric(name: str, a, *, role: str = "numbers") -> np.ndarray:
    """``a`` as an array of numbers, or a one-line refusal naming ``name``, its dtype and what helps."""
    a = np.asarray(a)
    kind = a.dtype.kind
    if kind in NUMERIC_KINDS:
        return a
    what = _KIND_NAMES.get(kind, f"dtype {a.dtype}")
    if name.startswith("y") and kind in "USO":
        hint = ("labels must be integers 0..C-1 (mse: numbers): map class names to integers, e.g. "
                "names, y = np.unique(y, return_inverse=True)")
    elif kind in "US":
        hint = "convert them to numbers before saving (e.g. x.astype(np.float64); encode text features as numbers)"
    else:
        hint = "save plain numeric arrays"
    raise FedsdeInputError(f"{name}: holds {what} (dtype {a.dtype}), not {role}; {hint}")


def meta_parameter_count(factory) -> int | None:
    """Parameters of ``factory()`` built on the ``meta`` device (no storage), or None where it cannot be built there
    (a factory that reads values, converts to NumPy, or returns a module built elsewhere)."""
    import warnings

    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = factory()
    except (Exception, SystemExit):
        return None
    if not isinstance(module, torch.nn.Module):
        return None
    params = list(module.parameters())
    if any(p.device.type != "meta" for p in params):
        return None
    return sum(int(p.numel()) for p in params)


def check_parameters(count: int, label: str) -> None:
    """Refuse a model with no parameters, or one whose :data:`BUILD_COPIES` float64 weight vectors do not fit in the
    memory available (:func:`fedsde._memory.available_memory`)."""
    from fedsde._memory import available_memory, memory_fits

    if count == 0:
        raise FedsdeInputError(f"model: {label} has no parameters (nothing to train: a model needs at least one "
                               "nn.Parameter, e.g. an nn.Linear)")
    memory_fits(f"model: {label} has {count:,} parameters, and building its problem (float64 copies of the weights)",
                8 * BUILD_COPIES * count, available_memory("cpu"),
                "use a smaller model (or raise FEDSDE_MEMORY_LIMIT if it is set lower than the machine allows)")


def activation_floats(module, row_shape) -> int:
    """Floats of every submodule's output for one row (an estimate of a row's activations), plus half the unfolded
    input of every convolution (its im2col buffer, which per-example gradients under ``vmap`` hold twice)."""
    total = [0]

    def hook(mod, args, out):
        if isinstance(out, torch.Tensor):
            total[0] += int(out.numel())
            if isinstance(mod, torch.nn.modules.conv._ConvNd) and out.dim() >= 2:
                per_out = int(np.prod(mod.kernel_size)) * (mod.in_channels // mod.groups)
                total[0] += per_out * int(out[0, 0].numel()) // 2

    hooks = [m.register_forward_hook(hook) for m in module.modules()]
    try:
        with torch.no_grad(), user_code(f"the forward pass on one row of shape {tuple(row_shape)}"):
            module.eval()(torch.zeros((1, *row_shape), dtype=torch.float64))
    finally:
        for h in hooks:
            h.remove()
    return max(total[0], 1)


def check_outputs(pb) -> None:
    """The module's outputs on the first rows at the initial weights fit the loss and the targets (see the module
    docstring); sets ``pb._cache["logits"]`` for the label losses."""
    fm, data = pb._shared("cpu", torch.float64)
    name = type(pb.module).__name__
    X = data["X"]
    two = X[:2] if X.shape[0] >= 2 else X[:1].expand(2, *X.shape[1:])
    w0 = torch.from_numpy(pb._cache["w0"])
    with torch.no_grad(), user_code(f"{name}.forward on the first rows"):
        out1, out2 = fm.outputs(w0, X[:1]), fm.outputs(w0, two)
    for out in (out1, out2):
        if not isinstance(out, torch.Tensor):
            raise FedsdeInputError(f"model: {name}.forward returns a {type(out).__name__}, not a tensor of outputs "
                                   "(return the logits, e.g. the first element of an nn.LSTM's output)")
    if out1.ndim == 0 or out1.shape[0] != 1 or tuple(out2.shape) != (2, *out1.shape[1:]):
        raise FedsdeInputError(
            f"model: {name}.forward returns shape {tuple(out1.shape)} for 1 row and {tuple(out2.shape)} for 2 rows; "
            "its first dimension must be the batch, one output per row (not e.g. self.l(x)[:1] or .mean(0))")
    if not bool(torch.isfinite(out2).all()):
        raise FedsdeInputError(
            f"model: {name}'s own output is not finite (NaN or inf) at its initial weights on the first rows of the "
            "data, before any training step; check its initialisation and forward pass (a log or a division by "
            "zero, an overflow), not the step sizes")
    per_row = int(out2[0].numel())
    if pb.uses_labels:
        pb._cache["logits"] = per_row
        if per_row < pb.n_classes:
            raise FedsdeInputError(f"model: gives {per_row} outputs per row, the labels go up to {pb.n_classes - 1} "
                                   f"({pb.loss_name} needs one output per class)")
        if pb.loss_name == "nll":
            lse = torch.logsumexp(out2.reshape(2, -1), dim=1).abs().max()
            if float(lse) > LOG_PROB_TOL:
                raise FedsdeInputError(
                    f"model: loss='nll' needs log-probabilities (a model that ends in log_softmax), but a row of "
                    f"{name}'s outputs has logsumexp {float(lse):.3g}, not 0; for logits use loss = "
                    "\"cross-entropy\" (on log_softmax outputs it is the same objective)")
    elif per_row != int(np.prod(pb.y.shape[1:], dtype=np.int64)):
        raise FedsdeInputError(f"model: gives outputs of shape {tuple(out2.shape[1:])} per row, the targets have "
                               f"shape {tuple(pb.y.shape[1:])} (mse needs one output per target entry)")
    check_gradient(pb, fm, data, two, w0)


def check_gradient(pb, fm, data, rows, w0) -> None:
    """One gradient of the loss of the first rows at the initial weights, as the runs take it (``torch.func.grad``
    of the functional call): a forward pass that cannot be differentiated so (``.numpy()``, …) is refused before
    any run, and so is a gradient that is not finite at the start."""
    from fedsde.problems.module.functional import NOT_FUNCTIONAL

    name = type(pb.module).__name__
    y = data["y"][:2] if data["y"].shape[0] >= 2 else data["y"][:1].expand(2, *data["y"].shape[1:])
    c = torch.full((2,), 0.5, dtype=torch.float64)
    try:
        g, _ = fm.grad_and_value(w0, rows, y, c)
    except FedsdeInputError:
        raise
    except (Exception, SystemExit) as exc:
        if "out of memory" in str(exc):
            raise
        raise FedsdeInputError(f"model: torch.func.grad cannot differentiate {name} ({first_line(exc)}); "
                               f"{NOT_FUNCTIONAL}") from None
    if not bool(torch.isfinite(g).all()):
        raise FedsdeInputError(f"model: the gradient of {name}'s loss is not finite (NaN or inf) at its initial "
                               "weights on the first rows of the data, before any training step; check the forward "
                               "pass (e.g. a sqrt or a log at 0), not the step sizes")
