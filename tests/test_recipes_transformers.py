"""Recipes: transformers' own ``generate`` audited whole, drafting included, on exact stand-in models.

Each recipe is the few lines a user writes: a function ``fn(target, draft, prompt_ids)`` that calls
``generate`` as any application would, handed to ``audit_loop(..., kind="transformers")``. The
stand-ins' logits are the exact log-laws; ``generate`` itself turns them into float32 before it
samples, so a correct loop lands ~1e-8 (float32 softmax rounding) from the target: the recipes
pass ``tolerance=FLOAT32`` (2**-20), far below any algorithmic bias on these instances and far
above float32 rounding. A support violation is ``biased`` whatever its size.

Verdicts recorded here (transformers 5.24.0, vocab 3-4, 2-3 drafted tokens, 1-3 audited tokens):

* assisted sampling (``assistant_model=``), temperature 1 / 0.5, top-k, top-p, all three together,
  prompt lookup decoding, greedy assistance, universal assisted generation (different tokenizers)
  greedy and sampling with an assistant vocabulary listed in id order: lossless up to float32
  rounding (exact TV 1.7e-8 .. 6.6e-8, printed by each test with ``-s``);
* assisted sampling on the torch float32 generator lattice (``torch.rand`` is ``k * 2**-24``, 0
  included) with a draft token the target gives probability 0: **biased** (support violation).
  ``_speculative_sampling`` accepts with ``r_i <= p_i / q_i``: with ``p_i = 0`` it accepts when
  ``r_i == 0``, probability ``2**-24`` per such proposal. Algorithmic, not rounding;
* universal assisted generation with sampling (``tokenizer=``/``assistant_tokenizer=``, draft
  vocabulary not a subset of the target's, so transformers prunes the draft's LM head): **biased**
  when the assistant tokenizer's ``get_vocab()`` does not list the shared tokens in increasing id
  order (a Rust hash map's order for fast tokenizers): ``AssistantToTargetTranslator.get_target_logits``
  writes the pruned logits (ordered as ``get_vocab()`` lists them) into target columns ordered by
  assistant id, so the draft probabilities handed to the verifier are permuted. TV 3/8 on the
  instance below (algorithmic);
* universal assisted generation with sampling where the draft vocabulary *is* a subset of the
  target's: crashes with probability 1 (``AttributeError: 'AssistantToTargetTranslator' object has no
  attribute 'assistant_overlap_token_ids'``).

Every documented option of assisted generation that changes the law, over a horizon that observes at
least two tokens after a full first round (vocab 2-3, gamma 1-2, 4-5 audited tokens; the ``test_option_*``
tests):

* ``num_assistant_tokens_schedule`` ``"constant"``, ``"heuristic"`` (the draft grows from 1 to 3
  tokens after a fully accepted round, seen as a 3-token step), ``"heuristic_transient"`` (the same
  law within a call; only ``"heuristic"`` writes the length back after it), and a static
  ``assistant_confidence_threshold`` 0.5 that stops drafts early, and the threshold transformers adapts
  from an ROC curve when scikit-learn is installed (0.4 -> 1.0 after 6 verified drafts, then stopping a
  draft 0.4 would not; gamma 6, 9 tokens): lossless up to float32 rounding. (The docs call the threshold
  persistent across calls; 5.24.0 adapts a copy of the assistant's config, so it is not);
* ``assistant_ensemble_weight`` w, checked against the law it declares (every token from the mixture
  ``v = w*p + (1-w)*q``, GenerationConfig's docstring and ``_speculative_sampling``'s): **biased**.
  Drafted positions follow ``v``, but the bonus token after a fully accepted draft (and a round with no
  draft, at the ``max_length`` cap) is drawn from ``p``, so the law depends on ``num_assistant_tokens``,
  the schedule, the threshold and ``max_new_tokens``: TV 169631/1166400 (~0.145, gamma 1, 4 tokens) and
  101428481/839808000 (~0.121, gamma 2, 5 tokens) from ``v``'s law, by hand, matched by the float64 run
  (algorithmic). Greedy: the bonus is ``argmax p``, not ``argmax v`` (a sequence neither greedy law gives);
* the assistant's own ``temperature``/``top_k``/``top_p``/``do_sample`` are ignored (the target's
  settings draft and verify: the same law and expected target calls exactly), a field the target leaves
  unset (``min_p``) is taken from the assistant's config and truncates the drafts: lossless either way;
  temperature + top-k + top-p on the target (both sides) over a second round: lossless with ideal
  uniforms, the float32 lattice's support violation as above;
* prompt lookup (vocab 2; and top-k on the float32 lattice, where, with no ``r <= p/q`` test, there is
  no support violation) and universal assisted sampling in id order, over a second round: lossless.

Two usage notes the recipes follow: ``num_assistant_tokens=`` passed to the *target's*
``generate`` is ignored in 5.24.0 (the candidate generator reads the assistant's
``generation_config``), so the recipes set ``draft.generation_config.num_assistant_tokens``; the
draft's default confidence threshold (0.4) may stop a draft early, which changes speed, not the law.
"""

from __future__ import annotations

import importlib
import os
import time
from fractions import Fraction as F

import pytest


def _published(module: str):
    """The module, or a skip where it is not installed; CI (``EXACTSPEC_REQUIRE_PUBLISHED``) makes that an error."""
    if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


torch = _published("torch")
transformers = _published("transformers")

import exactspec as es  # noqa: E402
from exactspec.laws import argmax, point_mass, total_variation  # noqa: E402
from exactspec.samplers.loops.hf_stand_in import ExactLMForCausalLM, transformers_stand_in  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop  # noqa: E402
from exactspec.samplers.loops.stand_in import stand_in  # noqa: E402
from findings import lossless_figure, observe, release, tv_text  # noqa: E402

FLOAT32 = F(1, 2 ** 20)
VERSION = transformers.__version__


def test_the_audited_release_is_installed():
    assert release("transformers") == VERSION


def _lossless(r, finding="transformers-lossless"):
    """Observe a lossless row: the verdict and the float32 bound the row states (else the TV itself)."""
    observe(finding, r.verdict, lossless_figure(r.tv), measured=float(r.tv))

P3 = es.models.random_table(vocab=3, order=1, seed=1)
Q3 = es.models.random_table(vocab=3, order=1, seed=2)


def _record(name: str, report: object, t0: float) -> None:
    """Print the verdict, the exact TV and the wall time (read with ``pytest -s``)."""
    print(f"\n[transformers {VERSION}] {name}: {report.verdict}, exact TV {report.tv} (~{float(report.tv):.3e}), "
          f"{report.paths} branches, {time.perf_counter() - t0:.2f} s")


def _assisted(gamma: int, **sampling: object):
    """The recipe: ``generate`` with an assistant model drafting ``gamma`` tokens per step."""
    def fn(target, draft, ids):
        draft.generation_config.num_assistant_tokens = gamma
        out = target.generate(ids, assistant_model=draft, max_new_tokens=3, **sampling)
        fn.longest = max(getattr(fn, "longest", 0), target.longest_forward)   # drafting really happened
        return out
    return fn


def _topk(law: tuple, k: int) -> tuple:
    """Keep the tokens at least as likely as the k-th most likely one (ties kept), renormalised."""
    kth = sorted(law, reverse=True)[k - 1]
    kept = [x if x >= kth else 0 for x in law]
    return tuple(x / sum(kept) for x in kept)


def _topp(law: tuple, top_p: F) -> tuple:
    """Nucleus by hand: from the least likely up, drop tokens while their running mass stays <= 1 - top_p."""
    mass, kept = F(0), list(law)
    for i in sorted(range(len(law)), key=lambda i: law[i])[:-1]:
        mass += law[i]
        if mass <= 1 - top_p:
            kept[i] = 0
    return tuple(x / sum(kept) for x in kept)


def _sequence_law(model: es.models.Model, prompt: tuple, n: int) -> dict:
    """The model's own law of its next ``n`` tokens, by the product rule over every sequence."""
    law = {(): F(1)}
    for _ in range(n):
        law = {seq + (x,): w * px for seq, w in law.items()
               for x, px in enumerate(model(prompt + seq)) if px}
    return law


def _greedy(model: es.models.Model) -> es.models.Model:
    """The point mass on the model's argmax at every context: its sequence law is the greedy sequence."""
    return es.models.from_function(vocab=model.vocab, order=model.order,
                                   fn=lambda c: point_mass(model.vocab, argmax(model(c))))


# -- the stand-in itself ------------------------------------------------------------------------------------------

def test_stand_in_logits_are_the_law_and_the_cache_tracks_positions():
    m = transformers_stand_in(P3)
    assert isinstance(m, transformers.PreTrainedModel) and isinstance(m, transformers.GenerationMixin)
    ids = torch.tensor([[0, 2, 1]])
    full = m(ids, use_cache=False).logits
    for t, ctx in enumerate([(0,), (0, 2), (0, 2, 1)]):
        want = torch.tensor([float(x) for x in P3(ctx)], dtype=torch.float64).log().float()
        assert torch.equal(full[0, t], want)          # log of the law, rounded once to float32
    # fed one token at a time through transformers' own cache: the same rows, and crop() rolls back
    cache = transformers.DynamicCache(config=m.config)
    rows = [m(ids[:, t:t + 1], cache=cache).logits[0, 0] for t in range(3)]
    assert cache.get_seq_length() == 3 and all(torch.equal(r, full[0, t]) for t, r in enumerate(rows))
    cache.crop(-2)
    assert cache.get_seq_length() == 1 and torch.equal(m(ids[:, 1:], cache=cache).logits[0], full[0, 1:])


def test_stand_in_zero_probability_is_an_exact_zero_and_bad_input_is_named():
    m = transformers_stand_in(es.models.context_free(("1/2", "1/2", "0")), vocab_size=4)
    logits = m(torch.tensor([[0]])).logits[0, 0]
    assert logits.shape == (4,) and logits[2] == logits[3] == torch.finfo(torch.float32).min
    assert logits.softmax(-1).tolist() == [0.5, 0.5, 0.0, 0.0]
    with pytest.raises(es.ExactSpecError, match="token id 3 at position 1"):
        m(torch.tensor([[0, 3]]))
    with pytest.raises(es.ExactSpecError, match="vocab_size must be an int >= the model's vocab"):
        transformers_stand_in(P3, vocab_size=2)
    assert isinstance(stand_in(P3, kind="transformers"), ExactLMForCausalLM)   # the contract's dispatch


def test_stand_in_imports_what_generate_would_import_inside_an_audit(monkeypatch):
    # transformers imports sklearn.metrics at its first threshold adaptation, mid-generate; its import seeds a numpy
    # generator (scipy.stats), which an audit refuses: building a stand-in imports it first
    metrics = _published("sklearn.metrics")
    import sys
    monkeypatch.setattr(sys.modules["sklearn"], "metrics", metrics)      # both restored after the test
    monkeypatch.delitem(sys.modules, "sklearn.metrics")
    transformers_stand_in(P3)
    assert "sklearn.metrics" in sys.modules


def test_stand_in_batches_with_left_padding_read_only_the_unmasked_tokens():
    # a law that reads the whole context's length: were the pad counted, the first argmax would flip
    parity = es.models.from_function(vocab=3, order=None,
                                     fn=lambda c: ("3/4", "1/8", "1/8") if len(c) % 2 else ("1/8", "3/4", "1/8"))
    m = transformers_stand_in(parity, vocab_size=4, pad_token_id=3)
    out = m.generate(torch.tensor([[3, 0], [1, 2]]), attention_mask=torch.tensor([[0, 1], [1, 1]]),
                     do_sample=False, max_new_tokens=3)
    # by hand: row 0 reads (0,), length 1 -> 0, then length 2 -> 1, length 3 -> 0; row 1 starts at length 2
    assert out.tolist() == [[3, 0, 0, 1, 0], [1, 2, 1, 0, 1]]
    with pytest.raises(es.ExactSpecError, match="DynamicCache; got a StaticCache"):
        m.generate(torch.tensor([[0]]), max_new_tokens=1, cache_implementation="static")


# -- recipes: assisted generation -----------------------------------------------------------------------------------

def test_recipe_assisted_sampling_is_lossless():
    t0 = time.perf_counter()
    fn = _assisted(2, do_sample=True)
    # workers=None: fn.longest is set by the loop, so every branch runs in this process (a worker's would not
    # come back)
    r = audit_loop(fn, target=P3, draft=Q3, kind="transformers", tokens=3, tolerance=FLOAT32, workers=None)
    _record("assisted sampling, T=1, gamma 2", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and r.paths > 1
    assert r.expected == _sequence_law(P3, (0,), 3)      # judged against the target's own law
    assert fn.longest == 3              # the target scored prompt + 2 drafted tokens in one call


def test_recipe_assisted_sampling_in_bfloat16_is_lossless_up_to_bfloat16_rounding():
    # bfloat16 stand-ins (the models' own dtype), generate casting their logits to float32: the TV is bfloat16's
    # rounding (~1e-3, far beyond float32's cap); with generate's casts lifted to float64 the loop is exact
    r = es.audit_loop(_assisted(2, do_sample=True), target=P3, draft=Q3, kind="transformers", tokens=3,
                      dtype=torch.bfloat16, workers=None, progress=False)
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and b["precision"] == "bfloat16" and F(1, 2 ** 12) < r.tv < F(1, 16)
    lifted = r.extra["lifted_run"]
    assert lifted["still_coarse"] == "none" and F(lifted["tv"]) <= es.samplers.ROUNDING_TOLERANCE
    assert "transformers" in lifted["casts_lifted"]["float32"]        # generate's own .float(), file:line
    assert r.extra["lowest_precision"]["precision"] == "bfloat16"


def test_recipe_assisted_sampling_at_temperature_one_half():
    t0 = time.perf_counter()
    r = audit_loop(_assisted(2, do_sample=True, temperature=0.5), target=P3, draft=Q3, kind="transformers",
                   tokens=3, expected=es.models.sharpen(P3, 2), tolerance=FLOAT32)
    _record("assisted sampling, temperature 0.5 (both sides)", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32
    # judged against the untempered target the same law is far off: the audit sees the temperature
    assert total_variation(r.output, _sequence_law(P3, (0,), 3)) > F(1, 100)


@pytest.mark.parametrize("warp, law", [
    (dict(top_k=2), lambda law: _topk(law, 2)),
    (dict(top_p=0.75), lambda law: _topp(law, F(3, 4))),
], ids=["top_k=2", "top_p=0.75"])
def test_recipe_assisted_sampling_with_truncation_on_both_sides(warp, law):
    t0 = time.perf_counter()
    warped = es.models.from_function(vocab=3, order=1, fn=lambda c: law(P3(c)))
    assert any(0 in warped((c,)) for c in range(3))     # the truncation removes tokens on this instance
    r = audit_loop(_assisted(2, do_sample=True, **warp), target=P3, draft=Q3, kind="transformers", tokens=3,
                   expected=warped, tolerance=FLOAT32, rng_model="continuous")
    _record(f"assisted sampling, {warp}", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32      # with ideal uniforms
    _zero_draw_accepts_truncated_tokens(_assisted(2, do_sample=True, **warp), P3, Q3, 3, warped)


def _zero_draw_accepts_truncated_tokens(fn, p, q, tokens, warped):
    """On torch's float32 grid (the default rng model) transformers' r_i <= p/q accepts a drafted token the
    truncated target gives probability 0 when torch.rand returns exactly 0 (probability 2**-24 per draft)."""
    r = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=tokens, expected=warped, tolerance=FLOAT32)
    assert r.extra["rng_model"] == "native"
    mass = sum(r.output[s] for s in r.support_violations)
    if not r.support_violations:
        figure = "no support violation"
    elif 0 < mass <= tokens * F(1, 2 ** 24):                   # at most one zero draw per drafted position
        figure = "0 < TV <= 2^-24 per drafted token (support violation)"
    else:
        figure = f"support violation of mass {tv_text(mass)}"
    observe("transformers-truncation-zero-draw", r.verdict, figure, measured=float(mass))


def test_recipe_assisted_sampling_temperature_top_k_top_p_together():
    # temperature, then top-k, then top-p: the order transformers applies its warpers in
    p, q = es.models.random_table(vocab=4, order=1, seed=1), es.models.random_table(vocab=4, order=1, seed=11)
    tempered = es.models.sharpen(p, 2)
    warped = es.models.from_function(vocab=4, order=1, fn=lambda c: _topp(_topk(tempered(c), 3), F(4, 5)))
    assert [sum(1 for x in warped((c,)) if x) for c in range(4)] == [3, 2, 2, 2]
    t0 = time.perf_counter()
    r = audit_loop(_assisted(2, do_sample=True, temperature=0.5, top_k=3, top_p=0.8), target=p, draft=q,
                   kind="transformers", tokens=2, expected=warped, tolerance=FLOAT32, rng_model="continuous")
    _record("assisted sampling, temperature 0.5 + top_k 3 + top_p 0.8, vocab 4", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32      # with ideal uniforms
    _zero_draw_accepts_truncated_tokens(_assisted(2, do_sample=True, temperature=0.5, top_k=3, top_p=0.8), p, q, 2,
                                        warped)


def test_recipe_greedy_assistance_is_the_targets_argmax_sequence():
    t0 = time.perf_counter()
    r = audit_loop(_assisted(2, do_sample=False), target=P3, draft=Q3, kind="transformers", tokens=3,
                   expected=_greedy(P3), tolerance=0)
    _record("greedy assistance", r, t0)
    _lossless(r)
    # no randomness at all: one branch, the argmax sequence of P3 from (0,): P3 after 0 is (2/17, 9/17, 6/17),
    # after 1 it is (1/2, 2/9, 5/18): by hand 1, then 0, then 1
    assert [P3((0,)), P3((1,))] == [(F(2, 17), F(9, 17), F(6, 17)), (F(1, 2), F(2, 9), F(5, 18))]
    assert r.verdict == "lossless" and r.tv == 0 and r.paths == 1 and r.output == {(1, 0, 1): 1}


def test_recipe_heuristic_schedule_does_not_leak_between_branches():
    # the "heuristic" schedule writes num_assistant_tokens back into the draft's generation_config after every
    # generate call (persistent across calls by design); reset(), which an audit calls before every branch,
    # restores the config as it was at the audit's start, so every branch is one fresh generate call
    target, draft = transformers_stand_in(P3), transformers_stand_in(Q3)
    draft.reset()
    draft.generation_config.num_assistant_tokens_schedule = "heuristic"
    draft.generation_config.num_assistant_tokens = 1
    torch.manual_seed(0)
    target.generate(torch.tensor([[0]]), assistant_model=draft, do_sample=False, max_new_tokens=3)
    # greedy, P3 and Q3 agree on the first token: 1 -> 3 after the full match, -> 5 after the last round (0 drafted,
    # all "matched")
    assert draft.generation_config.num_assistant_tokens == 5
    draft.reset()
    assert draft.generation_config.num_assistant_tokens is None
    assert draft.generation_config.num_assistant_tokens_schedule is None

    def fn(target, draft, ids, schedule="heuristic"):
        draft.generation_config.num_assistant_tokens_schedule = schedule
        draft.generation_config.num_assistant_tokens = 1
        return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=3)
    kw = dict(target=P3, draft=Q3, kind="transformers", tokens=3, tolerance=FLOAT32)
    t0 = time.perf_counter()
    heuristic = audit_loop(fn, **kw)
    _record("assisted sampling, heuristic schedule", heuristic, t0)
    _lossless(heuristic)
    # gamma is capped at 1 by max_length here, so the law is the constant schedule's
    constant = audit_loop(lambda t, d, ids: fn(t, d, ids, "constant"), **kw)
    assert heuristic.verdict == "lossless" and heuristic.output == constant.output


# -- recipes: prompt lookup ----------------------------------------------------------------------------------------

def test_recipe_prompt_lookup_decoding_is_lossless():
    longest = []

    def fn(target, draft, ids):
        out = target.generate(ids, prompt_lookup_num_tokens=2, do_sample=True, max_new_tokens=3)
        longest.append(target.longest_forward)
        return out
    prompt = (0, 1, 2, 0, 1)            # the trailing n-gram (0, 1) occurs earlier: candidates (2, 0)
    t0 = time.perf_counter()
    r = audit_loop(fn, target=P3, prompt=prompt, kind="transformers", tokens=3, tolerance=FLOAT32)
    _record("prompt lookup decoding", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and max(longest) > len(prompt)


# -- recipes: the float32 generator lattice --------------------------------------------------------------------------

def test_recipe_zero_target_probability_on_the_float32_lattice_is_a_support_violation():
    p = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    q = es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))
    fn = _assisted(1, do_sample=True)
    t0 = time.perf_counter()
    lattice = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=2, rng_model="torch-float32",
                         tolerance=FLOAT32)
    _record("assisted sampling, torch float32 lattice, p(2) = 0 < q(2)", lattice, t0)
    # by hand: the draft proposes token 2 with probability 1/3 (float32 thirds are equal, normalised exactly);
    # r <= p/q = 0 accepts it iff r == 0, probability 2**-24 on the lattice
    bad = sum(w for seq, w in lattice.output.items() if seq[0] == 2)
    figure = ("(1/3)·2^-24 of support violation" if bad == F(1, 3) / 2 ** 24 else
              "no support violation" if bad == 0 else f"support violation of mass {tv_text(bad)}")
    observe("transformers-float32-lattice", lattice.verdict, figure, measured=float(bad))
    continuous = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=2, tolerance=0, rng_model="continuous")
    assert continuous.verdict == "lossless" and continuous.tv == 0   # ideal uniforms: no zero draw
    # the default (native) draws torch.rand_like on its float32 lattice: the same law, found without being asked
    native = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=2, tolerance=FLOAT32)
    assert native.output == lattice.output and native.verdict == lattice.verdict and native.extra["rng_model"] == "native"


# -- recipes: universal assisted generation (a draft with another tokenizer) --------------------------------------

def _tokenizer(words: list[str], order: list[str] | None = None):
    """A word-level fast tokenizer over ``words`` (id = position); ``order``: the order get_vocab() lists them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    if order is not None:    # a fast tokenizer lists its vocabulary in hash-map order: fix one, for a stable test
        vocab = fast.get_vocab()
        fast.get_vocab = lambda: {w: vocab[w] for w in order}
    return fast


P_UAG = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))              # over the target's words a, b, c
Q_UAG = es.models.context_free((F(1, 2), F(1, 4), F(1, 8), F(1, 8)))     # over the draft's words c, a, b, d


def _uag(assistant_order: list[str], do_sample: bool, tokens: int = 2):
    """The recipe: a draft with its own tokenizer (ids c=0, a=1, b=2, d=3; 'd' unknown to the target)."""
    target_tok = _tokenizer(["a", "b", "c"])
    draft_tok = _tokenizer(["c", "a", "b", "d"], assistant_order)
    draft = transformers_stand_in(Q_UAG)
    draft.generation_config.num_assistant_tokens = 1
    draft.generation_config.assistant_confidence_threshold = 0   # a context-free draft: the stop would never act
    kw = dict(assistant_model=draft, tokenizer=target_tok, assistant_tokenizer=draft_tok, do_sample=do_sample)
    # transformers prunes the draft's LM head once per tokenizer pair, building an nn.Linear (a random
    # initialisation): do that first call outside the audit
    transformers_stand_in(P_UAG).generate(torch.tensor([[0]]), max_new_tokens=1, **kw)
    return lambda target, _, ids: target.generate(ids, max_new_tokens=tokens, **kw)


def test_recipe_universal_assisted_generation_greedy():
    t0 = time.perf_counter()
    r = audit_loop(_uag(["c", "a", "b", "d"], False), target=P_UAG, kind="transformers", tokens=2,
                   expected=_greedy(P_UAG), tolerance=0)
    _record("universal assisted generation, greedy", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.output == {(0, 0): 1}


def test_recipe_universal_assisted_sampling_in_id_order_is_lossless():
    t0 = time.perf_counter()
    r = audit_loop(_uag(["c", "a", "b", "d"], True), target=P_UAG, kind="transformers", tokens=2,
                   tolerance=FLOAT32)
    _record("universal assisted sampling, get_vocab() in id order", r, t0)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= FLOAT32


def test_recipe_universal_assisted_sampling_out_of_id_order_is_biased():
    t0 = time.perf_counter()
    r = audit_loop(_uag(["b", "c", "a", "d"], True), target=P_UAG, kind="transformers", tokens=1,
                   tolerance=FLOAT32)
    _record("universal assisted sampling, get_vocab() out of id order", r, t0)
    observe("transformers-uag-permuted", r.verdict, "3/8" if abs(r.tv - F(3, 8)) <= FLOAT32 else tv_text(r.tv),
            measured=float(r.tv))
    # by hand: pruned draft columns follow get_vocab(): b, c, a (assistant ids 2, 0, 1); the draft samples
    # target tokens a, b, c with (2/7, 1/7, 4/7) (q restricted to the shared words), but the logits are
    # written into target columns by assistant id (c->2, a->0, b->1), so the verifier is told
    # q' = (a 4/7, b 2/7, c 1/7). Accept a w.p. (1/2)/(4/7) = 7/8, b w.p. (1/4)/(2/7) = 7/8, c always;
    # the residual (p - q')+ is all on c. Law of the first token: a 2/7*7/8 = 1/4, b 1/7*7/8 = 1/8,
    # c 4/7 + (2/7 + 1/7)/8 = 5/8: TV 3/8 from the target (1/2, 1/4, 1/4).
    by_hand = {(0,): F(1, 4), (1,): F(1, 8), (2,): F(5, 8)}
    assert r.verdict == "biased" and total_variation(r.output, by_hand) <= FLOAT32
    assert abs(r.tv - F(3, 8)) <= FLOAT32


def test_recipe_universal_assisted_sampling_with_a_subset_vocabulary_crashes():
    target_tok, draft_tok = _tokenizer(["a", "b", "c", "d"]), _tokenizer(["c", "a", "b"])
    p = es.models.context_free((F(1, 2), F(1, 4), F(1, 8), F(1, 8)))
    draft = transformers_stand_in(es.models.context_free((F(1, 3), F(1, 3), F(1, 3))))

    def fn(target, _, ids):
        return target.generate(ids, assistant_model=draft, tokenizer=target_tok, assistant_tokenizer=draft_tok,
                               do_sample=True, max_new_tokens=2)
    t0 = time.perf_counter()
    r = audit_loop(fn, target=p, kind="transformers", tokens=2, on_error="record", tolerance=FLOAT32)
    _record("universal assisted sampling, draft vocabulary a subset of the target's", r, t0)
    observe("transformers-uag-subset-crash", "crashes" if r.error_probability else r.verdict,
            f"with probability {r.error_probability}")
    assert r.error_probability == 1 and r.verdict != "lossless"
    assert list(r.extra["errors"]) == ["AttributeError: 'AssistantToTargetTranslator' object has no attribute "
                                       "'assistant_overlap_token_ids'"]


# -- every documented option of assisted generation that changes the law, over a second round ------------------------
#
# Each audit below observes at least two tokens after a full first round (horizon >= gamma + 3), so the law of a
# second round, drafted after the option has acted (a longer draft, an early stop, a bonus token), is seen.
# ``max_new_tokens`` equals the horizon: transformers caps every draft at ``max_length - cur_len - 1``
# (``AssistedCandidateGenerator._calculate_new_tokens``), so no branch generates past the horizon. Where every
# probability is positive, the float32 lattice's zero draw cannot reach a zero-probability token, and the audits run
# with ideal uniforms (``rng_model="continuous"``, one float64 run; ``generate`` still casts the logits to float32,
# ``extra["forced_precision"]``): the verdict is then ``lossless`` up to float32 rounding or the algorithmic TV.

P2 = es.models.random_table(vocab=2, order=1, seed=1)     # after 0: (1/2, 1/2), after 1: (3/5, 2/5)
Q2 = es.models.random_table(vocab=2, order=1, seed=2)     # after 0: (1/3, 2/3), after 1: (8/9, 1/9)


def _drafting(draft, gamma: int, threshold: float = 0, schedule: str = "constant") -> None:
    """Set the assistant's own options (transformers reads them from the assistant's ``generation_config``)."""
    draft.generation_config.num_assistant_tokens = gamma
    draft.generation_config.num_assistant_tokens_schedule = schedule
    draft.generation_config.assistant_confidence_threshold = threshold     # 0 turns the early stop off


def _forced_float32(r) -> bool:
    """The float64 run saw ``generate``'s float32 cast: the verdict is held to float32 rounding, stated as such."""
    return r.extra.get("forced_precision") == "float32"


@pytest.mark.slow
def test_option_num_assistant_tokens_schedule_over_a_second_round():
    def loop(schedule):
        def fn(target, draft, ids):
            _drafting(draft, 1, schedule=schedule)
            return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=5)
        return fn
    kw = dict(target=P2, draft=Q2, kind="transformers", tokens=5, tolerance=FLOAT32, rng_model="continuous")
    t0 = time.perf_counter()
    runs = {s: audit_loop(loop(s), **kw) for s in ("constant", "heuristic", "heuristic_transient")}
    for s, r in runs.items():
        _record(f"assisted sampling, schedule {s!r}, 1 drafted token to start, 5 tokens", r, t0)
        _lossless(r, "transformers-options")
        assert r.verdict == "lossless" and r.tv <= FLOAT32 and _forced_float32(r)
    # the schedule acted: after a fully accepted first round "heuristic" drafts 1 + 2 = 3 tokens (capped at
    # max_length - cur_len - 1 = 2), so a step emits 3 tokens; "constant" never emits more than 2 per step
    assert runs["constant"].scope["largest_step"] == 2 and runs["heuristic"].scope["largest_step"] == 3
    # within one call "heuristic_transient" is "heuristic" (the difference is what happens after the call): the same law
    assert runs["heuristic_transient"].output == runs["heuristic"].output
    # after the call: "heuristic" writes the adapted length back into the assistant's config, "heuristic_transient"
    # does not (greedy from (1,): both argmaxes after 1 are token 0, so the one drafted token is accepted: 1 -> 3)
    for schedule, after in (("heuristic", 3), ("heuristic_transient", 1)):
        target, draft = transformers_stand_in(P2), transformers_stand_in(Q2)
        _drafting(draft, 1, schedule=schedule)
        target.generate(torch.tensor([[1]]), assistant_model=draft, do_sample=False, max_new_tokens=2)
        assert draft.generation_config.num_assistant_tokens == after


@pytest.mark.slow
def test_option_assistant_confidence_threshold_over_a_second_round():
    # Q2 gives token 0 probability 1/3 after 0 and token 1 probability 1/9 after 1: with threshold 0.5 the assistant
    # stops drafting right after proposing either (ConfidenceCriteria), so a round drafts 1 or 2 tokens by chance.
    # (with scikit-learn installed transformers re-fits the threshold once more than 5 verified drafts are on
    # record, which 5 tokens never give: the threshold here is static either way; the adaptation has its own test)
    def loop(threshold, n):
        def fn(target, draft, ids):
            _drafting(draft, 2, threshold=threshold)
            return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=n)
        return fn
    kw = dict(target=P2, draft=Q2, kind="transformers", tolerance=FLOAT32, rng_model="continuous")
    t0 = time.perf_counter()
    r = audit_loop(loop(0.5, 5), tokens=5, **kw)
    _record("assisted sampling, assistant_confidence_threshold 0.5, gamma 2, 5 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and _forced_float32(r)
    # the threshold acted: on 3 tokens the expected number of target calls differs from the run without it
    on, off = (audit_loop(loop(t, 3), tokens=3, **kw) for t in (0.5, 0))
    assert on.verdict == off.verdict == "lossless" and on.target_calls != off.target_calls


def _ensemble_law(p, q, w, gamma: int, tokens: int, prompt: tuple = (0,)) -> dict:
    """By hand, the law of ``tokens`` tokens of transformers' ensemble verification (max_new_tokens = tokens).

    At a drafted position the token follows the declared mixture ``v = w*p + (1-w)*q``: the draft x ~ q is kept
    with probability min(1, v(x)/q(x)), i.e. mass min(q, v)(x), else the residual (v - q)+ ~ (p - q)+ gives mass
    v(x) - min(q, v)(x). After ``gamma`` kept drafts the bonus token is drawn from ``p``; a round is capped at
    ``remaining - 1`` drafts, and a round with none (one token left) samples ``p`` too. A kept draft continues the
    round; a residual or a bonus token ends it.
    """
    v = es.models.mixture([p, q], [w, 1 - w])

    def law(ctx, k, n):         # k drafts left in this round (0: the next token is from p), n tokens to go
        if n == 0:
            return {(): F(1)}
        out: dict = {}
        for x in range(p.vocab):
            if k == 0:
                parts = [(p(ctx)[x], min(gamma, n - 2))]
            else:
                kept = min(q(ctx)[x], v(ctx)[x])
                parts = [(kept, k - 1), (v(ctx)[x] - kept, min(gamma, n - 2))]
            for mass, nxt in parts:
                if mass:
                    for seq, m in law(ctx + (x,), nxt, n - 1).items():
                        out[(x,) + seq] = out.get((x,) + seq, F(0)) + mass * m
        return out
    return law(prompt, min(gamma, tokens - 1), tokens)


@pytest.mark.parametrize("gamma, tokens, tv", [
    pytest.param(1, 4, F(169631, 1166400), id="gamma 1"),
    pytest.param(2, 5, F(101428481, 839808000), id="gamma 2", marks=pytest.mark.slow),
])
def test_option_assistant_ensemble_weight_is_not_its_declared_mixture(gamma, tokens, tv):
    # transformers documents assistant_ensemble_weight=w as verification "against the mixture w*p_target +
    # (1-w)*q_draft instead of p_target" (GenerationConfig docstring; _speculative_sampling: "relaxes the
    # verification distribution to v(x) = w*p(x) + (1-w)*q(x)"): the declared law is v at every token. It holds at
    # drafted positions only: after a fully accepted draft the bonus token, and a round with no draft, are sampled
    # from p (_speculative_sampling: p_prime = p_n_plus_1 when n_matches == gamma), so the law of the output depends
    # on num_assistant_tokens, the schedule, the confidence threshold and max_new_tokens.
    w = F(1, 2)
    mixture = es.models.mixture([P2, Q2], [w, 1 - w])

    def fn(target, draft, ids):
        _drafting(draft, gamma)
        return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=tokens,
                               assistant_ensemble_weight=float(w))
    t0 = time.perf_counter()
    r = audit_loop(fn, target=P2, draft=Q2, kind="transformers", tokens=tokens, expected=mixture, tolerance=FLOAT32)
    _record(f"assistant_ensemble_weight 0.5, gamma {gamma}, {tokens} tokens, against the declared mixture", r, t0)
    by_hand = _ensemble_law(P2, Q2, w, gamma, tokens)
    assert total_variation(by_hand, r.expected) == tv                  # the exact TV, by hand
    observe("transformers-ensemble-bonus", r.verdict, tv_text(tv) if abs(r.tv - tv) <= FLOAT32 else tv_text(r.tv),
            instance=f"gamma {gamma}", measured=float(r.tv))
    # and the law is not w's alone: drafting 3 - gamma tokens instead gives another law on the same horizon
    assert total_variation(by_hand, _ensemble_law(P2, Q2, w, 3 - gamma, tokens)) == {4: F(1457, 12960),
                                                                                   5: F(57173, 388800)}[tokens]
    # the audit: biased, and algorithmic (the float64 run lands on the by-hand TV up to float32 rounding)
    assert r.verdict == "biased" and _forced_float32(r)
    assert abs(F(r.extra["tv_float64"]) - tv) <= FLOAT32 and abs(r.tv - tv) <= FLOAT32
    assert total_variation(r.output, by_hand) <= FLOAT32
    # the first token does follow the mixture (a drafted position on every branch)
    first = {}
    for seq, m in r.output.items():
        first[seq[0]] = first.get(seq[0], F(0)) + m
    assert max(abs(first[x] - mixture((0,))[x]) for x in range(2)) <= FLOAT32


def test_option_assistant_ensemble_weight_greedy_takes_the_bonus_from_the_target():
    # greedy with an ensemble weight: a drafted position is checked against argmax(v), the bonus against argmax(p)
    # (_assisted_decoding: "For the bonus token position (candidate_length), use target distribution")
    p, q = P3, es.models.random_table(vocab=3, order=1, seed=12)
    v = es.models.mixture([p, q], [F(1, 2), F(1, 2)])
    assert (argmax(q((0,))), argmax(v((0,))), argmax(q((1,))), argmax(v((1,))), argmax(p((1,)))) == (0, 1, 1, 1, 0)
    # by hand: round 1 drafts 0, argmax v = 1 rejects it and emits 1; round 2 (capped at 1 draft) drafts 1 = argmax v,
    # kept, and the bonus is argmax p = 0. Greedy on v would give (1, 1, 1), greedy on p (1, 0, 1)
    assert [v((0,)), v((1,))] == [(F(21, 68), F(71, 204), F(35, 102)), (F(17, 52), F(49, 117), F(119, 468))]

    def fn(target, draft, ids):
        _drafting(draft, 1)
        return target.generate(ids, assistant_model=draft, do_sample=False, max_new_tokens=3,
                               assistant_ensemble_weight=0.5)
    t0 = time.perf_counter()
    r = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=3, expected=_greedy(v), tolerance=0)
    _record("assistant_ensemble_weight 0.5, greedy, against greedy on the mixture", r, t0)
    emitted, = r.output if len(r.output) == 1 else (None,)
    observe("transformers-ensemble-bonus", r.verdict, f"{tv_text(r.tv)} (emits {emitted})", instance="greedy")
    assert r.paths == 1 and r.output == {(1, 1, 0): 1} and r.verdict == "biased" and r.tv == 1


@pytest.mark.slow
def test_option_sampling_settings_of_the_assistant_are_ignored_except_those_the_target_leaves_unset():
    # the candidate generator calls assistant.generate(generation_config=<a copy of the target's, defaults filled>),
    # and generate fills only the None fields from the assistant's own generation_config (_prepare_generation_config,
    # update(..., defaults_only=True)): the assistant's temperature, top_k, top_p and do_sample are overridden by the
    # target's, while a field the target leaves None (min_p) is taken from the assistant and shapes the drafts
    def loop(**assistant):
        def fn(target, draft, ids):
            _drafting(draft, 1)
            for k, val in assistant.items():
                setattr(draft.generation_config, k, val)
            return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=4)
        return fn
    kw = dict(target=P3, draft=Q3, kind="transformers", tokens=4, tolerance=FLOAT32, rng_model="continuous")
    t0 = time.perf_counter()
    plain = audit_loop(loop(), **kw)
    ignored = audit_loop(loop(temperature=0.5, top_k=1, top_p=0.5, do_sample=False), **kw)
    min_p = audit_loop(loop(min_p=0.5), **kw)
    _record("assisted sampling, the assistant's own temperature 0.5 / top_k 1 / top_p 0.5 / do_sample False", ignored, t0)
    _record("assisted sampling, the assistant's own min_p 0.5", min_p, t0)
    for r in (plain, ignored, min_p):
        _lossless(r, "transformers-options")
        assert r.verdict == "lossless" and r.tv <= FLOAT32 and _forced_float32(r)
    # ignored: the same branches to the last one (the same law, the same expected target calls, exactly)
    assert ignored.output == plain.output and ignored.target_calls == plain.target_calls
    # min_p is applied to the drafts (fewer branches, other acceptance) and the verifier is told the truncated q
    assert min_p.paths < plain.paths and min_p.target_calls != plain.target_calls


def test_option_temperature_top_k_top_p_over_a_second_round():
    # the target's settings, applied by its logits processors to both sides (the assistant inherits them)
    warped = es.models.from_function(vocab=3, order=1, fn=lambda c: _topp(_topk(es.models.sharpen(P3, 2)(c), 2),
                                                                       F(4, 5)))
    assert any(0 in warped((c,)) for c in range(3))

    def fn(target, draft, ids):
        _drafting(draft, 1)
        return target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=4, temperature=0.5,
                               top_k=2, top_p=0.8)
    t0 = time.perf_counter()
    r = audit_loop(fn, target=P3, draft=Q3, kind="transformers", tokens=4, expected=warped, tolerance=FLOAT32,
                   rng_model="continuous")
    _record("assisted sampling, temperature 0.5 + top_k 2 + top_p 0.8, gamma 1, 4 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and _forced_float32(r)
    _zero_draw_accepts_truncated_tokens(fn, P3, Q3, 4, warped)


@pytest.mark.slow
def test_option_prompt_lookup_over_a_second_round():
    # candidates copied from the context (no draft law): the target samples every position and keeps the candidates
    # up to the first mismatch (_assisted_decoding, case 2: no uniform compared with p/q at all)
    def loop(**warp):
        def fn(target, draft, ids):
            return target.generate(ids, prompt_lookup_num_tokens=2, do_sample=True, max_new_tokens=5, **warp)
        return fn
    t0 = time.perf_counter()
    # vocab 2, the trailing bigram (0, 1) occurs earlier: candidates (1, 0), then again from the new context
    r = audit_loop(loop(), target=P2, prompt=(0, 1, 1, 0, 1), kind="transformers", tokens=5, tolerance=FLOAT32)
    _record("prompt lookup decoding, 2 candidates, 5 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and r.scope["largest_step"] == 3    # 2 candidates kept + 1
    # top-k truncation on torch's float32 grid: no support violation here (a truncated candidate is never selected
    # by multinomial), unlike a draft model's r <= p/q test above
    top2 = es.models.from_function(vocab=3, order=1, fn=lambda c: _topk(P3(c), 2))
    r = audit_loop(loop(top_k=2), target=P3, prompt=(0, 1, 2, 0, 1), kind="transformers", tokens=5, expected=top2,
                   tolerance=FLOAT32)
    _record("prompt lookup decoding, top_k 2, native lattice, 5 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.extra["rng_model"] == "native" and r.verdict == "lossless" and not r.support_violations


@pytest.mark.slow
def test_option_universal_assisted_sampling_over_a_second_round():
    t0 = time.perf_counter()
    r = audit_loop(_uag(["c", "a", "b", "d"], True, tokens=4), target=P_UAG, kind="transformers", tokens=4,
                   tolerance=FLOAT32, rng_model="continuous")
    _record("universal assisted sampling, get_vocab() in id order, 4 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and r.scope["largest_step"] == 2


@pytest.mark.slow
def test_option_adaptive_confidence_threshold_over_the_round_after_it_adapts(monkeypatch):
    # With scikit-learn installed, AssistedCandidateGenerator.update_candidate_strategy re-fits the assistant's
    # confidence threshold from an ROC curve of its drafts' probabilities once more than 5 verified drafts, kept and
    # rejected, are on record. Here the assistant drafts 6 tokens from a point mass after 0 (probability 1): a first
    # round with its 6th draft rejected (or 5 kept and a residual) is such a record; the threshold moves from 0.4 to
    # 1.0, and in the next round a draft of probability 1/2 after 1 stops the draft (0.4 would not). The law stays
    # the target's: the draft length is chosen from what was drafted before, never from the token it decides on.
    _published("sklearn.metrics")          # tests/published.txt; a skip where it is not installed
    from transformers.generation import stopping_criteria
    p = es.models.table(vocab=2, order=1, table={(0,): ("3/4", "1/4"), (1,): ("1/2", "1/2")})
    q = es.models.table(vocab=2, order=1, table={(0,): (1, 0), (1,): ("1/2", "1/2")})
    stops, after = set(), set()
    confidence = stopping_criteria.ConfidenceCriteria.__call__

    def recorded(self, input_ids, scores, **kw):     # observes transformers' own criterion, changes nothing
        stopped = confidence(self, input_ids, scores, **kw)
        stops.add((float(self.assistant_confidence_threshold), bool(stopped)))
        return stopped
    monkeypatch.setattr(stopping_criteria.ConfidenceCriteria, "__call__", recorded)

    def fn(target, draft, ids):
        draft.generation_config.num_assistant_tokens = 6      # the threshold left at its default (0.4)
        out = target.generate(ids, assistant_model=draft, do_sample=True, max_new_tokens=9)
        after.add(draft.generation_config.assistant_confidence_threshold)
        return out
    t0 = time.perf_counter()
    r = audit_loop(fn, target=p, draft=q, kind="transformers", tokens=9, tolerance=FLOAT32, rng_model="continuous",
                   workers=None)     # stops and after are filled by the branches: all of them in this process
    _record("assisted sampling, adaptive confidence threshold (scikit-learn), gamma 6, 9 tokens", r, t0)
    _lossless(r, "transformers-options")
    assert r.verdict == "lossless" and r.tv <= FLOAT32 and _forced_float32(r)
    assert (1.0, True) in stops and (0.4, True) not in stops    # adapted, and the adapted threshold stopped a draft
    # the docs call the threshold "persistent over multiple generation calls"; 5.24.0 adapts a copy of the
    # assistant's generation_config (candidate_generator.py: copy.deepcopy), so nothing persists
    assert after == {None}
