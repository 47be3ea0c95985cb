"""Pending draws held jointly (:mod:`exactspec.samplers.randomness.joint_draws`): exact tables, decisions, reads.

Every expected value here is derived by hand (small rows) or by a second, simpler method: the joint law of a
few draws written out as a product of their rows, summed over by brute force (:func:`_brute`), against which the
laws an enumeration of a joint's forks gives are compared with ``==``.
"""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import pytest

from exactspec.enumerate.rng import PathRng, enumerate_program
from exactspec.fields import get_field
from exactspec.samplers.randomness import joint_draws
from exactspec.samplers.randomness.joint_draws import Joint, join, spread
from exactspec.samplers.torch_draws.lazy_draws import PendingDraw

FIELD = get_field(backend="python")

A = (F(1, 2), F(1, 3), F(1, 6))                      # the first draw's row
B = {0: (F(1, 4), F(3, 4), F(0)), 1: (F(0), F(1, 2), F(1, 2)), 2: (F(1), F(0), F(0))}    # rows of b given a


@pytest.fixture(params=["auto", "python"])
def backend(request, monkeypatch):
    """The joint's own arithmetic on gmpy2's mpq (where installed: ``auto``) and on Fractions: the same laws."""
    from exactspec.fields import FractionField
    f = FractionField(backend=request.param)
    for name, value in (("_FIELD", f), ("_Q", f.Q), ("_ZERO", f.Q(0)), ("_ONE", f.Q(1)), ("_q", f.convert),
                        ("_out", f.export)):
        monkeypatch.setattr(joint_draws, name, value)
    return request.param


def _rng(stack=None):
    return PathRng((), F(1), FIELD, [] if stack is None else stack, {})


def _chain(rng):
    """a ~ A; b ~ B[a] (a row indexed by a, not computed yet); c ~ (1/3, 2/3) independent."""
    a = PendingDraw.of_law(rng, A)
    b = PendingDraw.of_law(rng, lambda: pytest.fail("b's law computed by reading a"))
    b.given = (((a, 0),), lambda v: B[v[0]])
    c = PendingDraw.of_law(rng, (F(1, 3), F(2, 3)))
    return a, b, c


def _brute():
    """The joint law of (a, b, c), written out."""
    return {(x, y, z): A[x] * B[x][y] * (F(1, 3), F(2, 3))[z]
            for x, y, z in itertools.product(range(3), range(3), range(2)) if A[x] * B[x][y]}


def test_join_holds_the_draws_and_what_their_laws_depend_on_with_their_exact_joint_law(backend):
    rng = _rng()
    a, b, c = _chain(rng)
    j = join([(b, 0), (c, 0)])
    assert [m for m in j.members] == [a, b, c]        # a joined: b's row is indexed by it
    assert j.law() == _brute()
    assert sum(j.law().values()) == 1
    assert a.joint is j and b.joint is j and c.joint is j and not any(d.drawn for d in (a, b, c))
    assert j.marginal(b) == tuple(sum(p for (x, y, z), p in _brute().items() if y == v) for v in range(3))
    assert a.law_of_one() == A and b.law_of_one() == j.marginal(b)
    assert all(type(x) is F for x in j.marginal(b)) and all(type(p) is F for p in j.law().values())
    assert j.support(b) == [0, 1, 2] and rng._pos == 0                  # nothing drawn, nothing forked


def test_a_decision_forks_two_ways_with_the_exact_mass_of_each_answer_and_keeps_the_assignments_that_give_it(backend):
    def program(rng):
        a, b, c = _chain(rng)
        j = join([(b, 0), (c, 0)])
        answer = j.decide({w: w[0] != w[1] for w in j.table})          # a != b
        return (answer, a.values()[0], b.values()[0], c.values()[0])
    law = enumerate_program(program, FIELD)
    expect = {}
    for (x, y, z), p in _brute().items():
        key = (x != y, x, y, z)
        expect[key] = expect.get(key, 0) + p
    assert law == expect


def test_a_decision_with_a_chance_per_assignment_weights_the_assignments_by_it(backend):
    chance = {0: F(1, 5), 1: F(1), 2: F(0)}          # P(yes | b)

    def program(rng):
        a, b, _ = _chain(rng)
        j = join([(b, 0)])
        answer = j.decide({w: chance[w[1]] for w in j.table})
        return (answer, a.values()[0], b.values()[0])
    law = enumerate_program(program, FIELD)
    expect = {}
    for (x, y, z), p in _brute().items():
        for ans, q in ((True, chance[y]), (False, 1 - chance[y])):
            if q:
                expect[(ans, x, y)] = expect.get((ans, x, y), 0) + p * q
    assert law == expect


def test_a_certain_answer_forks_nothing_and_changes_nothing():
    rng = _rng()
    a, b, _ = _chain(rng)
    j = join([(b, 0)])
    before = dict(j.table)
    assert j.decide({w: True for w in j.table}) is True and j.table == before and rng._pos == 0
    assert j.decide({w: F(0) for w in j.table}) is False and j.table == before and rng._pos == 0


def test_a_read_draws_from_the_marginal_and_conditions_the_others(backend):
    rng = _rng()
    stack = rng._stack
    a, b, _ = _chain(rng)
    join([(b, 0)])
    v = b.values()[0]                                 # the first value of b's marginal: 0, with a = 0 or a = 2
    mass = A[0] * B[0][0] + A[2] * B[2][0]
    assert v == 0 and rng.weight == mass and rng._pos == 1
    assert [w for _, w in stack] == [A[0] * B[0][1] + A[1] * B[1][1], A[1] * B[1][2]]   # b = 1, b = 2 pushed
    assert not a.drawn and a.joint is None            # a alone: its law given b = 0
    assert a.law == (A[0] * B[0][0] / mass, F(0), A[2] * B[2][0] / mass) == (F(3, 7), F(0), F(4, 7))
    assert a.values() == [0] and rng.weight == A[0] * B[0][0]      # read: a fork of its own


def test_a_member_left_with_one_value_is_drawn_with_it_without_a_fork():
    rng = _rng()
    a, b, c = _chain(rng)
    join([(b, 0), (c, 0)])
    assert a.values() == [0] and rng._pos == 1
    assert b.joint is not None and b.values() == [0] and rng._pos == 2
    rng2 = _rng()
    a, b, c = _chain(rng2)
    j = join([(b, 0), (c, 0)])
    j.decide({w: w[0] == 2 for w in j.table})         # a == 2 (mass 1/6): b's row given a = 2 is certain
    assert a.drawn and a.values() == [2] and b.drawn and b.values() == [0] and rng2._pos == 1
    assert c.joint is None and c.law == (F(1, 3), F(2, 3))     # c alone, as it was


def test_a_lone_member_gets_its_marginal_as_an_ordinary_law(backend):
    rng = _rng()
    a, b, _ = _chain(rng)
    j = join([(b, 0)])
    j.decide({w: w[1] == 1 for w in j.table})        # b == 1: a is 0 or 1, b drawn (one value)
    assert b.drawn and b.values() == [1] and a.joint is None and not a.drawn
    mass = A[0] * B[0][1] + A[1] * B[1][1]
    assert a.law == (A[0] * B[0][1] / mass, A[1] * B[1][1] / mass, F(0)) and sum(a.law) == 1
    assert a.law_of_one() == a.law
    assert all(type(x) is F for x in a.law)          # handed out as Fractions, whatever the joint computes with


def test_joints_met_are_merged_into_their_product(backend):
    rng = _rng()
    a, b, c = _chain(rng)
    j1 = join([(b, 0)])
    d = PendingDraw.of_law(rng, (F(1, 2), F(1, 2)))
    j2 = join([(c, 0), (d, 0)])
    j = join([(a, 0), (d, 0)])
    assert j is not j1 and j is not j2 and [m for m in j.members] == [a, b, c, d]
    assert j.law() == {(x, y, z, t): p * F(1, 2) for (x, y, z), p in _brute().items() for t in range(2)}
    assert all(m.joint is j for m in (a, b, c, d))
    assert join([(b, 0)]) is j                        # one joint, nothing new: itself


@pytest.mark.parametrize("case", ["other rng", "inexact field", "several samples", "too many", "law unknown"])
def test_a_join_that_does_not_apply_returns_none_and_leaves_the_draws_as_they_were(case, monkeypatch):
    rng = _rng()
    a, b, c = _chain(rng)
    if case == "other rng":
        cells = [(b, 0), (PendingDraw.of_law(_rng(), A), 0)]
    elif case == "inexact field":
        fl = PathRng((), 1.0, get_field("float"), [], {})
        cells = [(PendingDraw.of_law(fl, (0.5, 0.5)), 0), (PendingDraw.of_law(fl, (0.5, 0.5)), 0)]
    elif case == "several samples":
        two = PendingDraw(rng, (F(1), F(1), F(1)), (F(1, 3),) * 3, 2, False)
        cells = [(b, 0), (two, 1)]
    elif case == "too many":
        monkeypatch.setattr(joint_draws, "LIMIT", 5)
        cells = [(b, 0), (c, 0)]
    else:
        cells = [(b, 0), (PendingDraw.of_law(rng, lambda: A), 0)]      # a law computed on its read, no row given
    assert join(cells) is None
    assert all(d.joint is None for d in (a, b, c)) and rng._pos == 0


def test_spread_gives_the_returned_draws_joint_law_their_ancestors_summed_out(backend):
    rng = _rng()
    a, b, c = _chain(rng)
    law = dict(spread([b, c], 100))
    expect = {}
    for (x, y, z), p in _brute().items():
        expect[(y, z)] = expect.get((y, z), 0) + p
    assert law == expect and rng._pos == 0


def test_spread_beyond_the_limit_draws_the_earliest_for_real(backend):
    def program(rng):
        a, b, c = _chain(rng)
        out = spread([a, b, c], 3)                    # 6 combinations over (b, c) given a > 3: a drawn first... and b
        assert len(out) <= 3
        return tuple((vals, p) for vals, p in out)
    runs = enumerate_program(program, FIELD)
    law = {}
    for outs, w in runs.items():
        for vals, p in outs:
            law[vals] = law.get(vals, 0) + w * (1 if p is None else p)
    assert law == _brute()


def test_a_joint_of_one_certain_member_draws_it():
    d = PendingDraw.of_law(None, (F(0), F(1)))
    j = Joint(None, [d], [2], {(1,): F(1)})
    j._keep(j.table)
    assert d.drawn and d.values() == [1] and d.joint is None


# -- any sequence of decisions and reads: the law of the answers and values is the brute-force one ----------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_PROB = st.fractions(min_value=0, max_value=1, max_denominator=7)


def _row(n):
    """A random exact row of ``n`` values (at least one positive), normalised."""
    return st.lists(st.integers(0, 3), min_size=n, max_size=n).filter(any).map(
        lambda w: tuple(F(x, sum(w)) for x in w))


@st.composite
def _programs(draw):
    n = draw(st.integers(2, 3))
    a_row = draw(_row(n))
    b_rows = [draw(_row(n)) for _ in range(n)]            # b's law given a
    c_row = draw(_row(2))                                 # c independent
    worlds = list(itertools.product(range(n), range(n), range(2)))
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("decide"), st.lists(st.booleans(), min_size=len(worlds), max_size=len(worlds))),
        st.tuples(st.just("chance"), st.lists(_PROB, min_size=len(worlds), max_size=len(worlds))),
        st.tuples(st.just("read"), st.integers(0, 2))), min_size=1, max_size=4))
    return a_row, b_rows, c_row, worlds, ops


@settings(max_examples=60, deadline=None)
@given(_programs())
def test_any_sequence_of_decisions_and_reads_gives_the_brute_force_law(program):
    """Three draws (a, b given a, c), a random sequence of decisions (answered by the values, or with a chance per
    world) and reads, made on joints; the enumerated law of (answers, a, b, c) against the brute-force one: every
    world's probability times the chance of each answer in it."""
    a_row, b_rows, c_row, worlds, ops = program
    index = {w: i for i, w in enumerate(worlds)}

    def run(rng):
        a = PendingDraw.of_law(rng, a_row)
        b = PendingDraw.of_law(rng, lambda: b_rows[a.values()[0]])     # read outside a joint: a read first
        b.given = (((a, 0),), lambda v: b_rows[v[0]])
        c = PendingDraw.of_law(rng, c_row)
        draws, answers = (a, b, c), []
        for kind, arg in ops:
            if kind == "read":
                draws[arg].values()
                continue
            undrawn = [(d, 0) for d in draws if not d.drawn]
            if not undrawn:         # every draw known: the answer is the world's, forked with its chance
                w = tuple(d.values()[0] for d in draws)
                p = arg[index[w]]
                answers.append(p if type(p) is bool else rng.draw_now((p, 1 - p)) == 0 if 0 < p < 1 else p == 1)
                continue
            j = join(undrawn)
            cols = [j.column(d) if not d.drawn else None for d in draws]
            chance = {}
            for key in j.table:
                w = tuple(key[i] if i is not None else d.values()[0] for i, d in zip(cols, draws))
                chance[key] = arg[index[w]]
            answers.append(j.decide(chance))
        return (tuple(answers),) + tuple(d.values()[0] for d in draws)

    law = enumerate_program(run, FIELD)
    expect: dict = {}
    for w in worlds:
        x, y, z = w
        p0 = a_row[x] * b_rows[x][y] * c_row[z]
        if not p0:
            continue
        paths = [((), p0)]
        for kind, arg in ops:
            if kind == "read":
                continue
            c = arg[index[w]]
            c = F(1) if c is True else F(0) if c is False else c
            paths = [(ans + (yes,), p * (c if yes else 1 - c)) for ans, p in paths for yes in (True, False)
                     if (c if yes else 1 - c)]
        for ans, p in paths:
            expect[(ans,) + w] = expect.get((ans,) + w, 0) + p
    assert law == expect
