"""The findings on published code, as data: one :class:`Finding` per row, one :class:`Package` per audited package.

Each finding's result for a release is what the test it names asserts on that release, on the instance the row
states (the test calls ``observe`` with what it measured and compares it with this data). A release appears under
``results`` only when it was audited: by the suite (the pinned release) or by ``python -m benchmarks.release_watch``
(any other). Edit this file, then ``python -m exactspec.published.render --write`` to re-render the tables.
"""

from __future__ import annotations

from ._types import Finding, Package, Result

#: the day the ``newest`` releases below were read from PyPI
CHECKED = "2026-12-07"

PACKAGES: tuple[Package, ...] = (
    Package("transformers", label="transformers", pinned="5.24.0", newest="5.25.0"),
    Package("vllm", label="vLLM", pinned="0.32.0", newest="0.34.0"),
    Package("sglang", label="SGLang", pinned="0.5.23", newest="0.5.23"),
    Package("litgpt", label="litgpt", pinned="0.5.13", newest="0.5.13"),
    Package("eagle-llm", label="EAGLE (eagle-llm)", pinned="1.2.1", newest="1.2.1"),
    Package("medusa-llm", label="Medusa (medusa-llm)", pinned="0.1", newest="0.1"),
    Package("specdec", label="specdec", pinned="0.2.0", newest="0.2.0"),
    Package("speculative-decoding", label="lucidrains speculative-decoding", pinned="0.2.0", newest="0.2.0"),
    Package("sequential-speculative-decoding", label="sequential-speculative-decoding", pinned="0.1.1",
            newest="0.1.1"),
    Package("flashspec", label="flashspec", pinned="0.3.1", newest="0.3.1"),
)

TF = "transformers"
_R32 = "TV <= 2^-20 each (float32 rounding)"

FINDINGS: tuple[Finding, ...] = (
    # -- transformers ------------------------------------------------------------------------------------------------
    Finding(
        "transformers-lossless", TF, "`generate(assistant_model=...)`",
        "sampling, T=1 and 1/2, top-k, top-p, all three; the heuristic schedule; prompt lookup; greedy; universal "
        "assisted generation with `get_vocab()` in id order (greedy, sampling); ideal uniforms (`--rng-model "
        "continuous`); vocab 3-4, 2 drafted tokens, 2-3 tokens",
        "float32 rounding (`generate` casts logits to float32; the float64 run sees the cast)",
        "tests/test_recipes_transformers.py -k recipe",
        {"5.24.0": Result("lossless", _R32), "5.25.0": Result("lossless", _R32)}),
    Finding(
        "transformers-truncation-zero-draw", TF, "`generate(assistant_model=...)` `_speculative_sampling`",
        "top-k 2, top-p 0.75, or T=1/2 + top-k + top-p on both sides, on torch's float32 `rand` grid (the default "
        "rng model `native`); vocab 3-4, 2-4 tokens",
        "algorithmic, tiny: `r <= p/q` accepts a drafted token the truncated target gives probability 0 when "
        "`torch.rand` returns exactly 0; 5.25.0 tests `r < p/q`",
        "tests/test_recipes_transformers.py -k \"truncation or top_k_top_p\"",
        {"5.24.0": Result("biased", "0 < TV <= 2^-24 per drafted token (support violation)"),
         "5.25.0": Result("lossless", "no support violation")}),
    Finding(
        "transformers-float32-lattice", TF, "`_speculative_sampling`",
        "`torch.rand` on its float32 grid (`--rng-model native` or `torch-float32`), p(x) = 0 < q(x), vocab 3, "
        "1 drafted token",
        "algorithmic, tiny: `r <= p/q` accepts a token the target never emits when `torch.rand` returns exactly 0; "
        "5.25.0 tests `r < p/q`",
        "tests/test_recipes_transformers.py -k float32_lattice",
        {"5.24.0": Result("biased", "(1/3)·2^-24 of support violation"),
         "5.25.0": Result("lossless", "no support violation")}),
    Finding(
        "transformers-uag-permuted", TF, "universal assisted generation",
        "sampling; the draft tokenizer's `get_vocab()` not in id order; vocab 3",
        "algorithmic: the pruned draft head follows `get_vocab()` order, the translator writes columns in id order, "
        "so the verifier is told a permuted draft law",
        "tests/test_recipes_transformers.py -k out_of_id_order",
        {"5.24.0": Result("biased", "3/8"), "5.25.0": Result("biased", "3/8")}),
    Finding(
        "transformers-uag-subset-crash", TF, "universal assisted generation",
        "sampling; the draft vocabulary a subset of the target's",
        "`AttributeError: 'AssistantToTargetTranslator' object has no attribute 'assistant_overlap_token_ids'` "
        "(also without an audit)",
        "tests/test_recipes_transformers.py -k subset_vocabulary",
        {"5.24.0": Result("crashes", "with probability 1"), "5.25.0": Result("crashes", "with probability 1")}),
    Finding(
        "transformers-ensemble-bonus", TF, "`generate(assistant_model=..., assistant_ensemble_weight=w)`",
        "w = 1/2, sampling, vocab 2, against the declared law (every token from `v = w·p + (1-w)·q`); gamma 1 "
        "(4 tokens), gamma 2 (5 tokens); greedy",
        "algorithmic: drafted positions follow `v`, the bonus token after a fully accepted draft (and a round with "
        "no draft at the `max_length` cap) is drawn from `p` (greedy: `argmax p`)",
        "tests/test_recipes_transformers.py -k ensemble",
        {"5.24.0": Result("biased", {"gamma 1": "169631/1166400", "gamma 2": "101428481/839808000",
                                     "greedy": "1 (emits (1, 1, 0))"}),
         "5.25.0": Result("biased", {"gamma 1": "169631/1166400", "gamma 2": "101428481/839808000",
                                     "greedy": "1 (emits (1, 1, 0))"})}),
    Finding(
        "transformers-options", TF, "assisted generation, over a second round",
        "`num_assistant_tokens_schedule` constant / heuristic / heuristic_transient; `assistant_confidence_threshold` "
        "0.5 and its scikit-learn adaptation; T=1/2 + top-k + top-p; the assistant's own sampling settings; prompt "
        "lookup; universal assisted sampling in id order; vocab 2-3, 4-9 tokens",
        "float32 rounding",
        "tests/test_recipes_transformers.py -k option",
        {"5.24.0": Result("lossless", _R32), "5.25.0": Result("lossless", _R32)}),
)

LITGPT, LUCID = "litgpt", "speculative-decoding"
_R64 = "TV <= 2^-40 each (float64 rounding)"
_NATIVE = "2^-40 < TV < 10^-6 (float32 grid); the float64 run's TV <= 2^-40"
_ZERO_DRAW = "0 < TV <= 2^-24 per drafted token (support violation)"

FINDINGS += (
    # -- litgpt --------------------------------------------------------------------------------------------------------
    Finding(
        "litgpt-generate-skips-first", LITGPT, "`litgpt.generate.speculative_decoding.generate`",
        "T=1, gamma 2, order-1 tables, vocab 3, 2 tokens, ideal uniforms",
        "algorithmic: the first token, sampled from the target at prefill, is never returned, yet the returned "
        "tokens are conditioned on it (the law is exactly \"skip one token\"); lossless on context-free models",
        "tests/test_recipes_loops.py -k drops_its_first_token",
        {"0.5.13": Result("biased", "3399/10982 (the law of skipping one token)")}),
    Finding(
        "litgpt-top-p-crash", LITGPT, "`speculative_decoding` (one step)",
        "top_p 0.6, gamma 2, vocab 3, order-1, 2 tokens; T=1 and T=1/2",
        "algorithmic: after a rejection, top-p is applied to residual *probabilities* as if they were logits; "
        "`torch.multinomial` refuses the `-inf` weights (also in plain torch runs)",
        "tests/test_recipes_loops.py -k top_p",
        {"0.5.13": Result("crashes", {"T=1": "with probability 10289/16800", "T=0.5": "with probability 1"})}),
    Finding(
        "litgpt-step-lossless", LITGPT, "`speculative_decoding` (one step)",
        "T=1, T=1/2, top-k 2, both; gamma 2 and 3; order-1, vocab 3; ideal uniforms (`rng_model=\"continuous\"`)",
        "float64 rounding",
        "tests/test_recipes_loops.py -k \"step_is_lossless or gamma_3\"",
        {"0.5.13": Result("lossless", {"ideal uniforms": _R64})}),
    Finding(
        "litgpt-step-rounding", LITGPT, "`speculative_decoding` (one step)",
        "T=1, gamma 2, order-1, vocab 3; torch's own float32 generator (native); float32 logits",
        "float32 rounding",
        "tests/test_recipes_loops.py -k \"torchs_own_generator or at_float32\"",
        {"0.5.13": Result("lossless", {"float32 logits, ideal uniforms": "0 < TV <= 2x its float32 rounding's TV",
                                       "torch's generator, T=1": _NATIVE})}),
    # -- lucidrains' speculative-decoding -------------------------------------------------------------------------------
    Finding(
        "speculative-decoding-as-published", LUCID, "`speculative_decoding`",
        "as published (its Gumbel draft), T=1, gamma 2",
        "its Gumbel noise `-log(-log(u.clamp(min=1e-20)))` changes the law on an event of probability ~1e-20: no "
        "exact verdict exists, the audit refuses and names the line",
        "tests/test_recipes_loops.py -k gumbel_draft_is_a_typed_error",
        {"0.2.0": Result("refused", "UnsupportedRandomness: the clamp at speculative_decoding.py:29")}),
    Finding(
        "speculative-decoding-gumbel-as-law", LUCID, "`speculative_decoding`",
        "`gumbel_sample` replaced by its law; T=1, T=1/2, top-k 2 (`filter_thres` 0.5) with ideal uniforms; T=1 on "
        "torch's own float32 generator; gamma 2, order-1, vocab 3",
        "rounding",
        "tests/test_recipes_loops.py -k \"lucidrains_verification\"",
        {"0.2.0": Result("lossless", {"ideal uniforms": _R64, "torch's generator, T=1": _NATIVE})}),
    Finding(
        "speculative-decoding-top-k-zero-draw", LUCID, "`speculative_decoding` (`speculative_decoding.py` l. 185)",
        "`gumbel_sample` replaced by its law; top-k 2 (`filter_thres` 0.5) on torch's own float32 generator "
        "(native); gamma 2, order-1, vocab 3",
        "algorithmic, tiny: rejects where `r > p/q`, so accepts a drafted token the top-k target gives probability "
        "0 when `uniform_(0, 1)` returns exactly 0 (transformers 5.24.0's pattern)",
        "tests/test_recipes_loops.py -k \"lucidrains and own_generator\"",
        {"0.2.0": Result("biased", _ZERO_DRAW)}),
)

VLLM = "vllm"
_V_F32 = "0 < TV < 10^-6 (float32 rounding)"
_V_034 = ("0.34.0 removed `vllm/v1/sample/rejection_sampler.py` with the v1 GPU model runner; its rejection sampler "
          "is model runner v2's, with in-kernel uniforms (`tl_rand32`), which the `vllm-v1` adapter does not drive")
_V_RANDOM = {"random path, gamma 2": _V_F32, "random row of a mixed batch, gamma 1": _V_F32,
             "per-request generators, gamma 1": _V_F32, "n-gram drafts (draft_probs=None), gamma 1": _V_F32}
_V_GREEDY = {"greedy, gamma 2, order-1": "0 (exact)", "greedy row of a mixed batch": "0 (exact)",
             "bonus token (draft == target, dyadic)": "0 (exact)"}
_V_MODULE = {"T=1": _V_F32, "T=1/2": _V_F32, "greedy": "0 (exact)"}
_V_ZERO = {"draft probs, native": "(1/3)·2^-53 of support violation",
           "n-gram, native": "(1/3)·2^-53 of support violation",
           "draft probs, torch-float32": "(1/3)·2^-24 of support violation",
           "n-gram, torch-float32": "(1/3)·2^-24 of support violation"}

FINDINGS += (
    Finding(
        "vllm-random-lossless", VLLM,
        "`vllm.v1.sample.rejection_sampler.rejection_sample` (its Triton kernels under `TRITON_INTERPRET=1`, from the "
        "wheel's files: `exactspec fetch-vllm`)",
        "random path; a request in a batch mixing greedy and random requests; per-request generators; n-gram drafts "
        "(`draft_probs=None`); context-free, vocab 3",
        "float32 rounding: `target_logits.softmax(dim=-1, dtype=torch.float32)` and the exponential race's float32 "
        "weights; a request in a mixed batch or with its own generator has exactly its lone law",
        "tests/test_published_vllm.py -k \"random_path or mixed_batch or per_request or ngram_path\"",
        {"0.32.0": Result("lossless", _V_RANDOM), "0.33.0": Result("lossless", _V_RANDOM)}, {"0.34.0": _V_034}),
    Finding(
        "vllm-greedy-exact", VLLM, "`rejection_sample`",
        "greedy (temperature 0), alone and in a mixed batch; the bonus token (draft == target)",
        "-", "tests/test_published_vllm.py -k \"greedy or bonus\"",
        {"0.32.0": Result("lossless", _V_GREEDY), "0.33.0": Result("lossless", _V_GREEDY)}, {"0.34.0": _V_034}),
    Finding(
        "vllm-module", VLLM, "`RejectionSampler(Sampler())`",
        "its own sampler draws the bonus token (PyTorch-native race); T=1, T=1/2, greedy; gamma 1",
        "float32 rounding", "tests/test_published_vllm.py -k module",
        {"0.32.0": Result("lossless", _V_MODULE), "0.33.0": Result("lossless", _V_MODULE)}, {"0.34.0": _V_034}),
    Finding(
        "vllm-zero-uniform", VLLM, "`rejection_random_sample_kernel`",
        "p(x) = 0 < q(x) = 1/3, gamma 1; torch's float64 `rand` on its CPU lattice (`native`), and float32 uniforms",
        "algorithmic, tiny: `target_prob / draft_prob >= uniform_prob` (0.32.0 l. 884, 0.33.0 l. 951) accepts when "
        "the uniform is exactly 0; the n-gram path (`draft_prob = 1`) too; float64 uniforms (pytorch/pytorch#16706) "
        "make it 2^-53 instead of 2^-24; CUDA's Philox assumed to give 0 with probability ~2^-53 too (not verified "
        "on a GPU)",
        "tests/test_published_vllm.py -k never_emits",
        {"0.32.0": Result("biased", _V_ZERO), "0.33.0": Result("biased", _V_ZERO)}, {"0.34.0": _V_034}),
)

SGLANG = "sglang"
_S_ROUND = "0 < TV < 10^-6 (float32); the float64 run's TV <= 2^-40"
_S_FALLBACK = "token 4 (p = 0) with probability 23767723/703687441776640 over 2 tokens"

FINDINGS += (
    Finding(
        "sglang-chain-lossless", SGLANG,
        "`chain_speculative_sampling_triton` (`reject_sampling.py`, Triton interpreter)",
        "`--speculative-use-rejection-sampling`, with and without `block_verification`; gamma 1-3, vocab 2-3, "
        "context-free and order-1; dyadic laws (every float32 step exact)",
        "rounding (0 exactly on dyadic laws)",
        "tests/test_published_sglang.py -k \"lossless\"",
        {"0.5.23": Result("lossless", {"classic, dyadic laws": "0 (exact)", "classic": _S_ROUND,
                                       "block verification": _S_ROUND})}),
    Finding(
        "sglang-fallback", SGLANG, "`chain_speculative_sampling_triton` (both modes)",
        "target with p(4) = 0, vocab 5, gamma 1, 2 tokens; the final coin at the top of torch's float32 lattice",
        "rounding (gone on float64 inputs): when `tl.sum` rounds the total above the last `tl.cumsum`, no bucket is "
        "found and the kernel returns `final_token = VOCAB_SIZE - 1` whatever its mass (2^-24/5 per drafted token "
        "1); sums in the interpreter's (numpy's) order, a GPU's differs",
        "tests/test_published_sglang.py -k fallback",
        {"0.5.23": Result("biased", {"classic": _S_FALLBACK, "block verification": _S_FALLBACK})}),
    Finding(
        "sglang-tree-greedy", SGLANG, "`verify_tree_greedy_triton` (`spec_tree.py`, platform probes stubbed)",
        "greedy EAGLE tree verification, tree (2, 1), children without replacement and top-k, vocab 3, order-1",
        "-", "tests/test_published_sglang.py -k greedy_tree",
        {"0.5.23": Result("lossless", {"without_replacement": "0 (exact)", "topk": "0 (exact)"})}),
)

EAGLE = "eagle-llm"

FINDINGS += (
    Finding(
        "eagle-t1-lossless", EAGLE, "`eagle/model/utils.py` `evaluate_posterior`",
        "T=1, trees (2,) and (2, 1), children without replacement, order-1, vocab 3",
        "rounding", "tests/test_published_trees.py -k eagle_at_temperature_1",
        {"1.2.1": Result("lossless", {"tree (2,), float64": "TV < 2^-50 (float64)",
                                      "tree (2,), float32": "2^-35 < TV < 2^-22 (float32)",
                                      "tree (2, 1), float64": "TV < 2^-50 (float64)"})}),
    Finding(
        "eagle-untempered-bonus", EAGLE, "`evaluate_posterior`",
        "T=1/2, trees (2,) and (2, 1), order-1, vocab 3; top_p 0.6, tree (1,), context-free",
        "algorithmic: when the whole path is accepted, the next token is drawn from `softmax(logits)` without the "
        "logits processor (temperature, top-p, top-k ignored)",
        "tests/test_published_trees.py -k \"below_temperature or top_p\"",
        {"1.2.1": Result("biased", {"T=1/2, tree (2,)": "1204112724/12404279789", "T=1/2, tree (2, 1)": "6151812150788336/101169367980482945",
                                    "top_p 0.6, tree (1,)": "a token outside the top-p set with probability 7/40"})}),
    Finding(
        "eagle-batched-paths", EAGLE, "`eagle/modelbsne1/utils.py` (batched)",
        "T=1, tree (3,), order-1, vocab 3, 2 tokens",
        "algorithmic: compares `accept_length` with `candidates.shape[1]` (the number of paths, not depth + 1), "
        "dropping or misplacing the residual when the two coincide",
        "tests/test_published_trees.py -k batched_variant",
        {"1.2.1": Result("biased", {"tree (3,)": "35/153"})}),
    Finding(
        "eagle-alpha", EAGLE,
        "`eagle/model/utils_alpha.py` `evaluate_posterior` (the acceptance-rate scripts' verifier, on its own "
        "`generate_tree_buffers`)",
        "T=1; one instance per deviation (context-free), and all together on order-1 tables, vocab 4",
        "algorithmic (float64 law = exact model to 2^-50): token 0 taken for padding, `if x == 0: continue` (l. 350); "
        "the token after an accepted leaf drawn from a sibling's residual (l. 376); a node tried once per path, "
        "residual subtracted again (l. 346); paths verified last first, `sorted_tree_choices[-i - 1]` (l. 136); "
        "plus `q / (q.sum()+1e-5)` (l. 368)",
        "tests/test_published_trees.py -k alpha",
        {"1.2.1": Result("biased", {
            "token 0 taken for padding, tree (1,)": "1/8",
            "the token after a leaf from a sibling's residual, tree (2,)": "1/4",
            "a node tried once per path, tree (1, 2)": "3/80",
            "the last sibling verified first, tree (2,)": "1/4",
            "all together, order-1, vocab 4, tree (2,)": "11708117/46206765",
            "all together, order-1, vocab 4, tree (1, 2)": "951628012/4974928365"})}),
)

FINDINGS += (
    Finding(
        "specdec-lossless", "specdec", "`SpecDecoder.spec_gen` / `verify`",
        "T=1 (its only setting), order-1 tables, vocab 3: gamma 1 on torch's generator, gamma 2 in float64; "
        "p(x) = 0 < q(x) on torch's float32 grid",
        "rounding; its strict `rand < p/q` never accepts a token with p = 0, even when `torch.rand` returns 0",
        "tests/test_recipes_specdec.py",
        {"0.2.0": Result("lossless", {
            "gamma 1, 3 tokens, torch's generator": "2^-40 < TV < 10^-6 (float32 grid); the float64 run's TV <= 2^-40",
            "p(x) = 0 < q(x), torch's generator": "0 (exact): no support violation",
            "gamma 2, 3 tokens, float64, ideal uniforms": "TV <= 2^-40 (float64)"})}),
)

FINDINGS += (
    Finding(
        "medusa-typical", "medusa-llm", "`medusa/model/utils.py` `evaluate_posterior`",
        "typical acceptance (eps 0.09, alpha 0.3), T=1 and 1/2; a hand-worked instance; 8 configurations: trees "
        "(2,), (2, 1), (2, 1) top-k, (3,), order-1, vocab 3-4; 256 pinned random configurations (7 tree shapes, "
        "both children modes, vocab 3-4, order-1), each with float32 and float64 laws",
        "lossy by design (typical acceptance); its law equals the catalog rule `typical_acceptance_medusa` exactly "
        "(the catalog's `typical_acceptance` differs: entropy with `+1e-5`, longest accepted path, argmax after the "
        "prefix); where two longest paths have exactly equal likelihood the rule takes the first, medusa's "
        "`torch.sum(torch.log(...))` (utils.py l. 325-328) whichever float rounds larger",
        "tests/test_published_trees.py -k medusa; tests/test_published_medusa_configurations.py",
        {"0.1": Result("biased", {"hand-worked, tree (2,) top-k, vocab 3": "3/4",
                                  "8 configurations": "the law of `typical_acceptance_medusa`, exactly (==)",
                                  "256 pinned random configurations, float32 and float64": (
                                      "the law of `typical_acceptance_medusa` exactly (==), except at exact likelihood "
                                      "ties, which medusa breaks by float rounding: 3 of 512 (configuration, dtype) "
                                      "pairs, each = the rule with float tie-breaking")})}),
)

SEQ, FLASH = "sequential-speculative-decoding", "flashspec"

FINDINGS += (
    # -- sequential-speculative-decoding (claims "without changing the output distribution") ---------------------------
    Finding(
        "sequential-speculative-decoding-lossless", SEQ, "`speculative_generate(method=\"standard\" | \"naive_hsd\")`",
        "gamma 1-3; T=1, T=1/2, a greedy drafter, greedy; `capped_hsd` at gamma 1; order-1, vocab 2-3, float64 "
        "stand-ins; `standard` on torch's own generator; a search over 135 small instances finds no bias in "
        "`naive_hsd`",
        "rounding; `u < acceptance_prob` is strict, so a token with p = 0 is never accepted",
        "tests/test_recipes_sequential_speculative_decoding.py -k \"lossless or temperatures or greedy_decoding\"",
        {"0.1.1": Result("lossless", {"float64 stand-ins, ideal uniforms": "TV <= 2^-40 each (float64 rounding)",
                                      "standard, torch's generator": "TV < 10^-6 (float32 grid)",
                                      "greedy": "0 (exact)"})}),
    Finding(
        "sequential-speculative-decoding-capped-hsd", SEQ, "`speculative_generate(method=\"capped_hsd\")`",
        "T=1; gamma 2 (order-1, vocab 3, 2 tokens), gamma 3 (vocab 2, 4 tokens); a draft with q(x) = 0 < p(x) "
        "(gamma 1, 1 token)",
        "algorithmic: three off-by-one indices in `capped_hsd.py`: the whole draft accepted on the capped ratio of "
        "its first gamma - 1 tokens (l. 210), the next acceptance rate from the kept token's branch (l. 221-224), "
        "the replacement drawn from `draft_probs[tau + 1]` weighted by position `tau`'s ratios (l. 243-253); with the "
        "three moved by one it is lossless at gamma 2 and 3. `where(q_joint > 0, p/q, 0)` (l. 132-136) drops a token "
        "the draft cannot propose from the residual",
        "tests/test_recipes_sequential_speculative_decoding.py -k \"capped_hsd_is_biased or cannot_propose\"",
        {"0.1.1": Result("biased", {"gamma 2, vocab 3, 2 tokens": "11517/45220", "gamma 3, vocab 2, 4 tokens": "41/160",
                                    "q(x) = 0 < p(x), gamma 1": "1/4"})}),
    Finding(
        "sequential-speculative-decoding-greedy-drafter", SEQ, "`speculative_generate(method=\"capped_hsd\", "
        "draft_temperature=0)`",
        "gamma 1, 2 tokens, order-1, vocab 3",
        "algorithmic: with a one-hot draft the residual is all zero after a rejection and `torch.multinomial` "
        "raises (l. 255)",
        "tests/test_recipes_sequential_speculative_decoding.py -k greedy_drafter",
        {"0.1.1": Result("crashes", "with probability 8/17")}),
    # -- flashspec (claims "Lossless") -----------------------------------------------------------------------------
    Finding(
        "flashspec-lossless", FLASH, "`SpeculativeEngine.generate`",
        "batch 1 and 2, T=1 and 1/2, a drafter at another temperature, gamma 1-2, prompt lookup, `composite-g6-f2` "
        "(the default `auto`), a temperature-0 drafter at batch 1; greedy; order-1, vocab 3",
        "float32 rounding (`logits.float()`, `kv_cache.py` l. 522)",
        "tests/test_recipes_flashspec.py -k \"lossless or greedy_is\"",
        {"0.3.1": Result("lossless", {"sampling": "0 < TV < 10^-6 each (float32 rounding)",
                                      "greedy": "0 (exact)"})}),
    Finding(
        "flashspec-greedy-drafter-batch", FLASH, "`HuggingFaceDrafter(temperature=0)` with a sampling target",
        "batch 2 (the generic loop), gamma 1, 2 tokens, order-1, vocab 3",
        "algorithmic: `_sample_uncached` proposes the argmax (`_pick`, `hf_drafter.py` l. 459-460) but returns the "
        "temperature-1 log-probs (l. 491) as the draft law `rejection_sample` verifies against (l. 403-405); at "
        "batch 1 the drafter samples at temperature 1 instead (lossless)",
        "tests/test_recipes_flashspec.py -k greedy_drafter",
        {"0.3.1": Result("biased", "8/17")}),
    Finding(
        "flashspec-seeded", FLASH, "`SamplingConfig(seed=...)`",
        "a seeded engine",
        "the engine makes its own `torch.Generator` per call: randomness the audit cannot intercept, refused with "
        "the line, never a verdict",
        "tests/test_recipes_flashspec.py -k seeded",
        {"0.3.1": Result("refused", "UnsupportedRandomness: a torch.Generator made per call at speculative.py:656")}),
)
