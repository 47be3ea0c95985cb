"""Safe parsing of exact numbers from text (CLI arguments, JSON, rule names, law entries).

``Fraction("1e-999999999")`` builds a billion-digit integer and hangs; a 10**6-digit numerator
is a denial of service of its own. Every number exactspec reads from a string goes through
:func:`parse_rational`, which accepts only what a person or a report would write, with bounds:

- an integer or ``p/q`` with at most :data:`MAX_DIGITS` digits in each part;
- a decimal (``0.25``, ``-1.5e-3``) with at most :data:`MAX_DIGITS` digits and an exponent of at
  most :data:`MAX_EXPONENT` in absolute value.

>>> parse_rational("3/5")
Fraction(3, 5)
>>> parse_rational("2.5e-3")
Fraction(1, 400)
>>> parse_rational("1e-999999999", "--tolerance")
Traceback (most recent call last):
...
exactspec.errors.InvalidValue: --tolerance: '1e-999999999' has an exponent beyond 1000 in absolute value; write a rational like '3/5' or a decimal with a small exponent
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from .errors import InvalidType, InvalidValue

__all__ = ["parse_rational", "finite_float", "MAX_DIGITS", "MAX_EXPONENT", "MAX_TEXT", "PRECISIONS"]

#: float precisions from the coarsest to the finest (bits of significand: 8, 11, 24, 53); here, below the
#: samplers package, so the command line lists them without importing the samplers (and numpy)
PRECISIONS = ("bfloat16", "float16", "float32", "float64")

#: most digits accepted in an integer, a numerator, a denominator or a decimal's digits
MAX_DIGITS = 4000
#: largest |exponent| accepted in a decimal like ``1e-30``
MAX_EXPONENT = 1000
#: longest string looked at (longer strings are refused before any parsing)
MAX_TEXT = 2 * MAX_DIGITS + 16

_RATIO = re.compile(r"\s*([+-]?)(\d+)\s*(?:/\s*(\d+))?\s*", re.ASCII)
_DECIMAL = re.compile(r"\s*([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*", re.ASCII)


def parse_rational(text: Any, where: str = "number") -> Fraction:
    """The exact rational a string (or int, or Fraction) stands for, or an :class:`ExactSpecError` naming ``where``.

    Floats are not accepted here (a float is exact, but a string like ``"0.1"`` means 1/10, not
    the float nearest to it); a ``bool`` is not a number.

    >>> parse_rational(" -7 / 21 ")
    Fraction(-1, 3)
    >>> parse_rational("1/0", "tv")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: tv: '1/0' has a zero denominator
    """
    if isinstance(text, bool):
        raise InvalidType(f"{where}: {text!r} is a bool, not a number")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, Fraction):
        return text
    if not isinstance(text, str):
        raise InvalidType(f"{where}: expected a rational written as a string like '3/5', got {text!r} "
                          f"of type {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise InvalidValue(f"{where}: a number string of {len(text)} characters is too long "
                           f"(at most {MAX_TEXT})")
    m = _RATIO.fullmatch(text)
    if m:
        sign, num, den = m.groups()
        if len(num) > MAX_DIGITS or (den is not None and len(den) > MAX_DIGITS):
            raise InvalidValue(f"{where}: {_show(text)} has more than {MAX_DIGITS} digits")
        if den is not None and int(den) == 0:
            raise InvalidValue(f"{where}: {_show(text)} has a zero denominator")
        value = Fraction(int(num), int(den) if den is not None else 1)
        return -value if sign == "-" else value
    m = _DECIMAL.fullmatch(text)
    if m and (m.group(2) or m.group(3)):
        sign, whole, frac, exp = m.groups()
        frac = frac or ""
        if len(whole) + len(frac) > MAX_DIGITS:
            raise InvalidValue(f"{where}: {_show(text)} has more than {MAX_DIGITS} digits")
        e = 0
        if exp is not None:
            if len(exp.lstrip("+-")) > 6 or abs(int(exp)) > MAX_EXPONENT:
                raise InvalidValue(f"{where}: {_show(text)} has an exponent beyond {MAX_EXPONENT} in absolute "
                                   "value; write a rational like '3/5' or a decimal with a small exponent")
            e = int(exp)
        value = Fraction(int(whole + frac or "0")) * Fraction(10) ** (e - len(frac))
        return -value if sign == "-" else value
    raise InvalidValue(f"{where}: {_show(text)} is not a rational number (write an integer, 'p/q' or a decimal "
                       "like '0.25')")


def _show(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def finite_float(x: Any, where: str) -> float:
    """``x`` as a finite float, or an :class:`ExactSpecError` naming ``where``.

    >>> finite_float("1e-12", "tolerance")
    1e-12
    >>> finite_float(float("nan"), "tolerance")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: tolerance: nan is not a finite number
    """
    if isinstance(x, bool):
        raise InvalidType(f"{where}: {x!r} is a bool, not a number")
    if isinstance(x, str):
        x = parse_rational(x, where)
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        raise InvalidType(f"{where}: {x!r} is not a number") from None
    if not math.isfinite(v):
        raise InvalidValue(f"{where}: {v!r} is not a finite number")
    return v
