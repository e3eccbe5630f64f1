"""What :func:`fedsde.sim.simulate` returns: the recorded server weights (or their moments) and client drift."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedsde._samples import ReplicateMoments
from fedsde.sim.moments import StreamingMoments


@dataclass
class SimulationResult(ReplicateMoments):
    """Server weights (and optionally client drift) recorded during a simulation.

    Attributes
    ----------
    rounds : ndarray of int, shape (T,)
        Recorded round indices (round 0 is the start).
    weights : ndarray, shape (T, R, d)
        Server weights of every replicate at the recorded rounds.
    drift_rounds : ndarray of int, shape (T_d,)
        Rounds whose local training was recorded (empty unless ``record_drift``).
    drift : ndarray, shape (T_d, E_max, R, Q) or None
        ``‖w_k^{(i)} − w_n‖`` after local step ``i = 1..E_max`` (``E_max`` = most local steps); entries past a
        client's ``τ_k`` repeat its final value.
    config : dict
        The arguments of the run (for records).
    streamed : StreamingMoments or None
        With ``moments_only=True``: the moments accumulated over chunks (``weights`` is then None).
    """

    rounds: np.ndarray
    weights: np.ndarray | None
    drift_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drift: np.ndarray | None = None
    config: dict = field(default_factory=dict)
    streamed: StreamingMoments | None = None
