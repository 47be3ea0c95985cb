"""Rational-function arithmetic for the symbolic field, memoised in the proof's session.

``+ - * /`` on sympy rational functions (``FracElement``) with gcds of the factors instead of the whole
products (cross-cancellation; Henrici's sums; known-coprime cases skipped), normalised as sympy
normalises: the result is sympy's own, equal and printed the same (``tests/test_prove_arith.py``
checks it against sympy's operations). Factorisations, powers and substitutions are memoised too.
Every memo lives in the :class:`~exactspec.prove.session.ProofSession` of the running proof.

>>> from sympy import QQ
>>> from sympy.polys.fields import field
>>> from exactspec.prove import session
>>> K, x, y = field("x,y", QQ)
>>> _ = session.start(K)
>>> op("+", x / (x + y), y / (x + y)) == K(1)
True
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd, lcm
from typing import Any, Callable

from ...errors import ExactSpecError
from ..session import current
from .signs import NEG, POS

__all__ = ["op", "FAST", "OPS_LIMIT", "is_linear", "factors", "intern", "product", "power", "compose", "constant",
           "divides"]

#: results of arithmetic on rational functions, shared by every cell of one proof (the same computations
#: recur in every cell: only the decisions differ); each memo is cleared past this many entries
OPS_LIMIT = 500_000


def op(tag: str, a: Any, b: Any) -> Any:
    """``a tag b`` for rational functions (``+ - * /``), memoised for the proof (the atoms' signs and factors
    are kept across new operations; everything is dropped together past ``OPS_LIMIT`` operations)."""
    key = (tag, a, b)
    memo = current()
    hit = memo.ops.get(key)
    if hit is None:
        hit = FAST[tag](a, b)
        if len(memo.ops) >= OPS_LIMIT:
            memo.ops.clear()
            memo.gcds.clear()
            memo.atoms.clear()
            memo.factors.clear()
        memo.ops[key] = hit
    return hit


def is_linear(poly: Any) -> bool:
    """Whether ``poly`` has degree at most 1 (memoised)."""
    linear = current().linear
    hit = linear.get(poly)
    if hit is None:
        hit = True
        for m in poly.itermonoms():
            if sum(m) > 1:
                hit = False
                break
        if len(linear) >= OPS_LIMIT:
            linear.clear()
        linear[poly] = hit
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


def divides(g: Any, f: Any) -> bool:
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
    gcds = current().gcds
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
    if len(gcds) >= OPS_LIMIT:
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
    small = current().small_rings.get((ring, keep))
    if small is None:
        from sympy.polys.rings import PolyRing  # type: ignore[import-untyped]  # sympy ships no type information
        if len(current().small_rings) >= 10_000:
            current().small_rings.clear()
        small = current().small_rings[(ring, keep)] = PolyRing([ring.symbols[i] for i in keep], ring.domain, ring.order)

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


#: the four operations, each sympy's result
FAST: dict[str, Callable[[Any, Any], Any]] = {"+": _fast_add, "-": lambda a, b: _fast_add(a, b, True), "*": _fast_mul, "/": _fast_div}


def factors(poly: Any) -> tuple:
    """``(sign of the constant, [(monic irreducible factor, exponent)])`` of a polynomial, memoised."""
    hit = current().factors.get(poly)
    if hit is None:
        c, facs = poly.factor_list()
        out = []
        for f, e in facs:
            if f.is_ground:
                c *= f.LC ** e
                continue
            c *= f.LC ** e
            out.append((intern(f.monic()), e))
        hit = current().factors[poly] = (POS if c > 0 else NEG, out)
    return hit


def intern(poly: Any) -> Any:
    """The one object kept for polynomials equal to ``poly``."""
    hit = current().interned.get(poly)
    if hit is None:
        if len(current().interned) >= OPS_LIMIT:
            current().interned.clear()
        hit = current().interned[poly] = poly
    return hit


def product(rest: list) -> Any:
    key = tuple(rest)
    hit = current().factors.get(key)
    if hit is None:
        p = rest[0][0] ** rest[0][1]
        for f, e in rest[1:]:
            p = p * f ** e
        hit = current().factors[key] = intern(p.monic())
    return hit


def power(g: Any, n: int) -> Any:
    """``g ** n`` (``n >= 1``), memoised for the proof."""
    key = (g, n)
    hit = current().powers.get(key)
    if hit is None:
        hit = g if n == 1 else power(g, n - 1) * g
        if len(current().powers) >= OPS_LIMIT:
            current().powers.clear()
        current().powers[key] = hit
    return hit


def compose(poly: Any, subs: list) -> Any:
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
                part = part * power(g, n)
        for m, c in part.items():
            v = out.get(m, zero) + c
            if v:
                out[m] = v
            else:
                del out[m]
    return ring.from_dict(out)


def constant(x: Any) -> Any:
    """An int or Fraction as a constant of the current field, memoised."""
    memo = current()
    hit = memo.constants.get(x)
    if hit is None:
        K = memo.K
        if K is None:
            raise ExactSpecError("a symbolic probability was used outside es.prove (no symbolic field in this "
                                 "context: another thread, or after the proof)")
        hit = K(int(x)) if type(x) is not Fraction else K(memo.QQ(x.numerator, x.denominator))
        if len(memo.constants) >= OPS_LIMIT:
            memo.constants.clear()
        memo.constants[x] = hit
    return hit
