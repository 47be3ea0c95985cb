"""Issue 17, third-party sampler audits: each row times the fast paths and today's path in the same run.

Run:  python -m benchmarks.bench_speed_samplers [--quick]

Rows (the issue's wording; targets on a quiet 2-core machine):

- the default search (243 instances) of a correct vLLM-style torch sampler through the ``vllm``
  adapter (a plain per-row loop, ``exactspec.bugzoo.torch_samplers:correct``): target 10 s;
- the default search of the correct numpy sampler (``exactspec.bugzoo.numpy_samplers:correct``):
  target 2 s;
- transformers' ``_speculative_sampling``, the README example (vocab 5, order 2, gamma 3, 3 tokens,
  full audit with the rounding figures): target 10 s; and at vocab 4, order 1, gamma 3, 3 tokens:
  target 2 s.

"old" is the path before issue 17's changes to the sampler layer, reached through
``exactspec.samplers.randomness._fast_path.legacy_paths()`` (the bonus token of the vLLM adapter drawn before the
call, the random functions patched once per audit, the adapter's arrays and tensors and numpy ``choice``'s
cumulative sums rebuilt on every call, a fresh exponential's arithmetic and a race's law computed on every
replay of a call). The exact arithmetic shortcuts in ``exactspec.enumerate.rng`` (a lattice cut in integers,
floats' rationals remembered) and the leaner loops of the torch interception (no ``np.ndindex`` or
``np.vectorize`` per operation, dtypes read without a round trip through the lazy tensors' handlers) serve
both paths, so "old" here is already faster than the release before them. Each search row
records every instance's report on both paths and checks that the laws (``==`` on exact
Fractions) and verdicts agree; the old torch search is stopped after a cap (``old_capped_s``) and
compared on the instances it covered. ``new_s`` and ``old_s`` are wall-clock seconds; each row's
note also gives this process's CPU seconds, the steadier figure on a shared, loaded machine (the
development machine is: compare the ratios, and the CPU ones first).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import exactspec as es
from exactspec.bugzoo import numpy_samplers as np_zoo
from exactspec.counterexamples import EmptySearch, Space
from exactspec.samplers.adapters import get_adapter
from exactspec.samplers.randomness._fast_path import legacy_paths
from exactspec.samplers.search import _patched_once, sampler_space, search_instances

#: the old torch search runs at most this long (wall seconds; it took 138 s on the loaded machine, ~115 s quiet at release):
#: past it, it is compared with the new path on the instances it covered
OLD_TORCH_CAP = 90.0


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall-clock seconds, this process's CPU seconds: steadier on a shared machine)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _search(sampler: Any, adapter: str, space: Space | None, budget: float | None) -> tuple[Any, list]:
    """What ``search_sampler`` does (same options, same space), keeping every instance's report."""
    ad = get_adapter(adapter)
    reports: list = []

    def audit_one(inst: dict) -> Any:
        r = es.audit_sampler(sampler, adapter=ad, rng_model="native", reference=False, on_error="record", **inst)
        reports.append(r)
        return r
    with _patched_once(ad):
        found = search_instances(audit_one, space=space or sampler_space(ad.family), name=sampler.__name__,
                                 budget=budget, progress=False)
    return found, reports


def _agree(new: list, old: list) -> bool:
    """Every instance the old path audited has the same law, verdict and TVs on the new path."""
    if len(old) > len(new):
        return False
    return all(a.output == b.output and a.verdict == b.verdict and a.tv == b.tv
               and a.extra.get("algorithmic_tv") == b.extra.get("algorithmic_tv") for a, b in zip(new, old))


def _search_row(job: str, sampler: Any, adapter: str, target: float, space: Space | None, cap: float | None) -> dict:
    (found, new), new_s, new_cpu = _timed(lambda: _search(sampler, adapter, space, None))
    with legacy_paths():
        (old_found, old), old_s, old_cpu = _timed(lambda: _search(sampler, adapter, space, cap))
    capped = not isinstance(old_found, EmptySearch) and len(old) < len(new)
    same = _agree(new, old) and (capped or type(found) is type(old_found))
    calls = sum(r.extra.get("sampler_calls", 0) + r.extra.get("float64_sampler_calls", 0) for r in new)
    old_calls = sum(r.extra.get("sampler_calls", 0) + r.extra.get("float64_sampler_calls", 0) for r in old)
    row = {"job": job, "new_s": new_s, "old_s": None if capped else old_s, "same": same, "target_s": target,
           "note": f"{len(new)} instances ({type(found).__name__}); sampler calls {calls} "
                   f"(old path {old_calls}{f' on its first {len(old)} instances' if capped else ''}); "
                   f"CPU {new_cpu:.1f} s (old path {old_cpu:.1f} s{' capped' if capped else ''})"}
    if capped:
        row["old_capped_s"] = cap
    return row


def _audit_row(job: str, target_s: float, run: Callable[[], Any]) -> dict:
    new, new_s, new_cpu = _timed(run)
    with legacy_paths():
        old, old_s, old_cpu = _timed(run)
    same = new.output == old.output and new.verdict == old.verdict and new.tv == old.tv and \
        new.extra.get("algorithmic_tv") == old.extra.get("algorithmic_tv") and \
        new.extra.get("rounding_tv") == old.extra.get("rounding_tv")
    return {"job": job, "new_s": new_s, "old_s": old_s, "same": same, "target_s": target_s,
            "note": f"{new.verdict}; sampler calls {new.extra['sampler_calls']} + float64 run "
                    f"{new.extra.get('float64_sampler_calls', 0)} (old path {old.extra['sampler_calls']} + "
                    f"{old.extra.get('float64_sampler_calls', 0)}); CPU {new_cpu:.1f} s (old path {old_cpu:.1f} s)"}


def rows(quick: bool = False) -> list[dict]:
    """The rows of issue 17's table this module measures (``quick``: smaller spaces, for a smoke run).

    The README's table picks this module up (``benchmarks/speed_table.py`` runs every ``bench_speed_*``):

    >>> from benchmarks.speed_table import _modules
    >>> "bench_speed_samplers" in _modules()
    True
    """
    small = Space(vocabs=(2, 3), shapes=((1,), (2,)), tokens=(2, 3), random_points=2, exhaustive_denominator=2,
                  exhaustive_limit=3) if quick else None
    out = []
    try:
        import torch  # noqa: F401
        from exactspec.bugzoo import torch_samplers as tz
        out.append(_search_row("default search, correct torch chain sampler (`--adapter vllm`, a plain per-row loop)",
                               tz.correct, "vllm", 10.0, small, None if quick else OLD_TORCH_CAP))
    except ImportError:
        pass
    out.append(_search_row("default search, correct numpy sampler (`exactspec.bugzoo.numpy_samplers:correct`, "
                           "243 instances)", np_zoo.correct, "numpy", 2.0, small, None))
    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        return out
    if not quick:
        target = es.models.random_table(vocab=5, order=2, seed=0)
        draft = es.models.perturbed(target, seed=1)
        out.append(_audit_row("transformers `_speculative_sampling`, README example: vocab 5, order 2, gamma 3, "
                              "3 tokens", 10.0, lambda: es.audit_sampler(
                                  _speculative_sampling, adapter="transformers", target=target, draft=draft,
                                  proposer=es.drafts.chain(3), prompt=(0, 1), tokens=3)))
    from exactspec.instances import make_instance
    inst = make_instance(vocab=4 if not quick else 3, order=1, gamma=3 if not quick else 2, tokens=3)
    out.append(_audit_row(f"transformers `_speculative_sampling`, vocab {inst.target.vocab}, order 1, gamma "
                          f"{inst.proposer.max_tokens() - 1}, 3 tokens", 2.0, lambda: es.audit_sampler(
                              _speculative_sampling, adapter="transformers", target=inst.target, draft=inst.draft,
                              proposer=inst.proposer, prompt=inst.prompt, tokens=inst.tokens)))
    return out


def main(argv: list[str] | None = None) -> None:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    for r in rows(quick=quick):
        old = f"{r['old_s']:7.2f} s" if r["old_s"] is not None else f"> {r['old_capped_s']:.0f} s (capped)"
        ratio = f"x{r['old_s'] / r['new_s']:.1f}" if r["old_s"] is not None else \
            f">x{r['old_capped_s'] / r['new_s']:.1f}"
        print(f"{r['job']}\n    new {r['new_s']:7.2f} s   old {old}   {ratio}   target {r['target_s']:.0f} s   "
              f"{'same laws' if r['same'] else 'LAWS DIFFER'}\n    {r['note']}", flush=True)


if __name__ == "__main__":
    main()
