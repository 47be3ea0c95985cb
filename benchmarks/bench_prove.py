"""es.prove benchmark: which levers pay, against a straightforward baseline in the same run, and how the
cost grows with vocab, gamma and tokens.

Run:  python -m benchmarks.bench_prove          (add --quick to skip vocab 4 and the baseline)

The levers before issue 17 are measured on the path before it (``exactspec.prove._prove.legacy_path()``),
issue 17's together in the last row (``benchmarks.bench_speed_prove`` times them row by row of the issue).
The baseline is the same symbolic field with every lever off: the rule's rng form (no closed form),
a z3 feasibility check on every comparison (no known-sign cache, no rational point of the cell, no
factoring of atoms) and every rational-function operation recomputed in every cell. The levers are
then switched on one at a time, in the order listed.
"""

from __future__ import annotations

import contextlib
import sys
import time

import exactspec as es
from exactspec.prove import _field, _prove

LEVERS = [("closed form (chain_step_law)", "closed_form"), ("known signs of atoms (no z3)", "use_cache"),
          ("rational point of the cell (one z3 check per atom)", "use_point"),
          ("arithmetic shared between cells", "CACHE_OPS"), ("factored atoms, known factors dropped", "use_factors"),
          ("issue 17 levers (bench_speed_prove)", "issue17")]


def _set(on: set) -> dict:
    _field.Decider.use_cache = "use_cache" in on
    _field.Decider.use_point = "use_point" in on
    _field.Decider.use_factors = "use_factors" in on
    _field.CACHE_OPS = "CACHE_OPS" in on
    return {"closed_form": "closed_form" in on}


def run(rule, gamma: int, vocab: int, tokens: int, on: set, timeout: float) -> tuple:
    kw = _set(on)
    t0 = time.perf_counter()
    try:
        with contextlib.nullcontext() if "issue17" in on else _prove.legacy_path():
            res = es.prove(rule, proposer=es.drafts.chain(gamma), vocab=vocab, tokens=tokens, timeout=timeout,
                           family="context_free", **kw)
    except es.ExactSpecError as exc:
        return f"gave up ({type(exc).__name__})", time.perf_counter() - t0, {}
    finally:
        _set({name for _, name in LEVERS})
    verdict = "proven" if res.proven else "REFUTED"
    stats = dict(getattr(res, "stats", {}))
    stats["cells"] = len(res.cells) if res.proven else "-"
    return verdict, time.perf_counter() - t0, stats


def main() -> None:
    quick = "--quick" in sys.argv
    ss = es.rules.speculative_sampling
    run(ss, 1, 2, 1, {name for _, name in LEVERS}, 60)   # warm up imports (sympy, z3)
    print("== levers: speculative_sampling, vocab 3, gamma 2, 2 tokens (context-free) ==")
    print(f"{'configuration':58} {'verdict':>10} {'s':>7} {'cells':>6} {'z3 checks':>10}")
    on: set = set()
    rows = [("baseline (every lever off)", set())]
    for label, name in LEVERS:
        on = on | {name}
        rows.append(("+ " + label, set(on)))
    base = None
    for label, conf in rows:
        if quick and not conf:
            continue
        verdict, secs, st = run(ss, 2, 3, 2, conf, 300)
        base = base if base is not None else secs
        print(f"{label:58} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
              f"{str(st.get('z3 checks', '-')):>10}   x{base / secs:.1f} vs the first row", flush=True)
    print()
    print("== growth: speculative_sampling, all levers on (context-free; time limit 120 s a row) ==")
    print(f"{'vocab':>5} {'gamma':>5} {'tokens':>6} {'verdict':>10} {'s':>7} {'cells':>6} {'z3 checks':>10}")
    for vocab in (2, 3) if quick else (2, 3, 4):
        for gamma in (1, 2):
            for tokens in (1, 2):
                verdict, secs, st = run(ss, gamma, vocab, tokens, {name for _, name in LEVERS}, 120)
                print(f"{vocab:5} {gamma:5} {tokens:6} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
                      f"{str(st.get('z3 checks', '-')):>10}", flush=True)
    if not quick:
        for vocab, gamma, tokens in ((3, 3, 3), (5, 1, 1)):   # a longer chain; and where it stops being practical
            verdict, secs, st = run(ss, gamma, vocab, tokens, {name for _, name in LEVERS}, 120)
            print(f"{vocab:5} {gamma:5} {tokens:6} {verdict:>10} {secs:7.2f} {str(st.get('cells', '-')):>6} "
                  f"{str(st.get('z3 checks', '-')):>10}", flush=True)


if __name__ == "__main__":
    main()
