"""The engine: the enumerating rng, laziness and horizon cuts, memoisation, users' own rules."""

from fractions import Fraction as F

from hypothesis import given, settings, strategies as st

import exactspec as es
from benchmarks.baseline import baseline_law
from exactspec.enumerate import enumerate_program
from exactspec.fields import get_field

FR = get_field("fraction")


def test_categorical_and_bernoulli_laws():
    law = enumerate_program(lambda rng: (rng.categorical((F(1, 2), 0, F(1, 2))), rng.bernoulli(F(1, 3))), FR)
    assert law == {(0, True): F(1, 6), (0, False): F(1, 3), (2, True): F(1, 6), (2, False): F(1, 3)}


def test_shared_uniform_is_refined_not_redrawn():
    # one uniform compared three times: the answers are nested intervals of [0, 1)
    def prog(rng):
        u = rng.uniform()
        return (u < F(1, 2), u < F(1, 4), u >= F(3, 4))
    assert enumerate_program(prog, FR) == {(True, True, False): F(1, 4), (True, False, False): F(1, 4),
                                           (False, False, False): F(1, 4), (False, False, True): F(1, 4)}


def test_affine_uniform_arithmetic():
    # 1 - 2u < 1/2  <=>  u > 1/4 (probability 3/4); (u + 1) / 2 <= 5/8 <=> u <= 1/4
    def prog(rng):
        u = rng.uniform()
        return (1 - 2 * u < F(1, 2), (u + 1) / 2 <= F(5, 8))
    assert enumerate_program(prog, FR) == {(True, False): F(3, 4), (False, True): F(1, 4)}


def test_user_rule_written_with_a_uniform_is_lossless_and_matches_baseline():
    def my_rule(step, rng):  # speculative sampling written against a lazy uniform
        for j in range(step.gamma):
            x, p, q = step.draft(j), step.target(j), step.claimed(j)
            if rng.uniform() < p[x] / q[x]:
                yield x
            else:
                yield rng.categorical(es.laws.residual(p, q))
                return
        yield rng.categorical(step.target(step.gamma))

    target = es.models.random_table(vocab=3, order=1, seed=3)
    draft = es.models.perturbed(target, seed=4)
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(2), rule=my_rule, prompt=(0,), tokens=3)
    assert r.tv == 0 and r.paths > 0 and r.claim == "lossless"
    assert r.output == baseline_law(my_rule, target, draft, gamma=2, prompt=(0,), tokens=3)


def test_drafts_are_drawn_only_when_looked_at():
    # a rule that reads only the first draft costs the same number of branches whatever gamma is
    def first_only(step, rng):
        yield step.draft(0)
    target = es.models.random_table(vocab=4, order=0, seed=1)
    draft = es.models.random_table(vocab=4, order=0, seed=2)
    counts = {g: es.audit(target=target, draft=draft, proposer=es.drafts.chain(g), rule=first_only,
                          tokens=1).paths for g in (1, 4)}
    assert counts[1] == counts[4]


def test_horizon_cut_stops_generator_rules():
    # speculative sampling cut at 1 token never looks past the first draft: with gamma 3 it explores
    # exactly as many branches as with gamma 1, and both give the target's first-token law
    from exactspec.enumerate.env import Env
    from exactspec.enumerate.step import StepEnumerator
    target = es.models.random_table(vocab=3, order=0, seed=5)
    draft = es.models.random_table(vocab=3, order=0, seed=6)
    env = Env(target, draft, FR)
    laws, paths = [], []
    for g in (1, 3):
        se = StepEnumerator(es.rules.speculative_sampling, es.drafts.chain(g), env)
        laws.append(se.law((), 1))
        paths.append(se.meter.paths)
    assert paths[0] == paths[1]
    assert laws[0] == laws[1] == {(t,): pt for t, pt in enumerate(target(()))}
    uncut = StepEnumerator(es.rules.speculative_sampling, es.drafts.chain(3), env)
    uncut.law((), None)
    assert uncut.meter.paths > paths[1]


def test_returning_a_list_works_like_yielding():
    def listy(step, rng):
        return [rng.categorical(step.target(0))]
    target = es.models.random_table(vocab=3, order=1, seed=9)
    r = es.audit(target=target, draft=target, proposer=es.drafts.chain(1), rule=listy, prompt=(2,), tokens=3)
    assert r.tv == 0 and r.tokens_per_call == 1 and r.target_calls == 3


def test_memoisation_by_state_matches_the_unmemoised_baseline_on_order_2():
    target = es.models.random_table(vocab=3, order=2, seed=11, zero_prob=0.2)
    draft = es.models.perturbed(target, seed=12)
    for rule in (es.rules.resample_from_target, es.rules.stale_draft_probs):
        r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(2), rule=rule, prompt=(1, 2), tokens=3)
        assert r.output == baseline_law(rule.fn, target, draft, gamma=2, prompt=(1, 2), tokens=3)


def test_whole_context_models_are_not_conflated():
    # order=None: the law depends on the number of tokens so far, so states must not be merged
    def by_length(ctx):
        return (F(1, 3), F(2, 3)) if len(ctx) % 2 else (F(3, 4), F(1, 4))
    target = es.models.from_function(vocab=2, fn=by_length, order=None)
    draft = es.models.context_free((F(1, 2), F(1, 2)))
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(2), rule=es.rules.speculative_sampling,
                 tokens=3)
    assert r.tv == 0
    assert r.expected[(0, 0, 0)] == F(3, 4) * F(1, 3) * F(3, 4)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), gamma=st.integers(1, 3), tokens=st.integers(1, 3))
def test_output_is_a_law_and_target_calls_bounded(seed, gamma, tokens):
    target = es.models.random_table(vocab=3, order=1, seed=seed, zero_prob=0.2)
    draft = es.models.random_table(vocab=3, order=1, seed=seed + 1, zero_prob=0.2)
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(gamma), rule=es.rules.resample_from_target,
                 prompt=(0,), tokens=tokens)
    assert sum(r.output.values()) == 1 and all(len(k) == tokens for k in r.output)
    # every call emits at least one and at most gamma + 1 tokens
    assert F(tokens, gamma + 1) <= r.target_calls <= tokens
    assert 1 <= r.tokens_per_call <= gamma + 1
