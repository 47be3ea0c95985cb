"""The families of symbolic target and draft laws a concrete-vocabulary proof covers, and the default one.

>>> default_family(3, 2)
'context_free'
"""

from __future__ import annotations

__all__ = ["FAMILIES", "DEFAULT_MAX_VARIABLES", "variables", "default_family"]

#: context-free (one law at every position), per-position (a law per position), order-1 tables
FAMILIES = ("context_free", "per_position", "table")

#: the most free variables (entries of the symbolic laws) a default family may have: measured on 2 shared
#: cores, 4 variables take 1-3 s (context-free vocab 3; per-position vocab 2, 2 tokens; table vocab 2),
#: 6 take 9-47 s (context-free vocab 4; per-position vocab 2, 3 tokens) and 8 run past 60 s
DEFAULT_MAX_VARIABLES = 4


def variables(family: str, vocab: int, tokens: int) -> int:
    """The free variables of ``family``'s symbolic target and draft: ``vocab - 1`` per law, one law per position."""
    laws = {"context_free": 1, "per_position": tokens, "table": vocab}[family]
    return 2 * (vocab - 1) * laws


def default_family(vocab: int, tokens: int) -> str:
    """The family ``es.prove`` uses when none is given: the most general one that is feasible at this size.

    ``per_position`` (a law per position) when its symbolic laws have at most
    ``DEFAULT_MAX_VARIABLES`` (4) free variables and it is more than the context-free family
    (``tokens >= 2``); else ``table`` (order-1 tables) on the same condition (vocab 2); else
    ``context_free``, the only family left at larger sizes (pass ``family=`` to ask for more: it
    is slower, not wrong). Counting ``2 * (vocab - 1)`` variables per law: vocab 2 with 2 tokens
    is per-position, vocab 2 with 1 or 3+ tokens is table, vocab 3 and up is context-free.

    >>> default_family(2, 2), default_family(2, 1), default_family(2, 3), default_family(3, 2)
    ('per_position', 'table', 'table', 'context_free')
    """
    if tokens >= 2 and variables("per_position", vocab, tokens) <= DEFAULT_MAX_VARIABLES:
        return "per_position"
    if variables("table", vocab, tokens) <= DEFAULT_MAX_VARIABLES:
        return "table"
    return "context_free"
