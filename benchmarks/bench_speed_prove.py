"""Issue 17, the prover rows: ``es.prove`` (the new path) against a plain reference prover, same run.

Run:  python -m benchmarks.bench_speed_prove            (add --quick for a shorter run)

Each row proves ``speculative_sampling`` with ``es.drafts.chain(gamma)`` at the row's size with the
default family (:func:`exactspec.prove.default_family`: ``context_free`` at vocab 3 and up) twice,
each in a fresh child process (a stopped proof may leave sympy unusable in its process):

- **new**: ``es.prove`` as shipped (``workers=None``: every core from 6 free variables, i.e. vocab 4
  and up, the first cells in the calling process before the workers fork; in the calling process
  below): rational-function arithmetic with gcds of the factors (sympy's results), the cells'
  equalities substituted with cached powers, questions whose constraints are all linear asked of
  z3's linear-arithmetic solver;
- **old**: :func:`benchmarks.prove_baseline.prove_plain`, the straightforward way (the path before
  issue 17, written out as a plain reference sharing no switch with the product): in one process, a
  fresh z3 solver per cell, atoms factored at every use, nothing memoised (operations, constants,
  substitutions, z3 constraints), the difference cancelled before it is tested, sympy's own
  arithmetic and substitution, nlsat for every question. Stopped at a cap (``timeout=``, looked at
  between cells) where it is slow: the row then has ``old_s = None`` and ``old_capped_s``.

``same`` compares the verdicts, the cells (each cell's constraints, in order), the enumerated paths,
the atoms and the counters (``z3 checks`` plus ``unsat cores reused`` on the new path is the
reference's ``z3 checks``: the same questions, part of them answered from cores, split between the
two differently from run to run). A row whose old path
was capped compares nothing (``same`` is True only when both finished and agree, else False).
The figures are wall seconds of the proof alone (imports and a vocab-2 warm-up excluded); the note adds
the CPU seconds of each (the proof's process and its workers), a figure the machine's load disturbs less.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

ROWS = [
    # (job as the issue words it, vocab, gamma, tokens, target seconds, old-path cap, old cap when quick)
    ("`prove` speculative sampling vocab 3 gamma 2 tokens 2", 3, 2, 2, 0.5, 120, 60),
    ("`prove` vocab 4 gamma 2 tokens 2", 4, 2, 2, 2.0, 120, 30),
    ("`prove` vocab 5 gamma 1 token 1", 5, 1, 1, 15.0, 60, None),
]


def _key(res: Any) -> dict:
    """What must be identical between the two paths (a digest of the cells instead of the cells)."""
    from benchmarks.prove_baseline import PlainResult
    if isinstance(res, PlainResult):
        if not res.proven:
            return {"verdict": "refuted", "cell": res.cell, "outcome": list(res.outcome or ()),
                    "difference": res.difference, "cells_done": res.cells_done}
        stats = dict(res.stats)
        questions = stats.pop("z3 checks", 0)
        cells = hashlib.sha256(json.dumps(res.cells).encode()).hexdigest()
        return {"verdict": "proven", "cells": cells, "n_cells": len(res.cells), "paths": res.paths,
                "atoms": res.atoms, "stats": stats, "z3 questions": questions, "family": res.family}
    if not res.proven:
        return {"verdict": "refuted", "cell": res.cell, "outcome": list(res.outcome), "difference": res.difference,
                "cells_done": res.cells_done}
    stats = dict(res.stats)
    questions = stats.pop("z3 checks", 0) + stats.pop("unsat cores reused", 0)
    stats.pop("z3 checks asked again", None)
    cells = hashlib.sha256(json.dumps(res.cells).encode()).hexdigest()
    return {"verdict": "proven", "cells": cells, "n_cells": len(res.cells), "paths": res.paths, "atoms": res.atoms,
            "stats": stats, "z3 questions": questions, "family": res.family}


def _child(path: str, vocab: int, gamma: int, tokens: int, cap: float | None) -> None:
    """Run one proof (in a child process) and print one JSON line: seconds and the key."""
    import resource
    import time

    import exactspec as es
    from benchmarks.prove_baseline import prove_plain
    ss, chain = es.rules.speculative_sampling, es.drafts.chain
    es.prove(ss, proposer=chain(1), vocab=2, tokens=1)   # warm up: imports, sympy and z3 set-up
    if path == "old":
        prove_plain(ss, proposer=chain(1), vocab=2, tokens=1)
    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    c0 = cpu()
    t0 = time.perf_counter()
    try:
        if path == "old":
            res: Any = prove_plain(ss, proposer=chain(gamma), vocab=vocab, tokens=tokens, timeout=cap)
        else:
            res = es.prove(ss, proposer=chain(gamma), vocab=vocab, tokens=tokens, timeout=cap)
    except (es.BudgetExceeded, TimeoutError):
        print(json.dumps({"seconds": None, "capped": cap, "cpu": cpu() - c0}))
        return
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": cpu() - c0, "key": _key(res),
                      "summary": res.summary()}))


def _run(path: str, vocab: int, gamma: int, tokens: int, cap: float | None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_speed_prove", "--child", path, str(vocab), str(gamma), str(tokens),
           "none" if cap is None else str(cap)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=None if cap is None else cap + 300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def rows(quick: bool = False) -> list[dict]:
    """The prover rows of issue 17: es.prove and the plain reference timed in the same run, results compared.

    >>> callable(rows)
    True
    """
    from exactspec.parallel import resolve_workers
    from exactspec.prove import default_family
    out = []
    for job, vocab, gamma, tokens, target, cap, quick_cap in ROWS:
        if quick and quick_cap is None:
            continue
        old_cap = quick_cap if quick else cap
        new = _run("new", vocab, gamma, tokens, None)
        old = _run("old", vocab, gamma, tokens, old_cap)
        same = old.get("key") is not None and old["key"] == new["key"]
        k = new["key"]
        note = (f"speculative_sampling, chain({gamma}), vocab {vocab}, {tokens} token(s), default family "
                f"{default_family(vocab, tokens)}: {k.get('n_cells')} cells, {k.get('paths')} paths, "
                f"{k.get('z3 questions')} z3 questions; new path on {resolve_workers(0)} core(s) "
                f"({'every core' if 2 * (vocab - 1) >= 6 else 'in process'})")
        note += f"; CPU seconds (all processes): new {new['cpu']:.1f}, old {old['cpu']:.1f}"
        if old["seconds"] is None:
            note += f"; old path stopped at its cap of {old_cap} s, results not compared"
        out.append({"job": job, "new_s": new["seconds"], "old_s": old["seconds"],
                    **({"old_capped_s": float(old_cap)} if old["seconds"] is None else {}),
                    "same": same, "target_s": target, "note": note})
    return out


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        path, vocab, gamma, tokens, cap = sys.argv[i + 1:i + 6]
        _child(path, int(vocab), int(gamma), int(tokens), None if cap == "none" else float(cap))
        return
    import os
    quick = "--quick" in sys.argv
    print(f"== es.prove, new path vs the plain reference prover (load average {os.getloadavg()[0]:.1f}) ==")
    for r in rows(quick):
        old = f"{r['old_s']:.2f} s" if r["old_s"] is not None else f"> {r['old_capped_s']:.0f} s (capped)"
        ratio = (r["old_s"] if r["old_s"] is not None else r["old_capped_s"]) / r["new_s"]
        print(f"{r['job']}\n  new {r['new_s']:.2f} s   old {old}   x{ratio:.1f}{'+' if r['old_s'] is None else ''}   "
              f"target <= {r['target_s']} s   same: {r['same']}\n  {r['note']}", flush=True)


if __name__ == "__main__":
    main()
