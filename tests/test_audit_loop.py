"""Whole-loop audits (exactspec.samplers.loops.loop_audit) and lazy categorical draws (exactspec.samplers.torch_draws.lazy_draws).

Most laws in these tests are powers of two, so the stand-ins' float64 softmax is exact and every
float the loops compute is the exact rational the algorithm means: a correct loop reads TV == 0.
"""

from __future__ import annotations

from fractions import Fraction as F
from itertools import product

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.laws import total_variation  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402,F401  (torch patched in audits)
from exactspec.samplers.randomness.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.torch_draws.lazy_draws import LazyCategoricalTensor  # noqa: E402
from exactspec.samplers.loops.loop_audit import DEFAULT_TOKENS, LoopReport, audit_loop  # noqa: E402
from exactspec.samplers.loops.loop_search import search_loop  # noqa: E402

P_TABLE = {0: (F(1, 2), F(1, 4), F(1, 4)), 1: (F(1, 4), F(1, 2), F(1, 4)), 2: (F(1, 4), F(1, 4), F(1, 2))}
TARGET = es.models.from_function(vocab=3, order=1, fn=lambda c: P_TABLE[c[-1]], name="p")
DRAFT = es.models.context_free((F(1, 4), F(1, 4), F(1, 2)), name="q")


def leviathan(gamma: int, n: int, bonus_from_draft: bool = False, discard: bool = False):
    """A hand-written speculative decoding loop (Leviathan et al., Algorithm 1), optionally broken."""
    def probs_of(logits):
        pr = logits.softmax(-1)
        if discard:           # litgpt-style: draw a token at every position, read none of them
            torch.multinomial(pr.reshape(-1, pr.shape[-1]), 1)
        return pr

    def loop(target, draft, prompt):
        ids = prompt
        while ids.shape[1] - prompt.shape[1] < n:
            x, qs = ids, []
            for _ in range(gamma):
                q = probs_of(draft(x)[0])[-1]
                qs.append(q)
                x = torch.cat([x, torch.multinomial(q, 1)[None]], dim=1)
            ps = probs_of(target(x)[0])[-(gamma + 1):]
            k = ids.shape[1]
            for i in range(gamma):
                tok = int(x[0, k + i])
                if torch.rand(1) < ps[i, tok] / qs[i][tok]:
                    ids = x[:, :k + i + 1]
                    continue
                resid = torch.clamp(ps[i] - qs[i], min=0)
                ids = torch.cat([ids, torch.multinomial(resid / resid.sum(), 1)[None]], dim=1)
                break
            else:
                bonus = probs_of(draft(x)[0])[-1] if bonus_from_draft else ps[gamma]
                ids = torch.cat([x, torch.multinomial(bonus, 1)[None]], dim=1)
        return ids
    loop.__name__ = f"leviathan_gamma{gamma}" + ("_bonus_from_draft" if bonus_from_draft else "")
    return loop


def autoregressive_law(model, prompt, n):
    """The target's law of ``n`` tokens, by a plain product over every sequence (independent of the engine)."""
    out = {}
    for seq in product(range(model.vocab), repeat=n):
        pr, ctx = F(1), tuple(prompt)
        for t in seq:
            pr *= model(ctx)[t]
            ctx += (t,)
        if pr:
            out[seq] = pr
    return out


def test_a_correct_whole_loop_is_lossless_exactly():
    r = audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3)
    assert isinstance(r, LoopReport)
    assert r.tv == 0 and r.verdict == "lossless" and r.proven
    assert r.output == autoregressive_law(TARGET, (1,), 3) == r.expected
    assert r.scope["of"].startswith("this instance (one whole run of the loop") and r.scope["tokens"] == 3
    assert r.extra["error_probability"] == "0" and r.warnings == []
    assert "TV == 0 exactly" in r.verdict_text
    # every branch calls the target once per step: at least 1, at most 3 calls for 3 tokens
    assert 1 <= r.target_calls <= 3


def test_bonus_from_the_draft_is_biased_by_the_exact_amount_derived_by_hand():
    p, q = (F(1, 2), F(1, 4), F(1, 4)), (F(1, 4), F(1, 4), F(1, 2))
    target, draft = es.models.context_free(p), es.models.context_free(q)
    r = audit_loop(leviathan(1, 2, bonus_from_draft=True), target=target, draft=draft, prompt=(0,), tokens=2)
    # gamma 1: the first token has law p; it was an accepted draft with probability min(p_a, q_a), and then
    # the second token is the (wrong) bonus from q, else it starts a new step and has law p
    beta = {a: min(p[a], q[a]) for a in range(3)}
    law = {(a, b): beta[a] * q[b] + (p[a] - beta[a]) * p[b] for a in range(3) for b in range(3)}
    assert r.output == law
    tv_pq = sum(abs(x - y) for x, y in zip(p, q)) / 2
    assert r.tv == sum(beta.values()) * tv_pq == F(3, 16)
    assert r.verdict == "biased"
    # the same loop with the bonus from the target is lossless on the same instance
    assert audit_loop(leviathan(1, 2), target=target, draft=draft, prompt=(0,), tokens=2).tv == 0


def test_draws_that_are_never_read_do_not_fork():
    kept = audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3)
    discarding = audit_loop(leviathan(2, 3, discard=True), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3)
    assert discarding.output == kept.output and discarding.tv == 0
    assert discarding.paths == kept.paths      # the discarded draws add no branch

    def sample_every_position(target, draft, prompt):
        ids = prompt
        for _ in range(2):   # draws a token at every position, reads only the last
            ids = torch.cat([ids, torch.multinomial(target(ids)[0].softmax(-1), 1)[-1:].T], dim=1)
        return ids
    r = audit_loop(sample_every_position, target=TARGET, prompt=(1, 0, 2), tokens=2)
    assert r.tv == 0 and r.paths == 9         # 3 x 3 read draws; eager draws would make 3**3 * 3**4 branches


def test_a_loop_that_crashes_on_some_branches_is_reported_with_the_exact_probability():
    def fragile(target, draft, prompt):
        ids = prompt
        for _ in range(2):
            ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
            if ids[0, -2:].tolist() == [2, 1]:
                raise ZeroDivisionError("a degenerate residual")
        return ids
    r = audit_loop(fragile, target=TARGET, prompt=(0,), tokens=2, on_error="record")
    # (2, 1) after the prompt 0 is drawn with p(2 | 0) * p(1 | 2) = 1/4 * 1/4; (0, 2) then 1 never reached here
    assert r.error_probability == F(1, 16) and r.extra["error_probability"] == "1/16"
    assert r.extra["errors"] == {"ZeroDivisionError: a degenerate residual": "1/16"}
    assert r.output == {k: v for k, v in autoregressive_law(TARGET, (0,), 2).items() if k != (2, 1)}
    assert not r.lossless and r.verdict == "biased"
    assert any("ZeroDivisionError" in w and "1/16" in w for w in r.warnings)
    assert "crashes with probability 1/16" in r.verdict_text
    with pytest.raises(es.RuleError, match=r"raised ZeroDivisionError: a degenerate residual on a branch of "
                                           r"probability 1/16"):
        audit_loop(fragile, target=TARGET, prompt=(0,), tokens=2)


def test_bad_input_is_a_clear_typed_error():
    good = leviathan(1, 2)
    with pytest.raises(es.ExactSpecError, match="tokens must be an int >= 1, got 0"):
        audit_loop(good, target=TARGET, draft=DRAFT, tokens=0)
    with pytest.raises(es.ExactSpecError, match="fn must be a function"):
        audit_loop("generate", target=TARGET, draft=DRAFT)
    with pytest.raises(es.ExactSpecError, match=r"prompt\[1\] = 3 is outside the vocabulary 0..2"):
        audit_loop(good, target=TARGET, draft=DRAFT, prompt=(0, 3))
    with pytest.raises(es.ExactSpecError, match="draft model has vocab 2 but the target has vocab 3"):
        audit_loop(good, target=TARGET, draft=es.models.context_free((F(1, 2), F(1, 2))))
    with pytest.raises(es.ExactSpecError, match="on_error must be 'raise' or 'record'"):
        audit_loop(good, target=TARGET, draft=DRAFT, on_error="ignore")
    with pytest.raises(es.ExactSpecError, match="output must be 'full'"):
        audit_loop(good, target=TARGET, draft=DRAFT, output="tokens")
    with pytest.raises(es.RuleError, match=r"returned 2 new token\(s\) .* fewer than tokens=3"):
        audit_loop(good, target=TARGET, draft=DRAFT, tokens=3)
    with pytest.raises(es.RuleError, match="does not start with the prompt"):
        audit_loop(lambda t, d, prompt: [2, 2, 2], target=TARGET, prompt=(0,), tokens=1)
    # without tokens= as well (this message once added None to an int: a TypeError blamed on calling fn)
    with pytest.raises(es.RuleError, match=r"returned \[2\]\.\.\. which does not start with the prompt \[0\]"):
        audit_loop(lambda t, d, prompt: [2, 2, 2], target=TARGET, prompt=(0,), workers=None)
    # past the horizon a returned item is not read, but it is still checked to be a token id
    with pytest.raises(es.RuleError, match=r"returned a torch.float64 tensor at index 2, not a token id"):
        audit_loop(lambda t, d, prompt: [0, 1, torch.tensor(0.5, dtype=torch.float64)], target=TARGET, prompt=(0,),
                   tokens=1, workers=None)
    with pytest.raises(es.RuleError, match="returned None"):
        audit_loop(lambda t, d, prompt: None, target=TARGET, tokens=1)
    with pytest.raises(es.RuleError, match=r"return the tokens only"):
        audit_loop(lambda t, d, prompt: (torch.tensor([0, 1]), 0.5), target=TARGET, output="new", tokens=1)


def test_output_new_and_lists_of_tensors_are_read():
    def new_only(target, draft, prompt):
        return [torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)]
    r = audit_loop(new_only, target=TARGET, prompt=(2,), tokens=1, output="new")
    assert r.output == {(t,): P_TABLE[2][t] for t in range(3)} and r.tv == 0
    # without tokens=, the documented default horizon of 3 tokens
    r = audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,))
    assert r.scope["tokens"] == r.instance["tokens"] == DEFAULT_TOKENS == 3 and len(next(iter(r.output))) == 3


def test_randomness_the_audit_cannot_follow_is_an_error_not_a_verdict():
    def gaussian(target, draft, prompt):
        return torch.cat([prompt, (torch.randn(1) > 0).long()[None]], dim=1)
    with pytest.raises(es.UnsupportedRandomness, match="torch.randn"):
        audit_loop(gaussian, target=TARGET, tokens=1)


# -- lazy categorical draws -------------------------------------------------------------------------------

def law_of(program, runs=None):
    """The exact law of ``program()`` run under the interception; ``runs`` (a list) collects each branch's draws."""
    def run(rng):
        with bind(rng):
            out = program()
        if runs is not None:
            runs.append(rng.trace)
        return out
    with intercepting():
        return enumerate_program(run, get_field(backend="python"), exact_floats=True)


def test_a_pending_draw_forks_once_when_read_and_views_share_it():
    w = torch.tensor([0.5, 0.25, 0.25])

    def program():
        t = torch.multinomial(w, 1)
        assert isinstance(t, LazyCategoricalTensor) and t.shape == (1,) and len(t) == 1 and t.dtype == torch.int64
        view = t.unsqueeze(0).clone()[0]         # still pending, sharing the draw
        return int(view), t.item(), t.tolist()[0]
    runs = []
    assert law_of(program, runs) == {(0, 0, 0): F(1, 2), (1, 1, 1): F(1, 4), (2, 2, 2): F(1, 4)}
    assert [len(trace) for trace in runs] == [1, 1, 1]     # one draw per branch, read three times


def test_reads_fork_in_read_order_and_unread_rows_never_fork():
    w = torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.75, 0.25]])

    def program():
        t = torch.multinomial(w, 1)                  # three pending rows
        second, first = int(t[1]), int(t[0])         # read row 1 before row 0; row 2 never
        return first, second
    runs = []
    law = law_of(program, runs)
    assert law == {(a, b): F(1, 2) * (F(1, 4), F(3, 4))[b] for a in range(2) for b in range(2)}
    assert len(runs) == 4                            # 2 x 2 branches: the unread row adds none
    # every branch forks on row 1 first: its first choice is row 1's token (the replay order is the read order)
    assert sorted(trace[0][1] for trace in runs) == [0, 0, 1, 1]
    assert {(trace[1][1], trace[0][1]) for trace in runs} == set(law)


def test_iterating_or_unbinding_pending_rows_reads_none_of_them():
    w = torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.75, 0.25]])

    def program():
        t = torch.multinomial(w, 1)                   # three pending rows
        rows = list(t)                                # for row in t: ... (Tensor.__iter__)
        cols = torch.unbind(t.reshape(3), 0)          # and unbind along dim 0
        assert all(isinstance(r, LazyCategoricalTensor) for r in (*rows, *cols))
        return int(rows[1]), int(cols[1])             # row 1 only, twice: one draw
    runs = []
    assert law_of(program, runs) == {(0, 0): F(1, 4), (1, 1): F(3, 4)}
    assert [len(trace) for trace in runs] == [1, 1]   # rows 0 and 2 never fork


def test_tokens_past_the_horizon_are_counted_not_read():
    import old_paths

    def sample_three(target, draft, prompt):        # plain sampling: each token read by the next forward but the last
        ids = prompt
        for _ in range(3):
            ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
        return ids
    # with the stand-ins reading every token they are fed (the path before deferred reads, recorded)
    r = old_paths.recorded("reads", lambda: audit_loop(sample_three, target=TARGET, prompt=(1,), tokens=2,
                                                       workers=None))
    assert r.output == autoregressive_law(TARGET, (1,), 2) and r.tv == 0
    assert r.paths == 9                              # 3 x 3: the third token, past the horizon, never forks
    # with deferred reads no forward reads a token; with the draws held jointly (the default), the first and the
    # second (whose law is a row indexed by the first) are spread together after the loop returned: one run
    deferred = audit_loop(sample_three, target=TARGET, prompt=(1,), tokens=2, workers=None)
    assert deferred.paths == 1 and deferred.output == r.output
    # one draw at a time (recorded): the first is drawn where the second's law is computed, the second spread: 3 runs
    one_by_one = old_paths.recorded("joint", lambda: audit_loop(sample_three, target=TARGET, prompt=(1,), tokens=2,
                                                                workers=None))
    assert one_by_one.paths == 3 and one_by_one.output == r.output
    old = old_paths.recorded("loops", lambda: audit_loop(sample_three, target=TARGET, prompt=(1,), tokens=2,
                                                         workers=None))
    assert old.paths == 27 and old.output == r.output
    # the horizon's note still counts every token a branch returned: a first step of up to 3 tokens, a horizon of 1
    new = audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=1, workers=None)
    old = old_paths.recorded("loops", lambda: audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,),
                                                         tokens=1, workers=None))
    assert new.scope == old.scope and new.scope["complete"] is False
    assert new.scope["unobserved"] == {"new_tokens": [2, 3]} and new.warnings == old.warnings
    assert new.output == old.output == autoregressive_law(TARGET, (1,), 1) and new.paths < old.paths


def _sample_three(target, draft, prompt):
    """Plain sampling of three tokens: each token is read by the next forward, the last only where it is returned."""
    ids = prompt
    for _ in range(3):
        ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
    return ids


def test_a_token_read_only_where_the_loop_returns_it_is_spread_not_forked():
    import old_paths
    r = audit_loop(_sample_three, target=TARGET, prompt=(1,), tokens=3, workers=None)
    assert r.output == autoregressive_law(TARGET, (1,), 3) and r.tv == 0
    assert r.paths == 1          # one run: the three tokens (each a row indexed by the one before) spread jointly
    one_by_one = old_paths.recorded("joint", lambda: audit_loop(_sample_three, target=TARGET, prompt=(1,), tokens=3,
                                                                workers=None))
    assert one_by_one.output == r.output
    assert one_by_one.paths == 9     # 3 x 3 runs of the loop; each spreads the third token over its 3 values
    old = old_paths.recorded("loops", lambda: audit_loop(_sample_three, target=TARGET, prompt=(1,), tokens=3,
                                                         workers=None))
    assert old.paths == 27 and old.output == r.output and old.verdict == r.verdict

    def twice(target, draft, prompt):               # one draw returned twice, as a list of 0-d tensors
        tok = torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)
        return [tok[0], tok.reshape(())]
    one = autoregressive_law(TARGET, (1,), 1)
    r = audit_loop(twice, target=TARGET, prompt=(1,), tokens=2, output="new", workers=None)
    assert r.output == {(a, a): p for (a,), p in one.items()}      # one value in both places
    assert r.paths == 1
    old = old_paths.recorded("loops", lambda: audit_loop(twice, target=TARGET, prompt=(1,), tokens=2, output="new",
                                                         workers=None))
    assert old.output == r.output and old.paths == len(one)


def test_a_loop_returning_many_unread_draws_spreads_at_most_the_limit(monkeypatch):
    from exactspec.samplers.loops import loop_audit
    monkeypatch.setattr(loop_audit, "SPREAD_LIMIT", 4)
    w = (F(1, 4), F(3, 4))

    def five_unread(target, draft, prompt):         # five independent draws, none read by the loop
        return torch.multinomial(torch.tensor([0.25, 0.75]), 5, replacement=True)
    r = audit_loop(five_unread, target=es.models.context_free(w), prompt=(0,), tokens=5, output="new",
                   workers=None)
    assert r.output == {seq: w[seq[0]] * w[seq[1]] * w[seq[2]] * w[seq[3]] * w[seq[4]]
                        for seq in product(range(2), repeat=5)}
    assert r.paths == 8          # the first three drawn (2 x 2 x 2 runs), the last two spread (4 combinations)
    monkeypatch.setattr(loop_audit, "SPREAD_LIMIT", 1)
    assert audit_loop(five_unread, target=es.models.context_free(w), prompt=(0,), tokens=5, output="new",
                      workers=None).paths == 32          # nothing spread: every draw forks, as reading it did


def test_a_race_winner_returned_unread_is_spread_too():
    import old_paths

    def gumbel_two(target, draft, prompt):          # Gumbel-max sampling: a race's winner, its law made on read
        ids = prompt
        for _ in range(2):
            logits = target(ids)[0, -1]
            ids = torch.cat([ids, torch.argmax(logits - torch.log(-torch.log(torch.rand(logits.shape))))[None, None]],
                            dim=1)
        return ids
    for rng_model in ("native", "continuous"):
        new = audit_loop(gumbel_two, target=TARGET, prompt=(1,), tokens=2, rng_model=rng_model, workers=None)
        old = old_paths.recorded("loops", lambda: audit_loop(gumbel_two, target=TARGET, prompt=(1,), tokens=2,
                                                             rng_model=rng_model, workers=None))
        assert new.output == old.output and new.tv == old.tv and new.verdict == old.verdict
        assert new.paths == 3 and old.paths == 9     # the second winner: spread over its 3 values, not forked
        assert new.extra.get("approximations")       # its law is still the approximated race law, and says so


def test_a_spread_token_keeps_the_prompt_check_and_the_depth_budget():
    def drawn_prompt(target, draft, prompt):        # a draw where the prompt belongs: 0 or 1, the prompt is (1,)
        tok = torch.multinomial(torch.tensor([0.5, 0.5]), 1)
        return torch.cat([tok, tok])
    with pytest.raises(es.RuleError, match="does not start with the prompt"):
        audit_loop(drawn_prompt, target=TARGET, prompt=(1,), tokens=1, workers=None)
    # three draws a branch: a depth of 2 stops the audit at the third, as reading it did; 3 lets it finish
    with pytest.raises(es.BudgetExceeded) as err:
        audit_loop(_sample_three, target=TARGET, prompt=(1,), tokens=3, budget=es.Budget(depth=2), workers=None)
    assert err.value.what == "depth"
    r = audit_loop(_sample_three, target=TARGET, prompt=(1,), tokens=3, budget=es.Budget(depth=3), workers=None)
    assert r.output == autoregressive_law(TARGET, (1,), 3)


def test_a_listed_draw_drawn_before_the_spread_keeps_its_value():
    # reading a later id may draw an earlier, listed one (a law computed on its read): that one is not spread again
    from exactspec.enumerate.rng import PathRng
    from exactspec.samplers.loops.loop_audit import _spread
    from exactspec.samplers.torch_draws.lazy_draws import exact_row, lazy_multinomial, unread_entries
    stack = []
    rng = PathRng((), F(1), get_field(backend="python"), stack, {})
    t = lazy_multinomial(rng, [exact_row([1.0, 3.0])], 1, True, (1,))
    listed = [5] + unread_entries(t, rng)
    assert _spread(listed, 1, rng) == [((5, 0), F(1, 4)), ((5, 1), F(3, 4))] and not stack
    int(t[0])                                        # drawn now: the first value, weight 1/4, the other pushed
    assert _spread(listed, 1, rng) == [((5, 0), None)] and rng.weight == F(1, 4) and len(stack) == 1


def test_without_replacement_and_in_place_use_after_reading():
    w = torch.tensor([0.5, 0.25, 0.25])

    def program():
        t = torch.multinomial(w, 2, replacement=False)
        t.add_(10)                                   # an in-place op reads the draws, then updates them
        return tuple(t.tolist())
    law = law_of(program)
    # first draw from w, the second from w without the first, renormalised
    pw = (F(1, 2), F(1, 4), F(1, 4))
    assert law == {(a + 10, b + 10): pw[a] * pw[b] / (1 - pw[a]) for a in range(3) for b in range(3) if a != b}


def test_a_draw_made_in_inference_mode_can_be_read_outside_it():
    def program():
        with torch.inference_mode():
            t = torch.multinomial(torch.tensor([0.5, 0.5]), 1)
        return int(t[0]) + int(torch.cat([t, t]).sum())
    assert law_of(program) == {0: F(1, 2), 3: F(1, 2)}


# -- search_loop: a single instance is not an audit ----------------------------------------------------------

def small_space():
    from exactspec.counterexamples.space import Space
    return Space(vocabs=(2,), shapes=((1,),), tokens=(1, 2), random_points=2, exhaustive_denominator=2,
                 max_denominator=4)


def test_search_finds_the_smallest_instance_where_a_loop_is_biased():
    found = search_loop(leviathan(1, 2, bonus_from_draft=True), space=small_space(),
                       progress=False)
    assert isinstance(found, es.Counterexample)
    inst = found.instance
    assert (inst.vocab, inst.tokens, inst.prompt) == (2, 2, (0,))
    # 1 token is always right (the first token of a step is verified); 2 tokens expose the bonus. By the formula of
    # test_bonus_from_the_draft_is_biased_by_the_exact_amount_derived_by_hand: TV = sum_a min(p_a, q_a) * TV(p, q)
    p, q = inst.target[0], inst.draft[0]
    assert found.tv == sum(min(a, b) for a, b in zip(p, q)) * sum(abs(a - b) for a, b in zip(p, q)) / 2 > 0


def test_search_over_a_correct_loop_states_the_space_it_covered():
    empty = search_loop(leviathan(1, 2), space=small_space(), progress=False)
    assert isinstance(empty, es.EmptySearch) and not empty
    assert empty.audited == 30 and "vocab 2..2" in empty.space
    with pytest.raises(es.ExactSpecError, match="space must be an exactspec Space"):
        search_loop(leviathan(1, 2), space="small")
    with pytest.raises(es.ExactSpecError, match="search options, taken by es.search_loop"):
        audit_loop(leviathan(1, 2), target=TARGET, draft=DRAFT, max_instances=3)


@pytest.mark.slow   # ~1 s of audit, ~6 s of transformers' first generate() in a fresh process
def test_kind_transformers_hands_generate_ready_stand_ins():
    pytest.importorskip("transformers")

    def assisted(target, draft, prompt):
        return target.generate(prompt, assistant_model=draft, do_sample=True, max_new_tokens=2,
                               num_assistant_tokens=2, num_assistant_tokens_schedule="constant", pad_token_id=0)
    # with ideal uniforms: exactly the target's law (on torch's float32 grid, the default, transformers' r <= p/q
    # takes one grid point more: tests/test_recipes_transformers.py)
    r = audit_loop(assisted, target=TARGET, draft=DRAFT, prompt=(1,), tokens=2, kind="transformers",
                   rng_model="continuous")
    assert r.tv == 0 and r.output == autoregressive_law(TARGET, (1,), 2)
    assert r.instance["stand_in"] == "transformers" and r.instance["dtype"] == "float64"


def test_budgets_and_replay_divergence_are_typed_errors():
    with pytest.raises(es.BudgetExceeded, match="paths"):
        audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3, budget=es.Budget(paths=2))
    seen = []

    def forgetful(target, draft, prompt):          # draws differently on a replay: not a function of its draws
        seen.append(1)
        if len(seen) == 1:
            return [0, int(torch.multinomial(torch.tensor([0.5, 0.5]), 1))]
        return [0, int(bool(torch.rand(1) < 0.5))]
    with pytest.raises(es.RuleError, match="replay diverged"):
        audit_loop(forgetful, target=es.models.context_free((F(1, 2), F(1, 2))), tokens=1)


def test_multinomial_refuses_what_torch_refuses_and_the_method_is_lazy_too():
    def program():
        return int(torch.tensor([0.25, 0.75]).multinomial(1))       # Tensor.multinomial
    assert law_of(program) == {0: F(1, 4), 1: F(3, 4)}
    for bad, match in (([float("inf"), 1.0], "inf"), ([-0.5, 1.0], "invalid multinomial"),
                       ([0.0, 0.0], "invalid multinomial")):
        with pytest.raises(RuntimeError, match=match):
            law_of(lambda: torch.multinomial(torch.tensor(bad), 1))
    with pytest.raises(RuntimeError, match="not enough categories"):
        law_of(lambda: torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), 2))


def test_a_pending_draw_mixed_with_lazy_uniforms_is_read_then_left_to_them():
    w = torch.tensor([0.5, 0.5])

    def added(first):
        def program():
            c, u = torch.multinomial(w, 1), torch.rand(1)
            return bool(((c + u) if first == "draw" else (u + c))[0] < 1.5)   # c = 0: always; c = 1: when u < 1/2
        return program
    for first in ("draw", "uniform"):
        assert law_of(added(first)) == {True: F(3, 4), False: F(1, 4)}

    def indexed():
        c, mask = torch.multinomial(w, 1), torch.rand(2) < 0.25
        return int(mask[c][0])
    assert law_of(indexed) == {1: F(1, 4), 0: F(3, 4)}


def test_float32_stand_ins_are_judged_by_a_float64_run_and_the_reference_is_a_figure():
    # issue 16: a reference loop used to widen the tolerance to twice its own distance (unbounded); now the loop
    # runs again on float64 stand-ins (float_boundary) and the reference's rounding is a figure in extra
    p, q = es.models.random_table(vocab=3, order=1, seed=5), es.models.random_table(vocab=3, order=1, seed=6)
    plain = audit_loop(leviathan(2, 2), target=p, draft=q, prompt=(0,), tokens=2, dtype=torch.float32)
    assert plain.tv > 2 ** -40 and plain.verdict == "lossless"      # float32 rounding, not bias: float64 run exact
    assert F(plain.extra["tv_float64"]) <= F(1, 2 ** 40) and plain.tolerance == F(1, 2 ** 40)
    r = audit_loop(leviathan(2, 2), target=p, draft=q, prompt=(0,), tokens=2, dtype=torch.float32, reference=2)
    rounding = F(r.extra["rounding_tv"])
    assert r.extra["reference"] == "reference_loop(gamma=2)" and rounding > 0
    assert r.tv == plain.tv and r.tolerance == F(1, 2 ** 40) and r.verdict == "lossless"
    assert r.extra["reference_tv_to_loop"] == str(total_variation(r.output, audit_loop(
        es.samplers.loops.loop_audit.reference_loop(2, tokens=2), target=p, draft=q, prompt=(0,), tokens=2,
        dtype=torch.float32).output))
    assert "float32 rounding" in r.verdict_text
    biased = audit_loop(leviathan(1, 2, bonus_from_draft=True), target=p, draft=q, prompt=(0,), tokens=2,
                        dtype=torch.float32, reference=1)      # gamma 1: the second token is the bonus
    assert biased.verdict == "biased" and biased.tv > 1000 * F(biased.extra["rounding_tv"]) > 0
    with pytest.raises(es.ExactSpecError, match="needs a draft model"):
        audit_loop(leviathan(2, 2), target=p, tokens=2, reference=2)
    with pytest.raises(es.ExactSpecError, match="reference must be a loop"):
        audit_loop(leviathan(2, 2), target=p, draft=q, tokens=2, reference="leviathan")


def test_progress_counts_the_probability_of_the_branches_run_up_to_one_per_run():
    # issue 17: a single whole-loop audit (a litgpt one takes half a minute) reports its progress; its total is the
    # probability of every branch (1), unknown branch count or not
    seen = []
    r = audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3, rng_model="continuous",
                   progress=lambda done, total: seen.append((done, total)), workers=None)   # (workers: per share)
    assert "float64_paths" not in r.extra and len(seen) == r.paths     # one run; once per branch
    assert all(total == 100 for _, total in seen) and seen[-1] == (100, 100)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and all(d < 100 for d, _ in seen[:-1])
    # float32 stand-ins: two runs (own precision, then float64), each counted from 0 to 100 by its own reporter
    p, q = es.models.random_table(vocab=3, order=1, seed=5), es.models.random_table(vocab=3, order=1, seed=6)
    seen.clear()
    twice = audit_loop(leviathan(2, 2), target=p, draft=q, prompt=(0,), tokens=2, dtype=torch.float32,
                       progress=lambda done, total: seen.append(done), workers=None)
    assert len(seen) == twice.paths + twice.extra["float64_paths"]
    assert seen[twice.paths - 1] == 100 == seen[-1] and seen[twice.paths] < 100
    assert audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3, rng_model="continuous",
                      progress=False).output == r.output
    with pytest.raises(es.ExactSpecError, match="progress must be"):
        audit_loop(leviathan(2, 3), target=TARGET, draft=DRAFT, prompt=(1,), tokens=3, progress="yes")
