"""The symbolic field: probabilities as rational functions of the target's and draft's entries.

A :class:`SymNum` wraps a sympy rational function (``sympy.polys.fields.FracElement``) in the
free variables of a symbolic target and draft. Arithmetic stays symbolic; every comparison,
truth test or equality asks the active :class:`Decider`, which answers from the current cell's
constraints, or forks the cell (the other answer is pushed as a pending cell, exactly as
``PathRng`` pushes the other branches of a draw) when both answers are feasible (z3 decides).

A comparison ``a < b`` is decided on the sign of ``num(a - b) * den(a - b)``: every denominator
is a product of divisors that were decided non-zero on the cell, so that polynomial has the
sign of ``a - b`` everywhere on it.
"""

from __future__ import annotations

import os
import sys
import weakref
from contextvars import ContextVar
from fractions import Fraction
from math import gcd, lcm
from typing import Any

from ..errors import (ExactSpecError, InexactArithmetic, SolverUnknown, UnhashableSymbolic, UnsupportedRandomness,
                      UnsupportedSymbolic)
from ..fields import Field
from ..models import Model

__all__ = ["SymNum", "SymField", "SymbolicModel", "Decider", "UnsupportedSymbolic", "SolverUnknown"]

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIP = (_PKG, os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "enumerate") + os.sep,
         os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "fields.py"))

NEG, ZERO, POS = -1, 0, 1


class _Memo:
    """One symbolic field's memos: operations, gcds, atoms' signs and factors, reductions, constants.

    Each :class:`Space` starts its own (:func:`_set_qq`) in a context variable: a proof never reads another
    proof's memos, another thread sees its own, and ``es.prove`` runs in a copy of its caller's context, so
    they end with the proof. Each is bounded (cleared past ``_OPS_LIMIT`` entries).
    """

    __slots__ = ("K", "ops", "atoms", "gcds", "small_rings", "reduced", "substitutions", "reduced_polys", "factors",
                 "interned", "powers", "constants", "linear", "raw")

    def __init__(self, K: Any = None) -> None:
        self.K = K
        self.ops: dict = {}
        self.atoms: dict = {}       # a rational function -> (its sign polynomial made monic, or None; the factor's sign)
        self.gcds: dict = {}        # ``_cofactors`` results by the pair of polynomials (cleared with ``ops``)
        self.small_rings: dict = {}   # (ring, the generators kept) -> the ring of the variables that occur
        self.reduced: dict = {}     # ``Decider.reduce`` results by (rational function, the cell's equalities)
        self.substitutions: dict = {}   # the composed substitution of each set of equalities
        self.reduced_polys: dict = {}   # ``Decider.reduce_poly`` results
        self.factors: dict = {}
        self.interned: dict = {}
        self.powers: dict = {}
        self.constants: dict = {}   # rational constants as constant rational functions
        self.linear: dict = {}      # a polynomial -> whether its degree is at most 1
        self.raw: dict = {}         # ``a.numer * b.denom - b.numer * a.denom`` by (output, expected) probability


_MEMO: ContextVar[_Memo] = ContextVar("exactspec_symbolic_memo")


def _memo() -> _Memo:
    """The memos of the symbolic field in use in this context (an empty set where none was started)."""
    memo = _MEMO.get(None)
    if memo is None:
        memo = _Memo()
        _MEMO.set(memo)
    return memo
ALL = frozenset((NEG, ZERO, POS))
OPS = {"<": frozenset((NEG,)), "<=": frozenset((NEG, ZERO)), "==": frozenset((ZERO,)),
       "!=": frozenset((NEG, POS)), ">": frozenset((POS,)), ">=": frozenset((ZERO, POS))}
_FLIP = {NEG: POS, POS: NEG, ZERO: ZERO}


def where() -> str:
    """``file:line in function`` of the first frame outside the prover and the engine."""
    frame = sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        lib = os.sep + "mpmath" + os.sep in name or os.sep + "sympy" + os.sep in name
        if not lib and not name.startswith(_SKIP[0]) and not name.startswith(_SKIP[1]) and name != _SKIP[2]:
            break
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    text = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    helpers = os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "laws.py")
    if os.path.abspath(frame.f_code.co_filename) == helpers:   # a helper of es.laws: name its caller too
        outer = frame.f_back
        while outer is not None and os.path.abspath(outer.f_code.co_filename) == helpers:
            frame, outer = outer, outer.f_back
        text += f" (es.laws.{frame.f_code.co_name})"
        if outer is not None:
            text += f", called from {outer.f_code.co_filename}:{outer.f_lineno} in {outer.f_code.co_name}"
    return text


# -- the decider ----------------------------------------------------------------------------------
_ACTIVE: list = []


def active() -> "Decider":
    if not _ACTIVE:
        raise ExactSpecError("a symbolic probability was compared outside es.prove (no cell is active)")
    return _ACTIVE[-1]


#: cells one shared solver serves before a new one is made (its literals pile up: a long-lived solver slows down)
SHARED_CELLS = 16
#: a shared solver's time per check (ms); past it the check is asked again on a new solver with ``check_ms``
SHARED_CHECK_MS = 500


def _is_linear(poly: Any) -> bool:
    """Whether ``poly`` has degree at most 1 (memoised)."""
    linear = _memo().linear
    hit = linear.get(poly)
    if hit is None:
        hit = True
        for m in poly.itermonoms():
            if sum(m) > 1:
                hit = False
                break
        if len(linear) >= _OPS_LIMIT:
            linear.clear()
        linear[poly] = hit
    return hit


class SharedSolver:
    """The z3 solver of one proof: the simplex asserted, each constraint behind a literal, unsat cores kept.

    One z3 solver per proof in each process: every constraint met is asserted once, behind a literal, and a
    cell is checked under the literals of its constraints (no solver per cell, no push/pop); an infeasible
    check leaves its unsat core, which answers the same question on any later cell whose constraints imply
    the core's, without z3. A question whose constraints are all linear (the cell's and its own) goes to
    z3's linear-arithmetic solver (simplex: the same answer, found faster than nlsat finds it).
    """

    #: questions whose constraints are all linear go to a linear-arithmetic solver first (a subclass with a
    #: linear solver of its own says False)
    linear_first = True

    def __init__(self, space: "Space") -> None:
        import z3
        # the space by a weak proxy: no space <-> solver cycle, so the z3 objects die by reference counting in the
        # proof's own thread (a cycle collected by another thread's garbage collection would free z3 objects while
        # this thread is inside z3 with the GIL released: z3 contexts are not thread-safe)
        self.z3, self.space = z3, weakref.proxy(space)
        self.base = {poly: signs for poly, signs in space.base}
        self.cores: dict = {}     # a question -> the cores (constraint tuples) that made it infeasible
        self._answered: Any = None   # the solver of the last answer
        self._linear: Any = None      # (solver, literals, keys) of linear arithmetic, made at first use, kept
        self.fresh()

    def fresh(self, full: bool = False) -> None:
        """A new solver (the cores stay). ``full``: with the whole ``check_ms`` per check (else a shorter one)."""
        z3, space = self.z3, self.space
        self.solver = z3.SolverFor(space.logic, ctx=space.ctx) if space.logic else z3.Solver(ctx=space.ctx)
        self.full = full or space.check_ms <= SHARED_CHECK_MS
        self.solver.set("timeout", space.check_ms if self.full else SHARED_CHECK_MS)
        self.cells = 0
        for poly, signs in space.base:
            self.solver.add(space.z3_sign(poly, signs))
        self._lits: dict = {}
        self._keys: dict = {}     # a literal's z3 id -> its constraint

    def lit(self, key: Any, linear: Any = None) -> Any:
        """The literal of a constraint ``(poly, signs)`` (or ``("!=0", polys)``: all of them non-zero)."""
        solver, lits, keys = linear if linear is not None else (self.solver, self._lits, self._keys)
        b = lits.get(key)
        if b is None:
            z3 = self.z3
            b = z3.Bool(f"{'l' if linear is not None else 'c'}{len(lits)}", self.space.ctx)
            if key[0] == "!=0":
                body = z3.And([self.space.z3_sign(m, _NONZERO) for m in key[1]])
            else:
                body = self.space.z3_sign(*key)
            solver.add(z3.Implies(b, body))
            lits[key] = b
            keys[b.get_id()] = key
        return b

    def _linear_solver(self) -> tuple:
        """``(solver, literals, keys)`` of linear arithmetic (QF_LRA) with the simplex asserted, made once."""
        if self._linear is None:
            s = self.z3.SolverFor("QF_LRA", ctx=self.space.ctx)
            s.set("timeout", self.space.check_ms)
            for poly, signs in self.space.base:
                s.add(self.space.z3_sign(poly, signs))
            self._linear = (s, {}, {})
        return self._linear

    def _all_linear(self, known: dict, question: Any) -> bool:
        """Whether the question and every constraint of the cell are linear (and this solver asks simplex first)."""
        if not self.linear_first:
            return False
        if not all(_is_linear(p) for p in (question[1] if question[0] == "!=0" else (question[0],))):
            return False
        return all(_is_linear(p) for p in known)

    def model(self) -> Any:
        """The z3 model of the last check that answered sat."""
        return (self._answered or self.solver).model()

    def check(self, known: dict, question: Any, stats: dict) -> Any:
        """z3's answer for ``question`` under the constraints ``known`` (a core already known to imply it: unsat)."""
        z3 = self.z3
        for core in self.cores.get(question, ()):
            if all(known.get(p, ALL) <= signs for p, signs in core):
                stats["unsat cores reused"] = stats.get("unsat cores reused", 0) + 1
                return z3.unsat
        base = self.base
        if self._all_linear(known, question):
            linear = self._linear_solver()
            assume = [self.lit((p, signs), linear) for p, signs in known.items() if base.get(p) != signs]
            q = self.lit(question, linear)
            r = linear[0].check(*assume, q)
            if r != z3.unknown:
                stats["z3 checks"] = stats.get("z3 checks", 0) + 1
                self._answered = linear[0]
                if r == z3.unsat:
                    keys = linear[2]
                    core = tuple(keys[c.get_id()] for c in linear[0].unsat_core() if not c.eq(q))
                    self.cores.setdefault(question, []).append(core)
                return r
        self._answered = None
        assume = [self.lit((p, signs)) for p, signs in known.items() if base.get(p) != signs]
        q = self.lit(question)
        stats["z3 checks"] = stats.get("z3 checks", 0) + 1
        r = self.solver.check(*assume, q)
        if r == z3.unknown and not self.full:
            # a check the long-lived solver could not settle quickly: again on a new solver, with the full time
            self.fresh(full=True)
            stats["z3 checks"] -= 1
            stats["z3 checks asked again"] = stats.get("z3 checks asked again", 0) + 1
            return self.check(known, question, stats)
        if r == z3.unsat:
            keys = self._keys
            core = tuple(keys[c.get_id()] for c in self.solver.unsat_core() if not c.eq(q))
            self.cores.setdefault(question, []).append(core)
        return r


class _AsFrac:
    """A polynomial seen as a rational function with denominator 1, for :meth:`Decider._reduce`."""

    __slots__ = ("numer", "denom")

    def __init__(self, poly: Any) -> None:
        self.numer, self.denom = poly, None


class Decider:
    """One cell being refined: known sign sets of atoms, a z3 solver holding them, and the pending cells.

    ``start`` is a list of ``(poly, signs)`` constraints (the cell as pushed); every new atom
    is decided from the known signs, or by z3 (one feasibility check per side), or forks: the
    cell goes on with one side and ``pending`` receives the constraints of the other.
    """

    def __init__(self, space: "Space", start: list, pending: list, stats: dict, point: dict | None = None) -> None:
        self.space, self.pending, self.stats = space, pending, stats
        #: a rational point known to lie in the cell (or None): the side of an atom it lies on needs no z3 check
        self.point = point
        self.known: dict = {}
        self.order: list = []          # the constraints of this cell in the order they were decided
        import z3
        self.z3 = z3
        self._shared = space.shared_solver()
        self._shared.cells += 1
        if self._shared.cells > SHARED_CELLS:
            self._shared.fresh()
        self.solver = self._shared.solver
        for poly, signs in space.base:
            self.known[poly] = self.known.get(poly, ALL) & signs
        for poly, signs in start:
            self._add(poly, signs)

    def __enter__(self) -> "Decider":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.pop()

    def _add(self, poly: Any, signs: frozenset) -> None:
        old = self.known.get(poly, ALL)
        new = old & signs
        if new == old:
            return
        self.known[poly] = new
        self.order.append((poly, new))

    def feasible(self, poly: Any, signs: frozenset, model: bool = False) -> Any:
        """Whether the cell meets ``sign(poly) in signs``; with ``model``, (that, a rational point there or None)."""
        pt = None
        r = self._shared.check(self.known, (poly, signs), self.stats)
        self.solver = s = self._shared.solver   # a new one when the check was asked again
        if model and r == self.z3.sat:
            pt = self.space.rational_model(self._shared.model())
        if r == self.z3.sat:
            return (True, pt) if model else True
        if r == self.z3.unsat:
            return (False, None) if model else False
        raise SolverUnknown(f"z3 could not decide {self.space.show(poly, signs)} on a cell within "
                      f"{self.space.check_ms} ms ({s.reason_unknown()})")

    def may_be_nonzero(self, num: Any) -> bool:
        """Whether the polynomial ``num`` can be non-zero somewhere on the cell (z3, factor by factor).

        ``num != 0`` iff every irreducible factor is non-zero: a factor known to be 0 on the cell settles
        it, otherwise z3 gets the conjunction of the factors' ``!= 0`` (simpler than their product).
        """
        if num.is_zero:
            return False
        if num.is_ground:
            return True
        if not any(s == _ZERO_ONLY and _divides(p, num) for p, s in self.known.items()):
            # no polynomial known to be 0 here divides num, so none of its factors is: z3 gets num != 0 as it
            # is (the same question as its factors' conjunction, without factoring num)
            r = self._shared.check(self.known, ("!=0", (num.monic(),)), self.stats)
            self.solver = self._shared.solver
            if r == self.z3.sat:
                return True
            if r == self.z3.unsat:
                return False
            raise SolverUnknown(f"z3 could not decide whether {num.as_expr()} != 0 somewhere on a cell within "
                                f"{self.space.check_ms} ms ({self.solver.reason_unknown()})")
        _, factors = num.factor_list()
        parts = []
        for f, _e in factors:
            if f.is_ground:
                continue
            m = f.monic()
            if self.known.get(m, ALL) == frozenset((ZERO,)):
                return False
            parts.append(m)
        r = self._shared.check(self.known, ("!=0", tuple(parts)), self.stats)
        self.solver = s = self._shared.solver
        if r == self.z3.sat:
            return True
        if r == self.z3.unsat:
            return False
        raise SolverUnknown(f"z3 could not decide whether {num.as_expr()} != 0 somewhere on a cell within "
                      f"{self.space.check_ms} ms ({s.reason_unknown()})")

    def reduce(self, frac: Any, numer_only: bool = False) -> Any:
        """``frac`` with the cell's linear equalities substituted (equal to ``frac`` everywhere on the cell).

        An equality ``c*x + g = 0`` (``c`` a constant, ``g`` free of ``x``) replaces ``x`` by ``-g/c``:
        a polynomial substitution, so no denominator can vanish that did not before. Returns
        ``(numerator, denominator)``; with ``numer_only`` the denominator is left as it was (unsubstituted).
        """
        eqs = [p for p, s in self.known.items() if s == _ZERO_ONLY]
        if not eqs:
            return frac.numer, frac.denom
        key = (frac, tuple(eqs))
        hit = _memo().reduced.get(key)
        if hit is None or (hit[1] is None and not numer_only):
            hit = self._reduce(frac, eqs, numer_only)
            if len(_memo().reduced) >= _OPS_LIMIT:
                _memo().reduced.clear()
            _memo().reduced[key] = hit
        return hit if hit[1] is not None else (hit[0], frac.denom)

    def reduce_poly(self, poly: Any) -> Any:
        """``poly`` with the cell's linear equalities substituted, all at once: equal to ``poly`` on the cell.

        The variables :meth:`reduce` would eliminate, in its order, each replaced by an affine function
        of the variables left (computed once per set of equalities): one simultaneous substitution.
        """
        eqs = tuple(p for p, s in self.known.items() if s == _ZERO_ONLY)
        if not eqs:
            return poly
        key = (poly, eqs)
        hit = _memo().reduced_polys.get(key)
        if hit is not None:
            return hit
        subs = _memo().substitutions.get(eqs)
        if subs is None:
            subs = _memo().substitutions[eqs] = self._substitution(list(eqs))
        hit = _compose(poly, subs) if subs else poly
        # the cells of a proof meet the same differences under the same equalities again
        if len(_memo().reduced_polys) >= _OPS_LIMIT:
            _memo().reduced_polys.clear()
        _memo().reduced_polys[key] = hit
        return hit

    def _substitution(self, eqs: list) -> list:
        """``[(x, affine function of the variables left)]``: the eliminations of :meth:`_reduce`, composed."""
        R = self.space.K.ring
        done: list = []
        while eqs:
            for k, eq in enumerate(eqs):
                pick = None
                for i, x in enumerate(R.gens):
                    if eq.degree(i) == 1:
                        c = eq.diff(x)
                        if c.is_ground:
                            pick = (x, -(eq - c * x) * (1 / c.LC))
                            break
                if pick is not None:
                    break
            else:
                break
            x, g = pick
            del eqs[k]
            done = [(y, _compose(h, [(x, g)])) for y, h in done] + [(x, g)]
            eqs = [_compose(e, [(x, g)]) for e in eqs]
            eqs = [e.monic() for e in eqs if not e.is_zero and not e.is_ground]
        return done

    def _reduce(self, frac: Any, eqs: list, numer_only: bool) -> Any:
        R = self.space.K.ring
        num, den = frac.numer, (None if numer_only else frac.denom)
        while eqs:
            for k, eq in enumerate(eqs):
                pick = None
                for i, x in enumerate(R.gens):
                    if eq.degree(i) == 1:
                        c = eq.diff(x)
                        if c.is_ground:
                            pick = (x, -(eq - c * x) * (1 / c.LC))
                            break
                if pick is not None:
                    break
            else:
                break
            x, g = pick
            del eqs[k]
            num, den = _compose(num, [(x, g)]), (None if den is None else _compose(den, [(x, g)]))
            eqs = [_compose(e, [(x, g)]) for e in eqs]
            eqs = [e.monic() for e in eqs if not e.is_zero and not e.is_ground]
            if num.is_zero:
                break
        return num, den

    def decide(self, frac: Any, op: str) -> bool:
        """The truth of ``frac op 0`` on the current cell (forking the cell when both are possible)."""
        hit = _memo().atoms.get(frac)
        if hit is None:
            num = frac.numer
            if num.is_zero:
                hit = (None, ZERO)
            else:
                poly = num * frac.denom
                if poly.is_ground:
                    hit = (None, POS if poly.LC > 0 else NEG)
                else:
                    hit = (_intern(poly.monic()), POS if poly.LC > 0 else NEG)
            if len(_memo().atoms) >= _OPS_LIMIT:
                _memo().atoms.clear()
            _memo().atoms[frac] = hit
        poly, sign = hit
        if poly is None:
            return sign in OPS[op]
        # drop the factors whose sign the cell already fixes (denominators, mostly)
        csign, facs = _factors(poly)
        sign *= csign
        rest = []
        for f, e in facs:
            k = self.known.get(f, ALL)
            if k == _POS_ONLY or (e % 2 == 0 and ZERO not in k):
                continue
            if k == _NEG_ONLY:
                sign = -sign if e % 2 else sign
                continue
            rest.append((f, e))
        if not rest:
            return sign in OPS[op]
        poly = rest[0][0] if len(rest) == 1 and rest[0][1] == 1 else _product(rest)
        want = OPS[op] if sign == POS else frozenset(_FLIP[s] for s in OPS[op])
        self.stats["atoms seen"] = self.stats.get("atoms seen", 0) + 1
        known = self.known.get(poly, ALL)
        yes, no = known & want, known - want
        if not no:
            return True
        if not yes:
            return False
        self.space.atoms.add(poly)
        point = self.point
        s0 = None if point is None else self.space.sign_at(poly, point)
        if s0 is not None and s0 in yes:      # the known point shows ``yes`` feasible: one z3 check
            yes_ok, yes_pt = True, point
            no_ok, no_pt = self.feasible(poly, no, model=True)
        elif s0 is not None:
            no_ok, no_pt = True, point
            yes_ok, yes_pt = self.feasible(poly, yes, model=True)
        else:
            yes_ok, yes_pt = self.feasible(poly, yes, model=True)
            if not yes_ok:
                self._add(poly, no)
                return False
            no_ok, no_pt = self.feasible(poly, no, model=True)
        if not yes_ok:
            self._add(poly, no)
            if point is None or s0 not in no:
                self.point = no_pt
            return False
        if not no_ok:
            self._add(poly, yes)
            if point is None or s0 not in yes:
                self.point = yes_pt
            return True
        # both sides possible: fork the cell; go on with ``yes``, push ``no`` (with a point inside it)
        self.stats["forks"] = self.stats.get("forks", 0) + 1
        self.pending.append((self.order + [(poly, no)], no_pt))
        self._add(poly, yes)
        if point is None or s0 not in yes:
            self.point = yes_pt
        return True


# -- the numbers ----------------------------------------------------------------------------------
class SymNum:
    """A probability that is a rational function of the symbolic laws' entries."""

    __slots__ = ("f",)

    def __init__(self, f: Any) -> None:
        self.f = f

    # conversion of the other operand
    @staticmethod
    def _other(x: Any, op: str) -> Any:
        t = type(x)
        if t is SymNum:
            return x.f
        if t is int or t is bool or t is Fraction:
            return _constant(x)
        if isinstance(x, float):
            raise InexactArithmetic(f"a float ({x!r}) met a symbolic probability in {op} (at {where()}); "
                                    "es.prove is exact: use Fraction or int constants (step.number)")
        num, den = getattr(x, "numerator", None), getattr(x, "denominator", None)
        if num is not None and den is not None and not isinstance(x, float):
            try:
                return _memo().K(_QQ(int(num), int(den)))
            except Exception:
                pass
        return NotImplemented

    def __add__(self, o: Any) -> Any:
        o = SymNum._other(o, "+")
        return NotImplemented if o is NotImplemented else SymNum(_op("+", self.f, o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        o = SymNum._other(o, "-")
        return NotImplemented if o is NotImplemented else SymNum(_op("-", self.f, o))

    def __rsub__(self, o: Any) -> Any:
        o = SymNum._other(o, "-")
        return NotImplemented if o is NotImplemented else SymNum(_op("-", o, self.f))

    def __mul__(self, o: Any) -> Any:
        o = SymNum._other(o, "*")
        return NotImplemented if o is NotImplemented else SymNum(_op("*", self.f, o))

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        o = SymNum._other(o, "/")
        if o is NotImplemented:
            return NotImplemented
        _nonzero(o)
        return SymNum(_op("/", self.f, o))

    def __rtruediv__(self, o: Any) -> Any:
        o = SymNum._other(o, "/")
        if o is NotImplemented:
            return NotImplemented
        _nonzero(self.f)
        return SymNum(_op("/", o, self.f))

    def __neg__(self) -> "SymNum":
        return SymNum(-self.f)

    def __pos__(self) -> "SymNum":
        return self

    def __abs__(self) -> "SymNum":
        return self if self >= 0 else -self

    def __pow__(self, k: Any) -> "SymNum":
        if type(k) is int:
            if k < 0:
                _nonzero(self.f)
            return SymNum(self.f ** k)
        return _unsupported(f"** {k!r} (a power that is not an integer)")

    # comparisons: each is a decision on the current cell
    def _cmp(self, o: Any, op: str) -> Any:
        o = SymNum._other(o, op)
        if o is NotImplemented:
            return NotImplemented
        return active().decide(_op("-", self.f, o), op)

    def __lt__(self, o: Any) -> Any:
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> Any:
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> Any:
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> Any:
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if not isinstance(o, (SymNum, int, Fraction)):   # a subclass (an all-vocabulary class entry) compares too
            if isinstance(o, float):
                SymNum._other(o, "==")
            return False
        return self._cmp(o, "==")

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __bool__(self) -> bool:
        return active().decide(self.f, "!=")

    def __hash__(self) -> int:
        raise UnhashableSymbolic(f"hash() of a symbolic probability, a set member or a dict key (at {where()}): "
                                 "whether two probabilities are equal depends on the cell; es.prove follows "
                                 "comparisons, not hashes; use es.audit on instances")

    # what the prover cannot follow
    def __float__(self) -> float:
        return _unsupported("float()")

    def __int__(self) -> int:
        return _unsupported("int()")

    def __index__(self) -> int:
        return _unsupported("use as an index")

    def __round__(self, n: Any = None) -> Any:
        return _unsupported("round()")

    def __floor__(self) -> Any:
        return _unsupported("floor()")

    def __ceil__(self) -> Any:
        return _unsupported("ceil()")

    def __complex__(self) -> Any:
        return _unsupported("complex()")

    def exp(self) -> Any:
        return _unsupported("exp (transcendental)")

    def log(self) -> Any:
        return _unsupported("log (transcendental)")

    def sqrt(self) -> Any:
        return _unsupported("sqrt")

    @property
    def _mpf_(self) -> Any:   # mpmath asks for this before converting: refuse, naming the rule's line
        return _unsupported("conversion to an mpmath number (a transcendental or floating-point operation)")

    def __repr__(self) -> str:
        return f"SymNum({self.f.as_expr()})"

    __str__ = __repr__


#: results of arithmetic on rational functions, shared by every cell of one proof (the same computations
#: recur in every cell: only the decisions differ); cleared by each new Space
_OPS_LIMIT = 500_000


def _op(tag: str, a: Any, b: Any) -> Any:
    """``a tag b`` for rational functions (``+ - * /``), memoised for the proof (the atoms' signs and factors
    are kept across new operations; everything is dropped together past ``_OPS_LIMIT`` operations)."""
    key = (tag, a, b)
    memo = _memo()
    hit = memo.ops.get(key)
    if hit is None:
        hit = _FAST[tag](a, b)
        if len(memo.ops) >= _OPS_LIMIT:
            memo.ops.clear()
            memo.gcds.clear()
            memo.atoms.clear()
            memo.factors.clear()
        memo.ops[key] = hit
    return hit


# -- rational-function arithmetic with small gcds ----------------------------------------------------------
# add, subtract, multiply and divide rational functions with gcds of the factors instead of the whole products
# (cross-cancellation; Henrici's sums; known-coprime cases skipped), normalised as sympy normalises: the result
# is sympy's own, equal and printed the same (tests/test_prove_arith.py checks it against sympy's operations)


def _variables_of(poly: Any) -> int:
    """The variables ``poly`` depends on, as a bit mask."""
    mask = 0
    for monom in poly.itermonoms():
        for i, e in enumerate(monom):
            if e:
                mask |= 1 << i
    return mask


def _exact_quotient(f: Any, g: Any) -> Any:
    """``f / g`` when ``g`` divides ``f`` (non-zero polynomials), else None: stops at the first term left over.

    With one divisor, the division algorithm leaves no remainder iff ``g`` divides ``f``; its first term that
    the leading monomial of ``g`` does not divide is a term of the remainder.
    """
    ring = f.ring
    order = ring.order
    lm_g = g.LM
    lc_g = g.LC
    r = dict(f)
    q = {}
    while r:
        m = max(r, key=order)
        if any(a < b for a, b in zip(m, lm_g)):
            return None
        t = tuple(a - b for a, b in zip(m, lm_g))
        c = r[m] / lc_g
        q[t] = c
        for mg, cg in g.items():
            k = tuple(a + b for a, b in zip(mg, t))
            v = r.get(k, 0) - c * cg
            if v:
                r[k] = v
            else:
                r.pop(k, None)
    return ring.from_dict(q)


def _divides(g: Any, f: Any) -> bool:
    """Whether the non-zero polynomial ``g`` divides ``f`` (``f % g`` is 0; :func:`_exact_quotient` stops early)."""
    return not f or _exact_quotient(f, g) is not None


def _cofactors(f: Any, g: Any) -> tuple:
    """``(h, f / h, g / h)``, ``h`` a greatest common divisor (up to a constant) of the non-zero ``f`` and ``g``.

    The cheap cases first: a constant, equal polynomials, no variable in common, a linear (hence irreducible)
    one that divides the other or not; else sympy's gcd (memoised).
    """
    ring = f.ring
    one = ring.one
    if f.is_ground or g.is_ground:
        return one, f, g
    if f == g:
        return f, one, one
    key = (f, g)
    gcds = _memo().gcds
    hit = gcds.get(key)
    if hit is not None:
        return hit
    if not _variables_of(f) & _variables_of(g):
        hit = (one, f, g)
    elif len(f) == 1 or len(g) == 1:
        hit = _compact_cofactors(f, g)
    elif g.is_linear:
        q = _exact_quotient(f, g)
        hit = (one, f, g) if q is None else (g, q, one)
    elif f.is_linear:
        q = _exact_quotient(g, f)
        hit = (one, f, g) if q is None else (f, one, q)
    else:
        hit = _compact_cofactors(f, g)
    if len(gcds) >= _OPS_LIMIT:
        gcds.clear()
    gcds[key] = hit
    return hit


#: the rings of the variables that occur: (ring, the generators kept) -> the smaller ring


def _compact_cofactors(f: Any, g: Any) -> tuple:
    """``f.cofactors(g)`` computed in the ring of the variables that occur in ``f`` or ``g``, mapped back.

    sympy's heuristic gcd recurses once per generator of the ring, used or not; the all-vocabulary abstraction's
    ring has dozens (class totals, one token per class and draw), most absent from any one polynomial. The same
    gcd and cofactors (dropping variables that occur nowhere changes no monomial order), about 3x faster there.
    """
    ring = f.ring
    used = _variables_of(f) | _variables_of(g)
    n = ring.ngens
    keep = tuple(i for i in range(n) if used >> i & 1)
    if len(keep) == n:
        return f.cofactors(g)
    small = _memo().small_rings.get((ring, keep))
    if small is None:
        from sympy.polys.rings import PolyRing
        if len(_memo().small_rings) >= 10_000:
            _memo().small_rings.clear()
        small = _memo().small_rings[(ring, keep)] = PolyRing([ring.symbols[i] for i in keep], ring.domain, ring.order)

    def down(p: Any) -> Any:
        return small.from_dict({tuple(m[i] for i in keep): c for m, c in p.items()})

    def up(p: Any) -> Any:
        out = {}
        for m, c in p.items():
            full = [0] * n
            for i, e in zip(keep, m):
                full[i] = e
            out[tuple(full)] = c
        return ring.from_dict(out)

    h, cff, cfg = down(f).cofactors(down(g))
    return up(h), up(cff), up(cfg)


def _canonical(field: Any, p: Any, q: Any) -> Any:
    """``p / q`` (coprime polynomials, ``q`` non-zero) scaled as sympy's ``cancel`` leaves it.

    That is the one pair with integer coefficients, no common integer factor and a positive leading
    coefficient of ``q``: a rational function has exactly one such numerator and denominator.
    """
    ring = field.ring
    if not p:
        return field.raw_new(p, ring.one)
    den = 1
    for c in p.values():
        den = lcm(den, int(c.denominator))
    for c in q.values():
        den = lcm(den, int(c.denominator))
    num = 0
    for c in p.values():
        num = gcd(num, int(c.numerator) * (den // int(c.denominator)))
    for c in q.values():
        num = gcd(num, int(c.numerator) * (den // int(c.denominator)))
    if q.LC < 0:
        num = -num
    if den == num:
        return field.raw_new(p, q)
    s = ring.domain(den, num)
    return field.raw_new(p.mul_ground(s), q.mul_ground(s))


def _fast_mul(a: Any, b: Any) -> Any:
    """``a * b``: ``(n1 / g1)(n2 / g2) / ((d1 / g2)(d2 / g1))`` with ``g1 = gcd(n1, d2)``, ``g2 = gcd(n2, d1)``."""
    if not a or not b:
        return a.field.zero
    _, n1, d2 = _cofactors(a.numer, b.denom)
    _, n2, d1 = _cofactors(b.numer, a.denom)
    return _canonical(a.field, n1 * n2, d1 * d2)


def _fast_div(a: Any, b: Any) -> Any:
    """``a / b``: :func:`_fast_mul` with ``b`` turned over."""
    if not b:
        raise ZeroDivisionError
    if not a:
        return _canonical(a.field, a.numer, b.numer)
    _, n1, d2 = _cofactors(a.numer, b.numer)
    _, n2, d1 = _cofactors(b.denom, a.denom)
    return _canonical(a.field, n1 * n2, d1 * d2)


def _fast_add(a: Any, b: Any, minus: bool = False) -> Any:
    """``a + b`` (``a - b`` with ``minus``), Henrici's way: ``gcd(t, d1 d2 / h) = gcd(t, h)``, ``h = gcd(d1, d2)``."""
    if not b:
        return a
    if not a:
        return -b if minus else b
    n1, d1, n2, d2 = a.numer, a.denom, b.numer, b.denom
    if d1 == d2:
        t = n1 - n2 if minus else n1 + n2
        if not t:
            return a.field.raw_new(t, d1.ring.one)
        _, t, d = _cofactors(t, d1)
        return _canonical(a.field, t, d)
    h, e1, e2 = _cofactors(d1, d2)
    t = n1 * e2 - n2 * e1 if minus else n1 * e2 + n2 * e1
    if not t:
        return a.field.raw_new(t, d1.ring.one)
    if h.is_ground:
        return _canonical(a.field, t, e1 * d2)
    _, t, k = _cofactors(t, h)
    return _canonical(a.field, t, e1 * e2 * k)


_FAST = {"+": _fast_add, "-": lambda a, b: _fast_add(a, b, True), "*": _fast_mul, "/": _fast_div}


_POS_ONLY, _NEG_ONLY, _ZERO_ONLY, _NONZERO = frozenset((POS,)), frozenset((NEG,)), frozenset((ZERO,)), frozenset((NEG, POS))


def _factors(poly: Any) -> tuple:
    """``(sign of the constant, [(monic irreducible factor, exponent)])`` of a polynomial, memoised."""
    hit = _memo().factors.get(poly)
    if hit is None:
        c, facs = poly.factor_list()
        out = []
        for f, e in facs:
            if f.is_ground:
                c *= f.LC ** e
                continue
            c *= f.LC ** e
            out.append((_intern(f.monic()), e))
        hit = _memo().factors[poly] = (POS if c > 0 else NEG, out)
    return hit


def _intern(poly: Any) -> Any:
    """The one object kept for polynomials equal to ``poly``."""
    hit = _memo().interned.get(poly)
    if hit is None:
        if len(_memo().interned) >= _OPS_LIMIT:
            _memo().interned.clear()
        hit = _memo().interned[poly] = poly
    return hit


def _product(rest: list) -> Any:
    key = tuple(rest)
    hit = _memo().factors.get(key)
    if hit is None:
        p = rest[0][0] ** rest[0][1]
        for f, e in rest[1:]:
            p = p * f ** e
        hit = _memo().factors[key] = _intern(p.monic())
    return hit


def _unsupported(op: str) -> Any:
    raise UnsupportedSymbolic(f"{op} on a symbolic probability (at {where()}): es.prove follows only rational "
                              "arithmetic (+ - * /, integer powers) and comparisons; use es.audit on instances")


def _nonzero(f: Any) -> None:
    """Refuse a division by a quantity that is 0 on the cell (forking where it may be)."""
    if isinstance(f, int) or not hasattr(f, "numer"):
        if not f:
            raise ZeroDivisionError("division by zero")
        return
    if not active().decide(f, "!="):
        raise ZeroDivisionError(f"division by a symbolic quantity that is 0 on this cell (at {where()})")


def _power(g: Any, n: int) -> Any:
    """``g ** n`` (``n >= 1``), memoised for the proof."""
    key = (g, n)
    hit = _memo().powers.get(key)
    if hit is None:
        hit = g if n == 1 else _power(g, n - 1) * g
        if len(_memo().powers) >= _OPS_LIMIT:
            _memo().powers.clear()
        _memo().powers[key] = hit
    return hit


def _compose(poly: Any, subs: list) -> Any:
    """``poly`` with each generator ``x`` of ``subs`` (``[(x, g)]``) replaced by ``g``, all at once (sympy's ``compose``).

    The terms are grouped by their exponents of the replaced generators, so each product of powers of the
    ``g`` (kept for the proof) multiplies its group once.
    """
    ring = poly.ring
    index = {x: i for i, x in enumerate(ring.gens)}
    idx = [index[x] for x, _g in subs]
    groups: dict = {}
    for m, c in poly.items():
        e = tuple([m[i] for i in idx])
        if any(e):
            r = list(m)
            for i in idx:
                r[i] = 0
            m = tuple(r)
        grp = groups.get(e)
        if grp is None:
            grp = groups[e] = {}
        grp[m] = c
    out: dict = {}
    zero = ring.domain.zero
    for e, terms in groups.items():
        part = ring.from_dict(terms)
        for (_x, g), n in zip(subs, e):
            if n:
                part = part * _power(g, n)
        for m, c in part.items():
            v = out.get(m, zero) + c
            if v:
                out[m] = v
            else:
                del out[m]
    return ring.from_dict(out)


_QQ: Any = None


def _constant(x: Any) -> Any:
    """An int or Fraction as a constant of the current field, memoised."""
    memo = _memo()
    hit = memo.constants.get(x)
    if hit is None:
        K = memo.K
        hit = K(int(x)) if type(x) is not Fraction else K(_QQ(x.numerator, x.denominator))
        if len(memo.constants) >= _OPS_LIMIT:
            memo.constants.clear()
        memo.constants[x] = hit
    return hit


def _set_qq(qq: Any, K: Any = None) -> None:
    """Start the memos of a new symbolic field ``K`` (``None``: forget them), in this context only."""
    global _QQ
    _QQ = qq   # sympy's QQ, the same object for every proof
    _MEMO.set(_Memo(K))


class SymField(Field):
    """The field of :class:`SymNum`: exact; rational constants become constant rational functions."""

    name = "symbolic"
    exact = True
    native = True   # the symbolic models hand out SymNum tuples already

    def __init__(self, K: Any) -> None:
        self.K = K
        self.zero = SymNum(K(0))
        self.one = SymNum(K(1))

    def convert(self, x: Fraction) -> SymNum:
        return SymNum(self.K(_QQ(x.numerator, x.denominator)))

    def check(self, x: Any, what: str) -> Any:
        t = type(x)
        if t is SymNum:
            return x
        if t is int:
            return SymNum(self.K(x))
        if t is Fraction:
            return self.convert(x)
        if isinstance(x, float):
            raise InexactArithmetic(f"{what} is the float {x!r} (at {where()}); es.prove is exact: use Fraction or int")
        if hasattr(x, "numerator") and hasattr(x, "denominator"):
            return self.convert(Fraction(int(x.numerator), int(x.denominator)))
        raise InexactArithmetic(f"{what} is {x!r} of type {t.__name__} (at {where()}); es.prove takes rationals")

    def describe(self) -> str:
        return "symbolic (rational functions of the laws' entries; sympy + z3)"


class SymbolicModel(Model):
    """A model whose laws are tuples of :class:`SymNum` (one law per position, the last one repeated)."""

    def __init__(self, vocab: int, laws: list, order: int | None, name: str, n0: int = 0) -> None:
        super().__init__(vocab, order, name)
        self._laws, self._n0 = laws, n0

    def __call__(self, context: Any = ()) -> tuple:
        if len(self._laws) == 1:
            return self._laws[0]
        if self.order == 1:   # the order-1 table family: one law per previous token
            return self._laws[context[-1]]
        return self._laws[min(len(context) - self._n0, len(self._laws) - 1)]

    law = __call__


class Space:
    """The free variables, their base constraints (the simplex), z3 translation and readable printing."""

    def __init__(self, vocab: int, positions: int, check_ms: int) -> None:
        from sympy import QQ
        from sympy.polys.fields import field
        import z3
        _set_qq(QQ)
        self.vocab, self.positions, self.check_ms = vocab, positions, check_ms
        self.logic = "QF_NRA"   # polynomial constraints over the reals (z3's nlsat; complete, with a timeout per check)
        names = []
        for who in ("p", "q"):
            for j in range(positions):
                for i in range(vocab - 1):
                    names.append(f"{who}{j}_{i}" if positions > 1 else f"{who}_{i}")
        self.names = names
        self.K, *gens = field(",".join(names), QQ)
        _set_qq(QQ, self.K)   # this space's own memos
        if len(names) == 1:
            gens = [gens[0]] if not isinstance(gens[0], (list, tuple)) else list(gens[0])
        self.gens = gens
        # a z3 context of the space's own: z3 contexts are not thread-safe, and another thread's garbage
        # collection may free z3 objects of an earlier proof at any time; in their own context that is harmless
        self.ctx = z3.Context()
        self.z3vars = [z3.Real(n, self.ctx) for n in names]
        self.field = SymField(self.K)
        self.laws: dict = {}
        self.base: list = []
        k = 0
        for who in ("p", "q"):
            laws = []
            for j in range(positions):
                xs = [gens[k + i] for i in range(vocab - 1)]
                k += vocab - 1
                last = self.K(1) - sum(xs[1:], xs[0]) if xs else self.K(1)
                entries = xs + [last]
                laws.append(tuple(SymNum(e) for e in entries))
                for e in entries:
                    poly = e.numer
                    if poly.is_ground:
                        continue
                    lc = poly.LC
                    self.base.append((poly.monic(), OPS[">="] if lc > 0 else OPS["<="]))
            self.laws[who] = laws
        self.atoms: set = set()
        self._stack: Any = None
        self._z3cache: dict = {}
        self._signcache: dict = {}
        self._shown: dict = {}

    def shared_solver(self) -> SharedSolver:
        """The proof's shared solver (made at first use; ``forget_solver`` drops it after an interruption)."""
        if self._stack is None:
            self._stack = SharedSolver(self)
        return self._stack

    def forget_solver(self) -> None:
        self._stack = None

    def z3_poly(self, poly: Any) -> Any:
        hit = self._z3cache.get(poly)
        if hit is None:
            import z3
            terms = []
            for monom, c in poly.terms():
                c = Fraction(int(c.numerator), int(c.denominator))
                t = z3.RealVal(f"{c.numerator}/{c.denominator}", self.ctx)
                factors = [self.z3vars[i] if e == 1 else self.z3vars[i] ** e for i, e in enumerate(monom) if e]
                for f in factors:
                    t = t * f
                terms.append(t)
            hit = self._z3cache[poly] = z3.Sum(terms) if len(terms) > 1 else terms[0]
        return hit

    def z3_sign(self, poly: Any, signs: frozenset) -> Any:
        """The z3 constraint ``sign(poly) in signs`` (built once per proof)."""
        key = (poly, signs)
        hit = self._signcache.get(key)
        if hit is None:
            import z3
            e = self.z3_poly(poly)
            if not signs:   # no sign allowed: false (in this space's context; z3.Or([]) would be the global one's)
                hit = z3.BoolVal(False, self.ctx)
            else:
                hit = z3.Or([e < 0 if s == NEG else e == 0 if s == ZERO else e > 0 for s in sorted(signs)])
            self._signcache[key] = hit
        return hit

    def show(self, poly: Any, signs: frozenset) -> str:
        """``p_0 - q_0 > 0`` style text (each polynomial printed once per proof)."""
        expr = self._shown.get(poly)
        if expr is None:
            expr = self._shown[poly] = str(poly.as_expr())
        s = tuple(sorted(signs))
        op = {(-1,): "<", (-1, 0): "<=", (0,): "==", (-1, 1): "!=", (1,): ">", (0, 1): ">="}.get(s, "?")
        return f"{expr} {op} 0"

    def rational_model(self, m: Any) -> dict | None:
        """A z3 model as a point (name -> Fraction), or None when a value is not rational (algebraic)."""
        import z3
        pt = {}
        for name, var in zip(self.names, self.z3vars):
            v = m.eval(var, model_completion=True)
            if not z3.is_rational_value(v):
                return None
            try:
                pt[name] = Fraction(v.as_string())   # "a/b" or "a": one call into z3 (the same Fraction)
            except ValueError:   # a rational of thousands of digits (Python's int/str limit): no point
                return None
        return pt

    def sign_at(self, poly: Any, point: dict) -> int:
        v = _eval(poly, [point[n] for n in self.names])
        return POS if v > 0 else NEG if v < 0 else ZERO

    def value(self, f: Any, point: dict) -> Fraction:
        """The exact value of a rational function at a rational point (a dict name -> Fraction)."""
        args = [point[n] for n in self.names]
        num = _eval(f.numer, args)
        den = _eval(f.denom, args)
        return num / den


def _eval(poly: Any, args: list) -> Fraction:
    total = Fraction(0)
    for monom, c in poly.terms():
        t = Fraction(int(c.numerator), int(c.denominator))
        for a, e in zip(args, monom):
            if e:
                t *= a ** e
        total += t
    return total
