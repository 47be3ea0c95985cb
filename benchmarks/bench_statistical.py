"""Monte Carlo vs exact: samples a statistical test needs to see each catalog bias, and a statistical
audit of transformers' sampler at V = 32k, gamma = 4.

Run:  python -m benchmarks.bench_statistical [--seconds 60]
"""

from __future__ import annotations

import argparse
import time

import exactspec as es
from exactspec.instances import check_cases, default_instance
from exactspec.statistical import samples_needed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    inst = default_instance()
    print("== samples a 99% statistical test needs to see each bias (default instance, K = outcomes) ==")
    print(f"{'rule':34} {'proposer':58} {'exact TV':>11} {'samples needed':>15}")
    for case in check_cases(inst):
        if case.claim != "biased":
            continue
        r = es.audit(target=inst.target, draft=inst.draft if case.proposer.needs_draft() else None,
                     proposer=case.proposer, rule=case.rule, prompt=inst.prompt, tokens=case.tokens)
        n = samples_needed(float(r.tv), outcomes=len(r.expected))
        print(f"{case.rule.name:34} {case.proposer.describe()[:58]:58} {float(r.tv):11.3e} {n:15.2e}")
    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        print("(transformers not installed: pip install '.[audit]')")
        return
    vocab, gamma = 32_000, 4
    # a peaked, long-tailed (Zipf-like) target with integer weights, so the law is exact
    weights = [10 ** 6 // (i + 1) ** 2 + 1 for i in range(vocab)]
    total = sum(weights)
    from fractions import Fraction
    target = es.models.context_free(tuple(Fraction(w, total) for w in weights), name="zipf32k")
    draft = es.models.perturbed(target, seed=1, strength=Fraction(1, 10))
    print(f"\n== statistical audit of transformers' _speculative_sampling, V = {vocab}, gamma = {gamma}, 1 token ==")
    t0 = time.perf_counter()
    rep = es.audit_statistically(_speculative_sampling, adapter="transformers", target=target, draft=draft,
                                 proposer=es.drafts.chain(gamma), tokens=1, samples=10 ** 9, seconds=args.seconds,
                                 seed=1)
    print(f"{rep.samples} samples in {time.perf_counter() - t0:.1f} s ({rep.samples_per_second:.0f} samples/s)")
    print(str(rep))


if __name__ == "__main__":
    main()
