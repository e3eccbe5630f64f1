"""Client problems: quadratic clients (seed 002, Assumption 6.1), their I/O and generators."""

from fedsde.problems.generate import paper_table_problem, random_quadratic_problem
from fedsde.problems.io import load_problem, problem_from_dict, save_problem
from fedsde.problems.quadratic import QuadraticProblem

__all__ = [
    "QuadraticProblem",
    "load_problem",
    "paper_table_problem",
    "problem_from_dict",
    "random_quadratic_problem",
    "save_problem",
]
