"""Recipes: whole published speculative-decoding loops audited as they are written (exactspec.audit_loop).

Each recipe is the few lines a user writes (marked ``# recipe``): the published function called
on the stand-ins ``audit_loop`` hands over. Verdicts found here (package versions in
``PUBLISHED``), on vocab 3 order-1 instances, float64 stand-ins:

- litgpt 0.5.13 ``litgpt.generate.speculative_decoding.generate``: **biased** (TV ~0.31 on the
  order-1 instance below, exact value asserted): it samples the first token from the target at
  prefill and never returns it, while the tokens it does return are conditioned on it. The law
  it returns is exactly "skip one token" (asserted to float64 rounding); on a context-free
  instance, where skipping a token changes nothing, it is lossless. Algorithmic, not rounding.
  Reported upstream as Lightning-AI/litgpt#2307 ("Speculative decoding drops the first generated
  token"; fix proposed in Lightning-AI/litgpt#2308, open when this was written).
- litgpt 0.5.13 ``speculative_decoding`` (one step), driven by a loop that keeps every token:
  **lossless** up to float64 rounding at temperature 1, at temperature 1/2 and with ``top_k``
  (against the target tempered / cut to its top k, as both sides sample), at gamma 2 and 3, and
  up to float32 rounding with float32 stand-ins (judged against ``reference_loop`` at float32);
  with ``top_p < 1`` it
  **crashes** with positive probability (exact value asserted): after a rejection it applies
  top-p to the residual *probabilities* as if they were logits and masks them with ``-inf``, and
  ``torch.multinomial`` refuses the ``-inf`` weights.
- lucidrains' speculative-decoding 0.2.0 ``speculative_decoding``: its drafts use Gumbel-max
  written ``-log(-log(u.clamp(min=1e-20)))``; the clamp changes the law on an event of probability
  ~1e-20, so the audit refuses it with UnsupportedRandomness naming the package's line (never a
  verdict). With ``gumbel_sample`` replaced by a draw from its law (the recipe's one-line patch),
  the rest of the loop (verification, residual, bonus, cache slicing) is **lossless** up to
  float64 rounding at temperature 1, at temperature 1/2 and with top-k (``filter_thres=0.5``),
  against the target tempered / cut as both sides sample.

The published packages are optional here: missing ones skip their tests, unless the environment
variable ``EXACTSPEC_REQUIRE_PUBLISHED`` is set (CI sets it), which makes a missing package an error.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from fractions import Fraction as F
from itertools import product

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.laws import total_variation  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop  # noqa: E402
from exactspec.samplers.loops.loop_search import search_loop  # noqa: E402
from findings import lossless_figure, observe, release, tv_text  # noqa: E402

REQUIRE = bool(os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"))


def _published(module: str):
    """The published module, or None (its tests skip) unless EXACTSPEC_REQUIRE_PUBLISHED is set."""
    if REQUIRE:
        return importlib.import_module(module)
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


litgpt_sd = _published("litgpt.generate.speculative_decoding")
lucid = _published("speculative_decoding.speculative_decoding")
needs_litgpt = pytest.mark.skipif(litgpt_sd is None, reason="litgpt not installed (pip install litgpt==0.5.13)")
needs_lucid = pytest.mark.skipif(lucid is None, reason="speculative-decoding not installed "
                                                       "(pip install speculative-decoding==0.2.0)")
PUBLISHED = {"litgpt": "0.5.13", "speculative-decoding": "0.2.0"}

TARGET = es.models.random_table(vocab=3, order=1, seed=1)
DRAFT = es.models.random_table(vocab=3, order=1, seed=4)
FLOAT64_TEXT = "TV <= 2^-40 each (float64 rounding)"
NATIVE_TEXT = "2^-40 < TV < 10^-6 (float32 grid); the float64 run's TV <= 2^-40"
TOL = F(1, 2 ** 40)     # audit_loop's default tolerance: float64 rounding on these instances stays far below
# the figures below are float64 arithmetic against exact laws, so with ideal uniforms (rng_model="continuous"); on
# torch's own float32 grid (native, the default) each comparison moves by up to 2**-24, and the verdict comes from
# the float64 run (test_litgpt_step_is_lossless_on_torchs_own_generator)


def test_published_versions_are_the_ones_recorded():
    from importlib.metadata import PackageNotFoundError, version
    for name, v in PUBLISHED.items():
        try:
            version(name)
        except PackageNotFoundError:
            if REQUIRE:
                raise
            continue
        assert release(name) == v == es.published.package(name).pinned


# -- exact declared laws the samplers are meant to follow (independent of the audited code) --------------------

def filtered(model, keep, name):
    """``model`` with each law passed through ``keep`` (a function law -> law), exactly."""
    return es.models.from_function(vocab=model.vocab, order=model.order, fn=lambda c: keep(model(c)), name=name)


def top_k(law, k):
    kept = sorted(range(len(law)), key=lambda i: (-law[i], i))[:k]
    total = sum(law[i] for i in kept)
    return tuple(law[i] / total if i in kept else F(0) for i in range(len(law)))


def autoregressive_law(model, prompt, n):
    out = {}
    for seq in product(range(model.vocab), repeat=n):
        pr, ctx = F(1), tuple(prompt)
        for t in seq:
            pr *= model(ctx)[t]
            ctx += (t,)
        if pr:
            out[seq] = pr
    return out


# -- litgpt ---------------------------------------------------------------------------------------------------

def litgpt_generate(gamma, n):
    def loop(target, draft, prompt):                                              # recipe
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=gamma,  # recipe
                                       max_returned_tokens=prompt.shape[1] + n + 1)   # recipe
        return tokens                                                             # recipe
    return loop


def litgpt_steps(gamma, n, **sample_kwargs):
    """A loop over litgpt's published step ``speculative_decoding`` that keeps every token it emits.

    Like litgpt's ``generate``, it drafts no more than the tokens still missing (``min(gamma, missing)``).
    """
    def loop(target, draft, prompt):                                              # recipe
        m = prompt.shape[1]                                                       # recipe
        with torch.inference_mode():                                              # recipe
            draft(prompt, torch.arange(m))                                        # recipe: prefill the caches
            target(prompt, torch.arange(m))                                       # recipe
            token, pos, out = prompt[0, -1:], torch.tensor([m - 1]), []           # recipe
            while len(out) < n:                                                   # recipe
                k = min(gamma, n - len(out))                                      # recipe: as generate does
                new = litgpt_sd.speculative_decoding(draft, target, token, pos, int(pos) + 1,  # recipe
                                                     speculative_k=k, **sample_kwargs)  # recipe
                out += new.tolist()                                               # recipe
                pos, token = pos + len(new), new[-1:]                             # recipe
        return out                                                                # recipe
    return loop


@needs_litgpt
def test_litgpt_generate_drops_its_first_token():
    r = audit_loop(litgpt_generate(2, 2), target=TARGET, draft=DRAFT, prompt=(0,), rng_model="continuous", tokens=2)
    # what it returns is exactly the target's law one token later, the first sampled token unseen
    skipped = {}
    for first in range(3):
        for seq, pr in autoregressive_law(TARGET, (0, first), 2).items():
            skipped[seq] = skipped.get(seq, 0) + TARGET((0,))[first] * pr
    is_skip = total_variation(r.output, skipped) <= TOL
    observe("litgpt-generate-skips-first", r.verdict,
            f"{tv_text(total_variation(skipped, r.expected))} (the law of skipping one token)" if is_skip
            else tv_text(r.tv), measured=float(r.tv))
    assert r.verdict == "biased" and r.tv > F(3, 10)
    assert total_variation(r.output, skipped) <= TOL
    assert abs(r.tv - total_variation(skipped, r.expected)) <= TOL
    # where skipping a token changes nothing (context-free models) it reads lossless
    cf_p, cf_q = es.models.random_table(vocab=3, order=0, seed=1), es.models.random_table(vocab=3, order=0, seed=4)
    assert audit_loop(litgpt_generate(2, 2), target=cf_p, draft=cf_q, prompt=(0,), tokens=2).verdict == "lossless"


@needs_litgpt
@pytest.mark.parametrize("kwargs, expected", [
    ({}, None),
    ({"temperature": 0.5}, es.models.sharpen(TARGET, 2)),
    ({"top_k": 2}, filtered(TARGET, lambda law: top_k(law, 2), "top2(target)")),
    ({"top_k": 2, "temperature": 0.5}, filtered(es.models.sharpen(TARGET, 2), lambda law: top_k(law, 2), "top2")),
], ids=["t1", "t0.5", "top_k2", "top_k2_t0.5"])
def test_litgpt_speculative_decoding_step_is_lossless(kwargs, expected):
    r = audit_loop(litgpt_steps(2, 2, **kwargs), target=TARGET, draft=DRAFT, prompt=(0,),
                   rng_model="continuous", tokens=2, output="new",
                   expected=expected)
    observe("litgpt-step-lossless", r.verdict, lossless_figure(r.tv, TOL, FLOAT64_TEXT), instance="ideal uniforms",
            measured=float(r.tv))
    assert r.verdict == "lossless" and r.tv <= TOL and not r.support_violations
    assert r.output.keys() == r.expected.keys()
    assert r.expected == autoregressive_law(expected or TARGET, (0,), 2)


def litgpt_top_p(law, top_p):
    """litgpt's nucleus on a law, exactly: drop the tokens whose ascending cumulative probability is <= 1 - top_p."""
    order = sorted(range(len(law)), key=lambda i: (law[i], i))
    cut, cum, drop = F(1) - F(top_p), F(0), set()
    for i in order[:-1]:                         # the most probable token is always kept
        cum += law[i]
        if cum <= cut:
            drop.add(i)
    total = sum(law[i] for i in range(len(law)) if i not in drop)
    return tuple(F(0) if i in drop else law[i] / total for i in range(len(law)))


@needs_litgpt
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_litgpt_top_p_crashes_after_every_rejection(temperature):
    r = audit_loop(litgpt_steps(2, 2, top_p=0.6, temperature=temperature), target=TARGET, draft=DRAFT, prompt=(0,),
                   rng_model="continuous",
                   tokens=2, output="new", on_error="record")
    assert not r.lossless and "crashes with probability" in r.verdict_text
    (what, prob), = r.extra["errors"].items()
    assert what.startswith("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0")
    assert F(prob) == r.error_probability
    # by hand: after a rejection litgpt runs top-p on the residual *probabilities* as logits; over 3 tokens the
    # smallest softmax weight is <= 1/3 < 1 - 0.6, so a token is always masked with -inf and multinomial raises:
    # it crashes exactly when a rejection happens. Two tokens need the first step's two drafts accepted, each
    # with probability sum_x min(p'(x), q'(x)) (p', q': the tempered, top-p cut laws both sides sample from).
    k = 2 if temperature == 0.5 else 1
    p_, q_ = es.models.sharpen(TARGET, k), es.models.sharpen(DRAFT, k)

    def overlap(ctx):
        return [min(a, b) for a, b in zip(litgpt_top_p(p_(ctx), 0.6), litgpt_top_p(q_(ctx), 0.6))]
    survive = sum(m1 * sum(overlap((0, x1))) for x1, m1 in enumerate(overlap((0,))))
    observe("litgpt-top-p-crash", "crashes", f"with probability {tv_text(1 - survive)}"
            if abs(r.error_probability - (1 - survive)) <= TOL else f"with probability {r.error_probability}",
            instance=f"T={temperature:g}", measured=float(r.error_probability))
    assert abs(r.error_probability - (1 - survive)) <= TOL      # float64 rounding of the float program only
    # the crash is real: plain torch, real random numbers, the same code
    from exactspec.samplers.loops.stand_in import stand_in
    torch.manual_seed(0)
    lm_p, lm_q = stand_in(TARGET, dtype=torch.float64), stand_in(DRAFT, dtype=torch.float64)
    crashes = 0
    for _ in range(20):
        lm_p.reset(), lm_q.reset()
        try:
            litgpt_steps(2, 2, top_p=0.6, temperature=temperature)(lm_p, lm_q, torch.tensor([[0]]))
        except RuntimeError as exc:
            assert "probability tensor contains" in str(exc)
            crashes += 1
    assert crashes > 0


@needs_litgpt
def test_litgpt_speculative_decoding_step_at_float32_is_lossless_up_to_rounding():
    r = audit_loop(litgpt_steps(2, 2), target=TARGET, draft=DRAFT, prompt=(0,),
                   rng_model="continuous", tokens=2, output="new",
                   dtype=torch.float32, reference=2)
    observe("litgpt-step-rounding", r.verdict, "0 < TV <= 2x its float32 rounding's TV" if
            0 < r.tv <= 2 * F(r.extra["rounding_tv"]) and not r.support_violations else tv_text(r.tv),
            instance="float32 logits, ideal uniforms", measured=float(r.tv))
    assert 0 < r.tv <= 2 * F(r.extra["rounding_tv"]) and r.verdict == "lossless" and not r.support_violations


@needs_litgpt
def test_litgpt_speculative_decoding_step_at_gamma_3():
    r = audit_loop(litgpt_steps(3, 3), target=TARGET, draft=DRAFT, prompt=(0,),
                   rng_model="continuous", tokens=3, output="new")
    observe("litgpt-step-lossless", r.verdict, lossless_figure(r.tv, TOL, FLOAT64_TEXT), instance="ideal uniforms",
            measured=float(r.tv))
    assert r.verdict == "lossless" and r.tv <= TOL and r.output.keys() == r.expected.keys()


@needs_litgpt
@pytest.mark.slow
def test_litgpt_generate_gamma_3_whole_loop_timing():
    t0 = time.perf_counter()
    r = audit_loop(litgpt_generate(3, 3), target=TARGET, draft=DRAFT, prompt=(0,), rng_model="continuous", tokens=3)
    seconds = time.perf_counter() - t0
    assert r.verdict == "biased"
    print(f"litgpt generate, gamma 3, vocab 3, 3 tokens: {r.paths} branches, {seconds:.1f} s")


# -- lucidrains' speculative-decoding -------------------------------------------------------------------------

class LucidNet(torch.nn.Module):                                                  # recipe
    """lucidrains' nets take (ids, cache=, return_cache=, seq_start_pos=) and return (logits, cache)."""

    def __init__(self, lm):                                                       # recipe
        super().__init__()                                                        # recipe
        self.lm = lm                                                              # recipe

    def forward(self, x, cache=None, return_cache=False, **kwargs):              # recipe
        logits = self.lm(x)                                                       # recipe
        return (logits, (torch.zeros(1, 1, x.shape[-1], 1), None)) if return_cache else logits  # recipe


def lucid_loop(gamma, n, **kwargs):
    def loop(target, draft, prompt):                                              # recipe
        out, _ = lucid.speculative_decoding(LucidNet(target), LucidNet(draft), prompt,  # recipe
                                            seq_len=prompt.shape[1] + n, gamma=gamma, **kwargs)  # recipe
        return out                                                                # recipe
    return loop


@needs_lucid
def test_lucidrains_published_gumbel_draft_is_a_typed_error_naming_its_line():
    # gumbel_noise is -log(-log(u.clamp(min=1e-20))): the clamp changes the law on an event of probability ~1e-20,
    # so the exact law is not a categorical one; the audit refuses (never a verdict) and names the package's line
    with pytest.raises(es.UnsupportedRandomness, match=r"clamp .*speculative_decoding\.py:29 in log") as refused:
        audit_loop(lucid_loop(2, 2, filter_thres=0.0), target=TARGET, draft=DRAFT, prompt=(0,), tokens=2,
                   output="new")
    where = re.search(r"speculative_decoding\.py:\d+", str(refused.value)).group(0)
    observe("speculative-decoding-as-published", "refused", f"UnsupportedRandomness: the clamp at {where}")


def gumbel_as_its_law(t, temperature=1., dim=-1):                                 # recipe
    """Gumbel-max without the eps clamp: a draw from softmax(t / temperature), read lazily."""
    return torch.multinomial((t / max(temperature, 1e-10)).softmax(dim), 1)[..., 0]  # recipe


@needs_lucid
@pytest.mark.parametrize("kwargs, expected", [
    ({"filter_thres": 0.0}, None),
    ({"filter_thres": 0.0, "temperature": 0.5}, es.models.sharpen(TARGET, 2)),
    ({"filter_thres": 0.5}, filtered(TARGET, lambda law: top_k(law, 2), "top2(target)")),   # k = ceil(0.5 * 3)
], ids=["t1", "t0.5", "top_k2"])
def test_lucidrains_verification_is_lossless_with_the_gumbel_draw_replaced_by_its_law(monkeypatch, kwargs, expected):
    monkeypatch.setattr(lucid, "gumbel_sample", gumbel_as_its_law)                # recipe
    r = audit_loop(lucid_loop(2, 2, **kwargs), target=TARGET, draft=DRAFT, prompt=(0,),
                   rng_model="continuous", tokens=2, output="new",
                   expected=expected)
    observe("speculative-decoding-gumbel-as-law", r.verdict, lossless_figure(r.tv, TOL, FLOAT64_TEXT),
            instance="ideal uniforms", measured=float(r.tv))
    assert r.verdict == "lossless" and r.tv <= TOL and not r.support_violations
    assert r.expected == autoregressive_law(expected or TARGET, (0,), 2)


@needs_lucid
@pytest.mark.parametrize("kwargs, expected", [
    ({"filter_thres": 0.0}, None),
    ({"filter_thres": 0.5}, filtered(TARGET, lambda law: top_k(law, 2), "top2(target)")),
], ids=["t1", "top_k2"])
def test_lucidrains_verification_on_torchs_own_generator(monkeypatch, kwargs, expected):
    # native (the default): its r = zeros_like(q).float().uniform_(0, 1) is torch's float32 grid, 0 included, and
    # it rejects where r > p/q (speculative_decoding.py l. 185): when r == 0 it accepts a drafted token the top-k
    # target gives probability 0 (transformers 5.24.0's r <= p/q, the same pattern). At T=1, no truncation: rounding.
    monkeypatch.setattr(lucid, "gumbel_sample", gumbel_as_its_law)                # recipe
    r = audit_loop(lucid_loop(2, 2, **kwargs), target=TARGET, draft=DRAFT, prompt=(0,), tokens=2, output="new",
                   expected=expected)
    assert r.extra["rng_model"] == "native"
    mass = sum(r.output[s] for s in r.support_violations)
    if kwargs["filter_thres"]:
        figure = ("0 < TV <= 2^-24 per drafted token (support violation)" if 0 < mass <= 2 * F(1, 2 ** 24)
                  else f"support violation of mass {tv_text(mass)}")
        observe("speculative-decoding-top-k-zero-draw", r.verdict, figure, measured=float(mass))
    else:
        b = r.extra["float_boundary"]
        figure = NATIVE_TEXT if TOL < r.tv < F(1, 10 ** 6) and F(b["f64_tv"]) <= TOL else tv_text(r.tv)
        observe("speculative-decoding-gumbel-as-law", r.verdict, figure, instance="torch's generator, T=1",
                measured=float(r.tv))


@needs_litgpt
def test_litgpt_top_p_crash_is_found_by_the_search_as_a_crash_counterexample():
    # issue 16 section 5: the search met this crash and said "INCOMPLETE ... no counterexample among N instances" (3)
    found = search_loop(litgpt_steps(2, 2, top_p=0.6), tokens=2, output="new",
                       progress=False)
    assert isinstance(found, es.counterexamples.Counterexample) and found.kind == "crash" and found.exit_code == 1
    crash = found.crash
    assert crash["exception"] == "RuntimeError" and crash["message"].startswith("probability tensor contains")
    assert os.path.join("litgpt", "generate", "base.py") in crash["where"]      # litgpt's line, not exactspec's
    # the minimal instance: the draft always proposes the token the target never emits, so every step rejects and
    # top-p over the residual crashes: with probability 1, the output law empty
    inst = found.instance
    assert (inst.vocab, inst.tokens, inst.family) == (2, 1, "context_free")
    assert inst.target == ((F(0), F(1)),) and inst.draft == ((F(1), F(0)),)
    assert crash["probability"] == "1" and found.output == {} and found.tv == F(1, 2)
    # the same instance audited on its own, recording crashes: the same exact probability
    r = audit_loop(litgpt_steps(2, 2, top_p=0.6), target=es.models.context_free(inst.target[0]),
                   draft=es.models.context_free(inst.draft[0]), prompt=(0,), tokens=1, output="new", on_error="record")
    assert r.error_probability == 1 and r.verdict == "biased"


def test_litgpt_step_is_lossless_on_torchs_own_generator():
    # native (the default): litgpt's torch.rand draws on the float32 grid move the law by ~1e-8, and the same
    # code with its generator at float64 is within float64 rounding: lossless, not biased
    r = audit_loop(litgpt_steps(2, 2), target=TARGET, draft=DRAFT, prompt=(0,), tokens=2, output="new")
    b = r.extra["float_boundary"]
    observe("litgpt-step-rounding", r.verdict, NATIVE_TEXT if TOL < r.tv < F(1, 10 ** 6) and F(b["f64_tv"]) <= TOL
            else tv_text(r.tv), instance="torch's generator, T=1", measured=float(r.tv))
    assert r.extra["rng_model"] == "native" and r.verdict == "lossless" and TOL < r.tv < F(1, 10 ** 6)
    assert F(b["f64_tv"]) <= TOL
