"""Search spaces and search instances: the small worlds a counterexample is looked for in.

A :class:`SearchInstance` is one fully explicit audit: vocabulary, model family with its laws
(rationals), proposer shape, tokens, prompt and decoding. It builds its models, renders itself
as Python source, round-trips through JSON, and has a complexity key that orders instances
the way shrinking does: smallest vocab, then fewest drafts / smallest tree, then fewest tokens,
then the simplest model family, then the smallest denominators.

>>> from fractions import Fraction as F
>>> inst = SearchInstance(vocab=2, family="context_free", target=((F(3, 5), F(2, 5)),),
...                       draft=((F(1, 2), F(1, 2)),), shape=(1,), tokens=1)
>>> inst.key()
(2, 1, 1, 0, 5)
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Iterator, Sequence

from .. import drafts, models
from .._numbers import parse_rational
from ..drafts.chain import CLAIMS as CHAIN_CLAIMS, SAMPLINGS as CHAIN_SAMPLINGS
from ..drafts.tree import CHILDREN as TREE_CHILDREN, CLAIMS as TREE_CLAIMS
from ..errors import ExactSpecError, InvalidValue

__all__ = ["SearchInstance", "Space", "default_space", "simplex_grid", "random_law", "FAMILIES"]

#: model families, simplest first
FAMILIES = ("context_free", "per_position", "table")
DECODINGS = ("sample", "greedy")
PROPOSER_KINDS = ("chain", "tree")
#: most draft nodes per step a search instance may have (a search never comes near it)
MAX_DRAFTS = 10_000

Law = tuple[Fraction, ...]


# -- validation of values read from JSON (or built by hand) ------------------------------------------

def _fail(where: str, problem: str) -> ExactSpecError:
    return InvalidValue(f"{where}: {problem}")


def _kind(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a bool", type(None): "null",
            float: "a float", int: "an int"}.get(type(x), type(x).__name__)


def _int(x: Any, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``x`` if it is an int (not a bool) in ``[lo, hi]``, else a typed error naming ``where``."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise _fail(where, f"expected an int, got {_kind(x)}")
    if lo is not None and x < lo:
        raise _fail(where, f"must be >= {lo}, got {x}")
    if hi is not None and x > hi:
        raise _fail(where, f"must be <= {hi}, got {x}")
    return int(x)


def _ints(xs: Any, where: str, lo: int | None = None, hi: int | None = None) -> tuple[int, ...]:
    if not isinstance(xs, (list, tuple)):
        raise _fail(where, f"expected a list of ints, got {_kind(xs)}")
    return tuple(_int(x, f"{where}[{i}]", lo, hi) for i, x in enumerate(xs))


def _choice(x: Any, where: str, allowed: Sequence[str]) -> str:
    """The allow-list's own string equal to ``x`` (never ``x`` itself), or a typed error."""
    if not isinstance(x, str):
        raise _fail(where, f"expected one of {', '.join(allowed)}, got {_kind(x)}")
    for a in allowed:
        if x == a:
            return a
    shown = repr(x) if len(x) <= 40 else repr(x[:37] + "...")
    raise _fail(where, f"must be one of {', '.join(allowed)}, got {shown}")


def _law(xs: Any, where: str, vocab: int) -> tuple[Fraction, ...]:
    if not isinstance(xs, (list, tuple)):
        raise _fail(where, f"expected a list of {vocab} rationals, got {_kind(xs)}")
    if len(xs) != vocab:
        raise _fail(where, f"has {len(xs)} entries, expected vocab = {vocab}")
    law = []
    for j, x in enumerate(xs):
        if isinstance(x, float):
            raise _fail(f"{where}[{j}]", f"the float {x!r} is not exact; write rationals as strings like '3/5'")
        v = parse_rational(x, f"{where}[{j}]")
        if v < 0:
            raise _fail(f"{where}[{j}]", f"negative probability {v}")
        law.append(v)
    if sum(law) != 1:
        raise _fail(where, f"sums to {sum(law)}, not exactly 1")
    return tuple(law)


def _laws(ls: Any, where: str, vocab: int, family: str) -> tuple[tuple[Fraction, ...], ...]:
    if not isinstance(ls, (list, tuple)):
        raise _fail(where, f"expected a list of laws, got {_kind(ls)}")
    need = {"context_free": "exactly 1", "table": f"exactly vocab = {vocab}"}.get(family, "at least 1")
    if (family == "context_free" and len(ls) != 1) or (family == "table" and len(ls) != vocab) or not ls:
        raise _fail(where, f"{family} models need {need} law(s), got {len(ls)}")
    return tuple(_law(law, f"{where}[{i}]", vocab) for i, law in enumerate(ls))


def simplex_grid(vocab: int, max_denominator: int) -> list[Law]:
    """Every law over ``vocab`` tokens whose entries share a denominator <= ``max_denominator``.

    Ordered by the largest reduced denominator, then lexicographically (simplest first).

    >>> [tuple(str(x) for x in law) for law in simplex_grid(2, 2)]
    [('0', '1'), ('1', '0'), ('1/2', '1/2')]
    """
    seen: set[Law] = set()
    out: list[Law] = []
    for d in range(1, max_denominator + 1):
        for parts in _compositions(d, vocab):
            law = tuple(Fraction(a, d) for a in parts)
            if law not in seen:
                seen.add(law)
                out.append(law)
    out.sort(key=lambda law: (_denominator(law), law))
    return out


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first,) + rest


def _denominator(law: Sequence[Fraction]) -> int:
    d = 1
    for x in law:
        d = max(d, x.denominator)
    return d


def random_law(rng: random.Random, vocab: int, max_denominator: int) -> Law:
    """A random law with common denominator <= ``max_denominator`` (some entries may be 0).

    >>> law = random_law(random.Random(0), 3, 7)
    >>> sum(law), len(law)
    (Fraction(1, 1), 3)
    """
    d = rng.randint(1, max_denominator)
    cuts = sorted(rng.randint(0, d) for _ in range(vocab - 1))
    parts = [b - a for a, b in zip([0] + cuts, cuts + [d])]
    return tuple(Fraction(a, d) for a in parts)


@dataclass(frozen=True)
class SearchInstance:
    """One explicit audit instance (laws as rationals) that a search visits or returns."""

    vocab: int
    family: str
    target: tuple[Law, ...]
    draft: tuple[Law, ...]
    shape: tuple[int, ...]          # (gamma,) for chains, the expansion for trees
    tokens: int
    prompt: tuple[int, ...] = ()
    decoding: str = "sample"
    proposer_kind: str = "chain"     # "chain" or "tree"
    sampling: str = "sample"         # chain drafts: "sample" or "argmax"; trees: the children rule
    claim: str = "draft"

    # -- building --------------------------------------------------------------------------------
    def _model(self, laws: tuple[Law, ...], name: str) -> models.Model:
        if self.family == "context_free":
            return models.context_free(laws[0], name=name)
        if self.family == "per_position":
            n0, last = len(self.prompt), len(laws) - 1
            return models.from_function(vocab=self.vocab, order=None, name=name,
                                        fn=lambda ctx: laws[min(len(ctx) - n0, last)])
        return models.table(vocab=self.vocab, order=1, name=name,
                            table={(t,): laws[t] for t in range(self.vocab)})

    def proposer(self) -> Any:
        if self.proposer_kind == "chain":
            return drafts.chain(self.shape[0], sampling=self.sampling, claim=self.claim)
        return drafts.tree(self.shape, children=self.sampling, claim=self.claim)

    def audit_kwargs(self) -> dict[Any, Any]:
        """Keyword arguments for ``es.audit`` (everything but the rule)."""
        return dict(target=self._model(self.target, "target"), draft=self._model(self.draft, "draft"),
                    proposer=self.proposer(), prompt=self.prompt, tokens=self.tokens, decoding=self.decoding)

    # -- ordering -------------------------------------------------------------------------------
    def size(self) -> int:
        """Drafts per step: gamma for a chain, the number of tree nodes for a tree."""
        if self.proposer_kind == "chain":
            return self.shape[0]
        total, width = 0, 1
        for k in self.shape:
            width *= k
            total += width
        return total

    def max_denominator(self) -> int:
        return max(_denominator(law) for law in self.target + self.draft)

    def key(self) -> tuple[Any, ...]:
        """The shrink order: vocab, drafts, tokens, family, then denominators."""
        return (self.vocab, self.size(), self.tokens, FAMILIES.index(self.family), self.max_denominator())

    # -- rendering --------------------------------------------------------------------------------
    def describe(self) -> str:
        prop = self.proposer().describe()
        return (f"vocab {self.vocab}, {prop}, {self.tokens} token(s), {self.family.replace('_', '-')} models, "
                f"prompt {self.prompt}, decoding {self.decoding}")

    def model_source(self, laws: tuple[Law, ...], var: str) -> str:
        """Python source that builds one of the two models with exactspec's public API.

        Only ``repr()`` of validated ints is rendered (see :meth:`check`); ``var`` must be an identifier.
        """
        if var not in ("target", "draft"):
            raise InvalidValue(f"model_source: var must be 'target' or 'draft', got {var!r}")
        self.check()
        group = self.target if var == "target" else self.draft
        if laws is not group:
            _laws(laws, f"model_source({var})", self.vocab, self.family)

        def law_src(law: Law) -> str:
            return "(" + ", ".join(f"F({int(x.numerator)!r}, {int(x.denominator)!r})" for x in law) + (
                "," if len(law) == 1 else "") + ")"
        vocab, n0 = int(self.vocab), len(self.prompt)
        if self.family == "context_free":
            return f"{var} = es.models.context_free({law_src(laws[0])})"
        if self.family == "per_position":
            body = ", ".join(law_src(law) for law in laws)
            return (f"{var.upper()}_LAWS = [{body}]  # position t after the prompt uses law min(t, last)\n"
                    f"{var} = es.models.from_function(vocab={vocab!r}, order=None, fn=lambda ctx: "
                    f"{var.upper()}_LAWS[min(len(ctx) - {n0!r}, {len(laws) - 1!r})])")
        rows = ", ".join(f"({t!r},): {law_src(law)}" for t, law in enumerate(laws))
        return f"{var} = es.models.table(vocab={vocab!r}, order=1, table={{{rows}}})"

    def proposer_source(self) -> str:
        """Python source that builds the proposer (validated ints and allow-listed strings only)."""
        self.check()
        kind = self.proposer_kind
        sampling = _choice(self.sampling, "instance.sampling", CHAIN_SAMPLINGS if kind == "chain" else TREE_CHILDREN)
        claim = _choice(self.claim, "instance.claim", CHAIN_CLAIMS if kind == "chain" else TREE_CLAIMS)
        shape = tuple(int(k) for k in self.shape)
        if kind == "chain":
            return f"es.drafts.chain({shape[0]!r}, sampling={sampling!r}, claim={claim!r})"
        return f"es.drafts.tree({shape!r}, children={sampling!r}, claim={claim!r})"

    def to_dict(self) -> dict[Any, Any]:
        def laws(ls: tuple[Law, ...]) -> list[Any]:
            return [[str(x) for x in law] for law in ls]
        return {"vocab": self.vocab, "family": self.family, "target": laws(self.target), "draft": laws(self.draft),
                "shape": list(self.shape), "tokens": self.tokens, "prompt": list(self.prompt),
                "decoding": self.decoding, "proposer_kind": self.proposer_kind, "sampling": self.sampling,
                "claim": self.claim}

    #: fields of :meth:`to_dict` that :meth:`from_dict` may leave out, with their defaults
    _OPTIONAL = {"prompt": [], "decoding": "sample", "proposer_kind": "chain", "sampling": "sample", "claim": "draft"}

    @classmethod
    def from_dict(cls, d: Any, where: str = "instance") -> "SearchInstance":
        """Rebuild an instance written by :meth:`to_dict`, validating every field (a typed error names it).

        >>> inst = SearchInstance.from_dict({"vocab": 2, "family": "context_free", "target": [["1/2", "1/2"]],
        ...                                  "draft": [["1", "0"]], "shape": [1], "tokens": 1})
        >>> inst.draft
        ((Fraction(1, 1), Fraction(0, 1)),)
        >>> SearchInstance.from_dict({"vocab": 2, "family": "context_free", "target": [["1/2", "1/2"]],
        ...                           "draft": [["1", "0"]], "shape": "1); import os; (", "tokens": 1})
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: instance.shape: expected a list of ints, got a string
        """
        if not isinstance(d, dict):
            raise _fail(where, f"expected an object, got {_kind(d)}")
        known = ("vocab", "family", "target", "draft", "shape", "tokens", *cls._OPTIONAL)
        missing = [k for k in known if k not in d and k not in cls._OPTIONAL]
        if missing:
            raise _fail(where, f"missing field(s) {', '.join(missing)}")
        unknown = [k for k in d if k not in known]
        if unknown:
            raise _fail(where, f"unknown field {str(unknown[0])[:40]!r}")
        g = {**cls._OPTIONAL, **d}
        vocab = _int(g["vocab"], f"{where}.vocab", lo=2)
        family = _choice(g["family"], f"{where}.family", FAMILIES)
        kind = _choice(g["proposer_kind"], f"{where}.proposer_kind", PROPOSER_KINDS)
        inst = cls(vocab=vocab, family=family,
                   target=_laws(g["target"], f"{where}.target", vocab, family),
                   draft=_laws(g["draft"], f"{where}.draft", vocab, family),
                   shape=_ints(g["shape"], f"{where}.shape", lo=1), tokens=_int(g["tokens"], f"{where}.tokens", lo=1),
                   prompt=_ints(g["prompt"], f"{where}.prompt", lo=0, hi=vocab - 1),
                   decoding=_choice(g["decoding"], f"{where}.decoding", DECODINGS), proposer_kind=kind,
                   sampling=_choice(g["sampling"], f"{where}.sampling",
                                    CHAIN_SAMPLINGS if kind == "chain" else TREE_CHILDREN),
                   claim=_choice(g["claim"], f"{where}.claim", CHAIN_CLAIMS if kind == "chain" else TREE_CLAIMS))
        inst.check(where)
        return inst

    def check(self, where: str = "instance") -> "SearchInstance":
        """Validate every field's type and value (ints, exact laws, allow-listed strings); return self.

        Run by :meth:`from_dict` and before rendering source (:meth:`model_source`,
        :meth:`proposer_source`), so rendered code holds only validated ints, Fractions and
        allow-listed strings.

        >>> from fractions import Fraction as F
        >>> SearchInstance(vocab=2, family="context_free", target=((F(1, 2), F(1, 2)),), draft=((F(1), F(0)),),
        ...                shape=(1,), tokens=1, sampling="sample; import os").check()
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: instance.sampling: must be one of sample, argmax, got 'sample; import os'
        """
        vocab = _int(self.vocab, f"{where}.vocab", lo=2)
        family = _choice(self.family, f"{where}.family", FAMILIES)
        kind = _choice(self.proposer_kind, f"{where}.proposer_kind", PROPOSER_KINDS)
        _choice(self.decoding, f"{where}.decoding", DECODINGS)
        _choice(self.sampling, f"{where}.sampling", CHAIN_SAMPLINGS if kind == "chain" else TREE_CHILDREN)
        _choice(self.claim, f"{where}.claim", CHAIN_CLAIMS if kind == "chain" else TREE_CLAIMS)
        for name in ("target", "draft"):
            group = getattr(self, name)
            if not isinstance(group, tuple) or not all(
                    isinstance(law, tuple) and all(isinstance(x, Fraction) for x in law) for law in group):
                raise _fail(f"{where}.{name}", "expected a tuple of laws, each a tuple of Fractions")
            _laws(group, f"{where}.{name}", vocab, family)
        if not isinstance(self.shape, tuple) or not self.shape:
            raise _fail(f"{where}.shape", f"expected a non-empty tuple of ints, got {_kind(self.shape)}")
        if len(self.shape) > 64:
            raise _fail(f"{where}.shape", f"{len(self.shape)} levels; at most 64")
        _ints(self.shape, f"{where}.shape", lo=1, hi=MAX_DRAFTS)
        if kind == "chain" and len(self.shape) != 1:
            raise _fail(f"{where}.shape", f"a chain's shape is (gamma,), got {len(self.shape)} entries")
        if self.size() > MAX_DRAFTS:
            raise _fail(f"{where}.shape", f"{self.size()} draft nodes per step; at most {MAX_DRAFTS}")
        _int(self.tokens, f"{where}.tokens", lo=1)
        if not isinstance(self.prompt, tuple):
            raise _fail(f"{where}.prompt", f"expected a tuple of token ids, got {_kind(self.prompt)}")
        _ints(self.prompt, f"{where}.prompt", lo=0, hi=vocab - 1)
        if family == "table" and not self.prompt:
            raise _fail(f"{where}.prompt", "order-1 table models need a prompt of at least one token")
        return self

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


@dataclass(frozen=True)
class Space:
    """Where to look: vocabularies, proposer shapes, tokens, model families, denominators.

    ``exhaustive_denominator``: every context-free (p, q) pair on the simplex grid with
    denominators up to this bound is audited (for each vocab/shape/tokens cell up to
    ``exhaustive_limit`` pairs); per-position and table models, and larger denominators up to
    ``max_denominator``, are sampled (``random_points`` per cell). Hill climbing on the exact TV
    is :func:`exactspec.counterexamples.worst`'s job (a lossless rule has no TV to climb).

    >>> Space().describe().startswith("vocab 2..4")
    True
    """

    vocabs: tuple[int, ...] = (2, 3, 4)
    shapes: tuple[tuple[int, ...], ...] = ((1,), (2,), (3,))
    tokens: tuple[int, ...] = (1, 2, 3)
    families: tuple[str, ...] = FAMILIES
    exhaustive_denominator: int = 4
    exhaustive_limit: int = 1500
    max_denominator: int = 12
    random_points: int = 40
    proposer_kind: str = "chain"
    sampling: str = "sample"
    claim: str = "draft"
    decoding: str = "sample"
    per_position_laws: int = 2
    #: when set, only cells whose tokens <= depth + ``extra_tokens`` (depth: gamma, or the tree's depth)
    extra_tokens: int | None = None
    #: with ``extra_tokens``: each shape only at its longest horizon, depth + ``extra_tokens`` (the law of
    #: fewer tokens is a marginal of it, so a bias there shows here too; shrinking tries fewer tokens)
    only_longest: bool = False

    def __post_init__(self) -> None:
        if not self.vocabs or min(self.vocabs) < 2:
            raise InvalidValue(f"Space: vocabs must be ints >= 2, got {self.vocabs}")
        if not self.tokens or min(self.tokens) < 1:
            raise InvalidValue(f"Space: tokens must be ints >= 1, got {self.tokens}")
        bad = [f for f in self.families if f not in FAMILIES]
        if bad:
            raise InvalidValue(f"Space: unknown model family {bad[0]!r}; choose from {', '.join(FAMILIES)}")
        if self.exhaustive_denominator < 1 or self.max_denominator < self.exhaustive_denominator:
            raise InvalidValue("Space: need 1 <= exhaustive_denominator <= max_denominator")
        if self.extra_tokens is not None and (isinstance(self.extra_tokens, bool) or not isinstance(
                self.extra_tokens, int) or self.extra_tokens < 0):
            raise InvalidValue(f"Space: extra_tokens must be None or an int >= 0, got {self.extra_tokens!r}")
        if self.only_longest and self.extra_tokens is None:
            raise InvalidValue("Space: only_longest needs extra_tokens (the longest horizon is depth + extra_tokens)")

    def cells(self) -> list[tuple[int, tuple[int, ...], int, str]]:
        """(vocab, shape, tokens, family) in shrink order."""
        def size(shape: tuple[int, ...]) -> int:
            return shape[0] if self.proposer_kind == "chain" else sum(
                _prod(shape[: i + 1]) for i in range(len(shape)))
        def horizons(shape: tuple[int, ...]) -> Sequence[int]:
            if self.extra_tokens is None:
                return self.tokens
            longest = self._depth(shape) + self.extra_tokens
            return (longest,) if self.only_longest else [t for t in self.tokens if t <= longest]
        cells = [(v, s, t, f) for v in self.vocabs for s in self.shapes for t in horizons(s) for f in self.families]
        return sorted(cells, key=lambda c: (c[0], size(c[1]), c[2], FAMILIES.index(c[3])))

    def _depth(self, shape: tuple[int, ...]) -> int:
        return shape[0] if self.proposer_kind == "chain" else len(shape)

    def describe(self) -> str:
        """The space in words (what an empty search is a statement about).

        >>> Space(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2, 3), extra_tokens=1).describe()[:60]
        'vocab 2..2, gamma {1, 2}, tokens 1..3 (at most gamma + 1), f'
        """
        shapes = ", ".join(str(s[0]) if self.proposer_kind == "chain" else str(s) for s in self.shapes)
        depth = "gamma" if self.proposer_kind == "chain" else "depth"
        upto = "" if self.extra_tokens is None else f" (at most {depth} + {self.extra_tokens})"
        tokens = f"tokens {min(self.tokens)}..{max(self.tokens)}{upto}"
        if self.only_longest:
            tokens = f"tokens {depth} + {self.extra_tokens} (shorter horizons are its marginals)"
        return (f"vocab {min(self.vocabs)}..{max(self.vocabs)}, "
                f"{'gamma' if self.proposer_kind == 'chain' else 'expansion'} {{{shapes}}}, "
                f"{tokens}, families {', '.join(self.families)}; "
                f"every context-free (p, q) with denominators <= {self.exhaustive_denominator} "
                f"(at most {self.exhaustive_limit} pairs per cell), {self.random_points} random rational instances "
                f"per cell with denominators <= {self.max_denominator}")

    def instance(self, vocab: int, shape: tuple[int, ...], tokens: int, family: str, target: tuple[Law, ...],
                 draft: tuple[Law, ...]) -> SearchInstance:
        return SearchInstance(vocab=vocab, family=family, target=target, draft=draft, shape=shape, tokens=tokens,
                              prompt=(0,) if family == "table" else (), decoding=self.decoding,
                              proposer_kind=self.proposer_kind, sampling=self.sampling, claim=self.claim)

    def describe_cell(self, cell: tuple[int, tuple[int, ...], int, str]) -> str:
        """One cell of :meth:`cells` in words.

        >>> Space().describe_cell((2, (3,), 1, "per_position"))
        'vocab 2, gamma 3, 1 token(s), per-position models'
        """
        vocab, shape, tokens, family = cell
        shown = f"gamma {shape[0]}" if self.proposer_kind == "chain" else f"expansion {shape}"
        return f"vocab {vocab}, {shown}, {tokens} token(s), {family.replace('_', '-')} models"

    def n_laws(self, vocab: int, family: str) -> int:
        return 1 if family == "context_free" else self.per_position_laws if family == "per_position" else vocab

    def with_(self, **kw: Any) -> "Space":
        return replace(self, **kw)


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def default_space(rule: Any, proposer: Any = None) -> Space:
    """The space searched when none is given: chains or small trees, following the rule's family.

    A given proposer fixes how drafts are made and scored (sampling/children and claim); its
    gamma or expansion is varied over the space's shapes.

    >>> import exactspec as es
    >>> default_space(es.rules.mss).shapes[:4]
    ((1,), (2,), (1, 1), (3,))
    """
    decoding = getattr(rule, "decoding", "sample")
    proposer = proposer if proposer is not None else getattr(rule, "proposer", None)
    if getattr(rule, "family", "chain") == "tree":
        children = getattr(proposer, "children", "iid") if proposer is not None else "iid"
        claim = getattr(proposer, "claim", "draft") if proposer is not None else "draft"
        return Space(vocabs=(2, 3), shapes=((1,), (2,), (1, 1), (3,), (2, 1), (1, 1, 1), (2, 2)), tokens=(1, 2, 3),
                     proposer_kind="tree", sampling=children, claim=claim, decoding=decoding,
                     exhaustive_denominator=3, exhaustive_limit=400, random_points=16)
    sampling = getattr(proposer, "sampling", "sample") if proposer is not None else "sample"
    claim = getattr(proposer, "claim", "draft") if proposer is not None else "draft"
    return Space(sampling=sampling, claim=claim, decoding=decoding)


