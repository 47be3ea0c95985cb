"""Tests for exactspec.theory: Leviathan et al.'s closed forms, checked by hand and against the engine."""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

import exactspec as es
from exactspec import theory


# -- hand values ------------------------------------------------------------------------------------
def test_acceptance_rate_by_hand():
    # sum(min(p, q)) = min(3/5, 1/2) + min(2/5, 1/2) = 1/2 + 2/5 = 9/10
    assert theory.acceptance_rate((F(3, 5), F(2, 5)), (F(1, 2), F(1, 2))) == F(9, 10)
    # disjoint supports: nothing is ever accepted
    assert theory.acceptance_rate((1, 0), (0, 1)) == 0


@pytest.mark.parametrize("a, gamma, expected", [
    # E = 1 + a + ... + a**gamma = (1 - a**(gamma+1)) / (1 - a)
    (F(9, 10), 1, F(19, 10)),            # 1 + 9/10
    (F(1, 2), 3, F(15, 8)),              # 1 + 1/2 + 1/4 + 1/8
    (F(4, 5), 2, F(61, 25)),             # 1 + 4/5 + 16/25 = (25 + 20 + 16)/25
    (F(2, 3), 0, 1),                     # gamma = 0: only the target's own token
    (0, 4, 1),                           # a = 0: every draft rejected, 1 token per call
    (1, 4, 5),                           # a = 1: every draft accepted + bonus = gamma + 1
    ("1/2", 1, F(3, 2)),                 # rationals as strings: 1 + 1/2
])
def test_expected_tokens_by_hand(a, gamma, expected):
    got = theory.expected_tokens(a, gamma)
    assert got == expected
    assert not isinstance(got, float)


def test_expected_tokens_accepts_floats():
    # floats are accepted (not exact): 1 + 0.5 = 1.5 is representable, so this is exact anyway
    assert theory.expected_tokens(0.5, 1) == 1.5


@pytest.mark.parametrize("a, gamma, c, expected", [
    # speedup = E[tokens] / (gamma * c + 1)
    (F(1, 2), 3, F(1, 4), F(15, 14)),         # (15/8) / (3/4 + 1) = (15/8) * (4/7)
    (F(9, 10), 1, 0, F(19, 10)),              # c = 0: the speedup is E[tokens]
    (F(4, 5), 4, F(1, 20), F(2101, 750)),     # E = (1 - (4/5)**5) * 5 = 2101/625; den 6/5 -> 2101/750
    (0, 2, F(1, 2), F(1, 2)),                 # a = 0: E = 1, den 2 -> a slowdown of 1/2
    (1, 3, 1, 1),                             # a = 1, c = 1: (3 + 1) / (3 + 1)
])
def test_speedup_by_hand(a, gamma, c, expected):
    assert theory.speedup(a, gamma, c) == expected


@pytest.mark.parametrize("a, gamma, c_hat, expected", [
    # factor = (gamma * c_hat + gamma + 1) / E[tokens]
    (F(1, 2), 1, 0, F(4, 3)),                 # 2 / (3/2)
    (F(1, 2), 3, F(1, 4), F(38, 15)),         # (3/4 + 4) / (15/8) = (19/4) * (8/15)
    (1, 4, 0, 1),                             # 5 / 5: every token verified is kept
    (0, 2, F(1, 3), F(11, 3)),                # (2/3 + 3) / 1
])
def test_arithmetic_factor_by_hand(a, gamma, c_hat, expected):
    assert theory.arithmetic_factor(a, gamma, c_hat) == expected


def test_optimal_gamma_by_hand():
    # a = 4/5, c = 1/10: speedup(g) = 5 * (1 - (4/5)**(g+1)) / (1 + g/10)
    #   g=1: (9/5)/(11/10)          = 18/11        ~ 1.636
    #   g=2: (61/25)/(6/5)          = 61/30        ~ 2.033
    #   g=3: (369/125)/(13/10)      = 738/325      ~ 2.271
    #   g=4: (2101/625)/(7/5)       = 2101/875     ~ 2.401
    #   g=5: (11529/3125)/(3/2)     = 7686/3125    ~ 2.4595
    #   g=6: (61741/15625)/(8/5)    = 61741/25000  ~ 2.4696   <- the maximum
    #   g=7: (325089/78125)/(17/10) = 650178/265625 ~ 2.4477
    assert theory.speedup(F(4, 5), 5, F(1, 10)) == F(7686, 3125)
    assert theory.speedup(F(4, 5), 6, F(1, 10)) == F(61741, 25000)
    assert theory.speedup(F(4, 5), 7, F(1, 10)) == F(650178, 265625)
    assert theory.optimal_gamma(F(4, 5), F(1, 10)) == 6
    # a = 1/2, c = 1/4: g=1: (3/2)/(5/4) = 6/5 > g=2: (7/4)/(3/2) = 7/6, and it only falls after
    assert theory.optimal_gamma(F(1, 2), F(1, 4)) == 1
    # c = 0: drafting is free, the speedup 2 - 2**-g grows with g: the largest allowed gamma
    assert theory.optimal_gamma(F(1, 2), 0, max_gamma=5) == 5
    # a = 0: E = 1 for every g, speedup 1/(g c + 1) falls: gamma 1
    assert theory.optimal_gamma(0, F(1, 10)) == 1
    # a = 1, c = 1: speedup (g+1)/(g+1) = 1 for every g, a tie resolved to the smallest gamma
    assert theory.optimal_gamma(1, 1, max_gamma=10) == 1


def _plain_speedup(a: F, g: int, c: F) -> F:
    """Leviathan's speedup written out with plain Fractions: (sum_{i<=g} a**i) / (g c + 1)."""
    return sum((a ** i for i in range(g + 1)), F(0)) / (g * c + 1)


@pytest.mark.parametrize("a", [F(0), F(1, 10), F(1, 3), F(1, 2), F(2, 3), F(4, 5), F(9, 10), F(19, 20), F(1)])
@pytest.mark.parametrize("c", [F(0), F(1, 100), F(1, 20), F(1, 10), F(1, 4), F(1, 2), F(1)])
def test_optimal_gamma_matches_brute_force(a, c):
    max_gamma = 24
    values = {g: _plain_speedup(a, g, c) for g in range(1, max_gamma + 1)}
    for g, v in values.items():
        assert theory.speedup(a, g, c) == v
    best = max(values.values())
    brute = min(g for g, v in values.items() if v == best)   # ties to the smallest gamma
    assert theory.optimal_gamma(a, c, max_gamma=max_gamma) == brute


# -- the engine matches the closed form --------------------------------------------------------------
@st.composite
def context_free_instances(draw):
    vocab = draw(st.integers(2, 4))
    weights = st.lists(st.integers(0, 4), min_size=vocab, max_size=vocab).filter(any)
    pw = draw(weights)
    qw = draw(weights)
    if draw(st.booleans()):  # make q cover p's support (otherwise it may or may not)
        qw = [max(w, 1) if pw_i else w for w, pw_i in zip(qw, pw)]
    p = tuple(F(w, sum(pw)) for w in pw)
    q = tuple(F(w, sum(qw)) for w in qw)
    gamma = draw(st.integers(1, 4))
    closed_form = draw(st.booleans())
    return p, q, gamma, closed_form


@settings(max_examples=60, deadline=None)
@given(context_free_instances())
def test_tokens_per_call_equals_expected_tokens(inst):
    p, q, gamma, closed_form = inst
    r = es.audit(target=es.models.context_free(p), draft=es.models.context_free(q),
                 rule=es.rules.speculative_sampling, proposer=es.drafts.chain(gamma), tokens=1,
                 closed_form=closed_form)
    # every position accepts with probability a = sum(min(p, q)), independently on context-free
    # models, so the step emits 1 + a + ... + a**gamma tokens on average
    a = sum(min(x, y) for x, y in zip(p, q))
    assert r.tokens_per_call == theory.expected_tokens(a, gamma)
    # one target call always emits at least one token
    assert r.target_calls == 1
    # and speculative sampling is lossless: the first token follows p exactly
    assert r.output == {(t,): pt for t, pt in enumerate(p) if pt}
    assert r.tv == 0


# -- bad arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: theory.expected_tokens(2, 1), r"a = 2 must lie in \[0, 1\]"),
    (lambda: theory.expected_tokens(F(-1, 2), 1), r"a = -1/2 must lie in \[0, 1\]"),
    (lambda: theory.expected_tokens("x", 1), "a = 'x' is not a number"),
    (lambda: theory.expected_tokens(F(1, 2), -1), "gamma must be an int >= 0, got -1"),
    (lambda: theory.expected_tokens(F(1, 2), 1.5), "gamma must be an int >= 0, got 1.5"),
    (lambda: theory.expected_tokens(F(1, 2), True), "gamma must be an int >= 0, got True"),
    (lambda: theory.speedup(2, 1, F(1, 2)), r"a = 2 must lie in \[0, 1\]"),
    (lambda: theory.speedup(F(1, 2), -1, F(1, 2)), "gamma must be an int >= 0, got -1"),
    (lambda: theory.speedup(F(1, 2), 1, "x"), "c = 'x' is not a number"),
    (lambda: theory.speedup(F(1, 2), 1, -1), r"c = -1 must lie in \[0, inf\]"),
    (lambda: theory.arithmetic_factor(F(1, 2), 1, "x"), "c_hat = 'x' is not a number"),
    (lambda: theory.arithmetic_factor(F(1, 2), -1, 0), "gamma must be an int >= 0, got -1"),
    (lambda: theory.optimal_gamma(2, F(1, 2)), r"a = 2 must lie in \[0, 1\]"),
    (lambda: theory.optimal_gamma(F(1, 2), "x"), "c = 'x' is not a number"),
])
def test_bad_arguments_raise_exactspec_error(call, message):
    with pytest.raises(es.ExactSpecError, match=message):
        call()


@pytest.mark.parametrize("call", [
    # gamma is validated after it is used in speedup's denominator: a str gamma must still be
    # reported as ExactSpecError, not a TypeError from "x" * c
    lambda: theory.speedup(F(1, 2), "x", F(1, 4)),
    # NaN is not a rate in [0, 1] nor a cost >= 0
    lambda: theory.expected_tokens(float("nan"), 2),
    lambda: theory.speedup(F(1, 2), 2, float("nan")),
    # there is no gamma in 1..0 to return
    lambda: theory.optimal_gamma(F(1, 2), F(1, 2), max_gamma=0),
], ids=["speedup_gamma_str", "expected_tokens_a_nan", "speedup_c_nan", "optimal_gamma_max_gamma_0"])
def test_more_bad_arguments_raise_exactspec_error(call):
    with pytest.raises(es.ExactSpecError):
        call()
