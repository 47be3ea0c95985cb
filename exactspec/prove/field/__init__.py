"""The symbolic field: probabilities as rational functions of the target's and draft's entries.

A :class:`SymNum` wraps a sympy rational function in the free variables of a symbolic target and draft
(:class:`Space`). Arithmetic stays symbolic (:mod:`.arith`); every comparison, truth test or equality
asks the active :class:`Decider` (:mod:`.decider`), which answers from the current cell's constraints,
or forks the cell (the other answer is pushed as a pending cell, exactly as ``PathRng`` pushes the other
branches of a draw) when both answers are feasible (z3 decides).

A comparison ``a < b`` is decided on the sign of ``num(a - b) * den(a - b)``: every denominator
is a product of divisors that were decided non-zero on the cell, so that polynomial has the
sign of ``a - b`` everywhere on it.

Modules: :mod:`.signs` (sign sets), :mod:`.arith` (rational-function arithmetic, memoised in the proof's
session), :mod:`.decider` (a cell's constraints and z3), :mod:`.numbers` (``SymNum``, its field, the
symbolic models), :mod:`.space` (the variables of one proof).
"""

from __future__ import annotations

from ...errors import SolverUnknown, UnsupportedSymbolic
from .decider import Decider, SharedSolver, active
from .numbers import SymField, SymNum, SymbolicModel, nonzero, where
from .signs import ALL, NEG, NONZERO, OPS, POS, ZERO
from .space import Space

__all__ = ["SymNum", "SymField", "SymbolicModel", "Decider", "SharedSolver", "Space", "active", "nonzero", "where",
           "UnsupportedSymbolic", "SolverUnknown", "ALL", "NEG", "NONZERO", "OPS", "POS", "ZERO"]
