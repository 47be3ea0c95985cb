"""Lazy categorical draws: ``torch.multinomial`` inside an audit forks the enumeration only when its value is read.

It is kept as one module: the pending draw and the tensor subclass that holds pending draws are one type
seen from Python and from torch; the subclass's dispatch reshapes, joins and forces the draws' cells.

Generation loops draw more than they use: litgpt's ``sample`` draws a token at every target
position and keeps only the probabilities, transformers draws and may discard, a prefill draws
a token nobody reads. Drawing eagerly would fork the enumeration on every such draw and
multiply the branches by ``vocab`` for nothing. Inside an audit, ``torch.multinomial`` (and
``Tensor.multinomial``) therefore returns a :class:`LazyCategoricalTensor`: a real ``int64``
tensor of the right shape whose entries are *pending draws*, each with its exact law (the
weights normalised by their exact sum, as an ideal sampler would draw).

A pending draw is drawn (the enumeration forks) the first time the tensor's values are read:
``item()``, ``int()``, ``bool()``, ``tolist()``, ``numpy()``, indexing another tensor or a list
with it, comparisons, arithmetic, ``torch.cat``, printing, any torch function other than the
ones below. Reading only the shape (``shape``, ``size()``, ``dim()``, ``len()``, ``dtype``,
``device``) never draws, and reshaping, indexing with real indices, ``unsqueeze``/``squeeze``,
``view``/``reshape``/``flatten``, ``clone``/``detach``/``contiguous``, ``to``/``long``/``cpu``
keep the draws pending (the result shares them: reading either draws each shared entry once).
Entries are drawn in the order of the reads, element order within one read, so replaying a
branch forks in the same order (the enumeration's replay stays deterministic). Draws without
replacement of several samples from one row are drawn together, in sample order, on the first
read of any of them.

The argmax of a batch of exponential or Gumbel races (:mod:`exactspec.samplers.torch_draws.torch_rng`) is such a
tensor too, one pending draw per row from its race's law. Operations that pick entries by position
keep the picked entries pending when their other operands are ordinary integer tensors or numbers:
``cat``/``stack``, ``gather``/``index_select``/``take_along_dim``/``take`` with real indices,
``torch.where`` with a real condition, ``roll``, ``flip``, ``repeat``, ``masked_select``; their
indices and conditions are read.

Writing pending entries into an int64 tensor that is alone on its storage (no view of it alive, nor
it a view), with basic indices (``out[b, n] = tok``), keeps them pending: that tensor becomes a
pending one whose entries are the written cells and its other entries' known values, drawn when it
is read. A sampler that only copies a draw into its output thus returns it undrawn, and
:func:`tokens_deferring_last` hands it to the engine as a
:class:`~exactspec.enumerate.rng.DeferredToken` that one run stands for. Into any other tensor, a
write reads the entries written.

Once read, the tensor holds its values in its own storage, and every later operation (in-place
ones included) is an ordinary torch operation on those values. An operation that mixes it with
another lazy tensor type (lazy uniforms, masks, races of :mod:`exactspec.samplers.torch_draws.torch_rng`)
reads it first and leaves the operation to that type.

>>> import torch
>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> from exactspec.samplers.randomness.interception import bind, intercepting
>>> from exactspec.samplers.torch_draws import torch_rng  # noqa: F401  (patches torch in audits)
>>> def program(rng):
...     with bind(rng):
...         unread = torch.multinomial(torch.tensor([0.5, 0.5]), 1)     # never read: no fork
...         read = torch.multinomial(torch.tensor([0.25, 0.75]), 1)
...         return int(read)
>>> with intercepting():
...     law = enumerate_program(program, get_field(backend="python"), exact_floats=True)
>>> law == {0: F(1, 4), 1: F(3, 4)}
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from ..randomness import joint_draws as _joint
from ...enumerate.rng import PathRng
from ..randomness.interception import deliberate

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without the torch extra
    torch = None  # type: ignore[assignment]  # optional dependency: None (checked) where torch is not installed

__all__ = ["LazyCategoricalTensor", "PendingDraw", "lazy_multinomial", "exact_row", "exact_rows", "force",
           "as_array", "tokens_deferring_last", "unread_entries"]


class PendingDraw:
    """``count`` draws from one row of exact weights, made on the first :meth:`values` call.

    ``law`` is the row's first-draw law (``weights`` normalised by their exact sum). With
    ``replacement=False`` each draw removes the token drawn, as ``torch.multinomial`` does.

    >>> from exactspec.enumerate.rng import PathRng
    >>> from exactspec.fields import get_field
    >>> rng = PathRng((), 1, get_field(backend="python"), [], {})
    >>> d = PendingDraw(rng, *exact_row([0.0, 2.0]), 1, True)
    >>> d.drawn, d.values(), d.drawn
    (False, [1], True)
    """

    __slots__ = ("rng", "weights", "law", "count", "replacement", "_values", "_ready", "domain", "joint", "given")

    def __init__(self, rng: Any, weights: tuple, law: tuple, count: int, replacement: bool) -> None:
        self.rng, self.weights, self.law, self.count, self.replacement = rng, weights, law, count, replacement
        self._values: list[int] | None = None
        self._ready = False
        #: the values a draw whose law is computed on the first read can take (None: not known before it is read)
        self.domain: list[int] | None = None
        #: the :class:`~exactspec.samplers.randomness.joint_draws.Joint` holding this draw with others (None: none);
        #: while set, its law is the joint's, not ``law``
        self.joint: Any = None
        #: for a law computed on the first read from other draws' values: ``(their cells, values -> exact row)``
        self.given: tuple | None = None

    @classmethod
    def of_law(cls, rng: Any, law: Any) -> "PendingDraw":
        """One draw of ``rng.categorical(law)``, ``law`` as the rng takes it (e.g. a race's winner law), or an ``int``:
        a value known already (a certain winner, an entry of an ordinary tensor mixed into a lazy one), or a function
        returning either, called on the first read.

        >>> PendingDraw.of_law(None, 2).values()
        [2]
        """
        d = cls(rng, (), law, 1, True)
        if isinstance(law, int):
            d._values = [law]
        d._ready = True
        return d

    @property
    def drawn(self) -> bool:
        """Whether the draws were made (their values read)."""
        return self._values is not None

    def law_of_one(self) -> Any:
        """The law :meth:`values` draws a one-token draw from, in ``rng``'s field; None where it is not known without
        running anything (several tokens, or a law computed on the first read).

        >>> from fractions import Fraction as F
        >>> PendingDraw(None, (1.0, 3.0), (F(1, 4), F(3, 4)), 1, True).law_of_one()
        (Fraction(1, 4), Fraction(3, 4))
        """
        if self.count != 1:
            return None
        if self.joint is not None:
            return self.joint.marginal(self)
        if self._ready:
            return self.law if type(self.law) is tuple else None
        field = getattr(self.rng, "_field", None)
        if field is None or getattr(field, "Q", None) is Fraction:
            return self.law
        return tuple(field.convert(x) for x in self.law)

    def values(self) -> list[int]:
        """The drawn tokens (drawing them now, forking the enumeration, if not yet drawn)."""
        if self._values is None and self.joint is not None:
            self.joint.read(self)       # drawn from its marginal in its joint, which keeps the assignments with it
        if self._values is None and self._ready:
            if callable(self.law):
                self.law = self.law()
            self._values = [self.law if isinstance(self.law, int) else self.rng.categorical(self.law)]
        if self._values is None:
            rng, out = self.rng, []
            field = rng._field
            law = self.law if getattr(field, "Q", None) is Fraction else tuple(field.convert(x) for x in self.law)
            weights = list(self.weights)
            for s in range(self.count):
                if s:
                    total = sum(weights)
                    law = tuple(field.convert(x / total) for x in weights)
                k = rng.categorical(law)
                out.append(k)
                weights[k] = Fraction(0)
            self._values = out
        return self._values


#: exact weights and first-draw law per float row (its bytes): loops replayed once per branch ask again and again
_ROWS: dict[bytes, tuple[tuple, tuple]] = {}


#: per float weight matrix (shape and bytes): its checked rows (:func:`exact_row`) and fewest positive weights of a row
_MATRICES: dict[tuple, tuple[list, int]] = {}


def exact_rows(w: np.ndarray) -> tuple[list[tuple[tuple, tuple]], int]:
    """The rows of a float64 weight array (1-D or 2-D) as :func:`exact_row` pairs, and a row's fewest positive entries.

    Raises torch's errors for weights ``torch.multinomial`` refuses (non-finite, negative, a row
    summing to 0). Memoised on the array's bytes: a loop replayed once per branch asks again and again.

    >>> rows, positive = exact_rows(np.array([[1.0, 0.0], [1.0, 1.0]]))
    >>> rows[1][1], positive
    ((Fraction(1, 2), Fraction(1, 2)), 1)
    """
    key = (w.shape, w.tobytes())
    hit = _MATRICES.get(key)
    if hit is None:
        rows = w.reshape(-1, w.shape[-1])
        if not np.isfinite(rows).all():
            raise deliberate(RuntimeError("probability tensor contains either `inf`, `nan` or element < 0"))
        if (rows < 0).any() or (rows.sum(axis=-1) <= 0).any():
            raise deliberate(RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)"))
        hit = ([exact_row(row) for row in rows], int((rows > 0).sum(axis=-1).min()))
        if len(_MATRICES) > 1 << 16:
            _MATRICES.clear()
        _MATRICES[key] = hit
    return hit


def exact_row(row: Sequence[float] | np.ndarray) -> tuple[tuple, tuple]:
    """(exact weights, their law) of a row of float weights, each float taken as the rational it is; memoised.

    The caller checks the row first (finite, no negative entry, positive sum).

    >>> exact_row([1.0, 3.0])[1]
    (Fraction(1, 4), Fraction(3, 4))
    """
    arr = np.asarray(row, dtype=np.float64)
    key = arr.tobytes()
    hit = _ROWS.get(key)
    if hit is None:
        weights = tuple(Fraction(float(x)) for x in arr)
        total = sum(weights)
        hit = (weights, tuple(x / total for x in weights))
        if len(_ROWS) > 1 << 16:
            _ROWS.clear()
        _ROWS[key] = hit
    return hit


if torch is not None:
    #: torch functions that only read a tensor's metadata: never draw
    _QUERIES = frozenset({"__len__", "size", "dim", "numel", "ndimension", "nelement", "is_floating_point",
                          "is_complex", "element_size", "get_device", "is_contiguous", "stride", "storage_offset",
                          "is_inference", "__hash__"})
    #: attributes read through ``__get__`` that are metadata
    _ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "is_meta", "layout", "requires_grad",
                        "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "names", "grad_fn", "is_leaf",
                        "_base", "grad", "output_nr", "_version", "itemsize", "nbytes", "is_mps", "is_xpu"})
    #: torch functions that move or reshape entries without reading them: the result keeps them pending
    _STRUCTURAL = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "clone", "contiguous", "detach",
                             "to", "long", "cpu", "__getitem__", "expand", "expand_as", "view_as", "reshape_as",
                             "permute", "transpose", "t", "select", "narrow", "unflatten", "movedim", "squeeze_",
                             "unsqueeze_", "type_as"})

    #: structural functions whose result lists the entries in the same (row-major) order
    _IN_ORDER = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "unflatten", "view_as", "reshape_as",
                           "to", "long", "cpu", "type_as", "clone", "contiguous", "detach"})

    #: torch functions that pick entries of their value operands by position (the indices, conditions and shifts
    #: they take are read as ordinary values): the picked entries stay pending
    _PICKS = frozenset({"gather", "index_select", "take_along_dim", "take", "roll", "flip", "fliplr", "flipud",
                        "repeat", "tile", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "where",
                        "masked_select", "broadcast_to"})
    _SEQUENCES = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack"})

    class LazyCategoricalTensor(torch.Tensor):
        """A tensor of pending categorical draws, drawn when read (see the module docstring)."""

        _cells: np.ndarray      # per entry, (PendingDraw, sample index)
        _read: bool             # whether the values are in the storage
        _fam: "_Family"         # the pending tensors on this storage (views of one another)

        @staticmethod
        def __new__(cls, cells: np.ndarray, base: Any = None, dtype: Any = None,
                    family: "_Family | None" = None) -> "LazyCategoricalTensor":
            if base is None:
                base = torch.zeros(cells.shape, dtype=dtype or torch.int64)
            t = torch.Tensor._make_subclass(cls, base)
            t._cells = cells
            t._read = False
            t._fam = family if family is not None else _Family(t)
            return t

        # mypy reads torch's Tensor.__repr__ as matched by no override, not even its own signature (hence the ignore)
        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105
            return _plain_call(torch.Tensor.__repr__, (force(self),), {})

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            return _dispatch(func, types, args, kwargs)

    def _plain_call(func: Any, args: tuple, kwargs: dict) -> Any:
        return _disabled(func, (), args, kwargs)

    _make_subclass = torch.Tensor._make_subclass

    def _lazy(cells: np.ndarray, out: Any, family: "_Family | None") -> "LazyCategoricalTensor":
        """A :class:`LazyCategoricalTensor` of ``cells`` on ``out``'s storage (detached), in ``family`` (None: its own).

        It is made without the class call (torch's tensor metaclass), as ``__new__`` makes it.
        """
        base = out.detach() if out.requires_grad else out
        t = _make_subclass(LazyCategoricalTensor, base)
        t._cells = cells
        t._read = False
        t._fam = family if family is not None else _Family(t)
        return t

    #: ``func(*args, **kwargs)`` with subclasses' torch functions disabled, in C (what
    #: ``with torch._C.DisableTorchFunctionSubclass(): func(*args, **kwargs)`` does)
    _disabled = torch._C._disabled_torch_function_impl

    #: what :func:`_dispatch` does with a torch function, by its name
    _META, _IN_PLACE, _OTHER = 0, 1, 2

    #: per torch function: ``(name, what, picks, structural)`` (:func:`_spec`); functions and the method-wrappers of
    #: attribute getters hash and compare by what they call, so the dict stays as small as the functions met
    _SPECS: dict[Any, tuple[str, int, bool, bool]] = {}

    def _spec(func: Any) -> tuple[str, int, bool, bool]:
        """How :func:`_dispatch` treats ``func``: its name, whether it only reads metadata (``_META``), writes its first
        operand (``_IN_PLACE``: ``__setitem__``, ``masked_fill_``, ``+=``; not the shape-only ``squeeze_``) or
        neither, whether it picks entries and whether it is structural. Decided once per function."""
        name = getattr(func, "__name__", "")
        if name in _QUERIES or (name == "__get__" and
                                getattr(getattr(func, "__self__", None), "__name__", "") in _ATTRS):
            what = _META
        elif name == "__setitem__" or name in _INPLACE_DUNDERS or (
                name.endswith("_") and not name.endswith("__") and name not in _STRUCTURAL):
            what = _IN_PLACE
        else:
            what = _OTHER
        spec = (name, what, name in _PICKS, name in _STRUCTURAL)
        try:
            if len(_SPECS) > 4096:
                _SPECS.clear()
            _SPECS[func] = spec
        except TypeError:       # an unhashable callable: decided again on every call
            pass
        return spec

    def _dispatch(func: Any, types: Any, args: tuple, kwargs: dict | None) -> Any:
        """``LazyCategoricalTensor.__torch_function__``: metadata, a pending write, writes, another lazy type, picks,
        reshapes, a read, in that order, with the function's kind looked up once per function (:func:`_spec`)."""
        try:
            spec = _SPECS.get(func)
        except TypeError:
            spec = None
        if spec is None:
            spec = _spec(func)
        name, what, picks, structural = spec
        if what == _META:
            return _disabled(func, types, args, kwargs or {})
        if WORLDS_DISPATCH is not None and (name == "__getitem__" or name == "__setitem__"):
            FORCE_IN_SLICES(args)       # lazy values in an index's slices: read (torch does not see them)
        if kwargs is None:
            kwargs = {}
        if name == "__setitem__" and _write_pending(func, args, kwargs):
            return None    # written into a tensor alone on its storage, which holds them pending from now on
        if kwargs:
            out = kwargs.get("out")
            if isinstance(out, LazyCategoricalTensor):
                _write_family(out)
        if what == _IN_PLACE and args and isinstance(args[0], LazyCategoricalTensor):
            _write_family(args[0])
        for t in types:
            if t is not LazyCategoricalTensor and not issubclass(t, LazyCategoricalTensor):
                _force_all(args)
                _force_all(tuple(kwargs.values()))
                return NotImplemented
        first = args[0] if args else None
        if picks and "out" not in kwargs and (_pending_in(args) or (kwargs and _pending_in(kwargs.values()))):
            # (with no pending entry among its operands, :func:`_pick` finds none to keep: NotImplemented)
            picked = _pick(func, name, args, kwargs)
            if picked is not NotImplemented:
                return picked
        if structural and isinstance(first, LazyCategoricalTensor) and not first._read:
            rest = tuple([force(a) for a in args[1:]]) if len(args) > 1 else ()
            return _restructure(func, name, first, rest, kwargs)
        if name in _ROWS_OF and isinstance(first, LazyCategoricalTensor) and not first._read and \
                _along_first_dim(first, args, kwargs):
            # iterating (``for t in tokens``) or unbinding along dim 0 reads nothing: each row is ``t[i]``, pending
            rows = [first[i] for i in range(_disabled(torch.Tensor.size, (), (first, 0), {}))]
            return iter(rows) if name == "__iter__" else tuple(rows)
        if WORLDS_DISPATCH is not None and what != _IN_PLACE:
            # computed once per world of the pending draws (probs[token]: a function of the token), read only where
            # a value reaches Python: lazy_worlds decides, and reads where it does not apply
            return WORLDS_DISPATCH(func, types, args, kwargs)
        _force_all(args)
        if kwargs:
            _force_all(tuple(kwargs.values()))
        return _disabled(func, types, args, kwargs)

    #: :mod:`.lazy_worlds`' dispatch once that module is imported (it imports this one): an operation on pending
    #: draws that picks nothing runs there, per world, as the whole-loop audit defers reads
    WORLDS_DISPATCH: Any = None
    #: :func:`.lazy_worlds.force_in_slices`, set with :data:`WORLDS_DISPATCH`
    FORCE_IN_SLICES: Any = None

    #: torch functions that hand back the rows of a tensor along its first dimension (``__iter__``, ``unbind``)
    _ROWS_OF = frozenset({"__iter__", "unbind"})

    def _along_first_dim(t: Any, args: tuple, kwargs: dict) -> bool:
        """Whether ``__iter__`` / ``unbind`` of ``t`` (``args``, ``kwargs``) takes its rows along dimension 0 of a
        tensor with at least one dimension (torch refuses to iterate a 0-d tensor: that call goes on as before)."""
        if len(args) > 2 or any(k != "dim" for k in kwargs):
            return False
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        ndim = _disabled(torch.Tensor.dim, (), (t,), {})
        return type(dim) is int and ndim >= 1 and dim in (0, -ndim)

    def _pending_in(items: Any) -> bool:
        """Whether a pending tensor not yet read with an entry not yet drawn is among ``items`` (or in a list, tuple
        or dict among them)."""
        for a in items:
            if isinstance(a, LazyCategoricalTensor):
                if not a._read and any(not c[0].drawn for c in a._cells.reshape(-1)):
                    return True
            elif isinstance(a, (list, tuple)):
                if _pending_in(a):
                    return True
            elif isinstance(a, dict) and _pending_in(a.values()):
                return True
        return False

    def _restructure(func: Any, name: str, t: "LazyCategoricalTensor", rest: tuple, kwargs: dict) -> Any:
        """Apply a reshaping op to the storage and, through an index tensor, to the pending entries."""
        out = _plain_call(func, (t,) + rest, kwargs)
        if name in ("squeeze_", "unsqueeze_"):       # in place: the entries keep their order
            t._cells = t._cells.reshape(tuple(t.shape))
            return out
        if out is t or not isinstance(out, torch.Tensor):
            return out
        if name in _IN_ORDER and out.numel() == t._cells.size and not (
                name == "view" and any(isinstance(a, torch.dtype) for a in (*rest, *kwargs.values()))):
            # the entries keep their row-major order (a new shape, or the same one): the cells reshaped, as the
            # positions below would pick them (``view(dtype)`` reinterprets bits: the general path refuses it)
            return _lazy(t._cells.reshape(tuple(out.shape)), out, _family_of(out, (t,)))
        if name == "__getitem__" and len(rest) == 1 and _basic(rest[0]):
            # ints, slices, None and ``...`` pick the same entries in numpy as in torch (a trailing ``...`` keeps
            # numpy's result an array when every dimension is indexed by an int)
            idx = rest[0] if isinstance(rest[0], tuple) else (rest[0],)
            cells = t._cells[idx if Ellipsis in idx else idx + (Ellipsis,)]
            if cells.shape == tuple(out.shape):
                return _lazy(cells, out, _family_of(out, (t,)))
        positions = torch.arange(t._cells.size, dtype=torch.int64).reshape(t._cells.shape)
        if name in ("to", "long", "cpu", "type_as", "clone", "contiguous", "detach"):
            where = positions
        else:
            where = _plain_call(func, (positions,) + rest, {k: v for k, v in kwargs.items() if k != "dtype"})
        cells = np.asarray(t._cells.reshape(-1)[where.reshape(-1).numpy()], dtype=object).reshape(tuple(out.shape))
        return _lazy(cells, out, _family_of(out, (t,)))

    def _basic(idx: Any) -> bool:
        """An index made of ints, slices with steps of 1 or more, None and ``...`` only (not bools, not tensors)."""
        for i in (idx if isinstance(idx, tuple) else (idx,)):
            if not (i is None or i is Ellipsis or type(i) is int or
                    (type(i) is slice and (i.step is None or (type(i.step) is int and i.step > 0)) and
                     all(x is None or type(x) is int for x in (i.start, i.stop)))):
                return False
        return True

    def _alone(t: Any) -> bool:
        """Whether ``t`` (int64, no grad) is the only tensor on its storage and fills it in row-major order: no view of
        it and no tensor it views is alive, so every later read of its entries goes through ``t`` itself."""
        use_count = getattr(torch._C, "_storage_Use_Count", None)
        if use_count is None:
            return False
        with torch._C.DisableTorchFunctionSubclass():
            if t.dtype != torch.int64 or t.requires_grad or t._base is not None or t.storage_offset() != 0 or \
                    not t.is_contiguous() or t.is_cuda:
                return False
            storage = t.untyped_storage()
            # the count holds ``t``'s own reference and that of the ``storage`` object just made: any other tensor
            # (or Python object) holding the storage adds one
            return storage.nbytes() == t.numel() * t.element_size() and use_count(storage._cdata) <= 2

    def _plain_cells(x: Any) -> Any:
        """The cells of an ordinary integer tensor (known values), or of a Python int; None for anything else."""
        cells: np.ndarray
        if isinstance(x, int) and not isinstance(x, bool):
            cells = np.empty((), dtype=object)
            cells[()] = _known(x)
            return cells
        if type(x) is not torch.Tensor:
            return None
        with torch._C.DisableTorchFunctionSubclass():
            if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                return None
            flat, shape = x.reshape(-1).tolist(), tuple(x.shape)
        cells = np.empty(len(flat), dtype=object)
        for i, v in enumerate(flat):
            cells[i] = _known(int(v))
        return cells.reshape(shape)

    def _write_pending(func: Any, args: tuple, kwargs: dict) -> bool:
        """``target[idx] = value`` without reading ``value``'s pending draws, where that is sound; False: not done.

        It applies when ``idx`` is basic (ints, slices, None, ``...``), ``target`` is an int64 tensor
        alone on its storage (:func:`_alone`): an ordinary one, or a pending one that is its storage's
        root and not yet read, and ``value`` is pending and unread (or, into a pending ``target``, an
        ordinary integer tensor or int). The write is made in the storage (the pending entries hold a
        placeholder there) and ``target`` becomes (or stays) a :class:`LazyCategoricalTensor` whose
        entries at ``idx`` are ``value``'s cells: they are drawn when ``target`` is read, in element
        order, as any pending entry. A sampler that only copies a draw into its output thus hands the
        output back with the draw still pending; one that reads the output back draws it there.
        """
        if kwargs or len(args) != 3:
            return False
        target, idx, value = args
        if not _basic(idx) or not isinstance(target, torch.Tensor):
            return False
        lazy_target = isinstance(target, LazyCategoricalTensor)
        if isinstance(target, LazyCategoricalTensor):
            if target._read or target._fam.written or target._fam.root is not target or \
                    target._cells.shape != tuple(target.shape):
                return False
        elif type(target) is not torch.Tensor:
            return False
        if isinstance(value, LazyCategoricalTensor):
            if value._read or value._fam.written or value._cells.shape != tuple(value.shape):
                return False
            vcells = value._cells
        elif lazy_target:
            vcells = _plain_cells(value)
            if vcells is None:
                return False
        else:
            return False
        if not all(c[0].drawn or isinstance(c[0].rng, PathRng) for c in vcells.reshape(-1)):
            return False     # a sampling rng (the statistical audit) keeps its draws in their old order
        if not _alone(target):
            return False
        cells = target._cells.copy() if lazy_target else _plain_cells(target)
        if cells is None:
            return False
        sel = idx if isinstance(idx, tuple) else (idx,)
        sel = sel if Ellipsis in sel else sel + (Ellipsis,)
        try:
            sub = cells[sel]
            with torch._C.DisableTorchFunctionSubclass():
                if tuple(target[idx].shape) != sub.shape:
                    return False
            sub[...] = np.broadcast_to(vcells, sub.shape)     # a view of ``cells``: writes them
        except (IndexError, ValueError, TypeError):
            return False
        _plain_call(func, args, kwargs)     # the storage as plain torch writes it (placeholders where pending)
        if not lazy_target:
            target.__class__ = LazyCategoricalTensor
            target._fam = _Family(target)
        target._cells, target._read = cells, False
        return True

    class _NotPositional(Exception):
        """A value operand that is neither pending nor an integer tensor or number: the operation reads its operands."""

    #: cells of values known already (entries of ordinary integer tensors mixed into lazy ones)
    _KNOWN: dict[int, tuple] = {}

    def _known(v: int) -> tuple:
        cell = _KNOWN.get(v)
        if cell is None:
            if len(_KNOWN) > 4096:
                _KNOWN.clear()
            cell = _KNOWN[v] = (PendingDraw.of_law(None, v), 0)
        return cell

    def _pick(func: Any, name: str, operands: tuple, kwargs: dict) -> Any:
        """An operation that picks entries of its value operands by position, done on the entries' positions.

        The value operands (the tensors of ``cat``/``stack``, ``input`` and ``other`` of ``where``, the
        input of ``gather``, ``roll``, ...) may mix pending tensors with ordinary integer tensors and
        numbers; every other operand (indices, a condition) is read. The result's entries are the
        picked cells, still pending; NotImplemented when an operand does not allow it.
        """
        if name in _JOINS:
            joined = _join(func, name, operands, kwargs)
            if joined is not None:
                return joined
        args = list(operands)
        slots: list[tuple[str, Any]]            # ("a", position) or ("k", keyword) of each value operand
        if name in _SEQUENCES:
            slots = [("a", 0)] if args else [("k", "tensors")]
        elif name == "where":
            if func is torch.Tensor.where:
                slots = [("a", 0), ("a", 2) if len(args) > 2 else ("k", "other")]
            elif len(args) + len(kwargs) < 3:
                return NotImplemented
            else:
                slots = [("a", 1) if len(args) > 1 else ("k", "input"), ("a", 2) if len(args) > 2 else ("k", "other")]
        else:
            slots = [("a", 0) if args else ("k", "input")]
        cells: list = []

        def positions(x: Any) -> Any:
            if isinstance(x, LazyCategoricalTensor) and not x._read:
                flat, shape = list(x._cells.reshape(-1)), tuple(x.shape)
            elif isinstance(x, torch.Tensor):
                if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                    raise _NotPositional
                plain = _plain_call(torch.Tensor.tolist, (_plain_call(torch.Tensor.reshape, (x, -1), {}),), {})
                flat, shape = [_known(int(v)) for v in plain], tuple(x.shape)
            elif isinstance(x, int) and not isinstance(x, bool):
                flat, shape = [_known(x)], ()
            else:
                raise _NotPositional
            start = len(cells)
            cells.extend(flat)
            return torch.arange(start, start + len(flat), dtype=torch.int64).reshape(shape)

        pos_args, pos_kwargs = list(args), dict(kwargs)
        try:
            for kind, key in slots:
                holder, other = (args, pos_args) if kind == "a" else (kwargs, pos_kwargs)
                if (kind == "a" and key >= len(args)) or (kind == "k" and key not in kwargs):
                    return NotImplemented
                value = holder[key]
                if name in _SEQUENCES:
                    if not isinstance(value, (list, tuple)):
                        return NotImplemented
                    other[key] = [positions(v) for v in value]
                else:
                    other[key] = positions(value)
        except _NotPositional:
            return NotImplemented
        if not any(isinstance(c[0], PendingDraw) and not c[0].drawn for c in cells):
            return NotImplemented
        # every operand that is not a value operand (indices, conditions) is read
        for i, a in enumerate(args):
            if not any(k == "a" and j == i for k, j in slots):
                args[i] = force(a) if isinstance(a, LazyCategoricalTensor) else a
                pos_args[i] = args[i]
        for k in kwargs:
            if not any(kk == "k" and j == k for kk, j in slots):
                kwargs[k] = pos_kwargs[k] = force(kwargs[k]) if isinstance(kwargs[k], LazyCategoricalTensor) \
                    else kwargs[k]
        out = _plain_call(func, tuple(args), kwargs)
        where = _plain_call(func, tuple(pos_args), {k: v for k, v in pos_kwargs.items() if k != "dtype"})
        if not isinstance(out, torch.Tensor) or not isinstance(where, torch.Tensor) or where.shape != out.shape:
            return NotImplemented
        picked = np.empty(len(where.reshape(-1)), dtype=object)
        for i, p in enumerate(_plain_call(torch.Tensor.tolist, (where.reshape(-1),), {})):
            picked[i] = cells[p]
        return _lazy(picked.reshape(tuple(out.shape)), out, _family_of(out, args))

    #: sequence functions whose result's cells are those of their operands joined along ``dim`` as numpy joins them
    _JOINS = frozenset({"cat", "concat", "concatenate", "stack"})

    def _join(func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        """``cat``/``stack`` of pending and ordinary integer tensors: the operands' cells joined by numpy along ``dim``
        (what :func:`_pick` computes through positions, without them); None where this shortcut does not apply (the
        general path decides)."""
        if not args or len(args) > 2 or any(k != "dim" for k in kwargs) or not isinstance(args[0], (list, tuple)):
            return None
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        items = args[0]
        if type(dim) is not int or not items:
            return None
        parts, pending, ndim = [], False, None
        with torch._C.DisableTorchFunctionSubclass():     # sizes and plain values, not through the handlers
            for x in items:
                if not isinstance(x, torch.Tensor) or x.dim() == 0 or (ndim is not None and x.dim() != ndim) or \
                        x.numel() == 0:
                    return None
                ndim = x.dim()
                if isinstance(x, LazyCategoricalTensor) and not x._read:
                    cells = x._cells
                    if cells.shape != tuple(x.shape):
                        return None
                    pending = pending or any(not c[0].drawn for c in cells.reshape(-1))
                elif (type(x) is torch.Tensor or (type(x) is LazyCategoricalTensor and x._read)) and not (
                        x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
                    # an ordinary integer tensor, or a pending one already read (its storage holds its values): known
                    flat = x.reshape(-1).tolist()
                    cells = np.empty(len(flat), dtype=object)
                    for i, v in enumerate(flat):
                        cells[i] = _known(int(v))
                    cells = cells.reshape(tuple(x.shape))
                else:
                    return None
                parts.append(cells)
        if not pending:
            return None
        out = _plain_call(func, tuple(args), kwargs)
        try:
            cells = np.stack(parts, axis=dim) if name == "stack" else np.concatenate(parts, axis=dim)
        except (ValueError, np.exceptions.AxisError):
            return None
        if not isinstance(out, torch.Tensor) or cells.shape != tuple(out.shape):
            return None
        return _lazy(cells, out, _family_of(out, args))

    def force(x: Any) -> Any:
        """Read a pending tensor: draw its pending entries (element order) into its storage; other values pass.

        >>> force(3)
        3
        """
        if not isinstance(x, LazyCategoricalTensor) or x._read:
            return x
        if x._fam.written:      # its storage was written through a view: it holds the values plain torch would read
            x._read = True
            return x
        vals = [cell[0].values()[cell[1]] for cell in x._cells.reshape(-1)]
        with torch._C.DisableTorchFunctionSubclass():
            if x.is_inference() and not torch.is_inference_mode_enabled():   # made in inference mode, read outside
                with torch.inference_mode():
                    _write(x, vals)
            else:
                _write(x, vals)
        x._read = True
        return x

    def _write(x: Any, vals: list) -> None:
        """Put the drawn values in ``x``'s storage, also when entries share memory (an ``expand``/``broadcast_to`` view).

        Entries that share a memory location are the same pending draw (the view was made from one
        entry), so each location is written once: along a dimension of stride 0 the first slice
        stands for all (plain torch reads the same memory there); any other overlap is written entry
        by entry. ``copy_`` into such a view is refused by torch, and the user's code never asked for
        that write: the audit must not fail where plain torch runs.
        """
        if len(vals) == 1:
            x.fill_(vals[0])
            return
        if not vals:
            return
        src = torch.tensor(vals, dtype=torch.int64).reshape(tuple(x.shape))
        if torch._debug_has_internal_overlap(x) == 0:
            x.copy_(src)
            return
        dst = x
        for d, (size, stride) in enumerate(zip(x.shape, x.stride())):
            if stride == 0 and size > 1:
                dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
        if torch._debug_has_internal_overlap(dst) == 0:
            dst.copy_(src)
            return
        for idx in np.ndindex(*tuple(dst.shape)):   # overlap of another kind (as_strided): one entry at a time
            dst[idx].fill_(int(src[idx]))

    class _Family:
        """Pending tensors that share one storage, as plain torch's views do (``expand``, ``view``, slicing).

        ``root`` is the tensor the storage was made for. A read draws only the entries read (into
        their places in the storage); a *write* into any member first draws every entry of the root
        into the storage and sets ``written``: from then on the storage is what every member reads,
        so a write through one view is seen through the others and through the root.
        """

        __slots__ = ("root", "written")

        def __init__(self, root: Any) -> None:
            self.root, self.written = root, False

    #: in-place operators spelled as dunders (``x += 1`` on a tensor is ``__iadd__``)
    _INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
                                  "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"})

    def _write_family(x: "LazyCategoricalTensor") -> None:
        """Before a write into ``x``: draw every entry of its storage's root into the storage, once."""
        fam = x._fam
        if not fam.written:
            force(fam.root)
            fam.written = True

    def _family_of(out: Any, sources: Any) -> "_Family | None":
        """The family of the pending tensor whose storage ``out`` views (None: ``out`` has a storage of its own)."""
        if not isinstance(out, torch.Tensor):
            return None
        with torch._C.DisableTorchFunctionSubclass():
            ptr = out.untyped_storage().data_ptr()
            for src in sources:
                if isinstance(src, LazyCategoricalTensor) and src.untyped_storage().data_ptr() == ptr:
                    return src._fam
        return None

    def _force_all(items: Any) -> None:
        for a in items:
            if isinstance(a, LazyCategoricalTensor):
                force(a)
            elif isinstance(a, (list, tuple)):
                _force_all(a)
            elif isinstance(a, dict):
                _force_all(tuple(a.values()))
else:  # pragma: no cover
    LazyCategoricalTensor = None  # type: ignore[assignment,misc]

    def force(x: Any) -> Any:
        return x


def as_array(x: Any) -> Any:
    """``np.asarray(x)`` of what a sampler returns: pending draws are drawn (element order) and read as plain torch
    reads them, in one step rather than through torch's Python-level dispatch of ``__array__``.

    >>> as_array(torch.tensor([3, 1])).tolist() if torch is not None else [3, 1]
    [3, 1]
    """
    if torch is not None and type(x) is LazyCategoricalTensor:
        force(x)
        with torch._C.DisableTorchFunctionSubclass():
            return np.asarray(x)
    return np.asarray(x)


def tokens_deferring_last(x: Any, rng: Any) -> list | None:
    """The emitted tokens of a sampler's output (its entries ``>= 0``, in element order, as ``Adapter.tokens`` reads
    them), the last one left undrawn when it is a pending draw nobody read; None where that does not apply.

    Applies to an unread :class:`LazyCategoricalTensor` whose last pending entry
    (element order) is one draw that no other entry shares, every entry after it a known negative
    value (padding), on an rng whose engine spreads such a token (``rng.spreads``: the step
    enumerator). The other pending entries are drawn first, in element order, as reading the
    tensor draws them; the last one is ``rng.categorical`` of its law made while ``rng.defer`` is
    set: a :class:`~exactspec.enumerate.rng.DeferredToken` standing for all its values, which the
    engine spreads over the step's outcome, so one call of the sampler stands for every value of
    that draw (an int where the draw has one value left, or on a replay that drew it). The law is
    the one reading the tensor gives: the same draws, in the same order. The tensor is read
    afterwards (its undrawn entry holding one of its values). The caller reads the output as
    before where this returns None.

    >>> tokens_deferring_last(torch.tensor([1, -1]), None) is None if torch is not None else True
    True
    """
    if torch is None or type(x) is not LazyCategoricalTensor or x._read or x._fam.written or \
            not getattr(rng, "spreads", False):
        return None
    flat = list(x._cells.reshape(-1))
    last = None
    for i in range(len(flat) - 1, -1, -1):
        draw = flat[i][0]
        if not draw.drawn:
            last = i
            break
        if draw.values()[flat[i][1]] >= 0:     # a token emitted after the pending one
            return None
    if last is None:
        return None
    draw = flat[last][0]
    if draw.rng is not rng or draw.count != 1 or draw.joint is not None or \
            any(c[0] is draw for j, c in enumerate(flat) if j != last):
        return None
    before = [c[0].values()[c[1]] for c in flat[:last]]     # drawn in element order, as a read draws them
    if draw._ready:
        if callable(draw.law):
            draw.law = draw.law()
        law = draw.law
    else:
        field = rng._field
        law = draw.law if getattr(field, "Q", None) is Fraction else tuple(field.convert(v) for v in draw.law)
    tok: Any                # a token, or a pending draw where the rng defers it
    if isinstance(law, int):
        tok = law
    else:
        defer, rng.defer = rng.defer, True
        try:
            tok = rng.categorical(law)
        finally:
            rng.defer = defer
    # the tensor is read from now on, as after any read; the undrawn entry holds one of its values as a placeholder
    # (only a sampler keeping its output and reading it on a later call, another branch, could see it)
    draw._values = [tok if type(tok) is int else tok.values()[0][0]]
    force(x)
    return [t for t in before if t >= 0] + [tok]


def unread_entries(x: Any, rng: Any) -> list | None:
    """The entries of an unread pending tensor, element order: an ``int`` where the value is known (drawn, or never
    pending) and a :class:`PendingDraw` where it is one undrawn draw of ``rng`` (a draw of one token whose law is
    known); None where that does not apply (not a :class:`LazyCategoricalTensor`, read, or written through a view).
    An entry pending otherwise (one of several samples drawn together, a draw of another rng) is drawn here, as a
    read draws it, and listed as its value; nothing else is drawn, but a law that reading a draw would compute first
    (a race's, or one computed from other draws) is computed now, as reading it would, in element order. A draw held
    jointly with others (:mod:`.joint_draws`), or whose law is a row indexed by other pending draws, is listed as
    it is: the caller spreads such draws jointly (:func:`.joint_draws.spread`).

    For a caller that enumerates those draws itself, with :meth:`PendingDraw.law_of_one`, once no code can read
    them any more (what a loop returned, after it returned: :func:`exactspec.audit_loop`). Reading the tensor
    instead would fork the enumeration at each of them, and every fork reruns the loop.

    >>> from exactspec.enumerate.rng import PathRng
    >>> from exactspec.fields import get_field
    >>> rng = PathRng((), 1, get_field(backend="python"), [], {})
    >>> t = lazy_multinomial(rng, [exact_row([1.0, 3.0])], 1, True, (1,)) if torch is not None else None
    >>> [type(e).__name__ for e in unread_entries(t, rng)] if torch is not None else ["PendingDraw"]
    ['PendingDraw']
    >>> unread_entries(torch.tensor([2, 1]), rng) is None if torch is not None else True
    True
    """
    if torch is None or type(x) is not LazyCategoricalTensor or x._read or x._fam.written:
        return None
    out: list = []
    for draw, i in x._cells.reshape(-1):
        if draw.drawn:
            out.append(draw.values()[i])
            continue
        if draw.rng is rng and (draw.joint is not None or _joint.conditional(draw)):
            out.append(draw)            # held jointly with other draws, or its law a row indexed by them: spread jointly
            continue
        if draw._ready and callable(draw.law) and draw.rng is rng:
            draw.law = draw.law()       # what reading it computes first (a race's law), made now
            if isinstance(draw.law, int):
                draw._values = [draw.law]
                out.append(draw.law)
                continue
        if draw.rng is rng and draw.count == 1 and draw.law_of_one() is not None:
            out.append(draw)
        else:
            out.append(draw.values()[i])    # not spread (several samples, another rng): drawn, as a read draws it
    return out


def lazy_multinomial(rng: Any, rows: Sequence[tuple[tuple, tuple]], num_samples: int, replacement: bool,
                     shape: tuple) -> Any:
    """A :class:`LazyCategoricalTensor` of ``num_samples`` pending draws per row.

    ``rows`` holds, per row, its exact weights and their law (:func:`exact_row`; already
    checked: no negative entry, positive sums, enough categories without replacement);
    ``shape`` is the result's shape. Draws with replacement are pending one by one; without
    replacement a row's samples are drawn together.

    >>> from exactspec.enumerate.rng import PathRng
    >>> from exactspec.fields import get_field
    >>> stack = []
    >>> rng = PathRng((), 1, get_field(backend="python"), stack, {})
    >>> t = lazy_multinomial(rng, [exact_row([0.5, 0.5])], 1, True, (1,))
    >>> t.shape, len(stack)          # nothing drawn yet
    (torch.Size([1]), 0)
    >>> t.tolist(), len(stack)       # read: one fork
    ([0], 1)
    """
    n = len(rows)
    if n == 1 and num_samples == 1:     # one draw (a loop's token): the cells made directly
        cells = np.empty(shape, dtype=object)
        cells.reshape(-1)[0] = (PendingDraw(rng, rows[0][0], rows[0][1], 1, bool(replacement)), 0)
        return _lazy(cells, torch.zeros(shape, dtype=torch.int64), None)
    cells = np.empty((n, num_samples), dtype=object)
    for r, (weights, law) in enumerate(rows):
        if replacement:
            for s in range(num_samples):
                cells[r, s] = (PendingDraw(rng, weights, law, 1, True), 0)
        else:
            draw = PendingDraw(rng, weights, law, num_samples, False)
            for s in range(num_samples):
                cells[r, s] = (draw, s)
    return _lazy(cells.reshape(shape), torch.zeros(shape, dtype=torch.int64), None)
