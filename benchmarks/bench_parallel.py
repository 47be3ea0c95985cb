"""Parallel benchmark: the default lossless search of speculative_sampling and ``exactspec check``, in this
process and on 2 worker processes, side by side in one run (same job, results compared), and the
per-chunk overhead of a local process pool and of a Dask LocalCluster.

Run:  python -m benchmarks.bench_parallel [--rounds 3] [--workers 2] [--no-dask]

The in-process and the parallel variants are run alternately, ``--rounds`` times each, and the
best time of each is reported (other work on the machine slows whichever run it overlaps; the
load average is printed before and after). Each parallel result is checked equal to the
in-process one before its time counts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import time

import exactspec as es
from exactspec import parallel
from exactspec.cli import main as cli
from exactspec.counterexamples.searching import SEARCH_CHUNK


def _load() -> str:
    try:
        return "load average %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "load average n/a"


def _search(workers):
    t0 = time.perf_counter()
    found = es.counterexamples.search(es.rules.speculative_sampling, progress=False, workers=workers)
    dt = time.perf_counter() - t0
    d = found.to_dict()
    d.pop("seconds")
    return dt, d


def _check(workers):
    # the command as users run it: the table (no time column without --wide, so two runs print the same text)
    argv = ["check"] + ([] if workers is None else ["--workers", str(workers)])
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        code = cli(argv)
    dt = time.perf_counter() - t0
    return dt, (code, buf.getvalue())


def _cpu():
    """CPU seconds of this process and of its finished children (the pool's workers)."""
    import resource
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def side_by_side(name, job, workers, rounds):
    """Best wall time of each variant; the CPU column (CPU seconds / wall seconds) shows how many cores a run got."""
    best = {None: float("inf"), workers: float("inf")}
    ref = None
    for r in range(rounds):
        for w in (None, workers):
            c0 = _cpu()
            dt, result = job(w)
            used = _cpu() - c0
            if ref is None:
                ref = result
            assert result == ref, f"{name}: the result with workers={w} differs from the in-process one"
            best[w] = min(best[w], dt)
            print(f"  {name:8} round {r + 1} {'in-process' if w is None else f'{w} workers':12} {dt:7.3f} s  "
                  f"cpu {used:6.2f} s = {used / dt:4.2f} cores")
    ratio = best[None] / best[workers]
    print(f"{name}: in-process {best[None]:.3f} s, {workers} workers {best[workers]:.3f} s -> {ratio:.2f}x "
          f"(best of {rounds}, same result)")
    return ratio


def _noop(x):
    return x


def chunk_overhead(executor, n=400, owned=False):
    """Seconds per chunk for chunks that do nothing: submission, pickling, scheduling, the result's way back."""
    run = parallel.run_chunks(_noop, list(range(n)), executor=executor, owned=owned)  # warm up the workers
    t0 = time.perf_counter()
    run = parallel.run_chunks(_noop, list(range(n)), executor=executor, owned=owned)
    dt = time.perf_counter() - t0
    assert run.results == {k: k for k in range(n)}
    return dt / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args(argv)
    print(f"cores: {os.cpu_count()}; {_load()}; search chunk size {SEARCH_CHUNK} instances")
    print("== side by side (alternating) ==")
    ratios = {"search": side_by_side("search", _search, args.workers, args.rounds),
              "check": side_by_side("check", _check, args.workers, args.rounds)}
    print("== per-chunk overhead (no-op chunks) ==")
    with parallel.executor_for(workers=args.workers) as (pool, owned):
        print(f"process pool ({args.workers} workers): {chunk_overhead(pool, owned=owned) * 1e3:.3f} ms per chunk")
    if not args.no_dask:
        try:
            import distributed
        except ImportError:
            print("LocalCluster: distributed not installed (pip install 'exactspec[dask]')")
        else:
            with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                          dashboard_address=None, silence_logs=50) as cluster, \
                    distributed.Client(cluster) as client:
                ex = client.get_executor(pure=False)
                print(f"Dask LocalCluster ({args.workers} worker processes): "
                      f"{chunk_overhead(ex, n=200) * 1e3:.3f} ms per chunk")
    per_audit = None
    t0 = time.perf_counter()
    found = es.counterexamples.search(es.rules.speculative_sampling, progress=False, workers=None)  # one process
    per_audit = (time.perf_counter() - t0) / found.audited
    print(f"one audit of the default search: {per_audit * 1e6:.0f} us on average -> a chunk of {SEARCH_CHUNK} is "
          f"{per_audit * SEARCH_CHUNK * 1e3:.0f} ms of work")
    print(f"after: {_load()}")
    print(json.dumps({k: round(v, 2) for k, v in ratios.items()}))


if __name__ == "__main__":
    main()
