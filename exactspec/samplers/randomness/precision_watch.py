"""Where audited torch code computes coarser than float64 between the draws: a watch over every torch operation.

An audit tells rounding from bias by running the code on float64 inputs
(:mod:`exactspec.samplers.float_boundary`): what stays there is algorithmic, unless the code computes
coarser than float64 whatever it is handed. That is seen where the coarser numbers meet the
randomness (the weights handed to ``multinomial``, the numbers compared with uniforms), and missed
where the code goes through a coarser dtype and back: ``logits.float().double()``, a softmax in
float32 whose result is cast to float64 for the draw, a temperature kept in a float32 tensor. Those
runs are float64 at the draws and yet carry float32 rounding, about 1e-8 in TV: beyond float64's
2**-40, so they read "biased" though the code is correct.

:func:`watching` notes, for every torch operation the audited code runs (the stand-ins' own
operations left out, :func:`suspended`), each floating dtype coarser than float64 that meets
float64 data in it: an operand or result in float64 and another in the coarser dtype (a cast down
or back up, a write of float64 values into a float32 buffer, a float32 tensor combined with float64
ones). A coarser tensor that never meets float64 data (a float32 counter) is not noted, nor are the draws'
own tensors (a float32 ``torch.rand``: the generator's precision is the ``rng_model``'s). It costs a
Python call per operation (about 30% of a whole-loop audit), so the audits run it only where it can
change a verdict: a run that is not lossless and saw nothing coarser at the draws is run again under
the watch.

>>> import torch
>>> seen = []
>>> with watching(seen.append):
...     y = torch.tensor([0.1, 0.9], dtype=torch.float64).float().double()
>>> sorted(set(seen))
['float32']
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

__all__ = ["watching", "suspended", "unwatched", "coarse_meeting_float64"]

_LOCAL = threading.local()

_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def _drawn(t: type) -> bool:
    """Whether tensors of type ``t`` are the draws' own (exactspec's lazy uniforms, races, masks): their precision is
    the generator model's (``rng_model``: a float32 ``torch.rand`` is on float64's lattice in a float64 run), not the
    code's. A stand-in's lazy logits (``LazyWorldsTensor``) are data."""
    got = _DRAWN.get(t)
    if got is None:
        got = _DRAWN[t] = t.__module__.startswith("exactspec.") and t.__name__ != "LazyWorldsTensor"
    return got


_DRAWN: dict = {}


def _dtypes(x: Any, out: set, depth: int = 2) -> None:
    """The floating dtypes of the tensors in ``x`` (a tensor, or lists and tuples of them, ``depth`` deep), the
    draws' own tensors left out."""
    import torch
    if isinstance(x, torch.Tensor):
        if not (type(x) is not torch.Tensor and _drawn(type(x))) and x.is_floating_point():
            out.add(x.dtype)
    elif depth and isinstance(x, (list, tuple)):
        for y in x:
            _dtypes(y, out, depth - 1)


def coarse_meeting_float64(args: tuple, kwargs: dict | None, result: Any) -> list[str]:
    """The precisions coarser than float64 that meet float64 data in one operation (its operands and result).

    >>> import torch
    >>> x = torch.zeros(2, dtype=torch.float64)
    >>> coarse_meeting_float64((x,), None, x.float()), coarse_meeting_float64((x.float(),), None, x.float())
    (['float32'], [])
    """
    import torch
    found: set = set()
    _dtypes(args, found)
    if kwargs:
        _dtypes(tuple(kwargs.values()), found)
    _dtypes(result, found)
    if torch.float64 not in found or len(found) < 2:
        return []
    return sorted(_NAMES[str(d)] for d in found if str(d) in _NAMES)


def _depth() -> int:
    return getattr(_LOCAL, "suspended", 0)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Leave the operations run inside this block out of the watch (a stand-in's forward: the model's own
    arithmetic, not the audited code's).

    >>> with suspended():
    ...     pass
    """
    _LOCAL.suspended = _depth() + 1
    try:
        yield
    finally:
        _LOCAL.suspended -= 1


def unwatched(fn: Callable) -> Callable:
    """``fn`` with its torch operations left out of the watch (:func:`suspended`): a stand-in's forward.

    >>> unwatched(len)([1, 2])
    2
    """
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        _LOCAL.suspended = _depth() + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _LOCAL.suspended -= 1
    return run


@contextlib.contextmanager
def watching(note: Callable[[str], None]) -> Iterator[None]:
    """Call ``note(precision)`` for each dtype coarser than float64 that meets float64 data in a torch operation run
    inside this block (see the module docstring); nothing is watched where torch is not imported.

    >>> with watching(print):
    ...     pass
    """
    import sys
    if "torch" not in sys.modules:
        yield
        return
    from torch.overrides import TorchFunctionMode

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if not getattr(_LOCAL, "suspended", 0):
                for p in coarse_meeting_float64(args, kwargs, result):
                    note(p)
            return result

    with _Watch():
        yield
