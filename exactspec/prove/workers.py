"""Worker processes for one proof: the cells split into subtrees, run on several processes, merged in order.

Every split gives the same cells in the same order, the same counts and the same first refuted cell as
one process. A worker process keeps the setup (space, models) of the proof it is running cells of
(:data:`_WORKER_SETUPS`, keyed by the proof's nonce: two proofs never share one).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from ..errors import BudgetExceeded, ExactSpecError
from .cells import Job, Setup, assumptions_of, dfs, expand
from .families import variables
from .field import Space
from .results import Proof, Refutation

__all__ = ["PARALLEL_MIN_VARIABLES", "CHUNKS_PER_WORKER", "workers_for", "sendable", "prove_in_workers"]

#: the fewest free variables at which ``workers=None`` splits the cells over every core (6: context-free vocab 4,
#: 815 cells, seconds; 4 variables take well under a second, less than starting the worker processes pays back)
PARALLEL_MIN_VARIABLES = 6
#: subtrees of cells handed to the workers, per worker (more: better balance, more cells run before the split)
CHUNKS_PER_WORKER = 16


def workers_for(workers: Any, family: str, vocab: int, tokens: int, timeout: Any) -> int | None:
    """How many worker processes run the proof (None: in this process, the sequential path)."""
    from .. import parallel
    if workers is not None:
        n = parallel.resolve_workers(workers)
        return None if n == 1 else n
    cores = parallel.resolve_workers(0)
    if variables(family, vocab, tokens) >= PARALLEL_MIN_VARIABLES and cores is not None and cores > 1:
        return cores
    return 1 if timeout is not None else None   # a time limit: one worker process, so a stop cannot touch this one


def sendable(job: Job) -> Job:
    """``job`` with its rule and proposer made ready for a worker process (``NotPicklable`` when they cannot go)."""
    from ..parallel import portable, portable_rule
    from dataclasses import replace
    return replace(job, rule=portable_rule(job.rule), proposer=portable(job.proposer, "proposer"))


#: the setups (space, models) of the proofs whose cells this process runs, by the proof's nonce. In a worker
#: process: the proof it serves (one entry; a task of another proof replaces it). In the calling process: the
#: setup of a proof whose first cells ran here, held only while its worker processes are forked from it, so
#: they inherit its computations. Process-wide by necessity (a forked worker sees only the process's state);
#: keyed by nonce, under a lock: two threads' proofs never read each other's.
_WORKER_SETUPS: dict = {}
_WORKER_SETUPS_LOCK = threading.Lock()


def _setup_in_worker(job: Job) -> Setup:
    with _WORKER_SETUPS_LOCK:
        su = _WORKER_SETUPS.get(job.nonce)
    if su is not None:
        return su
    from ..parallel import load_portable, load_rule
    from ..rules import as_rule
    su = Setup(job, as_rule(load_rule(job.rule)), load_portable(job.proposer))
    with _WORKER_SETUPS_LOCK:
        _WORKER_SETUPS.clear()   # a worker keeps the proof it serves only
        _WORKER_SETUPS[job.nonce] = su
    return su


def _forget_setup(nonce: tuple) -> None:
    with _WORKER_SETUPS_LOCK:
        _WORKER_SETUPS.pop(nonce, None)


@contextmanager
def _held_for_fork(nonce: tuple, su: "Setup | None") -> Iterator[None]:
    """Hold ``su`` in :data:`_WORKER_SETUPS` while worker processes are forked from this one (None: nothing)."""
    if su is not None:
        with _WORKER_SETUPS_LOCK:
            _WORKER_SETUPS[nonce] = su
    try:
        yield
    finally:
        _forget_setup(nonce)


def _pack(poly: Any) -> tuple:
    """A polynomial as plain data (sympy's own pickling of ring elements is not reliable)."""
    return tuple((m, int(c.numerator), int(c.denominator)) for m, c in poly.terms())


def _unpack(space: Space, data: tuple) -> Any:
    R = space.K.ring
    from sympy import QQ  # type: ignore[import-untyped]  # sympy ships no type information
    return R.from_dict({m: QQ(a, b) for m, a, b in data})


def _chunk(task: tuple) -> dict:
    """One worker task: ``("expand", target)`` (the first cells and the subtrees left) or ``("dfs", subtree)``."""
    job, kind, payload, wall = task
    su = _setup_in_worker(job)
    space = su.space
    t0 = time.perf_counter()
    deadline = None if wall is None else t0 + (wall - time.time())
    stats: dict = {}
    before = set(space.atoms)
    try:
        if kind == "expand":
            items, paths = expand(su, payload, stats, deadline, None, t0)
            out: dict = {"items": [(it[0], [(_pack(p), s) for p, s in it[1]], it[2]) if it[0] == "sub" else it
                                   for it in items], "paths": paths}
        else:
            start, point = payload
            cells, paths, ref = dfs(su, [([(_unpack(space, p), s) for p, s in start], point)], stats, deadline,
                                     None, t0)
            out = {"cells": cells, "paths": paths, "refutation": ref}
    except BudgetExceeded as exc:   # its caches were dropped: the next task of this process builds its own
        _forget_setup(job.nonce)
        return {"budget": exc.covered}
    except ExactSpecError as exc:
        _forget_setup(job.nonce)
        return _error_as_data(exc)
    out["stats"] = stats
    out["atoms"] = [_pack(a) for a in space.atoms - before]
    return out


def _error_as_data(exc: ExactSpecError) -> dict:
    """A worker's error as it travels back (:func:`exactspec.parallel.error_as_data`)."""
    from .. import parallel
    return {"error": parallel.error_as_data(exc)}


def _raise_from(res: dict, timeout: Any, covered: dict) -> None:
    if "budget" in res:
        raise BudgetExceeded("seconds", timeout, covered=covered)
    if "error" in res:
        from .. import parallel
        parallel.raise_error_data(res["error"])


def prove_in_workers(job: Job, sent: Job, n: int, rule_name: str, family_source: str, timeout: Any, t0: float,
                      progress: Any) -> "Proof | Refutation":
    """The proof on ``n`` worker processes (1: one process, for isolation): the same cells, verdict and counts.

    The first cells run breadth first until ``CHUNKS_PER_WORKER * n`` subtrees are left
    (:func:`expand`); the subtrees then run depth first on every worker, merged in the order of
    the sequential run, so the cells, the counts and the first refuted cell are the sequential
    run's. Without a time limit the first cells run in this process, before the workers start:
    they inherit its computations; with one, they run in a worker and this
    process only merges (a time limit stops the workers, never sympy here).
    """
    from .. import parallel
    space = Space(job.vocab, {"context_free": 1, "per_position": job.tokens, "table": job.vocab}[job.family],
                  job.check_ms)   # the names for the assumptions (no arithmetic here)
    assumed = assumptions_of(job, space, family_source)
    wall = parallel.wall_deadline(timeout)
    covered: dict = {"cells proven": 0}
    total: dict = {}
    atoms: set = set()

    def merge(res: dict) -> None:
        for k, v in res["stats"].items():
            total[k] = total.get(k, 0) + v
        atoms.update(res["atoms"])

    def lost(run: Any, what: str) -> None:
        if run.lost:
            if wall is not None and time.time() >= wall:
                raise BudgetExceeded("seconds", timeout, covered=covered)
            run.require_all(what)

    local = su = None
    if n > 1 and timeout is None:
        # the first cells here; the workers, forked next, start from this process's setup and its caches
        su = Setup(job, job.rule, job.proposer)
        stats: dict = {}
        items, paths = expand(su, CHUNKS_PER_WORKER * n, stats, None, None, t0)
        local = {"stats": stats, "atoms": [_pack(a) for a in su.space.atoms]}
        items = [(it[0], [(_pack(p), sg) for p, sg in it[1]], it[2]) if it[0] == "sub" else it for it in items]
    with _held_for_fork(job.nonce, su if local is not None else None), \
            parallel.executor_for(workers=n, isolate=True) as (ex, owned):
        _forget_setup(job.nonce)   # the workers, started, have it; this process needs it no more
        rebuild = parallel.pool_maker(n, isolate=True)
        if local is not None:
            merge(local)
        elif n == 1:
            items = [("sub", [], None)]
            paths = 0
        else:
            run = parallel.run_chunks(_chunk, [(sent, "expand", CHUNKS_PER_WORKER * n, wall)], executor=ex,
                                      owned=owned, deadline=wall, rebuild=rebuild)
            lost(run, "es.prove")
            first = run.results[0]
            _raise_from(first, timeout, covered)
            merge(first)
            items, paths = first["items"], first["paths"]
        subs = [it for it in items if it[0] == "sub"]
        done = [sum(it[0] == "cell" for it in items)]
        covered["cells proven"] = done[0]
        if progress is not None and n > 1:
            progress(done[0], done[0] + len(subs))

        def tick(finished: int, _total: int) -> None:
            if progress is not None:
                progress(done[0], done[0] + len(subs) - finished)

        def keep(res: dict) -> dict:
            if "cells" in res:
                done[0] += len(res["cells"])
                covered["cells proven"] = done[0]
            return res

        run = parallel.run_chunks(_chunk, [(sent, "dfs", (it[1], it[2]), wall) for it in subs], executor=ex,
                                  owned=owned, deadline=wall, rebuild=rebuild, on_result=keep, progress=tick,
                                  final=lambda r: r.get("refutation") is not None or "cells" not in r,
                                  order=sorted(range(len(subs)), key=lambda k: (len(subs[k][1]), k)))
    stop = len(subs) if run.stop_at is None else run.stop_at
    for k in range(stop + 1 if run.stop_at is not None else stop):
        if k in run.results:
            _raise_from(run.results[k], timeout, covered)
    lost(run, "es.prove")
    cells: list = []
    j = 0
    for it in items:
        if it[0] == "cell":
            cells.append(it[1])
            continue
        if it[0] == "refuted":
            ref = it[1]
        else:
            res = run.results[j]
            j += 1
            merge(res)
            paths += res["paths"]
            ref = res["refutation"]
            if ref is None:
                cells.extend(res["cells"])
                continue
            cells.extend(res["cells"])   # the cells of this subtree before its refuted one
            ref.cells_done = len(cells) - len(res["cells"]) + ref.cells_done
        ref.cells_done = min(ref.cells_done, len(cells)) if it[0] != "refuted" else len(cells)
        ref.assumptions, ref.seconds = assumed, time.perf_counter() - t0
        return ref
    stats = dict(total)   # keys in the order they first arose (the first phase's cells come first)
    stats["cells"] = len(cells)
    return Proof(rule=rule_name, cells=cells, paths=paths, atoms=len(atoms), assumptions=assumed,
                 seconds=time.perf_counter() - t0, stats=stats)
