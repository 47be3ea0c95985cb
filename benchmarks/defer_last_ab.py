"""Issue 17: the deferred last draw (``_fast_path.DEFER_LAST``) on and off, both on the fast paths, in one run.

Run:  python -m benchmarks.defer_last_ab

Rows: the default search (243 instances) of ``exactspec.bugzoo.torch_samplers:correct`` through the
``vllm`` adapter, and transformers' ``_speculative_sampling`` README example (vocab 5, order 2,
gamma 3, 3 tokens). Each prints wall and CPU seconds and sampler calls with the deferral and
without it, and whether every law, verdict and TV agrees (``==`` on exact Fractions). On a shared,
loaded machine compare the CPU figures. ``bench_speed_samplers`` times the fast paths against
``legacy_paths()`` (deferral included in the former, off in the latter).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import exactspec as es
from exactspec.samplers.randomness import _fast_path


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _calls(reports: list) -> int:
    return sum(r.extra.get("sampler_calls", 0) + r.extra.get("float64_sampler_calls", 0) for r in reports)


def _search() -> tuple[Any, list]:
    from benchmarks.bench_speed_samplers import _search as search
    from exactspec.bugzoo import torch_samplers as tz
    return search(tz.correct, "vllm", None, None)


def _readme() -> Any:
    from transformers.generation.utils import _speculative_sampling
    target = es.models.random_table(vocab=5, order=2, seed=0)
    draft = es.models.perturbed(target, seed=1)
    return es.audit_sampler(_speculative_sampling, adapter="transformers", target=target, draft=draft,
                            proposer=es.drafts.chain(3), prompt=(0, 1), tokens=3)


def _same(new: Any, old: Any) -> bool:
    return new.output == old.output and new.verdict == old.verdict and new.tv == old.tv and \
        new.extra.get("algorithmic_tv") == old.extra.get("algorithmic_tv") and \
        new.extra.get("rounding_tv") == old.extra.get("rounding_tv")


def main() -> None:
    """Print the two rows (see the module docstring)."""
    from benchmarks.bench_speed_samplers import _agree
    for name, job in (("torch search", _search), ("transformers README", _readme)):
        new, wn, cn = _timed(job)
        _fast_path.DEFER_LAST = False
        try:
            old, wo, co = _timed(job)
        finally:
            _fast_path.DEFER_LAST = True
        if name == "torch search":
            same = _agree(new[1], old[1]) and type(new[0]) is type(old[0])
            calls_new, calls_old = _calls(new[1]), _calls(old[1])
        else:
            same = _same(new, old)
            calls_new, calls_old = _calls([new]), _calls([old])
        print(f"{name}: deferred last draw wall {wn:.1f} s, CPU {cn:.1f} s, {calls_new} sampler calls | without: "
              f"wall {wo:.1f} s, CPU {co:.1f} s, {calls_old} sampler calls | same laws and verdicts: {same}",
              flush=True)


if __name__ == "__main__":
    main()
