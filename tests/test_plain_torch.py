"""The plain torch reference of the benchmarks (benchmarks/plain_torch.py): its laws by hand, and what it refuses.

The engine's torch sampler and loop audits are compared with it in tests/test_sampler_fast_paths.py and
tests/test_loop_fast_path.py; here the reference itself is held to laws derived by hand, so that agreement
between the two means something.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import float32_samplers as f32  # noqa: E402
from exactspec.bugzoo import loops as zoo_loops  # noqa: E402
from exactspec.bugzoo import torch_samplers as tz  # noqa: E402

from benchmarks.plain_torch import Unsupported, plain_loop_law, plain_vllm_sampler_law  # noqa: E402

P = es.models.context_free(("3/4", "1/4"))
Q = es.models.context_free(("1/2", "1/2"))
#: a target with a zero: the sampler that accepts at u == 0 emits token 2
ZP = es.models.context_free(("1/2", "1/2", "0"))
ZQ = es.models.context_free(("1/3", "1/3", "1/3"))


def test_a_correct_sampler_has_the_target_law():
    assert plain_vllm_sampler_law(tz.correct, P, Q, gamma=1, tokens=1) == {(0,): F(3, 4), (1,): F(1, 4)}
    # two tokens of a context-free target: the product law
    law = plain_vllm_sampler_law(tz.correct, P, Q, gamma=1, tokens=2)
    assert law == {(a, b): F((3, 1)[a] * (3, 1)[b], 16) for a in (0, 1) for b in (0, 1)}


def test_uniforms_lie_on_torch_s_float32_lattice_zero_included():
    # drafting 2 (1/3) has p/q = 0; `ratio >= u` accepts it iff u == 0, one point of 2**24
    law = plain_vllm_sampler_law(tz.ratio_not_below_uniform, ZP, ZQ, gamma=1, tokens=1)
    assert law[(2,)] == F(1, 3) * F(1, 2 ** 24)
    assert law[(0,)] == law[(1,)] == (1 - law[(2,)]) / 2
    # ideal uniforms: u == 0 has probability 0
    ideal = plain_vllm_sampler_law(tz.ratio_not_below_uniform, ZP, ZQ, gamma=1, tokens=1, rng_model="continuous")
    assert ideal == {(0,): F(1, 2), (1,): F(1, 2)}


def test_a_biased_sampler_s_law_is_the_one_derived_by_hand():
    # resample_target: a rejection draws from p instead of the residual. P(reject) = 1/2 * 1/2 (draft 1, p/q = 1/2),
    # then token 0 with 3/4: P(0) = 1/2 (draft 0 kept) + 1/4 * 3/4
    law = plain_vllm_sampler_law(tz.resample_target, P, Q, gamma=1, tokens=1)
    assert law == {(0,): F(1, 2) + F(3, 16), (1,): F(1, 4) + F(1, 16)}


def test_a_whole_loop_s_law_is_the_one_derived_by_hand():
    # bonus_from_draft, 2 tokens: (0, 0) by draft 0 kept then a bonus 0 from q (1/2 * 1/2), or by draft 1
    # rejected to 0 (1/2 * 1/2) then a fresh step giving 0 (3/4)
    law = plain_loop_law(zoo_loops.bonus_from_draft, P, Q, tokens=2)
    assert law[(0, 0)] == F(1, 4) + F(1, 4) * F(3, 4)
    assert sum(law.values()) == 1


def test_draws_it_does_not_follow_are_refused_not_guessed():
    with pytest.raises(Unsupported, match="log"):
        plain_vllm_sampler_law(f32.gumbel_residual, P, Q, gamma=1, tokens=1)

    def randn_loop(target, draft, prompt):
        return torch.cat([prompt, torch.randn(1).abs().long().view(1, 1)], dim=1)
    with pytest.raises(Unsupported, match="randn"):
        plain_loop_law(randn_loop, P, Q, tokens=1)

    def arithmetic(target, draft, prompt):
        u = torch.rand(1)
        return torch.cat([prompt, ((u * 2) < 1).long().view(1, 1)], dim=1)
    with pytest.raises(Unsupported):
        plain_loop_law(arithmetic, P, Q, tokens=1)


def test_a_draw_that_escapes_the_mode_is_refused():
    def numpy_inside(target, draft, prompt):
        return torch.cat([prompt, torch.tensor([[int(np.random.random() < 0.5)]])], dim=1)
    with pytest.raises(Unsupported, match="escaped"):
        plain_loop_law(numpy_inside, P, Q, tokens=1)


def test_code_that_catches_every_exception_is_still_enumerated():
    def guarded(target, draft, prompt):
        try:
            t = torch.multinomial(torch.tensor([0.25, 0.75]), 1)
        except Exception:                    # noqa: BLE001 - the point: the reference's fork must pass through
            t = torch.tensor([0])
        return torch.cat([prompt, t.view(1, 1)], dim=1)
    assert plain_loop_law(guarded, P, Q, tokens=1) == {(0,): F(1, 4), (1,): F(3, 4)}


def test_searchsorted_left_and_right_split_at_the_boundaries():
    def inverse_cdf(right):
        def loop(target, draft, prompt):
            cdf = torch.tensor([0.0, 0.5, 1.0])      # token 0 has probability 0
            return torch.cat([prompt, torch.searchsorted(cdf, torch.rand(1), right=right).view(1, 1)], dim=1)
        return loop
    # left, the first j with u <= cdf[j]: u == 0 lands on index 0 (the zero-probability token), 0 < u <= 1/2 on 1
    # (k = 1 .. 2**23), the rest on 2 (k = 2**23 + 1 .. 2**24 - 1)
    assert plain_loop_law(inverse_cdf(False), P, Q, tokens=1) == {
        (0,): F(1, 2 ** 24), (1,): F(1, 2), (2,): F(2 ** 23 - 1, 2 ** 24)}
    assert plain_loop_law(inverse_cdf(True), P, Q, tokens=1) == {(1,): F(1, 2), (2,): F(1, 2)}


def test_an_exponential_race_in_statement_form_is_followed():
    def loop(target, draft, prompt):
        w = torch.tensor([1.0, 3.0])
        e = torch.empty_like(w)
        e.exponential_()                          # in place, as a statement
        return torch.cat([prompt, (w / e).argmax().view(1, 1)], dim=1)
    assert plain_loop_law(loop, P, Q, tokens=1) == {(0,): F(1, 4), (1,): F(3, 4)}

    def other_use(target, draft, prompt):
        e = torch.empty(2)
        e.exponential_()
        return torch.cat([prompt, e.argmin().view(1, 1)], dim=1)
    with pytest.raises(Unsupported, match="exponential_"):
        plain_loop_law(other_use, P, Q, tokens=1)
