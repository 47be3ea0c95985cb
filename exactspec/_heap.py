"""The cyclic garbage collector while an audit runs: the objects alive when it starts are frozen out of its reach.

An audit allocates many short-lived objects (exact fractions, tensors, one branch's bookkeeping),
so the collector runs often; every tenth young collection goes one generation up, and now and
then a full one walks every object the process holds. With torch and transformers imported that is
millions of objects: measured 0.28 s for one full collection, in an audit of litgpt's ``generate``
that otherwise took 0.77 s (``benchmarks/bench_speed_loops.py``; of eight runs, the slowest three
took 0.92-1.47 s against 0.75-0.81 s, and none over 0.88 s with the heap frozen). :func:`frozen`
moves the objects alive at the start of a block into the collector's permanent generation
(``gc.freeze``), where no collection looks at them, and back at the end of the outermost block
(``gc.unfreeze``). What the audit itself allocates is collected as before.

Forked worker processes start inside such a block (:func:`exactspec.parallel.fork_pool`): their
collections then do not touch, and copy, the pages they share with this process.

Where something else froze objects before the outermost block (a server that freezes its heap
before it forks, say), the block leaves the collector alone: unfreezing at its end would hand that
caller's objects back to the collector.

>>> import gc
>>> with frozen():
...     inside = gc.get_freeze_count() > 0
>>> inside, gc.get_freeze_count()
(True, 0)
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["frozen"]

_LOCK = threading.Lock()
#: blocks open now (every thread), and whether the outermost one froze the heap (False: frozen by someone else)
_OPEN = [0, False]


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Within the block, the objects alive at its start (and at the start of any block inside it) are out of the
    collector's reach; they are handed back when the outermost block ends. Re-entrant and thread-safe.

    >>> import gc
    >>> with frozen():
    ...     with frozen():
    ...         pass
    ...     still = gc.get_freeze_count() > 0
    >>> still, gc.get_freeze_count()
    (True, 0)
    """
    with _LOCK:
        if _OPEN[0] == 0:
            _OPEN[1] = gc.get_freeze_count() == 0
        _OPEN[0] += 1
        if _OPEN[1]:
            gc.freeze()
    try:
        yield
    finally:
        with _LOCK:
            _OPEN[0] -= 1
            if _OPEN[0] == 0 and _OPEN[1]:
                gc.unfreeze()
