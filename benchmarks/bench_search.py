"""Search benchmark: time to the minimal counterexample of every biased configuration, and the full
default lossless search for speculative_sampling, with instances audited per second.

Run:  python -m benchmarks.bench_search

The straightforward alternative measured in the same run is a plain random search (random
rational instances from the same default space, drawn in no particular order, no shrinking):
it reports how many audits it needs to hit the first biased instance and how large that
instance is, next to the minimal one the ordered search returns.
"""

from __future__ import annotations

import random
import time

import exactspec as es
from exactspec.counterexamples import search
from exactspec.counterexamples.searching import evaluate
from exactspec.counterexamples.space import default_space, random_law
from exactspec.instances import check_cases


def plain_random_search(rule, proposer, seed: int = 0, cap: int = 5000):
    space = default_space(rule, proposer)
    rng = random.Random(seed)
    cells = space.cells()
    t0 = time.perf_counter()
    for n in range(1, cap + 1):
        vocab, shape, tokens, family = rng.choice(cells)
        k = space.n_laws(vocab, family)
        inst = space.instance(vocab, shape, tokens, family,
                              tuple(random_law(rng, vocab, space.max_denominator) for _ in range(k)),
                              tuple(random_law(rng, vocab, space.max_denominator) for _ in range(k)))
        rep = evaluate(rule, inst)
        if rep is not None and rep.tv > 0:
            return n, time.perf_counter() - t0, inst
    return cap, time.perf_counter() - t0, None


def main() -> None:
    print("== minimal counterexample of every biased configuration (default space) ==")
    print(f"{'rule':34} {'proposer':46} {'s':>6} {'audits':>7} {'found':>34}  {'plain random: audits, found':>30}")
    worst_time = 0.0
    for case in check_cases():
        if case.claim != "biased" or case.proposer.describe().startswith("merge"):
            continue
        prop = case.proposer
        t0 = time.perf_counter()
        ce = search(case.rule, proposer=prop, progress=False, workers=None)     # in this process, as measured
        dt = time.perf_counter() - t0
        worst_time = max(worst_time, dt)
        i = ce.instance
        found = f"V{i.vocab} {i.shape} n={i.tokens} {i.family}"
        n, _, rinst = plain_random_search(case.rule, prop)
        rfound = "none" if rinst is None else f"V{rinst.vocab} {rinst.shape} n={rinst.tokens} {rinst.family}"
        print(f"{case.rule.name:34} {prop.describe()[:46]:46} {dt:6.3f} {ce.audited:7d} {found:>34}  {n:>6} {rfound:>24}")
    print(f"slowest: {worst_time:.3f} s")

    print("\n== default lossless search for speculative_sampling ==")
    t0 = time.perf_counter()
    empty = search(es.rules.speculative_sampling, progress=False, workers=None)
    dt = time.perf_counter() - t0
    print(f"{empty.audited} instances in {dt:.2f} s = {empty.audited / dt:.0f} instances/s, none biased")
    print(f"space: {empty.space}")
    for rule in (es.rules.mss, es.rules.naive_tree_sampling):
        t0 = time.perf_counter()
        empty = search(rule, progress=False, workers=None)
        dt = time.perf_counter() - t0
        print(f"{rule.name}: {empty.audited} instances in {dt:.2f} s = {empty.audited / dt:.0f} instances/s "
              f"over {empty.space}")


if __name__ == "__main__":
    main()
