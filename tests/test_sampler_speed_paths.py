"""The fast paths of audit_sampler give the laws of the plain path, exactly.

``cache=True`` (the default) answers a sampler call whose inputs (drafts and laws) were already
enumerated from the law recorded for them, caches the adapter's tensors per input, and runs the
references as fast rules; ``cache=False`` runs every call. Reports must agree on everything but
the count of sampler calls.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance


def retrying(draft_ids, draft_probs, target_probs, rng):
    """Correct, with a varying number of draws: the residual by rejection from the target (at most 2 tries; each
    accepts y with probability (p - q)+(y) / p(y), so an accepted y follows the residual), then numpy's choice."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
            continue
        for _ in range(2):
            y = int(rng.choice(len(p), p=p))
            if rng.random() < max(p[y] - q[y], 0.0) / p[y]:
                out.append(y)
                return out
        res = np.maximum(p - q, 0.0)
        out.append(int(rng.choice(len(p), p=res / res.sum())))
        return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def _same(a, b):
    """Two sampler reports agree on everything but how many times the sampler ran."""
    assert list(a.output.items()) == list(b.output.items())      # the same law, outcomes in the same order
    assert a.tv == b.tv and a.verdict == b.verdict and a.tolerance == b.tolerance and a.expected == b.expected
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        for k in ("seconds", "paths"):
            d.pop(k)
        d["extra"] = {k: v for k, v in d["extra"].items() if k not in ("sampler_calls", "cached_calls",
                                                                         "float64_sampler_calls",
                                                                         "float64_cached_calls")}
    assert da == db


T1 = es.models.random_table(vocab=3, order=1, seed=0)
ORDER1 = dict(target=T1, draft=es.models.perturbed(T1, seed=1), proposer=es.drafts.chain(2), prompt=(0,))


@pytest.mark.parametrize("sampler", [zoo.correct, zoo.shared_uniform, retrying, zoo.tiny_clamp])
def test_cached_sampler_calls_give_the_uncached_law(sampler):
    # the default horizon (gamma + 2 tokens) asks each state's step law at several horizons: equal inputs
    cached = es.audit_sampler(sampler, **ORDER1)
    plain = es.audit_sampler(sampler, cache=False, **ORDER1)
    _same(cached, plain)
    assert cached.extra["cached_calls"] > 0 and cached.extra["sampler_calls"] < plain.extra["sampler_calls"]
    assert plain.extra["sampler_calls"] == plain.paths and "cached_calls" not in plain.extra


def test_cached_calls_on_a_lattice():
    for sampler in (zoo.correct, zoo.shared_uniform):
        kw = dict(ORDER1, rng_model="torch-float32")
        cached, plain = es.audit_sampler(sampler, **kw), es.audit_sampler(sampler, cache=False, **kw)
        _same(cached, plain)
        assert cached.extra["cached_calls"] > 0


def test_the_biased_sampler_stays_biased_through_the_cache():
    r = es.audit_sampler(zoo.shared_uniform, **ORDER1)
    assert r.verdict == "biased" and F(r.extra["algorithmic_tv"]) > F(1, 100)


def test_a_sampler_error_through_the_cache_is_still_a_rule_error_with_its_draws():
    def fails_on_rejection(draft_ids, draft_probs, target_probs, rng):
        for j, x in enumerate(draft_ids):
            if not rng.random() < target_probs[j, x] / draft_probs[j, x]:
                raise ValueError("no residual here")
        return list(draft_ids) + [0]
    with pytest.raises(es.RuleError, match="raised ValueError: no residual here") as info:
        es.audit_sampler(fails_on_rejection, **ORDER1)
    assert ("uniform", False) in info.value.trace


def test_tree_samplers_through_the_cache():
    p = es.models.random_table(vocab=3, order=1, seed=2)
    kw = dict(target=p, draft=es.models.perturbed(p, seed=3), proposer=es.drafts.tree((2,)), prompt=(1,))
    cached = es.audit_sampler(es.samplers.reference_numpy_tree, adapter="numpy-tree", **kw)
    plain = es.audit_sampler(es.samplers.reference_numpy_tree, adapter="numpy-tree", cache=False, **kw)
    _same(cached, plain)
    assert cached.extra["cached_calls"] > 0 and cached.verdict == "lossless"


# -- torch: the adapter's tensor cache and the fast reference ------------------------------------------

def test_transformers_sampler_cached_and_plain_agree():
    pytest.importorskip("torch")
    utils = pytest.importorskip("transformers.generation.utils")
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=3)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=3)
    for model in ("native", "continuous"):     # on the float32 grid its r <= p/q takes one point more than r < p/q
        cached = es.audit_sampler(utils._speculative_sampling, adapter="transformers", rng_model=model, **kw)
        plain = es.audit_sampler(utils._speculative_sampling, adapter="transformers", cache=False, rng_model=model,
                                 **kw)
        _same(cached, plain)
        assert cached.verdict == "lossless" and cached.extra["cached_calls"] > 0
    assert cached.extra["reference_tv"] == "0"


def test_a_sampler_that_modifies_its_inputs_gets_fresh_tensors():
    pytest.importorskip("torch")
    from exactspec.samplers.adapters.torch_adapters import reference_transformers_style

    def scribbles(ids, cand_logits, gamma, new_logits):
        out = reference_transformers_style(ids, cand_logits, gamma, new_logits)
        new_logits.mul_(0.5)          # in place, after use: a later call handed these tensors would see other laws
        cand_logits[0, 0].add_(1.0)   # through a view too
        return out
    p, q = es.models.context_free((F(3, 5), F(1, 5), F(1, 5))), es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))
    kw = dict(target=p, draft=q, proposer=es.drafts.chain(2), tokens=2, reference=False, adapter="transformers")
    assert es.audit_sampler(scribbles, **kw).output == \
        es.audit_sampler(reference_transformers_style, cache=False, **kw).output


def _reference_through_the_adapter(precision, rng_model):
    """The keywords of a small chain instance, and transformers' reference audited through its adapter there."""
    from exactspec.samplers.adapters.torch_adapters import transformers_chain
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=3)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=3,
              rng_model=rng_model)
    return kw, es.audit_sampler(transformers_chain.reference_at(precision), adapter="transformers", reference=False,
                                cache=False, **kw)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("rng_model", ["continuous", "torch-float32"])
def test_the_fast_reference_has_the_law_of_the_reference_through_the_pipeline(precision, rng_model):
    pytest.importorskip("torch")
    from exactspec._device import one_torch_thread as _one_torch_thread
    from exactspec.samplers.adapters.torch_adapters import transformers_chain
    kw, piped = _reference_through_the_adapter(precision, rng_model)
    with _one_torch_thread():
        fast = es.audit(rule=transformers_chain.fast_reference(precision), exact_floats=True, **kw)
    assert list(fast.output.items()) == list(piped.output.items())
    assert 0 < fast.tv < F(1, 10 ** 6)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("rng_model", ["native", "continuous"])
def test_the_fast_reference_giving_tokens_one_by_one_has_the_law_of_the_pipeline_in_fewer_branches(precision,
                                                                                                    rng_model):
    # the rounding figures' reference: a generator rule in the deferring engine (its last draw spread, each state
    # enumerated at its longest horizon), the law of the reference through the adapter and the interception
    pytest.importorskip("torch")
    from exactspec._audit import run_audit, validate_audit
    from exactspec._device import one_torch_thread as _one_torch_thread
    from exactspec.samplers.adapters.torch_adapters import transformers_chain
    kw, piped = _reference_through_the_adapter(precision, rng_model)
    with _one_torch_thread():
        plain = run_audit(validate_audit(rule=transformers_chain.fast_reference(precision), backend="python", **kw),
                          exact_floats=True)
        lazy = run_audit(validate_audit(rule=transformers_chain._fast_reference_tokens(precision), backend="python",
                                        **kw), exact_floats=True, lazy=True)
    assert lazy.output == plain.output == piped.output
    assert lazy.paths < plain.paths


def test_a_multinomial_row_becomes_the_law_torch_draws_from_exactly():
    pytest.importorskip("torch")
    from exactspec.samplers.adapters.torch_adapters import _normalised
    rows = [[0.1, 0.2, 0.7], [2.0 ** -140, 0.0, 3.0], [1e300, 1e-300, 5e-324], [0.0, 0.25]]
    for row in rows:
        total = sum(F(x) for x in row)
        assert _normalised(row) == tuple(F(x) / total for x in row)
    for bad in ([0.0, -0.0], [0.5, -0.25]):
        with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
            _normalised(bad)
    with pytest.raises(ValueError):
        _normalised([float("nan"), 1.0])

@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("rng_model", ["continuous", "torch-float32"])
def test_the_fast_numpy_reference_has_the_law_of_the_reference_through_the_pipeline(precision, rng_model):
    from exactspec.samplers import numpy_chain
    kw = dict(ORDER1, tokens=3, rng_model=rng_model)
    piped = es.audit_sampler(numpy_chain.reference_at(precision), reference=False, cache=False, **kw)
    fast = es.audit(rule=numpy_chain.fast_reference(precision), exact_floats=True, **kw)
    assert list(fast.output.items()) == list(piped.output.items()) and 0 < fast.tv < F(1, 10 ** 6)
    assert piped.extra["precision"] == precision


def test_adapters_that_call_samplers_their_own_way_have_no_fast_reference():
    class Other(es.samplers.NumpyChainAdapter):
        def call(self, sampler, step, rng):
            return super().call(sampler, step, rng)
    assert Other().fast_reference("float64") is None and es.samplers.Adapter().fast_reference("float32") is None
