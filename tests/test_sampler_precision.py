"""Rounding at the sampler's own precision: the baseline is a reference sampler computing as the sampler does.

A float32 sampler carries float32 rounding (TV ~1e-8); measured against a float64 reference
(TV ~1e-17) that rounding used to read as "biased". The baseline is now the reference at the
precision the sampler computes in (declared or detected), both figures are reported, and a bias
rounding cannot explain, or any support violation, still reads "biased".
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance
from exactspec.laws import total_variation
from exactspec.samplers import EnumGenerator, NumpyChainAdapter
from exactspec.samplers.adapters.base import at_precision, float_precision, lowest, precision_of
from exactspec.samplers.rounding import F64_ALLOWANCE, ROUNDING_CAP

FLOOR = F(1, 2 ** 40)


def correct_f32(draft_ids, draft_probs, target_probs, rng):
    """Algorithm 1 computed in float32: the laws cast down, ratio and residual in float32."""
    q32, p32 = draft_probs.astype(np.float32), target_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < p32[j, x] / q32[j, x]:
            out.append(int(x))
            continue
        res = np.maximum(p32[j] - q32[j], np.float32(0))
        out.append(int(rng.choice(len(res), p=res / res.sum())))
        return out
    out.append(int(rng.choice(p32.shape[1], p=p32[-1] / p32[-1].sum())))
    return out


def shaved_f32(draft_ids, draft_probs, target_probs, rng):
    """The same in float32 with every acceptance shaved by a factor 0.9999: a small algorithmic bias."""
    q32, p32 = draft_probs.astype(np.float32), target_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < p32[j, x] / q32[j, x] * np.float32(0.9999):
            out.append(int(x))
            continue
        res = np.maximum(p32[j] - q32[j], np.float32(0))
        out.append(int(rng.choice(len(res), p=res / res.sum())))
        return out
    out.append(int(rng.choice(p32.shape[1], p=p32[-1] / p32[-1].sum())))
    return out


def tiny_clamp_f32(draft_ids, draft_probs, target_probs, rng):
    """float32 residual clamped at float32's tiny: mass ~1e-38 on tokens the target never emits."""
    q32, p32 = draft_probs.astype(np.float32), target_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < p32[j, x] / q32[j, x]:
            out.append(int(x))
            continue
        res = np.maximum(p32[j] - q32[j], np.finfo(np.float32).tiny)
        out.append(int(rng.choice(len(res), p=res / res.sum())))
        return out
    out.append(int(rng.choice(p32.shape[1], p=p32[-1] / p32[-1].sum())))
    return out


INST = make_instance(vocab=3, order=1, gamma=2, tokens=2)
KW = dict(target=INST.target, draft=INST.draft, proposer=INST.proposer, prompt=INST.prompt, tokens=2)


def test_a_correct_float32_sampler_is_lossless_up_to_float32_rounding():
    r = es.audit_sampler(correct_f32, **KW)
    tv = r.tv
    assert r.verdict == "lossless" and tv > FLOOR      # against a float64 reference (the old baseline): "biased"
    # the float32 rounding is far above the float64 baseline and the 2**-40 floor
    assert tv > 2 * F(r.extra["rounding_tv_float64"]) and r.extra["precision"] == "float32"
    assert "detected" in r.extra["precision_from"]
    assert r.extra["rounding_tv"] == r.extra["rounding_tv_float32"] and tv <= 2 * F(r.extra["rounding_tv_float32"])
    # it casts its float64 inputs down itself (numpy: no run can lift it): the float64 run sees float32 and is held
    # to what float32 rounding costs the correct reference on this instance, measured
    assert r.extra["float_boundary"]["forced"] is True
    assert "costs a correct reference sampler on this instance" in r.verdict_text
    assert tv <= 4 * F(r.extra["measured_rounding"]["reference_tv"])


def test_the_float32_rounding_figure_is_the_float32_reference_against_the_exact_rule():
    # computed a second way: the float64 reference through an adapter that hands it float32 arrays, and the exact
    # rule's law from es.audit
    class Float32Arrays(NumpyChainAdapter):
        name = "numpy-float32"

        def call(self, sampler, step, rng):
            drafts, q, p = self.chain_arrays(step)
            return self.tokens(sampler(drafts, q.astype(np.float32), p.astype(np.float32), EnumGenerator(rng)))

    ref32 = es.audit_sampler(es.samplers.reference_numpy_chain, adapter=Float32Arrays(), reference=False, **KW)
    exact = es.audit(rule="speculative_sampling", exact_floats=True, **KW)
    r = es.audit_sampler(correct_f32, **KW)
    assert F(r.extra["rounding_tv_float32"]) == total_variation(ref32.output, exact.output) > 0
    ref64 = es.audit_sampler(es.samplers.reference_numpy_chain, reference=False, **KW)
    assert F(r.extra["rounding_tv_float64"]) == total_variation(ref64.output, exact.output) > 0
    assert ref32.extra["precision"] == "float32" and ref64.extra["precision"] == "float64"


def test_a_float32_sampler_with_a_small_algorithmic_bias_is_still_biased():
    r = es.audit_sampler(shaved_f32, **KW)
    assert r.extra["precision"] == "float32" and r.verdict == "biased"
    assert F(r.extra["algorithmic_tv"]) > 100 * F(r.extra["rounding_tv_float32"])


def test_a_support_violation_is_biased_below_the_float32_rounding():
    p0 = es.models.context_free((0, F(1, 2), F(1, 2)))          # token 0: target probability 0
    q0 = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
    r = es.audit_sampler(tiny_clamp_f32, target=p0, draft=q0, proposer=es.drafts.chain(1), tokens=1)
    assert r.support_violations == [(0,)] and 0 < r.tv < r.tolerance
    assert r.extra["precision"] == "float32" and r.verdict == "biased"
    assert "support violation" in r.verdict_text


def test_a_float64_sampler_keeps_the_float64_baseline_and_says_the_floor_applied():
    r = es.audit_sampler(zoo.correct, **KW)
    assert r.verdict == "lossless" and "2**-40 floor" in r.verdict_text     # not "twice what rounding costs"
    assert r.extra["precision"] == "float64"
    assert F(r.extra["rounding_tv_float64"]) < F(r.extra["rounding_tv_float32"])
    assert r.tolerance == FLOOR and "2**-40 floor" in r.verdict_text and "2**-40 floor" in r.extra["tolerance_from"]


def test_a_declared_precision_wins_over_detection():
    class Declared64(NumpyChainAdapter):
        precision = "float64"
    r = es.audit_sampler(correct_f32, adapter=Declared64(), **KW)
    assert r.extra["precision"] == "float64" and "declared" in r.extra["precision_from"]
    # a declaration names the precision; it no longer turns float32 rounding into "biased" (a false fail): the
    # float64 run sees the sampler's own cast to float32 and decides within float32 rounding
    assert r.extra["float_boundary"]["forced"] is True and r.verdict == "lossless"
    given = es.audit_sampler(zoo.correct, precision="float32", **KW)
    assert given.extra["precision"] == "float32" and given.extra["precision_from"] == "given"
    with pytest.raises(es.ExactSpecError, match="precision must be one of"):
        es.audit_sampler(correct_f32, precision="float8", **KW)


def test_torch_adapters_declare_float32_and_report_both_figures():
    pytest.importorskip("torch")
    from exactspec.samplers.adapters.torch_adapters import reference_transformers_style, transformers_chain
    assert transformers_chain.declared_precision() == "float32"
    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    # the float arithmetic's two figures differ when the uniform is ideal (continuous)...
    r = es.audit_sampler(reference_transformers_style, adapter="transformers", target=p, draft=q,
                         proposer=es.drafts.chain(1), tokens=2, rng_model="continuous")
    assert r.verdict == "lossless" and r.extra["precision"] == "float32" and r.extra["reference_tv"] == "0"
    assert r.extra["rounding_tv"] == r.extra["rounding_tv_float32"] != r.extra["rounding_tv_float64"]
    # ...on torch's own generator (native, the default) the reference draws torch.rand(1) in float32 at either
    # precision: P(u < 0.8) = ceil(0.8 * 2**24) / 2**24 is the same at both, and dominates
    native = es.audit_sampler(reference_transformers_style, adapter="transformers", target=p, draft=q,
                              proposer=es.drafts.chain(1), tokens=2)
    assert native.extra["reference_tv"] == "0" and native.extra["rng_model"] == "native"
    assert native.extra["rounding_tv_float32"] == native.extra["rounding_tv_float64"] != r.extra["rounding_tv_float64"]


def test_with_expected_the_algorithmic_tv_is_measured_against_the_declared_law():
    def sharpened(draft_ids, draft_probs, target_probs, rng):   # emits one token from p**2 / sum(p**2)
        w = target_probs[0] ** 2
        return [int(rng.choice(len(w), p=w / w.sum()))]
    p, q = es.models.context_free((F(1, 3), F(2, 3))), es.models.context_free((F(1, 2), F(1, 2)))
    r = es.audit_sampler(sharpened, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1,
                         expected=es.models.sharpen(p, 2))
    # the declared law is (1/5, 4/5); the reference sampler emits p = (1/3, 2/3): TV(p, declared) = 2/15, which
    # is what algorithmic_tv read before, while the verdict against the declared law is lossless
    assert r.verdict == "lossless"
    assert F(r.extra["algorithmic_tv"]) == r.tv < FLOOR
    assert r.extra["algorithmic_tv_against"] == "the declared law (expected=)"


def test_precision_helpers():
    torch = pytest.importorskip("torch")
    assert precision_of(torch.zeros(1, dtype=torch.bfloat16)) == "bfloat16"
    assert precision_of(torch.zeros(1, dtype=torch.float64)) == "float64" and precision_of("x") is None
    assert float_precision({"a": [torch.zeros(1), np.zeros(1)]}) == "float32"
    assert lowest(["float64", "float16", "bfloat16"]) == "bfloat16"
    cast = at_precision(lambda t, n: (t.dtype, n), "float64")
    assert cast(torch.zeros(2), 3) == (torch.float64, 3)


def test_precision_of_remembers_each_dtype_apart_from_names_that_compare_equal_to_it():
    from types import SimpleNamespace
    # numpy's dtype('float64') == "float" (numpy reads "float" as float64), while "float" names torch's float32:
    # whichever is asked first, each keeps its own answer
    for order in ((np.zeros(1), SimpleNamespace(dtype="float")), (SimpleNamespace(dtype="float"), np.zeros(1))):
        assert np.dtype("float64") == "float"
        assert [precision_of(x) for x in order * 2] == [precision_of(order[0]), precision_of(order[1])] * 2
        assert {precision_of(np.zeros(1)), precision_of(SimpleNamespace(dtype="float"))} == {"float64", "float32"}
    assert precision_of(np.zeros(1, dtype=">f8")) is None            # a byte-swapped float64 is not float64's
    # each answer is remembered under the dtype and its type, the two names apart
    from exactspec.samplers.adapters import base
    f64 = np.dtype("float64")
    assert base._BY_DTYPE[(type(f64), f64)] == "float64" and base._BY_DTYPE[(str, "float")] == "float32"


def test_the_rng_observes_the_numbers_compared_with_its_uniforms():
    from exactspec.enumerate.rng import PathRng
    from exactspec.fields import get_field
    rng = PathRng((), F(1), get_field(backend="python"), [], {}, exact_floats=True)
    seen = []
    rng.observe = seen.append
    u = rng.uniform()
    assert (u < np.float32(0.5)) is True and (u * 2.0 < 3) is True
    assert [type(x) for x in seen] == [np.float32, float, int]


# -- a torch sampler that rounds through float32 and back: rounding, never bias ------------------------------------------
# Its float64 run hands float64 to multinomial and to the comparison with uniforms, so the dtypes meeting the
# randomness were all float64, and its float32 rounding (TV ~2e-8) read "biased" before the watched rerun.

def _round_trip_chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, tilt=0.0):
    import torch

    from exactspec.bugzoo.torch_samplers import chain

    def recover(p, q):
        r = torch.clamp(p.float().double() - q, min=0)
        r = r * torch.cat([r.new_ones(1) + tilt, r.new_ones(r.shape[0] - 1)])
        return torch.multinomial(r / r.sum(), 1)[0]
    return chain(target_probs.float().double(), draft_probs, draft_token_ids, bonus_token_ids, recover)


def round_trip_f32(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    return _round_trip_chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids)


def round_trip_f32_tilted(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    return _round_trip_chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, tilt=1e-3)


_P3 = es.models.random_table(vocab=3, order=1, seed=1)
_Q3 = es.models.random_table(vocab=3, order=1, seed=2)


def test_a_torch_sampler_rounding_through_float32_and_back_is_not_called_biased():
    pytest.importorskip("torch")
    r = es.audit_sampler(round_trip_f32, adapter="vllm", target=_P3, draft=_Q3, proposer=es.drafts.chain(2),
                         tokens=2)
    b = r.extra["float_boundary"]
    assert F64_ALLOWANCE < r.tv < ROUNDING_CAP                     # float32 rounding as it runs ...
    assert F(b["f64_tv"]) <= F64_ALLOWANCE                         # ... gone with its casts lifted to float64
    assert r.verdict == "lossless" and b["forced"] is True and r.extra["forced_precision"] == "float32"
    assert "watched" in r.extra["forced_precision_from"]


def test_a_torch_sampler_biased_beyond_float32_rounding_stays_biased_when_it_rounds_through_float32():
    pytest.importorskip("torch")
    r = es.audit_sampler(round_trip_f32_tilted, adapter="vllm", target=_P3, draft=_Q3, proposer=es.drafts.chain(2),
                         tokens=2)
    b = r.extra["float_boundary"]
    assert r.verdict == "biased" and F(b["f64_tv"]) > F(b["allowance"])


def test_a_given_precision_hands_the_sampler_its_laws_in_that_dtype():
    handed = set()

    def noting(draft_ids, draft_probs, target_probs, rng):
        handed.add((draft_probs.dtype.name, target_probs.dtype.name))
        return es.samplers.reference_numpy_chain(draft_ids, draft_probs, target_probs, rng)
    r = es.audit_sampler(noting, precision="float16", **KW)
    # it used to hand float64 and describe the TV as float16 rounding
    assert ("float16", "float16") in handed and r.extra["precision"] == "float16"
    assert r.verdict == "lossless" and r.tv > 0
    with pytest.raises(es.ExactSpecError, match="numpy has no bfloat16"):
        es.audit_sampler(noting, precision="bfloat16", **KW)


def test_a_given_precision_hands_a_torch_sampler_tensors_of_that_dtype():
    torch = pytest.importorskip("torch")
    handed = set()

    def noting(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        from exactspec.bugzoo.torch_samplers import chain
        handed.add((target_probs.dtype, draft_probs.dtype))

        def recover(p, q):      # vLLM-style: the residual and its draw in the dtype handed (bfloat16)
            return torch.multinomial(torch.clamp(p - q, min=0), 1)[0]
        return chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)
    p, q = es.models.context_free((F(1, 2), F(3, 10), F(1, 5))), es.models.context_free((F(1, 5), F(1, 5), F(3, 5)))
    r = es.audit_sampler(noting, adapter="vllm", precision="bfloat16", target=p, draft=q,
                         proposer=es.drafts.chain(1), tokens=1, progress=False)
    assert (torch.bfloat16, torch.bfloat16) in handed and r.extra["precision"] == "bfloat16"
    assert r.verdict == "lossless" and r.tv > F(1, 2 ** 12)      # bfloat16's rounding, beyond float32's cap
def test_sampling_metadata_as_a_simple_namespace_has_no_precision():
    # issue 35: precision_of read .dtype of every SimpleNamespace; vLLM-style metadata has none, and the
    # AttributeError was blamed on the sampler as a RuleError (the same metadata as a class instance audited fine)
    torch = pytest.importorskip("torch")
    import functools
    from types import SimpleNamespace
    from exactspec.samplers.adapters.torch_adapters import VllmChainAdapter, reference_vllm_style

    meta = SimpleNamespace(all_random=True, temperature=torch.ones(1, dtype=torch.float16))
    assert precision_of(SimpleNamespace(all_greedy=False)) is None
    assert precision_of(SimpleNamespace(dtype="float")) == "float32"          # a dtype holder still reads as one
    assert float_precision({"sampling_metadata": meta, "p": np.zeros(1, dtype=np.float32)}) == "float32"

    def with_metadata(target_probs, draft_probs, draft_token_ids, bonus_token_ids, sampling_metadata):
        assert sampling_metadata.all_random
        return reference_vllm_style(target_probs, draft_probs, draft_token_ids, bonus_token_ids)

    class MetadataAdapter(VllmChainAdapter):
        """The vllm adapter handing the sampler vLLM-style sampling metadata too."""
        reference = staticmethod(with_metadata)

        def call(self, sampler, step, rng):
            return super().call(functools.partial(sampler, sampling_metadata=meta), step, rng)

    p, q = es.models.context_free(("1/2", "1/4", "1/4")), es.models.context_free(("1/4", "1/4", "1/2"))
    r = es.audit_sampler(with_metadata, adapter=MetadataAdapter(), target=p, draft=q, proposer=es.drafts.chain(1),
                         tokens=1)
    assert r.verdict == "lossless" and r.extra["precision"] == "float32"
