"""The sampler search on every core (issue 17): ``workers="auto"`` (the command line's default) against in-process.

Run:  python -m benchmarks.bench_speed_sampler_workers          (quick: ... --quick)

Rows (see ``benchmarks/speed_table.py`` for the interface), each timing the new path and today's
path in the same run and checking the two results are equal (the whole result but its wall-clock
seconds: type, instance, laws, TV, counts, space):

- the default search of the correct numpy sampler (``exactspec.bugzoo.numpy_samplers:correct``,
  243 instances, adapter ``numpy``);
- the default search of the correct vLLM-style torch sampler
  (``exactspec.bugzoo.torch_samplers:correct``, ``--adapter vllm``, 243 instances);
- the loop search of ``exactspec.bugzoo.loops:speculative_sampling`` (``search_loop``)
  on the vocabulary-2 part of its default space (the whole one takes ~170 s CPU in this process:
  too long to time twice here); no row in the issue: its target is the ideal of every core.

New: ``search_sampler(..., workers="auto")`` (every core when the search is estimated long enough:
:data:`~exactspec.samplers.search.SAMPLER_INSTANCE_SECONDS` /
:data:`~exactspec.samplers.search.TORCH_SAMPLER_INSTANCE_SECONDS` an instance); old:
``workers=None``, in this process (today's path; the Python default until 2026-12-02, and the benchmark
refuses a baseline that starts a pool: ``benchmarks._in_process.no_pool``). ``--quick`` covers vocabularies
2 and 3 only. The note of each row gives the CPU seconds of each path (this process and its
finished worker processes): on a machine shared with other jobs, and with the kernel's autogroup
scheduling, a saturated machine gives one session the same share of CPU however many processes it
runs, so the wall gain shows only on idle cores; the CPU seconds are the figure to read there.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
import time
from typing import Any

from exactspec import parallel
from exactspec.samplers.search import sampler_space, search_sampler

from ._in_process import no_pool


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the pool's workers, once joined)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _whole(found: Any) -> dict:
    out = dataclasses.asdict(found)
    out.pop("seconds", None)
    return out


def _row(job: str, ref: str, adapter: str, target_s: float, quick: bool) -> dict[str, Any]:
    space = sampler_space()
    if quick:
        space = space.with_(vocabs=(2, 3))
    t0, c0 = time.perf_counter(), _cpu()
    with no_pool():
        old = search_sampler(ref, adapter=adapter, space=space, progress=False, workers=None)   # this process
    old_s, old_cpu = time.perf_counter() - t0, _cpu() - c0
    t0, c0 = time.perf_counter(), _cpu()
    new = search_sampler(ref, adapter=adapter, space=space, progress=False, workers=parallel.AUTO)
    new_s, new_cpu = time.perf_counter() - t0, _cpu() - c0
    cores = parallel.resolve_workers(0)
    return {"job": job, "new_s": new_s, "old_s": old_s, "same": _whole(old) == _whole(new), "target_s": target_s,
            "note": f"{ref} --adapter {adapter}: {new.audited} instances, {type(new).__name__}; new: workers=auto "
                    f"({cores} cores), old: in-process; CPU new {new_cpu:.1f} s, old {old_cpu:.1f} s"}


def _loop_row(quick: bool) -> dict[str, Any]:
    import exactspec as es
    from exactspec.bugzoo import loops
    from exactspec.samplers.loops.loop_search import loop_space as _loop_space
    space = _loop_space(None, None).with_(vocabs=(2,))
    if quick:
        space = space.with_(tokens=(1, 2))
    t0, c0 = time.perf_counter(), _cpu()
    with no_pool():
        old = es.search_loop(loops.speculative_sampling, space=space, progress=False, workers=None)
    old_s, old_cpu = time.perf_counter() - t0, _cpu() - c0
    t0, c0 = time.perf_counter(), _cpu()
    new = es.search_loop(loops.speculative_sampling, space=space, progress=False, workers=parallel.AUTO)
    new_s, new_cpu = time.perf_counter() - t0, _cpu() - c0
    cores = parallel.resolve_workers(0)
    return {"job": "loop search, correct speculative sampling loop (vocab 2 part of the default space)",
            "new_s": new_s, "old_s": old_s, "same": _whole(old) == _whole(new), "target_s": old_s / cores,
            "note": f"exactspec.bugzoo.loops:speculative_sampling: {new.audited} instances, {type(new).__name__}; "
                    f"new: workers=auto ({cores} cores), old: in-process; target: the {cores}-core ideal (no row "
                    f"in the issue); CPU new {new_cpu:.1f} s, old {old_cpu:.1f} s"}


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """The rows of this benchmark: the numpy and vLLM torch correct samplers' default searches, a loop search."""
    return [
        _row("default search, correct numpy sampler (`exactspec.bugzoo.numpy_samplers:correct`, 243 instances)",
             "exactspec.bugzoo.numpy_samplers:correct", "numpy", 2.0, quick),
        _row("default search, correct torch chain sampler (`--adapter vllm`, a plain per-row loop)",
             "exactspec.bugzoo.torch_samplers:correct", "vllm", 10.0, quick),
        _loop_row(quick),
    ]


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"== the sampler search on every core: {os.cpu_count()} cores, load average {load:.1f} at the start ==")
    for r in rows(quick=quick):
        ratio = r["old_s"] / r["new_s"] if r["new_s"] else float("nan")
        print(f"{r['job']}\n  new {r['new_s']:.2f} s   old {r['old_s']:.2f} s   ratio {ratio:.2f}x   "
              f"target <= {r['target_s']:.2f} s   same: {r['same']}\n  {r['note']}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} at the end")


if __name__ == "__main__":
    main()
