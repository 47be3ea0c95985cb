"""Proofs for all distributions: ``es.prove`` runs a rule over symbolic target and draft laws.

The symbolic field, its decider (z3) and the per-cell checks live in :mod:`._field` and
:mod:`._prove`; a refutation is always replayed through the exact engine.
"""

from ._field import UnsupportedSymbolic, SolverUnknown
from ._prove import Proof, Refutation, default_family, prove
from ._all_vocab import AbstractionDisagrees, AbstractionRefused

__all__ = ["prove", "Proof", "Refutation", "default_family", "UnsupportedSymbolic", "SolverUnknown",
           "AbstractionRefused", "AbstractionDisagrees"]
