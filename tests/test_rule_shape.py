"""A sampler or a whole loop handed where a rule ``fn(step, rng)`` is expected: refused before any enumeration,
with the call that audits it (exactspec.rules.shape, exactspec.errors.NotARule); real rules are never refused."""

from __future__ import annotations

import functools
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import cli
from exactspec.bugzoo import batched_samplers, loops
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.bugzoo import torch_samplers

P = es.models.context_free((F(3, 5), F(2, 5)))
Q = es.models.context_free((F(1, 2), F(1, 2)))


def counting_models():
    """A target and a draft that count the contexts they are asked about (0: nothing was enumerated)."""
    asked = []

    def law(ctx):
        asked.append(ctx)
        return (F(1, 2), F(1, 2))
    return es.models.from_function(vocab=2, fn=law, order=0), es.models.from_function(vocab=2, fn=law, order=0), asked


def sampler_hint(text: str, name: str, adapter: str) -> None:
    assert f"es.search_sampler({name}, adapter='{adapter}')" in text
    assert f"es.assert_sampler_lossless({name}, adapter='{adapter}')" in text
    assert f"exactspec audit-sampler MODULE:{name} --adapter {adapter}" in text


# -- every rule entry point refuses a sampler before enumerating ------------------------------------------------------

def test_audit_refuses_a_numpy_sampler_before_enumerating():
    target, draft, asked = counting_models()
    with pytest.raises(es.NotARule) as info:
        es.audit(rule=zoo.correct, target=target, draft=draft, proposer=es.drafts.chain(1))
    err = info.value
    assert asked == []                                   # refused before any law was asked for
    assert isinstance(err, es.RuleError) and isinstance(err, TypeError) and err.exit_code == 2
    assert (err.kind, err.adapter) == ("sampler", "numpy")
    assert err.signature == "correct(draft_ids, draft_probs, target_probs, rng)"
    text = str(err)
    assert text.startswith("correct(draft_ids, draft_probs, target_probs, rng) was handed where a rule fn(step, rng) "
                           "is expected, but it needs 4 positional arguments")
    sampler_hint(text, "correct", "numpy")


def test_assert_lossless_refuses_a_sampler():
    with pytest.raises(es.NotARule) as info:
        es.assert_lossless(zoo.correct, target=P, draft=Q, proposer=es.drafts.chain(1))
    sampler_hint(str(info.value), "correct", "numpy")


def test_the_assert_lossless_fixture_refuses_a_sampler(pytester):
    pytester.makepyfile(
        """
        import exactspec as es
        from exactspec.bugzoo import numpy_samplers as zoo

        def test_handed_a_sampler(assert_lossless):
            p = es.models.context_free(("1/2", "1/2"))
            assert_lossless(zoo.correct, target=p, draft=p, proposer=es.drafts.chain(1))
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NotARule*this looks like a sampler*es.assert_sampler_lossless(correct, "
                                 "adapter='numpy')*"])


def test_search_refuses_a_sampler():
    with pytest.raises(es.NotARule) as info:
        es.counterexamples.search(zoo.correct, max_instances=5)
    sampler_hint(str(info.value), "correct", "numpy")


def test_prove_refuses_a_sampler():
    with pytest.raises(es.NotARule) as info:
        es.prove(zoo.correct, proposer=es.drafts.chain(1), vocab=2, tokens=1)
    sampler_hint(str(info.value), "correct", "numpy")


def test_a_loop_is_refused_with_the_loop_calls():
    target, draft, asked = counting_models()
    with pytest.raises(es.NotARule) as info:
        es.audit(rule=loops.speculative_sampling, target=target, draft=draft, proposer=es.drafts.chain(1))
    assert asked == [] and info.value.kind == "loop"
    text = str(info.value)
    assert "this looks like a whole generation loop fn(target, draft, prompt_ids)" in text
    assert "es.search_loop(speculative_sampling)" in text
    assert "es.assert_loop_lossless(speculative_sampling)" in text
    assert "exactspec audit-loop MODULE:speculative_sampling" in text
    with pytest.raises(es.NotARule, match="es.audit_loop"):
        es.prove(loops.bonus_from_draft, proposer=es.drafts.chain(1), vocab=2, tokens=1)


@pytest.mark.parametrize("command", ["audit", "search", "prove"])
@pytest.mark.parametrize("spec, expected", [
    ("exactspec.bugzoo.numpy_samplers:correct", "exactspec audit-sampler MODULE:correct --adapter numpy"),
    ("exactspec.bugzoo.loops:bonus_from_draft", "exactspec audit-loop MODULE:bonus_from_draft"),
])
def test_cli_rule_option_refuses_a_sampler_or_a_loop(capsys, command, spec, expected):
    extra = ["--vocab", "2", "--gamma", "1"] if command == "audit" else ["--max-vocab", "2", "--max-gamma", "1"] \
        if command == "search" else ["--vocab", "2", "--gamma", "1", "--tokens", "1"]
    code = cli.main([command, "--rule", spec, *extra])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("exactspec: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "cannot be called as a rule" in err and expected in err


@pytest.mark.parametrize("sampler, adapter", [
    (zoo.mss_tree, "numpy-tree"),
    (batched_samplers.correct, "vllm"),
    (torch_samplers.flashinfer_accept_at_zero, "flashinfer"),
])
def test_the_adapter_is_named_from_the_signature(sampler, adapter):
    with pytest.raises(es.NotARule) as info:
        es.rules.as_rule(sampler)
    assert info.value.adapter == adapter
    sampler_hint(str(info.value), sampler.__name__, adapter)


def test_transformers_and_torch_tree_signatures():
    from transformers.generation.utils import _speculative_sampling
    with pytest.raises(es.NotARule) as info:
        es.rules.as_rule(_speculative_sampling)
    assert info.value.adapter == "transformers"

    def verify(candidates, logits, tree):          # the torch-tree adapter's signature (EAGLE / Medusa layout)
        return [0]
    with pytest.raises(es.NotARule) as info:
        es.Rule(verify)
    assert info.value.adapter == "torch-tree"


def test_an_unrecognised_signature_names_both_and_the_adapters():
    def mystery(a, b, c):
        return [0]
    with pytest.raises(es.NotARule) as info:
        es.rules.as_rule(mystery)
    text = str(info.value)
    assert info.value.kind == "sampler or loop" and info.value.adapter == ""
    assert "es.search_sampler(mystery, adapter='...')" in text and "es.audit_loop(mystery" in text
    assert "one of numpy, numpy-tree, transformers, vllm, flashinfer, vllm-v1, torch-tree" in text


def test_a_torch_module_sampler_is_read_through_forward():
    torch = pytest.importorskip("torch")

    class RejectionSampler(torch.nn.Module):
        def forward(self, target_probs, draft_probs, draft_token_ids, bonus_token_ids):
            return batched_samplers.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    with pytest.raises(es.NotARule) as info:
        es.rules.as_rule(RejectionSampler())
    assert info.value.adapter == "vllm"


# -- conservative: nothing a rule can be is ever refused ------------------------------------------------------------

def _ss(step, rng):
    return es.rules.speculative_sampling.fn(step, rng)


class CallableRule:
    def __call__(self, step, rng):
        return _ss(step, rng)


class MethodHolder:
    def verify(self, step, rng, extra=None):
        return _ss(step, rng)


def star_args(*args, **kwargs):
    return _ss(*args, **kwargs)


def with_defaults(step, rng, temperature=1, *more, scale=2, **options):
    return _ss(step, rng)


def keyword_names(step=None, rng=None):
    return _ss(step, rng)


@es.rule(claim="lossless")
def decorated(step, rng):
    return _ss(step, rng)


def three_with_one_bound(k, step, rng):
    return _ss(step, rng)


RULES = [
    ("*args, **kwargs", star_args),
    ("defaults, *args and keyword-only", with_defaults),
    ("keywords with defaults", keyword_names),
    ("functools.partial", functools.partial(three_with_one_bound, 1)),
    ("functools.partial of a 4-argument function", functools.partial(lambda a, b, step, rng: _ss(step, rng), 1, 2)),
    ("a class with __call__", CallableRule()),
    ("a bound method with a default", MethodHolder().verify),
    ("es.rule-decorated", decorated),
    ("a lambda", lambda step, rng: _ss(step, rng)),
    ("functools.wraps", functools.wraps(_ss)(lambda *a, **k: _ss(*a, **k))),
    ("a builtin-like callable with no signature", type("NoSig", (), {"__call__": lambda self, *a: _ss(*a),
                                                                      "__signature__": property(
                                                                          lambda self: (_ for _ in ()).throw(
                                                                              ValueError("no signature")))})()),
]


@pytest.mark.parametrize("label, fn", RULES, ids=[r[0] for r in RULES])
def test_real_rules_are_never_refused(label, fn):
    report = es.audit(rule=fn, target=P, draft=Q, proposer=es.drafts.chain(1))
    assert report.tv == 0 and report.verdict == "lossless"
    assert es.counterexamples.search(fn, max_instances=3) is not None


def test_every_catalog_rule_is_a_rule():
    assert all(es.rules.as_rule(r) is r for r in es.rules.catalog())
    for r in es.rules.catalog():          # rebuilt from its function: never refused
        assert es.Rule(r.fn, family=r.family, claim=r.claim, declared_target=r.declared_target).fn is r.fn


def test_a_rule_with_a_closed_form_is_not_inspected():
    def odd(a, b, c):             # never called: the closed form computes the step law
        return [0]
    assert es.Rule(odd, closed_form=lambda *a: None).fn is odd


# -- the hint on a first call that did not bind ---------------------------------------------------------------------

class Forwarding:
    """A wrapper taking *args (so the signature cannot tell) around a 4-argument sampler."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)


def test_a_first_call_that_does_not_bind_adds_the_hint():
    with pytest.raises(es.RuleError) as info:
        es.audit(rule=Forwarding(zoo.correct), target=P, draft=Q, proposer=es.drafts.chain(1))
    text = str(info.value)
    assert not isinstance(info.value, es.NotARule)
    assert "TypeError: correct() missing 2 required positional arguments" in text
    assert "exactspec calls a rule as fn(step, rng), and the two arguments did not bind" in text
    assert "es.search_sampler(Forwarding, adapter=...)" in text and "es.audit_loop(Forwarding" in text

    def one_argument(step):
        return [0]
    with pytest.raises(es.RuleError, match="takes 1 positional argument but 2 were given.*did not bind"):
        es.audit(rule=one_argument, target=P, draft=Q, proposer=es.drafts.chain(1))


def test_no_hint_for_a_type_error_inside_the_rule_or_a_sampler_audit():
    def helper(a, b):
        return [0]

    def calls_a_helper_wrongly(step, rng):
        return helper(step)
    with pytest.raises(es.RuleError) as info:
        es.audit(rule=calls_a_helper_wrongly, target=P, draft=Q, proposer=es.drafts.chain(1))
    assert "helper() missing 1 required positional argument" in str(info.value)
    assert "did not bind" not in str(info.value)

    def binds_late(step, rng):    # the same bad call, after a first successful one: not about the signature
        if step.draft(0) == 1:
            return helper(step)
        return [0]
    with pytest.raises(es.RuleError) as info:
        es.audit(rule=Forwarding(lambda *a: binds_late(*a)), target=P, draft=Q, proposer=es.drafts.chain(1))
    assert "did not bind" not in str(info.value)

    def wrong_arity(a, b, c):     # handed to audit_sampler with the numpy adapter, which calls it with 4 arguments
        return [0]
    with pytest.raises(es.RuleError) as info:
        es.audit_sampler(wrong_arity, adapter="numpy", target=P, draft=Q, proposer=es.drafts.chain(1))
    assert "takes 3 positional arguments but 4 were given" in str(info.value)
    assert "did not bind" not in str(info.value)
