"""Stand-in language models (exactspec.samplers.loops.stand_in): exact laws behind a torch LM interface."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.samplers.loops.stand_in import TorchLM, stand_in  # noqa: E402

# an order-1 table whose laws are powers of two: float64 softmax of their logs is exact
TABLE = {(0,): (F(1, 2), F(1, 4), F(1, 4)), (1,): (F(1, 4), F(1, 2), F(1, 4)), (2,): (F(1, 4), F(1, 4), F(1, 2))}


def order1():
    return es.models.from_function(vocab=3, order=1, fn=lambda c: TABLE[(c[-1],)] if c else (F(1, 2), F(1, 2), 0))


def exact(row):
    """The exact rationals of a float row."""
    return tuple(F(float(x)) for x in row)


def test_logits_are_the_law_at_every_position():
    lm = stand_in(order1(), dtype=torch.float64)
    ids = torch.tensor([[0, 2, 1]])
    logits = lm(ids)
    assert isinstance(lm, torch.nn.Module) and logits.shape == (1, 3, 3) and logits.dtype == torch.float64
    for t, ctx in enumerate([(0,), (0, 2), (0, 2, 1)]):
        assert exact(logits[0, t].softmax(-1)) == TABLE[(ctx[-1],)]
    # a 1-D input is a batch of one; several rows are independent
    assert torch.equal(lm(torch.tensor([0, 2, 1])), logits)
    two = lm(torch.tensor([[0, 2], [1, 1]]))
    assert exact(two[1, 1].softmax(-1)) == TABLE[(1,)]


def test_zero_probability_is_minus_infinity_and_float32_is_the_default():
    m = es.models.context_free((F(1, 2), F(1, 2), 0))
    lm = stand_in(m)
    row = lm(torch.tensor([[0]]))[0, 0]
    assert row.dtype == torch.float32
    assert row[2].item() == float("-inf") and row.softmax(-1)[2].item() == 0.0
    assert exact(row.softmax(-1)) == (F(1, 2), F(1, 2), 0)


def test_cache_arguments_are_accepted_and_ignored_without_input_pos():
    lm = stand_in(order1(), dtype=torch.float64)
    ids = torch.tensor([[1, 0]])
    plain = lm(ids)
    assert torch.equal(lm(ids, past_key_values=None, use_cache=True, cache=object(), seq_start_pos=0,
                          return_dict=False, input_pos_maxp1=7), plain)
    assert torch.equal(lm(input_ids=ids), plain)


def test_input_pos_is_a_kv_cache_of_token_ids():
    lm = stand_in(order1(), dtype=torch.float64)
    lm(torch.tensor([[0, 1]]), input_pos=torch.tensor([0, 1]))          # prefill: positions 0, 1
    out = lm(torch.tensor([[2]]), torch.tensor([2]))                     # litgpt passes input_pos positionally
    assert exact(out[0, 0].softmax(-1)) == TABLE[(2,)]                   # context (0, 1, 2)
    # rewriting position 1 drops the stale entries after it, as a KV cache overwrite does
    out = lm(torch.tensor([[0]]), input_pos=torch.tensor([1]))
    assert exact(out[0, 0].softmax(-1)) == TABLE[(0,)]
    with pytest.raises(es.ExactSpecError, match="positions 2..4 were never written"):
        lm(torch.tensor([[0]]), input_pos=torch.tensor([5]))
    lm.reset()
    with pytest.raises(es.ExactSpecError, match="cache holds only 0 tokens"):
        lm(torch.tensor([[0]]), input_pos=torch.tensor([1]))


def test_forward_passes_are_memoised_and_results_are_fresh_tensors():
    calls = []

    def law(ctx):
        calls.append(ctx)
        return TABLE[(ctx[-1],)]
    lm = stand_in(es.models.from_function(vocab=3, order=1, fn=law), dtype=torch.float64)
    first = lm(torch.tensor([[0, 1, 2, 0]]))
    n = len(calls)
    assert n == 3                                 # the model is asked once per context key (0,), (1,), (2,)
    first[0, 0, 0] = 123.0                        # the caller owns the result: the memo is not touched
    again = lm(torch.tensor([[0, 1, 2, 0]]))
    assert len(calls) == n and again[0, 0, 0].item() != 123.0
    assert lm.total_calls == 2 and lm.calls == 2
    lm.reset()
    assert lm.calls == 0 and lm.total_calls == 2


def test_bad_input_is_a_clear_error():
    m = order1()
    with pytest.raises(es.ExactSpecError, match="token id 3 is outside the vocabulary 0..2"):
        stand_in(m)(torch.tensor([[0, 3]]))
    with pytest.raises(es.ExactSpecError, match=r"shape \[B, T\] or \[T\]"):
        stand_in(m)(torch.zeros((1, 1, 1), dtype=torch.long))
    with pytest.raises(es.ExactSpecError, match="kind must be one of torch-lm, transformers"):
        stand_in(m, kind="keras")
    with pytest.raises(es.ExactSpecError, match="must be an exactspec model"):
        stand_in("gpt2")
    with pytest.raises(es.ExactSpecError, match="floating torch dtype"):
        stand_in(m, dtype=torch.int64)
    with pytest.raises(es.ExactSpecError, match="takes no options"):
        stand_in(m, vocab_size=5)


def test_kind_transformers_dispatches_to_the_transformers_stand_in():
    pytest.importorskip("transformers")
    from transformers import PreTrainedModel
    law = (F(1, 4), F(1, 4), F(1, 2))
    lm = stand_in(es.models.context_free(law), kind="transformers", dtype=torch.float64)
    assert isinstance(lm, PreTrainedModel)
    assert exact(lm(torch.tensor([[1]])).logits[0, -1].softmax(-1)) == law
    assert isinstance(stand_in(es.models.context_free((F(1, 4), F(3, 4)))), TorchLM)
