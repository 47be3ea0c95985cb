"""The fields of a counterexample, checked as they are read: names, references, crash records, laws.

A counterexample is read back from JSON that may come from anywhere (a CI artifact, a bug report), and
its fields are rendered into a pytest file: every field is checked against an allow-list or a pattern
here before :class:`~exactspec.counterexamples.Counterexample` holds it.

>>> valid_rule_ref("my_rules.biased")
'my_rules.biased'
"""

from __future__ import annotations

import keyword
import re
from fractions import Fraction
from typing import Any

from .._numbers import parse_rational
from .space import _choice, _fail, _int, _kind

__all__ = ["KINDS", "CRASH_FIELDS", "LOOP_OPTIONS", "LOOP_RESULTS", "crash_record", "valid_rule_ref",
           "valid_sampler_ref", "valid_loop_options"]

#: a rule name read from JSON: printable, at most 200 characters, no quotes or backslashes (newlines are not printable)
_RULE_NAME_MAX = 200
#: ``rule_ref`` is rendered as an import line: a dotted path of Python identifiers, nothing else
_RULE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
_FACTORY_CALL = re.compile(r"(\w+)\((.*)\)", re.ASCII)
#: ``sampler_ref`` is rendered as an import and an attribute path: ``module.path:Qual.name``, identifiers only
_SAMPLER_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:"
                          r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
#: an adapter or rng-model name (rendered through ``str.__repr__`` only)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
#: what was searched: a rule (``es.audit``), a sampler (``es.audit_sampler``), a whole generation loop
#: (``es.audit_loop``), or any per-instance audit (:func:`exactspec.samplers.search.search_instances`;
#: no regression test can be rendered for it); "crash": a sampler or a loop that raises on the instance (with
#: positive probability), found by a sampler or loop search (``Counterexample.crash`` says what and where)
KINDS = ("rule", "sampler", "audit", "loop", "crash")
#: what a crash counterexample's ``crash`` holds: ``of`` ("sampler" or "loop"), ``probability`` (exact, a
#: rational string: that the code raises on the instance), ``exception`` (the type's name), ``message`` and
#: ``where`` (``file:line in function`` of the audited code); rendered into a test as comments only
CRASH_FIELDS = ("of", "probability", "exception", "message", "where")
_CRASH_OF = ("sampler", "loop", "audit")
#: the longest crash message / site kept (a counterexample is read by people; the test replays the crash anyway)
_CRASH_TEXT_MAX = 500
#: the replay options of a loop counterexample (``Counterexample.loop``), each rendered as an ``es.audit_loop`` keyword
LOOP_OPTIONS = ("stand_in", "dtype", "output", "on_error", "tolerance", "reference")
#: what else ``Counterexample.loop`` holds (optional in JSON, default "0"): the probability that the loop raised on the
#: instance (``on_error="record"``); the output law then sums to one minus it
LOOP_RESULTS = ("error_probability",)
#: what a loop counterexample's options may hold (allow-lists; the stand-in kinds are those of ``es.stand_in``)
_LOOP_STAND_INS = ("torch-lm", "transformers")
_LOOP_DTYPES = ("float64", "float32", "float16", "bfloat16")
_LOOP_OUTPUTS = ("full", "new")
_LOOP_ON_ERROR = ("raise", "record")
#: the largest reference gamma a loop counterexample may name (``reference_loop(gamma)``)
_LOOP_MAX_GAMMA = 64


def _rule_name(x: Any, where: str = "rule", strict: bool = True) -> str:
    """A rule name: a string, rendered only through ``str.__repr__``.

    ``strict`` (names read from JSON): 1 to 200 printable characters without quotes or
    backslashes, and the arguments of a parameterised name like ``ensemble(1/3)`` are bounded
    rationals (``es.rules.get`` would expand ``1e-999999999``).
    """
    if not isinstance(x, str):
        raise _fail(where, f"expected a rule name (a string), got {_kind(x)}")
    if not strict:
        return str.__str__(x)
    if not x.strip() or len(x) > _RULE_NAME_MAX or not x.isprintable() or any(c in x for c in "'\"\\"):
        shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
        raise _fail(where, f"{shown} is not a rule name (1 to {_RULE_NAME_MAX} printable characters, no quotes, "
                           "backslashes or newlines)")
    m = _FACTORY_CALL.fullmatch(x.strip())
    if m:  # a parameterised rule: its arguments are rationals, parsed with bounds
        for a in m.group(2).split(","):
            if a.strip():
                parse_rational(a, f"{where} argument")
    return str.__str__(x)


def valid_rule_ref(x: Any, where: str = "rule_ref") -> str:
    """``""`` or a dotted path of Python identifiers (``pkg.module.fn``), the only thing rendered as an import.

    >>> valid_rule_ref("mypkg.rules.my_rule")
    'mypkg.rules.my_rule'
    >>> valid_rule_ref("os.system('x')")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: rule_ref: "os.system('x')" is not a dotted path of Python identifiers like 'mypkg.rules.my_rule'
    """
    if not isinstance(x, str):
        raise _fail(where, f"expected a dotted Python path (a string), got {_kind(x)}")
    if x and (len(x) > 300 or not _RULE_REF.fullmatch(x) or any(keyword.iskeyword(p) for p in x.split("."))):
        shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
        raise _fail(where, f"{shown} is not a dotted path of Python identifiers like 'mypkg.rules.my_rule'")
    return str.__str__(x)


def valid_sampler_ref(x: Any, where: str = "sampler_ref") -> str:
    """``""`` or ``module.path:qual.name`` (identifiers only, no keywords): how a generated test imports the sampler.

    >>> valid_sampler_ref("exactspec.bugzoo.numpy_samplers:shared_uniform")
    'exactspec.bugzoo.numpy_samplers:shared_uniform'
    >>> valid_sampler_ref("os:system; rm")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: sampler_ref: 'os:system; rm' is not MODULE:FUNCTION (dotted Python identifiers) like 'mypkg.samplers:my_sampler'
    """
    if not isinstance(x, str):
        raise _fail(where, f"expected 'MODULE:FUNCTION' (a string), got {_kind(x)}")
    parts = re.split(r"[.:]", x)
    if x and (len(x) > 300 or not _SAMPLER_REF.fullmatch(x) or any(keyword.iskeyword(p) for p in parts)):
        shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
        raise _fail(where, f"{shown} is not MODULE:FUNCTION (dotted Python identifiers) like "
                           "'mypkg.samplers:my_sampler'")
    return str.__str__(x)


def _name(x: Any, where: str) -> str:
    """A short name (letters, digits, ``_ . -``): an adapter or an rng model, rendered through ``repr`` only."""
    if not isinstance(x, str) or not _NAME.fullmatch(x):
        shown = repr(x)[:40] if isinstance(x, str) else _kind(x)
        raise _fail(where, f"expected a name of letters, digits, '_', '.' or '-', got {shown}")
    return str.__str__(x)


def valid_loop_options(x: Any, where: str = "loop") -> dict[Any, Any]:
    """The replay options of a loop counterexample, validated: allow-listed names, a rational, a gamma or a reference.

    ``stand_in`` (``torch-lm`` or ``transformers``), ``dtype`` (a torch float dtype's name),
    ``output`` (``full``/``new``), ``on_error`` (``raise``/``record``), ``tolerance`` (a rational
    >= 0 as a string) and ``reference``: ``None`` (none), a gamma (an int,
    :func:`exactspec.samplers.loops.loop_audit.reference_loop`), ``module:qualname`` (a correct loop a test
    can import) or ``""`` (a reference loop no test can import). ``error_probability`` (optional,
    default ``"0"``): the probability, a rational string in [0, 1], that the loop raised on the
    instance (``on_error="record"``).

    >>> valid_loop_options({"stand_in": "torch-lm", "dtype": "float64", "output": "full", "on_error": "raise",
    ...                     "tolerance": "1/1099511627776", "reference": 2})["reference"]
    2
    >>> valid_loop_options({"stand_in": "torch-lm", "dtype": "float64; import os", "output": "full",
    ...                     "on_error": "raise", "tolerance": "0", "reference": None})
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: loop.dtype: must be one of float64, float32, float16, bfloat16, got 'float64; import os'
    """
    if not isinstance(x, dict):
        raise _fail(where, f"expected an object with the keys {', '.join(LOOP_OPTIONS)}, got {_kind(x)}")
    missing = [k for k in LOOP_OPTIONS if k not in x]
    if missing:
        raise _fail(where, f"missing field(s) {', '.join(missing)}")
    unknown = [k for k in x if k not in LOOP_OPTIONS + LOOP_RESULTS]
    if unknown:
        raise _fail(where, f"unknown field {str(unknown[0])[:40]!r}")
    tol = x["tolerance"]
    if not isinstance(tol, str):
        raise _fail(f"{where}.tolerance", f"expected a rational written as a string like '1/1024', got {_kind(tol)}")
    tolerance = parse_rational(tol, f"{where}.tolerance")
    if tolerance < 0:
        raise _fail(f"{where}.tolerance", f"must be >= 0, got {_s(tolerance)}")
    err = x.get("error_probability", "0")
    if not isinstance(err, str):
        raise _fail(f"{where}.error_probability", f"expected a rational written as a string like '1/4', got "
                                                   f"{_kind(err)}")
    error_probability = parse_rational(err, f"{where}.error_probability")
    if not 0 <= error_probability <= 1:
        raise _fail(f"{where}.error_probability", f"must be a probability in [0, 1], got {_s(error_probability)}")
    ref = x["reference"]
    if ref is not None:
        if isinstance(ref, int) and not isinstance(ref, bool):
            ref = _int(ref, f"{where}.reference", lo=1, hi=_LOOP_MAX_GAMMA)
        elif isinstance(ref, str):
            ref = valid_sampler_ref(ref, f"{where}.reference")
        else:
            raise _fail(f"{where}.reference", f"expected null, a gamma (an int) or 'MODULE:FUNCTION', got {_kind(ref)}")
    return {"stand_in": _choice(x["stand_in"], f"{where}.stand_in", _LOOP_STAND_INS),
            "dtype": _choice(x["dtype"], f"{where}.dtype", _LOOP_DTYPES),
            "output": _choice(x["output"], f"{where}.output", _LOOP_OUTPUTS),
            "on_error": _choice(x["on_error"], f"{where}.on_error", _LOOP_ON_ERROR),
            "tolerance": _s(tolerance), "reference": ref, "error_probability": _s(error_probability)}


def _crash_record(x: Any, where: str = "crash") -> dict[Any, Any]:
    """A crash counterexample's ``crash`` record, validated (see :data:`CRASH_FIELDS`).

    ``of`` is allow-listed, ``probability`` a rational string in (0, 1], ``exception`` a Python
    identifier (or dotted name), ``message`` and ``where`` printable text of at most 500
    characters (they reach a generated test only inside a comment, on one line).

    >>> _crash_record({"of": "loop", "probability": "1/4", "exception": "ValueError", "message": "no token",
    ...                "where": "my_loops.py:12 in loop"})["probability"]
    '1/4'
    >>> _crash_record({"of": "loop", "probability": "1/4", "exception": "os.system('x')", "message": "",
    ...                "where": ""})
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: crash.exception: "os.system('x')" is not an exception type's name
    """
    if not isinstance(x, dict):
        raise _fail(where, f"expected an object with the keys {', '.join(CRASH_FIELDS)}, got {_kind(x)}")
    missing = [k for k in CRASH_FIELDS if k not in x]
    if missing:
        raise _fail(where, f"missing field(s) {', '.join(missing)}")
    unknown = [k for k in x if k not in CRASH_FIELDS]
    if unknown:
        raise _fail(where, f"unknown field {str(unknown[0])[:40]!r}")
    prob = x["probability"]
    if not isinstance(prob, str):
        raise _fail(f"{where}.probability", f"expected a rational written as a string like '1/4', got {_kind(prob)}")
    p = parse_rational(prob, f"{where}.probability")
    if not 0 < p <= 1:
        raise _fail(f"{where}.probability", f"must be a probability in (0, 1], got {_s(p)}")
    exc = x["exception"]
    if not isinstance(exc, str) or len(exc) > 200 or not _RULE_REF.fullmatch(exc):
        shown = repr(exc)[:40] if isinstance(exc, str) else _kind(exc)
        raise _fail(f"{where}.exception", f"{shown} is not an exception type's name")
    texts = {}
    for key in ("message", "where"):
        v = x[key]
        if not isinstance(v, str):
            raise _fail(f"{where}.{key}", f"expected a string, got {_kind(v)}")
        if len(v) > _CRASH_TEXT_MAX or not v.isprintable():
            raise _fail(f"{where}.{key}", f"expected printable text of at most {_CRASH_TEXT_MAX} characters")
        texts[key] = str.__str__(v)
    return {"of": _choice(x["of"], f"{where}.of", _CRASH_OF), "probability": _s(p), "exception": str.__str__(exc),
            **texts}


def crash_record(of: str, report: Any) -> dict[Any, Any]:
    """The ``crash`` record of a report with recorded crashes: the most probable one's type, message and line.

    ``probability`` is that of every crash together (the output law misses exactly that mass).

    >>> class R:
    ...     extra = {"error_probability": "1/2", "errors": {"ValueError: no token": "1/2"},
    ...              "error_sites": {"ValueError: no token": "loops.py:3 in loop"}}
    >>> crash_record("loop", R())["where"]
    'loops.py:3 in loop'
    """
    extra = report.extra
    errors = {k: Fraction(v) for k, v in extra.get("errors", {}).items()}
    what = max(errors, key=lambda k: (errors[k], k))
    exc, _, message = what.partition(": ")
    if not _RULE_REF.fullmatch(exc):   # a type name no test comment should carry verbatim
        exc, message = "Exception", what
    message = "".join(c if c.isprintable() else " " for c in " ".join(message.split()))
    site = "".join(c if c.isprintable() else " " for c in str(extra.get("error_sites", {}).get(what, "")))
    cut = _CRASH_TEXT_MAX
    return _crash_record({"of": of, "probability": _s(Fraction(extra["error_probability"])), "exception": exc,
                          "message": message if len(message) <= cut else message[:cut - 3] + "...",
                          "where": site if len(site) <= cut else "..." + site[-(cut - 3):]})


def _law_dict(rows: Any, where: str, vocab: int, tokens: int,
              total: Fraction = Fraction(1)) -> dict[tuple[int, ...], Fraction]:
    """``[[tokens, "p/q"], ...]`` as a law over token sequences (ids < vocab, length tokens, sums to ``total``).

    ``total`` is 1 but for a loop's output law, which misses the mass of the branches on which the
    loop raised (``on_error="record"``); a total of 0 is the empty list.
    """
    if isinstance(rows, (list, tuple)) and not rows:
        if total == 0:
            return {}
        raise _fail(where, f"is empty, but its probabilities must sum to {total}")
    if not isinstance(rows, (list, tuple)) or not rows:
        raise _fail(where, f"expected a non-empty list of [tokens, probability] pairs, got {_kind(rows)}")
    out: dict[tuple[int, ...], Fraction] = {}
    for i, row in enumerate(rows):
        w = f"{where}[{i}]"
        if not isinstance(row, (list, tuple)) or len(row) != 2:
            raise _fail(w, f"expected a [tokens, probability] pair, got {_kind(row)}")
        seq, prob = row
        if not isinstance(seq, (list, tuple)):
            raise _fail(f"{w}[0]", f"expected a list of token ids, got {_kind(seq)}")
        key = tuple(_int(t, f"{w}[0][{j}]", lo=0, hi=vocab - 1) for j, t in enumerate(seq))
        if len(key) != tokens:
            raise _fail(f"{w}[0]", f"has {len(key)} tokens, expected instance.tokens = {tokens}")
        if key in out:
            raise _fail(f"{w}[0]", f"the sequence {key} appears twice")
        if isinstance(prob, float):
            raise _fail(f"{w}[1]", f"the float {prob!r} is not exact; write rationals as strings like '3/5'")
        v = parse_rational(prob, f"{w}[1]")
        if v < 0:
            raise _fail(f"{w}[1]", f"negative probability {v}")
        out[key] = v
    if sum(out.values()) != total:
        raise _fail(where, f"sums to {sum(out.values())}, not exactly {total}")
    return out


def _tv_of(output: dict[Any, Any], expected: dict[Any, Any]) -> Fraction:
    return sum((abs(output.get(k, Fraction(0)) - expected.get(k, Fraction(0))) for k in set(output) | set(expected)),
               Fraction(0)) / 2


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _s(x: Any) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _short(x: Any) -> str:
    s = _s(x)
    return s if len(s) <= 24 else f"~{float(x):.6g}"


def _maybe_short(x: Any) -> str:
    """:func:`_short` of a rational (or its string), else the text itself, cut to 80 characters."""
    try:
        return _short(Fraction(x))
    except (TypeError, ValueError, ZeroDivisionError):
        return str(x)[:80]
