"""PyTorch interception and transformers' own speculative sampler, audited exactly.

torch and transformers are the `audit` extra; CI installs it, so nothing here is skipped there.
"""

import random
from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")
transformers_utils = pytest.importorskip("transformers.generation.utils")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.instances import make_instance  # noqa: E402
from exactspec.samplers.adapters.torch_adapters import TransformersChainAdapter, reference_transformers_style  # noqa: E402
from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch  # noqa: E402

FR = get_field(backend="python")
SPEC = transformers_utils._speculative_sampling


def law_of(program, rng_model="continuous"):
    def run(rng):
        with bind(rng):
            return program()
    with intercept_torch():
        return enumerate_program(run, FR, rng_model=rng_model, exact_floats=True)


# -- interception ------------------------------------------------------------------------------------

def test_draws_are_intercepted_and_restored_also_on_error():
    originals = (torch.rand, torch.rand_like, torch.Tensor.uniform_, torch.multinomial, torch.bernoulli, random.random)
    with pytest.raises(RuntimeError, match="boom"):
        with intercept_torch():
            assert torch.rand is not originals[0]
            raise RuntimeError("boom")
    assert (torch.rand, torch.rand_like, torch.Tensor.uniform_, torch.multinomial, torch.bernoulli,
            random.random) == originals


def test_uniform_tensors_compare_exactly_with_float32_values():
    half = torch.tensor([0.3], dtype=torch.float32)[0]   # float32(0.3) is not 3/10: the law uses its exact value
    law = law_of(lambda: bool(torch.rand(1)[0] < half))
    assert law[True] == F(float(half))
    two = law_of(lambda: tuple((torch.rand_like(torch.zeros(2)) <= torch.tensor([0.5, 0.25])).tolist()))
    assert two == {(a, b): (F(1, 2)) * (F(1, 4) if b else F(3, 4)) for a in (True, False) for b in (True, False)}
    # affine use and Tensor.uniform_(a, b)
    assert law_of(lambda: bool((1 - torch.rand(1))[0] < 0.25)) == {True: F(1, 4), False: F(3, 4)}
    assert law_of(lambda: bool(torch.empty(1).uniform_(2.0, 4.0)[0] < 3.0)) == {True: F(1, 2), False: F(1, 2)}
    # Python's random.random is intercepted too
    assert law_of(lambda: random.random() < 0.5) == {True: F(1, 2), False: F(1, 2)}


def test_multinomial_and_bernoulli_laws():
    w = torch.tensor([0.5, 0.25, 0.25])
    assert law_of(lambda: int(torch.multinomial(w, 1)[0])) == {0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}
    # without replacement, two samples: P(0 then 1) = 1/2 * (1/4) / (1/2)
    pairs = law_of(lambda: tuple(torch.multinomial(w, 2).tolist()))
    assert pairs[(0, 1)] == F(1, 4) and sum(pairs.values()) == 1
    assert law_of(lambda: float(torch.bernoulli(torch.tensor([0.25]))[0])) == {1.0: F(1, 4), 0.0: F(3, 4)}


def test_other_uses_of_a_uniform_name_the_operation():
    with pytest.raises(es.UnsupportedRandomness, match="torch sin"):
        law_of(lambda: bool(torch.sin(torch.rand(1))[0] < -1))
    # log(u) < -1 is u < exp(-1): an irrational probability, its threshold rounded to 320 bits
    law = law_of(lambda: bool(torch.log(torch.rand(1))[0] < -1))
    assert abs(law[True] - F(3678794411714423215955237701614608674458111310317678, 10 ** 52)) < F(1, 10 ** 50)
    with pytest.raises(es.UnsupportedRandomness, match="comparing two intercepted uniforms"):
        law_of(lambda: bool((torch.rand(1) < torch.rand(1))[0]))


def test_lattice_models_apply_to_torch_rand():
    # torch.rand on the float32 lattice returns 0 with probability 2**-24
    assert law_of(lambda: bool(torch.rand(1)[0] <= 0.0), "torch-float32")[True] == F(1, 2 ** 24)


# -- transformers' _speculative_sampling, for real ----------------------------------------------------------

@pytest.mark.parametrize("vocab,gamma,tokens", [(3, 1, 2), (3, 2, 3), (4, 3, 3), (4, 1, 3)])
def test_transformers_speculative_sampling_is_lossless_up_to_rounding(vocab, gamma, tokens):
    inst = make_instance(vocab=vocab, order=1, gamma=gamma, tokens=tokens, seed=vocab + gamma)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=tokens)
    r = es.audit_sampler(SPEC, adapter="transformers", **kw)
    # on torch's own generator (native, the default) it sits within float32 rounding of the target's law: its
    # float64 run is within float64 rounding
    assert r.verdict == "lossless" and F(r.extra["float_boundary"]["f64_tv"]) <= F(1, 2 ** 40)
    assert 0 < r.tv < F(1, 10 ** 6) and r.extra["sampler_calls"] > 0
    # with ideal uniforms its law equals a correct Algorithm 1 through the same float32 pipeline exactly (on the
    # float32 grid its r <= p/q takes one more point than r < p/q)
    ideal = es.audit_sampler(SPEC, adapter="transformers", rng_model="continuous", **kw)
    assert ideal.extra["reference_tv"] == "0" and ideal.verdict == "lossless"


def test_transformers_ensemble_weight_against_p_and_against_its_declared_target():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=3, seed=1)
    w = F(1, 2)
    v = es.models.mixture([inst.target, inst.draft], [w, 1 - w])      # v = w p + (1 - w) q
    adapter = TransformersChainAdapter(assistant_ensemble_weight=float(w))
    kw = dict(adapter=adapter, target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt)
    assert es.audit_sampler(SPEC, tokens=2, **kw).verdict == "biased"            # lossy w.r.t. p, by design
    # w.r.t. the declared v: accept min(1, v/q) with residual norm(max(0, v - q)) = norm(max(0, p - q)):
    # every token before a bonus follows v, so up to gamma tokens the law is v's (up to rounding)...
    assert es.audit_sampler(SPEC, tokens=2, expected=v, **kw).verdict == "lossless"
    # ...but the bonus after gamma accepted drafts is drawn from p, not v: at gamma + 1 tokens it shows
    assert es.audit_sampler(SPEC, tokens=3, expected=v, **kw).verdict == "biased"


def test_argmax_drafts_with_soft_claims_through_transformers():
    # huggingface/transformers#32867: greedy assistant, soft q handed to _speculative_sampling
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(3, 5), F(2, 5)))
    r = es.audit_sampler(SPEC, adapter="transformers", target=p, draft=q, tokens=1,
                         proposer=es.drafts.chain(1, sampling="argmax", claim="draft"))
    assert r.verdict == "biased" and abs(r.tv - F(1, 3)) < F(1, 10 ** 6)   # (5/6, 1/6) up to float32


def test_reference_sampler_matches_the_exact_rule_up_to_float32():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit_sampler(reference_transformers_style, adapter="transformers", target=inst.target,
                         draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    assert r.extra["reference_tv"] == "0" and F(r.extra["rounding_tv"]) == r.tv < F(1, 10 ** 6)


# -- vLLM-style samplers and the torch zoo -------------------------------------------------------------

from exactspec.bugzoo import torch_samplers as tzoo  # noqa: E402

P0 = es.models.context_free((0, F(1, 2), F(1, 2)))          # token 0 has target probability 0
Q0 = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))


def test_exponential_race_is_a_draw_from_the_normalised_weights():
    def race():
        w = torch.tensor([[0.5, 0.25, 0.25]])
        return int(w.div_(torch.empty_like(w).exponential_(1.0)).argmax(dim=1)[0])
    assert law_of(race) == {0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}
    with pytest.raises(es.UnsupportedRandomness, match="torch sin on a race tensor"):
        law_of(lambda: bool(torch.sin(torch.empty(2).exponential_(1.0))[0] < 1.0))
    # E < 1 has probability 1 - exp(-1), irrational: its threshold is rounded to 320 bits
    law = law_of(lambda: bool((torch.empty(2).exponential_(1.0) < 1.0)[0]))
    assert abs(law[True] - (1 - F(3678794411714423215955237701614608674458111310317678, 10 ** 52))) < F(1, 10 ** 50)


def test_vllm_style_correct_sampler_is_lossless_up_to_rounding():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit_sampler(tzoo.correct, adapter="vllm", target=inst.target, draft=inst.draft, proposer=inst.proposer,
                         prompt=inst.prompt, tokens=2)
    assert r.verdict == "lossless" and r.extra["reference_tv"] == "0" and 0 < r.tv < F(1, 10 ** 6)


def test_vllm_style_tiny_clamp_emits_a_token_the_target_never_emits():
    # draft 0 is always rejected; float32: clamp(p - q, tiny) = (t, 1/4, 1/4), its sum rounds to 1/2,
    # so the race weights are (2t, 1/2, 1/2) exactly: token 0 with probability 1/2 * 2t / (2t + 1), t = 2**-126
    r = es.audit_sampler(tzoo.tiny_clamp, adapter="vllm", target=P0, draft=Q0, proposer=es.drafts.chain(1), tokens=1)
    t = F(1, 2 ** 126)
    assert r.output[(0,)] == F(1, 2) * 2 * t / (2 * t + 1) and r.support_violations == [(0,)]
    assert r.verdict == "biased"
    # on a full-support target the same clamp is far below float32 rounding: not distinguishable from it
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    full = es.audit_sampler(tzoo.tiny_clamp, adapter="vllm", target=inst.target, draft=inst.draft,
                            proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    assert full.verdict == "lossless" and 0 < F(full.extra["reference_tv"]) < F(1, 10 ** 30)


def test_vllm_style_resampling_from_the_target_is_biased():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit_sampler(tzoo.resample_target, adapter="vllm", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    assert r.verdict == "biased" and F(r.extra["algorithmic_tv"]) > F(1, 100)


# -- explicit uniform inputs (FlashInfer-style kernels), recovered by bisection ----------------------------

from exactspec.samplers.adapters.explicit_uniforms import _breakpoints, reference_flashinfer_style  # noqa: E402


def test_breakpoints_are_found_exactly_on_the_lattice():
    cuts = {5, 17, 1000}
    g = lambda ks: [sum(k >= c for c in cuts) for k in ks]  # noqa: E731  (a step function of k)
    assert _breakpoints(g, 0, 2 ** 24 - 1) == cuts


def test_flashinfer_style_kernel_law_by_bisection():
    # one draft, one token: accept x iff u * q(x) < p(x); then the recovered token is the inverse CDF of the
    # residual at the second uniform. The reference kernel is lossless up to the float32 lattice.
    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    r = es.audit_sampler(reference_flashinfer_style, adapter="flashinfer", target=p, draft=q,
                         proposer=es.drafts.chain(1), tokens=1, rng_model="torch-float32")
    assert r.verdict == "lossless" and r.extra["reference_tv"] == "0" and "located exactly" in r.extra["resolution"]
    # x = 1 (q = 1/2) is accepted iff u < float32(0.4)/float32(0.5) on the lattice: count the lattice points
    ratio = F(float(torch.tensor(0.4, dtype=torch.float32))) / F(float(torch.tensor(0.5, dtype=torch.float32)))
    n_accept = -(-ratio * 2 ** 24 // 1)        # k * 2**-24 < ratio  <=>  k < ratio * 2**24
    assert r.output[(1,)] == F(1, 2) * F(int(n_accept), 2 ** 24)


def test_flashinfer_style_kernel_accepting_at_zero():
    # u = 0 (probability 2**-24 on the float32 lattice) accepts draft 0 although p(0) = 0
    P0 = es.models.context_free((0, F(1, 2), F(1, 2)))
    Q0 = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
    r = es.audit_sampler(tzoo.flashinfer_accept_at_zero, adapter="flashinfer", target=P0, draft=Q0,
                         proposer=es.drafts.chain(1), tokens=1, rng_model="torch-float32")
    assert r.output[(0,)] == F(1, 2 ** 25) and r.support_violations == [(0,)] and r.verdict == "biased"
