"""The sampler user's CI path: es.assert_sampler_lossless / es.assert_loop_lossless, their fixtures and markers.

A CI assertion passes only on a complete check that found no bias: a bias fails with the minimal
counterexample and its regression test, an incomplete search fails too (never a pass).
"""

from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.bugzoo import loops
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.counterexamples import Counterexample, EmptySearch, IncompleteSearch

pytest_plugins = ["pytester"]

P = es.models.context_free((F(1, 2), F(1, 2)))
Q = es.models.context_free((F(0), F(1)))


# -- the assertions --------------------------------------------------------------------------------------------

def test_correct_sampler_passes_over_the_whole_small_space():
    result = es.assert_sampler_lossless(zoo.correct, adapter="numpy", vocab=2, gamma=1)
    assert isinstance(result, EmptySearch) and result.complete
    assert result.audited == 27      # vocab 2, gamma 1, tokens 2: 3 families x 9 instances (sampler_space)
    assert "vocab 2..2, gamma {1}" in result.space


def test_the_default_is_the_search_of_audit_sampler_search_true():
    # the same space, visited in the same order, as es.search_sampler(...) (the CLI's audit-sampler):
    # both stopped after 30 instances, at the same place
    with pytest.raises(es.IncompleteCheckError) as info:
        es.assert_sampler_lossless(zoo.correct, max_instances=30)
    mine = info.value.result
    from exactspec.samplers.search import search_sampler
    theirs = search_sampler(zoo.correct, max_instances=30)
    assert isinstance(theirs, IncompleteSearch)
    assert (mine.audited, mine.space, mine.stopped_in, mine.cells_covered, mine.cells_total) == (
        theirs.audited, theirs.space, theirs.stopped_in, theirs.cells_covered, theirs.cells_total)
    assert mine.space == es.samplers.search.sampler_space().describe() and mine.cells_total == 27


def test_biased_sampler_fails_with_the_counterexample_and_its_regression_test():
    with pytest.raises(es.LossAssertionError) as info:
        es.assert_sampler_lossless(zoo.shared_uniform, adapter="numpy")
    err = info.value
    assert not isinstance(err, es.IncompleteCheckError)
    ce = err.counterexample
    assert isinstance(ce, Counterexample) and err.result is ce
    expected = es.search_sampler(zoo.shared_uniform)      # the search the assertion runs
    assert (ce.instance, ce.tv, ce.output) == (expected.instance, expected.tv, expected.output) and ce.tv > 0
    text = str(err)
    assert text.splitlines()[0] == ("sampler shared_uniform (adapter numpy) is biased: an exact search over small "
                                    "instances found this minimal counterexample")
    assert str(ce) in text and "found after" in text and "over: vocab 2..4" in text   # what was covered
    assert "regression test (fails while the bias exists):" in text and ce.to_pytest() in text


def test_incomplete_search_fails_and_says_what_it_covered():
    with pytest.raises(es.IncompleteCheckError) as info:
        es.assert_sampler_lossless(zoo.correct, max_instances=4)
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err.result, IncompleteSearch)
    assert err.result.audited == 4 and err.counterexample is None
    text = str(err)
    assert "nothing was proven and this assertion fails" in text
    assert "INCOMPLETE search for correct: max_instances 4 reached." in text
    assert "0 of 27 cells fully covered" in text


def test_a_sampler_that_raises_on_some_instances_fails_the_check_with_its_crash_not_a_pass():
    # issue 16 section 5: a crash on a valid input is a finding (a crash counterexample), no longer "incomplete"
    def flaky(draft_ids, draft_probs, target_probs, rng):   # raises whenever the vocabulary is 3
        if target_probs.shape[1] == 3:
            raise ValueError("no vocabulary 3")
        return zoo.correct(draft_ids, draft_probs, target_probs, rng)
    with pytest.raises(es.LossAssertionError) as info:
        es.assert_sampler_lossless(flaky, vocab=3, gamma=1)
    assert not isinstance(info.value, es.IncompleteCheckError)
    found = info.value.result
    assert found.kind == "crash" and found.instance.vocab == 3 and found.crash["probability"] == "1"
    assert "the sampler raises ValueError: no vocabulary 3 with probability 1" in str(info.value)


def test_a_spent_budget_is_an_incomplete_check():
    # one instance whose audit needs more than 3 paths: BudgetExceeded becomes a failing IncompleteCheckError
    with pytest.raises(es.IncompleteCheckError) as info:
        es.assert_sampler_lossless(zoo.correct, search=False, target=P, draft=es.models.context_free(("1/2", "1/2")),
                                   proposer=es.drafts.chain(2), budget=es.Budget(paths=3))
    assert isinstance(info.value.__cause__, es.BudgetExceeded)
    assert "ran past its budget" in str(info.value) and "paths limit 3" in str(info.value)


def test_audits_past_their_budget_make_the_search_incomplete():
    # es.Budget(paths=2): every audit of the search runs past 2 paths (a deterministic counter, not a clock)
    with pytest.raises(es.IncompleteCheckError) as info:
        es.assert_sampler_lossless(zoo.correct, vocab=2, gamma=1, budget=es.Budget(paths=2))
    result = info.value.result
    assert isinstance(result, IncompleteSearch) and result.over_budget > 0
    assert "ran past the audit budget" in str(info.value)


def test_one_instance_on_request():
    report = es.assert_sampler_lossless(zoo.correct, search=False, target=P, draft=Q, proposer=es.drafts.chain(1))
    assert report.verdict == "lossless" and report.tv == 0
    with pytest.raises(es.LossAssertionError) as info:   # zero_uniform accepts a draft the target never emits
        es.assert_sampler_lossless(zoo.zero_uniform, search=False, target=es.models.context_free(("1/2", "1/2")),
                                   draft=es.models.context_free(("0", "1")), proposer=es.drafts.chain(1), tokens=1)
    assert info.value.report.tv == es.audit_sampler(
        zoo.zero_uniform, target=es.models.context_free(("1/2", "1/2")), draft=es.models.context_free(("0", "1")),
        proposer=es.drafts.chain(1), tokens=1).tv
    assert str(info.value).startswith("sampler zero_uniform (adapter numpy) is not lossless on this instance")


def test_bad_options_are_typed_errors_naming_them():
    with pytest.raises(es.ExactSpecError, match="unknown option.*bogus"):
        es.assert_sampler_lossless(zoo.correct, bogus=1)
    with pytest.raises(es.ExactSpecError, match="target= does not apply to the search"):
        es.assert_sampler_lossless(zoo.correct, target=P)
    with pytest.raises(es.ExactSpecError, match="pass target="):
        es.assert_sampler_lossless(zoo.correct, search=False)
    with pytest.raises(es.ExactSpecError, match="vocab must be an int >= 2"):
        es.assert_sampler_lossless(zoo.correct, vocab=1)
    with pytest.raises(es.ExactSpecError, match="budget must be seconds"):
        es.assert_sampler_lossless(zoo.correct, budget="soon")
    with pytest.raises(es.ExactSpecError, match="unknown option.*adapter"):
        es.assert_loop_lossless(loops.speculative_sampling, adapter="numpy")


def test_biased_loop_fails_with_the_counterexample():
    with pytest.raises(es.LossAssertionError) as info:
        es.assert_loop_lossless(loops.bonus_from_draft, vocab=2, tokens=2)
    ce = info.value.counterexample
    assert ce.kind == "loop" and ce.tv > 0
    text = str(info.value)
    assert text.startswith("loop bonus_from_draft is biased") and ce.to_pytest() in text


def test_incomplete_loop_search_fails():
    with pytest.raises(es.IncompleteCheckError) as info:
        es.assert_loop_lossless("exactspec.bugzoo.loops:speculative_sampling", max_instances=2)
    assert "max_instances 2 reached" in str(info.value)


def test_correct_loop_passes_on_a_small_space():
    space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(3,), families=("context_free",),
                                     exhaustive_denominator=2, exhaustive_limit=4, max_denominator=2,
                                     random_points=0)
    result = es.assert_loop_lossless(loops.speculative_sampling, space=space)
    assert isinstance(result, EmptySearch) and result.audited == 4


# -- the pytest plugin ---------------------------------------------------------------------------------------------

def test_plugin_sampler_fixture_and_marker(pytester):
    pytester.makepyfile(
        """
        import pytest
        import exactspec as es
        from exactspec.bugzoo import numpy_samplers as zoo

        pytestmark = pytest.mark.exactspec_sampler(adapter="numpy", vocab=2, gamma=1)

        def test_correct(assert_sampler_lossless):
            assert_sampler_lossless(zoo.correct)

        def test_options_from_the_marker(assert_sampler_lossless):
            assert assert_sampler_lossless(zoo.correct).audited == 27

        @pytest.mark.exactspec_sampler(gamma=2)          # the nearest marker wins, key by key
        def test_nearest_marker_wins(assert_sampler_lossless):
            assert assert_sampler_lossless.options == {"adapter": "numpy", "vocab": 2, "gamma": 2}

        def test_biased(assert_sampler_lossless):
            assert_sampler_lossless(zoo.shared_uniform, vocab=4, gamma=3)   # the call's keywords win

        def test_incomplete(assert_sampler_lossless):
            assert_sampler_lossless(zoo.correct, max_instances=3)
        """
    )
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*assert_lossless, assert_sampler_lossless, assert_loop_lossless*",
        "*sampler shared_uniform (adapter numpy) is biased: an exact search over small instances found this*",
        "*regression test (fails while the bias exists):*",
        "*def test_shared_uniform_keeps_the_target_law*",
        "*the exact search did not cover its space, so nothing was proven and this assertion fails*",
        "*INCOMPLETE search for correct: max_instances 3 reached*",
    ])
    result.stdout.fnmatch_lines(["FAILED *::test_biased*", "FAILED *::test_incomplete*"], consecutive=False)


def test_plugin_loop_fixture_and_marker(pytester):
    pytester.makepyfile(
        """
        import pytest
        import exactspec as es
        from exactspec.bugzoo import loops

        @pytest.mark.exactspec_loop(vocab=2, tokens=2)
        def test_biased_loop(assert_loop_lossless):
            assert_loop_lossless(loops.bonus_from_draft)

        @pytest.mark.exactspec_loop(max_instances=2)
        def test_incomplete_loop(assert_loop_lossless):
            assert_loop_lossless(loops.speculative_sampling)

        def test_correct_loop(assert_loop_lossless):
            space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(3,), families=("context_free",),
                                             exhaustive_denominator=2, exhaustive_limit=4, max_denominator=2,
                                             random_points=0)
            assert assert_loop_lossless(loops.speculative_sampling, space=space).audited == 4
        """
    )
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*loop bonus_from_draft is biased*", "*def test_bonus_from_draft_keeps_the_target_law*",
                                 "*INCOMPLETE search for speculative_sampling: max_instances 2 reached*"])


def test_plugin_marker_with_positional_arguments_is_an_error(pytester):
    pytester.makepyfile(
        """
        import pytest
        from exactspec.bugzoo import numpy_samplers as zoo

        @pytest.mark.exactspec_sampler("numpy")
        def test_positional(assert_sampler_lossless):
            assert_sampler_lossless(zoo.correct)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.exactspec_sampler takes keyword options only*"])
