"""Experiments behind ``fedsde reproduce``, their figures and the written report.

Nothing in fedsde imports from this package; it sits at the end of the data flow
(problem → exact | simulator | SDE → compare/theory → report).
"""
