"""Deferred reads never change what a whole-loop audit reports; only its branch count.

The torch-lm stand-ins read no pending token they are fed: their logits become lazy values of the pending draws, kept lazy through torch operations until
Python reads a value. That must be invisible in the report. Each case below is a small, hostile generation loop
(written here, vocab 3, 2-3 tokens) that feeds sampled tokens back into the stand-ins and then does something a
lazy-logits layer could get wrong: views followed by in-place writes, ``out=`` arguments, top-k / top-p
filtering, greedy decoding, branches on logit values, exceptions that depend on a token, sampling without
replacement, batches, Gumbel-max and exponential races, logits kept across steps, in-place writes into the ids,
order-2 and context-free models, and speculative decoding, correct and subtly wrong.

:func:`_both` audits each loop and compares it with the report of the path before deferred reads (the stand-ins
reading every token they are fed; deleted in issue 36, its reports recorded: ``tests/old_paths.py``), exactly:
the same law (``==`` on the Fraction dicts), the same verdict and TV, no more branches than that path, and,
where the audit raises, the same exception type and message both ways. :func:`_joint_both` compares the same
way with the path that took pending draws one at a time (before :mod:`~exactspec.samplers.randomness.joint_draws`).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.samplers.randomness import joint_draws  # noqa: E402

import old_paths  # noqa: E402

P1 = es.models.random_table(vocab=3, order=1, seed=1)       # target, order 1
Q1 = es.models.random_table(vocab=3, order=1, seed=2)       # draft, order 1
P2 = es.models.random_table(vocab=3, order=2, seed=3)       # order 2 (a context of two tokens)
CF = es.models.context_free(("1/4", "1/4", "1/2"))           # context-free
NEG = float("-inf")


def _audit(fn, kw):
    """(the report, None) of auditing ``fn``, or (None, (the exception's type name, its message)) where it raised."""
    try:
        return es.audit_loop(fn, workers=None, progress=False, **{"rng_model": "continuous", **kw}), None
    except Exception as exc:  # noqa: BLE001  (compared below, both ways)
        return None, (type(exc).__name__, str(exc))


def _both(fn, **kw):
    """Audit ``fn``; assert the report agrees with the path before deferred reads. Returns (report, report before)."""
    return _agree(_audit(fn, kw), old_paths.recorded("reads", lambda: _audit(fn, kw)))


def _agree(new, old):
    """Assert ``new`` and ``old`` (each ``(report, error)`` as :func:`_audit` returns it) agree, as :func:`_both`
    says. Returns (report or error, report or error)."""
    on, err_on = new
    off, err_off = old
    if err_on is not None or err_off is not None:
        assert err_on is not None and err_off is not None, (
            f"only one run raised: on={err_on!r}, off={err_off!r}")
        assert err_on[0] == err_off[0], (err_on[0], err_off[0])
        assert err_on[1] == err_off[1]
        return err_on, err_off
    assert on.output == off.output
    assert on.verdict == off.verdict
    assert on.tv == off.tv
    assert on.scope == off.scope and on.warnings == off.warnings      # the horizon and what it left out
    assert on.paths <= off.paths, (on.paths, off.paths)
    return on, off


# -- helpers the loops share (plain torch, no exactspec) --------------------------------------------------------

def _last_probs(lm, ids):
    return lm(ids)[0, -1].softmax(-1)


def _append(ids, tok):
    return torch.cat([ids, tok.reshape(1, 1)], dim=1)


# -- the loops ---------------------------------------------------------------------------------------------------

# plain autoregressive sampling through the KV cache (litgpt: one token per call with input_pos)
def ar_kv_cache(target, draft, prompt):
    out = [int(t) for t in prompt[0]]
    logits = target(prompt, input_pos=torch.arange(prompt.shape[1]))
    toks = []
    for _ in range(3):
        tok = torch.multinomial(logits[0, -1].softmax(-1), 1)
        toks.append(tok)
        logits = target(idx=tok.unsqueeze(0), input_pos=torch.tensor([len(out) + len(toks) - 1]))
    return torch.cat([torch.tensor(out)] + toks)


# plain autoregressive sampling, the full sequence scored at every step
def ar_full_sequence(target, draft, prompt):
    ids = prompt
    for _ in range(3):
        ids = _append(ids, torch.multinomial(_last_probs(target, ids), 1))
    return ids


def _speculative(variant):
    """litgpt-like speculative decoding, gamma 2; ``variant`` plants one subtle bug (or none)."""
    gamma = 2

    def loop(target, draft, prompt):
        ids, n0 = prompt, prompt.shape[1]
        while ids.shape[1] - n0 < 2:
            x, qs = ids, []
            for _ in range(gamma):
                q = draft(x)[0, -1].softmax(-1)
                qs.append(q)
                x = _append(x, torch.multinomial(q, 1))
            ps = target(x)[0, -(gamma + 1):].softmax(-1)
            k = ids.shape[1]
            for i in range(gamma):
                tok = x[0, k + i]
                qi = qs[i - 1] if variant == "wrong_q" and i > 0 else qs[i]
                ratio = ps[i, tok] / qi[tok]
                u = torch.rand(1)
                accept = (u <= ratio) if variant == "le" else (u < ratio)
                if bool(accept):
                    continue
                residual = torch.clamp(ps[i] - qs[i], min=0)
                if variant != "unnormalised":
                    residual = residual / residual.sum()
                ids = _append(x[:, :k + i], torch.multinomial(residual, 1))
                break
            else:
                ids = _append(x, torch.multinomial(ps[gamma], 1))
        return ids
    loop.__name__ = f"speculative_{variant}"
    return loop


# a view of the last row taken, then an element of the logits overwritten in place: the view must see it
def view_then_setitem(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)
        row = logits[0, -1]
        logits[0, -1, 0] = NEG
        ids = _append(ids, torch.multinomial(row.softmax(-1), 1))
    return ids


# a view taken, then masked_fill_ on the whole logits (mask from the last token)
def view_then_masked_fill(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)
        row = logits[:, -1]
        mask = torch.arange(3) == ids[0, -1]
        logits.masked_fill_(mask, NEG)
        ids = _append(ids, torch.multinomial(row[0].softmax(-1), 1))
    return ids


# a view taken, then `logits[..., 1] += 1.0`
def view_then_iadd(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)
        row = logits[0, -1]
        logits[..., 1] += 1.0
        ids = _append(ids, torch.multinomial(torch.softmax(row, -1), 1))
    return ids


# in-place ops on the logits and the probs: div_ (temperature 1/2), then softmax and probs.mul_(2)
def inplace_div_mul(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        logits.div_(0.5)
        probs = logits.softmax(-1)
        probs.mul_(2)
        ids = _append(ids, torch.multinomial(probs, 1))
    return ids


# out= arguments: torch.add into a preallocated buffer, torch.exp into another
def out_arguments(target, draft, prompt):
    ids = prompt
    buf, w = torch.empty(3, dtype=torch.float64), torch.empty(3, dtype=torch.float64)
    for _ in range(2):
        logits = target(ids)[0, -1]
        torch.add(logits, torch.zeros(3, dtype=torch.float64), out=buf)
        torch.exp(buf, out=w)
        ids = _append(ids, torch.multinomial(w, 1))
    return ids


# torch.softmax(x, -1, out=buf) into one buffer reused across steps, a view of it taken before the write
def softmax_out_buffer(target, draft, prompt):
    ids = prompt
    buf = torch.empty(1, 3, dtype=torch.float64)
    view = buf[0]
    for _ in range(2):
        torch.softmax(target(ids)[:, -1], -1, out=buf)
        ids = _append(ids, torch.multinomial(view, 1))
    return ids


# top-k (k=2) filtering with torch.topk and scatter
def top_k(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        vals, idx = torch.topk(logits, 2)
        filtered = torch.full_like(logits, NEG).scatter(-1, idx, vals)
        ids = _append(ids, torch.multinomial(filtered.softmax(-1), 1))
    return ids


# top-p (p=0.6) filtering with sort, cumsum and scatter
def top_p(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        s, order = torch.sort(logits, descending=True)
        cum = s.softmax(-1).cumsum(-1)
        drop = cum - s.softmax(-1) > 0.6
        s = s.masked_fill(drop, NEG)
        filtered = torch.empty_like(logits).scatter_(-1, order, s)
        ids = _append(ids, torch.multinomial(filtered.softmax(-1), 1))
    return ids


# greedy argmax after a sampled token, then a sampled token again (biased: argmax is not sampling)
def greedy_between_samples(target, draft, prompt):
    ids = _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))
    ids = torch.cat([ids, target(ids)[:, -1:].argmax(-1)], dim=1)
    return _append(ids, torch.multinomial(_last_probs(target, ids), 1))


# torch.where on logits: a token whose logit is below log(0.2) is dropped
def where_on_logits(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        kept = torch.where(logits < math.log(0.2), torch.full_like(logits, NEG), logits)
        ids = _append(ids, torch.multinomial(kept.softmax(-1), 1))
    return ids


# clone / detach / float32: the logits leave float64 and the memo
def clone_detach_float(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids).clone().detach()[0, -1].float()
        logits[0] -= 0.0                                # an in-place write on the copy
        ids = _append(ids, torch.multinomial(logits.softmax(-1).double(), 1))
    return ids


# Python reads of logit values: .tolist(), .item(), float(), and an `if` on a probability
def python_reads(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        probs = _last_probs(target, ids)
        as_list = probs.tolist()
        hi = probs.max().item()
        if probs[0] > 0.3:                              # a branch on a value computed from pending tokens
            w = torch.tensor([x / hi for x in as_list], dtype=torch.float64)
        else:
            w = torch.tensor([float(probs[1]), float(probs[1]) + as_list[2], as_list[0]], dtype=torch.float64)
        ids = _append(ids, torch.multinomial(w, 1))
    return ids


# an exception raised only when the first sampled token is 2
def raise_on_token(target, draft, prompt):
    ids = prompt
    for step in range(2):
        tok = torch.multinomial(_last_probs(target, ids), 1)
        ids = _append(ids, tok)
        if step == 0 and int(tok) == 2:
            raise ValueError("boom")
    return ids


# a logits processor dividing by (token - 1): ZeroDivisionError only when a token is 1
def divide_by_token(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        scale = 1 / (int(ids[0, -1]) - 1)                 # Python ZeroDivisionError on token 1
        ids = _append(ids, torch.multinomial((logits * abs(scale)).softmax(-1), 1))
    return ids


# an exception raised only when a logit read through a pending token is small (a read of the lazy logits)
def raise_on_logit_value(target, draft, prompt):
    ids = _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))
    probs = _last_probs(target, ids)
    if probs[0].item() < 0.2:
        raise RuntimeError("unlikely first token")
    return _append(ids, torch.multinomial(probs, 1))


# a pending token indexing a Python list, and `if tok == 2:` choosing the processing of the next logits
def python_list_index_and_if(target, draft, prompt):
    temps = [1.0, 0.5, 2.0]
    tok = torch.multinomial(_last_probs(target, prompt), 1)
    ids = _append(prompt, tok)
    logits = target(ids)[0, -1] / temps[tok]
    if tok == 2:
        logits = logits.flip(-1)
    return _append(ids, torch.multinomial(logits.softmax(-1), 1))


# logits read through numpy (.numpy(), np ops, torch.from_numpy) and checked with torch.isinf(...).any()
def numpy_round_trip(target, draft, prompt):
    import numpy as np
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        if bool(torch.isinf(logits).any()):
            raise ValueError("infinite logit")
        arr = np.exp(logits.numpy())
        ids = _append(ids, torch.multinomial(torch.from_numpy(arr / arr.sum()), 1))
    return ids


# the returned logits zeroed in place, the same ids scored again: the second call must not see the write
def mutate_then_rescore(target, draft, prompt):
    ids = _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))
    first = target(ids)
    first.zero_()
    second = target(ids)
    if torch.equal(first, second):
        raise AssertionError("a stand-in handed out a tensor the loop wrote into")
    return _append(ids, torch.multinomial(second[0, -1].softmax(-1), 1))


# Python's random.choices over weights read from logits that depend on a fed-back token
def python_random_choices(target, draft, prompt):
    import random
    ids = _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))
    nxt = random.choices(range(3), weights=_last_probs(target, ids).tolist())[0]
    return ids[0].tolist() + [nxt]


# Gaussian noise on logits after a fed-back token: refused (UnsupportedRandomness) both ways, identically
def randn_noise_refused(target, draft, prompt):
    ids = _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))
    noisy = target(ids)[0, -1] + torch.randn(3, dtype=torch.float64)
    return _append(ids, noisy.argmax())


# two tokens without replacement from one row, both fed back
def multinomial_no_replacement(target, draft, prompt):
    two = torch.multinomial(_last_probs(target, prompt), 2, replacement=False)
    ids = torch.cat([prompt, two[None]], dim=1)
    return _append(ids, torch.multinomial(_last_probs(target, ids), 1))


# a batch of two rows in one forward (no input_pos); only the first row is returned
def batch_of_two(target, draft, prompt):
    ids = prompt.repeat(2, 1)
    for _ in range(2):
        probs = target(ids)[:, -1].softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
    return ids[0]


# a pending token indexing probs (probs[tok]) and gather(-1, tok), used as a weight
def index_with_pending(target, draft, prompt):
    tok = torch.multinomial(_last_probs(target, prompt), 1)
    ids = _append(prompt, tok)
    probs = _last_probs(target, ids)
    a, b = probs[tok], probs.gather(-1, tok)
    w = probs * (a + b) / (a + b)                        # the same law, through the pending index
    return _append(ids, torch.multinomial(w, 1))


# a pending token compared with a Python int and joined with torch.cat
def compare_and_cat(target, draft, prompt):
    t1 = torch.multinomial(_last_probs(target, prompt), 1)
    t2 = torch.multinomial(_last_probs(target, _append(prompt, t1)), 1)
    both = torch.cat([t1, t2])
    same = (both == 1)                                   # a pending comparison, never read as a bool here
    ids = torch.cat([prompt, both[None]], dim=1)
    w = _last_probs(target, ids) + same.sum() * 0.0
    return _append(ids, torch.multinomial(w, 1))


# Gumbel-max sampling: argmax(logits - log(-log(U)))
def gumbel_max(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        g = -torch.log(-torch.log(torch.rand(3, dtype=torch.float64)))
        ids = _append(ids, (logits + g).argmax())
    return ids


# exponential race: argmax(probs / Exp(1))
def exponential_race(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        probs = _last_probs(target, ids)
        ids = _append(ids, (probs / torch.empty_like(probs).exponential_(1)).argmax())
    return ids


# logits of every step kept and read only at the end (probs stacked); the last token drawn from their mean
def logits_kept_across_steps(target, draft, prompt):
    ids, kept = prompt, []
    for _ in range(2):
        probs = _last_probs(target, ids)
        kept.append(probs)
        ids = _append(ids, torch.multinomial(probs, 1))
    stacked = torch.stack(kept)
    if stacked[0, 0] > 2.0:                             # never true; reads a value at the end
        raise AssertionError("unreachable")
    return torch.cat([ids[0], torch.multinomial(stacked.mean(0), 1)])


# the ids tensor written in place after the forward that read it (a stale read must not leak)
def write_into_ids(target, draft, prompt):
    ids = torch.zeros(1, 3, dtype=torch.long)
    ids[0, 0] = prompt[0, 0]
    for pos in range(1, 3):
        logits = target(ids[:, :pos])
        ids[0, pos] = torch.multinomial(logits[0, -1].softmax(-1), 1)[0]
    return ids


# the prompt tensor itself overwritten after a forward (the audit hands it fresh on every branch)
def write_into_prompt(target, draft, prompt):
    logits = target(prompt)
    tok = torch.multinomial(logits[0, -1].softmax(-1), 1)
    out = torch.cat([prompt[0].clone(), tok])
    prompt[0, 0] = tok[0]                               # clobbers the prompt after its forward
    return torch.cat([out, torch.multinomial(_last_probs(target, out[None]), 1)])


# the KV cache rewound: position 1 rewritten with a second sample (stale cache entries overwritten)
def kv_cache_rewind(target, draft, prompt):
    logits = target(prompt, input_pos=torch.tensor([0]))
    first = torch.multinomial(logits[0, -1].softmax(-1), 1)
    target(first[None], input_pos=torch.tensor([1]))              # a discarded continuation
    again = torch.multinomial(logits[0, -1].softmax(-1), 1)       # redrawn from the same row
    nxt = target(again[None], input_pos=torch.tensor([1]))
    return torch.cat([prompt[0], again, torch.multinomial(nxt[0, -1].softmax(-1), 1)])


# rows of an order-2 model, sampled with the cache
def order2_kv(target, draft, prompt):
    toks, pos = [], 0
    logits = target(prompt, input_pos=torch.tensor([pos]))
    for _ in range(3):
        tok = torch.multinomial(logits[0, -1].softmax(-1), 1)
        toks.append(tok)
        pos += 1
        logits = target(tok[None], input_pos=torch.tensor([pos]))
    return torch.cat([prompt[0]] + toks)


# the draft model's logits mixed with the target's (a biased mixture), both fed the same sampled ids
def mix_target_and_draft(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        w = 0.5 * _last_probs(target, ids) + 0.5 * _last_probs(draft, ids)
        ids = _append(ids, torch.multinomial(w, 1))
    return ids


# a returned list of Python ints built from .tolist() of a tensor holding pending tokens
def list_output(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        ids = _append(ids, torch.multinomial(_last_probs(target, ids), 1))
    return ids[0].tolist()


# litgpt 0.5.13's own code (published): its step in a loop, and its whole ``generate`` (tests/test_recipes_loops.py)
try:
    import litgpt.generate.speculative_decoding as litgpt_sd
except ImportError:  # pragma: no cover - litgpt is in tests/published.txt
    litgpt_sd = None
needs_litgpt = pytest.mark.skipif(litgpt_sd is None, reason="litgpt not installed")


def _litgpt_steps(gamma, n, **sample_kwargs):
    def loop(target, draft, prompt):
        m = prompt.shape[1]
        with torch.inference_mode():
            draft(prompt, torch.arange(m))
            target(prompt, torch.arange(m))
            token, pos, out = prompt[0, -1:], torch.tensor([m - 1]), []
            while len(out) < n:
                new = litgpt_sd.speculative_decoding(draft, target, token, pos, int(pos) + 1,
                                                     speculative_k=min(gamma, n - len(out)), **sample_kwargs)
                out += new.tolist()
                pos, token = pos + len(new), new[-1:]      # a slice of a tensor read above
        return out
    return loop


def _litgpt_generate(gamma, n):
    def loop(target, draft, prompt):
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=gamma,
                                       max_returned_tokens=prompt.shape[1] + n + 1)
        return tokens
    return loop


# a draft drawn, scored by the target, then read through a tensor that shares it (a cat), and the logits indexed
# with the original, never-read tensor: its storage holds a placeholder, its draw a value
def index_with_a_draw_read_elsewhere(target, draft, prompt):
    d = torch.multinomial(_last_probs(draft, prompt), 1)
    probs = target(torch.cat([prompt[0], d])[None])[0, -1].softmax(-1)
    both = torch.cat([d, d])
    first = int(both[0])
    w = torch.ones(3, dtype=probs.dtype)
    w[first] = 10 * probs[d][0]                       # the drafted token's weight: its target probability, x 10
    return prompt[0].tolist() + [first, int(torch.multinomial(w, 1))]


# the logits through bfloat16 (a dtype numpy has no type for) and back, then a sample fed back
def bfloat16_round_trip(target, draft, prompt):
    ids = prompt
    for _ in range(2):
        probs = target(ids)[0, -1].bfloat16().double().softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)[None]], dim=1)
    return ids


# a count of matching candidates (transformers' assisted decoding: n_matches) used to slice the pending tokens: a
# lazy value inside a slice, which torch's dispatch does not see (it read a placeholder before the fix: "biased")
def slice_by_a_lazy_count(target, draft, prompt):
    ids = prompt
    cand = torch.multinomial(_last_probs(draft, ids), 1)
    sel = torch.multinomial(_last_probs(target, ids), 2, replacement=True)
    n = ((~(cand == sel[:-1])).cumsum(-1) < 1).sum()
    # (a slice within a tuple of them, as transformers slices; the candidate after it: at least two new tokens)
    return torch.cat([ids, sel[None][:, : n + 1], cand[None]], dim=1)


# a plain probability row indexed by a pending token, compared with a uniform, the token read after the decision
def plain_row_by_pending_token(target, draft, prompt):
    q = _last_probs(draft, prompt)
    x = torch.multinomial(q, 1)
    p = _last_probs(target, prompt)
    if bool(torch.rand(1) < p[x] / q[x]):
        return _append(prompt, x)
    return _append(prompt, torch.multinomial(torch.clamp(p - q, min=0), 1))


# the threshold on the right: ``t > u`` (the lazy-worlds operand's handler runs first and leaves it to the uniform's)
def threshold_left_of_the_uniform(target, draft, prompt):
    x = torch.multinomial(_last_probs(draft, prompt), 1)
    ids = _append(prompt, x)
    p = _last_probs(target, ids)
    keep = bool(p[0] * 2 > torch.rand(1))
    return _append(ids, torch.tensor(0 if keep else 1))


# one uniform compared with two thresholds of the same pending draft (the second decision after the first narrowed
# both), then the draft returned
def one_uniform_two_thresholds(target, draft, prompt):
    q = _last_probs(draft, prompt)
    x = torch.multinomial(q, 1)
    ids = _append(prompt, x)
    p = _last_probs(target, ids)
    u = torch.rand(1)
    first = bool(u < p[0])
    second = bool(1 - u <= p[1] * 2)            # affine in the uniform, a threshold of the same draft
    return _append(ids, torch.tensor(int(first) + int(second)))


def _two_drafts(target, draft, prompt):
    """x1 from the draft, x2 from the draft fed x1 (its law a row indexed by x1), the target's probabilities of both
    positions (row 1 indexed by x1), all unread."""
    q1 = _last_probs(draft, prompt)
    x1 = torch.multinomial(q1, 1)
    q2 = _last_probs(draft, _append(prompt, x1))
    x2 = torch.multinomial(q2, 1)
    ids = torch.cat([prompt, x1[None], x2[None]], dim=1)
    p = target(ids)[0, -3:-1].softmax(-1)
    return q1, x1, q2, x2, ids, p


# vLLM-style vectorised acceptance: uniforms against the ratios of two pending drafts, the first rejection found by
# argmax over the mask; the drafts up to it returned, then a token from the residual there
def vectorised_acceptance(target, draft, prompt):
    q0, x0, q1, x1, ids, p = _two_drafts(target, draft, prompt)
    qs = torch.stack([q0, q1])
    xs = torch.cat([x0, x1])
    ratio = p.gather(-1, xs[:, None])[:, 0] / qs.gather(-1, xs[:, None])[:, 0]
    rejected = ~(torch.rand(2) < ratio)
    if bool(rejected.any()):
        n = int(rejected.int().argmax())
        resid = torch.clamp(p[n] - qs[n], min=0)
        return torch.cat([prompt, xs[:n][None], torch.multinomial(resid, 1)[None]], dim=1)
    return ids


# -- loops whose decisions hold several pending drafts jointly (joint_draws) ------------------------------------

# a uniform decided jointly with two drafts, then compared again: its interval narrowed once both are read
def joint_uniform_reused(target, draft, prompt):
    q1, x1, q2, x2, ids, p = _two_drafts(target, draft, prompt)
    u = torch.rand(1)
    if bool(u < p[1, x2] / q2[x2]):
        return ids if bool(u < 0.5) else _append(_append(prompt, x2), x1)
    return _append(_append(prompt, torch.multinomial(p[0], 1)), x1)


# a decision on two drafts, then one of them read by Python and the other returned unread
def joint_then_read_one(target, draft, prompt):
    q1, x1, q2, x2, ids, p = _two_drafts(target, draft, prompt)
    if bool(p[1, x2] >= q2[x2]):
        first = int(x1)
        return _append(_append(prompt, torch.tensor(first)), x2) if first != 1 else _append(prompt, x2)
    return _append(prompt, x1)


# a decision on the second draft alone (whose law is indexed by the first), the first never returned
def joint_ancestor_not_returned(target, draft, prompt):
    q1, x1, q2, x2, ids, p = _two_drafts(target, draft, prompt)
    if bool(q2[x2] > 0.3):
        return _append(prompt, x2)
    return _append(prompt, torch.multinomial(p[0], 1))


# two decisions on the same pair, the second on a value the first narrowed, then both returned with a bonus token
def joint_two_decisions(target, draft, prompt):
    q1, x1, q2, x2, ids, p = _two_drafts(target, draft, prompt)
    if bool(p[0, x1] + p[1, x2] > q1[x1] + q2[x2]):
        if bool(torch.rand(1) * q2[x2] < p[1, x2]):
            return torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
        return _append(prompt, x2)
    return _append(_append(prompt, x2), x1)


JOINT_CASES = [
    pytest.param(joint_uniform_reused, dict(target=P1, draft=Q1, tokens=2), id="joint_uniform_reused"),
    pytest.param(joint_uniform_reused, dict(target=P1, draft=Q1, tokens=2, rng_model="torch-float32"),
                 id="joint_uniform_reused_float32_lattice"),
    pytest.param(joint_then_read_one, dict(target=P1, draft=Q1, tokens=1), id="joint_then_read_one"),
    pytest.param(joint_ancestor_not_returned, dict(target=P1, draft=Q1, tokens=1), id="joint_ancestor_not_returned"),
    pytest.param(joint_two_decisions, dict(target=P1, draft=Q1, tokens=2), id="joint_two_decisions"),
    pytest.param(joint_two_decisions, dict(target=P2, draft=Q1, tokens=2), id="joint_two_decisions_order2"),
]

CASES = JOINT_CASES + [
    pytest.param(one_uniform_two_thresholds, dict(target=P1, draft=Q1, tokens=2), id="one_uniform_two_thresholds"),
    pytest.param(one_uniform_two_thresholds, dict(target=P1, draft=Q1, tokens=2, rng_model="torch-float32"),
                 id="one_uniform_two_thresholds_float32_lattice"),
    pytest.param(vectorised_acceptance, dict(target=P1, draft=Q1, tokens=1), id="vectorised_acceptance"),
    pytest.param(vectorised_acceptance, dict(target=P1, draft=Q1, tokens=1, rng_model="torch-float32"),
                 id="vectorised_acceptance_float32_lattice"),
    pytest.param(plain_row_by_pending_token, dict(target=P1, draft=Q1, tokens=1, rng_model="torch-float32"),
                 id="plain_row_by_pending_token_float32_lattice"),
    pytest.param(slice_by_a_lazy_count, dict(target=P1, draft=Q1, tokens=2), id="slice_by_a_lazy_count"),
    pytest.param(plain_row_by_pending_token, dict(target=P1, draft=Q1, tokens=1), id="plain_row_by_pending_token"),
    pytest.param(threshold_left_of_the_uniform, dict(target=P1, draft=Q1, tokens=2, on_error="record"),
                 id="threshold_left_of_the_uniform"),
    pytest.param(bfloat16_round_trip, dict(target=P1, tokens=2), id="bfloat16_round_trip"),
    pytest.param(_litgpt_steps(2, 2), dict(target=P1, draft=Q1, tokens=2, output="new"), id="litgpt_steps",
                 marks=needs_litgpt),
    pytest.param(_litgpt_steps(3, 3, temperature=0.5, top_k=2), dict(target=P1, draft=Q1, tokens=3, output="new"),
                 id="litgpt_steps_t05_topk2", marks=needs_litgpt),
    pytest.param(_litgpt_generate(2, 2), dict(target=P1, draft=Q1, tokens=2), id="litgpt_generate",
                 marks=needs_litgpt),
    # no tokens=: the horizon comes from the steps the loop's target calls show (their contexts hold pending draws)
    pytest.param(_litgpt_steps(2, 3), dict(target=P1, draft=Q1, output="new"), id="litgpt_steps_default_horizon",
                 marks=needs_litgpt),
    pytest.param(_speculative("correct"), dict(target=P1, draft=Q1), id="speculative_default_horizon"),
    pytest.param(index_with_a_draw_read_elsewhere, dict(target=P1, draft=Q1, tokens=2),
                 id="index_with_a_draw_read_elsewhere"),
    pytest.param(ar_kv_cache, dict(target=P1, tokens=3), id="ar_kv_cache"),
    pytest.param(ar_full_sequence, dict(target=P1, tokens=3), id="ar_full_sequence"),
    pytest.param(_speculative("correct"), dict(target=P1, draft=Q1, tokens=2), id="speculative"),
    pytest.param(_speculative("unnormalised"), dict(target=P1, draft=Q1, tokens=2), id="spec_unnormalised_residual"),
    pytest.param(_speculative("le"), dict(target=P1, draft=Q1, tokens=2), id="spec_accept_le"),
    pytest.param(_speculative("wrong_q"), dict(target=P1, draft=Q1, tokens=2), id="spec_wrong_position_q"),
    pytest.param(view_then_setitem, dict(target=P1, tokens=2), id="view_then_setitem"),
    pytest.param(view_then_masked_fill, dict(target=P1, tokens=2), id="view_then_masked_fill"),
    pytest.param(view_then_iadd, dict(target=P1, tokens=2), id="view_then_iadd"),
    pytest.param(inplace_div_mul, dict(target=P1, tokens=2), id="inplace_div_mul"),
    pytest.param(out_arguments, dict(target=P1, tokens=2), id="out_arguments"),
    pytest.param(softmax_out_buffer, dict(target=P1, tokens=2), id="softmax_out_buffer"),
    pytest.param(top_k, dict(target=P1, tokens=2), id="top_k"),
    pytest.param(top_p, dict(target=P1, tokens=2), id="top_p"),
    pytest.param(greedy_between_samples, dict(target=P1, tokens=3), id="greedy_between_samples"),
    pytest.param(where_on_logits, dict(target=P1, tokens=2), id="where_on_logits"),
    pytest.param(clone_detach_float, dict(target=P1, tokens=2), id="clone_detach_float"),
    pytest.param(python_reads, dict(target=P1, tokens=2), id="python_reads"),
    pytest.param(raise_on_token, dict(target=P1, tokens=2), id="raise_on_token"),
    pytest.param(raise_on_token, dict(target=P1, tokens=2, on_error="record"), id="raise_on_token_record"),
    pytest.param(divide_by_token, dict(target=P1, tokens=2, on_error="record"), id="divide_by_token_record"),
    pytest.param(raise_on_logit_value, dict(target=P1, tokens=2, on_error="record"), id="raise_on_logit_value_record"),
    pytest.param(python_list_index_and_if, dict(target=P1, tokens=2), id="python_list_index_and_if"),
    pytest.param(numpy_round_trip, dict(target=P1, tokens=2), id="numpy_round_trip"),
    pytest.param(mutate_then_rescore, dict(target=P1, tokens=2), id="mutate_then_rescore"),
    pytest.param(raise_on_logit_value, dict(target=P1, tokens=2), id="raise_on_logit_value_raise"),
    pytest.param(python_random_choices, dict(target=P1, tokens=2), id="python_random_choices"),
    pytest.param(randn_noise_refused, dict(target=P1, tokens=2), id="randn_noise_refused"),
    pytest.param(multinomial_no_replacement, dict(target=P1, tokens=3), id="multinomial_no_replacement"),
    pytest.param(batch_of_two, dict(target=P1, tokens=2), id="batch_of_two"),
    pytest.param(index_with_pending, dict(target=P1, tokens=2), id="index_with_pending"),
    pytest.param(compare_and_cat, dict(target=P1, tokens=3), id="compare_and_cat"),
    pytest.param(gumbel_max, dict(target=P1, tokens=2), id="gumbel_max"),
    pytest.param(exponential_race, dict(target=P1, tokens=2), id="exponential_race"),
    pytest.param(logits_kept_across_steps, dict(target=P1, tokens=3), id="logits_kept_across_steps"),
    pytest.param(write_into_ids, dict(target=P1, tokens=2), id="write_into_ids"),
    pytest.param(write_into_prompt, dict(target=P1, tokens=2), id="write_into_prompt"),
    pytest.param(kv_cache_rewind, dict(target=P1, tokens=2), id="kv_cache_rewind"),
    pytest.param(order2_kv, dict(target=P2, tokens=3), id="order2_kv"),
    pytest.param(ar_full_sequence, dict(target=P2, tokens=3), id="order2_full_sequence"),
    pytest.param(ar_full_sequence, dict(target=CF, tokens=3), id="context_free"),
    pytest.param(_speculative("correct"), dict(target=CF, draft=Q1, tokens=2), id="speculative_context_free"),
    pytest.param(mix_target_and_draft, dict(target=P1, draft=Q1, tokens=2), id="mix_target_and_draft"),
    pytest.param(list_output, dict(target=P1, tokens=2), id="list_output"),
]


@pytest.mark.parametrize("fn, kw", CASES)
def test_deferred_reads_change_nothing_but_paths(fn, kw):
    _both(fn, **kw)


def _joint_both(fn, **kw):
    """Audit ``fn`` (deferred reads on) with pending draws held jointly and then one at a time; assert the reports
    agree exactly. Returns (report joint, report one at a time)."""
    on, err_on = _audit(fn, kw)
    off, err_off = old_paths.recorded("joint", lambda: _audit(fn, kw))      # the draws one at a time (recorded)
    if err_on is not None or err_off is not None:
        assert err_on is not None and err_off is not None, (
            f"only one run raised: joint={err_on!r}, one at a time={err_off!r}")
        assert err_on == err_off
        return err_on, err_off
    assert on.output == off.output
    assert on.verdict == off.verdict and on.tv == off.tv
    assert on.scope == off.scope and on.warnings == off.warnings
    return on, off


@pytest.mark.parametrize("fn, kw", CASES)
def test_draws_held_jointly_change_nothing_but_paths(fn, kw):
    _joint_both(fn, **kw)


@pytest.mark.parametrize("fn, kw", JOINT_CASES[:1] + JOINT_CASES[4:5])
def test_a_joint_refused_for_its_size_forks_as_before(fn, kw, monkeypatch):
    """With at most 2 assignments per joint, the joins these loops need are refused: the audit falls back to forking
    on the draws, with the same law."""
    full, _ = _joint_both(fn, **kw)
    monkeypatch.setattr(joint_draws, "LIMIT", 2)
    small, _ = _joint_both(fn, **kw)
    assert small.output == full.output and small.paths > full.paths, (small.paths, full.paths)


@pytest.mark.parametrize("fn, kw", [JOINT_CASES[3], pytest.param(vectorised_acceptance, dict(
    target=P1, draft=Q1, tokens=1), id="vectorised_acceptance")])
def test_joint_decisions_take_fewer_branches(fn, kw):
    on, off = _joint_both(fn, **kw)
    assert on.paths < off.paths, (on.paths, off.paths)


# the helper is not vacuous: a loop that differs is caught (law differs; only one run raises)
def _flipped(raise_instead):
    def loop(target, draft, prompt):
        probs = _last_probs(target, prompt)
        if raise_instead:
            raise ValueError("only in this run")
        return _append(prompt, torch.multinomial(probs.flip(-1), 1))
    return loop


def _plain(target, draft, prompt):
    return _append(prompt, torch.multinomial(_last_probs(target, prompt), 1))


@pytest.mark.parametrize("raise_instead", [False, True])
def test_the_helper_catches_a_difference(raise_instead):
    with pytest.raises(AssertionError):
        _agree(_audit(_flipped(raise_instead), dict(target=CF, tokens=1)), _audit(_plain, dict(target=CF, tokens=1)))
