"""Tree benchmark: MSS on expansion trees vs the straightforward baseline, timed in the same run.

Run:  python -m benchmarks.bench_trees [--baseline-seconds 60] [--quick]

Instance of the tree issue: vocab 5, order-2 seeded tables, perturbed draft, prompt (0, 1),
expansion (2, 2, 1), 4 tokens, ``mss`` with children drawn without replacement and told the
renormalised law, fraction field. The baseline (``benchmarks/baseline.py``) re-runs the whole
stream once per branch of its draws, with no memoisation and no horizon cut; where it does not
finish within the cap the ratio is printed as a lower bound.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import exactspec as es
from benchmarks.baseline import baseline_tree_law
from benchmarks.bench_engine import best_of, peak_mib
from exactspec.instances import make_instance


def user_mss(step: Any, rng: Any):
    """MSS written by a user against the rng only (no closed form)."""
    node = step.root
    while True:
        r = step.target(node)
        for child, q in step.proposals(node):
            x = step.token(child)
            if q[x] and rng.uniform() < r[x] / q[x]:
                yield step.accept(child)
                node = child
                break
            r = es.laws.residual(r, q)
        else:
            yield rng.categorical(r)
            return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-seconds", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cap = 10.0 if args.quick else args.baseline_seconds
    rep = 2 if args.quick else 5
    inst = make_instance(vocab=5, order=2, gamma=1, tokens=4)
    kind = dict(children="without_replacement", claim="renormalized")

    def run(expansion: tuple, tokens: int, rule: Any) -> Any:
        return es.audit(target=inst.target, draft=inst.draft, proposer=es.drafts.tree(expansion, **kind), rule=rule,
                        prompt=inst.prompt, tokens=tokens)

    def base(expansion: tuple, tokens: int) -> tuple[float, Any]:
        t0 = time.perf_counter()
        try:
            law = baseline_tree_law(es.rules.mss.fn, inst.target, inst.draft, expansion=expansion, prompt=inst.prompt,
                                    tokens=tokens, seconds=cap, **kind)
        except TimeoutError:
            law = None
        return time.perf_counter() - t0, law

    user = es.rule(family="tree", claim="lossless")(user_mss)
    print("== vocab 5, order 2, expansion (2, 2, 1), 4 tokens, mss without replacement (renormalized claims) ==")
    tc, rc = best_of(lambda: run((2, 2, 1), 4, es.rules.mss), rep)
    tu, ru = best_of(lambda: run((2, 2, 1), 4, user), max(2, rep // 2))
    assert rc.output == ru.output and rc.lossless
    print(f"mss (closed form): {tc:.4f} s; user's rng-only MSS: {tu:.3f} s ({ru.paths} branches); "
          f"tokens/call {float(rc.tokens_per_call):.4f}, accepted/call {float(rc.accepted_per_call):.4f}, "
          f"nodes/call {float(rc.nodes_per_call):.1f}")
    tb, law = base((2, 2, 1), 4)
    if law is None:
        print(f"baseline: stopped after {tb:.1f} s without finishing -> mss >= {tb / tc:.0f}x, user rule >= "
              f"{tb / tu:.0f}x faster")
    else:
        print(f"baseline: {tb:.2f} s -> mss {tb / tc:.0f}x, user rule {tb / tu:.0f}x")
    print(f"peak memory (tracemalloc): {peak_mib(lambda: run((2, 2, 1), 4, es.rules.mss)):.1f} MiB mss, "
          f"{peak_mib(lambda: run((2, 2, 1), 4, user)):.1f} MiB user rule")

    print("\n== ladder where the baseline finishes ==")
    print(f"{'expansion':>10} {'tokens':>6} {'baseline s':>11} {'mss s':>8} {'ratio':>7} {'user rule s':>12} {'ratio':>7}")
    for expansion, tokens in (((2,), 2), ((2, 1), 2), ((2, 2, 1), 1)):
        tb, law = base(expansion, tokens)
        tc, rc = best_of(lambda: run(expansion, tokens, es.rules.mss), rep)
        tu, ru = best_of(lambda: run(expansion, tokens, user), rep)
        label = str(expansion).replace(" ", "")
        if law is None:
            print(f"{label:>10} {tokens:>6} {'>' + format(tb, '.1f'):>11} {tc:>8.4f} {'>=' + format(tb / tc, '.0f'):>6}x "
                  f"{tu:>12.4f} {'>=' + format(tb / tu, '.0f'):>6}x")
        else:
            assert law == rc.output == ru.output, "baseline and engine disagree"
            print(f"{label:>10} {tokens:>6} {tb:>11.3f} {tc:>8.4f} {tb / tc:>6.0f}x {tu:>12.4f} {tb / tu:>6.0f}x")


if __name__ == "__main__":
    main()
