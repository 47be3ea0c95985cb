"""PyTorch interception: inside :func:`intercept_torch`, torch's random draws fork the exact enumeration.

``torch.rand``, ``torch.rand_like``, ``Tensor.uniform_``, ``torch.bernoulli`` (and
``Tensor.bernoulli``, ``Tensor.bernoulli_``), ``torch.multinomial`` (function and method),
``Tensor.exponential_`` (followed into the exponential race ``argmax(w / E)``, a draw from
``w / sum(w)``), ``torch.randint``, ``torch.randint_like`` and ``torch.randperm`` (ideal uniform
integers and permutations), and Python's and numpy's global random functions are replaced while a
sampler runs, through the thread-safe layer of :mod:`exactspec.samplers.interception` (draws in
threads that run no audit branch reach the real functions), and restored afterwards (also on
error). ``torch.randn``, ``normal``, ``poisson``, ``Tensor.normal_``, ``random_``, ``geometric_``,
``cauchy_``, ``log_normal_``, seeding (``torch.manual_seed``, ``seed``, ``set_rng_state``) and making
a ``torch.Generator`` inside the sampler raise UnsupportedRandomness; a draw from torch's default
generator that escapes these functions is caught by comparing its state around each sampler call.

A ``generator=`` argument of an intercepted function is honoured as a source of fresh draws (the
draw is enumerated like any other); the audit advances that generator by one real draw each
time and raises UnsupportedRandomness if it comes back to a state it had before in the audit,
which is what re-seeding it inside the sampler does (its draws would then repeat from call to
call). Uniform tensors are lazy (:class:`LazyUniformTensor`):
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
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import ExactSpecError, UnsupportedRandomness
from ..fields import _caller
from .interception import (below, bind, current_rng, current_session, fisher_yates, generator_state, intercepting,
                           unsupported)

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without the torch extra
    torch = None

__all__ = ["intercept_torch", "bind", "LazyUniformTensor", "LazyExponentialTensor", "RaceTensor"]

_rng = current_rng
if torch is not None:
    #: the real in-place uniform, to advance a user's generator (the patched name may be a dispatcher)
    _REAL_UNIFORM_ = torch._C.TensorBase.uniform_


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


def _fresh(kwargs: dict) -> None:
    """A ``generator=`` draw: advance that generator as a real draw would; refuse one that came back to a past state."""
    gen = kwargs.get("generator")
    if gen is None or gen is torch.random.default_generator:
        return
    session = current_session()
    state = generator_state(gen)
    if session is not None:
        if (id(gen), state) in session.generator_states:
            raise unsupported("a draw with generator=", "that torch.Generator came back to a state it had earlier in "
                              "this audit: it is re-seeded inside the sampler, so its draws repeat from call to call "
                              "and are not random; exactspec will not audit them as random draws")
        session.generator_states.add((id(gen), state))
    _REAL_UNIFORM_(torch.empty(1, device=gen.device), generator=gen)
    if session is not None:
        session.own_moves.setdefault(id(gen), {})[state] = generator_state(gen)


def _in_place(target: Any, cls: Any, what: str, **attrs: Any) -> Any:
    """Make ``target`` itself the lazy tensor (an in-place draw used as a statement: ``u.uniform_()``).

    The tensor object becomes an instance of ``cls`` holding the lazy values, so code that keeps
    using ``target`` (not the return value) reads the enumerated draws. A view of another tensor
    cannot be followed into its base: refused rather than leaving the base's old values in place.
    """
    if target._base is not None:
        raise unsupported(f"{what} on a view of another tensor", "the audit cannot fill the base tensor with "
                          "enumerated draws; draw into a tensor of its own (e.g. u = torch.rand(shape)) and index it")
    target.__class__ = cls
    for k, v in attrs.items():
        setattr(target, k, v)
    return target


def _rand(*args: Any, **kwargs: Any) -> Any:
    _fresh(kwargs)
    out = kwargs.get("out")
    if out is not None:   # torch.rand(..., out=t): t itself holds the draws
        return _in_place(out, LazyUniformTensor, "torch.rand(out=...)", _u=_uniforms(_size(args, kwargs)))
    return LazyUniformTensor(_uniforms(_size(args, kwargs)), kwargs.get("dtype"))


def _rand_like(t: Any, **kwargs: Any) -> Any:
    _fresh(kwargs)
    return LazyUniformTensor(_uniforms(tuple(t.shape)), kwargs.get("dtype") or t.dtype)


def _uniform_(self: Any, a: float = 0.0, b: float = 1.0, **kwargs: Any) -> Any:
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    _fresh(kwargs)
    uniforms = _uniforms(tuple(self.shape))
    if (a, b) != (0.0, 1.0):   # a + (b - a) u, each uniform kept affine and exact
        scale, shift = _exact(b) - _exact(a), _exact(a)
        uniforms = np.vectorize(lambda u: u * scale + shift, otypes=[object])(uniforms)
    return _in_place(self, LazyUniformTensor, "Tensor.uniform_()", _u=uniforms)


def _exponential_(self: Any, lambd: float = 1.0, **kwargs: Any) -> Any:
    if float(lambd) != 1.0:
        raise UnsupportedRandomness(f"exponential_({lambd}) (at {_caller(2)}): only rate 1 (the race) is followed")
    _rng()
    _fresh(kwargs)
    return _in_place(self, LazyExponentialTensor, "Tensor.exponential_()", _shape_=tuple(self.shape))


def _coins(probs: np.ndarray) -> np.ndarray:
    rng = _rng()
    out = np.zeros(probs.shape)
    for idx in np.ndindex(*probs.shape):
        out[idx] = 1.0 if rng.uniform() < _exact(probs[idx]) else 0.0
    return out


def _bernoulli(p: Any, *args: Any, **kwargs: Any) -> Any:
    _fresh(kwargs)
    return torch.from_numpy(_coins(p.detach().cpu().double().numpy())).to(p.dtype)


def _bernoulli_(self: Any, p: Any = 0.5, **kwargs: Any) -> Any:
    _fresh(kwargs)
    probs = p.detach().cpu().double().numpy() if isinstance(p, torch.Tensor) else np.array(float(p))
    coins = torch.from_numpy(_coins(np.broadcast_to(probs, tuple(self.shape)))).to(self.dtype)
    with torch.no_grad():
        self.copy_(coins)
    return self


def _multinomial(probs: Any, num_samples: int, replacement: bool = False, **kwargs: Any) -> Any:
    _fresh(kwargs)
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


def _int_tensor(low: int, high: int, shape: tuple, dtype: Any, what: str) -> Any:
    if high <= low:
        raise RuntimeError(f"{what}: expects 'from' to be less than 'to', but got from={low} >= to={high}")
    rng = _rng()
    out = np.empty(shape, dtype=np.int64)
    for idx in np.ndindex(*shape):
        out[idx] = low + below(rng, high - low, what)
    return torch.from_numpy(out).to(dtype or torch.int64)


def _randint(*args: Any, **kwargs: Any) -> Any:
    """``randint(high, size)`` / ``randint(low, high, size)``: ideal uniform integers, exactly."""
    _fresh(kwargs)
    rest = list(args)
    size = kwargs["size"] if "size" in kwargs else rest.pop()
    high = kwargs["high"] if "high" in kwargs else rest.pop()
    low = kwargs.get("low", rest.pop() if rest else 0)
    return _int_tensor(int(low), int(high), tuple(int(s) for s in size), kwargs.get("dtype"), "torch.randint")


def _randint_like(t: Any, *args: Any, **kwargs: Any) -> Any:
    _fresh(kwargs)
    rest = list(args)
    high = kwargs["high"] if "high" in kwargs else rest.pop()
    low = kwargs.get("low", rest.pop() if rest else 0)
    return _int_tensor(int(low), int(high), tuple(t.shape), kwargs.get("dtype") or t.dtype, "torch.randint_like")


def _randperm(n: int, **kwargs: Any) -> Any:
    """A uniform permutation of ``0 .. n - 1`` (Fisher-Yates, each swap an exact draw)."""
    _fresh(kwargs)
    return torch.tensor(fisher_yates(_rng(), int(n), "torch.randperm"), dtype=kwargs.get("dtype") or torch.int64)


def _refuse(what: str, why: str) -> Any:
    def impl(*args: Any, **kwargs: Any) -> Any:
        raise unsupported(what, why)
    impl.__name__ = what.rsplit(".", 1)[-1]
    return impl


_NOT_UNIFORM = ("the enumerator follows uniforms through comparisons and affine arithmetic, categorical draws and the "
                "exponential race; this draw cannot be enumerated exactly")
_SEEDING = ("seeding inside the sampler makes its draws repeat from call to call, so they are not random; exactspec "
            "will not audit them as random draws")


def torch_specs() -> list[tuple]:
    """What :func:`~exactspec.samplers.interception.intercepting` patches in torch (when torch is imported)."""
    T = torch.Tensor
    specs: list[tuple] = [
        (torch, "rand", _rand, "torch"), (torch, "rand_like", _rand_like, "torch"), (T, "uniform_", _uniform_, "torch"),
        (T, "exponential_", _exponential_, "torch"), (torch, "bernoulli", _bernoulli, "torch"),
        (T, "bernoulli", _bernoulli, "torch"), (T, "bernoulli_", _bernoulli_, "torch"),
        (torch, "multinomial", _multinomial, "torch"), (T, "multinomial", _multinomial, "torch"),
        (torch, "randint", _randint, "torch"), (torch, "randint_like", _randint_like, "torch"),
        (torch, "randperm", _randperm, "torch")]
    for name in ("randn", "randn_like", "normal", "poisson", "binomial", "_standard_gamma", "_sample_dirichlet"):
        specs.append((torch, name, _refuse(f"torch.{name}", _NOT_UNIFORM), "torch"))
    for name in ("normal_", "random_", "geometric_", "cauchy_", "log_normal_"):
        specs.append((T, name, _refuse(f"Tensor.{name}", _NOT_UNIFORM), "torch"))
    for owner, prefix in ((torch, "torch"), (torch.random, "torch.random")):
        for name in ("manual_seed", "seed", "set_rng_state"):
            specs.append((owner, name, _refuse(f"{prefix}.{name}", _SEEDING), "torch"))
    specs.append((torch, "Generator", _refuse(
        "torch.Generator(...)", "a generator made inside the sampler is usually seeded there, so its draws would "
        "repeat from call to call; make it once outside the sampler (draws through it with generator= are "
        "intercepted), or draw without generator="), "class"))
    return specs


def intercept_torch() -> contextlib.AbstractContextManager:
    """Replace torch's (and Python's and numpy's) random draws by enumerating ones inside the block; restore after.

    The same thread-safe layer as every sampler audit (:func:`~exactspec.samplers.interception.intercepting`):
    draws are enumerated only in a thread that has bound a branch (:func:`bind`).

    >>> original = torch.rand
    >>> with intercept_torch():
    ...     torch.rand is original
    False
    >>> torch.rand is original
    True
    """
    if torch is None:
        raise ExactSpecError("intercepting torch needs torch installed: pip install torch==2.13.0")
    return intercepting()
