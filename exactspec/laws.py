"""Laws (probability vectors) for rule writers: validation, residuals, argmax, point masses.

Every helper works in whichever field the engine runs (Fraction, mpmath, float), so a rule
written with them never needs to know the field.

>>> from fractions import Fraction as F
>>> residual((F(3, 5), F(2, 5)), (F(1, 2), F(1, 2)))
(Fraction(1, 1), Fraction(0, 1))
>>> argmax((F(1, 3), F(1, 3), F(1, 3)))
0
"""

from __future__ import annotations

import decimal
import itertools
from contextvars import ContextVar
import math
import numbers
from collections.abc import Sized
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

from ._numbers import MAX_DIGITS, MAX_EXPONENT, parse_rational
from .errors import ExactSpecError, InexactArithmetic, InvalidDistribution, InvalidType, InvalidValue

__all__ = ["to_law", "normalize", "residual", "positive_part", "argmax", "point_mass",
           "total_variation", "acceptance", "memoised"]

# Identity memo for residuals: within one audit the models hand out the same tuple objects for
# the same state, so a residual is computed once per (p, q) pair instead of once per branch.
# Entries keep p and q alive, so an id is never reused while its entry exists. One memo per context
# (a context variable): an audit or proof in another thread neither reads nor clears this one's.
_RESIDUALS: ContextVar[dict[tuple[Any, ...], tuple[Any, Any, Any]] | None] = ContextVar("exactspec_residuals", default=None)
_RESIDUAL_LIMIT = 200_000
#: set by ``es.prove(vocab="all")`` for the rule code it runs (a context variable: another thread, or code outside
#: the proof, never sees it): the vocabulary-wide helpers below (``normalize``, ``residual``, ``positive_part``,
#: ``acceptance``, ``argmax``) over the abstract vocabulary, where a class of unnamed tokens adds its total; see
#: :mod:`exactspec.prove.all_vocab`. None otherwise
ABSTRACT: ContextVar[Any] = ContextVar("exactspec_abstract_laws", default=None)


def clear_memo() -> None:
    """Forget memoised residuals (the engine calls this around every audit).

    >>> clear_memo()
    """
    _RESIDUALS.set({})


def _entry(x: Any, i: int, where: str, exact_floats: bool) -> Fraction:
    """One entry of a law as an exact Fraction, or a clear error naming ``where`` and ``i``."""
    t = type(x)
    if t is Fraction:
        return cast("Fraction", x)
    if t is int or t is bool:
        return Fraction(int(x))
    if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") == "f"):
        fx = float(x)
        if not math.isfinite(fx):
            raise InvalidDistribution(f"{where}: entry {i} is {fx!r}")
        if not exact_floats:
            raise InexactArithmetic(
                f"{where}: entry {i} is the float {fx!r}; floats are not exact here "
                "(pass exact_floats=True to convert each float to the rational it is)")
        return Fraction(fx)
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    if isinstance(x, numbers.Rational):
        return Fraction(int(x.numerator), int(x.denominator))
    if isinstance(x, decimal.Decimal):
        return _decimal(x, f"{where}: entry {i}", InvalidDistribution)
    if isinstance(x, str):
        label = f"{where}: entry {i}"
        try:
            return parse_rational(x, label)   # bounded: Fraction("1e-999999999") would hang
        except ExactSpecError as exc:
            shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
            raise InvalidDistribution(f"{label} is the string {shown}, not a rational like '3/5' "
                                      f"({str(exc).removeprefix(label + ': ')})") from None
    raise InvalidDistribution(f"{where}: entry {i} is {x!r} of type {t.__name__}, not a number")


def _decimal(x: decimal.Decimal, where: str, error: type[ExactSpecError]) -> Fraction:
    """A finite Decimal with a bounded exponent as a Fraction (``Fraction(Decimal("1e-999999999"))`` hangs)."""
    if not x.is_finite():
        raise error(f"{where} is {x!r}")
    sign, digits, exp = x.as_tuple()
    assert isinstance(exp, int)   # a finite Decimal's exponent ('n', 'N', 'F' are NaN and infinity)
    if len(digits) > MAX_DIGITS or abs(exp) > MAX_EXPONENT:
        raise error(f"{where} is {str(x)[:40]!r}, beyond {MAX_DIGITS} digits or an exponent of {MAX_EXPONENT} "
                    "in absolute value")
    return Fraction(x)


def to_rational(x: Any, where: str, *, floats: bool = True) -> Fraction:
    """A user's number (int, Fraction, bounded string or Decimal, finite float) as an exact Fraction.

    Strings go through the bounded :func:`exactspec._numbers.parse_rational`; a float is the
    rational it is exactly (refused when ``floats`` is false); NaN, infinities and bools are
    refused with an :class:`~exactspec.errors.ExactSpecError` naming ``where``.

    >>> to_rational("1/3", "weight"), to_rational(0.5, "weight")
    (Fraction(1, 3), Fraction(1, 2))
    >>> to_rational("1e-999999999", "ensemble weight")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: ensemble weight: '1e-999999999' has an exponent beyond 1000 in absolute value; write a rational like '3/5' or a decimal with a small exponent
    """
    if isinstance(x, bool):
        raise InvalidType(f"{where}: {x!r} is a bool, not a number")
    if type(x) is Fraction:
        return x
    if isinstance(x, str):
        return parse_rational(x, where)
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    if isinstance(x, numbers.Rational):
        return Fraction(int(x.numerator), int(x.denominator))
    if isinstance(x, decimal.Decimal):
        return _decimal(x, where, ExactSpecError)
    if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") == "f"):
        fx = float(x)
        if not math.isfinite(fx):
            raise InvalidValue(f"{where}: {fx!r} is not a finite number")
        if not floats:
            raise InvalidType(f"{where}: the float {fx!r} is not accepted here; write a rational like '3/5'")
        return Fraction(fx)
    raise InvalidType(f"{where}: {x!r} of type {type(x).__name__} is not a number")


def to_law(values: Any, vocab: int, *, where: str = "law", exact_floats: bool = False) -> tuple[Fraction, ...]:
    """Validate ``values`` as a law over ``vocab`` tokens and return it as a tuple of Fractions.

    Checks the length, that no entry is negative, NaN or infinite, and that the entries sum to
    exactly 1. Floats are refused unless ``exact_floats`` (then each float becomes the rational
    it is exactly, so ``0.1`` is ``3602879701896397/36028797018963968``).

    >>> to_law(("1/4", 0.75), 2, exact_floats=True)
    (Fraction(1, 4), Fraction(3, 4))
    >>> to_law((1, 0, 0), 2, where="model m, context (0,)")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: model m, context (0,): law has 3 entries, expected vocab = 2
    """
    if isinstance(values, Mapping):
        raise InvalidDistribution(f"{where}: expected a sequence of {vocab} probabilities, got a mapping")
    try:
        it = iter(values)
    except TypeError:
        raise InvalidDistribution(f"{where}: expected a sequence of {vocab} probabilities, got {values!r}") from None
    # never list() an unbounded iterable: an endless generator must fail here, not fill the memory
    seq = list(itertools.islice(it, vocab + 1))
    if len(seq) > vocab and not isinstance(values, Sized):
        raise InvalidDistribution(f"{where}: returned more than vocab = {vocab} entries (an endless iterator?)")
    if len(seq) != vocab:
        n = len(values) if isinstance(values, Sized) else len(seq)
        raise InvalidDistribution(f"{where}: law has {n} entries, expected vocab = {vocab}")
    law = tuple(_entry(x, i, where, exact_floats) for i, x in enumerate(seq))
    for i, x in enumerate(law):
        if x < 0:
            raise InvalidDistribution(f"{where}: entry {i} is negative ({x})")
    total = sum(law)
    if total != 1:
        shown = "(" + ", ".join(str(x) for x in law) + ")"
        raise InvalidDistribution(f"{where}: law {shown} sums to {total}, not exactly 1")
    return law


def normalize(v: Sequence[Any]) -> tuple[Any, ...]:
    """Scale non-negative weights to sum to 1 (exact for Fractions and ints).

    >>> normalize((0, 1, 3))
    (Fraction(0, 1), Fraction(1, 4), Fraction(3, 4))
    >>> normalize((0, 0))
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: cannot normalise (0, 0): its total mass is 0
    """
    hook = ABSTRACT.get()
    if hook is not None:
        return cast("tuple[Any, ...]", hook.normalize(v))
    s = sum(v)
    if s == 0:
        raise InvalidDistribution(f"cannot normalise {tuple(v)}: its total mass is 0")
    if s == 1:
        return tuple(v)
    if type(s) is int:
        return tuple(Fraction(x, s) for x in v)
    return tuple(x / s for x in v)


def positive_part(v: Iterable[Any]) -> tuple[Any, ...]:
    """Elementwise ``max(0, x)``.

    >>> positive_part((1, -2, 0))
    (1, 0, 0)
    """
    hook = ABSTRACT.get()
    if hook is not None:
        return cast("tuple[Any, ...]", hook.map(lambda x: x if x > 0 else 0, v))
    return tuple(x if x > 0 else 0 for x in v)


def residual(p: Sequence[Any], q: Sequence[Any]) -> tuple[Any, ...]:
    """The rejection law ``norm(max(0, p - q))`` of speculative sampling (memoised by identity).

    >>> from fractions import Fraction as F
    >>> residual((F(1, 2), F(1, 2), 0), (F(1, 4), F(1, 4), F(1, 2)))
    (Fraction(1, 2), Fraction(1, 2), Fraction(0, 1))
    """
    hook = ABSTRACT.get()
    if hook is not None:
        return cast("tuple[Any, ...]", hook.residual(p, q))
    return cast("tuple[Any, ...]", memoised("residual", p, q, lambda: normalize([a - b if a > b else 0 for a, b in zip(p, q)])))


def memoised(tag: str, a: Any, b: Any, compute: Callable[[], Any]) -> Any:
    """Memoise ``compute()`` by ``tag`` and the identities of ``a`` and ``b`` (kept alive by the memo).

    Rule writers use it for laws derived from the step's laws (which are shared objects).

    >>> p = (1, 0)
    >>> memoised("double", p, None, lambda: tuple(2 * x for x in p))
    (2, 0)
    """
    memo = _RESIDUALS.get()
    if memo is None:
        memo = {}
        _RESIDUALS.set(memo)
    key = (tag, id(a), id(b))
    hit = memo.get(key)
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    value = compute()
    if len(memo) >= _RESIDUAL_LIMIT:
        memo.clear()
    memo[key] = (a, b, value)
    return value


def argmax(p: Sequence[Any]) -> int:
    """Index of the largest entry; ties resolve to the lowest token id.

    >>> argmax((1, 3, 3))
    1
    """
    hook = ABSTRACT.get()
    if hook is not None:
        return cast("int", hook.argmax(p))
    best, best_i = p[0], 0
    for i in range(1, len(p)):
        if p[i] > best:
            best, best_i = p[i], i
    return best_i


def point_mass(vocab: int, token: int, one: Any = 1, zero: Any = 0) -> tuple[Any, ...]:
    """The law that puts all mass on ``token``.

    >>> point_mass(3, 1)
    (0, 1, 0)
    """
    return tuple(one if i == token else zero for i in range(vocab))


def acceptance(p: Sequence[Any], q: Sequence[Any]) -> Any:
    """``sum(min(p, q))``: the per-position acceptance rate of speculative sampling.

    >>> from fractions import Fraction as F
    >>> acceptance((F(3, 5), F(2, 5)), (F(1, 2), F(1, 2)))
    Fraction(9, 10)
    """
    hook = ABSTRACT.get()
    if hook is not None:
        return hook.total(hook.map(lambda a, b: a if a < b else b, p, q))
    return sum(a if a < b else b for a, b in zip(p, q))


def total_variation(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> Any:
    """``1/2 * sum |a(x) - b(x)|`` over the union of supports of two laws given as dicts.

    >>> from fractions import Fraction as F
    >>> total_variation({0: F(4, 5), 1: F(1, 5)}, {0: F(3, 5), 1: F(2, 5)})
    Fraction(1, 5)
    """
    total = 0
    for k, v in a.items():
        w = b.get(k, 0)
        total += v - w if v > w else w - v
    for k, w in b.items():
        if k not in a:
            total += w if w > 0 else -w
    return total / 2 if not isinstance(total, int) else Fraction(total, 2)


def _exact_rational(x: Any) -> Fraction | None:
    if type(x) is Fraction:
        return x
    if isinstance(x, bool) or isinstance(x, float):
        return None
    if isinstance(x, numbers.Rational):
        return Fraction(int(x.numerator), int(x.denominator))
    return None


def exceeds_typical_threshold(value: Any, p: Sequence[Any], alpha: Any, shift: Any = 0) -> bool:
    """Decide ``value > alpha * exp(-H(p))`` (Medusa's typical-acceptance test), exactly for rationals.

    ``exp(-H(p)) = prod p_i ** p_i`` is irrational in general, so for rational inputs the test is
    decided with interval arithmetic at rising precision (64 bits, doubling to 4096) and, if the
    two sides still cannot be told apart, by exact rational arithmetic: with ``b`` the common
    denominator and ``p_i = a_i / b``, ``exp(-H) = (prod p_i ** a_i) ** (1/b)``, so the test is
    ``(value / alpha) ** b > prod p_i ** a_i``. ``shift`` (>= 0) gives the entropy as code with a
    guard computes it, ``-sum p_i log(p_i + shift)`` (medusa-llm adds 1e-5). Float and mpmath
    inputs are compared directly.

    >>> from fractions import Fraction as F
    >>> exceeds_typical_threshold(F(1, 2), (F(1, 2), F(1, 2)), 1)   # 1/2 > 1 * 1/2 is false: equality
    False
    >>> exceeds_typical_threshold(F(1, 2), (F(1, 3), F(2, 3)), 1)   # exp(-H) = 0.529...
    False
    >>> exceeds_typical_threshold(F(53, 100), (F(1, 3), F(2, 3)), 1)
    True
    >>> exceeds_typical_threshold(F(1, 2), (F(1, 2), F(1, 2)), F(199999, 200000), shift=F(1, 100000))
    False
    """
    v, a, s = _exact_rational(value), _exact_rational(alpha), _exact_rational(shift)
    exact = [_exact_rational(x) for x in p]
    if v is None or a is None or s is None or any(x is None for x in exact):
        import mpmath
        ctx = getattr(value, "context", None) or mpmath.mp
        log_term = sum((x * ctx.log(x + shift) for x in p if x > 0), ctx.mpf(0))
        return cast("bool", value > alpha * ctx.exp(log_term))
    if s < 0:
        raise InvalidValue(f"the entropy shift must be >= 0, got {shift}")
    ps = [x for x in exact if x is not None]   # every one is (checked above)
    if a == 0:
        return v > 0          # the threshold is exactly 0
    if v <= 0:
        return False          # the threshold is positive
    from mpmath.ctx_iv import MPIntervalContext
    iv = MPIntervalContext()
    prec = 64
    while prec <= 4096:
        iv.prec = prec
        lhs = iv.log(iv.mpf(v.numerator) / v.denominator) - iv.log(iv.mpf(a.numerator) / a.denominator)
        rhs = iv.mpf(0)
        for x in ps:
            if x:
                y = x + s
                rhs += (iv.mpf(x.numerator) / x.denominator) * iv.log(iv.mpf(y.numerator) / y.denominator)
        if lhs.a > rhs.b:
            return True
        if lhs.b < rhs.a:
            return False
        prec *= 2
    b = 1
    for x in ps:
        b = b * x.denominator // math.gcd(b, x.denominator)
    rhs_exact = Fraction(1)
    for x in ps:
        ai = int(x * b)
        if ai:
            rhs_exact *= (x + s) ** ai
    return (v / a) ** b > rhs_exact
