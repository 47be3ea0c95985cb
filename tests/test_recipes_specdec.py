"""Recipe: specdec 0.2.0 (``specdec.SpecDecoder``), its own loop ``spec_gen`` and ``verify``, audited as published.

``SpecDecoder.__init__`` loads two Hugging Face checkpoints by name; the recipe skips it
(``SpecDecoder.__new__``) and hands the stand-ins over as ``small_model`` / ``big_model`` (they are
called ``model(ids, ...)`` and read through ``.logits``), with a tokenizer whose ``encode`` passes the
prompt ids through and whose ``decode`` hands the ids back, so ``spec_gen`` runs unchanged: drafts
from ``generate_small`` (``torch.multinomial`` on the small model's softmax), ``verify`` (one
``torch.rand`` per drafted token, ``rand < p / q``, the first rejection's residual
``clamp(p - q, min=0)`` or the bonus token from ``softmax(logits[pos])``), and the loop's bookkeeping.

Verdict (vocab 3, order-1 tables, temperature 1 — the only one it has): **lossless** up to float32
rounding at gamma 1 and 2 (TV ~7e-9 with float32 stand-ins and torch's float32 ``rand`` grid;
~1e-16 with float64 stand-ins and float64 uniforms, the algorithmic part). Its strict ``rand < ratio``
never accepts a token the target gives probability 0, even when ``rand`` returns exactly 0.

Install with ``pip install --no-deps specdec==0.2.0`` (``tests/published-nodeps.txt``): its declared
numpy and matplotlib are used only by ``specdec/cli.py``; ``decoder.py`` needs torch and
transformers. With ``EXACTSPEC_REQUIRE_PUBLISHED`` set, a missing package fails this module.
"""

from __future__ import annotations

import os
from fractions import Fraction as F
from importlib.metadata import version
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
    from specdec.decoder import SpecDecoder
else:
    SpecDecoder = pytest.importorskip("specdec.decoder", reason="pip install --no-deps specdec==0.2.0").SpecDecoder

import exactspec as es  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop  # noqa: E402
from findings import observe, release, tv_text  # noqa: E402

TARGET = es.models.random_table(vocab=3, order=1, seed=1)
DRAFT = es.models.random_table(vocab=3, order=1, seed=4)
TOL = F(1, 2 ** 40)     # audit_loop's default tolerance (float64 rounding)


class PassThrough:
    """``encode`` hands the prompt ids through, ``decode`` hands the ids back (``spec_gen`` takes a string)."""

    def encode(self, prompt, return_tensors=None):
        return prompt

    def decode(self, ids, skip_special_tokens=False):
        return ids


def specdec_loop(gamma: int, new_tokens: int):
    """``SpecDecoder.spec_gen`` on the stand-ins: ``gamma`` drafted tokens a step, until ``new_tokens``."""
    def loop(target_lm, draft_lm, ids):                                           # recipe
        def outputs(lm):                                                          # recipe: HF-style .logits
            return lambda x, **kwargs: SimpleNamespace(logits=lm(x))              # recipe
        dec = SpecDecoder.__new__(SpecDecoder)                                    # recipe: no checkpoints
        dec.small_model, dec.big_model = outputs(draft_lm), outputs(target_lm)    # recipe
        dec.tokenizer, dec.device = PassThrough(), "cpu"                          # recipe
        return dec.spec_gen(ids, new_tokens, gamma)[None]                         # recipe
    return loop


def test_the_recorded_version_is_installed():
    assert release("specdec") == version("specdec") == "0.2.0"


def test_specdec_is_lossless_up_to_float32_rounding_at_gamma_1():
    # native: float32 stand-ins and torch's float32 rand grid move the law by ~1e-8; the same code on float64
    # stand-ins with float64 uniforms is within float64 rounding: rounding, not bias. 3 tokens: a second step.
    r = audit_loop(specdec_loop(1, 3), target=TARGET, draft=DRAFT, prompt=(0,), tokens=3)
    b = r.extra["float_boundary"]
    observe("specdec-lossless", r.verdict, "2^-40 < TV < 10^-6 (float32 grid); the float64 run's TV <= 2^-40"
            if TOL < r.tv < F(1, 10 ** 6) and F(b["f64_tv"]) <= TOL else tv_text(r.tv),
            instance="gamma 1, 3 tokens, torch's generator", measured=float(r.tv))
    assert r.verdict == "lossless" and TOL < r.tv < F(1, 10 ** 6)
    assert b["verdict"] == "lossless" and F(b["f64_tv"]) <= TOL


@pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")
def test_specdec_never_accepts_a_token_the_target_excludes():
    # p(2) = 0 < q(2): rand < 0 / q is never true, even when torch.rand returns exactly 0 on its float32 grid
    # (the native rng model enumerates that point: with `<=` in verify token 2 comes out w.p. 2**-25). Drafted 0 or
    # 1 (ratio 2) is accepted; drafted 2 is rejected, residual (1/4, 1/4, 0) normalised: p exactly, no rounding.
    p = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    q = es.models.context_free((F(1, 4), F(1, 4), F(1, 2)))
    r = audit_loop(specdec_loop(1, 1), target=p, draft=q, prompt=(0,), tokens=1)
    assert r.extra["rng_model"] == "native"
    observe("specdec-lossless", r.verdict, "0 (exact): no support violation" if r.tv == 0 else tv_text(r.tv),
            instance="p(x) = 0 < q(x), torch's generator")
    assert r.output == {(0,): F(1, 2), (1,): F(1, 2)} and r.tv == 0 and r.verdict == "lossless"


@pytest.mark.slow
def test_specdec_is_lossless_in_float64_at_gamma_2():
    # gamma 2, 3 tokens (every position of a first step: 3,698 branches, ~30 s): float64 stand-ins, float64 uniforms
    r = audit_loop(specdec_loop(2, 3), target=TARGET, draft=DRAFT, prompt=(0,), tokens=3, rng_model="continuous",
                   dtype=torch.float64)
    observe("specdec-lossless", r.verdict, "TV <= 2^-40 (float64)" if r.tv <= TOL else tv_text(r.tv),
            instance="gamma 2, 3 tokens, float64, ideal uniforms", measured=float(r.tv))
    assert r.verdict == "lossless" and r.tv <= TOL
