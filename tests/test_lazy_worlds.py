"""Lazy worlds (``exactspec.samplers.torch_draws.lazy_worlds``): a torch stand-in fed pending draws reads none of them.

Each test runs a small program on a :class:`TorchLM` stand-in under the interception, enumerates it exactly, and
compares the law with one derived independently (a product of the tables' rows) and, where the point is a
saved fork, counts the runs. ``tests/test_deferred_reads.py`` compares whole loops with the switch on and off.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.samplers.loops._torch_lm import TorchLM  # noqa: E402
from exactspec.samplers.randomness import _fast_path
from exactspec.samplers.torch_draws import lazy_worlds  # noqa: E402
from exactspec.samplers.randomness.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.torch_draws.lazy_worlds import LazyWorldsTensor  # noqa: E402

Q = (F(1, 4), F(1, 4), F(1, 2))                                       # the first token's law
ROWS = {0: (F(1, 2), F(1, 4), F(1, 4)), 1: (F(1, 4), F(1, 4), F(1, 2)), 2: (F(1, 3), F(1, 3), F(1, 3))}
MODEL = es.models.from_function(vocab=3, order=1, fn=lambda c: ROWS[c[-1]], name="rows")


def law_and_runs(body, model=MODEL, rng_model="continuous"):
    """The exact law of ``body(lm, first)`` over its draws, and how many runs the enumeration took; ``first`` is a
    pending draw from ``Q`` (as ``torch.multinomial`` returns it), ``lm`` a float64 stand-in of ``model``."""
    lm = TorchLM(model, torch.float64)
    runs = []

    def program(rng):
        runs.append(1)
        lm.reset()
        with bind(rng):
            first = torch.multinomial(torch.tensor([float(q) for q in Q], dtype=torch.float64), 1)
            return body(lm, first)
    with intercepting():
        law = enumerate_program(program, get_field(backend="python"), exact_floats=True, rng_model=rng_model)
    return law, len(runs)


def test_a_forward_on_a_pending_token_reads_it_only_where_a_value_is_read():
    seen = []

    def body(lm, first):
        logits = lm(first[None])                  # [1, 1, 3]: one world per value of ``first``
        seen.append(type(logits) is LazyWorldsTensor)
        second = torch.multinomial(logits[0, -1].softmax(-1), 1)
        return int(second)                        # reading the second draws the first (its law depends on it) first
    law, runs = law_and_runs(body)
    assert seen[0]
    expected = {}
    for a in range(3):
        for b in range(3):
            expected[b] = expected.get(b, 0) + Q[a] * ROWS[a][b]
    # float64 logits: the law is the tables' up to float64 rounding of log and softmax, no more
    assert sum(abs(law[b] - expected[b]) for b in range(3)) < F(1, 2 ** 40)
    assert runs == 9


def test_a_draft_nobody_reads_never_forks():
    def body(lm, first):
        second = torch.multinomial(lm(first[None])[0, -1].softmax(-1), 1)     # drafted from the first
        lm(second[None], input_pos=None)                                        # scored, never read
        return int(first)
    law, runs = law_and_runs(body)
    assert law == dict(enumerate(Q))
    assert runs == 3                  # reading the first only: the second (and its forward) never forks


def test_reading_everything_gives_the_same_law_as_the_stand_ins_reading_every_token(monkeypatch):
    def body(lm, first):
        second = torch.multinomial(lm(first[None])[0, -1].softmax(-1), 1)
        third = torch.multinomial(lm(second[None])[0, -1].softmax(-1), 1)
        return int(first), int(second), int(third)
    deferred, runs_on = law_and_runs(body)
    monkeypatch.setattr(_fast_path, "DEFER_READS", False)
    eager, runs_off = law_and_runs(body)
    assert deferred == eager and runs_on == runs_off == 27


@pytest.mark.parametrize("cut", ["split", "split_sizes", "chunk", "unbind", "split_last"])
def test_the_pieces_of_a_split_hold_their_own_positions_worlds(cut, monkeypatch):
    # the logits of three positions [1, 3, 3] (the first after a known token, the others after pending draws) cut
    # along a dimension: each piece is the slice of every world (read here, in every world), without positions
    # tensors (the general path is never taken)
    def body(lm, first):
        second = torch.multinomial(torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64), 1)
        logits = lm(torch.cat([torch.tensor([0]), first, second])[None])
        pieces = {"split": lambda: logits.split(1, dim=1), "split_sizes": lambda: torch.split(logits, [2, 1], 1),
                  "chunk": lambda: logits.chunk(2, dim=1), "unbind": lambda: logits.unbind(1),
                  "split_last": lambda: logits.split(2, dim=-1)}[cut]()
        if _fast_path.DEFER_READS:
            assert all(type(p) is LazyWorldsTensor for p in pieces)
        # computed per world (a view's own values would come from the family's storage once read)
        return tuple(tuple(round(x, 12) for x in (p * 1.5).exp().reshape(-1).tolist()) for p in pieces)
    lazy, _ = law_and_runs(body)

    def general(*a, **k):
        raise AssertionError("the general path took the split")
    monkeypatch.setattr(_fast_path, "DEFER_READS", False)
    eager, _ = law_and_runs(body)
    assert lazy == eager
    monkeypatch.setattr(_fast_path, "DEFER_READS", True)
    monkeypatch.setattr(lazy_worlds, "_positions", general)
    assert law_and_runs(body)[0] == eager


def test_a_write_into_the_logits_is_seen_through_a_view_taken_before():
    def body(lm, first):
        logits = lm(first[None])
        row = logits[0, -1]                       # a view, still lazy
        logits[0, -1, 0] = float("-inf")          # a write into the root: its family is read (``first`` drawn)
        assert type(logits) is not LazyWorldsTensor
        return int(torch.multinomial(row.softmax(-1), 1))   # the view sees the write: token 0 is never drawn
    law, _ = law_and_runs(body)
    expected = {}
    for a in range(3):
        rest = ROWS[a][1] + ROWS[a][2]
        for b in (1, 2):
            expected[b] = expected.get(b, 0) + Q[a] * ROWS[a][b] / rest
    assert set(law) == {1, 2}
    assert sum(abs(law[b] - expected[b]) for b in (1, 2)) < F(1, 2 ** 40)


def test_a_write_through_a_view_is_seen_by_the_root():
    def body(lm, first):
        logits = lm(first[None])
        logits[0, -1].add_(torch.tensor([0.0, float("-inf"), 0.0], dtype=torch.float64))   # in place, via a view
        return int(torch.multinomial(logits[0, -1].softmax(-1), 1))
    law, _ = law_and_runs(body)
    assert set(law) == {0, 2}


def test_an_error_in_one_world_is_raised_only_where_that_world_is_the_loop_s():
    def body(lm, first):
        w = (lm(first[None])[0, -1].softmax(-1) - 0.4).clamp(min=0)   # all zero only after first == 2
        try:
            return int(torch.multinomial(w, 1))
        except RuntimeError:
            return "error"
    law, _ = law_and_runs(body)
    assert law["error"] == Q[2]
    assert law[0] == Q[0] and law[2] == Q[1]       # the only weight left after 0 and after 1


def test_a_value_that_is_the_same_in_every_world_is_an_ordinary_tensor_and_draws_nothing():
    kinds = []

    def body(lm, first):
        logits = lm(first[None])[0, -1]
        zero = logits * 0.0                       # -0.0 in every world (the logits are negative): the same bits
        kinds.append(type(zero))
        return float(zero.sum())
    law, runs = law_and_runs(body)
    assert kinds[0] is torch.Tensor and runs == 1 and law == {0.0: 1}


def test_more_worlds_than_allowed_read_the_draws_and_give_the_same_law(monkeypatch):
    def body(lm, first):
        second = torch.multinomial(lm(first[None])[0, -1].softmax(-1), 1)
        both = lm(torch.cat([first, second])[None])          # two positions, each with its own draw
        return int(torch.multinomial(both[0, -1].softmax(-1), 1))
    law, runs = law_and_runs(body)
    monkeypatch.setattr(lazy_worlds, "WORLDS", 1)
    monkeypatch.setattr("exactspec.samplers.loops._torch_lm.WORLDS", 1)
    capped, capped_runs = law_and_runs(body)
    assert capped == law and capped_runs >= runs


def test_indexing_with_a_draw_drawn_through_another_tensor_reads_its_value_not_its_placeholder():
    # The draw is read through ``both`` (which shares it); ``first`` itself was never read, so its storage still
    # holds the placeholder 0. Indexing the lazy probabilities with it must use the drawn value. (Before the fix
    # the per-world indexing ran on the placeholder: the law below came out as if every token were 0.)
    rows = {0: (F(1, 2), F(1, 4), F(1, 4)), 1: (F(1, 8), F(5, 8), F(1, 4)), 2: (F(1, 8), F(1, 8), F(3, 4))}
    model = es.models.from_function(vocab=3, order=1, fn=lambda c: rows[c[-1]], name="diagonal")

    def body(lm, first):
        probs = lm(first[None])[0, -1].softmax(-1)
        both = torch.cat([first, first])
        a = int(both[0])                          # draws ``first``
        p = probs[first]                          # index with the pending-draw tensor itself
        return a, round(float(p), 12)
    law, _ = law_and_runs(body, model)
    # the diagonal differs from column 0 after tokens 1 and 2: the placeholder would read column 0
    assert law == {(a, round(float(rows[a][a]), 12)): Q[a] for a in range(3)}


def test_a_position_that_depends_on_no_pending_draw_is_read_without_drawing_the_others():
    # the logits of two positions: the first scores a known context, the second one holding ``first``; reading the
    # first position's values must not draw ``first`` (it did, once: reading a view settled its whole family)
    def body(lm, first):
        logits = lm(torch.cat([torch.tensor([0]), first])[None])
        p0 = logits[0, 0].softmax(-1)
        return float(p0[0]), bool(logits[0, 0, 1] < 0)
    law, runs = law_and_runs(body)
    assert runs == 1 and law == {(0.5, True): 1}


def test_a_draw_per_position_depends_on_its_own_position_s_draw_only():
    # two positions scored in one call, each after its own pending token: a softmax of both rows and one draw per
    # row; reading the draw of the first row draws the first token and that draw only (3 x 3 runs, not 3**4)
    def body(lm, first):
        second = torch.multinomial(torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64), 1)
        logits = lm(torch.cat([first, second])[None])[0]          # [2, 3]: row 0 after ``first``, row 1 after ``second``
        draws = torch.multinomial(logits.softmax(-1), 1)           # one pending draw per row
        return int(draws[0, 0])
    law, runs = law_and_runs(body)
    expected = {b: sum(Q[a] * ROWS[a][b] for a in range(3)) for b in range(3)}
    assert sum(abs(law[b] - expected[b]) for b in range(3)) < F(1, 2 ** 40)
    assert runs == 9


# -- bool() of a lazy value: the branch forks on the decision, not on the last draw it depends on ---------------------
# ROWS[a][0] > ROWS[a][1] holds for a = 0 only; ROWS[a][2] >= ROWS[a][1] for every a.

def test_a_decision_on_a_pending_token_forks_two_ways_and_narrows_the_token():
    decided = []

    def body(lm, first):
        row = lm(first[None])[0, -1]
        bigger = bool(row[0] > row[1])            # a decision on ``first``: forks on it, ``first`` undrawn
        decided.append(first._cells.reshape(-1)[0][0].drawn)
        return bigger, int(first)                 # ``first`` read now, among the values that decided so
    law, runs = law_and_runs(body)
    assert decided and not any(decided)           # no run had drawn ``first`` at the decision
    assert law == {(True, 0): Q[0], (False, 1): Q[1], (False, 2): Q[2]}     # by hand: only a = 0 decides True
    assert runs == 3
    with_reads, _ = _without_refinement(body)
    assert with_reads == law


def test_a_decision_the_same_for_every_value_left_draws_nothing():
    def body(lm, first):
        row = lm(first[None])[0, -1]
        if bool(row[0] > row[1]):                 # ``first`` is 0
            return True, None
        return False, bool(row[2] >= row[0])      # ``first`` is 1 or 2: true for both (false for 0): no fork
    law, runs = law_and_runs(body)
    assert law == {(True, None): Q[0], (False, True): Q[1] + Q[2]}
    assert runs == 2
    with_reads, runs_read = _without_refinement(body)
    assert with_reads == law and runs_read == 3


def test_a_token_narrowed_by_a_decision_and_never_read_again_forks_once():
    def body(lm, first):
        row = lm(first[None])[0, -1]
        return 1 if bool(row[0] > row[1]) else 0  # ``first`` itself never read
    law, runs = law_and_runs(body)
    assert law == {1: Q[0], 0: Q[1] + Q[2]} and runs == 2


def test_a_decision_on_two_pending_tokens_draws_the_first_and_narrows_the_second():
    def body(lm, first):
        second = torch.multinomial(lm(first[None])[0, -1].softmax(-1), 1)
        row = lm(second[None])[0, -1]
        return bool(row[0] > row[1]), int(first), int(second)
    law, runs = law_and_runs(body)
    # the law, computed directly from the tables (float64 rounding of log and softmax aside)
    expected = {}
    for a in range(3):
        for b in range(3):
            k = (b == 0, a, b)
            expected[k] = expected.get(k, 0) + Q[a] * ROWS[a][b]
    assert set(law) == set(expected) and sum(abs(law[k] - expected[k]) for k in law) < F(1, 2 ** 40)
    with_reads, runs_read = _without_refinement(body)
    assert with_reads == law and runs <= runs_read


def _without_refinement(body, **kw):
    saved = lazy_worlds.REFINE
    lazy_worlds.REFINE = False
    try:
        return law_and_runs(body, **kw)
    finally:
        lazy_worlds.REFINE = saved


# -- a uniform compared with a threshold that depends on a pending token: decided jointly, the token unread --------
# u < softmax(lm(first))[0]: probability sum_a Q[a] p_a(0) (p_a the float64 softmax of row a's logs), two branches,
# ``first`` undrawn and conditioned on the answer; a later use of ``u`` reads ``first`` and narrows ``u`` first.

def _threshold(lm, first):
    return lm(first[None])[0, -1].softmax(-1)[0]


def test_a_uniform_against_a_threshold_of_a_pending_token_forks_two_ways_not_six():
    def body(lm, first):
        return bool(torch.rand(1) < _threshold(lm, first))
    law, runs = law_and_runs(body)
    assert runs == 2                              # reading ``first`` first took 3 x 2
    assert abs(law[True] - sum(Q[a] * ROWS[a][0] for a in range(3))) < F(1, 2 ** 40)
    with_reads, runs_read = _without_refinement(body)
    assert with_reads == law and runs_read == 6


@pytest.mark.parametrize("rng_model", ["continuous", "torch-float32"])
@pytest.mark.parametrize("form", ["u < t", "t > u", "u >= t", "2u - 1 < t"])
def test_the_token_and_the_uniform_read_after_a_joint_decision_keep_their_joint_law(form, rng_model):
    def body(lm, first):
        u = torch.rand(1)
        t = _threshold(lm, first)
        answer = {"u < t": lambda: u < t, "t > u": lambda: t > u, "u >= t": lambda: u >= t,
                  "2u - 1 < t": lambda: u * 2 - 1 < t}[form]()
        decided = bool(answer)
        token = int(first)                        # read after the decision: its law conditioned on it
        again = bool(u < 0.4)                     # the uniform used again: narrowed by the decision first
        return decided, token, again
    law, runs = law_and_runs(body, rng_model=rng_model)
    with_reads, runs_read = _without_refinement(body, rng_model=rng_model)
    assert law == with_reads                      # the same exact law as reading ``first`` at the comparison
    assert runs <= runs_read


def test_logits_made_again_from_the_same_rows_share_their_layout_not_their_draws():
    # a stand-in's forward on the same contexts repeats from branch to branch: the second call takes the first's
    # layout and constant rows (one group, shared, so later memos keyed on its table hit), with its own draws
    from exactspec.samplers.torch_draws.lazy_draws import PendingDraw, exact_row
    from exactspec.samplers.torch_draws.lazy_worlds import _key, _plain, lazy_logits
    const = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    worlds = {(v,): torch.tensor([float(v), 2.0 * v, 1.0], dtype=torch.float64) for v in range(3)}
    d1, d2 = (PendingDraw(None, *exact_row([1.0, 1.0, 1.0]), 1, True) for _ in range(2))
    a = lazy_logits([const, (((d1, 0),), worlds), const], (1, 3, 3), torch.float64)
    b = lazy_logits([const, (((d2, 0),), worlds), const], (1, 3, 3), torch.float64)
    assert type(a) is LazyWorldsTensor and type(b) is LazyWorldsTensor
    assert a._groups[0] is b._groups[0] and len(a._groups) == len(b._groups) == 2
    assert a._groups[1].deps[0][0] is d1 and b._groups[1].deps[0][0] is d2
    for v in range(3):
        want = torch.stack([const, worlds[(v,)], const])[None]
        assert torch.equal(_plain(a, {_key((d1, 0)): v}), want) and torch.equal(_plain(b, {_key((d2, 0)): v}), want)
    ptr = lambda t: torch.Tensor.untyped_storage(t.as_subclass(torch.Tensor)).data_ptr()   # noqa: E731
    assert ptr(a) != ptr(b)                       # each its own storage (a write into one is not the other's)
    plain = lazy_logits([const, const], (1, 2, 3), torch.float64)
    again = lazy_logits([const, const], (1, 2, 3), torch.float64)
    assert type(again) is torch.Tensor and torch.equal(again, plain) and again.data_ptr() != plain.data_ptr()
