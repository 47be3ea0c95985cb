"""No false pass: a search that did not cover its space, or could not audit all of it, is never "no counterexample"."""

import math
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.counterexamples import Counterexample, EmptySearch, IncompleteSearch, Space, search, worst
from exactspec.counterexamples import searching
from exactspec.counterexamples.bookkeeping import cell_instances

#: one cell per vocab, one draft, one token, context-free models: a few hundred instances, well under a second
TINY = Space(vocabs=(2, 3), shapes=((1,),), tokens=(1,), families=("context_free",), exhaustive_denominator=2,
             max_denominator=4, random_points=3)


def raises_on_vocab_3(step, rng):
    """speculative_sampling, except that it raises whenever the vocabulary has 3 tokens."""
    if len(step.target(0)) == 3:
        raise ValueError("three tokens are too many")
    return es.rules.speculative_sampling.fn(step, rng)


def test_a_time_limit_that_stops_the_search_gives_an_incomplete_search():
    found = search(es.rules.stale_draft_probs, budget=1e-9, progress=False)
    assert isinstance(found, IncompleteSearch) and not isinstance(found, EmptySearch)
    assert (found.found, found.complete, found.exit_code) == (False, False, 3)
    assert found.reason == "time limit 1e-09 s reached" and found.cells_covered == 0 and found.cells_total == 81
    with pytest.raises(es.ExactSpecError, match="neither a counterexample nor an empty search"):
        bool(found)
    with pytest.raises(es.ExactSpecError):
        if not found:  # the old idiom cannot silently read an unfinished search as a pass
            pass
    text = str(found)
    assert text.startswith("INCOMPLETE search for stale_draft_probs: time limit 1e-09 s reached")
    assert "not a pass" in text and "vocab 2..4, gamma {1, 2, 3}" in text


def test_max_instances_stops_in_a_named_cell():
    found = search(es.rules.greedy_match_sampled, max_instances=1, progress=False)  # the first instance is lossless
    assert isinstance(found, IncompleteSearch) and found.audited == 1
    assert found.reason == "max_instances 1 reached"
    assert found.stopped_in == "vocab 2, gamma 1, 1 token(s), context-free models" and found.covered == ()
    d = found.to_dict()
    assert d["found"] is False and d["complete"] is False and d["reason"] == "max_instances 1 reached"
    # stopping after a whole cell: that cell is covered, the next one is where it stopped
    cells = TINY.cells()
    first = sum(1 for _ in cell_instances(TINY, cells[0], __import__("random").Random("search|0")))
    cut = search(es.rules.speculative_sampling, space=TINY, max_instances=first, progress=False)
    assert isinstance(cut, IncompleteSearch) and cut.audited == first
    assert cut.covered == ("vocab 2, gamma 1, 1 token(s), context-free models",) and cut.cells_covered == 1
    assert cut.stopped_in == "vocab 3, gamma 1, 1 token(s), context-free models" and cut.cells_total == 2
    # enough instances for the whole space: complete
    whole = search(es.rules.speculative_sampling, space=TINY, max_instances=10_000, progress=False)
    assert isinstance(whole, EmptySearch) and whole.complete and whole.exit_code == 0


def test_a_rule_that_raises_everywhere_is_a_rule_error():
    @es.rule(claim="lossless")
    def always_raises(step, rng):
        raise ValueError("boom")

    with pytest.raises(es.RuleError, match=r"always_raises raised on every one of the \d+ instances") as info:
        search(always_raises, space=TINY, progress=False)
    assert "ValueError: boom" in str(info.value) and info.value.exit_code == 2
    with pytest.raises(es.RuleError, match="raised on every one"):
        worst(always_raises, TINY, steps=2, restarts=1)


def test_a_rule_that_raises_on_some_instances_is_not_a_clean_pass():
    rule = es.rule(claim="lossless", name="raises_on_vocab_3")(raises_on_vocab_3)
    found = search(rule, space=TINY, progress=False)
    assert isinstance(found, IncompleteSearch) and found.errors > 0 and found.audited > found.errors
    assert found.reason == f"the rule raised on {found.errors} of {found.audited} instances"
    assert found.stopped_in == "" and found.cells_covered == found.cells_total == 2
    assert 0 < len(found.error_samples) <= searching.ERROR_SAMPLES
    desc, message = found.error_samples[0]
    assert desc.startswith("vocab 3,") and "target (" in desc and "three tokens are too many" in message
    assert "the rule raised on" in str(found) and "three tokens are too many" in str(found)
    # without the failing vocabulary the same rule is a clean pass
    clean = search(rule, space=TINY.with_(vocabs=(2,)), progress=False)
    assert isinstance(clean, EmptySearch) and clean.errors == 0 and not clean


def test_an_instance_over_the_audit_budget_is_recorded_as_uncovered(monkeypatch):
    real = searching.audit

    def audit(**kw):
        if kw["target"].vocab == 3:
            raise es.BudgetExceeded("paths", 10, covered={"paths": 10})
        return real(**kw)

    monkeypatch.setattr(searching, "audit", audit)
    found = search(es.rules.speculative_sampling, space=TINY, progress=False)
    assert isinstance(found, IncompleteSearch) and found.over_budget > 0 and found.errors == 0
    assert found.reason == f"the audit budget was exceeded on {found.over_budget} of {found.audited} instances"
    # a bias elsewhere is still found: an uncovered instance does not hide a counterexample
    assert isinstance(search(es.rules.greedy_match_sampled, space=TINY, progress=False), Counterexample)


def test_worst_says_when_it_is_incomplete():
    small = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=5)
    cut = worst(es.rules.speculative_sampling, small, budget=1e-9)
    assert isinstance(cut, IncompleteSearch) and cut.reason == "time limit 1e-09 s reached"
    done = worst(es.rules.speculative_sampling, small, steps=3, restarts=1)
    assert isinstance(done, EmptySearch) and done.complete
    # a bias found while part of the space raised: the TV is certain, being the largest is not
    biased = es.rule(claim="lossless", name="greedy_but_raises_on_vocab_3")(
        lambda step, rng: raises_on_vocab_3(step, rng) if len(step.target(0)) == 3
        else es.rules.greedy_match_sampled.fn(step, rng))
    w = worst(biased, TINY, steps=3, restarts=1)
    assert isinstance(w, Counterexample) and w.tv > 0 and w.found and w.exit_code == 1
    assert w.complete is False and w.stopped.startswith("the rule raised on")
    assert "the search stopped early" in str(w) and "not necessarily the largest" in str(w)
    assert Counterexample.from_json(w.to_json()).complete is False


BAD_BUDGETS = [0, 0.0, -1, -0.5, float("nan"), float("-inf"), True, "1", "abc", [1], F(-1, 2)]


@pytest.mark.parametrize("budget", BAD_BUDGETS, ids=repr)
def test_invalid_time_limits_are_typed_errors(budget):
    with pytest.raises(es.ExactSpecError, match="search: budget must be"):
        search(es.rules.speculative_sampling, space=TINY, budget=budget, progress=False)
    with pytest.raises(es.ExactSpecError, match="worst: budget must be"):
        worst(es.rules.speculative_sampling, TINY, budget=budget)


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3", float("inf")], ids=repr)
def test_invalid_max_instances_are_typed_errors(n):
    with pytest.raises(es.ExactSpecError, match="search: max_instances must be an int >= 1"):
        search(es.rules.speculative_sampling, space=TINY, max_instances=n, progress=False)


def test_invalid_worst_restarts_and_steps_are_typed_errors():
    for kw in ({"restarts": -1}, {"steps": "3"}, {"restarts": True}, {"steps": 1.5}):
        with pytest.raises(es.ExactSpecError, match="worst: (restarts|steps) must be an int >= 0"):
            worst(es.rules.speculative_sampling, TINY, **kw)


def test_the_full_default_search_of_speculative_sampling_is_complete():
    found = search(es.rules.speculative_sampling, budget=math.inf, progress=False)  # inf: no time limit
    assert isinstance(found, EmptySearch) and found.audited > 20000
    assert (bool(found), found.found, found.complete, found.exit_code) == (False, False, True, 0)
    text = str(found)
    assert text.startswith("no counterexample for speculative_sampling in this space: ")
    assert "every one lossless (a statement about this space only), over: vocab 2..4" in text
    assert "vocab 2..4, gamma {1, 2, 3}, tokens 1..3" in text and text.endswith(found.space)
    assert found.to_dict()["complete"] is True


def test_the_three_results_answer_found_complete_and_exit_code():
    ce = search(es.rules.greedy_match_sampled, progress=False)
    assert (bool(ce), ce.found, ce.complete, ce.exit_code) == (True, True, True, 1)
    assert ce.to_dict()["found"] is True and ce.to_dict()["complete"] is True
    empty = search(es.rules.speculative_sampling, space=TINY, progress=False)
    assert (empty.found, empty.complete, empty.exit_code) == (False, True, 0)
    with pytest.raises(es.ExactSpecError, match="IncompleteSearch"):
        EmptySearch(rule="r", space="s", audited=3, seconds=0.0, errors=2)


def test_assert_lossless_never_reports_an_unfinished_search_as_no_counterexample():
    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    with pytest.raises(es.LossAssertionError) as info:
        es.assert_lossless(es.rules.greedy_match_sampled, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1,
                           search_budget=1e-9)
    text = str(info.value)
    assert "did not finish" in text and "INCOMPLETE search" in text and "no smaller counterexample" not in text
    assert info.value.counterexample is None
