"""The guard of the benchmarks' in-process baselines: a baseline that starts a pool is an error, not a figure.

Since the Python API defaults to ``workers="auto"`` (every core for a long job), a baseline that left
``workers`` out would time the new path twice; :func:`no_pool` makes that mistake loud.

>>> from exactspec import parallel
>>> with no_pool():
...     parallel._pool(2)
Traceback (most recent call last):
...
RuntimeError: an in-process baseline started a pool of 2 worker process(es): pass workers=None
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from exactspec import parallel


@contextlib.contextmanager
def no_pool() -> Iterator[None]:
    """Inside the block, starting a pool of worker processes raises RuntimeError."""
    real = parallel._pool

    def refused(n: int, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"an in-process baseline started a pool of {n} worker process(es): pass workers=None")
    parallel._pool = refused
    try:
        yield
    finally:
        parallel._pool = real
