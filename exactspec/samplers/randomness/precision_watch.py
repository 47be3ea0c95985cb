"""Where audited torch code computes coarser than float64 between the draws: a watch over every torch operation.

An audit tells rounding from bias by running the code on float64 inputs
(:mod:`exactspec.samplers.rounding`): what stays there is algorithmic, unless the code computes
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
import os
import sys
import threading
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["watching", "lifting", "suspended", "unwatched", "coarse_meeting_float64", "user_site"]

_LOCAL = threading.local()

_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}

#: numpy float dtypes coarser than float64, by name (a numpy scalar or array operand of a torch operation)
_NUMPY_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


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
    elif isinstance(x, (np.generic, np.ndarray)):     # torch treats a numpy float scalar like a Python float:
        name = _NUMPY_NAMES.get(x.dtype.name)         # its value is rounded to its own dtype all the same
        if name is not None:
            out.add(name)
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
    return sorted({_NAMES.get(str(d), d) for d in found if str(d) in _NAMES or d in _NUMPY_NAMES})


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


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: exactspec's own bug zoo is audited code, not exactspec's
_ZOO = os.path.join(_PACKAGE, "bugzoo")


def _called_by_exactspec() -> bool:
    """Whether the torch operation being handled was called by exactspec's machinery (the watch's own frames, which
    hand the operation on, looked through)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back      # type: ignore[assignment]
    return f is not None and _ours(f.f_code.co_filename)


def _ours(filename: str) -> bool:
    """Whether a frame's file is exactspec's own machinery (its bug zoo is audited code like any other)."""
    return filename.startswith(_PACKAGE) and not filename.startswith(_ZOO)


def user_site(skip: int = 1) -> str:
    """``file:line`` of the innermost frame of the audited code calling in (the first outside exactspec and torch).

    >>> user_site().endswith(">:1") or ":" in user_site()
    True
    """
    f = sys._getframe(skip)
    while f is not None:
        name = f.f_code.co_filename
        if not (_ours(name) or f"{os.sep}torch{os.sep}" in name or name.startswith("<frozen")):
            return f"{name}:{f.f_lineno}"
        f = f.f_back      # type: ignore[assignment]
    return "unknown"


@contextlib.contextmanager
def watching(note: Callable[[str], None], sites: dict | None = None) -> Iterator[None]:
    """Call ``note(precision)`` for each dtype coarser than float64 that meets float64 data in a torch operation run
    inside this block (see the module docstring); nothing is watched where torch is not imported. ``sites``: filled
    with the first ``file:line`` of the audited code where each precision was met (:func:`user_site`).

    >>> with watching(print):
    ...     pass
    """
    if "torch" not in sys.modules:
        yield
        return
    from torch.overrides import TorchFunctionMode

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if not getattr(_LOCAL, "suspended", 0):
                _note_coarse(args, kwargs, result, note, sites)
            return result

    with _Watch():
        yield


def _note_coarse(args: tuple, kwargs: dict | None, result: Any, note: Callable[[str], None],
                 sites: dict | None) -> None:
    """Tell ``note`` of each coarser precision meeting float64 data in one operation, and ``sites`` where first."""
    for p in coarse_meeting_float64(args, kwargs, result):
        note(p)
        if sites is not None and p not in sites:
            sites[p] = user_site(3)


#: the Tensor methods that cast to one coarser float dtype, and the float64 method lifting them
_CASTS = ("float", "half", "bfloat16")


def _lift_dtype(x: Any, torch: Any) -> Any:
    """``x`` with a floating dtype coarser than float64 (a dtype, or a tensor standing for its dtype) made float64."""
    if isinstance(x, torch.dtype):
        return torch.float64 if x.is_floating_point and x != torch.float64 and x.itemsize <= 4 else x
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64 and \
            x.dtype.itemsize <= 4:
        return torch.float64
    if isinstance(x, str) and x in ("torch.FloatTensor", "torch.HalfTensor", "torch.BFloat16Tensor"):
        return torch.float64
    return x


@contextlib.contextmanager
def lifting(lifted: Callable[[str, str], None] | None = None, note: Callable[[str], None] | None = None,
            sites: dict | None = None) -> Iterator[None]:
    """Run torch code with every cast it makes to a float dtype coarser than float64 lifted to float64.

    The audited code's own casts (``.float()``, ``.half()``, ``.bfloat16()``, ``.to(dtype)``, ``.type(dtype)``,
    a ``dtype=`` argument, a factory that would make a tensor of the default float32 dtype) make float64
    tensors instead, so the code runs at float64 what it would run coarser: *algorithmic* bias is what stays
    then (:mod:`exactspec.samplers.rounding`). What the block cannot lift (a float32 constant made
    before it, a numpy float32 scalar, a numpy cast) is still rounded: the watch (:func:`watching`) sees it.
    ``lifted(precision, site)`` is called for each precision lifted (at its first site). ``note`` / ``sites``:
    the block is also watched, as :func:`watching` would (one mode doing both). The lift is this block's and this
    thread's (a torch function mode): nothing outside it changes.

    >>> import torch
    >>> with lifting():
    ...     y = torch.tensor([0.1, 0.9], dtype=torch.float64).float()
    >>> y.dtype
    torch.float64
    """
    import torch
    from torch.overrides import TorchFunctionMode
    tensor_casts = {getattr(torch.Tensor, n): n for n in _CASTS}
    to, type_ = torch.Tensor.to, torch.Tensor.type
    noted: set = set()

    def note_lift(dtype: Any) -> None:
        if lifted is None:
            return
        name = _NAMES.get(str(dtype), str(dtype))
        if name not in noted:
            noted.add(name)
            lifted(name, user_site(3))

    class _Lift(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            if getattr(_LOCAL, "suspended", 0):
                return func(*args, **kwargs)
            if _called_by_exactspec():              # exactspec's own tensors (the draws') are not the code's casts
                return watched(args, kwargs, func(*args, **kwargs))
            if func in tensor_casts:
                if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
                    note_lift({"float": torch.float32, "half": torch.float16,
                               "bfloat16": torch.bfloat16}[tensor_casts[func]])
                    result = torch.Tensor.double(args[0], **kwargs)
                    return watched(args, kwargs, result)
                return func(*args, **kwargs)
            if func is to or func is type_:
                rest = list(args[1:])
                for i, a in enumerate(rest):
                    b = _lift_dtype(a, torch)
                    if b is not a:
                        note_lift(a.dtype if isinstance(a, torch.Tensor) else a)
                        rest[i] = b
                args = (args[0], *rest)
            else:
                args = tuple(_lift_arg(a, torch, note_lift) for a in args)
            if "dtype" in kwargs:
                b = _lift_dtype(kwargs["dtype"], torch)
                if b is not kwargs["dtype"]:
                    note_lift(kwargs["dtype"])
                    kwargs["dtype"] = b
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.is_floating_point() and \
                    result.dtype == torch.get_default_dtype() and result.dtype != torch.float64 and \
                    "dtype" not in kwargs and not _has_float_tensor(args) and "out" not in kwargs and \
                    not _random(func, result):
                # a factory of the default (float32) dtype: made float64 instead
                try:
                    again = func(*args, **kwargs, dtype=torch.float64)
                except TypeError:
                    return watched(args, kwargs, result)
                note_lift(result.dtype)
                return watched(args, kwargs, again)
            return watched(args, kwargs, result)

    def watched(args: tuple, kwargs: dict, result: Any) -> Any:
        if note is not None:
            _note_coarse(args, kwargs, result, note, sites)
        return result

    with _Lift():
        yield


def _lift_arg(a: Any, torch: Any, note: Callable[[Any], None]) -> Any:
    """A positional argument with a coarse float dtype in it lifted (``softmax(x, -1, torch.float32)``)."""
    if isinstance(a, torch.dtype):
        b = _lift_dtype(a, torch)
        if b is not a:
            note(a)
        return b
    return a


#: the names of torch's random factories and fills: never called twice (a second call is a second draw)
_RANDOM = ("rand", "normal", "bernoulli", "multinomial", "exponential", "poisson", "uniform", "cauchy", "geometric",
           "log_normal", "random")


def _random(func: Any, result: Any) -> bool:
    """Whether ``func`` draws (its result one of the draws' own tensors, or its name a random factory's)."""
    if type(result).__module__.startswith("exactspec."):
        return True
    name = getattr(func, "__name__", "") or ""
    return name.lstrip("_").startswith(_RANDOM)


def _has_float_tensor(args: Any, depth: int = 2) -> bool:
    import torch
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return True
        if depth and isinstance(a, (list, tuple)) and _has_float_tensor(a, depth - 1):
            return True
    return False
