"""Number systems the engine computes in: ``fraction`` (exact), ``mpmath`` and ``float``.

A field converts the rational laws of the models into its own numbers and checks every
probability a rule hands to the ``rng``. Rules never see which field they run in.

>>> from exactspec.fields import get_field
>>> f = get_field("fraction", backend="python")
>>> f.convert(__import__("fractions").Fraction(1, 3))
Fraction(1, 3)
>>> get_field("float").convert(__import__("fractions").Fraction(1, 4))
0.25
"""

from __future__ import annotations

import math
import numbers
import os
import sys
from fractions import Fraction
from types import FrameType
from typing import Any, cast

from ._numbers import MAX_TEXT, finite_float, parse_rational
from .errors import ExactSpecError, InexactArithmetic, InvalidType, InvalidValue

__all__ = ["Field", "FractionField", "MpmathField", "FloatField", "get_field"]


_HERE = os.path.abspath(__file__)
_ENGINE = os.path.join(os.path.dirname(_HERE), "enumerate") + os.sep


#: the interception layer's own files and the libraries it wraps: a message names the sampler's line, not theirs
_SAMPLER_LAYER = {os.path.join(os.path.dirname(_HERE), "samplers", *f.split("/")) for f in (
    "randomness/interception.py", "randomness/numpy_rng.py", "randomness/lazy_values.py", "torch_draws/torch_rng.py",
    "torch_draws/lazy_draws.py")}


def _library_dirs() -> tuple[Any, ...]:
    files = (getattr(sys.modules.get(name), "__file__", None) for name in ("torch", "numpy"))
    return tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in files if f)


def caller_site(depth: int = 2) -> str:
    """Return ``file:line in function`` of the first frame outside exactspec's engine (where a value came from).

    ``depth``: the frame to start from (1: the caller of this function).

    >>> caller_site(1).rsplit(":", 1)[1]   # this line of the example, in its module
    '1 in <module>'
    """
    frame: FrameType | None = sys._getframe(depth)
    libs = _library_dirs()
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name != _HERE and not name.startswith(_ENGINE) and name not in _SAMPLER_LAYER \
                and not name.startswith(libs):
            break
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


class Field:
    """A number system: converts rationals in, checks values a rule passes to the rng."""

    name: str = ""
    exact: bool = False
    zero: Any = 0
    one: Any = 1

    def convert(self, x: Fraction) -> Any:
        """Convert an exact rational (a model's entry) into this field."""
        raise NotImplementedError  # pragma: no cover - abstract

    def check(self, x: Any, what: str) -> Any:
        """Return ``x`` as a number of this field, or raise naming ``what`` and the caller's line."""
        raise NotImplementedError  # pragma: no cover - abstract

    @property
    def native(self) -> bool:
        """True when the field's numbers are Fractions (model laws need no conversion)."""
        return False

    def tolerance(self) -> Any:
        """The largest TV still reported as lossless (0 in exact fields)."""
        return 0

    def export(self, x: Any) -> Any:
        """A number as reports hand it to users (Fractions in the fraction field)."""
        return x

    def to_str(self, x: Any) -> str:
        """Render a number for JSON and text (exact rationals as ``"p/q"``)."""
        return str(x)

    def parse(self, s: str, where: str = "number") -> Any:
        """Inverse of :meth:`to_str` (bounded: a hostile string raises an error naming ``where``)."""
        return self.convert(parse_rational(s, where))

    def describe(self) -> str:
        """One line saying what the field is and its tolerance."""
        return self.name


def _coprime_fraction() -> Any:
    """``make(n, d)``: the Fraction ``n/d`` for coprime ints with ``d > 0``, skipping the gcd ``Fraction(n, d)`` takes."""
    make = getattr(Fraction, "_from_coprime_ints", None)          # Python 3.12+
    if make is not None:
        return make
    if getattr(Fraction, "__slots__", None) == ("_numerator", "_denominator"):   # Python 3.11 and earlier: what
        new = object.__new__                                                      # 3.12's _from_coprime_ints does

        def make(n: int, d: int) -> Fraction:
            f = new(Fraction)
            f._numerator, f._denominator = n, d   # type: ignore[attr-defined]  # 3.11's slots, set directly
            return f
        return make
    try:
        # 3.12+: the keyword typeshed does not list (an unknown keyword is a TypeError, caught below)
        if Fraction(2, 4, _normalize=False).numerator == 2:      # type: ignore[call-overload]
            return lambda n, d: Fraction(n, d, _normalize=False)   # type: ignore[call-overload]
    except TypeError:
        pass
    return Fraction


_FRACTION = _coprime_fraction()


def gmpy2_mpq() -> Any:
    """gmpy2's ``mpq`` (the fast exact rational of ``backend="gmpy2"``), or None when gmpy2 is not installed.

    >>> mpq = gmpy2_mpq()
    >>> mpq is None or mpq(2, 4) == Fraction(1, 2)
    True
    """
    try:
        import gmpy2
    except ImportError:
        return None
    return gmpy2.mpq


class FractionField(Field):
    """Exact rational arithmetic; no float ever enters.

    Computes with gmpy2's ``mpq`` when gmpy2 is installed (``backend="auto"``, several times
    faster) or with :class:`fractions.Fraction` (``backend="python"``); the laws a report hands
    back are always Fractions, identical either way.

    >>> FractionField(backend="python").check(0.5, "a probability")
    Traceback (most recent call last):
    ...
    exactspec.errors.InexactArithmetic: a probability is the float 0.5 (from ...); the fraction field is exact: use Fraction or int
    """

    name = "fraction"
    exact = True

    def __init__(self, backend: str = "auto") -> None:
        if backend not in ("auto", "gmpy2", "python"):
            raise InvalidValue(f"fraction backend must be auto, gmpy2 or python, got {backend!r}")
        mpq = None if backend == "python" else gmpy2_mpq()
        if backend == "gmpy2" and mpq is None:
            raise ExactSpecError("backend='gmpy2' needs gmpy2 installed (pip install 'exactspec[fast]')")
        self.backend = "gmpy2" if mpq is not None else "python"
        self.Q = mpq if mpq is not None else Fraction
        self.zero = self.Q(0)
        self.one = self.Q(1)

    @property
    def native(self) -> bool:
        """True when the field's numbers are Fractions (model laws need no conversion)."""
        return self.Q is Fraction

    def convert(self, x: Fraction) -> Any:
        return x if self.Q is Fraction else self.Q(x.numerator, x.denominator)

    def check(self, x: Any, what: str) -> Any:
        t = type(x)
        if t is self.Q or t is int:
            return x
        if t is Fraction:
            return self.convert(x)
        if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") == "f"):
            raise InexactArithmetic(
                f"{what} is the float {x!r} (from {caller_site(3)}); the fraction field is exact: use Fraction or int")
        if isinstance(x, numbers.Rational):
            return self.convert(Fraction(int(x.numerator), int(x.denominator)))
        raise InexactArithmetic(f"{what} is {x!r} of type {t.__name__} (from {caller_site(3)}); "
                                "the fraction field takes Fraction or int")

    def export(self, x: Any) -> Fraction:
        if type(x) is Fraction:
            return x
        if type(x) is self.Q:    # an mpq is in lowest terms with a positive denominator: no gcd to take again
            return cast("Fraction", _FRACTION(int(x.numerator), int(x.denominator)))
        return Fraction(int(x.numerator), int(x.denominator))

    def to_str(self, x: Any) -> str:
        x = self.export(x)
        return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"

    def parse(self, s: str, where: str = "number") -> Fraction:
        """An exact rational from ``"p/q"``, an integer or a decimal with a small exponent.

        >>> FractionField(backend="python").parse("1e-999999999", "tv")
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: tv: '1e-999999999' has an exponent beyond 1000 in absolute value; write a rational like '3/5' or a decimal with a small exponent
        """
        return parse_rational(s, where)

    def describe(self) -> str:
        return "fraction (exact rationals; lossless means TV == 0 exactly)"


#: the mpmath contexts numbers and fields sent between processes are rebuilt in, one per precision
_MP_CONTEXTS: dict[Any, Any] = {}


def _mp_context(precision: int, shared: bool = True) -> Any:
    """An mpmath context at ``precision`` bits whose numbers pickle (a new one, or with ``shared`` this process's
    one for that precision).

    mpmath makes a number type per context, named ``mpf`` like the module's own but not importable by that
    name, so pickle refuses its numbers; here they travel as (precision, mpmath's ``_mpf_`` tuple).
    """
    ctx = _MP_CONTEXTS.get(precision) if shared else None
    if ctx is None:
        import mpmath   # imported when an mpmath field is made: `import exactspec` does not pay for it here
        ctx = mpmath.MPContext()
        ctx.prec = precision
        ctx.mpf.__reduce__ = _reduce_mpf
        if shared:
            _MP_CONTEXTS[precision] = ctx
    return ctx


def _reduce_mpf(x: Any) -> tuple[Any, ...]:
    return _mpf, (x.context.prec, x._mpf_)


def _mpf(precision: int, state: tuple[Any, ...]) -> Any:
    """An mpmath number from its pickled state, in this process's context at ``precision`` bits."""
    return _mp_context(precision).make_mpf(state)


def _mpmath_field(precision: int, tol_state: tuple[Any, ...]) -> "MpmathField":
    """An mpmath field from its pickled state: its numbers live in this process's context for its precision."""
    f = MpmathField.__new__(MpmathField)
    f.precision, f.ctx = precision, _mp_context(precision)
    f.zero, f.one, f._tol = f.ctx.mpf(0), f.ctx.mpf(1), f.ctx.make_mpf(tol_state)
    return f


class MpmathField(Field):
    """Arbitrary-precision binary floating point (mpmath) at ``precision`` bits.

    Lossless means TV <= ``2**(16 - precision)`` unless a tolerance is given.

    >>> f = MpmathField(precision=64)
    >>> f.convert(Fraction(1, 3)) * 3 == 1
    True
    """

    name = "mpmath"
    exact = False

    def __init__(self, precision: int = 113, tolerance: Any = None) -> None:
        if not isinstance(precision, int) or isinstance(precision, bool):
            raise InvalidType(f"mpmath precision must be an int >= 16 bits, got {precision!r}")
        if precision < 16:
            raise InvalidValue(f"mpmath precision must be an int >= 16 bits, got {precision!r}")
        self.precision = precision
        self.ctx = _mp_context(precision, shared=False)
        self.zero = self.ctx.mpf(0)
        self.one = self.ctx.mpf(1)
        if tolerance is None:
            self._tol = self.ctx.mpf(2) ** (16 - precision)
        else:
            self._tol = self._tolerance(tolerance)

    def __reduce__(self) -> tuple[Any, ...]:
        # a report and its numbers go to and from worker processes: the field travels as its precision and
        # tolerance (its mpmath context is private to it, and its number type has no importable name)
        return _mpmath_field, (self.precision, self._tol._mpf_)

    def _tolerance(self, tolerance: Any) -> Any:
        where = "mpmath field tolerance"
        if isinstance(tolerance, bool):
            raise InvalidType(f"{where}: {tolerance!r} is a bool, not a number")
        if isinstance(tolerance, str):
            tolerance = parse_rational(tolerance, where)
        if isinstance(tolerance, numbers.Rational):
            tol = self.ctx.mpf(int(tolerance.numerator)) / int(tolerance.denominator)
        elif isinstance(tolerance, numbers.Real) or hasattr(tolerance, "_mpf_"):
            tol = self.ctx.mpf(tolerance)
        else:
            raise InvalidType(f"{where}: {tolerance!r} of type {type(tolerance).__name__} is not a number")
        if not self.ctx.isfinite(tol) or tol < 0:
            raise InvalidValue(f"{where}: {tolerance!r} must be a finite number >= 0")
        return tol

    def convert(self, x: Fraction) -> Any:
        return self.ctx.mpf(x.numerator) / x.denominator

    def check(self, x: Any, what: str) -> Any:
        if isinstance(x, (int, float)) or type(x) is self.ctx.mpf:
            return x
        if isinstance(x, numbers.Rational):
            return self.convert(Fraction(x))
        try:
            return self.ctx.mpf(x)
        except Exception as exc:  # mpmath raises several types for junk
            raise InexactArithmetic(f"{what} is {x!r}, not a number (from {caller_site(3)})") from exc

    def tolerance(self) -> Any:
        return self._tol

    def to_str(self, x: Any) -> str:
        # enough decimal digits to read the same binary number back
        return cast("str", self.ctx.nstr(self.ctx.mpf(x), int(self.precision * 0.30103) + 3, strip_zeros=False))

    def parse(self, s: str, where: str = "number") -> Any:
        """A finite mpmath number from its decimal text (as :meth:`to_str` writes it) or ``"p/q"``.

        >>> MpmathField(precision=64).parse("nan", "tv")
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: tv: 'nan' is not a finite number
        """
        if not isinstance(s, str):
            return self.convert(parse_rational(s, where))
        if len(s) > MAX_TEXT:
            raise InvalidValue(f"{where}: a number string of {len(s)} characters is too long (at most {MAX_TEXT})")
        try:
            x = self.ctx.mpf(s)
        except (ValueError, TypeError, ArithmeticError):
            raise InvalidValue(f"{where}: {s[:40]!r} is not a number") from None
        if not self.ctx.isfinite(x):
            raise InvalidValue(f"{where}: {s[:40]!r} is not a finite number")
        return x

    def describe(self) -> str:
        return f"mpmath ({self.precision}-bit; lossless means TV <= {self.ctx.nstr(self._tol, 6)})"


class FloatField(Field):
    """IEEE float64: fast, approximate; lossless means TV <= the stated tolerance (default 1e-12).

    >>> FloatField().tolerance()
    1e-12
    """

    name = "float"
    exact = False
    zero = 0.0
    one = 1.0

    def __init__(self, tolerance: float = 1e-12) -> None:
        tol = finite_float(tolerance, "float field tolerance")
        if tol < 0:
            raise InvalidValue(f"float field tolerance: {tolerance!r} must be >= 0")
        self._tol = tol

    def convert(self, x: Fraction) -> float:
        return x.numerator / x.denominator

    def check(self, x: Any, what: str) -> Any:
        if type(x) is float or type(x) is int:
            return x
        try:
            v = float(x)
        except Exception as exc:
            raise InexactArithmetic(f"{what} is {x!r}, not a number (from {caller_site(3)})") from exc
        return v

    def tolerance(self) -> float:
        return self._tol

    def to_str(self, x: Any) -> str:
        return repr(float(x))

    def parse(self, s: str, where: str = "number") -> float:
        """A finite float from its ``repr`` (as :meth:`to_str` writes it), an integer or ``"p/q"``.

        >>> FloatField().parse("0.25"), FloatField().parse("1/4")
        (0.25, 0.25)
        """
        if isinstance(s, str) and len(s) <= 64:
            try:
                v = float(s)
            except ValueError:
                pass
            else:
                if v != v or v in (float("inf"), float("-inf")):
                    raise InvalidValue(f"{where}: {s!r} is not a finite number")
                return v
        return finite_float(parse_rational(s, where), where)

    def describe(self) -> str:
        return f"float (float64; lossless means TV <= {self._tol:g})"


def get_field(field: str | Field = "fraction", *, precision: int | None = None,
              tolerance: Any = None, backend: str = "auto") -> Field:
    """Return the :class:`Field` named ``field`` ("fraction", "mpmath", "float"), or ``field`` itself.

    ``backend`` ("auto", "gmpy2", "python") picks the fraction field's rational type.

    >>> get_field("mpmath", precision=200).precision
    200
    >>> get_field("decimal")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: unknown field 'decimal': choose one of fraction, mpmath, float
    """
    if isinstance(field, Field):
        return field
    if field == "fraction":
        if tolerance is not None and (isinstance(tolerance, bool) or tolerance != 0):
            raise InvalidValue(f"the fraction field is exact: its tolerance is 0 (got tolerance={tolerance!r})")
        return FractionField(backend)
    if field == "mpmath":
        return MpmathField(precision=113 if precision is None else precision, tolerance=tolerance)
    if field == "float":
        return FloatField(1e-12 if tolerance is None else tolerance)
    raise InvalidValue(f"unknown field {field!r}: choose one of fraction, mpmath, float")


def is_finite_number(x: Any) -> bool:
    """True for a real number that is neither NaN nor infinite.

    >>> is_finite_number(float("nan")), is_finite_number(Fraction(1, 2))
    (False, True)
    """
    try:
        return math.isfinite(x)
    except (TypeError, OverflowError):
        return isinstance(x, numbers.Rational)
