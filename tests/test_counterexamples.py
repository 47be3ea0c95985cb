"""Counterexample search, shrinking, worst cases, rendering, the CLI and the pytest plugin."""

from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import cli
from exactspec.counterexamples import Counterexample, EmptySearch, SearchInstance, Space, search, shrink, worst
from exactspec.instances import check_cases

#: a reduced space for the many lossless configurations (speculative_sampling gets the full default below)
SMALL_CHAIN = dict(vocabs=(2, 3), tokens=(1, 2), random_points=10)
SMALL_TREE = dict(vocabs=(2, 3), shapes=((1,), (2,), (1, 1), (2, 1)), tokens=(1, 2), random_points=6)


def space_for(rule, proposer):
    base = es.counterexamples.default_space(rule, proposer)
    return base.with_(**(SMALL_TREE if rule.family == "tree" else SMALL_CHAIN))


CASES = [c for c in check_cases() if not c.proposer.describe().startswith("merge")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule.name}-{c.proposer.describe()}")
def test_biased_configurations_yield_counterexamples_and_lossless_ones_come_back_empty(case):
    found = search(case.rule, proposer=case.proposer, space=space_for(case.rule, case.proposer), progress=False)
    if case.claim == "biased":
        assert isinstance(found, Counterexample) and found.tv > 0
        assert found.instance.vocab <= 3 and found.instance.tokens <= 2
    else:
        assert isinstance(found, EmptySearch) and not found and found.audited > 100 and found.errors == 0
        assert "vocab 2..3" in str(found)


def test_speculative_sampling_default_space_comes_back_empty_and_says_where():
    found = search(es.rules.speculative_sampling, progress=False)
    assert not found and found.audited > 20000
    text = str(found)
    assert "vocab 2..4, gamma {1, 2, 3}, tokens 1..3" in text and "denominators <= 4" in text


def test_greedy_match_sampled_minimal_counterexample():
    ce = search(es.rules.greedy_match_sampled, progress=False)
    inst = ce.instance
    assert (inst.vocab, inst.shape, inst.tokens, inst.family) == (2, (1,), 1, "context_free")
    # p = q = (1/2, 1/2): the argmax tie goes to token 0; draft 0 kept, draft 1 -> sample of p:
    # P(0) = 1/2 + 1/2 * 1/2 = 3/4, TV = 1/4
    assert inst.target == ((F(1, 2), F(1, 2)),) and inst.draft == ((F(1, 2), F(1, 2)),)
    assert ce.output == {(0,): F(3, 4), (1,): F(1, 4)} and ce.tv == F(1, 4)
    assert ce.explanation == "token 0 is emitted with probability 3/4 but the target gives 1/2 (exact TV 1/4)"
    assert [o.tokens for o in ce.over] == [(0,)] and [o.tokens for o in ce.under] == [(1,)]


def test_stale_draft_probs_needs_a_position_dependent_model():
    ce = search(es.rules.stale_draft_probs, progress=False)
    assert ce.instance.family != "context_free"
    assert (ce.instance.vocab, ce.instance.shape, ce.instance.tokens) == (2, (2,), 2)
    # and no context-free instance of that size shows it
    cf = Space(vocabs=(2, 3), shapes=((1,), (2,), (3,)), tokens=(1, 2, 3), families=("context_free",))
    assert not search(es.rules.stale_draft_probs, space=cf, progress=False)


def test_search_is_deterministic_for_a_seed():
    a = search(es.rules.stale_draft_probs, seed=3, progress=False)
    b = search(es.rules.stale_draft_probs, seed=3, progress=False)
    assert a == b and a.audited == b.audited


def test_shrinking_follows_the_documented_order():
    big = SearchInstance(vocab=3, family="table",
                         target=((F(1, 6), F(1, 2), F(1, 3)),) * 3, draft=((F(1, 3), F(1, 3), F(1, 3)),) * 3,
                         shape=(3,), tokens=3, prompt=(0,))
    small, steps = shrink(es.rules.greedy_match_sampled, big)
    assert steps > 0 and small.key() < big.key()
    assert (small.vocab, small.shape, small.tokens, small.family) == (2, (1,), 1, "context_free")
    assert es.counterexamples.evaluate(es.rules.greedy_match_sampled, small).tv > 0
    # a minimal instance does not shrink further
    again, more = shrink(es.rules.greedy_match_sampled, small)
    assert more == 0 and again == small


def test_worst_case_of_greedy_match_sampled():
    # TV = q(a)(1 - p(a)) with a = argmax p (p(a) >= 1/2): at most 1/2, reached at p = (1/2, 1/2), q = (1, 0)
    w = worst(es.rules.greedy_match_sampled, Space(vocabs=(2,), shapes=((1,),), tokens=(1,),
                                                  families=("context_free",), random_points=10))
    assert w.tv == F(1, 2)
    assert not worst(es.rules.speculative_sampling, Space(vocabs=(2,), shapes=((1,),), tokens=(1,),
                                                         families=("context_free",), random_points=5), steps=5)


def test_to_pytest_is_a_failing_regression_test_until_the_rule_is_fixed():
    ce = search(es.rules.resample_from_target, progress=False)
    source = ce.to_pytest()
    ns: dict = {}
    exec(compile(source, "<regression>", "exec"), ns)
    test = next(v for k, v in ns.items() if k.startswith("test_"))
    with pytest.raises(AssertionError, match="BIASED"):
        test()
    fixed = source.replace("es.rules.get('resample_from_target')", "es.rules.speculative_sampling")
    ns = {}
    exec(compile(fixed, "<fixed>", "exec"), ns)
    next(v for k, v in ns.items() if k.startswith("test_"))()  # passes: the fixed rule is lossless there


def test_counterexample_json_round_trip_and_html():
    ce = search(es.rules.stale_draft_probs, progress=False)
    back = Counterexample.from_json(ce.to_json())
    assert back == ce and back.explanation == ce.explanation and back.instance.to_dict() == ce.instance.to_dict()
    html = ce._repr_html_()
    assert "<table>" in html and "stale_draft_probs" in html
    with pytest.raises(es.ExactSpecError, match="not a counterexample JSON"):
        Counterexample.from_json('{"rule": "x"}')


def test_budget_stops_early_and_says_so():
    # issue 9: a search stopped before covering its space is not "no counterexample"
    found = search(es.rules.speculative_sampling, max_instances=40, progress=False)
    assert isinstance(found, es.counterexamples.IncompleteSearch) and found.audited == 40
    assert found.reason == "max_instances 40 reached" and found.exit_code == 3 and not found.complete


def test_progress_callback_is_called():
    calls = []
    search(es.rules.speculative_sampling, space=Space(vocabs=(2,), tokens=(1,)), progress=lambda n, s: calls.append(n))
    assert calls and calls == sorted(calls) and calls[0] == 50


def test_space_validation():
    with pytest.raises(es.ExactSpecError, match="unknown model family 'markov'"):
        Space(families=("markov",))
    with pytest.raises(es.ExactSpecError, match="vocabs must be ints >= 2"):
        Space(vocabs=(1,))


# -- CLI ------------------------------------------------------------------------------------------

def test_cli_search_found_prints_counterexample_and_snippet(capsys):
    assert cli.main(["search", "--rule", "greedy_match_sampled"]) == 1
    out = capsys.readouterr().out
    assert "token 0 is emitted with probability 3/4 but the target gives 1/2" in out
    assert "def test_greedy_match_sampled_keeps_the_target_law():" in out


def test_cli_search_empty_states_the_space(capsys):
    assert cli.main(["search", "--rule", "no_bonus", "--max-vocab", "2", "--max-gamma", "2", "--tokens", "2",
                     "--max-denominator", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no counterexample for no_bonus")
    assert "vocab 2..2, gamma {1, 2}, tokens 1..2" in out and "denominators <= 3" in out


def test_cli_search_json_and_bad_arguments(capsys):
    assert cli.main(["search", "--rule", "resample_from_target", "--json"]) == 1
    assert Counterexample.from_json(capsys.readouterr().out).tv > 0
    assert cli.main(["search", "--rule", "nope"]) == 2
    assert cli.main(["search", "--rule", "mss", "--max-vocab", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown rule 'nope'" in err and "--max-vocab must be >= 2" in err


# -- assert_lossless and the pytest plugin --------------------------------------------------------

def test_assert_lossless_returns_the_report_or_explains():
    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    rep = es.assert_lossless(es.rules.speculative_sampling, target=p, draft=q, proposer=es.drafts.chain(1))
    assert rep.tv == 0
    with pytest.raises(es.LossAssertionError) as info:   # one token: the hand-derived TV 1/5
        es.assert_lossless(es.rules.greedy_match_sampled, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1)
    err = info.value
    assert str(err).startswith("greedy_match_sampled is not lossless: exact TV 1/5")
    assert err.report.tv == F(1, 5) and err.counterexample.tv == F(1, 4)
    assert "minimal counterexample of the same rule" in str(err) and "def test_" in str(err)


def test_pytest_plugin_fixture_reports_tv_and_counterexample(pytester):
    pytester.makepyfile(
        """
        from fractions import Fraction as F
        import exactspec as es

        P = es.models.context_free((F(3, 5), F(2, 5)))
        Q = es.models.context_free((F(1, 2), F(1, 2)))

        def test_good(assert_lossless):
            assert_lossless(es.rules.speculative_sampling, target=P, draft=Q, proposer=es.drafts.chain(1))

        def test_bad(assert_lossless):
            assert_lossless(es.rules.greedy_match_sampled, target=P, draft=Q, proposer=es.drafts.chain(1))
        """
    )
    result = pytester.runpytest()  # the plugin loads through its pytest11 entry point
    result.assert_outcomes(passed=1, failed=1)
    # the default horizon is gamma + 2 = 3 tokens: TV 1/4 (a plain enumeration of the rule gives 1/4; 1/5 is the
    # one-token TV above). "1/5" used to match only the docstring of exactspec's own frame, now hidden.
    result.stdout.fnmatch_lines(["*exactspec*assert_lossless*", "*greedy_match_sampled is not lossless: exact TV 1/4*",
                                 "*minimal counterexample of the same rule*"])
    assert "exactspec/assertions.py" not in result.stdout.str()


def test_plugin_is_registered_through_the_entry_point():
    from importlib.metadata import entry_points
    eps = [ep for ep in entry_points(group="pytest11") if ep.name == "exactspec"]
    assert eps and eps[0].value == "exactspec.pytest_plugin"


def test_declared_target_rules_are_audited_and_searched_against_their_target():
    # a verifier that ignores the target and emits the draft: lossless w.r.t. the draft's own law
    @es.rule(claim="declared-target", declared_target=lambda target, draft: draft)
    def emit_the_draft(step, rng):
        yield step.accept(0)

    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 4), F(3, 4)))
    rep = es.audit(target=p, draft=q, proposer=es.drafts.chain(1), rule=emit_the_draft, tokens=2)
    assert rep.tv == 0 and rep.claim_holds and rep.expected == {(0, 0): F(1, 16), (0, 1): F(3, 16),
                                                                (1, 0): F(3, 16), (1, 1): F(9, 16)}
    small = Space(vocabs=(2, 3), tokens=(1, 2), random_points=5)
    assert not search(emit_the_draft, space=small, progress=False)
    # declared against the target instead, the same rule is found out at once
    against_p = es.rule(claim="lossless")(emit_the_draft.fn)
    assert search(against_p, space=small, progress=False).instance.vocab == 2
    with pytest.raises(es.ExactSpecError, match="needs declared_target"):
        es.rule(claim="declared-target")(emit_the_draft.fn)
