"""One switch for the faster whole-loop audit path (issue 17); the old path stays reachable for benchmarks and tests.

``LOOPS`` (default True) selects the faster path of what a whole-loop audit
(:func:`exactspec.audit_loop`) runs on every branch: the bookkeeping of pending categorical draws
(:mod:`exactspec.samplers.randomness.lazy_draws`: a reshape that keeps the entries' order reshapes their
cells, ``cat``/``stack`` join them with numpy, instead of both going through index tensors). Both
paths give the identical law on every loop (``tests/test_loop_fast_path.py``);
``benchmarks/bench_speed_loops.py`` times both in one run. It is an internal switch, not an
option: use ``exactspec.samplers.loops.loop_audit._old_path()`` rather than setting it by hand.

>>> LOOPS
True
"""

from __future__ import annotations

__all__ = ["LOOPS"]

#: True: the faster path; False: the path whole-loop audits took before issue 17
LOOPS = True
