"""Issue 17, whole generate loops: ``es.audit_loop``'s time, branches and floor, same run.

Rows (the issue's wording): transformers' own ``generate`` with an assistant (vocab 4, 3 tokens),
a harder transformers instance standing in for the README's, and litgpt 0.5.13's ``generate`` at
gamma 3. Each row audits the loop by default (the branches left after ``SWITCH_AFTER`` seconds shared
between this process and forked workers; :data:`RUNS` runs, their median is the row's figure and their
range is in the note) and in one process (after one untimed small audit of the same loop), every
module-level memo of exact rows emptied before each run, and checks the reports identical (law,
verdict, TV, the float64 run's figures, branches). The baseline (``old_s``) is the plain reference of
``benchmarks/plain_torch.py`` on the same loop and instance: every draw forked the moment it is made or
compared, the loop run from its start on every branch, no interception; its law is compared with the audit's
(``same``), and past :data:`PLAIN_CAP` seconds it is stopped (the row says so). The forward calls are
counted on the run in one process. ``note`` also gives the *floor*: the loop's own cost outside any audit
(on the same stand-ins, torch's generator) times the branches, which no audit that runs the loop once per
branch can beat. ``python -m benchmarks.bench_speed_loops`` (``--quick``: smaller instances).

>>> callable(rows)
True
"""

from __future__ import annotations

import contextlib
import sys
import time
from fractions import Fraction
from typing import Any, Callable

import exactspec as es
from exactspec.errors import BudgetExceeded

#: the plain reference runs at most this long (wall seconds) per row
PLAIN_CAP = 120.0
#: runs of the default path per row: the row's figure is their median (a shared machine's load moves one run by
#: 20-30%), their range is in the note
RUNS = 5


def agree_exactly(a: Any, b: Any) -> bool:
    """Two reports of the same audit on the same path: the same law, verdict, TV, figures and branches."""
    return a is not None and b is not None and a.output == b.output and a.expected == b.expected and (
        a.verdict, a.tv, a.paths) == (b.verdict, b.tv, b.paths) and all(
        a.extra.get(k) == b.extra.get(k) for k in ("tv_float64", "algorithmic_tv", "float64_paths"))


def _assisted(gamma: int, new_tokens: int) -> Callable[..., Any]:
    """The recipe of ``tests/test_recipes_transformers.py``: ``generate`` with an assistant drafting ``gamma``."""
    def fn(target: Any, draft: Any, ids: Any) -> Any:
        draft.generation_config.num_assistant_tokens = gamma
        return target.generate(ids, assistant_model=draft, max_new_tokens=new_tokens, do_sample=True)
    return fn


def _litgpt(gamma: int, n: int) -> Callable[..., Any]:
    """The recipe of ``tests/test_recipes_loops.py``: litgpt's own ``generate``."""
    import litgpt.generate.speculative_decoding as litgpt_sd

    def loop(target: Any, draft: Any, prompt: Any) -> Any:
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=gamma,
                                       max_returned_tokens=prompt.shape[1] + n + 1)
        return tokens
    return loop


def _switch_after() -> float:
    from exactspec.samplers.loops import _on_workers
    return _on_workers.SWITCH_AFTER


def _clear_memos() -> None:
    """Empty the module-level memos of exact rows, so no run runs on another's warm caches."""
    from exactspec.samplers.torch_draws import lazy_draws
    from exactspec.samplers.torch_draws import lazy_worlds
    for memo in (lazy_draws._ROWS, lazy_draws._MATRICES, lazy_draws._KNOWN, lazy_worlds._MEMO, lazy_worlds._LOGITS,
                 lazy_worlds._ROW_LAYOUTS):
        memo.clear()


def _audit(fn: Callable, kw: dict, cap: float | None, workers: Any = "auto") -> tuple[Any, float, float]:
    """One audit, its wall and CPU seconds (this process's CPU: a worker's is not counted); None for a capped run."""
    _clear_memos()
    budget = es.Budget(seconds=cap) if cap else None
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        r = es.audit_loop(fn, budget=budget, workers=workers, **kw)
    except BudgetExceeded:
        r = None
    return r, time.perf_counter() - t0, time.process_time() - c0


def _floor_ms(fn: Callable, kw: dict, calls: int = 100) -> tuple[float, float]:
    """CPU milliseconds of one plain run of the loop on the audit's stand-ins (no audit, torch's own generator),
    and the forward calls (target and draft) one plain run makes on average."""
    import torch

    from exactspec.samplers.loops.stand_in import stand_in
    kind, dtype = kw.get("kind", "torch-lm"), kw.get("dtype") or torch.float64
    t, d = stand_in(kw["target"], kind=kind, dtype=dtype), stand_in(kw["draft"], kind=kind, dtype=dtype)
    ids = torch.tensor([list(kw.get("prompt", (0,)))])
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # as audits run torch
    try:
        for _ in range(5):
            t.reset(), d.reset(), fn(t, d, ids)
        forwards = t.total_calls + d.total_calls
        c0 = time.process_time()
        for _ in range(calls):
            t.reset(), d.reset(), fn(t, d, ids)
        cpu = (time.process_time() - c0) / calls * 1e3
        return cpu, (t.total_calls + d.total_calls - forwards) / calls
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _counting_forwards() -> Any:
    """Within the block, every stand-in an audit builds is kept; yields the list (their ``total_calls`` add up to
    the forward calls of every branch the audit ran)."""
    from exactspec.samplers.loops import loop_audit
    built: list = []
    real = loop_audit.stand_in

    def keep(*args: Any, **kwargs: Any) -> Any:
        lm = real(*args, **kwargs)
        built.append(lm)
        return lm
    loop_audit.stand_in = keep
    try:
        yield built
    finally:
        loop_audit.stand_in = real


def _warm_up(fn: Callable, kw: dict) -> None:
    """One small audit of the loop (vocab 2, one token), untimed: first-call costs (imports inside the audited
    library, the interception's set-up) fall on no timed run."""
    tiny = es.models.context_free(("1/2", "1/2"))
    es.audit_loop(fn, **{**kw, "target": tiny, "draft": tiny, "tokens": 1, "on_error": "record",
                         "tolerance": Fraction(1, 2 ** 20)})


def _row(job: str, target_s: float, fn: Callable, kw: dict, instance: str) -> dict:
    floor, plain_forwards = _floor_ms(fn, kw)
    _warm_up(fn, kw)
    with _counting_forwards() as built:      # in this process, so that every forward call is counted here
        one, one_s, one_cpu = _audit(fn, kw, cap=None, workers=None)
    forwards = sum(lm.total_calls for lm in built)
    # the default, timed RUNS times (each on emptied memos): its median is the row's figure, the range in the note
    timed = [_audit(fn, kw, cap=None) for _ in range(RUNS)]
    new = timed[0][0]
    times = sorted(t for _, t, _ in timed)
    new_s = times[len(times) // 2]
    same_runs = all(agree_exactly(r, new) for r, _, _ in timed[1:])

    # the run in one process and the default runs: the same law, figures and branches
    same = agree_exactly(one, new) and same_runs
    plain, old_s, plain_note = _plain(fn, kw)
    branches = new.paths + (new.extra.get("float64_paths") or 0)
    runs = "two runs (own precision + float64)" if new.extra.get("float64_paths") else "one run"
    from exactspec import parallel
    note = (f"{instance}; {branches} branches ({runs}), {new.verdict}, "
            f"TV {float(new.tv):.3g}; on "
            f"{parallel.resolve_workers(0)} processes (the default: the branches left after "
            f"{_switch_after():g} s are shared between this process and forked workers), the median of {RUNS} runs "
            f"({times[0]:.2f}-{times[-1]:.2f} s); in one process {one_s:.2f} s (CPU {one_cpu:.1f} s); "
            f"{plain_note}; floor on one core (the loop alone, {floor:.2f} ms CPU per call, x {branches} "
            f"branches) "
            f"{floor * branches / 1e3:.1f} s; by forward calls (the branches run every path, the plain runs the "
            f"likeliest: {forwards / branches:.2f} per branch vs {plain_forwards:.2f} per plain run) "
            f"{floor / plain_forwards * forwards / 1e3:.1f} s")
    row = {"job": job, "new_s": new_s, "old_s": old_s, "same": same and plain == new.output,
           "target_s": target_s, "note": note}
    if plain is None and same:
        row["old_capped_s"] = PLAIN_CAP          # "not compared (baseline stopped)"; runs that differ stay a failure
    return row


def _plain(fn: Callable, kw: dict) -> tuple[dict | None, float | None, str]:
    """The plain reference's law of the same audit (benchmarks/plain_torch.py), its seconds and a note; the law None
    past :data:`PLAIN_CAP` seconds."""
    import torch

    from benchmarks.plain_torch import plain_loop_law
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        law = plain_loop_law(fn, kw["target"], kw["draft"], prompt=kw.get("prompt", (0,)), tokens=kw["tokens"],
                             dtype=kw.get("dtype") or torch.float64, kind=kw.get("kind", "torch-lm"),
                             rng_model=kw.get("rng_model", "native"), seconds=PLAIN_CAP)
    except TimeoutError:
        return None, None, f"plain reference (benchmarks.plain_torch) stopped at its cap of {PLAIN_CAP:g} s"
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return law, wall, f"plain reference (benchmarks.plain_torch, every draw forked eagerly) CPU {cpu:.1f} s, law compared"


def rows(quick: bool = False) -> list[dict]:
    """The issue's whole-loop rows, each timed in this run.

    ``quick``: smaller instances of the same loops (seconds, not minutes).
    """
    import torch  # noqa: F401

    import exactspec.samplers.loops.hf_stand_in  # noqa: F401  (transformers imported before any timing)
    tol = Fraction(1, 2 ** 20)      # float32 rounding, as the transformers recipes use
    out = []
    p4, q4 = es.models.random_table(vocab=4, order=1, seed=1), es.models.random_table(vocab=4, order=1, seed=11)
    p3, q3 = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=2)
    if quick:
        out.append(_row("whole transformers generate with an assistant (num_assistant_tokens=3), order-1 tables, "
                        "vocab 4, 3 tokens [quick: vocab 3, num_assistant_tokens=2, ideal uniforms]", 5.0,
                        _assisted(2, 3), dict(target=p3, draft=q3, kind="transformers", tokens=3, tolerance=tol,
                                              rng_model="continuous"),
                        "vocab 3 order-1 tables (seeds 1, 2), gamma 2, 3 tokens, ideal uniforms"))
    else:
        out.append(_row("whole transformers generate with an assistant (num_assistant_tokens=3), order-1 tables, "
                        "vocab 4, 3 tokens", 5.0, _assisted(3, 3),
                        dict(target=p4, draft=q4, kind="transformers", tokens=3, tolerance=tol),
                        "vocab 4 order-1 tables (seeds 1, 11), gamma 3, 3 tokens, torch's own generator "
                        "(native rng), float64 stand-ins; transformers imported before timing"))
        q42 = es.models.random_table(vocab=4, order=1, seed=2)
        out.append(_row("the README's harder transformers case (vocab 4, gamma 3; 9,556 branches, ~160 s there)", 10.0,
                        _assisted(3, 4), dict(target=p4, draft=q42, kind="transformers", tokens=3, tolerance=tol,
                                              rng_model="continuous"),
                        "the README's 9,556-branch instance is not recorded; this one: vocab 4 order-1 tables "
                        "(seeds 1, 2), gamma 3, generate 4 new tokens, 3 audited, ideal uniforms"))
    try:
        _litgpt(1, 1)
    except ImportError:
        return out
    t3, d3 = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=4)
    gamma = 2 if quick else 3
    out.append(_row("litgpt generate, gamma 3, vocab 3, 3 tokens" + (" [quick: gamma 2]" if quick else ""), 0.5,
                    _litgpt(gamma, 3), dict(target=t3, draft=d3, prompt=(0,), rng_model="continuous", tokens=3),
                    f"litgpt 0.5.13 generate, vocab 3 order-1 tables (seeds 1, 4), gamma {gamma}, 3 tokens, "
                    "ideal uniforms (tests/test_recipes_loops.py)"))
    return out


def main(argv: list[str] | None = None) -> None:
    import os

    import torch
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"whole-loop audits; torch {torch.__version__}, "
          f"{os.cpu_count()} cores, load average {load:.1f} at the start")
    for r in rows(quick):
        print(f"{r['job']}\n  audit {r['new_s']:7.2f} s   target <= {r['target_s']:g} s   "
              f"{'runs identical' if r['same'] is None else 'RUNS DIFFER'}\n  {r['note']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
