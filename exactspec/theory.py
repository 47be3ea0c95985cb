"""Leviathan et al.'s closed forms: tokens per step, wall-clock speed-up, arithmetic cost, optimal gamma.

All functions are exact on rationals (ints, Fractions, "p/q" strings) and also accept floats.
``a`` is the acceptance rate ``sum(min(p, q))``, ``c`` the cost of a draft call relative to a
target call.

>>> from fractions import Fraction as F
>>> expected_tokens(F(9, 10), 1)
Fraction(19, 10)
>>> optimal_gamma(F(4, 5), F(1, 20))
8
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sized
from fractions import Fraction
from typing import Any, Iterable, Sequence, cast

from ._numbers import finite_float, parse_rational
from .errors import ExactSpecError, InvalidDistribution, InvalidType, InvalidValue
from .laws import acceptance, to_law

#: how far from 1 a law of floats may sum (per entry) and still be accepted as a law
FLOAT_SUM_TOLERANCE = 1e-9

__all__ = ["acceptance_rate", "expected_tokens", "speedup", "arithmetic_factor", "optimal_gamma"]


def _num(x: Any, name: str, lo: Any = 0, hi: Any = None) -> Any:
    if isinstance(x, str):
        try:
            x = parse_rational(x, name)
        except ExactSpecError as exc:
            shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
            raise InvalidValue(f"{name} = {shown} is not a number ({str(exc).removeprefix(name + ': ')})") from None
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise InvalidType(f"{name} must be a number, got {x!r}")
    if x != x:
        raise InvalidValue(f"{name} is NaN")
    if isinstance(x, float) and not math.isfinite(x):
        raise InvalidValue(f"{name} = {x} is not a finite number")
    if x < lo or (hi is not None and x > hi):
        raise InvalidValue(f"{name} = {x} must lie in [{lo}, {'inf' if hi is None else hi}]")
    return x


def _gamma(g: Any) -> int:
    if isinstance(g, bool) or not isinstance(g, int):
        raise InvalidType(f"gamma must be an int >= 0, got {g!r}")
    elif g < 0:
        raise InvalidValue(f"gamma must be an int >= 0, got {g!r}")
    return g


def _is_float(x: Any) -> bool:
    return isinstance(x, float) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") == "f")


def _law(values: Any, name: str, vocab: int | None = None) -> tuple[Any, ...]:
    """Validate a law like :func:`exactspec.laws.to_law`; a law with floats is checked up to rounding."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sized):
        raise InvalidDistribution(f"{name}: expected a sequence of probabilities, got {values!r:.60}")
    n = len(values)
    if vocab is not None and n != vocab:
        raise InvalidDistribution(f"{name}: law has {n} entries, but the other law has {vocab}")
    if n == 0:
        raise InvalidDistribution(f"{name}: the law is empty")
    seq = list(cast(Iterable[Any], values))   # a sized law is iterable (a str, bytes or mapping is refused)
    if not any(_is_float(x) for x in seq):
        return to_law(seq, n, where=name)
    law = []
    for i, x in enumerate(seq):
        try:
            v = finite_float(x, f"{name}: entry {i}")
        except ExactSpecError as exc:
            raise InvalidDistribution(str(exc)) from None
        if v < 0:
            raise InvalidDistribution(f"{name}: entry {i} is negative ({v!r})")
        law.append(v)
    total = math.fsum(law)
    if abs(total - 1) > FLOAT_SUM_TOLERANCE * n:
        raise InvalidDistribution(f"{name}: law of floats sums to {total!r}, not 1 (up to {FLOAT_SUM_TOLERANCE:g} "
                                  "per entry)")
    return tuple(law)


def acceptance_rate(p: Sequence[Any], q: Sequence[Any]) -> Any:
    """``a = sum(min(p, q)) = 1 - TV(p, q)``: the chance one draft is accepted.

    Both laws are validated like every law exactspec reads (same length, no negative entry,
    summing to exactly 1; a law with floats sums to 1 up to rounding).

    >>> acceptance_rate((Fraction(3, 5), Fraction(2, 5)), (Fraction(1, 2), Fraction(1, 2)))
    Fraction(9, 10)
    >>> acceptance_rate(("1/2", "1/2"), ("1/2", "1/4"))
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: q: law (1/2, 1/4) sums to 3/4, not exactly 1
    """
    p_law = _law(p, "p")
    return acceptance(p_law, _law(q, "q", len(p_law)))


def expected_tokens(a: Any, gamma: int) -> Any:
    """Expected tokens per target call, ``(1 - a**(gamma+1)) / (1 - a)`` (``gamma + 1`` when a = 1).

    >>> expected_tokens(1, 4), expected_tokens(0, 4)
    (5, Fraction(1, 1))
    """
    a, g = _num(a, "a", 0, 1), _gamma(gamma)
    if a == 1:
        return g + 1
    if isinstance(a, int):
        a = Fraction(a)
    return (1 - a ** (g + 1)) / (1 - a)


def speedup(a: Any, gamma: int, c: Any) -> Any:
    """Expected wall-clock improvement ``(1 - a**(g+1)) / ((1 - a)(g*c + 1))``.

    >>> speedup(Fraction(4, 5), 4, Fraction(1, 20))
    Fraction(2101, 750)
    """
    c = _num(c, "c", 0)
    den = _gamma(gamma) * c + 1
    return expected_tokens(a, gamma) / (den if not isinstance(den, int) else Fraction(den))


def arithmetic_factor(a: Any, gamma: int, c_hat: Any) -> Any:
    """Expected factor by which arithmetic operations grow: ``(g*c_hat + g + 1) / E[tokens]``.

    ``c_hat`` is the draft's arithmetic operations per token relative to the target's.

    >>> arithmetic_factor(Fraction(1, 2), 1, 0)
    Fraction(4, 3)
    """
    c_hat = _num(c_hat, "c_hat", 0)
    g = _gamma(gamma)
    num = g * c_hat + g + 1
    return (num if not isinstance(num, int) else Fraction(num)) / expected_tokens(a, g)


def optimal_gamma(a: Any, c: Any, *, max_gamma: int = 64) -> int:
    """The ``gamma`` in ``1..max_gamma`` with the largest :func:`speedup` (ties to the smallest).

    >>> optimal_gamma(Fraction(1, 2), Fraction(1, 2))
    1
    """
    if _gamma(max_gamma) < 1:
        raise InvalidValue(f"max_gamma must be >= 1, got {max_gamma}")
    best, best_g = None, 1
    for g in range(1, max_gamma + 1):
        s = speedup(a, g, c)
        if best is None or s > best:
            best, best_g = s, g
    return best_g
