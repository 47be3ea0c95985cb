"""``es.prove(..., vocab="all")``: one proof for every vocabulary size, by exchangeable unnamed tokens.

The abstraction (the soundness argument is in ``docs/proofs-scale-out.md``, "Every vocabulary size"):

- ``tokens`` *named* tokens ``0 .. tokens - 1``, each with its own target and draft probability
  (``p_a``, ``q_a``): every outcome of the horizon is, up to renaming, a sequence over them (which
  of its tokens coincide is part of the outcome).
- every other token of the vocabulary is *unnamed*. The unnamed tokens are split into *classes*
  by the signs of a few predicates on a token's own probabilities (``p - q``, ``q``, ...). A class
  ``C`` carries its total masses ``P_C``, ``Q_C`` (any number of tokens, possibly none) and, for each
  token the rule draws from it, that token's probabilities ``p_C^k``, ``q_C^k``, constrained by the
  class's signs and by ``0 <= p_C^k <= P_C``, ``0 <= q_C^k <= Q_C``.
- the rule runs (its rng form, on an exact enumeration of its draws written for this abstraction) on
  laws whose class entries stand for *every* token of the class: arithmetic on them is per token
  (entry with entry of the same class, or with a number that is the same for every token: ``*``, ``/``;
  ``+``/``-`` with 0 only), a comparison on them must have the same answer for every token of the
  class (else the class is split by that predicate and the proof starts again), and vocabulary-wide
  sums go through ``es.laws`` (``normalize``, ``residual``), which add each class's total. A draw that
  lands in a class gives a token ``k`` of it, with weight its own entry; a branch's weight must then
  be linear and homogeneous in each drawn token's ``(p, q)``, so that its sum over the tokens of the
  class is the same expression in the totals.
- anything else (``len`` of a law, ``step.vocab``, indexing a law by a position of the unnamed part,
  argmax or max over the vocabulary, comparisons mixing an unnamed token's probability with another
  quantity, two drawn unnamed tokens whose equality matters to a named outcome, ``rng.uniform``) is
  refused with :class:`AbstractionRefused` (exit 2), never proven.

A cell where an output probability may differ from the target's is replayed exactly (``es.audit``)
at a concrete vocabulary: each class becomes one token with its totals. Only that replay refutes.
"""

from __future__ import annotations

import itertools
import time
from fractions import Fraction
from typing import Any, Callable

from ..errors import ExactSpecError, InvalidDistribution
from ._field import (ALL, NEG, OPS, POS, ZERO, Decider, SharedSolver, SolverUnknown, Space, SymField, SymNum,
                     UnsupportedSymbolic, _NONZERO, _op, _set_qq, where)
from . import _field

__all__ = ["AbstractionRefused", "prove_all_vocab"]

#: the most predicates the classes of unnamed tokens may be split by (each split restarts the proof)
MAX_PREDICATES = 6
#: ask linear arithmetic (a relaxation when some constraint is nonlinear) before z3's nonlinear procedure
LINEAR_FIRST = True
#: the most tokens one branch may draw from one class (the symbols are made up front; more restarts with more)
MAX_DRAWS = 8


class AbstractionRefused(UnsupportedSymbolic):
    """The rule did something the vocabulary abstraction of ``vocab="all"`` cannot follow soundly (exit 2).

    The message names the operation and the rule's line; prove the rule at a given vocabulary instead.
    """


def _refuse(what: str) -> Any:
    raise AbstractionRefused(f"vocab='all': {what} (at {where()}); the all-vocabulary abstraction follows "
                             "per-token arithmetic, comparisons whose answer is the same for every token of a "
                             "class, and vocabulary-wide sums through es.laws; prove at a given vocab instead")


class _Refine(Exception):
    """A comparison on an unnamed token's probabilities has different answers across a class: split by it."""

    def __init__(self, pred: Any) -> None:
        super().__init__(str(pred))
        self.pred = pred


class _MoreDraws(Exception):
    pass


class _EmptyCell(Exception):
    """The cell holds no instance once a class's signs are taken into account: nothing to prove there."""


class _DeadBranch(Exception):
    """The classes this branch drew from cannot all have mass on the cell: the branch weighs 0 there."""


#: decide a branch's comparisons assuming the classes it drew from have a token, without recording what only that
#: assumption decides (where such a class is empty the branch weighs 0 whatever is decided); False: the cell forks
#: on every class's mass at the first draw that may land in it (many more cells; the path kept for comparison)
PER_BRANCH = True


# -- the layout: named tokens, classes, symbols -------------------------------------------------------------
class _Layout:
    """Named tokens, the predicates, the classes (feasible sign vectors) and draws per class."""

    def __init__(self, named: int, preds: list, draws: int, argmax_q: bool = False) -> None:
        self.named, self.preds, self.draws = named, list(preds), draws
        #: named token 0 is the draft law's argmax (the lowest id among its maximisers): q(t) <= q_0 for every t
        self.argmax_q = argmax_q
        self.classes = _feasible_signs(self.preds)


def _uv() -> tuple:
    import sympy
    return sympy.Symbol("u"), sympy.Symbol("v")


def _total_symbol(who: str, signs: tuple) -> Any:
    """The total ``P`` (``who="p"``) or ``Q`` over the classes whose signs on the first predicates are ``signs``."""
    import sympy
    tag = "".join({NEG: "-", ZERO: "0", POS: "+"}[x] for x in signs)
    return sympy.Symbol(f"{who.upper()}[{tag}]")


def _parse_total(name: str) -> tuple | None:
    if len(name) >= 3 and name[0] in "PQ" and name[1] == "[" and name[-1] == "]":
        return name[0].lower(), tuple({"-": NEG, "0": ZERO, "+": POS}[c] for c in name[2:-1])
    return None


def _feasible_signs(preds: list) -> list:
    """The sign vectors of ``preds`` some token meets for some values of their parameters.

    A predicate is a sympy expression in a token's ``u = p(t)``, ``v = q(t)`` and parameters (named
    tokens' probabilities, totals ``P[...]``/``Q[...]`` over classes); all range over [0, 1]. A sign
    vector feasible only for other parameter values gives a class that may be empty: its totals are
    then unconstrained, a larger abstract space (sound for proofs; a refutation is replayed).
    """
    import z3
    if not preds:
        return [()]
    syms = sorted({x for g in preds for x in g.free_symbols}, key=str)
    zv = {x: z3.Real(str(x)) for x in syms}
    out = []
    for signs in itertools.product((NEG, ZERO, POS), repeat=len(preds)):
        s = z3.Solver()
        s.set("timeout", 10_000)
        for x in syms:
            s.add(zv[x] >= 0, zv[x] <= 1)
        for g, sg in zip(preds, signs):
            e = _z3_expr(g, zv)
            s.add(e < 0 if sg == NEG else e == 0 if sg == ZERO else e > 0)
        r = s.check()
        if r == z3.sat:
            out.append(signs)
        elif r != z3.unsat:
            raise SolverUnknown(f"vocab='all': z3 could not decide which classes of tokens exist for {preds}")
    return out


def _z3_expr(g: Any, zv: dict) -> Any:
    import sympy
    import z3
    terms = []
    for monom, c in sympy.Poly(g, *sorted(zv, key=str)).terms():
        c = sympy.Rational(c)
        t = z3.RealVal(f"{c.p}/{c.q}")
        for x, e in zip(sorted(zv, key=str), monom):
            if e:
                t = t * (zv[x] if e == 1 else zv[x] ** e)
        terms.append(t)
    return z3.Sum(terms) if len(terms) > 1 else terms[0] if terms else z3.RealVal(0)


def _linear_homogeneous(g: Any) -> bool:
    """``g`` is ``a * u + b * v`` with ``a``, ``b`` free of ``u``, ``v`` (so it sums over a class's tokens)."""
    import sympy
    u, v = _uv()
    return all(a + b == 1 for a, b in sympy.Poly(g, u, v).monoms())


def _sign_text(s: int) -> str:
    return {NEG: "< 0", ZERO: "= 0", POS: "> 0"}[s]


class _AbsSpace(Space):
    """The symbols of one layout: named entries, class totals, each class's generic and drawn tokens."""

    def __init__(self, layout: _Layout, check_ms: int) -> None:   # noqa: C901 - one pass over the symbols
        from sympy import QQ
        from sympy.polys.fields import field
        import z3
        _set_qq(QQ)
        self.layout = layout
        c, m, K = layout.named, len(layout.classes), layout.draws
        self.vocab, self.positions, self.check_ms = "all", 1, check_ms
        self.logic = "QF_NRA"
        names = [f"p_{a}" for a in range(c)] + [f"P_C{i}" for i in range(m)] + \
                [f"q_{a}" for a in range(c)] + [f"Q_C{i}" for i in range(m)]
        self.member_names: dict = {}
        for i in range(m):
            for k in range(K + 1):
                tag = f"C{i}" if k == 0 else f"C{i}_{k}"
                self.member_names[(i, k)] = (len(names), len(names) + 1)
                names += [f"p_{tag}", f"q_{tag}"]
        self.names = names
        self.K, *gens = field(",".join(names), QQ)
        _set_qq(QQ, self.K)
        _field._OPS.clear()
        _field._ATOMS.clear()
        _field._FACTORS.clear()
        self.gens = gens
        self.z3vars = [z3.Real(n) for n in names]
        self.field = SymField(self.K)
        one = self.K(1)
        # the totals: the last class's total is 1 minus the rest (one law each for p and q)
        self.named_p = [gens[a] for a in range(c)]
        self.totals_p = [gens[c + i] for i in range(m)]
        self.named_q = [gens[c + m + a] for a in range(c)]
        self.totals_q = [gens[2 * c + m + i] for i in range(m)]
        self.eliminated = (names[c + m - 1], names[2 * c + 2 * m - 1])
        self.totals_p[-1] = one - sum(self.named_p + self.totals_p[:-1], self.K(0))
        self.totals_q[-1] = one - sum(self.named_q + self.totals_q[:-1], self.K(0))
        self.member_index: dict = {}   # generator index -> (class, draw)
        for (i, k), (a, b) in self.member_names.items():
            self.member_index[a] = (i, k)
            self.member_index[b] = (i, k)
        self.base: list = []
        for e in self.named_p + self.named_q + self.totals_p + self.totals_q:
            self._add_base(e, OPS[">="])
        self.sig = [tuple(signs) for signs in layout.classes]
        member_signs: list = []   # (class, predicate at one of its tokens, sign): asserted unless the class is empty
        self.class_signs: dict = {i: [] for i in range(m)}   # class -> [(monic polynomial, signs)] at its tokens
        strict_totals: list = []   # (class, (monic polynomial, strict sign)) of its totals, unless it is empty
        for i, signs in enumerate(layout.classes):
            P, Q = self.totals_p[i], self.totals_q[i]
            for g, sg in zip(layout.preds, signs):
                if _linear_homogeneous(g):   # a sum of tokens with g's sign: the totals have it too (or are 0)
                    e = self._instantiate(g, P, Q)
                    self._add_base(e, frozenset((sg, ZERO)))
                    if sg != ZERO and not e.numer.is_ground:
                        strict_totals.append((i, self._monic(e, frozenset((sg,)))))
            for k in range(K + 1):
                pu, qv = (gens[j] for j in self.member_names[(i, k)])
                self._add_base(pu, OPS[">="])
                self._add_base(qv, OPS[">="])
                self._add_base(P - pu, OPS[">="])
                self._add_base(Q - qv, OPS[">="])
                for g, sg in zip(layout.preds, signs):
                    e = self._instantiate(g, pu, qv)
                    member_signs.append((i, e, sg))
                    if not e.numer.is_ground:
                        self.class_signs[i].append(self._monic(e, frozenset((sg,))))
        if layout.argmax_q:   # named token 0 is q's argmax: no token has a larger draft probability
            for a in range(1, c):
                self._add_base(self.named_q[0] - self.named_q[a], OPS[">="])
            for (i, k), (a, b) in self.member_names.items():
                self._add_base(self.named_q[0] - gens[b], OPS[">="])
        self.laws = {"p": [tuple(SymNum(x) for x in self.named_p)], "q": [tuple(SymNum(x) for x in self.named_q)]}
        self.atoms: set = set()
        self._stack: Any = None
        self._z3cache: dict = {}
        self._signcache: dict = {}
        self._shown: dict = {}
        self._drawn: dict = {}
        self.totals: dict = {}
        # a class's tokens meet its signs, and its totals the strict ones, only where the class has a token: a class
        # with no mass may have none (its token symbols are then only bounded by its totals, 0). So these are not
        # in the base: a cell that draws from the class first decides ``P_C + Q_C > 0`` and then takes them on
        # (:meth:`_AbsDecider.nonempty`); a comparison on the class's tokens assumes them (:meth:`_AbsDecider._sign_of`)
        self.totals_p_num = [SymNum(x) for x in self.totals_p]
        self.totals_q_num = [SymNum(x) for x in self.totals_q]
        self.nonempty_signs = {i: list(self.class_signs[i]) + [c for j, c in strict_totals if j == i]
                               for i in range(m)}

    def _instantiate(self, g: Any, a: Any, b: Any) -> Any:
        """The predicate ``g`` at a token with probabilities ``a``, ``b`` (field elements), in this layout's symbols."""
        import sympy
        u, v = _uv()
        env = {u: a, v: b}
        for x in g.free_symbols:
            if x in env:
                continue
            tot = _parse_total(str(x))
            if tot is not None:
                who, signs = tot
                parts = self.totals_p if who == "p" else self.totals_q
                env[x] = sum((parts[i] for i, sg in enumerate(self.sig) if sg[:len(signs)] == signs), self.K(0))
            else:
                env[x] = self.K(self.gens[self.names.index(str(x))])
        total = self.K(0)
        syms = list(env)
        for monom, c in sympy.Poly(g, *syms).terms():
            c = sympy.Rational(c)
            t = self.K(_field._QQ(int(c.p), int(c.q)))
            for x, e in zip(syms, monom):
                if e:
                    t = t * env[x] ** e
            total += t
        return total

    def _monic(self, e: Any, signs: frozenset = frozenset()) -> tuple:
        """``(monic polynomial, signs)`` of ``sign(e) in signs`` (the signs flipped with a negative leading term)."""
        poly = e.numer if hasattr(e, "numer") else e
        if poly.LC < 0:
            signs = frozenset({NEG: POS, POS: NEG, ZERO: ZERO}[s] for s in signs)
        return poly.monic(), signs

    def _add_base(self, e: Any, signs: frozenset) -> None:
        poly = e.numer if hasattr(e, "numer") else e
        if poly.is_ground:
            return
        if poly.LC < 0:
            signs = frozenset({NEG: POS, POS: NEG, ZERO: ZERO}[s] for s in signs)
        self.base.append((poly.monic(), signs))

    def members_in(self, poly: Any) -> set:
        """The (class, draw) pairs whose token symbols occur in ``poly``."""
        out = set()
        for j, d in enumerate(poly.degrees()):
            if d > 0 and j in self.member_index:   # (the zero polynomial's degrees are -inf)
                out.add(self.member_index[j])
        return out

    def has_other(self, poly: Any) -> bool:
        return any(d > 0 and j not in self.member_index for j, d in enumerate(poly.degrees()))

    def to_generic(self, poly: Any, i: int, k: int) -> Any:
        if k == 0:
            return poly
        a, b = self.member_names[(i, k)]
        a0, b0 = self.member_names[(i, 0)]
        R = self.K.ring
        return poly.compose([(R.gens[a], R.gens[a0]), (R.gens[b], R.gens[b0])])

    def to_draw(self, f: Any, i: int, k: int) -> Any:
        """A class entry (a rational function of the class's generic token) at its ``k``-th drawn token."""
        key = (f, i, k)
        hit = self._drawn.get(key)
        if hit is None:
            hit = self._drawn[key] = self._to_draw(f, i, k)
        return hit

    def _to_draw(self, f: Any, i: int, k: int) -> Any:
        a, b = self.member_names[(i, k)]
        a0, b0 = self.member_names[(i, 0)]
        R = self.K.ring
        subs = [(R.gens[a0], R.gens[a]), (R.gens[b0], R.gens[b])]
        return self.K.raw_new(f.numer.compose(subs), f.denom.compose(subs))   # a renaming: still in lowest terms

    def predicate(self, poly: Any, i: int) -> Any:
        """``poly`` (class ``i``'s generic token and other symbols) as a layout-independent predicate expression."""
        import sympy
        u, v = _uv()
        a0, b0 = self.member_names[(i, 0)]
        c, m = self.layout.named, len(self.layout.classes)
        env = {}
        for j, name in enumerate(self.names):
            x = sympy.Symbol(name)
            if j == a0:
                env[x] = u
            elif j == b0:
                env[x] = v
            elif name.startswith("P_C") and j < 2 * c + 2 * m:
                env[x] = _total_symbol("p", self.sig[int(name[3:])])
            elif name.startswith("Q_C") and j < 2 * c + 2 * m:
                env[x] = _total_symbol("q", self.sig[int(name[3:])])
        g = sympy.expand(poly.as_expr().xreplace(env))
        lead = sympy.Poly(g, *sorted(g.free_symbols, key=str)).LC() if g.free_symbols else g
        return sympy.expand(g / lead)

    def describe_classes(self) -> list:
        preds = [str(g).replace("u", "p(t)").replace("v", "q(t)") for g in self.layout.preds]
        out = []
        for i, signs in enumerate(self.layout.classes):
            conds = [f"{g} {_sign_text(s)}" for g, s in zip(preds, signs)]
            out.append(f"C{i}: unnamed tokens t with " + (", ".join(conds) if conds else "any probabilities"))
        return out

    def shared_solver(self) -> "_AbsShared":
        """The proof's shared solver, asking linear arithmetic first (:class:`_AbsShared`)."""
        if self._stack is None:
            self._stack = _AbsShared(self)
        return self._stack


class _AbsShared(SharedSolver):
    """The shared solver of a proof for every vocabulary size: linear arithmetic first, then z3's nonlinear one.

    z3's nonlinear procedure (nlsat) can stall on systems of dozens of variables that are linear (the
    abstraction's totals make many); the simplex does not. The linear constraints alone are a relaxation:
    infeasible, so is the whole system. Feasible, a rational point of them that meets every nonlinear
    constraint exactly (checked in Fractions) is a point of the whole system. Otherwise nlsat is asked.
    """

    linear_first = False   # its own linear solver first (below), not the concrete prover's

    def __init__(self, space: "_AbsSpace") -> None:
        super().__init__(space)
        self.linear = _LinearSolver(space)
        self.answered_by: Any = None   # the solver that gave the last answer, if not the shared one
        self.asked: dict = {}          # (question, the cell's constraints) -> unsat, from a one-cell check

    def check(self, known: dict, question: Any, stats: dict) -> Any:
        z3 = self.z3
        if LINEAR_FIRST:
            r = self.linear.check(known, question, stats)
            if r != z3.unknown:
                self.answered_by = self.linear.solver
                return r
            # nlsat on the cell's constraints asserted outright: it settles in milliseconds systems it cannot
            # settle as assumptions on the long-lived solver (measured: 0.03 s against > 10 s)
            key = (question, frozenset(known.items()))
            hit = self.asked.get(key)
            if hit is not None:
                return hit
            stats["z3 checks (one cell)"] = stats.get("z3 checks (one cell)", 0) + 1
            s = z3.SolverFor("QF_NRA")
            s.set("timeout", self.space.check_ms)
            sign = self.space.z3_sign
            for poly, signs in itertools.chain(self.space.base, known.items()):
                s.add(sign(poly, signs))
            asked = [(m, _NONZERO) for m in question[1]] if question[0] == "!=0" else [question]
            for poly, signs in asked:
                s.add(sign(poly, signs))
            r = s.check()
            if r == z3.unsat:
                self.asked[key] = r
            if r != z3.unknown:
                self.answered_by = s
                return r
        self.answered_by = None
        return super().check(known, question, stats)

    def model(self) -> Any:
        return (self.answered_by or self.solver).model()


class _LinearSolver:
    """One proof's linear-arithmetic solver: each linear constraint behind a literal, asked under assumptions."""

    def __init__(self, space: "_AbsSpace") -> None:
        import z3
        self.z3, self.space = z3, space
        self.solver = z3.SolverFor("QF_LRA")
        self.solver.set("timeout", space.check_ms)
        self.base = {poly: signs for poly, signs in space.base}
        self.lits: dict = {}
        for poly, signs in space.base:
            if _linear(poly):
                self.solver.add(space.z3_sign(poly, signs))

    def lit(self, key: tuple) -> Any:
        b = self.lits.get(key)
        if b is None:
            b = self.lits[key] = self.z3.Bool(f"l{len(self.lits)}")
            self.solver.add(self.z3.Implies(b, self.space.z3_sign(*key)))
        return b

    def check(self, known: dict, question: tuple, stats: dict) -> Any:
        z3, space = self.z3, self.space
        stats["linear checks"] = stats.get("linear checks", 0) + 1
        assume, nonlinear = [], []
        asked = [(m, _NONZERO) for m in question[1]] if question[0] == "!=0" else [question]
        for poly, signs in asked:
            if _linear(poly):
                assume.append(self.lit((poly, signs)))
            else:   # the linear part alone, its point checked against the question
                nonlinear.append((poly, signs))
        for poly, signs in known.items():
            if not _linear(poly):
                nonlinear.append((poly, signs))
            elif self.base.get(poly) != signs:
                assume.append(self.lit((poly, signs)))
        nonlinear += [(p, sg) for p, sg in space.base if not _linear(p)]
        r = self.solver.check(*assume)
        if r != z3.sat or not nonlinear:
            return r
        point = space.rational_model(self.solver.model())
        if point is not None and all(space.sign_at(p, point) in sg for p, sg in nonlinear):
            return z3.sat
        return z3.unknown


#: polynomials at least this long are first divided by the irreducible factors met before (sympy's
#: multivariate factorisation, Wang's algorithm, did not finish in 15 minutes on a product of two factors of
#: 20 and 22 terms in 22 variables that trial division splits in 0.1 s)
TRIAL_DIVISION_TERMS = 40
_IRREDUCIBLE: dict = {}   # a ring -> the monic irreducible factors met in it, most recent last


def _factors(poly: Any) -> tuple:
    """``_field._factors`` for the abstraction's long polynomials: trial division by known factors first.

    The factors found divide ``poly`` exactly and each is irreducible (it came out of a full factorisation);
    the cofactor left is factored in full. So the result is ``poly``'s factorisation, as sympy's would be.
    """
    hit = _field._FACTORS.get(poly)
    if hit is not None or len(poly) < TRIAL_DIVISION_TERMS:
        return _remember(poly, hit if hit is not None else _field._factors(poly))
    known = _IRREDUCIBLE.get(poly.ring, {})
    found: list = []
    rest = poly
    for f in reversed(list(known)):
        if len(f) >= len(rest) or f.is_ground:
            continue
        while True:
            q, r = divmod(rest, f)
            if r:
                break
            rest = q.copy()   # sympy's quotient keeps a stale hash (equal polynomials, unequal hashes): a fresh one
            found.append(f)
    if not found:
        return _remember(poly, _field._factors(poly))
    if rest.is_ground:
        c, facs = rest.LC, []
    else:
        lc = rest.LC
        csign, facs = _factors(rest.monic())
        c = lc * csign
    counts: dict = {}
    for f in found:
        counts[f] = counts.get(f, 0) + 1
    merged = dict(facs)
    for f, e in counts.items():
        merged[f] = merged.get(f, 0) + e
    hit = _field._FACTORS[poly] = (POS if c > 0 else NEG, list(merged.items()))
    return _remember(poly, hit)


def _remember(poly: Any, hit: tuple) -> tuple:
    known = _IRREDUCIBLE.setdefault(poly.ring, {})
    for f, _e in hit[1]:
        known.pop(f, None)
        known[f] = True
    return hit


_LINEAR: dict = {}


def _linear(poly: Any) -> bool:
    """Whether a polynomial has degree <= 1 (no ``sum()``: Python's is switched for rule code during a proof)."""
    hit = _LINEAR.get(poly)
    if hit is None:
        hit = True
        for m in poly.itermonoms():
            if m.count(0) < len(m) - 1 or max(m) > 1:
                hit = False
                break
        if len(_LINEAR) > 100_000:
            _LINEAR.clear()
        _LINEAR[poly] = hit
    return hit


# -- the decider: answers about an unnamed token must hold for every token of its class ----------------------
class _AbsDecider(Decider):
    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        if self._shared is None:
            raise ExactSpecError("vocab='all' needs the prover's shared solver (_field.SHARED_SOLVER)")
        self.member_signs: dict = {}   # a factor in a class's token symbols -> its sign at every token of the class
        self.classes_known: dict = {}  # class -> whether it has mass on this cell (decided by :meth:`nonempty`)
        self.assumed: frozenset = frozenset()   # the classes the running branch drew from (PER_BRANCH)
        self._assuming: dict = {}

    def nonempty(self, i: int) -> bool:
        """Whether class ``i`` has mass on this cell, forking the cell where it may or not.

        With mass, the class has a token: the cell takes on the class's signs at its tokens and the strict
        signs of its totals (the side is feasible only with them); without, both totals are 0.
        """
        hit = self.classes_known.get(i)
        if hit is not None:
            return hit
        space = self.space
        total = space.totals_p[i] + space.totals_q[i]
        mass, yes = space._monic(total, frozenset((POS,)))   # the signs flip with a negative leading term
        _mass, no = space._monic(total, frozenset((NEG, ZERO)))
        with_signs = dict(self.known)
        for poly, signs in space.nonempty_signs[i]:
            with_signs[poly] = with_signs.get(poly, ALL) & signs
        yes_ok = self._check(with_signs, (mass, yes))
        no_ok = self._check(self.known, (mass, no))
        if yes_ok and no_ok:   # fork: go on with mass, push the cell without
            self.stats["forks"] = self.stats.get("forks", 0) + 1
            self.pending.append((self.order + [(mass, no)], None))
        if yes_ok:
            self._add(mass, yes)
            for poly, signs in space.nonempty_signs[i]:
                self._add(poly, signs)
        elif no_ok:
            self._add(mass, no)
        else:   # with mass the class's signs cannot hold, without it the rest cannot: no instance lies in the cell
            raise _EmptyCell()
        if self.point is not None and any(space.sign_at(p, self.point) not in sg for p, sg in self.order):
            self.point = None   # the cell's known point may lie outside what was just added
        self.classes_known[i] = yes_ok
        return yes_ok

    def _check(self, known: dict, question: tuple) -> bool:
        r = self._shared.check(known, question, self.stats)
        self.solver = self._shared.solver
        if r == self.z3.sat:
            return True
        if r == self.z3.unsat:
            return False
        raise SolverUnknown(f"z3 could not decide {self.space.show(*question)} on a cell within "
                            f"{self.space.check_ms} ms")

    def decide(self, frac: Any, op: str) -> bool:
        num = frac.numer
        if num.is_zero:
            return ZERO in OPS[op]
        poly = num * frac.denom
        if poly.is_ground:
            return (POS if poly.LC > 0 else NEG) in OPS[op]
        space = self.space
        members = space.members_in(poly)
        if not members:
            return self._plain(frac, op)
        csign, facs = _factors(poly.monic())
        sign = (POS if poly.LC > 0 else NEG) * csign
        for f, e in facs:
            mem = space.members_in(f)
            if not mem:   # a factor free of unnamed tokens: decided on the cell as usual (it may fork)
                s = ZERO if self._plain(space.K(f), "==") else POS if self._plain(space.K(f), ">") else NEG
            else:
                if len({i for i, _k in mem}) > 1:
                    _refuse("compares probabilities of tokens of two different classes of unnamed tokens (e.g. "
                            "an argmax or max over the vocabulary)")
                if len(mem) > 1:
                    _refuse("compares the probabilities of two different drawn unnamed tokens")
                (i, k), = mem
                s = self._sign_of(f, i, k)
            if s == ZERO:
                sign = ZERO
                break
            if s == NEG and e % 2:
                sign = -sign
        return sign in OPS[op]

    def _plain(self, frac: Any, op: str) -> bool:
        """A comparison free of unnamed tokens' symbols: on the cell, assuming the branch's classes have a token.

        Without such classes this is the prover's own decision (it may fork the cell). With them, a side that
        only the assumption rules out is not recorded in the cell (other branches need the cell's points where a
        class is empty); both sides possible: the cell forks as usual (each side holds instances); neither:
        the branch cannot happen where its classes have mass, so it weighs 0 (:class:`_DeadBranch`).
        """
        if not self.assumed:
            return Decider.decide(self, frac, op)
        num = frac.numer
        if num.is_zero:
            return ZERO in OPS[op]
        poly = num * frac.denom
        if poly.is_ground:
            return (POS if poly.LC > 0 else NEG) in OPS[op]
        known = self._known_assuming()
        csign, facs = _factors(poly.monic())
        sign = (POS if poly.LC > 0 else NEG) * csign
        rest = []
        for f, e in facs:   # drop the factors whose sign the cell (with the assumption) already fixes
            kf = known.get(f, ALL)
            if kf == frozenset((ZERO,)):
                return ZERO in OPS[op]
            if kf == frozenset((POS,)) or (e % 2 == 0 and ZERO not in kf):
                continue
            if kf == frozenset((NEG,)):
                sign = -sign if e % 2 else sign
                continue
            rest.append((f, e))
        if not rest:
            return sign in OPS[op]
        mono = rest[0][0] if len(rest) == 1 and rest[0][1] == 1 else _field._product(rest)
        want = OPS[op] if sign == POS else frozenset({NEG: POS, POS: NEG, ZERO: ZERO}[x] for x in OPS[op])
        k = known.get(mono, ALL)
        yes, no = k & want, k - want
        if not no:
            return True
        if not yes:
            return False
        yes_ok = self._check(known, (mono, yes))
        no_ok = self._check(known, (mono, no))
        if yes_ok and no_ok:
            self.stats["forks"] = self.stats.get("forks", 0) + 1
            self.pending.append((self.order + [(mono, no)], None))
            self._add(mono, yes)
            self.point = None
            return True
        if yes_ok or no_ok:
            return yes_ok
        raise _DeadBranch()

    def _known_assuming(self) -> dict:
        """The cell's known signs with the branch's classes' mass, token signs and strict totals."""
        key = (self.assumed, len(self.order))
        hit = self._assuming.get(key)
        if hit is None:
            space = self.space
            hit = dict(self.known)
            for i in self.assumed:
                mass, yes = space._monic(space.totals_p[i] + space.totals_q[i], frozenset((POS,)))
                hit[mass] = hit.get(mass, ALL) & yes
                for poly, signs in space.nonempty_signs[i]:
                    hit[poly] = hit.get(poly, ALL) & signs
            self._assuming = {key: hit}
        return hit

    def _sign_of(self, f: Any, i: int, k: int) -> int:
        """The sign of an irreducible factor at every token of class ``i``, or split the class by it.

        Decided on the cell *with the class's signs assumed* (the class has a token): where the class is empty
        its branches weigh 0 whatever is decided. The answer is kept for this cell but never added to it (that
        would drop the cell's points where the class is empty).
        """
        hit = self.member_signs.get((f, self.assumed))
        if hit is not None:
            return hit
        known = dict(self._known_assuming() if self.assumed else self.known)
        for poly, signs in self.space.class_signs[i]:
            known[poly] = known.get(poly, ALL) & signs
        cand = [s for s in (NEG, ZERO, POS) if s in known.get(f, ALL)]
        if len(cand) == 1:   # the class's own signs fix it (no z3 question)
            self.member_signs[(f, self.assumed)] = cand[0]
            return cand[0]
        ok = []
        for s in cand:
            if self._check(known, (f, frozenset((s,)))):
                ok.append(s)
        if len(ok) > 1:
            raise _Refine(self.space.predicate(self.space.to_generic(f, i, k), i))
        sign = ok[0] if ok else ZERO   # no token of the class can exist on this cell: its branches weigh 0
        self.member_signs[(f, self.assumed)] = sign
        return sign


# -- values: class entries, unnamed tokens, laws -------------------------------------------------------------
class ClassEntry(SymNum):
    """The entry of a law at a class of unnamed tokens: a function of the class's generic token, per token."""

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
        space = _SPACE[-1]
        if getattr(other, "numer", None) is not None and (space.members_in(other.numer) or
                                                          space.members_in(other.denom)):
            _refuse(f"combines ({op}) a class entry with a drawn unnamed token's probability")
        return other

    def __add__(self, o: Any) -> Any:
        x = self._with(o, "+", False)
        return x if x is NotImplemented else ClassEntry(_op("+", self.f, x), self.cls)

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        x = self._with(o, "-", False)
        return x if x is NotImplemented else ClassEntry(_op("-", self.f, x), self.cls)

    def __rsub__(self, o: Any) -> Any:
        x = self._with(o, "-", False)
        return x if x is NotImplemented else ClassEntry(_op("-", x, self.f), self.cls)

    def __mul__(self, o: Any) -> Any:
        x = self._with(o, "*", True)
        return x if x is NotImplemented else ClassEntry(_op("*", self.f, x), self.cls)

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        x = self._with(o, "/", True)
        if x is NotImplemented:
            return x
        _field._nonzero(x)
        return ClassEntry(_op("/", self.f, x), self.cls)

    def __rtruediv__(self, o: Any) -> Any:
        x = self._with(o, "/", True)
        if x is NotImplemented:
            return x
        _field._nonzero(self.f)
        return ClassEntry(_op("/", x, self.f), self.cls)

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
        return _field.active().decide(_op("-", self.f, x), op)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClassEntry(C{self.cls}: {self.f.as_expr()})"


_SPACE: list = []


class UnnamedToken:
    """A token drawn from a class of unnamed tokens (its ``k``-th draw in the branch): an outcome no named one."""

    __slots__ = ("cls", "k", "run")

    def __init__(self, cls: int, k: int, run: "_Run") -> None:
        self.cls, self.k, self.run = cls, k, run

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if isinstance(o, UnnamedToken):
            if o.cls != self.cls:
                return False
            if o.k == self.k:
                return True
            return self.run.ambiguous()
        if isinstance(o, bool):
            return False
        if isinstance(o, int):
            if 0 <= o < self.run.named:
                return False
            _refuse(f"compares a drawn unnamed token with the position {o} of the abstract vocabulary")
        return NotImplemented

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __hash__(self) -> int:
        return hash(("es-unnamed", self.cls))

    def __index__(self) -> int:
        return _refuse("uses a drawn unnamed token as an index (of a list the rule built, or in arithmetic)")

    __int__ = __index__

    def __repr__(self) -> str:
        return f"<unnamed token {self.k} of class C{self.cls}>"


class AbstractLaw(tuple):
    """A law over the abstract vocabulary: named entries, then one :class:`ClassEntry` per class."""

    def __new__(cls, entries: Any, named: int) -> "AbstractLaw":
        obj = super().__new__(cls, entries)
        obj.named = named
        return obj

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, UnnamedToken):
            e = tuple.__getitem__(self, self.named + i.cls)
            if isinstance(e, ClassEntry):
                return SymNum(_SPACE[-1].to_draw(e.f, i.cls, i.k))
            if _is_zero(e):
                return e
            return _refuse("a law the rule built has a constant entry at a class of unnamed tokens")
        if isinstance(i, slice):
            return _refuse("slices a law")
        if isinstance(i, int) and not isinstance(i, bool) and not 0 <= i < self.named:
            return _refuse(f"reads entry {i} of a law: positions past the named tokens stand for classes")
        return tuple.__getitem__(self, i)

    def __len__(self) -> int:
        return _refuse("takes len() of a law: the vocabulary size is symbolic")

    def __reduce__(self) -> Any:   # pragma: no cover - never pickled
        return (tuple, (tuple(iter(self)),))


def _is_zero(e: Any) -> bool:
    if isinstance(e, (int, Fraction)) and not isinstance(e, bool):
        return e == 0
    return type(e) is SymNum and e.f.numer.is_zero


class _Hook:
    """What ``es.laws`` asks while an all-vocabulary proof runs: sums and normalisation with class totals."""

    def __init__(self, space: _AbsSpace) -> None:
        self.space = space

    def total(self, v: Any) -> Any:
        """``sum(v)`` over the whole vocabulary: named entries plus each class entry summed over its tokens."""
        space = self.space
        entries = list(iter(v))
        c, m = space.layout.named, len(space.layout.classes)
        if len(entries) != c + m:
            _refuse(f"sums a law of {len(entries)} entries, not one over the abstract vocabulary")
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
        entries = list(iter(v))
        return AbstractLaw([x / s if not _is_zero(x) else x for x in entries], self.space.layout.named)


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


# -- the enumeration of one cell ------------------------------------------------------------------------------
class _Run:
    """One branch: replays ``prefix`` (option indices), then takes option 0 at each new draw, pushing the rest."""

    def __init__(self, prefix: tuple, pending: list, fld: Any, named: int, draws: int, supports: dict) -> None:
        self.prefix, self.pending, self.fld, self.named, self.draws = prefix, pending, fld, named, draws
        self.pos = 0
        self.choices: list = []
        self.weight: Any = fld.one
        self.ambiguous_seen = False
        self.count: dict = {}
        self.supports = supports   # shared by the branches of one cell: a law's support is decided once there

    def _choose(self, options: list) -> Any:
        pos = self.pos
        self.pos += 1
        if pos < len(self.prefix):
            idx = self.prefix[pos]
        else:
            idx = 0
            for j in range(1, len(options)):
                self.pending.append(tuple(self.choices) + (j,))
        self.choices.append(idx)
        value, w = options[idx]
        if w is not None:
            self.weight = self.weight * w
        return value

    def ambiguous(self) -> bool:
        """Two drawn unnamed tokens of one class compared: both answers are followed, the branch marked."""
        self.ambiguous_seen = True
        return self._choose([(True, None), (False, None)])

    def number(self, x: Any, what: str = "a number") -> Any:
        return self.fld.check(x, what)

    def categorical(self, law: Any) -> Any:
        key = (id(law), _field.active().assumed)
        hit = self.supports.get(key)
        if hit is None or hit[0] is not law:
            hit = self.supports[key] = (law, self._support(law))   # the law kept alive with its entry
        options = hit[1]
        value = self._choose(options)
        if isinstance(value, tuple):
            _tag, i, x = value
            k = self.count.get(i, 0) + 1
            if k > self.draws:
                raise _MoreDraws()
            self.count[i] = k
            if PER_BRANCH:
                dec = _field.active()
                dec.assumed = dec.assumed | {i}
            self.weight = self.weight * SymNum(_SPACE[-1].to_draw(x.f, i, k))
            return UnnamedToken(i, k, self)
        return value

    draw_now = categorical

    def _support(self, law: Any) -> list:
        """``[(token or ("class", i, entry), probability or None)]`` of a law, validated (once per law and cell)."""
        fld = self.fld
        entries = list(iter(law))
        space = _SPACE[-1]
        c, m = self.named, len(space.layout.classes)
        if len(entries) != c + m:
            _refuse(f"draws from a law of {len(entries)} entries, not one over the abstract vocabulary")
        options: list = []
        for a, x in enumerate(entries[:c]):
            x = fld.check(x, "a law passed to rng.categorical")
            if not x >= 0:
                raise InvalidDistribution(f"a law passed to rng.categorical has entry {a} < 0")
            if x != 0:
                options.append((a, x))
        hook = _Hook(space)
        total: Any = sum((x for _a, x in options), fld.zero)
        for i, x in enumerate(entries[c:]):
            if _is_zero(x):
                continue
            if not isinstance(x, ClassEntry):
                _refuse("draws from a law with a constant entry at a class of unnamed tokens")
            if not PER_BRANCH and not _field.active().nonempty(i):   # an empty class: no token to draw
                continue
            if not x >= 0:
                raise InvalidDistribution(f"a law passed to rng.categorical is negative on class C{i}")
            if x == 0:   # 0 at every token of the class (decided for the class): none of them is drawn
                continue
            total = total + hook.class_total(x, i)
            options.append((("class", i, x), None))
        if total != 1:
            raise InvalidDistribution("a law passed to rng.categorical does not sum to exactly 1 over the vocabulary")
        return options

    def bernoulli(self, prob: Any) -> bool:
        prob = self.fld.check(prob, "the probability passed to rng.bernoulli")
        if not (prob >= 0 and prob <= 1):
            raise InvalidDistribution(f"rng.bernoulli got a probability outside [0, 1] (at {where()})")
        if prob == 1:
            return True
        if prob == 0:
            return False
        return self._choose([(True, prob), (False, 1 - prob)])

    def uniform(self, *a: Any, **k: Any) -> Any:
        return _refuse("draws rng.uniform() (not followed by the all-vocabulary abstraction yet)")

    random = uniform


class _Step:
    """The chain step a rule sees: drafts sampled from the draft law, the same target law at every position."""

    def __init__(self, run: _Run, gamma: int, p: AbstractLaw, q: AbstractLaw, argmax: bool = False,
                 claim: AbstractLaw | None = None) -> None:
        self._run, self.gamma, self._p, self._q = run, gamma, p, q
        self._argmax, self._claim = argmax, (q if claim is None else claim)
        self._drafts: list = []
        self.accepted = 0

    @property
    def vocab(self) -> int:
        return _refuse("reads step.vocab: the vocabulary size is symbolic")

    def _check(self, j: int) -> None:
        if not 0 <= j <= self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma}")

    def draft(self, j: int) -> Any:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        while len(self._drafts) <= j:   # argmax drafts: named token 0, q's argmax by the layout (context-free q)
            self._drafts.append(0 if self._argmax else self._run.categorical(self._q))
        return self._drafts[j]

    def claimed(self, j: int) -> AbstractLaw:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        return self._claim

    def target(self, j: int) -> AbstractLaw:
        self._check(j)
        return self._p

    def accept(self, j: int) -> Any:
        self.accepted = max(self.accepted, j + 1)
        return self.draft(j)

    @property
    def drafts(self) -> tuple:
        return tuple(self.draft(j) for j in range(self.gamma))

    def number(self, x: Any) -> Any:
        from ..laws import to_rational
        return self._run.fld.convert(to_rational(x, "step.number"))


class _TreeStep:
    """The tree step a tree rule sees: children drawn i.i.d. from the draft law, claimed as it (context-free)."""

    family = "tree"
    root = 0

    def __init__(self, run: _Run, expansion: tuple, p: AbstractLaw, q: AbstractLaw) -> None:
        self._run, self._exp, self._p, self._q = run, expansion, p, q
        self.max_depth = len(expansion)
        self._tok: list = [None]
        self._parent = [-1]
        self._depth = [0]
        self._path: list = [()]
        self._kids: list = [[]]
        self.accepted = 0

    @property
    def vocab(self) -> int:
        return _refuse("reads step.vocab: the vocabulary size is symbolic")

    def token(self, node: int) -> Any:
        return self._tok[node]

    def parent(self, node: int) -> int:
        return self._parent[node]

    def depth(self, node: int) -> int:
        return self._depth[node]

    def path(self, node: int) -> tuple:
        return self._path[node]

    def target(self, node: int) -> AbstractLaw:
        self._depth[node]   # IndexError for a node that does not exist
        return self._p

    def claimed(self, node: int) -> AbstractLaw:
        if node == 0:
            raise ValueError("the root carries no claimed law")
        self._depth[node]
        return self._q

    def _draw_next(self, node: int) -> bool:
        d = self._depth[node]
        if d >= self.max_depth or len(self._kids[node]) >= self._exp[d]:
            return False
        x = self._run.categorical(self._q)
        c = len(self._tok)
        self._tok.append(x)
        self._parent.append(node)
        self._depth.append(d + 1)
        self._path.append(self._path[node] + (x,))
        self._kids.append([])
        self._kids[node].append(c)
        return True

    def children(self, node: int) -> list:
        while self._draw_next(node):
            pass
        return list(self._kids[node])

    def proposals(self, node: int) -> Any:
        i = 0
        while True:
            if i >= len(self._kids[node]) and not self._draw_next(node):
                return
            yield self._kids[node][i], self._q
            i += 1

    def accept(self, node: int) -> Any:
        self.accepted += 1
        return self._tok[node]

    def number(self, x: Any) -> Any:
        from ..laws import to_rational
        return self._run.fld.convert(to_rational(x, "step.number"))


def _run_branch(rule: Any, run: _Run, proposer: Any, tree: bool, gamma: Any, p: AbstractLaw, q: AbstractLaw,
                argmax: bool, claim: Any, tokens: int, c: int) -> tuple:
    """One branch, step after step: ``(emitted tokens, whether they are all named)`` (stops at an unnamed one)."""
    from ..errors import RuleError
    emitted: list = []
    named_only = True
    while len(emitted) < tokens and named_only:
        step = _TreeStep(run, tuple(proposer.expansion), p, q) if tree else _Step(run, gamma, p, q, argmax, claim)
        gen = rule.fn(step, run)
        n0 = len(emitted)
        try:
            for tok in gen:
                if isinstance(tok, UnnamedToken):
                    named_only = False
                    break
                if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < c:
                    raise RuleError(f"rule {rule.name} emitted {tok!r}, not a token", rule=rule.name)
                emitted.append(tok)
                if len(emitted) >= tokens:
                    break
        finally:
            gen.close()
        if named_only and len(emitted) == n0:
            raise RuleError(f"rule {rule.name} emitted no token in a step", rule=rule.name)
    return emitted, named_only


def _enumerate(rule: Any, space: _AbsSpace, proposer: Any, tokens: int) -> tuple:
    """Every branch of ``tokens`` emitted tokens on the current cell: ``({named outcome: probability}, branches)``."""
    fld = space.field
    c = space.layout.named
    p = AbstractLaw(list(space.laws["p"][0]) + [ClassEntry(space.gens[space.member_names[(i, 0)][0]] / 1, i)
                                                for i in range(len(space.layout.classes))], c)
    q = AbstractLaw(list(space.laws["q"][0]) + [ClassEntry(space.gens[space.member_names[(i, 0)][1]] / 1, i)
                                                for i in range(len(space.layout.classes))], c)
    tree = getattr(proposer, "kind", "chain") == "tree"
    gamma = None if tree else proposer.gamma
    argmax = not tree and proposer.sampling == "argmax"
    claim = None
    if not tree and proposer.claim == "point_mass":
        claim = AbstractLaw([fld.one if a == 0 else 0 for a in range(c)] + [0] * len(space.layout.classes), c)
    out: dict = {}
    pending: list = [()]
    supports: dict = {}
    branches = 0
    while pending:
        prefix = pending.pop()
        run = _Run(prefix, pending, fld, c, space.layout.draws, supports)
        dec = _field.active()
        dec.assumed = frozenset()
        if PER_BRANCH:
            from .. import laws
            laws.clear_memo()   # a residual memoised in one branch was decided under that branch's classes
        try:
            emitted, named_only = _run_branch(rule, run, proposer, tree, gamma, p, q, argmax, claim, tokens, c)
        except _DeadBranch:
            branches += 1
            dec.stats["dead branches"] = dec.stats.get("dead branches", 0) + 1
            continue
        branches += 1
        if not named_only:
            continue
        if run.ambiguous_seen:
            _refuse("two drawn unnamed tokens of one class were compared and a named outcome depends on the answer")
        w = run.weight.f
        draws = {(i, k) for i, n in run.count.items() for k in range(1, n + 1)}
        if space.members_in(w.denom):
            _refuse("a branch's probability has an unnamed token's probability in its denominator")
        total = _sum_over_class(space, w.numer, draws) / space.K(w.denom) if draws else w
        o = tuple(emitted[:tokens])
        out[o] = out[o] + SymNum(total) if o in out else SymNum(total)
    return out, branches


# -- the proof ------------------------------------------------------------------------------------------------
#: what the concrete prover hands down to an all-vocabulary proof (``_prove`` imports this module, not the reverse)
_KIT: list = []


def prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                    kit: Any, progress: Callable[[int, int], None] | None = None) -> Any:
    """The body of ``es.prove(rule, vocab="all", ...)`` (see :func:`exactspec.prove`): chain and i.i.d. tree rules.

    ``kit``: the concrete prover's ``Proof``, ``Refutation``, ``prove``, ``rational_point`` and
    ``forget_symbolic_caches``, handed down by :func:`exactspec.prove` (which imports this module).

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab="all", tokens=1).proven
    True
    """
    _KIT.append(kit)
    try:
        return _prove_all_vocab(rule, proposer, tokens, timeout=timeout, check_ms=check_ms, kit=kit,
                                progress=progress)
    finally:
        _KIT.pop()


def _prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                     kit: Any, progress: Any) -> Any:
    from ..errors import BudgetExceeded
    Proof, _forget_symbolic_caches = kit.Proof, kit.forget_symbolic_caches
    global _LIBRARY
    t0 = time.perf_counter()
    if not _LIBRARY:
        _LIBRARY = _library_paths()
    kind = getattr(proposer, "kind", "chain")
    if (rule.family, kind) not in (("chain", "chain"), ("tree", "tree")):
        raise AbstractionRefused(f"vocab='all' proves chain rules with chain proposers and tree rules with "
                                 f"expansion trees; not a {rule.family} rule with {proposer!r}")
    if kind == "tree":
        if proposer.children != "iid" or proposer.claim != "draft":
            raise AbstractionRefused(f"vocab='all' follows trees whose children are drawn i.i.d. from the draft "
                                     f"law and claimed as it; not {proposer.describe()}")
    elif getattr(proposer, "sampled_from", None) is not None or proposer.claim not in ("draft", "point_mass") or \
            (proposer.sampling == "sample" and proposer.claim != "draft"):
        raise AbstractionRefused(f"vocab='all' follows drafts sampled from the draft law, or its argmax, claimed as "
                                 f"the draft law or a point mass; not {proposer.describe()}")
    if rule.claim == "lossless-greedy":
        raise AbstractionRefused("vocab='all' does not follow greedy rules (their argmax over the vocabulary)")
    deadline = None if timeout is None else t0 + timeout
    preds: list = []
    draws = 1
    # argmax drafts: one more named token, token 0, the draft law's argmax (the outcome may or may not hold it)
    argmax_q = kind == "chain" and proposer.sampling == "argmax"
    named = tokens + 1 if argmax_q else tokens
    stats: dict = {"restarts": 0}
    while True:
        layout = _Layout(named, preds, draws, argmax_q)
        try:
            res = _prove_layout(rule, proposer, layout, tokens, check_ms, deadline, timeout, stats, progress, t0)
        except _Refine as r:
            if r.pred in preds or len(preds) >= MAX_PREDICATES:
                raise AbstractionRefused(f"vocab='all': the classes of unnamed tokens would need more than "
                                         f"{MAX_PREDICATES} predicates (next: {r.pred})") from None
            preds.append(r.pred)
            stats["restarts"] += 1
            continue
        except _MoreDraws:
            if draws >= MAX_DRAWS:
                raise AbstractionRefused(f"vocab='all': a branch draws more than {MAX_DRAWS} tokens from one "
                                         "class of unnamed tokens") from None
            draws *= 2
            stats["restarts"] += 1
            continue
        except BudgetExceeded:
            _forget_symbolic_caches()
            raise
        finally:
            _SPACE.clear()
            _set_laws_hook(None)
        break
    cells, paths, space, found = res
    ref = None if found is None else _replay(rule, proposer, tokens, found, t0)
    small: dict = {}
    if ref is None and named > 2:   # the abstraction needs `named` distinct tokens: smaller vocabularies, concretely
        prove = kit.prove
        for vocab in range(2, named):
            left = None if deadline is None else max(deadline - time.perf_counter(), 1.0)
            concrete = prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family="context_free",
                             timeout=left)
            if not concrete.proven:
                return concrete
            small[vocab] = f"proven by es.prove at vocab {vocab} ({len(concrete.cells)} cells)"
    assumptions = {"family": "context_free", "family_source": "given", "vocab": "all", "min_vocab": 2,
                   "abstract_from": named, "smaller_vocabularies": small,
                   "tokens": tokens, "prompt": [], "proposer": proposer.describe(), "expected": "target",
                   "named_tokens": named, "classes": space.describe_classes(),
                   "variables": list(space.names), "closed_form": False,
                   "abstraction": "exchangeable unnamed tokens (docs: proofs-scale-out, every vocabulary size)"}
    if ref is not None:
        ref.assumptions, ref.seconds = assumptions, time.perf_counter() - t0
        return ref
    stats["cells"] = len(cells)
    return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(space.atoms), assumptions=assumptions,
                 seconds=time.perf_counter() - t0, stats=stats)


def _set_laws_hook(hook: Any) -> None:
    """Switch the abstraction's sums on (``hook``) or off (None): ``es.laws`` and, for the rule's own code, ``sum``."""
    import builtins
    from .. import laws
    laws._ABSTRACT = hook
    laws.clear_memo()   # no residual memoised over the abstract vocabulary outlives it (nor the other way)
    _compact_gcds(hook is not None)
    if hook is not None:
        if builtins.sum is not _abstract_sum:
            _BUILTIN_SUM[:] = [builtins.sum]
            builtins.sum = _abstract_sum
    elif _BUILTIN_SUM:
        builtins.sum = _BUILTIN_SUM.pop()


_BUILTIN_SUM: list = []


# -- gcds in the variables that occur --------------------------------------------------------------------------
#: sympy's heuristic gcd recurses once per generator of the ring, used or not; the abstraction's ring has dozens
#: (class totals, one token per class and draw), most absent from any one polynomial. While an all-vocabulary
#: proof runs, integer gcds are taken in the ring of the variables that occur (the same gcd; about 3x faster)
_GCD: list = []
_SMALL_RINGS: dict = {}


def _compact_gcd_zz(f: Any, g: Any) -> tuple:
    orig = _GCD[0]
    ring = f.ring
    used = set()
    for poly in (f, g):
        for monom in poly.itermonoms():
            used.update(i for i, e in enumerate(monom) if e)
    if not used or len(used) == ring.ngens:
        return orig(f, g)
    keep = tuple(sorted(used))
    small = _SMALL_RINGS.get((ring, keep))
    if small is None:
        from sympy.polys.rings import PolyRing
        small = _SMALL_RINGS[(ring, keep)] = PolyRing([ring.symbols[i] for i in keep], ring.domain, ring.order)

    def down(p: Any) -> Any:
        return small.from_dict({tuple(m[i] for i in keep): c for m, c in p.items()})

    def up(p: Any) -> Any:
        n = ring.ngens
        out = {}
        for m, c in p.items():
            full = [0] * n
            for i, e in zip(keep, m):
                full[i] = e
            out[tuple(full)] = c
        return ring.from_dict(out)
    h, cff, cfg = orig(down(f), down(g))
    return up(h), up(cff), up(cfg)


def _compact_gcds(on: bool) -> None:
    from sympy.polys.rings import PolyElement
    if on and not _GCD:
        _GCD.append(PolyElement._gcd_ZZ)
        PolyElement._gcd_ZZ = _compact_gcd_zz
    elif not on and _GCD:
        PolyElement._gcd_ZZ = _GCD.pop()
        _SMALL_RINGS.clear()


def _abstract_sum(iterable: Any, /, start: Any = 0) -> Any:
    """``sum`` while an all-vocabulary proof runs: a law over the abstract vocabulary is summed with its classes'
    totals, and a list of its length holding a constant where a class stands is refused (its sum needs the class
    size); sums in library code (exactspec's, sympy's, z3's) are Python's own."""
    import os
    import sys
    real = _BUILTIN_SUM[0]
    caller = os.path.abspath(sys._getframe(1).f_code.co_filename)
    hook = _hook_now()
    if hook is None or caller.startswith(_LIBRARY):
        return real(iterable, start)
    items = list(iterable)
    layout = hook.space.layout
    c, m = layout.named, len(layout.classes)
    if any(isinstance(x, ClassEntry) for x in items) or \
            (len(items) == c + m and any(not _is_zero(x) for x in items[c:])):
        if len(items) != c + m:
            _refuse("sums a list holding a class entry that is not a law over the abstract vocabulary")
        return start + hook.total(items) if not _is_zero(start) else hook.total(items)
    return real(items, start)


def _hook_now() -> Any:
    from .. import laws
    return laws._ABSTRACT


def _library_paths() -> tuple:
    import os
    import sympy
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = [os.path.join(pkg, "prove") + os.sep, os.path.join(pkg, "enumerate") + os.sep,
             os.path.join(pkg, "fields.py"), os.path.dirname(os.path.abspath(sympy.__file__)) + os.sep]
    try:
        import z3
        roots.append(os.path.dirname(os.path.abspath(z3.__file__)) + os.sep)
    except ImportError:   # pragma: no cover - es.prove needs z3
        pass
    return tuple(roots)


_LIBRARY: tuple = ()


def _prove_layout(rule: Any, proposer: Any, layout: _Layout, tokens: int, check_ms: int, deadline: Any,
                  timeout: Any, stats: dict, progress: Any, t0: float) -> tuple:
    from ..errors import BudgetExceeded
    space = _AbsSpace(layout, check_ms)
    _SPACE.append(space)
    _set_laws_hook(_Hook(space))
    c = layout.named
    pending: list = [([], None)]
    cells: list = []
    paths = 0
    while pending:
        if deadline is not None and time.perf_counter() > deadline:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": len(cells), "cells pending": len(pending)})
        start, point = pending.pop()
        with _AbsDecider(space, start, pending, stats, point) as dec:
            try:
                out, n = _enumerate(rule, space, proposer, tokens)
            except _EmptyCell:
                stats["empty cells"] = stats.get("empty cells", 0) + 1
                continue
            paths += n
            for o in itertools.product(range(c), repeat=tokens):
                expected: Any = space.field.one
                for t in o:
                    expected = expected * space.laws["p"][0][t]
                a = space.field.check(out.get(o, 0), "an output probability").f
                d = a - expected.f
                if d.numer.is_zero:
                    continue
                num, _den = dec.reduce(d, numer_only=True)
                if num.is_zero or not dec.may_be_nonzero(num):
                    continue
                return cells, paths, space, _refute_all(rule, proposer, space, dec, d, o, tokens, t0, len(cells))
            cells.append([space.show(p, s) for p, s in dec.order])
        if progress is not None:
            progress(len(cells), len(cells) + len(pending))
    return cells, paths, space, None


def _refute_all(rule: Any, proposer: Any, space: _AbsSpace, dec: Decider, d: Any, o: tuple, tokens: int,
                t0: float, cells_done: int) -> dict:
    """A rational point of the cell where the output differs, as concrete laws: each class one token (replayed
    later, by :func:`_replay`, once the abstraction is switched off)."""
    _rational_point = _KIT[-1].rational_point
    cell = [space.show(p, s) for p, s in dec.order]
    point = _rational_point(space, dec, d.numer.monic())
    if point is None:
        raise SolverUnknown(f"es.prove(vocab='all') found a cell where {rule.name} may be biased ({', '.join(cell)}) "
                            "but no rational witness inside it; not a verdict")
    P = [space.value(x, point) for x in space.named_p] + [space.value(x, point) for x in space.totals_p]
    Q = [space.value(x, point) for x in space.named_q] + [space.value(x, point) for x in space.totals_q]
    c = space.layout.named
    keep = list(range(c)) + [c + i for i in range(len(space.layout.classes)) if P[c + i] or Q[c + i]]
    p_law, q_law = [P[j] for j in keep], [Q[j] for j in keep]
    if space.layout.argmax_q and Q[0] > 0:   # a class as equal tokens of draft probability <= q_0: 0 stays the argmax
        pl, ql = p_law[:c], q_law[:c]
        for a, b in zip(p_law[c:], q_law[c:]):
            n = max(1, -(-b // Q[0]))
            pl += [a / n] * int(n)
            ql += [b / n] * int(n)
        p_law, q_law = pl, ql
    p_law, q_law = tuple(p_law), tuple(q_law)
    if len(keep) < 2:
        p_law, q_law = p_law + (Fraction(0),), q_law + (Fraction(0),)
    return {"cell": cell, "outcome": o, "difference": str(d.as_expr()), "p": p_law, "q": q_law,
            "cells_done": cells_done}


def _replay(rule: Any, proposer: Any, tokens: int, found: dict, t0: float) -> Any:
    """The Refutation of a cell's point: replayed exactly (outside the abstraction), then made as small as found."""
    from ..counterexamples.counterexample import Counterexample
    from ..counterexamples.searching import _rule_ref, evaluate
    Refutation = _KIT[-1].Refutation
    p_law, q_law, cell = found["p"], found["q"], found["cell"]
    inst = _instance(proposer, tokens, p_law, q_law)
    rep = evaluate(rule, inst)
    if rep is None or not rep.tv > 0:
        raise SolverUnknown(f"es.prove(vocab='all')'s witness for {rule.name} (each class of unnamed tokens as one "
                            f"token, vocab {len(p_law)}) did not replay as a bias in the exact engine: undecided, "
                            f"not a verdict (cell: {', '.join(cell)})")
    p_law, q_law, inst, rep = _smallest(rule, proposer, tokens, p_law, q_law, inst, rep)
    ce = Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                        expected=dict(rep.expected), tv=rep.tv,
                        space=f"es.prove (context_free, every vocab; witness at vocab {len(p_law)})",
                        rule_ref=_rule_ref(rule))
    return Refutation(rule=rule.name, cell=cell, outcome=found["outcome"], difference=found["difference"],
                      witness={"p": tuple(p_law), "q": tuple(q_law)}, report=rep, counterexample=ce, assumptions={},
                      seconds=time.perf_counter() - t0, cells_done=found["cells_done"])


def _instance(proposer: Any, tokens: int, p_law: tuple, q_law: tuple) -> Any:
    from ..counterexamples.space import SearchInstance
    if getattr(proposer, "kind", "chain") == "tree":
        return SearchInstance(vocab=len(p_law), family="context_free", target=(p_law,), draft=(q_law,),
                              shape=tuple(proposer.expansion), tokens=tokens, prompt=(), decoding="sample",
                              proposer_kind="tree", sampling=proposer.children, claim=proposer.claim)
    return SearchInstance(vocab=len(p_law), family="context_free", target=(p_law,), draft=(q_law,),
                          shape=(proposer.gamma,), tokens=tokens, prompt=(), decoding="sample",
                          proposer_kind="chain", sampling=proposer.sampling, claim=proposer.claim)


def _smallest(rule: Any, proposer: Any, tokens: int, p_law: tuple, q_law: tuple, inst: Any, rep: Any) -> tuple:
    """A witness at the smallest vocabulary found: tokens merged (masses added) while the exact audit stays biased.

    Then, if more than 2 tokens are left, the concrete prover at vocab 2 (context-free): a refutation there is
    smaller still. Every candidate is an exact replay; the first biased one at each size is kept.
    """
    from ..counterexamples.searching import evaluate
    p, q = list(p_law), list(q_law)
    shrunk = True
    while shrunk and len(p) > 2:
        shrunk = False
        for i in range(len(p) - 1, 0, -1):
            for j in range(i):
                p2 = p[:i] + p[i + 1:]
                q2 = q[:i] + q[i + 1:]
                p2[j] += p[i]
                q2[j] += q[i]
                cand = _instance(proposer, tokens, tuple(p2), tuple(q2))
                r = evaluate(rule, cand)
                if r is not None and r.tv > 0:
                    p, q, inst, rep, shrunk = p2, q2, cand, r, True
                    break
            if shrunk:
                break
    if len(p) > 2:
        prove = _KIT[-1].prove
        try:
            small = prove(rule, proposer=proposer, vocab=2, tokens=tokens, family="context_free", timeout=60)
        except ExactSpecError:
            small = None
        if small is not None and not small.proven:
            w = small.witness
            return w["p"], w["q"], small.counterexample.instance, small.report
    return tuple(p), tuple(q), inst, rep
