"""The grid of a validity map, its sweep spec, the step measure of each cell, and what the map needs up front.

A map's cells are the Cartesian product server step ``s`` × local steps ``E`` × client step ``η`` (in that order:
one panel per ``s``, one row per ``E``, one column per ``η``).  Each cell is ``fedsde validity`` with the map's
shared options, so its sweep spec is ``[run] command = "validity"``, ``[base]`` the shared options and ``[grid]``
the three axes; the cells' seeds derive from the map's seed and the cell's ``(η, E, s)``
(:func:`fedsde.sweep.cell_seed`).

**Step measure.**  ``κ = s·λ_max(B)`` with ``B = Σ_k p_k [I − (I − ηU_k)^E]`` (data problems: the client Hessians
at the optimum; :func:`fedsde.validity.step.round_contraction`): the fraction of the distance to the fixed point
one round removes along the stiffest direction.  The claim ``002/eq-2-model`` (:mod:`fedsde.theory.claims.
validity_002`) fits a threshold ``κ*`` on the paper's table problem below which the SDE tracks FedAvg within 5 %
of the loss's movement; :func:`kappa_threshold` gives it and the map draws the line ``κ = κ*`` over its cells.

**Up front** (:func:`check_grid`, :func:`memory_need`): the number of cells against ``max_cells``, and the memory
of the cells that run at once plus the records the map reads back, against what is available
(:func:`fedsde._memory.available_memory`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from fedsde._validate import positive_float, positive_int
from fedsde.errors import FedsdeInputError

#: the map's axes, in the order of the sweep's dimensions (panels, rows, columns)
AXES = ("server_lr", "local_steps", "eta")


@dataclass(frozen=True)
class MapGrid:
    """The axes of a map: client steps ``eta``, local steps ``local_steps``, server steps ``server_lr`` (each
    distinct and increasing after validation)."""

    eta: tuple[float, ...]
    local_steps: tuple[int, ...]
    server_lr: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        for name, cast in (("eta", positive_float), ("server_lr", positive_float), ("local_steps", positive_int)):
            values = [cast(name, v) for v in getattr(self, name)]
            if not values:
                raise FedsdeInputError(f"{name}: give at least one value")
            if len(set(values)) != len(values):
                raise FedsdeInputError(f"{name}={values}: the values of an axis must be distinct")
            object.__setattr__(self, name, tuple(sorted(values)))

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(len(server_lr), len(local_steps), len(eta))``: panels, rows, columns."""
        return len(self.server_lr), len(self.local_steps), len(self.eta)

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    def cells(self) -> Iterator[dict]:
        """``{"eta", "local_steps", "server_lr"}`` of every cell, in the sweep's order (s, then E, then η)."""
        for s in self.server_lr:
            for E in self.local_steps:
                for eta in self.eta:
                    yield {"eta": eta, "local_steps": E, "server_lr": s}

    def to_dict(self) -> dict:
        return {"eta": list(self.eta), "local_steps": list(self.local_steps), "server_lr": list(self.server_lr)}


def check_grid(grid: MapGrid, max_cells: int) -> None:
    """Refuse a grid of more than ``max_cells`` cells (one line: the count, the shape and the limit); ``max_cells``
    is a checked limit (:attr:`fedsde.sweep.SweepExecution.max_cells`)."""
    if grid.n_cells > max_cells:
        raise FedsdeInputError(f"grid: {grid.n_cells} cells ({len(grid.eta)} η × {len(grid.local_steps)} E × "
                               f"{len(grid.server_lr)} s), more than --max-cells={max_cells}; use fewer values or "
                               "raise the limit")


def sweep_spec(problem_file: str, grid: MapGrid, *, rounds: int, replicates: int | None, seed: int,
               options: dict) -> dict:
    """The sweep spec (a dict with the tables of :func:`fedsde.sweep.load_spec`) of the map's cells.

    ``options``: the shared options of ``fedsde validity``, named like its long flags with ``_`` (``tolerance``,
    ``alpha``, ``ells`` as a list, …); ``final_cov = "none"`` keeps each stored cell small; ``replicates=None``
    (FedAvg exact) gives the cells none.
    """
    base = {"problem": problem_file, "rounds": int(rounds), "final_cov": "none",
            **({} if replicates is None else {"replicates": int(replicates)}),
            **{k: v for k, v in options.items() if v is not None and v is not False}}
    return {"run": {"command": "validity", "seed": int(seed)}, "base": base,
            "grid": {axis: list(getattr(grid, axis)) for axis in AXES}}


def cell_kappa(problem, cell: dict) -> tuple[float | None, str]:
    """``(κ, note)`` for one cell (``note``: what κ means on a non-convex loss, :func:`fedsde.validity.step.
    contraction`, else ``""``), or ``(None, why)`` where the problem has no round map to linearise."""
    from fedsde.validity.step import contraction

    try:
        c = contraction(problem, eta=cell["eta"], local_steps=cell["local_steps"], server_lr=cell["server_lr"])
        return c.kappa, c.note
    except (FedsdeInputError, ValueError, np.linalg.LinAlgError, ArithmeticError) as exc:
        return None, " ".join(str(exc).split())


def kappa_threshold() -> float | None:
    """``κ*`` of the claim ``002/eq-2-model`` (:func:`fedsde.theory.claims.validity_002.kappa_threshold`)."""
    from fedsde.theory.claims.validity_002 import kappa_threshold as threshold

    return threshold()


def _array_bytes(obj) -> int:
    """Bytes of the arrays an object holds directly (numpy arrays and torch tensors among its attributes)."""
    total = 0
    for value in getattr(obj, "__dict__", {}).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif hasattr(value, "element_size") and hasattr(value, "numel"):
            total += int(value.element_size() * value.numel())
    return total


def memory_need(problem, grid: MapGrid, *, rounds: int, replicates: int, ells: Sequence[int], record_every: int,
                metrics: int, exact: bool, concurrent: int, final_cov: str = "none") -> int:
    """Bytes a map needs at its peak (float64; an estimate).

    Per running cell: a copy of the problem's arrays; the chains' working set (about ten ``(Q, d)`` tensors per
    replicate, at most half of the simulator's 1 GiB working set, which it chunks replicates to respect; a module's
    oracle work space beside it) and final weights ``(R, d)``; the per-replicate metric values ``(L, T, R)`` of
    every metric, twice; and for the exact least-squares reference the moment ODE of ``(w, wwᵀ)`` (its
    ``(d + d²)²`` generator and a matrix exponential, four such matrices); its final means and covariances as
    ``final_cov`` says, with their JSON.  ``concurrent`` cells run at once; the process that runs the map also holds
    the problem and every cell's record (``L × T`` means and standard errors per metric, the verdict's curves and
    the final moments).
    """
    Q, d = int(problem.Q), int(problem.d)
    L = len(ells)
    T = rounds // max(1, record_every) + 2
    R = replicates
    data = _array_bytes(problem)
    chains = min(8 * R * 10 * Q * d, 1 << 29) + 8 * R * d
    if hasattr(problem, "functional"):  # a module problem: the oracle's work space of one block (a block: R <= 128)
        from fedsde.clients.module_oracle import rows_bytes, step_bytes

        chains += step_bytes(problem, Q, min(R, 128), torch_dtype()) + rows_bytes(problem, torch_dtype())
    values = 2 * 8 * L * T * R * metrics
    moments = 4 * 8 * (d + d * d) ** 2 if exact and hasattr(problem, "padded_rows") else 0
    cell = data + chains + values + moments
    from fedsde._memory import JSON_BYTES_PER_NUMBER
    from fedsde._samples import cov_numbers

    kept = L * (cov_numbers(final_cov, d) + d)  # a cell's final covariances and means, kept and printed
    cell += (8 + JSON_BYTES_PER_NUMBER) * kept
    records = grid.n_cells * (8 * T * metrics * (4 * L + 8) + (8 + JSON_BYTES_PER_NUMBER) * kept)
    return int(concurrent * cell + data + records)


def torch_dtype():
    """float64, the dtype of a cell's chains (the estimate's)."""
    import torch

    return torch.float64


def check_memory(problem, grid: MapGrid, *, concurrent: int, memory_limit=None, **sizes) -> int:
    """Refuse (one line, with the estimate) a map whose :func:`memory_need` does not fit; returns the estimate."""
    from fedsde._memory import available_memory, memory_fits

    need = memory_need(problem, grid, concurrent=concurrent, **sizes)
    memory_fits(f"map of {grid.n_cells} cells on {concurrent} worker(s)", need, available_memory("cpu", memory_limit),
                "use fewer replicates, rounds or workers, or set FEDSDE_MEMORY_LIMIT if more memory is free than "
                "detected")
    return need
