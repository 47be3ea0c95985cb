"""Batched samplers audited with all k positions per call: how positions combine is checked, not only their laws.

Before (one draft position per call, column 0 read), every sampler of ``exactspec.bugzoo.batched_samplers``
read "exact to float64 rounding" with a TV of about 1e-8 (float32 rounding) on the instance below: false
negatives. The independent check is the exact engine run through the ``vllm`` adapter (rational
arithmetic over the sampler's own float32 thresholds): the row-wise float64 figures must equal its
figures to float64 rounding (1e-12).
"""

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import batched_samplers as bz  # noqa: E402
from exactspec.enumerate import Engine  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.rules import Rule  # noqa: E402
from exactspec.samplers.randomness.interception import intercepting  # noqa: E402
from exactspec.samplers.adapters.torch_adapters import reference_vllm_style, vllm_chain  # noqa: E402
from exactspec.tensor import audit_batched_sampler, chain_step_laws  # noqa: E402

P = [(F(1, 2), F(1, 3), F(1, 6)), (F(1, 5), F(1, 2), F(3, 10)), (F(1, 4), F(1, 4), F(1, 2))]
Q = [(F(1, 3), F(1, 2), F(1, 6)), (F(1, 2), F(1, 4), F(1, 4))]
FLOAT64 = 1e-12          # float64 sums of a few hundred terms, against exact rationals
FLOAT32 = 1e-6           # float32 rounding of the sampler's own arithmetic


def floats(laws):
    return [[float(x) for x in law] for law in laws]


def per_position(laws):
    last = len(laws) - 1
    return es.models.from_function(vocab=len(laws[0]), order=None, fn=lambda ctx: laws[min(len(ctx), last)])


def exact_step_law(sampler, p_laws, q_laws):
    """The exact law of one step's output, the sampler run through the vllm adapter (batch 1) by the engine."""
    import exactspec.samplers.torch_draws.torch_rng  # noqa: F401  (torch interception on)
    with intercepting():
        rule = Rule(lambda step, rng: vllm_chain.call(sampler, step, rng), name=sampler.__name__, family="chain",
                    claim="lossless")
        engine = Engine(rule, es.drafts.chain(len(q_laws)), per_position(p_laws), per_position(q_laws + [q_laws[-1]]),
                        get_field(backend="python"), exact_floats=True)
        return engine.step_law((), None)


def sequence_tv_of(law, p_laws):
    """max_j sum over prefixes of |P(prefix, Y_j = .) - P(prefix, Y_j emitted) p_j| / 2 / P(Y_j emitted)."""
    worst = F(0)
    for j in range(len(p_laws)):
        rows = {}
        for e, w in law.items():
            if len(e) > j:
                row = rows.setdefault(e[:j], [F(0)] * len(p_laws[j]))
                row[e[j]] += w
        emitted = sum(sum(r) for r in rows.values())
        if emitted:
            dev = sum(abs(r[y] - sum(r) * p_laws[j][y]) for r in rows.values() for y in range(len(r)))
            worst = max(worst, dev / 2 / emitted)
    return worst


def repeats_first_draft(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Emits draft 0 again where draft 1 was accepted: each position's marginal law is right on i.i.d. laws,
    the sequence is not (the second token always equals the first)."""
    out = bz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    both = (out[:, 1] == draft_token_ids[:, 1]) & (out[:, 0] == draft_token_ids[:, 0])
    out[:, 1] = torch.where(both, draft_token_ids[:, 0], out[:, 1])
    return out


BUGS = [bz.prefix_counts_all_accepted, bz.bonus_after_rejection, bz.no_all_accepted_fixup]


def two_races(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """After a rejection at 0, a second token raced from the target at position 1 (two recorded laws in a row)."""
    out = bz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    extra = (target_probs[:, 1] / torch.empty_like(target_probs[:, 1]).exponential_(1.0)).argmax(dim=-1)
    rejected0 = out[:, 1] == -1
    out[:, 1] = torch.where(rejected0, extra, out[:, 1])
    return out


@pytest.mark.parametrize("sampler", BUGS + [bz.bonus_from_wrong_row], ids=lambda s: s.__name__)
def test_position_combination_bugs_read_biased(sampler):
    a = audit_batched_sampler(sampler, target=floats(P), draft=floats(Q), device="cpu")
    assert a.exact and a.mode == "full" and a.sequence_checked
    assert a.verdict == "biased" and "biased" in str(a) and "lossless" not in str(a)


def test_bug_laws_equal_the_exact_engine_through_the_vllm_adapter():
    for sampler in [bz.correct, reference_vllm_style, two_races] + BUGS:
        law = exact_step_law(sampler, P, Q)
        a = audit_batched_sampler(sampler, target=floats(P), draft=floats(Q), device="cpu", reference=False)
        for j in range(3):
            for y in range(3):
                marg = sum(w for e, w in law.items() if len(e) > j and e[j] == y)
                joint = sum(w for e, w in law.items() if len(e) == j + 1 and e[-1] == y)
                assert abs(float(marg) - float(a.law.position_marginals[j, y])) < FLOAT64
                assert abs(float(joint) - float(a.law.joint[j, y])) < FLOAT64
        assert abs(float(sequence_tv_of(law, P)) - a.sequence_tv) < FLOAT64
    # the figures that make the three bugs biased: far above float32 rounding (~1e-8)
    assert sequence_tv_of(exact_step_law(bz.no_all_accepted_fixup, P, Q), P) > F(1, 2)


def test_findings_name_the_fault():
    a = audit_batched_sampler(bz.bonus_after_rejection, target=floats(P[:2]), draft=floats(Q[:1]), device="cpu")
    # k = 1: each position's law is right on a per-position model, the bonus after a rejection is not
    assert a.tv < 1e-6 and a.verdict == "biased"
    assert any("after a rejection" in f for f in a.findings)
    # rows are distinct requests (each sees the vocabulary shifted by its index): another row's bonus token, or
    # another row's probabilities, is a token of the wrong law, in the findings and in the TV
    b = audit_batched_sampler(bz.bonus_from_wrong_row, target=floats(P), draft=floats(Q), device="cpu")
    assert b.verdict == "biased" and "a row emits another row's bonus token (rows interact)" in b.findings
    assert b.tv > 0.1
    r = audit_batched_sampler(bz.row0_probs, target=floats(P), draft=floats(Q), device="cpu")
    assert r.verdict == "biased" and r.tv > 0.1


def test_marginals_right_sequence_wrong_is_caught_by_the_sequence_check():
    p = [[0.5, 0.3, 0.2]] * 3
    q = [[0.2, 0.4, 0.4]] * 2
    a = audit_batched_sampler(repeats_first_draft, target=p, draft=q, device="cpu")
    assert a.tv < 1e-6                       # each position's law is p (float32 rounding)
    assert a.sequence_tv > 0.1 and a.verdict == "biased"
    exact = exact_step_law(repeats_first_draft, [(F(1, 2), F(3, 10), F(1, 5))] * 3, [(F(1, 5), F(2, 5), F(2, 5))] * 2)
    assert abs(float(sequence_tv_of(exact, [(F(1, 2), F(3, 10), F(1, 5))] * 3)) - a.sequence_tv) < FLOAT64


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_correct_sampler_reads_lossless_at_k_1_to_3(k):
    gen = torch.Generator().manual_seed(k)
    logits = torch.randn(k + 1, 4, generator=gen, dtype=torch.float64)
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, 4, generator=gen, dtype=torch.float64), -1)
    for sampler in (reference_vllm_style, bz.correct):
        a = audit_batched_sampler(sampler, target=p, draft=q, device="cpu")
        assert a.mode == "full" and a.verdict == "lossless" and a.sequence_tv < 1e-6 and not a.findings
    big = torch.softmax(torch.randn(k + 1, 200, generator=gen, dtype=torch.float64) * 2, -1)
    qb = torch.softmax(torch.log(big[:k]) + torch.randn(k, 200, generator=gen, dtype=torch.float64), -1)
    d = audit_batched_sampler(bz.correct, target=big, draft=qb, device="cpu", max_rows=100)
    assert d.mode == "diagonal" and d.verdict == "lossless" and d.sequence_checked
    ref = chain_step_laws("speculative_sampling", big, qb, device="cpu")
    assert torch.allclose(d.law.position_marginals, ref.position_marginals, atol=1e-6, rtol=0)   # float32 thresholds


def test_the_diagonal_covering_equals_the_full_enumeration():
    gen = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(3, 6, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(2, 6, generator=gen, dtype=torch.float64), -1)
    for sampler in (bz.correct, bz.no_all_accepted_fixup, bz.prefix_counts_all_accepted):
        full = audit_batched_sampler(sampler, target=p, draft=q, device="cpu", reference=False)
        diag = audit_batched_sampler(sampler, target=p, draft=q, device="cpu", reference=False, max_rows=1)
        assert (full.mode, diag.mode) == ("full", "diagonal")
        # the two coverings put a draft in rows of different vocabulary shifts: the sampler's float32 normalisations
        # round differently there, so they agree to float32 rounding
        for name in ("position_marginals", "joint", "accepted_length"):
            assert torch.allclose(getattr(full.law, name), getattr(diag.law, name), atol=FLOAT32, rtol=0)
        if diag.sequence_tv is not None:                 # decided: equal to the full enumeration's figure
            assert abs(diag.sequence_tv - full.sequence_tv) < FLOAT32
    d = audit_batched_sampler(bz.bonus_after_rejection, target=p, draft=q, device="cpu", max_rows=1)
    assert d.verdict == "biased"


def test_per_row_loops_statement_races_and_uncompared_uniforms():
    """A row-by-row loop that stops comparing at the first rejection; the race with vLLM's in-place idiom."""
    def loop(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        batch, k, _ = target_probs.shape
        u = torch.rand(batch, k)
        out = torch.full((batch, k + 1), -1, dtype=torch.long)
        for b in range(batch):
            n = k
            for j in range(k):
                x = int(draft_token_ids[b, j])
                if u[b, j] < target_probs[b, j, x] / draft_probs[b, j, x]:     # later uniforms never compared
                    out[b, j] = x
                    continue
                n = j
                break
            if n == k:
                out[b, k] = bonus_token_ids[b, 0]
            else:
                w = torch.clamp(target_probs[b, n] - draft_probs[b, n], min=0)
                w = w / w.sum().clamp(min=torch.finfo(w.dtype).tiny)      # as the reference does: same floats
                e = torch.empty_like(w)
                e.exponential_()
                w.div_(e)
                out[b, n] = w.argmax(dim=-1)
        return out

    a = audit_batched_sampler(loop, target=floats(P), draft=floats(Q), device="cpu", reference=False)
    ref = audit_batched_sampler(reference_vllm_style, target=floats(P), draft=floats(Q), device="cpu", reference=False)
    assert a.exact and torch.allclose(a.law.position_marginals, ref.law.position_marginals, atol=FLOAT64, rtol=0)
    assert abs(a.sequence_tv - ref.sequence_tv) < FLOAT64


def test_what_the_audit_cannot_follow_is_never_lossless():
    def compares_twice(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        u = torch.rand(target_probs.shape[0], target_probs.shape[1])
        low, mid = u < 0.25, u < 0.5                   # three outcomes of one uniform: not a two-sided branch
        first = torch.where(low, draft_token_ids, torch.where(mid, bonus_token_ids, draft_token_ids))
        return torch.cat([first, torch.full_like(first, -1)], dim=1)

    a = audit_batched_sampler(compares_twice, target=floats(P[:2]), draft=floats(Q[:1]), device="cpu",
                              fallback_samples=100)
    assert not a.exact and "compared twice" in a.assumptions and a.verdict != "lossless"
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(3, 40, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(2, 40, generator=gen, dtype=torch.float64), -1)
    # the diagonal covering assumes position j's token depends on draft j only: this one breaks it, and is caught
    d = audit_batched_sampler(repeats_first_draft, target=p, draft=q, device="cpu", max_rows=1, fallback_samples=100)
    assert not d.exact and "pairings of the candidates disagree" in d.assumptions and d.verdict != "lossless"
    with pytest.raises(es.ExactSpecError, match="target must be"):
        audit_batched_sampler(reference_vllm_style, target=p[:2], draft=q, device="cpu")


def test_the_vectorised_rounding_reference_has_the_laws_of_the_row_loop_reference():
    from exactspec.tensor.rowwise import reference_vectorized
    a = audit_batched_sampler(reference_vectorized, target=floats(P), draft=floats(Q), device="cpu", reference=False)
    b = audit_batched_sampler(reference_vllm_style, target=floats(P), draft=floats(Q), device="cpu", reference=False)
    assert torch.allclose(a.law.joint, b.law.joint, atol=FLOAT64, rtol=0) and a.sequence_tv == b.sequence_tv


# -- the vllm adapter with several rows ------------------------------------------------------------------

from exactspec.samplers.adapters.torch_adapters import VllmChainAdapter  # noqa: E402

P2 = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
Q2 = es.models.context_free((F(1, 6), F(1, 2), F(1, 3)))


def test_the_vllm_adapter_audits_a_row_of_a_batch():
    kw = dict(target=P2, draft=Q2, proposer=es.drafts.chain(1), tokens=1)
    # reading row 0's probabilities is right for a batch of one, wrong for the other rows
    assert es.audit_sampler(bz.row0_probs, adapter="vllm", **kw).verdict == "lossless"
    wrong = es.audit_sampler(bz.row0_probs, adapter=VllmChainAdapter(batch=2), **kw)
    assert wrong.verdict == "biased" and F(wrong.extra["algorithmic_tv"]) > F(1, 100)
    # the bonus token of another row: invisible in a batch of one, a point mass (no draw) in row 1 of 2
    two = dict(kw, tokens=2)                    # the bonus token is the second one emitted
    assert es.audit_sampler(bz.bonus_from_wrong_row, adapter="vllm", **two).verdict == "lossless"
    row0 = VllmChainAdapter(batch=2, row=0)
    assert es.audit_sampler(bz.bonus_from_wrong_row, adapter=row0, **two).verdict == "biased"
    # a correct sampler reads lossless in every row, with the same law as a batch of one
    one = es.audit_sampler(bz.correct, adapter="vllm", **kw)
    for row in (0, 1):
        r = es.audit_sampler(bz.correct, adapter=VllmChainAdapter(batch=2, row=row), **kw)
        assert r.verdict == "lossless" and r.output == one.output
    with pytest.raises(es.ExactSpecError, match="row must be in 0 .. 1"):
        VllmChainAdapter(batch=2, row=2)


def test_the_row_wise_draws_are_stood_in_for_in_the_auditing_thread_only():
    # torch.rand in another thread, while a row-wise audit runs, is torch's own (a plain tensor of real draws);
    # the stand-ins used to replace torch.rand process-wide for the duration of the audit
    import threading
    import torch

    started, other_done = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        started.wait(30)
        try:
            seen["type"] = type(torch.rand(3))
        except BaseException as e:   # noqa: BLE001  (the old stand-in raises outside an audit's state)
            seen["type"] = e
        other_done.set()

    def waiting_sampler(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        if not started.is_set():
            started.set()
            other_done.wait(30)
        return bz.correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids)

    t = threading.Thread(target=other_thread)
    t.start()
    a = audit_batched_sampler(waiting_sampler, target=floats(P), draft=floats(Q), device="cpu")
    t.join(30)
    assert seen["type"] is torch.Tensor
    assert a.verdict == audit_batched_sampler(bz.correct, target=floats(P), draft=floats(Q), device="cpu").verdict


def test_two_row_wise_audits_in_two_threads_equal_the_sequential_ones():
    import threading

    samplers = [bz.correct, bz.row0_probs]
    # different instances (k = 2 and k = 1 drafts), so a call that read the other thread's state would differ
    cases = [(P, Q), (P[:2], Q[:1])]
    alone = [audit_batched_sampler(s, target=floats(p), draft=floats(q), device="cpu")
             for s, (p, q) in zip(samplers, cases)]
    together: dict = {}
    barrier = threading.Barrier(2)

    def run(i):
        first = [True]

        def sampler(*args):
            if first[0]:              # both audits are inside their first sampler call at once
                first[0] = False
                barrier.wait(30)
            return samplers[i](*args)
        p, q = cases[i]
        together[i] = audit_batched_sampler(sampler, target=floats(p), draft=floats(q), device="cpu")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i in range(2):
        assert (together[i].verdict, together[i].tv) == (alone[i].verdict, alone[i].tv)
        import numpy as np
        assert np.array_equal(np.asarray(together[i].law.joint), np.asarray(alone[i].law.joint))
        assert together[i].findings == alone[i].findings
