"""Symbolic (sympy) derivations for FedAvg on quadratic clients (seed 002, Section 6), as printed and corrected.

Modules
-------
:mod:`~fedsde.symbolic.symbols`
    The symbols (η, E, s, h, t, U_k, a_k, Σ_k, p_k, …) and the clock ``t = n·h``.
:mod:`~fedsde.symbolic.local_sgd`
    E steps of local SGD with E a symbolic positive integer (Thm 6.2 as printed and corrected), the server
    round law, and the diagonal d-dimensional law.
:mod:`~fedsde.symbolic.sde`
    Drift and diffusion of the variants ``paper`` (eq. (4)), ``corrected`` and ``matched``.
:mod:`~fedsde.symbolic.moments`
    Closed-form moments (dsolve, verified by substitution), ODE residuals, stationary limits, series in η,
    ``E → ∞`` limits, the rescaling test.
:mod:`~fedsde.symbolic.numeric`
    Lambdified numpy/torch callables and their evaluation on :class:`~fedsde.problems.QuadraticProblem`.
:mod:`~fedsde.symbolic.errata`
    Errata entries generated from the derivations, with numeric examples against :mod:`fedsde.exact`.
:mod:`~fedsde.symbolic.render`
    Step-by-step derivations as text, LaTeX and JSON.
:mod:`~fedsde.symbolic.order2`
    The order-2 weak approximation of FedAvg (any loss, E local steps, noise, server step): one round expanded to
    O(η²), the SDE matched to it, the modified loss, the Li–Tai–E reduction.
:mod:`~fedsde.symbolic.order2_checks`
    Its two-dimensional checks and its quadratic instances (lambdified against :mod:`fedsde.sde.order2`).

Importing this package runs no derivation: names are resolved lazily and every derivation is cached
(``functools.cache``, an unbounded ``lru_cache``) on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "client_law": "local_sgd",
    "diagonal_client_law": "local_sgd",
    "diagonal_server_law": "local_sgd",
    "geometric_sum": "local_sgd",
    "server_law": "local_sgd",
    "VARIANTS": "sde",
    "SDECoefficients": "sde",
    "sde_coefficients": "sde",
    "eq4_printed": "sde",
    "chain_moments": "moments",
    "eta_series": "moments",
    "large_E_limits": "moments",
    "matched_grid_residuals": "moments",
    "ode_residuals": "moments",
    "ou_solution": "moments",
    "rescaling_ratios": "moments",
    "stationary_ratio": "moments",
    "thm63_printed": "moments",
    "variant_moments": "moments",
    "NumericSDE": "numeric",
    "aggregates": "numeric",
    "client_functions": "numeric",
    "moment_functions": "numeric",
    "sde_coefficients_numeric": "numeric",
    "variant_functions": "numeric",
    "Erratum": "errata",
    "errata_entries": "errata",
    "errata_text": "errata",
    "Derivation": "render",
    "derivation": "render",
    "latex": "render",
    "order2_sde": "order2",
    "modified_loss": "order2",
    "lte_reduction": "order2",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fedsde.symbolic.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedsde.symbolic' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
