"""Bad input and the error model, through the public API.

Every failure is an ``ExactSpecError``: ``InvalidDistribution``, ``InexactArithmetic``,
``RuleError`` (with a replayable branch trace), ``BudgetExceeded`` (with what was covered) and
``UnsupportedRandomness``; argument errors are ``InvalidValue`` (a ``ValueError``) or
``InvalidType`` (a ``TypeError``), both ``InvalidArgument`` and ``ExactSpecError``, with a message
that says what is wrong.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.enumerate.step import Meter
from exactspec.fields import get_field

HALF = es.models.context_free((F(1, 2), F(1, 2)), name="half")
QUARTER = es.models.context_free((F(1, 4), F(3, 4)), name="quarter")


def line_of(name: str) -> int:
    """The 1-based line number of the unique line of this file that ends with the marker comment ``# <- name``."""
    with open(__file__, encoding="utf-8") as fh:
        hits = [i for i, ln in enumerate(fh, 1) if ln.rstrip().endswith("# <- " + name)]
    assert len(hits) == 1, (name, hits)
    return hits[0]


def audit_one(rule, *, field="fraction", target=HALF, draft=QUARTER, tokens=1, **kw):
    """One step (gamma = 1), one token, context-free 2-token models."""
    return es.audit(target=target, draft=draft, proposer=es.drafts.chain(1), rule=rule, tokens=tokens,
                    field=field, **kw)


# -- InvalidDistribution: table models, at construction -----------------------------------------

# 1 + 10**-30: one part in 10**30 too much, invisible to floats, exact to Fractions
TOO_MUCH = (F(1, 3), F(1, 3), F(1, 3) + F(1, 10 ** 30))

BAD_LAWS = [
    pytest.param(3, (F(1, 2), F(1, 2)), "law has 2 entries, expected vocab = 3", id="wrong-length"),
    pytest.param(2, (F(3, 2), F(-1, 2)), "entry 1 is negative (-1/2)", id="negative"),
    pytest.param(2, (float("nan"), F(1, 2)), "entry 0 is nan", id="nan"),
    pytest.param(2, (F(1, 2), float("inf")), "entry 1 is inf", id="inf"),
    pytest.param(2, (F(1, 2), float("-inf")), "entry 1 is -inf", id="-inf"),
    # 1/3 + 1/3 + 1/3 + 10**-30 = 1 + 10**-30 = (10**30 + 1) / 10**30
    pytest.param(3, TOO_MUCH, f"sums to {10 ** 30 + 1}/{10 ** 30}, not exactly 1", id="sum-not-1"),
    pytest.param(2, (F(1, 2), F(1, 3)), "sums to 5/6, not exactly 1", id="sum-5/6"),
    pytest.param(2, ("1/2", "one half"), "entry 1 is the string 'one half'", id="bad-string"),
]


@pytest.mark.parametrize("vocab, law, fragment", BAD_LAWS)
def test_table_model_rejects_bad_law_at_construction(vocab, law, fragment):
    with pytest.raises(es.InvalidDistribution) as info:
        es.models.table(vocab=vocab, order=1, table={(0,): tuple([F(1, vocab)] * vocab), (1,): law},
                        name="mytable")
    msg = str(info.value)
    assert msg.startswith("mytable model, context (1,): ")  # names the model and the context
    assert fragment in msg
    assert isinstance(info.value, es.ExactSpecError)
    assert isinstance(info.value, ValueError)


def test_context_free_rejects_bad_law_at_construction():
    with pytest.raises(es.InvalidDistribution, match=re.escape("context_free model, context (): law (1, 2) "
                                                               "sums to 3, not exactly 1")):
        es.models.context_free((1, 2))
    with pytest.raises(es.InvalidDistribution, match="the law is empty"):
        es.models.context_free(())


def test_table_model_missing_context_at_lookup():
    m = es.models.table(vocab=2, order=1, table={(0,): (1, 0)}, name="sparse")
    with pytest.raises(es.InvalidDistribution, match=re.escape("sparse model has no law for context (1,)")):
        audit_one("speculative_sampling", target=m, draft=es.models.context_free((0, 1)), prompt=(1,))


@pytest.mark.parametrize("vocab, law, fragment", BAD_LAWS)
def test_function_model_rejects_bad_law_at_first_lookup(vocab, law, fragment):
    seen = []

    def lm(context):
        seen.append(context)
        return law

    m = es.models.from_function(vocab=vocab, fn=lm, order=1, name="my_lm")  # no lookup yet: no error
    assert seen == []
    ok = es.models.context_free(tuple([F(1, vocab)] * vocab))
    with pytest.raises(es.InvalidDistribution) as info:
        es.audit(target=m, draft=ok, proposer=es.drafts.chain(1), rule="speculative_sampling", prompt=(1,),
                 tokens=1)
    msg = str(info.value)
    assert msg.startswith("my_lm model, context (1,): ")
    assert fragment in msg
    assert seen == [(1,)]  # the model read only the last `order` tokens of the prompt


def test_function_model_as_draft_rejects_bad_law():
    m = es.models.from_function(vocab=2, fn=lambda c: (F(1, 2), F(1, 3)), order=0, name="bad_draft")
    with pytest.raises(es.InvalidDistribution, match=re.escape("bad_draft model, context (): law (1/2, 1/3) "
                                                               "sums to 5/6, not exactly 1")):
        audit_one("speculative_sampling", draft=m)


# -- InexactArithmetic -----------------------------------------------------------------------------

def test_float_entry_refused_without_exact_floats():
    with pytest.raises(es.InexactArithmetic) as info:
        es.models.table(vocab=2, order=1, table={(1,): (0.25, 0.75)}, name="floaty")
    msg = str(info.value)
    assert msg.startswith("floaty model, context (1,): entry 0 is the float 0.25")
    assert "exact_floats=True" in msg
    assert isinstance(info.value, TypeError)


def test_float_entry_refused_in_function_model():
    m = es.models.from_function(vocab=2, fn=lambda c: (0.25, 0.75), order=0, name="float_lm")
    with pytest.raises(es.InexactArithmetic, match=re.escape("float_lm model, context (): entry 0 is the float "
                                                             "0.25")):
        audit_one("speculative_sampling", target=m)


def test_exact_floats_converts_each_float_to_its_rational():
    # 0.1 is the double 3602879701896397 / 2**55 exactly
    m = es.models.context_free((0.1, 1 - F(0.1)), exact_floats=True)
    law = m(())
    assert law[0] == F(0.1)
    assert law[0] == F(3602879701896397, 2 ** 55)
    assert law[1] == F(2 ** 55 - 3602879701896397, 2 ** 55)
    assert all(type(x) is F for x in law)
    # 0.25 and 0.75 are dyadic: exactly 1/4 and 3/4
    assert es.models.context_free((0.25, 0.75), exact_floats=True)(()) == (F(1, 4), F(3, 4))


def test_exact_floats_still_requires_an_exact_sum():
    # Fraction(0.1) + Fraction(0.9) = 3602879701896397/2**55 + 8106479329266893/2**53
    #                               = (3602879701896397 + 32425917317067572) / 2**55 = (2**55 + 1) / 2**55
    with pytest.raises(es.InvalidDistribution) as info:
        es.models.context_free((0.1, 0.9), exact_floats=True)
    assert f"sums to {2 ** 55 + 1}/{2 ** 55}, not exactly 1" in str(info.value)


def test_exact_floats_model_audits_exactly():
    # speculative sampling is lossless: one token from p = (1/4, 3/4) exactly
    p = es.models.context_free((0.25, 0.75), exact_floats=True)
    r = audit_one("speculative_sampling", target=p, draft=HALF)
    assert r.output == {(0,): F(1, 4), (1,): F(3, 4)}
    assert r.tv == 0


def float_bernoulli(step, rng):
    x = step.draft(0)
    if rng.bernoulli(0.5):  # <- float-bernoulli
        yield x
    else:
        yield rng.categorical(step.target(0))


def float_uniform(step, rng):
    x = step.draft(0)
    u = rng.uniform()
    yield x if u < 0.5 else 1 - x  # <- float-uniform


@pytest.mark.parametrize("rule, marker, what", [
    (float_bernoulli, "float-bernoulli", "the probability passed to rng.bernoulli is the float 0.5"),
    (float_uniform, "float-uniform", "the number in uniform < is the float 0.5"),
])
def test_float_in_rule_is_inexact_in_fraction_field(rule, marker, what):
    with pytest.raises(es.InexactArithmetic) as info:
        audit_one(rule)
    msg = str(info.value)
    assert what in msg
    assert f"{__file__}:{line_of(marker)} in {rule.__name__}" in msg  # names the rule's file and line


def test_float_rules_work_in_float_field():
    # float_bernoulli: x ~ q = (1/4, 3/4); w.p. 1/2 emit x, else a sample of p = (1/2, 1/2):
    #   out(0) = 1/2 * 1/4 + 1/2 * 1/2 = 3/8, out(1) = 5/8, TV = |3/8 - 1/2| = 1/8.
    # All of these are dyadic, so float64 computes them without rounding.
    r = audit_one(float_bernoulli, field="float")
    assert r.output == {(0,): 0.375, (1,): 0.625}
    assert r.tv == 0.125
    assert not r.lossless
    # float_uniform: w.p. 1/2 keep x, else flip it: out(0) = 1/2 * 1/4 + 1/2 * 3/4 = 1/2 = p(0)
    r = audit_one(float_uniform, field="float")
    assert r.output == {(0,): 0.5, (1,): 0.5}
    assert r.tv == 0
    assert r.lossless


# -- RuleError ---------------------------------------------------------------------------------------

def raises_on_one_branch(step, rng):
    x = step.draft(0)
    b = rng.bernoulli(F(1, 3))
    u = rng.uniform()
    if x == 1 and not b and u < F(1, 4):
        raise KeyError("bad branch")
    yield x


def test_rule_error_carries_replayable_trace():
    with pytest.raises(es.RuleError) as info:
        audit_one(raises_on_one_branch, target=HALF, draft=HALF)
    err = info.value
    # the only raising branch: draft 1, bernoulli False, uniform below 1/4
    assert err.trace == [("categorical", 1), ("bernoulli", False), ("uniform", True)]
    assert err.rule == "raises_on_one_branch"
    msg = str(err)
    assert "rule raises_on_one_branch raised KeyError" in msg
    assert "bad branch" in msg
    assert ".replay()" in msg
    assert isinstance(err.__cause__, KeyError)
    assert err.exit_code == 2
    # replay re-runs exactly that branch and lets the original exception through, every time
    for _ in range(2):
        with pytest.raises(KeyError, match="bad branch"):
            err.replay()


def test_rule_error_on_first_draw_branch():
    def boom(step, rng):
        if step.draft(0) == 1:
            raise ValueError("boom")
        yield 0

    with pytest.raises(es.RuleError) as info:
        audit_one(boom)
    assert info.value.trace == [("categorical", 1)]
    with pytest.raises(ValueError, match="boom"):
        info.value.replay()


def emits_nothing(step, rng):
    step.draft(0)
    return []


def returns_none(step, rng):
    return None


def emits_out_of_range(step, rng):
    yield 7


def emits_negative(step, rng):
    yield -1


def emits_string(step, rng):
    yield "a"


def emits_float(step, rng):
    yield 1.0


@pytest.mark.parametrize("rule, fragment", [
    (emits_nothing, "rule emits_nothing emitted no token: every step must emit at least one"),
    (returns_none, "rule returns_none returned None"),
    (emits_out_of_range, "rule emits_out_of_range emitted token 7, outside 0..1"),
    (emits_negative, "rule emits_negative emitted token -1, outside 0..1"),
    (emits_string, "rule emits_string emitted 'a', not a token id"),
    (emits_float, "rule emits_float emitted 1.0, not a token id"),
])
def test_rule_emitting_bad_tokens(rule, fragment):
    with pytest.raises(es.RuleError) as info:
        audit_one(rule)
    assert fragment in str(info.value)
    assert info.value.rule == rule.__name__


def test_rule_error_trace_of_no_token_branch():
    with pytest.raises(es.RuleError) as info:
        audit_one(emits_nothing)
    # the first branch explored takes the first option of the draft draw: token 0
    assert info.value.trace == [("categorical", 0)]
    with pytest.raises(es.RuleError, match="emitted no token"):
        info.value.replay()


def test_nondeterministic_rule_is_a_rule_error():
    calls = []

    def flaky(step, rng):
        calls.append(1)
        if len(calls) == 1:
            rng.bernoulli(F(1, 2))
            yield 0
        else:  # the replay of the second branch asks for a different kind of draw
            yield rng.categorical(step.target(0))

    with pytest.raises(es.RuleError, match="rules must be deterministic functions of their draws"):
        audit_one(flaky)


def unnormalised_categorical(step, rng):
    step.draft(0)
    yield rng.categorical((F(1, 2), F(1, 3)))  # <- unnormalised


def test_unnormalised_law_in_rule_names_the_line():
    with pytest.raises(es.InvalidDistribution) as info:
        audit_one(unnormalised_categorical)
    msg = str(info.value)
    # 1/2 + 1/3 = 5/6
    assert "a law passed to rng.categorical sums to 5/6, not exactly 1" in msg
    assert f"{__file__}:{line_of('unnormalised')} in unnormalised_categorical" in msg


def test_negative_bernoulli_probability_in_rule():
    def bad(step, rng):
        yield 0 if rng.bernoulli(F(3, 2)) else 1

    with pytest.raises(es.InvalidDistribution, match=re.escape("rng.bernoulli got probability 3/2, outside [0, 1]")):
        audit_one(bad)


# -- BudgetExceeded ------------------------------------------------------------------------------------

def three_token_audit(**kw):
    v = (F(1, 3), F(1, 3), F(1, 3))
    return es.audit(target=es.models.context_free((F(1, 2), F(1, 4), F(1, 4))), draft=es.models.context_free(v),
                    proposer=es.drafts.chain(2), rule="speculative_sampling", tokens=2, **kw)


def test_paths_budget_exceeded():
    # Without the closed form, one step of speculative sampling with gamma = 2 over 3 tokens has
    # well over 10 branches (3 drafts x accept/reject x ...).
    with pytest.raises(es.BudgetExceeded) as info:
        three_token_audit(budget=es.Budget(paths=10), closed_form=False)
    err = info.value
    assert err.what == "paths"
    assert err.limit == 10
    assert "paths" in err.covered and isinstance(err.covered["paths"], int)
    assert err.covered["paths"] >= 10
    assert str(err).startswith("budget exceeded: paths limit 10 reached (covered: paths=")
    assert err.exit_code == 3
    assert es.BudgetExceeded.exit_code == 3


def test_paths_budget_covered_counts_completed_paths():
    # Budget(paths=10): ten branches are enumerated in full; the eleventh is refused before it
    # runs. `covered` says how far the enumeration got: 10 paths, not 11.
    with pytest.raises(es.BudgetExceeded) as info:
        three_token_audit(budget=es.Budget(paths=10), closed_form=False)
    assert info.value.covered["paths"] == 10


def test_same_audit_within_budget_with_closed_form():
    # the closed form enumerates no rng branches, and the rule is lossless: TV exactly 0
    r = three_token_audit(budget=es.Budget(paths=10))
    assert r.tv == 0 and r.paths == 0


def test_depth_budget_exceeded():
    def two_draws(step, rng):
        rng.bernoulli(F(1, 2))
        rng.bernoulli(F(1, 3))
        yield 0

    with pytest.raises(es.BudgetExceeded) as info:
        audit_one(two_draws, budget=es.Budget(depth=1))
    assert info.value.what == "depth"
    assert info.value.limit == 1
    assert info.value.covered == {"draws on this branch": 1}


@pytest.mark.parametrize("field, gamma", [("float", 3), ("fraction", 4)])
def test_time_budget_exceeded_while_enumerating(field, gamma):
    # the deadline is checked every 256 branches. On a clock the test controls, where each branch (one
    # call of the rule) costs one second, a 100 s budget is found spent at the 256th branch, on any machine
    # (the engine's exact path runs the first step of gamma 3 in 103 branches: gamma 4 there, 411; an inexact
    # field's path, the whole uncut first step, passes 256 at gamma 3)
    now = [0]

    def costly(step, rng):
        now[0] += 1
        return es.rules.speculative_sampling.fn(step, rng)

    big = es.models.random_table(vocab=4, order=1)
    with pytest.raises(es.BudgetExceeded) as info:
        es.audit(target=big, draft=es.models.perturbed(big), proposer=es.drafts.chain(gamma),
                 rule=costly, prompt=(0,), tokens=3, budget=es.Budget(seconds=100, clock=lambda: now[0]),
                 closed_form=False, field=field)
    assert info.value.what == "seconds" and info.value.limit == 100
    # the 256th branch is counted, and the clock read, before the rule runs on it: 255 calls, 255 s
    assert info.value.covered["paths"] == 256 and info.value.covered["seconds"] == 255
    # the same audit on the same clock with time to spare is complete: the budget, not the rule, stopped it
    now[0] = 0
    rep = es.audit(target=big, draft=es.models.perturbed(big), proposer=es.drafts.chain(gamma), rule=costly,
                   prompt=(0,), tokens=3, budget=es.Budget(seconds=10 ** 9, clock=lambda: now[0]), closed_form=False,
                   field=field)
    assert rep.lossless and rep.paths == now[0] > 256


def test_a_budget_clock_of_the_callers_starts_no_watchdog():
    # a clock that is not real time is read at the engine's checkpoints only: no thread, no async raise
    import threading
    before = threading.active_count()
    meter = Meter(es.Budget(seconds=1, clock=lambda: 0.0))
    with meter.guard():
        assert threading.active_count() == before
        meter.check_time()      # the clock stands still: never spent
    with pytest.raises(es.ExactSpecError, match="clock must be a function"):
        es.Budget(seconds=1, clock=5)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"paths": 0}, "paths must be a positive int or None, got 0"),
    ({"depth": -1}, "depth must be a positive int or None, got -1"),
    ({"paths": 1.5}, "paths must be a positive int or None, got 1.5"),
    ({"seconds": 0}, "seconds must be a positive number or None, got 0"),
])
def test_bad_budget(kwargs, fragment):
    with pytest.raises(es.ExactSpecError, match=re.escape(fragment)):
        es.Budget(**kwargs)


def _bare_number_budget_calls():
    from exactspec.bugzoo import numpy_samplers as zoo
    half = es.models.context_free(("1/2", "1/2"))
    return {
        "audit": lambda b: es.audit(target=half, draft=half, rule="speculative_sampling", tokens=1, budget=b),
        "audit_sampler": lambda b: es.audit_sampler(zoo.correct, target=half, draft=half, tokens=1, budget=b),
        "audit_loop": lambda b: es.audit_loop(lambda t, d, p: None, target=half, draft=half, prompt=(0,),
                                              budget=b),
        "Engine": lambda b: es.enumerate.Engine("speculative_sampling", es.drafts.chain(1), half, half,
                                                get_field(), budget=b),
    }


@pytest.mark.parametrize("entry", ["audit", "audit_sampler", "audit_loop", "Engine"])
@pytest.mark.parametrize("bad, hint", [(5, "budget=es.Budget(seconds=5)"), (2.5, "budget=es.Budget(seconds=2.5)"),
                                       ("10s", "e.g. budget=es.Budget(seconds=5)")])
def test_a_bare_number_as_budget_is_a_typed_error_saying_what_to_pass(entry, bad, hint):
    # was: AttributeError: 'int' object has no attribute 'clock' (or 'seconds') from deep inside the audit
    where = entry.split("(")[0]
    with pytest.raises(es.ExactSpecError) as info:
        _bare_number_budget_calls()[entry](bad)
    assert type(info.value) is es.errors.InvalidType and info.value.exit_code == 2
    assert str(info.value).startswith(f"{where}: budget must be an es.Budget or None, got {bad!r} "
                                      f"({type(bad).__name__}); ")
    assert hint in str(info.value)


def test_a_bare_number_as_instance_budget_is_a_typed_error():
    from exactspec.bugzoo import numpy_samplers as zoo
    with pytest.raises(es.ExactSpecError, match=re.escape(
            "search_instances: instance_budget must be an es.Budget or None, got 5 (int); for a time limit of 5 "
            "seconds pass instance_budget=es.Budget(seconds=5)")):
        es.samplers.search_sampler(zoo.correct, instance_budget=5)


def test_search_is_its_own_function_and_search_equals_is_a_typed_error_naming_it():
    # audit_sampler / audit_loop audit one instance; search_sampler / search_loop search (issue 36)
    from exactspec.bugzoo import numpy_samplers as zoo
    for call, instead in ((lambda: es.audit_sampler(zoo.correct, search=True), "search_sampler(...)"),
                          (lambda: es.audit_loop(lambda t, d, p: None, search=True), "search_loop(...)"),
                          (lambda: es.audit_sampler(zoo.correct, search=False), "search_sampler(...)")):
        with pytest.raises(es.errors.InvalidType) as info:
            call()
        assert isinstance(info.value, TypeError) and info.value.exit_code == 2 and f"is {instead} now" in str(info.value)
    with pytest.raises(es.errors.InvalidType, match="search options, taken by es.search_loop"):
        es.audit_loop(lambda t, d, p: None, space=None)
    with pytest.raises(es.errors.InvalidType, match="search_sampler: target= does not apply"):
        es.search_sampler(zoo.correct, target=es.models.context_free(("1/2", "1/2")))
    # the sampler search takes an es.Budget as the loop search does: seconds for the search, the rest per audit
    with pytest.raises(es.errors.InvalidValue, match="not both"):
        es.search_sampler(zoo.correct, budget=es.Budget(paths=3), instance_budget=es.Budget(paths=3))
    short = es.search_sampler(zoo.correct, budget=es.Budget(paths=1), max_instances=5, workers=None, progress=False)
    assert isinstance(short, es.IncompleteSearch) and short.over_budget > 0


def test_searches_still_take_their_budget_in_seconds():
    # search / search_sampler document budget as seconds: a number stays valid there
    from exactspec.bugzoo import numpy_samplers as zoo
    for found in (es.counterexamples.search("speculative_sampling", budget=5, max_instances=3),
                  es.samplers.search_sampler(zoo.correct, budget=5, max_instances=2)):
        assert isinstance(found, es.IncompleteSearch) and "max_instances" in found.reason


# -- UnsupportedRandomness ------------------------------------------------------------------------------

def float_of_uniform(step, rng):
    u = rng.uniform()
    yield 0 if float(u) < 0.5 else 1  # <- float-of-u


def log_of_uniform(step, rng):
    u = rng.uniform()
    yield 0 if math.log(u) < -1 else 1  # <- log-of-u


def uniform_equals(step, rng):
    u = rng.uniform()
    yield 0 if u == 0.5 else 1  # <- u-equals


def two_uniforms(step, rng):
    u, v = rng.uniform(), rng.uniform()
    yield 0 if u < v else 1  # <- two-uniforms


UNSUPPORTED = [
    pytest.param(float_of_uniform, "float()", "float-of-u", id="float(u)"),
    pytest.param(log_of_uniform, "float()", "log-of-u", id="math.log(u)"),  # math.log calls __float__
    pytest.param(uniform_equals, "== on a uniform", "u-equals", id="u == 0.5"),
    pytest.param(two_uniforms, "between two uniforms", "two-uniforms", id="u < v"),
]


@pytest.mark.parametrize("rule, op, marker", UNSUPPORTED)
def test_unsupported_randomness_names_the_operation(rule, op, marker):
    with pytest.raises(es.UnsupportedRandomness) as info:
        audit_one(rule)
    assert op in str(info.value)
    assert "uniform" in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("rule, op, marker", UNSUPPORTED)
def test_unsupported_randomness_names_the_rule_line(rule, op, marker):
    # "(at file:line in function)" must point at the user's line, not inside exactspec
    with pytest.raises(es.UnsupportedRandomness) as info:
        audit_one(rule)
    assert f"(at {__file__}:{line_of(marker)} in " in str(info.value)


# -- audit argument errors -----------------------------------------------------------------------------

THREE = es.models.context_free((F(1, 4), F(1, 4), F(1, 2)))

ARG_ERRORS = [
    pytest.param({"tokens": 0}, "tokens must be an int >= 1, got 0", id="tokens=0"),
    pytest.param({"tokens": True}, "tokens must be an int >= 1, got True", id="tokens=True"),
    pytest.param({"decoding": "beam"}, "decoding must be one of sample, greedy, got 'beam'", id="beam"),
    pytest.param({"field": "decimal"}, "unknown field 'decimal': choose one of fraction, mpmath, float", id="field"),
    pytest.param({"field": "mpmath", "precision": 4}, "mpmath precision must be an int >= 16 bits, got 4",
                 id="precision"),
    pytest.param({"tolerance": F(1, 10)}, "the fraction field is exact: its tolerance is 0", id="tolerance"),
    pytest.param({"draft": THREE}, "draft model has vocab 3 but the target has vocab 2", id="draft-vocab"),
    pytest.param({"expected": THREE}, "expected model has vocab 3 but the target has vocab 2",
                 id="expected-vocab"),
    pytest.param({"prompt": (0, 2)}, "prompt[1] = 2 is outside the vocabulary 0..1", id="prompt-range"),
    pytest.param({"prompt": (-1,)}, "prompt[0] = -1 is outside the vocabulary 0..1", id="prompt-negative"),
    pytest.param({"prompt": ("a",)}, "prompt[0] = 'a' is not a token id", id="prompt-str"),
    pytest.param({"prompt": 3}, "prompt must be a sequence of token ids, got 3", id="prompt-int"),
    pytest.param({"draft": None}, "proposer needs a draft model: pass draft=", id="no-draft"),
    pytest.param({"target": (F(1, 2), F(1, 2))}, "target must be an exactspec model (es.models.*)",
                 id="target-tuple"),
    pytest.param({"draft": [1, 0]}, "draft must be an exactspec model (es.models.*), got [1, 0]", id="draft-list"),
    pytest.param({"rule": 42}, "rule must be a Rule, a function fn(step, rng) or a catalog name, got 42",
                 id="rule-int"),
    pytest.param({"rule": "speculativ_sampling"}, "unknown rule 'speculativ_sampling': did you mean "
                 "speculative_sampling?", id="rule-typo"),
    pytest.param({"proposer": "chain"}, "proposer must be an exactspec proposer (es.drafts.*), got 'chain'",
                 id="proposer-str"),
    pytest.param({"expected": HALF, "decoding": "greedy"}, "cannot be combined with decoding='greedy'",
                 id="expected+greedy"),
    pytest.param({"worst": -1}, "worst must be an int >= 0, got -1", id="worst"),
]


@pytest.mark.parametrize("overrides, fragment", ARG_ERRORS)
def test_audit_argument_errors(overrides, fragment):
    kw = dict(target=HALF, draft=QUARTER, proposer=es.drafts.chain(1), rule="speculative_sampling", tokens=1)
    kw.update(overrides)
    with pytest.raises(es.ExactSpecError) as info:
        es.audit(**kw)
    assert fragment in str(info.value)
    assert info.value.exit_code == 2


def test_tree_rule_with_chain_proposer():
    tree_rule = es.rule(family="tree", name="my_tree_rule")(lambda step, rng: [0])
    with pytest.raises(es.ExactSpecError, match="rule my_tree_rule verifies trees but the proposer drafts a chain"):
        audit_one(tree_rule)


@pytest.mark.parametrize("make, fragment", [
    (lambda: es.drafts.chain(0), "chain: gamma must be an int >= 1, got 0"),
    (lambda: es.drafts.chain(2, sampling="topk"), "chain: sampling must be one of sample, argmax, got 'topk'"),
    (lambda: es.models.table(vocab=0, order=1, table={(): (1,)}), "vocab must be a positive int, got 0"),
    (lambda: es.models.table(vocab=2, order=1, table={(5,): (1, 0)}), "table key (5,) is not a tuple of tokens"),
    (lambda: es.models.from_function(vocab=2, fn="not callable"), "from_function needs a callable"),
    (lambda: es.models.sharpen(HALF, 0), "sharpen needs an int power k >= 1, got 0"),
    (lambda: es.rules.ensemble(2), "ensemble weight must be a rational in [0, 1]"),
    (lambda: es.Rule(lambda s, r: [0], claim="maybe"), "rule claim must be one of"),
])
def test_constructor_argument_errors(make, fragment):
    with pytest.raises(es.ExactSpecError) as info:
        make()
    assert fragment in str(info.value)


# -- one base class ---------------------------------------------------------------------------------------

def test_every_error_is_catchable_by_the_base_class():
    bad_fn = es.models.from_function(vocab=2, fn=lambda c: (F(1, 2), F(1, 3)), order=0)
    cases = [
        (es.InvalidDistribution, lambda: es.models.context_free((F(1, 2), F(1, 3)))),
        (es.InvalidDistribution, lambda: audit_one("speculative_sampling", target=bad_fn)),
        (es.InvalidDistribution, lambda: audit_one(unnormalised_categorical)),
        (es.InexactArithmetic, lambda: es.models.context_free((0.5, 0.5))),
        (es.InexactArithmetic, lambda: audit_one(float_bernoulli)),
        (es.RuleError, lambda: audit_one(raises_on_one_branch, draft=HALF)),
        (es.RuleError, lambda: audit_one(emits_nothing)),
        (es.BudgetExceeded, lambda: three_token_audit(budget=es.Budget(paths=10), closed_form=False)),
        (es.UnsupportedRandomness, lambda: audit_one(uniform_equals)),
        (es.UnsupportedRandomness, lambda: audit_one(two_uniforms)),
        (es.ExactSpecError, lambda: audit_one("speculative_sampling", tokens=0)),
        (es.ExactSpecError, lambda: audit_one("nope")),
    ]
    for kind, make in cases:
        try:
            make()
        except es.ExactSpecError as exc:
            assert isinstance(exc, kind), (kind, exc)
            assert exc.exit_code in (2, 3)
            assert (exc.exit_code == 3) == isinstance(exc, es.BudgetExceeded)
        else:
            pytest.fail(f"{kind.__name__} expected")
    for kind in (es.InvalidDistribution, es.InexactArithmetic, es.BudgetExceeded, es.RuleError,
                 es.UnsupportedRandomness):
        assert issubclass(kind, es.ExactSpecError)


# -- argument errors: InvalidValue (a ValueError) and InvalidType (a TypeError) ------------------------------

def _argument_error(make):
    """The error ``make()`` raises; it must be an argument error (exit code 2, caught by ExactSpecError)."""
    with pytest.raises(es.ExactSpecError) as info:
        make()
    err = info.value
    assert isinstance(err, es.InvalidArgument) and isinstance(err, es.errors.InvalidArgument)
    assert err.exit_code == 2
    return err


@pytest.mark.parametrize("make, message", [
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", tokens=0),
     "tokens must be an int >= 1, got 0"),
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", prompt=(0, 5)),
     "prompt[1] = 5 is outside the vocabulary 0..1"),
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", tokens=1, worst=-1),
     "worst must be an int >= 0, got -1"),
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative", tokens=1),
     "unknown rule 'speculative': did you mean speculative_sampling? (`exactspec rules` lists them)"),
    (lambda: es.models.random_table(vocab=0), "vocab must be a positive int, got 0"),
    (lambda: es.models.sharpen(HALF, 0), "sharpen needs an int power k >= 1, got 0"),
    (lambda: es.models.rounded(HALF, "fp7"), "unknown float format 'fp7': choose one of"),
    (lambda: es.models.mixture([HALF, es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))], [F(1, 2), F(1, 2)]),
     "mixture parts have different vocabularies: [2, 3]"),
    (lambda: es.drafts.chain(0), "chain: gamma must be an int >= 1, got 0"),
    (lambda: es.Budget(paths=0), "Budget: paths must be a positive int or None, got 0"),
    (lambda: es.get_field("decimal"), "unknown field 'decimal': choose one of fraction, mpmath, float"),
    (lambda: es.rules.get("nope"), "unknown rule 'nope'"),
    (lambda: es.counterexamples.search(es.rules.speculative_sampling, budget=0),
     "search: budget must be > 0 seconds (None for no limit), got 0"),
])
def test_a_bad_argument_value_is_an_invalid_value_and_a_value_error(make, message):
    err = _argument_error(make)
    assert type(err) is es.InvalidValue and isinstance(err, ValueError) and not isinstance(err, TypeError)
    assert str(err).startswith(message), str(err)


@pytest.mark.parametrize("make, message", [
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", tokens="2"),
     "tokens must be an int >= 1, got '2'"),
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", prompt=3),
     "prompt must be a sequence of token ids, got 3"),
    (lambda: es.audit(target="half", draft=HALF, rule="speculative_sampling"),
     "target must be an exactspec model (es.models.*), got 'half'"),
    (lambda: es.audit(target=HALF, draft=HALF, rule="speculative_sampling", budget=5),
     "audit: budget must be an es.Budget or None, got 5 (int)"),
    (lambda: es.models.random_table(vocab="2"), "vocab must be a positive int, got '2'"),
    (lambda: es.models.sharpen("half", 2), "sharpen needs a Model, got 'half'"),
    (lambda: es.models.from_function(vocab=2, fn=None), "from_function needs a callable, got None"),
    (lambda: es.drafts.chain(True), "chain: gamma must be an int >= 1, got True"),
    (lambda: es.Budget(seconds="5"), "Budget: seconds must be a positive number or None, got '5'"),
    (lambda: es.counterexamples.search(es.rules.speculative_sampling, budget="5"),
     "search: budget must be a number of seconds > 0 (or None for no limit), got '5'"),
])
def test_a_bad_argument_type_is_an_invalid_type_and_a_type_error(make, message):
    err = _argument_error(make)
    assert type(err) is es.InvalidType and isinstance(err, TypeError) and not isinstance(err, ValueError)
    assert str(err).startswith(message), str(err)


def test_the_argument_error_classes_are_exported():
    assert {"InvalidArgument", "InvalidValue", "InvalidType"} <= set(es.__all__)
    assert (es.InvalidArgument, es.InvalidValue, es.InvalidType) == (
        es.errors.InvalidArgument, es.errors.InvalidValue, es.errors.InvalidType)
    assert issubclass(es.InvalidValue, (es.InvalidArgument, ValueError)) and issubclass(es.InvalidArgument,
                                                                                         es.ExactSpecError)
    assert issubclass(es.InvalidType, (es.InvalidArgument, TypeError))
    # the distribution and float errors are argument errors too
    assert issubclass(es.InvalidDistribution, es.InvalidValue) and issubclass(es.InexactArithmetic, es.InvalidType)


@pytest.mark.parametrize("argv, message", [
    (["search", "--rule", "speculative_sampling", "--max-vocab", "1"], "--max-vocab must be >= 2, got 1"),
    (["sweep", "--json", "--csv"], "--json and --csv are exclusive"),
])
def test_a_bad_command_line_option_exits_2_with_one_line(capsys, argv, message):
    from exactspec import cli
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"exactspec: error: {message}\n"


@pytest.mark.parametrize("kind", [es.InvalidValue, es.InvalidType])
def test_the_cli_maps_an_argument_error_to_exit_2(capsys, kind):
    import argparse

    from exactspec.cli.common import run_command

    def command(args):
        raise kind("--thing must be sensible, got 'x'")

    assert run_command(command, argparse.Namespace(cmd="audit")) == 2
    assert capsys.readouterr().err == "exactspec: error: --thing must be sensible, got 'x'\n"


def test_a_rule_reference_naming_no_module_is_an_invalid_value_but_a_failing_import_is_not(tmp_path, monkeypatch):
    from exactspec._loading import load_object
    err = _argument_error(lambda: load_object("no_such_module_here:fn", "--rule"))
    assert type(err) is es.InvalidValue and str(err).startswith("cannot load no_such_module_here:fn: ")
    (tmp_path / "imports_a_missing_dependency.py").write_text("import no_such_dependency_here\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(es.ExactSpecError) as info:   # the user's module failed: not an argument error
        load_object("imports_a_missing_dependency:fn", "--rule")
    assert type(info.value) is es.ExactSpecError and "no_such_dependency_here" in str(info.value)
