"""SGLang 0.5.23's chain verification kernel, audited from the published wheel under Triton's interpreter.

Install: ``python -m pip install triton==3.7.1`` (tests/published.txt, the pin shared with vLLM's kernels; only
its interpreter runs, and the laws are the same exactly as under 3.8.0, the release sglang 0.5.23's torch 2.14.1
requires) and ``python -m pip install --no-deps sglang==0.5.23`` (a 39 MB
wheel; its declared dependencies are a 4.1 GB CUDA stack). Only the file
``sglang/kernels/ops/speculative/reject_sampling.py`` runs: it imports triton alone, so no stub is
needed and no ``__init__`` of the sglang package runs (see
:mod:`exactspec.samplers.adapters.engines.sglang_kernels`). With ``EXACTSPEC_REQUIRE_PUBLISHED`` set, a
missing package fails this module instead of skipping it.

Verdicts recorded here (context-free and order-1 laws, vocab 3 and 5, gamma 1-2, torch's float32
``torch.rand`` lattice ``k * 2**-24``):

- ``chain_speculative_sampling_triton`` (``--speculative-use-rejection-sampling``): lossless up to
  float32 rounding (TV ~4e-8; ~1e-16 on float64 inputs); on dyadic laws, whose ratios and cumulative
  sums float32 holds exactly, TV == 0 exactly.
- the same with ``block_verification=True`` (``--speculative-use-block-verification``, arXiv
  2403.10444 Algorithm 2): lossless up to float32 rounding (TV ~5e-8; ~1e-16 on float64 inputs).
- both: a **support violation at float32** when the final coin is the top lattice point and the
  total ``tl.sum`` computes (reject_sampling.py line 198) exceeds the last cumulative sum
  ``tl.cumsum`` computes (line 226) by rounding: no bucket is found and the kernel falls back to
  ``final_token = VOCAB_SIZE - 1`` (line 205), a token of probability 0 on the instance below
  (probability 1/5 * 2**-24 per drafted token 1). It goes away on float64 inputs (rounding, not
  algorithmic); the interpreter sums in numpy's order (pairwise ``np.sum``, sequential
  ``np.cumsum``), a GPU in its own, so which laws trigger it on a GPU is not established here.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from fractions import Fraction as F

import numpy as np
import pytest

os.environ["TRITON_INTERPRET"] = "1"       # before triton is imported: its own @jit helpers must be interpreted
torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import LATTICES  # noqa: E402
from exactspec.samplers.adapters.engines.sglang_kernels import (CHAIN_FILE, SGLANG_VERSION, SglangChainAdapter,
                                                                SglangTreeGreedyAdapter, chain_law, greedy_model,
                                                                reference_tree_greedy, sglang_chain_kernel, sglang_rows,
                                                                sglang_tree_greedy_kernel)
from exactspec.samplers.adapters.engines.triton_kernels import RowCache, published_version  # noqa: E402
from findings import observe, release, tv_text  # noqa: E402

if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
    import triton  # noqa: F401
    KERNEL = sglang_chain_kernel()
else:
    pytest.importorskip("triton", reason="pip install triton==3.7.1")
    if published_version("sglang") != SGLANG_VERSION:
        pytest.skip(f"pip install --no-deps sglang=={SGLANG_VERSION}", allow_module_level=True)
    KERNEL = sglang_chain_kernel()
TREE_GREEDY = sglang_tree_greedy_kernel()

BLOCK = functools.partial(KERNEL, block_verification=True)
FLOAT32 = dict(rng_model="torch-float32")
ROUNDING = "0 < TV < 10^-6 (float32); the float64 run's TV <= 2^-40"


def _mode(kernel) -> str:
    return "block verification" if kernel is BLOCK else "classic"


def _rounding(r, kernel) -> None:
    """Observe the lossless row: the bounds the row states when they hold, else the TVs."""
    f64 = F(r.extra["float_boundary"]["f64_tv"])
    ok = 0 < r.tv < F(1, 10 ** 6) and f64 <= F(1, 2 ** 40) and not r.support_violations
    observe("sglang-chain-lossless", r.verdict, ROUNDING if ok else f"TV {float(r.tv):.4g}, float64 {float(f64):.4g}",
            instance=_mode(kernel), measured=float(r.tv))
#: dyadic laws: every ratio p/q, residual and cumulative sum is exact in float32
P_DYADIC = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
Q_DYADIC = es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
P3 = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
Q3 = es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
#: token 4 has target probability 0; float32 sums (1/12, 3/12, 7/12, 1/12, 0) to 1.0 (np.sum, pairwise) but
#: cumulates it to 1 - 2**-24 (np.cumsum)
P5 = es.models.context_free((F(1, 12), F(3, 12), F(7, 12), F(1, 12), F(0)))
Q5 = es.models.context_free((F(1, 5),) * 5)


def test_the_kernel_is_the_published_file_interpreted():
    assert release("sglang") == SGLANG_VERSION
    from triton.runtime.interpreter import InterpretedFunction
    module = sys.modules[KERNEL.__module__]
    assert module.__published__ == ("sglang", SGLANG_VERSION, CHAIN_FILE)
    assert module.__file__.endswith(CHAIN_FILE)
    assert isinstance(module.speculative_sampling_classic_kernel, InterpretedFunction)
    assert "sglang" not in sys.modules           # no __init__ of the sglang package ran


def _law(kernel, drafts, p, q):
    cache = RowCache(sglang_rows(kernel, drafts, torch.tensor(p, dtype=torch.float32),
                                 torch.tensor(q, dtype=torch.float32), LATTICES["torch-float32"]))
    return chain_law(cache, drafts, np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64),
                     LATTICES["torch-float32"]), cache


@pytest.mark.parametrize("kernel", [KERNEL, BLOCK], ids=["classic", "block"])
def test_one_input_law_by_hand(kernel):
    # draft token 1: p/q = 1/2, so coin * 0.5 < 0.25 accepts the 2**23 lattice points below 1/2; a rejection leaves
    # the residual (1/4, 0, 0): token 0; the bonus law (1/2, 1/4, 1/4) splits the final coin at 1/2 and 3/4
    p, q = [[0.5, 0.25, 0.25], [0.5, 0.25, 0.25]], [[0.25, 0.5, 0.25]]
    law, cache = _law(kernel, [1], p, q)
    assert law == {(0,): F(1, 2), (1, 0): F(1, 4), (1, 1): F(1, 8), (1, 2): F(1, 8)}
    assert cache.rows_launched <= 24             # launches once per threshold pattern, a few probes per cut


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1, 2])
def test_classic_chain_is_exactly_lossless_on_dyadic_laws(gamma):
    r = es.audit_sampler(KERNEL, adapter="sglang", target=P_DYADIC, draft=Q_DYADIC, proposer=es.drafts.chain(gamma),
                         reference=False, **FLOAT32)
    observe("sglang-chain-lossless", r.verdict, "0 (exact)" if r.tv == 0 else tv_text(r.tv),
            instance="classic, dyadic laws")
    assert r.verdict == "lossless" and r.tv == 0


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [KERNEL, BLOCK], ids=["classic", "block"])
@pytest.mark.parametrize("gamma", [1, 2])
def test_lossless_up_to_float32_rounding(kernel, gamma):
    r = es.audit_sampler(kernel, adapter="sglang", target=P3, draft=Q3, proposer=es.drafts.chain(gamma),
                         reference=False, **FLOAT32)
    _rounding(r, kernel)
    assert r.verdict == "lossless" and not r.support_violations
    # float32 rounding (the tolerance: 1e-6 at float32, the 2**-40 floor at float64) and not exactly 0
    assert 0 < r.tv < F(1, 10 ** 6)
    assert F(r.extra["float_boundary"]["f64_tv"]) <= F(1, 2 ** 40)


P2 = es.models.context_free((F(2, 3), F(1, 3)))
Q2 = es.models.context_free((F(1, 3), F(2, 3)))


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [KERNEL, BLOCK], ids=["classic", "block"])
@pytest.mark.parametrize("target, draft, gamma, prompt", [
    (P2, Q2, 3, ()),
    (es.models.random_table(vocab=2, order=1, seed=1), es.models.random_table(vocab=2, order=1, seed=11), 2, (0,)),
], ids=["gamma3", "order1"])
def test_lossless_up_to_float32_rounding_at_gamma_3_and_on_order_1_laws(kernel, target, draft, gamma, prompt):
    # order-1 laws: every position has its own target and draft law (block verification's prefix products)
    r = es.audit_sampler(kernel, adapter="sglang", target=target, draft=draft, proposer=es.drafts.chain(gamma),
                         prompt=prompt, reference=False, **FLOAT32)
    _rounding(r, kernel)
    assert r.verdict == "lossless" and 0 < r.tv < F(1, 10 ** 6)
    assert F(r.extra["float_boundary"]["f64_tv"]) <= F(1, 2 ** 40)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [KERNEL, BLOCK], ids=["classic", "block"])
def test_the_fallback_token_is_a_support_violation_at_float32(kernel):
    # independent: in float32, np.sum (pairwise, as the interpreter's tl.sum) gives 1.0, np.cumsum 1 - 2**-24, and
    # only the top lattice point of the final coin lands at or past the last bucket (target_u >= cum_sum[-1])
    v = np.zeros(4096, dtype=np.float32)
    v[:5] = np.array([1 / 12, 3 / 12, 7 / 12, 1 / 12, 0]).astype(np.float32)
    total, last = np.sum(v), np.cumsum(v)[-1]
    assert total == 1 and last == np.float32(1 - 2 ** -24)
    top = np.arange(2 ** 24 - 4096, 2 ** 24)
    assert int(((top * 2.0 ** -24).astype(np.float32) * total >= last).sum()) == 1
    r = es.audit_sampler(kernel, adapter="sglang", target=P5, draft=Q5, proposer=es.drafts.chain(1), tokens=2,
                         reference=False, **FLOAT32)
    mass = sum(r.output[s] for s in r.support_violations)
    observe("sglang-fallback", r.verdict, f"token 4 (p = 0) with probability {mass} over 2 tokens" if mass
            else "no support violation", instance=_mode(kernel), measured=float(mass))
    assert r.verdict == "biased" and sorted(r.support_violations) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # drafted token 1 (q = 1/5 < p = 1/4) is always accepted; the bonus falls back to token 4 at one point of 2**24
    assert r.output[(1, 4)] == F(1, 5) / 2 ** 24 == r.output[(2, 4)]
    reason = r.extra["float_boundary"]["reason"]
    assert reason == "a support violation at float32: an outcome the expected law never emits"
    assert F(r.extra["float_boundary"]["f64_tv"]) <= F(1, 2 ** 40)          # gone at float64: rounding


@pytest.mark.slow
def test_the_law_equals_the_generic_guided_search_exactly():
    # a second, simpler method: the declarative adapter's coordinate-by-coordinate search over the same kernel,
    # called through a wrapper in FlashInfer's argument order (the last uniform is the final coin)
    from exactspec.samplers.adapters.explicit_uniforms import tensor_randomness
    rows = []

    def flashinfer_order(draft_probs, draft_token_ids, uniform_samples, target_probs):
        b, k, _ = draft_probs.shape
        if draft_probs.dtype == torch.float32:      # the float32 run's rows (the float64 run is counted apart)
            rows.append(b)
        pred, acc = torch.zeros(b * (k + 1), dtype=torch.int32), torch.full((b, k + 1), -1, dtype=torch.int32)
        num, slots = torch.empty(b, dtype=torch.int32), torch.arange(b * (k + 1)).reshape(b, k + 1)
        KERNEL(predicts=pred, accept_index=acc, accept_token_num=num,
               candidates=torch.cat([torch.zeros(b, 1, dtype=torch.int64), draft_token_ids], 1), retrive_index=slots,
               retrive_next_token=slots, retrive_next_sibling=slots, uniform_samples=uniform_samples.contiguous(),
               uniform_samples_for_final_sampling=uniform_samples[:, k].contiguous(), target_probs=target_probs,
               draft_probs=draft_probs, threshold_single=1.0, threshold_acc=1.0, deterministic=True)
        out = torch.full((b, k + 1), -1, dtype=torch.long)
        for r in range(b):
            for i in range(int(num[r]) + 1):
                out[r, i] = int(pred[int(acc[r, i])])
        return out

    kw = dict(target=P3, draft=Q3, proposer=es.drafts.chain(1), tokens=2, reference=False, **FLOAT32)
    adapter = SglangChainAdapter()
    ours = es.audit_sampler(KERNEL, adapter=adapter, **kw)
    declared = tensor_randomness(("draft_probs", "draft_token_ids", "uniform_samples", "target_probs"),
                                 {"uniform_samples": "uniform k+1"})
    generic = es.audit_sampler(flashinfer_order, adapter=declared, **kw)
    assert ours.output == generic.output
    assert adapter.stats["rows"] * 3 < sum(rows)      # one launch per threshold pattern: far fewer kernel rows


def test_the_adapters_are_registered():
    assert isinstance(es.samplers.get_adapter("sglang"), SglangChainAdapter)
    assert isinstance(es.samplers.get_adapter("sglang-tree-greedy"), SglangTreeGreedyAdapter)


P_ORDER1 = es.models.random_table(vocab=3, order=1, seed=1)
Q_ORDER1 = es.models.random_table(vocab=3, order=1, seed=11)


@pytest.mark.parametrize("children, claim", [("without_replacement", "renormalized"), ("topk", "point_mass")])
def test_greedy_tree_verification_emits_the_greedy_sequence_exactly(children, claim):
    # verify_tree_greedy_triton (spec_tree.py, platform probes stubbed) against the target's greedy sequence
    kw = dict(adapter="sglang-tree-greedy", target=P_ORDER1, draft=Q_ORDER1, prompt=(0,),
              expected=greedy_model(P_ORDER1), proposer=es.drafts.tree((2, 1), children=children, claim=claim),
              reference=False)
    r = es.audit_sampler(TREE_GREEDY, **kw)
    observe("sglang-tree-greedy", r.verdict, "0 (exact)" if r.tv == 0 else tv_text(r.tv), instance=children)
    assert r.verdict == "lossless" and r.tv == 0
    assert r.output == es.audit_sampler(reference_tree_greedy, **kw).output

    def first_child_only(predicts, accept_index, accept_token_num, candidates, retrieve_index, retrieve_next_token,
                         retrieve_next_sibling, target_predict):       # a walk that never tries a second child
        reference_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                              retrieve_next_token, torch.full_like(retrieve_next_sibling, -1), target_predict)
    assert es.audit_sampler(first_child_only, **kw).tv == 0      # the same sequence, fewer tokens per step ...
    bad = es.audit_sampler(lambda **a: reference_tree_greedy(**{**a, "target_predict": a["candidates"]}), **kw)
    assert bad.verdict == "biased"                                # ... but a walk that trusts the draft is caught


@pytest.mark.slow
def test_audit_sampler_command_line():
    out = subprocess.run([sys.executable, "-m", "exactspec", "audit-sampler",
                          "exactspec.samplers.adapters.engines.sglang_kernels:published_chain", "--adapter", "sglang",
                          "--instance", "--vocab", "3", "--gamma", "1", "--tokens", "2", "--seed", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "lossless" in out.stdout
