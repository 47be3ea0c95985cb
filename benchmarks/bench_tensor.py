"""Tensor law engine benchmark: per-step laws at large vocabularies (CPU, or GPU when present).

Run:  python -m benchmarks.bench_tensor

Baseline in the same run: the same per-position marginals of speculative_sampling computed with a
plain Python loop over the vocabulary (no tensors), at V = 128k, gamma = 8.
"""

from __future__ import annotations

import time

import torch

from exactspec.tensor import best_device, chain_step_laws


def laws(vocab: int, gamma: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Peaked, long-tailed target laws and a related draft (float64)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(gamma + 1, vocab, generator=gen, dtype=torch.float64) * 4
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:gamma] + torch.randn(gamma, vocab, generator=gen, dtype=torch.float64), -1)
    return p, q


def python_loop_marginals(p: list[list[float]], q: list[list[float]]) -> list[list[float]]:
    gamma, vocab = len(q), len(p[0])
    reach, out = 1.0, []
    for j in range(gamma):
        pj, qj = p[j], q[j]
        acc = [min(qj[x], pj[x]) for x in range(vocab)]
        a = sum(acc)
        res = [max(pj[y] - qj[y], 0.0) for y in range(vocab)]
        tot = sum(res) or 1.0
        out.append([reach * (acc[y] + (1 - a) * res[y] / tot) for y in range(vocab)])
        reach *= a
    out.append([reach * x for x in p[gamma]])
    return out


def main() -> None:
    device = best_device()
    print(f"device: {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    p, q = laws(128_000, 8)
    chain_step_laws("speculative_sampling", p, q, device=device)        # warm-up
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        law = chain_step_laws("speculative_sampling", p, q, device=device)
        tv = float(law.tv)
        best = min(best, time.perf_counter() - t0)
    print(f"speculative_sampling, V = 128000, gamma = 8: {best:.4f} s per step law (target <= 1 s), TV {tv:.2e}")
    t0 = time.perf_counter()
    loop = python_loop_marginals(p.tolist(), q.tolist())
    tl = time.perf_counter() - t0
    diff = max(abs(a - b) for row_a, row_b in zip(loop, law.position_marginals.tolist()) for a, b in zip(row_a, row_b))
    print(f"python-loop baseline: {tl:.2f} s -> {tl / best:.0f}x; max |difference| {diff:.1e}")
    for name in ("greedy_match_sampled", "resample_from_target", "tiny_clamp_residual", "stale_draft_probs"):
        t0 = time.perf_counter()
        law = chain_step_laws(name, p, q, device=device)
        print(f"{name:22} {time.perf_counter() - t0:.4f} s  TV {float(law.tv):.3e}")
    pb, qb = laws(32_000, 4)
    batch_p, batch_q = pb.expand(16, -1, -1).contiguous(), qb.expand(16, -1, -1).contiguous()
    t0 = time.perf_counter()
    chain_step_laws("speculative_sampling", batch_p, batch_q, device=device)
    print(f"batched, B = 16 contexts, V = 32000, gamma = 4: {time.perf_counter() - t0:.4f} s")
    import os
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "laws256k.pt")
    torch.save(laws(256_000, 8), path)
    before, peak = _peak_rss(path)
    print(f"V = 256000, gamma = 8: resident memory {before:.0f} MiB with the inputs loaded, peak {peak:.0f} MiB while "
          f"computing the laws (+{peak - before:.0f} MiB; the inputs are {(9 + 8) * 256_000 * 8 / 2 ** 20:.0f} MiB)")


def _peak_rss(path: str) -> tuple[float, float]:
    """(resident MiB after loading the laws, peak resident MiB while computing), in a fresh process.

    The peak is reset after loading by writing 5 to /proc/self/clear_refs (Linux), so the import of
    torch does not hide it.
    """
    import subprocess
    import sys
    code = ("import re, torch; from exactspec.tensor import chain_step_laws; "
            f"p, q = torch.load({path!r}); "
            "rd = lambda key: int(re.search(key + r':\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
            "before = rd('VmRSS'); open('/proc/self/clear_refs', 'w').write('5'); "
            "chain_step_laws('speculative_sampling', p, q, device='cpu').tv; "
            "print(before, rd('VmHWM'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, peak = (int(x) / 1024 for x in out.stdout.split()[-2:])
    return before, peak


if __name__ == "__main__":
    main()
