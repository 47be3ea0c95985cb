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
import weakref
import operator
import time
from contextvars import ContextVar
from fractions import Fraction
from typing import Any, Callable

from ..errors import (AbstractionDisagrees, AbstractionRefused, ExactSpecError, InvalidDistribution, RuleError,
                      UnsupportedSymbolic)
from ._field import (ALL, NEG, OPS, POS, ZERO, Decider, SharedSolver, SolverUnknown, Space, SymField, SymNum,
                     UnsupportedSymbolic, _NONZERO, _is_linear, _op, _set_qq, where)
from . import _field

__all__ = ["AbstractionRefused", "AbstractionDisagrees", "prove_all_vocab"]

#: the most predicates the classes of unnamed tokens may be split by (each split restarts the proof)
MAX_PREDICATES = 6
#: the most tokens one branch may draw from one class (the symbols are made up front; more restarts with more)
MAX_DRAWS = 8


#: the theorem a ``vocab="all"`` proof states (its summary and JSON carry it)
THEOREM = ("for every vocabulary size V >= {min_vocab}, every context-free target p and draft q over V tokens (any "
           "entries, zeros and ties included), {proposer}: the first {tokens} emitted token(s) follow p's own law. "
           "Preconditions, checked while the rule runs: the rule reads a law only at tokens it was handed (drafts, "
           "draws) and through es.laws' vocabulary-wide helpers (normalize, residual, positive_part, acceptance); "
           "it compares tokens only with tokens (==, !=); it uses rng.bernoulli and rng.categorical. Anything else "
           "(iterating, counting or measuring a law, a constant token id, ordering, hashing or printing tokens, "
           "rng.uniform) is refused, never assumed")


def _refuse(what: str) -> Any:
    session = _SESSION.get()
    earlier = "" if session is None or session.inexact is None else f"; before that, the rule {session.inexact}"
    raise AbstractionRefused(f"vocab='all': {what} (at {where()}){earlier}; the all-vocabulary abstraction follows "
                             "per-token arithmetic, comparisons whose answer is the same for every token of a "
                             "class, and vocabulary-wide sums through es.laws; prove at a given vocab instead")


def _inexact(what: str) -> None:
    """Note an observation the abstraction cannot represent exactly for every class size (the first one is kept).

    The run goes on, so that a bias it meets is still found and replayed exactly (a refutation needs no
    abstraction); but no proof is given: :func:`_prove_all_vocab` refuses it, naming ``what`` and the line.
    """
    session = _SESSION.get()
    if session is not None and session.inexact is None:
        session.inexact = f"{what} (at {where()})"


class _Control(Exception):
    """The abstraction's own control flow through a rule's code (never the rule's error)."""


class _Refine(_Control):
    """A comparison on an unnamed token's probabilities has different answers across a class: split by it."""

    def __init__(self, pred: Any) -> None:
        super().__init__(str(pred))
        self.pred = pred


class _MoreDraws(_Control):
    """A branch draws more tokens from one class than the layout has symbols for: restart with more."""


class _EmptyCell(_Control):
    """The cell holds no instance once a class's signs are taken into account: nothing to prove there."""


class _DeadBranch(_Control):
    """The classes this branch drew from cannot all have mass on the cell: the branch weighs 0 there."""


class _Session:
    """One all-vocabulary proof's state, held in a context variable (:data:`_SESSION`) while it runs.

    ``kit``: what the concrete prover hands down; ``space``: the layout's symbols (None between layouts);
    ``inexact``: the first observation the abstraction cannot represent exactly (no proof is given then);
    ``irreducible``: the irreducible factors met, by ring (:func:`_factors`).
    """

    def __init__(self, kit: Any) -> None:
        self.kit = kit
        self.space: Any = None
        self.hook: Any = None
        self.run: Any = None
        self.inexact: str | None = None
        self.inhabited: tuple | None = None   # the classes the branch's last iteration over a law saw
        self.irreducible: dict = {}


_SESSION: ContextVar[_Session | None] = ContextVar("exactspec_all_vocab_session", default=None)


def _space() -> "_AbsSpace":
    session = _SESSION.get()
    if session is None or session.space is None:
        raise ExactSpecError("internal: an abstract value was used outside its es.prove(vocab='all') run")
    return session.space


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
    import sympy
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
        self.z3, self.space = z3, weakref.proxy(space)   # no cycle through z3 objects (see SharedSolver)
        self.solver = z3.SolverFor("QF_LRA", ctx=space.ctx)
        self.solver.set("timeout", space.check_ms)
        self.base = {poly: signs for poly, signs in space.base}
        self.lits: dict = {}
        for poly, signs in space.base:
            if _is_linear(poly):
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
        asked = [(m, _NONZERO) for m in question[1]] if question[0] == "!=0" else [question]
        for poly, signs in asked:
            if _is_linear(poly):
                assume.append(self.lit((poly, signs)))
            else:   # the linear part alone, its point checked against the question
                nonlinear.append((poly, signs))
        for poly, signs in known.items():
            if not _is_linear(poly):
                nonlinear.append((poly, signs))
            elif self.base.get(poly) != signs:
                assume.append(self.lit((poly, signs)))
        nonlinear += [(p, sg) for p, sg in space.base if not _is_linear(p)]
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
    """``_field._factors`` for the abstraction's long polynomials: trial division by known factors first.

    The factors found divide ``poly`` exactly and each is irreducible (it came out of a full factorisation);
    the cofactor left is factored in full. So the result is ``poly``'s factorisation, as sympy's would be.
    ``registry``: a ring -> the monic irreducible factors met in it, most recent last (the running proof's).
    """
    if registry is None:
        session = _SESSION.get()
        registry = session.irreducible if session is not None else {}
    hit = _field._memo().factors.get(poly)
    if hit is not None or len(poly) < TRIAL_DIVISION_TERMS:
        return _remember(poly, hit if hit is not None else _field._factors(poly), registry)
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
        return _remember(poly, _field._factors(poly), registry)
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
    hit = _field._memo().factors[poly] = (POS if c > 0 else NEG, list(merged.items()))
    return _remember(poly, hit, registry)


def _remember(poly: Any, hit: tuple, registry: dict) -> tuple:
    known = registry.setdefault(poly.ring, {})
    for f, _e in hit[1]:
        known.pop(f, None)
        known[f] = True
    return hit


# -- the decider: answers about an unnamed token must hold for every token of its class ----------------------
class _AbsDecider(Decider):
    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        if self._shared is None:
            raise ExactSpecError("vocab='all' needs the prover's shared solver (_field.SHARED_SOLVER)")
        self.member_signs: dict = {}   # a factor in a class's token symbols -> its sign at every token of the class
        self.assumed: frozenset = frozenset()   # the classes the running branch drew from
        self._assuming: dict = {}

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


# -- values: class entries, tokens, laws ---------------------------------------------------------------------
# What a rule can observe under vocab="all", and how (the soundness argument, docs/proofs-scale-out.md, follows
# this list): a law only at a token it holds (``p[x]``) and through es.laws' helpers (the hook below); a token only
# by ``==`` / ``!=`` with another token. Everything else on a law or a token either is refused at once (no value
# to go on with) or makes the run inexact (:func:`_inexact`): it goes on with a value, to find a bias that an
# exact replay confirms, but no proof is given.
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
        return x if x is NotImplemented else ClassEntry(_op("+", self.f, x), self.cls)

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

    def __init__(self, cls: int, k: int, run: "_Run") -> None:
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
        if isinstance(x, ClassEntry):
            _refuse(f"uses an entry of a law at a class of unnamed tokens as {what} (one number for a class)")
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
            dec = _field.active()
            dec.assumed = dec.assumed | {i}   # the branch holds a token of class i: it has one where it weighs
            self.weight = self.weight * SymNum(_space().to_draw(x.f, i, k))
            return UnnamedToken(i, k, self)
        return NamedToken(value)

    draw_now = categorical

    def _support(self, law: Any) -> list:
        """``[(token or ("class", i, entry), probability or None)]`` of a law, validated (once per law and cell)."""
        fld = self.fld
        space = _space()
        c = self.named
        if isinstance(law, AbstractLaw):
            entries: Any = law.entries
        elif isinstance(law, (list, tuple)):   # built by the rule: from a law's entries (an inexact run) or not
            entries = _as_law(law, c, "draws from")
        else:
            _refuse(f"draws from a {type(law).__name__}, not a law")
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
        prob = self.number(prob, "the probability passed to rng.bernoulli")
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
            self._drafts.append(NamedToken(0) if self._argmax else self._run.categorical(self._q))
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
                if isinstance(tok, NamedToken):
                    tok = tok.name
                elif isinstance(tok, int) and not isinstance(tok, bool):
                    _inexact(f"emits the constant token id {tok} (a special token id is not symmetric)")
                    if not 0 <= tok < c:
                        _refuse(f"emits the token id {tok}: ids past the named tokens stand for classes")
                else:
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
    session = _SESSION.get()
    assert session is not None
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
        session.run, session.inhabited = run, None
        session.hook.residuals.clear()
        dec = _field.active()
        dec.assumed = frozenset()
        try:
            emitted, named_only = _run_branch(rule, run, proposer, tree, gamma, p, q, argmax, claim, tokens, c)
        except _DeadBranch:
            branches += 1
            dec.stats["dead branches"] = dec.stats.get("dead branches", 0) + 1
            continue
        except (_Control, ExactSpecError, KeyboardInterrupt):
            raise
        except BaseException as exc:   # the rule's own error (SystemExit included): exit 2, as the concrete prover
            if _tool_error(exc):   # raised inside exactspec's prover, sympy or z3: exactspec's own bug, as it is
                raise
            if session.inexact is not None:   # after an inexact observation its values are the abstraction's
                raise AbstractionRefused(
                    f"vocab='all': the rule {session.inexact}, and then raised {type(exc).__name__}: {exc} "
                    f"(at {_raised_at(exc)}) on values that stand for a class of tokens, not concrete ones; "
                    "prove at a given vocab instead") from exc
            raise RuleError(f"rule {rule.name} raised {type(exc).__name__}: {exc} under es.prove(vocab='all') "
                            f"(at {_raised_at(exc)})", rule=rule.name) from exc
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


def _tool_error(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside exactspec's prover or engine, sympy or z3 (not by the rule's own code)."""
    import os
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    name = os.path.abspath(tb.tb_frame.f_code.co_filename)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tool = (os.path.join(pkg, "prove") + os.sep, os.path.join(pkg, "enumerate") + os.sep,
            os.sep + "sympy" + os.sep, os.sep + "z3" + os.sep)
    return any(t in name if t.startswith(os.sep + "sympy") or t.startswith(os.sep + "z3") else name.startswith(t)
               for t in tool)


def _raised_at(exc: BaseException) -> str:
    """``file:line in function`` where ``exc`` was raised: its traceback's innermost frame."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "<unknown>"
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"


# -- the proof ------------------------------------------------------------------------------------------------
def prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                    kit: Any, progress: Callable[[int, int], None] | None = None) -> Any:
    """The body of ``es.prove(rule, vocab="all", ...)`` (see :func:`exactspec.prove`): chain and i.i.d. tree rules.

    ``kit``: the concrete prover's ``Proof``, ``Refutation``, ``prove``, ``rational_point`` and
    ``forget_symbolic_caches``, handed down by :func:`exactspec.prove` (which imports this module). The
    proof's state lives in a :class:`_Session` in a context variable, and es.laws' hook in another
    (:data:`exactspec.laws.ABSTRACT`): nothing of the process is switched, so other threads and other code
    are untouched.

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab="all", tokens=1).proven
    True
    """
    token = _SESSION.set(_Session(kit))
    try:
        return _prove_all_vocab(rule, proposer, tokens, timeout=timeout, check_ms=check_ms, kit=kit,
                                progress=progress)
    finally:
        _SESSION.reset(token)


def _prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                     kit: Any, progress: Any) -> Any:
    from ..errors import BudgetExceeded
    Proof, _forget_symbolic_caches = kit.Proof, kit.forget_symbolic_caches
    session = _SESSION.get()
    assert session is not None
    t0 = time.perf_counter()
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
            session.space = session.hook = session.run = None
        break
    cells, paths, space, found = res
    ref = None if found is None else _replay(rule, proposer, tokens, found, t0)
    assumptions = {"family": "context_free", "family_source": "given", "vocab": "all", "min_vocab": 2,
                   "abstract_from": named, "smaller_vocabularies": {},
                   "tokens": tokens, "prompt": [], "proposer": proposer.describe(), "expected": "target",
                   "named_tokens": named, "classes": space.describe_classes(),
                   "variables": list(space.names), "closed_form": False,
                   "abstraction": "exchangeable unnamed tokens (docs: proofs-scale-out, every vocabulary size)"}
    if ref is not None:
        ref.assumptions, ref.seconds = assumptions, time.perf_counter() - t0
        return ref
    if session.inexact is not None:   # no bias met, but the run observed what the abstraction cannot represent
        raise AbstractionRefused(
            f"vocab='all': no proof for {rule.name}: the rule {session.inexact}. The abstraction stands for any "
            "number of unnamed tokens (none included) and for tokens up to renaming, so that is not exact for "
            "every vocabulary size; the run found no bias (a bias is replayed exactly and reported). Prove at a "
            "given vocab instead (es.prove(..., vocab=3))")
    small: dict = {}
    for vocab in range(2, named):   # the abstraction needs `named` distinct tokens: smaller vocabularies, concretely
        left = None if deadline is None else max(deadline - time.perf_counter(), 1.0)
        concrete = kit.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family="context_free",
                             timeout=left)
        if not concrete.proven:
            concrete.assumptions = dict(concrete.assumptions, vocab_asked="all")
            return concrete
        small[vocab] = f"proven by es.prove at vocab {vocab} ({len(concrete.cells)} cells)"
    assumptions["smaller_vocabularies"] = small
    assumptions["tripwire"] = _tripwire(rule, proposer, tokens, named, deadline, kit)
    assumptions["theorem"] = THEOREM.format(min_vocab=2, proposer=proposer.describe(), tokens=tokens)
    stats["cells"] = len(cells)
    return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(space.atoms), assumptions=assumptions,
                 seconds=time.perf_counter() - t0, stats=stats)


#: the tripwire's exact audits: this many random instances at each vocabulary size
TRIPWIRE_INSTANCES = 3
#: ... at these vocabulary sizes
TRIPWIRE_VOCABS = (2, 3, 4, 5, 6)
#: ... and the concrete prover at these (those below the abstraction's named tokens are part of the proof itself)
TRIPWIRE_PROVER_VOCABS = (2, 3)


def _tripwire_laws(rng: Any, vocab: int, kind: int) -> tuple:
    """A random rational ``(p, q)`` pair at ``vocab``: ``kind`` 0 zeros and ties, 1 ``p == q``, 2 disjoint-ish."""
    def law(zeros: int, tie: bool) -> tuple:
        w = [rng.randint(1, 6) for _ in range(vocab)]
        for i in rng.sample(range(vocab), min(zeros, vocab - 1)):
            w[i] = 0
        if tie and vocab >= 2:
            a, b = rng.sample(range(vocab), 2)
            w[b] = w[a]
        if not any(w):
            w[rng.randrange(vocab)] = 1
        s = sum(w)
        return tuple(Fraction(x, s) for x in w)
    if kind == 1:
        p = law(rng.randint(0, 1), True)
        return p, p
    if kind == 2:
        p = law(vocab // 2, False)
        q = tuple(Fraction(0) if x else Fraction(1) for x in p)
        return p, tuple(x / sum(q) for x in q)
    return law(rng.randint(0, 1), True), law(rng.randint(0, 1), True)


def _tripwire(rule: Any, proposer: Any, tokens: int, named: int, deadline: float | None, kit: Any) -> dict:
    """Exact checks the proof must agree with, run before it is reported: a check on the prover, not a proof.

    The exact engine on random rational laws at vocab 2..6 (zeros, ties, ``p == q``, disjoint supports), and
    the concrete prover at vocab 2 and 3. A bias or a refutation where the abstraction proved the rule is
    :class:`AbstractionDisagrees` (exit 3, with the instance), never a verdict.
    """
    import random
    from ..counterexamples.searching import evaluate
    rng = random.Random(f"es.prove tripwire {rule.name} {proposer.describe()} {tokens}")
    audited = 0
    for vocab in TRIPWIRE_VOCABS:
        for kind in range(TRIPWIRE_INSTANCES):
            p, q = _tripwire_laws(rng, vocab, kind)
            inst = _instance(proposer, tokens, p, q)
            rep = evaluate(rule, inst)
            if rep is None or rep.tv != 0:
                what = "raised" if rep is None else f"is biased there (TV {rep.tv})"
                raise AbstractionDisagrees(
                    f"internal error of es.prove(vocab='all'): the abstraction proved {rule.name}, but the exact "
                    f"engine at vocab {vocab}, p = {p}, q = {q}, {proposer.describe()}, {tokens} token(s) finds it "
                    f"{what}; not a verdict (please report it with this instance)", instance=inst)
            audited += 1
    proven = {}
    for vocab in TRIPWIRE_PROVER_VOCABS:
        if vocab < named:
            continue   # part of the proof itself (concretely, above)
        left = None if deadline is None else max(deadline - time.perf_counter(), 1.0)
        concrete = kit.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family="context_free",
                             timeout=left)
        if not concrete.proven:
            raise AbstractionDisagrees(
                f"internal error of es.prove(vocab='all'): the abstraction proved {rule.name}, but es.prove at vocab "
                f"{vocab} refutes it: {concrete.summary()}; not a verdict (please report it)",
                instance=concrete.counterexample.instance)
        proven[vocab] = f"proven by es.prove at vocab {vocab} ({len(concrete.cells)} cells)"
    return {"what": "a check on the prover, not part of the proof", "audits": audited,
            "audit_vocabs": list(TRIPWIRE_VOCABS), "concrete_proofs": proven}


def _prove_layout(rule: Any, proposer: Any, layout: _Layout, tokens: int, check_ms: int, deadline: Any,
                  timeout: Any, stats: dict, progress: Any, t0: float) -> tuple:
    from .. import laws
    space = _AbsSpace(layout, check_ms)
    session = _SESSION.get()
    assert session is not None
    session.space, session.hook = space, _Hook(space)
    hooked = laws.ABSTRACT.set(session.hook)
    try:
        return _run_cells(rule, proposer, space, tokens, deadline, timeout, stats, progress, t0)
    finally:
        laws.ABSTRACT.reset(hooked)


def _run_cells(rule: Any, proposer: Any, space: "_AbsSpace", tokens: int, deadline: Any, timeout: Any,
               stats: dict, progress: Any, t0: float) -> tuple:
    from ..errors import BudgetExceeded
    layout = space.layout
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


def _kit() -> Any:
    session = _SESSION.get()
    assert session is not None
    return session.kit


def _refute_all(rule: Any, proposer: Any, space: _AbsSpace, dec: Decider, d: Any, o: tuple, tokens: int,
                t0: float, cells_done: int) -> dict:
    """A rational point of the cell where the output differs, as concrete laws: each class one token (replayed
    later, by :func:`_replay`, once the abstraction is switched off)."""
    _rational_point = _kit().rational_point
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
    from ..counterexamples.searching import rule_reference, evaluate
    Refutation = _kit().Refutation
    p_law, q_law, cell = found["p"], found["q"], found["cell"]
    inst = _instance(proposer, tokens, p_law, q_law)
    rep = evaluate(rule, inst)
    session = _SESSION.get()
    if (rep is None or not rep.tv > 0) and session is not None and session.inexact is not None:
        raise AbstractionRefused(f"vocab='all': no verdict for {rule.name}: the rule {session.inexact}; the bias "
                                 "the abstraction met there did not replay in the exact engine (each class of unnamed "
                                 f"tokens as one token, vocab {len(p_law)}); prove at a given vocab instead")
    if rep is None or not rep.tv > 0:
        raise AbstractionDisagrees(f"internal error of es.prove(vocab='all'): its witness for {rule.name} (each class "
                                   f"of unnamed tokens as one token, vocab {len(p_law)}) did not replay as a bias in "
                                   f"the exact engine: undecided, not a verdict (cell: {', '.join(cell)})",
                                   instance=inst)
    p_law, q_law, inst, rep = _smallest(rule, proposer, tokens, p_law, q_law, inst, rep)
    ce = Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                        expected=dict(rep.expected), tv=rep.tv,
                        space=f"es.prove (context_free, every vocab; witness at vocab {len(p_law)})",
                        rule_ref=rule_reference(rule))
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
        prove = _kit().prove
        try:
            small = prove(rule, proposer=proposer, vocab=2, tokens=tokens, family="context_free", timeout=60)
        except ExactSpecError:
            small = None
        if small is not None and not small.proven:
            w = small.witness
            return w["p"], w["q"], small.counterexample.instance, small.report
    return tuple(p), tuple(q), inst, rep
