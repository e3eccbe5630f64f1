"""Quadratic clients, the model problem of seed 002 (Section 6, Assumption 6.1): the problem class
(:mod:`~fedsde.problems.quadratic.problem`) and seeded generators with the seed's reference problems
(:mod:`~fedsde.problems.quadratic.generate`)."""

from fedsde.problems.quadratic.generate import paper_table_problem, random_quadratic_problem
from fedsde.problems.quadratic.problem import QuadraticProblem

__all__ = ["QuadraticProblem", "paper_table_problem", "random_quadratic_problem"]
