"""A pending draw a sampler only copies into its output stays pending: one call stands for all its values (issue 17).

``target[idx] = pending`` into an int64 tensor alone on its storage keeps the draw pending
(``lazy_draws._write_pending``); the adapter hands the engine the last emitted token undrawn
(``lazy_draws.tokens_deferring_last``) and the step enumerator spreads it over its values. A sampler
that reads the draw (compares it, indexes with it, ``.item()``), or writes it and reads it back,
draws it there, as before. Laws are ``==`` to the old path's (``legacy_paths()``), verdicts too.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.enumerate.rng import enumerate_program
from exactspec.fields import get_field

torch = pytest.importorskip("torch")

from test_sampler_fast_paths import KW, ZEROS, _both, _same  # noqa: E402

from exactspec.bugzoo import torch_samplers as tz  # noqa: E402
from exactspec.samplers.randomness import _fast_path
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402,F401  (torch_rng patches torch in audits)
from exactspec.samplers.randomness.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.torch_draws.lazy_draws import LazyCategoricalTensor  # noqa: E402


def _law(program):
    def run(rng):
        with bind(rng):
            return program()
    with intercepting():
        return enumerate_program(run, get_field(backend="python"), exact_floats=True)


def _quarter():
    """A pending draw: 0 with probability 1/4, 1 with 3/4."""
    return torch.multinomial(torch.tensor([0.25, 0.75]), 1)[0]


# -- the write into an output tensor ------------------------------------------------------------------------------

def test_a_copied_draw_stays_pending_and_reads_as_drawn():
    def program():
        out = torch.full((1, 3), -1, dtype=torch.long)
        out[0, :1] = torch.tensor([2])
        out[0, 1] = _quarter()
        assert type(out) is LazyCategoricalTensor      # the write kept it pending
        return tuple(out.tolist()[0])
    assert _law(program) == {(2, 0, -1): F(1, 4), (2, 1, -1): F(3, 4)}


def test_a_draw_written_then_read_back_is_drawn_there():
    def program():                                      # biased on the value: 0 becomes 1
        out = torch.full((2,), -1, dtype=torch.long)
        out[0] = _quarter()
        if out[0] == 0:
            out[0] = 1
        out[1] = 5                                      # a later plain write into the pending output
        return tuple(out.tolist())
    assert _law(program) == {(1, 5): F(1)}


def test_a_view_alive_on_the_output_sees_the_value():
    def program():
        out = torch.full((1, 2), -1, dtype=torch.long)
        row = out[0]                                    # a view: the output is not alone on its storage
        out[0, 0] = _quarter()
        return tuple(row.tolist())
    assert _law(program) == {(0, -1): F(1, 4), (1, -1): F(3, 4)}


def test_two_draws_copied_then_overwritten():
    def program():
        out = torch.full((3,), -1, dtype=torch.long)
        out[0] = _quarter()
        out[1] = _quarter()
        out[0] = 7                                      # the first draw is never read: never drawn
        return tuple(out.tolist())
    assert _law(program) == {(7, 0, -1): F(1, 4), (7, 1, -1): F(3, 4)}


# -- whole audits through the vLLM adapter -------------------------------------------------------------------------

def _copies(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """(a) a correct sampler whose recovered token is ``torch.multinomial`` of the residual, only copied."""
    batch, k, _ = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    ratio = target_probs.gather(-1, idx).squeeze(-1) / draft_probs.gather(-1, idx).squeeze(-1)
    accepted = torch.rand(batch, k) < ratio
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    row = accepted[0].tolist()
    n = row.index(False) if False in row else k
    out[0, :n] = draft_token_ids[0, :n]
    if n == k:
        out[0, k] = bonus_token_ids[0, 0]
    else:
        f = torch.clamp(target_probs[0, n] - draft_probs[0, n], min=0)
        out[0, n] = torch.multinomial(f / f.sum(), 1)[0]
    return out


def _compares(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """(b) reads the draw: a recovered 0 is replaced by 1 (biased on its value)."""
    out = tz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    last = int((out >= 0).sum()) - 1
    if out[0, last] == 0:
        out[0, last] = 1
    return out


def _indexes(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """(b) reads the draw by indexing with it, and by ``.item()``: emits the token after it when its target
    probability is below 0.6 (biased on its value)."""
    out = _copies(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    k = draft_token_ids.shape[1]
    last = int((out >= 0).sum()) - 1
    tok = out[0, last]
    if target_probs[0, min(last, k - 1)][tok] < 0.6:
        out[0, last] = (tok.item() + 1) % target_probs.shape[-1]
    return out


def _writes_then_reads(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """(c) the bonus token written, then read back from the output: a bonus 1 becomes 0 (biased on its value)."""
    batch, k, _ = target_probs.shape
    out = tz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    if out[0, k] == 1:
        out[0, k] = 0
    return out


@pytest.mark.parametrize("sampler", [tz.correct, _copies])
def test_a_copying_sampler_same_law_in_fewer_calls(sampler, monkeypatch):
    for kw in (KW, ZEROS):
        new, old = _both(sampler, adapter="vllm", reference=False, **kw)
        _same(new, old)
        assert new.verdict == "lossless"
        monkeypatch.setattr(_fast_path, "DEFER_LAST", False)      # the fast paths as they were before the deferral
        before = es.audit_sampler(sampler, adapter="vllm", reference=False, **kw)
        monkeypatch.setattr(_fast_path, "DEFER_LAST", True)
        _same(new, before)
        assert new.extra["sampler_calls"] < before.extra["sampler_calls"]   # one call for all values of the last draw


def test_the_transformers_adapter_defers_too(monkeypatch):
    def spec(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        """transformers' shape: the draft kept while accepted, then the residual (or bonus) draw joined by cat."""
        q = candidate_logits.softmax(dim=-1)[0]
        p = new_logits.softmax(dim=-1)[0]
        drafts = candidate_input_ids[0, -candidate_length:]
        for j in range(candidate_length):
            x = int(drafts[j])
            if not torch.rand(1)[0] < p[j, x] / q[j, x]:
                f = torch.clamp(p[j] - q[j], min=0)
                return torch.cat((drafts[:j], torch.multinomial(f / f.sum(), 1)))[None], torch.tensor(j)
        return torch.cat((drafts, torch.multinomial(p[candidate_length], 1)))[None], torch.tensor(candidate_length)
    kw = dict(adapter="transformers", reference=False, target=KW["target"], draft=KW["draft"],
              proposer=es.drafts.chain(2), prompt=KW["prompt"], tokens=2)
    new, old = _both(spec, **kw)
    _same(new, old)
    monkeypatch.setattr(_fast_path, "DEFER_LAST", False)
    before = es.audit_sampler(spec, **kw)
    _same(new, before)
    assert new.extra["sampler_calls"] < before.extra["sampler_calls"]


@pytest.mark.parametrize("sampler", [_compares, _indexes, _writes_then_reads])
def test_a_sampler_reading_the_draw_same_law_and_its_bias_found(sampler):
    for kw in (KW, ZEROS):
        new, old = _both(sampler, adapter="vllm", reference=False, **kw)
        _same(new, old)
    assert new.verdict == "biased"                   # on ZEROS: each bias moves mass
