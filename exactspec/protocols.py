"""The rule API as types: what a rule ``fn(step, rng)`` may call on its ``step`` and its ``rng``.

A chain rule receives a :class:`Step` (the engine's is :class:`exactspec.drafts.ChainStep`), a
tree rule a :class:`TreeStep` (:class:`exactspec.drafts.TreeStep`), and both an :class:`Rng`
(the engine's is :class:`exactspec.enumerate.PathRng`). The protocols are
``runtime_checkable``, so ``isinstance`` checks that an object has every member (not their
signatures; on a :class:`Step` that reads ``drafts``, which draws every draft); the tests check the
engine's classes against them, so they cannot drift apart.

This module imports nothing from exactspec: every layer (rules, drafts, engine, samplers) can
use it without an import cycle.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> def keep_first(step: Step, rng: Rng) -> list[int]:     # emits the draft's law, not the target's
...     return [step.draft(0)]
>>> es.audit(target=es.models.context_free((F(3, 5), F(2, 5))), draft=es.models.context_free((F(1, 2), F(1, 2))),
...          proposer=es.drafts.chain(1), rule=keep_first, tokens=1).tv
Fraction(1, 10)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

__all__ = ["UniformLike", "Rng", "Step", "TreeStep", "Law", "RuleFn", "ChainRuleFn", "TreeRuleFn"]

#: a law over the vocabulary: ``vocab`` probabilities in the audit's field, summing to 1
Law = Sequence[Any]


@runtime_checkable
class UniformLike(Protocol):
    """A draw ``u`` on [0, 1) known only through comparisons with numbers and affine arithmetic.

    The engine's is :class:`exactspec.enumerate.Uniform` (each comparison forks the enumeration);
    a float satisfies the protocol too (what a sampling rng hands out).

    >>> isinstance(0.25, UniformLike)
    True
    """

    def __lt__(self, t: Any) -> bool:
        """``u < t``: forks into the branch where it holds (probability ``t``) and the one where it does not."""
        ...

    def __le__(self, t: Any) -> bool:
        """``u <= t`` (differs from ``<`` only on a lattice rng model, where ties have positive probability)."""
        ...

    def __gt__(self, t: Any) -> bool:
        """``u > t``."""
        ...

    def __ge__(self, t: Any) -> bool:
        """``u >= t``."""
        ...

    def __mul__(self, c: Any) -> Any:
        """``u * c``: still a uniform, scaled (``c`` a number)."""
        ...

    def __truediv__(self, c: Any) -> Any:
        """``u / c``: still a uniform, scaled (``c`` a nonzero number)."""
        ...

    def __add__(self, c: Any) -> Any:
        """``u + c``: still a uniform, shifted (``c`` a number)."""
        ...

    def __sub__(self, c: Any) -> Any:
        """``u - c``: still a uniform, shifted (``c`` a number)."""
        ...


@runtime_checkable
class Rng(Protocol):
    """The randomness a rule may use: every draw goes through these three methods, nothing else.

    >>> from exactspec.enumerate import PathRng
    >>> from exactspec.fields import get_field
    >>> isinstance(PathRng((), 1, get_field(backend="python"), [], {}), Rng)
    True
    """

    def categorical(self, law: Law) -> int:
        """A token drawn from ``law`` (a sequence of probabilities summing to 1)."""
        ...

    def bernoulli(self, prob: Any) -> bool:
        """True with probability ``prob`` (a number in [0, 1])."""
        ...

    def uniform(self) -> UniformLike:
        """A uniform on [0, 1): compare it with numbers (``u < t``), scale or shift it."""
        ...


@runtime_checkable
class Step(Protocol):
    """What a chain rule sees of one step: ``gamma`` lazily drafted tokens and the laws at every position.

    Positions are 0-based; position ``gamma`` is the bonus position (no draft, a target law).

    >>> import exactspec as es
    >>> from exactspec.enumerate import PathRng
    >>> from exactspec.enumerate.env import Env
    >>> from exactspec.fields import get_field
    >>> fld, m = get_field(backend="python"), es.models.context_free(("1/2", "1/2"))
    >>> step = es.drafts.chain(2).step(Env(m, m, fld), (0,), PathRng((), 1, fld, [], {}))
    >>> isinstance(step, Step), step.gamma, step.target(0)
    (True, 2, (Fraction(1, 2), Fraction(1, 2)))
    """

    gamma: int
    vocab: int

    def draft(self, j: int) -> int:
        """The j-th drafted token, drawn the first time anything at or after position ``j`` is read."""
        ...

    def claimed(self, j: int) -> Law:
        """The law the verifier is told draft ``j`` was drawn from."""
        ...

    def target(self, j: int) -> Law:
        """The target law after drafts ``0..j-1`` (``j = gamma``: the bonus position)."""
        ...

    def accept(self, j: int) -> int:
        """Mark draft ``j`` accepted (for the efficiency figures) and return its token."""
        ...

    @property
    def drafts(self) -> tuple[int, ...]:
        """All ``gamma`` drafted tokens (draws every one of them)."""
        ...

    def number(self, x: Any) -> Any:
        """A rational constant as a number of the audit's field (``step.number("1/2")``)."""
        ...


@runtime_checkable
class TreeStep(Protocol):
    """What a tree rule sees of one step: a token tree drawn lazily below the verified root.

    Nodes are ints; ``root`` is node 0 (its token is the last context token).

    >>> import exactspec as es
    >>> from exactspec.enumerate import PathRng
    >>> from exactspec.enumerate.env import Env
    >>> from exactspec.fields import get_field
    >>> fld, m = get_field(backend="python"), es.models.context_free(("1/2", "1/2"))
    >>> step = es.drafts.tree((2, 1)).step(Env(m, m, fld), (0,), PathRng((), 1, fld, [], {}))
    >>> isinstance(step, TreeStep), step.root, step.max_depth
    (True, 0, 2)
    """

    root: int
    vocab: int
    max_depth: int

    def token(self, node: int) -> int:
        """The token at ``node``."""
        ...

    def parent(self, node: int) -> int:
        """``node``'s parent (-1 for the root)."""
        ...

    def depth(self, node: int) -> int:
        """``node``'s depth below the root (the root's is 0)."""
        ...

    def path(self, node: int) -> tuple[int, ...]:
        """The tokens from the root's child down to ``node``."""
        ...

    def target(self, node: int) -> Law:
        """The target law after the path to ``node``."""
        ...

    def claimed(self, node: int) -> Law:
        """The law the verifier is told ``node`` was drawn from (the root has none)."""
        ...

    def children(self, node: int) -> Sequence[int]:
        """``node``'s children, drawn one by one as a rule iterates over them (index or take ``len`` too)."""
        ...

    def proposals(self, node: int) -> Iterator[tuple[int, Law]]:
        """``(child, claimed law)`` pairs in the order the verifier tries them, drawn lazily."""
        ...

    def accept(self, node: int) -> int:
        """Mark ``node`` accepted (for the efficiency figures) and return its token."""
        ...

    def number(self, x: Any) -> Any:
        """A rational constant as a number of the audit's field."""
        ...



#: the type of a chain rule's function: ``fn(step, rng)`` yields (or returns) the tokens it emits
ChainRuleFn = Callable[[Step, Rng], Iterable[int]]
#: the type of a tree rule's function: the same over a :class:`TreeStep`
TreeRuleFn = Callable[[TreeStep, Rng], Iterable[int]]
#: the type of a rule's function, chain or tree (its ``family`` says which step it takes)
RuleFn = ChainRuleFn | TreeRuleFn
