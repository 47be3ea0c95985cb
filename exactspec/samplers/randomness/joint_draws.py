"""Pending draws held jointly: a decision on several undrawn draws forks on its answer, not on their values.

A generate loop decides on values that depend on several of its pending drafts at once: litgpt
compares ``target_prob[x_i] >= draft_prob[x_i]`` where both rows were computed from ``x_{i-1}``.
Forking on one draw at a time (reading ``x_{i-1}``, then narrowing ``x_i``) multiplies the branches
by the values of every draw but the last. A :class:`Joint` instead holds those draws together: the
assignments of values still possible and the exact probability of each, given everything the branch
did so far. Then:

- a **decision** keeps the assignments that give its answer (weighted by the answer's probability
  given the assignment, for a comparison with a uniform) and forks two ways, with the exact mass of
  each answer (:meth:`Joint.decide`);
- a **read** of one member draws its value from its marginal (the chain rule) and keeps the
  assignments with that value (:meth:`Joint.read`); a member left with one value is drawn with it,
  and a joint left with one member hands it its marginal as an ordinary law;
- the draws a loop returns unread are spread over their joint law where the branch ends
  (:func:`exactspec.audit_loop`), their joint's other members summed out.

:func:`join` makes one from undrawn draws and every undrawn draw their laws depend on: a draw whose
law is an exact row (a stand-in's row, possibly narrowed by an earlier decision), one whose law is a
row of a table indexed by other draws' values (``PendingDraw.given``: the next draft, sampled from
logits computed from the pending draft before it), or a member of another joint (joints are
independent of one another, so their product is their joint law). Nothing is drawn when joining;
nothing changes a law. Where it does not apply (a law not in exact rationals, several samples of
one row, a law computed only when read, more than :data:`LIMIT` assignments) it returns None and the
caller forks as before. A joint computes with gmpy2's ``mpq`` where it is installed (the ``fast``
extra), with :class:`fractions.Fraction` otherwise, on weights it does not renormalise (no division
per assignment); every law it hands out (a marginal, a decision's two masses) is made of Fractions
summing to exactly 1.

>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import PathRng
>>> from exactspec.fields import get_field
>>> from exactspec.samplers.torch_draws.lazy_draws import PendingDraw
>>> rng = PathRng((), 1, get_field(backend="python"), [], {})
>>> a = PendingDraw.of_law(rng, (F(1, 2), F(1, 2)))
>>> b = PendingDraw.of_law(rng, lambda: None)            # its law is read off ``given``
>>> b.given = (((a, 0),), lambda v: (F(1), F(0)) if v == (0,) else (F(1, 4), F(3, 4)))
>>> j = join([(b, 0)])
>>> [m is a for m in j.members], j.law() == {(0, 0): F(1, 2), (1, 0): F(1, 8), (1, 1): F(3, 8)}
([True, False], True)
>>> j.marginal(b)
(Fraction(5, 8), Fraction(3, 8))
>>> j.decide({w: w[1] == 0 for w in j.table}), rng.weight      # b == 0: one fork, two ways, a unread
(True, Fraction(5, 8))
>>> b.values(), a.drawn, a.law, a.joint is None           # a left alone: its law given the answer
([0], False, (Fraction(4, 5), Fraction(1, 5)), True)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

from ...fields import FractionField

__all__ = ["Joint", "LIMIT", "join", "conditional"]

#: the most assignments one joint holds; a join that would make more returns None (the caller reads as before)
LIMIT = 1024

#: the exact numbers a joint's weights are kept in: gmpy2's ``mpq`` where installed (several times faster)
_FIELD = FractionField()
_Q = _FIELD.Q
_ZERO = _Q(0)
_ONE = _Q(1)
_q = _FIELD.convert          # a Fraction (or an int) as a weight
_out = _FIELD.export         # a weight as a Fraction


class Joint:
    """Undrawn draws (``members``, in the order of ``table``'s keys) and, per assignment of values still possible, an
    exact weight proportional to its probability (``table``; :meth:`law` normalises); each member's ``joint`` is this
    one."""

    __slots__ = ("rng", "members", "sizes", "table", "_supports")

    def __init__(self, rng: Any, members: list, sizes: list, table: dict) -> None:
        self.rng, self.members, self.sizes, self.table = rng, members, sizes, table
        self._supports: dict = {}
        for m in members:
            m.joint = self
            m.domain = None

    def column(self, d: Any) -> int:
        """The position of member ``d`` in the assignments."""
        for i, m in enumerate(self.members):
            if m is d:
                return i
        raise ValueError("not a member of this joint")

    def law(self) -> dict:
        """The probability of each assignment (Fractions summing to 1)."""
        total = sum(self.table.values(), _ZERO)
        return {a: _out(w / total) for a, w in self.table.items()}

    def marginal(self, d: Any) -> tuple:
        """Member ``d``'s law given everything the branch did: its assignments' probabilities summed by its value."""
        i = self.column(d)
        return _summed(self.table, i, self.sizes[i])

    def support(self, d: Any) -> list:
        """The values member ``d`` can still take, ascending."""
        hit = self._supports.get(id(d))
        if hit is None:
            i = self.column(d)
            hit = self._supports[id(d)] = sorted({a[i] for a in self.table})
        return hit

    def read(self, d: Any) -> int:
        """Draw member ``d`` from its marginal (forking where it has several values) and keep the assignments with the
        value drawn; returns it."""
        i = self.column(d)
        law = self.marginal(d)
        rng = self.rng
        v = rng.draw_now(law) if rng.defer else rng.categorical(law)
        self._keep({a: w for a, w in self.table.items() if a[i] == v})
        return v

    def decide(self, chance: dict) -> bool:
        """Fork on an event whose probability given an assignment ``a`` is ``chance[a]`` (``True``/``False``, or an
        exact number): True with probability ``sum table[a] chance[a]``; the assignments kept weighted by the answer's
        probability given them. Nothing forks where one answer is certain.

        >>> from exactspec.samplers.torch_draws.lazy_draws import PendingDraw
        >>> j = Joint(None, [PendingDraw.of_law(None, (_ONE,))], [1], {(0,): _ONE})
        >>> j.decide({(0,): True})
        True
        """
        yes = no = _ZERO
        weights: dict = {}          # per chance strictly between 0 and 1 (by identity), as a weight
        for a, w in self.table.items():
            c = chance[a]
            if c is True or c is False or c == 1 or c == 0:
                if c:
                    yes += w
                else:
                    no += w
                continue
            q = weights.get(id(c))
            if q is None:
                q = weights[id(c)] = _q(c)
            yes += w * q
            no += w * (1 - q)
        if no == 0 or yes == 0:
            return no == 0
        total = yes + no
        answer = self.rng.draw_now((_out(yes / total), _out(no / total))) == 0
        kept = {}
        for a, w in self.table.items():
            c = chance[a]
            if c is True or c is False or c == 1 or c == 0:
                if bool(c) == answer:
                    kept[a] = w
                continue
            q = weights[id(c)]
            kept[a] = w * q if answer else w * (1 - q)
        self._keep(kept)
        return answer

    def _keep(self, table: dict) -> None:
        """Take ``table`` as the assignments left; draw the members left with one value, and hand a lone member its
        marginal (it is independent of every other pending draw from now on)."""
        self.table = table
        self._supports = {}
        for i in range(len(self.members) - 1, -1, -1):
            values = {a[i] for a in table}
            if len(values) == 1 or len(self.members) == 1:
                m = self.members.pop(i)
                size = self.sizes.pop(i)
                m.joint = None
                if len(values) == 1:
                    m._values = [next(iter(values))]
                else:
                    m.law, m._ready, m.given = _summed(table, i, size), True, None
                    m.domain = sorted(values)
                table = {a[:i] + a[i + 1:]: w for a, w in table.items()}
        if len(self.members) == 1:       # one left after drawing the certain ones: independent now
            self._keep(table)
            return
        self.table = table


def _summed(table: dict, i: int, size: int) -> tuple:
    """The law of column ``i`` (``size`` values) of a table of weights: their sums by its value, normalised, as
    Fractions."""
    law = [_ZERO] * size
    for a, w in table.items():
        law[a[i]] += w
    total = sum(law, _ZERO)
    return tuple(_out(x / total) for x in law)


def conditional(d: Any) -> bool:
    """Whether ``d``'s law is a row indexed by pending draws still undrawn (``given``), not computed yet.

    >>> from exactspec.samplers.torch_draws.lazy_draws import PendingDraw
    >>> conditional(PendingDraw.of_law(None, 1))
    False
    """
    return d.given is not None and d._ready and callable(d.law) and d.joint is None and \
        any(not c[0].drawn for c in d.given[0])


def _exact(rng: Any) -> bool:
    return getattr(getattr(rng, "_field", None), "Q", None) is Fraction


def _own_law(d: Any) -> tuple | None:
    """``("row", law)`` for a draw of one token whose law is an exact row, ``("given", deps, fn)`` for one whose law
    is a row indexed by other draws' values; None otherwise."""
    if d.count != 1:
        return None
    if d._ready:
        if callable(d.law):
            return ("given",) + tuple(d.given) if d.given is not None else None
        return ("row", d.law) if type(d.law) is tuple else None
    law = d.law_of_one()
    return ("row", law) if type(law) is tuple else None


def join(cells: list, limit: int | None = None) -> Joint | None:
    """One joint holding the undrawn draws of ``cells`` (``(draw, sample)`` pairs) and every undrawn draw their laws
    depend on, with their exact joint law; None where that does not apply (see the module docstring). Nothing is
    drawn; the members of the joints met are moved to the one returned.

    >>> join([]) is None
    True
    """
    limit = LIMIT if limit is None else limit
    rng: Any = None
    joints: list = []
    order: list = []
    seen: set = set()

    def visit(d: Any) -> bool:
        nonlocal rng
        if id(d) in seen or d.drawn:
            return True
        if rng is None:
            rng = d.rng
            if not _exact(rng):
                return False
        elif d.rng is not rng:
            return False
        if d.joint is not None:
            joints.append(d.joint)
            seen.update(id(m) for m in d.joint.members)
            return True
        law = _own_law(d)
        if law is None:
            return False
        if law[0] == "given":
            for c in law[1]:
                if c[0].drawn:
                    continue
                if c[1] != 0 or not visit(c[0]):
                    return False
        seen.add(id(d))
        order.append((d, law))
        return True

    for c in cells:
        if c[0].drawn:
            continue
        if c[1] != 0 or not visit(c[0]):
            return None
    if not joints and not order:
        return None
    if len(joints) == 1 and not order:
        return joints[0]
    members: list = []
    sizes: list = []
    table: dict = {(): _ONE}
    for j in joints:
        table = {a + b: w * v for a, w in table.items() for b, v in j.table.items()}
        members += j.members
        sizes += j.sizes
        if len(table) > limit:
            return None
    for d, law in order:
        if law[0] == "row":
            row = law[1]
            support = [(v, _q(p)) for v, p in enumerate(row) if p]
            table = {a + (v,): w * p for a, w in table.items() for v, p in support}
            size = len(row)
        else:
            made = _extend(table, members, law[1], law[2])
            if made is None:
                return None
            table, size = made
        if len(table) > limit:
            return None
        members.append(d)
        sizes.append(size)
    return Joint(rng, members, sizes, table)


def _extend(table: dict, members: list, deps: tuple, fn: Callable) -> tuple | None:
    """``table`` extended by a draw whose law given its ``deps``' values is ``fn(values)``, and the law's length; None
    where a row is missing (a value outside the table the row was indexed by)."""
    where: list[tuple[int | None, Any]] = []     # per dependency: its member's index, or its value once drawn
    for c in deps:
        if c[0].drawn:
            where.append((None, c[0].values()[c[1]]))
            continue
        for i, m in enumerate(members):
            if m is c[0]:
                where.append((i, None))
                break
        else:
            return None
    rows: dict = {}
    out: dict = {}
    size = 0
    for a, w in table.items():
        key = tuple(a[i] if i is not None else v for i, v in where)
        row = rows.get(key)
        if row is None:
            try:
                made = fn(key)
            except (KeyError, IndexError):
                return None
            if type(made) is not tuple:
                return None
            size = max(size, len(made))
            row = rows[key] = [(v, _q(p)) for v, p in enumerate(made) if p]
        for v, p in row:
            out[a + (v,)] = w * p
    return out, size


def spread(draws: list, limit: int) -> list | None:
    """The joint law of the undrawn ``draws`` (their joint's other members summed out) as ``(values, p)`` pairs, at
    most ``limit`` of them, the earliest draws read (each a fork) until the rest have that few; None where no joint
    applies (the caller spreads them one by one).

    >>> spread([], 4)
    [((), None)]
    """
    while True:
        pending = [d for d in draws if not d.drawn]
        if not pending:
            return [(tuple(d.values()[0] for d in draws), None)]
        j = join([(d, 0) for d in pending])
        if j is None:
            return None
        cols = [j.column(d) if not d.drawn else None for d in draws]
        law: dict = {}
        for a, w in j.table.items():
            key = tuple(a[i] if i is not None else d.values()[0] for i, d in zip(cols, draws))
            law[key] = law.get(key, _ZERO) + w
        if len(law) <= limit:
            total = sum(law.values(), _ZERO)
            return [(key, _out(w / total)) for key, w in law.items()]
        pending[0].values()          # too many combinations: the earliest is drawn for real, forking
