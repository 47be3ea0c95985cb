"""Recipe: flashspec 0.3.1 (``flashspec.SpeculativeEngine.generate``), audited as published.

flashspec wraps a Hugging Face causal LM (``TargetModel``) and drafters (``HuggingFaceDrafter``, prompt lookup
``NgramDrafter``, or a composite of both: the default ``drafter_strategy="auto"`` runs ``composite-g6-f2``);
its README: "Lossless speculative decoding", "the same distribution when sampling", "all [drafters] are
lossless". The recipe builds the engine around ``kind="transformers"`` stand-ins (real ``PreTrainedModel``s
whose KV cache crops as flashspec's ``KvSession`` expects) with ``compile=False`` and calls ``generate``;
drafting, verification (``sampling/rejection.py``), the caches' bookkeeping and the output buffer all run
as published, on the batch-1 fast path (``_generate_single``) or, at batch 2, the generic loop
(``_generate_generic``, row 0 audited).

Verdicts (vocab 3, order-1 tables, prompt (0,)):

- batch 1 and batch 2, ``temperature`` 1 and 1/2, a drafter at another temperature, gamma 1 and 2, prompt
  lookup alone, ``composite-g6-f2`` / ``auto``, greedy (``temperature=0``, TV 0 exactly): **lossless up to
  float32 rounding** (TV 1.4e-8 to 6.9e-8): flashspec computes in float32 whatever it is handed
  (``logits.float()`` in ``engine/kv_cache.py`` l. 522, ``.float()`` in ``rejection_step``), which the audit
  detects (``forced_precision``) and holds to a float32 allowance. Plain torch, batch 1, gamma 2, 3 tokens,
  20,000 runs: chi2 16.1 on 26 df against the target's law.
- a drafter at temperature 0 (``HuggingFaceDrafter(temperature=0)``, documented: "0 proposes the argmax
  token; the returned log-probs are then those at temperature 1") with a sampling target, at batch 2:
  **biased**, TV 8/17 exactly (gamma 1, two tokens), algorithmic: ``_sample_uncached`` (``hf_drafter.py``
  l. 491-492) proposes ``_pick``'s argmax (l. 459-460) but returns ``softmax(logits)`` as the draft law,
  and ``rejection_sample`` (``sampling/rejection.py`` l. 403-405) accepts with ``min(1, p/q)`` for that
  law, not the one-hot it drew from. At batch 1 the incremental path calls ``draft(greedy=False)`` and the
  drafter samples at temperature 1 (its temperature ignored): lossless.
  Plain torch (no interception, 5,000 runs): the first token was 1 in every run (9/17 under the target).
- ``SamplingConfig(seed=...)``: refused (``UnsupportedRandomness`` naming ``speculative.py:656``): the
  engine makes a ``torch.Generator`` per call. ``variant="typical"`` is lossy by its own documentation and
  is not audited here.

Install with ``pip install --no-deps flashspec==0.3.1`` (``tests/published-nodeps.txt``): it declares numpy,
pydantic>=2, torch>=2.2 and transformers>=4.40, all already installed (pydantic comes with transformers'
huggingface-hub, through typer). With ``EXACTSPEC_REQUIRE_PUBLISHED`` set, a missing package fails this module.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction as F
from importlib.metadata import version

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
    import flashspec
else:
    flashspec = pytest.importorskip("flashspec", reason="pip install --no-deps flashspec==0.3.1")
from flashspec import BanditConfig, FlashSpecConfig, SamplingConfig, SpeculativeEngine  # noqa: E402
from flashspec.engine import HuggingFaceDrafter, NgramDrafter, TargetModel  # noqa: E402

import exactspec as es  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop  # noqa: E402
from findings import observe, release, tv_text  # noqa: E402

PINNED = "0.3.1"
TARGET = es.models.random_table(vocab=3, order=1, seed=1)
DRAFT = es.models.random_table(vocab=3, order=1, seed=4)
FLOAT32_ROUNDING = F(1, 10 ** 6)
pytestmark = pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _quiet_flashspec():
    # the engine logs its strategy and a single-arm warning on every construction
    logging.getLogger("flashspec").setLevel(logging.ERROR)


def flashspec_loop(gamma, new_tokens, temperature=1.0, drafter_temperature=1.0, strategy="bandit", batch=1,
                   seed=None, model_drafter=True, lookup=False):
    """``SpeculativeEngine(...).generate`` on the stand-ins; row 0 of the output."""
    def loop(target_lm, draft_lm, ids):                                           # recipe
        target = TargetModel("stand-in", CPU, target_lm.dtype, model=target_lm)  # recipe
        drafters = []                                                             # recipe
        if model_drafter:                                                         # recipe
            drafters.append(HuggingFaceDrafter("stand-in", CPU, target_lm.dtype,  # recipe
                                               temperature=drafter_temperature, model=draft_lm))  # recipe
        if lookup:                                                                # recipe
            drafters.append(NgramDrafter())                                       # recipe
        arms = {"bandit": BanditConfig(n_arms=len(drafters))} if strategy == "bandit" else {}  # recipe
        config = FlashSpecConfig(device="cpu", compile=False, drafter_strategy=strategy, **arms,  # recipe
                                 sampling=SamplingConfig(gamma=gamma, temperature=temperature, seed=seed))  # recipe
        engine = SpeculativeEngine(config, drafters, target)                      # recipe
        result = engine.generate(ids.expand(batch, -1), max_new_tokens=new_tokens)  # recipe
        return result.output_ids[0]                                               # recipe
    return loop


def audit(gamma, tokens, expected=None, **kwargs):
    return audit_loop(flashspec_loop(gamma, tokens, **kwargs), target=TARGET, draft=DRAFT, prompt=(0,), tokens=tokens,
                      output="new", kind="transformers", expected=expected, progress=False)


def argmax_model(model, name):
    def one_hot(ctx):
        law = model(ctx)
        best = max(range(len(law)), key=lambda i: (law[i], -i))
        return tuple(F(int(i == best)) for i in range(len(law)))
    return es.models.from_function(vocab=model.vocab, order=model.order, fn=one_hot, name=name)


def lossless_up_to_float32(r, instance):
    """Observe the lossless row (forced float32, 0 < TV < 1e-6, no crash) and say whether it held."""
    b = r.extra["float_boundary"]
    ok = (r.verdict == "lossless" and b["forced"] and b["precision"] == "float32" and 0 < r.tv < FLOAT32_ROUNDING
          and r.error_probability == 0)
    observe("flashspec-lossless", r.verdict, "0 < TV < 10^-6 each (float32 rounding)" if ok else tv_text(r.tv),
            instance=instance, measured=float(r.tv))
    return ok


def test_the_recorded_version_is_installed():
    assert release("flashspec") == PINNED
    installed = version("flashspec")
    assert installed == PINNED, f"these findings are for flashspec {PINNED}; {installed} is installed"


@pytest.mark.parametrize("kwargs", [
    {},
    {"batch": 2},                                        # the generic loop, row 0
    {"drafter_temperature": 0.0},                        # batch 1: draft(greedy=False) samples at temperature 1
    {"model_drafter": False, "lookup": True},            # prompt lookup alone: one-hot q
], ids=["batch1", "batch2", "drafter_t0_batch1", "lookup"])
def test_lossless_up_to_float32_rounding(kwargs):
    gamma, tokens = (2, 3) if kwargs.get("lookup") else (1, 2)
    assert lossless_up_to_float32(audit(gamma, tokens, **kwargs), "sampling")


def test_default_strategy_is_lossless_up_to_float32_rounding():
    # drafter_strategy="auto" with one model drafter runs composite-g6-f2: lookup when the context has a match,
    # else the model drafter at gamma 2 (~15 s)
    assert lossless_up_to_float32(audit(2, 3, strategy="auto"), "sampling")


def test_greedy_is_the_targets_argmax_exactly():
    r = audit(2, 3, temperature=0.0, drafter_temperature=0.0, expected=argmax_model(TARGET, "argmax(target)"))
    observe("flashspec-lossless", r.verdict, "0 (exact)" if r.tv == 0 else tv_text(r.tv), instance="greedy")
    assert r.verdict == "lossless" and r.tv == 0


@pytest.mark.slow
@pytest.mark.parametrize("kwargs, expected", [
    ({}, None),
    ({"temperature": 0.5, "drafter_temperature": 0.5}, es.models.sharpen(TARGET, 2)),
    ({"drafter_temperature": 0.5}, None),
], ids=["t1", "t0.5", "drafter_t0.5"])
def test_gamma_2_is_lossless_up_to_float32_rounding(kwargs, expected):
    # ~30-50 s each
    assert lossless_up_to_float32(audit(2, 3, expected=expected, **kwargs), "sampling")


def test_a_greedy_drafter_at_batch_2_is_biased():
    # argmax q(.|0) = 1 (q = (5/21, 3/7, 1/3)) is proposed with probability 1 but verified as if drawn from q:
    # p(1|0)/q(1|0) = (9/17)/(3/7) > 1, accepted always; then the bonus from p(.|0, 1). The first token is 1
    # with probability 1 instead of 9/17: TV 8/17 exactly, whatever the float32 rounding of the bonus law.
    r = audit(1, 2, drafter_temperature=0.0, batch=2)
    observe("flashspec-greedy-drafter-batch", r.verdict, tv_text(r.tv), measured=float(r.tv))
    assert r.verdict == "biased" and r.tv == F(8, 17)
    reason = r.extra["float_boundary"]["reason"]
    # decided by the run with flashspec's .float() lifted to float64: the bias stays there, algorithmic
    assert reason.startswith("algorithmic: the code computes in float32 whatever it is handed, and with its casts "
                             "lifted to float64 it is TV 0.471")
    assert {seq[0] for seq in r.output} == {1}


def test_a_seeded_engine_is_refused_naming_its_generator():
    with pytest.raises(es.UnsupportedRandomness, match=r"torch\.Generator.*speculative\.py:656 in _make_generator"):
        audit(1, 2, seed=0)
    observe("flashspec-seeded", "refused", "UnsupportedRandomness: a torch.Generator made per call at "
            "speculative.py:656")
