"""The branches of one whole-loop audit on worker processes, once the audit has run long enough to pay for them.

A whole-loop audit runs the loop once per branch of its randomness, depth first, each branch from
the start (:func:`~exactspec.samplers.loops.loop_audit.audit_loop`). Branches are independent, so
they split over processes: after :data:`SWITCH_AFTER` seconds in this process, the branches still
to run (the enumeration's stack: whole subtrees of the draw tree) are shared out between this
process and ``workers - 1`` forked ones, which inherit the loop, the stand-ins and the
interception as they are. A share runs depth first for at most :data:`TASK_SECONDS`, then hands
back the branches it left (:func:`_share`), split again among the processes, so one large subtree
does not hold one process while the others wait. This process runs its shares between its looks at
the pool, handing back as soon as a worker is done with its own (one fork fewer, and its memos of
exact rows are warm); while it waits with nothing to run, a flag in shared memory tells the
workers to hand back what their shares left at once.

Results merge in the sequential run's order: each share is keyed by its place in the depth-first
order (its part done first, then what it left, in the order the stack would have popped it), so
the law (exact sums, inserted in the same order), the first error site, the step statistics and,
under ``on_error="raise"``, the error raised (the first failing branch in depth-first order, once
every share before it has run) are those of the run in this process. The path budget is handed
out in allowances, so no more branches run than the budget allows; a time budget is a deadline
every worker checks between branches (and this process's guard stops the pool).

Only with the fork start method (workers must inherit the loop: a closure or a local function
cannot be sent), outside a worker of this module, with a real clock, and with 2 cores or more.

>>> plan(None, None) is None
True
"""

from __future__ import annotations

import heapq
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from ... import parallel
from ...enumerate.rng import link_choices, unwind_choices
from ...errors import BudgetExceeded, ExactSpecError

__all__ = ["SWITCH_AFTER", "TASK_SECONDS", "Plan", "plan", "finish_on_workers"]

#: seconds a whole-loop audit runs in this process before the branches left are shared out (a shorter audit never
#: starts a pool: forking a process that holds torch and transformers costs 12-18 ms, benchmarks/fork_cost.py, so on
#: two cores, where one worker is forked, the pool costs an audit that would have ended just after the switch about
#: 15 ms). litgpt's generate at gamma 3 (198 branches, about 0.8 s in one process) took 0.71-1.0 s on two cores
#: switching at 0.2 s and 0.64-0.95 s at 0.05 s with two workers and this process idle (2026-12-02, four interleaved
#: rounds of three runs); 0.45-0.56 s at 0.05 s and at 0.02 s alike once this process ran shares too (2026-12-03)
SWITCH_AFTER = 0.05
#: a worker hands back the branches left of its share after this many seconds, so they can be split again (a worker
#: whose share ran out waits for the others' to come back: the shorter, the less it waits, the more round trips)
TASK_SECONDS = 0.05

#: in a forked worker: the enumeration it continues (set in the parent just before the pool forks)
_JOB: dict[str, Any] = {}


@dataclass(frozen=True)
class Plan:
    """How a whole-loop audit uses workers: ``workers`` processes once it has run ``after`` seconds here."""

    workers: int
    after: float


def plan(workers: Any, meter: Any) -> Plan | None:
    """The worker plan for ``workers`` (None: this process only), or None where workers cannot or need not run.

    ``workers``: None (this process), :data:`exactspec.parallel.AUTO` (every core) or a number of
    processes (0: every core; 1: this process).

    >>> plan(1, None) is None
    True
    """
    if workers is None or _JOB:
        return None
    n = parallel.resolve_workers(0 if isinstance(workers, str) and workers == parallel.AUTO else workers)
    if n is None or n < 2:
        return None
    if parallel.start_method() != "fork" or multiprocessing.current_process().daemon:
        return None
    if meter is not None and meter.budget.custom_clock:   # a caller's clock is not one a worker can read
        return None
    return Plan(n, SWITCH_AFTER)


def _share(entries: list, allowance: int | None, deadline: float | None) -> dict:
    """Run the branches ``entries`` (in the order the stack pops them) in a worker; see the module docstring."""
    branches = _JOB.get("branches")
    if branches is None:
        raise ExactSpecError("a whole-loop audit's worker was started without its audit (internal error)")
    if not _JOB.get("threads_set"):
        import torch
        torch.set_num_threads(1)
        _JOB["threads_set"] = True
    idle = _JOB.get("idle")
    return _run_share(branches, entries, allowance, deadline, (lambda: idle.value) if idle is not None else None,
                      False)


def _run_share(branches: Any, entries: list, allowance: int | None, deadline: float | None,
               stop: Any, here: bool) -> dict:
    """Run the branches ``entries`` of the enumeration ``branches`` depth first into a run of their own, for at most
    :data:`TASK_SECONDS` and until ``stop()`` says another process waits for work; what it left is handed back. In
    a worker (``here`` False) the session's new approximations, lattices and generator states travel back with it;
    in this process they are in the session already."""
    session = branches.session
    approximations = None if here else dict(session.approximations)
    run = branches.fresh_run()
    stack = [(link_choices(choices), w) for choices, w in reversed(entries)]
    ran = 0
    mass = branches.fld.zero
    end = time.perf_counter() + TASK_SECONDS
    try:
        while stack:
            if allowance is not None and ran >= allowance:
                break
            now = time.perf_counter()
            if ran and (now >= end or (stop is not None and stop())):
                break
            if deadline is not None and now > deadline:
                return {"budget": True, "paths": ran}
            prefix, w = stack.pop()
            ran += 1
            mass += branches.branch(prefix, w, stack, None)
    except (ExactSpecError, MemoryError, RecursionError) as exc:
        if here:
            return {"error": exc, "paths": ran}
        cause = exc.__cause__
        if cause is not None:      # a cause does not travel with its error: its traceback does, as a note
            import traceback
            exc.add_note("raised in a worker process of the audit, from:\n"
                         + "".join(traceback.format_exception(cause)).rstrip())
        return {"error": parallel.error_as_data(exc), "paths": ran}
    out = {"run": run, "paths": ran, "mass": mass, "left": [_flat(e) for e in reversed(stack)]}
    if approximations is not None:
        out.update(approximations={k: n - approximations.get(k, 0) for k, n in session.approximations.items()
                                   if n != approximations.get(k, 0)},
                   lattices=set(session.lattices), generator_states=set(session.generator_states))
    return out


def _here(branches: Any, entries: list, allowance: int | None, deadline: float | None, stop: Any) -> dict:
    """A share run in this process, between its looks at the pool: the enumeration's own run and note put back."""
    run, note = branches.run, branches._note
    try:
        return _run_share(branches, entries, allowance, deadline, stop, True)
    finally:
        branches.run, branches._note = run, note


def _flat(entry: tuple) -> tuple:
    """A stack entry (a branch's node chain, its weight) with its choices as one flat tuple: a chain is nested as
    deep as the branch has draws, which pickle would follow by recursion."""
    node, w = entry
    return tuple(unwind_choices(node)), w


def _parts(entries: list, n: int) -> list[list]:
    """``entries`` (subtrees, in the order the stack pops them) cut into at most ``n`` runs of consecutive ones: a share
    each. One share per subtree sent most shares off with a branch or two (a few milliseconds of work for a round
    trip to the pool); a share runs at most :data:`TASK_SECONDS` and hands back what it leaves, so fewer, larger
    shares still balance.

    >>> _parts([1, 2, 3, 4, 5], 2), _parts([1], 4)
    ([[1, 2, 3], [4, 5]], [[1]])
    """
    n = max(1, min(n, len(entries)))
    size, extra = divmod(len(entries), n)
    out, at = [], 0
    for i in range(n):
        take = size + (1 if i < extra else 0)
        out.append(entries[at:at + take])
        at += take
    return out


def finish_on_workers(branches: Any, stack: list, meter: Any, mass: Any, workers: int) -> None:
    """Run the branches left on ``stack`` on ``workers`` processes: this one and ``workers - 1`` forked ones; fold
    them into ``branches.run``.

    Empties ``stack``; counts the branches on ``meter`` (raising BudgetExceeded past its paths or
    time budget) and their probability on ``mass``; raises the error the run in this process would
    have raised first. See the module docstring.
    """
    budget = meter.budget
    heap: list = []
    for i, part in enumerate(_parts([_flat(e) for e in reversed(stack)], workers)):   # in the order the stack pops
        heapq.heappush(heap, ((i,), part))
    stack.clear()
    done: dict = {}
    failed: list = []                    # [(key, error data)] of the first error in depth-first order so far
    outstanding = 0                      # branches allowed to the shares running
    running: dict = {}
    session = branches.session
    forked = workers - 1                 # this process runs shares too, between its looks at the pool
    # set by this process while it waits with nothing to run: a worker then hands back what its share left
    idle = multiprocessing.get_context("fork").RawValue("b", 0)
    _JOB.update(branches=branches, idle=idle)
    try:
        pool = parallel.fork_pool(forked)
    finally:
        _JOB.clear()                     # set for the forked workers only: this process is not one of them

    def allowance_now() -> int | None:
        if budget.paths is None:
            return None
        free = budget.paths - meter.paths - outstanding     # shared out among the idle processes
        if free <= 0:
            if not running:
                raise BudgetExceeded("paths", budget.paths, covered=meter.covered())
            return 0
        return max(1, free // (workers - len(running)))

    def take(key: tuple, res: dict, local: bool) -> None:
        meter.paths += res["paths"]
        if res.get("budget"):
            raise BudgetExceeded("seconds", budget.seconds, covered=meter.covered())
        if "error" in res:
            if not failed or key < failed[0][0]:
                failed[:] = [(key, res["error"])]
            return
        done[key + (0,)] = res["run"]
        if mass is not None:
            mass.add(res["mass"])
        if not local:
            for k, n in res["approximations"].items():
                session.approximations[k] = session.approximations.get(k, 0) + n
            session.lattices |= res["lattices"]
            session.generator_states |= res["generator_states"]
        left = res["left"]
        if left:
            for j, part in enumerate(_parts(left, workers), 1):
                heapq.heappush(heap, (key + (j,), part))

    def collect(finished: list) -> None:
        nonlocal outstanding
        for fut in finished:
            key, allowance = running.pop(fut)
            outstanding -= allowance
            take(key, fut.result(), False)

    def next_part() -> tuple | None:
        if heap and failed and heap[0][0] > failed[0][0]:
            heap.clear()                 # after the first error: nothing later in the order needs running
        return heapq.heappop(heap) if heap else None

    try:
        while heap or running:
            while heap and len(running) < forked:
                allowance = allowance_now()
                if allowance == 0:
                    break
                got = next_part()
                if got is None:
                    break
                key, part = got
                running[pool.submit(_share, part, allowance, meter.deadline)] = (key, allowance or 0)
                outstanding += allowance or 0
            got = next_part() if heap and allowance_now() != 0 else None
            if got is not None:          # a share here, until a worker is done with its own
                key, part = got
                futures = list(running)
                take(key, _here(branches, part, allowance_now(), meter.deadline,
                                lambda: any(f.done() for f in futures)), True)
                collect(parallel.wait_first(list(running), 0.0) if running else [])
            elif running:
                idle.value = 1
                try:
                    collect(parallel.wait_first(list(running)))
                finally:
                    idle.value = 0
            meter.check_time()
    finally:
        parallel.stop_pool(pool)
    if failed:
        parallel.raise_error_data(failed[0][1])
    run, zero = branches.run, branches.fld.zero
    for key in sorted(done):
        run.absorb(done[key], zero)
