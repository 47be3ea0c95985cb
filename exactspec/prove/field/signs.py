"""Sign sets: the answers a comparison of symbolic probabilities can have on a cell.

A constraint is ``(polynomial, signs)``: the polynomial's sign on the cell is one of ``signs``.

>>> OPS["<="] == frozenset((NEG, ZERO))
True
"""

from __future__ import annotations

__all__ = ["NEG", "ZERO", "POS", "ALL", "OPS", "FLIP", "POS_ONLY", "NEG_ONLY", "ZERO_ONLY", "NONZERO"]

NEG, ZERO, POS = -1, 0, 1
ALL = frozenset((NEG, ZERO, POS))
#: the signs of ``a - b`` under which ``a op b`` holds
OPS = {"<": frozenset((NEG,)), "<=": frozenset((NEG, ZERO)), "==": frozenset((ZERO,)),
       "!=": frozenset((NEG, POS)), ">": frozenset((POS,)), ">=": frozenset((ZERO, POS))}
#: a sign under negation
FLIP = {NEG: POS, POS: NEG, ZERO: ZERO}
POS_ONLY, NEG_ONLY, ZERO_ONLY, NONZERO = frozenset((POS,)), frozenset((NEG,)), frozenset((ZERO,)), frozenset((NEG, POS))
