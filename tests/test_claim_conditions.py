"""Claims with conditions (issue 16, section 6): a claim that holds only on some configurations says so.

``stale_draft_probs`` is biased when gamma >= 2, tokens >= 2 and the models are context-dependent, and
lossless otherwise; ``multi_sample_match`` is biased when some node has two children or more. ``es.audit``,
``exactspec check``, ``exactspec sweep`` and the catalog page judge and print the claim at each configuration;
a configuration where the verdict contradicts the claim there is still a broken claim (exit 1).
"""

from __future__ import annotations

import json

import pytest

import exactspec as es
from exactspec.cli import main
from exactspec.instances import make_instance
from exactspec.rules import Condition, configuration

R = es.rules
chain, tree = es.drafts.chain, es.drafts.tree


# -- the representation -----------------------------------------------------------------------------------------

def test_condition_text_and_evaluation():
    c = Condition("gamma >= 2 and tokens >= 2 and models == context_dependent")
    assert str(c) == "gamma >= 2 and tokens >= 2 and models == context_dependent"
    assert c.atoms == (("gamma", ">=", 2), ("tokens", ">=", 2), ("models", "==", "context_dependent"))
    assert c.holds({"gamma": 2, "tokens": 2, "models": "context_dependent"}) is True
    assert c.holds({"gamma": 1, "tokens": 5, "models": "context_dependent"}) is False
    assert c.holds({"gamma": 3, "tokens": 1, "models": "context_dependent"}) is False
    assert c.holds({"gamma": 3, "tokens": 4, "models": "context_free"}) is False
    assert c.holds({"gamma": 3, "tokens": 4}) is None   # unknown, not a guess
    assert c.holds({"gamma": 1}) is False                # one atom false decides
    assert Condition(c) == c and Condition("gamma>=2") == Condition("gamma >= 2")


@pytest.mark.parametrize("text, match", [
    ("", "text like"), ("gamma >= two", "compares with an int"), ("depth >= 2", "unknown key 'depth'"),
    ("gamma => 2", "not KEY OP VALUE"), ("models >= context_free", "models compares with == or !="),
    ("models == per_position", "models compares"), ("gamma >= 2 or tokens >= 2", "not KEY OP VALUE")])
def test_bad_conditions_are_typed_errors(text, match):
    with pytest.raises(es.ExactSpecError, match=match):
        Condition(text)


def test_rule_validates_conditional_claims():
    fn = R.speculative_sampling.fn
    with pytest.raises(es.ExactSpecError, match="needs both when="):
        es.Rule(fn, claim="biased", when="gamma >= 2")
    with pytest.raises(es.ExactSpecError, match="needs both when="):
        es.Rule(fn, claim="biased", otherwise="lossless")
    with pytest.raises(es.ExactSpecError, match="otherwise= must be a claim other than 'biased'"):
        es.Rule(fn, claim="biased", when="gamma >= 2", otherwise="biased")
    with pytest.raises(es.ExactSpecError, match="otherwise="):
        es.Rule(fn, claim="biased", when="gamma >= 2", otherwise="fine")
    with pytest.raises(es.ExactSpecError, match="unknown key"):
        es.Rule(fn, claim="biased", when="shape >= 2", otherwise="lossless")


def test_configuration_of_chains_trees_and_merges():
    t1 = es.models.random_table(vocab=3, order=1, seed=0)
    t0 = es.models.random_table(vocab=3, order=0, seed=0)
    assert configuration(chain(2), target=t1, draft=t1, tokens=4) == {
        "gamma": 2, "width": 1, "tokens": 4, "vocab": 3, "models": "context_dependent"}
    assert configuration(chain(2), target=t0, draft=t0, tokens=4)["models"] == "context_free"
    assert configuration(chain(2), target=t0, draft=t1, tokens=4)["models"] == "context_dependent"
    assert configuration(tree((2, 1)), target=t0)["gamma"] == 2 and configuration(tree((1, 3)))["width"] == 3
    merged = es.drafts.merge([t0, t1], gamma=2)
    assert configuration(merged, target=t0) | {} == {"gamma": 2, "width": 2, "vocab": 3, "models": "context_dependent"}
    assert "models" not in configuration(chain(1), tokens=2)   # no models: left out, never guessed


def test_catalog_conditions():
    assert R.stale_draft_probs.claim == "biased"   # the claim under the condition, as before
    assert R.stale_draft_probs.claim_text == ("biased when gamma >= 2 and tokens >= 2 and models == "
                                              "context_dependent, lossless otherwise")
    assert R.multi_sample_match.claim_text == "biased when width >= 2, lossless otherwise"
    assert R.stale_draft_probs.without_closed_form().condition == R.stale_draft_probs.condition
    assert [r.name for r in R.catalog() if r.condition is not None] == ["stale_draft_probs", "multi_sample_match"]


# -- es.audit judges the claim at the configuration ------------------------------------------------------------

def test_stale_draft_probs_at_gamma1_is_lossless_and_that_is_its_claim():
    inst = make_instance(vocab=3, order=1, gamma=1, tokens=3)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=3)
    stale, ss = es.audit(rule=R.stale_draft_probs, **kw), es.audit(rule=R.speculative_sampling, **kw)
    assert stale.output == ss.output and stale.tv == 0   # at gamma 1 the rule is speculative sampling
    assert stale.claim == "lossless" and stale.claim_holds
    at2 = es.audit(rule=R.stale_draft_probs, **(kw | {"proposer": chain(2), "tokens": 4}))
    assert at2.claim == "biased" and at2.tv > 0 and at2.claim_holds


def test_multi_sample_match_is_lossless_with_one_child_per_node():
    t = es.models.random_table(vocab=3, order=1, seed=0)
    d = es.models.perturbed(t, seed=1)
    one = es.audit(target=t, draft=d, proposer=tree((1, 1)), rule=R.multi_sample_match, prompt=(0,))
    assert one.tv == 0 and one.claim == "lossless" and one.claim_holds
    two = es.audit(target=t, draft=d, proposer=tree((2, 1)), rule=R.multi_sample_match, prompt=(0,))
    assert two.tv > 0 and two.claim == "biased" and two.claim_holds


# -- sweep ------------------------------------------------------------------------------------------------------

def test_sweep_stale_draft_probs_at_gamma1_holds():
    """The catalog's stale_draft_probs at gamma 1 is lossless, as its claim there says: exit 0 (it was exit 1)."""
    t = es.sweep(["stale_draft_probs"], vocabs=(3,), gammas=(1, 2), order=1)
    assert [(r["gamma"], r["claim"], r["verdict"], r["holds"]) for r in t.rows] == [
        (1, "lossless", "lossless", "yes"), (2, "biased", "biased", "yes")]
    assert t.exit_code == 0
    assert t.conditions == {"stale_draft_probs": R.stale_draft_probs.claim_text}
    assert "conditional claim: stale_draft_probs: biased when gamma >= 2" in str(t)
    assert json.loads(t.to_json())["conditions"]["stale_draft_probs"] == R.stale_draft_probs.claim_text
    # context-free tables: lossless at every gamma, and that is the claim there too
    t0 = es.sweep(["stale_draft_probs"], vocabs=(3,), gammas=(1, 2), order=0)
    assert [(r["claim"], r["holds"]) for r in t0.rows] == [("lossless", "yes")] * 2 and t0.exit_code == 0


def test_sweep_search_mode_uses_the_condition():
    t = es.sweep(["stale_draft_probs"], vocabs=(2,), gammas=(1, 2), search=True)
    assert [(r["gamma"], r["claim"], r["verdict"], r["holds"]) for r in t.rows] == [
        (1, "lossless", "lossless", "yes"), (2, "biased", "biased", "yes")]
    assert t.exit_code == 0


def test_cli_sweep_stale_draft_probs_gamma1_exits_0(capsys):
    assert main(["sweep", "--rules", "stale_draft_probs", "--vocabs", "3", "--gammas", "1", "--order", "1"]) == 0
    out = capsys.readouterr().out
    assert "1/1 claims hold" in out and "conditional claim: stale_draft_probs" in out


@es.rule(claim="biased", when="gamma >= 2", otherwise="lossless", name="fixed_stale")
def fixed_stale(step, rng):
    """Claims stale_draft_probs' bias at gamma >= 2, but is speculative sampling: the claim is broken there."""
    return R.speculative_sampling.fn(step, rng)


@es.rule(claim="biased", when="gamma >= 2", otherwise="lossless", name="biased_everywhere")
def biased_everywhere(step, rng):
    """Claims lossless at gamma 1, but is greedy_match_sampled (biased at every gamma)."""
    return R.greedy_match_sampled.fn(step, rng)


def test_a_condition_that_does_not_hold_is_still_caught():
    t = es.sweep([fixed_stale], vocabs=(3,), gammas=(1, 2), order=1)
    assert [(r["gamma"], r["claim"], r["verdict"], r["holds"]) for r in t.rows] == [
        (1, "lossless", "lossless", "yes"), (2, "biased", "lossless", "NO")]
    assert t.exit_code == 1
    t = es.sweep([biased_everywhere], vocabs=(3,), gammas=(1, 2), order=1)
    assert [(r["gamma"], r["claim"], r["verdict"], r["holds"]) for r in t.rows] == [
        (1, "lossless", "biased", "NO"), (2, "biased", "biased", "yes")]
    assert t.exit_code == 1
    # and through the audit itself: the claim at gamma 2 is biased, the rule is lossless there
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=4)
    rep = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=fixed_stale, prompt=inst.prompt)
    assert rep.claim == "biased" and rep.tv == 0 and not rep.claim_holds


# -- check, rules and the docs show the condition ----------------------------------------------------------------

def test_check_on_a_gamma1_instance_holds_and_prints_the_conditions(capsys, monkeypatch):
    """`exactspec check` on a gamma-1 instance: stale_draft_probs' claim there is lossless, and it holds (exit 0)."""
    from exactspec import cli
    monkeypatch.setattr(cli.check, "default_instance", lambda: make_instance(vocab=3, order=1, gamma=1, tokens=3))
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("stale_draft_probs "))
    assert row.split()[-4:] == ["lossless", "0", "lossless", "yes"]
    assert "conditional claim: stale_draft_probs: biased when gamma >= 2 and tokens >= 2 and models ==" in out
    assert "broken" not in out


@pytest.mark.slow
def test_check_prints_the_conditions(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "conditional claim: stale_draft_probs: biased when gamma >= 2 and tokens >= 2 and models ==" in out
    assert "conditional claim: multi_sample_match: biased when width >= 2, lossless otherwise" in out
    assert main(["check", "--json", "--no-timings"]) == 0
    d = json.loads(capsys.readouterr().out)
    stale = next(r for r in d["rules"] if r["rule"] == "stale_draft_probs")
    assert stale["claim"] == "biased" and stale["claim_condition"] == R.stale_draft_probs.claim_text
    assert "claim_condition" not in next(r for r in d["rules"] if r["rule"] == "speculative_sampling")


def test_check_cases_use_the_claim_at_their_configuration():
    from exactspec.instances import check_cases
    at1 = {c.rule.name: c.claim for c in check_cases(make_instance(vocab=3, order=1, gamma=1, tokens=3))}
    assert at1["stale_draft_probs"] == "lossless" and at1["greedy_match_sampled"] == "biased"
    assert {c.rule.name: c.claim for c in check_cases()}["stale_draft_probs"] == "biased"


def test_rules_command_and_json_carry_the_condition(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert ("stale_draft_probs  [chain, claim: biased when gamma >= 2 and tokens >= 2 and models == "
            "context_dependent, lossless otherwise]") in out
    assert main(["rules", "--json"]) == 0
    rec = next(r for r in json.loads(capsys.readouterr().out)["rules"] if r["name"] == "stale_draft_probs")
    assert rec["condition"] == "gamma >= 2 and tokens >= 2 and models == context_dependent"
    assert rec["otherwise"] == "lossless" and rec["claim"] == "biased"


def test_catalog_page_shows_the_condition():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "hooks.py"
    spec = importlib.util.spec_from_file_location("_docs_hooks", path)
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.catalog_markdown()
    row = next(ln for ln in page.splitlines() if "`stale_draft_probs`" in ln)
    assert "| biased when gamma >= 2 and tokens >= 2 and models == context_dependent, lossless otherwise |" in row
    assert "`stale_draft_probs`: biased when gamma >= 2" in hooks.check_configurations_markdown()
