"""The :class:`Rule` record: a verification function plus what it claims and where it comes from.

>>> r = Rule(lambda step, rng: [step.draft(0)], name="keep_first", claim="biased")
>>> r.name, r.family, r.claim
('keep_first', 'chain', 'biased')
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ..errors import ExactSpecError
from ..protocols import Rng, RuleFn, Step, TreeStep

__all__ = ["Rule", "CLAIMS", "FAMILIES", "as_rule", "rule"]

CLAIMS = ("lossless", "lossless-greedy", "biased", "declared-target")
FAMILIES = ("chain", "tree")


class Rule:
    """A verifier ``fn(step, rng)`` that yields (or returns) the tokens it emits, with its record.

    ``claim`` is one of ``lossless`` (output law == target's sampling law), ``lossless-greedy``
    (== the target's greedy sequence), ``biased`` and ``declared-target`` (== a declared law).
    ``closed_form``, when present, computes the same step law without the rng (faster); a test
    must show the two agree.
    """

    def __init__(self, fn: RuleFn, *, name: str | None = None, family: str = "chain", claim: str = "lossless",
                 description: str = "", reference: str = "", closed_form: Callable | None = None,
                 params: dict[str, Any] | None = None, marks_accepted: bool = False, proposer: Any = None,
                 declared_target: Callable | None = None) -> None:
        if not callable(fn):
            raise ExactSpecError(f"a rule must be callable as fn(step, rng), got {fn!r}")
        if claim not in CLAIMS:
            raise ExactSpecError(f"rule claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
        if family not in FAMILIES:
            raise ExactSpecError(f"rule family must be one of {', '.join(FAMILIES)}, got {family!r}")
        if closed_form is None:   # a sampler or a loop handed as a rule: say which call audits it, before any run
            _refuse_non_rule(fn)
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "rule")
        self.family, self.claim = family, claim
        doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
        self.description = description or (doc[0] if doc else "")
        self.reference = reference
        self.closed_form = closed_form
        self.params = dict(params or {})
        #: the rule calls ``step.accept`` for every accepted draft, so 0 accepted means none was
        self.marks_accepted = marks_accepted
        #: the proposer configuration the claim is stated for (None: any of the family's defaults)
        self.proposer = proposer
        #: for claim "declared-target": ``declared_target(target, draft) -> Model`` whose law the output must follow
        self.declared_target = declared_target
        if claim == "declared-target" and declared_target is None:
            raise ExactSpecError("a rule claiming 'declared-target' needs declared_target=fn(target, draft) -> model")

    def __call__(self, step: Step | TreeStep, rng: Rng) -> Iterable[int]:
        return self.fn(step, rng)

    @property
    def decoding(self) -> str:
        """The decoding whose law the claim is about (``greedy`` for lossless-greedy rules)."""
        return "greedy" if self.claim == "lossless-greedy" else "sample"

    def without_closed_form(self) -> "Rule":
        """The same rule forced through the generic rng enumeration."""
        return Rule(self.fn, name=self.name, family=self.family, claim=self.claim, description=self.description,
                    reference=self.reference, params=self.params, marks_accepted=self.marks_accepted,
                    proposer=self.proposer, declared_target=self.declared_target)

    def __repr__(self) -> str:
        return f"<rule {self.name}: {self.family}, claim {self.claim}>"


def _refuse_non_rule(fn: Any) -> None:
    """Raise :class:`~exactspec.errors.NotARule` when ``fn`` cannot be called as ``fn(step, rng)`` and looks like
    a sampler or a whole loop (see :mod:`exactspec.rules._shape`); anything callable with two arguments passes."""
    from ._shape import looks_like_sampler, not_a_rule_message
    shape = looks_like_sampler(fn)
    if shape is not None:
        from ..errors import NotARule
        raise NotARule(not_a_rule_message(fn, shape), rule=getattr(fn, "__name__", type(fn).__name__),
                       kind=shape.kind, adapter=shape.adapter, signature=shape.signature)


def as_rule(obj: Any) -> Rule:
    """Turn a plain function ``fn(step, rng)`` into a :class:`Rule` (claim ``lossless``); keep a Rule.

    >>> as_rule(lambda step, rng: [0]).claim
    'lossless'
    """
    if isinstance(obj, Rule):
        return obj
    if isinstance(obj, str):
        from . import get
        return get(obj)
    if callable(obj):
        return Rule(obj)
    raise ExactSpecError(f"rule must be a Rule, a function fn(step, rng) or a catalog name, got {obj!r}")


def rule(*, claim: str = "lossless", family: str = "chain", name: str | None = None, description: str = "",
         reference: str = "", declared_target: Callable | None = None) -> Callable[[RuleFn], Rule]:
    """Decorator declaring a user's rule and its claim (and, for ``declared-target``, the target law).

    >>> @rule(claim="biased")
    ... def first_draft_only(step, rng):
    ...     yield step.draft(0)
    >>> first_draft_only.claim
    'biased'
    """
    def wrap(fn: RuleFn) -> Rule:
        return Rule(fn, name=name, family=family, claim=claim, description=description, reference=reference,
                    declared_target=declared_target)
    return wrap
