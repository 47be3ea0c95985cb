"""torch's intercepted draws at float16 and bfloat16 (issue 35), and exactspec's own failures kept apart from the user's.

Every intercepted draw takes half-precision operands: ``multinomial`` (function, method, 1-d and 2-d,
``torch.distributions.Categorical`` with ``probs=`` and ``logits=``), races (``exponential_``, Gumbel
noise from ``rand`` and ``log``), ``rand`` / ``rand_like`` / ``uniform_`` with a half dtype (the
native lattice: a float32 draw rounded to the dtype, 1.0 mapped to 0), ``bernoulli`` in all its
spellings. Each law is asserted exactly against a hand-derived Fraction through ``es.audit_sampler``.

An exception raised in exactspec's own interception code (a bug of exactspec's) is an
:class:`~exactspec.errors.InterceptionError` (exit 2): never a RuleError of the sampler, a recorded
crash or a crash counterexample. The errors the interception raises on purpose, as torch does, stay
the sampler's.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.errors import InterceptionError  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402

CF = es.models.context_free
HALF = [torch.bfloat16, torch.float16]
#: a float32 draw k * 2**-24 rounded to the dtype (ties to even), 1.0 mapped to 0: P(u < 1/4) is 1/4 less the
#: draws that round up to 1/4 (half a spacing below it: 2**-11 bfloat16, 2**-14 float16) plus the 2**-(m + 1) that
#: round to 1.0 (m = 8 and 11 significand bits): 1/4 - 2**-11 + 2**-9 = 1/4 + 3 * 2**-11 for bfloat16
BELOW_QUARTER = {torch.bfloat16: F(1, 4) + 3 * F(1, 2 ** 11), torch.float16: F(1, 4) + 3 * F(1, 2 ** 14)}


def law_of(draw, vocab: int = 2):
    """The exact law of ``draw()`` (a token id) as an audited transformers-style sampler emits it (one token)."""
    def sampler(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return torch.tensor([[int(draw())]]), torch.tensor(0)
    uniform = CF(tuple(F(1, vocab) for _ in range(vocab)))
    r = es.audit_sampler(sampler, adapter="transformers", target=uniform, draft=uniform,
                         proposer=es.drafts.chain(1), tokens=1, reference=False)
    return {k[0]: v for k, v in r.output.items()}


# -- every intercepted draw at half precision ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", HALF)
def test_multinomial_of_half_weights_draws_from_their_exact_law(dtype):
    w = torch.tensor([1.0, 3.0], dtype=dtype)
    quarter = {0: F(1, 4), 1: F(3, 4)}
    assert law_of(lambda: torch.multinomial(w, 1)[0]) == quarter
    assert law_of(lambda: w.multinomial(1)[0]) == quarter
    assert law_of(lambda: torch.multinomial(w[None].repeat(2, 1), 1, replacement=True)[1, 0]) == quarter
    assert law_of(lambda: torch.multinomial(w, 2)[1]) == {0: F(3, 4), 1: F(1, 4)}    # without replacement


@pytest.mark.parametrize("dtype", HALF)
def test_categorical_of_half_probs_and_logits(dtype):
    w = torch.tensor([1.0, 3.0], dtype=dtype)
    assert law_of(lambda: torch.distributions.Categorical(probs=w).sample()) == {0: F(1, 4), 1: F(3, 4)}
    zeros = torch.zeros(4, dtype=dtype)             # softmax of equal logits: exactly 1/4 each at any precision
    assert law_of(lambda: torch.distributions.Categorical(logits=zeros).sample(), 4) == {i: F(1, 4) for i in range(4)}


@pytest.mark.parametrize("dtype", HALF)
def test_races_of_half_weights(dtype):
    w = torch.tensor([1.0, 3.0], dtype=dtype)
    quarter = {0: F(1, 4), 1: F(3, 4)}
    assert law_of(lambda: (w / torch.empty(2, dtype=dtype).exponential_()).argmax()) == quarter
    # the Gumbel spellings of the race on half uniforms: argmax(log(u) / w), argmax(w / -log u) race weights w
    assert law_of(lambda: (torch.log(torch.rand(2, dtype=dtype)) / w).argmax()) == quarter
    assert law_of(lambda: (w / -torch.log(torch.rand_like(w))).argmax()) == quarter
    even = torch.zeros(2, dtype=dtype)               # log-weights 0: Gumbel-max over equal weights
    assert law_of(lambda: (even - torch.log(-torch.log(torch.rand(2, dtype=dtype)))).argmax()) == {0: F(1, 2),
                                                                                                     1: F(1, 2)}


@pytest.mark.parametrize("dtype", HALF)
def test_half_uniforms_follow_the_rounded_lattice(dtype):
    below = BELOW_QUARTER[dtype]
    law = {1: below, 0: 1 - below}
    w = torch.ones(2, dtype=dtype)
    assert law_of(lambda: torch.rand(1, dtype=dtype)[0] < 0.25) == law
    assert law_of(lambda: torch.rand_like(w)[0] < 0.25) == law
    assert law_of(lambda: torch.empty(1, dtype=dtype).uniform_()[0] < 0.25) == law
    assert law_of(lambda: torch.rand(1, dtype=dtype)[0].item() < 0.25) == law
    # rand_like(dtype=float32) draws on float32's lattice, where 1/4 is a lattice point
    assert law_of(lambda: torch.rand_like(w, dtype=torch.float32)[0] < 0.25) == {1: F(1, 4), 0: F(3, 4)}


@pytest.mark.parametrize("dtype", HALF)
def test_bernoulli_of_half_probabilities(dtype):
    p = torch.full((2,), 0.25, dtype=dtype)           # torch's CPU bernoulli compares a float32 uniform
    coin = {1: F(1, 4), 0: F(3, 4)}
    assert law_of(lambda: torch.bernoulli(p)[0]) == coin
    assert law_of(lambda: p.bernoulli()[1]) == coin
    assert law_of(lambda: torch.empty(2, dtype=dtype).bernoulli_(0.25)[0]) == coin
    assert law_of(lambda: torch.empty(2, dtype=dtype).bernoulli_(p)[1]) == coin


def test_a_loop_drafting_with_multinomial_audits_in_bfloat16():
    # issue 35: es.audit_loop(..., dtype=torch.bfloat16) failed for any loop drafting with torch.multinomial
    def loop(target, draft, prompt):
        q = draft(prompt)[0][-1].softmax(-1)
        x = torch.multinomial(q, 1)[None]
        p = target(torch.cat([prompt, x], dim=1))[0][-2:].softmax(-1)
        tok = int(x[0, 0])
        if torch.rand(1) < p[0, tok] / q[tok]:
            return torch.cat([prompt, x, torch.multinomial(p[1], 1)[None]], dim=1)
        resid = torch.clamp(p[0] - q, min=0)
        return torch.cat([prompt, torch.multinomial(resid, 1)[None]], dim=1)
    p, q = es.models.random_table(vocab=3, order=1, seed=5), es.models.random_table(vocab=3, order=1, seed=6)
    for dtype in HALF:
        r = es.audit_loop(loop, target=p, draft=q, prompt=(0,), tokens=1, dtype=dtype)
        assert r.extra["dtype"] == str(dtype).replace("torch.", "")
        assert F(r.extra["tv_float64"]) <= F(1, 2 ** 40)        # the algorithm is exact; half rounding aside
        # and the verdict is held to half precision's rounding, not float32's cap (it read a "precision defect")
        assert r.verdict == "lossless" and r.extra["float_boundary"]["precision"] == str(dtype).replace("torch.", "")


# -- exactspec's own failures are exactspec's -------------------------------------------------------------------

def _vllm_with_multinomial(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """A correct vLLM-style sampler recovering with torch.multinomial."""
    batch, k, _ = target_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if torch.rand(1) < target_probs[b, j, x] / draft_probs[b, j, x]:
                out[b, j] = x
                continue
            resid = torch.clamp(target_probs[b, j] - draft_probs[b, j], min=0)
            out[b, j] = torch.multinomial(resid, 1)[0]
            break
        else:
            out[b, k] = bonus_token_ids[b, 0]
    return out


P3, Q3 = CF(("1/2", "1/4", "1/4")), CF(("1/4", "1/4", "1/2"))


def test_an_exception_in_exactspecs_interception_is_an_interception_error(monkeypatch):
    # a bug of exactspec's own code, as bfloat16's .numpy() was: _multinomial's call of exact_rows raises TypeError
    monkeypatch.setattr(torch_rng, "exact_rows", None)
    kw = dict(adapter="vllm", target=P3, draft=Q3, proposer=es.drafts.chain(1), tokens=1)
    for on_error in ("raise", "record"):                  # never a RuleError, never a recorded crash
        with pytest.raises(InterceptionError) as info:
            es.audit_sampler(_vllm_with_multinomial, on_error=on_error, **kw)
        err = info.value
        assert not isinstance(err, es.RuleError) and isinstance(err, es.UnsupportedRandomness)
        assert err.operation == "torch.multinomial" and err.dtype == "float32" and err.exit_code == 2
        assert str(err).startswith("unsupported: torch.multinomial on float32: TypeError: ")
        assert "test_torch_rng.py" in str(err)            # the sampler's line that made the draw
        assert isinstance(err.__cause__, TypeError)
    # a search stops on it: no crash counterexample against code that runs in plain torch
    with pytest.raises(InterceptionError):
        es.samplers.search_sampler(_vllm_with_multinomial, adapter="vllm", workers=None, max_instances=3)


def test_interception_errors_name_the_method_spelling(monkeypatch):
    monkeypatch.setattr(torch_rng, "exact_rows", None)
    w = torch.tensor([1.0, 3.0], dtype=torch.bfloat16)
    with pytest.raises(InterceptionError, match=r"^unsupported: Tensor.multinomial on bfloat16: TypeError"):
        law_of(lambda: w.multinomial(1)[0])


@pytest.mark.parametrize("draw, message, plain", [
    (lambda: torch.multinomial(torch.ones(1, 1, 2), 1), "prob_dist must be 1 or 2 dim", True),
    (lambda: torch.randint(3, 1, (1,)), "expects 'from' to be less than 'to'", True),
    (lambda: torch.multinomial(torch.tensor([1.0, -1.0]), 1), "invalid multinomial distribution", False),
    (lambda: torch.multinomial(torch.tensor([1.0, 0.0]), 2), "not enough categories", False),
])
def test_errors_the_interception_raises_on_purpose_stay_the_samplers(draw, message, plain):
    with pytest.raises(es.RuleError, match=message) as info:
        law_of(draw)
    assert not isinstance(info.value, InterceptionError) and isinstance(info.value.__cause__, RuntimeError)
    if plain:                                               # plain torch refuses the same call
        with pytest.raises(RuntimeError, match=message), torch.random.fork_rng():
            draw()
