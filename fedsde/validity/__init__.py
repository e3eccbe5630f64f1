"""Is seed 002's SDE a good model of FedAvg on *this* problem?  FedAvg against the SDE, by an equivalence test.

FedAvg is run by Monte Carlo (the ``ℓ = 1`` chain, ``R`` replicates); the SDE's value comes from its exact law
where one exists (quadratic clients: the Ornstein–Uhlenbeck law of eq. (2) with the exact round moments) or from
SVAG (Li, Malladi & Arora, NeurIPS 2021) lifted to the server round (:mod:`fedsde.sde.svag`): ``ℓ`` times more
rounds with server step ``s/ℓ`` and displacement ``Â_ℓ = (1+√(2ℓ−1))/2 · Â⁽¹⁾ + (1−√(2ℓ−1))/2 · Â⁽²⁾`` from two
independent client rounds, which has the drift and covariance of SDE (2) per unit of time for every ``ℓ`` and
converges to the SDE at rate ``1/ℓ`` (Richardson limit of the two largest ``ℓ``).  The gap
``d_φ(t) = |E φ_FedAvg(t) − E φ_SDE(t)| / scale_φ`` (scale: the SDE's range of movement; accuracy in its own
units) is judged by simultaneous intervals: "tracks", "does not track" or "inconclusive".

* :func:`validity_test` — run the chains, record train loss, ‖∇F‖², test accuracy (data problems) and
  ‖w − w₀‖ on the grid ``t = n·h`` of the base run, and give a :class:`ValidityVerdict`;
* :func:`validity_verdict` — the three-outcome rule (:mod:`fedsde.validity.verdict`);
* :func:`exact_sde_law`, :func:`gaussian_metric_means` — the exact reference (:mod:`fedsde.validity.reference`);
* :func:`fedsde.validity.step.round_contraction` — the step measure ``κ = s·λ_max(B)``, comparable across problems
  (:func:`fedsde.validity.step.contraction`: with the ends of ``B``'s spectrum and what ``κ`` means on a network);
* :func:`richardson_limit` — the SDE's value extrapolated from the two largest ``ℓ``.

The CLI is ``fedsde validity``.
"""

from fedsde.sde.svag import svag_chain, svag_coefficients, svag_round_law, svag_transient_moments
from fedsde.validity.core import ValidityResult, parse_ells, validity_test
from fedsde.validity.reference import (
    ell_ratios,
    exact_sde_law,
    exact_sde_paths,
    gaussian_metric_means,
    gaussian_norm_mean,
    svag_gaps,
)
from fedsde.validity.verdict import (
    GapPath,
    ValidityVerdict,
    bonferroni_quantile,
    bonferroni_z,
    richardson_limit,
    validity_verdict,
)

__all__ = [
    "GapPath",
    "ValidityResult",
    "ValidityVerdict",
    "bonferroni_quantile",
    "bonferroni_z",
    "ell_ratios",
    "exact_sde_law",
    "exact_sde_paths",
    "gaussian_metric_means",
    "gaussian_norm_mean",
    "parse_ells",
    "richardson_limit",
    "svag_chain",
    "svag_coefficients",
    "svag_gaps",
    "svag_round_law",
    "svag_transient_moments",
    "validity_test",
    "validity_verdict",
]
