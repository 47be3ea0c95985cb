"""Small, strict readers for JSON that exactspec wrote (reports, counterexamples) and users may have edited.

Every reader raises :class:`~exactspec.errors.ExactSpecError` (or :class:`InvalidDistribution` for
a law's contents) with a message that names the document and the field, never a raw
``KeyError``, ``TypeError`` or ``RecursionError``. Numbers written as strings go through the
bounded :func:`exactspec._numbers.parse_rational` (or a field's own bounded ``parse``), so a
hostile ``"1e-999999999"`` is refused at once instead of expanding into a billion digits.

>>> d = load_json('{"tv": "1/5", "output": [[[0], "4/5"], [[1], "1/5"]]}', "report JSON")
>>> field(d, "tv", str, "report JSON")
'1/5'
>>> law_pairs(d["output"], "report JSON: output", vocab=2)
{(0,): Fraction(4, 5), (1,): Fraction(1, 5)}
>>> load_json("[" * 100000, "report JSON")
Traceback (most recent call last):
...
exactspec.errors.InvalidValue: report JSON: nested deeper than 64 levels
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from ._numbers import parse_rational
from .errors import ExactSpecError, InvalidDistribution, InvalidType, InvalidValue

__all__ = ["MAX_DEPTH", "load_json", "obj", "required", "field", "opt_field", "number", "token_tuple", "law_pairs"]

#: deepest nesting of JSON arrays/objects accepted (exactspec's own documents nest at most ~6 deep)
MAX_DEPTH = 64

_MISSING = object()


_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number", type(None): "null"}


def _type_name(x: Any) -> str:
    return _TYPE_NAMES.get(type(x), type(x).__name__)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/dicts deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def load_json(text: Any, what: str) -> Any:
    """Parse ``text`` as JSON, or raise an :class:`ExactSpecError` naming ``what``.

    Refuses a non-string, invalid JSON, ``NaN``/``Infinity`` constants and nesting deeper than
    :data:`MAX_DEPTH` (100,000 nested brackets give a clear error, not a ``RecursionError``).

    >>> load_json('{"a": [1, 2]}', "report JSON")
    {'a': [1, 2]}
    >>> load_json("not json", "report JSON")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: report JSON: not valid JSON (Expecting value: line 1 column 1 (char 0))
    >>> load_json(b"{}", "report JSON")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidType: report JSON: expected a JSON string (str), got bytes
    """
    if not isinstance(text, str):
        raise InvalidType(f"{what}: expected a JSON string (str), got {type(text).__name__}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidValue(f"{what}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers beyond int_max_str_digits
        raise InvalidValue(f"{what}: not valid JSON ({exc})") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise InvalidValue(f"{what}: nested deeper than {MAX_DEPTH} levels")
    return value


def obj(value: Any, what: str) -> dict:
    """``value`` if it is a JSON object (dict), else an :class:`ExactSpecError` naming ``what``.

    >>> obj([], "report JSON")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: report JSON: expected an object, got an array
    """
    if not isinstance(value, dict):
        raise InvalidValue(f"{what}: expected an object, got {_type_name(value)}")
    return value


def _check_type(value: Any, types: type | tuple[type, ...], label: str) -> Any:
    types = types if isinstance(types, tuple) else (types,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise InvalidValue(f"{label} must be {names}, got {_type_name(value)}")
    return value


def required(d: dict, key: str, what: str) -> Any:
    """``d[key]``, or an :class:`ExactSpecError` naming the missing field.

    >>> required({"tv": "0"}, "tv", "report JSON")
    '0'
    """
    if key not in d:
        raise InvalidValue(f"{what}: missing field {key!r}")
    return d[key]


def field(d: dict, key: str, types: type | tuple[type, ...], what: str, *, default: Any = _MISSING) -> Any:
    """``d[key]`` checked against ``types`` (``bool`` is not an ``int``); missing: ``default`` or an error.

    >>> field({"paths": 3}, "paths", int, "report JSON")
    3
    >>> field({"paths": "3"}, "paths", int, "report JSON")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: report JSON: field 'paths' must be an integer, got a string
    >>> field({}, "rule", str, "report JSON")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: report JSON: missing field 'rule'
    """
    if key not in d:
        if default is _MISSING:
            raise InvalidValue(f"{what}: missing field {key!r}")
        return default
    return _check_type(d[key], types, f"{what}: field {key!r}")


def opt_field(d: dict, key: str, types: type | tuple[type, ...], what: str, default: Any = None) -> Any:
    """``d[key]`` checked against ``types``, or ``default`` when the key is missing or null.

    >>> opt_field({"extra": None}, "extra", dict, "report JSON", {})
    {}
    """
    if d.get(key) is None:
        return default
    return _check_type(d[key], types, f"{what}: field {key!r}")


def number(value: Any, label: str, parse: Callable[[str, str], Any] = parse_rational) -> Any:
    """A number written as a JSON string, read by ``parse(text, label)`` (default: the bounded exact reader).

    ``parse`` is :func:`~exactspec._numbers.parse_rational` or a field's ``parse``; any other
    error it raises becomes an :class:`ExactSpecError` naming ``label``.

    >>> number("3/5", "report JSON: field 'tv'")
    Fraction(3, 5)
    >>> number(0.2, "report JSON: field 'tv'")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: report JSON: field 'tv' must be a number written as a string like '3/5', got a number
    """
    if not isinstance(value, str):
        raise InvalidValue(f"{label} must be a number written as a string like '3/5', got {_type_name(value)}")
    try:
        return parse(value, label)
    except ExactSpecError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise InvalidValue(f"{label}: {value[:40]!r} is not a number ({exc})") from None


def token_tuple(value: Any, label: str, vocab: int | None = None) -> tuple[int, ...]:
    """A list of token ids as a tuple, each an int in ``0..vocab-1`` when ``vocab`` is given.

    >>> token_tuple([0, 2], "tokens", vocab=3)
    (0, 2)
    >>> token_tuple([0, 3], "tokens", vocab=3)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: tokens: token 3 is outside the vocabulary 0..2
    """
    if not isinstance(value, list):
        raise InvalidValue(f"{label} must be an array of token ids, got {_type_name(value)}")
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int):
            raise InvalidValue(f"{label}: {t!r} is not a token id (an integer)")
        if t < 0 or (vocab is not None and t >= vocab):
            span = f"0..{vocab - 1}" if vocab is not None else ">= 0"
            raise InvalidDistribution(f"{label}: token {t} is outside the vocabulary {span}")
    return tuple(value)


def law_pairs(rows: Any, label: str, parse: Callable[[str, str], Any] = parse_rational, *, vocab: int | None = None,
              length: int | None = None, exact: bool = True) -> dict[tuple[int, ...], Any]:
    """A law written as ``[[tokens, "p/q"], ...]`` as a dict ``{tokens tuple: probability}``.

    Checks every row's shape, token ids (in ``0..vocab-1`` when given), that all outcomes have
    the same length (``length`` when given), no outcome twice, and probabilities ``>= 0`` (and
    ``<= 1`` when ``exact``).

    >>> law_pairs([[[0, 1], "1/2"], [[1], "1/2"]], "output")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: output: outcome [1] has 1 tokens, but the others have 2
    >>> law_pairs([[[0], "-1/2"]], "output")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: output: outcome [0] has negative probability -1/2
    """
    if not isinstance(rows, list):
        raise InvalidValue(f"{label} must be an array of [tokens, probability] pairs, got {_type_name(rows)}")
    law: dict[tuple[int, ...], Any] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 2:
            raise InvalidValue(f"{label}: row {i} must be a [tokens, probability] pair, got {_short(row)}")
        key = token_tuple(row[0], f"{label}: row {i} tokens", vocab)
        if length is None:
            length = len(key)
        elif len(key) != length:
            raise InvalidDistribution(f"{label}: outcome {list(key)} has {len(key)} tokens, but the others have "
                                      f"{length}")
        if key in law:
            raise InvalidDistribution(f"{label}: outcome {list(key)} appears twice")
        v = number(row[1], f"{label}: probability of {list(key)}", parse)
        if v < 0:
            raise InvalidDistribution(f"{label}: outcome {list(key)} has negative probability {row[1]}")
        if exact and v > 1:
            raise InvalidDistribution(f"{label}: outcome {list(key)} has probability {row[1]} > 1")
        law[key] = v
    return law


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."
