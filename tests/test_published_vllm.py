"""vLLM v1's own rejection sampler, vllm 0.32.0 from the published wheel, audited exactly under Triton's interpreter.

``vllm.v1.sample.rejection_sampler.rejection_sample`` runs as published: its Triton kernels
(``rejection_random_sample_kernel``, ``rejection_greedy_sample_kernel``,
``sample_recovered_tokens_kernel``) under ``TRITON_INTERPRET=1`` (triton 3.7.1, the release torch
2.13 pins), its randomness (``torch.rand(..., dtype=float64)``, ``q.exponential_()``, the per-request
``uniform_(generator=)`` / ``exponential_(generator=)``) filled with values the audit chooses
(the ``vllm-v1`` adapter, :mod:`exactspec.samplers.adapters.engines.vllm_v1`). The wheel's files come from
``exactspec.published.load_vllm`` (``exactspec fetch-vllm``: 46 files of the wheel, nine irrelevant packages
stubbed).
``EXACTSPEC_VLLM_VERSION=0.33.0`` audits that release instead (48 files; the same exact laws, every figure below
included); 0.34.0 removed ``vllm/v1/sample/`` and is skipped (an error under ``EXACTSPEC_REQUIRE_PUBLISHED``).

Verdicts recorded here (context-free laws, vocab 3, gamma 1-2, the default horizon gamma + 2):

- random path, a mixed batch, per-request generators, the n-gram path (``draft_probs=None``):
  lossless up to float32 rounding (TV ~3e-8 to ~5e-8; vLLM computes its target probabilities in
  float32 whatever it is handed: ``target_logits.softmax(dim=-1, dtype=torch.float32)``);
- ``RejectionSampler(Sampler())`` (the module, its own sampler drawing the bonus token by the
  PyTorch-native exponential race): lossless up to float32 rounding at temperature 1 (TV ~3.7e-8)
  and 1/2 (~2.7e-8, against the sharpened target), greedy exactly;
- greedy path: exactly the target's greedy sequence (TV == 0);
- the bonus token: with draft == target every draft is accepted and the output law is exactly the
  target's (TV == 0): the bonus token is the one handed in, at position gamma;
- **support violation (algorithmic, tiny)**: ``accepted = draft_prob > 0 and target_prob / draft_prob
  >= uniform_prob`` (``rejection_random_sample_kernel``) accepts a draft the target gives probability 0
  when the float64 uniform is exactly 0: probability ``q(x) * 2**-53`` per drafted token on torch's
  CPU lattice (``2**-24`` if the uniforms were float32, which the comment in ``generate_uniform_probs``
  avoids citing pytorch/pytorch#16706). The n-gram path (``draft_prob = 1``) has the same ``>=``.
"""

from __future__ import annotations

import os
from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from findings import observe, release  # noqa: E402

#: the release audited: $EXACTSPEC_VLLM_VERSION (the release watch sets it), else the pinned one
VERSION = os.environ.get("EXACTSPEC_VLLM_VERSION") or es.published.package("vllm").pinned

REQUIRED = bool(os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"))
os.environ["TRITON_INTERPRET"] = "1"       # before triton is imported (tests/conftest.py sets it for the session)
try:
    import triton  # noqa: F401
except ImportError:
    if REQUIRED:
        raise
    pytest.skip("pip install triton==3.7.1 (tests/published.txt)", allow_module_level=True)
try:
    rs = es.published.load_vllm(VERSION, os.environ.get("EXACTSPEC_VLLM_DIR"))
except Exception as exc:   # no network for the wheel, a pip error: an error only where the packages are required
    if REQUIRED:
        raise
    pytest.skip(f"vllm {VERSION} subset unavailable: {exc}", allow_module_level=True)

from exactspec.samplers.adapters.engines.vllm_v1 import VllmRejectionAdapter  # noqa: E402

P3 = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
Q3 = es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
#: float32 rounding of vLLM's softmax and of the race's weight ratios: what a correct path may cost here
FLOAT32_TV = F(1, 10 ** 6)
F32_TEXT = "0 < TV < 10^-6 (float32 rounding)"


def rounding(r, finding="vllm-random-lossless", *, instance):
    """Observe a lossless-up-to-float32 row: the bound when 0 < TV < 1e-6 and no support violation, else the TV."""
    ok = r.verdict == "lossless" and 0 < r.tv < FLOAT32_TV and not r.support_violations
    observe(finding, r.verdict, F32_TEXT if ok else f"TV {float(r.tv):.4g}", instance=instance, measured=float(r.tv))


def exact(r, finding="vllm-greedy-exact", *, instance):
    observe(finding, r.verdict, "0 (exact)" if r.tv == 0 else f"TV {float(r.tv):.4g}", instance=instance)


def audit(adapter: VllmRejectionAdapter, gamma: int, target=P3, draft=Q3, sampler=None, **kw):
    return es.audit_sampler(sampler or rs.rejection_sample, adapter=adapter, target=target, draft=draft,
                            proposer=es.drafts.chain(gamma), reference=False, **kw)


def greedy_of(model):
    """The model whose law at every context is the point mass on the target's argmax (lowest id on ties)."""
    def law(context):
        p = model(context)
        best = max(range(len(p)), key=lambda t: (p[t], -t))
        return tuple(F(int(t == best)) for t in range(len(p)))
    return es.models.from_function(vocab=model.vocab, order=model.order, fn=law)


def test_the_subset_is_the_published_release():
    import vllm
    assert vllm.__version__ == VERSION == release("vllm")     # $EXACTSPEC_VLLM_VERSION, else the pinned release
    assert rs.__file__.startswith(os.environ.get("EXACTSPEC_VLLM_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "exactspec", f"vllm-{VERSION}"))
    # the stubbed packages are stubs, the audited module and its kernels are the wheel's
    import vllm.config.model as stubbed
    assert "STUB" in (stubbed.__doc__ or "") and stubbed.PROCESSED_LOGPROBS_MODES
    assert "STUB" not in open(rs.__file__).read(2000)
    assert type(rs.rejection_random_sample_kernel).__name__ == "InterpretedFunction"


@pytest.mark.slow
def test_random_path_is_lossless_up_to_float32_rounding():
    r = audit(VllmRejectionAdapter(), 2)
    rounding(r, instance="random path, gamma 2")
    assert r.verdict == "lossless" and not r.support_violations
    assert 0 < r.tv < FLOAT32_TV                         # float tolerance: 1e-6 (measured ~4.2e-8)
    boundary = r.extra["float_boundary"]
    assert boundary["forced"] and boundary["precision"] == "float32"     # vLLM computes in float32 whatever it gets
    assert "k * 2**-53" in r.extra["rng"]


def test_greedy_path_is_exactly_the_greedy_sequence():
    target = es.models.random_table(vocab=3, order=1, seed=1)
    draft = es.models.random_table(vocab=3, order=1, seed=4)
    r = audit(VllmRejectionAdapter(requests=("greedy",)), 2, target=target, draft=draft, expected=greedy_of(target))
    exact(r, instance="greedy, gamma 2, order-1")
    assert r.tv == 0 and r.verdict == "lossless"
    assert len(r.output) == 1


def test_the_bonus_token_is_the_one_handed_in_after_every_draft_is_accepted():
    # draft == target with dyadic laws: vLLM's float32 softmax of log p is exactly p, the ratio exactly 1 >= u,
    # so every draft is accepted and the bonus follows: the law is exactly the target's, bonus position included
    # (with p = (1/2, 1/3, 1/6) the softmax is one ulp below the draft law and a rejection has probability ~6e-8)
    dyadic = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
    r = audit(VllmRejectionAdapter(), 2, target=dyadic, draft=dyadic)
    exact(r, instance="bonus token (draft == target, dyadic)")
    assert r.tv == 0
    assert r.output[(0, 0, 0, 0)] == F(1, 16) and r.output[(2, 1, 0, 2)] == F(1, 128)


@pytest.mark.slow
def test_a_mixed_batch_gives_each_request_its_own_law():
    alone = audit(VllmRejectionAdapter(), 1)
    mixed = audit(VllmRejectionAdapter(requests=("greedy", "random"), row=1), 1)
    assert mixed.output == alone.output                       # exactly the same law (==, as Fractions)
    rounding(mixed, instance="random row of a mixed batch, gamma 1")
    greedy = audit(VllmRejectionAdapter(requests=("greedy", "random"), row=0), 1, expected=greedy_of(P3))
    exact(greedy, instance="greedy row of a mixed batch")
    assert greedy.tv == 0


def test_per_request_generators_give_the_same_law_and_fill_their_request():
    adapter = VllmRejectionAdapter(requests=("random", "random"), row=1, generators=(1,))
    seeded = audit(adapter, 1)
    plain = audit(VllmRejectionAdapter(), 1)
    assert seeded.output == plain.output
    rounding(seeded, instance="per-request generators, gamma 1")
    # the audited request's uniforms and exponentials were written by its own generator (last fill wins)
    own = adapter._gens
    assert adapter.filled_by["uniform"] >= {None} and adapter.filled_by["uniform"] - {None} <= set(own.values())
    assert adapter.filled_by["exponential"] - {None} and adapter.filled_by["exponential"] - {None} <= set(own.values())


def test_ngram_path_without_draft_probabilities_is_lossless_up_to_rounding():
    # draft_probs=None: accept x iff p(x) >= u, else the target with x removed: the target's law for any draft
    r = audit(VllmRejectionAdapter(draft_probs=False), 1)
    rounding(r, instance="n-gram drafts (draft_probs=None), gamma 1")
    assert r.verdict == "lossless" and 0 < r.tv < FLOAT32_TV


@pytest.mark.parametrize("rng_model, exponent", [("native", 53), ("torch-float32", 24)])
@pytest.mark.parametrize("draft_probs", [True, False], ids=["draft-probs", "ngram"])
def test_a_draft_the_target_never_emits_is_accepted_when_the_uniform_is_zero(rng_model, exponent, draft_probs):
    target = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    draft = es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))
    r = audit(VllmRejectionAdapter(draft_probs=draft_probs), 1, target=target, draft=draft, rng_model=rng_model)
    first = sum(w for out, w in r.output.items() if out[0] == 2)
    observe("vllm-zero-uniform", r.verdict, f"(1/3)·2^-{exponent} of support violation"
            if first == F(1, 3) * F(1, 2 ** exponent) else f"support violation of mass {first}",
            instance=f"{'draft probs' if draft_probs else 'n-gram'}, {rng_model}", measured=float(first))
    assert r.verdict == "biased" and r.support_violations
    assert first == F(1, 3) * F(1, 2 ** exponent)          # q(2) * P(u == 0), exactly


@pytest.mark.slow
def test_the_command_line_audits_the_published_function(capsys):
    from exactspec.cli import main
    code = main(["audit-sampler", "vllm.v1.sample.rejection_sampler:rejection_sample", "--adapter", "vllm-v1",
                 "--instance", "--vocab", "3", "--order", "0", "--gamma", "1", "--json", "--no-timings"])
    out = capsys.readouterr().out
    assert code == 0 and '"verdict": "lossless"' in out and "vLLM's uniform_probs" in out


@pytest.fixture(scope="module")
def module():
    from vllm.v1.sample.sampler import Sampler
    return rs.RejectionSampler(Sampler())


@pytest.mark.slow
def test_the_module_with_its_own_bonus_sampler_is_lossless_up_to_float32_rounding(module):
    r = audit(VllmRejectionAdapter(), 1, sampler=module)
    rounding(r, "vllm-module", instance="T=1")
    assert r.verdict == "lossless" and 0 < r.tv < FLOAT32_TV
    greedy = audit(VllmRejectionAdapter(requests=("greedy", "random"), row=0), 1, sampler=module,
                   expected=greedy_of(P3))
    exact(greedy, "vllm-module", instance="greedy")
    assert greedy.tv == 0
    # temperature 1/2: the module divides the target and bonus logits by it (apply_sampling_constraints' _expand
    # kernel, the Sampler's temperature) and matches the sharpened target (exact law p**2 / sum p**2)
    cold = audit(VllmRejectionAdapter(temperature=0.5), 1, sampler=module, expected=es.models.sharpen(P3, 2))
    rounding(cold, "vllm-module", instance="T=1/2")
    assert cold.verdict == "lossless" and 0 < cold.tv < FLOAT32_TV


def test_the_continuous_model_is_refused_not_replaced_by_the_float64_lattice():
    # issue 35: the report said "every uniform an ideal draw (no exact 0)" while the law held the 2**-53 violation
    target = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    with pytest.raises(es.UnsupportedRngModel, match="the vllm-v1 adapter cannot audit under rng_model 'continuous'"):
        audit(VllmRejectionAdapter(), 1, target=target, draft=es.models.context_free((F(1, 3),) * 3),
              rng_model="continuous")


def declared_vllm(draft_probs, draft_token_ids, uniform_samples, target_probs, bonus_token_ids, exponentials):
    """vLLM's two published kernels launched as ``rejection_sample`` launches them, randomness declared by argument."""
    batch, k, vocab = draft_probs.shape
    cu = torch.arange(1, batch + 1, dtype=torch.int32) * k
    drafts = draft_token_ids.to(torch.int32).reshape(-1).contiguous()
    q = draft_probs.reshape(batch * k, vocab).contiguous()
    p = target_probs[:, :k].reshape(batch * k, vocab).contiguous()
    inv_q = exponentials.reciprocal().contiguous()
    recovered = torch.empty(batch * k, dtype=torch.int32)
    rs.sample_recovered_tokens_kernel[(batch, k)](recovered, cu, drafts, q, p, inv_q, vocab, BLOCK_SIZE=8192,
                                                  NO_DRAFT_PROBS=False, USE_FP64_GUMBEL=inv_q.dtype == torch.float64)
    out = torch.full((batch, k + 1), -1, dtype=torch.int32)
    rs.rejection_random_sample_kernel[(batch,)](out, cu, drafts, q, p, bonus_token_ids.reshape(-1).contiguous(),
                                                recovered, uniform_samples.reshape(-1).contiguous(),
                                                torch.zeros(batch, dtype=torch.bool), k, vocab, None,
                                                NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False)
    return out


@pytest.mark.slow
def test_the_published_kernels_declared_by_argument_read_as_the_vllm_v1_adapter_reads_them():
    # issue 35: declared through tensor_randomness the kernels read "biased, algorithmic" (float64 run TV ~4.9e-9,
    # held to 2**-40) though the race resolves its weight ratios to one float32 ulp only; both adapters now hold the
    # float64 run to the floor their race resolves (2 tokens, 2 * 2**-23) and read lossless
    from exactspec.samplers.adapters.explicit_uniforms import tensor_randomness
    adapter = tensor_randomness(("draft_probs", "draft_token_ids", "uniform_samples", "target_probs", "bonus_token_ids",
                                 "exponentials"), {"uniform_samples": "uniform k", "exponentials": "exponential V"},
                                name="vllm-declared", dtype="float32")
    kw = dict(target=P3, draft=Q3, proposer=es.drafts.chain(1), tokens=2, reference=False)
    declared = es.audit_sampler(declared_vllm, adapter=adapter, **kw)
    builtin = es.audit_sampler(rs.rejection_sample, adapter=VllmRejectionAdapter(), **kw)
    for r in (declared, builtin):
        assert r.verdict == "lossless" and 0 < r.tv < FLOAT32_TV, r.extra["float_boundary"]["reason"]
        assert F(r.extra["resolution_floor"]) == F(2, 2 ** 23) and "float32 ulp" in r.extra["resolution_floor_from"]
