"""Whole-loop audits with the drafts a decision depends on held jointly, against one draft at a time, same run.

litgpt 0.5.13's own ``generate`` on order-1 tables (ideal uniforms, one process), at sizes beyond
issue 17's row (vocab 3, gamma 3, 3 tokens): the joint tables (``joint_draws``) grow with the
vocabulary and with the tokens held unread, up to ``joint_draws.LIMIT`` assignments, and every
decision on them is exact arithmetic over the whole table, while the baseline (``joint_draws.JOINT``
off: the drafts but the last read first, each a fork) reruns the loop once per branch instead.
Each instance prints both branch counts and times and checks the two laws identical (``==``);
a difference exits 1. ``python -m benchmarks.bench_joint_draws`` (``--quick``: the smallest two).

>>> INSTANCES[0]
(3, 3, 3)
"""

from __future__ import annotations

import os
import sys
import time

import exactspec as es
from benchmarks.bench_speed_loops import _clear_memos, _litgpt

#: (vocab, gamma, tokens)
INSTANCES = [(3, 3, 3), (5, 2, 3), (3, 3, 5), (8, 2, 2), (6, 3, 3)]


def compare(vocab: int, gamma: int, tokens: int) -> tuple[bool, str]:
    """Audit the instance with joints on and off (one process each, memos emptied before each); a line of figures."""
    from exactspec.samplers.randomness import joint_draws
    t = es.models.random_table(vocab=vocab, order=1, seed=1)
    d = es.models.random_table(vocab=vocab, order=1, seed=4)
    kw = dict(target=t, draft=d, prompt=(0,), rng_model="continuous", tokens=tokens, workers=None, progress=False)
    fn = _litgpt(gamma, tokens)
    es.audit_loop(fn, **{**kw, "tokens": 1})           # first-call costs (litgpt's imports) on neither side
    out = {}
    saved = joint_draws.JOINT
    try:
        for on in (False, True):
            joint_draws.JOINT = on
            _clear_memos()
            t0 = time.perf_counter()
            r = es.audit_loop(fn, **kw)
            out[on] = (r, time.perf_counter() - t0)
    finally:
        joint_draws.JOINT = saved
    (single, s_s), (joint, j_s) = out[False], out[True]
    same = joint.output == single.output and joint.verdict == single.verdict and joint.tv == single.tv
    return same, (f"vocab {vocab}, gamma {gamma}, {tokens} tokens: joint {joint.paths} branches {j_s:.2f} s; one at "
                  f"a time {single.paths} branches {s_s:.2f} s -> {s_s / j_s:.1f}x; {joint.verdict}, laws "
                  f"{'identical' if same else 'DIFFERENT'}")


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    import torch
    torch.set_num_threads(1)
    print(f"litgpt 0.5.13 generate, order-1 tables (seeds 1, 4), ideal uniforms, one process; load average "
          f"{os.getloadavg()[0]:.1f}")
    ok = True
    for inst in INSTANCES[:2] if quick else INSTANCES:
        same, line = compare(*inst)
        ok = ok and same
        print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
