"""The whole-loop path of issue 17 gives the identical law, branch count and verdict as the path before it.

The bookkeeping of pending categorical draws reshapes their cells where a reshape keeps the entries' order
and joins them with numpy for ``cat``/``stack``; the path before it (deleted in issue 36) went through index
tensors. The cells are checked against that plain rule here (the same operation applied to a tensor of the
entries' positions), the small programs' laws against laws derived by hand, and whole loops' reports
against what the old path reported (recorded: ``tests/old_paths.py``) and the laws of the ones it follows against
the plain eager enumeration of ``benchmarks/plain_torch.py``. Every comparison is exact.
"""

from __future__ import annotations

import importlib
import os
from fractions import Fraction as F

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import loops as zoo_loops  # noqa: E402
from exactspec.enumerate.rng import PathRng, enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.samplers.torch_draws import lazy_draws  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402,F401  (patches torch inside audits)
from exactspec.samplers.randomness.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop, reference_loop  # noqa: E402

import old_paths  # noqa: E402
from benchmarks.plain_torch import plain_loop_law  # noqa: E402

FIELD = get_field(backend="python")


def _both(run):
    """``run()`` on today's path, and what the old path returned for it (recorded)."""
    new = run()
    return new, old_paths.recorded("loops", run)


def _law(program):
    with intercepting():
        return enumerate_program(program, FIELD, exact_floats=True)


def _by_positions(op, *tensors):
    """The cells ``op(*tensors)`` has by the plain rule: ``op`` applied to tensors of the pending entries' positions
    (tensor ``i``'s entry ``k`` is ``1000 * (i + 1) + k``; ordinary tensors as they are), each position mapped back
    to its cell; an ordinary entry ``v`` as ``("value", v)``."""
    ids, cells = [], {}
    for i, t in enumerate(tensors):
        if isinstance(t, lazy_draws.LazyCategoricalTensor):
            base = 1000 * (i + 1)
            flat = list(t._cells.reshape(-1))
            for k, c in enumerate(flat):
                cells[base + k] = (id(c[0]), c[1])
            ids.append(torch.arange(base, base + len(flat), dtype=torch.int64).reshape(t._cells.shape))
        else:
            ids.append(t)
    out = op(*ids)
    return tuple(out.shape), [cells.get(v, ("value", v)) for v in out.reshape(-1).tolist()]


def _cells_or_values(t):
    """``t``'s entries: a pending one's cell as :func:`_cells` gives it, a drawn one as ``("value", v)``."""
    return [("value", c[0].values()[c[1]]) if c[0].drawn else (id(c[0]), c[1]) for c in t._cells.reshape(-1)]


# -- the two shortcuts, on pending tensors directly ------------------------------------------------------------

def _pending(rng, *laws):
    """One pending draw per law, as a 1-D LazyCategoricalTensor."""
    return lazy_draws.lazy_multinomial(rng, [lazy_draws.exact_row(w) for w in laws], 1, True, (len(laws), 1))


def _cells(t):
    return [(id(c[0]), c[1]) for c in t._cells.reshape(-1)]


@pytest.mark.parametrize("op", [
    lambda t: t.view(-1), lambda t: t.reshape(1, 2, 1), lambda t: t.squeeze(-1), lambda t: t.unsqueeze(0),
    lambda t: t.flatten(), lambda t: t.to(torch.int64), lambda t: t.clone(), lambda t: t.long(), lambda t: t.detach(),
    lambda t: t.contiguous(), lambda t: t.view(2, 1).unflatten(0, (1, 2)), lambda t: t.reshape_as(torch.zeros(1, 2)),
])
def test_an_order_keeping_reshape_gives_the_cells_the_general_path_gives(op):
    rng = PathRng((), 1, FIELD, [], {})
    t = _pending(rng, [1.0, 1.0], [1.0, 3.0])
    new = op(t)
    shape, want = _by_positions(op, t)
    assert isinstance(new, lazy_draws.LazyCategoricalTensor)
    assert tuple(new.shape) == shape and _cells(new) == want
    assert not any(c[0].drawn for c in t._cells.reshape(-1))       # reshaping draws nothing


@pytest.mark.parametrize("op", [
    lambda a, b: torch.cat([a, b]), lambda a, b: torch.cat((a, b), dim=-1), lambda a, b: torch.cat([a, b], 1),
    lambda a, b: torch.stack([a, b]), lambda a, b: torch.stack((a, b), dim=-1),
    lambda a, b: torch.cat([a, torch.tensor([[5], [6]])], dim=1), lambda a, b: torch.cat([torch.tensor([[7, 8]]), b.transpose(0, 1)]),
    lambda a, b: torch.stack([torch.tensor([[0], [4]]), b], 0),
])
def test_a_join_gives_the_cells_the_general_path_gives(op):
    rng = PathRng((), 1, FIELD, [], {})
    a, b = _pending(rng, [1.0, 1.0], [1.0, 3.0]), _pending(rng, [2.0, 1.0], [1.0, 1.0])
    new = op(a, b)
    shape, want = _by_positions(op, a, b)
    assert tuple(new.shape) == shape and _cells_or_values(new) == want
    known = {c[0].values()[0] for c in new._cells.reshape(-1) if c[0].drawn}   # the ordinary entries, known already
    assert known <= {0, 4, 5, 6, 7, 8}


def test_a_join_with_nothing_pending_or_of_other_operands_is_left_to_the_general_path():
    rng = PathRng((), 1, FIELD, [], {})
    a = _pending(rng, [1.0, 1.0])
    lazy_draws.force(a)                                          # read: an ordinary tensor from now on
    assert lazy_draws._join(torch.cat, "cat", ([a, torch.tensor([[1]])],), {}) is None
    b = _pending(rng, [1.0, 1.0])
    assert lazy_draws._join(torch.cat, "cat", ([b, torch.tensor([[0.5]])],), {}) is None    # a float operand
    assert lazy_draws._join(torch.cat, "cat", ([b],), {"out": None}) is None                 # out=
    assert lazy_draws._join(torch.cat, "cat", ([b, torch.tensor([3])],), {}) is None         # ndim differs


# -- whole programs: the same law as the old path and as derived by hand -------------------------------------------

def test_reshaped_and_joined_draws_keep_their_law():
    def program(rng):
        with bind(rng):
            x = torch.multinomial(torch.tensor([1.0, 3.0]), 1).view(1, 1)          # 1/4, 3/4
            y = torch.multinomial(torch.tensor([[1.0, 1.0], [0.0, 1.0]]), 1)     # [[1/2, 1/2], [0, 1]]
            unused = torch.multinomial(torch.tensor([1.0, 1.0, 1.0]), 1)         # never read: no fork
            joined = torch.cat([x, torch.tensor([[2]]), y.flatten().unsqueeze(0)], dim=-1)
            stacked = torch.stack([joined[0], joined[0]]).reshape(-1)
            del unused
            return tuple(stacked.tolist())
    new = _law(program)
    want = {(a, 2, b, 1) * 2: F(1 + 2 * a, 4) * F(1, 2) for a in (0, 1) for b in (0, 1)}
    assert new == want


def test_a_read_through_a_join_draws_once_for_both_views():
    def program(rng):
        with bind(rng):
            x = torch.multinomial(torch.tensor([1.0, 1.0]), 1)
            both = torch.cat([x, x])                       # the same pending draw twice
            return tuple(both.tolist()), int(x)
    new = _law(program)
    assert new == {((0, 0), 0): F(1, 2), ((1, 1), 1): F(1, 2)}


# -- whole loops: the same report on both paths ---------------------------------------------------------------

P3, Q3 = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=4)
P2, Q2 = es.models.random_table(vocab=2, order=1, seed=1), es.models.random_table(vocab=2, order=1, seed=4)


def _same_reports(run):
    """The same law, verdict, TV and float64 figures on both paths; the faster path runs at most as many branches
    (it leaves a pending draw the audit never reads unforked: a token past the horizon, a row it iterates over
    without reading). Returns both reports."""
    new, old = _both(run)
    assert new.output == old.output and new.expected == old.expected
    assert (new.verdict, new.tv) == (old.verdict, old.tv)
    assert new.paths <= old.paths
    for key in ("tv_float64", "algorithmic_tv", "forced_precision"):
        assert new.extra.get(key) == old.extra.get(key)
    assert (new.extra.get("float64_paths") is None) == (old.extra.get("float64_paths") is None)
    assert (new.extra.get("float64_paths") or 0) <= (old.extra.get("float64_paths") or 0)
    return new, old


@pytest.mark.parametrize("loop, verdict", [(zoo_loops.speculative_sampling, "lossless"),
                                           (zoo_loops.bonus_from_draft, "biased")])
def test_the_zoos_loops_read_the_same_on_both_paths(loop, verdict):
    r, _ = _same_reports(lambda: audit_loop(loop, target=P2, draft=Q2, tokens=2))
    assert r.verdict == verdict


@pytest.mark.parametrize("loop", [zoo_loops.speculative_sampling, zoo_loops.bonus_from_draft])
def test_the_zoos_loops_equal_the_plain_torch_reference(loop):
    for tokens in (1, 2):                  # the loops generate 4 tokens whatever the horizon: each branch runs them all
        r = audit_loop(loop, target=P3, draft=Q3, tokens=tokens, progress=False, workers=None)
        assert r.output == plain_loop_law(loop, P3, Q3, tokens=tokens)


def test_a_reference_loop_at_float32_equals_the_plain_torch_reference():
    loop = reference_loop(2, tokens=2)
    r = audit_loop(loop, target=P2, draft=Q2, tokens=2, dtype=torch.float32, progress=False, workers=None)
    assert r.output == plain_loop_law(loop, P2, Q2, tokens=2, dtype=torch.float32)


def test_a_reference_loop_at_float32_reads_the_same_on_both_paths():
    # float32 stand-ins on torch's own generator: two runs (own precision, then float64), both compared
    r, _ = _same_reports(lambda: audit_loop(reference_loop(2, tokens=2), target=P2, draft=Q2, tokens=2,
                                            dtype=torch.float32))
    assert r.verdict == "lossless" and r.extra["float64_paths"] > 0


def _published(module):
    """The module, or None where it is not installed; CI (``EXACTSPEC_REQUIRE_PUBLISHED``) makes that an error."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
            raise
        return None


litgpt_sd = _published("litgpt.generate.speculative_decoding")


@pytest.mark.skipif(litgpt_sd is None, reason="litgpt not installed")
def test_litgpt_generate_reads_the_same_on_both_paths():
    def loop(target, draft, prompt):
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=1,
                                       max_returned_tokens=prompt.shape[1] + 3)
        return tokens
    r, _ = _same_reports(lambda: audit_loop(loop, target=P3, draft=Q3, rng_model="continuous", tokens=2))
    assert r.verdict == "biased"           # litgpt drops the token it samples at prefill (tests/test_recipes_loops.py)


@pytest.mark.slow
@pytest.mark.skipif(litgpt_sd is None, reason="litgpt not installed")
def test_litgpt_generate_equals_the_plain_torch_reference():
    def loop(target, draft, prompt):
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=1,
                                       max_returned_tokens=prompt.shape[1] + 3)
        return tokens
    r = audit_loop(loop, target=P3, draft=Q3, rng_model="continuous", tokens=2, progress=False, workers=None)
    assert r.output == plain_loop_law(loop, P3, Q3, tokens=2, rng_model="continuous")


@pytest.mark.slow
@pytest.mark.skipif(litgpt_sd is None, reason="litgpt not installed")
def test_litgpt_generate_gamma_2_reads_the_same_on_both_paths():
    def loop(target, draft, prompt):
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=2,
                                       max_returned_tokens=prompt.shape[1] + 4)
        return tokens
    r, old = _same_reports(lambda: audit_loop(loop, target=P3, draft=Q3, rng_model="continuous", tokens=3))
    assert r.verdict == "biased" and old.paths == 2061 and r.paths < old.paths


@pytest.mark.slow
@pytest.mark.skipif(_published("transformers") is None, reason="transformers not installed")
def test_transformers_generate_with_an_assistant_reads_the_same_on_both_paths():
    def fn(target, draft, ids):
        draft.generation_config.num_assistant_tokens = 2
        return target.generate(ids, assistant_model=draft, max_new_tokens=3, do_sample=True)
    p, q = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=2)
    r, old = _same_reports(lambda: audit_loop(fn, target=p, draft=q, kind="transformers", tokens=3,
                                              tolerance=F(1, 2 ** 20)))
    assert r.verdict == "lossless" and old.paths == 93 and old.extra["float64_paths"] == 93
    assert r.extra["float64_paths"] == r.paths
    assert r.output == plain_loop_law(fn, p, q, tokens=3, kind="transformers")


# -- the faster dispatch of pending tensors, the stand-ins' shortcuts (issue 17, second round) -------------------

def test_a_join_of_a_read_and_a_pending_draw_gives_the_cells_the_general_path_gives():
    rng = PathRng((), 1, FIELD, [], {})
    a, b = _pending(rng, [1.0, 1.0], [1.0, 3.0]), _pending(rng, [2.0, 1.0], [1.0, 1.0])
    lazy_draws.force(a)                        # read: its entries are known values from now on
    new = torch.cat([a, b], dim=1)
    assert isinstance(new, lazy_draws.LazyCategoricalTensor) and tuple(new.shape) == (2, 2)
    assert [c[0].values()[c[1]] for c in new._cells.reshape(-1)[[0, 2]]] == a.reshape(-1).tolist()
    assert _cells(new)[1::2] == _cells(b)          # b's entries: still the same pending draws
    assert not any(c[0].drawn for c in b._cells.reshape(-1))


def test_a_pick_with_nothing_pending_is_an_ordinary_tensor_on_both_paths():
    rng = PathRng((), 1, FIELD, [], {})
    a, b = _pending(rng, [1.0, 1.0]), _pending(rng, [0.0, 1.0])
    lazy_draws.force(a), lazy_draws.force(b)
    new = torch.cat([a, b, torch.tensor([[5]])])
    assert type(new) is torch.Tensor and new.tolist() == [[a.item()], [1], [5]]


def test_metadata_reads_draw_nothing_and_a_write_through_a_view_draws_the_root_on_both_paths():
    def program(rng):
        with bind(rng):
            x = torch.multinomial(torch.tensor([[1.0, 3.0], [1.0, 1.0]]), 1)     # rows: 1/4, 3/4 and 1/2, 1/2
            v = x[0]
            assert (v.shape, v.dim(), len(v), v.dtype, x.numel()) == ((1,), 1, 1, torch.int64, 2)
            assert not any(c[0].drawn for c in x._cells.reshape(-1))           # metadata only: nothing drawn
            v += 2                                        # a write into a view: the whole storage is drawn first
            return tuple(x.reshape(-1).tolist())
    new = _law(program)
    assert new == {(a + 2, b): F(1 + 2 * a, 4) * F(1, 2) for a in (0, 1) for b in (0, 1)}


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("shape", [(1,), (1, 1)])
def test_one_pending_draw_is_made_as_the_general_path_makes_it(replacement, shape):
    rng = PathRng((), 1, FIELD, [], {})
    row = lazy_draws.exact_row([1.0, 2.0])
    new = lazy_draws.lazy_multinomial(rng, [row], 1, replacement, shape)
    assert new.shape == shape and new._cells.shape == shape
    (dn, sn), = new._cells.reshape(-1)
    # as the general path makes every draw: one PendingDraw of the row's weights and law, one sample, entry 0
    assert (dn.weights, dn.law, dn.count, dn.replacement, sn) == (row[0], row[1], 1, replacement, 0)
    assert dn.rng is rng
    assert new._fam.root is new and not new._read and not dn.drawn


def test_the_interception_tells_whose_draw_it_is_the_same_on_both_paths():
    import sys

    from exactspec.samplers.randomness.interception import _internal
    frame = sys._getframe()
    assert _internal(frame) is False                # a test's own frame, called from pytest: audited code


transformers = _published("transformers")
needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers not installed")


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_the_transformers_stand_in_gives_the_same_logits_on_both_paths(dtype):
    from transformers import DynamicCache

    from exactspec.samplers.loops.hf_stand_in import transformers_stand_in
    m = transformers_stand_in(P3, dtype=dtype)

    def run():
        cache = DynamicCache(config=m.config)
        a = m(torch.tensor([[0, 2]]), past_key_values=cache).logits
        b = m(torch.tensor([[1]]), past_key_values=cache).logits
        c = m(torch.tensor([[2, 1], [0, 0]]), attention_mask=torch.tensor([[1, 1], [0, 1]]), use_cache=False).logits
        return a, b, c
    new, old = _both(run)
    for x, y in zip(new, old):
        assert x.dtype == y.dtype == dtype and torch.equal(x, y)


@needs_transformers
def test_the_transformers_stand_in_runs_hooks_and_replaced_pieces_on_the_faster_path():
    from exactspec.samplers.loops.hf_stand_in import transformers_stand_in
    m = transformers_stand_in(P3, dtype=torch.float64)
    seen = []
    handle = m.lm_head.register_forward_hook(lambda mod, inp, out: seen.append(out.shape) or out * 2)
    try:
        doubled = m(torch.tensor([[0]])).logits
    finally:
        handle.remove()
    assert seen == [(1, 1, 3)] and torch.equal(doubled, 2 * m(torch.tensor([[0]])).logits)
    flipped = torch.nn.Embedding(3, 1, dtype=torch.float64)          # reads id i as 2 - i
    with torch.no_grad():
        flipped.weight.copy_(torch.tensor([[2.0], [1.0], [0.0]]))
    plain = m(torch.tensor([[0, 2]]), use_cache=False).logits
    built = m.get_input_embeddings()
    m.set_input_embeddings(flipped)
    new = m(torch.tensor([[2, 0]]), use_cache=False).logits
    assert torch.equal(new, plain)
    with torch.no_grad():                    # an in-place change of the weight as built is seen too
        m.lm_head.weight.mul_(2)
    m.set_input_embeddings(built)
    assert torch.equal(m(torch.tensor([[0, 2]]), use_cache=False).logits, 2 * plain)


@needs_transformers
def test_reset_restores_the_generation_config_as_a_deep_copy_would():
    import copy
    import math

    from exactspec.samplers.loops import hf_stand_in
    m = hf_stand_in.transformers_stand_in(P3)
    m.reset()
    snapshot = copy.deepcopy(m.generation_config)
    for _ in range(2):
        cfg = m.generation_config
        cfg.num_assistant_tokens, cfg.suppress_tokens, cfg.temperature = 7, [1, 2], -0.0
        cfg.bad_words_ids = [[0], [1, 2]]
        m.reset()
        assert m.generation_config.to_dict() == snapshot.to_dict()
        assert m.generation_config.suppress_tokens is not m._config_snapshot.suppress_tokens or \
            m.generation_config.suppress_tokens is None
    assert not hf_stand_in._same(0.0, -0.0) and not hf_stand_in._same(math.nan, math.nan)
    assert hf_stand_in._same({"a": [1, (2, "x")]}, {"a": [1, (2, "x")]}) and not hf_stand_in._same(1, True)
    assert not hf_stand_in._same({1: 2}, {True: 2}) and not hf_stand_in._same({"a": 1, "b": 2}, {"b": 2, "a": 1})


@needs_transformers
def test_the_stand_ins_forward_signature_is_the_one_inspect_computes():
    import inspect

    from exactspec.samplers.loops import hf_stand_in
    fwd = hf_stand_in.ExactLMForCausalLM.forward
    given = inspect.signature(fwd)
    assert "__signature__" in fwd.__dict__
    saved = fwd.__dict__.pop("__signature__")
    try:
        computed = inspect.signature(fwd)          # what inspect computes without it
    finally:
        fwd.__signature__ = saved
    assert given == computed and "__signature__" in fwd.__dict__


@needs_transformers
def test_transformers_generate_with_an_assistant_reads_the_same_on_both_paths_small():
    def fn(target, draft, ids):
        draft.generation_config.num_assistant_tokens = 1
        return target.generate(ids, assistant_model=draft, max_new_tokens=2, do_sample=True)
    r, _ = _same_reports(lambda: audit_loop(fn, target=P2, draft=Q2, kind="transformers", tokens=2,
                                            tolerance=F(1, 2 ** 20)))
    assert r.verdict == "lossless" and r.paths > 0
