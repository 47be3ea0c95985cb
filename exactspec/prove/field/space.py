"""The symbolic space of one proof: its free variables, the simplex they lie in, z3 and printing.

>>> sp = Space(2, 1, 1000)
>>> sp.names, [str(x) for x in sp.laws["p"][0]]
(['p_0', 'q_0'], ['SymNum(p_0)', 'SymNum(1 - p_0)'])
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .. import session
from .decider import SharedSolver
from .numbers import SymField, SymNum
from .signs import NEG, OPS, POS, ZERO

__all__ = ["Space", "evaluate"]


class Space:
    """The free variables, their base constraints (the simplex), z3 translation and readable printing."""

    def __init__(self, vocab: int, positions: int, check_ms: int) -> None:
        from sympy import QQ  # type: ignore[import-untyped]  # sympy ships no type information
        from sympy.polys.fields import field  # type: ignore[import-untyped]  # sympy ships no type information
        import z3
        self.vocab: int | str = vocab   # "all" in the all-vocabulary abstraction's space
        self.positions, self.check_ms = positions, check_ms
        self.logic = "QF_NRA"   # polynomial constraints over the reals (z3's nlsat; complete, with a timeout per check)
        names = []
        for who in ("p", "q"):
            for j in range(positions):
                for i in range(vocab - 1):
                    names.append(f"{who}{j}_{i}" if positions > 1 else f"{who}_{i}")
        self.names = names
        self.K, *gens = field(",".join(names), QQ)
        session.start(self.K)   # this space's own memos, in this context
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
        v = evaluate(poly, [point[n] for n in self.names])
        return POS if v > 0 else NEG if v < 0 else ZERO

    def value(self, f: Any, point: dict) -> Fraction:
        """The exact value of a rational function at a rational point (a dict name -> Fraction)."""
        args = [point[n] for n in self.names]
        num = evaluate(f.numer, args)
        den = evaluate(f.denom, args)
        return num / den


def evaluate(poly: Any, args: list) -> Fraction:
    total = Fraction(0)
    for monom, c in poly.terms():
        t = Fraction(int(c.numerator), int(c.denominator))
        for a, e in zip(args, monom):
            if e:
                t *= a ** e
        total += t
    return total
