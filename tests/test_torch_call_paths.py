"""The faster per-call paths of torch sampler audits (issue 17) compute exactly what the general paths compute.

A torch sampler runs once per branch of the enumeration, on the same inputs again and again: what a fresh
exponential draw becomes under arithmetic with a float (``p / q.exponential_()``) and the race law of the
same weights are remembered (:func:`~exactspec.samplers.randomness.lazy_values.fresh_op`,
:func:`~exactspec.samplers.randomness.lazy_values.race_law`), the vLLM adapter's input tensors are built once
per input, and ``mask[i]`` with int indices skips the general reshaping path. Expected values are derived by
hand or by the general path (``legacy_paths()``, or the function the shortcut stands for).
"""

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import torch_samplers as tz  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.instances import make_instance  # noqa: E402
from exactspec.samplers.randomness import lazy_values as lv  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402
from exactspec.samplers.randomness._fast_path import legacy_paths  # noqa: E402
from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch  # noqa: E402

FR = get_field(backend="python")
INF = float("inf")


def law_of(program):
    """The exact law of a torch program under the enumerating interception."""
    def run(rng):
        with bind(rng):
            return program()
    with intercept_torch():
        return enumerate_program(run, FR, exact_floats=True)


def params(v):
    return v._form, v._m, v._e


@pytest.mark.parametrize("name", ["__rtruediv__", "__truediv__", "__mul__", "__add__", "__sub__", "__rsub__",
                                  "__pow__"])
@pytest.mark.parametrize("f", [0.25, 3.0, 0.1, -0.5, 0.0, -0.0, 2.0 ** -149, INF, -INF])
def test_fresh_op_gives_what_the_operation_gives(name, f):
    op = torch_rng._RACE_BINARY[name]
    c = torch_rng._num_or_inf(f)

    def direct():
        try:
            return params(op(lv.exponential(None), c))
        except es.errors.UnsupportedRandomness as exc:
            return type(exc)
    want = direct()
    for _ in range(2):                       # computed, then remembered
        v = lv.exponential(None)
        try:
            got = lv.fresh_op(v, name, op, f, c)
        except es.errors.UnsupportedRandomness as exc:
            assert want is type(exc)
            continue
        assert params(got) == want and got._src is v._src     # the draw's own source, never another's


def test_fresh_op_computes_for_a_value_that_is_not_fresh():
    op = torch_rng._RACE_BINARY["__rtruediv__"]
    v = lv.exponential(None) * F(1, 3)            # weight 3: not a fresh draw's parameters
    got = lv.fresh_op(v, "__rtruediv__", op, 0.5, F(1, 2))
    assert params(got) == params(F(1, 2) / (lv.exponential(None) * F(1, 3)))
    assert ("__rtruediv__", 0.5) not in lv._FRESH_OPS or lv._FRESH_OPS[("__rtruediv__", 0.5)] == \
        params(F(1, 2) / lv.exponential(None))


def test_a_remembered_race_law_is_the_computed_one_and_each_rounding_is_counted():
    weights = [(F(1), F(0)), (F(1), F(1, 2)), (F(0), F(0))]     # exp(0) against exp(1/2): rounded to 320 bits
    token = lv.APPROXIMATIONS.set({})
    try:
        first, again = lv.race_law(weights, None), lv.race_law(weights, None)
        counts = lv.APPROXIMATIONS.get()
    finally:
        lv.APPROXIMATIONS.reset(token)
    with legacy_paths():
        assert lv.race_law(weights, None) == first
    assert again is first and first[2] == 0 and sum(first) == 1
    assert counts == {lv._ROUNDED_RACE: 2}                      # once per race, remembered or not


@pytest.mark.parametrize("legacy", [False, True], ids=["fast", "legacy"])
def test_races_over_zeros_signed_zeros_and_infinities(legacy):
    def race(w):
        return lambda: int((torch.tensor(w) / torch.empty(len(w)).exponential_()).argmax())

    def run(w):
        if legacy:
            with legacy_paths():
                return law_of(race(w))
        return law_of(race(w))
    for _ in range(2):                       # the second time from what the first remembered
        assert run([0.5, -0.0, 0.5]) == {0: F(1, 2), 2: F(1, 2)}
        assert run([0.25, 0.0, 0.75]) == {0: F(1, 4), 2: F(3, 4)}
        assert run([1.0, INF, 2.0]) == {1: F(1)}
        assert run([0.125, 0.375]) == {0: F(1, 4), 1: F(3, 4)}


def test_a_mask_row_by_int_index_reads_like_the_mask():
    # u < 1/4 on torch's float32 lattice: probability exactly 1/4 per entry
    def rows():
        m = torch.rand(2, 2) < 0.25
        return tuple(m[1].tolist()), bool(m[0, 1]), bool(m[-1][0])
    law = law_of(rows)
    quarter = {True: F(1, 4), False: F(3, 4)}
    want = {}
    for a in (True, False):
        for b in (True, False):
            for c in (True, False):
                for d in (True, False):     # entries (0,0) (0,1) (1,0) (1,1)
                    k = ((c, d), b, c)
                    want[k] = want.get(k, 0) + quarter[a] * quarter[b] * quarter[c] * quarter[d]
    assert law == want


def test_a_mask_row_by_int_index_is_a_view_of_the_mask():
    def written():
        m = torch.rand(2, 2) < 0.5
        row = m[0]
        row[1] = True                       # a write through the view reaches the mask, as in plain torch
        return bool(m[0, 1])
    assert law_of(written) == {True: F(1)}


@pytest.mark.parametrize("index", [5, -3, (0, 0, 0)])
def test_an_int_index_out_of_range_raises_as_the_general_path_does(index):
    import numpy as np
    cells = np.empty((2, 2), dtype=object)
    with pytest.raises(IndexError) as general:
        torch_rng._reshaped(torch.Tensor.__getitem__, "__getitem__", cells, (None, index), {})

    def program():
        (torch.rand(2, 2) < 0.5)[index]
    with pytest.raises(IndexError) as fast:
        law_of(program)
    assert str(fast.value) == str(general.value)


def test_a_sampler_writing_into_its_inputs_gets_fresh_ones_on_every_call():
    def scribbles(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        out = tz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
        target_probs.zero_()                # the vLLM adapter's inputs are built once per input: copies are handed
        draft_probs.fill_(1.0)
        draft_token_ids.fill_(0)
        return out
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=3)
    kw = dict(adapter="vllm", reference=False, target=inst.target, draft=inst.draft, proposer=inst.proposer,
              prompt=inst.prompt, tokens=inst.tokens)
    assert es.audit_sampler(scribbles, **kw).output == es.audit_sampler(tz.correct, **kw).output


@pytest.mark.parametrize("legacy", [False, True], ids=["fast", "legacy"])
def test_basic_indexing_keeps_pending_draws_pending(legacy):
    runs = [0]

    def program():
        runs[0] += 1
        t = torch.multinomial(torch.tensor([[0.25, 0.75], [0.5, 0.5]]), 3, replacement=True)   # 2 x 3 pending
        picked = t[1, None, ..., 1:]        # ints, None, ..., a slice: row 1, samples 1 and 2, a new first dim
        assert tuple(picked.shape) == (1, 2)
        return int(picked[0, -1]), int(t[0][0])
    if legacy:
        with legacy_paths():
            law = law_of(program)
    else:
        law = law_of(program)
    want = {(a, b): pa * pb for a, pa in ((0, F(1, 2)), (1, F(1, 2))) for b, pb in ((0, F(1, 4)), (1, F(3, 4)))}
    assert law == want
    assert runs[0] == 4                      # two entries read: two forks of two values, the other four never drawn
