"""Abstract values a rule handles: class entries, named and unnamed tokens, abstract laws, es.laws' hook.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

import operator
from fractions import Fraction
from typing import Any, Callable

from ...errors import InvalidDistribution
from ..field import arith
from ..field import SymNum, active, nonzero
from .space import _AbsSpace, _space
from .state import _SESSION, _inexact, _refuse


class ClassEntry(SymNum):
    """The entry of a law at a class of unnamed tokens: a function of the class's generic token, per token.

    A rule meets one only by iterating over a law (which makes the run inexact): es.laws' helpers use them
    through :class:`_Hook`, where each comparison's answer is the same for every token of the class.
    """

    __slots__ = ("cls",)

    def __init__(self, f: Any, cls: int) -> None:
        self.f, self.cls = f, cls

    def _with(self, o: Any, op: str, scalar_ok: bool) -> Any:
        if isinstance(o, ClassEntry):
            if o.cls != self.cls:
                _refuse(f"combines ({op}) entries of two different classes of unnamed tokens (a sum over the "
                        "vocabulary outside es.laws?)")
            return o.f
        if isinstance(o, float):
            return SymNum._other(o, op)
        other = SymNum._other(o, op)
        if other is NotImplemented:
            return NotImplemented
        if not scalar_ok:
            if getattr(other, "numer", None) is not None and other.numer.is_zero:
                return other
            _refuse(f"adds or subtracts a number and the probability of every unnamed token of a class ({op}); "
                    "a vocabulary-wide sum must go through es.laws (normalize, residual)")
        space = _space()
        if getattr(other, "numer", None) is not None and (space.members_in(other.numer) or
                                                          space.members_in(other.denom)):
            _refuse(f"combines ({op}) a class entry with a drawn unnamed token's probability")
        return other

    def __add__(self, o: Any) -> Any:
        x = self._with(o, "+", False)
        return x if x is NotImplemented else ClassEntry(arith.op("+", self.f, x), self.cls)

    def __radd__(self, o: Any) -> Any:
        """``number + entry``: how ``sum()`` adds a law's entries one by one; the class adds its total (inexact)."""
        if isinstance(o, ClassEntry):
            return self.__add__(o)
        x = self._with(o, "+", True)
        if x is NotImplemented:
            return x
        _inexact("adds up a law's entries in its own code (sum() over a law; es.laws' helpers sum exactly)")
        session = _SESSION.get()
        return SymNum(x) + session.hook.class_total(self, self.cls)   # type: ignore[union-attr]

    def __sub__(self, o: Any) -> Any:
        x = self._with(o, "-", False)
        return x if x is NotImplemented else ClassEntry(arith.op("-", self.f, x), self.cls)

    def __rsub__(self, o: Any) -> Any:
        x = self._with(o, "-", False)
        return x if x is NotImplemented else ClassEntry(arith.op("-", x, self.f), self.cls)

    def __mul__(self, o: Any) -> Any:
        x = self._with(o, "*", True)
        return x if x is NotImplemented else ClassEntry(arith.op("*", self.f, x), self.cls)

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        x = self._with(o, "/", True)
        if x is NotImplemented:
            return x
        nonzero(x)
        return ClassEntry(arith.op("/", self.f, x), self.cls)

    def __rtruediv__(self, o: Any) -> Any:
        x = self._with(o, "/", True)
        if x is NotImplemented:
            return x
        nonzero(self.f)
        return ClassEntry(arith.op("/", x, self.f), self.cls)

    def __neg__(self) -> "ClassEntry":
        return ClassEntry(-self.f, self.cls)

    def __abs__(self) -> "ClassEntry":
        return self if self >= 0 else -self

    def __pow__(self, k: Any) -> Any:
        r = SymNum.__pow__(self, k)
        return ClassEntry(r.f, self.cls)

    def _cmp(self, o: Any, op: str) -> Any:
        x = self._with(o, op, True)
        if x is NotImplemented:
            return x
        return active().decide(arith.op("-", self.f, x), op)

    def __repr__(self) -> str:
        return f"ClassEntry(C{self.cls}: {self.f.as_expr()})"


class NamedToken:
    """A named token of the abstract vocabulary: a token of the outcome, known to the rule only by equality.

    Its id stands for whichever token the outcome holds (the proof is up to renaming tokens), so a rule may
    compare it with tokens; anything that reads its id (a comparison with a constant, ``<``, arithmetic, use
    as an index, ``hash``, ``bool``, ``str``) makes the run inexact: no proof is given.
    """

    __slots__ = ("name",)

    def __init__(self, name: int) -> None:
        self.name = name

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if isinstance(o, NamedToken):
            return o.name == self.name
        if isinstance(o, UnnamedToken):
            return False
        if isinstance(o, int):
            _inexact(f"compares a token with the constant id {o!r} (a special token id is not symmetric)")
            return self.name == o
        return NotImplemented

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def _id(self, what: str) -> int:
        _inexact(f"{what} a token's id (the proof holds up to renaming tokens)")
        return self.name

    def __hash__(self) -> int:
        return hash(self._id("hashes"))   # a set of tokens is ordered by their ids

    def __index__(self) -> int:
        return self._id("uses as a number")

    __int__ = __index__

    def __bool__(self) -> bool:
        return self._id("tests the truth of") != 0   # token 0 is false

    def __str__(self) -> str:
        return str(self._id("prints"))

    def __format__(self, spec: str) -> str:
        return format(self._id("prints"), spec)

    def __float__(self) -> float:
        return float(self._id("uses as a number"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._id(f"reads .{name} of"), name)   # int's methods and attributes

    def __repr__(self) -> str:
        return f"<named token {self.name}>"


def _token_id_op(name: str, fn: Callable) -> Callable:
    def op(self: NamedToken, *other: Any) -> Any:
        args = [o._id(f"computes with ({name})") if isinstance(o, NamedToken) else o for o in other]
        return fn(self._id(f"computes with ({name})"), *args)
    op.__name__ = name
    return op


_TOKEN_ID_OPS: list[tuple[str, Callable[..., Any]]] = [("__lt__", operator.lt), ("__le__", operator.le), ("__gt__", operator.gt),
                   ("__ge__", operator.ge), ("__add__", operator.add), ("__sub__", operator.sub),
                   ("__mul__", operator.mul), ("__floordiv__", operator.floordiv), ("__mod__", operator.mod),
                   ("__truediv__", operator.truediv), ("__pow__", operator.pow), ("__and__", operator.and_),
                   ("__or__", operator.or_), ("__xor__", operator.xor), ("__lshift__", operator.lshift),
                   ("__rshift__", operator.rshift), ("__neg__", operator.neg), ("__pos__", operator.pos),
                   ("__abs__", operator.abs), ("__invert__", operator.invert),
                   ("__radd__", lambda a, b: b + a), ("__rsub__", lambda a, b: b - a),
                   ("__rmul__", lambda a, b: b * a), ("__rfloordiv__", lambda a, b: b // a),
                   ("__rmod__", lambda a, b: b % a), ("__rtruediv__", lambda a, b: b / a),
                   ("__rand__", lambda a, b: b & a), ("__ror__", lambda a, b: b | a),
                   ("__rxor__", lambda a, b: b ^ a), ("__rpow__", lambda a, b: b ** a),
                   ("__rlshift__", lambda a, b: b << a), ("__rrshift__", lambda a, b: b >> a),
                   ("__divmod__", divmod), ("__rdivmod__", lambda a, b: divmod(b, a)), ("__round__", round),
                   ("__trunc__", lambda a: a), ("__floor__", lambda a: a), ("__ceil__", lambda a: a)]
for _name, _fn in _TOKEN_ID_OPS:
    setattr(NamedToken, _name, _token_id_op(_name, _fn))


class UnnamedToken:
    """A token drawn from a class of unnamed tokens (its ``k``-th draw in the branch): an outcome no named one."""

    __slots__ = ("cls", "k", "run")

    def __init__(self, cls: int, k: int, run: Any) -> None:   # run: the branch (an all_vocab.run._Run)
        self.cls, self.k, self.run = cls, k, run

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if isinstance(o, UnnamedToken):
            if o.cls != self.cls:
                return False
            if o.k == self.k and o.run is self.run:
                return True
            return self.run.ambiguous()
        if isinstance(o, NamedToken):
            return False
        if isinstance(o, int):
            _inexact(f"compares a token with the constant id {o!r} (a special token id is not symmetric)")
            if isinstance(o, bool) or 0 <= o < self.run.named:
                return False
            _refuse(f"compares a drawn unnamed token with the position {o} of the abstract vocabulary")
        return NotImplemented

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __hash__(self) -> int:
        _inexact("hashes a token (a set of tokens is ordered by their ids)")
        return hash(("es-unnamed", self.cls))

    def __index__(self) -> int:
        return _refuse("uses a drawn unnamed token as a number (an index of a list the rule built, arithmetic, "
                       "ordering, int(), bool(), str()): an unnamed token has no id")

    __int__ = __index__
    __bool__ = __index__   # type: ignore[assignment]
    __str__ = __index__    # type: ignore[assignment]
    __float__ = __index__  # type: ignore[assignment]

    def __format__(self, spec: str) -> str:
        return self.__index__()   # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.__index__()

    def __repr__(self) -> str:
        return f"<unnamed token {self.k} of class C{self.cls}>"


for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__add__", "__sub__", "__mul__", "__floordiv__", "__mod__",
              "__truediv__", "__pow__", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "__neg__",
              "__pos__", "__abs__", "__invert__", "__radd__", "__rsub__", "__rmul__", "__rfloordiv__", "__rmod__",
              "__rtruediv__", "__rand__", "__ror__", "__rxor__", "__rpow__", "__rlshift__", "__rrshift__",
              "__divmod__", "__rdivmod__", "__round__", "__trunc__", "__floor__", "__ceil__"):
    setattr(UnnamedToken, _name, lambda self, *other: self.__index__())


class AbstractLaw:
    """A law over the abstract vocabulary: named entries, then one :class:`ClassEntry` per class.

    Read at a token (``p[x]``) it gives that token's probability; es.laws' helpers see all of it through
    :class:`_Hook`. Its length is refused (the vocabulary size is symbolic); iterating over it, testing
    membership, comparing or hashing it whole, or reading it at a constant position makes the run inexact.
    """

    __slots__ = ("entries", "named")

    def __init__(self, entries: Any, named: int) -> None:
        self.entries, self.named = tuple(entries), named

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, NamedToken):
            return self.entries[i.name]
        if isinstance(i, UnnamedToken):
            session = _SESSION.get()
            if session is None or i.run is not session.run:
                _refuse("reads a law at an unnamed token drawn in another branch (state kept between runs)")
            e = self.entries[self.named + i.cls]
            if isinstance(e, ClassEntry):
                return SymNum(_space().to_draw(e.f, i.cls, i.k))
            if _is_zero(e):
                return e
            return _refuse("a law the rule built has a constant entry at a class of unnamed tokens")
        if isinstance(i, slice):
            return _refuse("slices a law")
        if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.named:
            _inexact(f"reads a law at the constant position {i} (a special token id is not symmetric)")
            return self.entries[i]
        if isinstance(i, int):
            return _refuse(f"reads entry {i} of a law: positions past the named tokens stand for classes")
        raise TypeError(f"a law is indexed by a token, not by {type(i).__name__}")

    def __len__(self) -> int:
        return _refuse("takes len() of a law: the vocabulary size is symbolic")

    def __iter__(self) -> Any:
        _inexact("iterates over a law (each class of unnamed tokens comes once, for any number of tokens, none "
                 "included: a loop, a count, all()/any()/min()/max()/sorted() over the entries is not exact)")
        return iter(self._inhabited())

    def __reversed__(self) -> Any:
        _inexact("iterates over a law in reverse")
        return reversed(self._inhabited())

    def __contains__(self, x: Any) -> bool:
        _inexact("tests membership in a law (whether some token has a given probability)")
        return x in self._inhabited()

    def _inhabited(self) -> list:
        """The named entries and those of the classes that hold a token, the cell forked on each class's mass.

        For a run that is inexact already: a quantifier over the entries (``any``, ``all``, a ``for`` with
        ``break``) then sees a class only where it holds a token, so the bias of a rule whose test is blind
        where a class is empty is met, and replayed; a count still sees one entry per class.
        """
        space = _space()
        out = list(self.entries[:self.named])
        mask = []
        for i, e in enumerate(self.entries[self.named:]):
            held = bool(space.totals_p_num[i] + space.totals_q_num[i] > 0)   # forks the cell where it may be empty
            mask.append(held)
            if held:
                out.append(e)
        session = _SESSION.get()
        if session is not None:
            session.inhabited = tuple(mask)   # the same on the whole branch: its decisions on the classes' mass
        return out


    def __bool__(self) -> bool:
        return True   # a law over >= 2 tokens, as every concrete one here

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if o is self:
            return True
        _inexact("compares two laws as wholes")
        return isinstance(o, AbstractLaw) and self.entries == o.entries

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return not self.__eq__(o)

    def __hash__(self) -> int:
        _inexact("hashes a law (equal laws are one key)")
        return id(self)

    def __array__(self, *a: Any, **k: Any) -> Any:
        return _refuse("hands a law to numpy")

    def _as_sequence(self, *other: Any) -> Any:
        return _refuse("uses a law as a sequence (concatenation, repetition, ordering, index(), count()): its "
                       "length is the symbolic vocabulary size")

    __add__ = __radd__ = __mul__ = __rmul__ = _as_sequence
    __lt__ = __le__ = __gt__ = __ge__ = _as_sequence

    def __getattr__(self, name: str) -> Any:
        if name in ("index", "count"):   # a tuple's methods (a concrete law is a tuple)
            return self._as_sequence()
        raise AttributeError(f"'tuple' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"AbstractLaw({self.entries!r})"

def _as_law(entries: Any, named: int, what: str) -> tuple:
    """A sequence the rule built as a law over the abstract vocabulary: every class, or the inhabited ones only
    (built by iterating over a law, :meth:`AbstractLaw._inhabited`: an empty class's entry is then 0, exact)."""
    entries = tuple(entries)
    m = len(_space().layout.classes)
    if len(entries) == named + m:
        return entries
    session = _SESSION.get()
    mask = None if session is None else session.inhabited
    if mask is not None and len(entries) == named + sum(mask):
        out = list(entries[:named])
        rest = iter(entries[named:])
        out += [next(rest) if held else 0 for held in mask]
        return tuple(out)
    return _refuse(f"{what} a sequence of {len(entries)} entries, not a law over the abstract vocabulary")


def _is_zero(e: Any) -> bool:
    if isinstance(e, (int, Fraction)) and not isinstance(e, bool):
        return e == 0
    return type(e) is SymNum and e.f.numer.is_zero


class _Hook:
    """What ``es.laws`` asks while an all-vocabulary proof runs: its helpers over the abstract vocabulary.

    A class entry stands for every token of its class: a map applies the helper's per-entry function to it
    once (each comparison in it answered for the whole class, or the classes split by it), a sum adds the
    class's total (the entry summed over the class's tokens, 0 for an empty class). Exact for every class size.
    """

    def __init__(self, space: _AbsSpace) -> None:
        self.space = space
        #: residuals by the identities of their laws, for the running branch (cleared at each branch's start:
        #: a residual's comparisons are decided under the classes its branch drew from)
        self.residuals: dict = {}

    def residual(self, p: Any, q: Any) -> "AbstractLaw":
        """``normalize(max(p - q, 0))``, once per pair of laws in a branch."""
        hit = self.residuals.get((id(p), id(q)))
        if hit is not None and hit[0] is p and hit[1] is q:
            return hit[2]
        r = self.normalize(self.map(lambda a, b: a - b if a > b else 0, p, q))
        self.residuals[(id(p), id(q))] = (p, q, r)
        return r

    def _entries(self, v: Any) -> tuple:
        """The entries of ``v``: an abstract law, or a list the rule built from one (an inexact run)."""
        if isinstance(v, AbstractLaw):
            return v.entries
        if not isinstance(v, (list, tuple)):
            _refuse(f"hands es.laws a {type(v).__name__}, not a law")
        return _as_law(v, self.space.layout.named, "hands es.laws")

    def map(self, fn: Callable, *laws: Any) -> "AbstractLaw":
        """``fn`` entry by entry over aligned laws (``positive_part``, ``residual``'s ``max(p - q, 0)``)."""
        columns = [self._entries(v) for v in laws]
        return AbstractLaw([fn(*xs) for xs in zip(*columns)], self.space.layout.named)

    def total(self, v: Any) -> Any:
        """``sum(v)`` over the whole vocabulary: named entries plus each class entry summed over its tokens."""
        entries = self._entries(v)
        c = self.space.layout.named
        total: Any = 0
        for x in entries[:c]:
            total = total + x
        for i, x in enumerate(entries[c:]):
            total = total + self.class_total(x, i)
        return total

    def class_total(self, x: Any, i: int) -> Any:
        space = self.space
        if isinstance(x, ClassEntry):
            f = x.f
            hit = space.totals.get((f, i))
            if hit is not None:
                return hit
            if space.members_in(f.denom):
                _refuse("sums a per-token quantity that is not linear in the token's probabilities (its "
                        "denominator holds them)")
            hit = space.totals[(f, i)] = SymNum(_sum_over_class(space, f.numer, {(i, 0)}) / space.K(f.denom))
            return hit
        if _is_zero(x):
            return 0
        return _refuse("sums a law with a constant entry at a class of unnamed tokens (its sum needs the class size)")

    def normalize(self, v: Any) -> Any:
        s = self.total(v)
        if s == 0:
            raise InvalidDistribution("cannot normalise a law whose total mass is 0")
        return AbstractLaw([x / s if not _is_zero(x) else x for x in self._entries(v)], self.space.layout.named)

    def argmax(self, v: Any) -> Any:
        return _refuse("takes the argmax of a law over the vocabulary (es.laws.argmax)")


def _sum_over_class(space: _AbsSpace, numer: Any, draws: set) -> Any:
    """``numer`` summed over the tokens of each ``(class, draw)``: it must be linear and homogeneous in each."""
    R = space.K.ring
    for i, k in draws:
        a, b = space.member_names[(i, k)]
        for monom in numer.monoms():
            if monom[a] + monom[b] != 1:
                _refuse("a branch's probability is not linear in an unnamed token's probabilities (its sum "
                        "over the tokens of the class is not a function of the class's totals)")
    subs = []
    for i, k in draws:
        a, b = space.member_names[(i, k)]
        subs += [(R.gens[a], space.totals_p[i].numer), (R.gens[b], space.totals_q[i].numer)]
    return space.K(numer.compose(subs))
