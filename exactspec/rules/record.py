"""The :class:`Rule` record: a verification function plus what it claims and where it comes from.

A claim may hold only under a condition on the configuration (a :class:`Condition`, e.g.
``gamma >= 2``), with another claim outside it (``otherwise``):

>>> r = Rule(lambda step, rng: [step.draft(0)], name="keep_first", claim="biased")
>>> r.name, r.family, r.claim
('keep_first', 'chain', 'biased')
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, cast

from ..errors import InvalidType, InvalidValue
from ..protocols import Rng, RuleFn, Step, TreeStep

__all__ = ["Rule", "CLAIMS", "FAMILIES", "as_rule", "rule", "Condition", "CONDITION_KEYS", "configuration"]

CLAIMS = ("lossless", "lossless-greedy", "biased", "declared-target")
FAMILIES = ("chain", "tree")

#: what a claim's condition may read from a configuration, and what each means
CONDITION_KEYS = {
    "gamma": "drafted tokens per step along a path (a chain's gamma, a tree's depth)",
    "width": "the most children any node of a drafted tree has (1 for a chain)",
    "tokens": "the horizon: tokens whose law is audited",
    "vocab": "the vocabulary size",
    "models": "context_free (target and draft laws the same at every position) or context_dependent",
}
_MODELS = ("context_free", "context_dependent")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}
_ATOM = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*([A-Za-z_0-9]+)\s*$")


class Condition:
    """A conjunction of comparisons on a configuration, the part of a claim that says where it holds.

    The text form is the source: atoms ``KEY OP VALUE`` joined by ``and``, ``KEY`` one of
    :data:`CONDITION_KEYS` (``gamma``, ``width``, ``tokens``, ``vocab``: ints; ``models``:
    ``context_free`` or ``context_dependent``), ``OP`` one of ``>= <= == != > <``.
    :meth:`holds` reads a configuration (see :func:`configuration`); a key the configuration
    does not give makes the answer ``None`` (unknown), never a guess.

    >>> c = Condition("gamma >= 2 and models == context_dependent")
    >>> c.holds({"gamma": 2, "models": "context_dependent"}), c.holds({"gamma": 1, "models": "context_dependent"})
    (True, False)
    >>> print(c.holds({"gamma": 3}))
    None
    >>> str(c)
    'gamma >= 2 and models == context_dependent'
    """

    text: str

    def __init__(self, text: "str | Condition") -> None:
        if isinstance(text, Condition):
            text = text.text
        if not isinstance(text, str):
            raise InvalidType(f"a claim's condition must be text like 'gamma >= 2', got {text!r}")
        if not text.strip():
            raise InvalidValue(f"a claim's condition must be text like 'gamma >= 2', got {text!r}")
        atoms = []
        for part in re.split(r"\s+and\s+", text.strip()):
            m = _ATOM.match(part)
            if m is None:
                raise InvalidValue(f"claim condition {text!r}: {part.strip()!r} is not KEY OP VALUE "
                                   f"(KEY one of {', '.join(CONDITION_KEYS)}; OP one of {' '.join(_OPS)})")
            key, op, raw = m.groups()
            if key not in CONDITION_KEYS:
                raise InvalidValue(f"claim condition {text!r}: unknown key {key!r} (one of "
                                   f"{', '.join(CONDITION_KEYS)})")
            if key == "models":
                if raw not in _MODELS or op not in ("==", "!="):
                    raise InvalidValue(f"claim condition {text!r}: models compares with == or != to one of "
                                       f"{', '.join(_MODELS)}, got {part.strip()!r}")
                value: Any = raw
            else:
                if not raw.isdigit():
                    raise InvalidValue(f"claim condition {text!r}: {key} compares with an int, got {raw!r}")
                value = int(raw)
            atoms.append((key, op, value))
        self.atoms: tuple[Any, ...] = tuple(atoms)
        self.text = " and ".join(f"{k} {op} {v}" for k, op, v in self.atoms)

    def holds(self, config: Mapping[str, Any]) -> bool | None:
        """Whether the configuration meets every atom; ``None`` when it lacks a key an atom reads.

        >>> Condition("width >= 2").holds({"width": 1})
        False
        """
        unknown = False
        for key, op, value in self.atoms:
            got = config.get(key)
            if got is None:
                unknown = True
                continue
            if not _OPS[op](got, value):
                return False
        return None if unknown else True

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Condition) and other.atoms == self.atoms

    def __hash__(self) -> int:
        return hash(self.atoms)


def _width(proposer: Any) -> int | None:
    kind = getattr(proposer, "kind", None)
    if getattr(proposer, "family", None) == "chain":
        return 1
    if kind == "merge":
        return len(proposer.models)
    if hasattr(proposer, "expansion"):
        return cast("int | None", max(proposer.expansion))
    tree = getattr(proposer, "tree", None)
    if tree is not None:
        return max((len(tree.children(i)) for i in range(len(tree))), default=0)
    return None


def configuration(proposer: Any, *, target: Any = None, draft: Any = None, tokens: int | None = None,
                  models: str | None = None) -> dict[Any, Any]:
    """The configuration a claim's :class:`Condition` reads: gamma, width, tokens, vocab, models.

    ``models`` is ``context_free`` when the target, the draft and any draft models of the
    proposer are all order-0 models (one law at every position), else ``context_dependent``;
    pass ``models=`` to state it where no model is at hand (a search over several families).
    A key that cannot be told is left out (a condition reading it is then unknown).

    >>> import exactspec as es
    >>> t = es.models.random_table(vocab=3, order=1, seed=0)
    >>> configuration(es.drafts.chain(2), target=t, draft=t, tokens=3)
    {'gamma': 2, 'width': 1, 'tokens': 3, 'vocab': 3, 'models': 'context_dependent'}
    """
    config: dict[Any, Any] = {}
    try:
        config["gamma"] = int(proposer.max_tokens()) - 1
    except (AttributeError, TypeError, ValueError):
        pass
    width = _width(proposer)
    if width is not None:
        config["width"] = width
    if tokens is not None:
        config["tokens"] = tokens
    if target is not None:
        config["vocab"] = target.vocab
    if models is not None:
        if models not in _MODELS:
            raise InvalidValue(f"configuration: models must be one of {', '.join(_MODELS)}, got {models!r}")
        config["models"] = models
    elif target is not None:
        laws = [m for m in (target, draft, *getattr(proposer, "models", ()),
                            getattr(proposer, "sampled_from", None)) if m is not None]
        config["models"] = "context_free" if all(getattr(m, "order", None) == 0 for m in laws) else "context_dependent"
    return config


class Rule:
    """A verifier ``fn(step, rng)`` that yields (or returns) the tokens it emits, with its record.

    ``claim`` is one of ``lossless`` (output law == target's sampling law), ``lossless-greedy``
    (== the target's greedy sequence), ``biased`` and ``declared-target`` (== a declared law).
    ``closed_form``, when present, computes the same step law without the rng (faster); a test
    must show the two agree.

    ``when`` (a :class:`Condition` or its text) limits the claim to the configurations that
    meet it, and ``otherwise`` is the claim outside them: ``claim="biased", when="gamma >= 2",
    otherwise="lossless"``. :meth:`claim_for` gives the claim for a configuration; ``claim``
    stays the claim under the condition, and :attr:`claim_text` states both.
    """

    def __init__(self, fn: RuleFn, *, name: str | None = None, family: str = "chain", claim: str = "lossless",
                 description: str = "", reference: str = "", closed_form: Callable[..., Any] | None = None,
                 params: dict[str, Any] | None = None, marks_accepted: bool = False, proposer: Any = None,
                 declared_target: Callable[..., Any] | None = None, when: "str | Condition | None" = None,
                 otherwise: str | None = None) -> None:
        if not callable(fn):
            raise InvalidType(f"a rule must be callable as fn(step, rng), got {fn!r}")
        if claim not in CLAIMS:
            raise InvalidValue(f"rule claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
        if family not in FAMILIES:
            raise InvalidValue(f"rule family must be one of {', '.join(FAMILIES)}, got {family!r}")
        if closed_form is None:   # a sampler or a loop handed as a rule: say which call audits it, before any run
            _refuse_non_rule(fn)
        self.fn = fn
        self.name: str = name if name else getattr(fn, "__name__", "rule")
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
            raise InvalidValue("a rule claiming 'declared-target' needs declared_target=fn(target, draft) -> model")
        if (when is None) != (otherwise is None):
            raise InvalidValue(f"rule {self.name}: a conditional claim needs both when= (where the claim holds) and "
                               f"otherwise= (the claim elsewhere), got when={when!r}, otherwise={otherwise!r}")
        if otherwise is not None and (otherwise not in CLAIMS or otherwise == "declared-target"
                                      or claim == "declared-target" or otherwise == claim):
            raise InvalidValue(f"rule {self.name}: otherwise= must be a claim other than {claim!r} among "
                               f"lossless, lossless-greedy, biased (and the claim not declared-target), "
                               f"got {otherwise!r}")
        #: where the claim holds (None: everywhere) and the claim elsewhere
        self.condition: Condition | None = None if when is None else Condition(when)
        self.otherwise = otherwise

    def __call__(self, step: Step | TreeStep, rng: Rng) -> Iterable[int]:
        # the rule's family says which step it takes; the engine hands it that one
        return self.fn(step, rng)  # type: ignore[arg-type]

    @property
    def decoding(self) -> str:
        """The decoding whose law the claim is about (``greedy`` for lossless-greedy rules)."""
        return "greedy" if self.claim == "lossless-greedy" else "sample"

    @property
    def claim_text(self) -> str:
        """The claim with its condition, as check, sweep and the docs print it.

        >>> Rule(lambda step, rng: [0], claim="biased", when="gamma >= 2", otherwise="lossless").claim_text
        'biased when gamma >= 2, lossless otherwise'
        """
        if self.condition is None:
            return self.claim
        return f"{self.claim} when {self.condition}, {self.otherwise} otherwise"

    def claim_for(self, config: Mapping[str, Any]) -> str:
        """The claim at a configuration (see :func:`configuration`): ``claim`` where the condition
        holds, ``otherwise`` where it does not, ``claim`` as stated where the configuration does not
        say (a condition reading a key it lacks).

        >>> r = Rule(lambda step, rng: [0], claim="biased", when="gamma >= 2", otherwise="lossless")
        >>> r.claim_for({"gamma": 1}), r.claim_for({"gamma": 2})
        ('lossless', 'biased')
        """
        if self.condition is None or self.condition.holds(config) is not False:
            return self.claim
        return self.otherwise  # type: ignore[return-value]

    def binding_hint(self, exc: BaseException, caller: Any, first: bool) -> str:
        """What the engine adds to the error when the rule's first call failed to bind ``fn(step, rng)``, or "".

        ``caller`` is the code object of the engine's frame that called the rule (see
        :func:`exactspec.rules.shape.binding_hint`): a sampler or a loop handed as a rule gets told
        which call audits it.

        >>> r = Rule(lambda step, rng: [0])
        >>> r.binding_hint(TypeError("boom"), None, True)
        ''
        """
        from .shape import binding_hint
        return binding_hint(self.fn, exc, caller, first)

    def without_closed_form(self) -> "Rule":
        """The same rule forced through the generic rng enumeration."""
        return Rule(self.fn, name=self.name, family=self.family, claim=self.claim, description=self.description,
                    reference=self.reference, params=self.params, marks_accepted=self.marks_accepted,
                    proposer=self.proposer, declared_target=self.declared_target, when=self.condition,
                    otherwise=self.otherwise)

    def __repr__(self) -> str:
        return f"<rule {self.name}: {self.family}, claim {self.claim_text}>"


def _refuse_non_rule(fn: Any) -> None:
    """Raise :class:`~exactspec.errors.NotARule` when ``fn`` cannot be called as ``fn(step, rng)`` and looks like
    a sampler or a whole loop (see :mod:`exactspec.rules.shape`); anything callable with two arguments passes."""
    from .shape import looks_like_sampler, not_a_rule_message
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
    raise InvalidType(f"rule must be a Rule, a function fn(step, rng) or a catalog name, got {obj!r}")


def rule(*, claim: str = "lossless", family: str = "chain", name: str | None = None, description: str = "",
         reference: str = "", declared_target: Callable[..., Any] | None = None, when: "str | Condition | None" = None,
         otherwise: str | None = None) -> Callable[[RuleFn], Rule]:
    """Decorator declaring a user's rule and its claim (and, for ``declared-target``, the target law).

    ``when`` / ``otherwise``: a claim that holds only under a condition (see :class:`Rule`).

    >>> @rule(claim="biased")
    ... def first_draft_only(step, rng):
    ...     yield step.draft(0)
    >>> first_draft_only.claim
    'biased'
    """
    def wrap(fn: RuleFn) -> Rule:
        return Rule(fn, name=name, family=family, claim=claim, description=description, reference=reference,
                    declared_target=declared_target, when=when, otherwise=otherwise)
    return wrap
