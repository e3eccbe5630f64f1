"""Classification clients on labelled data: the clients' arrays (:mod:`~fedsde.problems.classification.labelled`),
the problem (:mod:`~fedsde.problems.classification.problem`: logistic, softmax or a one-hidden-layer tanh MLP behind
the model protocol of :mod:`~fedsde.problems.classification.models`, with NumPy and torch passes in
:mod:`~fedsde.problems.classification.mlp` and :mod:`~fedsde.problems.classification.torch_models`), the data sets
that ship with scikit-learn (:mod:`~fedsde.problems.classification.bundled`,
:mod:`~fedsde.problems.classification.datasets`), FedProx's synthetic(α, β)
(:mod:`~fedsde.problems.classification.synthetic`) and the partitioners among clients
(:mod:`~fedsde.problems.classification.partition`).

Nothing is imported here: each module is imported where it is used."""
