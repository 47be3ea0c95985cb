"""The rule catalog: hand-derived laws, closed forms vs rng forms, claims as properties."""

from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

import exactspec as es
from benchmarks.baseline import baseline_law
from exactspec.instances import check_cases, default_instance
from exactspec.rules import TINY

P35 = es.models.context_free((F(3, 5), F(2, 5)))
Q12 = es.models.context_free((F(1, 2), F(1, 2)))


def law1(rule, p, q, *, gamma=1, tokens=1, proposer=None, **kw):
    return es.audit(target=p, draft=q, proposer=proposer or es.drafts.chain(gamma), rule=rule, tokens=tokens, **kw)


# -- hand-derived values (the examples and a few more) ----------------------------------------

def test_speculative_sampling_emits_p_exactly():
    # accept 0 always (p/q = 6/5 > 1), accept 1 w.p. 4/5, residual (1, 0): P(0) = 1/2 + 1/2*1/5 = 3/5
    r = law1(es.rules.speculative_sampling, P35, Q12)
    assert r.output == {(0,): F(3, 5), (1,): F(2, 5)}
    assert r.tv == 0 and r.lossless


def test_greedy_match_sampled_emits_four_fifths():
    # draft 0 (1/2) is argmax p -> kept; draft 1 (1/2) -> sample of p: P(0) = 1/2 + 1/2 * 3/5 = 4/5
    r = law1(es.rules.greedy_match_sampled, P35, Q12)
    assert r.output == {(0,): F(4, 5), (1,): F(1, 5)}
    assert r.tv == F(1, 5)


def test_argmax_drafts_scored_with_soft_draft_law():
    # x = argmax q = 0 always; accept w.p. (1/2)/(3/5) = 5/6; residual max(0, p - q) = (0, 1/10) -> token 1
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(3, 5), F(2, 5)))
    soft = law1(es.rules.speculative_sampling, p, q, proposer=es.drafts.chain(1, sampling="argmax", claim="draft"))
    assert soft.output == {(0,): F(5, 6), (1,): F(1, 6)}
    honest = law1(es.rules.speculative_sampling, p, q,
                  proposer=es.drafts.chain(1, sampling="argmax", claim="point_mass"))
    assert honest.output == {(0,): F(1, 2), (1,): F(1, 2)}


def test_resample_from_target_hand_value():
    # x=0 (1/2): accepted; x=1 (1/2): accepted w.p. 4/5, else a sample of p.
    # P(0) = 1/2 + 1/2 * 1/5 * 3/5 = 14/25;  P(1) = 1/2 * 4/5 + 1/2 * 1/5 * 2/5 = 11/25
    r = law1(es.rules.resample_from_target, P35, Q12)
    assert r.output == {(0,): F(14, 25), (1,): F(11, 25)}
    assert r.tv == F(1, 25)


def test_unverified_first_draft_emits_the_draft_law():
    # with one draft and one token the emitted token is the draft itself: law q, TV = TV(p, q) = 1/10
    r = law1(es.rules.unverified_first_draft, P35, Q12)
    assert r.output == {(0,): F(1, 2), (1,): F(1, 2)}
    assert r.tv == F(1, 10)


def test_tiny_clamp_residual_is_biased_by_exactly_tiny_mass():
    # x=2 (1/2) is always rejected (p(2) = 0); residual max(tiny, p - q) = (1/4, 1/4, tiny) / (1/2 + tiny)
    # P(2) = 1/2 * tiny / (1/2 + tiny) = tiny / (1 + 2 tiny); tokens 0, 1 each lose half of it, so TV = P(2)
    p = es.models.context_free((F(1, 2), F(1, 2), 0))
    q = es.models.context_free((F(1, 4), F(1, 4), F(1, 2)))
    r = law1(es.rules.tiny_clamp_residual, p, q)
    assert r.output[(2,)] == TINY / (1 + 2 * TINY)
    assert r.tv == TINY / (1 + 2 * TINY)
    assert r.support_violations == [(2,)]
    assert 1e-39 < float(r.tv) < 1e-37


def test_ensemble_endpoints():
    inst = default_instance()
    kw = dict(target=inst.target, draft=inst.draft, prompt=inst.prompt, tokens=3)
    ss = es.audit(rule=es.rules.speculative_sampling, proposer=es.drafts.chain(2), **kw)
    assert es.audit(rule=es.rules.ensemble(1), proposer=es.drafts.chain(2), **kw).output == ss.output
    # weight 0 accepts every draft: with one draft that is exactly "first draft unverified"
    assert (es.audit(rule=es.rules.ensemble(0), proposer=es.drafts.chain(1), **kw).output
            == es.audit(rule=es.rules.unverified_first_draft, proposer=es.drafts.chain(1), **kw).output)


def test_greedy_match_emits_the_greedy_sequence():
    inst = default_instance()
    r = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=es.rules.greedy_match,
                 prompt=inst.prompt, tokens=4)
    assert r.instance["decoding"] == "greedy"
    assert len(r.output) == 1 and r.output == r.expected and r.tv == 0
    # under decoding="sample" the same rule is (very) biased
    assert not es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=es.rules.greedy_match,
                        prompt=inst.prompt, tokens=4, decoding="sample").lossless


# -- every rule: closed form == rng form == independent baseline -------------------------------------

RULES = [r for r in es.rules.catalog() if r.family == "chain"] + [es.rules.ensemble(F(1, 3))]
PROPOSERS = [("sample", "draft"), ("sample", "point_mass"), ("argmax", "draft"), ("argmax", "point_mass")]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
@settings(max_examples=12, deadline=None)
@given(vocab=st.integers(2, 3), order=st.integers(0, 2), gamma=st.integers(1, 3), tokens=st.integers(1, 3),
       seed=st.integers(0, 10**6), zero=st.sampled_from([0.0, 0.3]), prop=st.sampled_from(PROPOSERS))
def test_closed_form_equals_rng_form(rule, vocab, order, gamma, tokens, seed, zero, prop):
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 1, zero_prob=zero)
    kw = dict(target=target, draft=draft, rule=rule, prompt=(0,), tokens=tokens,
              proposer=es.drafts.chain(gamma, sampling=prop[0], claim=prop[1]))
    try:
        fast = es.audit(**kw)
    except es.InvalidDistribution as exc:
        # a buggy rule can reject a draft whose residual is empty (stale_draft_probs with q_{j-1}(x) = 0):
        # the rng form must fail the same way
        with pytest.raises(es.InvalidDistribution, match="total mass is 0"):
            es.audit(closed_form=False, **kw)
        assert "total mass is 0" in str(exc) and rule is es.rules.stale_draft_probs
        return
    slow = es.audit(closed_form=False, **kw)
    assert fast.paths == 0 and slow.paths > 0  # the two really took different routes
    assert fast.output == slow.output
    assert fast.tokens_per_call == slow.tokens_per_call and fast.target_calls == slow.target_calls


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("vocab,gamma,tokens", [(2, 1, 2), (3, 2, 1), (2, 2, 2)])
def test_engine_matches_independent_baseline(rule, vocab, gamma, tokens):
    target = es.models.random_table(vocab=vocab, order=1, seed=7, zero_prob=0.2)
    draft = es.models.perturbed(target, seed=8)
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(gamma), rule=rule, prompt=(1,), tokens=tokens)
    assert r.output == baseline_law(rule.fn, target, draft, gamma=gamma, prompt=(1,), tokens=tokens)


# -- claims as properties ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", check_cases(), ids=lambda c: f"{c.rule.name}-{c.proposer.describe()}")
def test_every_claim_holds_on_the_default_instance(case):
    rule, proposer, claim, tokens = case
    inst = default_instance()
    r = es.audit(target=inst.target, draft=inst.draft if proposer.needs_draft() else None, proposer=proposer,
                 rule=rule, prompt=inst.prompt, tokens=tokens)
    if claim == "biased":
        assert r.tv > 0
    else:
        assert r.tv == 0


@st.composite
def rational_instance(draw, max_vocab=4):
    vocab = draw(st.integers(2, max_vocab))
    order = draw(st.sampled_from([0, 1, 2, None]))
    seed = draw(st.integers(0, 10**9))
    zero = draw(st.sampled_from([0.0, 0.25]))
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    if draw(st.booleans()):
        draft = es.models.perturbed(target, seed=seed + 1, strength=draw(st.sampled_from([F(1, 4), F(1, 2), 1])))
    else:
        draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 2, zero_prob=zero)
    prompt = tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=2)))
    return target, draft, prompt


@settings(max_examples=40, deadline=None)
@given(inst=rational_instance(), gamma=st.integers(1, 3), tokens=st.integers(1, 3))
def test_speculative_sampling_is_lossless_on_random_rational_instances(inst, gamma, tokens):
    target, draft, prompt = inst
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(gamma), rule=es.rules.speculative_sampling,
                 prompt=prompt, tokens=tokens)
    assert r.tv == 0 and r.output == r.expected


@settings(max_examples=25, deadline=None)
@given(inst=rational_instance(max_vocab=3), gamma=st.integers(1, 3), tokens=st.integers(1, 3),
       rule=st.sampled_from([es.rules.no_bonus, es.rules.sample_and_match]))
def test_other_lossless_rules_on_random_rational_instances(inst, gamma, tokens, rule):
    target, draft, prompt = inst
    r = es.audit(target=target, draft=draft, proposer=es.drafts.chain(gamma), rule=rule, prompt=prompt, tokens=tokens)
    assert r.tv == 0


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(2, 4), seed=st.integers(0, 10**9), gamma=st.integers(1, 3), tokens=st.integers(1, 3),
       prop=st.sampled_from([("sample", "draft"), ("argmax", "point_mass")]))
def test_stale_draft_probs_is_lossless_on_context_free_models(vocab, seed, gamma, tokens, prop):
    # one law at every position (and, for argmax drafts, one drafted token), so q_{j-1} == q_j:
    # the off-by-one changes nothing
    target = es.models.random_table(vocab=vocab, order=0, seed=seed)
    draft = es.models.random_table(vocab=vocab, order=0, seed=seed + 1)
    proposer = es.drafts.chain(gamma, sampling=prop[0], claim=prop[1])
    r = es.audit(target=target, draft=draft, proposer=proposer, rule=es.rules.stale_draft_probs, tokens=tokens)
    assert r.tv == 0


def test_stale_draft_probs_is_biased_on_a_context_dependent_model():
    # order-1 models: after token 0 the draft law changes, so position 1 is scored with the wrong q
    target = es.models.table(vocab=2, order=1, table={(0,): (F(1, 2), F(1, 2)), (1,): (F(1, 2), F(1, 2))})
    draft = es.models.table(vocab=2, order=1, table={(0,): (F(1, 5), F(4, 5)), (1,): (F(4, 5), F(1, 5))})
    kw = dict(target=target, draft=draft, proposer=es.drafts.chain(2), prompt=(0,), tokens=2)
    stale = es.audit(rule=es.rules.stale_draft_probs, **kw)
    assert stale.tv > 0
    assert stale.output == baseline_law(es.rules.stale_draft_probs.fn, target, draft, gamma=2, prompt=(0,), tokens=2)
    assert es.audit(rule=es.rules.speculative_sampling, **kw).tv == 0


def test_catalog_records_are_complete():
    for r in es.rules.catalog():
        assert r.family in es.rules.FAMILIES and r.claim in es.rules.CLAIMS and r.marks_accepted
        assert r.description and r.reference
        assert r.closed_form is not None or r.family == "tree"
        assert es.rules.get(r.name) is r or r.params
