"""Issue 17, the exact engine's rows: the engine and the plain recursion of ``benchmarks/baseline.py``, timed in
the same run, laws compared.

Run:  python -m benchmarks.bench_speed_engine [--quick] [--memory]

Rows (the issue's wording), each timed on the engine and on the plain reference
(:func:`benchmarks.baseline.baseline_law`: every branch of the whole stream, no memoisation; stopped at a cap),
with ``same`` true only when the two give identical exact laws (output, expected law, TV, verdict, tokens per
step, steps):

- the exact engine on a catalog rule (speculative_sampling, closed form): chain, vocab 16,
  gamma 4, 4 tokens (65,536 outcomes), order-2 seeded random rational tables
  (``make_instance(vocab=16, order=2, gamma=4, tokens=4)``: ``random_table(seed=0)`` target,
  ``perturbed(seed=1)`` draft, prompt ``(0, 1)``) as ``benchmarks/bench_engine.py`` builds them;
- the same with the user rule of ``bench_engine.py`` (speculative sampling written against
  ``rng.uniform`` and ``rng.categorical``, no closed form);
- ``exactspec check`` (a fresh process each time, import included; no plain reference: the engine's earlier
  path it was timed against was deleted in issue 36; ``same``: the ``--json --no-timings`` reports of every
  run identical, less the work counters ``paths`` and ``step_laws``);
- multi_sample_match on its ``exactspec check`` configuration: its closed form against the rng
  form enumerated branch by branch (``closed_form=False``), laws compared.

``--memory`` also prints the peak (tracemalloc) of the engine at vocab 8 and 16 (4,096 and
65,536 outcomes). ``--quick`` runs smaller instances (vocab 8) and caps the plain reference sooner.
Figures are wall seconds on whatever machine runs it (the issue's targets are for a quiet
2-core machine); the ratios are what count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Callable

import exactspec as es
from benchmarks.baseline import baseline_calls, baseline_law, baseline_target_law
from benchmarks.bench_engine import user_rule
from exactspec.instances import make_instance

CATALOG_JOB = "exact engine, catalog rule, chain vocab 16 gamma 4 tokens 4 (65,536 outcomes)"
USER_JOB = "same, user rule (rng form)"
CHECK_JOB = "`exactspec check`"
#: work counters: how many branches and step laws a run took, not results
COUNTERS = ("paths", "step_laws")


def audit(inst: Any, rule: Any, budget: Any = None) -> Any:
    return es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule, prompt=inst.prompt,
                    tokens=inst.tokens, budget=budget)


def same_laws(a: Any, b: Any) -> bool:
    """Two reports with identical exact laws, TV, verdict and efficiency figures."""
    return (a.output == b.output and a.expected == b.expected and a.tv == b.tv and a.verdict == b.verdict
            and a.tokens_per_call == b.tokens_per_call and a.accepted_per_call == b.accepted_per_call
            and a.target_calls == b.target_calls and a.nodes_per_call == b.nodes_per_call)


def plain(inst: Any, rule: Any, seconds: float | None = None) -> dict:
    """The plain reference's figures for ``rule`` on ``inst`` (:mod:`benchmarks.baseline`): TimeoutError past
    ``seconds``."""
    fn = getattr(rule, "fn", rule)
    kw = dict(gamma=inst.proposer.gamma, prompt=inst.prompt, tokens=inst.tokens)
    output = baseline_law(fn, inst.target, inst.draft, seconds=seconds, **kw)
    expected = baseline_target_law(inst.target, prompt=inst.prompt, tokens=inst.tokens)
    first, calls = baseline_calls(fn, inst.target, inst.draft, **kw)
    tv = sum(abs(output.get(k, 0) - expected.get(k, 0)) for k in set(output) | set(expected)) / 2
    return {"output": output, "expected": expected, "tv": tv, "tokens_per_call": first, "target_calls": calls}


def same_as_plain(report: Any, ref: dict) -> bool:
    """The engine's report gives the plain reference's laws, TV, verdict, tokens per step and steps."""
    return (report.output == ref["output"] and report.expected == ref["expected"] and report.tv == ref["tv"]
            and report.verdict == ("lossless" if ref["tv"] == 0 else "biased")
            and report.tokens_per_call == ref["tokens_per_call"] and report.target_calls == ref["target_calls"])


_CPU: dict = {}


def timed(fn: Callable[[], Any], label: str = "") -> tuple[float, Any]:
    """(wall seconds, result); the CPU seconds go to ``_CPU[label]`` (on a loaded machine, closer to a quiet wall)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    _CPU[label] = time.process_time() - c0
    return time.perf_counter() - t0, out


def engine_row(job: str, inst: Any, rule: Any, target_s: float, cap: float | None, label: str,
               repeat: int = 1) -> dict:
    """One engine row: the engine, then the plain reference (stopped after ``cap`` seconds), alternately
    ``repeat`` times, the best of each kept (a loaded machine's spikes fall on either)."""
    row: dict = {"job": job, "new_s": None, "old_s": None, "same": False, "target_s": target_s}
    old = None
    cpu: dict = {}
    for _ in range(repeat):
        new_s, new = timed(lambda: audit(inst, rule), "new")
        row["new_s"] = new_s if row["new_s"] is None else min(row["new_s"], new_s)
        cpu["new"] = min(cpu.get("new", _CPU["new"]), _CPU["new"])
        if "old_capped_s" in row:
            continue
        try:
            old_s, old = timed(lambda: baseline_law(getattr(rule, "fn", rule), inst.target, inst.draft,
                                                    gamma=inst.proposer.gamma, prompt=inst.prompt,
                                                    tokens=inst.tokens, seconds=cap), "old")
        except TimeoutError:
            row["old_capped_s"] = cap
            old = None
        else:
            row["old_s"] = old_s if row["old_s"] is None else min(row["old_s"], old_s)
            cpu["old"] = min(cpu.get("old", _CPU["old"]), _CPU["old"])
    _CPU.update(cpu)
    if old is not None:
        row["same"] = new.output == old and same_as_plain(new, plain(inst, rule))
        compared = "laws compared on this instance"
    else:   # the plain reference did not finish: compare the laws where it does
        small = make_instance(vocab=3, order=2, gamma=inst.proposer.gamma, tokens=3)
        row["same"] = same_as_plain(audit(small, rule), plain(small, rule))
        compared = "plain reference stopped at the cap: laws compared at vocab 3, 3 tokens instead"
    v = inst.target.vocab
    cpu = f"CPU {_CPU['new']:.2f} s engine" + (f" vs {_CPU['old']:.2f} s plain" if old is not None else "")
    row["note"] = (f"{label}; {cpu}; make_instance(vocab={v}, order=2, gamma={inst.proposer.gamma}, tokens={inst.tokens}) "
                   f"(seeded order-2 random rational tables, perturbed draft); {len(new.output)} outcomes, "
                   f"{new.paths} branches; plain reference: benchmarks.baseline.baseline_law (every branch of the "
                   f"stream, no memoisation); {compared}")
    return row


def _children_cpu() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_check(cache: str | None = None) -> tuple[float, dict]:
    """One ``python -m exactspec check --json --no-timings`` in a fresh process: wall seconds and its JSON.

    ``cache``: a bytecode cache folder (``PYTHONPYCACHEPREFIX``), written even where the environment says
    ``PYTHONDONTWRITEBYTECODE`` (this machine does): an installed package has its bytecode, so a fresh
    process that compiles every module first measures the compiler, not the check.
    """
    env = dict(os.environ)
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "exactspec", "check", "--json", "--no-timings"], env=env,
                          capture_output=True, text=True)
    dt = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    _CPU["new"] = min(_CPU.get("new", cpu), cpu)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"exactspec check exited {proc.returncode}: {proc.stderr[-2000:]}")
    return dt, json.loads(proc.stdout)


def without_counters(report: dict) -> dict:
    return {**report, "rules": [{k: v for k, v in r.items() if k not in COUNTERS} for r in report["rules"]]}


def check_row(runs: int = 3) -> dict:
    """The whole check in fresh processes, bytecode cached as an installed package has it: one untimed run fills
    the cache, then ``runs`` timed runs; the best is the figure. No plain reference (``old_s`` None): the engine's
    earlier path it was timed against was deleted in issue 36."""
    import tempfile
    _CPU.clear()
    with tempfile.TemporaryDirectory(prefix="exactspec-pyc-") as cache:
        run_check(cache)           # untimed: compile once, warm the file cache
        _CPU.clear()
        news = [run_check(cache) for _ in range(runs)]
    new_s, new = min(news, key=lambda t: t[0])
    same = all(without_counters(r) == without_counters(new) for _, r in news)
    paths = sum(r["paths"] for r in new["rules"])
    return {"job": CHECK_JOB, "new_s": new_s, "old_s": None, "same": same, "target_s": 2.0,
            "note": f"CPU {_CPU['new']:.2f} s (the process and its workers, best run); python -m exactspec check "
                    f"--json --no-timings in a fresh process (import included, bytecode cached as an installed "
                    f"package has it), best of {runs} runs after one untimed run; {len(new['rules'])} "
                    f"configurations, default workers, {paths} branches; reports of every run identical but for the "
                    f"work counters {', '.join(COUNTERS)}; no plain reference (the earlier engine path was deleted "
                    f"in issue 36)"}


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
    """The issue's engine rows: the engine and the plain reference, timed in this run, laws compared.

    >>> sorted(rows.__code__.co_varnames[:1])
    ['quick']
    """
    vocab = 8 if quick else 16
    inst = make_instance(vocab=vocab, order=2, gamma=4, tokens=4)
    out = [engine_row(CATALOG_JOB, inst, es.rules.speculative_sampling, 1.0, 30.0 if quick else 240.0,
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
    """Peak traced memory of the engine per vocab and rule: (vocab, outcomes, rule, MiB)."""
    found = []
    for rule_name in rules:
        rule = es.rules.speculative_sampling if rule_name == "catalog" else user_rule
        for v in vocabs:
            inst = make_instance(vocab=v, order=2, gamma=4, tokens=4)
            mib = peak_mib(lambda: audit(inst, rule))
            found.append((v, v ** 4, rule_name, mib))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="vocab 8 instead of 16, plain reference capped at 30 s")
    ap.add_argument("--memory", action="store_true", help="also the peak memory at vocab 8 and 16")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, fraction backend {es.get_field('fraction').backend}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for r in rows(quick=args.quick):
        capped = r.get("old_capped_s")
        old = f"{r['old_s']:.2f} s" if r["old_s"] is not None else \
            f"> {capped:.0f} s (stopped)" if capped is not None else "-"
        ratio = f"{r['old_s'] / r['new_s']:.1f}x" if r["old_s"] is not None else \
            f">= {capped / r['new_s']:.1f}x" if capped is not None else "-"
        print(f"\n{r['job']}\n  engine {r['new_s']:.2f} s   plain {old}   ratio {ratio}   target <= {r['target_s']:g} s"
              f"   identical: {r['same']}\n  {r['note']}")
    if args.memory:
        print("\npeak memory of the engine (tracemalloc), make_instance(vocab=V, order=2, gamma=4, tokens=4):")
        for v, n, rule, mib in memory():
            print(f"  {rule:8} vocab {v:2}: {n:6} outcomes, {mib:7.1f} MiB, {mib * 2 ** 20 / n:,.0f} bytes per outcome")


if __name__ == "__main__":
    main()
