"""A plain reference prover: ``es.prove``'s cells the straightforward way, for benchmarks and tests.

It shares no code path with :mod:`exactspec.prove` beyond the engine that runs the rule: its own
symbolic numbers (sympy's ``FracElement`` arithmetic as it is; each operation's result is kept for the
proof, as the path before issue 17 kept it, and nothing else is memoised), its own decider
(a fresh z3 solver for every cell, every question asked of z3's nlsat, atoms factored by sympy at
every use), its own check of each outcome (``output - expected`` cancelled by sympy, the cell's
linear equalities substituted with sympy's ``compose``). It decides the same atoms in the same order
as the prover does (known signs first, then a rational point of the cell, then z3 on each side), so
a proof lists the same cells, paths, atoms and questions; a refutation names the same cell, outcome
and difference (no witness: that is the prover's job, replayed by ``es.audit``).

Slow by design: it is what ``benchmarks.bench_speed_prove`` and ``benchmarks.bench_prove`` time the
prover against, and what ``tests/test_prove_paths.py`` compares the prover's results with. One
reference proof at a time per thread (its state lives in a context variable).

>>> import exactspec as es
>>> res = prove_plain(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1,
...                   family="context_free")
>>> res.verdict, len(res.cells)
('proven', 11)
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field as dc_field
from fractions import Fraction
from typing import Any

from exactspec.fields import Field
from exactspec.models import Model

NEG, ZERO, POS = -1, 0, 1
ALL = frozenset((NEG, ZERO, POS))
OPS = {"<": frozenset((NEG,)), "<=": frozenset((NEG, ZERO)), "==": frozenset((ZERO,)),
       "!=": frozenset((NEG, POS)), ">": frozenset((POS,)), ">=": frozenset((ZERO, POS))}
FLIP = {NEG: POS, POS: NEG, ZERO: ZERO}
NONZERO = frozenset((NEG, POS))
ZERO_ONLY = frozenset((ZERO,))

#: the cell being run in this context (one reference proof's decider)
_CELL: ContextVar["PlainDecider | None"] = ContextVar("prove_baseline_cell", default=None)
#: the results of the running reference proof's operations, by (operation, operands)
_OPS: ContextVar["dict | None"] = ContextVar("prove_baseline_ops", default=None)
_SYMPY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def _op(tag: str, a: Any, b: Any) -> Any:
    """``a tag b`` by sympy, kept for the proof (the same operations recur in every cell)."""
    ops = _OPS.get()
    if ops is None:
        return _SYMPY[tag](a, b)
    key = (tag, a, b)
    hit = ops.get(key)
    if hit is None:
        hit = ops[key] = _SYMPY[tag](a, b)
    return hit


def _decider() -> "PlainDecider":
    dec = _CELL.get()
    if dec is None:
        raise RuntimeError("a plain symbolic number was compared outside prove_plain")
    return dec


class PlainNum:
    """A probability as a sympy rational function; comparisons are decided on the current cell."""

    __slots__ = ("f",)

    def __init__(self, f: Any) -> None:
        self.f = f

    def _other(self, x: Any) -> Any:
        if type(x) is PlainNum:
            return x.f
        K = self.f.field
        if type(x) in (int, bool):
            return K(int(x))
        if type(x) is Fraction:
            from sympy import QQ
            return K(QQ(x.numerator, x.denominator))
        if isinstance(x, float):
            raise TypeError(f"a float ({x!r}) met a symbolic probability")
        return NotImplemented

    def __add__(self, o: Any) -> Any:
        o = self._other(o)
        return NotImplemented if o is NotImplemented else PlainNum(_op("+", self.f, o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        o = self._other(o)
        return NotImplemented if o is NotImplemented else PlainNum(_op("-", self.f, o))

    def __rsub__(self, o: Any) -> Any:
        o = self._other(o)
        return NotImplemented if o is NotImplemented else PlainNum(_op("-", o, self.f))

    def __mul__(self, o: Any) -> Any:
        o = self._other(o)
        return NotImplemented if o is NotImplemented else PlainNum(_op("*", self.f, o))

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        o = self._other(o)
        if o is NotImplemented:
            return NotImplemented
        _nonzero(o)
        return PlainNum(_op("/", self.f, o))

    def __rtruediv__(self, o: Any) -> Any:
        o = self._other(o)
        if o is NotImplemented:
            return NotImplemented
        _nonzero(self.f)
        return PlainNum(_op("/", o, self.f))

    def __neg__(self) -> "PlainNum":
        return PlainNum(-self.f)

    def __pos__(self) -> "PlainNum":
        return self

    def __abs__(self) -> "PlainNum":
        return self if self >= 0 else -self

    def __pow__(self, k: Any) -> "PlainNum":
        if type(k) is not int:
            raise TypeError("a power that is not an integer")
        if k < 0:
            _nonzero(self.f)
        return PlainNum(self.f ** k)

    def _cmp(self, o: Any, op: str) -> Any:
        o = self._other(o)
        if o is NotImplemented:
            return NotImplemented
        return _decider().decide(_op("-", self.f, o), op)

    def __lt__(self, o: Any) -> Any:
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> Any:
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> Any:
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> Any:
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if not isinstance(o, (PlainNum, int, Fraction)):
            return False
        return self._cmp(o, "==")

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __bool__(self) -> bool:
        return _decider().decide(self.f, "!=")

    def __hash__(self) -> int:
        raise TypeError("hash() of a symbolic probability")

    def __repr__(self) -> str:
        return f"PlainNum({self.f.as_expr()})"


def _nonzero(f: Any) -> None:
    if not _decider().decide(f, "!="):
        raise ZeroDivisionError("division by a symbolic quantity that is 0 on this cell")


class PlainField(Field):
    """The field of :class:`PlainNum`."""

    name = "symbolic (plain reference)"
    exact = True
    native = True

    def __init__(self, K: Any) -> None:
        self.K = K
        self.zero, self.one = PlainNum(K(0)), PlainNum(K(1))

    def convert(self, x: Fraction) -> PlainNum:
        from sympy import QQ
        return PlainNum(self.K(QQ(x.numerator, x.denominator)))

    def check(self, x: Any, what: str) -> Any:
        if type(x) is PlainNum:
            return x
        if type(x) is int:
            return PlainNum(self.K(x))
        if type(x) is Fraction:
            return self.convert(x)
        raise TypeError(f"{what} is {x!r}")


class PlainModel(Model):
    """A model handing out tuples of :class:`PlainNum` (one law per position, the last repeated)."""

    def __init__(self, vocab: int, laws: list, order: int | None, name: str, n0: int) -> None:
        super().__init__(vocab, order, name)
        self._laws, self._n0 = laws, n0

    def __call__(self, context: Any = ()) -> tuple:
        if len(self._laws) == 1:
            return self._laws[0]
        if self.order == 1:
            return self._laws[context[-1]]
        return self._laws[min(len(context) - self._n0, len(self._laws) - 1)]

    law = __call__


class PlainSpace:
    """The free variables of the symbolic laws, the simplex they lie in, and their z3 counterparts."""

    def __init__(self, vocab: int, positions: int, check_ms: int) -> None:
        import z3
        from sympy import QQ
        from sympy.polys.fields import field
        self.vocab, self.check_ms = vocab, check_ms
        names = []
        for who in ("p", "q"):
            for j in range(positions):
                for i in range(vocab - 1):
                    names.append(f"{who}{j}_{i}" if positions > 1 else f"{who}_{i}")
        self.names = names
        self.K, *gens = field(",".join(names), QQ)
        if len(names) == 1 and isinstance(gens[0], (list, tuple)):
            gens = list(gens[0])
        self.ctx = z3.Context()
        self.z3vars = [z3.Real(n, self.ctx) for n in names]
        self.field = PlainField(self.K)
        self.laws: dict = {}
        self.base: list = []
        self.atoms: set = set()
        k = 0
        for who in ("p", "q"):
            laws = []
            for _j in range(positions):
                xs = [gens[k + i] for i in range(vocab - 1)]
                k += vocab - 1
                entries = xs + [self.K(1) - sum(xs[1:], xs[0])]
                laws.append(tuple(PlainNum(e) for e in entries))
                for e in entries:
                    poly = e.numer
                    if not poly.is_ground:
                        self.base.append((poly.monic(), OPS[">="] if poly.LC > 0 else OPS["<="]))
            self.laws[who] = laws

    def z3_sign(self, poly: Any, signs: frozenset) -> Any:
        import z3
        terms = []
        for monom, c in poly.terms():
            t = z3.RealVal(f"{int(c.numerator)}/{int(c.denominator)}", self.ctx)
            for i, e in enumerate(monom):
                if e:
                    t = t * (self.z3vars[i] if e == 1 else self.z3vars[i] ** e)
            terms.append(t)
        e = z3.Sum(terms) if len(terms) > 1 else terms[0]
        if not signs:
            return z3.BoolVal(False, self.ctx)
        return z3.Or([e < 0 if s == NEG else e == 0 if s == ZERO else e > 0 for s in sorted(signs)])

    def show(self, poly: Any, signs: frozenset) -> str:
        op = {(-1,): "<", (-1, 0): "<=", (0,): "==", (-1, 1): "!=", (1,): ">", (0, 1): ">="}.get(
            tuple(sorted(signs)), "?")
        return f"{poly.as_expr()} {op} 0"

    def rational_model(self, m: Any) -> dict | None:
        import z3
        pt = {}
        for name, var in zip(self.names, self.z3vars):
            v = m.eval(var, model_completion=True)
            if not z3.is_rational_value(v):
                return None
            try:
                pt[name] = Fraction(v.as_string())
            except ValueError:
                return None
        return pt

    def sign_at(self, poly: Any, point: dict) -> int:
        total = Fraction(0)
        for monom, c in poly.terms():
            t = Fraction(int(c.numerator), int(c.denominator))
            for a, e in zip([point[n] for n in self.names], monom):
                if e:
                    t *= a ** e
            total += t
        return POS if total > 0 else NEG if total < 0 else ZERO


class PlainDecider:
    """One cell: the known signs of its atoms, a z3 solver of its own holding them, and the cells it forks."""

    def __init__(self, space: PlainSpace, start: list, pending: list, stats: dict, point: dict | None) -> None:
        import z3
        self.z3, self.space, self.pending, self.stats, self.point = z3, space, pending, stats, point
        self.known: dict = {}
        self.order: list = []
        self.solver = z3.SolverFor("QF_NRA", ctx=space.ctx)
        self.solver.set("timeout", space.check_ms)
        for poly, signs in space.base:
            self._add(poly, signs, record=False)
        for poly, signs in start:
            self._add(poly, signs)

    def _add(self, poly: Any, signs: frozenset, record: bool = True) -> None:
        old = self.known.get(poly, ALL)
        new = old & signs
        if new == old:
            return
        self.known[poly] = new
        if record:
            self.order.append((poly, new))
        self.solver.add(self.space.z3_sign(poly, new))

    def _check(self, constraints: list) -> Any:
        s = self.solver
        s.push()
        try:
            for c in constraints:
                s.add(c)
            self.stats["z3 checks"] = self.stats.get("z3 checks", 0) + 1
            r = s.check()
            model = s.model() if r == self.z3.sat else None
        finally:
            s.pop()
        if r == self.z3.unknown:
            raise RuntimeError(f"z3 could not decide a check within {self.space.check_ms} ms")
        return r == self.z3.sat, model

    def feasible(self, poly: Any, signs: frozenset) -> tuple:
        ok, model = self._check([self.space.z3_sign(poly, signs)])
        return ok, (self.space.rational_model(model) if ok else None)

    def may_be_nonzero(self, num: Any) -> bool:
        if num.is_zero:
            return False
        if num.is_ground:
            return True
        parts = []
        for f, _e in num.factor_list()[1]:
            if f.is_ground:
                continue
            m = f.monic()
            if self.known.get(m, ALL) == ZERO_ONLY:
                return False
            parts.append(m)
        return self._check([self.space.z3_sign(m, NONZERO) for m in parts])[0]

    def reduce_numer(self, frac: Any) -> Any:
        """The numerator of ``frac`` with the cell's linear equalities substituted, one variable at a time."""
        eqs = [p for p, s in self.known.items() if s == ZERO_ONLY]
        R = self.space.K.ring
        num = frac.numer
        while eqs:
            pick = None
            for k, eq in enumerate(eqs):
                for i, x in enumerate(R.gens):
                    if eq.degree(i) == 1:
                        c = eq.diff(x)
                        if c.is_ground:
                            pick = (k, x, -(eq - c * x) * (1 / c.LC))
                            break
                if pick is not None:
                    break
            if pick is None:
                break
            k, x, g = pick
            del eqs[k]
            num = num.compose([(x, g)])
            eqs = [e.compose([(x, g)]) for e in eqs]
            eqs = [e.monic() for e in eqs if not e.is_zero and not e.is_ground]
            if num.is_zero:
                break
        return num

    def decide(self, frac: Any, op: str) -> bool:
        """The truth of ``frac op 0`` on this cell, forking it where both answers are feasible."""
        num = frac.numer
        if num.is_zero:
            return ZERO in OPS[op]
        poly = num * frac.denom
        sign = POS if poly.LC > 0 else NEG
        if poly.is_ground:
            return sign in OPS[op]
        c, facs = poly.monic().factor_list()
        rest = []
        for f, e in facs:
            c *= f.LC ** e
            if f.is_ground:
                continue
            f = f.monic()
            k = self.known.get(f, ALL)
            if k == frozenset((POS,)) or (e % 2 == 0 and ZERO not in k):
                continue
            if k == frozenset((NEG,)):
                sign = -sign if e % 2 else sign
                continue
            rest.append((f, e))
        sign *= POS if c > 0 else NEG
        if not rest:
            return sign in OPS[op]
        if len(rest) == 1 and rest[0][1] == 1:
            poly = rest[0][0]
        else:
            poly = rest[0][0] ** rest[0][1]
            for f, e in rest[1:]:
                poly = poly * f ** e
            poly = poly.monic()
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
        if s0 is not None and s0 in yes:
            yes_ok, yes_pt = True, point
            no_ok, no_pt = self.feasible(poly, no)
        elif s0 is not None:
            no_ok, no_pt = True, point
            yes_ok, yes_pt = self.feasible(poly, yes)
        else:
            yes_ok, yes_pt = self.feasible(poly, yes)
            if not yes_ok:
                self._add(poly, no)
                return False
            no_ok, no_pt = self.feasible(poly, no)
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
        self.stats["forks"] = self.stats.get("forks", 0) + 1
        self.pending.append((self.order + [(poly, no)], no_pt))
        self._add(poly, yes)
        if point is None or s0 not in yes:
            self.point = yes_pt
        return True


@dataclass
class PlainResult:
    """A reference verdict: ``proven`` with the cells, or ``refuted`` with the first biased cell."""

    verdict: str
    family: str
    cells: list
    paths: int
    atoms: int
    stats: dict = dc_field(default_factory=dict)
    cell: list | None = None
    outcome: tuple | None = None
    difference: str | None = None
    cells_done: int = 0
    seconds: float = 0.0

    @property
    def proven(self) -> bool:
        """Whether every cell keeps the law."""
        return self.verdict == "proven"

    def summary(self) -> str:
        """One line: the verdict, the cells and the seconds."""
        if self.proven:
            return (f"plain reference: PROVEN ({self.family}): {len(self.cells)} cell(s), {self.paths} path(s), "
                    f"{self.atoms} atom(s), {self.seconds:.2f} s")
        return (f"plain reference: REFUTED ({self.family}) on the cell {{{', '.join(self.cell or [])}}}, outcome "
                f"{self.outcome}: difference {self.difference}")


def prove_plain(rule: Any, *, proposer: Any, vocab: int, tokens: int, family: str | None = None,
                prompt: tuple = (), closed_form: bool = True, check_ms: int = 10_000,
                timeout: float | None = None) -> PlainResult:
    """The cells of ``es.prove(rule, ...)`` at a given vocab, the plain way (see the module's docstring).

    ``family=None`` takes :func:`exactspec.prove.default_family`. ``timeout``: seconds, checked between
    cells (``TimeoutError`` past it).

    >>> import exactspec as es
    >>> prove_plain(es.rules.no_bonus, proposer=es.drafts.chain(1), vocab=2, tokens=1).verdict
    'proven'
    """
    from exactspec.prove import default_family
    from exactspec.rules import as_rule
    t0 = time.perf_counter()
    rule = as_rule(rule)
    family = family if family is not None else default_family(vocab, tokens)
    prompt = tuple(prompt) or ((0,) if family == "table" else ())
    positions = {"context_free": 1, "per_position": tokens, "table": vocab}[family]
    order = {"context_free": 0, "per_position": None, "table": 1}[family]
    space = PlainSpace(vocab, positions, check_ms)
    target = PlainModel(vocab, space.laws["p"], order, "p", len(prompt))
    draft = PlainModel(vocab, space.laws["q"], order, "q", len(prompt))
    greedy = rule.claim == "lossless-greedy"
    fld = space.field
    pending: list = [([], None)]
    ops_token = _OPS.set({})
    try:
        return _run_cells(rule, proposer, space, target, draft, fld, prompt, tokens, family, closed_form, greedy,
                          pending, t0, timeout)
    finally:
        _OPS.reset(ops_token)


def _run_cells(rule: Any, proposer: Any, space: PlainSpace, target: PlainModel, draft: PlainModel, fld: PlainField,
               prompt: tuple, tokens: int, family: str, closed_form: bool, greedy: bool, pending: list, t0: float,
               timeout: float | None) -> PlainResult:
    """The cells of :func:`prove_plain`, depth first (last pushed first)."""
    from exactspec.enumerate import Budget
    from exactspec.enumerate.stream import Engine, greedy_sequence, target_law
    stats: dict = {}
    cells: list = []
    paths = 0
    while pending:
        if timeout is not None and time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"prove_plain: past {timeout} s ({len(cells)} cells)")
        start, point = pending.pop()
        dec = PlainDecider(space, start, pending, stats, point)
        token = _CELL.set(dec)
        try:
            eng = Engine(rule, proposer, target, draft, fld, budget=Budget(seconds=None), closed_form=closed_form)
            try:
                out, _ = eng.output(prompt, tokens)
                if greedy:
                    expected = {greedy_sequence(target, prompt, tokens): fld.one}
                else:
                    expected = target_law(target, prompt, tokens, fld, orders=eng._orders)
            finally:
                eng.close()
            stats["step laws"] = stats.get("step laws", 0) + eng.meter.steps
            paths += eng.meter.paths
            for o in sorted(set(out) | set(expected)):
                d = fld.check(out.get(o, 0), "output").f - fld.check(expected.get(o, 0), "expected").f
                if d.numer.is_zero:
                    continue
                stats["reductions"] = stats.get("reductions", 0) + 1
                num = dec.reduce_numer(d)
                if num.is_zero or not dec.may_be_nonzero(num):
                    continue
                return PlainResult("refuted", family, cells, paths, len(space.atoms), stats,
                                   cell=[space.show(p, s) for p, s in dec.order], outcome=o,
                                   difference=str(d.as_expr()), cells_done=len(cells),
                                   seconds=time.perf_counter() - t0)
        finally:
            _CELL.reset(token)
        cells.append([space.show(p, s) for p, s in dec.order])
    stats["cells"] = len(cells)
    return PlainResult("proven", family, cells, paths, len(space.atoms), stats, seconds=time.perf_counter() - t0)
