"""One whole-loop audit's branches on worker processes (exactspec.samplers.loops._on_workers).

Every test forces the workers from the first branch on (``SWITCH_AFTER = 0``) and makes every share run
exactly one branch before it hands back the rest (``TASK_SECONDS = 0``), so the shares, their keys and
the merge are exercised as far as they go whatever the machine's speed; each compares the report with
the same audit in this process (``workers=None``), which is the reference.
"""

from __future__ import annotations

import os
import signal
from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec import parallel  # noqa: E402
from exactspec.bugzoo.loops import bonus_from_draft, speculative_sampling  # noqa: E402
from exactspec.enumerate.step import Meter  # noqa: E402
from exactspec.samplers.loops import _on_workers  # noqa: E402

pytestmark = pytest.mark.skipif(parallel.start_method() != "fork", reason="workers inherit the loop by fork only")

P3 = es.models.random_table(vocab=3, order=1, seed=1)
Q3 = es.models.random_table(vocab=3, order=1, seed=4)


@pytest.fixture
def every_branch_on_workers(monkeypatch):
    monkeypatch.setattr(_on_workers, "SWITCH_AFTER", 0.0)
    monkeypatch.setattr(_on_workers, "TASK_SECONDS", 0.0)
    shares = []
    real = _on_workers.finish_on_workers

    def counted(branches, stack, meter, mass, workers):
        shares.append(len(stack))
        return real(branches, stack, meter, mass, workers)
    monkeypatch.setattr(_on_workers, "finish_on_workers", counted)
    return shares


def _same(a, b):
    da, db = a.to_dict(), b.to_dict()
    da.pop("seconds"), db.pop("seconds")
    assert da == db
    assert list(a.output) == list(b.output)          # the same law, in the same order


@pytest.mark.parametrize("loop", [speculative_sampling, bonus_from_draft], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype,rng_model", [(torch.float64, "continuous"), (torch.float32, "native")])
def test_workers_give_the_report_of_this_process(every_branch_on_workers, loop, dtype, rng_model):
    here = es.audit_loop(loop, target=P3, draft=Q3, tokens=2, dtype=dtype, rng_model=rng_model, progress=False,
                         workers=None)
    there = es.audit_loop(loop, target=P3, draft=Q3, tokens=2, dtype=dtype, rng_model=rng_model, progress=False,
                          workers=2)
    assert every_branch_on_workers and every_branch_on_workers[0] > 0     # the workers ran (both runs: float32)
    assert len(every_branch_on_workers) == (2 if dtype == torch.float32 else 1)
    _same(here, there)


def _fragile(target, draft, prompt):
    """Samples two tokens; raises one error for a 1 then 0 and another for a 2 first (their own lines)."""
    ids = prompt
    for _ in range(2):
        probs = target(ids)[0, -1].softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)[None]], dim=1)
    a, b = int(ids[0, 1]), int(ids[0, 2])
    if a == 1 and b == 0:
        raise ValueError("one then zero")
    if a == 2:
        raise KeyError("two first")
    return ids


def test_failing_branches_recorded_as_in_this_process(every_branch_on_workers):
    here = es.audit_loop(_fragile, target=P3, tokens=2, on_error="record", progress=False, workers=None)
    there = es.audit_loop(_fragile, target=P3, tokens=2, on_error="record", progress=False, workers=2)
    assert every_branch_on_workers
    _same(here, there)
    assert set(there.extra["errors"]) == {"ValueError: one then zero", "KeyError: 'two first'"}
    assert list(there.extra["error_sites"]) == list(here.extra["error_sites"])


def test_the_error_raised_is_the_first_in_this_process_order(every_branch_on_workers):
    with pytest.raises(es.RuleError) as here:
        es.audit_loop(_fragile, target=P3, tokens=2, progress=False, workers=None)
    for _ in range(3):     # whichever worker fails first, the error is the first failing branch in depth-first order
        with pytest.raises(es.RuleError) as there:
            es.audit_loop(_fragile, target=P3, tokens=2, progress=False, workers=2)
        assert str(there.value) == str(here.value)
        assert there.value.trace == here.value.trace
    # the loop's own exception and its traceback reach the caller: its cause where this process ran the branch (it
    # runs shares too), a note where a worker did (a chained cause does not travel)
    import traceback
    told = "".join(getattr(there.value, "__notes__", [])) + "".join(
        traceback.format_exception(there.value.__cause__) if there.value.__cause__ else [])
    assert "raise ValueError(\"one then zero\")" in told or "raise KeyError(\"two first\")" in told


def _fails_in_a_worker(target, draft, prompt):
    """Two tokens; raises in a forked worker of the audit (``_JOB`` is set there only), never in this process."""
    ids = prompt
    for _ in range(2):
        ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
    int(ids[0, 1])
    if _on_workers._JOB:
        raise ValueError("in a worker")
    return ids


def test_an_error_raised_in_a_worker_comes_back_with_its_traceback_as_a_note(every_branch_on_workers):
    with pytest.raises(es.RuleError, match="in a worker") as there:
        es.audit_loop(_fails_in_a_worker, target=P3, tokens=2, progress=False, workers=2)
    assert every_branch_on_workers
    notes = "".join(there.value.__notes__)
    assert "raised in a worker process of the audit" in notes and 'raise ValueError("in a worker")' in notes


def test_the_path_budget_holds_on_workers(every_branch_on_workers, monkeypatch):
    from exactspec.samplers.loops import loop_audit
    meters = []

    class Recorded(Meter):
        def __init__(self, budget):
            super().__init__(budget)
            meters.append(self)
    monkeypatch.setattr(loop_audit, "Meter", Recorded)
    here = es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, progress=False, workers=None)
    need = meters[-1].paths                   # every branch the audit counts (the loop's and the expected law's)
    assert need > here.paths
    there = es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, progress=False, workers=2,
                          budget=es.Budget(paths=need))
    assert every_branch_on_workers
    _same(here, there)
    for workers in (None, 2):
        with pytest.raises(es.BudgetExceeded) as err:
            es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, progress=False, workers=workers,
                          budget=es.Budget(paths=need - 1))
        assert err.value.what == "paths"
        assert meters[-1].paths <= need - 1       # never more branches than the budget allows


def test_progress_reaches_the_whole_probability_on_workers(every_branch_on_workers):
    def runs(workers):
        seen = []
        es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, workers=workers,
                      progress=lambda done, total: seen.append((done, total)))
        out = [[]]
        for done, total in seen:          # each run of the loop (own precision, float64) counts to 100 on its own
            assert total == 100
            if out[-1] and done < out[-1][-1]:
                out.append([])
            out[-1].append(done)
        return out
    here, there = runs(None), runs(2)
    assert every_branch_on_workers
    assert len(there) == len(here) == 2
    assert all(run[-1] == 100 for run in there)


def _gumbel(target, draft, prompt):
    """Samples by the Gumbel-max trick: the audit rounds the irrational race laws (counted as approximations)."""
    ids = prompt
    for _ in range(2):
        logits = target(ids)[0, -1]
        u = torch.rand(logits.shape)
        ids = torch.cat([ids, torch.argmax(logits - torch.log(-torch.log(u)))[None, None]], dim=1)
    return ids


def test_approximations_counted_as_in_this_process(every_branch_on_workers):
    here = es.audit_loop(_gumbel, target=P3, tokens=2, progress=False, workers=None)
    there = es.audit_loop(_gumbel, target=P3, tokens=2, progress=False, workers=2)
    assert here.extra.get("approximations")
    _same(here, there)


def _dies_in_a_worker(target, draft, prompt):
    ids = torch.cat([prompt, torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)[None]], dim=1)
    int(ids[0, 1])      # read here (forking the enumeration), not only where the loop returns it
    if _on_workers._JOB:        # set in a forked worker only (this process runs shares too)
        os.kill(os.getpid(), signal.SIGKILL)
    return ids


def test_a_worker_that_dies_is_an_incomplete_audit(every_branch_on_workers):
    with pytest.raises(parallel.WorkersLost) as err:
        es.audit_loop(_dies_in_a_worker, target=P3, tokens=1, progress=False, workers=2)
    assert err.value.exit_code == 3


def test_no_workers_where_they_cannot_or_need_not_run():
    meter = Meter(es.Budget())
    assert _on_workers.plan(None, meter) is None
    assert _on_workers.plan(1, meter) is None
    now = [0.0]
    assert _on_workers.plan(2, Meter(es.Budget(seconds=5, clock=lambda: now[0]))) is None   # not a real clock
    assert _on_workers.plan(2, meter) == _on_workers.Plan(2, _on_workers.SWITCH_AFTER)
    _on_workers._JOB["branches"] = object()          # inside a worker: no workers of its own
    try:
        assert _on_workers.plan(2, meter) is None
    finally:
        _on_workers._JOB.clear()


def test_bad_workers_is_a_typed_error():
    for bad in (-1, "all", 1.5, True):
        with pytest.raises(es.ExactSpecError, match="workers must be"):
            es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=1, workers=bad)


def test_workers_wait_for_the_switch(monkeypatch):
    started = []
    monkeypatch.setattr(_on_workers, "SWITCH_AFTER", 1e9)
    monkeypatch.setattr(_on_workers, "finish_on_workers", lambda *a: started.append(a))
    r = es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, progress=False, workers=2)
    assert r.paths > 1 and not started


def _slow_three_draws(target, draft, prompt):
    """Three tokens, each branch 0.5 s: 27 branches, 6.75 s on two workers, far more than the budget below allows
    (and the first branch, run in this process before the workers start, far less)."""
    import time
    ids = prompt
    for _ in range(3):
        ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
    int(ids[0, -1])     # read in the loop: a token read only where the loop returns it is spread, not forked
    time.sleep(0.5)
    return ids


def test_the_time_budget_stops_the_workers(every_branch_on_workers):
    with pytest.raises(es.BudgetExceeded) as err:
        es.audit_loop(_slow_three_draws, target=P3, tokens=3, progress=False, workers=2,
                      budget=es.Budget(seconds=3))
    assert err.value.what == "seconds"
    assert every_branch_on_workers


def test_a_deep_branch_travels_to_the_workers():
    # pickle recurses into nested tuples: a stack entry's node chain, nested as deep as its branch has draws, would
    # not travel past a few thousand draws; it travels as one flat tuple of choices
    import pickle

    from exactspec.enumerate.rng import link_choices, unwind_choices
    choices = tuple(i % 3 for i in range(20_000))
    node = link_choices(choices)
    with pytest.raises(RecursionError):
        pickle.dumps(node)
    flat, w = pickle.loads(pickle.dumps(_on_workers._flat((node, F(1, 3)))))
    assert flat == choices and w == F(1, 3) and unwind_choices(link_choices(flat)) == list(choices)


def test_the_float64_run_goes_to_workers_at_once_when_the_first_run_did(monkeypatch):
    # a first run long enough for workers makes a float64 run just as long: it starts them after its first branch
    monkeypatch.setattr(_on_workers, "SWITCH_AFTER", 0.0)
    real, calls = _on_workers.finish_on_workers, []

    def then_never(branches, stack, meter, mass, workers):
        calls.append(len(stack))
        monkeypatch.setattr(_on_workers, "SWITCH_AFTER", 1e9)   # from now on, only at_once can start workers
        return real(branches, stack, meter, mass, workers)
    monkeypatch.setattr(_on_workers, "finish_on_workers", then_never)
    r = es.audit_loop(speculative_sampling, target=P3, draft=Q3, tokens=2, dtype=torch.float32, progress=False,
                      workers=2)
    assert r.extra["float64_paths"] and len(calls) == 2
    assert _on_workers.SWITCH_AFTER == 1e9        # (the second call came from at_once, not from the timer)


def _verify_unread(target, draft, prompt):
    """litgpt-style verification of two drafts fed to the stand-ins unread: decisions fork on their answers (the
    drafts narrowed or conditioned, still pending), so the workers replay choices made by those decisions."""
    ids = prompt
    xs, qs = [], []
    for _ in range(2):
        q = draft(ids)[0, -1].softmax(-1)
        x = torch.multinomial(q, 1)
        xs.append(x), qs.append(q)
        ids = torch.cat([ids, x[None]], dim=1)
    ps = target(ids)[0, -3:-1].softmax(-1)
    out = prompt
    for i, (x, q) in enumerate(zip(xs, qs)):
        p = ps[i]
        if p[x] >= q[x] or not bool(torch.rand(1) <= 1 - p[x] / q[x]):
            out = torch.cat([out, x[None]], dim=1)
            continue
        resid = torch.clamp(p - q, min=0)
        return torch.cat([out, torch.multinomial(resid / resid.sum(), 1)[None]], dim=1)
    return out


def test_workers_replay_decisions_made_on_pending_drafts(every_branch_on_workers):
    import old_paths
    here = es.audit_loop(_verify_unread, target=P3, draft=Q3, tokens=1, progress=False, workers=None)
    there = es.audit_loop(_verify_unread, target=P3, draft=Q3, tokens=1, progress=False, workers=2)
    assert every_branch_on_workers and every_branch_on_workers[0] > 0
    _same(here, there)
    # decisions forking on the draws they read (the path before lazy_worlds' refinement, recorded)
    unrefined = old_paths.recorded("refine", lambda: es.audit_loop(_verify_unread, target=P3, draft=Q3, tokens=1,
                                                                   progress=False, workers=None))
    assert unrefined.output == here.output and here.paths < unrefined.paths     # the decisions did fork on answers


def _slower_in_a_worker(target, draft, prompt):
    """Three tokens, each read (27 branches); a branch in a forked worker takes 50 ms more than here (wall time, whatever
    the load: this process runs out of work first)."""
    import time
    ids = prompt
    for _ in range(3):
        ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=1)
        int(ids[0, -1])
    if _on_workers._JOB:
        time.sleep(0.05)
    return ids


def test_a_worker_hands_back_what_it_left_when_this_process_has_nothing_to_run(monkeypatch):
    # shares never end on time (TASK_SECONDS): a worker's share comes back with branches left only because this
    # process, out of work, said so
    monkeypatch.setattr(_on_workers, "SWITCH_AFTER", 0.0)
    monkeypatch.setattr(_on_workers, "TASK_SECONDS", 100.0)
    handed_back = []
    real = parallel.wait_first

    def watched(futures, timeout=None):
        finished = real(futures, timeout)
        handed_back.extend(bool(f.result().get("left")) for f in finished)
        return finished
    monkeypatch.setattr(parallel, "wait_first", watched)
    here = es.audit_loop(_slower_in_a_worker, target=P3, tokens=3, progress=False, workers=None)
    there = es.audit_loop(_slower_in_a_worker, target=P3, tokens=3, progress=False, workers=2)
    _same(here, there)
    assert any(handed_back)
