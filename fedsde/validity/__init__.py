"""Is seed 002's SDE a good model of FedAvg on *this* problem?  The SVAG test lifted to the server round.

Li, Malladi & Arora (NeurIPS 2021) test whether an SDE models SGD by running SVAG — a chain that samples the SDE
as its parameter ``ℓ → ∞`` (weak order 1 in ``1/ℓ``) and is the algorithm itself at ``ℓ = 1`` — for
``ℓ = 1, 2, 4, …`` and checking whether the metrics of interest move.  Here the chain acts on the server round
(:mod:`fedsde.sde.svag`): ``ℓ`` times more rounds with server step ``s/ℓ`` and displacement
``Â_ℓ = (1+√(2ℓ−1))/2 · Â⁽¹⁾ + (1−√(2ℓ−1))/2 · Â⁽²⁾`` from two independent client rounds, which has the drift and
the covariance of SDE (2) per unit of time for every ``ℓ``.  If the metrics of ``ℓ = 1`` (FedAvg) and
``ℓ = 2, 4, 8`` agree within noise and a tolerance on ``[0, T]``, the SDE tracks FedAvg there; where they split, it
stops.

* :func:`validity_test` — run the chains, record train loss, ‖∇F‖², test accuracy (data problems) and
  ‖w − w₀‖ on the grid ``t = n·h`` of the base run, and give a :class:`ValidityVerdict`;
* :func:`validity_verdict` — the decision rule (gap between successive ``ℓ`` vs ``tol·scale + z·s.e.``);
* :func:`richardson_limit` — the SDE's value extrapolated from the two largest ``ℓ``.

The CLI is ``fedsde validity``.
"""

from fedsde.sde.svag import svag_chain, svag_coefficients, svag_round_law, svag_transient_moments
from fedsde.validity.core import ValidityResult, parse_ells, validity_test
from fedsde.validity.verdict import ValidityVerdict, bonferroni_z, richardson_limit, validity_verdict

__all__ = [
    "ValidityResult",
    "ValidityVerdict",
    "bonferroni_z",
    "parse_ells",
    "richardson_limit",
    "svag_chain",
    "svag_coefficients",
    "svag_round_law",
    "svag_transient_moments",
    "validity_test",
    "validity_verdict",
]
