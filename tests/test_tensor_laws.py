"""The tensor law engine agrees with the exact enumerator (to float64 rounding) for every chain rule."""

from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate import Engine  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.tensor import TENSOR_CHAIN_RULES, chain_step_laws  # noqa: E402

RULES = [r for r in es.rules.catalog() if r.family == "chain"] + [es.rules.ensemble(F(1, 3))]
CONFIGS = [("sample", "draft"), ("sample", "point_mass"), ("argmax", "draft"), ("argmax", "point_mass")]


def per_position(laws):
    last = len(laws) - 1
    return es.models.from_function(vocab=len(laws[0]), order=None, fn=lambda ctx: laws[min(len(ctx), last)])


def exact_step(rule, p_laws, q_laws, sampling, claim):
    target, draft = per_position(p_laws), per_position(q_laws + [q_laws[-1]])
    proposer = es.drafts.chain(len(q_laws), sampling=sampling, claim=claim)
    engine = Engine(rule, proposer, target, draft, get_field(backend="python"))
    law = engine.step_law((), None)
    _, accepted, _ = engine.efficiency(())
    return law, accepted


@st.composite
def laws(draw, n, vocab):
    out = []
    for _ in range(n):
        w = draw(st.lists(st.integers(0, 6), min_size=vocab, max_size=vocab).filter(lambda ws: sum(ws) > 0))
        out.append([F(x, sum(w)) for x in w])
    return out


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), vocab=st.integers(2, 4), gamma=st.integers(1, 3), config=st.sampled_from(CONFIGS))
def test_tensor_laws_equal_the_exact_enumerator(rule, data, vocab, gamma, config):
    p_laws = data.draw(laws(gamma + 1, vocab))
    q_laws = data.draw(laws(gamma, vocab))
    if rule.name == "stale_draft_probs" and config[1] == "point_mass":
        with pytest.raises(es.ExactSpecError, match="couples consecutive drafts"):
            chain_step_laws(rule, [[0.5, 0.5]] * 2, [[0.5, 0.5]], claim="point_mass", device="cpu")
        return
    try:
        law, accepted = exact_step(rule, p_laws, q_laws, *config)
    except es.InvalidDistribution:
        return   # a buggy rule with an empty residual (stale_draft_probs): no law to compare
    t = chain_step_laws(rule, [[float(x) for x in l] for l in p_laws], [[float(x) for x in l] for l in q_laws],
                        sampling=config[0], claim=config[1], device="cpu")
    tol = 1e-12                                          # float64 rounding of a few dozen operations
    for j in range(gamma + 1):
        for y in range(vocab):
            exact = sum(w for e, w in law.items() if len(e) > j and e[j] == y)
            assert abs(float(exact) - float(t.position_marginals[j, y])) < tol
    expected_accepted = sum(n * float(t.accepted_length[n]) for n in range(gamma + 1))
    assert abs(float(accepted) - expected_accepted) < tol
    if rule.name != "no_bonus":       # with no bonus, a length of gamma is ambiguous (rejected last, or all accepted)
        for n in range(gamma + 1):
            for y in range(vocab):
                exact = sum(w for e, w in law.items() if len(e) == n + 1 and e[-1] == y)
                assert abs(float(exact) - float(t.joint[n, y])) < tol


def test_lossless_rules_have_zero_tv_and_biased_ones_do_not_at_large_vocab():
    gen = torch.Generator().manual_seed(0)
    vocab, gamma = 32_000, 4
    p = torch.softmax(torch.randn(gamma + 1, vocab, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.log(p[:gamma]) + 0.5 * torch.randn(gamma, vocab, generator=gen, dtype=torch.float64), -1)
    for name in ("speculative_sampling", "no_bonus", "sample_and_match"):
        assert float(chain_step_laws(name, p, q, device="cpu").tv) < 1e-12
    for name in ("greedy_match_sampled", "resample_from_target", "unverified_first_draft", "stale_draft_probs"):
        assert float(chain_step_laws(name, p, q, device="cpu").tv) > 1e-3
    soft_argmax = chain_step_laws("speculative_sampling", p, q, sampling="argmax", claim="draft", device="cpu")
    assert float(soft_argmax.tv) > 1e-3
    assert soft_argmax.worst_tokens(0)[0][0] == int(q[0].argmax())


def test_batched_inputs_and_errors():
    p = torch.tensor([[[0.6, 0.4], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    q = torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]], dtype=torch.float64)
    t = chain_step_laws("greedy_match_sampled", p, q, device="cpu")
    assert t.position_marginals.shape == (2, 2, 2) and abs(float(t.position_marginals[0, 0, 0]) - 0.8) < 1e-15
    assert t.tv.shape == (2,)
    with pytest.raises(es.ExactSpecError, match="target must be"):
        chain_step_laws("speculative_sampling", p[0], q, device="cpu")
    with pytest.raises(es.ExactSpecError, match="no tensor form for rule 'mss'"):
        chain_step_laws("mss", p[0], q[0], device="cpu")
    assert set(TENSOR_CHAIN_RULES) == {r.name.split("(")[0] for r in RULES}


# -- trees of small width -------------------------------------------------------------------------------

from exactspec.tensor import tree_step_laws  # noqa: E402

TREE_CONFIGS = [(es.rules.mss, "iid", "draft"), (es.rules.mss, "topk", "point_mass"),
                (es.rules.naive_tree_sampling, "iid", "draft"), (es.rules.naive_tree_sampling, "topk", "point_mass")]


@pytest.mark.parametrize("config", TREE_CONFIGS, ids=lambda c: f"{c[0].name}-{c[1]}-{c[2]}")
@settings(max_examples=15, deadline=None)
@given(data=st.data(), vocab=st.integers(2, 3), depth=st.integers(1, 2), width=st.integers(1, 2))
def test_tree_tensor_laws_equal_the_exact_enumerator(config, data, vocab, depth, width):
    rule, children, claim = config
    p_laws = data.draw(laws(depth + 1, vocab))
    q_laws = data.draw(laws(depth, vocab))
    target, draft = per_position(p_laws), per_position(q_laws + [q_laws[-1]])
    proposer = es.drafts.tree((width,) * depth, children=children, claim=claim)
    engine = Engine(rule, proposer, target, draft, get_field(backend="python"))
    law = engine.step_law((), None)
    t = tree_step_laws(rule, [[float(x) for x in l] for l in p_laws], [[float(x) for x in l] for l in q_laws],
                       width=width, children=children, claim=claim, device="cpu")
    tol = 1e-12
    for j in range(depth + 1):
        for y in range(vocab):
            exact = sum(w for e, w in law.items() if len(e) > j and e[j] == y)
            assert abs(float(exact) - float(t.position_marginals[j, y])) < tol
    for n in range(depth + 1):
        exact = sum(w for e, w in law.items() if len(e) == n + 1)
        assert abs(float(exact) - float(t.accepted_length[n])) < tol
    assert float(t.tv) < 1e-12      # every supported configuration is lossless


def test_tree_tensor_laws_at_large_vocab_and_errors():
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(3, 32_000, generator=gen, dtype=torch.float64) * 3, -1)
    q = torch.softmax(torch.log(p[:2]) + torch.randn(2, 32_000, generator=gen, dtype=torch.float64), -1)
    t = tree_step_laws("mss", p, q, width=3)
    naive = tree_step_laws("naive_tree_sampling", p, q, width=3)
    assert float(t.tv) < 1e-12 and float(naive.tv) < 1e-12
    # SpecInfer's point: MSS accepts more than naive sampling on the same tree
    mean = lambda law: float((torch.arange(3, dtype=torch.float64) * law.accepted_length).sum())  # noqa: E731
    assert mean(t) > mean(naive)
    with pytest.raises(es.ExactSpecError, match="no tensor tree form"):
        tree_step_laws("mss", p, q, width=2, children="without_replacement", claim="renormalized")


# -- real batched samplers, rows enumerated together ------------------------------------------------------

from exactspec.bugzoo import torch_samplers as tzoo  # noqa: E402
from exactspec.tensor import audit_batched_sampler  # noqa: E402


def _peaked(vocab, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, vocab, generator=gen, dtype=torch.float64) * 4
    return torch.softmax(logits, -1), torch.softmax(logits[:k] + torch.randn(k, vocab, generator=gen,
                                                                              dtype=torch.float64), -1)


def test_batched_audit_matches_the_tensor_laws_up_to_float32():
    p, q = _peaked(1500, 2)
    exact = chain_step_laws("speculative_sampling", p, q, device="cpu")
    a = audit_batched_sampler(tzoo.correct, target=p, draft=q, chunk=512, device="cpu")
    # all k = 2 positions per call, the 2**2 patterns of each draft sequence as rows: 512 // 4 = 128 sequences a
    # call, ceil(1500 / 128) = 12 calls for the diagonal covering, 512 / 128 = 4 for its check on a second pairing
    assert a.exact and a.mode == "diagonal" and a.sampler_calls == 12 + 4
    # the sampler computes in float32: its law sits within float32 rounding of the exact rule's
    assert torch.allclose(a.law.position_marginals, exact.position_marginals, atol=1e-6, rtol=0)
    assert a.tv < 1e-6
    bad = audit_batched_sampler(tzoo.resample_target, target=p, draft=q, chunk=512, device="cpu")
    ref = chain_step_laws("resample_from_target", p, q, device="cpu")
    assert bad.tv > 1e-2 and abs(bad.tv - float(ref.tv)) < 1e-6


def test_batched_audit_falls_back_to_statistics_when_assumptions_fail():
    def log_uniform(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        u = torch.rand(target_probs.shape[0], 1)
        keep = torch.log(u) < 0                                # not a threshold comparison of u
        return torch.where(keep, draft_token_ids, bonus_token_ids)

    p, q = _peaked(50, 1)
    a = audit_batched_sampler(log_uniform, target=p, draft=q, fallback_samples=300, device="cpu")
    assert not a.exact and "not met" in a.assumptions and a.statistical.samples == 300
    assert "statistical audit instead" in str(a)


def test_batched_audit_records_multinomial_draws_as_laws():
    def multinomial_sampler(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        batch = target_probs.shape[0]
        p_x = target_probs.gather(-1, draft_token_ids.unsqueeze(-1)).squeeze(-1)
        q_x = draft_probs.gather(-1, draft_token_ids.unsqueeze(-1)).squeeze(-1)
        accepted = torch.rand(batch, 1) < p_x / q_x
        out = torch.full((batch, 2), -1, dtype=torch.long)
        residual = torch.clamp(target_probs[:, 0] - draft_probs[:, 0], min=0)
        recovered = torch.multinomial(residual / residual.sum(-1, keepdim=True).clamp(min=1e-30), 1)[:, 0]
        out[:, 0] = torch.where(accepted[:, 0], draft_token_ids[:, 0], recovered)
        out[:, 1] = torch.where(accepted[:, 0], bonus_token_ids[:, 0], torch.full_like(recovered, -1))
        return out

    p, q = _peaked(300, 1, seed=4)
    a = audit_batched_sampler(multinomial_sampler, target=p, draft=q, device="cpu")
    assert a.exact and a.tv < 1e-6
