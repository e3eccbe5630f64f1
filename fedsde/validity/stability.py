"""What is known about the stability of FedAvg with the settings a validity test runs, before anything is sampled.

``fedsde exact`` warns where a client's local SGD expands or the chain's mean or variance grows without bound
(:func:`fedsde.exact.stability.least_squares_stability` on least-squares clients, :func:`fedsde.exact.stability.
known_divergence` on quadratic ones).  The validity test runs the same chain, so it raises the same warnings
(:func:`warn_stability`): ``fedsde validity`` prints them on stderr and in its JSON ``warnings``, and ``fedsde map``
collects them from its cells.
"""

from __future__ import annotations

import warnings

from fedsde.params import unpack


def stability(problem, eta, local_steps=None, server_lr: float = 1.0):
    """:class:`~fedsde.exact.stability.LeastSquaresStability` on least-squares clients, else ``None`` (``eta``: a
    number, or a :class:`~fedsde.params.Schedule` holding the rates)."""
    from fedsde.validity.reference import _is_least_squares

    if not _is_least_squares(problem):
        return None
    from fedsde.exact.stability import least_squares_stability

    return least_squares_stability(problem, eta, local_steps, server_lr)  # a Schedule passed whole


def stability_messages(problem, eta, local_steps=None, server_lr: float = 1.0, known=None) -> list[str]:
    """The warnings ``fedsde exact`` gives for these settings (``known``: the :func:`stability` already computed)."""
    from fedsde.problems.quadratic import QuadraticProblem

    if isinstance(problem, QuadraticProblem):
        from fedsde.exact.stability import known_divergence

        return [f"the algorithm diverges with these settings: {why}"
                for why in known_divergence(problem, eta, local_steps, server_lr)]
    known = stability(problem, eta, local_steps, server_lr) if known is None else known
    return [] if known is None else known.messages(unpack(eta)[1])


def warn_stability(problem, eta, local_steps=None, server_lr: float = 1.0, *, stacklevel: int = 3):
    """Raise :func:`stability_messages` as ``RuntimeWarning`` s (attributed ``stacklevel`` frames up); returns
    :func:`stability` (or ``None``)."""
    known = stability(problem, eta, local_steps, server_lr)
    for msg in stability_messages(problem, eta, local_steps, server_lr, known):
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
    return known
