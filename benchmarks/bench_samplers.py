"""Sampler-audit benchmark, each figure next to its baseline (``cache=False``) measured in the same run.

Run:  python -m benchmarks.bench_samplers

Targets (2 cores): a numpy sampler at vocab 5, gamma 4, 2 tokens at most 5 s; the README's
transformers example (``random_table(vocab=5, order=2)``, ``chain(3)``, 3 tokens) at most 10 s;
transformers at vocab 4, gamma 3, 3 tokens at most 2 s.

Each full ``audit_sampler`` runs the sampler's audit, the exact rule's, and the reference sampler's
at float32 and at float64 (the rounding baselines). ``cache=True`` (the default) enumerates each
distinct sampler input once (later calls with the same drafts and laws are one draw over the
recorded law), reuses the adapter's tensors per input, and runs the references as fast rules where
the adapter has one; ``cache=False`` is the plain path: every call runs the sampler and the
references go through the adapter and the interception. Both give the same laws (checked here on
every line: ``same law``). Times are wall-clock seconds and, in brackets, this process's CPU
seconds (steadier on a shared machine).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _pair(label: str, run: Callable[..., Any]) -> None:
    """``run(cache=...)`` with the cache and without, side by side."""
    fast, wf, cf = _timed(lambda: run(cache=True))
    plain, wp, cp = _timed(lambda: run(cache=False))
    same = list(fast.output.items()) == list(plain.output.items()) and fast.verdict == plain.verdict
    print(f"{label:44} {wf:6.2f} s [{cf:6.2f}]  baseline {wp:6.2f} s [{cp:6.2f}]  x{wp / wf:4.1f}  "
          f"calls {fast.extra['sampler_calls']:6d} (baseline {plain.extra['sampler_calls']:6d})  "
          f"{fast.verdict:8} TV {float(fast.tv):.3g}  {'same law' if same else 'LAWS DIFFER'}")


def main() -> None:
    inst = make_instance(vocab=5, order=2, gamma=4, tokens=2)
    print("== numpy sampler audit: vocab 5, order 2, gamma 4, 2 tokens (target: at most 5 s) ==")
    for sampler in (zoo.correct, zoo.shared_uniform, zoo.tiny_clamp):
        for rng_model in ("continuous", "torch-float32"):
            _pair(f"{sampler.__name__} {rng_model}", lambda cache: es.audit_sampler(
                sampler, target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt,
                tokens=inst.tokens, rng_model=rng_model, cache=cache))
    small = make_instance(vocab=4, order=1, gamma=3, tokens=5)
    _pair("correct, V4 order 1 gamma 3, default 5 tokens", lambda cache: es.audit_sampler(
        zoo.correct, target=small.target, draft=small.draft, proposer=small.proposer, prompt=small.prompt,
        cache=cache))

    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        print("\n(transformers not installed: pip install '.[audit]')")
        return
    print("\n== transformers' _speculative_sampling ==")
    target = es.models.random_table(vocab=5, order=2, seed=0)
    draft = es.models.perturbed(target, seed=1)
    _pair("README: vocab 5, order 2, gamma 3, 3 tokens (<= 10 s)", lambda cache: es.audit_sampler(
        _speculative_sampling, adapter="transformers", target=target, draft=draft, proposer=es.drafts.chain(3),
        prompt=(0, 1), tokens=3, cache=cache))
    inst = make_instance(vocab=4, order=1, gamma=3, tokens=3)
    _pair("vocab 4, order 1, gamma 3, 3 tokens (<= 2 s)", lambda cache: es.audit_sampler(
        _speculative_sampling, adapter="transformers", target=inst.target, draft=inst.draft,
        proposer=inst.proposer, prompt=inst.prompt, tokens=inst.tokens, cache=cache))
    _pair("  the same, sampler alone (reference=False)", lambda cache: es.audit_sampler(
        _speculative_sampling, adapter="transformers", target=inst.target, draft=inst.draft,
        proposer=inst.proposer, prompt=inst.prompt, tokens=inst.tokens, reference=False, cache=cache))


if __name__ == "__main__":
    main()
