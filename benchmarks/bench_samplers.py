"""Sampler-audit benchmark: a numpy sampler at vocab 5, gamma 4, 2 tokens, with the number of sampler calls.

Run:  python -m benchmarks.bench_samplers

The figures are absolute (the target is "at most 5 s"); each full audit_sampler runs three
audits (the sampler, the reference sampler through the same float pipeline, the exact rule), and
the last line times the sampler's own audit alone.
"""

from __future__ import annotations

import time

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance


def main() -> None:
    inst = make_instance(vocab=5, order=2, gamma=4, tokens=2)
    print("== numpy sampler audit: vocab 5, order 2, gamma 4, 2 tokens ==")
    for sampler in (zoo.correct, zoo.shared_uniform, zoo.tiny_clamp):
        for rng_model in ("continuous", "torch-float32"):
            t0 = time.perf_counter()
            r = es.audit_sampler(sampler, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                                 prompt=inst.prompt, tokens=inst.tokens, rng_model=rng_model)
            dt = time.perf_counter() - t0
            print(f"{sampler.__name__:15} {rng_model:14} {dt:6.2f} s (3 audits: sampler, reference sampler, exact "
                  f"rule) {r.extra['sampler_calls']:6d} sampler calls  verdict {r.verdict:8}  TV {float(r.tv):.3g}")
    t0 = time.perf_counter()
    r = es.audit_sampler(zoo.correct, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                         prompt=inst.prompt, tokens=inst.tokens, reference=False)
    print(f"sampler alone, no reference: {time.perf_counter() - t0:.2f} s, {r.extra['sampler_calls']} sampler calls")

    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        print("\n(transformers not installed: pip install '.[audit]')")
        return
    print("\n== transformers' _speculative_sampling: vocab 4, order 1, gamma 3, 3 tokens (target: at most 10 s) ==")
    inst = make_instance(vocab=4, order=1, gamma=3, tokens=3)
    t0 = time.perf_counter()
    r = es.audit_sampler(_speculative_sampling, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=inst.tokens)
    dt = time.perf_counter() - t0
    print(f"{dt:.2f} s (3 audits), {r.extra['sampler_calls']} sampler calls, verdict {r.verdict}, TV {float(r.tv):.3g}, "
          f"algorithmic TV {r.extra['algorithmic_tv']}")
    t0 = time.perf_counter()
    r = es.audit_sampler(_speculative_sampling, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=inst.tokens, reference=False)
    print(f"sampler alone, no reference: {time.perf_counter() - t0:.2f} s, {r.extra['sampler_calls']} sampler calls")


if __name__ == "__main__":
    main()
