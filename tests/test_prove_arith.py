"""The prover's own rational-function arithmetic and substitution give sympy's results exactly (issue 17).

``arith.FAST`` (``+ - * /`` with gcds of the factors instead of the whole products) must return the
very numerator and denominator sympy's ``FracElement`` operations return (its normalisation: integer
coefficients, no common integer factor, a positive leading coefficient below), and ``arith.compose``
the polynomial sympy's ``compose`` returns: every cell, atom and printed difference rests on them.
"""

from __future__ import annotations

import random

import pytest

import exactspec as es
from exactspec.prove.field import arith

pytest.importorskip("z3")
from sympy import QQ  # noqa: E402
from sympy.polys.fields import field  # noqa: E402

#: sympy's own operations on rational functions: the plain reference
SYMPY_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}

K, *X = field("a,b,c,d", QQ)
R = K.ring


def _poly(rng: random.Random, terms: int, degree: int):
    out = R.zero
    for _ in range(terms):
        m = R.one
        for _ in range(rng.randint(0, degree)):
            m *= R.gens[rng.randrange(len(R.gens))]
        out += m * QQ(rng.randint(-6, 6), rng.randint(1, 4))
    return out


def _frac(rng: random.Random, shared: list):
    """A random rational function whose numerator and denominator share factors with others (``shared``)."""
    num, den = _poly(rng, rng.randint(1, 4), 2), _poly(rng, rng.randint(1, 3), 2)
    for _ in range(rng.randint(0, 2)):
        f = rng.choice(shared)
        if rng.random() < 0.5:
            num *= f
        else:
            den *= f
    if not den:
        den = R.one
    x = K.new(num, den)   # sympy's own lowest terms
    return x ** -1 if x and rng.random() < 0.2 else x   # a negative power: a denominator led by a negative term


def _same(mine, theirs) -> bool:
    return mine.numer == theirs.numer and mine.denom == theirs.denom


def test_fast_operations_are_sympys():
    rng = random.Random(17)
    a, b, c, d = R.gens
    shared = [a - b, a + b + c, c * d - a, a - d + 1, b, QQ(1, 2) * a + QQ(2, 3) * c, a ** 2 + b * c - 1]
    cases = [(K(0), K(a)), (K(a), K(0)), (K(0), K(0)), (K(1), K(a - b) / K(c)), (K(a) / K(a - b), K(b) / K(a - b)),
             (K(a) / K(a - b), K(b) / (K(a - b) ** 2)), (K(a) / K(2), K(b) / K(3)), (K(a - b) / K(c), K(c) / K(a - b))]
    cases += [(_frac(rng, shared), _frac(rng, shared)) for _ in range(200)]
    for x, y in cases:
        for tag, ref in SYMPY_OPS.items():
            if tag == "/" and not y:
                with pytest.raises(ZeroDivisionError):
                    arith.FAST[tag](x, y)
                continue
            assert _same(arith.FAST[tag](x, y), ref(x, y)), (tag, x, y)
        assert _same(arith.FAST["-"](x, x), x - x)
    x, y = cases[-1]
    assert str(arith.FAST["+"](x, y).as_expr()) == str((x + y).as_expr())   # printed the same


def test_compose_is_sympys():
    rng = random.Random(4)
    a, b, c, d = R.gens
    subs = [[(a, b + c * QQ(1, 2) - 1)], [(a, 1 - b - c - d), (b, c - d)], [(d, QQ(3, 5) * a)], [(c, R.zero)]]
    for _ in range(100):
        p = _poly(rng, rng.randint(1, 12), 4)
        for s in subs:
            assert arith.compose(p, s) == p.compose(list(s))


def test_a_proof_meets_only_sympys_results(monkeypatch):
    # speculative_sampling at vocab 3, gamma 2, 2 tokens: every operation and substitution of the proof is checked
    fast, compose, seen = dict(arith.FAST), arith.compose, {"ops": 0, "compose": 0}

    def checked(tag):
        def op(x, y):
            mine = fast[tag](x, y)
            assert _same(mine, SYMPY_OPS[tag](x, y)), (tag, x, y)
            seen["ops"] += 1
            return mine
        return op

    def checked_compose(p, s):
        mine = compose(p, s)
        assert mine == p.compose(list(s))
        seen["compose"] += 1
        return mine

    monkeypatch.setattr(arith, "FAST", {tag: checked(tag) for tag in fast})
    monkeypatch.setattr(arith, "compose", checked_compose)
    res = es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(2), vocab=3, tokens=2, workers=1)
    assert res.proven and len(res.cells) == 103
    assert seen["ops"] > 500 and seen["compose"] > 100
