"""Measures of the package's shape, read from its own source (no imports of fedsde are executed).

Used by ``tests/test_architecture.py`` and runnable as a script (``python tests/architecture.py``) to print the
figures: the import graph between modules with its circles, the imports that run back up the declared layers,
functions with many positional parameters, comparisons with aggregator name strings, and module sizes.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fedsde"

#: The layers, lowest first.  A "room" is a top-level package or module of fedsde; an import from a room on a
#: lower floor into one on a higher floor runs back up.  Rooms on one floor may import each other (no circle).
FLOORS: list[set[str]] = [
    {"fedsde", "errors", "_atomic", "_tolerances", "_stats", "_memory", "_validate", "_samples", "_io", "_compat",
     "_threads", "_progress", "_output", "params"},
    {"problems"},
    {"clients"},
    {"aggregators"},
    {"sim", "exact"},
    {"sde", "symbolic"},
    {"compare", "validity"},
    {"theory", "scaling"},
    {"sweep", "maps"},
    {"report"},
    {"_cli"},
    {"cli"},
]

#: The floors inside ``fedsde.problems``, lowest first: one package per idea (quadratic clients, classification on
#: labelled data, populations produced on demand, least squares, a user's module), with the file readers that compose
#: them and the metrics above the kinds they read.  A "sub-room" is the name after ``fedsde.problems.``.
PROBLEM_FLOORS: list[set[str]] = [
    {"_file_keys", "_old_homes", "estimates", "evaluation"},
    {"quadratic"},
    {"classification"},
    {"populations"},
    {"regression"},
    {"data_files", "metrics"},
    {"module"},
    {"io"},
    {"__init__"},
]

#: Names of aggregators; a comparison of a string with one of these is dispatch on a name.
AGGREGATOR_NAMES = {
    "fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedprox", "scaffold", "fednova", "feddisco",
    "fedaware",
}


def modules() -> dict[str, Path]:
    """Dotted module name -> path for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module a dotted import names (a package, a module, or an attribute of one)."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the fedsde modules it imports (top level, in functions, under TYPE_CHECKING, via importlib)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base]) if base else ".".join(anchor)
                targets = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call):
                f = node.func
                fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if fname == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                    targets = [str(node.args[0].value)]
            for t in targets:
                if not t.startswith("fedsde"):
                    continue
                r = _resolve(t, mods)
                if r is not None and r != mod and r != "fedsde":
                    graph[mod].add(r)
    return graph


def room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def module_cycles() -> list[list[str]]:
    """Circles between modules (``from pkg import submodule`` counts as an import of the submodule only)."""
    return cycles(import_graph())


def room_graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = defaultdict(set)
    for mod, deps in import_graph().items():
        for d in deps:
            if room(d) != room(mod):
                g[room(mod)].add(room(d))
    return g


def floor_of(r: str) -> int:
    for i, floor in enumerate(FLOORS):
        if r in floor:
            return i
    raise KeyError(f"room {r!r} has no floor in tests/architecture.py FLOORS")


def up_imports() -> list[tuple[str, str]]:
    """(module, imported module) pairs where the import runs from a lower floor to a higher one."""
    out = []
    for mod, deps in import_graph().items():
        for d in deps:
            if room(d) != room(mod) and floor_of(room(d)) > floor_of(room(mod)):
                out.append((mod, d))
    return sorted(out)


def problem_room(mod: str) -> str:
    """The sub-room of a module of ``fedsde.problems`` (``__init__`` for the package itself)."""
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def problem_up_imports() -> list[tuple[str, str]]:
    """(module, imported module) pairs inside ``fedsde.problems`` that run from a lower floor of
    :data:`PROBLEM_FLOORS` to a higher one, or touch a sub-room that has no floor."""

    def floor(r: str) -> int:
        for i, f in enumerate(PROBLEM_FLOORS):
            if r in f:
                return i
        return len(PROBLEM_FLOORS) + 1  # unknown: reported by every import that touches it

    out = []
    for mod, deps in import_graph().items():
        if room(mod) != "problems":
            continue
        for d in deps:
            a, b = problem_room(mod), problem_room(d)
            if room(d) == "problems" and a != b and (floor(b) >= floor(a) or floor(a) > len(PROBLEM_FLOORS)):
                out.append((mod, d))
    return sorted(out)


def positional_heavy(limit: int = 8) -> list[tuple[str, int, str, int]]:
    """Functions with more than ``limit`` positional parameters (self/cls excluded): (file, line, name, count)."""
    out = []
    for path in modules().values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                pos = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if len(pos) > limit:
                    out.append((str(path.relative_to(ROOT)), node.lineno, node.name, len(pos)))
    return out


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Every parameter of a function (``self``/``cls`` excluded), ``*args`` and ``**kwargs`` counting as one each."""
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def wide_functions(limit: int = 12) -> list[tuple[str, int, str, int]]:
    """Public functions and methods (name not starting with ``_``) with more than ``limit`` parameters, all kinds
    counted (:func:`parameter_count`): (file, line, name, count).  Values of :mod:`fedsde.params` group what
    travels together."""
    out = []
    for path in modules().values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                n = parameter_count(node)
                if n > limit:
                    out.append((str(path.relative_to(ROOT)), node.lineno, node.name, n))
    return out


def name_comparisons() -> list[tuple[str, int, str]]:
    """Comparisons (==, !=, in) of anything with an aggregator's name string, outside fedsde/aggregators/ and
    the figures' labels (fedsde/report/)."""
    out = []
    for mod, path in modules().items():
        if room(mod) in ("aggregators", "report"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            strings = []
            for o in operands:
                if isinstance(o, ast.Constant) and isinstance(o.value, str):
                    strings.append(o.value)
                elif isinstance(o, ast.Tuple | ast.Set | ast.List):
                    strings += [e.value for e in o.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            hits = [s for s in strings if s.lower() in AGGREGATOR_NAMES]
            if hits:
                out.append((str(path.relative_to(ROOT)), node.lineno, ",".join(hits)))
    return out


def module_sizes() -> dict[str, int]:
    return {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in modules().values()}


def main() -> None:
    mc = module_cycles()
    print(f"module circles: {len(mc)}")
    for c in mc:
        print(f"  {len(c)} modules: {', '.join(c)}")
    rc = cycles(room_graph())
    print(f"room circles: {len(rc)} {rc}")
    ups = up_imports()
    print(f"imports running back up: {len(ups)}")
    for a, b in ups:
        print(f"  {a} -> {b}")
    heavy = positional_heavy()
    print(f"functions with > 8 positional parameters: {len(heavy)}")
    for f, line, name, n in heavy:
        print(f"  {f}:{line} {name} ({n})")
    wide = wide_functions()
    print(f"public functions with > 12 parameters: {len(wide)}")
    for f, line, name, n in sorted(wide, key=lambda w: -w[3]):
        print(f"  {f}:{line} {name} ({n})")
    names = name_comparisons()
    print(f"aggregator-name comparisons outside aggregators/: {len(names)}")
    for f, line, s in names:
        print(f"  {f}:{line} {s}")
    big = {k: v for k, v in module_sizes().items() if v > 450}
    print(f"modules over 450 lines: {len(big)} {big}")


if __name__ == "__main__":
    main()
