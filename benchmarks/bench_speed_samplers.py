"""Issue 17, third-party sampler audits: each row times the audit and, where there is one, a plain reference.

Run:  python -m benchmarks.bench_speed_samplers [--quick]

Rows (the issue's wording; targets on a quiet 2-core machine):

- the default search (243 instances) of a correct vLLM-style torch sampler through the ``vllm``
  adapter (a plain per-row loop, ``exactspec.bugzoo.torch_samplers:correct``): target 10 s;
- the default search of the correct numpy sampler (``exactspec.bugzoo.numpy_samplers:correct``):
  target 2 s;
- transformers' ``_speculative_sampling``, the README example (vocab 5, order 2, gamma 3, 3 tokens,
  full audit with the rounding figures): target 10 s; and at vocab 4, order 1, gamma 3, 3 tokens:
  target 2 s.

``old_s`` is the plain reference's time: :func:`benchmarks.plain_samplers.plain_sampler_law` (numpy samplers:
every draw enumerated eagerly through a stand-in generator, no interception, a plain recursion over the stream)
and :mod:`benchmarks.plain_torch` (torch samplers: every draw enumerated eagerly through a torch function mode),
run on every instance the search audited (the transformers rows: on the audited instance), each law compared
(``==`` on exact Fractions) with the audit's; a plain reference past ``PLAIN_CAP`` seconds is stopped and the
row says how far it got. ``new_s`` and ``old_s`` are wall-clock seconds; each row's note
also gives this process's CPU seconds, the steadier figure on a shared, loaded machine.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import exactspec as es
from exactspec.bugzoo import numpy_samplers as np_zoo
from benchmarks.plain_samplers import plain_sampler_law
from exactspec.counterexamples import Space
from exactspec.samplers.adapters import get_adapter
from exactspec.samplers.search import _patched_once, sampler_space, search_instances

#: the plain reference runs at most this long (wall seconds) over a search's instances: past it, it is compared
#: with the audit on the instances it covered
PLAIN_CAP = 120.0


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall-clock seconds, this process's CPU seconds: steadier on a shared machine)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _search(sampler: Any, adapter: str, space: Space | None, budget: float | None) -> tuple[Any, list]:
    """What ``search_sampler`` does (same options, same space), keeping every instance and its report."""
    ad = get_adapter(adapter)
    reports: list = []

    def audit_one(inst: dict) -> Any:
        r = es.audit_sampler(sampler, adapter=ad, rng_model="native", reference=False, on_error="record", **inst)
        reports.append((inst, r))
        return r
    with _patched_once(ad):
        found = search_instances(audit_one, space=space or sampler_space(ad.family), name=sampler.__name__,
                                 budget=budget, progress=False)
    return found, reports


def _plain(sampler: Any, audited: list, cap: float, law_of: Callable[..., dict]) -> tuple[int, bool]:
    """The plain reference ``law_of`` on each audited instance, in order, until ``cap`` seconds: (instances covered,
    whether every law it computed is the audit's)."""
    deadline = time.perf_counter() + cap
    done, same = 0, True
    for inst, report in audited:
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        try:
            law = law_of(sampler, inst["target"], inst["draft"], gamma=inst["proposer"].gamma,
                         prompt=tuple(inst.get("prompt", ())), tokens=inst["tokens"], seconds=left)
        except TimeoutError:
            break
        same &= law == report.output
        done += 1
    return done, same


def _search_row(job: str, sampler: Any, adapter: str, target: float, space: Space | None,
                plain: Callable[..., dict]) -> dict:
    (found, new), new_s, new_cpu = _timed(lambda: _search(sampler, adapter, space, None))
    calls = sum(r.extra.get("sampler_calls", 0) + r.extra.get("float64_sampler_calls", 0) for _, r in new)
    note = f"{len(new)} instances ({type(found).__name__}); sampler calls {calls}; CPU {new_cpu:.1f} s"
    (done, same), old_s, old_cpu = _timed(lambda: _plain(sampler, new, PLAIN_CAP, plain))
    capped = done < len(new)
    row = {"job": job, "new_s": new_s, "old_s": None if capped else old_s, "same": same, "target_s": target,
           "note": note + f"; plain reference ({plain.__module__}.{plain.__name__}) CPU {old_cpu:.1f} s"
                          f"{f', stopped after {done} of {len(new)} instances' if capped else ''}, laws compared "
                          f"on every instance it covered"}
    if capped:
        row["old_capped_s"] = PLAIN_CAP
    return row


def _audit_row(job: str, target_s: float, sampler: Any, inst: Any, **options: Any) -> dict:
    """One transformers audit of ``inst``, beside the plain reference's law of the same instance (capped)."""
    from benchmarks.plain_torch import plain_transformers_sampler_law
    new, new_s, new_cpu = _timed(lambda: es.audit_sampler(
        sampler, adapter="transformers", target=inst.target, draft=inst.draft, proposer=inst.proposer,
        prompt=inst.prompt, tokens=inst.tokens, **options))
    note = (f"{new.verdict}; sampler calls {new.extra['sampler_calls']} + float64 run "
            f"{new.extra.get('float64_sampler_calls', 0)}; CPU {new_cpu:.1f} s")
    try:
        law, old_s, old_cpu = _timed(lambda: plain_transformers_sampler_law(
            sampler, inst.target, inst.draft, gamma=inst.proposer.max_tokens() - 1, prompt=tuple(inst.prompt),
            tokens=inst.tokens, seconds=PLAIN_CAP))
    except TimeoutError:
        return {"job": job, "new_s": new_s, "old_s": None, "old_capped_s": PLAIN_CAP, "same": None,
                "target_s": target_s, "note": note + "; plain reference (benchmarks.plain_torch) stopped at its cap, "
                                                     "laws not compared"}
    extra = "" if options.get("reference") is False else \
        " (it computes the sampler's law only; the audit also runs the float64 run and the reference sampler)"
    return {"job": job, "new_s": new_s, "old_s": old_s, "same": law == new.output, "target_s": target_s,
            "note": note + f"; plain reference (benchmarks.plain_torch) CPU {old_cpu:.1f} s{extra}, laws compared"}


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
        from benchmarks.plain_torch import plain_vllm_sampler_law
        out.append(_search_row("default search, correct torch chain sampler (`--adapter vllm`, a plain per-row loop)",
                               tz.correct, "vllm", 10.0, small, plain=plain_vllm_sampler_law))
    except ImportError:
        pass
    out.append(_search_row("default search, correct numpy sampler (`exactspec.bugzoo.numpy_samplers:correct`, "
                           "243 instances)", np_zoo.correct, "numpy", 2.0, small, plain=plain_sampler_law))
    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        return out
    from types import SimpleNamespace

    from exactspec.instances import make_instance
    if not quick:
        target = es.models.random_table(vocab=5, order=2, seed=0)
        readme = SimpleNamespace(target=target, draft=es.models.perturbed(target, seed=1), proposer=es.drafts.chain(3),
                                 prompt=(0, 1), tokens=3)
        out.append(_audit_row("transformers `_speculative_sampling`, README example: vocab 5, order 2, gamma 3, "
                              "3 tokens", 10.0, _speculative_sampling, readme))
    inst = make_instance(vocab=4 if not quick else 3, order=1, gamma=3 if not quick else 2, tokens=3)
    out.append(_audit_row(f"transformers `_speculative_sampling`, vocab {inst.target.vocab}, order 1, gamma "
                          f"{inst.proposer.max_tokens() - 1}, 3 tokens", 2.0, _speculative_sampling, inst))
    return out


def main(argv: list[str] | None = None) -> None:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    for r in rows(quick=quick):
        capped = r.get("old_capped_s")
        old = f"{r['old_s']:7.2f} s" if r["old_s"] is not None else \
            f"> {capped:.0f} s (capped)" if capped is not None else "-"
        ratio = f"x{r['old_s'] / r['new_s']:.1f}" if r["old_s"] is not None else \
            f">x{capped / r['new_s']:.1f}" if capped is not None else "-"
        same = "no plain reference" if r["same"] is None else "same laws" if r["same"] else "LAWS DIFFER"
        print(f"{r['job']}\n    audit {r['new_s']:7.2f} s   plain {old}   {ratio}   target {r['target_s']:.0f} s   "
              f"{same}\n    {r['note']}", flush=True)


if __name__ == "__main__":
    main()
