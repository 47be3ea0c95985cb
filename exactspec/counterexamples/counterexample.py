"""The :class:`Counterexample` a search returns, and :class:`EmptySearch`, the record of one that found none.

>>> import exactspec as es
>>> ce = es.counterexamples.search(es.rules.greedy_match_sampled)
>>> ce.instance.vocab, ce.instance.shape, ce.instance.tokens
(2, (1,), 1)
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..errors import ExactSpecError
from ..report import Outcome
from .space import SearchInstance

__all__ = ["Counterexample", "EmptySearch"]


def _s(x: Any) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _short(x: Any) -> str:
    s = _s(x)
    return s if len(s) <= 24 else f"~{float(x):.6g}"


@dataclass
class Counterexample:
    """A minimal instance on which a rule's output law differs from the expected law, exactly."""

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
        """One plain-language sentence about the most mis-weighted outcome."""
        o = self._rows()[0]
        what = f"token {o.tokens[0]}" if len(o.tokens) == 1 else f"the sequence {o.tokens}"
        ref = "the target's greedy decoding gives" if self.instance.decoding == "greedy" else "the target gives"
        return (f"{what} is emitted with probability {_short(o.output)} but {ref} {_short(o.expected)} "
                f"(exact TV {_short(self.tv)})")

    # -- rendering ------------------------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"counterexample for {self.rule} (claim: {self.claim}): {self.instance.describe()}",
                 f"  {self.explanation}"]
        inst = self.instance
        for name, laws in (("target", inst.target), ("draft", inst.draft)):
            shown = "; ".join("(" + ", ".join(_s(x) for x in law) + ")" for law in laws)
            lines.append(f"  {name} laws: {shown}")
        for o in self._rows()[:6]:
            if o.output != o.expected:
                lines.append(f"  {o.tokens}: output {_short(o.output)} vs expected {_short(o.expected)}")
        if self.space:
            lines.append(f"  found after {self.audited} audits in {self.seconds:.2f} s over: {self.space}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(f"<tr><td>{e(str(o.tokens))}</td><td>{e(_short(o.output))}</td><td>{e(_short(o.expected))}"
                       f"</td><td>{e(_short(o.output - o.expected))}</td></tr>" for o in self._rows()[:10])
        return (f"<div><b>{e(self.rule)}</b> (claim {e(self.claim)}): counterexample, exact TV "
                f"<b>{e(_short(self.tv))}</b><br>{e(self.instance.describe())}<br><i>{e(self.explanation)}</i>"
                f"<table><tr><th>tokens</th><th>output</th><th>expected</th><th>difference</th></tr>{rows}</table></div>")

    def to_pytest(self) -> str:
        """A self-contained regression test (public API only) that fails while the bias exists."""
        inst = self.instance
        ref = self.rule_ref or f"es.rules.get({self.rule!r})"
        fname = "".join(c if c.isalnum() else "_" for c in self.rule).strip("_").lower()
        return "\n".join([
            "from fractions import Fraction as F",
            "",
            "import exactspec as es",
            *([f"import {self.rule_ref.rsplit('.', 1)[0]}"] if self.rule_ref and "." in self.rule_ref else []),
            "",
            "",
            f"def test_{fname}_keeps_the_target_law():",
            f"    # minimal counterexample from exactspec.counterexamples.search: {inst.describe()}",
            f"    # {self.explanation}",
            "    " + inst.model_source(inst.target, "target").replace("\n", "\n    "),
            "    " + inst.model_source(inst.draft, "draft").replace("\n", "\n    "),
            f"    report = es.audit(target=target, draft=draft, proposer={inst.proposer_source()},",
            f"                      rule={ref}, prompt={inst.prompt!r}, tokens={inst.tokens},",
            f"                      decoding={inst.decoding!r})",
            "    assert report.tv == 0, report.summary()",
            "",
        ])

    def to_dict(self) -> dict:
        return {"rule": self.rule, "claim": self.claim, "instance": self.instance.to_dict(),
                "output": [[list(k), _s(v)] for k, v in sorted(self.output.items())],
                "expected": [[list(k), _s(v)] for k, v in sorted(self.expected.items())],
                "tv": _s(self.tv), "space": self.space, "audited": self.audited, "seconds": round(self.seconds, 4),
                "shrink_steps": self.shrink_steps, "rule_ref": self.rule_ref, "explanation": self.explanation}

    def to_json(self, **kw: Any) -> str:
        """JSON with exact numbers as ``"p/q"`` strings; :meth:`from_json` reads it back."""
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_json(cls, text: str) -> "Counterexample":
        """Rebuild a counterexample written by :meth:`to_json`.

        >>> import exactspec as es
        >>> ce = es.counterexamples.search(es.rules.resample_from_target)
        >>> Counterexample.from_json(ce.to_json()) == ce
        True
        """
        try:
            d = json.loads(text)
            return cls(rule=d["rule"], claim=d["claim"], instance=SearchInstance.from_dict(d["instance"]),
                       output={tuple(k): Fraction(v) for k, v in d["output"]},
                       expected={tuple(k): Fraction(v) for k, v in d["expected"]}, tv=Fraction(d["tv"]),
                       space=d.get("space", ""), audited=d.get("audited", 0), seconds=d.get("seconds", 0.0),
                       shrink_steps=d.get("shrink_steps", 0), rule_ref=d.get("rule_ref", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise ExactSpecError(f"not a counterexample JSON: {exc}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counterexample) and (self.rule, self.instance, self.output, self.expected, self.tv) == (
            other.rule, other.instance, other.output, other.expected, other.tv)


@dataclass
class EmptySearch:
    """What a search that found no counterexample covered. Falsy, so ``if not search(...)`` reads well.

    >>> bool(EmptySearch(rule="r", space="vocab 2..2", audited=3, seconds=0.1))
    False
    """

    rule: str
    space: str
    audited: int
    seconds: float
    errors: int = 0
    best_tv: Fraction = Fraction(0)
    best: SearchInstance | None = None

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        extra = f"; {self.errors} instances where the rule raised were skipped" if self.errors else ""
        return (f"no counterexample for {self.rule}: {self.audited} instances audited exactly in {self.seconds:.2f} s, "
                f"every one lossless, over: {self.space}{extra}")
