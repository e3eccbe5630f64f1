"""The package's shape, read from its own source (tests/architecture.py): no import circles, at most one import
running back up the layers, no function with more than 8 positional parameters, no public function with more than
12 parameters (values group the rest), no dispatch on aggregator names outside fedsde/aggregators/, no module
over 450 lines."""

from __future__ import annotations

import ast

from architecture import (
    cycles,
    floor_of,
    import_graph,
    module_cycles,
    module_sizes,
    name_comparisons,
    parameter_count,
    positional_heavy,
    problem_up_imports,
    room,
    room_graph,
    up_imports,
    wide_functions,
)

#: the one import allowed to run back up: the Python API's default command table for sweeps
ALLOWED_UP = {("fedsde.sweep.command", "fedsde.cli")}


def test_no_import_circles_between_modules():
    assert module_cycles() == []


def test_at_most_one_import_runs_back_up_and_the_rooms_are_layered_without_it():
    ups = set(up_imports())
    assert ups <= ALLOWED_UP, sorted(ups - ALLOWED_UP)
    graph = room_graph()
    for a, b in ALLOWED_UP:
        graph[room(a)].discard(room(b))
    assert cycles(graph) == []


def test_problems_has_one_package_per_idea_layered():
    # quadratic < classification < populations < regression < file readers and metrics < module < io
    assert problem_up_imports() == []


def test_every_room_has_a_floor():
    for mod in import_graph():
        floor_of(room(mod))  # raises for a package or module the layering does not know


def test_no_function_takes_more_than_eight_positional_parameters():
    assert positional_heavy(8) == []


def test_no_public_function_takes_more_than_twelve_parameters():
    # what travels together is a value (fedsde.params, the problems' options), passed whole; ``**kwargs`` counts one
    assert wide_functions(12) == []


def test_no_comparison_with_an_aggregator_name_outside_the_aggregators():
    assert name_comparisons() == []


def test_no_module_over_450_lines():
    assert {k: v for k, v in module_sizes().items() if v > 450} == {}


def test_the_checks_can_fail():
    # the measures see what they are meant to see: a circle, an up-import, a name switch
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]
    assert floor_of("errors") < floor_of("sim") < floor_of("report") < floor_of("cli")
    assert floor_of("params") == floor_of("_validate")
    assert parameter_count(ast.parse("def f(self, a, /, b, *c, d, **e): pass").body[0]) == 5
