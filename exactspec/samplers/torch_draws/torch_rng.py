"""PyTorch interception: inside :func:`intercept_torch`, torch's random draws fork the exact enumeration.

It is kept as one module: the lazy uniform, race and mask tensors turn into one another under torch
operations (a uniform compared is a mask, exponentials divided into weights a race) through one dispatch,
and the patched random functions listed by :func:`torch_specs` build them.

``torch.rand``, ``torch.rand_like``, ``Tensor.uniform_``, ``torch.bernoulli`` (and
``Tensor.bernoulli``, ``Tensor.bernoulli_``), ``torch.multinomial`` (function and method),
``Tensor.exponential_`` (followed into the exponential race ``argmax(w / E)``, a draw from
``w / sum(w)``; in place, as a statement ``q.exponential_()`` too), ``torch.randint``,
``torch.randint_like`` and ``torch.randperm`` (ideal uniform integers and permutations), and
Python's and numpy's global random functions are replaced while a sampler runs, through the
thread-safe layer of :mod:`exactspec.samplers.randomness.interception` (draws in threads that run no audit
branch reach the real functions), and restored afterwards (also on
error). ``torch.randn``, ``normal``, ``poisson``, ``Tensor.normal_``, ``random_``, ``geometric_``,
``cauchy_``, ``log_normal_``, seeding (``torch.manual_seed``, ``seed``, ``set_rng_state``) and making
a ``torch.Generator`` inside the sampler raise UnsupportedRandomness; a draw from torch's default
generator that escapes these functions is caught by comparing its state around each sampler call.

A ``generator=`` argument of an intercepted function is honoured as a source of fresh draws (the
draw is enumerated like any other); the audit advances that generator by one real draw each
time and raises UnsupportedRandomness if it comes back to a state it had before in the audit,
which is what re-seeding it inside the sampler does (its draws would then repeat from call to
call). Uniform tensors are lazy (:class:`LazyUniformTensor`):
comparing them with real tensors or numbers, indexing, reshaping, iterating, and affine
arithmetic keep the law exact, every tensor value being taken as the rational it is;
``u.item()`` and ``u.tolist()`` hand over lazy scalars that compare exactly (``float(u)`` cannot:
it raises, pointing at ``.item()``); ``torch.searchsorted(torch.cumsum(p, -1), u)`` and
``torch.bucketize`` are inverse-CDF draws, each index taking the exact measure of the interval
its float boundaries define. A comparison gives a :class:`LazyMask`: each entry forks only when
the code reads it, in read order (``m[i]``, ``bool``, ``item``; ``argmax``, ``all``, ``any``
and ``cumprod`` read a row only up to the entry that decides it; ``~``, ``&``, ``|``, ``cumsum``
compared with a number, dtype casts and reshaping stay lazy; any other operation, ``torch.where``
included, reads every entry and continues with a real tensor). ``log``, ``**``, ``argmax`` of
uniforms and ``exponential_()`` draws are race values (:class:`RaceTensor`, see
:mod:`exactspec.samplers.randomness.lazy_values`): every spelling of the Gumbel-max and exponential races
(``argmax(log p - log(-log u))``, ``argmax(log(u) / p)``, ``argmax(u ** (1 / p))``,
``argmax(p / q.exponential_())``, ``argmax(p / -log u)``) is a categorical draw from its exact
weights. An argmax over a batch of races is lazy per row, like ``multinomial``
(:class:`~exactspec.samplers.torch_draws.lazy_draws.LazyCategoricalTensor`): each race is checked when the
argmax is taken, and row ``i``'s winner is drawn (the enumeration forks) only when entry ``i`` is
read, so a sampler that races every draft position at once and reads the recovered token at one
forks on that one only. Anything else raises UnsupportedRandomness naming the torch operation and the
sampler's line. ``multinomial`` draws from the exact law of its (float) weights normalised by
their exact sum, as an ideal implementation would.

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
import math
import operator
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from ...enumerate.rng import LATTICES, Lattice, PathRng
from ...errors import ExactSpecError, UnsupportedRandomness
from ..randomness.interception import (below, bind, current_rng, current_session, deliberate, fisher_yates,
                                       generator_state, intercepting, native_uniform, note_dtype, unsupported,
                                       user_site)
from .lazy_draws import LazyCategoricalTensor, PendingDraw, exact_rows, lazy_multinomial
from .lazy_worlds import LazyWorldsTensor, deferring, entry_decision, multinomial_of_worlds, value_of
from .lazy_worlds import live as _worlds_live
from . import lazy_worlds as _lazy_worlds
from ..randomness.lazy_values import LazyBit, exponential, fresh_op, lazy, race_outcome
from ..randomness.planned import current_plan

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without the torch extra
    torch = None  # type: ignore[assignment]  # optional dependency: None (checked) where torch is not installed

__all__ = ["intercept_torch", "bind", "LazyUniformTensor", "LazyExponentialTensor", "RaceTensor", "LazyMask",
           "torch_lattice"]

_rng = current_rng
#: torch's CPU uniform lattice by dtype (see :func:`torch_lattice`)
_TORCH_LATTICES: dict = {}
if torch is not None:
    _TORCH_LATTICES = {torch.float32: LATTICES["torch-float32"], torch.float64: LATTICES["float64"],
                       torch.float16: LATTICES["torch-float16"], torch.bfloat16: LATTICES["torch-bfloat16"]}
if torch is not None:
    #: the real in-place uniform, to advance a user's generator (the patched name may be a dispatcher)
    _REAL_UNIFORM_ = torch._C.TensorBase.uniform_


#: float -> its exact rational: the same float operands come on every replay of a sampler call
_EXACT: dict = {}


def _each(f: Any, arr: np.ndarray) -> np.ndarray:
    """``f`` of each entry of an object array (row-major), in an object array of the same shape."""
    cells = arr.ravel()
    out = np.empty(len(cells), dtype=object)
    for i, c in enumerate(cells):
        out[i] = f(c)
    return out.reshape(arr.shape)


def _exact(x: Any) -> Fraction:
    f = float(x)
    hit = _EXACT.get(f)
    if hit is None:
        hit = Fraction(f)          # raises on nan and inf, as before
        if len(_EXACT) > 1 << 16:
            _EXACT.clear()
        _EXACT[f] = hit
    return hit


if torch is not None:
    _COMPARE = {"__lt__": (True, False), "lt": (True, False), "less": (True, False),
                "__le__": (False, False), "le": (False, False), "less_equal": (False, False),
                "__gt__": (False, True), "gt": (False, True), "greater": (False, True),
                "__ge__": (True, True), "ge": (True, True), "greater_equal": (True, True)}
    _AFFINE = {"__mul__", "mul", "multiply", "__rmul__", "__add__", "add", "__radd__", "__sub__", "sub",
               "subtract", "__rsub__", "rsub", "__truediv__", "div", "divide", "true_divide", "__neg__", "neg",
               "negative"}
    #: shape-only operations: the result's entries are entries of the input (object-array indexing)
    _SHAPE = {"__getitem__", "view", "reshape", "squeeze", "unsqueeze", "flatten", "clone", "contiguous", "to",
              "float", "double", "detach", "expand_as", "expand", "cpu", "permute", "transpose", "t", "select",
              "narrow", "view_as", "reshape_as", "movedim", "flip", "half", "bfloat16"}
    _META = {"__len__", "size", "dim", "numel", "ndimension", "__format__", "nelement", "is_contiguous",
             "is_floating_point", "is_complex", "element_size", "get_device", "stride", "storage_offset"}
    #: properties that read no values
    _SAFE_PROPERTIES = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "names", "is_sparse",
                        "is_quantized", "is_meta", "grad", "is_leaf", "grad_fn", "is_mps", "is_cpu", "is_nested",
                        "itemsize", "nbytes", "is_xpu"}
    _CLAMPS = {"clamp", "clamp_min", "clamp_max", "clip", "maximum", "minimum", "fmax", "fmin", "clamp_", "clip_"}
    _CLAMP_WHY = ("clamping a uniform or a race value (log(u.clamp(min=eps)), as some Gumbel samplers write) changes "
                  "the law on an event of probability about eps, and the exact law is then no longer a draw from "
                  "rational or exp weights; exactspec gives no verdict it cannot prove. Compute the race on the "
                  "uniform itself (torch.log(u), -torch.log(-torch.log(u))), or draw with q.exponential_()")
    #: operations that turn uniforms into race values (see :mod:`exactspec.samplers.randomness.lazy_values`)
    _RACE_ENTRY = {"log", "__pow__", "pow", "argmax", "argmin", "exp", "reciprocal", "__rtruediv__", "__rdiv__"}

    def _property(func: Any) -> str | None:
        owner = getattr(func, "__self__", None)
        return getattr(owner, "__name__", None)

    def _meta(func: Any, name: str, args: tuple, kwargs: dict, what: str) -> tuple[bool, Any]:
        """(True, result) for operations that read no values (sizes, dtype, repr); (False, None) otherwise."""
        if name in _META or (name == "__get__" and _property(func) in _SAFE_PROPERTIES):
            with torch._C.DisableTorchFunctionSubclass():
                return True, func(*args, **kwargs)
        if name == "__repr__" or name == "__str__":
            return True, f"{what}(shape={tuple(args[0].shape)})"
        return False, None

    def _dt(t: Any) -> Any:
        """A tensor's dtype, read without a round trip through a lazy tensor's own handler."""
        with torch._C.DisableTorchFunctionSubclass():
            return t.dtype

    def _prologue(func: Any, args: tuple, kwargs: dict, what: str) -> tuple[str, bool, Any]:
        """A handler's first steps: the operation's name (a property read names the property unless it reads no
        values), and ``(True, result)`` of :func:`_meta` for operations that read no values."""
        name = getattr(func, "__name__", None)
        if name is None:
            name = str(func)
        elif name == "__get__":
            prop = _property(func)
            if prop not in _SAFE_PROPERTIES:
                name = f"{prop} (a property)"
        if name in _META or name == "__get__" or name == "__repr__" or name == "__str__":
            done, out = _meta(func, name, args, kwargs, what)
            return name, done, out
        return name, False, None

    def _plain_index(idx: Any) -> Any:
        def one(i: Any) -> Any:
            if isinstance(i, LazyMask):
                return _materialise(i).numpy()
            if isinstance(i, torch.Tensor):
                return i.numpy()
            return i
        return tuple(one(i) for i in idx) if isinstance(idx, tuple) else one(idx)

    def _reshaped(func: Any, name: str, arr: np.ndarray, args: tuple, kwargs: dict) -> np.ndarray:
        """The object array a shape-only operation makes of ``arr`` (entries shared, not copied)."""
        if name == "__getitem__":
            sub = arr[_plain_index(args[1])]
            return np.asarray(sub, dtype=object).reshape(np.shape(sub))
        if name in ("clone", "contiguous", "to", "float", "double", "detach", "cpu", "half", "bfloat16"):
            return arr.copy()
        with torch._C.DisableTorchFunctionSubclass():
            shaped = func(torch.from_numpy(np.arange(arr.size).reshape(arr.shape)), *args[1:], **kwargs)
        return arr.ravel()[shaped.numpy()]

    def _dtype_of(name: str, args: tuple, kwargs: dict, default: Any) -> Any:
        if name in ("float",):
            return torch.float32
        if name in ("double",):
            return torch.float64
        if name == "half":
            return torch.float16
        if name == "bfloat16":
            return torch.bfloat16
        if name == "to":
            for a in list(args[1:]) + [kwargs.get("dtype")]:
                if isinstance(a, torch.dtype):
                    return a
        return default

    def _exact_values(x: Any, shape: tuple) -> np.ndarray:
        """A real operand (tensor or number) as exact numbers (inf kept as float) broadcast to ``shape``."""
        arr = np.empty(shape, dtype=object)
        if isinstance(x, torch.Tensor):
            note_dtype(x)
            vals = np.broadcast_to(x.detach().cpu().double().numpy(), shape)
            for idx in np.ndindex(*shape):
                arr[idx] = _num_or_inf(vals[idx])
        else:
            arr[...] = _num_or_inf(x)
        return arr

    def _num_or_inf(x: Any) -> Any:
        f = float(x)
        return f if f in (float("inf"), float("-inf")) or f != f else _exact(f)

    def _values(x: Any, shape: tuple) -> np.ndarray:
        arr = np.empty(shape, dtype=object)
        if isinstance(x, torch.Tensor):
            note_dtype(x)
            vals = np.broadcast_to(x.detach().cpu().double().numpy(), shape)
            for idx in np.ndindex(*shape):
                arr[idx] = _exact(vals[idx])
        else:
            arr[...] = _exact(x)
        return arr

    class LazyUniformTensor(torch.Tensor):
        """A tensor of lazy uniforms (affine functions of them); see the module docstring."""

        _u: np.ndarray

        @staticmethod
        def __new__(cls, uniforms: np.ndarray, dtype: Any = None) -> "LazyUniformTensor":
            base = torch.zeros(uniforms.shape, dtype=dtype or torch.float32)
            t = torch.Tensor._make_subclass(cls, base)
            t._u = uniforms
            return t

        # mypy reads torch's Tensor.__repr__ as matched by no override, not even its own signature (hence the ignore)
        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105
            return f"LazyUniformTensor(shape={tuple(self._u.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name, done, out = _prologue(func, args, kwargs, "LazyUniformTensor")
            if done:
                return out
            if name in _COMPARE:
                return _compare(name, args)
            if name in _AFFINE:
                return _affine(name, args)
            if name in _SHAPE and isinstance(args[0], LazyUniformTensor):
                return LazyUniformTensor(_reshaped(func, name, args[0]._u, args, kwargs),
                                         _dtype_of(name, args, kwargs, _dt(args[0])))
            if name in ("searchsorted", "bucketize"):
                return _searchsorted(name, args, kwargs)
            if name in ("__iter__", "unbind") and isinstance(args[0], LazyUniformTensor) and _dim0(args, kwargs):
                rows = [LazyUniformTensor(np.asarray(r, dtype=object).reshape(np.shape(r)), _dt(args[0]))
                        for r in args[0]._u]
                return iter(rows) if name == "__iter__" else tuple(rows)
            if name == "item":
                u = args[0]._u
                if u.size != 1:
                    raise RuntimeError(f"a Tensor with {u.size} elements cannot be converted to Scalar")
                return u.reshape(-1)[0]
            if name == "tolist":
                return args[0]._u.tolist()
            if name in _RACE_ENTRY:
                conv = tuple(RaceTensor(_each(lambda u: u.race(), a._u))
                             if isinstance(a, LazyUniformTensor) else a for a in args)
                return RaceTensor.__torch_function__(func, types, conv, kwargs)
            if name in _CLAMPS:
                raise UnsupportedRandomness(f"torch {name} on an intercepted uniform (at {user_site(2)}): {_CLAMP_WHY}")
            if name in ("__float__", "__int__", "__bool__", "__index__", "numpy", "__array__"):
                raise UnsupportedRandomness(
                    f"torch {name} on an intercepted uniform (at {user_site(2)}): its value is not a number the audit "
                    "can hand over; use u.item() (a lazy scalar that compares exactly) and compare it")
            raise UnsupportedRandomness(
                f"torch {name} on an intercepted uniform (at {user_site(2)}): the enumerator follows uniform tensors "
                "through comparisons, indexing, reshaping, affine arithmetic, .item(), and into races (log, **, "
                "argmax) only")

    def _searchsorted(name: str, args: tuple, kwargs: dict) -> Any:
        """``searchsorted(cdf, u)`` / ``bucketize(u, cdf)`` of lazy uniforms: the index each falls at, decided exactly.

        Entry ``i`` of the result counts the boundaries below ``u`` (``<= u`` with ``right=True`` or
        ``side="right"``), read in order, so the law of the index is the exact measure of the
        intervals the float boundaries define (an inverse-CDF draw over a float ``cumsum``).
        """
        if name == "searchsorted":
            seq, values = args[0], args[1] if len(args) > 1 else kwargs["input"]
        else:
            values, seq = args[0], args[1] if len(args) > 1 else kwargs["boundaries"]
        if isinstance(seq, (LazyUniformTensor, RaceTensor, LazyMask)) or not isinstance(values, LazyUniformTensor):
            raise UnsupportedRandomness(f"torch {name} with random boundaries (at {user_site(3)})")
        if kwargs.get("sorter") is not None:
            raise UnsupportedRandomness(f"torch {name}(sorter=...) on intercepted uniforms (at {user_site(3)})")
        right = bool(kwargs.get("right", False)) or kwargs.get("side") == "right"
        bounds = seq.detach().cpu().double().numpy()
        us = values._u
        out = np.zeros(us.shape, dtype=np.int64)
        for idx in np.ndindex(*us.shape):
            row = bounds if bounds.ndim == 1 else bounds[idx[:-1]]
            u, k = us[idx], 0
            for c in row:
                c = _num_or_inf(c)
                if c == float("-inf") or (c != float("inf") and (u >= c if right else u > c)):
                    k += 1
                else:
                    break
            out[idx] = k
        res = torch.from_numpy(out)
        return res.to(torch.int32) if kwargs.get("out_int32") else res

    def _dim0(args: tuple, kwargs: dict) -> bool:
        """Iterating, or ``unbind`` along dimension 0, of a tensor with at least one dimension."""
        if args[0].dim() == 0:
            return False
        return int(kwargs.get("dim", args[1] if len(args) > 1 else 0)) == 0

    def _lazy_cells(x: Any, shape: tuple) -> Any:
        """A uniform operand's entries broadcast to ``shape`` (LazyUniform objects; an object array, typed Any:
        numpy's stubs type an entry of an array as an array)."""
        return np.broadcast_to(x._u, shape)

    def _flat_floats(x: Any, shape: tuple) -> list:
        """A real tensor's entries broadcast to ``shape``, row-major, as Python floats (its dtype noted)."""
        note_dtype(x)
        vals = x.detach().cpu().double().numpy()
        if vals.shape != shape:
            vals = np.broadcast_to(vals, shape)
        return vals.ravel().tolist()

    def _shape_with(x: np.ndarray, b: Any) -> tuple:
        """The shape of ``x``'s entries combined with a real operand ``b`` (a tensor or a number)."""
        if type(b) is not torch.Tensor:
            return x.shape
        bshape = tuple(b.shape)
        return x.shape if bshape == x.shape else np.broadcast_shapes(x.shape, bshape)

    def _flat_cells(x: np.ndarray, shape: tuple) -> np.ndarray:
        """The entries of an object array broadcast to ``shape``, row-major, in one dimension."""
        return (x if x.shape == shape else np.broadcast_to(x, shape)).ravel()

    #: real operands a handler reads entry by entry as exact numbers (other tensor types keep their own handlers)
    _REAL = (torch.Tensor, float, int, bool)

    def _compare(name: str, args: tuple) -> Any:
        a, b = args[0], args[1]
        strict, flip = _COMPARE[name]
        if isinstance(b, LazyUniformTensor) and not isinstance(a, LazyUniformTensor):
            a, b = b, a                      # t < u  <=>  u > t
            strict, flip = {(True, False): (False, True), (False, False): (True, True),
                            (False, True): (True, False), (True, True): (False, False)}[(strict, flip)]
        if type(b) is LazyWorldsTensor and deferring() and _worlds_live(b):
            # a threshold that depends on pending draws (1 - p(x)/q(x) for a draft x nobody read): each entry decided
            # jointly with them, which stay undrawn (entry_decision)
            return _joint_compare(a, b, strict, flip, name)
        if type(b) in _REAL:                 # each uniform against the exact value of its real entry
            shape = _shape_with(a._u, b)
            ts = [_exact(f) for f in _flat_floats(b, shape)] if type(b) is torch.Tensor else \
                [_exact(b)] * a._u.size
            flat = _flat_cells(a._u, shape)
            out = np.empty(len(ts), dtype=object)
            for i, t in enumerate(ts):
                out[i] = _leaf(flat[i], t, strict, flip, name)
            return LazyMask(out.reshape(shape), torch.bool)
        bshape = tuple(b.shape) if isinstance(b, torch.Tensor) else ()
        shape = np.broadcast_shapes(a._u.shape, bshape)
        us = _lazy_cells(a, shape)
        if isinstance(b, LazyUniformTensor):
            vs = _lazy_cells(b, shape)
            for idx in np.ndindex(*shape):
                if us[idx]._cell is not vs[idx]._cell:
                    raise UnsupportedRandomness(f"comparing two intercepted uniforms (at {user_site(2)})")
            thresholds = vs
        else:
            if isinstance(b, (RaceTensor, LazyMask)):
                raise UnsupportedRandomness(f"comparing an intercepted uniform with a random tensor (at "
                                            f"{user_site(2)})")
            thresholds = _values(b, shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = _leaf(us[idx], thresholds[idx], strict, flip, name)
        return LazyMask(out, torch.bool)

    def _joint_compare(a: Any, b: Any, strict: bool, flip: bool, name: str) -> Any:
        """Uniforms ``a`` compared with a lazy-worlds tensor ``b``: a lazy mask whose entries, when read, fork on the
        comparison without reading the draw its threshold depends on last (see :func:`_joint_leaf`)."""
        note_dtype(b)
        bshape = tuple(b.shape)
        shape = np.broadcast_shapes(a._u.shape, bshape)
        us = _lazy_cells(a, shape)
        where = np.broadcast_to(np.arange(int(np.prod(bshape, dtype=np.int64))).reshape(bshape), shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = _joint_leaf(us[idx], b, int(where[idx]), strict, flip, name)
        return LazyMask(out, torch.bool)

    def _joint_leaf(u: Any, b: Any, index: int, strict: bool, flip: bool, name: str) -> LazyBit:
        """``u < t`` (``<=``, flipped: ``>=``, ``>``) for entry ``index`` of the lazy-worlds tensor ``b``, decided when
        read: the branch forks on the answer with its exact probability over the pending draws ``t`` depends on
        (each value's threshold against ``u``'s interval), they stay pending with their law conditioned on the
        answer (one narrowed, or several held jointly), and ``u``'s interval is narrowed to the answer once they
        are read (``_Cell.cond``)."""
        def decide() -> bool:
            cell = u._cell
            if getattr(cell, "cond", None) is not None:
                cell.cond()
            res: tuple[Any, ...]
            if type(cell.rng) is not PathRng or not hasattr(cell, "cond"):
                res = ("value", entry_decision(b, index, None, read=True)[1])
            else:
                def chance(f: float) -> Any:
                    p = u._chance(_exact(f), strict)
                    return 1 - p if flip else p
                res = entry_decision(b, index, chance)
            if res[0] == "value":
                below = u._cmp(_exact(res[1]), strict, name)
                return (not below) if flip else bool(below)
            _, answer, keep, values = res

            def narrow() -> None:
                cell.cond = None
                u._narrow(_exact(values[tuple(value_of(c) for c in keep)]), strict, answer != flip)
            cell.cond = narrow
            return answer
        return LazyBit(decide)

    def _leaf(u: Any, t: Any, strict: bool, flip: bool, name: str) -> LazyBit:
        def decide() -> bool:
            below = u._cmp(t, strict, name)      # u < t (strict) or u <= t
            return (not below) if flip else bool(below)
        return LazyBit(decide)

    def _affine(name: str, args: tuple) -> Any:
        a = args[0]
        b = args[1] if len(args) > 1 else None
        if isinstance(b, LazyUniformTensor) and not isinstance(a, LazyUniformTensor):
            a, b = b, a                      # c op u with u on the right
            if name in ("__sub__", "sub", "subtract"):
                return _apply(a, lambda u, c: c - u, b)
            if name in ("__truediv__", "div", "divide", "true_divide"):
                raise UnsupportedRandomness(f"dividing by an intercepted uniform (at {user_site(2)})")
        if isinstance(b, LazyUniformTensor):
            raise UnsupportedRandomness(f"{name} of two intercepted uniforms (at {user_site(2)})")
        if isinstance(b, (RaceTensor, LazyMask)):
            raise UnsupportedRandomness(f"{name} of an intercepted uniform and a random tensor (at {user_site(2)})")
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
        return LazyUniformTensor(out, _dt(a))

    # -- races -----------------------------------------------------------------------------------------------
    _RACE_UNARY = {"__neg__": lambda v: -v, "neg": lambda v: -v, "negative": lambda v: -v, "log": lambda v: v.log(),
                   "exp": lambda v: v.exp(), "reciprocal": lambda v: v.reciprocal()}
    _RACE_BINARY = {"__add__": lambda v, c: v + c, "add": lambda v, c: v + c, "__radd__": lambda v, c: v + c,
                    "__sub__": lambda v, c: v - c, "sub": lambda v, c: v - c, "subtract": lambda v, c: v - c,
                    "__rsub__": lambda v, c: c - v, "rsub": lambda v, c: c - v,
                    "__mul__": lambda v, c: v * c, "mul": lambda v, c: v * c, "multiply": lambda v, c: v * c,
                    "__rmul__": lambda v, c: v * c,
                    "__truediv__": lambda v, c: v / c, "div": lambda v, c: v / c, "divide": lambda v, c: v / c,
                    "true_divide": lambda v, c: v / c, "__rtruediv__": lambda v, c: c / v,
                    "__rdiv__": lambda v, c: c / v, "__pow__": lambda v, c: v ** c, "pow": lambda v, c: v ** c}
    #: binary operations whose first operand may be the real one (c op v)
    _REFLECT = {"__add__": "__radd__", "add": "__radd__", "__sub__": "__rsub__", "sub": "__rsub__",
                "subtract": "__rsub__", "__mul__": "__rmul__", "mul": "__rmul__", "multiply": "__rmul__",
                "__truediv__": "__rtruediv__", "div": "__rtruediv__", "divide": "__rtruediv__",
                "true_divide": "__rtruediv__"}

    class RaceTensor(torch.Tensor):
        """Race values (:class:`~exactspec.samplers.randomness.lazy_values.RaceValue`): argmax over the last dimension (or the
        whole tensor) is a draw from the weights ``w / sum(w)``; see :mod:`exactspec.samplers.randomness.lazy_values`."""

        _r: np.ndarray

        @staticmethod
        def __new__(cls, values: np.ndarray, dtype: Any = None) -> "RaceTensor":
            t = torch.Tensor._make_subclass(cls, torch.zeros(values.shape, dtype=dtype or torch.float32))
            t._r = values
            return t

        # mypy reads torch's Tensor.__repr__ as matched by no override, not even its own signature (hence the ignore)
        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105
            return f"RaceTensor(shape={tuple(self._r.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name, done, out = _prologue(func, args, kwargs, "RaceTensor")
            if done:
                return out
            in_place = name.endswith("_") and not name.endswith("__") and name[:-1] in (_RACE_BINARY.keys()
                                                                                         | _RACE_UNARY.keys())
            if in_place or name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__"):
                base = name[:-1] if in_place else "__" + name[3:]
                result = cls.__torch_function__(getattr(torch.Tensor, base), types, args, kwargs)
                return _in_place(args[0], RaceTensor, f"Tensor.{name}", _r=result._r)
            if name in _SHAPE and isinstance(args[0], RaceTensor):
                return RaceTensor(_reshaped(func, name, args[0]._r, args, kwargs),
                                  _dtype_of(name, args, kwargs, _dt(args[0])))
            if name in _RACE_UNARY:
                return RaceTensor(_each(_RACE_UNARY[name], args[0]._r), _dt(args[0]))
            if name in _RACE_BINARY and len(args) >= 2:
                a, b = args[0], args[1]
                if not isinstance(a, RaceTensor):
                    if name not in _REFLECT:
                        raise UnsupportedRandomness(f"torch {name} with a race tensor on the right (at "
                                                    f"{user_site(2)})")
                    a, b, name = b, a, _REFLECT[name]
                if isinstance(b, (RaceTensor, LazyUniformTensor, LazyMask)):
                    raise UnsupportedRandomness(f"torch {name} of two random tensors (at {user_site(2)}): a race "
                                                "combines each draw with numbers only")
                if type(b) in _REAL and not kwargs:
                    return _race_real(name, a, b)
                if "alpha" in kwargs:
                    b = b * kwargs["alpha"]
                shape = np.broadcast_shapes(a._r.shape, tuple(b.shape) if isinstance(b, torch.Tensor) else ())
                rs, cs = np.broadcast_to(a._r, shape), _exact_values(b, shape)
                out = np.empty(shape, dtype=object)
                op = _RACE_BINARY[name]
                for idx in np.ndindex(*shape):
                    out[idx] = op(rs[idx], cs[idx])
                return RaceTensor(out, _dt(a))
            if name in _COMPARE and len(args) == 2:
                return _race_compare(name, args)
            if name in ("argmax", "argmin"):
                race = args[0]
                dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
                keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
                return _race_arg(race._r, dim, bool(keepdim), name == "argmax")
            if name in ("max", "min") and isinstance(args[0], RaceTensor) and len(args) <= 3 \
                    and not isinstance(args[1] if len(args) > 1 else None, torch.Tensor) and "other" not in kwargs:
                # (values, indices): the indices are the race's draw; the values are the winners' race values
                race = args[0]
                dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
                keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
                idx = _race_arg(race._r, dim, keepdim, name == "max")
                if dim is None:
                    return RaceTensor(np.asarray(race._r.ravel()[int(idx)], dtype=object).reshape(()), _dt(race))
                d = int(dim) % max(race._r.ndim, 1)
                picked = np.take_along_axis(race._r, np.expand_dims(idx.numpy(), d) if not keepdim else idx.numpy(),
                                            axis=d)
                values = RaceTensor(picked if keepdim else np.squeeze(picked, axis=d), _dt(race))
                return getattr(torch.return_types, name)((values, idx))
            if name in _CLAMPS:
                raise UnsupportedRandomness(f"torch {name} on a race tensor (at {user_site(2)}): {_CLAMP_WHY}")
            raise UnsupportedRandomness(
                f"torch {name} on a race tensor (at {user_site(2)}): race values (log, ** of uniforms, "
                "exponential_() draws, Gumbel noise) are followed through monotone arithmetic with numbers into "
                "argmax / argmin and comparisons with numbers only")

    LazyExponentialTensor = RaceTensor

    def _race_real(name: str, a: "RaceTensor", b: Any) -> "RaceTensor":
        """``a op b`` for race values ``a`` and a real tensor or number ``b``, entry by entry (row-major); what a
        fresh draw becomes is remembered by the operation and the float (:func:`~.lazy_values.fresh_op`)."""
        shape = _shape_with(a._r, b)
        floats = _flat_floats(b, shape) if type(b) is torch.Tensor else [float(b)] * a._r.size
        rs = _flat_cells(a._r, shape)
        op = _RACE_BINARY[name]
        out = np.empty(len(floats), dtype=object)
        for i, f in enumerate(floats):
            out[i] = fresh_op(rs[i], name, op, f, _num_or_inf(f))
        return RaceTensor(out.reshape(shape), _dt(a))

    def _race_compare(name: str, args: tuple) -> "LazyMask":
        """Race values compared with numbers: each entry decided on its uniform when read (see lazy_values)."""
        a, b = args[0], args[1]
        strict, flip = _COMPARE[name]
        if not isinstance(a, RaceTensor):
            a, b = b, a
            strict, flip = {(True, False): (False, True), (False, False): (True, True),
                            (False, True): (True, False), (True, True): (False, False)}[(strict, flip)]
        if isinstance(b, (RaceTensor, LazyUniformTensor, LazyMask)):
            raise UnsupportedRandomness(f"comparing two random tensors (at {user_site(3)}): a race value is "
                                        "compared with numbers only")
        shape = np.broadcast_shapes(a._r.shape, tuple(b.shape) if isinstance(b, torch.Tensor) else ())
        rs, ts = np.broadcast_to(a._r, shape), _exact_values(b, shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            v, t = rs[idx], ts[idx]
            if strict:
                def below(v: Any = v, t: Any = t) -> Any:
                    return v < t
            else:
                def below(v: Any = v, t: Any = t) -> Any:
                    return v <= t

            def above(f: Callable[[], Any] = below) -> bool:
                return not f()
            out[idx] = LazyBit(above if flip else below)
        return LazyMask(out, torch.bool)

    def _race_arg(values: np.ndarray, dim: Any, keepdim: bool, smaller_wins: bool) -> Any:
        """argmax / argmin of races along ``dim`` (all entries when None): each race checked now, drawn when read.

        The result is a :class:`~exactspec.samplers.torch_draws.lazy_draws.LazyCategoricalTensor` whose entry ``i`` is
        the pending draw of row ``i``'s winner (``rng.categorical`` of its exact law): a sampler that races every
        position at once and reads one forks on that one only.
        """
        cells: np.ndarray
        if dim is None:
            cells = np.empty((), dtype=object)
            cells[()] = (PendingDraw.of_law(*race_outcome(list(values.ravel()), smaller_wins, True)), 0)
            res = LazyCategoricalTensor(cells)
            return res.reshape((1,) * values.ndim) if keepdim else res
        nd = values.ndim
        d = int(dim) % max(nd, 1)
        moved = values if d == nd - 1 else np.moveaxis(values, d, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        cells = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):
            cells[i] = (PendingDraw.of_law(*race_outcome(list(row), smaller_wins, True)), 0)
        res = LazyCategoricalTensor(cells.reshape(moved.shape[:-1]))
        return res.unsqueeze(d) if keepdim else res

    # -- lazy comparison results -------------------------------------------------------------------------------
    _NOT = {"__invert__", "logical_not", "bitwise_not"}
    _AND = {"__and__", "__rand__", "logical_and", "bitwise_and"}
    _OR = {"__or__", "__ror__", "logical_or", "bitwise_or"}
    _AND_OR = _AND | _OR
    _CASTS = {"int": torch.int32, "long": torch.int64, "float": torch.float32, "double": torch.float64,
              "bool": torch.bool, "short": torch.int16, "byte": torch.uint8, "half": torch.float16}
    _OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

    class LazyMask(torch.Tensor):
        """Comparison results (0/1 entries, or counts of them after ``cumsum``) read lazily, entry by entry.

        Reading an entry (``item()``, ``bool()``, ``argmax``, ``all``/``any``, ``sum``, ...) forks the
        enumeration for that entry only, in the order the code reads them; ``~``, ``&``, ``|``,
        ``cumprod``, ``cumsum``, comparisons with a number, dtype casts, indexing and reshaping stay
        lazy. Any other operation reads every entry (row-major) and continues with a real tensor.

        >>> from fractions import Fraction as F
        >>> from exactspec.enumerate.rng import enumerate_program
        >>> from exactspec.fields import get_field
        >>> def first_rejection(rng):                   # vLLM-style: reads entries up to the first False
        ...     with bind(rng):
        ...         return int((~(torch.rand(3) < 0.5)).int().argmax(-1))
        >>> with intercept_torch():
        ...     law = enumerate_program(first_rejection, get_field(backend="python"), exact_floats=True)
        >>> law == {0: F(5, 8), 1: F(1, 4), 2: F(1, 8)}
        True
        """

        _c: np.ndarray
        _count: bool
        _fam: "_Family"

        @staticmethod
        def __new__(cls, cells: np.ndarray, dtype: Any = None, count: bool = False, *, data: Any = None,
                    family: "_Family | None" = None) -> "LazyMask":
            """``data``/``family``: a view of another lazy mask's storage, and that mask's family (see :class:`_Family`)."""
            base = torch.zeros(cells.shape, dtype=dtype or torch.bool) if data is None else data
            t = torch.Tensor._make_subclass(cls, base)
            t._c = cells
            t._count = count
            t._fam = family if family is not None else _Family(t)
            return t

        # mypy reads torch's Tensor.__repr__ as matched by no override, not even its own signature (hence the ignore)
        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105
            return f"LazyMask(shape={tuple(self._c.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name, done, out = _prologue(func, args, kwargs, "LazyMask")
            if done:
                return out
            if _release_settled(args, kwargs):   # a view of a mask that was written: plain torch from now on
                return _plain_op(func, args, kwargs)
            a: Any = args[0] if args else None
            lazy_a = isinstance(a, LazyMask)
            if lazy_a and name in ("item", "__bool__", "__int__", "__float__", "__index__"):
                if a._c.size != 1:
                    if name == "__bool__":
                        raise RuntimeError(f"Boolean value of Tensor with {a._c.size} values is ambiguous")
                    raise RuntimeError(f"a Tensor with {a._c.size} elements cannot be converted to Scalar")
                v = a._c.reshape(-1)[0].value()
                if name == "__bool__":
                    return bool(v)
                if name == "__float__" or (name == "item" and _dt(a).is_floating_point):
                    return float(v)
                return bool(v) if (name == "item" and _dt(a) == torch.bool) else int(v)
            if lazy_a and name in ("__iter__", "unbind") and _dim0(args, kwargs):
                rows = [LazyMask(np.asarray(r, dtype=object).reshape(np.shape(r)), _dt(a), a._count) for r in a._c]
                return iter(rows) if name == "__iter__" else tuple(rows)
            if lazy_a and name in _SHAPE and name not in ("float", "double", "half", "bfloat16", "to"):
                return _view_mask(func, name, a, args, kwargs)
            if lazy_a and (name in _CASTS or (name == "to" and _only_dtype(args, kwargs))):
                dtype = _CASTS[name] if name in _CASTS else _dtype_of(name, args, kwargs, _dt(a))
                if dtype == torch.bool and a._count:
                    return LazyMask(_each(lambda c: LazyBit(lambda: bool(c.value())), a._c))
                return LazyMask(a._c.copy(), dtype, a._count)
            bits = lazy_a and not a._count and (_dt(a) == torch.bool or name not in _NOT)
            if bits and name in _NOT and _dt(a) == torch.bool:
                return LazyMask(_each(lambda c: ~c, a._c))
            if name in _AND_OR and len(args) == 2 and _bool_operands(args):
                return _combine(args, LazyBit.all_of if name in _AND else LazyBit.any_of)
            key = name.strip("_")
            if lazy_a and key in _OPS and len(args) == 2 and _scalar(args[1]):
                return _cmp_mask(a, key, _scalar_value(args[1]))
            if lazy_a and not a._count and name in ("cumprod", "cumsum") and _last_dim(a, args, kwargs):
                return _prefix(a, name == "cumsum")
            if lazy_a and not a._count and name in ("argmax", "all", "any") and not _extra(args, kwargs):
                return _scan(a, name, args, kwargs)
            return _read_all(func, args, kwargs)

    def _only_dtype(args: tuple, kwargs: dict) -> bool:
        rest = [x for x in args[1:]] + [v for k, v in kwargs.items() if k != "dtype"]
        return all(isinstance(x, torch.dtype) or (isinstance(x, (str, torch.device)) and str(x) == "cpu")
                   for x in rest)

    def _scalar(x: Any) -> bool:
        if isinstance(x, (LazyMask, LazyUniformTensor, RaceTensor)):
            return False
        if isinstance(x, torch.Tensor):
            return x.numel() == 1
        return isinstance(x, (int, float, bool, np.number))

    def _scalar_value(x: Any) -> Any:
        return x.item() if isinstance(x, torch.Tensor) else x

    def _bool_operands(args: tuple) -> bool:
        for x in args:
            if isinstance(x, LazyMask):
                if _dt(x) != torch.bool or x._count:
                    return False
            elif isinstance(x, torch.Tensor):
                if _dt(x) != torch.bool or isinstance(x, (LazyUniformTensor, RaceTensor)):
                    return False
            elif not isinstance(x, bool):
                return False
        return True

    def _as_cells(x: Any, shape: tuple) -> np.ndarray:
        if isinstance(x, LazyMask):
            return np.broadcast_to(x._c, shape)
        vals = np.broadcast_to(np.asarray(x.numpy() if isinstance(x, torch.Tensor) else x, dtype=bool), shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = LazyBit(v=bool(vals[idx]))
        return out

    def _combine(args: tuple, how: Any) -> "LazyMask":
        shape = np.broadcast_shapes(*(tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in args))
        xs, ys = _as_cells(args[0], shape), _as_cells(args[1], shape)
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = how((xs[idx], ys[idx]))
        return LazyMask(out)

    def _cmp_mask(a: "LazyMask", key: str, t: Any) -> "LazyMask":
        op = getattr(operator, key)
        cells = a._c.ravel()
        out = np.empty(len(cells), dtype=object)
        if a._count:
            for i, c in enumerate(cells):
                out[i] = LazyBit.count_compare(c._bits, op, t)
        else:
            for i, c in enumerate(cells):
                def read(c: Any = c) -> bool:
                    return bool(op(int(c.value()), t))
                out[i] = LazyBit(read)
        return LazyMask(out.reshape(a._c.shape))

    class _Count(LazyBit):
        """A count of the True bits among ``bits`` (``cumsum`` of a mask), read lazily."""

        __slots__ = ("_bits",)

        def __init__(self, bits: list) -> None:
            super().__init__(lambda: sum(int(b.value()) for b in bits))
            self._bits = bits

    def _last_dim(a: "LazyMask", args: tuple, kwargs: dict) -> bool:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        return dim is not None and a._c.ndim > 0 and int(dim) % a._c.ndim == a._c.ndim - 1 and "dtype" not in kwargs

    def _prefix(a: "LazyMask", count: bool) -> "LazyMask":
        shape = a._c.shape
        rows = a._c.reshape(math.prod(shape[:-1]), shape[-1])
        out = np.empty(rows.shape, dtype=object)
        for r, cells in enumerate(rows):
            row = list(cells)
            for j in range(len(row)):
                out[r, j] = _Count(row[:j + 1]) if count else LazyBit.all_of(row[:j + 1])
        return LazyMask(out.reshape(shape), torch.int64, count)

    def _extra(args: tuple, kwargs: dict) -> bool:
        return bool(set(kwargs) - {"dim", "keepdim"}) or len(args) > 3

    def _scan(a: "LazyMask", name: str, args: tuple, kwargs: dict) -> Any:
        """argmax / all / any of 0-1 entries, reading each row in order only until the answer is known."""
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
        cells = a._c
        if dim is None:
            rows, lead = cells.reshape(1, -1), ()
        else:
            d = int(dim) % max(cells.ndim, 1)
            moved = np.moveaxis(cells, d, -1)
            rows, lead = moved.reshape(-1, moved.shape[-1] if moved.ndim else 1), moved.shape[:-1]
        out = []
        for row in rows:
            if name == "argmax":
                out.append(next((i for i, c in enumerate(row) if c.value()), 0))
            elif name == "all":
                out.append(all(c.value() for c in row))
            else:
                out.append(any(c.value() for c in row))
        dtype = torch.int64 if name == "argmax" else torch.bool
        res = torch.tensor(out, dtype=dtype).reshape(lead)
        if keepdim:
            res = res.unsqueeze(int(dim) % max(cells.ndim, 1)) if dim is not None else res.reshape((1,) * cells.ndim)
        return res

    def _materialise(m: "LazyMask") -> Any:
        """A real tensor with the mask's values (every entry read, row-major)."""
        kind = np.int64 if m._count or _dt(m) != torch.bool else np.bool_
        vals: np.ndarray = np.array([c.value() for c in m._c.ravel()], dtype=object).astype(kind).reshape(m._c.shape)
        with torch._C.DisableTorchFunctionSubclass():
            return torch.from_numpy(vals).to(_dt(m))

    class _Family:
        """Lazy masks that share one storage, as plain torch's views do (``expand``, ``view``, slicing, ``detach``).

        ``root`` is the mask the storage was made for (its cells cover it, row-major). The first
        operation that reads a member whole (an in-place write, any operation the lazy masks do not
        follow) writes every entry of the root into the storage and ``settled`` becomes True: from
        then on every member is an ordinary tensor on that storage, so a write through one is seen
        through the others, as in plain torch (reading the cells instead would miss the write).
        """

        __slots__ = ("root", "settled")

        def __init__(self, root: "LazyMask") -> None:
            self.root, self.settled = root, False

    def _view_mask(func: Any, name: str, a: "LazyMask", args: tuple, kwargs: dict) -> "LazyMask":
        """A shape operation on a lazy mask: the cells it picks, on a view of ``a``'s storage when torch makes one."""
        if name == "__getitem__" and len(args) == 2 and not kwargs and _int_index(args[1]):
            # ints (the common ``mask[b]``): the same entries in numpy, and a view of the same storage in torch
            idx = args[1] if isinstance(args[1], tuple) else (args[1],)
            cells = a._c[idx + (Ellipsis,)]     # numpy first: its IndexError, as the general path raises
            with torch._C.DisableTorchFunctionSubclass():
                data = func(*args)
            return LazyMask(cells, _dt(a), a._count, data=data, family=a._fam)
        cells = _reshaped(func, name, a._c, args, kwargs)
        if name == "__getitem__" and not _basic_index(args[1]):
            return LazyMask(cells, _dt(a), a._count)          # advanced indexing copies, in plain torch too
        with torch._C.DisableTorchFunctionSubclass():
            data = func(*args, **kwargs)
            shared = isinstance(data, torch.Tensor) and data.untyped_storage().data_ptr() == \
                a.untyped_storage().data_ptr() and tuple(data.shape) == cells.shape
        if not shared:                                          # clone, a reshape that copies: a storage of its own
            return LazyMask(cells, _dt(a), a._count)
        return LazyMask(cells, _dt(a), a._count, data=data, family=a._fam)

    def _int_index(idx: Any) -> bool:
        """An index made of Python ints only (one, or a tuple of them)."""
        if type(idx) is int:
            return True
        return type(idx) is tuple and all(type(i) is int for i in idx)

    def _basic_index(idx: Any) -> bool:
        """Whether an index is made of ints, slices, None and Ellipsis only (plain torch then returns a view)."""
        items = idx if isinstance(idx, tuple) else (idx,)
        return all(i is None or i is Ellipsis or isinstance(i, slice) or
                   (isinstance(i, int) and not isinstance(i, bool)) for i in items)

    def _settle(m: "LazyMask") -> Any:
        """Read every entry of ``m``'s family into their shared storage and make ``m`` an ordinary tensor on it."""
        fam = m._fam
        if not fam.settled:
            root = fam.root
            vals = _materialise(root)
            with torch._C.DisableTorchFunctionSubclass():
                root.copy_(vals)
            fam.settled = True
        m.__class__ = torch.Tensor  # type: ignore[assignment]  # deliberate: settled, it is a plain tensor
        return m

    def _release_settled(args: Any, kwargs: dict) -> bool:
        """Make every lazy mask among the operands whose family is settled an ordinary tensor (it stays one).

        True when one was, and no lazy mask is left: the operation then runs as torch runs it (any
        other lazy operand takes it over through its own handler).
        """
        state = [False, False]                  # released one, left one
        _walk_settled(args, state)
        if kwargs:
            _walk_settled(kwargs.values(), state)
        return state[0] and not state[1]

    def _walk_settled(items: Any, state: list) -> None:
        """:func:`_release_settled` over ``items`` and the lists and tuples among them, in order."""
        for x in items:
            if isinstance(x, LazyMask):
                if x._fam.settled:
                    x.__class__ = torch.Tensor  # type: ignore[assignment]  # deliberate: settled, a plain tensor
                    state[0] = True
                else:
                    state[1] = True
            elif isinstance(x, (list, tuple)):
                _walk_settled(x, state)

    def _plain_op(func: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``func`` again through torch's dispatch, its operands free of settled lazy masks."""
        return func(*args, **kwargs)

    def _read_all(func: Any, args: tuple, kwargs: dict) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], LazyMask):    # m.tolist(), m.sum(), ...
            return func(_settle(args[0]))

        def real(x: Any) -> Any:
            if isinstance(x, LazyMask):
                return _settle(x)
            if isinstance(x, (list, tuple)):
                return type(x)(real(y) for y in x)
            return x
        return func(*real(args), **{k: real(v) for k, v in kwargs.items()})
else:  # pragma: no cover
    LazyUniformTensor = LazyExponentialTensor = RaceTensor = LazyMask = None  # type: ignore[assignment,misc]


def torch_lattice(dtype: Any) -> Lattice:
    """The lattice of torch's CPU uniforms in ``dtype`` (the ``native`` rng model), measured on torch 2.13.

    float32: ``k * 2**-24``, 0 included; float64: ``k * 2**-53``; float16 and bfloat16: a float32
    draw rounded to the dtype, 1.0 mapped to 0 (:class:`~exactspec.enumerate.rng.RoundedLattice`).

    >>> torch_lattice(torch.float32).name, torch_lattice(torch.float64).name, torch_lattice(torch.bfloat16).name
    ('torch-float32', 'float64', 'torch-bfloat16')
    """
    if dtype is None:
        dtype = torch.get_default_dtype()
    return _TORCH_LATTICES.get(dtype, LATTICES["torch-float32"])


def _torch_source(dtype: Any, lat: Lattice) -> str:
    return "torch " + str(dtype if dtype is not None else torch.get_default_dtype()).replace("torch.", "")


def _uniforms(shape: tuple, dtype: Any = None) -> np.ndarray:
    rng = _rng()
    lat = torch_lattice(dtype)
    source = _torch_source(dtype, lat)
    arr = np.empty(math.prod(shape), dtype=object)
    for i in range(arr.size):
        arr[i] = lazy(native_uniform(rng, lat, source))
    return arr.reshape(shape)


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
    with torch._C.DisableTorchFunction():   # the real fill: no torch function mode of the audit's (the precision
        _REAL_UNIFORM_(torch.empty(1, device=gen.device), generator=gen)   # watch) may route it to the patched one
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


def _planned(kind: str, tensor: Any, kwargs: dict) -> Any:
    """A fill under a bound :class:`~.planned.DrawPlan`: the plan's concrete values (None: no plan bound)."""
    plan = current_plan()
    if plan is None:
        return None
    _fresh(kwargs)
    return plan.fill(kind, tensor, kwargs.get("generator"))


def _rand(*args: Any, **kwargs: Any) -> Any:
    if current_plan() is not None:
        out = kwargs.get("out")
        shape = _size(args, kwargs)
        if out is None:
            out = torch.empty(shape, dtype=kwargs.get("dtype"), device=kwargs.get("device"))
        return _planned("uniform", out, kwargs)
    _fresh(kwargs)
    out = kwargs.get("out")
    if out is not None:   # torch.rand(..., out=t): t itself holds the draws
        return _in_place(out, LazyUniformTensor, "torch.rand(out=...)", _u=_uniforms(_size(args, kwargs), out.dtype))
    return LazyUniformTensor(_uniforms(_size(args, kwargs), kwargs.get("dtype")), kwargs.get("dtype"))


def _rand_like(t: Any, **kwargs: Any) -> Any:
    if current_plan() is not None:
        return _planned("uniform", torch.empty(tuple(t.shape), dtype=kwargs.get("dtype") or t.dtype), kwargs)
    _fresh(kwargs)
    dtype = kwargs.get("dtype") or t.dtype
    return LazyUniformTensor(_uniforms(tuple(t.shape), dtype), dtype)


def _uniform_(self: Any, a: float = 0.0, b: float = 1.0, **kwargs: Any) -> Any:
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    if current_plan() is not None and (a, b) == (0.0, 1.0):
        return _planned("uniform", self, kwargs)
    _fresh(kwargs)
    uniforms = _uniforms(tuple(self.shape), self.dtype)
    if (a, b) != (0.0, 1.0):   # a + (b - a) u, each uniform kept affine and exact
        scale, shift = _exact(b) - _exact(a), _exact(a)
        uniforms = _each(lambda u: u * scale + shift, uniforms)
    return _in_place(self, LazyUniformTensor, "Tensor.uniform_()", _u=uniforms)


def _exponential_(self: Any, lambd: float = 1.0, **kwargs: Any) -> Any:
    """``Tensor.exponential_(lambd)``: the tensor itself becomes independent Exp(lambd) race values."""
    rate = _exact(lambd)
    if not rate > 0:
        raise UnsupportedRandomness(f"exponential_({lambd}) (at {user_site(2)}): the rate must be positive")
    if current_plan() is not None and rate == 1:
        return _planned("exponential", self, kwargs)
    rng = _rng()
    _fresh(kwargs)
    shape = tuple(self.shape)
    values = np.empty(math.prod(shape), dtype=object)
    for i in range(values.size):
        values[i] = exponential(rng) / rate if rate != 1 else exponential(rng)
    return _in_place(self, RaceTensor, "Tensor.exponential_()", _r=values.reshape(shape))


def _coins(probs: np.ndarray, lattice: Lattice) -> np.ndarray:
    """``u < p`` for each entry, ``u`` on ``lattice`` under the native model (torch's CPU bernoulli: a float32
    uniform for float32 / float16 / bfloat16 probabilities, a float64 one for float64)."""
    rng = _rng()
    out = np.zeros(probs.shape)
    for idx in np.ndindex(*probs.shape):
        out[idx] = 1.0 if native_uniform(rng, lattice, "torch bernoulli") < _exact(probs[idx]) else 0.0
    return out


def _coin_lattice(p: Any) -> Lattice:
    return LATTICES["float64"] if isinstance(p, torch.Tensor) and p.dtype == torch.float64 else \
        LATTICES["torch-float32"]


def _bernoulli(p: Any, *args: Any, **kwargs: Any) -> Any:
    _fresh(kwargs)
    note_dtype(p)
    return torch.from_numpy(_coins(p.detach().cpu().double().numpy(), _coin_lattice(p))).to(p.dtype)


def _bernoulli_(self: Any, p: Any = 0.5, **kwargs: Any) -> Any:
    _fresh(kwargs)
    note_dtype(p)
    probs = p.detach().cpu().double().numpy() if isinstance(p, torch.Tensor) else np.array(float(p))
    coins = torch.from_numpy(_coins(np.broadcast_to(probs, tuple(self.shape)), _coin_lattice(p))).to(self.dtype)
    with torch.no_grad():
        self.copy_(coins)
    return self


def _multinomial(probs: Any, num_samples: int, replacement: bool = False, **kwargs: Any) -> Any:
    """``torch.multinomial``: pending draws from the exact law of each row, drawn when read.

    The weights are checked now (torch's errors for a non-finite or negative entry, a zero row,
    too few categories without replacement); the draws are a
    :class:`~exactspec.samplers.torch_draws.lazy_draws.LazyCategoricalTensor`, so a draw whose value is never
    read never forks the enumeration.
    """
    _fresh(kwargs)
    num_samples = int(num_samples)
    note_dtype(probs)
    if type(probs) is LazyWorldsTensor:
        # weights computed from pending draws (a stand-in fed them): a draw whose law is its row's in the loop's world
        deferred = multinomial_of_worlds(_rng(), probs, num_samples, bool(replacement))
        if deferred is not None:
            return deferred
    w = probs.detach().cpu().to(torch.float64).numpy()    # exact for every float dtype (bfloat16 has no numpy)
    if w.ndim not in (1, 2):
        raise deliberate(RuntimeError(f"prob_dist must be 1 or 2 dim, got {w.ndim}"))
    rows, positive = exact_rows(w)
    if not replacement and num_samples > positive:
        raise deliberate(RuntimeError("multinomial: not enough categories to sample without replacement"))
    shape = w.shape[:-1] + (num_samples,) if w.ndim > 1 else (num_samples,)
    return lazy_multinomial(_rng(), rows, num_samples, bool(replacement), shape)


def _int_tensor(low: int, high: int, shape: tuple, dtype: Any, what: str) -> Any:
    if high <= low:
        raise deliberate(RuntimeError(f"{what}: expects 'from' to be less than 'to', but got from={low} >= to={high}"))
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
    """What :func:`~exactspec.samplers.randomness.interception.intercepting` patches in torch (when torch is imported)."""
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

    The same thread-safe layer as every sampler audit (:func:`~exactspec.samplers.randomness.interception.intercepting`):
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
