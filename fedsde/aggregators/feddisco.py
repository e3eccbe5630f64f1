"""FedDisco: discrepancy-aware aggregation weights (Ye et al., ICML 2023; seed 004, eq. (3)).

Notes
-----
Over the round's participants ``S`` (all clients under full participation), with relative sizes
``n_k = |B_k| / Σ_{j∈S} |B_j|`` and label distributions ``D_k``:

    d_k = KL(D_k ‖ T) / Σ_{j∈S} KL(D_j ‖ T)          (discrepancy; 0·log 0 = 0; all 0 if the sum is 0)
    p_k = ReLU(n_k − a·d_k + b) / Σ_{j∈S} ReLU(n_j − a·d_j + b)

with target ``T`` uniform by default, ``a = 0.5``, ``b = 0.1`` (reference code defaults).  If every bracket is
``<= 0`` the weights fall back to ``n_k`` (the released code would crash there; reference/seed-feddisco.md §1.3).
The normalisation of ``d`` over ``S`` is the released code's (``normalize="sum"``, default for KL); L1/L2/cosine
discrepancies are used raw (``normalize="none"``), and then ``a`` must be re-tuned (§1.7a).

Composition (seed 004 §5.2, reference §1.6): only the weights of the model average change.  FedAvg/FedProx use
``Σ p_k Δ_k``; SCAFFOLD's control-variate update stays uniform; FedNova uses the Disco weights inside
``τ_eff = Σ p_k τ_k`` and the coefficients ``p_k τ_eff/τ_k`` ("re-weighting before normalisation").
So FedDisco's exact-law weights are its base rule's with ``p`` replaced by the Disco weights
(:meth:`FedDisco.linear_weights`): ``p^Disco`` over FedAvg, ``p^D_k τ_eff^D/τ_k`` over FedNova.  Under client
sampling they depend on the sample, so there is no exact law then.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsde._tolerances import DIVISION_FLOOR
from fedsde._validate import choice, client_weights, distributions, positive_float
from fedsde.aggregators.base import Aggregator, RoundContext
from fedsde.aggregators.registry import get_aggregator, register
from fedsde.clients.solvers import LocalSolver
from fedsde.errors import FedsdeInputError, NoExactLawError

METRICS = ("kl", "l2", "l1", "cosine")
BASES = ("fedavg", "fedprox", "scaffold", "fednova")
NORMALIZE = ("sum", "none")


def _sizes(value, Q: int | None = None) -> np.ndarray:
    """Client sizes as floats, shape (Q,): finite, >= 0 (the bad entry named), not all zero."""
    return client_weights("sizes", value, Q, normalise=False, noun="", detail=True)


def discrepancies(label_distributions, target=None, metric: str = "kl") -> np.ndarray:
    """Raw discrepancy ``e(D_k, T)`` of every client, shape (Q,).

    ``"kl"``: ``Σ_c D_kc log(D_kc / T_c)`` (0·log 0 = 0; infinite if ``T_c = 0 < D_kc``, which is an error);
    ``"l2"``, ``"l1"``: norms of ``D_k − T``; ``"cosine"``: ``1 − cos(D_k, T)``.  Rows may be counts.
    """
    choice("metric", metric, METRICS)
    D = distributions("label_distributions", label_distributions)
    C = D.shape[1]
    T = np.full(C, 1.0 / C) if target is None else distributions("target", np.reshape(target, (1, -1)))[0]
    if T.shape != (C,):
        raise FedsdeInputError(f"target: has {T.size} classes, the label distributions have {C}")
    if metric == "kl":
        if np.any((T == 0) & np.any(D > 0, axis=0)):
            raise FedsdeInputError("target: has a zero entry where some client has samples (KL is infinite)")
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(D > 0, D * np.log(D / T), 0.0)
        return terms.sum(1)
    if metric == "l2":
        return np.linalg.norm(D - T, axis=1)
    if metric == "l1":
        return np.abs(D - T).sum(1)
    return 1.0 - (D @ T) / (np.linalg.norm(D, axis=1) * np.linalg.norm(T))  # cosine


def disco_weights_from_discrepancy(sizes, d, a: float = 0.5, b: float = 0.1) -> np.ndarray:
    """``p_k ∝ ReLU(n_k − a·d_k + b)`` with the fallback ``p = n`` when every bracket is ``<= 0``.

    Parameters
    ----------
    sizes : array, shape (Q,)
        Client sizes (or relative sizes); normalised to ``n``.
    d : array, shape (Q,)
        Discrepancies as used in the formula (already normalised if wanted).
    """
    a = positive_float("a", a, allow_zero=True)
    b = positive_float("b", b, allow_zero=True)
    n = _sizes(sizes)
    try:
        d = np.asarray(d, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise FedsdeInputError("d: could not be read as an array of numbers") from None
    if n.shape != d.shape:
        raise FedsdeInputError(f"sizes, d: shapes {n.shape} and {d.shape} must match, one entry per client")
    bad = np.flatnonzero(~np.isfinite(d) | (d < 0))
    if bad.size:
        raise FedsdeInputError(f"d[{int(bad[0])}]={float(d[bad[0]])!r}: discrepancies must be finite and >= 0")
    n = n / n.sum()
    q = np.maximum(n - a * d + b, 0.0)
    return n if q.sum() <= 0 else q / q.sum()


def feddisco_weights(sizes, label_distributions, target=None, a: float = 0.5, b: float = 0.1, *,
                     metric: str = "kl", normalize: str | None = None) -> np.ndarray:
    """FedDisco's aggregation weights of one round's participants (seed 004, eq. (3); module docstring).

    Parameters
    ----------
    sizes : array, shape (Q,)
        Dataset sizes ``|B_k|`` (or relative sizes) of the participants.
    label_distributions : array, shape (Q, C)
        Label distributions (or label counts) ``D_k``.
    target : array, shape (C,), optional
        Target distribution ``T`` (default uniform).
    a, b : float
        Discrepancy and offset coefficients (defaults 0.5 and 0.1).
    metric : {"kl", "l2", "l1", "cosine"}
    normalize : {"sum", "none"}, optional
        Rescale ``d`` to sum to one (default for KL) or not (default for the others).

    Returns
    -------
    ndarray, shape (Q,)
        Non-negative weights summing to one.
    """
    a = positive_float("a", a, allow_zero=True)
    b = positive_float("b", b, allow_zero=True)
    raw = discrepancies(label_distributions, target, metric)
    normalize = ("sum" if metric == "kl" else "none") if normalize is None else choice("normalize", normalize,
                                                                                        NORMALIZE)
    d = raw / raw.sum() if normalize == "sum" and raw.sum() > 0 else (np.zeros_like(raw) if normalize == "sum"
                                                                      else raw)
    sizes = _sizes(sizes, raw.size)
    return disco_weights_from_discrepancy(sizes, d, a, b)


@register
class FedDisco(Aggregator):
    """Disco weights for a base server rule (see module docstring).

    Parameters
    ----------
    base : {"fedavg", "fedprox", "scaffold", "fednova"} or Aggregator
        The rule whose aggregation weights are replaced.
    a, b : float
    label_distributions : array, shape (Q, C), optional
        Default: read from the problem (``problem.label_distributions()``) when simulating.
    sizes : array, shape (Q,), optional
        Client dataset sizes; default the problem's ``sizes`` or its weights ``p``.
    target : array, shape (C,), optional
    metric, normalize
        As in :func:`feddisco_weights`.
    **base_kwargs
        Passed to the base rule when it is given by name.
    """

    name = "feddisco"
    paper = "Ye et al. 2023 (seed 004), eq. (3)"

    def __init__(self, base: str | Aggregator = "fedavg", *, a: float = 0.5, b: float = 0.1,
                 label_distributions=None, sizes=None, target=None, metric: str = "kl",
                 normalize: str | None = None, **base_kwargs):
        if isinstance(base, str) and base.lower() not in BASES:
            raise FedsdeInputError(f"base={base!r}: must be one of {', '.join(BASES)} (or an Aggregator)")
        self._base = get_aggregator(base, **base_kwargs)
        self.base = self._base.name
        self.a = positive_float("a", a, allow_zero=True)
        self.b = positive_float("b", b, allow_zero=True)
        self.metric = choice("metric", metric, METRICS)
        self.normalize = (("sum" if metric == "kl" else "none") if normalize is None
                          else choice("normalize", normalize, NORMALIZE))
        self._target = target
        self._raw = None if label_distributions is None else discrepancies(label_distributions, target, metric)
        self._sizes = None if sizes is None else _sizes(sizes)
        if self._raw is not None and self._sizes is not None and self._raw.shape != self._sizes.shape:
            raise FedsdeInputError(f"sizes: shape {self._sizes.shape} must be ({self._raw.size},), one per client "
                                   "of label_distributions")

    # delegation to the base rule (whether the Disco weights under sampling keep an exact law is FedDisco's own:
    # they depend on the sample, so ``exact_under_sampling`` stays False)
    @property
    def local_solver(self) -> LocalSolver:
        return self._base.local_solver

    @property
    def needs_norms(self) -> bool:
        return self._base.needs_norms

    @property
    def needs_first_grads(self) -> bool:
        return self._base.needs_first_grads

    @property
    def stateful(self) -> bool:
        return self._base.stateful

    @property
    def warm_start_rounds(self) -> int:
        return self._base.warm_start_rounds

    @property
    def sde_kind(self) -> str | None:
        """The base rule's (its SDE with the Disco weights in place of ``p``)."""
        return self._base.sde_kind

    @property
    def sde_refusal(self) -> str:
        return self._base.sde_refusal

    def momentum_form(self):
        return self._base.momentum_form()

    @property
    def base_rule(self) -> Aggregator:
        """The wrapped rule."""
        return self._base

    def correction(self, state: Any):
        return self._base.correction(state)

    def init(self, w0: torch.Tensor) -> Any:
        return self._base.init(w0)

    def bind(self, problem: Any) -> None:
        if self._raw is None:
            dists = getattr(problem, "label_distributions", None)
            if callable(dists):  # ClassificationProblem: a method; QuadraticProblem: an optional field
                dists = dists()
            if dists is None:
                raise FedsdeInputError(
                    "label_distributions: FedDisco needs each client's label distribution; pass "
                    "label_distributions=, use a problem with labels (ClassificationProblem), or give a quadratic "
                    "problem the key label_distributions"
                )
            self._raw = discrepancies(dists, self._target, self.metric)
        if self._sizes is None:
            self._sizes = _sizes(getattr(problem, "sizes", problem.p))
        if self._raw.shape != (problem.Q,) or self._sizes.shape != (problem.Q,):
            raise FedsdeInputError(
                f"label_distributions, sizes: need one entry per client (Q={problem.Q}), got "
                f"{self._raw.shape[0]} and {self._sizes.shape[0]}"
            )
        self._base.bind(problem)

    def check_problem(self, problem: Any, source: str) -> None:
        """One-line error when neither this rule nor ``problem`` carries label distributions."""
        if self._raw is None and getattr(problem, "label_distributions", None) is None:
            raise FedsdeInputError(
                f"aggregator={self.name!r}: the problem {source!r} has no label_distributions; add the key "
                f"label_distributions (Q={problem.Q} rows of non-negative label frequencies, one per client)"
            )

    def linear_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray, *,
                       p: np.ndarray | None = None) -> np.ndarray:
        """The base rule's weights with the Disco weights (:meth:`static_weights`, full participation) in place of
        ``weights``; ``p`` stays the problem's (FedNova's ``τ_eff="full"``).  Shapes as the base's."""
        try:
            return self._base.linear_weights(self.static_weights(), norms, local_steps,
                                             p=weights if p is None else p)
        except NoExactLawError:
            raise NoExactLawError(f"aggregator={self.name!r} over {self.base!r}: no exact law (base rule not "
                                  "linear)") from None

    def generalised_weights(self, weights: np.ndarray, norms: np.ndarray, local_steps: np.ndarray) -> np.ndarray:
        """The base rule's generalised weights (seed 003 eq. (6)) with the Disco weights in place of ``weights``."""
        return self._base.generalised_weights(self.static_weights(), norms, local_steps)

    def static_weights(self) -> np.ndarray:
        """Weights under full participation (needs ``bind`` or explicit distributions and sizes), shape (Q,)."""
        if self._raw is None or self._sizes is None:
            raise FedsdeInputError("FedDisco: label distributions and sizes are unknown (call bind(problem))")
        d = self._raw / self._raw.sum() if self.normalize == "sum" and self._raw.sum() > 0 else (
            np.zeros_like(self._raw) if self.normalize == "sum" else self._raw)
        return disco_weights_from_discrepancy(self._sizes, d, self.a, self.b)

    def round_weights(self, participating: torch.Tensor) -> torch.Tensor:
        """Disco weights over each replicate's participants, shape (R, Q) (zero off the sample)."""
        mask = participating.to(torch.float64)
        size = torch.as_tensor(self._sizes, dtype=torch.float64, device=mask.device) * mask
        n = size / size.sum(1, keepdim=True)
        raw = torch.as_tensor(self._raw, dtype=torch.float64, device=mask.device) * mask
        if self.normalize == "sum":
            tot = raw.sum(1, keepdim=True)
            d = torch.where(tot > 0, raw / tot.clamp_min(DIVISION_FLOOR), torch.zeros_like(raw))
        else:
            d = raw
        q = torch.clamp(n - self.a * d + self.b, min=0.0) * mask
        qs = q.sum(1, keepdim=True)
        return torch.where(qs > 0, q / qs.clamp_min(DIVISION_FLOOR), n)

    def apply(self, w: torch.Tensor, updates: torch.Tensor, weights: torch.Tensor, state: Any,
              ctx: RoundContext) -> tuple[torch.Tensor, Any]:
        disco = self.round_weights(ctx.participating).to(w.dtype)
        return self._base.apply(w, updates, disco, state, ctx)
