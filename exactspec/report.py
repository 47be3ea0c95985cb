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

import heapq
import html
import json
from fractions import Fraction
from dataclasses import dataclass, field as dc_field
from typing import Any, NamedTuple, cast

from .fields import Field, get_field

__all__ = ["AuditReport", "Outcome"]


class Outcome(NamedTuple):
    """One emitted token sequence with its probability under the output and the expected law."""

    tokens: tuple[Any, ...]
    output: Any
    expected: Any

    @property
    def diff(self) -> Any:
        return self.output - self.expected


def _sorted_law(law: dict[Any, Any]) -> list[tuple[Any, ...]]:
    return sorted(law.items(), key=lambda kv: kv[0])


def _ratio_parts(x: Any) -> tuple[int, int] | None:
    """``(numerator, denominator)`` of a Fraction or an int, else None."""
    t = type(x)
    if t is Fraction:
        return x.numerator, x.denominator
    return (x, 1) if t is int else None


def _screen_worst(out: dict[Any, Any], exp: dict[Any, Any], keys: set[Any], n: int) -> Any:
    """The outcomes among ``keys`` that can be among the ``n`` largest ``|out - exp|``: all of them, or for
    Fraction (and int) values the few a float screen leaves.

    ``float(num / den)`` of an exact rational is correctly rounded, so rounding never reverses two
    differences: an outcome whose rounded difference is below the ``n``-th largest rounded one has ``n``
    outcomes exactly larger than it and is not among the ``n`` largest. The survivors are then ranked
    exactly, as before (ties, by tokens, included).

    >>> from fractions import Fraction as F
    >>> out, exp = {k: F(k, 100) for k in range(10)}, {k: F(1, 20) for k in range(10)}
    >>> _screen_worst(out, exp, set(out), 1), sorted(_screen_worst(out, exp, set(out), 2))
    ([0], [0, 1, 9])
    """
    if n <= 0 or len(keys) <= 4 * n:
        return keys
    rounded = []
    for k in keys:
        a, b = _ratio_parts(out.get(k, 0)), _ratio_parts(exp.get(k, 0))
        if a is None or b is None:
            return keys
        (an, ad), (bn, bd) = a, b
        d = an * bd - bn * ad
        if d:
            try:
                rounded.append(((d if d > 0 else -d) / (ad * bd), k))
            except OverflowError:
                return keys
    if len(rounded) <= n:
        return [k for _, k in rounded]
    bar = heapq.nlargest(n, (f for f, _ in rounded))[-1]
    return [k for f, k in rounded if f >= bar]


@dataclass
class AuditReport:
    """The result of an audit: exact output and expected laws, TV, verdict, efficiency, provenance."""

    rule: str
    claim: str
    instance: dict[Any, Any]
    field: Field
    output: dict[Any, Any]
    expected: dict[Any, Any]
    tv: Any
    tolerance: Any
    tokens_per_call: Any
    target_calls: Any
    seconds: float = 0.0
    paths: int = 0
    step_laws: int = 0
    reference: str = ""
    worst_count: int = 5
    extra: dict[Any, Any] = dc_field(default_factory=dict[Any, Any])
    accepted_per_call: Any = None
    nodes_per_call: Any = None
    #: what the verdict covers: ``of`` (this instance), ``tokens``, ``positions_per_step`` and the
    #: ``unobserved`` positions of a first and a second step (see ``exactspec._audit.horizon_scope``)
    scope: dict[Any, Any] = dc_field(default_factory=dict[Any, Any])

    # -- verdicts ---------------------------------------------------------------------------------
    @property
    def boundary(self) -> dict[Any, Any] | None:
        """The float-boundary decision of a sampler or loop audit (``extra["float_boundary"]``), if any.

        Float code is audited at its own precision and on float64 inputs
        (:mod:`exactspec.samplers.rounding`); the decision, not the TV at the code's own
        precision, is the verdict: ``lossless``, ``biased`` or ``undecided``.
        """
        got = self.extra.get("float_boundary") if self.extra else None
        return got if isinstance(got, dict) and got.get("verdict") in ("lossless", "biased", "undecided") else None

    @property
    def lossless(self) -> bool:
        """TV <= the stated tolerance (0 in the exact field) and no support violation (or, for float code,
        the float-boundary decision says lossless)."""
        b = self.boundary
        if b is not None:
            return cast("bool", b["verdict"] == "lossless")
        if self.tolerance and self.support_violations:
            return False
        return cast("bool", self.tv <= self.tolerance)

    @property
    def undecided(self) -> bool:
        """Float code whose bias, if any, cannot be told from its rounding (exit 3): neither lossless nor biased."""
        b = self.boundary
        return b is not None and b["verdict"] == "undecided"

    @property
    def verdict(self) -> str:
        """``"lossless"``, ``"biased"`` or (float code only) ``"undecided"``; :attr:`verdict_text` says how
        exactly and about what."""
        if self.undecided:
            return "undecided"
        return "lossless" if self.lossless else "biased"

    @property
    def exact(self) -> bool:
        """Whether the laws were computed in exact arithmetic (the fraction field).

        A ``lossless`` verdict in an inexact field (float, mpmath) only bounds the TV by the
        field's tolerance: it is not a proof, and the CLI exits 3 on it, not 0.
        """
        return bool(self.field.exact)

    @property
    def proven(self) -> bool:
        """True when the verdict is ``lossless`` with TV == 0 computed exactly (no tolerance involved)."""
        return self.exact and self.lossless and self.tv == 0

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this verdict: 0 lossless (exactly, or up to a stated rounding baseline
        in exact arithmetic), 1 biased, 3 lossless only within an inexact field's tolerance.

        >>> import exactspec as es
        >>> r = es.audit(target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("1/3", "2/3")),
        ...              proposer=es.drafts.chain(1), rule="speculative_sampling", field="float")
        >>> r.verdict, r.exit_code
        ('lossless', 3)
        """
        if self.undecided:
            return 3
        if not self.lossless:
            return 1
        return 0 if self.exact else 3

    def _tokens_text(self) -> str:
        n = self.scope.get("tokens", self.instance.get("tokens"))
        return f"the first {n} token{'s' if n != 1 else ''}" if n is not None else "the tokens audited"

    @property
    def verdict_text(self) -> str:
        """One line: the verdict, what it is about (this instance, the horizon) and how exact it is.

        >>> import exactspec as es
        >>> r = es.audit(target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("1/3", "2/3")),
        ...              proposer=es.drafts.chain(1), rule="speculative_sampling")
        >>> r.verdict_text
        'lossless on this instance over the first 3 tokens: TV == 0 exactly'
        """
        of = self.scope.get("of", "this instance")
        where = f"on {of} over {self._tokens_text()}"
        tv, tol = self._short(self.tv, approx=False), self._short(self.tolerance, approx=False)
        b = self.boundary
        if b is not None:
            return f"{b['verdict']} {where}: {b['reason']}"
        if not self.lossless:
            why = " (a support violation: an outcome the expected law never emits)" if (
                self.tolerance and self.support_violations and self.tv <= self.tolerance) else ""
            return f"biased {where}: TV {tv}{'' if why else f' > {tol}' if self.tolerance else ''}{why}" + (
                "" if self.exact else f" ({self.field.name} field)")
        if not self.exact:
            return (f"lossless within {tol} {where} ({self.field.name} field: TV {tv} <= {tol}); not an exact proof, "
                    "rerun with field 'fraction' for one")
        if self.tv == 0:
            return f"lossless {where}: TV == 0 exactly"
        if "rounding_tv" in self.extra:
            basis = self.extra.get("tolerance_from", "twice what rounding costs a correct float sampler on the same "
                                                     "pipeline")
            return f"lossless up to float rounding {where}: exact TV {tv} <= {tol} ({basis}); not TV == 0"
        return f"lossless within the stated tolerance {tol} {where}: exact TV {tv}; not TV == 0"

    def _claim_tag(self) -> str:
        if self.claim_holds:
            return ""
        if self.undecided:
            return "  [CLAIM UNDECIDED: bias and float rounding cannot be told apart on this instance]"
        if self.lossless and not self.exact:
            return f"  [CLAIM UNDECIDED: the {self.field.name} field cannot resolve a TV below its tolerance]"
        return "  [CLAIM BROKEN]"

    @property
    def warnings(self) -> list[str]:
        """What the verdict does not cover (unobserved step positions) or how it is weaker than a proof."""
        out = []
        note = self.scope.get("note")
        if note and not self.scope.get("complete", True):
            out.append(f"horizon: {note}")
        if self.lossless and not self.exact:
            out.append(f"inexact field: {self.field.describe()}; a bias below the tolerance would not show")
        approx = self.extra.get("approximations")
        if approx:
            what = ", ".join(f"{n} {kind}" for kind, n in sorted(approx.items()))
            out.append(f"irrational probabilities ({what}) were computed to 320 bits, not as exact rationals")
        return out

    @property
    def claim_holds(self) -> bool:
        """Whether the rule's claim is borne out on this instance.

        ``biased`` holds when a bias is found; every other claim holds when the output law equals
        the law it is compared with (the instance's ``decoding`` or declared target says which).
        """
        if self.undecided:
            return False
        return (not self.lossless) if self.claim == "biased" else self.lossless

    @property
    def worst(self) -> list[Outcome]:
        """The outcomes with the largest ``|output - expected|`` (ties by token order)."""
        zero = 0
        out, exp, n = self.output, self.expected, self.worst_count
        if n < 0:   # a slice from the end, as a report built by hand may ask
            keys = set(out) | set(exp)
            rows = [Outcome(k, out.get(k, zero), exp.get(k, zero)) for k in keys]
            rows.sort(key=lambda o: (-abs(o.output - o.expected), o.tokens))
            return [o for o in rows[:n] if o.output != o.expected]
        # the outcomes that differ, the n largest differences only (a full sort of 15,625 exact differences
        # was most of `exactspec check --json`): the same list, as outcomes that agree sort last
        keys = set(out) | set(exp)
        differ = []
        for k in _screen_worst(out, exp, keys, n):
            a, b = out.get(k, zero), exp.get(k, zero)
            if a != b:
                differ.append((-abs(a - b), k, a, b))
        return [Outcome(k, a, b) for _, k, a, b in heapq.nsmallest(n, differ, key=lambda r: (r[0], r[1]))]

    @property
    def support_violations(self) -> list[tuple[Any, ...]]:
        """Outcomes emitted with positive probability that the expected law gives probability 0."""
        expected = self.expected   # the zero test first: it is cheap and almost always false
        return sorted(k for k, v in self.output.items() if not expected.get(k, 0) and v > 0)

    # -- rendering ----------------------------------------------------------------------------------
    def _s(self, x: Any) -> str:
        return self.field.to_str(x)

    def _approx(self, x: Any) -> str:
        try:
            return f"{float(x):.6g}"
        except (OverflowError, ValueError):
            return str(x)

    def to_dict(self) -> dict[Any, Any]:
        """A JSON-ready dict; exact numbers are strings like ``"3/5"``."""
        s = self._s
        return {
            "rule": self.rule, "claim": self.claim, "reference": self.reference,
            "instance": self.instance, "field": self.field.name,
            "precision": getattr(self.field, "precision", None),
            "tv": s(self.tv), "tv_float": float(self.tv), "tolerance": s(self.tolerance),
            "lossless": self.lossless, "verdict": self.verdict, "claim_holds": self.claim_holds,
            "exact": self.exact, "proven": self.proven, "verdict_text": self.verdict_text, "scope": self.scope,
            "warnings": self.warnings,
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

        The text is read strictly: anything that is not such a report (not a string, invalid or
        too deeply nested JSON, a missing or mistyped field, a law with outcomes of different
        lengths or tokens outside the vocabulary, a negative probability, a number string like
        ``"1e-999999999"``, a ``tv`` that disagrees with the exact laws) raises an
        :class:`~exactspec.errors.ExactSpecError` naming the field. Unknown keys are ignored.

        >>> import exactspec as es
        >>> r = es.audit(target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("1/3", "2/3")),
        ...              proposer=es.drafts.chain(1), rule="speculative_sampling", tokens=1)
        >>> AuditReport.from_json(r.to_json()).output == r.output
        True
        >>> AuditReport.from_json("[]")
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: AuditReport JSON: expected an object, got an array
        """
        import dataclasses
        import math

        from . import _jsonread as jr
        from .errors import ExactSpecError, InvalidDistribution, InvalidValue
        from .laws import total_variation

        what = "AuditReport JSON"
        d = jr.obj(jr.load_json(text, what), what)

        def label(key: str) -> str:
            return f"{what}: field {key!r}"

        rule, claim = jr.field(d, "rule", str, what), jr.field(d, "claim", str, what)
        reference = jr.opt_field(d, "reference", str, what, "")
        instance = jr.field(d, "instance", dict, what)
        vocab = jr.opt_field(instance, "vocab", int, f"{what}: instance")
        if vocab is not None and vocab < 1:
            raise InvalidValue(f"{what}: instance vocab must be >= 1, got {vocab}")
        name = jr.field(d, "field", str, what)
        precision = jr.opt_field(d, "precision", int, what)
        if name == "mpmath" and precision is not None and not 16 <= precision <= 65536:
            raise InvalidValue(f"{label('precision')} must lie in 16..65536 bits, got {precision}")
        try:
            f = get_field(name, precision=precision)
            tolerance = jr.number(jr.required(d, "tolerance", what), label("tolerance"), f.parse)
            if tolerance < 0:
                raise InvalidValue(f"{label('tolerance')} is negative")
            if not f.exact:  # the field states its own tolerance: rebuild it with the one written
                f = get_field(name, precision=precision, tolerance=tolerance)
        except ExactSpecError as exc:
            raise type(exc)(str(exc) if str(exc).startswith(what) else f"{what}: {exc}") from None

        def num(key: str, *, optional: bool = False) -> Any:
            if optional and d.get(key) is None:
                return None
            x = jr.number(jr.required(d, key, what), label(key), f.parse)
            if x < 0:
                raise InvalidValue(f"{label(key)} is negative ({d[key][:40]})")
            return x

        output = jr.law_pairs(jr.field(d, "output", list, what), label("output"), f.parse, vocab=vocab, exact=f.exact)
        length = len(next(iter(output))) if output else None
        expected = jr.law_pairs(jr.field(d, "expected", list, what), label("expected"), f.parse, vocab=vocab,
                                length=length, exact=f.exact)
        tv = num("tv")
        if f.exact and tv != total_variation(output, expected):
            raise InvalidDistribution(f"{label('tv')} = {d['tv'][:40]} disagrees with the laws written, whose TV is "
                                      f"{f.to_str(total_variation(output, expected))[:40]}")
        seconds = jr.opt_field(d, "seconds", (int, float), what, 0.0)
        if not (isinstance(seconds, float) or abs(seconds) < 2 ** 53) or not math.isfinite(seconds) or seconds < 0:
            raise InvalidValue(f"{label('seconds')} must be a finite number >= 0, got {seconds}")
        counts = {k: jr.opt_field(d, k, int, what, 0) for k in ("paths", "step_laws")}
        for k, v in counts.items():
            if v < 0:
                raise InvalidValue(f"{label(k)} is negative ({v})")
        kwargs: dict[str, Any] = {}
        if isinstance(d.get("scope"), dict) and "scope" in {x.name for x in dataclasses.fields(cls)}:
            kwargs["scope"] = d["scope"]
        return cls(rule=rule, claim=claim, instance=instance, field=f, output=output, expected=expected, tv=tv,
                   tolerance=tolerance, tokens_per_call=num("tokens_per_call"), target_calls=num("target_calls"),
                   seconds=float(seconds), reference=reference, extra=jr.opt_field(d, "extra", dict, what, {}),
                   accepted_per_call=num("accepted_per_call", optional=True),
                   nodes_per_call=num("nodes_per_call", optional=True), **counts, **kwargs)

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
        head = self.verdict.upper() if self.exact or not self.lossless else \
            f"LOSSLESS WITHIN {self._short(self.tolerance, approx=False)} (not an exact proof)"
        if self.exact and self.lossless and self.tv != 0:
            head = "LOSSLESS UP TO ROUNDING" if ("rounding_tv" in self.extra or self.boundary) else \
                "LOSSLESS WITHIN TOLERANCE"
        boundary = self.boundary
        if self.undecided and boundary is not None:   # undecided: the boundary decision said so
            head = f"UNDECIDED WITHIN {str(boundary.get('precision', 'float')).upper()} ROUNDING"
        lines = [
            f"rule {self.rule} (claim: {self.claim}) — {head}{self._claim_tag()}",
            f"  verdict: {self.verdict_text}",
            *(f"  WARNING: {w}" for w in self.warnings),
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
        b = self.boundary
        if b is not None and b.get("f64_tv") is not None:
            lines.append(f"  float64 run (the same code on float64 inputs{', casting down' if b.get('forced') else ''})"
                         f": TV {self._short(Fraction(b['f64_tv']))}; at {b.get('precision')}: TV "
                         f"{self._short(Fraction(b['own_tv']))}")
        if "rounding_tv" in self.extra:
            at = f", at {self.extra['precision']}" if "precision" in self.extra else ""
            vs = self.extra.get("reference_tv", self.extra.get("algorithmic_tv"))
            lines.append(f"  rounding (a correct sampler through the same float pipeline and generator{at}): TV "
                         f"{self._short(Fraction(self.extra['rounding_tv']))}" + (
                             f"; this sampler vs that one: TV {self._short(Fraction(vs))}" if vs is not None else ""))
        if self.scope.get("rng"):
            lines.append(f"  {self.scope['rng']}")
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
