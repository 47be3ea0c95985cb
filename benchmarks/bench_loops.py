"""Whole-loop audits: lazy categorical draws against eager ones, in the same run.

Real generate loops draw values they never use (litgpt samples a token at every verified
position and keeps only the ones it needs). ``torch.multinomial`` inside an audit forks only
when its value is read; the baseline forces every draw as it is made (what an eager
interception does), on the same loop and instance. ``python -m benchmarks.bench_loops``.

>>> callable(draw_and_discard(2))
True
"""

from __future__ import annotations

import sys
import time

import exactspec as es
from exactspec.errors import BudgetExceeded

EAGER_SECONDS = 60.0


def draw_and_discard(gamma: int):
    """Speculative sampling written as litgpt writes it: a target sample at every position, most discarded."""
    import torch

    def loop(target, draft, ids, new_tokens=2):
        n0 = ids.shape[1]
        while ids.shape[1] - n0 < new_tokens:
            x, qs = ids, []
            for _ in range(gamma):
                q = draft(x)[0, -1].softmax(-1)
                qs.append(q)
                x = torch.cat([x, torch.multinomial(q, 1)[None]], dim=1)
            p = target(x)[0, -gamma - 1:].softmax(-1)
            sampled = torch.multinomial(p, 1)[:, 0]          # one target sample per position (mostly unused)
            k = ids.shape[1]
            for i in range(gamma):
                tok = x[0, k + i]
                if torch.rand(1).item() < (p[i, tok] / qs[i][tok]).item():
                    continue
                residual = (p[i] - qs[i]).clamp(min=0)
                ids = torch.cat([x[:, :k + i], torch.multinomial(residual / residual.sum(), 1)[None]], dim=1)
                break
            else:
                ids = torch.cat([x, sampled[gamma].reshape(1, 1)], dim=1)   # the bonus: the last sample
        return ids
    loop.__name__ = f"draw_and_discard(gamma={gamma})"
    return loop


def _run(fn, eager: bool, seconds: float | None):
    """One audit of ``fn``; ``eager``: every ``torch.multinomial`` drawn as it is made (patched where
    ``torch_rng`` calls it; the run refuses to report a baseline that the patch did not reach)."""
    from exactspec.samplers.torch_draws import lazy_draws, torch_rng
    orig = torch_rng.lazy_multinomial
    forced = [0]

    def drawn_at_once(*a, **k):
        forced[0] += 1
        return lazy_draws.force(orig(*a, **k))
    if eager:
        torch_rng.lazy_multinomial = drawn_at_once
    t0 = time.perf_counter()
    try:
        r = es.audit_loop(fn, target=TARGET, draft=DRAFT, prompt=(0,), tokens=2, workers=None,
                          budget=None if seconds is None else es.Budget(seconds=seconds))
        return r, time.perf_counter() - t0
    except BudgetExceeded:
        return None, time.perf_counter() - t0
    finally:
        torch_rng.lazy_multinomial = orig
        if eager and not forced[0]:
            raise RuntimeError("bench_loops: the eager baseline drew nothing at once (the patch missed the call)")


TARGET = es.models.random_table(vocab=3, order=1, seed=1)
DRAFT = es.models.random_table(vocab=3, order=1, seed=4)


def main() -> None:
    import torch
    print(f"vocab 3, order-1 tables, 2 tokens, float64 stand-ins, the default rng model (native: torch's float32 "
          f"rand grid, so TV ~1e-8 is its rounding), one process; torch {torch.__version__}")
    for gamma in (1, 2):
        fn = draw_and_discard(gamma)
        lazy, t_lazy = _run(fn, eager=False, seconds=None)
        eager, t_eager = _run(fn, eager=True, seconds=EAGER_SECONDS)
        line = (f"gamma {gamma}: lazy {t_lazy:6.2f} s ({lazy.paths} branches, {lazy.verdict}, TV {float(lazy.tv):.2e})"
                f"; eager ")
        if eager is None:
            line += f"stopped after {EAGER_SECONDS:g} s -> lazy >= {t_eager / t_lazy:.0f}x faster"
        else:
            same = "same law" if eager.output == lazy.output else "DIFFERENT LAW"
            line += f"{t_eager:6.2f} s ({eager.paths} branches) -> {t_eager / t_lazy:.1f}x, {same}"
        print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
