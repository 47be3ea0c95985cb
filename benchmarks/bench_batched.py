"""Batched real-sampler audit at V = 32000, gamma = 4 (target: at most 60 s on 2 CPU cores).

Run:  python -m benchmarks.bench_batched

A vLLM-style batched rejection sampler (own code, exactspec/bugzoo/torch_samplers.py), audited
row-wise: one sampler call per (position, chunk of candidate drafts, branch pattern). The exact
rule's tensor laws are printed next to it as the reference.
"""

from __future__ import annotations

import time

import torch

from exactspec.bugzoo import torch_samplers as zoo
from exactspec.tensor import audit_batched_sampler, chain_step_laws


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    vocab, k = 32_000, 4
    logits = torch.randn(k + 1, vocab, generator=gen, dtype=torch.float64) * 4       # peaked, long-tailed
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=gen, dtype=torch.float64), -1)
    print(f"V = {vocab}, gamma = {k}, device cpu, torch threads {torch.get_num_threads()}")
    for sampler, rule in ((zoo.correct, "speculative_sampling"), (zoo.resample_target, "resample_from_target")):
        t0 = time.perf_counter()
        a = audit_batched_sampler(sampler, target=p, draft=q, chunk=256, device="cpu")
        dt = time.perf_counter() - t0
        ref = chain_step_laws(rule, p, q, device="cpu")
        print(f"{sampler.__name__:22} {dt:6.1f} s, {a.sampler_calls} sampler calls, max position TV {a.tv:.3e} "
              f"(the exact {rule}: {float(ref.tv):.3e})")


if __name__ == "__main__":
    main()
