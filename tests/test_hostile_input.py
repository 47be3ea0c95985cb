"""Hostile input (issue 9): every malformed or malicious input is a typed ExactSpecError, fast.

Strings such as ``"1e-999999999"`` made ``Fraction`` expand a billion-digit power of ten (the old
code hung on each of the number-parsing cases below); JSON that is not a report raised raw
``KeyError``/``TypeError``/``RecursionError``; a model that raised was reported as a raw
exception or blamed on the rule; an endless iterator returned by a model filled the memory.
"""

from __future__ import annotations

import decimal
import itertools
import json
import sys
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import theory
from exactspec.enumerate.env import Env
from exactspec.fields import FloatField, FractionField, MpmathField, get_field
from exactspec.laws import to_law

HUGE = "1e-999999999"
HALF = es.models.context_free(("1/2", "1/2"))
THIRDS = es.models.context_free(("1/3", "2/3"))


# -- number parsing: bounded everywhere a user string becomes a number ----------------------------------
def test_rule_name_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"bad arguments for rule ensemble: argument 1: '1e-999999999' has an "
                                                r"exponent beyond 1000"):
        es.rules.get("ensemble(1e-999999999)")


def test_ensemble_weight_string_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"ensemble weight .*'1e-999999999' has an exponent beyond 1000"):
        es.rules.ensemble(HUGE)


@pytest.mark.parametrize("make", [
    lambda: es.rules.shared_coin_tree(HUGE, 1),
    lambda: es.rules.typical_acceptance(HUGE),
    lambda: es.rules.get("typical_acceptance(9/100, 1e-999999999)"),
], ids=["shared_coin_tree", "typical_acceptance", "get-typical_acceptance"])
def test_tree_rule_thresholds_with_huge_exponent_are_refused(make):
    with pytest.raises(es.ExactSpecError, match="exponent beyond 1000"):
        make()


@pytest.mark.parametrize("make", [
    lambda: es.rules.shared_coin_tree(float("inf"), 1),
    lambda: es.rules.typical_acceptance(F(9, 100), float("-inf")),
], ids=["shared_coin_tree", "typical_acceptance"])
def test_rule_parameters_refuse_infinite_floats(make):
    with pytest.raises(es.ExactSpecError, match="inf is not a finite number"):
        make()


def test_probability_string_with_huge_exponent_is_refused():
    with pytest.raises(es.InvalidDistribution, match=r"context_free model, context \(\): entry 0 is the string "
                                                      r"'1e-999999999'.*exponent beyond 1000"):
        es.models.context_free((HUGE, 1))


def test_decimal_probability_with_huge_exponent_is_refused():
    with pytest.raises(es.InvalidDistribution, match=r"m: entry 0 is '1E-999999999', beyond 4000 digits or an exponent of 1000"):
        to_law((decimal.Decimal(HUGE), 1), 2, where="m")


def test_perturbed_strength_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"perturbed strength: '1e-999999999' has an exponent beyond 1000"):
        es.models.perturbed(HALF, strength=HUGE)


def test_env_number_with_huge_exponent_is_refused():
    env = Env(HALF, None, get_field("fraction"))
    with pytest.raises(es.ExactSpecError, match=r"rule constant: '1e-999999999' has an exponent beyond 1000"):
        env.number(HUGE)


def test_env_number_refuses_infinity():
    env = Env(HALF, None, get_field("fraction"))
    with pytest.raises(es.ExactSpecError, match="rule constant: inf is not a finite number"):
        env.number(float("inf"))


def test_theory_number_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"a = '1e-999999999' is not a number .*exponent beyond 1000"):
        theory.expected_tokens(HUGE, 2)


def test_theory_number_refuses_infinity():
    with pytest.raises(es.ExactSpecError, match="c = inf is not a finite number"):
        theory.speedup(F(1, 2), 2, float("inf"))


def test_fraction_field_parse_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"'1e-999999999' has an exponent beyond 1000"):
        FractionField(backend="python").parse(HUGE)


@pytest.mark.parametrize("field", [MpmathField(precision=64), FloatField()], ids=["mpmath", "float"])
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_inexact_field_parse_refuses_non_finite(field, text):
    with pytest.raises(es.ExactSpecError, match=f"'{text}' is not a finite number"):
        field.parse(text)


# -- field tolerances -------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["float", "mpmath"])
@pytest.mark.parametrize("tolerance", [float("nan"), -1, float("inf"), "abc", True, HUGE],
                         ids=["nan", "-1", "inf", "abc", "True", "huge-exponent"])
def test_inexact_field_refuses_a_bad_tolerance(field, tolerance):
    with pytest.raises(es.ExactSpecError, match=f"{field} field tolerance: "):
        get_field(field, tolerance=tolerance)


def test_fraction_field_refuses_a_bool_tolerance_but_float_field_allows_zero():
    with pytest.raises(es.ExactSpecError, match="its tolerance is 0"):
        get_field("fraction", tolerance=False)
    assert get_field("float", tolerance=0).tolerance() == 0.0      # a strict float audit is legitimate
    assert get_field("mpmath", tolerance=0).tolerance() == 0


# -- AuditReport.from_json ---------------------------------------------------------------------------------
def _report_dict() -> dict:
    r = es.audit(target=HALF, draft=THIRDS, proposer=es.drafts.chain(1), rule="speculative_sampling", tokens=2)
    return json.loads(r.to_json())


@pytest.mark.parametrize("text, fragment", [
    (None, "expected a JSON string"),
    (b"{}", "expected a JSON string"),
    ({"rule": "x"}, "expected a JSON string"),
    ("not json", "not valid JSON"),
    ("", "not valid JSON"),
    ("[]", "expected an object, got an array"),
    ('"a string"', "expected an object, got a string"),
    ("{}", "missing field 'rule'"),
    ("[" * 100_000, "nested deeper than 64 levels"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested deeper than 64 levels"),
], ids=["None", "bytes", "dict", "not-json", "empty", "array", "string", "empty-object", "100k-open-brackets",
        "100k-nested-arrays", "100k-nested-objects"])
def test_from_json_refuses_what_is_not_a_report(text, fragment):
    with pytest.raises(es.ExactSpecError, match=fragment):
        es.AuditReport.from_json(text)


def _with(**changes) -> str:
    d = _report_dict()
    for k, v in changes.items():
        if v is KeyError:
            del d[k]
        else:
            d[k] = v
    return json.dumps(d)


@pytest.mark.parametrize("changes, fragment", [
    ({"output": 5}, "field 'output' must be an array"),
    ({"output": [[[0, 0], "1/4"], [["a", 0], "3/4"]]}, r"output': row 1 tokens: 'a' is not a token id"),
    ({"output": [[[0, True], "1"]]}, r"True is not a token id"),
    ({"output": [[[0, 0], 0.5], [[1, 1], "1/2"]]}, r"probability of \[0, 0\] must be a number written as a string"),
    ({"output": [[[0, 0], "1/2", "extra"]]}, r"row 0 must be a \[tokens, probability\] pair"),
    ({"output": {"(0, 0)": "1"}}, "field 'output' must be an array"),
    ({"rule": 5}, "field 'rule' must be a string, got an integer"),
    ({"claim": None}, "field 'claim' must be a string, got null"),
    ({"instance": []}, "field 'instance' must be an object, got an array"),
    ({"instance": {"vocab": "2"}}, "instance: field 'vocab' must be an integer"),
    ({"field": "decimal"}, "AuditReport JSON: unknown field 'decimal'"),
    ({"field": 3}, "field 'field' must be a string"),
    ({"tv": 0}, "field 'tv' must be a number written as a string"),
    ({"tv": "abc"}, "field 'tv': 'abc' is not a rational number"),
    ({"tokens_per_call": "1/0"}, "field 'tokens_per_call': '1/0' has a zero denominator"),
    ({"tolerance": KeyError}, "missing field 'tolerance'"),
    ({"target_calls": KeyError}, "missing field 'target_calls'"),
    ({"paths": "3"}, "field 'paths' must be an integer"),
    ({"seconds": True}, "field 'seconds' must be an integer or a number, got a boolean"),
    ({"extra": [1]}, "field 'extra' must be an object"),
], ids=["output-not-array", "token-not-int", "token-bool", "probability-float", "row-of-three", "output-object",
        "rule-int", "claim-null", "instance-array", "vocab-string", "unknown-field", "field-int", "tv-int", "tv-junk",
        "zero-denominator", "no-tolerance", "no-target-calls", "paths-string", "seconds-bool", "extra-array"])
def test_from_json_refuses_wrong_types(changes, fragment):
    with pytest.raises(es.ExactSpecError, match=fragment):
        es.AuditReport.from_json(_with(**changes))


def test_from_json_tv_with_huge_exponent_is_refused():
    with pytest.raises(es.ExactSpecError, match=r"field 'tv': '1e-999999999' has an exponent beyond 1000"):
        es.AuditReport.from_json(_with(tv=HUGE))


def test_from_json_refuses_outcomes_of_different_lengths_within_a_law():
    with pytest.raises(es.InvalidDistribution, match=r"field 'output': outcome \[1\] has 1 tokens, but the others "
                                                      r"have 2"):
        es.AuditReport.from_json(_with(output=[[[0, 0], "1/2"], [[1], "1/2"]]))


def test_from_json_refuses_expected_outcomes_longer_than_the_output_ones():
    with pytest.raises(es.InvalidDistribution, match=r"field 'expected': outcome \[0, 0, 0\] has 3 tokens"):
        es.AuditReport.from_json(_with(expected=[[[0, 0, 0], "1"]], tv="1"))


def test_from_json_refuses_tokens_outside_the_vocabulary():
    with pytest.raises(es.InvalidDistribution, match=r"field 'output': row 3 tokens: token 2 is outside the "
                                                      r"vocabulary 0..1"):
        es.AuditReport.from_json(_with(output=[[[0, 0], "1/4"], [[0, 1], "1/4"], [[1, 0], "1/4"], [[1, 2], "1/4"]]))


def test_from_json_refuses_a_negative_token():
    with pytest.raises(es.InvalidDistribution, match="token -1 is outside the vocabulary"):
        es.AuditReport.from_json(_with(output=[[[-1, 0], "1"]]))


def test_from_json_refuses_a_negative_probability():
    with pytest.raises(es.InvalidDistribution, match=r"outcome \[0, 0\] has negative probability -1/4"):
        es.AuditReport.from_json(_with(output=[[[0, 0], "-1/4"], [[0, 1], "3/4"], [[1, 0], "1/4"], [[1, 1], "1/4"]]))


def test_from_json_refuses_a_negative_tv():
    # a negative TV would read as lossless: the false pass this issue is about
    with pytest.raises(es.ExactSpecError, match=r"field 'tv' is negative"):
        es.AuditReport.from_json(_with(tv="-1"))


def test_from_json_refuses_a_tv_that_disagrees_with_the_exact_laws():
    d = _report_dict()
    d["output"] = [[[0, 0], "1"]]                    # biased: TV 3/4 against four outcomes of 1/4
    with pytest.raises(es.InvalidDistribution, match=r"field 'tv' = 0 disagrees with the laws written, whose TV is "
                                                      r"3/4"):
        es.AuditReport.from_json(json.dumps(d))


def test_from_json_refuses_an_outcome_written_twice():
    with pytest.raises(es.InvalidDistribution, match=r"outcome \[0, 0\] appears twice"):
        es.AuditReport.from_json(_with(output=[[[0, 0], "1/2"], [[0, 0], "1/2"]], tv="1"))


def test_from_json_refuses_nan_constants():
    text = _with(seconds=0.5).replace('"seconds": 0.5', '"seconds": NaN')
    with pytest.raises(es.ExactSpecError, match="NaN is not valid JSON"):
        es.AuditReport.from_json(text)


def test_from_json_refuses_deep_nesting_inside_a_valid_report():
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(es.ExactSpecError, match="nested deeper than 64 levels"):
        es.AuditReport.from_json(_with(extra={"deep": deep}))


def test_from_json_refuses_a_huge_mpmath_precision():
    with pytest.raises(es.ExactSpecError, match=r"field 'precision' must lie in 16..65536 bits"):
        es.AuditReport.from_json(_with(field="mpmath", precision=10 ** 9))


# -- models that raise, exit or never stop --------------------------------------------------------------
def _div0(ctx):
    return 1 / 0


def test_model_that_raises_is_a_model_error_naming_model_and_context():
    m = es.models.from_function(vocab=2, fn=_div0, order=1)
    with pytest.raises(es.ModelError, match=r"_div0 model, context \(1,\): the model raised ZeroDivisionError") as info:
        m((0, 1))
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_model_that_raises_key_error_is_a_model_error():
    m = es.models.from_function(vocab=2, fn=lambda ctx: {(): (1, 0)}[ctx], order=1, name="lookup")
    with pytest.raises(es.ModelError, match=r"lookup model, context \(0,\): the model raised KeyError"):
        m((0,))


def test_model_that_calls_sys_exit_is_a_model_error():
    m = es.models.from_function(vocab=2, fn=lambda ctx: sys.exit(3), order=0, name="quitter")
    with pytest.raises(es.ModelError, match=r"quitter model, context \(\): the model raised SystemExit"):
        m(())


def test_generator_model_that_raises_midway_is_a_model_error():
    def gen(ctx):
        yield F(1, 2)
        raise ValueError("boom")
    with pytest.raises(es.ModelError, match=r"gen model, context \(\): the model raised ValueError: boom"):
        es.models.from_function(vocab=2, fn=gen, order=0)(())


@pytest.mark.parametrize("kw", [{}, {"closed_form": False}], ids=["closed-form", "rng-path"])
@pytest.mark.parametrize("role", ["target", "draft"])
def test_model_error_surfaces_through_audit(kw, role):
    bad = es.models.from_function(vocab=2, fn=_div0, order=0)
    models = {"target": HALF, "draft": THIRDS} | {role: bad}
    with pytest.raises(es.ModelError, match=r"_div0 model, context \(\): the model raised ZeroDivisionError"):
        es.audit(rule="speculative_sampling", tokens=2, **models, **kw)


def test_model_error_in_a_user_rule_is_not_blamed_on_the_rule():
    def my_rule(step, rng):
        x = step.draft(0)
        if rng.bernoulli(min(1, step.target(0)[x] / step.claimed(0)[x])):
            yield step.accept(0)
        else:
            yield rng.categorical(es.laws.residual(step.target(0), step.claimed(0)))
    bad = es.models.from_function(vocab=2, fn=_div0, order=0)
    with pytest.raises(es.ModelError, match="the model raised ZeroDivisionError"):
        es.audit(target=bad, draft=THIRDS, proposer=es.drafts.chain(1), rule=my_rule, tokens=1)


@pytest.mark.parametrize("endless", [lambda ctx: itertools.count(), lambda ctx: itertools.repeat(F(1, 2))],
                         ids=["count", "repeat"])
def test_model_returning_an_endless_iterator_is_refused_without_exhausting_memory(endless):
    m = es.models.from_function(vocab=2, fn=endless, order=0, name="endless")
    with pytest.raises(es.InvalidDistribution, match=r"endless model, context \(\): returned more than vocab = 2 "
                                                      r"entries"):
        m(())


def test_endless_iterator_model_surfaces_through_audit():
    m = es.models.from_function(vocab=2, fn=lambda ctx: itertools.repeat(F(1, 2)), order=0, name="endless")
    with pytest.raises(es.InvalidDistribution, match="returned more than vocab = 2 entries"):
        es.audit(target=m, draft=THIRDS, rule="speculative_sampling", tokens=1, closed_form=False)


# -- es.theory validates its laws ------------------------------------------------------------------------
@pytest.mark.parametrize("p, q, fragment", [
    (("1/2", "1/2"), ("1/2", "1/4"), r"q: law \(1/2, 1/4\) sums to 3/4, not exactly 1"),
    ((F(1, 2), F(1, 2)), (F(1, 2), F(1, 2), 0), "q: law has 3 entries, but the other law has 2"),
    ((F(3, 2), F(-1, 2)), (F(1, 2), F(1, 2)), r"p: entry 1 is negative \(-1/2\)"),
    ((0.5, 0.5), (0.3, 0.6), "q: law of floats sums to 0.8999999999999999, not 1"),
    ((0.5, float("nan")), (0.5, 0.5), "p: entry 1: nan is not a finite number"),
    ((-0.5, 1.5), (0.5, 0.5), r"p: entry 0 is negative \(-0.5\)"),
    ((), (), "p: the law is empty"),
    ({0: 1}, (1,), "p: expected a sequence of probabilities"),
    ((HUGE, 1), (0, 1), "p: entry 0 is the string '1e-999999999'"),
], ids=["sum", "lengths", "negative", "float-sum", "nan", "float-negative", "empty", "mapping", "huge-exponent"])
def test_theory_acceptance_rate_validates_its_laws(p, q, fragment):
    with pytest.raises(es.InvalidDistribution, match=fragment):
        theory.acceptance_rate(p, q)
