"""The switches of issue 17's faster sampler and whole-loop paths; the old paths stay reachable for benchmarks and tests.

:func:`fast_paths` / :func:`legacy_paths`: the sampler audit's faster paths (a lazy bonus draw, one
interception per search, numpy ``choice``'s checked cdf reused, the vLLM adapter's input tensors built once per
input, what a fresh exponential draw becomes under arithmetic with a float and the law of a race over the same
weights remembered across the replays of a call, ...), a context variable.

``LOOPS`` (default True) selects the faster path of what a whole-loop audit
(:func:`exactspec.audit_loop`) runs on every branch: the bookkeeping of pending categorical draws
(:mod:`exactspec.samplers.torch_draws.lazy_draws`: a reshape that keeps the entries' order reshapes their
cells, ``cat``/``stack`` join them with numpy, instead of both going through index tensors; a pending
tensor's torch functions dispatched on a per-function memo and run in C with subclasses disabled, wrappers made
without the class call, no pick attempted when no operand is pending; the interception's walk out of the caller's
frames reading its memo inline) and the stand-ins' per-call work (the transformers stand-in's ``forward``
signature computed once, its identity embedding and head skipped while they are as built, its generation config
restored attribute by attribute; the torch stand-in's memo of logits not copied twice). Both
paths give the identical law on every loop (``tests/test_loop_fast_path.py``);
``benchmarks/bench_speed_loops.py`` times both in one run. It is an internal switch, not an
option: use ``exactspec.samplers.loops.loop_audit._old_path()`` rather than setting it by hand.

>>> LOOPS
True
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

__all__ = ["LOOPS", "DEFER_LAST", "DEFER_READS", "fast_paths", "legacy_paths", "reads_deferred"]

#: True: the faster path; False: the path whole-loop audits took before issue 17
LOOPS = True

#: True: on the fast paths, a pending draw written into an output tensor stays pending and the adapters hand the
#: engine the last emitted token undrawn (:func:`~exactspec.samplers.torch_draws.lazy_draws.tokens_deferring_last`);
#: False: the fast paths as they were before it (the draw made at the write). An internal switch for the
#: benchmark that times both; ``legacy_paths()`` turns it off with the other fast paths
DEFER_LAST = True

#: True: on the whole-loop fast path (``LOOPS``), the torch stand-ins read no pending token they are fed: their logits
#: are values computed from pending draws (:mod:`exactspec.samplers.torch_draws.lazy_worlds`), kept pending through
#: torch operations until Python reads a value, so a token forks only where a decision reads it. False: the stand-ins
#: read every token they are fed (the path before it). An internal switch for the benchmark and the tests that
#: compare the two (identical laws)
DEFER_READS = True

#: whether the sampler audit takes its fast paths (issue 17: a lazy bonus draw, one interception per search, ...);
#: False is the path of release 0.x before them, kept reachable for the benchmarks and the tests that compare the
#: two (their laws and verdicts are identical)
_FAST_PATHS: contextvars.ContextVar[bool] = contextvars.ContextVar("exactspec_sampler_fast_paths", default=True)


def fast_paths() -> bool:
    """Whether sampler audits in this context take their fast paths (True unless :func:`legacy_paths` is active).

    >>> fast_paths()
    True
    """
    return _FAST_PATHS.get()


@contextlib.contextmanager
def reads_deferred(on: bool) -> Iterator[None]:
    """Inside the block, :data:`DEFER_READS` is ``on`` (restored after): for the benchmark and the tests that compare
    a whole-loop audit with the stand-ins deferring their reads and reading every token.

    >>> from exactspec.samplers.randomness import _fast_path
    >>> with reads_deferred(False):
    ...     _fast_path.DEFER_READS
    False
    >>> _fast_path.DEFER_READS
    True
    """
    global DEFER_READS
    saved, DEFER_READS = DEFER_READS, on
    try:
        yield
    finally:
        DEFER_READS = saved


@contextlib.contextmanager
def legacy_paths() -> Iterator[None]:
    """Inside the block, sampler audits and searches take the older, slower paths (same laws, same verdicts).

    Internal: the benchmarks time both paths in one run, and the tests check that they agree.

    >>> with legacy_paths():
    ...     fast_paths()
    False
    >>> fast_paths()
    True
    """
    token = _FAST_PATHS.set(False)
    try:
        yield
    finally:
        _FAST_PATHS.reset(token)
