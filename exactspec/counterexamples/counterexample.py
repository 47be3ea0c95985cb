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
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .._jsonread import load_json
from .._numbers import parse_rational
from ..errors import ExactSpecError, InvalidValue
from ..report import Outcome
from ..rules.record import CLAIMS as RULE_CLAIMS
from .space import SearchInstance, _choice, _fail, _int, _kind
# CRASH_FIELDS, LOOP_OPTIONS and crash_record are read from here by the searches (re-exported)
from .records import (CRASH_FIELDS, KINDS, LOOP_OPTIONS, _crash_record, _law_dict, _maybe_short, _name, _one_line,
                      _rule_name, _s, _short, _tv_of, crash_record, valid_loop_options, valid_rule_ref,
                      valid_sampler_ref)

__all__ = ["Counterexample", "EmptySearch", "IncompleteSearch"]



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
    output: dict[Any, Any]
    expected: dict[Any, Any]
    tv: Fraction
    space: str = ""
    audited: int = 0
    seconds: float = 0.0
    shrink_steps: int = 0
    rule_ref: str = ""
    extra: dict[Any, Any] = field(default_factory=dict[Any, Any])
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
    loop: dict[Any, Any] = field(default_factory=dict[Any, Any])
    #: crashes (kind "crash"): what raised, how often and where, keys :data:`CRASH_FIELDS`; a sampler's crash
    #: also sets ``sampler_ref``, ``adapter`` and ``rng_model``, a loop's ``sampler_ref``, ``rng_model`` and ``loop``
    crash: dict[Any, Any] = field(default_factory=dict[Any, Any])

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

    def to_dict(self) -> dict[Any, Any]:
        sampler = {} if self.kind == "rule" else {"kind": self.kind, "sampler_ref": self.sampler_ref,
                                                  "adapter": self.adapter, "rng_model": self.rng_model,
                                                  "extra": {str(k): str(v) for k, v in self.extra.items()}}
        if self.kind == "loop" or (self.kind == "crash" and self.crash.get("of") == "loop"):
            sampler["loop"] = dict(self.loop)
        if self.kind == "crash":
            sampler["crash"] = dict(self.crash)
        return {**self._to_dict(), **sampler}

    def _to_dict(self) -> dict[Any, Any]:
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
        sampler: dict[Any, Any] = {} if kind == "rule" else dict(
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

    def to_dict(self) -> dict[Any, Any]:
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

    def to_dict(self) -> dict[Any, Any]:
        return {"rule": self.rule, "found": False, "complete": False, "reason": self.reason, "space": self.space,
                "audited": self.audited, "seconds": round(self.seconds, 4), "cells_covered": self.cells_covered,
                "cells_total": self.cells_total, "covered": list(self.covered), "stopped_in": self.stopped_in,
                "errors": self.errors,
                "error_samples": [list(e) for e in self.error_samples], "over_budget": self.over_budget}

    def to_json(self, **kw: Any) -> str:
        """The JSON the CLI prints for an incomplete search."""
        return json.dumps(self.to_dict(), **kw)
