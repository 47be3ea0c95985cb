"""Tests for exactspec.report: AuditReport fields, verdicts, rendering and JSON, on hand-derived instances."""

from __future__ import annotations

import json
from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

import exactspec as es
from exactspec.fields import get_field
from exactspec.instances import make_instance

P = es.models.context_free((F(3, 5), F(2, 5)))
Q = es.models.context_free((F(1, 2), F(1, 2)))


@pytest.fixture(params=[True, False], ids=["closed_form", "enumerated"])
def closed_form(request):
    return request.param


@pytest.fixture
def gms(closed_form):
    """greedy_match_sampled on p = (3/5, 2/5), q = (1/2, 1/2), chain(gamma=1), 1 token."""
    return es.audit(target=P, draft=Q, proposer=es.drafts.chain(gamma=1), rule=es.rules.greedy_match_sampled,
                    tokens=1, closed_form=closed_form)


# -- greedy_match_sampled: a hand-derived bias -------------------------------------------------------
def test_output_expected_and_tv_by_hand(gms):
    # the draft is 0 w.p. 1/2: 0 = argmax p, so it is accepted and emitted;
    # the draft is 1 w.p. 1/2: rejected, the rule emits a sample of p.
    # P(0) = 1/2 + 1/2 * 3/5 = 4/5, P(1) = 1/2 * 2/5 = 1/5
    assert gms.output == {(0,): F(4, 5), (1,): F(1, 5)}
    assert gms.expected == {(0,): F(3, 5), (1,): F(2, 5)}
    # TV = 1/2 (|4/5 - 3/5| + |1/5 - 2/5|) = 1/2 (1/5 + 1/5) = 1/5
    assert gms.tv == F(1, 5)
    assert gms.tolerance == 0


def test_verdict_and_claim(gms):
    assert gms.rule == "greedy_match_sampled"
    assert gms.claim == "biased"
    assert gms.lossless is False
    assert gms.verdict == "biased"
    assert gms.claim_holds is True   # the rule claims to be biased, and it is
    assert gms.support_violations == []


def test_worst_outcomes(gms):
    # both outcomes are off by 1/5; ties are ordered by tokens, so (0,) comes first
    assert gms.worst[0] == ((0,), F(4, 5), F(3, 5))
    assert gms.worst[0].tokens == (0,) and gms.worst[0].diff == F(1, 5)
    assert gms.worst == [es.Outcome((0,), F(4, 5), F(3, 5)), es.Outcome((1,), F(1, 5), F(2, 5))]
    assert gms.worst[1].diff == F(-1, 5)


def test_worst_count_and_lossless_has_no_worst():
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=es.rules.greedy_match_sampled, tokens=1,
                 worst=1)
    assert r.worst == [((0,), F(4, 5), F(3, 5))]
    ok = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=es.rules.speculative_sampling, tokens=1)
    assert ok.worst == []   # outcomes with output == expected are never listed


def test_efficiency_of_greedy_match_sampled_by_hand(gms):
    # gamma = 1: draft 0 (prob 1/2) accepted -> 0 then a bonus token: 2 tokens;
    # draft 1 (prob 1/2) rejected -> 1 token. E = 1/2 * 2 + 1/2 * 1 = 3/2
    assert gms.tokens_per_call == F(3, 2)
    # one token: the first target call always emits it
    assert gms.target_calls == 1


def test_summary_text(gms):
    text = gms.summary()
    assert "BIASED" in text
    assert "TV(output, expected) = 1/5" in text
    assert "[CLAIM BROKEN]" not in text
    assert "greedy_match_sampled (claim: biased)" in text
    assert "tokens per call = 3/2" in text
    assert "(0,): output 4/5 vs expected 3/5" in text
    assert str(gms) == text


def test_repr_html_contains_verdict(gms):
    h = gms._repr_html_()
    assert "<b>greedy_match_sampled</b>" in h
    assert ">biased</b>" in h
    assert "TV = 1/5" in h
    assert "<td>4/5</td><td>3/5</td>" in h
    ok = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=es.rules.speculative_sampling, tokens=1)
    assert ">lossless</b>" in ok._repr_html_() and "TV = 0" in ok._repr_html_()


def test_to_dict_fields(gms):
    d = json.loads(gms.to_json())
    assert d["rule"] == "greedy_match_sampled" and d["claim"] == "biased"
    assert d["field"] == "fraction" and d["precision"] is None
    assert d["tv"] == "1/5" and d["tv_float"] == 0.2 and d["tolerance"] == "0"
    assert d["lossless"] is False and d["verdict"] == "biased" and d["claim_holds"] is True
    assert d["tokens_per_call"] == "3/2" and d["target_calls"] == "1"
    assert d["output"] == [[[0], "4/5"], [[1], "1/5"]]
    assert d["expected"] == [[[0], "3/5"], [[1], "2/5"]]
    assert d["worst"][0] == {"tokens": [0], "output": "4/5", "expected": "3/5"}
    assert d["support_violations"] == []
    assert d["instance"]["tokens"] == 1 and d["instance"]["vocab"] == 2


def test_json_round_trip_keeps_laws_exactly(gms):
    back = es.AuditReport.from_json(gms.to_json())
    assert back.output == {(0,): F(4, 5), (1,): F(1, 5)}
    assert back.expected == {(0,): F(3, 5), (1,): F(2, 5)}
    assert all(type(v) is F for v in list(back.output.values()) + list(back.expected.values()))
    assert back.tv == F(1, 5) and back.tokens_per_call == F(3, 2) and back.target_calls == 1
    assert back.verdict == "biased" and back.claim_holds and back.field.exact
    assert back.rule == gms.rule and back.claim == gms.claim and back.instance == gms.instance
    assert back.worst == gms.worst
    assert back.to_dict() | {"seconds": 0} == gms.to_dict() | {"seconds": 0}


@pytest.mark.parametrize("field", ["fraction", "float", "mpmath"])
def test_json_round_trip_keeps_laws_in_every_field(field):
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2, seed=3)
    r = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2,
                 rule=es.rules.resample_from_target, field=field)
    back = es.AuditReport.from_json(r.to_json())
    assert back.field.name == field
    assert back.output == r.output            # every probability exactly as computed
    assert back.expected == r.expected
    assert back.tv == r.tv
    assert back.tokens_per_call == r.tokens_per_call
    assert back.verdict == r.verdict and back.claim_holds == r.claim_holds


# -- support violations ------------------------------------------------------------------------------
ZERO_P = es.models.context_free((F(1, 2), F(1, 2), 0))
COVER_Q = es.models.context_free((F(1, 4), F(1, 4), F(1, 2)))


@pytest.mark.parametrize("gamma", [1, 2])
def test_support_violation_of_tiny_clamp_residual(gamma, closed_form):
    r = es.audit(target=ZERO_P, draft=COVER_Q, proposer=es.drafts.chain(gamma), rule=es.rules.tiny_clamp_residual,
                 tokens=1, closed_form=closed_form)
    # draft 0 or 1 (prob 1/2): p/q = 2, accepted. Draft 2 (prob 1/2): p(2) = 0, rejected; the
    # residual clamps p - q = (1/4, 1/4, -1/2) up to (1/4, 1/4, tiny), tiny = 2**-126, so token 2 is
    # emitted w.p. 1/2 * tiny / (1/2 + tiny) = 1 / (2**126 + 2): a token the target never emits.
    assert r.support_violations == [(2,)]
    assert r.output[(2,)] == F(1, 2 ** 126 + 2)
    assert r.output[(0,)] == r.output[(1,)] == (1 - F(1, 2 ** 126 + 2)) / 2
    assert r.tv == F(1, 2 ** 126 + 2)
    assert "SUPPORT VIOLATION" in r.summary()
    assert json.loads(r.to_json())["support_violations"] == [[2]]


@pytest.mark.parametrize("gamma", [1, 2])
def test_no_support_violation_for_speculative_sampling(gamma, closed_form):
    r = es.audit(target=ZERO_P, draft=COVER_Q, proposer=es.drafts.chain(gamma), rule=es.rules.speculative_sampling,
                 tokens=1, closed_form=closed_form)
    # the residual max(0, p - q) = (1/4, 1/4, 0) never puts mass on token 2
    assert r.support_violations == []
    assert r.output == {(0,): F(1, 2), (1,): F(1, 2)}
    assert r.tv == 0 and r.lossless and r.claim_holds
    assert "SUPPORT VIOLATION" not in r.summary()


# -- efficiency of speculative_sampling over two tokens -----------------------------------------------
def test_speculative_sampling_two_tokens_by_hand(closed_form):
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(gamma=1), rule=es.rules.speculative_sampling,
                 tokens=2, closed_form=closed_form)
    # a = sum(min(p, q)) = 1/2 + 2/5 = 9/10; tokens per call = 1 + a = 19/10
    assert r.tokens_per_call == F(19, 10)
    assert r.tokens_per_call == es.theory.expected_tokens(F(9, 10), 1)
    # the first call emits 2 tokens iff the draft is accepted (prob 9/10), otherwise 1 token and a
    # second call is needed: E[calls] = 1 + 1/10 = 11/10
    assert r.target_calls == F(11, 10)
    # lossless: the two tokens are i.i.d. p
    assert r.output == {(0, 0): F(9, 25), (0, 1): F(6, 25), (1, 0): F(6, 25), (1, 1): F(4, 25)}
    assert r.output == r.expected and r.tv == 0
    assert r.lossless and r.verdict == "lossless" and r.claim_holds
    text = r.summary()
    assert "LOSSLESS" in text and "TV(output, expected) = 0" in text
    assert "tokens per call = 19/10" in text and "target calls for 2 tokens = 11/10" in text


# -- a claim that does not hold -------------------------------------------------------------------------
def test_claim_broken_is_reported():
    # tiny_clamp_residual is biased by ~1e-38: the float field cannot see it, so its claim is undecided there
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2,
                 rule=es.rules.tiny_clamp_residual, field="float")
    assert r.lossless and not r.claim_holds
    assert "LOSSLESS WITHIN 1e-12 (not an exact proof)  [CLAIM UNDECIDED: the float field cannot resolve a TV " \
           "below its tolerance]" in r.summary()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.tuples(st.integers(0, 2), st.integers(0, 2)), st.fractions(0, 1), max_size=9),
       st.dictionaries(st.tuples(st.integers(0, 2), st.integers(0, 2)), st.fractions(0, 1), max_size=9),
       st.integers(0, 12))
def test_worst_is_the_head_of_the_full_sort(output, expected, n):
    # worst keeps only the n largest differences (no full sort): the same list as sorting every outcome
    from exactspec.report import AuditReport, Outcome
    rep = AuditReport(rule="r", claim="lossless", instance={}, field=get_field(), output=output, expected=expected,
                      tv=F(0), tolerance=0, tokens_per_call=F(1), target_calls=F(1), seconds=0.0, paths=0,
                      step_laws=0, worst_count=n)
    rows = [Outcome(k, output.get(k, 0), expected.get(k, 0)) for k in set(output) | set(expected)]
    rows.sort(key=lambda o: (-abs(o.output - o.expected), o.tokens))
    assert rep.worst == [o for o in rows[:n] if o.output != o.expected]
