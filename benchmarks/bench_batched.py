"""Batched real-sampler audit: all k positions per call, every branch pattern a row (issue 10).

Run:  python -m benchmarks.bench_batched

vLLM-style batched rejection samplers (own code: the correct one and three that combine positions
wrongly, exactspec/bugzoo/batched_samplers.py) audited with
:func:`exactspec.tensor.audit_batched_sampler`. Small V: every draft sequence enumerated ("full",
the sequence law exact); larger V: the diagonal covering. Each line: wall time, sampler calls,
verdict, largest per-position TV and sequence TV (the correct vectorised reference's rounding TV is
the baseline of the verdict). The former path (one position per call, column 0 read) read all three
bugs "exact to float64 rounding" (TV about 1e-8): the sequence was never checked.
"""

from __future__ import annotations

import time

import torch

from exactspec.bugzoo import batched_samplers as zoo
from exactspec.tensor import audit_batched_sampler

CASES = [(4, 3), (40, 2), (2000, 1), (2000, 2), (300, 3)]
SAMPLERS = [zoo.correct, zoo.prefix_counts_all_accepted, zoo.bonus_after_rejection, zoo.no_all_accepted_fixup]


def instance(vocab: int, k: int, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(k + 1, vocab, generator=gen, dtype=torch.float64) * 3       # peaked, long-tailed
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=gen, dtype=torch.float64), -1)
    return p, q


def main() -> None:
    print(f"device cpu, torch threads during the audit: 1 (restored after: {torch.get_num_threads()})")
    for vocab, k in CASES:
        p, q = instance(vocab, k)
        for sampler in SAMPLERS:
            t0 = time.perf_counter()
            a = audit_batched_sampler(sampler, target=p, draft=q, device="cpu")
            dt = time.perf_counter() - t0
            seq = f"{a.sequence_tv:.2e}" if a.sequence_tv is not None else "undecided"
            print(f"V={vocab:5} k={k} {sampler.__name__:27} {a.mode:8} {dt:6.2f} s {a.sampler_calls:4} calls "
                  f"{a.verdict:9} position TV {a.tv:.2e} sequence TV {seq} (rounding {a.rounding_tv:.1e})"
                  + (f" findings: {len(a.findings)}" if a.findings else ""))


if __name__ == "__main__":
    main()
