"""es.prove benchmark: the prover against a straightforward baseline in the same run, and how the cost grows
with vocab, gamma and tokens.

Run:  python -m benchmarks.bench_prove          (add --quick to skip vocab 4 and the baseline)

The baseline is :func:`benchmarks.prove_baseline.prove_plain`: the same cells the plain way (the rule's
rng form and its closed form alike; sympy's arithmetic, a fresh z3 solver per cell, nothing memoised).
The rows: the baseline, then ``es.prove`` on the rule's rng form (``closed_form=False``), then
``es.prove`` as shipped (``benchmarks.bench_speed_prove`` times the issue 17 rows against the same
baseline).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import exactspec as es
from benchmarks.prove_baseline import prove_plain

CONFIGURATIONS = [("baseline (plain reference, rng form)", "plain", False),
                  ("es.prove, rng form (closed_form=False)", "prove", False),
                  ("es.prove (closed form: chain_step_law)", "prove", True)]


def run(rule: Any, gamma: int, vocab: int, tokens: int, how: str, closed_form: bool, timeout: float) -> tuple:
    """``(verdict, seconds, stats)`` of one proof, by ``how`` (``plain``: the reference; ``prove``: es.prove)."""
    t0 = time.perf_counter()
    try:
        if how == "plain":
            res: Any = prove_plain(rule, proposer=es.drafts.chain(gamma), vocab=vocab, tokens=tokens,
                                   family="context_free", closed_form=closed_form, timeout=timeout)
        else:
            res = es.prove(rule, proposer=es.drafts.chain(gamma), vocab=vocab, tokens=tokens, timeout=timeout,
                           family="context_free", closed_form=closed_form)
    except (es.ExactSpecError, TimeoutError) as exc:
        return f"gave up ({type(exc).__name__})", time.perf_counter() - t0, {}
    verdict = "proven" if res.proven else "REFUTED"
    stats = dict(getattr(res, "stats", {}))
    stats["cells"] = len(res.cells) if res.proven else "-"
    return verdict, time.perf_counter() - t0, stats


def main() -> None:
    quick = "--quick" in sys.argv
    ss = es.rules.speculative_sampling
    run(ss, 1, 2, 1, "prove", True, 60)   # warm up imports (sympy, z3)
    print("== baseline and prover: speculative_sampling, vocab 3, gamma 2, 2 tokens (context-free) ==")
    print(f"{'configuration':58} {'verdict':>10} {'s':>7} {'cells':>6} {'z3 checks':>10}")
    base = None
    for label, how, closed_form in CONFIGURATIONS:
        if quick and how == "plain":
            continue
        verdict, secs, st = run(ss, 2, 3, 2, how, closed_form, 300)
        base = base if base is not None else secs
        print(f"{label:58} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
              f"{str(st.get('z3 checks', '-')):>10}   x{base / secs:.1f} vs the first row", flush=True)
    print()
    print("== growth: speculative_sampling, es.prove (context-free; time limit 120 s a row) ==")
    print(f"{'vocab':>5} {'gamma':>5} {'tokens':>6} {'verdict':>10} {'s':>7} {'cells':>6} {'z3 checks':>10}")
    for vocab in (2, 3) if quick else (2, 3, 4):
        for gamma in (1, 2):
            for tokens in (1, 2):
                verdict, secs, st = run(ss, gamma, vocab, tokens, "prove", True, 120)
                print(f"{vocab:5} {gamma:5} {tokens:6} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
                      f"{str(st.get('z3 checks', '-')):>10}", flush=True)
    if not quick:
        for vocab, gamma, tokens in ((3, 3, 3), (5, 1, 1)):   # a longer chain; and where it stops being practical
            verdict, secs, st = run(ss, gamma, vocab, tokens, "prove", True, 120)
            print(f"{vocab:5} {gamma:5} {tokens:6} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
                  f"{str(st.get('z3 checks', '-')):>10}", flush=True)


if __name__ == "__main__":
    main()
