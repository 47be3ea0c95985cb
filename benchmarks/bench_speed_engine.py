"""Issue 17, the exact engine's rows: today's path and the earlier one, timed in the same run, laws compared.

Run:  python -m benchmarks.bench_speed_engine [--quick] [--memory]

Rows (the issue's wording), each timed on the new path and on the earlier path kept behind
``EXACTSPEC_LEGACY_ENGINE=1`` (:data:`exactspec.enumerate.stream.LEGACY_ENV`), with ``same``
true only when the two give identical exact laws:

- the exact engine on a catalog rule (speculative_sampling, closed form): chain, vocab 16,
  gamma 4, 4 tokens (65,536 outcomes), order-2 seeded random rational tables
  (``make_instance(vocab=16, order=2, gamma=4, tokens=4)``: ``random_table(seed=0)`` target,
  ``perturbed(seed=1)`` draft, prompt ``(0, 1)``) as ``benchmarks/bench_engine.py`` builds them;
- the same with the user rule of ``bench_engine.py`` (speculative sampling written against
  ``rng.uniform`` and ``rng.categorical``, no closed form);
- ``exactspec check`` (a fresh process each time, import included; ``--json --no-timings``
  reports compared, less the work counters ``paths`` and ``step_laws``);
- multi_sample_match on its ``exactspec check`` configuration: its closed form against the rng
  form enumerated branch by branch (``closed_form=False``), laws compared.

``--memory`` also prints the peak (tracemalloc) of the new path at vocab 8 and 16 (4,096 and
65,536 outcomes). ``--quick`` runs smaller instances (vocab 8) and caps the earlier path sooner.
Figures are wall seconds on whatever machine runs it (the issue's targets are for a quiet
2-core machine); the ratios are what count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Callable, Iterator

import exactspec as es
from benchmarks.bench_engine import user_rule
from exactspec.enumerate.stream import LEGACY_ENV
from exactspec.instances import make_instance

CATALOG_JOB = "exact engine, catalog rule, chain vocab 16 gamma 4 tokens 4 (65,536 outcomes)"
USER_JOB = "same, user rule (rng form)"
CHECK_JOB = "`exactspec check`"
#: work counters: how many branches and step laws a path ran (the new path runs fewer), not results
COUNTERS = ("paths", "step_laws")


@contextlib.contextmanager
def legacy(on: bool) -> Iterator[None]:
    """Run the engines built inside on the earlier path (``on``) or the new one."""
    before = os.environ.get(LEGACY_ENV)
    os.environ[LEGACY_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LEGACY_ENV, None)
        else:
            os.environ[LEGACY_ENV] = before


def audit(inst: Any, rule: Any, budget: Any = None) -> Any:
    return es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule, prompt=inst.prompt,
                    tokens=inst.tokens, budget=budget)


def same_laws(a: Any, b: Any) -> bool:
    """Two reports with identical exact laws, TV, verdict and efficiency figures."""
    return (a.output == b.output and a.expected == b.expected and a.tv == b.tv and a.verdict == b.verdict
            and a.tokens_per_call == b.tokens_per_call and a.accepted_per_call == b.accepted_per_call
            and a.target_calls == b.target_calls and a.nodes_per_call == b.nodes_per_call)


_CPU: dict = {}


def timed(fn: Callable[[], Any], label: str = "") -> tuple[float, Any]:
    """(wall seconds, result); the CPU seconds go to ``_CPU[label]`` (on a loaded machine, closer to a quiet wall)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    _CPU[label] = time.process_time() - c0
    return time.perf_counter() - t0, out


def engine_row(job: str, inst: Any, rule: Any, target_s: float, cap: float | None, label: str,
               repeat: int = 1) -> dict:
    """One engine row: the new path, then the earlier one (stopped after ``cap`` seconds), alternately
    ``repeat`` times, the best of each kept (a loaded machine's spikes fall on either)."""
    row: dict = {"job": job, "new_s": None, "old_s": None, "same": False, "target_s": target_s}
    old = None
    cpu: dict = {}
    for _ in range(repeat):
        with legacy(False):
            new_s, new = timed(lambda: audit(inst, rule), "new")
        row["new_s"] = new_s if row["new_s"] is None else min(row["new_s"], new_s)
        cpu["new"] = min(cpu.get("new", _CPU["new"]), _CPU["new"])
        if "old_capped_s" in row:
            continue
        with legacy(True):
            try:
                old_s, old = timed(lambda: audit(inst, rule, None if cap is None else es.Budget(seconds=cap)), "old")
            except es.BudgetExceeded:
                row["old_capped_s"] = cap
                old = None
            else:
                row["old_s"] = old_s if row["old_s"] is None else min(row["old_s"], old_s)
                cpu["old"] = min(cpu.get("old", _CPU["old"]), _CPU["old"])
    _CPU.update(cpu)
    if old is not None:
        row["same"] = same_laws(new, old)
        compared = "laws compared on this instance"
    else:   # the earlier path did not finish: compare the laws where it does
        small = make_instance(vocab=6, order=2, gamma=4, tokens=4)
        with legacy(False):
            a = audit(small, rule)
        with legacy(True):
            b = audit(small, rule)
        row["same"] = same_laws(a, b)
        compared = "earlier path stopped at the cap: laws compared at vocab 6 instead"
    v = inst.target.vocab
    cpu = f"CPU {_CPU['new']:.2f} s new" + (f" vs {_CPU['old']:.2f} s earlier" if old is not None else "")
    row["note"] = (f"{label}; {cpu}; make_instance(vocab={v}, order=2, gamma={inst.proposer.gamma}, tokens={inst.tokens}) "
                   f"(seeded order-2 random rational tables, perturbed draft); {len(new.output)} outcomes, "
                   f"{new.paths} branches new vs {old.paths if old is not None else '?'} earlier; {compared}")
    return row


def _children_cpu() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_check(old: bool, cache: str | None = None) -> tuple[float, dict]:
    """One ``python -m exactspec check --json --no-timings`` in a fresh process: wall seconds and its JSON.

    ``cache``: a bytecode cache folder (``PYTHONPYCACHEPREFIX``), written even where the environment says
    ``PYTHONDONTWRITEBYTECODE`` (this machine does): an installed package has its bytecode, so a fresh
    process that compiles every module first measures the compiler, not the check.
    """
    env = dict(os.environ, **{LEGACY_ENV: "1" if old else "0"})
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "exactspec", "check", "--json", "--no-timings"], env=env,
                          capture_output=True, text=True)
    dt = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    key = "old" if old else "new"
    _CPU[key] = min(_CPU.get(key, cpu), cpu)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"exactspec check exited {proc.returncode}: {proc.stderr[-2000:]}")
    return dt, json.loads(proc.stdout)


def without_counters(report: dict) -> dict:
    return {**report, "rules": [{k: v for k, v in r.items() if k not in COUNTERS} for r in report["rules"]]}


def check_row(runs: int = 2) -> dict:
    """The whole check in fresh processes, bytecode cached as an installed package has it: one untimed run of
    each path fills the cache, then ``runs`` alternate timed runs of each; the best of each is the figure."""
    import tempfile
    _CPU.clear()
    with tempfile.TemporaryDirectory(prefix="exactspec-pyc-") as cache:
        run_check(False, cache), run_check(True, cache)           # untimed: compile once, warm the file cache
        _CPU.clear()
        news, olds = [], []
        for _ in range(runs):
            news.append(run_check(False, cache))
            olds.append(run_check(True, cache))
    (new_s, new), (old_s, old) = min(news, key=lambda t: t[0]), min(olds, key=lambda t: t[0])
    same = all(without_counters(r) == without_counters(new) for _, r in news) and all(
        without_counters(r) == without_counters(new) for _, r in olds)
    paths = sum(r["paths"] for r in new["rules"]), sum(r["paths"] for r in old["rules"])
    return {"job": CHECK_JOB, "new_s": new_s, "old_s": old_s, "same": same, "target_s": 2.0,
            "note": f"CPU {_CPU['new']:.2f} s new vs {_CPU['old']:.2f} s earlier (the process and its workers, best "
                    f"run); python -m exactspec check --json --no-timings in a fresh process (import included, "
                    f"bytecode cached as an installed package has it), best of {runs} alternate runs of each path "
                    f"after one untimed run each; {len(new['rules'])} configurations, default workers; reports "
                    f"identical but for the work counters {', '.join(COUNTERS)} ({paths[0]} branches new vs "
                    f"{paths[1]} earlier)"}


MSM_JOB = "`exactspec check`: multi_sample_match, tree (2,1) iid, 4 tokens (closed form vs rng form)"


def msm_row() -> dict:
    """multi_sample_match on its ``exactspec check`` configuration: its closed form (new) and the rng form
    enumerated branch by branch (``closed_form=False``: the path ``check`` ran before), laws compared."""
    from exactspec.instances import default_instance
    inst = default_instance()
    kw = dict(target=inst.target, draft=inst.draft, rule=es.rules.multi_sample_match, prompt=inst.prompt, tokens=4,
              proposer=es.drafts.tree((2, 1), children="iid"))
    new_s, new = min((timed(lambda: es.audit(**kw), "new") for _ in range(3)), key=lambda t: t[0])
    old_s, old = min((timed(lambda: es.audit(closed_form=False, **kw), "old") for _ in range(2)), key=lambda t: t[0])
    return {"job": MSM_JOB, "new_s": new_s, "old_s": old_s, "same": same_laws(new, old), "target_s": 2.0,
            "note": f"one configuration of the check (its target is the whole check's 2 s); best of 3 (new) and 2 "
                    f"(rng form) in this process; {len(new.output)} outcomes, {new.paths} branches new vs "
                    f"{old.paths} rng form; TV {float(new.tv):.4g} both ways (equal exactly)"}


def rows(quick: bool = False) -> list[dict]:
    """The issue's engine rows: new path and earlier path, timed in this run, laws compared.

    >>> sorted(rows.__code__.co_varnames[:1])
    ['quick']
    """
    vocab = 8 if quick else 16
    inst = make_instance(vocab=vocab, order=2, gamma=4, tokens=4)
    out = [engine_row(CATALOG_JOB, inst, es.rules.speculative_sampling, 1.0, None,
                      "speculative_sampling (closed form), best of 2 alternate runs", repeat=2),
           engine_row(USER_JOB, inst, user_rule, 5.0, 30.0 if quick else 240.0,
                      "benchmarks.bench_engine.user_rule (uniform and categorical draws, no closed form)")]
    out.append(check_row())
    out.append(msm_row())
    return out


def peak_mib(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def memory(vocabs: tuple = (8, 16), rules: tuple = ("catalog", "user")) -> list[tuple]:
    """Peak traced memory of the new path per vocab and rule: (vocab, outcomes, rule, MiB)."""
    found = []
    for rule_name in rules:
        rule = es.rules.speculative_sampling if rule_name == "catalog" else user_rule
        for v in vocabs:
            inst = make_instance(vocab=v, order=2, gamma=4, tokens=4)
            with legacy(False):
                mib = peak_mib(lambda: audit(inst, rule))
            found.append((v, v ** 4, rule_name, mib))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="vocab 8 instead of 16, earlier path capped at 30 s")
    ap.add_argument("--memory", action="store_true", help="also the peak memory at vocab 8 and 16")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, fraction backend {es.get_field('fraction').backend}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for r in rows(quick=args.quick):
        old = f"{r['old_s']:.2f} s" if r["old_s"] is not None else f"> {r['old_capped_s']:.0f} s (stopped)"
        ratio = f"{r['old_s'] / r['new_s']:.1f}x" if r["old_s"] is not None else \
            f">= {r['old_capped_s'] / r['new_s']:.1f}x"
        print(f"\n{r['job']}\n  new {r['new_s']:.2f} s   earlier {old}   ratio {ratio}   target <= {r['target_s']:g} s"
              f"   identical: {r['same']}\n  {r['note']}")
    if args.memory:
        print("\npeak memory of the new path (tracemalloc), make_instance(vocab=V, order=2, gamma=4, tokens=4):")
        for v, n, rule, mib in memory():
            print(f"  {rule:8} vocab {v:2}: {n:6} outcomes, {mib:7.1f} MiB, {mib * 2 ** 20 / n:,.0f} bytes per outcome")


if __name__ == "__main__":
    main()
