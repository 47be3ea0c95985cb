"""Engine benchmark: exactspec vs the straightforward baseline, fields, a larger instance, peak memory.

Run:  python -m benchmarks.bench_engine [--baseline-seconds 60] [--quick]

Every speed figure is a ratio measured in this run against ``benchmarks/baseline.py`` (plain
recursion over every branch, no memoisation, no horizon cut). On the default instance the
baseline does not finish (its cost grows like (branches per step) ** steps); it is stopped
after ``--baseline-seconds`` and the ratio is printed as a lower bound. A ladder of smaller
instances, where it does finish, gives exact ratios.
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc
from typing import Any, Callable

import exactspec as es
from benchmarks.baseline import baseline_law
from exactspec.instances import make_instance


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def user_rule(step: Any, rng: Any):
    """Speculative sampling as a user would write it: only the rng, no closed form."""
    for j in range(step.gamma):
        x, p, q = step.draft(j), step.target(j), step.claimed(j)
        if rng.uniform() < p[x] / q[x]:
            yield x
        else:
            yield rng.categorical(es.laws.residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def run_audit(inst: Any, rule: Any, **kw: Any) -> Any:
    return es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule, prompt=inst.prompt,
                    tokens=inst.tokens, **kw)


def baseline(inst: Any, fn: Callable, seconds: float) -> tuple[float, bool, Any]:
    t0 = time.perf_counter()
    try:
        law = baseline_law(fn, inst.target, inst.draft, gamma=inst.proposer.gamma, prompt=inst.prompt,
                           tokens=inst.tokens, seconds=seconds)
        return time.perf_counter() - t0, True, law
    except TimeoutError:
        return time.perf_counter() - t0, False, None


def peak_mib(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-seconds", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, 10 s baseline cap, no large instance")
    args = ap.parse_args()
    cap = 10.0 if args.quick else args.baseline_seconds
    rep = 2 if args.quick else 5
    fb = "gmpy2" if es.get_field("fraction").backend == "gmpy2" else "python (gmpy2 not installed)"
    print(f"python {platform.python_version()}, {platform.machine()}, fraction backend: {fb}")

    print("\n== default instance: vocab 5, order 2, gamma 4, 4 tokens, prompt (0, 1) ==")
    inst = make_instance(vocab=5, order=2, gamma=4, tokens=4)
    rows = []
    for rule in es.rules.catalog():
        if rule.family != "chain":
            continue
        t, r = best_of(lambda: run_audit(inst, rule), rep)
        rows.append((rule.name, t))
    worst = max(rows, key=lambda x: x[1])
    t_ss = dict(rows)["speculative_sampling"]
    print(f"catalog rules (closed form, fraction): speculative_sampling {t_ss:.4f} s; slowest {worst[0]} {worst[1]:.4f} s")
    t_user, r_user = best_of(lambda: run_audit(inst, user_rule), max(2, rep // 2))
    print(f"user rule (rng only, {r_user.paths} branches): {t_user:.4f} s, lossless={r_user.lossless}")
    t_py, _ = best_of(lambda: run_audit(inst, es.rules.speculative_sampling, backend="python"), rep)
    t_fl, _ = best_of(lambda: run_audit(inst, es.rules.speculative_sampling, field="float"), rep)
    print(f"speculative_sampling by field: fraction[{fb.split()[0]}] {t_ss:.4f} s, fraction[python] {t_py:.4f} s, "
          f"float {t_fl:.4f} s -> float is {t_py / t_fl:.1f}x faster than fraction[python], "
          f"{t_ss / t_fl:.1f}x faster than fraction[{fb.split()[0]}]")
    tb, done, law = baseline(inst, es.rules.speculative_sampling.fn, cap)
    if done:
        print(f"baseline: {tb:.2f} s -> catalog {tb / t_ss:.0f}x, user rule {tb / t_user:.0f}x")
    else:
        print(f"baseline: stopped after {tb:.1f} s without finishing -> catalog >= {tb / t_ss:.0f}x, "
              f"user rule >= {tb / t_user:.0f}x faster")

    print("\n== ladder where the baseline finishes (same models, speculative_sampling, fraction) ==")
    print(f"{'gamma':>5} {'tokens':>6} {'baseline s':>11} {'catalog s':>10} {'ratio':>7} {'user rule s':>12} {'ratio':>7}")
    for g, tok in ((1, 3), (2, 2), (4, 1), (2, 3)):
        small = make_instance(vocab=5, order=2, gamma=g, tokens=tok)
        tb, done, law = baseline(small, es.rules.speculative_sampling.fn, cap)
        tc, rc = best_of(lambda: run_audit(small, es.rules.speculative_sampling), rep)
        tu, ru = best_of(lambda: run_audit(small, user_rule), rep)
        if done:
            assert law == rc.output == ru.output, "baseline and engine disagree"
            print(f"{g:>5} {tok:>6} {tb:>11.3f} {tc:>10.4f} {tb / tc:>6.0f}x {tu:>12.4f} {tb / tu:>6.0f}x")
        else:
            print(f"{g:>5} {tok:>6} {'>' + format(tb, '.1f'):>11} {tc:>10.4f} {'>=' + format(tb / tc, '.0f'):>6}x "
                  f"{tu:>12.4f} {'>=' + format(tb / tu, '.0f'):>6}x")

    mem = peak_mib(lambda: run_audit(inst, es.rules.speculative_sampling))
    print(f"\npeak memory, default instance (tracemalloc): {mem:.1f} MiB")
    if args.quick:
        return
    print("\n== larger instance: vocab 8, order 2, gamma 4, 5 tokens ==")
    big = make_instance(vocab=8, order=2, gamma=4, tokens=5)
    for field, backend in (("fraction", "auto"), ("fraction", "python"), ("float", "auto")):
        t, r = best_of(lambda: run_audit(big, es.rules.speculative_sampling, field=field, backend=backend), 1)
        label = field + (f"[{backend}]" if field == "fraction" else "")
        print(f"{label:18} closed form {t:.3f} s ({len(r.output)} outcomes, lossless={r.lossless})")
    t, r = best_of(lambda: run_audit(big, user_rule), 1)
    print(f"{'user rule':18} rng only    {t:.3f} s ({r.paths} branches)")
    print(f"peak memory, larger instance (tracemalloc): "
          f"{peak_mib(lambda: run_audit(big, es.rules.speculative_sampling)):.1f} MiB closed form, "
          f"{peak_mib(lambda: run_audit(big, user_rule)):.1f} MiB user rule")


if __name__ == "__main__":
    main()
