"""PyTorch interception: inside :func:`intercept_torch`, torch's random draws fork the exact enumeration.

``torch.rand``, ``torch.rand_like``, ``Tensor.uniform_``, ``torch.bernoulli``, ``torch.multinomial``
(function and method), ``Tensor.exponential_`` (followed into the exponential race
``argmax(w / E)``, a draw from ``w / sum(w)``) and Python's ``random.random`` are replaced while a
sampler runs, and
restored afterwards (also on error). Uniform tensors are lazy (:class:`LazyUniformTensor`):
comparing them with real tensors or numbers, indexing, reshaping, and affine arithmetic keep
the law exact, every tensor value being taken as the rational it is; anything else raises
UnsupportedRandomness naming the torch operation. ``multinomial`` draws from the exact law of
its (float) weights normalised by their exact sum, as an ideal implementation would.

>>> import torch
>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> def program(rng):
...     with bind(rng):
...         return bool(torch.rand(1)[0] < torch.tensor([0.25])[0])
>>> with intercept_torch():
...     law = enumerate_program(program, get_field(backend="python"), exact_floats=True)
>>> law == {True: F(1, 4), False: F(3, 4)}
True
"""

from __future__ import annotations

import contextlib
import contextvars
import random as _pyrandom
from fractions import Fraction
from typing import Any, Iterator

import numpy as np

from ..errors import ExactSpecError, UnsupportedRandomness
from ..fields import _caller

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without the torch extra
    torch = None

__all__ = ["intercept_torch", "bind", "LazyUniformTensor", "LazyExponentialTensor", "RaceTensor"]

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("exactspec_torch_rng", default=None)


def _rng() -> Any:
    rng = _CURRENT.get()
    if rng is None:
        raise ExactSpecError("a torch random draw outside an exactspec audit (intercept_torch is active but no "
                             "branch is bound)")
    return rng


@contextlib.contextmanager
def bind(rng: Any) -> Iterator[None]:
    """Route intercepted draws to ``rng`` (one branch of the enumeration) inside the block."""
    token = _CURRENT.set(rng)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _exact(x: Any) -> Fraction:
    return Fraction(float(x))


if torch is not None:
    _COMPARE = {"__lt__": (True, False), "lt": (True, False), "less": (True, False),
                "__le__": (False, False), "le": (False, False), "less_equal": (False, False),
                "__gt__": (False, True), "gt": (False, True), "greater": (False, True),
                "__ge__": (True, True), "ge": (True, True), "greater_equal": (True, True)}
    _AFFINE = {"__mul__", "mul", "multiply", "__rmul__", "__add__", "add", "__radd__", "__sub__", "sub",
               "subtract", "__rsub__", "rsub", "__truediv__", "div", "divide", "true_divide", "__neg__", "neg",
               "negative"}
    _SHAPE = {"__getitem__", "view", "reshape", "squeeze", "unsqueeze", "flatten", "clone", "contiguous", "to",
              "float", "double", "detach", "expand_as", "expand", "__len__", "size", "dim", "numel", "__get__",
              "__repr__", "__format__", "ndimension", "cpu"}

    class LazyUniformTensor(torch.Tensor):
        """A tensor of lazy uniforms (affine functions of them); see the module docstring."""

        _u: np.ndarray

        @staticmethod
        def __new__(cls, uniforms: np.ndarray, dtype: Any = None) -> "LazyUniformTensor":
            base = torch.zeros(uniforms.shape, dtype=dtype or torch.float32)
            t = torch.Tensor._make_subclass(cls, base)
            t._u = uniforms
            return t

        def __repr__(self) -> str:  # noqa: D105
            return f"LazyUniformTensor(shape={tuple(self._u.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            if name in _COMPARE:
                return _compare(name, args)
            if name in _AFFINE:
                return _affine(name, args)
            if name in _SHAPE:
                return _shape(func, name, args, kwargs)
            raise UnsupportedRandomness(
                f"torch {name} on an intercepted uniform (at {_caller(3)}): the enumerator follows uniform tensors "
                "through comparisons, indexing, reshaping and affine arithmetic only")

    def _values(x: Any, shape: tuple) -> np.ndarray:
        arr = np.empty(shape, dtype=object)
        if isinstance(x, torch.Tensor):
            vals = np.broadcast_to(x.detach().cpu().double().numpy(), shape)
            for idx in np.ndindex(*shape):
                arr[idx] = _exact(vals[idx])
        else:
            arr[...] = _exact(x)
        return arr

    def _compare(name: str, args: tuple) -> Any:
        a, b = args[0], args[1]
        strict, flip = _COMPARE[name]
        if isinstance(b, LazyUniformTensor) and not isinstance(a, LazyUniformTensor):
            a, b = b, a                      # t < u  <=>  u > t
            strict, flip = {(True, False): (False, True), (False, False): (True, True),
                            (False, True): (True, False), (True, True): (False, False)}[(strict, flip)]
        if isinstance(b, LazyUniformTensor):
            raise UnsupportedRandomness(f"comparing two intercepted uniforms (at {_caller(4)})")
        shape = np.broadcast_shapes(a._u.shape, tuple(b.shape) if isinstance(b, torch.Tensor) else ())
        us = np.broadcast_to(a._u, shape)
        ts = _values(b, shape)
        out = np.zeros(shape, dtype=bool)
        for idx in np.ndindex(*shape):
            below = us[idx]._cmp(ts[idx], strict, name)    # u < t (strict) or u <= t
            out[idx] = (not below) if flip else below
        return torch.from_numpy(out)

    def _affine(name: str, args: tuple) -> Any:
        a = args[0]
        b = args[1] if len(args) > 1 else None
        if isinstance(b, LazyUniformTensor) and not isinstance(a, LazyUniformTensor):
            a, b = b, a                      # c op u with u on the right
            if name in ("__sub__", "sub", "subtract"):
                return _apply(a, lambda u, c: c - u, b)
            if name in ("__truediv__", "div", "divide", "true_divide"):
                raise UnsupportedRandomness(f"dividing by an intercepted uniform (at {_caller(4)})")
        if isinstance(b, LazyUniformTensor):
            raise UnsupportedRandomness(f"{name} of two intercepted uniforms (at {_caller(4)})")
        ops = {"mul": lambda u, c: u * c, "add": lambda u, c: u + c, "sub": lambda u, c: u - c,
               "rsub": lambda u, c: c - u, "div": lambda u, c: u / c, "neg": lambda u, c: -u}
        key = name.strip("_").replace("multiply", "mul").replace("subtract", "sub").replace("true_divide", "div")
        key = {"rmul": "mul", "radd": "add", "truediv": "div", "divide": "div", "negative": "neg"}.get(key, key)
        return _apply(a, ops[key], b)

    def _apply(a: "LazyUniformTensor", op: Any, b: Any) -> "LazyUniformTensor":
        shape = np.broadcast_shapes(a._u.shape, tuple(b.shape) if isinstance(b, torch.Tensor) else ())
        us = np.broadcast_to(a._u, shape)
        cs = _values(b if b is not None else 0, shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = op(us[idx], cs[idx])
        return LazyUniformTensor(out, a.dtype)

    def _shape(func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        a = args[0]
        if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__"):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if name == "__repr__":
            return LazyUniformTensor.__repr__(a)
        if name == "__getitem__":
            idx = args[1]
            idx = tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in idx) if isinstance(idx, tuple) else (
                idx.numpy() if isinstance(idx, torch.Tensor) else idx)
            return LazyUniformTensor(np.asarray(a._u[idx], dtype=object).reshape(np.shape(a._u[idx])), a.dtype)
        if name in ("clone", "contiguous", "to", "float", "double", "detach", "cpu"):
            return LazyUniformTensor(a._u.copy(), a.dtype)
        with torch._C.DisableTorchFunctionSubclass():
            shaped = func(torch.from_numpy(np.arange(a._u.size).reshape(a._u.shape)), *args[1:], **kwargs)
        return LazyUniformTensor(a._u.ravel()[shaped.numpy()], a.dtype)
    class LazyExponentialTensor(torch.Tensor):
        """Independent Exp(1) draws, followed only into the exponential race ``argmax(w / E)``."""

        _shape_: tuple

        @staticmethod
        def __new__(cls, shape: tuple, dtype: Any = None) -> "LazyExponentialTensor":
            t = torch.Tensor._make_subclass(cls, torch.ones(shape, dtype=dtype or torch.float32))
            t._shape_ = shape
            return t

        def __repr__(self) -> str:  # noqa: D105
            return f"LazyExponentialTensor(shape={self._shape_})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            if name in ("__truediv__", "div", "div_", "divide", "true_divide") and len(args) == 2 \
                    and not isinstance(args[0], (LazyExponentialTensor, RaceTensor)) \
                    and isinstance(args[1], LazyExponentialTensor):
                return RaceTensor(args[0])
            if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__"):
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
            if name == "__repr__":
                return LazyExponentialTensor.__repr__(args[0])
            raise UnsupportedRandomness(
                f"torch {name} on intercepted exponential draws (at {_caller(3)}): only the race argmax(w / E) "
                "is followed")

    class RaceTensor(torch.Tensor):
        """``w / E`` with E independent Exp(1): its argmax along the last dimension is a draw from w / sum(w)."""

        _w: Any

        @staticmethod
        def __new__(cls, weights: Any) -> "RaceTensor":
            w = weights.detach().cpu().double()
            t = torch.Tensor._make_subclass(cls, torch.zeros(tuple(w.shape), dtype=weights.dtype))
            t._w = w
            return t

        def __repr__(self) -> str:  # noqa: D105
            return f"RaceTensor(shape={tuple(self._w.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            if name == "argmax":
                race = args[0]
                dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
                if dim not in (-1, race._w.dim() - 1):
                    raise UnsupportedRandomness(f"the exponential race's argmax over dim {dim} (at {_caller(3)}): "
                                                "only the last dimension is followed")
                return _race_argmax(race._w, kwargs.get("keepdim", False))
            if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__"):
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
            if name == "__repr__":
                return RaceTensor.__repr__(args[0])
            raise UnsupportedRandomness(f"torch {name} on an exponential race (at {_caller(3)}): only argmax is "
                                        "followed")

    def _race_argmax(w: Any, keepdim: bool) -> Any:
        rows = w.numpy().reshape(-1, w.shape[-1])
        rng = _rng()
        out = np.zeros(rows.shape[0], dtype=np.int64)
        for r, row in enumerate(rows):
            weights = [_exact(x) for x in row]
            total = sum(weights)
            if total <= 0:
                out[r] = 0       # every ratio is 0: torch's argmax returns the first index
                continue
            out[r] = rng.categorical(tuple(rng._field.convert(x / total) for x in weights))
        res = torch.from_numpy(out).reshape(tuple(w.shape[:-1]))
        return res.unsqueeze(-1) if keepdim else res
else:  # pragma: no cover
    LazyUniformTensor = LazyExponentialTensor = RaceTensor = None  # type: ignore[assignment,misc]


def _uniforms(shape: tuple) -> np.ndarray:
    rng = _rng()
    arr = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        arr[idx] = rng.uniform()
    return arr


def _size(args: tuple, kwargs: dict) -> tuple:
    size = kwargs.get("size", args)
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _rand(*args: Any, **kwargs: Any) -> Any:
    return LazyUniformTensor(_uniforms(_size(args, kwargs)), kwargs.get("dtype"))


def _rand_like(t: Any, **kwargs: Any) -> Any:
    return LazyUniformTensor(_uniforms(tuple(t.shape)), kwargs.get("dtype") or t.dtype)


def _uniform_(self: Any, a: float = 0.0, b: float = 1.0, **kwargs: Any) -> Any:
    lazy = LazyUniformTensor(_uniforms(tuple(self.shape)), self.dtype)
    return lazy if (a, b) == (0.0, 1.0) else lazy * (b - a) + a


def _exponential_(self: Any, lambd: float = 1.0, **kwargs: Any) -> Any:
    if float(lambd) != 1.0:
        raise UnsupportedRandomness(f"exponential_({lambd}) (at {_caller(2)}): only rate 1 (the race) is followed")
    _rng()
    return LazyExponentialTensor(tuple(self.shape), self.dtype)


def _bernoulli(p: Any, *args: Any, **kwargs: Any) -> Any:
    probs = p.detach().cpu().double().numpy()
    rng = _rng()
    out = np.zeros(probs.shape)
    for idx in np.ndindex(*probs.shape):
        out[idx] = 1.0 if rng.uniform() < _exact(probs[idx]) else 0.0
    return torch.from_numpy(out).to(p.dtype)


def _multinomial(probs: Any, num_samples: int, replacement: bool = False, **kwargs: Any) -> Any:
    w = probs.detach().cpu().double().numpy()
    rows = w.reshape(-1, w.shape[-1])
    rng = _rng()
    out = np.zeros((rows.shape[0], num_samples), dtype=np.int64)
    for r, row in enumerate(rows):
        weights = [_exact(x) for x in row]
        if any(x < 0 for x in weights) or sum(weights) <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        for s in range(num_samples):
            total = sum(weights)
            law = tuple(rng._field.convert(x / total) for x in weights)
            k = rng.categorical(law)
            out[r, s] = k
            if not replacement:
                weights[k] = Fraction(0)
                if not any(weights) and s + 1 < num_samples:
                    raise RuntimeError("multinomial: not enough categories to sample without replacement")
    res = torch.from_numpy(out)
    return res.reshape(w.shape[:-1] + (num_samples,)) if w.ndim > 1 else res.reshape(num_samples)


@contextlib.contextmanager
def intercept_torch() -> Iterator[None]:
    """Replace torch's (and Python's) random draws by enumerating ones inside the block; restore after."""
    if torch is None:
        raise ExactSpecError("intercepting torch needs torch installed: pip install torch==2.13.0")
    saved = [(torch, "rand", torch.rand), (torch, "rand_like", torch.rand_like),
             (torch.Tensor, "uniform_", torch.Tensor.uniform_), (torch, "bernoulli", torch.bernoulli),
             (torch, "multinomial", torch.multinomial), (torch.Tensor, "multinomial", torch.Tensor.multinomial),
             (torch.Tensor, "bernoulli", torch.Tensor.bernoulli), (torch.Tensor, "exponential_",
                                                                   torch.Tensor.exponential_),
             (_pyrandom, "random", _pyrandom.random)]
    try:
        torch.rand, torch.rand_like = _rand, _rand_like
        torch.Tensor.uniform_ = _uniform_
        torch.Tensor.exponential_ = _exponential_
        torch.bernoulli = torch.Tensor.bernoulli = _bernoulli
        torch.multinomial = torch.Tensor.multinomial = _multinomial
        _pyrandom.random = lambda: _rng().uniform()
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
