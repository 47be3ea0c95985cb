"""The watch over torch operations that sees a coarser dtype meeting float64 data (precision_watch)."""

import pytest

torch = pytest.importorskip("torch")

from exactspec.samplers.randomness.precision_watch import (  # noqa: E402
    coarse_meeting_float64, suspended, unwatched, watching)

X64 = torch.tensor([0.25, 0.75], dtype=torch.float64)


def _seen(fn):
    seen = []
    with watching(seen.append):
        fn()
    return sorted(set(seen))


def test_casts_down_and_back_up_are_seen():
    assert _seen(lambda: X64.float()) == ["float32"]
    assert _seen(lambda: X64.to(torch.bfloat16)) == ["bfloat16"]
    assert _seen(lambda: torch.tensor([0.5]).double()) == ["float32"]         # a float32 constant cast up
    assert _seen(lambda: torch.softmax(X64, -1, dtype=torch.float16)) == ["float16"]


def test_float64_values_written_into_a_coarser_buffer_or_mixed_with_one_are_seen():
    def write():
        buf = torch.empty(2)
        buf.copy_(X64)
    assert _seen(write) == ["float32"]
    assert _seen(lambda: X64 * torch.tensor(0.5)) == ["float32"]

    def setitem():
        buf = torch.zeros(2, dtype=torch.float16)
        buf[:] = X64
    assert _seen(setitem) == ["float16"]


def test_float64_only_or_coarse_only_arithmetic_is_not_seen():
    assert _seen(lambda: (X64 * 0.5).softmax(-1)) == []
    assert _seen(lambda: torch.zeros(3) + 1) == []                 # a float32 counter that never meets float64
    assert _seen(lambda: torch.arange(3) + X64.sum()) == []        # integers are not a coarser float
    assert coarse_meeting_float64((X64,), {"out": torch.empty(2)}, None) == ["float32"]


def test_a_suspended_block_and_an_unwatched_function_are_left_out():
    def inside():
        with suspended():
            X64.float()
    assert _seen(inside) == []
    assert _seen(lambda: unwatched(lambda: X64.float())()) == []
    assert _seen(lambda: (unwatched(lambda: None)(), X64.float())) == ["float32"]    # the watch resumes after


def test_no_watch_outside_the_block():
    seen = []
    with watching(seen.append):
        pass
    X64.float()
    assert seen == []


def test_the_draws_own_tensors_are_the_generator_models_not_the_codes():
    # a float32 torch.rand compared with float64 ratios: the uniforms' precision is the rng model's (a float64 run
    # draws them on float64's lattice), so the comparison is no sign of the code computing in float32
    import exactspec as es

    def chain64(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        from exactspec.bugzoo.torch_samplers import chain

        def recover(p, q):
            r = torch.clamp(p - q, min=0) + 1e-9          # a tiny bias: the verdict stays biased, after the rerun
            return torch.multinomial(r / r.sum(), 1)[0]
        return chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)
    p = es.models.context_free(("1/3", "1/3", "1/3"))
    q = es.models.context_free(("1/6", "1/2", "1/3"))
    r = es.audit_sampler(chain64, adapter="vllm", target=p, draft=q, proposer=es.drafts.chain(1), tokens=1)
    assert r.verdict == "biased" and r.extra.get("forced_precision") is None


# -- lifting: the audited code's casts made float64 (issue 35) ----------------------------------------------------------
from exactspec.samplers.randomness.precision_watch import lifting  # noqa: E402


def test_lifting_makes_every_cast_to_a_coarser_float_dtype_float64_and_says_where():
    lifted = []
    with lifting(lambda p, site: lifted.append((p, site))):
        out = [X64.float(), X64.half(), X64.bfloat16(), X64.to(torch.float32), X64.to("cpu", torch.float16),
               X64.type(torch.float32), torch.softmax(X64, -1, dtype=torch.float32), torch.zeros(2),
               torch.tensor([0.5]), torch.full((2,), 0.3), X64.to(torch.tensor([1.0], dtype=torch.float16))]
    assert [t.dtype for t in out] == [torch.float64] * len(out)
    assert {p for p, _ in lifted} == {"float32", "float16", "bfloat16"}
    assert all(site.startswith(__file__ + ":") for _, site in lifted)
    assert X64.float().dtype == torch.float32                 # nothing outside the block is lifted


def test_lifting_leaves_integers_and_float64_alone_and_never_draws_twice():
    with lifting():
        assert torch.arange(3).dtype == torch.int64 and (X64 * 2).dtype == torch.float64
        g = torch.Generator().manual_seed(0)
        before = g.get_state().clone()
        torch.rand(2, generator=g)                          # a random factory: not called again at float64
        once = g.get_state().clone()
    g2 = torch.Generator().manual_seed(0)
    torch.rand(2, generator=g2)
    assert not torch.equal(before, once) and torch.equal(once, g2.get_state())


def test_a_numpy_float32_scalar_meeting_float64_is_seen():
    import numpy as np
    sites = {}
    seen = []
    with watching(seen.append, sites):
        X64 / np.float32(0.7)
    assert seen == ["float32"] and sites["float32"].startswith(__file__ + ":")
