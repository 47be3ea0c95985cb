"""Tests for exactspec.strategies: exact laws, valid models, audit-ready instances, argument errors."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction as F

import pytest
from hypothesis import find, given, settings, strategies as st

import exactspec as es
from exactspec import strategies as ess

FEW = settings(max_examples=30, deadline=None)


def contexts(vocab, longest=3):
    """Every context of length 0..longest over vocab tokens."""
    return [c for n in range(longest + 1) for c in itertools.product(range(vocab), repeat=n)]


def assert_exact_law(law, vocab):
    assert isinstance(law, tuple) and len(law) == vocab
    assert all(type(x) is F and x >= 0 for x in law)
    assert sum(law) == 1


# -- distributions -------------------------------------------------------------------------------------

@FEW
@given(st.data())
def test_distributions_are_exact_laws_with_bounded_denominator(data):
    vocab = data.draw(st.integers(1, 6), label="vocab")
    allow_zero = data.draw(st.booleans(), label="allow_zero")
    bound = data.draw(st.integers(1 if allow_zero else vocab, 15), label="max_denominator")
    law = data.draw(ess.distributions(vocab, max_denominator=bound, allow_zero=allow_zero), label="law")
    assert_exact_law(law, vocab)
    # a common denominator <= bound: the lcm of the reduced denominators
    assert math.lcm(*(x.denominator for x in law)) <= bound
    if not allow_zero:
        assert all(x > 0 for x in law)


@FEW
@given(ess.distributions(st.integers(1, 5), max_denominator=6))
def test_distributions_accept_a_vocab_strategy(law):
    assert 1 <= len(law) <= 5
    assert_exact_law(law, len(law))
    assert math.lcm(*(x.denominator for x in law)) <= 6


def test_distributions_shrink_to_the_point_mass_on_token_0():
    assert find(ess.distributions(4), lambda law: True) == (1, 0, 0, 0)
    # the smallest law that is not a point mass uses the smallest denominator, 2
    assert find(ess.distributions(3), lambda law: max(law) < 1) == (F(1, 2), F(1, 2), 0)


def test_distributions_without_zeros_shrink_to_the_uniform_law():
    assert find(ess.distributions(3, allow_zero=False), lambda law: True) == (F(1, 3), F(1, 3), F(1, 3))


def test_distributions_reach_the_denominator_bound():
    law = find(ess.distributions(2, max_denominator=12), lambda law: law[0].denominator == 11)
    assert law[0].denominator == 11 and sum(law) == 1


# -- models --------------------------------------------------------------------------------------------

@FEW
@given(st.data())
def test_models_are_valid_models_of_the_right_vocab_and_family(data):
    vocab = data.draw(st.integers(1, 4), label="vocab")
    order = data.draw(st.sampled_from([1, 2]), label="order")
    family = data.draw(st.sampled_from(ess.FAMILIES), label="family")
    m = data.draw(ess.models(vocab, order=order, family=family), label="model")
    assert isinstance(m, es.models.Model) and m.vocab == vocab
    assert m.order == {"context_free": 0, "per_position": None, "table": order}[family]
    rebuilt = eval(m.name, vars(es.models))  # the name is the es.models call that rebuilds the model
    for c in contexts(vocab):
        assert_exact_law(m(c), vocab)
        assert rebuilt(c) == m(c)
    if family == "per_position":
        # the law depends on the context's length only, and lengths >= 2 share the last law
        for c in contexts(vocab):
            assert m(c) == m((0,) * len(c))
        assert m((0, 0)) == m((0, 0, 0)) == m((1,) * 5)


@pytest.mark.parametrize("family, order", [("context_free", 0), ("per_position", None), ("table", 1)])
def test_models_without_a_family_draw_every_family(family, order):
    m = find(ess.models(3), lambda m: m.order == order)
    assert m.name.startswith("from_function" if family == "per_position" else family)


def test_models_shrink_to_point_masses():
    m = find(ess.models(2, family="table", order=2), lambda m: True)
    assert all(m(c) == (1, 0) for c in contexts(2))
    assert len(m.name.split(": (1, 0)")) == 1 + 1 + 2 + 4  # one law per context of length <= 2


def test_per_position_models_have_two_or_three_laws():
    for n in (2, 3):
        # n distinct laws: position n - 1 differs from every earlier one
        m = find(ess.models(2, family="per_position"), lambda m, n=n: len({m((0,) * i) for i in range(n)}) == n)
        assert len({m((0,) * i) for i in range(6)}) == n


# -- instances -----------------------------------------------------------------------------------------

@FEW
@given(ess.instances())
def test_speculative_sampling_is_lossless_on_drawn_instances(inst):
    assert sorted(inst) == ["draft", "prompt", "proposer", "target", "tokens"]
    target, draft = inst["target"], inst["draft"]
    assert 2 <= target.vocab == draft.vocab <= 4
    assert target.name.split("(")[0] == draft.name.split("(")[0]  # same family
    assert target.order == draft.order
    assert isinstance(inst["proposer"], es.drafts.ChainProposer) and 1 <= inst["proposer"].gamma <= 3
    assert len(inst["prompt"]) <= 2 and all(0 <= t < target.vocab for t in inst["prompt"])
    assert 1 <= inst["tokens"] <= 3
    assert es.audit(rule=es.rules.speculative_sampling, **inst).tv == 0


def test_greedy_match_sampled_is_caught_on_some_instance():
    inst = find(ess.instances(), lambda inst: es.audit(rule=es.rules.greedy_match_sampled, **inst).tv > 0)
    report = es.audit(rule=es.rules.greedy_match_sampled, **inst)
    assert report.tv > 0 and report.verdict == "biased"


@settings(max_examples=20, deadline=None)
@given(ess.instances(proposer="tree"))
def test_mss_is_lossless_on_drawn_tree_instances(inst):
    prop = inst["proposer"]
    assert isinstance(prop, es.drafts.TreeProposer)
    assert 1 <= len(prop.expansion) <= 2 and all(k in (1, 2) for k in prop.expansion)
    assert es.audit(rule=es.rules.mss, **inst).tv == 0


@settings(max_examples=10, deadline=None)
@given(ess.instances(vocab=3, gamma=2, tokens=1, family="per_position", max_denominator=4))
def test_instances_take_plain_ints_and_a_family(inst):
    assert inst["target"].vocab == inst["draft"].vocab == 3
    assert inst["proposer"].gamma == 2 and inst["tokens"] == 1
    assert inst["target"].order is None and inst["draft"].order is None
    for m in (inst["target"], inst["draft"]):
        assert all(x.denominator <= 4 for c in contexts(3, 2) for x in m(c))


@settings(max_examples=10, deadline=None)
@given(ess.instances(family="table", proposer="chain"))
def test_a_drawn_instance_is_rebuilt_from_its_printed_form(inst):
    rebuilt = dict(inst, target=eval(inst["target"].name, vars(es.models)),
                   draft=eval(inst["draft"].name, vars(es.models)),
                   proposer=eval(repr(inst["proposer"]), vars(es.drafts)))
    a = es.audit(rule=es.rules.resample_from_target, **inst)
    b = es.audit(rule=es.rules.resample_from_target, **rebuilt)
    assert a.output == b.output and a.tv == b.tv and a.tokens_per_call == b.tokens_per_call


# -- bad arguments: raised when the strategy is built ----------------------------------------------------

@pytest.mark.parametrize("build, message", [
    (lambda: ess.distributions(0), r"distributions: vocab must be an int >= 1 or a strategy"),
    (lambda: ess.distributions(True), r"vocab must be an int >= 1"),
    (lambda: ess.distributions(3, max_denominator=0), r"distributions: max_denominator must be an int >= 1, got 0"),
    (lambda: ess.distributions(3, allow_zero="no"), r"allow_zero must be True or False"),
    (lambda: ess.distributions(5, max_denominator=4, allow_zero=False),
     r"allow_zero=False needs max_denominator >= vocab .* got max_denominator=4"),
    (lambda: ess.models(0), r"models: vocab must be an int >= 1"),
    (lambda: ess.models(2, max_denominator=0), r"models: max_denominator must be an int >= 1, got 0"),
    (lambda: ess.models(2, family="banana"), r"models: family must be None or one of context_free, per_position, "
                                             r"table, got 'banana'"),
    (lambda: ess.models(2, order=3), r"models: order must be 1 or 2"),
    (lambda: ess.instances(vocab=0), r"instances: vocab must be an int >= 1"),
    (lambda: ess.instances(max_denominator=0), r"instances: max_denominator must be an int >= 1, got 0"),
    (lambda: ess.instances(family="banana"), r"instances: family must be None or one of"),
    (lambda: ess.instances(gamma=0), r"instances: gamma must be an int >= 1"),
    (lambda: ess.instances(tokens=0), r"instances: tokens must be an int >= 1"),
    (lambda: ess.instances(proposer="banana"), r"instances: proposer must be one of chain, tree, got 'banana'"),
])
def test_bad_arguments_raise_when_the_strategy_is_built(build, message):
    with pytest.raises(es.ExactSpecError, match=message):
        build()


# -- bad drawn values: raised when drawn ---------------------------------------------------------------

@pytest.mark.parametrize("strategy, message", [
    (lambda: ess.distributions(st.just(5), max_denominator=4, allow_zero=False),
     r"allow_zero=False needs max_denominator >= vocab \(every one of the 5 tokens"),
    (lambda: ess.distributions(st.just(0)), r"distributions: vocab must be an int >= 1, but the strategy .* drew 0"),
    (lambda: ess.models(st.just(0)), r"models: vocab must be an int >= 1, but the strategy .* drew 0"),
    (lambda: ess.instances(vocab=st.just(0)), r"instances: vocab must be an int >= 1, but the strategy"),
    (lambda: ess.instances(gamma=st.just(0)), r"instances: gamma must be an int >= 1, but the strategy"),
])
def test_bad_drawn_values_raise_when_drawn(strategy, message):
    s = strategy()  # building succeeds: a strategy argument can only be checked value by value
    with pytest.raises(es.ExactSpecError, match=message):
        find(s, lambda x: True)


def test_a_bad_drawn_value_fails_the_given_test():
    @settings(max_examples=5, database=None)
    @given(ess.distributions(st.integers(3, 4), max_denominator=3, allow_zero=False))
    def test_law(law):
        assert sum(law) == 1

    with pytest.raises(es.ExactSpecError, match=r"every one of the 4 tokens"):
        test_law()
