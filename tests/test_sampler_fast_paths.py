"""The sampler audit and search give the laws and verdicts of the older paths (before issue 17), exactly.

The older paths (issue 36 deleted them; ``tests/old_paths.py`` holds what they returned here) drew the vLLM
adapter's bonus token before the call (not when read), patched the random functions per audit (not once per
search), built the chain arrays and numpy ``choice``'s cumulative sums on every call. Every report
must agree on its law (``==`` on exact Fractions), its verdict, its TVs and its float-boundary
decision; only the counts of sampler calls and branches may differ. The numpy samplers' laws are also
checked against the plain eager enumeration of ``benchmarks/plain_samplers.py``, the vLLM-style torch samplers'
against that of ``benchmarks/plain_torch.py``.
"""

from __future__ import annotations

import os

import pytest

import exactspec as es
from exactspec.bugzoo import float32_samplers as f32
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance

import old_paths
from benchmarks.plain_samplers import plain_sampler_law

torch = pytest.importorskip("torch")

from exactspec.bugzoo import torch_samplers as tz  # noqa: E402
from exactspec.samplers.adapters.torch_adapters import VllmChainAdapter  # noqa: E402
from benchmarks.plain_torch import plain_transformers_sampler_law, plain_vllm_sampler_law  # noqa: E402

#: what may differ between the paths: how much work was done
_WORK = ("sampler_calls", "cached_calls", "float64_sampler_calls", "float64_cached_calls")


def _both(sampler, **kw):
    new = es.audit_sampler(sampler, **kw)
    old = old_paths.recorded("sampler", lambda: es.audit_sampler(sampler, **kw))
    return new, old


def _same(new, old):
    assert new.output == old.output                      # the same exact law
    assert new.expected == old.expected and new.tv == old.tv and new.verdict == old.verdict
    assert new.tolerance == old.tolerance and new.undecided == old.undecided
    a = {k: v for k, v in new.extra.items() if k not in _WORK}
    b = {k: v for k, v in old.extra.items() if k not in _WORK}
    # irrational race weights rounded to 320 bits: the same kinds, counted once per call made
    assert set(a.pop("approximations", ())) == set(b.pop("approximations", ()))
    assert a == b                                        # float boundary, algorithmic TV, float64 run, rng, ...


SMALL = make_instance(vocab=3, order=1, gamma=2, tokens=3)
KW = dict(target=SMALL.target, draft=SMALL.draft, proposer=SMALL.proposer, prompt=SMALL.prompt, tokens=SMALL.tokens)
#: a target with zeros: the bugs that live on u == 0 or on a zero residual show
ZEROS = dict(target=es.models.context_free(("1/2", "1/2", "0")), draft=es.models.context_free(("1/3", "1/3", "1/3")),
             proposer=es.drafts.chain(2), tokens=3)


@pytest.mark.parametrize("sampler", [zoo.correct, zoo.shared_uniform, zoo.tiny_clamp, zoo.accept_at_zero])
@pytest.mark.parametrize("where", ["table", "zeros"])
def test_numpy_samplers_same_law_on_both_paths(sampler, where):
    kw = KW if where == "table" else ZEROS
    new, old = _both(sampler, **kw)
    _same(new, old)
    assert new.output == plain_sampler_law(sampler, kw["target"], kw["draft"], gamma=kw["proposer"].gamma,
                                           prompt=tuple(kw.get("prompt", ())), tokens=kw["tokens"])


@pytest.mark.parametrize("sampler", [tz.correct, tz.tiny_clamp, tz.resample_target, tz.ratio_not_below_uniform,
                                     tz.searchsorted_left, f32.gumbel_residual, f32.topk_multinomial,
                                     f32.cumprod_acceptance, f32.residual_epsilon])
def test_vllm_samplers_same_law_on_both_paths(sampler):
    for kw in (KW, ZEROS):
        new, old = _both(sampler, adapter="vllm", reference=False, **kw)
        _same(new, old)


#: the vLLM-style samplers whose draws the plain torch reference follows (gumbel_residual races log-uniforms: refused
#: by it, tests/test_plain_torch.py)
PLAIN_VLLM = [tz.correct, tz.tiny_clamp, tz.resample_target, tz.ratio_not_below_uniform, tz.searchsorted_left,
              f32.topk_multinomial, f32.cumprod_acceptance, f32.residual_epsilon]


def _plain_vllm(sampler, kw):
    return plain_vllm_sampler_law(sampler, kw["target"], kw["draft"], gamma=kw["proposer"].gamma,
                                  prompt=tuple(kw.get("prompt", ())), tokens=kw["tokens"])


@pytest.mark.parametrize("sampler", PLAIN_VLLM)
def test_vllm_samplers_equal_the_plain_torch_reference(sampler):
    kw = dict(ZEROS, tokens=2)
    assert es.audit_sampler(sampler, adapter="vllm", reference=False, **kw).output == _plain_vllm(sampler, kw)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", PLAIN_VLLM)
def test_vllm_samplers_equal_the_plain_torch_reference_on_order_1_tables(sampler):
    kw = dict(KW, tokens=2)
    assert es.audit_sampler(sampler, adapter="vllm", reference=False, **kw).output == _plain_vllm(sampler, kw)


def test_transformers_samplers_equal_the_plain_torch_reference():
    from exactspec.samplers.adapters.torch_adapters import reference_transformers_style
    samplers = [reference_transformers_style]
    try:
        from transformers.generation.utils import _speculative_sampling
        samplers.append(_speculative_sampling)
    except ImportError:
        if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
            raise
    kw = dict(KW, tokens=2)
    for sampler in samplers:
        r = es.audit_sampler(sampler, adapter="transformers", reference=False, **kw)
        assert r.output == plain_transformers_sampler_law(sampler, kw["target"], kw["draft"], gamma=2,
                                                          prompt=tuple(kw["prompt"]), tokens=2)


def test_the_lazy_bonus_runs_fewer_calls_and_finds_the_same_bias():
    new, old = _both(tz.resample_target, adapter="vllm", reference=False, **KW)
    _same(new, old)
    assert new.verdict == "biased"
    assert new.extra["sampler_calls"] < old.extra["sampler_calls"]


@pytest.mark.parametrize("sampler", [tz.correct, tz.ratio_not_below_uniform])
def test_batched_rows_same_law_on_both_paths(sampler):
    for row in (0, 1):
        new, old = _both(sampler, adapter=VllmChainAdapter(batch=2, row=row), reference=False, **ZEROS)
        _same(new, old)


def test_transformers_float32_samplers_same_law_on_both_paths():
    for sampler in (f32.nan_to_num_logits, f32.bonus_from_first_position):
        new, old = _both(sampler, adapter="transformers", reference=False, target=SMALL.target, draft=SMALL.draft,
                         proposer=es.drafts.chain(2), prompt=SMALL.prompt, tokens=2)
        _same(new, old)


def test_a_crash_is_recorded_alike():
    def crashes_on_rejection(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        out = tz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
        if int((out >= 0).sum()) <= draft_token_ids.shape[1]:
            raise ValueError("rejected")
        return out
    new, old = _both(crashes_on_rejection, adapter="vllm", reference=False, on_error="record", **ZEROS)
    _same(new, old)
    assert new.extra["error_probability"] == old.extra["error_probability"] != "0"


def _search_same(sampler, **kw):
    space = es.counterexamples.Space(vocabs=(2, 3), shapes=((1,), (2,)), tokens=(2, 3), random_points=2,
                                     exhaustive_denominator=2, exhaustive_limit=3)
    new = es.samplers.search_sampler(sampler, space=space, progress=False, **kw)
    old = old_paths.recorded("sampler", lambda: es.samplers.search_sampler(sampler, space=space, progress=False, **kw))
    assert type(new).__name__ == old.type and new.audited == old.audited
    if isinstance(new, es.counterexamples.Counterexample):
        assert new.instance == old.instance and new.tv == old.tv and new.output == old.output
        assert new.kind == old.kind and new.extra == old.extra
    return new


def test_searches_agree_on_both_paths():
    assert not _search_same(zoo.correct)
    assert _search_same(zoo.accept_at_zero).kind == "sampler"
    assert not _search_same(tz.correct, adapter="vllm")
    assert _search_same(tz.ratio_not_below_uniform, adapter="vllm").kind == "sampler"


def test_the_lattice_cut_in_integers_is_the_fraction_formula():
    import math
    import random
    from fractions import Fraction as F

    from exactspec.enumerate.rng import LATTICES
    rnd = random.Random(17)
    values = [F(0), F(1), F(-1, 3), 1, 0, -2, F(1, 2 ** 24), F(1, 2 ** 53), F(2 ** 53 - 1, 2 ** 53), F(3, 2 ** 25)]
    values += [F(rnd.randrange(-10 ** 9, 10 ** 9), rnd.randrange(1, 10 ** 9)) for _ in range(300)]
    values += [F(rnd.random()) for _ in range(300)]        # floats' exact rationals, as samplers compare with
    for name in ("torch-float32", "float64", "curand"):
        lat = LATTICES[name]
        for t in values:
            kt = (F(t) - lat.offset) / lat.step
            for strict in (True, False):
                assert lat.cut(t, strict) == ((math.ceil(kt) - 1) if strict else math.floor(kt)), (name, t, strict)
