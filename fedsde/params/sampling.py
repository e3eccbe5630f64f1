"""Client sampling as one value: how many clients take part in a round and how they are weighted
(:class:`ClientSampling`); see :mod:`fedsde.params`."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsde import _validate

#: participation schemes (:mod:`fedsde.sim.participation`): uniform m-subsets weighted p_k Q/m or p_k/Σ_S p_j; m
#: draws with replacement ∝ p, 1/m each
WEIGHTINGS = ("unbiased", "renormalised", "multinomial")


@dataclass(frozen=True)
class ClientSampling:
    """Which clients take part in a round and with what weight, as :func:`fedsde.sim.simulate` draws them
    (:mod:`fedsde.sim.participation`; the rules' SDEs carry the sampling term, :mod:`fedsde.sde.sampled`).

    Parameters
    ----------
    participation : int, optional
        ``m >= 1`` clients (draws) per round; default every client.
    weighting : {"unbiased", "renormalised", "multinomial"}
        Uniform ``m``-subsets weighted ``p_k Q/m`` (``E ω = p``) or ``p_k / Σ_S p_j``, or ``m`` draws with
        replacement ``∝ p`` weighted ``1/m`` each (seed 003, eq. (14)); without ``participation`` it changes nothing.

    Notes
    -----
    Validated once, here; ``participation`` against the number of clients ``Q`` where the problem is known (more
    than ``Q`` only with ``"multinomial"``).
    """

    participation: int | None = None
    weighting: str = "unbiased"
    validated: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.participation is not None:
            object.__setattr__(self, "participation", _validate.positive_int("participation", self.participation))
        _validate.choice("weighting", self.weighting, WEIGHTINGS)
        object.__setattr__(self, "validated", True)


#: every client, weighted p_k (what a function uses when it is given no sampling)
FULL_PARTICIPATION = ClientSampling()
