"""The speed table's baseline rows: the exact engine against plain recursion (``benchmarks/baseline.py``).

Run:  python -m benchmarks.bench_speed_baseline [--quick]

Each row times ``es.audit`` (the catalog's closed form) and ``benchmarks.baseline.baseline_law`` (recursion
over every branch of the whole stream, every draft combination, no memoisation: it shares no code with the
engine) on the same seeded instance in this run, and checks the two laws are equal (``==`` on exact
Fractions). The instances are the ladder of ``benchmarks/bench_engine.py`` where the baseline finishes.
``rows(job=TEXT)`` computes only the rows whose job contains ``TEXT`` (the cheapest is the gamma 1 row:
a few hundredths of a second for the baseline), which ``python -m benchmarks.speed_table --job`` uses.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import exactspec as es
from benchmarks.baseline import baseline_law
from exactspec.instances import make_instance

#: (vocab, gamma, tokens) of each row; the job names them
LADDER = ((5, 1, 3), (5, 2, 2), (5, 2, 3))


def _job(vocab: int, gamma: int, tokens: int) -> str:
    return f"exact engine vs plain recursion, speculative_sampling, chain vocab {vocab} gamma {gamma} tokens {tokens}"


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _row(vocab: int, gamma: int, tokens: int, repeat: int) -> dict[str, Any]:
    inst = make_instance(vocab=vocab, order=2, gamma=gamma, tokens=tokens)
    rule = es.rules.speculative_sampling
    new_s, report = _best(lambda: es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule,
                                           prompt=inst.prompt, tokens=inst.tokens), repeat)
    old_s, law = _best(lambda: baseline_law(rule.fn, inst.target, inst.draft, gamma=gamma, prompt=inst.prompt,
                                            tokens=tokens), max(1, repeat // 2))
    return {"job": _job(vocab, gamma, tokens), "new_s": new_s, "old_s": old_s, "same": law == report.output,
            "target_s": None,
            "note": f"make_instance(vocab={vocab}, order=2, gamma={gamma}, tokens={tokens}); {len(law)} outcomes; "
                    f"baseline: benchmarks/baseline.py baseline_law (no memoisation); best of {repeat} (engine) and "
                    f"{max(1, repeat // 2)} (baseline); laws compared exactly"}


def rows(quick: bool = False, job: str | None = None) -> list[dict[str, Any]]:
    """The engine-against-baseline rows (``quick``: the two cheap ones; ``job``: only the rows whose job contains it).

    >>> [r["same"] for r in rows(job="gamma 1 tokens 3")]
    [True]
    """
    ladder = LADDER[:2] if quick else LADDER
    return [_row(v, g, t, 3) for v, g, t in ladder if job is None or job in _job(v, g, t)]


def main(argv: list[str] | None = None) -> int:
    for r in rows(quick="--quick" in (sys.argv[1:] if argv is None else argv)):
        print(f"{r['job']}\n  engine {r['new_s']:.4f} s   baseline {r['old_s']:.3f} s   ratio "
              f"{r['old_s'] / r['new_s']:.0f}x   same law: {r['same']}\n  {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
