"""The decider: the sign conditions of one cell, z3 behind them, and the cells it forks.

A comparison of symbolic probabilities asks the active :class:`Decider` (the innermost one of the running
proof's session): it answers from the cell's known signs, from a rational point of the cell, or from z3
(one feasibility check per side), and forks the cell where both answers are feasible.
"""

from __future__ import annotations

import weakref
from typing import Any

from ...errors import ExactSpecError, SolverUnknown
from ..session import current
from . import arith
from .arith import OPS_LIMIT, divides, factors, intern, is_linear, product
from .signs import ALL, FLIP, NEG, NEG_ONLY, NONZERO, OPS, POS, POS_ONLY, ZERO, ZERO_ONLY

__all__ = ["Decider", "SharedSolver", "active", "SHARED_CELLS", "SHARED_CHECK_MS"]


def active() -> "Decider":
    """The decider of the cell being run in this context (raises outside ``es.prove``)."""
    deciders = current().deciders
    if not deciders:
        raise ExactSpecError("a symbolic probability was compared outside es.prove (no cell is active)")
    return deciders[-1]


#: cells one shared solver serves before a new one is made (its literals pile up: a long-lived solver slows down)
SHARED_CELLS = 16
#: a shared solver's time per check (ms); past it the check is asked again on a new solver with ``check_ms``
SHARED_CHECK_MS = 500


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

    def __init__(self, space: Any) -> None:   # the proof's field.space.Space (which imports this module)
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
                body = z3.And([self.space.z3_sign(m, NONZERO) for m in key[1]])
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
        if not all(is_linear(p) for p in (question[1] if question[0] == "!=0" else (question[0],))):
            return False
        return all(is_linear(p) for p in known)

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

    def __init__(self, space: Any, start: list, pending: list, stats: dict, point: dict | None = None) -> None:
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
        current().deciders.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        current().deciders.pop()

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
        if not any(s == ZERO_ONLY and divides(p, num) for p, s in self.known.items()):
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
        eqs = [p for p, s in self.known.items() if s == ZERO_ONLY]
        if not eqs:
            return frac.numer, frac.denom
        key = (frac, tuple(eqs))
        hit = current().reduced.get(key)
        if hit is None or (hit[1] is None and not numer_only):
            hit = self._reduce(frac, eqs, numer_only)
            if len(current().reduced) >= OPS_LIMIT:
                current().reduced.clear()
            current().reduced[key] = hit
        return hit if hit[1] is not None else (hit[0], frac.denom)

    def reduce_poly(self, poly: Any) -> Any:
        """``poly`` with the cell's linear equalities substituted, all at once: equal to ``poly`` on the cell.

        The variables :meth:`reduce` would eliminate, in its order, each replaced by an affine function
        of the variables left (computed once per set of equalities): one simultaneous substitution.
        """
        eqs = tuple(p for p, s in self.known.items() if s == ZERO_ONLY)
        if not eqs:
            return poly
        key = (poly, eqs)
        hit = current().reduced_polys.get(key)
        if hit is not None:
            return hit
        subs = current().substitutions.get(eqs)
        if subs is None:
            subs = current().substitutions[eqs] = self._substitution(list(eqs))
        hit = arith.compose(poly, subs) if subs else poly
        # the cells of a proof meet the same differences under the same equalities again
        if len(current().reduced_polys) >= OPS_LIMIT:
            current().reduced_polys.clear()
        current().reduced_polys[key] = hit
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
            done = [(y, arith.compose(h, [(x, g)])) for y, h in done] + [(x, g)]
            eqs = [arith.compose(e, [(x, g)]) for e in eqs]
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
            num, den = arith.compose(num, [(x, g)]), (None if den is None else arith.compose(den, [(x, g)]))
            eqs = [arith.compose(e, [(x, g)]) for e in eqs]
            eqs = [e.monic() for e in eqs if not e.is_zero and not e.is_ground]
            if num.is_zero:
                break
        return num, den

    def decide(self, frac: Any, op: str) -> bool:
        """The truth of ``frac op 0`` on the current cell (forking the cell when both are possible)."""
        hit = current().atoms.get(frac)
        if hit is None:
            num = frac.numer
            if num.is_zero:
                hit = (None, ZERO)
            else:
                poly = num * frac.denom
                if poly.is_ground:
                    hit = (None, POS if poly.LC > 0 else NEG)
                else:
                    hit = (intern(poly.monic()), POS if poly.LC > 0 else NEG)
            if len(current().atoms) >= OPS_LIMIT:
                current().atoms.clear()
            current().atoms[frac] = hit
        poly, sign = hit
        if poly is None:
            return sign in OPS[op]
        # drop the factors whose sign the cell already fixes (denominators, mostly)
        csign, facs = factors(poly)
        sign *= csign
        rest = []
        for f, e in facs:
            k = self.known.get(f, ALL)
            if k == POS_ONLY or (e % 2 == 0 and ZERO not in k):
                continue
            if k == NEG_ONLY:
                sign = -sign if e % 2 else sign
                continue
            rest.append((f, e))
        if not rest:
            return sign in OPS[op]
        poly = rest[0][0] if len(rest) == 1 and rest[0][1] == 1 else product(rest)
        want = OPS[op] if sign == POS else frozenset(FLIP[s] for s in OPS[op])
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

