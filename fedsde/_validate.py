"""Small validators shared by public entry points (internal): numbers, schedules, devices, memory, and the
settings known to diverge on quadratic clients."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from fedsde.errors import FedsdeInputError


def positive_float(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, raising if it is not finite and positive (or >= 0)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}={value!r}: must be a number") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise FedsdeInputError(f"{name}={value!r}: must be finite and {bound}")
    return v


def positive_int(name: str, value: int, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, raising if it is not an integer >= ``minimum``."""
    if isinstance(value, bool):
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}")
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}") from None
    if v != value or v < minimum:
        raise FedsdeInputError(f"{name}={value!r}: must be an integer >= {minimum}")
    return v


def schedule(name: str, value: float | Sequence[float] | np.ndarray, rounds: int) -> np.ndarray:
    """A per-round schedule of length ``rounds`` from a constant or a sequence (values > 0).

    Returns
    -------
    ndarray, shape (rounds,)
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        positive_float(name, float(arr))
        return np.full(rounds, float(arr))
    if arr.ndim != 1 or arr.shape[0] != rounds:
        raise FedsdeInputError(
            f"{name}: schedule of shape {arr.shape} must be a scalar or have one value per round ({rounds})"
        )
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise FedsdeInputError(f"{name}[{i}]={float(arr[i])!r}: learning rates must be finite and > 0")
    return arr


def client_steps(name: str, value: int | Sequence[int] | np.ndarray, Q: int) -> np.ndarray:
    """Per-client local step counts (ints >= 1) from an int or a length-Q sequence.

    Returns
    -------
    ndarray of int64, shape (Q,)
    """
    arr = np.asarray(value)
    if arr.ndim == 0:
        return np.full(Q, positive_int(name, value.item() if hasattr(value, "item") else value), np.int64)
    if arr.ndim != 1 or arr.shape[0] != Q:
        raise FedsdeInputError(f"{name}: shape {arr.shape} must be a scalar or one value per client ({Q})")
    out = np.empty(Q, np.int64)
    for k, v in enumerate(arr.tolist()):
        out[k] = positive_int(f"{name}[{k}]", v)
    return out


def device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """A usable torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, …) and a float dtype (float64 or float32)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise FedsdeInputError(f"device={device!r}: not a torch device ({exc})") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise FedsdeInputError(f"device={device!r}: must be a cpu, cuda or mps device")
    try:
        torch.empty(0, device=dev)
        torch.Generator(device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise FedsdeInputError(f"device={device!r}: not available ({exc})") from None
    if dtype not in (torch.float64, torch.float32):
        raise FedsdeInputError(f"dtype={dtype}: must be torch.float64 or torch.float32")
    return dev, dtype


def start_point(w0, d: int) -> np.ndarray:
    """Starting weights of shape (d,) from ``None`` (zero), a scalar (broadcast) or a length-d vector."""
    if w0 is None:
        return np.zeros(d)
    arr = np.asarray(w0, dtype=np.float64).reshape(-1)
    if arr.shape == (1,) and d > 1:
        arr = np.full(d, arr[0])
    if arr.shape != (d,) or not np.all(np.isfinite(arr)):
        raise FedsdeInputError(f"w0: shape {np.shape(w0)} must be ({d},) with finite entries")
    return arr


def distributions(name: str, value, Q: int | None = None) -> np.ndarray:
    """Rows normalised to sum to one; every entry finite and >= 0, every row sum > 0 (named by row)."""
    try:
        D = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise FedsdeInputError(f"{name}: could not be read as an array of numbers") from None
    if D.ndim != 2 or D.shape[1] < 1 or (Q is not None and D.shape[0] != Q):
        raise FedsdeInputError(f"{name}: shape {D.shape} must be (Q, C)" + (f" with Q={Q}" if Q else ""))
    bad = ~np.isfinite(D) | (D < 0)
    if bad.any():
        k, c = (int(i) for i in np.argwhere(bad)[0])
        raise FedsdeInputError(f"{name}[{k}][{c}]={float(D[k, c])!r}: must be finite and >= 0")
    empty = np.flatnonzero(D.sum(1) <= 0)
    if empty.size:
        raise FedsdeInputError(f"{name}[{int(empty[0])}]: sums to 0; every row (client) needs a sum > 0")
    return D / D.sum(1, keepdims=True)


#: environment variable that caps the memory a run may plan for (bytes, or with a K/M/G/T suffix, e.g. "6G")
MEMORY_LIMIT_ENV = "FEDSDE_MEMORY_LIMIT"


def parse_bytes(name: str, text) -> int:
    """``"6G"``, ``"512M"``, ``"1.5e9"`` or a number of bytes as an int (> 0)."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if s and s[-1] in "KMGT":
        mult, s = 1024 ** ("KMGT".index(s[-1]) + 1), s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise FedsdeInputError(f"{name}={text!r}: must be a number of bytes (e.g. 6G, 512M)") from None
    if not math.isfinite(v) or v <= 0:
        raise FedsdeInputError(f"{name}={text!r}: must be a number of bytes > 0")
    return int(v)


def available_memory(device: torch.device | str = "cpu", limit: int | str | None = None) -> int:
    """Bytes a run may still allocate on ``device``: free memory (CPU: ``MemAvailable``, the cgroup's remaining
    ``memory.max`` and the address-space limit ``RLIMIT_AS`` left to this process, whichever is least; CUDA: free
    device memory), capped by ``limit`` or the environment variable ``FEDSDE_MEMORY_LIMIT``."""
    import os

    caps = []
    if limit is None and os.environ.get(MEMORY_LIMIT_ENV):
        limit = os.environ[MEMORY_LIMIT_ENV]
    if limit is not None:
        caps.append(parse_bytes("memory_limit" if not isinstance(limit, str) else MEMORY_LIMIT_ENV, limit))
    dev = torch.device(device)
    if dev.type == "cuda":
        caps.append(int(torch.cuda.mem_get_info(dev)[0]))
        return min(caps)
    caps += _cpu_memory_caps()
    return min(caps) if caps else 1 << 62


def _cpu_memory_caps() -> list[int]:
    caps: list[int] = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    caps.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            mx = fh.read().strip()
        if mx != "max":
            with open("/sys/fs/cgroup/memory.current") as fh:
                caps.append(max(0, int(mx) - int(fh.read().strip())))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            used = 0
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmSize:"):
                        used = int(line.split()[1]) * 1024
            caps.append(max(0, soft - used))
    except (OSError, ValueError, ImportError):
        pass
    return caps


def memory_fits(what: str, need: int, available: int, hint: str) -> None:
    """Raise a one-line error when ``need`` bytes exceed ``available`` (the message gives the estimate)."""
    if need > available:
        raise FedsdeInputError(
            f"{what}: needs about {_gib(need)} of memory but about {_gib(available)} is available; {hint}"
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**27 else f"{n / 2**20:.3g} MiB"


def known_divergence(problem, eta: float, steps, server_lr: float = 1.0, *, aggregator="fedavg",
                     participation: int | None = None) -> list[str]:
    """Why these settings diverge on quadratic clients, known before running (empty list: nothing known).

    * the local solver expands on a client: the linear map of one local step on the direction of ``λ_max(U_k)``
      has spectral radius >= 1 (plain SGD: ``η·λ_max(U_k) >= 2``; heavy-ball momentum ``ρ`` and proximal ``μ``
      are included, :mod:`fedsde.sim.solvers`);
    * the server recursion of the mean, ``w ← w − s·B(w − c)`` (rules linear in the client displacements: fedavg,
      fednova, feddisco), has spectral radius ``ρ(I − s·B) > 1``: the mean grows geometrically; for fedavgm the
      recursion on ``(w − c, v)`` with the server momentum ``v`` (heavy ball: stable iff ``s·β_i < 2(1 + β)``).

    Rules without a linear mean recursion (FedAdam, FedYogi, SCAFFOLD, FedAWARE, …) are left to the blow-up
    watch of the simulator (:class:`fedsde.sim.moments.BlowUpWatch`).

    Problems without quadratic clients (data problems) return an empty list.
    """
    from fedsde.problems.quadratic import QuadraticProblem

    if not isinstance(problem, QuadraticProblem) or not (np.isfinite(eta) and eta > 0):
        return []
    from fedsde.aggregators import get_aggregator

    try:
        agg = get_aggregator(aggregator)
        solver = agg.local_solver
        beta, mu, in_buffer = float(solver.momentum), float(solver.prox), bool(solver.prox_in_buffer)
    except (FedsdeInputError, AttributeError, TypeError):
        agg, beta, mu, in_buffer = None, 0.0, 0.0, False
    try:
        lam = problem.max_curvature()
    except np.linalg.LinAlgError:  # non-finite curvatures: left to the command's own checks
        return []
    rho = np.array([_local_step_radius(eta, float(lk), beta, mu, in_buffer) for lk in lam])
    bad = np.flatnonzero(rho >= 1.0)
    if bad.size:
        k = int(bad[np.argmax(lam[bad])])
        if beta == 0.0 and mu == 0.0:
            what = (f"eta*max_eig(U_k) = {eta * lam[k]:.6g} >= 2 for client(s) {bad.tolist()} (eta={eta:g}, "
                    f"max_eig(U_{k}) = {lam[k]:.6g}): local SGD diverges; need eta < {2.0 / lam[k]:.6g}")
        else:
            what = (f"one local step (momentum {beta:g}, prox {mu:g}) expands on client(s) {bad.tolist()}: spectral "
                    f"radius {rho[k]:.6g} >= 1 at max_eig(U_{k}) = {lam[k]:.6g} with eta={eta:g}: local training "
                    "diverges")
        return [what]
    if agg is None or not (np.isfinite(server_lr) and server_lr > 0):
        return []
    from fedsde.exact import aggregator_round_weights, round_law

    if getattr(agg, "name", "") == "fedavgm":
        return _momentum_server_divergence(problem, eta, steps, float(server_lr), agg)

    try:
        omega = aggregator_round_weights(problem, agg, steps, participation=participation)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            law = round_law(problem, eta, steps, server_lr, participation=participation, weights=omega)
    except FedsdeInputError:  # no exact law for this rule (or settings refused elsewhere with their own message)
        return []
    if law.spectral_radius > 1.0 + 1e-9:
        beta_max = float(np.max(np.abs(np.linalg.eigvals(law.B)))) if np.all(np.isfinite(law.B)) else 0.0
        need = f"; need server_lr < {2.0 / beta_max:.6g}" if beta_max > 0 else ""
        return [f"server_lr={server_lr:g}: the server recursion of the mean, w ← w − s·B(w − c), has spectral radius "
                f"rho(I − s·B) = {law.spectral_radius:.6g} > 1 (eta={eta:g}): the chain diverges{need}"]
    return []


def _momentum_server_divergence(problem, eta: float, steps, s: float, agg) -> list[str]:
    """FedAvgM: the mean recursion on ``(w − c, v)`` with ``Σ p_k Δ_k = −B(w − c)`` and ``g = 1 − dampening``:
    ``v' = βv − gB(w − c)``; heavy ball ``w' = w + s v'``, Nesterov ``w' = w + s(βv' − gB(w − c))``."""
    from fedsde.exact import round_law

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            B = round_law(problem, eta, steps, 1.0, warn=False).B
    except FedsdeInputError:
        return []
    if not np.all(np.isfinite(B)):
        return []
    beta, g, eye = float(agg.beta), 1.0 - float(agg.dampening), np.eye(B.shape[0])
    if agg.variant == "heavy_ball":
        top = np.hstack([eye - s * g * B, s * beta * eye])
    else:
        top = np.hstack([eye - s * g * (1.0 + beta) * B, s * beta * beta * eye])
    M = np.vstack([top, np.hstack([-g * B, beta * eye])])
    rho = float(np.max(np.abs(np.linalg.eigvals(M))))
    if rho > 1.0 + 1e-9:
        return [f"server_lr={s:g}: the server momentum recursion of the mean (fedavgm {agg.variant}, beta={beta:g}) "
                f"has spectral radius {rho:.6g} > 1 (eta={eta:g}): the chain diverges"]
    return []


def _local_step_radius(eta: float, lam: float, beta: float, mu: float, in_buffer: bool) -> float:
    """Spectral radius of one local step on a curvature-``lam`` direction, state ``(x − w_n, momentum buffer)``."""
    if in_buffer:  # v ← βv + (λ + μ)x, x ← x − ηv
        c = lam + mu
        M = np.array([[1.0 - eta * c, -eta * beta], [c, beta]])
    else:  # v ← βv + λx, x ← x − ημx − ηv
        M = np.array([[1.0 - eta * mu - eta * lam, -eta * beta], [lam, beta]])
    return float(np.max(np.abs(np.linalg.eigvals(M))))
