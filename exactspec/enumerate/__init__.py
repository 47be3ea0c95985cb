"""The engine: enumerating rng, one step, and the n-token stream (exhaustive, exact, memoised).

>>> from exactspec.enumerate import Budget
>>> Budget(seconds=5).seconds
5
"""

from .rng import PathRng, Uniform, enumerate_program
from .step import Budget, StepEnumerator, run_rule
from .stream import Engine, greedy_sequence, target_law
from .watchdog import deadline

__all__ = ["Budget", "Engine", "PathRng", "StepEnumerator", "Uniform", "deadline", "enumerate_program",
           "greedy_sequence", "run_rule", "target_law"]
