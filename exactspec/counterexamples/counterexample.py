"""What a search returns: a :class:`Counterexample`, an :class:`EmptySearch` or an :class:`IncompleteSearch`.

=====================  =========  ============  ===========  ===============================
result                 ``found``  ``complete``  ``bool()``   ``exit_code`` (CLI)
=====================  =========  ============  ===========  ===============================
``Counterexample``     True       True [#]_     True         1 (bias found)
``EmptySearch``        False      True          False        0 (no bias in the stated space)
``IncompleteSearch``   False      False         raises       3 (space not covered)
=====================  =========  ============  ===========  ===============================

.. [#] a counterexample from :func:`~exactspec.counterexamples.worst` that stopped early has
   ``complete=False`` (the bias is certain; that it is the worst found is not).

>>> import exactspec as es
>>> ce = es.counterexamples.search(es.rules.greedy_match_sampled)
>>> ce.instance.vocab, ce.instance.shape, ce.instance.tokens
(2, (1,), 1)
>>> ce.found, ce.complete, ce.exit_code
(True, True, 1)
"""

from __future__ import annotations

import html
import json
import keyword
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .._jsonread import load_json
from .._numbers import parse_rational
from ..errors import ExactSpecError, InvalidValue
from ..report import Outcome
from ..rules.record import CLAIMS as RULE_CLAIMS
from .space import SearchInstance, _choice, _fail, _int, _kind

__all__ = ["Counterexample", "EmptySearch", "IncompleteSearch"]

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


def valid_loop_options(x: Any, where: str = "loop") -> dict:
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


def _crash_record(x: Any, where: str = "crash") -> dict:
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


def crash_record(of: str, report: Any) -> dict:
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


def _tv_of(output: dict, expected: dict) -> Fraction:
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


@dataclass
class Counterexample:
    """A minimal instance on which a rule's output law differs from the expected law, exactly.

    ``found`` is True and ``exit_code`` 1. ``complete`` is False only for a
    :func:`~exactspec.counterexamples.worst` result that stopped before its plan was done
    (``stopped`` says why): the bias is certain, that it is the largest is not.

    >>> import exactspec as es
    >>> ce = es.counterexamples.search(es.rules.resample_from_target)
    >>> bool(ce), ce.found, ce.complete, ce.exit_code
    (True, True, True, 1)
    """

    rule: str
    claim: str
    instance: SearchInstance
    output: dict
    expected: dict
    tv: Fraction
    space: str = ""
    audited: int = 0
    seconds: float = 0.0
    shrink_steps: int = 0
    rule_ref: str = ""
    extra: dict = field(default_factory=dict)
    complete: bool = True
    stopped: str = ""
    #: "rule" (found by :func:`~exactspec.counterexamples.search`) or "sampler" (found by a sampler search,
    #: :func:`exactspec.samplers.search.search_sampler`: ``rule`` is then the sampler's name)
    kind: str = "rule"
    #: samplers: ``module:qualname`` the regression test imports the sampler from ("" when it is not importable)
    sampler_ref: str = ""
    #: samplers: the adapter's name, and the rng model of the audits (loops: the rng model)
    adapter: str = ""
    rng_model: str = "continuous"
    #: loops (kind "loop", found by ``es.search_loop(...)``; ``sampler_ref`` is then the loop's
    #: ``module:qualname``): the ``es.audit_loop`` options the regression test replays, keys :data:`LOOP_OPTIONS`
    loop: dict = field(default_factory=dict)
    #: crashes (kind "crash"): what raised, how often and where, keys :data:`CRASH_FIELDS`; a sampler's crash
    #: also sets ``sampler_ref``, ``adapter`` and ``rng_model``, a loop's ``sampler_ref``, ``rng_model`` and ``loop``
    crash: dict = field(default_factory=dict)

    @property
    def found(self) -> bool:
        """Always True: a counterexample was found (compare :attr:`EmptySearch.found`)."""
        return True

    @property
    def exit_code(self) -> int:
        """The CLI's exit status for this result: 1, a bias was found."""
        return 1

    # -- what differs -----------------------------------------------------------------------------
    def _rows(self) -> list[Outcome]:
        keys = set(self.output) | set(self.expected)
        rows = [Outcome(k, self.output.get(k, Fraction(0)), self.expected.get(k, Fraction(0))) for k in keys]
        rows.sort(key=lambda o: (-abs(o.output - o.expected), o.tokens))
        return rows

    @property
    def over(self) -> list[Outcome]:
        """Outcomes emitted more often than expected, most over-weighted first."""
        return [o for o in self._rows() if o.output > o.expected]

    @property
    def under(self) -> list[Outcome]:
        """Outcomes emitted less often than expected, most under-weighted first."""
        return [o for o in self._rows() if o.output < o.expected]

    @property
    def explanation(self) -> str:
        """One plain-language sentence about the most mis-weighted outcome (a crash: what raised, how often, where)."""
        if self.kind == "crash":
            c = self.crash
            return (f"the {c['of']} raises {c['exception']}: {c['message']} with probability "
                    f"{_maybe_short(c['probability'])} on this instance, at {c['where']}")
        o = self._rows()[0]
        what = f"token {o.tokens[0]}" if len(o.tokens) == 1 else f"the sequence {o.tokens}"
        ref = "the target's greedy decoding gives" if self.instance.decoding == "greedy" else "the target gives"
        return (f"{what} is emitted with probability {_short(o.output)} but {ref} {_short(o.expected)} "
                f"(exact TV {_short(self.tv)})")

    # -- rendering ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        head = "crash counterexample" if self.kind == "crash" else "counterexample"
        lines = [f"{head} for {self.rule} (claim: {self.claim}): {self._describe_instance()}",
                 f"  {self.explanation}"]
        inst = self.instance
        for name, laws in (("target", inst.target), ("draft", inst.draft)):
            shown = "; ".join("(" + ", ".join(_s(x) for x in law) + ")" for law in laws)
            lines.append(f"  {name} laws: {shown}")
        for o in self._rows()[:6]:
            if o.output != o.expected:
                lines.append(f"  {o.tokens}: output {_short(o.output)} vs expected {_short(o.expected)}")
        if self.kind not in ("rule", "crash") and "verdict_reason" in self.extra:
            lines.append(f"  not rounding: {self.extra['verdict_reason']}")
        elif self.kind not in ("rule", "crash") and "rounding_tv" in self.extra:
            lines.append(f"  not rounding: a correct {'loop' if self.kind == 'loop' else 'sampler'} through the "
                         "same float pipeline is within TV "
                         f"{_maybe_short(self.extra['rounding_tv'])} of the target; this sampler is at TV "
                         f"{_maybe_short(self.extra.get('algorithmic_tv', self.tv))} from it")
        if self.kind == "crash":
            lines.append(f"  a {self.crash['of']} that raises on a valid input with positive probability is defective; "
                         "the output law above holds the branches that returned")
        if self.kind == "loop" and self.loop.get("error_probability", "0") != "0":
            lines.append(f"  the loop raised with probability {_maybe_short(self.loop['error_probability'])} on this "
                         "instance (on_error='record'); the output law holds the branches that returned")
        if self.space:
            lines.append(f"  found after {self.audited} audits in {self.seconds:.2f} s over: {self.space}")
        if not self.complete:
            lines.append(f"  the search stopped early ({self.stopped or 'reason not recorded'}): this is the largest "
                         "TV found so far, not necessarily the largest in the space")
        return "\n".join(lines)

    def _returned_mass(self) -> Fraction:
        """The mass of the output law: 1, or for a loop one minus the probability that it raised."""
        if self.kind == "crash":
            return 1 - Fraction(_crash_record(self.crash, "crash")["probability"])
        if self.kind != "loop":
            return Fraction(1)
        return 1 - Fraction(valid_loop_options(self.loop, "loop")["error_probability"])

    def _describe_instance(self) -> str:
        """The instance in words; a loop's instance without the proposer (the loop drafts with its own gamma)."""
        inst = self.instance
        if self.kind != "loop" and not (self.kind == "crash" and self.crash.get("of") == "loop"):
            return inst.describe()
        return (f"vocab {inst.vocab}, {inst.tokens} token(s), {inst.family.replace('_', '-')} models, prompt "
                f"{inst.prompt} (a whole run of the loop, drafting included)")

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(f"<tr><td>{e(str(o.tokens))}</td><td>{e(_short(o.output))}</td><td>{e(_short(o.expected))}"
                       f"</td><td>{e(_short(o.output - o.expected))}</td></tr>" for o in self._rows()[:10])
        return (f"<div><b>{e(self.rule)}</b> (claim {e(self.claim)}): counterexample, exact TV "
                f"<b>{e(_short(self.tv))}</b><br>{e(self._describe_instance())}<br><i>{e(self.explanation)}</i>"
                f"<table><tr><th>tokens</th><th>output</th><th>expected</th><th>difference</th></tr>{rows}</table></div>")

    def check(self) -> "Counterexample":
        """Validate every field that :meth:`to_pytest` renders (types, allow-lists, consistency); return self.

        >>> import exactspec as es
        >>> ce = es.counterexamples.search(es.rules.resample_from_target)
        >>> ce.check() is ce
        True
        """
        _rule_name(self.rule, "rule", strict=False)  # any str: rendered through str.__repr__ only
        _choice(self.claim, "claim", RULE_CLAIMS)
        valid_rule_ref(self.rule_ref, "rule_ref")
        _choice(self.kind, "kind", KINDS)
        if self.kind == "sampler":
            valid_sampler_ref(self.sampler_ref, "sampler_ref")
            _name(self.adapter, "adapter")
            _name(self.rng_model, "rng_model")
        if self.kind == "loop":
            valid_sampler_ref(self.sampler_ref, "sampler_ref")
            _name(self.rng_model, "rng_model")
            valid_loop_options(self.loop, "loop")
        if self.kind == "crash":
            crash = _crash_record(self.crash, "crash")
            valid_sampler_ref(self.sampler_ref, "sampler_ref")
            _name(self.rng_model, "rng_model")
            if crash["of"] == "sampler":
                _name(self.adapter, "adapter")
            else:
                loop = valid_loop_options(self.loop, "loop")
                if loop["error_probability"] != crash["probability"] or loop["on_error"] != "record":
                    raise _fail("loop", "a loop's crash replays with on_error 'record' and the crash's probability")
        if not isinstance(self.instance, SearchInstance):
            raise _fail("instance", f"expected a SearchInstance, got {_kind(self.instance)}")
        inst = self.instance.check("instance")
        for name in ("output", "expected"):
            law = getattr(self, name)
            if not isinstance(law, dict) or not all(
                    isinstance(k, tuple) and isinstance(v, Fraction) for k, v in law.items()):
                raise _fail(name, "expected a dict from tuples of token ids to Fractions")
            _law_dict([[list(k), v] for k, v in law.items()], name, inst.vocab, inst.tokens,
                      total=self._returned_mass() if name == "output" else Fraction(1))
        if not isinstance(self.tv, Fraction) or self.tv <= 0 or self.tv != _tv_of(self.output, self.expected):
            raise _fail("tv", f"{self.tv!r} is not the (positive) exact TV between output and expected")
        if self.kind == "crash" and Fraction(self.crash["probability"]) == 0:
            raise _fail("crash.probability", "a crash counterexample crashes with positive probability")
        return self

    def to_pytest(self) -> str:
        """A self-contained regression test (public API only) that fails while the bias exists.

        Every field is validated first (:meth:`check`): the source holds only ``repr()`` of ints,
        tuples of ints, Fractions (as ``F(p, q)``), allow-listed strings and the rule name, and
        an ``import`` of ``rule_ref`` only when it is a dotted path of identifiers.
        """
        self.check()
        of = self.crash["of"] if self.kind == "crash" else self.kind
        if of == "sampler":
            return self._sampler_pytest()
        if of == "loop":
            return self._loop_pytest()
        if of == "audit":
            raise ExactSpecError(f"to_pytest: this counterexample of {str.__repr__(str(self.rule))} came from a "
                                 "generic per-instance search (search_instances), which does not know how to call the "
                                 "audited code from a test; search a sampler with es.search_sampler(...), or a "
                                 "loop with es.search_loop(...), to get one")
        inst = self.instance
        name, rule_ref = _rule_name(self.rule, strict=False), valid_rule_ref(self.rule_ref)
        ref = rule_ref or f"es.rules.get({str.__repr__(name)})"
        fname = "".join(c if c.isascii() and c.isalnum() else "_" for c in name).strip("_").lower() or "rule"
        prompt, tokens = tuple(int(t) for t in inst.prompt), int(inst.tokens)
        decoding = _choice(inst.decoding, "instance.decoding", ("sample", "greedy"))
        return "\n".join([
            "from fractions import Fraction as F",
            "",
            "import exactspec as es",
            *([f"import {rule_ref.rsplit('.', 1)[0]}"] if "." in rule_ref else []),
            "",
            "",
            f"def test_{fname}_keeps_the_target_law():",
            f"    # minimal counterexample from exactspec.counterexamples.search: {_one_line(inst.describe())}",
            f"    # {_one_line(self.explanation)}",
            "    " + inst.model_source(inst.target, "target").replace("\n", "\n    "),
            "    " + inst.model_source(inst.draft, "draft").replace("\n", "\n    "),
            f"    report = es.audit(target=target, draft=draft, proposer={inst.proposer_source()},",
            f"                      rule={ref}, prompt={prompt!r}, tokens={tokens!r},",
            f"                      decoding={decoding!r})",
            "    assert report.tv == 0, report.summary()",
            "",
        ])

    def _sampler_pytest(self) -> str:
        """The regression test of a sampler counterexample: ``es.audit_sampler`` on the user's sampler, imported."""
        inst = self.instance
        name = _rule_name(self.rule, strict=False)
        module, qual = self._user_code("sampler", name, "search with the sampler given as 'module:function'")
        adapter, rng_model = _name(self.adapter, "adapter"), _name(self.rng_model, "rng_model")
        from ..samplers.adapters.registry import get_adapter
        try:
            get_adapter(adapter)
        except ExactSpecError:
            raise ExactSpecError(f"to_pytest: the adapter {adapter!r} is not built in, so a generated test cannot "
                                 "build it by name; audit the sampler on this instance in your own test with "
                                 "es.audit_sampler(sampler, adapter=<your adapter object>, ...)") from None
        prompt, tokens = tuple(int(t) for t in inst.prompt), int(inst.tokens)
        return self._code_test(name, "sampler", [f"import {module} as sampler_module"],
                               f"exactspec's sampler search: {_one_line(inst.describe())}", [
            f"    report = es.audit_sampler(sampler_module.{qual}, adapter={adapter!r}, target=target, draft=draft,",
            f"                              proposer={inst.proposer_source()},",
            f"                              prompt={prompt!r}, tokens={tokens!r}, rng_model={rng_model!r}"
            + (", on_error='record')" if self.kind == "crash" else ")")])

    def _loop_pytest(self) -> str:
        """The regression test of a loop counterexample: ``es.audit_loop`` on the user's loop, imported."""
        inst = self.instance
        name = _rule_name(self.rule, strict=False)
        module, qual = self._user_code("loop", name, "search it from the command line as 'module:function' "
                                                     "(exactspec audit-loop)")
        opts = valid_loop_options(self.loop, "loop")
        rng_model = _name(self.rng_model, "rng_model")
        ref = opts["reference"]
        ref_import: list[str] = []
        if ref == "":
            raise ExactSpecError(
                f"to_pytest: the reference loop of the search of {str.__repr__(name)} cannot be imported by a test "
                "(a lambda, a closure or a function defined in __main__): pass reference=<gamma> "
                "(es.samplers.loops.loop_audit.reference_loop) or a top-level function of an importable module")
        if isinstance(ref, str):
            ref_module, ref_qual = ref.split(":")
            ref_import = [f"import {ref_module} as reference_module"]
            ref_src = f"reference_module.{ref_qual}"
        else:
            ref_src = repr(None if ref is None else int(ref))
        tol = Fraction(opts["tolerance"])
        prompt, tokens = tuple(int(t) for t in inst.prompt), int(inst.tokens)
        return self._code_test(name, "loop", [f"import {module} as loop_module", *ref_import],
                               f"exactspec's whole-loop search: {_one_line(self._describe_instance())}", [
            f"    report = es.audit_loop(loop_module.{qual}, target=target, draft=draft, prompt={prompt!r},",
            f"                           tokens={tokens!r}, kind={opts['stand_in']!r}, dtype=torch.{opts['dtype']},",
            f"                           output={opts['output']!r}, on_error={opts['on_error']!r},",
            f"                           tolerance=F({int(tol.numerator)!r}, {int(tol.denominator)!r}), "
            f"reference={ref_src}, rng_model={rng_model!r})"], third_party=("torch",))

    def _user_code(self, what: str, name: str, how: str) -> tuple[str, str]:
        """``(module, qualname)`` of the user's sampler or loop, or a typed error saying how to make it importable."""
        if not self.sampler_ref:
            raise ExactSpecError(
                f"to_pytest: the {what} {str.__repr__(name)} cannot be imported by a test (a lambda, a closure, a "
                "method of an instance, or a function defined in __main__ or inside another function): define it at "
                f"the top level of an importable module, or {how}, to get a regression test")
        module, qual = valid_sampler_ref(self.sampler_ref).split(":")
        return module, qual

    def _code_test(self, name: str, what: str, imports: list[str], origin: str, call: list[str],
                   third_party: tuple[str, ...] = ()) -> str:
        """A regression test auditing the user's code on this instance: the imports (``third_party`` modules, then
        exactspec, then ``imports``), the models, ``call`` (which binds ``report``), and the assertion that the
        verdict is lossless."""
        inst = self.instance
        fname = "".join(c if c.isascii() and c.isalnum() else "_" for c in name).strip("_").lower() or what
        test = f"test_{fname}_does_not_crash_and_keeps_the_target_law" if self.kind == "crash" else \
            f"test_{fname}_keeps_the_target_law"
        return "\n".join([
            "from fractions import Fraction as F",
            "",
            *(f"import {m}" for m in third_party),
            *([""] if third_party else []),
            "import exactspec as es",
            *imports,
            "",
            "",
            f"def {test}():",
            f"    # minimal {'crashing instance' if self.kind == 'crash' else 'counterexample'} from {origin}",
            f"    # {_one_line(self.explanation)}",
            "    " + inst.model_source(inst.target, "target").replace("\n", "\n    "),
            "    " + inst.model_source(inst.draft, "draft").replace("\n", "\n    "),
            *call,
            *(["    assert report.error_probability == 0, report.verdict_text   # the crash is gone"]
              if self.kind == "crash" else []),
            "    assert report.verdict == \"lossless\", report.summary()",
            "",
        ])

    def to_dict(self) -> dict:
        sampler = {} if self.kind == "rule" else {"kind": self.kind, "sampler_ref": self.sampler_ref,
                                                  "adapter": self.adapter, "rng_model": self.rng_model,
                                                  "extra": {str(k): str(v) for k, v in self.extra.items()}}
        if self.kind == "loop" or (self.kind == "crash" and self.crash.get("of") == "loop"):
            sampler["loop"] = dict(self.loop)
        if self.kind == "crash":
            sampler["crash"] = dict(self.crash)
        return {**self._to_dict(), **sampler}

    def _to_dict(self) -> dict:
        return {"rule": self.rule, "claim": self.claim, "instance": self.instance.to_dict(),
                "output": [[list(k), _s(v)] for k, v in sorted(self.output.items())],
                "expected": [[list(k), _s(v)] for k, v in sorted(self.expected.items())],
                "tv": _s(self.tv), "space": self.space, "audited": self.audited, "seconds": round(self.seconds, 4),
                "shrink_steps": self.shrink_steps, "rule_ref": self.rule_ref, "explanation": self.explanation,
                "found": True, "complete": self.complete, "stopped": self.stopped}

    def to_json(self, **kw: Any) -> str:
        """JSON with exact numbers as ``"p/q"`` strings; :meth:`from_json` reads it back."""
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_json(cls, text: str) -> "Counterexample":
        """Rebuild a counterexample written by :meth:`to_json`; any other input is a typed error naming the field.

        The input is untrusted: every field's type is checked (token ids and counts are ints, laws
        are exact rationals summing to 1 with ``vocab`` entries, names are allow-listed or match a
        safe pattern, ``tv`` equals the TV of ``output`` and ``expected``), so :meth:`to_pytest`
        of the result renders nothing but validated values.

        >>> import exactspec as es
        >>> ce = es.counterexamples.search(es.rules.resample_from_target)
        >>> Counterexample.from_json(ce.to_json()) == ce
        True
        >>> Counterexample.from_json("[]")
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: not a counterexample JSON: expected an object, got a list
        """
        try:
            return cls._from_json(text)
        except ExactSpecError as exc:
            raise InvalidValue(f"not a counterexample JSON: {exc}") from None

    @classmethod
    def _from_json(cls, text: Any) -> "Counterexample":
        d = load_json(text, "input")  # str only; invalid JSON, NaN and deep nesting are typed errors
        if not isinstance(d, dict):
            raise InvalidValue(f"expected an object, got {_kind(d)}")
        missing = [k for k in ("rule", "claim", "instance", "output", "expected", "tv") if k not in d]
        if missing:
            raise InvalidValue(f"missing field(s) {', '.join(missing)}")
        inst = SearchInstance.from_dict(d["instance"], "instance")
        crash = _crash_record(d.get("crash"), "crash") if d.get("kind") == "crash" else {}
        is_loop = d.get("kind") == "loop" or crash.get("of") == "loop"
        loop = valid_loop_options(d.get("loop"), "loop") if is_loop else {}
        output = _law_dict(d["output"], "output", inst.vocab, inst.tokens,
                           total=1 - Fraction(crash.get("probability", loop.get("error_probability", "0"))))
        expected = _law_dict(d["expected"], "expected", inst.vocab, inst.tokens)
        tv = parse_rational(d["tv"], "tv")
        if tv <= 0 or tv != _tv_of(output, expected):
            raise _fail("tv", f"{_s(tv)} is not the (positive) exact TV between output and expected")
        space = d.get("space", "")
        if not isinstance(space, str):
            raise _fail("space", f"expected a string, got {_kind(space)}")
        seconds = d.get("seconds", 0.0)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise _fail("seconds", f"expected a finite number >= 0, got {_kind(seconds)}")
        complete = d.get("complete", True)
        if not isinstance(complete, bool):
            raise _fail("complete", f"expected a bool, got {_kind(complete)}")
        if d.get("found", True) is not True:
            raise _fail("found", "a counterexample JSON has found = true")
        stopped = d.get("stopped", "")
        for key in ("explanation", "stopped"):
            if not isinstance(d.get(key, ""), str):
                raise _fail(key, f"expected a string, got {_kind(d[key])}")
        kind = _choice(d.get("kind", "rule"), "kind", KINDS)
        sampler: dict = {} if kind == "rule" else dict(
            kind=kind, sampler_ref=valid_sampler_ref(d.get("sampler_ref", ""), "sampler_ref"),
            rng_model=_name(d.get("rng_model", "continuous"), "rng_model"))
        if kind == "sampler" or crash.get("of") == "sampler":
            sampler["adapter"] = _name(d.get("adapter"), "adapter")
        if kind == "loop" or crash.get("of") == "loop":
            sampler["loop"] = loop
        if kind == "crash":
            sampler["crash"] = crash
        ce = cls(rule=_rule_name(d["rule"], "rule"), claim=_choice(d["claim"], "claim", RULE_CLAIMS), instance=inst,
                 output=output, expected=expected, tv=tv, space=space,
                 audited=_int(d.get("audited", 0), "audited", lo=0), seconds=float(seconds),
                 shrink_steps=_int(d.get("shrink_steps", 0), "shrink_steps", lo=0),
                 rule_ref=valid_rule_ref(d.get("rule_ref", ""), "rule_ref"), complete=complete, stopped=stopped,
                 **sampler)
        return ce.check()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counterexample) and (
            self.rule, self.instance, self.output, self.expected, self.tv, self.kind, self.sampler_ref, self.adapter,
            self.rng_model, self.loop, self.crash) == (other.rule, other.instance, other.output, other.expected, other.tv,
                                                       other.kind, other.sampler_ref, other.adapter, other.rng_model,
                                                       other.loop, other.crash)


@dataclass
class EmptySearch:
    """A search that covered its whole space and found no counterexample. Falsy, so ``if not search(...)`` reads well.

    ``found`` is False, ``complete`` True, ``exit_code`` 0. "No counterexample" is a statement
    about ``space`` only, and the text says so. A search that stopped early, or skipped
    instances where the rule raised, returns an :class:`IncompleteSearch` instead, so an
    ``EmptySearch`` always has ``errors == 0`` (kept as a field for old callers).

    >>> e = EmptySearch(rule="r", space="vocab 2..2", audited=3, seconds=0.1)
    >>> bool(e), e.found, e.complete, e.exit_code
    (False, False, True, 0)
    >>> str(e)
    'no counterexample for r in this space: 3 instances audited exactly in 0.10 s, every one lossless (a statement about this space only), over: vocab 2..2'
    """

    rule: str
    space: str
    audited: int
    seconds: float
    errors: int = 0
    best_tv: Fraction = Fraction(0)
    best: SearchInstance | None = None

    def __post_init__(self) -> None:
        if self.errors:
            raise InvalidValue(f"EmptySearch with errors={self.errors}: a search that skipped instances where the "
                               "rule raised is an IncompleteSearch")

    found = False
    complete = True
    exit_code = 0

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return (f"no counterexample for {self.rule} in this space: {self.audited} instances audited exactly in "
                f"{self.seconds:.2f} s, every one lossless (a statement about this space only), over: {self.space}")

    def to_dict(self) -> dict:
        return {"rule": self.rule, "found": False, "complete": True, "space": self.space, "audited": self.audited,
                "seconds": round(self.seconds, 4)}

    def to_json(self, **kw: Any) -> str:
        """The JSON the CLI prints for a search that came back empty."""
        return json.dumps(self.to_dict(), **kw)


@dataclass
class IncompleteSearch:
    """A search that stopped before covering its space (or could not audit all of it) and found no counterexample.

    It is neither a counterexample nor an empty search: ``found`` is False, ``complete`` is
    False, ``exit_code`` is 3, and ``bool()`` **raises** :class:`~exactspec.ExactSpecError`, so
    ``if not search(...):`` cannot silently read an unfinished search as "no counterexample".
    Test ``result.found`` / ``result.complete`` or ``isinstance(result, IncompleteSearch)``.

    ``reason`` says why (``"time limit 0.01 s reached"``, ``"max_instances 10 reached"``,
    ``"the rule raised on 3 of 120 instances"``, ``"the audit budget was exceeded on 1 of 40
    instances"``, several joined by ``"; "``). ``cells_covered`` of ``cells_total`` cells were
    fully covered, in ``covered`` (words); ``stopped_in`` is the cell being searched when the
    search stopped (``""`` when every cell was visited). ``errors`` instances raised, the first
    few in ``error_samples`` as ``(instance, message)``; ``over_budget`` instances ran past the
    audit budget. Their TV is unknown.

    >>> r = IncompleteSearch(rule="r", space="vocab 2..2", reason="max_instances 10 reached", audited=10,
    ...                      seconds=0.1, cells_covered=1, cells_total=3, stopped_in="vocab 2, gamma 2, 1 token(s)")
    >>> r.found, r.complete, r.exit_code
    (False, False, 3)
    >>> bool(r)
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: an IncompleteSearch is neither a counterexample nor an empty search (max_instances 10 reached): test result.found and result.complete, or isinstance(result, IncompleteSearch)
    """

    rule: str
    space: str
    reason: str
    audited: int
    seconds: float
    cells_covered: int = 0
    cells_total: int = 0
    covered: tuple[str, ...] = ()
    stopped_in: str = ""
    errors: int = 0
    error_samples: tuple[tuple[str, str], ...] = ()
    over_budget: int = 0

    found = False
    complete = False
    exit_code = 3

    def __bool__(self) -> bool:
        raise ExactSpecError(f"an IncompleteSearch is neither a counterexample nor an empty search ({self.reason}): "
                             "test result.found and result.complete, or isinstance(result, IncompleteSearch)")

    def __str__(self) -> str:
        where = (f"stopped in cell {self.stopped_in}; " if self.stopped_in else "")
        lines = [f"INCOMPLETE search for {self.rule}: {self.reason}.",
                 f"  No counterexample among the {self.audited} instances audited in {self.seconds:.2f} s, but this is "
                 "not a pass: the space was not covered",
                 f"  {where}{self.cells_covered} of {self.cells_total} cells fully covered; space: {self.space}"]
        if self.errors:
            lines.append(f"  the rule raised on {self.errors} instance(s) (their TV is unknown), e.g.:")
            lines += [f"    {desc}: {msg}" for desc, msg in self.error_samples]
        if self.over_budget:
            lines.append(f"  {self.over_budget} instance(s) ran past the audit budget (their TV is unknown)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"rule": self.rule, "found": False, "complete": False, "reason": self.reason, "space": self.space,
                "audited": self.audited, "seconds": round(self.seconds, 4), "cells_covered": self.cells_covered,
                "cells_total": self.cells_total, "covered": list(self.covered), "stopped_in": self.stopped_in,
                "errors": self.errors,
                "error_samples": [list(e) for e in self.error_samples], "over_budget": self.over_budget}

    def to_json(self, **kw: Any) -> str:
        """The JSON the CLI prints for an incomplete search."""
        return json.dumps(self.to_dict(), **kw)
