"""Every core by default (issue 17): the command line's ``workers="auto"`` against today's in-process path.

Run:  python -m benchmarks.bench_speed_parallel          (quick: python -m benchmarks.bench_speed_parallel --quick)

Rows (see ``benchmarks/speed_table.py`` for the interface):

- the default lossless search of ``speculative_sampling`` (as ``benchmarks/bench_search.py``):
  ``workers="auto"`` (every core: the space plans 21,537 instances) against ``workers=None``
  (in this process, today's default); the two results must be equal (type, instances audited,
  space);
- ``exactspec check`` run in this process through :func:`exactspec.cli.main` (``--json
  --no-timings -q``): the new default (``--workers`` left out: every core, the 25
  configurations being estimated long) against today's path (the in-process loop, reached by
  raising ``parallel.AUTO_MIN_SECONDS`` to infinity); the two JSON outputs must be byte-identical.

The note of each row gives the start-up of a local fork pool and the CPU seconds of each path
(this process, and its worker processes), measured in the same run: the chunked path costs no
more CPU than the in-process one, so on idle cores its wall time is about the CPU time divided by
the cores. On a machine shared with other jobs the wall figures are upper bounds, and with the
kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a saturated machine
gives one session the same share of CPU however many processes it runs: there the new path
cannot be faster, and the CPU seconds are the figure to read.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import resource
import sys
import time
from typing import Any

import exactspec as es
from exactspec import parallel
from exactspec.counterexamples import default_space, search

from ._in_process import no_pool


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the pool's workers, once joined)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _pool_start() -> float:
    """Seconds to start (and reach) a local pool of every core, the best of three."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        pool = parallel._pool(parallel.resolve_workers(0))
        best = min(best, time.perf_counter() - t0)
        parallel._stop_pool(pool)
    return best


def _search_row(quick: bool, pool_s: float) -> dict[str, Any]:
    rule = es.rules.speculative_sampling
    space = default_space(rule)
    if quick:
        space = space.with_(vocabs=(2, 3))
    t0, c0 = time.perf_counter(), _cpu()
    with no_pool():
        old = search(rule, space=space, progress=False, workers=None)     # today's path: this process
    old_s, old_cpu = time.perf_counter() - t0, _cpu() - c0
    t0, c0 = time.perf_counter(), _cpu()
    new = search(rule, space=space, progress=False, workers=parallel.AUTO)   # the command line's default
    new_s, new_cpu = time.perf_counter() - t0, _cpu() - c0
    same = type(old) is type(new) and old.audited == new.audited and old.space == new.space and not new
    cores = parallel.resolve_workers(0)
    return {"job": "default search, catalog rule (speculative_sampling, lossless: the whole default space)",
            "new_s": new_s, "old_s": old_s, "same": same, "target_s": old_s / cores,
            "note": f"{new.audited} instances, {type(new).__name__}; new: workers=auto -> "
                    f"{parallel.auto_workers(parallel.AUTO, new.audited * 1e-3)!r} ({cores} cores), old: in-process; "
                    f"target: the {cores}-core ideal (no row in the issue); pool start {pool_s:.3f} s; CPU "
                    f"new {new_cpu:.1f} s, old {old_cpu:.1f} s"}


def _check(argv: list[str]) -> tuple[float, float, int, str]:
    from exactspec.cli import main
    buf = io.StringIO()
    t0, c0 = time.perf_counter(), _cpu()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    return time.perf_counter() - t0, _cpu() - c0, code, buf.getvalue()


def _check_row(quick: bool, pool_s: float) -> dict[str, Any]:
    from exactspec.cli import check
    from exactspec.instances import check_cases
    argv = ["check", "--json", "--no-timings", "-q"]
    real_cases, real_bar = check.check_cases, parallel.AUTO_MIN_SECONDS
    try:
        if quick:   # the tree configurations (the check's fast half), still estimated long enough for a pool
            check.check_cases = lambda inst: [c for c in real_cases(inst) if c.proposer.family == "tree"]
            check.CASE_SECONDS, case_seconds = 1.0, check.CASE_SECONDS
        parallel.AUTO_MIN_SECONDS = math.inf      # today's path: the in-process loop
        with no_pool():
            old_s, old_cpu, old_code, old_out = _check(argv)
        parallel.AUTO_MIN_SECONDS = real_bar      # the new default: every core for a long check
        new_s, new_cpu, new_code, new_out = _check(argv)
    finally:
        check.check_cases, parallel.AUTO_MIN_SECONDS = real_cases, real_bar
        if quick:
            check.CASE_SECONDS = case_seconds
    n = len(check_cases()) if not quick else len([c for c in check_cases() if c.proposer.family == "tree"])
    return {"job": "`exactspec check`", "new_s": new_s, "old_s": old_s,
            "same": old_code == new_code and old_out == new_out, "target_s": 2.0,
            "note": f"{n} configurations, in-process wall time of main(['check', ...]) (no interpreter start); new: "
                    f"every core ({parallel.resolve_workers(0)}), old: in this process; exit {new_code}; "
                    f"pool start {pool_s:.3f} s; CPU new {new_cpu:.1f} s, old {old_cpu:.1f} s"}


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """The rows of this benchmark: the default search and ``exactspec check``, new default against today's."""
    pool_s = _pool_start()
    return [_search_row(quick, pool_s), _check_row(quick, pool_s)]


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"== every core by default: {os.cpu_count()} cores, load average {load:.1f} at the start ==")
    for r in rows(quick=quick):
        ratio = r["old_s"] / r["new_s"] if r["new_s"] else float("nan")
        print(f"{r['job']}\n  new {r['new_s']:.2f} s   old {r['old_s']:.2f} s   ratio {ratio:.2f}x   "
              f"target <= {r['target_s']:.2f} s   same: {r['same']}\n  {r['note']}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} at the end")


if __name__ == "__main__":
    main()
