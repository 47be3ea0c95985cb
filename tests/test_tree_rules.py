"""Tree proposers and tree rules: SpecInfer's worked examples, hand values, claims as properties."""

from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

import exactspec as es
from exactspec.laws import exceeds_typical_threshold
from exactspec.trees import TokenTree

U4 = es.models.context_free([F(1, 4)] * 4)  # tokens t1..t4 are ids 0..3


def one_token(rule, proposer, target=U4, draft=None, **kw):
    return es.audit(target=target, draft=draft, proposer=proposer, rule=rule, prompt=(0,), tokens=1, **kw)


# -- SpecInfer's slide example -----------------------------------------------------------------------

def test_specinfer_example_averaged_over_drafts():
    # draft model 1 always proposes t1, draft model 2 is uniform; target uniform.
    # MSS: accept t1 w.p. (1/4)/1; else r = (0, 1/3, 1/3, 1/3) and model 2's draft x is accepted
    # w.p. r(x)/(1/4) = 4/3 -> 1 unless x = t1 (3/4): 1/4 + 3/4 * 3/4 = 13/16.
    # naive: y ~ uniform is accepted iff y is t1 or model 2's draft: 1/4 + 3/4 * 1/4 = 7/16.
    merged = es.drafts.merge([es.models.context_free([1, 0, 0, 0]), U4], gamma=1)
    m = one_token(es.rules.mss, merged)
    n = one_token(es.rules.naive_tree_sampling, merged)
    assert m.accepted_per_call == F(13, 16) and n.accepted_per_call == F(7, 16)
    assert m.tv == 0 and n.tv == 0
    # the merged tree has t1 plus model 2's draft when it differs from t1: 1 + 3/4 nodes on average
    assert m.nodes_per_call == F(7, 4)


def test_specinfer_example_conditioned_on_the_drafts():
    # drafts fixed: t2 claimed from (1/2, 1/2, 0, 0) and t3 claimed from the uniform law.
    # MSS: accept t2 w.p. (1/4)/(1/2) = 1/2; else r = norm(max(0, p - q1)) = (0, 0, 1/2, 1/2) and t3 is
    # accepted w.p. min(1, (1/2)/(1/4)) = 1: total 1.  naive: y uniform hits {t2, t3} w.p. 1/2.
    tree = TokenTree.from_chains(0, [[1], [2]])
    fixed = es.drafts.fixed(tree, {1: (F(1, 2), F(1, 2), 0, 0), 2: [F(1, 4)] * 4})
    assert one_token(es.rules.mss, fixed).accepted_per_call == 1
    assert one_token(es.rules.naive_tree_sampling, fixed).accepted_per_call == F(1, 2)


def test_top1_child_scored_with_the_soft_draft_law():
    # x = argmax q = 0; accept w.p. (1/2)/(3/5) = 5/6; residual max(0, p - q) = (0, 1/10): token 1
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(3, 5), F(2, 5)))
    r = one_token(es.rules.mss, es.drafts.tree((1,), children="topk", claim="draft"), target=p, draft=q)
    assert r.output == {(0,): F(5, 6), (1,): F(1, 6)}
    honest = one_token(es.rules.mss, es.drafts.tree((1,), children="topk", claim="point_mass"), target=p, draft=q)
    assert honest.output == {(0,): F(1, 2), (1,): F(1, 2)}


# -- hand values for the misuses --------------------------------------------------------------------

def test_multi_sample_match_hand_value():
    # q = (1, 0): two iid children, both token 0. Two target samples: accept 0 if either is 0
    # (1 - 1/4 = 3/4), else emit the first sample (token 1): output (3/4, 1/4), TV 1/4.
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((1, 0))
    r = one_token(es.rules.multi_sample_match, es.drafts.tree((2,), children="iid"), target=p, draft=q)
    assert r.output == {(0,): F(3, 4), (1,): F(1, 4)} and r.tv == F(1, 4)


def test_shared_coin_tree_relaxed_threshold_hand_value():
    # one top-1 child, token 1 (p = 1/4); threshold_acc = 1/2: accept iff u <= (1/4)/(1/2) = 1/2.
    # otherwise emit from p without token 1, (2/3, 0, 1/3): output (1/3, 1/2, 1/6), TV = 1/4
    p, q = es.models.context_free((F(1, 2), F(1, 4), F(1, 4))), es.models.context_free((0, 1, 0))
    prop = es.drafts.tree((1,), children="topk", claim="point_mass")
    relaxed = one_token(es.rules.shared_coin_tree(1, F(1, 2)), prop, target=p, draft=q)
    assert relaxed.output == {(0,): F(1, 3), (1,): F(1, 2), (2,): F(1, 6)} and relaxed.tv == F(1, 4)
    assert one_token(es.rules.shared_coin_tree(), prop, target=p, draft=q).tv == 0


def test_shared_coin_tree_needs_distinct_children():
    # iid children can repeat a token, whose probability is then accumulated twice: biased at thresholds 1.
    # p = (1/3, 2/3), q = (3/4, 1/4), two iid children:
    #   (0, 0) w.p. 9/16: accept 0 iff u <= 1/3, else iff u <= 2/3, else emit 1: P(0) = 2/3
    #   (1, 1) w.p. 1/16: acc = 2/3 then 4/3: always 1
    #   mixed  w.p. 3/8:  distinct children, exact: P(0) = 1/3
    # P(0) = 9/16 * 2/3 + 3/8 * 1/3 = 1/2, so the output is (1/2, 1/2) and TV = 1/2 - 1/3 = 1/6
    p, q = es.models.context_free((F(1, 3), F(2, 3))), es.models.context_free((F(3, 4), F(1, 4)))
    r = one_token(es.rules.shared_coin_tree(), es.drafts.tree((2,), children="iid"), target=p, draft=q)
    assert r.output == {(0,): F(1, 2), (1,): F(1, 2)} and r.tv == F(1, 6)


def test_typical_acceptance_decides_the_irrational_threshold_exactly():
    # eps = 1 leaves only alpha * exp(-H(p)); alpha = 1. For p = (1/2, 1/2), exp(-H) = 1/2 exactly and
    # p(x) = 1/2 is *not* greater: the child is rejected and a sample of p emitted: lossless.
    rule = es.rules.typical_acceptance(1, 1)
    top1 = es.drafts.tree((1,), children="topk", claim="point_mass")
    half = es.models.context_free((F(1, 2), F(1, 2)))
    assert one_token(rule, top1, target=half, draft=es.models.context_free((1, 0))).tv == 0
    # p = (1/3, 2/3): exp(-H) = 0.5291...; a child 1 (2/3) is accepted, a child 0 (1/3) is not
    p = es.models.context_free((F(1, 3), F(2, 3)))
    on1 = one_token(rule, top1, target=p, draft=es.models.context_free((0, 1)))
    on0 = one_token(rule, top1, target=p, draft=es.models.context_free((1, 0)))
    assert on1.output == {(1,): 1} and on0.output == {(0,): F(1, 3), (1,): F(2, 3)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=4), st.integers(1, 30), st.integers(1, 5))
def test_typical_threshold_matches_high_precision(weights, num, alpha_den):
    import mpmath
    total = sum(weights)
    p = tuple(F(w, total) for w in weights)
    value, alpha = F(num, 31), F(1, alpha_den)
    with mpmath.workprec(600):
        h = -sum(mpmath.mpf(x.numerator) / x.denominator * mpmath.log(mpmath.mpf(x.numerator) / x.denominator)
                 for x in p)
        threshold = mpmath.mpf(alpha.numerator) / alpha.denominator * mpmath.exp(-h)
        v = mpmath.mpf(value.numerator) / value.denominator
        if abs(v - threshold) > mpmath.mpf(2) ** -500:   # not a tie: 600 bits decide it
            assert exceeds_typical_threshold(value, p, alpha) == (v > threshold)


def test_typical_threshold_ties_are_exact():
    # uniform laws: exp(-H) = 1/n exactly, so value = alpha/n is a tie (not greater)
    for n in (2, 3, 4, 5):
        p = (F(1, n),) * n
        assert not exceeds_typical_threshold(F(1, n), p, 1)
        assert exceeds_typical_threshold(F(1, n) + F(1, 10 ** 30), p, 1)
        assert not exceeds_typical_threshold(F(1, 2 * n), p, F(1, 2))


# -- closed form vs rng form ------------------------------------------------------------------------

KINDS = [("iid", "draft"), ("without_replacement", "renormalized"), ("topk", "point_mass"), ("topk", "draft"),
         ("topk", "renormalized"), ("without_replacement", "draft"), ("iid", "point_mass")]


@settings(max_examples=40, deadline=None)
@given(vocab=st.integers(2, 3), order=st.integers(0, 2), seed=st.integers(0, 10**6),
       expansion=st.lists(st.integers(1, 2), min_size=1, max_size=2), tokens=st.integers(1, 3),
       kind=st.sampled_from(KINDS), zero=st.sampled_from([0.0, 0.3]))
def test_mss_closed_form_equals_rng_form(vocab, order, seed, expansion, tokens, kind, zero):
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 1, zero_prob=zero)
    kw = dict(target=target, draft=draft, rule=es.rules.mss, prompt=(0,), tokens=tokens,
              proposer=es.drafts.tree(tuple(expansion), children=kind[0], claim=kind[1]))
    fast, slow = es.audit(**kw), es.audit(closed_form=False, **kw)
    assert fast.paths == 0 and slow.paths > 0
    assert fast.output == slow.output
    assert (fast.tokens_per_call, fast.accepted_per_call, fast.target_calls) == (
        slow.tokens_per_call, slow.accepted_per_call, slow.target_calls)


MSM_KINDS = [("iid", "draft"), ("without_replacement", "renormalized"), ("topk", "point_mass")]


@settings(max_examples=40, deadline=None)
@given(vocab=st.integers(2, 4), order=st.integers(0, 2), seed=st.integers(0, 10**6),
       expansion=st.sampled_from([(2,), (2, 1), (3,), (2, 2), (1,), (1, 2)]), tokens=st.integers(1, 3),
       kind=st.sampled_from(MSM_KINDS), zero=st.sampled_from([0.0, 0.3]))
def test_multi_sample_match_closed_form_equals_rng_form(vocab, order, seed, expansion, tokens, kind, zero):
    # the closed form (a geometric series per node) against the rule's rng form, enumerated draw by draw
    if vocab == 4 and order == 2 and expansion == (2, 2):
        tokens = min(tokens, 2)   # keeps the enumeration under a second or so
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 1, zero_prob=zero)
    kw = dict(target=target, draft=draft, rule=es.rules.multi_sample_match, prompt=(0,), tokens=tokens,
              proposer=es.drafts.tree(expansion, children=kind[0], claim=kind[1]))
    fast, slow = es.audit(**kw), es.audit(closed_form=False, **kw)
    assert fast.paths == 0 and slow.paths > 0
    assert fast.output == slow.output and fast.tv == slow.tv and fast.verdict == slow.verdict
    assert (fast.tokens_per_call, fast.accepted_per_call, fast.target_calls) == (
        slow.tokens_per_call, slow.accepted_per_call, slow.target_calls)


def test_multi_sample_match_closed_form_on_the_check_instance():
    # the configuration of `exactspec check` (tree (2,1), iid children): biased, the same law both ways
    from exactspec.instances import default_instance
    inst = default_instance()
    kw = dict(target=inst.target, draft=inst.draft, rule=es.rules.multi_sample_match, prompt=inst.prompt, tokens=4,
              proposer=es.drafts.tree((2, 1), children="iid"))
    fast, slow = es.audit(**kw), es.audit(closed_form=False, **kw)
    assert fast.paths == 0 and slow.paths > 0
    assert fast.output == slow.output and fast.tv == slow.tv > 0 and fast.verdict == slow.verdict == "biased"


def test_multi_sample_match_closed_form_hand_value_and_float_field():
    # the hand value above through the closed form; in a float field the engine keeps enumerating
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((1, 0))
    r = one_token(es.rules.multi_sample_match, es.drafts.tree((2,), children="iid"), target=p, draft=q)
    assert r.paths == 0 and r.output == {(0,): F(3, 4), (1,): F(1, 4)}
    f = one_token(es.rules.multi_sample_match, es.drafts.tree((2,), children="iid"), target=p, draft=q, field="float")
    assert f.paths > 0 and f.output == {(0,): 0.75, (1,): 0.25}


# -- claims as properties -----------------------------------------------------------------------------

@st.composite
def tree_instance(draw, max_vocab=4):
    vocab = draw(st.integers(2, max_vocab))
    order = draw(st.sampled_from([0, 1, 2]))
    seed = draw(st.integers(0, 10**9))
    zero = draw(st.sampled_from([0.0, 0.25]))
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 1, zero_prob=zero)
    return target, draft


HONEST = [("iid", "draft"), ("without_replacement", "renormalized"), ("topk", "point_mass")]


@settings(max_examples=40, deadline=None)
@given(inst=tree_instance(), expansion=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       tokens=st.integers(1, 3), kind=st.sampled_from(HONEST))
def test_mss_is_lossless_with_honest_claims(inst, expansion, tokens, kind):
    target, draft = inst
    r = es.audit(target=target, draft=draft, rule=es.rules.mss, prompt=(1,), tokens=tokens,
                 proposer=es.drafts.tree(tuple(expansion), children=kind[0], claim=kind[1]))
    assert r.tv == 0


@settings(max_examples=25, deadline=None)
@given(inst=tree_instance(max_vocab=3), expansion=st.lists(st.integers(1, 2), min_size=1, max_size=2),
       tokens=st.integers(1, 2), children=st.sampled_from(["iid", "without_replacement", "topk"]))
def test_naive_tree_sampling_is_lossless_for_any_children(inst, expansion, tokens, children):
    target, draft = inst
    r = es.audit(target=target, draft=draft, rule=es.rules.naive_tree_sampling, prompt=(1,), tokens=tokens,
                 proposer=es.drafts.tree(tuple(expansion), children=children))
    assert r.tv == 0


@settings(max_examples=25, deadline=None)
@given(inst=tree_instance(max_vocab=3), expansion=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       tokens=st.integers(1, 2), children=st.sampled_from(["without_replacement", "topk"]))
def test_shared_coin_tree_is_lossless_at_thresholds_one_with_distinct_children(inst, expansion, tokens, children):
    target, draft = inst
    r = es.audit(target=target, draft=draft, rule=es.rules.shared_coin_tree(), prompt=(1,), tokens=tokens,
                 proposer=es.drafts.tree(tuple(expansion), children=children))
    assert r.tv == 0


@settings(max_examples=25, deadline=None)
@given(inst=tree_instance(), expansion=st.lists(st.integers(1, 3), min_size=1, max_size=3), tokens=st.integers(1, 3))
def test_greedy_tree_is_lossless_for_greedy_decoding(inst, expansion, tokens):
    target, draft = inst
    r = es.audit(target=target, draft=draft, rule=es.rules.greedy_tree, prompt=(1,), tokens=tokens,
                 proposer=es.drafts.tree(tuple(expansion), children="topk", claim="point_mass"))
    assert r.instance["decoding"] == "greedy" and r.tv == 0


@settings(max_examples=20, deadline=None)
@given(inst=tree_instance(max_vocab=3), n_models=st.integers(2, 3), gamma=st.integers(1, 2), tokens=st.integers(1, 2),
       seed=st.integers(0, 10**6))
def test_merge_of_several_draft_models_is_lossless(inst, n_models, gamma, tokens, seed):
    target, _ = inst
    drafts = [es.models.random_table(vocab=target.vocab, order=1, seed=seed + i, zero_prob=0.2)
              for i in range(n_models)]
    r = es.audit(target=target, draft=None, rule=es.rules.mss, prompt=(1,), tokens=tokens,
                 proposer=es.drafts.merge(drafts, gamma))
    assert r.tv == 0


@settings(max_examples=40, deadline=None)
@given(inst=tree_instance(), k=st.integers(1, 3), kind=st.sampled_from(HONEST + [("iid", "point_mass")]))
def test_mss_rejects_no_more_often_than_naive_sampling(inst, k, kind):
    # SpecInfer Theorem 4.3, on one-level trees, where P(reject) = 1 - E[accepted drafts]
    target, draft = inst
    prop = es.drafts.tree((k,), children=kind[0], claim=kind[1])
    kw = dict(target=target, draft=draft, proposer=prop, prompt=(1,), tokens=1)
    mss, naive = es.audit(rule=es.rules.mss, **kw), es.audit(rule=es.rules.naive_tree_sampling, **kw)
    if kind != ("iid", "point_mass"):  # the theorem assumes honest claims
        assert 1 - mss.accepted_per_call <= 1 - naive.accepted_per_call


# -- proposers ------------------------------------------------------------------------------------

def test_children_are_drawn_only_when_the_verifier_reaches_them():
    # a rule that only reads the root's first child costs the same whatever the width and depth
    def first_child_only(step, rng):
        yield step.token(step.children(step.root)[0])
    target = es.models.random_table(vocab=4, order=0, seed=1)
    draft = es.models.random_table(vocab=4, order=0, seed=2)
    paths = [es.audit(target=target, draft=draft, rule=es.rule(family="tree", claim="biased")(first_child_only),
                      proposer=es.drafts.tree(e), tokens=1).paths for e in ((1,), (3, 3, 3))]
    assert paths[0] == paths[1]


def test_expected_nodes_follow_the_support():
    # top-3 of a law with two positive entries gives 2 children per node: 2 + 2*2 nodes
    target = es.models.context_free((F(1, 2), F(1, 2), 0))
    draft = es.models.context_free((F(1, 2), F(1, 2), 0))
    r = es.audit(target=target, draft=draft, rule=es.rules.mss, tokens=1,
                 proposer=es.drafts.tree((3, 2), children="topk", claim="point_mass"))
    assert r.nodes_per_call == 6
    iid = es.audit(target=target, draft=draft, rule=es.rules.mss, tokens=1, proposer=es.drafts.tree((3, 2)))
    assert iid.nodes_per_call == 3 + 3 * 2


def test_tree_and_fixed_argument_errors():
    with pytest.raises(es.ExactSpecError, match="children must be one of"):
        es.drafts.tree((2,), children="beam")
    with pytest.raises(es.ExactSpecError, match="claim must be one of"):
        es.drafts.tree((2,), claim="soft")
    with pytest.raises(es.ExactSpecError, match="no claimed law for node 2"):
        es.drafts.fixed(TokenTree.from_chains(0, [[1], [2]]), {1: (0, 1, 0)})
    with pytest.raises(es.ExactSpecError, match="verifies trees but the proposer drafts a chain"):
        es.audit(target=U4, draft=U4, rule=es.rules.mss, proposer=es.drafts.chain(2))
    with pytest.raises(es.ExactSpecError, match="merge draft model 0 has vocab 2"):
        es.audit(target=U4, rule=es.rules.mss, proposer=es.drafts.merge([es.models.context_free((1, 0))], 1))


@pytest.mark.parametrize("rule", [es.rules.mss, es.rules.naive_tree_sampling, es.rules.multi_sample_match,
                                  es.rules.shared_coin_tree(1, F(1, 2)), es.rules.typical_acceptance(F(1, 2), 1)],
                         ids=lambda r: r.name)
@pytest.mark.parametrize("children,claim", [("iid", "draft"), ("without_replacement", "renormalized"),
                                            ("topk", "point_mass")])
def test_tree_engine_matches_independent_baseline(rule, children, claim):
    from benchmarks.baseline import baseline_tree_law
    target = es.models.random_table(vocab=3, order=1, seed=21, zero_prob=0.2)
    draft = es.models.perturbed(target, seed=22)
    r = es.audit(target=target, draft=draft, rule=rule, prompt=(2,), tokens=2,
                 proposer=es.drafts.tree((2, 1), children=children, claim=claim))
    assert r.output == baseline_tree_law(rule.fn, target, draft, expansion=(2, 1), children=children, claim=claim,
                                         prompt=(2,), tokens=2)
