"""Least-squares regression clients with real minibatch noise: the problem
(:mod:`~fedsde.problems.regression.problem`), its data — a user's CSV file read by
:mod:`~fedsde.problems.regression.csv_reader`, or a packaged panel (:mod:`~fedsde.problems.regression.data`) —, its
problem files (:mod:`~fedsde.problems.regression.files`), and a CSV file's clients as a population read from disk
when needed (:mod:`~fedsde.problems.regression.store`, :mod:`~fedsde.problems.regression.population`).  The exact
moments of FedAvg on these clients live in :mod:`fedsde.exact.least_squares`."""

from fedsde.problems.regression.problem import MODELS, SAMPLINGS, RegressionProblem, noise_factors

__all__ = ["MODELS", "SAMPLINGS", "RegressionProblem", "noise_factors"]
