"""Counterexamples: search for the smallest biased instance, shrink it, and render it as a regression test.

>>> import exactspec as es
>>> ce = es.counterexamples.search(es.rules.resample_from_target)
>>> ce.instance.vocab, ce.tv > 0
(2, True)
"""

from .counterexample import Counterexample, EmptySearch, IncompleteSearch
from .searching import evaluate, search, shrink, worst
from .space import FAMILIES, SearchInstance, Space, default_space, random_law, simplex_grid

__all__ = ["search", "worst", "shrink", "evaluate", "Counterexample", "EmptySearch", "IncompleteSearch",
           "SearchInstance", "Space",
           "default_space", "simplex_grid", "random_law", "FAMILIES"]
