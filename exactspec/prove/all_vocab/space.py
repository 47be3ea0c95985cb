"""The layout of named tokens and classes of unnamed tokens, its symbols, its z3 solvers and its factorisations.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from ...errors import ExactSpecError, SolverUnknown
from .. import session as proof_session
from ..field import NEG, NONZERO, OPS, POS, SharedSolver, Space, SymField, SymNum, ZERO
from ..field import arith
from ..field.arith import is_linear
from .state import _SESSION


class _Layout:
    """Named tokens, the predicates, the classes (feasible sign vectors) and draws per class."""

    def __init__(self, named: int, preds: list, draws: int, argmax_q: bool = False) -> None:
        self.named, self.preds, self.draws = named, list(preds), draws
        #: named token 0 is the draft law's argmax (the lowest id among its maximisers): q(t) <= q_0 for every t
        self.argmax_q = argmax_q
        self.classes = _feasible_signs(self.preds)


def _uv() -> tuple:
    import sympy  # type: ignore[import-untyped]  # sympy ships no type information
    return sympy.Symbol("u"), sympy.Symbol("v")


def _total_symbol(who: str, signs: tuple) -> Any:
    """The total ``P`` (``who="p"``) or ``Q`` over the classes whose signs on the first predicates are ``signs``."""
    import sympy  # type: ignore[import-untyped]  # sympy ships no type information
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
    ctx = z3.Context()
    zv = {x: z3.Real(str(x), ctx) for x in syms}
    out = []
    for signs in itertools.product((NEG, ZERO, POS), repeat=len(preds)):
        s = z3.Solver(ctx=ctx)
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
    import sympy  # type: ignore[import-untyped]  # sympy ships no type information
    import z3
    ctx = next(iter(zv.values())).ctx
    terms = []
    for monom, c in sympy.Poly(g, *sorted(zv, key=str)).terms():
        c = sympy.Rational(c)
        t = z3.RealVal(f"{c.p}/{c.q}", ctx)
        for x, e in zip(sorted(zv, key=str), monom):
            if e:
                t = t * (zv[x] if e == 1 else zv[x] ** e)
        terms.append(t)
    return z3.Sum(terms) if len(terms) > 1 else terms[0] if terms else z3.RealVal(0, ctx)


def _linear_homogeneous(g: Any) -> bool:
    """``g`` is ``a * u + b * v`` with ``a``, ``b`` free of ``u``, ``v`` (so it sums over a class's tokens)."""
    import sympy  # type: ignore[import-untyped]  # sympy ships no type information
    u, v = _uv()
    return all(a + b == 1 for a, b in sympy.Poly(g, u, v).monoms())


def _sign_text(s: int) -> str:
    return {NEG: "< 0", ZERO: "= 0", POS: "> 0"}[s]


class _AbsSpace(Space):
    """The symbols of one layout: named entries, class totals, each class's generic and drawn tokens."""

    def __init__(self, layout: _Layout, check_ms: int) -> None:   # noqa: C901 - one pass over the symbols
        from sympy import QQ  # type: ignore[import-untyped]  # sympy ships no type information
        from sympy.polys.fields import field  # type: ignore[import-untyped]  # sympy ships no type information
        import z3
        self.layout = layout
        c, m, K = layout.named, len(layout.classes), layout.draws
        self.vocab: int | str = "all"
        self.positions, self.check_ms = 1, check_ms
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
        proof_session.start(self.K)   # this space's own memos, in this context
        self.gens = gens
        self.ctx = z3.Context()   # the space's own (see Space)
        self.z3vars = [z3.Real(n, self.ctx) for n in names]
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
        # in the base: a branch that drew from the class assumes them (``P_C + Q_C > 0`` with them) in its decisions,
        # without adding them to the cell (:meth:`_AbsDecider._known_assuming`, :meth:`_AbsDecider._sign_of`)
        self.totals_p_num = [SymNum(x) for x in self.totals_p]
        self.totals_q_num = [SymNum(x) for x in self.totals_q]
        self.nonempty_signs = {i: list(self.class_signs[i]) + [c for j, c in strict_totals if j == i]
                               for i in range(m)}

    def _instantiate(self, g: Any, a: Any, b: Any) -> Any:
        """The predicate ``g`` at a token with probabilities ``a``, ``b`` (field elements), in this layout's symbols."""
        import sympy  # type: ignore[import-untyped]  # sympy ships no type information
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
            t = self.K(proof_session.current().QQ(int(c.p), int(c.q)))
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
        import sympy  # type: ignore[import-untyped]  # sympy ships no type information
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
        s = z3.SolverFor("QF_NRA", ctx=self.space.ctx)
        s.set("timeout", self.space.check_ms)
        sign = self.space.z3_sign
        for poly, signs in itertools.chain(self.space.base, known.items()):
            s.add(sign(poly, signs))
        asked = [(m, NONZERO) for m in question[1]] if question[0] == "!=0" else [question]
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
        self.z3, self.space = z3, weakref.proxy(space)   # no cycle through z3 objects (see SharedSolver)
        self.solver = z3.SolverFor("QF_LRA", ctx=space.ctx)
        self.solver.set("timeout", space.check_ms)
        self.base = {poly: signs for poly, signs in space.base}
        self.lits: dict = {}
        for poly, signs in space.base:
            if is_linear(poly):
                self.solver.add(space.z3_sign(poly, signs))

    def lit(self, key: tuple) -> Any:
        b = self.lits.get(key)
        if b is None:
            b = self.lits[key] = self.z3.Bool(f"l{len(self.lits)}", self.space.ctx)
            self.solver.add(self.z3.Implies(b, self.space.z3_sign(*key)))
        return b

    def check(self, known: dict, question: tuple, stats: dict) -> Any:
        z3, space = self.z3, self.space
        stats["linear checks"] = stats.get("linear checks", 0) + 1
        assume, nonlinear = [], []
        asked = [(m, NONZERO) for m in question[1]] if question[0] == "!=0" else [question]
        for poly, signs in asked:
            if is_linear(poly):
                assume.append(self.lit((poly, signs)))
            else:   # the linear part alone, its point checked against the question
                nonlinear.append((poly, signs))
        for poly, signs in known.items():
            if not is_linear(poly):
                nonlinear.append((poly, signs))
            elif self.base.get(poly) != signs:
                assume.append(self.lit((poly, signs)))
        nonlinear += [(p, sg) for p, sg in space.base if not is_linear(p)]
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
def _factors(poly: Any, registry: dict | None = None) -> tuple:
    """``arith.factors`` for the abstraction's long polynomials: trial division by known factors first.

    The factors found divide ``poly`` exactly and each is irreducible (it came out of a full factorisation);
    the cofactor left is factored in full. So the result is ``poly``'s factorisation, as sympy's would be.
    ``registry``: a ring -> the monic irreducible factors met in it, most recent last (the running proof's).
    """
    if registry is None:
        session = _SESSION.get()
        registry = session.irreducible if session is not None else {}
    hit = proof_session.current().factors.get(poly)
    if hit is not None or len(poly) < TRIAL_DIVISION_TERMS:
        return _remember(poly, hit if hit is not None else arith.factors(poly), registry)
    known = registry.get(poly.ring, {})
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
        return _remember(poly, arith.factors(poly), registry)
    if rest.is_ground:
        c, facs = rest.LC, []
    else:
        lc = rest.LC
        csign, facs = _factors(rest.monic(), registry)
        c = lc * csign
    counts: dict = {}
    for f in found:
        counts[f] = counts.get(f, 0) + 1
    merged = dict(facs)
    for f, e in counts.items():
        merged[f] = merged.get(f, 0) + e
    hit = proof_session.current().factors[poly] = (POS if c > 0 else NEG, list(merged.items()))
    return _remember(poly, hit, registry)


def _remember(poly: Any, hit: tuple, registry: dict) -> tuple:
    known = registry.setdefault(poly.ring, {})
    for f, _e in hit[1]:
        known.pop(f, None)
        known[f] = True
    return hit


def _space() -> "_AbsSpace":
    """The layout's space of the all-vocabulary proof running in this context."""
    session = _SESSION.get()
    if session is None or session.space is None:
        raise ExactSpecError("internal: an abstract value was used outside its es.prove(vocab='all') run")
    return session.space
