"""The first-order scaling rules as named objects, and the configuration they map.

A rule with factor ``κ > 0`` multiplies each hyper-parameter of a FedAvg run by a power of ``κ``:

========================  ==========  ==========  ==========  ==========  ==========  ==========
rule                      ``η``       ``E``       ``s``       ``n``       ``Q``       ``b``
========================  ==========  ==========  ==========  ==========  ==========  ==========
``local-steps``           1           κ           1           1/κ         1           1
``server-client``         1/κ         1           κ           1           1           1
``clients``               1           1           κ           1/κ         κ           1
``batch``                 1           1           g           1/g         1           κ
``batch-linear``          1           1           κ           1/κ         1           κ
``client-lr``             κ           1           1           1/κ         κ           1
========================  ==========  ==========  ==========  ==========  ==========  ==========

Each keeps the two coefficients of the first-order SDE (see :mod:`fedsde.scaling`): the temperature
``s·η·Σ_k p_k² Σ_k`` and the horizon ``τ = n·s·η·E`` (the ``server-client`` rule keeps ``τ`` per round, hence
also the horizon).  For ``clients`` and ``client-lr`` the ``κQ`` clients are the old ones each split (data) or
copied (quadratic) ``κ`` times with weight ``p_k/κ``, so ``Σ_k p_k² Σ_k → Σ_k p_k² Σ_k / κ``; for ``batch`` the
minibatch covariance ``Σ_k ∝ 1/b`` gives the same factor.  ``clients`` and ``batch`` put the factor κ on the server
step; ``client-lr`` puts it on the client learning rate (the linear scaling rule of Goyal et al. 2017 applied to
the clients' η, with the server step kept).  Minibatches drawn without replacement from ``n_k`` rows have covariance
``∝ f_k(b) = (n_k − b)/(b(n_k − 1))``, not ``1/b``: ``batch`` then puts ``g = f(b)/f(κb)`` where the linear rule puts
``κ`` (:mod:`fedsde.scaling.batch_rule`, which also says what one ``g`` keeps for clients of different sizes), and
``batch-linear`` (:data:`BATCH_LINEAR`) keeps ``κ`` for comparison.

Exact cases (every order in ``η``, proofs in ``docs/scaling.md``): ``server-client`` at ``E = 1`` for any loss and
any gradient noise whose law does not depend on ``η`` or ``s`` (the round ``w − s·η·Σ_k p_k(∇F_k(w) + ξ_k)``
depends on ``(s, η)`` only through ``s·η``, so the whole chain is unchanged); ``local-steps`` at ``s = 1`` on
quadratic clients that share one Hessian (any optima) with noise that does not depend on the iterate.  Otherwise
the two ends differ by ``O(η)`` at a fixed ``τ``; :attr:`ScalingRule.horizon` says over which ``τ`` that holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from fedsde._tolerances import INT_TOL
from fedsde._validate import choice, positive_float, positive_int
from fedsde.errors import FedsdeInputError


@dataclass(frozen=True)
class FedAvgConfig:
    """Hyper-parameters of one FedAvg run (full participation).

    Attributes
    ----------
    eta : float
        Client learning rate ``η``.
    local_steps : int
        Local SGD steps ``E`` per round.
    server_lr : float
        Actual server step ``s`` (``= h·η₀`` in seed 002's notation).
    rounds : int
        Communication rounds ``n``.
    clients : int or None
        Number of clients ``Q`` (needed by the ``clients`` rule).
    batch_size : int or None
        Minibatch size ``b`` of every client (needed by the ``batch`` rule).
    """

    eta: float
    local_steps: int
    server_lr: float
    rounds: int
    clients: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", positive_float("eta", self.eta))
        object.__setattr__(self, "local_steps", positive_int("local_steps", self.local_steps))
        object.__setattr__(self, "server_lr", positive_float("server_lr", self.server_lr))
        object.__setattr__(self, "rounds", positive_int("rounds", self.rounds))
        if self.clients is not None:
            object.__setattr__(self, "clients", positive_int("clients", self.clients))
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", positive_int("batch_size", self.batch_size))

    @property
    def tau_per_round(self) -> float:
        """``s·η·E``: SDE time ``τ`` elapsed in one round."""
        return self.server_lr * self.eta * self.local_steps

    @property
    def horizon(self) -> float:
        """``τ = n·s·η·E``: SDE time at the last round."""
        return self.rounds * self.tau_per_round

    def as_dict(self, *, keep: tuple[str, ...] = ()) -> dict:
        """``eta, local_steps, server_lr, rounds`` and those of ``clients``/``batch_size`` named in ``keep``."""
        d = asdict(self)
        return {k: v for k, v in d.items() if k not in ("clients", "batch_size") or k in keep}


@dataclass(frozen=True)
class ScalingRule:
    """A first-order scaling rule: each hyper-parameter is multiplied by ``κ`` to the given power.

    Attributes
    ----------
    name : str
        Registry name (``local-steps``, ``server-client``, ``clients``, ``batch``, ``client-lr``).
    change : str
        What it changes, in words.
    keeps : tuple of str
        The first-order invariants it keeps.
    powers : dict
        Exponent of ``κ`` per field of :class:`FedAvgConfig` (fields not named keep their value).
    breaks : str
        Where the first-order argument fails (higher-order terms it ignores).
    horizon : str
        Over which SDE times ``τ`` the ``O(η)`` agreement of the two ends lasts (empty for the naive changes).
    finite_population : bool
        The factor of every field but ``batch_size`` is the problem's ``g`` (:func:`fedsde.scaling.batch_rule.
        problem_batch_factor`), passed to :meth:`apply` as ``factor``, not ``κ``.
    """

    name: str
    change: str
    keeps: tuple[str, ...]
    powers: dict
    breaks: str
    horizon: str = ""
    finite_population: bool = False

    @property
    def changes(self) -> tuple[str, ...]:
        """Fields of :class:`FedAvgConfig` the rule changes."""
        return tuple(k for k, v in self.powers.items() if v != 0)

    def apply(self, config: FedAvgConfig, kappa: float, *, factor: float | None = None) -> FedAvgConfig:
        """The configuration at the other end of the rule.

        ``factor``: for a :attr:`finite_population` rule, the factor of the fields other than ``batch_size`` (``g``
        of :mod:`fedsde.scaling.batch_rule`, as :meth:`BatchFactor.applied` gives it for whole rounds; default
        ``κ``, the factor of minibatches drawn with replacement: a configuration alone does not say how its
        minibatches are drawn, :func:`fedsde.scaling.batch_rule.map_config` does it with the problem); refused for
        the other rules.

        Raises
        ------
        FedsdeInputError
            If ``κ <= 0``, if an integer field (``E``, ``n``, ``Q``, ``b``) would not stay a positive integer, if
            the rule needs ``clients``/``batch_size`` and ``config`` does not set it, or ``factor`` is given to a
            rule that scales by ``κ`` alone.
        """
        kappa = positive_float("kappa", kappa)
        if factor is not None and not self.finite_population:
            raise FedsdeInputError(f"factor={factor!r}: rule {self.name!r} scales by κ alone")
        g = kappa if factor is None else positive_float("factor", factor)
        new = {}
        for key, power in self.powers.items():
            value = getattr(config, key)
            if value is None:
                raise FedsdeInputError(f"rule={self.name!r}: needs {key} in the configuration (it scales {key})")
            scaled = value * (kappa if key == "batch_size" else g) ** power
            if key in ("local_steps", "rounds", "clients", "batch_size"):
                near = round(scaled)
                if near < 1 or abs(scaled - near) > INT_TOL * max(1.0, abs(scaled)):
                    op = "·" if power > 0 else "/"
                    fac = kappa if key == "batch_size" else g
                    raise FedsdeInputError(
                        f"kappa={float(kappa)!r}: rule {self.name!r} maps {key}={value} to {value}{op}{fac:g} = "
                        f"{scaled:.6g}, not a positive integer"
                    )
                scaled = int(near)
            new[key] = scaled
        return replace(config, **new)


#: where a rule's O(η) agreement lasts when it is not exact (see ``docs/scaling.md``, "Each rule's horizon")
_MANIFOLD = ("with a unique minimum the O(η) gap stays O(η) at every τ (the dynamics forget it at their contraction "
             "rate); where the minima form a manifold nothing pulls the ends back along it, the O(η) drift terms "
             "accumulate, and the horizon ends at τ ≪ 1/η (O(η⁻²) local steps)")

RULES: dict[str, ScalingRule] = {
    r.name: r
    for r in [
        ScalingRule(
            "local-steps", "E → κE, rounds → n/κ", ("temperature", "tau horizon"),
            {"local_steps": 1, "rounds": -1},
            "client drift: under heterogeneity the fixed point moves with ηE (seed 002's bias), and the "
            "O(η²E²) terms of the round mean grow with κ",
            "exact at s = 1 on quadratic clients with one Hessian (any optima); otherwise O(η) at fixed τ: "
            + _MANIFOLD + ". It changes ηE, and with it the slow drift of local SGD near a manifold of minima "
            "(Gu, Lyu, Huang & Arora 2023: a ∇³F term that grows with ηE)",
        ),
        ScalingRule(
            "server-client", "s → κs, η → η/κ", ("temperature", "tau per round", "tau horizon"),
            {"server_lr": 1, "eta": -1},
            "large server steps: the round map I − sB loses contraction once s·η·E·λ_max is no longer small "
            "(and diverges at s·B ≈ 2); for κ < 1 the client step η/κ grows towards η·λ_max = 2",
            "exact at E = 1 for any loss (the round depends on s·η only); for E > 1 O(η) at fixed τ: "
            + _MANIFOLD + ". It changes ηE to ηE/κ, like local-steps",
        ),
        ScalingRule(
            "clients", "Q → κQ (clients split/copied, weights p_k/κ), s → κs, rounds → n/κ",
            ("temperature", "tau horizon"), {"clients": 1, "server_lr": 1, "rounds": -1},
            "large server steps: κ·s·η·E·λ_max grows with κ; on data the split also changes each client's "
            "finite-population factor 1/b − 1/N_k and the heterogeneity",
            "O(η) at fixed τ (never exact: the O(s·η²E²) terms grow with κs): " + _MANIFOLD,
        ),
        ScalingRule(
            "batch", "b → κb, s → g·s, rounds → n/g (g = f(b)/f(κb), f(b) = (n_k − b)/(b(n_k − 1)) without "
            "replacement; g = κ with replacement)", ("temperature", "tau horizon"),
            {"batch_size": 1, "server_lr": 1, "rounds": -1},
            "large server steps as for clients (g·s grows faster than κs without replacement); for clients of "
            "different sizes one g keeps only tr T(w*), not the temperature matrix (fedsde.scaling.batch_rule)",
            "O(η) at fixed τ as for clients: " + _MANIFOLD, finite_population=True,
        ),
        ScalingRule(
            "client-lr", "Q → κQ (clients split/copied, weights p_k/κ), η → κη, rounds → n/κ",
            ("temperature", "tau horizon"), {"clients": 1, "eta": 1, "rounds": -1},
            "client drift: the client step κη changes ηE, so under heterogeneity the fixed point moves (seed 002's "
            "bias); the client step approaches η·λ_max = 2 as κ grows",
            "O(η) at fixed τ on homogeneous clients (never exact: the client step changes): " + _MANIFOLD
            + ". It changes ηE to κηE, like local-steps",
        ),
    ]
}


#: the linear batch rule (κ on the server step whatever the sampling): exact with replacement; without replacement
#: its temperature is off by ``f(κb)·κ/f(b)``, an O(1) error (``fedsde scaling --rule batch-linear``)
BATCH_LINEAR = ScalingRule(
    "batch-linear", "b → κb, s → κs, rounds → n/κ", ("temperature", "tau horizon"),
    {"batch_size": 1, "server_lr": 1, "rounds": -1},
    "large server steps as for clients; the minibatch covariance is ∝ 1/b − 1/N_k, not 1/b, so the "
    "temperature is kept only while b ≪ N_k (use batch, which corrects for it)",
    "O(η) at fixed τ as for clients, with replacement: " + _MANIFOLD,
)

#: every rule by name: :data:`RULES` and the linear batch rule kept for comparison
ALL_RULES: dict[str, ScalingRule] = {**RULES, BATCH_LINEAR.name: BATCH_LINEAR}


#: for each rule, the naive change a practitioner might make instead: same horizon τ, temperature divided by κ
NAIVE: dict[str, ScalingRule] = {
    r.name: r
    for r in [
        ScalingRule("local-steps", "E → κE, η → η/κ (same local progress ηE), rounds kept", ("tau horizon",),
                    {"local_steps": 1, "eta": -1}, "divides the temperature by κ"),
        ScalingRule("server-client", "η → η/κ, rounds → κn (server step kept)", ("tau horizon",),
                    {"eta": -1, "rounds": 1}, "divides the temperature by κ"),
        ScalingRule("clients", "Q → κQ with s and rounds kept", ("tau horizon",), {"clients": 1},
                    "divides the temperature by κ"),
        ScalingRule("batch", "b → κb with s and rounds kept", ("tau horizon",), {"batch_size": 1},
                    "divides the temperature by κ"),
        ScalingRule("client-lr", "Q → κQ with η and rounds kept", ("tau horizon",), {"clients": 1},
                    "divides the temperature by κ"),
    ]
}


NAIVE[BATCH_LINEAR.name] = replace(NAIVE["batch"], name=BATCH_LINEAR.name)


def get_rule(name: str | ScalingRule) -> ScalingRule:
    """The rule registered under ``name`` (or ``name`` itself if it is a rule)."""
    if isinstance(name, ScalingRule):
        return name
    return ALL_RULES[choice("rule", name, tuple(ALL_RULES))]


def apply_rule(config: FedAvgConfig, rule: str | ScalingRule, kappa: float, *,
               factor: float | None = None) -> FedAvgConfig:
    """``get_rule(rule).apply(config, kappa, factor=factor)``: the scaled configuration."""
    return get_rule(rule).apply(config, kappa, factor=factor)


def check_client_step(eta: float, max_curvature: float, *, which: str) -> None:
    """Raise when ``η·λ_max ≥ 2`` (local SGD expands): the rule cannot apply at that end."""
    if eta * max_curvature >= 2.0:
        raise FedsdeInputError(
            f"{which}: eta*max_eig(U_k) = {eta:g}*{max_curvature:.6g} = {eta * max_curvature:.4g} >= 2: "
            "local SGD diverges"
        )
