"""es.audit's own options: declared targets, decoding defaults, the exact field's two backends."""

from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.instances import check_cases, default_instance, make_instance


def test_ensemble_against_its_declared_target():
    # accept w.p. min(1, 1 - w + w p/q) = min(1, v/q) with v = w p + (1 - w) q, and max(0, v - q) = w max(0, p - q)
    # has the same normalised residual: the first emitted token follows v exactly.
    inst = make_instance(vocab=4, order=1, gamma=2, tokens=1, seed=3)
    w = F(1, 3)
    v = es.models.mixture([inst.target, inst.draft], [w, 1 - w])
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=es.rules.ensemble(w),
              prompt=inst.prompt)
    first = es.audit(tokens=1, expected=v, **kw)
    assert first.tv == 0 and first.instance["expected"] == v.name
    assert es.audit(tokens=1, **kw).tv > 0          # ... and so not p
    # over several tokens the bonus (drawn from p, not v) breaks even the declared target
    assert es.audit(tokens=3, expected=v, **kw).tv > 0


def test_decoding_defaults_follow_the_claim():
    inst = default_instance()
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    assert es.audit(rule=es.rules.greedy_match, **kw).instance["decoding"] == "greedy"
    assert es.audit(rule=es.rules.speculative_sampling, **kw).instance["decoding"] == "sample"
    with pytest.raises(es.ExactSpecError, match="greedy"):
        es.audit(rule=es.rules.greedy_match, decoding="greedy", expected=inst.target, **kw)


@pytest.mark.parametrize("case", check_cases(), ids=lambda c: f"{c.rule.name}-{c.proposer.describe()}")
def test_gmpy2_and_fraction_backends_give_identical_reports(case):
    pytest.importorskip("gmpy2")  # the `fast` extra; CI installs it
    rule, proposer, _, tokens = case
    inst = default_instance()
    kw = dict(target=inst.target, draft=inst.draft if proposer.needs_draft() else None, proposer=proposer,
              rule=rule, prompt=inst.prompt, tokens=min(tokens, 3))
    a, b = es.audit(backend="gmpy2", **kw), es.audit(backend="python", **kw)
    assert a.output == b.output and a.tv == b.tv
    assert a.tokens_per_call == b.tokens_per_call and a.target_calls == b.target_calls
    assert a.accepted_per_call == b.accepted_per_call and a.nodes_per_call == b.nodes_per_call
    assert all(type(x) is F for x in list(a.output.values()) + [a.tv, a.tokens_per_call])


def test_rule_by_name_and_plain_function():
    inst = make_instance(vocab=3, order=1, gamma=1, tokens=2)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    by_name = es.audit(rule="resample_from_target", **kw)
    assert by_name.output == es.audit(rule=es.rules.resample_from_target, **kw).output
    plain = es.audit(rule=es.rules.resample_from_target.fn, **kw)
    assert plain.output == by_name.output and plain.claim == "lossless" and not plain.claim_holds


def test_audits_sharing_the_expected_law_report_what_each_computes_alone():
    # `exactspec check` audits its configurations inside shared_expected_laws(): the expected law of a horizon is
    # computed once, and each report (and each budget's count of outcomes held) is what the audit gives alone
    from exactspec._audit import build_engine, compute_laws, shared_expected_laws, validate_audit
    inst = default_instance()
    cases = [c for c in check_cases(inst) if c.proposer.family == "chain"][:3]

    def run(case):
        inputs = validate_audit(target=inst.target, draft=inst.draft, proposer=case.proposer, rule=case.rule,
                                prompt=inst.prompt, tokens=case.tokens)
        engine = build_engine(inputs)
        laws = compute_laws(engine, inputs)
        return laws, engine.meter.outcomes

    alone = [run(c) for c in cases]
    with shared_expected_laws():
        shared = [run(c) for c in cases]
    for (a, held_a), (b, held_b) in zip(alone, shared):
        assert (a.output, a.expected, a.tv) == (b.output, b.expected, b.tv) and held_a == held_b
        assert all(type(v) is F for v in b.expected.values())
    assert shared[0][0].expected is not shared[1][0].expected     # each report its own dict
    assert len({c.tokens for c in cases}) == 1


def test_an_outcomes_budget_counts_a_shared_expected_law_as_one_computed():
    from exactspec._audit import build_engine, shared_expected_laws, validate_audit
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=4)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=4,
              rule="speculative_sampling")
    engine = build_engine(validate_audit(**kw))
    engine.efficiency(inst.prompt, 4)
    engine.output(inst.prompt, 4)
    tight = es.Budget(outcomes=engine.meter.outcomes + 1)     # the output law fits, the expected law does not
    with pytest.raises(es.BudgetExceeded, match="outcomes"):
        es.audit(budget=tight, **kw)
    with shared_expected_laws():
        es.audit(**kw)                                        # computes and keeps the expected law
        with pytest.raises(es.BudgetExceeded, match="outcomes"):
            es.audit(budget=tight, **kw)                      # reused, and still counted
        es.audit(budget=es.Budget(outcomes=engine.meter.outcomes + 4 ** 4 * 2), **kw)
