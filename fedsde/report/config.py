"""Experiment configurations of ``fedsde reproduce``: TOML files shipped in ``fedsde/configs``.

A configuration has a ``[run]`` table (seed, device, problem) and one table per figure (``[F1]`` … ``[F19]``).
``--quick`` starts from ``quick.toml``, otherwise ``full.toml``; ``--config FILE`` overrides fields of that base
(only the fields it names).  Every field is validated against the schema below, with an error naming the field,
the value and the constraint.
"""

from __future__ import annotations

import copy
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fedsde._io import read_text
from fedsde._validate import choice
from fedsde.errors import FedsdeInputError


@dataclass(frozen=True)
class Field:
    """Schema of one configuration field."""

    kind: str  # "int", "float", "str", "bool", "ints", "floats"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_min: bool = False
    choices: tuple[str, ...] | None = None
    help: str = ""

    def check(self, where: str, value: Any) -> Any:
        if self.kind in ("ints", "floats"):
            if not isinstance(value, list) or not value:
                raise FedsdeInputError(f"{where}={value!r}: must be a non-empty list of numbers")
            scalar = Field(self.kind[:-1], self.minimum, self.maximum, self.exclusive_min)
            return [scalar.check(f"{where}[{i}]", v) for i, v in enumerate(value)]
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise FedsdeInputError(f"{where}={value!r}: must be true or false")
            return value
        if self.kind == "str":
            if not isinstance(value, str):
                raise FedsdeInputError(f"{where}={value!r}: must be a string")
            return choice(where, value, self.choices) if self.choices else value
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise FedsdeInputError(f"{where}={value!r}: must be an integer")
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FedsdeInputError(f"{where}={value!r}: must be a number")
            value = float(value)
            if not math.isfinite(value):
                raise FedsdeInputError(f"{where}={value!r}: must be finite")
        if self.minimum is not None:
            bad = value <= self.minimum if self.exclusive_min else value < self.minimum
            if bad:
                op = ">" if self.exclusive_min else ">="
                raise FedsdeInputError(f"{where}={value!r}: must be {op} {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise FedsdeInputError(f"{where}={value!r}: must be <= {self.maximum:g}")
        return value


POS = Field("float", 0.0, exclusive_min=True)
POS_INT = Field("int", 1)
POS_FLOATS = Field("floats", 0.0, exclusive_min=True)
POS_INTS = Field("ints", 1)
UNIT = Field("float", 0.0, 1.0, exclusive_min=True)

#: the schema of every table; figures read only what is listed here
SCHEMA: dict[str, dict[str, Field]] = {
    "run": {
        "seed": Field("int", 0),
        "device": Field("str"),
        "problem": Field("str", help="'paper_table' or the path of a problem file"),
    },
    "F1": {"eta": POS, "local_steps": POS_INT, "server_lr": POS, "rounds": POS_INT, "replicates": POS_INT,
           "paths": POS_INT, "w0": Field("float")},
    "F2": {"etas": POS_FLOATS, "Es": POS_INTS, "replicates": POS_INT},
    "F3": {"etas": POS_FLOATS, "Es": POS_INTS, "replicates": POS_INT},
    "F4": {"eta": POS, "local_steps": POS_INT, "copies": POS_INTS, "replicates": POS_INT},
    "F5": {"etas": POS_FLOATS, "Es": POS_INTS},
    "F6": {"eta": POS, "local_steps": POS_INT, "rounds": POS_INT, "w0": Field("float")},
    "F7": {"Qs": POS_INTS, "eta": POS, "local_steps": POS_INT, "replicates": POS_INT},
    "F8": {"scale": POS},
    "F9": {"eta_cs": POS_FLOATS, "horizon": POS, "local_steps": POS_INT, "h": POS},
    "F10": {"scale": POS},
    "F11": {"rounds": POS_INT, "seeds": POS_INT, "clients": POS_INT},
    "F12": {"eta": POS, "local_steps": POS_INT, "horizon": POS, "levels": POS_INT},
    "F13": {"clients": POS_INT, "batch_size": POS_INT, "hidden": POS_INT, "rounds": POS_INT,
            "replicates": Field("int", 2), "ells": POS_INTS, "record_every": POS_INT, "tolerance": POS, "eta": POS,
            "local_steps": POS_INT, "server_lr": POS, "bad_eta": POS, "bad_local_steps": POS_INT,
            "bad_server_lr": POS, "accuracy_tolerance": POS},
    "F14": {"clients": POS_INT, "batch_size": POS_INT, "eta": POS, "local_steps": POS_INT, "server_lr": POS,
            "rounds": POS_INT, "replicates": Field("int", 2), "ells": POS_INTS, "mc_substeps": POS_INTS,
            "inner_samples": POS_INT, "record_every": POS_INT},
    "F15": {"eta": POS, "local_steps": POS_INT, "server_lr": POS, "rounds": POS_INT, "kappas": POS_FLOATS,
            "rate_etas": POS_FLOATS, "data_eta": POS, "data_local_steps": POS_INT, "data_rounds": POS_INT,
            "data_replicates": Field("int", 2), "data_kappa": POS_INT, "data_clients": POS_INT,
            "data_batch_size": POS_INT, "data_hidden": POS_INT},
    "F16": {"batch_size": POS_INT, "sampling": Field("str", choices=("without-replacement", "with-replacement")),
            "eta": POS, "E": POS_INT, "E_grid": POS_INTS, "eta_grid": POS_FLOATS, "replicates": Field("int", 2),
            "burn_in_tol": UNIT, "validity_server_lrs": POS_FLOATS, "validity_rounds": POS_INT,
            "validity_replicates": Field("int", 2), "tolerance": POS},
    "F17": {"problem": Field("str", help="a problem file, e.g. examples/models/digits_cnn.toml"), "eta": POS,
            "local_steps": POS_INT, "server_lrs": POS_FLOATS, "rounds": POS_INT, "replicates": Field("int", 2),
            "ells": POS_INTS, "record_every": POS_INT, "tolerance": POS, "accuracy_tolerance": POS},
    "F18": {"eta": POS, "server_lr": POS, "horizon": POS, "sim_replicates": Field("int", 2), "weak_h": POS,
            "weak_t": POS, "levels": Field("int", 2), "adam_server_lr": POS, "adam_rounds": POS_INT,
            "adam_replicates": Field("int", 2), "adam_substeps": POS_INT, "adam_max_substeps": POS_INT,
            "adam_ref_max_substeps": POS_INT, "adam_ks": POS_INTS},
    "F19": {"eta": POS, "local_steps": POS_INT, "rounds": POS_INT, "server_lr": POS, "levels": Field("int", 3),
            "w0": Field("float")},
}

FIGURE_IDS = tuple(k for k in SCHEMA if k != "run")


def _load_toml(path: Path, source: str) -> dict:
    try:
        return tomllib.loads(read_text(path, f"{source}: config"))
    except FileNotFoundError:
        raise FedsdeInputError(f"{source}: file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise FedsdeInputError(f"{source}: {str(path)!r} is not valid TOML ({exc})") from None


def builtin_config(name: str) -> dict:
    """The shipped configuration ``quick`` or ``full``."""
    with resources.as_file(resources.files("fedsde") / "configs" / f"{name}.toml") as p:
        return _load_toml(p, f"built-in config {name!r}")


def validate(cfg: dict, *, source: str = "config", partial: bool = False) -> dict:
    """Check every table and field against :data:`SCHEMA`; with ``partial``, missing fields are allowed."""
    out: dict = {}
    for table, fields in cfg.items():
        if table not in SCHEMA:
            raise FedsdeInputError(f"{source}: unknown table [{table}] (allowed: {', '.join(SCHEMA)})")
        if not isinstance(fields, dict):
            raise FedsdeInputError(f"{source}: [{table}] must be a table")
        spec = SCHEMA[table]
        out[table] = {}
        for key, value in fields.items():
            if key not in spec:
                raise FedsdeInputError(f"{source}: unknown field {table}.{key} (allowed: {', '.join(spec)})")
            out[table][key] = spec[key].check(f"{table}.{key}", value)
        if not partial:
            missing = [k for k in spec if k not in fields]
            if missing:
                raise FedsdeInputError(f"{source}: [{table}] is missing field(s) {', '.join(missing)}")
    if not partial:
        missing_tables = [t for t in SCHEMA if t not in cfg]
        if missing_tables:
            raise FedsdeInputError(f"{source}: missing table(s) {', '.join(missing_tables)}")
    return out


def load_config(*, quick: bool, path: str | Path | None = None) -> dict:
    """The base configuration (quick or full) with the fields of ``path`` (if given) laid over it."""
    base = validate(builtin_config("quick" if quick else "full"), source="built-in config")
    if path is None:
        return base
    user = validate(_load_toml(Path(path), "--config"), source=f"--config {str(path)!r}", partial=True)
    merged = copy.deepcopy(base)
    for table, fields in user.items():
        merged[table].update(fields)
    return merged


def parse_only(text: str | None) -> tuple[str, ...]:
    """``"F3,F5"`` → ``("F3", "F5")`` (validated); ``None`` → every figure."""
    if text is None:
        return FIGURE_IDS
    ids = tuple(s.strip().upper() for s in text.split(",") if s.strip())
    bad = [i for i in ids if i not in FIGURE_IDS]
    if bad or not ids:
        raise FedsdeInputError(f"--only={text!r}: unknown figure id(s) {', '.join(bad) or '(none)'}; "
                               f"choose from {', '.join(FIGURE_IDS)}")
    return ids


#: figures computed on the configuration's problem, which must then have quadratic clients
QUADRATIC_FIGURES = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F12")
#: most rounds a figure's exact path may take (F9: horizon/h, F12: 2^(levels+1)), to refuse a mistyped field
MAX_FIGURE_ROUNDS = 1_000_000


def check_constraints(cfg: dict, only, problem) -> None:
    """Every cross-field constraint of the figures ``only`` with the configuration's ``problem``, checked before
    anything runs; the first violation raises a one-line :class:`FedsdeInputError` naming the fields and values.

    * every ``(eta, local_steps[, server_lr])`` a figure runs: local SGD must not expand (``η·λ_max(U_k) < 2``) and
      the server recursion of the mean must not grow (``ρ(I − s·B) <= 1``;
      :func:`fedsde.exact.stability.known_divergence`);
    * F2/F3/F4 need a stationary law at every grid point (``ρ(I − B) < 1``), F5 at one point at least;
    * F1: the printed and corrected SDEs are integrated by Euler with step ``h = eta``, which must be stable;
    * F13/F14: ``ells`` strictly increasing, starting at 1 (FedAvg) with at least one (F13) or two (F14: the
      reference is the Richardson limit of the two largest) larger values; ``record_every <= rounds``;
    * F17: ``ells`` as F14's; a ``problem`` file other than the default must exist (the default, from the source
      tree, is looked for when the figure runs, so that a missing ``examples/`` fails that figure only);
    * F16 (its own data, Grunfeld): at every ``(eta, E_grid)`` and ``(eta_grid, E)`` point local SGD must not
      expand and the least-squares chain must have a stationary law; ``batch_size`` at most a firm's 20 years;
    * covariances need ``replicates``/``paths`` >= 2; F6 needs a diagonal problem; F7's ``Qs`` are multiples of the
      problem's Q; F9's ``eta_cs`` are checked on its own Section 4 problem; F9 and F12 at most
      :data:`MAX_FIGURE_ROUNDS` rounds.
    """
    import numpy as np

    from fedsde.exact.stability import known_divergence

    def diverges(where: str, pb, eta, E, s=1.0) -> None:
        why = known_divergence(pb, float(eta), int(E), float(s))
        if why:
            raise FedsdeInputError(f"{where}: {why[0]}")

    def stationary(where: str, pb, eta, E, raise_: bool = True) -> bool:
        from fedsde.exact import round_law

        rho = round_law(pb, float(eta), int(E), 1.0, warn=False).spectral_radius
        if rho >= 1.0 and raise_:
            raise FedsdeInputError(f"{where}: the chain has no stationary law (spectral radius of I − B is {rho:.6g} "
                                   ">= 1 with server step 1), which this figure needs")
        return rho < 1.0

    from fedsde.problems.quadratic.problem import QuadraticProblem

    for fid in only:
        t = cfg.get(fid, {})
        if fid in QUADRATIC_FIGURES and not isinstance(problem, QuadraticProblem):
            raise FedsdeInputError(f"{fid}: needs quadratic clients, but run.problem={cfg['run']['problem']!r} is a "
                                   f"data problem; choose the figures with --only (these need a quadratic problem: "
                                   f"{', '.join(QUADRATIC_FIGURES)})")
        for key in ("replicates", "paths"):
            if key in t and t[key] < 2:
                raise FedsdeInputError(f"{fid}.{key}={t[key]}: must be >= 2 (a covariance needs two samples)")
        if fid == "F9":
            from fedsde.theory.problems import sec4_quadratic

            sec4 = sec4_quadratic()
            for i, eta_c in enumerate(t["eta_cs"]):
                diverges(f"F9.eta_cs[{i}]={eta_c:g} (Section 4 problem, F9.local_steps={t['local_steps']})", sec4,
                         eta_c, t["local_steps"])
            rounds = round(t["horizon"] / t["h"]) + 1
            if rounds > MAX_FIGURE_ROUNDS:
                raise FedsdeInputError(f"F9.horizon={t['horizon']:g}, F9.h={t['h']:g}: {rounds} rounds; at most "
                                       f"{MAX_FIGURE_ROUNDS}")
            continue
        if "eta" in t and "local_steps" in t and fid != "F17":  # F17 runs on its own problem
            s = t.get("server_lr", 1.0)
            diverges(f"{fid}.eta={t['eta']:g}, {fid}.local_steps={t['local_steps']}"
                     + (f", {fid}.server_lr={s:g}" if "server_lr" in t else ""), problem, t["eta"], t["local_steps"], s)
        if "etas" in t and "Es" in t:
            ok = 0
            for eta in t["etas"]:
                for E in t["Es"]:
                    where = f"{fid}.etas ∋ {eta:g}, {fid}.Es ∋ {E}"
                    diverges(where, problem, eta, E)
                    ok += stationary(where, problem, eta, E, raise_=fid != "F5")
            if not ok:
                raise FedsdeInputError(f"{fid}.etas={t['etas']}, {fid}.Es={t['Es']}: no grid point has a stationary "
                                       "law; the heatmap would be empty")
        if fid == "F4":
            stationary(f"F4.eta={t['eta']:g}, F4.local_steps={t['local_steps']}", problem, t["eta"], t["local_steps"])
        if fid == "F1":
            from fedsde.sde.integrate import _check_euler_stability

            for variant in ("paper", "corrected"):
                try:
                    _check_euler_stability(problem, variant, t["eta"], t["local_steps"], t["server_lr"], t["eta"], 1)
                except FedsdeInputError as exc:
                    raise FedsdeInputError(f"F1.eta={t['eta']:g}, F1.server_lr={t['server_lr']:g}: the {variant} SDE "
                                           f"is integrated with one Euler step per round (h = eta): {exc}") from None
        if fid == "F6" and not problem.is_diagonal:
            raise FedsdeInputError("F6: uses the scalar formulas of Thm 6.3 and needs a diagonal problem (run.problem "
                                   f"{problem.name or ''!r} has full matrices); leave F6 out with --only")
        if fid == "F7":
            bad = [q for q in t["Qs"] if q % problem.Q]
            if bad:
                raise FedsdeInputError(f"F7.Qs={t['Qs']}: every Q must be a multiple of the problem's {problem.Q} "
                                       f"clients (not {bad})")
        if fid == "F15" and t["data_rounds"] % t["data_kappa"]:
            raise FedsdeInputError(f"F15.data_rounds={t['data_rounds']}, F15.data_kappa={t['data_kappa']}: the rules "
                                   "map rounds n → n/κ on digits, so data_rounds must be a multiple of data_kappa")
        if fid in ("F13", "F14", "F17"):
            _check_svag_ells(fid, t)
        if fid == "F17":
            _check_f17(t)
        if fid == "F16":
            _check_f16(t)
        if fid == "F19" and t["rounds"] * 2 ** (t["levels"] - 1) > MAX_FIGURE_ROUNDS:
            raise FedsdeInputError(f"F19.rounds={t['rounds']}, F19.levels={t['levels']}: the smallest η needs "
                                   f"{t['rounds'] * 2 ** (t['levels'] - 1)} rounds; at most {MAX_FIGURE_ROUNDS}")
        if fid == "F12" and 2 ** (t["levels"] + 1) > MAX_FIGURE_ROUNDS:
            raise FedsdeInputError(f"F12.levels={t['levels']}: the finest step needs {2 ** (t['levels'] + 1)} rounds; "
                                   f"at most {MAX_FIGURE_ROUNDS} (levels <= {int(np.log2(MAX_FIGURE_ROUNDS)) - 1})")


def _check_svag_ells(fid: str, t: dict) -> None:
    """F13/F14: the SVAG parameters and the recording grid (see :func:`check_constraints`)."""
    import itertools

    ells = [int(e) for e in t.get("ells", [])]
    need = 2 if fid == "F13" else 3
    why = ("FedAvg is ℓ = 1 and the SDE's value on a data problem is the Richardson limit of the two largest ℓ"
           if fid == "F13" else "ℓ = 1 is FedAvg and the SDE reference is the Richardson limit of the two largest ℓ")
    if len(ells) < need or ells[0] != 1 or any(b <= a for a, b in itertools.pairwise(ells)):
        raise FedsdeInputError(f"{fid}.ells={ells}: must be strictly increasing, start at 1 and have at least {need} "
                               f"values ({why}), e.g. [1, 2, 4, 8]")
    if "record_every" in t and "rounds" in t and t["record_every"] > t["rounds"]:
        raise FedsdeInputError(f"{fid}.record_every={t['record_every']}, {fid}.rounds={t['rounds']}: record_every "
                               "must be at most rounds")


def _check_f17(t: dict) -> None:
    """F17: a configured problem file exists (see :func:`check_constraints`)."""
    from fedsde.report.figures.f17_module_validity import DEFAULT_PROBLEM, problem_path

    if t["problem"] != DEFAULT_PROBLEM:
        problem_path(t["problem"])


def _check_f16(t: dict) -> None:
    """F16: every point of its scans on Grunfeld has a stationary law (see :func:`check_constraints`)."""
    from fedsde.errors import NoStationaryLawError
    from fedsde.exact import least_squares_round_law, least_squares_stationary_law
    from fedsde.problems import regression_problem_from_dict

    try:
        pb = regression_problem_from_dict({"kind": "regression", "dataset": "grunfeld", "batch_size": t["batch_size"],
                                           "sampling": t["sampling"], "standardise": True}, source="F16")
    except FedsdeInputError as exc:
        raise FedsdeInputError(f"F16.batch_size={t['batch_size']}: {exc}") from None
    lam = float(pb.max_curvature().max())
    grid = [(float(t["eta"]), int(E)) for E in t["E_grid"]] + [(float(eta), int(t["E"])) for eta in t["eta_grid"]]
    for eta, E in grid:
        where = f"F16: eta={eta:g}, E={E}"
        if eta * lam >= 2.0:
            raise FedsdeInputError(f"{where}: eta*max_eig(U_k) = {eta * lam:.4g} >= 2 on Grunfeld: local SGD diverges; "
                                   f"need eta < {2.0 / lam:.4g}")
        try:
            least_squares_stationary_law(pb, eta, E)
        except NoStationaryLawError as exc:
            raise FedsdeInputError(f"{where}: {exc}; F16 needs a stationary law at every point") from None
    for s in t["validity_server_lrs"]:
        rho = least_squares_round_law(pb, float(t["eta"]), int(t["E"]), float(s)).spectral_radius
        if rho > 1.0:
            raise FedsdeInputError(f"F16.validity_server_lrs ∋ {s:g}: the server recursion of the mean has spectral "
                                   f"radius {rho:.6g} > 1 (eta={t['eta']:g}, E={t['E']}): the chain diverges")
