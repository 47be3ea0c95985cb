"""Tests for exactspec.models: exact toy language models (tables, functions, random, perturbed, sharpened)."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import models


# -- table ------------------------------------------------------------------------------------------
def test_table_looks_up_by_last_order_tokens():
    m = models.table(vocab=2, order=1, table={(): ("1/2", "1/2"), (0,): (1, 0), (1,): ("1/3", "2/3")})
    # order=1: only the last token matters, whatever comes before it.
    assert m((1, 1, 0)) == (F(1), F(0))
    assert m((0, 0, 0)) == (F(1), F(0))
    assert m((0, 1)) == (F(1, 3), F(2, 3))
    assert m((1,)) == (F(1, 3), F(2, 3))
    # the empty context is shorter than order, so it is looked up by the whole context ().
    assert m(()) == (F(1, 2), F(1, 2))
    assert m.vocab == 2 and m.order == 1


def test_table_order2_shorter_context_uses_whole_context():
    t = {(0,): (1, 0, 0), (1,): (0, 1, 0), (0, 1): (0, 0, 1), (1, 1): ("1/4", "1/4", "1/2")}
    m = models.table(vocab=3, order=2, table=t)
    # length-1 contexts are shorter than order=2: the whole context is the key.
    assert m((0,)) == (1, 0, 0)
    assert m((1,)) == (0, 1, 0)
    # longer contexts: the last two tokens.
    assert m((2, 2, 0, 1)) == (0, 0, 1)
    assert m((0, 1, 1)) == (F(1, 4), F(1, 4), F(1, 2))
    # (2,) was never given: a clear error names the context.
    with pytest.raises(es.InvalidDistribution, match=r"no law for context \(2,\)"):
        m((2,))
    with pytest.raises(es.InvalidDistribution, match=r"no law for context \(1, 0\)"):
        m((0, 1, 0))


def test_table_returns_exact_fraction_tuples():
    m = models.table(vocab=2, order=0, table={(): ("3/5", F(2, 5))})
    law = m((1, 0, 1))
    assert law == (F(3, 5), F(2, 5))
    assert all(type(x) is F for x in law)
    assert sum(law) == 1


def test_key_is_the_suffix_the_model_reads():
    assert models.random_table(vocab=3, order=2, seed=0).key((0, 1, 2)) == (1, 2)
    assert models.random_table(vocab=3, order=2, seed=0).key((2,)) == (2,)
    assert models.random_table(vocab=3, order=0, seed=0).key((0, 1, 2)) == ()
    assert models.random_table(vocab=3, order=None, seed=0).key((0, 1, 2)) == (0, 1, 2)


# -- from_function ----------------------------------------------------------------------------------
def test_from_function_receives_only_the_suffix():
    seen = []

    def fn(c):
        seen.append(c)
        return (1, 0, 0) if c == (1, 2) else ("1/3", "1/3", "1/3")

    m = models.from_function(vocab=3, order=2, fn=fn)
    assert m((0, 0, 1, 2)) == (1, 0, 0)
    assert m((2, 2, 2)) == (F(1, 3), F(1, 3), F(1, 3))
    assert m((1,)) == (F(1, 3), F(1, 3), F(1, 3))  # shorter than order: whole context
    assert seen == [(1, 2), (2, 2), (1,)]
    assert all(isinstance(c, tuple) and len(c) <= 2 for c in seen)


def test_from_function_order_none_receives_whole_context():
    seen = []

    def fn(c):
        seen.append(c)
        # the law depends on the length of the whole context: needs order=None
        return (1, 0) if len(c) % 2 == 0 else (0, 1)

    m = models.from_function(vocab=2, fn=fn)  # order defaults to None
    assert m.order is None
    assert m(()) == (1, 0)
    assert m((1, 1, 1)) == (0, 1)
    assert m((0, 1, 1, 1)) == (1, 0)
    assert seen == [(), (1, 1, 1), (0, 1, 1, 1)]


def test_from_function_memoises_one_call_per_distinct_suffix():
    calls: dict[tuple, int] = {}

    def fn(c):
        calls[c] = calls.get(c, 0) + 1
        return ("1/2", "1/2")

    m = models.from_function(vocab=2, order=1, fn=fn)
    contexts = [(0,), (1, 0), (1, 1, 0), (1,), (0, 1), (0, 0, 1), (), (0,), ()]
    laws = [m(c) for c in contexts]
    # distinct suffixes read: (0,), (1,), () -> exactly one call each
    assert calls == {(0,): 1, (1,): 1, (): 1}
    # the memo hands out the same law object for the same suffix
    assert laws[0] is laws[1] is laws[2]
    assert laws[3] is laws[4] is laws[5]


def test_from_function_memo_order_none_by_whole_context():
    n = 0

    def fn(c):
        nonlocal n
        n += 1
        return (1, 0)

    m = models.from_function(vocab=2, order=None, fn=fn)
    for c in [(0, 1), (0, 1), (1,), (0, 1), (1,), (1, 1)]:
        m(c)
    assert n == 3  # (0, 1), (1,), (1, 1)


def test_from_function_validates_laws():
    with pytest.raises(es.InvalidDistribution, match="sums to 2, not exactly 1"):
        models.from_function(vocab=2, fn=lambda c: (1, 1))(())
    with pytest.raises(es.InexactArithmetic, match="float 0.5"):
        models.from_function(vocab=2, fn=lambda c: (0.5, 0.5))(())
    assert models.from_function(vocab=2, fn=lambda c: (0.5, 0.5), exact_floats=True)(()) == (F(1, 2), F(1, 2))
    with pytest.raises(es.InvalidDistribution, match="3 entries, expected vocab = 2"):
        models.from_function(vocab=2, fn=lambda c: (1, 0, 0))(())


# -- context_free -----------------------------------------------------------------------------------
def test_context_free_same_law_everywhere():
    m = models.context_free(("1/3", "2/3"))
    assert m.order == 0 and m.vocab == 2
    for c in [(), (0,), (1, 1, 0, 1)]:
        assert m(c) == (F(1, 3), F(2, 3))
    assert m(()) is m((1, 0))


def test_context_free_validation():
    with pytest.raises(es.InvalidDistribution, match="sums to 3, not exactly 1"):
        models.context_free((1, 2))
    with pytest.raises(es.InvalidDistribution, match="empty"):
        models.context_free(())
    with pytest.raises(es.InvalidDistribution, match="negative"):
        models.context_free((2, -1))
    with pytest.raises(es.InexactArithmetic, match="exact_floats=True"):
        models.context_free((0.25, 0.75))
    # 0.1 as a float is the rational 3602879701896397/2**55: exact conversion keeps it exactly
    m = models.context_free((0.1, F(1) - F(0.1)), exact_floats=True)
    assert m(())[0] == F(3602879701896397, 2 ** 55)


# -- random_table -----------------------------------------------------------------------------------
ALL_ORDER2 = [c for c in itertools.product(range(3), repeat=2)]


def test_random_table_reproducible_across_instances_and_lookup_order():
    a = models.random_table(vocab=3, order=2, seed=7)
    b = models.random_table(vocab=3, order=2, seed=7)
    forward = {c: a(c) for c in ALL_ORDER2}
    backward = {c: b(c) for c in reversed(ALL_ORDER2)}
    assert forward == backward
    # longer contexts read only the last two tokens
    assert a((2, 1, 0, 1)) == forward[(0, 1)]
    # a third instance that looks up a single context first still agrees
    assert models.random_table(vocab=3, order=2, seed=7)((2, 2)) == forward[(2, 2)]


def test_random_table_laws_sum_to_exactly_one():
    m = models.random_table(vocab=4, order=2, seed=3, max_weight=9)
    for c in itertools.product(range(4), repeat=2):
        law = m(c)
        assert sum(law) == 1
        assert all(type(x) is F and x > 0 for x in law)  # zero_prob=0: weights 1..9
        # each entry is w / s with integer weight w in 1..9: denominators divide s <= 36
        assert all(x.denominator <= 36 for x in law)


def test_random_table_max_weight_one_is_uniform():
    # every weight is drawn from 1..1, so every law is exactly uniform
    m = models.random_table(vocab=4, order=1, seed=5, max_weight=1)
    for c in [(0,), (1,), (2,), (3,)]:
        assert m(c) == (F(1, 4),) * 4


def test_random_table_different_seeds_differ():
    a = models.random_table(vocab=3, order=2, seed=0)
    b = models.random_table(vocab=3, order=2, seed=1)
    differing = [c for c in ALL_ORDER2 if a(c) != b(c)]
    assert len(differing) >= len(ALL_ORDER2) // 2


def test_random_table_zero_prob_makes_zeros_but_never_all_zero():
    zeros = 0
    for seed in range(5):
        m = models.random_table(vocab=3, order=2, seed=seed, zero_prob=0.8)
        for c in ALL_ORDER2:
            law = m(c)
            assert sum(law) == 1
            assert any(x > 0 for x in law)
            zeros += sum(1 for x in law if x == 0)
    assert zeros > 0


# -- perturbed --------------------------------------------------------------------------------------
def test_perturbed_differs_covers_support_sums_to_one_reproducible():
    base = models.random_table(vocab=3, order=1, seed=0, zero_prob=0.3)
    d = models.perturbed(base, seed=1)
    d2 = models.perturbed(base, seed=1)
    assert d.vocab == base.vocab and d.order == base.order
    differs = 0
    for c in [(0,), (1,), (2,)]:
        p, q = base(c), d(c)
        assert sum(q) == 1
        assert all(type(x) is F for x in q)
        # strength 1/2: q = p/2 + noise/2, so q(x) >= p(x)/2 > 0 wherever p(x) > 0
        assert all(qx > 0 for px, qx in zip(p, q) if px > 0)
        assert all(qx >= px / 2 for px, qx in zip(p, q))
        differs += p != q
        assert d2(c) == q  # reproducible across instances
    assert differs == 3


def test_perturbed_strength_extremes():
    base = models.context_free(("1/2", "1/2"))
    # strength 0 is the base itself
    assert models.perturbed(base, seed=4, strength=0)(()) == (F(1, 2), F(1, 2))
    # (1 - s) * base + s * noise with s = 1/4 is still a law
    q = models.perturbed(base, seed=4, strength="1/4")(())
    assert sum(q) == 1 and all(x >= F(3, 8) for x in q)


# -- sharpen ----------------------------------------------------------------------------------------
def test_sharpen_square_by_hand():
    # p = (1/3, 2/3), k = 2: p**2 = (1/9, 4/9), total 5/9, normalised (1/5, 4/5)
    assert models.sharpen(models.context_free(("1/3", "2/3")), 2)(()) == (F(1, 5), F(4, 5))


def test_sharpen_cube_by_hand():
    # p = (1/2, 1/3, 1/6), k = 3: p**3 = (27, 8, 1)/216, total 36/216, normalised (27/36, 8/36, 1/36)
    s = models.sharpen(models.context_free(("1/2", "1/3", "1/6")), 3)
    assert s(()) == (F(3, 4), F(2, 9), F(1, 36))


def test_sharpen_identity_zeros_and_contexts():
    base = models.table(vocab=3, order=1, table={(0,): ("1/2", "1/2", 0), (1,): (0, "1/4", "3/4"),
                                                 (2,): (1, 0, 0)})
    assert models.sharpen(base, 1)((0,)) == (F(1, 2), F(1, 2), 0)
    s = models.sharpen(base, 2)
    assert s.order == 1 and s.vocab == 3
    assert s((2, 0)) == (F(1, 2), F(1, 2), 0)       # equal entries stay equal, zeros stay zero
    # (0, 1/16, 9/16) / (10/16) = (0, 1/10, 9/10)
    assert s((1,)) == (0, F(1, 10), F(9, 10))
    assert s((2,)) == (1, 0, 0)


# -- argument validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("build, message", [
    (lambda: models.table(vocab=0, order=1, table={(): (1,)}), "vocab must be a positive int, got 0"),
    (lambda: models.from_function(vocab=0, fn=lambda c: (1,)), "vocab must be a positive int, got 0"),
    (lambda: models.random_table(vocab=0), "vocab must be a positive int, got 0"),
    (lambda: models.random_table(vocab=True), "vocab must be a positive int, got True"),
    (lambda: models.table(vocab=2, order=-1, table={(): (1, 0)}), "order must be a non-negative int or None"),
    (lambda: models.from_function(vocab=2, order=-1, fn=lambda c: (1, 0)), "order must be a non-negative int"),
    (lambda: models.random_table(vocab=2, order=1.5), "order must be a non-negative int or None"),
    (lambda: models.table(vocab=2, order=1, table={(2,): (1, 0)}),
     r"table key \(2,\) is not a tuple of tokens in 0..1"),
    (lambda: models.table(vocab=2, order=1, table={(-1,): (1, 0)}), r"table key \(-1,\) is not a tuple of tokens"),
    (lambda: models.table(vocab=2, order=1, table={"a": (1, 0)}), "table key 'a' is not a tuple of tokens"),
    (lambda: models.table(vocab=2, order=1, table={(0, 1): (1, 0)}),
     r"table key \(0, 1\) is longer than order=1"),
    (lambda: models.table(vocab=2, order=0, table={(0,): (1, 0)}), r"longer than order=0"),
    (lambda: models.table(vocab=2, order=1, table={}), "non-empty dict"),
    (lambda: models.from_function(vocab=2, fn=3), "from_function needs a callable, got 3"),
    (lambda: models.random_table(vocab=2, max_weight=0), "max_weight must be a positive int, got 0"),
    (lambda: models.random_table(vocab=2, zero_prob=1), r"zero_prob must lie in \[0, 1\), got 1"),
    (lambda: models.random_table(vocab=2, zero_prob=-0.1), r"zero_prob must lie in \[0, 1\)"),
    (lambda: models.perturbed((1, 0)), "perturbed needs a Model"),
    (lambda: models.perturbed(models.context_free((1, 0)), strength=2), r"strength must be a rational in \[0, 1\]"),
    (lambda: models.perturbed(models.context_free((1, 0)), strength=0.5), r"strength must be a rational"),
    (lambda: models.sharpen((1, 0), 2), "sharpen needs a Model"),
    (lambda: models.sharpen(models.context_free((1, 0)), 0), "sharpen needs an int power k >= 1, got 0"),
    (lambda: models.sharpen(models.context_free((1, 0)), 2.0), "sharpen needs an int power k >= 1, got 2.0"),
])
def test_bad_arguments_raise_exactspec_error(build, message):
    with pytest.raises(es.ExactSpecError, match=message):
        build()


def test_table_validates_every_law_at_construction():
    # the bad law for (1,) is reported when the table is built, naming the context
    with pytest.raises(es.InvalidDistribution, match=r"table model, context \(1,\): law \(1, 1\) sums to 2"):
        models.table(vocab=2, order=1, table={(0,): (1, 0), (1,): (1, 1)})


def test_table_int_key_means_one_token_context():
    m = models.table(vocab=2, order=1, table={0: (1, 0), 1: (0, 1)})
    assert m((1, 0)) == (1, 0) and m((0, 1)) == (0, 1)


@pytest.mark.parametrize("build", [
    # bad values of keyword options must be reported as ExactSpecError (one error type for bad
    # arguments, DESIGN.md), not leak a TypeError / ValueError from the standard library
    lambda: models.random_table(vocab=2, zero_prob="x"),
    lambda: models.perturbed(models.context_free((1, 0)), strength="x"),
    lambda: models.perturbed(models.context_free((1, 0)), max_weight=0)(()),
], ids=["random_table_zero_prob_str", "perturbed_strength_str", "perturbed_max_weight_0"])
def test_bad_option_values_raise_exactspec_error(build):
    with pytest.raises(es.ExactSpecError):
        build()
