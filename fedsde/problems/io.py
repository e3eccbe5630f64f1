"""Load and save problems as TOML or JSON: quadratic clients (keys ``U``, ``a``, ``Sigma``, ``p``; optional ``name``,
``label_distributions`` and ``kind = "quadratic"``) or data problems (``kind = "classification"``, see
:mod:`fedsde.problems.data_files`; ``kind = "regression"``, least squares on a CSV file or a packaged panel, see
:mod:`fedsde.problems.regression.files`; ``kind = "module"``, a user's own ``nn.Module`` on an npz of rows, see
:mod:`fedsde.problems.module.files`).

Shapes follow :meth:`fedsde.problems.QuadraticProblem.from_arrays`: full matrices, per-client diagonals,
or scalars when d = 1.  ``p`` may be omitted (uniform weights).  Example (TOML, Q = 3, d = 1)::

    U = [1.0, 2.0, 4.0]
    a = [-1.0, 0.0, 2.0]
    Sigma = [0.5, 1.0, 2.0]
    p = [1, 1, 1]

``label_distributions`` (optional) gives each client's label frequencies, Q rows of C non-negative numbers (counts
are fine: rows are normalised), for ``--aggregator feddisco``::

    label_distributions = [[8, 2], [5, 5], [1, 9]]
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import tomli_w

from fedsde._atomic import atomic_write_text
from fedsde._io import read_text
from fedsde.errors import FedsdeInputError
from fedsde.problems._file_keys import _Keys
from fedsde.problems.classification.problem import ClassificationProblem
from fedsde.problems.quadratic.problem import QuadraticProblem

if TYPE_CHECKING:
    from fedsde.problems.regression.problem import RegressionProblem

_KEYS = ("U", "a", "Sigma", "p", "name", "label_distributions")
KINDS = ("quadratic", "classification", "regression", "module")


def problem_from_dict(data: dict, *, source: str = "problem", base_dir=None,
                      population: bool = False) -> QuadraticProblem | ClassificationProblem | RegressionProblem:
    """Build a :class:`QuadraticProblem` from a dict with keys ``U, a, Sigma`` (optional ``p``, ``name``,
    ``label_distributions``, ``kind = "quadratic"``), a :class:`ClassificationProblem` from a dict with
    ``kind = "classification"`` (:func:`fedsde.problems.data_files.data_problem_from_dict`), or a
    :class:`~fedsde.problems.regression.problem.RegressionProblem` from one with ``kind = "regression"``
    (:func:`fedsde.problems.regression.files.regression_problem_from_dict`; a relative ``data`` path starts at
    ``base_dir``, default the working directory).  ``population=True``: the caller takes a
    :class:`~fedsde.problems.populations.base.PopulationProblem` (clients produced on demand) where the file asks for
    one (:mod:`fedsde.problems.data_files`, key ``population``); otherwise such a file gives the materialised
    problem."""
    if not isinstance(data, dict):
        raise FedsdeInputError(f"{source}: must be a table/object with keys U, a, Sigma, p")
    if "kind" in data:
        kind = _Keys(data, source).choice("kind", KINDS)
        if kind == "classification":
            from fedsde.problems.data_files import data_problem_from_dict

            return data_problem_from_dict(data, source=source, population=population)
        if kind == "regression":
            from fedsde.problems.regression.files import regression_problem_from_dict

            return regression_problem_from_dict(data, source=source, base_dir=base_dir, population=population)
        if kind == "module":
            from fedsde.problems.module.files import module_problem_from_dict

            return module_problem_from_dict(data, source=source, base_dir=base_dir, population=population)
        data = {k: v for k, v in data.items() if k != "kind"}
    missing = [k for k in ("U", "a", "Sigma") if k not in data]
    if missing:
        raise FedsdeInputError(f"{source}: missing key(s) {', '.join(missing)} (need U, a, Sigma; p optional)")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise FedsdeInputError(f"{source}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(_KEYS)})")
    return QuadraticProblem.from_arrays(
        data["U"], data["a"], data["Sigma"], data.get("p"), name=str(data.get("name", "")),
        label_distributions=data.get("label_distributions"),
    )


#: keys of data-problem files that a caller may set over the file's (the command line's --batch-size, --l2)
OVERRIDABLE = ("batch_size", "l2")


def load_problem(path: str | os.PathLike, *, population: bool = False,
                 overrides: dict | None = None) -> QuadraticProblem | ClassificationProblem | RegressionProblem:
    """Read a problem from a ``.toml`` or ``.json`` file (format chosen by the suffix): quadratic clients, or a
    data problem when the file has ``kind = "classification"`` (:mod:`fedsde.problems.data_files`) or
    ``kind = "regression"`` (:mod:`fedsde.problems.regression.files`; its ``data`` path is relative to the file).
    ``population``: as :func:`problem_from_dict` (commands that sample participants pass True).  ``overrides``:
    values of :data:`OVERRIDABLE` keys that replace the file's (checked as the file's are); refused in one line for
    quadratic clients, which have neither minibatches nor a ridge term."""
    p = Path(path)
    if not p.is_file():
        raise FedsdeInputError(f"problem file {str(p)!r}: does not exist or is not a file")
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise FedsdeInputError(f"problem file {str(p)!r}: suffix must be .toml or .json")
    text = read_text(p, "problem file")  # one line naming the file and the offset of a byte that is not UTF-8
    try:
        data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FedsdeInputError(f"problem file {str(p)!r}: cannot be parsed ({exc})") from None
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if overrides:
        bad = sorted(set(overrides) - set(OVERRIDABLE))
        if bad:
            raise FedsdeInputError(f"overrides: unknown key(s) {', '.join(bad)} (allowed: {', '.join(OVERRIDABLE)})")
        given = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        if not isinstance(data, dict) or data.get("kind", "quadratic") == "quadratic":
            raise FedsdeInputError(f"{given}: problem file {str(p)!r} holds quadratic clients, which have no "
                                   "minibatches and no ridge term (their gradient noise is Sigma_k); these apply to "
                                   "data problems (kind = \"classification\", \"regression\", \"module\")")
        data = {**data, **overrides}
    return problem_from_dict(data, source=f"problem file {str(p)!r}", base_dir=p.parent, population=population)


def save_problem(problem: QuadraticProblem, path: str | os.PathLike, *, compact: bool = True) -> Path:
    """Write ``problem`` as TOML or JSON (by suffix), atomically (no partial file on failure)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if not hasattr(problem, "to_dict"):
        raise FedsdeInputError(f"problem: a {type(problem).__name__} is described by its problem file (data and "
                               "keys), not saved as arrays; save_problem writes quadratic problems")
    data = problem.to_dict(compact=compact)
    if suffix == ".toml":
        text = tomli_w.dumps(data)
    elif suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        raise FedsdeInputError(f"path {str(p)!r}: suffix must be .toml or .json")
    return atomic_write_text(p, text)
