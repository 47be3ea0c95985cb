"""One :class:`AuditReport` type for every entry point: laws, exact TV, verdict, efficiency.

>>> import exactspec as es
>>> r = es.audit(target=es.models.context_free(("3/5", "2/5")), draft=es.models.context_free(("1/2", "1/2")),
...              proposer=es.drafts.chain(1), rule=es.rules.greedy_match_sampled, tokens=1)
>>> r.tv, r.lossless, r.verdict
(Fraction(1, 5), False, 'biased')
>>> r.worst[0]
Outcome(tokens=(0,), output=Fraction(4, 5), expected=Fraction(3, 5))
"""

from __future__ import annotations

import html
import json
from fractions import Fraction
from dataclasses import dataclass, field as dc_field
from typing import Any, NamedTuple

from .fields import Field, get_field

__all__ = ["AuditReport", "Outcome"]


class Outcome(NamedTuple):
    """One emitted token sequence with its probability under the output and the expected law."""

    tokens: tuple
    output: Any
    expected: Any

    @property
    def diff(self) -> Any:
        return self.output - self.expected


def _sorted_law(law: dict) -> list[tuple]:
    return sorted(law.items(), key=lambda kv: kv[0])


@dataclass
class AuditReport:
    """The result of an audit: exact output and expected laws, TV, verdict, efficiency, provenance."""

    rule: str
    claim: str
    instance: dict
    field: Field
    output: dict
    expected: dict
    tv: Any
    tolerance: Any
    tokens_per_call: Any
    target_calls: Any
    seconds: float = 0.0
    paths: int = 0
    step_laws: int = 0
    reference: str = ""
    worst_count: int = 5
    extra: dict = dc_field(default_factory=dict)
    accepted_per_call: Any = None
    nodes_per_call: Any = None

    # -- verdicts ---------------------------------------------------------------------------------
    @property
    def lossless(self) -> bool:
        """TV <= the stated tolerance (0 in the exact field) and no support violation."""
        if self.tolerance and self.support_violations:
            return False
        return self.tv <= self.tolerance

    @property
    def verdict(self) -> str:
        return "lossless" if self.lossless else "biased"

    @property
    def claim_holds(self) -> bool:
        """Whether the rule's claim is borne out on this instance.

        ``biased`` holds when a bias is found; every other claim holds when the output law equals
        the law it is compared with (the instance's ``decoding`` or declared target says which).
        """
        return (not self.lossless) if self.claim == "biased" else self.lossless

    @property
    def worst(self) -> list[Outcome]:
        """The outcomes with the largest ``|output - expected|`` (ties by token order)."""
        zero = 0
        keys = set(self.output) | set(self.expected)
        rows = [Outcome(k, self.output.get(k, zero), self.expected.get(k, zero)) for k in keys]
        rows.sort(key=lambda o: (-abs(o.output - o.expected), o.tokens))
        return [o for o in rows[: self.worst_count] if o.output != o.expected]

    @property
    def support_violations(self) -> list[tuple]:
        """Outcomes emitted with positive probability that the expected law gives probability 0."""
        return sorted(k for k, v in self.output.items() if v > 0 and not self.expected.get(k, 0))

    # -- rendering ----------------------------------------------------------------------------------
    def _s(self, x: Any) -> str:
        return self.field.to_str(x)

    def _approx(self, x: Any) -> str:
        try:
            return f"{float(x):.6g}"
        except (OverflowError, ValueError):
            return str(x)

    def to_dict(self) -> dict:
        """A JSON-ready dict; exact numbers are strings like ``"3/5"``."""
        s = self._s
        return {
            "rule": self.rule, "claim": self.claim, "reference": self.reference,
            "instance": self.instance, "field": self.field.name,
            "precision": getattr(self.field, "precision", None),
            "tv": s(self.tv), "tv_float": float(self.tv), "tolerance": s(self.tolerance),
            "lossless": self.lossless, "verdict": self.verdict, "claim_holds": self.claim_holds,
            "tokens_per_call": s(self.tokens_per_call), "target_calls": s(self.target_calls),
            "accepted_per_call": None if self.accepted_per_call is None else s(self.accepted_per_call),
            "nodes_per_call": None if self.nodes_per_call is None else s(self.nodes_per_call),
            "worst": [{"tokens": list(o.tokens), "output": s(o.output), "expected": s(o.expected)}
                      for o in self.worst],
            "support_violations": [list(k) for k in self.support_violations],
            "output": [[list(k), s(v)] for k, v in _sorted_law(self.output)],
            "expected": [[list(k), s(v)] for k, v in _sorted_law(self.expected)],
            "seconds": round(self.seconds, 6), "paths": self.paths, "step_laws": self.step_laws,
            **({"extra": self.extra} if self.extra else {}),
        }

    def to_json(self, **kwargs: Any) -> str:
        """The report as JSON (see :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "AuditReport":
        """Rebuild a report from :meth:`to_json` output (laws and numbers exactly as written).

        >>> import exactspec as es
        >>> r = es.audit(target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("1/3", "2/3")),
        ...              proposer=es.drafts.chain(1), rule="speculative_sampling", tokens=1)
        >>> AuditReport.from_json(r.to_json()).output == r.output
        True
        """
        d = json.loads(text)
        f = get_field(d["field"], precision=d.get("precision"),
                      tolerance=None if d["field"] == "fraction" else float(d["tolerance"]))
        p = f.parse
        return cls(rule=d["rule"], claim=d["claim"], instance=d["instance"], field=f,
                   output={tuple(k): p(v) for k, v in d["output"]}, expected={tuple(k): p(v) for k, v in d["expected"]},
                   tv=p(d["tv"]), tolerance=p(d["tolerance"]), tokens_per_call=p(d["tokens_per_call"]),
                   target_calls=p(d["target_calls"]), seconds=d.get("seconds", 0.0), paths=d.get("paths", 0),
                   step_laws=d.get("step_laws", 0), reference=d.get("reference", ""), extra=d.get("extra", {}),
                   accepted_per_call=None if d.get("accepted_per_call") is None else p(d["accepted_per_call"]),
                   nodes_per_call=None if d.get("nodes_per_call") is None else p(d["nodes_per_call"]))

    def _short(self, x: Any, limit: int = 32, approx: bool = True, note: bool = False) -> str:
        """Exact when short (with its value to 6 digits if ``approx``), else the value to 6 digits."""
        text = self._s(x)
        if len(text) <= limit:
            return f"{text} (~{self._approx(x)})" if approx and "/" in text else text
        if note:
            return f"~{self._approx(x)} (exact: a {len(text.split('/')[-1])}-digit denominator, in .to_json())"
        return f"~{self._approx(x)}"

    def summary(self) -> str:
        """A few lines of plain text: verdict, exact TV, efficiency, worst outcomes.

        Exact values too long to read are shown to 6 digits; ``to_json()`` has them in full.
        """
        s, a = self._short, self._approx
        inst = ", ".join(f"{k}={v}" for k, v in self.instance.items())
        lines = [
            f"rule {self.rule} (claim: {self.claim}) — {self.verdict.upper()}"
            f"{'' if self.claim_holds else '  [CLAIM BROKEN]'}",
            f"  instance: {inst}",
            (f"  field: fraction (exact rationals); lossless here means TV <= {self._short(self.tolerance)} "
             "and no support violation" if self.field.exact and self.tolerance else f"  field: {self.field.describe()}"),
            f"  TV(output, expected) = {s(self.tv, note=True)}",
            f"  tokens per call = {s(self.tokens_per_call)}, "
            f"target calls for {self.instance.get('tokens')} tokens = {s(self.target_calls)}",
            f"  per call: accepted drafts = "
            f"{'n/a (the rule marks no step.accept)' if self.accepted_per_call is None else s(self.accepted_per_call)}"
            f", speculated nodes verified = {'n/a' if self.nodes_per_call is None else s(self.nodes_per_call)}",
        ]
        if self.support_violations:
            lines.append(f"  SUPPORT VIOLATION: {len(self.support_violations)} outcome(s) the expected law never "
                         f"emits, e.g. {self.support_violations[0]}")
        for o in self.worst:
            lines.append(f"  {o.tokens}: output {s(o.output, 24, False)} vs expected {s(o.expected, 24, False)}")
        if "rounding_tv" in self.extra:
            lines.append(f"  rounding (a correct sampler through the same float pipeline and generator): TV "
                         f"{self._short(Fraction(self.extra['rounding_tv']))}; this sampler vs that one: TV "
                         f"{self._short(Fraction(self.extra['algorithmic_tv']))}")
        lines.append(f"  {self.paths} branches, {self.step_laws} step laws, {self.seconds:.3f} s")
        return "\n".join(lines)

    __str__ = summary

    def _repr_html_(self) -> str:
        s, e = self._s, html.escape
        rows = "".join(f"<tr><td>{e(str(o.tokens))}</td><td>{e(s(o.output))}</td><td>{e(s(o.expected))}</td></tr>"
                       for o in self.worst)
        color = "#1a7f37" if self.lossless else "#cf222e"
        return (f"<div><b>{e(self.rule)}</b> (claim {e(self.claim)}): "
                f"<b style='color:{color}'>{self.verdict}</b>, TV = {e(s(self.tv))}<br>"
                f"tokens per call {e(s(self.tokens_per_call))}, target calls {e(s(self.target_calls))}<br>"
                f"<table><tr><th>tokens</th><th>output</th><th>expected</th></tr>{rows}</table></div>")
