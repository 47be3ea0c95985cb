"""Horizons that can see the bug: defaults observe every position of a first and a second step.

Issue 9 ("no false pass"): ``es.audit`` and ``es.assert_lossless`` defaulted to one token and the
CLI to ``tokens <= gamma``, so a rule drawing its bonus token from the draft law, or a stale draft
law, read LOSSLESS with exit 0. Every test here failed on that code.
"""

from __future__ import annotations

import inspect
import json
import textwrap
import warnings
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import cli
from exactspec.instances import make_instance
from exactspec.laws import residual


def bonus_from_draft(step, rng):
    """Leviathan's rule, except that the bonus token is drawn from the draft law (a classic slip)."""
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.uniform() < (p[x] / q[x] if q[x] else 1):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.claimed(step.gamma - 1))


P = es.models.context_free((F(3, 5), F(2, 5)))
Q = es.models.context_free((F(1, 2), F(1, 2)))


def test_default_horizon_is_a_step_and_one_more_token():
    assert es._audit.default_tokens(es.drafts.chain(4)) == 6
    assert es._audit.default_tokens(es.drafts.tree((2, 2, 1))) == 5
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(3), rule="speculative_sampling")
    assert r.instance["tokens"] == 5 and r.scope["tokens"] == 5
    assert r.scope["complete"] is True
    assert r.scope["unobserved"] == {"first_step": [], "second_step": []}


def test_bonus_token_from_the_draft_is_caught_by_the_default_horizon():
    # p = (3/5, 2/5), q = (1/2, 1/2), gamma 1. Position 0 keeps p (Leviathan); the bonus, reached after
    # an acceptance, is drawn from q instead of p. P(accept) = sum min(p, q) = 1/2 + 2/5 = 9/10, and the
    # accepted token is 0 w.p. 1/2 and 1 w.p. 2/5. So P(0, 0) = 1/2 * 1/2 = 1/4 (target: 9/25),
    # P(1, 0) = 2/5 * 1/2 = 1/5, and when the first token is rejected (1/10) the residual (1, 0)
    # emits 0 and a second step follows: P(0, 0) gets 1/10 * 3/5 more = 1/4 + 3/50 = 31/100.
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=bonus_from_draft)
    assert r.verdict == "biased"
    two = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=bonus_from_draft, tokens=2)
    assert two.output[(0, 0)] == F(31, 100)
    assert two.expected[(0, 0)] == F(9, 25)
    # the old default (one token) and a horizon of gamma tokens never see the bonus
    one = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule=bonus_from_draft, tokens=1)
    assert one.lossless
    assert one.scope["complete"] is False
    assert one.scope["unobserved"] == {"first_step": [1], "second_step": [0, 1]}
    assert "WARNING: horizon" in one.summary()
    assert "never observes position 1 of the first step" in one.summary()


def test_stale_draft_probs_default_audit_is_biased():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=1, seed=0)
    r = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=es.rules.stale_draft_probs,
                 prompt=inst.prompt)
    assert r.verdict == "biased" and r.tv > 0


def test_assert_lossless_default_horizon_fails_the_bonus_bug_and_warns_on_short_horizons():
    with pytest.raises(es.LossAssertionError):
        es.assert_lossless(bonus_from_draft, target=P, draft=Q, proposer=es.drafts.chain(1), search=False)
    with pytest.warns(es.assertions.HorizonWarning, match="never observes"):
        es.assert_lossless(bonus_from_draft, target=P, draft=Q, proposer=es.drafts.chain(1), tokens=1, search=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        es.assert_lossless(es.rules.speculative_sampling, target=P, draft=Q, proposer=es.drafts.chain(1))


def test_verdict_lines_say_what_they_are_about():
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(2), rule="speculative_sampling")
    assert r.verdict_text == "lossless on this instance over the first 4 tokens: TV == 0 exactly"
    b = es.audit(target=P, draft=Q, proposer=es.drafts.chain(1), rule="greedy_match_sampled", tokens=1)
    assert b.verdict_text == "biased on this instance over the first 1 token: TV 1/5"
    d = json.loads(r.to_json())
    assert d["scope"]["of"] == "this instance" and d["scope"]["complete"] is True
    assert d["verdict_text"] == r.verdict_text and d["exact"] is True and d["proven"] is True


def test_scope_survives_json_round_trip_and_warnings_are_in_json():
    r = es.audit(target=P, draft=Q, proposer=es.drafts.chain(2), rule="speculative_sampling", tokens=2)
    d = json.loads(r.to_json())
    assert d["scope"]["unobserved"] == {"first_step": [2], "second_step": [1, 2]}
    assert any(w.startswith("horizon:") for w in d["warnings"])


@pytest.fixture
def user_rules(tmp_path, monkeypatch):
    # the same rule as above, as the user's own module next to them
    (tmp_path / "my_rules_for_horizons.py").write_text("from exactspec.laws import residual\n\n\n"
                                                       + inspect.getsource(bonus_from_draft))
    monkeypatch.chdir(tmp_path)
    return "my_rules_for_horizons:bonus_from_draft"


def test_cli_audit_default_horizon_catches_a_user_rules_bonus_bug(capsys, user_rules):
    code = cli.main(["audit", "--rule", user_rules, "--vocab", "3", "--gamma", "2"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "BIASED" in out and "over the first 4 tokens" in out


def test_cli_audit_short_horizon_warns(capsys, user_rules):
    code = cli.main(["audit", "--rule", user_rules, "--vocab", "3", "--gamma", "2", "--tokens", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "exactspec: warning: horizon: the horizon never observes position 2 of the first step" in err
    assert json.loads(out)["scope"]["unobserved"]["first_step"] == [2]


def test_cli_audit_sampler_default_horizon_sees_the_bonus(capsys, tmp_path, monkeypatch):
    (tmp_path / "bonus_sampler_mod.py").write_text(textwrap.dedent('''
        import numpy as np

        def bonus_from_draft(draft_ids, draft_probs, target_probs, rng):
            out = []
            for j, x in enumerate(draft_ids):
                p, q = target_probs[j], draft_probs[j]
                if rng.random() < p[x] / q[x]:
                    out.append(int(x))
                    continue
                r = np.maximum(p - q, 0.0)
                out.append(int(rng.choice(len(p), p=r / r.sum())))
                return out
            out.append(int(rng.choice(len(draft_probs[-1]), p=draft_probs[-1])))
            return out
    '''))
    monkeypatch.chdir(tmp_path)
    code = cli.main(["audit-sampler", "bonus_sampler_mod:bonus_from_draft", "--vocab", "3", "--gamma", "1",
                     "--instance"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "over the first 3 tokens" in out


def test_check_observes_two_steps(capsys):
    from exactspec.instances import CHECK_TREE_TOKENS, check_cases, default_instance
    inst = default_instance()
    assert inst.tokens == inst.proposer.gamma + 2
    for case in check_cases():
        assert case.tokens >= case.proposer.max_tokens() + 1, case
    assert CHECK_TREE_TOKENS == 4
