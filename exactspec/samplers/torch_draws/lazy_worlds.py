"""Values computed from pending draws: a whole-loop audit's stand-ins read no token they are fed.

It is kept as one module: the worlds tensor's torch dispatch is one table of how each operation maps a
value per world, and the decisions that fork on an answer read that table's results.

A generate loop feeds the tokens it drew back into its models before it knows whether it keeps
them: litgpt's draft model reads draft ``i`` to propose ``i + 1``, the target scores every draft in
one call, and only then does verification decide how many drafts stand. A stand-in that read each
token it is fed would fork the enumeration there (every fork reruns the loop), although most of
those values never change what the loop does: after the first draft is rejected, the later ones
are discarded whatever they are. In a whole-loop audit a torch stand-in fed pending draws (:mod:`.lazy_draws`) instead
returns a :class:`LazyWorldsTensor`: logits whose entries are functions of those draws, one
value per *world* (an assignment of values to the draws an entry depends on: for an order-1
table, the token of its own position). Torch operations on it are applied world by world and stay
lazy; the draws are drawn (the enumeration forks) only when a value reaches Python.

Entries come from *groups*: a group holds the draws it depends on and, per world, an ordinary
tensor (an immutable snapshot); an entry is a position in one group's tensors. A stand-in's
logits hold one group per row (position), so slicing one position keeps only that position's
draws. What each kind of operation does:

- **Metadata** (shape, dtype, ``dim()``, ...) reads nothing.
- **Views and reshapes** (``__getitem__`` with real indices, ``view``, ``split``, ``unbind``,
  ``squeeze``, ``transpose``, ``detach``, ...) map entries through positions, without computing
  anything; a result on the same storage joins its source's *family*, as in plain torch.
- **Any other operation** whose operands are lazy worlds, unread pending draws (whose values are
  known to lie in a small set), ordinary tensors and numbers is run once per world over the
  union of the draws its operands depend on (at most :data:`WORLDS` worlds), on ordinary tensors,
  with subclasses disabled; a new group holds the results, a draw dropped from it where every
  world gives the same bits whatever its value. Results that are not tensors (``bool``, ``item``,
  ``tolist``), tensors whose shapes differ between worlds, results on an operand's storage,
  an operation raising in some world, or too many worlds: the operands are read first (the draws
  drawn, in the order they were met) and the operation runs once on the values, as plain torch
  runs it (its exception included).
- **Writes** (in place, ``out=``, ``__setitem__``) into a lazy tensor read its family first: every
  entry of the storage's root written into the storage, from then on an ordinary tensor on it
  (a write through one view is seen through every other), as lazy masks settle.
- **Another lazy type** (lazy uniforms, masks, races) taking part: ours are read first, and that
  type's handler runs the operation on the values.
- ``torch.multinomial`` of lazy weights (one sample per row) draws from the row's law in the world
  the loop is in: a pending draw whose law is computed when it is read (reading the draws it
  depends on first), whose values lie in the union of the rows' supports; its law is also kept as a
  row indexed by those draws' values (``PendingDraw.given``), so that it can be held jointly with them.
- ``bool()`` of a one-entry value (``if target_prob >= draft_prob:``), and a lazy uniform compared
  with one (:mod:`.torch_rng`), fork on the answer, not on the draws: one draw narrowed to the values
  that give the answer (:func:`_choose`), several held jointly (:mod:`.joint_draws`: the assignments
  of values that give it, with their exact probabilities), all left undrawn.

Nothing here changes a law: each world's value is what the loop computes once those draws are
known, and the draws are drawn before any value reaches Python, in a replay's same order. The
whole-loop tests compare the laws with a plain eager enumeration's (``tests/test_deferred_reads.py``,
``benchmarks/plain_loops.py``).

>>> WORLDS
64
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np

from ..randomness import joint_draws as _joint
from .lazy_draws import PendingDraw, exact_rows

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without the torch extra
    torch = None  # type: ignore[assignment]  # optional dependency: None (checked) where torch is not installed

__all__ = ["LazyWorldsTensor", "WORLDS", "deferring", "domain", "entry_decision", "lazy_logits",
           "multinomial_of_worlds", "value_of"]

#: the most worlds one operation is run in; beyond, its operands are read and it runs once
WORLDS = 64


def deferring() -> bool:
    """Whether the stand-ins defer the reads of the pending tokens they are fed (whenever torch is importable).

    >>> isinstance(deferring(), bool)
    True
    """
    return torch is not None


def domain(cell: tuple) -> list | None:
    """The values a pending draw's entry ``cell = (draw, sample)`` can take (its value once drawn); None: unknown.

    >>> from exactspec.samplers.torch_draws.lazy_draws import exact_row
    >>> domain((PendingDraw(None, *exact_row([1.0, 0.0, 2.0]), 1, True), 0))
    [0, 2]
    """
    d = cell[0]
    if d.drawn:
        return [d.values()[cell[1]]]
    if d.joint is not None:
        return d.joint.support(d)
    if d.domain is not None:
        return d.domain
    if d._ready:
        if isinstance(d.law, int):
            return [d.law]
        if type(d.law) is not tuple:
            return None      # a law computed on the first read (a race's): its support is not known yet
        src = d.law
    else:
        src = d.law if d.count == 1 else d.weights
    # kept: a pending draw's law changes only where its domain is set with it (a decision's narrowing)
    d.domain = [i for i, p in enumerate(src) if p > 0]
    return d.domain


def value_of(cell: tuple) -> int:
    """The value of a pending draw's entry, drawing it (forking the enumeration) if not yet drawn.

    >>> value_of((PendingDraw.of_law(None, 2), 0))
    2
    """
    return cell[0].values()[cell[1]]


def _key(cell: tuple) -> tuple:
    return (id(cell[0]), cell[1])


if torch is not None:
    from . import lazy_draws as _lazy_draws_module
    from .lazy_draws import LazyCategoricalTensor, _basic, force as _force_draws

    _disabled = torch._C._disabled_torch_function_impl
    _make_subclass = torch.Tensor._make_subclass

    class _Group:
        """The draws some entries depend on and, per world (their values, in ``deps`` order), an ordinary tensor."""

        __slots__ = ("deps", "worlds", "keys")

        def __init__(self, deps: tuple, worlds: dict) -> None:
            self.deps, self.worlds = deps, worlds
            self.keys = tuple(_key(c) for c in deps)

        def at(self, assign: dict) -> Any:
            """This group's tensor in the world ``assign`` (``_key(cell) -> value``; a drawn dep its drawn value)."""
            try:
                return self.worlds[tuple([assign[k] for k in self.keys])]
            except KeyError:            # a dep drawn since (not among the draws ``assign`` ranges over)
                return self.worlds[tuple([assign[k] if k in assign else value_of(c)
                                          for k, c in zip(self.keys, self.deps)])]

    class _Family:
        """Lazy tensors on one storage (views of one another); ``settled``: the storage holds the values."""

        __slots__ = ("root", "settled")

        def __init__(self, root: Any) -> None:
            self.root, self.settled = root, False

    class LazyWorldsTensor(torch.Tensor):
        """A tensor whose entries are functions of pending draws, computed per world (see the module docstring)."""

        _groups: tuple          # the groups its entries come from, in the order met
        _gi: np.ndarray         # per entry, its group's index in ``_groups``
        _gp: np.ndarray         # per entry, its flat position in that group's tensors
        _fam: "_Family"
        _whole: bool            # one group whose tensors hold exactly these entries in this order
        _plan: Any              # the operation plan memoised on it (None: none yet)

        # mypy reads torch's Tensor.__repr__ as matched by no override, not even its own signature (hence the ignore)
        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # noqa: D105
            return _disabled(torch.Tensor.__repr__, (), (force(self),), {})

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            return _dispatch(func, types, args, kwargs or {})

    def _wrap(groups: tuple, gi: np.ndarray, gp: np.ndarray, backing: Any, family: "_Family | None",
              whole: bool | None = None) -> Any:
        t = _make_subclass(LazyWorldsTensor, backing.detach() if backing.requires_grad else backing)
        t._groups, t._gi, t._gp = groups, gi, gp
        t._fam = family if family is not None else _Family(t)
        # one group whose tensors hold exactly these entries in this order: a world's value is a reshape of its tensor
        if whole is None:
            n = gi.size
            whole = len(groups) == 1 and next(iter(groups[0].worlds.values())).numel() == n and \
                bool((gp.reshape(-1) == np.arange(n)).all())
        t._whole = whole
        t._plan = None
        return t

    def _plain(x: Any, assign: dict) -> Any:
        """``x``'s ordinary tensor in the world ``assign``."""
        groups = x._groups
        shape = x._gi.shape
        if x._whole:
            t = groups[0].at(assign)
            return t if tuple(t.shape) == shape else t.reshape(shape)
        plan = x._plan
        if plan is None:
            gi, gp = x._gi.reshape(-1), x._gp.reshape(-1)
            plan = x._plan = []
            for i, g in enumerate(groups):
                where = np.nonzero(gi == i)[0]
                plan.append((g, torch.from_numpy(where), torch.from_numpy(gp[where])))
        flat = torch.empty(x._gi.size, dtype=x.dtype)
        for g, where, pos in plan:
            flat[where] = g.at(assign).reshape(-1)[pos]
        return flat.reshape(shape)

    def _settle(x: Any) -> None:
        """Write every entry of ``x``'s family root into the storage (drawing its draws, in the order met), once."""
        fam = x._fam
        if fam.settled:
            return
        root = fam.root
        assign: dict = {}
        for g in root._groups:
            for c in g.deps:
                k = _key(c)
                if k not in assign:
                    assign[k] = value_of(c)
        vals = _plain(root, assign)
        with torch._C.DisableTorchFunctionSubclass():
            if root.is_inference() and not torch.is_inference_mode_enabled():
                with torch.inference_mode():
                    root.copy_(vals)
            else:
                root.copy_(vals)
        fam.settled = True

    def force(x: Any) -> Any:
        """Read a lazy-worlds tensor: its family's draws drawn, the values in its storage; it is an ordinary tensor
        from then on. Other values pass.

        >>> force(3)
        3
        """
        if type(x) is not LazyWorldsTensor:
            return x
        _settle(x)
        x.__class__ = torch.Tensor  # type: ignore[assignment]  # deliberate: read, it is the plain tensor it holds
        return x

    def _force_all(items: Any) -> None:
        for a in items:
            if type(a) is LazyWorldsTensor:
                force(a)
            elif type(a) is LazyCategoricalTensor:
                _force_draws(a)
            elif isinstance(a, (list, tuple)):
                _force_all(a)
            elif isinstance(a, dict):
                _force_all(tuple(a.values()))

    _QUERIES = frozenset({"__len__", "size", "dim", "numel", "ndimension", "nelement", "is_floating_point",
                          "is_complex", "element_size", "get_device", "is_contiguous", "stride", "storage_offset",
                          "is_inference", "__hash__"})
    _ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "is_meta", "layout", "requires_grad",
                        "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "names", "is_leaf", "itemsize",
                        "nbytes", "is_mps", "is_xpu"})
    #: operations that only move or view entries: mapped through positions, nothing computed
    _VIEWS = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "unflatten", "__getitem__", "expand",
                        "expand_as", "view_as", "reshape_as", "permute", "transpose", "t", "select", "narrow",
                        "movedim", "split", "chunk", "unbind", "__iter__", "detach", "contiguous", "clone"})
    _INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
                                  "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"})
    #: operations that hand back a Python value computed from their operands' values (no storage shared)
    _VALUE_READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "__format__",
                              "__str__", "equal", "allclose", "is_nonzero", "__complex__", "__contains__"})
    #: operations that make a tensor from their first operand's metadata only (shape, dtype, device)
    _LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "new_empty", "new_zeros", "new_ones",
                       "new_full", "new_empty_strided"})
    #: operations whose result is a Python value: the operands are read, no world computed
    _READS = frozenset({"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "numpy", "__array__",
                        "__format__", "__str__", "__repr__", "data_ptr", "untyped_storage", "storage", "_typed_storage",
                        "__reduce_ex__", "__deepcopy__", "__setstate__", "equal", "allclose", "is_nonzero",
                        "__complex__", "__array_wrap__", "__contains__", "backward", "register_hook"})

    #: torch functions whose result is a new tensor whatever their operands (arithmetic, comparisons, reductions,
    #: softmax): no aliasing to check
    _FRESH = frozenset(f for f in (
        getattr(owner, n, None) for owner in (torch.Tensor, torch, torch.nn.functional) for n in (
            "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__neg__", "__ge__", "__gt__", "__le__", "__lt__", "__eq__", "__ne__", "__and__", "__or__", "__invert__",
            "add", "sub", "mul", "div", "true_divide", "rsub", "neg", "softmax", "log_softmax", "exp", "log", "clamp",
            "clip", "sum", "cumsum", "max", "min", "argmax", "argmin", "maximum", "minimum", "where", "gather",
            "topk", "sort", "pow", "__pow__", "__rpow__", "sqrt", "abs", "ge", "gt", "le", "lt", "eq", "ne",
            "logical_and", "logical_or", "logical_not", "isinf", "isnan", "isfinite", "any", "all", "cat", "stack",
            "index_select", "masked_fill", "scatter", "full_like", "mean", "prod", "logsumexp", "sigmoid",
            "relu", "tanh")) if f is not None)

    #: comparisons a lazy uniform's handler decides jointly with a lazy-worlds threshold (torch_rng._joint_compare)
    _UNIFORM_COMPARISONS = frozenset({"__lt__", "lt", "less", "__le__", "le", "less_equal", "__gt__", "gt", "greater",
                                      "__ge__", "ge", "greater_equal"})

    _NAMES: dict = {}

    def _name(func: Any) -> str:
        try:
            hit = _NAMES.get(func)
        except TypeError:
            return _name_of(func)
        if hit is None:
            hit = _NAMES[func] = _name_of(func)
            if len(_NAMES) > 4096:
                _NAMES.clear()
        return hit

    def _name_of(func: Any) -> str:
        name = getattr(func, "__name__", "")
        if name == "__get__":
            owner = getattr(func, "__self__", None)
            attr = getattr(owner, "__name__", "")
            return "__get__" if attr in _ATTRS else f"__get__{attr}"
        return name

    def _in_place(name: str) -> bool:
        return name == "__setitem__" or name in _INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__"))

    def _live(x: Any) -> bool:
        """A lazy-worlds tensor not read yet (its family not settled); one settled becomes an ordinary tensor now."""
        if type(x) is not LazyWorldsTensor:
            return False
        if x._fam.settled:
            x.__class__ = torch.Tensor  # type: ignore[assignment]  # deliberate: settled, it is a plain tensor
            return False
        return True

    def force_in_slices(items: Any) -> None:
        """Read the lazy-worlds tensors inside the slices of an index (``ids[:, :n + 1]`` with ``n`` lazy): torch does
        not see them as operands, and an indexing run with subclass handlers disabled would take their storage (a
        placeholder) for their value.

        >>> force_in_slices((slice(None, 2),))
        """
        for a in items:
            if type(a) is slice:
                for b in (a.start, a.stop, a.step):
                    if type(b) is LazyWorldsTensor:
                        force(b)
            elif type(a) is tuple or type(a) is list:
                force_in_slices(a)

    def _dispatch(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        name = _name(func)
        if name == "__getitem__" or name == "__setitem__":
            force_in_slices(args)
        if name in _QUERIES or name == "__get__":
            return _disabled(func, (), args, kwargs)
        if name in _LIKE and args and not _any_live(args[1:]) and not _any_live(kwargs.values()):
            return _disabled(func, (), args, kwargs)     # a new tensor shaped like a lazy one: its values unread
        for t in types:
            if t is not LazyWorldsTensor and t is not LazyCategoricalTensor and t is not torch.Tensor:
                if name in _UNIFORM_COMPARISONS and t.__name__ == "LazyUniformTensor":
                    return NotImplemented   # its handler decides each entry jointly with our pending draws
                # another lazy type takes part: ours are read, and its handler runs the operation on the values
                _force_all(args)
                _force_all(tuple(kwargs.values()))
                return NotImplemented
        if name == "__bool__" and len(args) == 1 and not kwargs and type(first := args[0]) is LazyWorldsTensor and \
                _live(first):
            decided = _decide(first)
            if decided is not None:
                return decided
        if name in _VALUE_READS and not kwargs:
            known = _known_values(args)
            if known is not None:       # every draw they depend on drawn: the values, read without reading the family
                return _disabled(func, (), known, {})
        if name in _READS or kwargs.get("out") is not None or kwargs.get("inplace") or _in_place(name):
            # a Python value, or a write: every lazy operand read (a written one's whole family), then plain torch
            _force_all(args)
            _force_all(tuple(kwargs.values()))
            return _disabled(func, (), args, kwargs)
        # pending-draw tensors whose draws are all drawn (through another tensor sharing them) may not hold their
        # values in their storage yet: written now (nothing drawn), as the ordinary operands they are
        _write_drawn(args)
        _write_drawn(tuple(kwargs.values()))
        first = args[0] if args else None
        if name in _VIEWS and _live(first) and not _any_live(args[1:]) and not _any_live(kwargs.values()):
            viewed = _view(func, name, first, args, kwargs)
            if viewed is not NotImplemented:
                return viewed
        return _compute(func, args, kwargs)

    def _decide(x: Any) -> bool | None:
        """``bool(x)`` of a one-entry lazy-worlds tensor, drawing only what the decision needs: the draws it depends on
        but the last are drawn (read); the last is not, where the decision is the same for every value it can take,
        and otherwise the branch forks on the decision (two ways, with the exact probability of each) and that
        draw's law is narrowed to the values that give it, still undrawn. None where that does not apply (the caller
        reads ``x`` as before): several entries, a draw of several tokens, a law not in exact rationals, a world
        missing from the table."""
        if x._gi.size != 1:
            return None
        g, pos = x._groups[int(x._gi.reshape(-1)[0])], int(x._gp.reshape(-1)[0])
        joint = _joint_decision(g, pos, lambda e: bool(_disabled(torch.Tensor.__bool__, (), (e,), {})))
        if joint is not None:
            return joint[0]
        split = _last_undrawn(g, pos)
        if split is None:
            return None
        keep, entries = split
        outcome = {v: bool(_disabled(torch.Tensor.__bool__, (), (e,), {})) for v, e in entries.items()}
        if len(set(outcome.values())) == 1:
            return next(iter(outcome.values()))      # the same whatever the draw: nothing drawn
        return _choose(keep[0], outcome)

    def _last_undrawn(g: Any, pos: int) -> tuple | None:
        """For a decision on entry ``pos`` of group ``g``'s tensors: the draws it depends on but the last are drawn
        (read, in the order met); returns the last one's cell and, per value it can take, the entry (a 0-d tensor).
        None where nothing is pending or that does not apply (a draw of several tokens, a law not in exact
        rationals, values not known, a world missing from the table): the caller reads."""
        undrawn = [c for c in g.deps if not c[0].drawn]
        if not undrawn:
            return None
        keep = undrawn[-1]
        d = keep[0]
        if d.count != 1 or keep[1] != 0 or getattr(getattr(d.rng, "_field", None), "Q", None) is not Fraction:
            return None
        values = domain(keep)
        if values is None:
            return None
        for c in undrawn[:-1]:          # read: drawn in the order met
            value_of(c)
        if d.drawn:                     # drawn while reading the others (its law's own dependencies)
            return None
        entries: dict = {}
        for v in values:
            t = g.worlds.get(tuple(v if c is keep else value_of(c) for c in g.deps))
            if t is None:
                return None
            entries[v] = t.reshape(-1)[pos]
        return keep, entries

    def _choose(d: Any, chance: dict) -> bool | None:
        """Fork on an event whose probability given the pending draw ``d`` is ``chance[v]`` (exact, per value ``v``
        it can take): True with probability ``sum law(v) chance[v]``; ``d`` stays undrawn, its law conditioned on
        the answer (``law(v) chance[v]``, or ``law(v) (1 - chance[v])``, renormalised). None where ``d``'s law is not
        an exact row over those values (the caller reads)."""
        if d.joint is not None:
            return None                 # held jointly: its law is its joint's (_joint_decision decides on those)
        if d._ready and callable(d.law):
            d.law = d.law()             # its law, computed now (reading what it depends on), as a read would
        law = d.law
        if type(law) is not tuple or len(law) <= max(chance) or \
                any(law[v] != 0 for v in range(len(law)) if v not in chance):
            return None
        zero = Fraction(0)
        if all(type(c) is bool for c in chance.values()):     # an answer fixed by the value: sums of the law
            yes = sum((law[v] for v, c in chance.items() if c), zero)
            no = sum((law[v] for v, c in chance.items() if not c), zero)
        else:
            yes = sum((law[v] * chance[v] for v in chance), zero)
            no = sum((law[v] * (1 - chance[v]) for v in chance), zero)
        if no == 0 or yes == 0:
            return no == 0              # certain: nothing forked, nothing narrowed
        total = yes + no
        answer = d.rng.draw_now((yes / total, no / total)) == 0
        mass = yes if answer else no
        weight = {v: (c if answer else 1 - c) for v, c in chance.items()}
        d.law = tuple(zero if not law[i] or i not in weight or not weight[i] else
                      law[i] / mass if weight[i] is True or weight[i] == 1 else law[i] * weight[i] / mass
                      for i in range(len(law)))
        d.domain = [v for v in chance if d.law[v] > 0]
        return answer

    def _joint_decision(g: Any, pos: int, chance: Any) -> tuple | None:
        """A decision on entry ``pos`` of group ``g``'s tensors that depends on several undrawn draws (or on one held
        jointly, or one whose law is indexed by other undrawn draws), forked on its answer with those draws held
        jointly (:mod:`.joint_draws`); ``chance(entry)`` is the answer's probability given the entry's value (a 0-d
        tensor), a bool where the value decides it. Returns ``(answer, cells, values)``: the undrawn draws the entry
        depends on and, per assignment of values to them, the entry's value (a 0-d tensor); None where that does not
        apply (one draw alone: :func:`_last_undrawn` and :func:`_choose` decide; no joint; a world missing)."""
        undrawn = [c for c in g.deps if not c[0].drawn]
        if not undrawn:
            return None
        if len(undrawn) == 1 and undrawn[0][0].joint is None and not _joint.conditional(undrawn[0][0]):
            return None
        joint = _joint.join(undrawn)
        if joint is None:
            return None
        where = [(None, value_of(c)) if c[0].drawn else (joint.column(c[0]), None) for c in g.deps]
        mine = [j for j, (i, _) in enumerate(where) if i is not None]     # the undrawn deps' places in a world's key
        entries: dict = {}
        chances: dict = {}
        per: dict = {}
        for a in joint.table:
            key = tuple(a[i] if i is not None else v for i, v in where)
            if key not in entries:
                t = g.worlds.get(key)
                if t is None:
                    return None
                entries[key] = t.reshape(-1)[pos]
                chances[key] = chance(entries[key])
            per[a] = chances[key]
        answer = joint.decide(per)
        values = {tuple(key[j] for j in mine): e for key, e in entries.items()}
        return answer, undrawn, values

    def live(x: Any) -> bool:
        """Whether ``x`` is a lazy-worlds tensor not read yet.

        >>> live(torch.zeros(1))
        False
        """
        return type(x) is LazyWorldsTensor and _live(x)

    def entry_decision(x: Any, index: int, chance: Any, read: bool = False) -> tuple:
        """A decision on entry ``index`` (row-major) of the lazy-worlds tensor ``x`` whose probability, given the
        entry's value ``f`` (a float), is ``chance(f)`` (exact): a comparison with a lazy uniform
        (:mod:`.torch_rng`). ``("value", f)`` where the entry is read (nothing pending, or the decision cannot be
        made jointly): the caller decides on ``f``; else ``("decided", answer, cells, values)``: the branch forked
        on the answer, the draws ``cells`` the entry depends on pending with their law conditioned on it (one draw
        narrowed, or several held jointly), ``values[vs]`` the entry's value where those draws are ``vs`` (a tuple,
        for the caller to narrow its own randomness once they are read). ``read``: the entry read, whatever
        applies."""
        g = x._groups[int(x._gi.reshape(-1)[index])]
        pos = int(x._gp.reshape(-1)[index])
        if not read:
            joint = _joint_decision(g, pos, lambda e: chance(float(_disabled(torch.Tensor.item, (), (e,), {}))))
            if joint is not None:
                answer, cells, entries = joint
                return "decided", answer, cells, {k: float(_disabled(torch.Tensor.item, (), (e,), {}))
                                                  for k, e in entries.items()}
        split = _last_undrawn(g, pos) if not read else None
        if split is not None:
            keep, entries = split
            values = {v: float(_disabled(torch.Tensor.item, (), (e,), {})) for v, e in entries.items()}
            answer = _choose(keep[0], {v: chance(f) for v, f in values.items()})
            if answer is not None:
                return "decided", answer, [keep], {(v,): f for v, f in values.items()}
        t = g.worlds[tuple(value_of(c) for c in g.deps)]
        return "value", float(_disabled(torch.Tensor.item, (), (t.reshape(-1)[pos],), {}))

    # an operation on pending draws that lazy_draws would read its operands for: run per world here, read where
    # that does not apply
    _lazy_draws_module.WORLDS_DISPATCH = _dispatch
    _lazy_draws_module.FORCE_IN_SLICES = force_in_slices

    def _known_values(args: tuple) -> tuple | None:
        """``args`` with each live lazy-worlds tensor replaced by its value, where none depends on an undrawn draw
        (and no other lazy operand takes part); None otherwise."""
        out = []
        for a in args:
            if type(a) is LazyWorldsTensor and _live(a):
                if any(not c[0].drawn for g in a._groups for c in g.deps):
                    return None
                out.append(_plain(a, {}))
            elif type(a) is LazyCategoricalTensor or isinstance(a, (list, tuple, dict)):
                return None
            else:
                out.append(a)
        return tuple(out)

    def _write_drawn(items: Any) -> None:
        for a in items:
            if type(a) is LazyCategoricalTensor:
                if not a._read and not _pending(a):
                    _force_draws(a)
            elif isinstance(a, (list, tuple)):
                _write_drawn(a)

    def _any_live(items: Any) -> bool:
        for a in items:
            if type(a) is LazyWorldsTensor and _live(a):
                return True
            if type(a) is LazyCategoricalTensor and _pending(a):
                return True
            if isinstance(a, (list, tuple)) and _any_live(a):
                return True
        return False

    def _pending(x: Any) -> bool:
        return not x._read and not x._fam.written and any(not c[0].drawn for c in x._cells.reshape(-1))

    def _positions(x: Any) -> Any:
        n = int(x._gi.size)
        return torch.arange(n, dtype=torch.int64).reshape(tuple(x._gi.shape))

    def _view(func: Any, name: str, x: Any, args: tuple, kwargs: dict) -> Any:
        """A view or reshape of ``x``: its entries mapped through positions, on a view of its storage (its family)
        where torch makes one, on a storage of its own where torch copies."""
        out = _disabled(func, (), args, kwargs)
        if out is x:
            return x
        mapped = _mapped(name, x, out, args, kwargs)
        if mapped is not None:
            gi, gp = mapped
            ptr = _disabled(torch.Tensor.untyped_storage, (), (x,), {}).data_ptr()
            return _keep_used(x, gi, gp, out, out.untyped_storage().data_ptr() == ptr)
        pieces = _pieces(name, x, out, args, kwargs)
        if pieces is not None:
            ptr = _disabled(torch.Tensor.untyped_storage, (), (x,), {}).data_ptr()
            made = [_keep_used(x, gi, gp, o, o.untyped_storage().data_ptr() == ptr) for (gi, gp), o in zip(pieces, out)]
            return tuple(made) if type(out) is tuple else made
        pos_args = (_positions(x),) + tuple(args[1:])
        pos_kwargs = {k: v for k, v in kwargs.items() if k not in ("dtype", "memory_format")}
        try:
            where = _disabled(func, (), pos_args, pos_kwargs)
        except Exception:       # noqa: BLE001 - an op the positions do not follow: computed per world instead
            return NotImplemented
        if name == "__iter__":
            out, where = list(out), list(where)
        many = isinstance(out, (tuple, list))
        outs, wheres = (list(out), list(where)) if many else ([out], [where])
        if len(outs) != len(wheres):
            return NotImplemented
        ptr = _disabled(torch.Tensor.untyped_storage, (), (x,), {}).data_ptr()
        made = []
        for o, w in zip(outs, wheres):
            if not isinstance(o, torch.Tensor) or not isinstance(w, torch.Tensor) or tuple(o.shape) != tuple(w.shape):
                return NotImplemented
            idx = w.reshape(-1).numpy()
            gi, gp = x._gi.reshape(-1)[idx].reshape(tuple(o.shape)), x._gp.reshape(-1)[idx].reshape(tuple(o.shape))
            made.append(_keep_used(x, gi, gp, o, o.untyped_storage().data_ptr() == ptr))
        if not many:
            return made[0]
        if name == "__iter__":
            return iter(made)
        return type(out)(made) if isinstance(out, tuple) and type(out) is not tuple else tuple(made) \
            if isinstance(out, tuple) else made

    def _keep_used(x: Any, gi: np.ndarray, gp: np.ndarray, out: Any, shared: bool) -> Any:
        """A lazy-worlds tensor on ``out`` of the entries ``(gi, gp)`` of ``x``'s groups, keeping only the groups
        used; in ``x``'s family where ``out`` shares its storage."""
        if len(x._groups) == 1:
            groups = x._groups
        else:
            used = sorted(set(gi.reshape(-1).tolist()))
            if len(used) != len(x._groups):
                remap = np.full(len(x._groups), -1, dtype=np.int64)
                remap[used] = np.arange(len(used))
                groups = tuple(x._groups[i] for i in used)
                gi = remap[gi]
            else:
                groups = x._groups
        return _wrap(groups, gi, gp, out, x._fam if shared else None)

    #: views and copies that list the entries in the same (row-major) order, only in a new shape
    _IN_ORDER = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "unflatten", "view_as", "reshape_as",
                           "contiguous", "detach", "clone"})

    def _mapped(name: str, x: Any, out: Any, args: tuple, kwargs: dict) -> tuple | None:
        """``(gi, gp)`` of a view whose entries numpy picks the same way without positions (a reshape keeping the
        order, basic indexing); None: the general path decides."""
        if not isinstance(out, torch.Tensor):
            return None
        shape = tuple(out.shape)
        if name in _IN_ORDER and out.numel() == x._gi.size and not any(
                isinstance(a, torch.dtype) for a in (*args[1:], *kwargs.values())):
            return x._gi.reshape(shape), x._gp.reshape(shape)
        if name == "__getitem__" and len(args) == 2 and not kwargs and _basic(args[1]):
            idx = args[1] if isinstance(args[1], tuple) else (args[1],)
            idx = idx if Ellipsis in idx else idx + (Ellipsis,)
            try:
                gi, gp = x._gi[idx], x._gp[idx]
            except (IndexError, TypeError, ValueError):
                return None
            if gi.shape == shape:
                return np.asarray(gi), np.asarray(gp)
        return None

    def _pieces(name: str, x: Any, out: Any, args: tuple, kwargs: dict) -> list | None:
        """``[(gi, gp)]`` per piece of a split along one dimension (``split``, ``chunk``, consecutive slices, or
        ``unbind``, one index each), read off the pieces' own shapes; None: the general path decides."""
        if name not in ("split", "chunk", "unbind") or type(out) not in (tuple, list) or not out or \
                not all(type(o) is torch.Tensor for o in out):
            return None
        at = 1 if name == "unbind" else 2
        dim = args[at] if len(args) > at else kwargs.get("dim", 0)
        ndim = x._gi.ndim
        if type(dim) is not int or not -ndim <= dim < ndim:
            return None
        dim %= ndim
        full = x._gi.shape
        if name == "unbind":
            if len(out) != full[dim] or any(tuple(o.shape) != full[:dim] + full[dim + 1:] for o in out):
                return None
            return [(np.take(x._gi, i, axis=dim), np.take(x._gp, i, axis=dim)) for i in range(len(out))]
        sizes = [int(o.shape[dim]) if o.dim() == ndim else -1 for o in out]
        if sum(sizes) != full[dim] or min(sizes) < 0 or any(
                tuple(o.shape[:dim]) + tuple(o.shape[dim + 1:]) != full[:dim] + full[dim + 1:] for o in out):
            return None
        cuts = list(itertools.accumulate(sizes))[:-1]
        return list(zip(np.split(x._gi, cuts, axis=dim), np.split(x._gp, cuts, axis=dim)))

    def _operand_groups(a: Any, found: dict) -> Any:
        """Collect the lazy operands' draws (``found``: key -> cell, in order met); a pending-draws tensor becomes a
        function of them. Returns a function ``assign -> ordinary value`` or None for an ordinary operand; raises
        _NotDeferred where an operand's draws have no known set of values."""
        if type(a) is LazyWorldsTensor:
            if not _live(a):
                return None
            for g in a._groups:
                for c in g.deps:
                    if not c[0].drawn:
                        found.setdefault(_key(c), c)
            return lambda assign, a=a: _plain(a, assign)
        if type(a) is LazyCategoricalTensor:
            if not _pending(a):
                return None
            cells = list(a._cells.reshape(-1))
            for c in cells:
                if not c[0].drawn:
                    if domain(c) is None:
                        raise _NotDeferred
                    found.setdefault(_key(c), c)
            shape = tuple(_disabled(torch.Tensor.size, (), (a,), {}))
            dtype = a.dtype

            def build(assign: dict, cells: list = cells) -> Any:
                vals = [assign[_key(c)] if _key(c) in assign else value_of(c) for c in cells]
                return torch.tensor(vals, dtype=dtype).reshape(shape)
            return build
        if isinstance(a, (list, tuple)):
            parts = [_operand_groups(x, found) for x in a]
            if all(p is None for p in parts):
                return None
            kind = type(a)

            def seq(assign: dict, parts: list = parts, items: Any = a) -> Any:
                made = [p(assign) if p is not None else x for p, x in zip(parts, items)]
                return made if kind is list else tuple(made)
            return seq
        return None

    def _collect(a: Any, found: dict) -> None:
        """What :func:`_operand_groups` collects of ``a`` into ``found`` (the same draws, in the same order, the same
        _NotDeferred), without making its functions: a memoised operation needs none."""
        if type(a) is LazyWorldsTensor:
            if _live(a):
                for g in a._groups:
                    for c in g.deps:
                        if not c[0].drawn:
                            found.setdefault(_key(c), c)
        elif type(a) is LazyCategoricalTensor:
            if _pending(a):
                for c in a._cells.reshape(-1):
                    if not c[0].drawn:
                        if domain(c) is None:
                            raise _NotDeferred
                        found.setdefault(_key(c), c)
        elif isinstance(a, (list, tuple)):
            for x in a:
                _collect(x, found)

    class _NotDeferred(Exception):
        """An operand whose draws cannot be enumerated here: the operation reads its operands."""

    def _storages(items: Any, out: set) -> None:
        for a in items:
            if isinstance(a, torch.Tensor):
                out.add(_disabled(torch.Tensor.untyped_storage, (), (a,), {}).data_ptr())
            elif isinstance(a, (list, tuple)):
                _storages(a, out)

    def _domains(cells: list) -> list | None:
        """The values each draw can take, or None where their combinations (the worlds) are more than WORLDS."""
        domains: list[Any] = [domain(c) for c in cells]
        count = 1
        for d in domains:
            count *= len(d)
        return None if count > WORLDS else domains

    def _read_then_run(func: Any, args: tuple, kwargs: dict) -> Any:
        _force_all(args)
        _force_all(tuple(kwargs.values()))
        return _disabled(func, (), args, kwargs)

    def _compute(func: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``func`` once per world of its operands' draws; see the module docstring for when it reads instead."""
        found: dict = {}
        try:
            for a in args:
                _collect(a, found)
            for v in kwargs.values():
                _collect(v, found)
        except _NotDeferred:
            return _read_then_run(func, args, kwargs)
        if found:
            cells = list(found.values())
            domains = _domains(cells)
            keys = [_key(c) for c in cells]
            # a memoised operation has every lazy-worlds operand of one group: never one _groupwise takes
            memo, tables = _memo_key(func, args, kwargs, keys, domains) if domains is not None else (None, [])
            if memo is not None:
                try:
                    hit = _MEMO.get(memo)
                except TypeError:           # an unhashable operand key
                    memo, tables, hit = None, [], None
                if hit is not None and len(hit[0]) == len(tables) and all(a is b for a, b in zip(hit[0], tables)):
                    # the same operation on the same tables of worlds, met on an earlier branch: its outcome as it was
                    return _realise(hit[1], cells, func, args, kwargs)
        # the operands as functions of the draws (what _collect met, in the same order)
        arg_fns = [_operand_groups(a, found) for a in args]
        kw_fns = {k: _operand_groups(v, found) for k, v in kwargs.items()}
        if not found:
            # nothing pending any more (every draw drawn): plain torch on the values, the operands left as they are
            # (reading one would draw its whole family, other positions' draws included)
            a_w = tuple(f({}) if f is not None else a for f, a in zip(arg_fns, args))
            k_w = {k: (f({}) if f is not None else kwargs[k]) for k, f in kw_fns.items()}
            res = _disabled(func, (), a_w, k_w)
            if func not in _FRESH:
                mine: set = set()
                _storages(a_w, mine)
                _storages(tuple(k_w.values()), mine)
                if _aliases(res, mine):
                    return _read_then_run(func, args, kwargs)
            return res
        if memo is None:
            grouped = _groupwise(func, args, kwargs, arg_fns, kw_fns)
            if grouped is not None:
                return grouped
        if domains is None:
            return _read_then_run(func, args, kwargs)
        results = {}
        single = _single(args, kwargs, arg_fns, kw_fns, keys)
        worlds = single[1].worlds.items() if single is not None else \
            ((values, None) for values in itertools.product(*domains))
        for values, tensor in worlds:
            if tensor is not None:      # one lazy operand, one group over exactly these draws: its tensors as they are
                i, x = single[0], single[2]
                w = tensor if tuple(tensor.shape) == x._gi.shape else tensor.reshape(x._gi.shape)
                a_w, k_w = args[:i] + (w,) + args[i + 1:], kwargs
            else:
                assign = dict(zip(keys, values))
                a_w = tuple(f(assign) if f is not None else a for f, a in zip(arg_fns, args))
                k_w = {k: (f(assign) if f is not None else kwargs[k]) for k, f in kw_fns.items()}
            try:
                res = _disabled(func, (), a_w, k_w)
            except Exception:       # noqa: BLE001 - plain torch raises it (or not) in the loop's own world
                return _remember(memo, tables, _READ, cells, func, args, kwargs)
            # a result on an operand's storage (the operand itself, a view of it) aliases it in plain torch: read
            # (checked while this world's operands are alive: a freed one's address may be reused, by chance)
            if func not in _FRESH:
                mine = set()
                _storages(a_w, mine)
                _storages(tuple(k_w.values()), mine)
                if _aliases(res, mine):
                    return _remember(memo, tables, _READ, cells, func, args, kwargs)
            results[values] = res
        return _remember(memo, tables, _plan(results), cells, func, args, kwargs)

    #: an operation's outcome that reads its operands (a result not alike in every world, an error in one, ...)
    _READ = ("read",)

    #: (operation, operand position, the operand's table of worlds, its shape, the other operands) -> (that table,
    #: the outcome's plan): the operations on the stand-ins' tables repeat from branch to branch
    _MEMO: dict = {}

    def _memo_put(key: Any, value: Any) -> None:
        if len(_MEMO) > 1 << 14:
            _MEMO.clear()
        _MEMO[key] = value

    def _remember(memo: Any, tables: list, plan: Any, cells: list, func: Any, args: tuple, kwargs: dict) -> Any:
        if memo is not None:
            _memo_put(memo, (tuple(tables), plan))
        return _realise(plan, cells, func, args, kwargs)

    def _scalar_key(a: Any) -> Any:
        """A hashable key for an operand that is an immutable Python value (its type included: 1, 1.0 and True
        are equal keys otherwise); None for anything else (a tensor, a list)."""
        if a is None or type(a) in (int, float, bool, str, torch.dtype, torch.device, torch.Size):
            return (type(a), a)
        if type(a) is slice:
            return (slice, _scalar_key(a.start), _scalar_key(a.stop), _scalar_key(a.step))
        if type(a) is tuple:
            keys = tuple(_scalar_key(x) for x in a)
            return None if any(k is None for k in keys) else (tuple, keys)
        if a is Ellipsis:
            return (type(a),)
        return None

    def _operand_key(a: Any, index: dict, tables: list) -> Any:
        """A key for an operand of a memoised operation: a lazy-worlds tensor of one table (its table's identity,
        shape, and where its draws sit among the operation's), a pending-draws tensor (its shape, dtype and each
        entry's draw position or known value), an immutable Python value; None for anything else (an ordinary
        tensor can be written between branches)."""
        if type(a) is LazyWorldsTensor:
            if not _live(a) or not a._whole:
                return None
            g = a._groups[0]
            tables.append(g.worlds)
            return ("w", id(g.worlds), a._gi.shape,
                    tuple(index[k] if k in index else ("v", value_of(c)) for k, c in zip(g.keys, g.deps)))
        if type(a) is LazyCategoricalTensor:
            if not _pending(a):
                return None
            return ("c", a._cells.shape, a.dtype, tuple(index[_key(c)] if _key(c) in index else ("v", value_of(c))
                                                        for c in a._cells.reshape(-1)))
        if isinstance(a, torch.Tensor):
            return None
        if type(a) in (list, tuple) and any(isinstance(x, torch.Tensor) for x in a):
            keys = tuple(_operand_key(x, index, tables) for x in a)
            return None if any(k is None for k in keys) else (type(a), keys)
        return _scalar_key(a)

    def _memo_key(func: Any, args: tuple, kwargs: dict, keys: list, domains: list) -> tuple:
        """The key of an operation over tables of worlds (and the tables, kept with the entry so that their identity
        stays theirs), or (None, [])."""
        index = {k: j for j, k in enumerate(keys)}
        tables: list = []
        parts = []
        for a in args:
            k = _operand_key(a, index, tables)
            if k is None:
                return None, []
            parts.append(k)
        for name in sorted(kwargs):
            k = _operand_key(kwargs[name], index, tables)
            if k is None:
                return None, []
            parts.append((name, k))
        if not tables:
            return None, []
        return (func, tuple(parts), tuple(tuple(d) for d in domains)), tables   # hashed by the caller's lookup

    def _plan(results: dict) -> Any:
        """What per-world results become, independent of which draws they were computed over: ``("one", kept
        positions of the draws, table)`` for tensors alike in every world (the draws that change no bit dropped),
        ``("plain", tensor)`` where none is kept, ``("many", container type, plans)`` for tuples of them; _READ
        where they are not alike."""
        first = next(iter(results.values()))
        if isinstance(first, torch.Tensor):
            return _plan_one({k: r for k, r in results.items()})
        if isinstance(first, (tuple, list)) and first and all(isinstance(r, (tuple, list)) and len(r) == len(first)
                                                                for r in results.values()):
            parts = []
            for i in range(len(first)):
                part = _plan_one({k: r[i] for k, r in results.items()})
                if part is _READ:
                    return _READ
                parts.append(part)
            return ("many", list if isinstance(first, list) else type(first), parts)
        return _READ

    def _plan_one(worlds: dict) -> Any:
        ref = next(iter(worlds.values()))
        for t in worlds.values():
            if type(t) is not torch.Tensor or t.shape != ref.shape or t.dtype != ref.dtype or \
                    t.device != ref.device or t.requires_grad or t.layout != torch.strided or t.is_cuda:
                return _READ
        n = len(next(iter(worlds)))
        kept = list(range(n))
        # a draw the results do not depend on (the same bits whatever its value) is dropped
        for j in range(n - 1, -1, -1):
            by_rest: dict = {}
            same = True
            for k, t in worlds.items():
                b = _bits(t)
                if by_rest.setdefault(k[:j] + k[j + 1:], b) != b:
                    same = False
                    break
            if same:
                worlds = {k[:j] + k[j + 1:]: t for k, t in worlds.items()}
                kept.pop(j)
        if not kept:
            return ("plain", next(iter(worlds.values())))
        ref = next(iter(worlds.values()))
        shape = tuple(ref.shape)
        return ("one", tuple(kept), worlds, np.zeros(shape, dtype=np.int64),
                np.arange(ref.numel(), dtype=np.int64).reshape(shape))

    def _realise(plan: Any, cells: list, func: Any, args: tuple, kwargs: dict) -> Any:
        """The lazy tensors (or the read) a plan stands for, over this call's draws ``cells``."""
        if plan is _READ:
            return _read_then_run(func, args, kwargs)
        if plan[0] == "plain":
            return plan[1].clone()           # the same in every world: an ordinary tensor of the loop's own
        if plan[0] == "one":
            _, kept, worlds, gi, gp = plan
            group = _Group(tuple(cells[j] for j in kept), worlds)
            return _wrap((group,), gi, gp, next(iter(worlds.values())).clone(), None, True)
        _, kind, parts = plan
        made = [_realise(p, cells, func, args, kwargs) for p in parts]
        return made if kind is list else (tuple(made) if kind is tuple else kind(made))

    #: element-wise functions (each entry of the result from the same entry of the tensor operand, the other
    #: operands numbers): applied to each group's tables, the entries keep their places
    _ELEMENTWISE = frozenset(f for f in (
        getattr(owner, n, None) for owner in (torch.Tensor, torch) for n in (
            "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__neg__", "__ge__", "__gt__", "__le__", "__lt__", "__eq__", "__ne__", "__pow__", "__rpow__", "add", "sub",
            "mul", "div", "true_divide", "rsub", "neg", "exp", "log", "clamp", "clip", "abs", "sqrt", "pow", "ge",
            "gt", "le", "lt", "eq", "ne", "isinf", "isnan", "isfinite", "sigmoid", "relu", "tanh")) if f is not None)
    #: functions along the last dimension (``dim=-1``): applied to each group's tables where every row of the tensor
    #: is a whole row of one group's tables
    _ROWWISE = frozenset(f for f in (
        getattr(owner, n, None) for owner in (torch.Tensor, torch, torch.nn.functional)
        for n in ("softmax", "log_softmax")) if f is not None)

    def _groupwise(func: Any, args: tuple, kwargs: dict, arg_fns: list, kw_fns: dict) -> Any:
        """An element-wise or row-wise function of one lazy-worlds tensor of several groups (a stand-in's logits of
        several positions), applied group by group: each group's worlds only, not every combination of all their
        draws; None where that does not apply."""
        lazy = [i for i, f in enumerate(arg_fns) if f is not None]
        if len(lazy) != 1 or any(f is not None for f in kw_fns.values()):
            return None
        i = lazy[0]
        x = args[i]
        if type(x) is not LazyWorldsTensor or len(x._groups) < 2:
            return None
        if any(isinstance(a, torch.Tensor) for j, a in enumerate(args) if j != i) or \
                any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return None
        try:
            elementwise = func in _ELEMENTWISE
            rowwise = func in _ROWWISE
        except TypeError:
            return None
        if not elementwise and not rowwise:
            return None
        if rowwise:
            dim = args[i + 1] if len(args) > i + 1 else kwargs.get("dim")
            ndim = x._gi.ndim
            if i != 0 or type(dim) is not int or dim not in (-1, ndim - 1) or ndim == 0:
                return None
            v = x._gi.shape[-1]
            gi2, gp2 = x._gi.reshape(-1, v), x._gp.reshape(-1, v)
            if not ((gi2 == gi2[:, :1]).all() and (gp2 - gp2[:, :1] == np.arange(v)).all() and
                    (gp2[:, 0] % v == 0).all()):
                return None
            for g in x._groups:
                if next(iter(g.worlds.values())).shape[-1] != v:
                    return None
        groups = []
        for g in x._groups:
            memo = (_groupwise, func, i, tuple(_scalar_key(a) for j, a in enumerate(args) if j != i),
                    tuple((k, _scalar_key(kwargs[k])) for k in sorted(kwargs)), id(g.worlds))
            hit = _MEMO.get(memo)
            if hit is not None and hit[0] is g.worlds:
                worlds = hit[1]
            else:
                worlds = {}
                for key, t in g.worlds.items():
                    a_w = args[:i] + (t,) + args[i + 1:]
                    if rowwise:
                        a_w = (t, -1) + args[2:] if len(args) > 1 else (t,)
                    try:
                        res = _disabled(func, (), a_w, dict(kwargs, dim=-1) if rowwise and "dim" in kwargs
                                        else kwargs)
                    except Exception:       # noqa: BLE001 - computed over the loop's own world instead
                        return None
                    if type(res) is not torch.Tensor or res.shape != t.shape:
                        return None
                    worlds[key] = res
                _memo_put(memo, (g.worlds, worlds))
            groups.append(_Group(g.deps, worlds))
        dtype = next(iter(groups[0].worlds.values())).dtype
        if any(next(iter(g.worlds.values())).dtype != dtype for g in groups):
            return None
        backing = torch.empty(x._gi.shape, dtype=dtype)
        return _wrap(tuple(groups), x._gi, x._gp, backing, None, x._whole)

    def _single(args: tuple, kwargs: dict, arg_fns: list, kw_fns: dict, keys: list) -> Any:
        """``(position, group, tensor)`` where the only lazy operand is a positional lazy-worlds tensor made of one
        group whose draws are exactly ``keys`` (none drawn since), in order; else None."""
        lazy = [i for i, f in enumerate(arg_fns) if f is not None]
        if len(lazy) != 1 or any(f is not None for f in kw_fns.values()):
            return None
        x = args[lazy[0]]
        if type(x) is not LazyWorldsTensor or not x._whole or list(x._groups[0].keys) != keys:
            return None
        return lazy[0], x._groups[0], x

    def _aliases(res: Any, storages: set) -> bool:
        if isinstance(res, torch.Tensor):
            return _disabled(torch.Tensor.untyped_storage, (), (res,), {}).data_ptr() in storages
        if isinstance(res, (tuple, list)):
            return any(_aliases(r, storages) for r in res)
        return False

    def _bits(t: Any) -> tuple:
        """A tensor's dtype, shape and bytes (-0.0 and 0.0 differ, a NaN equals itself)."""
        return (t.dtype, tuple(t.shape), t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())

    def lazy_logits(rows: list, shape: tuple, dtype: Any) -> Any:
        """A lazy-worlds tensor of ``shape`` (last dimension the vocabulary) from its rows in row-major order: each
        an ordinary tensor, or a pair (cells its value depends on, ``values tuple -> tensor``).

        >>> import torch
        >>> lazy_logits([torch.tensor([0.0, 1.0])], (1, 2), torch.float64).tolist()
        [[0.0, 1.0]]
        """
        # the same rows (the stand-ins' memoised tensors and tables of worlds) met on an earlier branch: the layout and
        # the backing as they were, the constant rows' group shared (its table's identity keys later memos)
        made = [r if isinstance(r, torch.Tensor) else r[1] for r in rows]
        key = (tuple(id(m) for m in made), shape, dtype)
        hit = _LOGITS.get(key)
        if hit is not None and len(hit[0]) == len(made) and all(a is b for a, b in zip(hit[0], made)):
            _, shared, gi, gp, backing = hit
            if shared is None:                  # every row constant: an ordinary tensor
                return backing.clone()
            groups = []
            for r in rows:
                if not isinstance(r, torch.Tensor):
                    groups.append(_Group(tuple(r[0]), r[1]))
                elif not any(g is shared for g in groups):
                    groups.append(shared)
            return _wrap(tuple(groups), gi, gp, backing.clone(), None)
        groups, gi_rows, first = [], [], []
        const = None
        for r in rows:
            if isinstance(r, torch.Tensor):
                if const is None:
                    const = len(groups)
                    groups.append(_Group((), {(): None}))
                    const_rows: list = []
                gi_rows.append((const, len(const_rows)))
                const_rows.append(r)
                first.append(r)
            else:
                deps, worlds = r
                gi_rows.append((len(groups), 0))
                groups.append(_Group(tuple(deps), worlds))
                first.append(next(iter(worlds.values())))
        v = shape[-1]
        if const is not None:
            groups[const].worlds[()] = torch.stack(const_rows).to(dtype)
        gi = np.empty((len(rows), v), dtype=np.int64)
        gp = np.empty((len(rows), v), dtype=np.int64)
        for i, (g, r) in enumerate(gi_rows):
            gi[i] = g
            gp[i] = np.arange(v) + r * v
        backing = torch.stack(first).to(dtype).reshape(shape)
        if len(_LOGITS) > 1 << 12:
            _LOGITS.clear()
        if all(len(g.deps) == 0 for g in groups):
            _LOGITS[key] = (made, None, None, None, backing.clone())
            return backing
        gi, gp = gi.reshape(shape), gp.reshape(shape)
        # the constant rows' group, kept for the next branch's call (None: none)
        _LOGITS[key] = (made, groups[const] if const is not None else _NO_GROUP, gi, gp, backing.clone())
        return _wrap(tuple(groups), gi, gp, backing, None)

    #: (the rows' identities, shape, dtype) -> (the rows, the constant rows' group, entries' groups and positions,
    #: a copy of the backing): a stand-in's forward on the same contexts repeats from branch to branch
    _LOGITS: dict = {}
    _NO_GROUP = _Group((), {})

    def multinomial_of_worlds(rng: Any, probs: Any, num_samples: int, replacement: bool) -> Any:
        """``torch.multinomial`` of lazy weights: a pending draw per row whose law is the row's in the loop's world,
        computed when the draw is read; None where that does not apply (the caller reads the weights and goes on).

        Applies to one sample per row, weights valid in every world (torch's errors are raised, or not, by the
        caller on the weights of the loop's own world).
        """
        from .lazy_draws import _lazy
        if type(probs) is not LazyWorldsTensor or not _live(probs) or int(num_samples) != 1:
            return None
        by_rows = _multinomial_by_rows(rng, probs)
        if by_rows is not NotImplemented:
            return by_rows
        found: dict = {}
        try:
            fn = _operand_groups(probs, found)
        except _NotDeferred:
            return None
        cells = list(found.values())
        domains = _domains(cells)
        if fn is None or not cells or domains is None:
            return None
        keys = [_key(c) for c in cells]
        single = _single((probs,), {}, [fn], {}, keys)
        memo = (multinomial_of_worlds, id(single[1].worlds), probs._gi.shape) if single is not None else None
        hit = _MEMO.get(memo) if memo is not None else None
        if hit is not None and hit[0] is single[1].worlds:
            if hit[1] is None:
                return None
            table, positive, shape = hit[1]
        else:
            table, positive, shape = {}, None, None
            for values in itertools.product(*domains):
                w = fn(dict(zip(keys, values)))
                arr = w.detach().cpu().to(torch.float64).numpy()   # exact for every float dtype (bfloat16: no .numpy())
                if arr.ndim not in (1, 2) or not np.isfinite(arr).all() or (arr < 0).any() or \
                        (arr.reshape(-1, arr.shape[-1]).sum(axis=-1) <= 0).any():
                    table = None
                    break
                table[values] = arr           # its exact rows are made when a draw is read (most never are)
                rows = arr.reshape(-1, arr.shape[-1]) > 0
                positive = rows if positive is None else positive | rows
                shape = arr.shape[:-1] + (1,) if arr.ndim > 1 else (1,)
            if memo is not None:
                _memo_put(memo, (single[1].worlds, None if table is None else (table, positive, shape)))
            if table is None:
                return None
        field = rng._field
        exact = getattr(field, "Q", None) is Fraction
        n_rows = positive.shape[0]
        out = np.empty((n_rows, 1), dtype=object)
        for r in range(n_rows):
            support = [int(i) for i in np.nonzero(positive[r])[0]]

            def law(r: int = r) -> Any:
                values = tuple(value_of(c) for c in cells)      # the draws the weights depend on, in the order met
                row = exact_rows(table[values])[0][r][1]
                return row if exact else tuple(field.convert(x) for x in row)
            d = PendingDraw.of_law(rng, law)
            d.domain = support
            if exact:       # its law as a row indexed by those draws' values: it can be held jointly with them
                d.given = (tuple(cells), lambda values, r=r: exact_rows(table[values])[0][r][1])
            out[r, 0] = (d, 0)
        return _lazy(out.reshape(shape), torch.zeros(shape, dtype=torch.int64), None)
    def _rows_of(g: Any) -> Any:
        """A group's tables as float64 weight rows ``[n, V]`` per world and, per row, the values positive in some
        world (a draw's domain); None where some world's rows are not valid weights (memoised on the table)."""
        memo = (_rows_of, id(g.worlds))
        hit = _MEMO.get(memo)
        if hit is not None and hit[0] is g.worlds:
            return hit[1]
        table: dict[Any, np.ndarray] = {}
        positive: Any = None
        valid = True
        for key, t in g.worlds.items():
            arr = t.detach().cpu().to(torch.float64).numpy()   # exact for every float dtype (bfloat16: no .numpy())
            arr = arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1)
            if not np.isfinite(arr).all() or (arr < 0).any() or (arr.sum(axis=-1) <= 0).any():
                valid = False
                break
            table[key] = arr
            positive = arr > 0 if positive is None else positive | (arr > 0)
        out = None if not valid else (table, [[int(i) for i in np.nonzero(row)[0]] for row in positive])
        _memo_put(memo, (g.worlds, out))
        return out

    #: (shape, entries' groups, entries' positions) -> per row of the weights ``(group index, row of its tables)``,
    #: or None where the rows are not whole rows of one group's tables (_multinomial_by_rows)
    _ROW_LAYOUTS: dict = {}

    def _row_layout(gi: Any, gp: Any) -> list | None:
        key = (gi.shape, gi.tobytes(), gp.tobytes())
        hit = _ROW_LAYOUTS.get(key, _ROW_LAYOUTS)
        if hit is not _ROW_LAYOUTS:
            return hit
        v = gi.shape[-1]
        gi2, gp2 = gi.reshape(-1, v), gp.reshape(-1, v)
        out = None
        if (gi2 == gi2[:, :1]).all() and (gp2 - gp2[:, :1] == np.arange(v)).all() and (gp2[:, 0] % v == 0).all():
            out = [(int(gi2[r, 0]), int(gp2[r, 0]) // v) for r in range(gi2.shape[0])]
        if len(_ROW_LAYOUTS) > 4096:
            _ROW_LAYOUTS.clear()
        _ROW_LAYOUTS[key] = out
        return out

    def _multinomial_by_rows(rng: Any, probs: Any) -> Any:
        """``multinomial(probs, 1)`` where every row of ``probs`` is a whole row of one group's tables (a stand-in's
        positions): each row's draw depends on its own group's draws only; NotImplemented where the rows are not so
        aligned, None where some world's weights are not valid."""
        from .lazy_draws import _lazy
        gi, gp = probs._gi, probs._gp
        if gi.ndim not in (1, 2):
            return NotImplemented
        layout = _row_layout(gi, gp)
        if layout is None:
            return NotImplemented
        v = gi.shape[-1]
        groups = probs._groups
        for g in groups:
            if next(iter(g.worlds.values())).shape[-1:] != (v,):
                return NotImplemented
        field = rng._field
        exact = getattr(field, "Q", None) is Fraction
        n_rows = len(layout)
        out = np.empty((n_rows, 1), dtype=object)
        for r, (i, k) in enumerate(layout):
            g = groups[i]
            rows = _rows_of(g)
            if rows is None:
                return None
            table, domains = rows
            if not g.deps:
                arr = next(iter(table.values()))
                weights, first = exact_rows(arr)[0][k]
                d = PendingDraw(rng, weights, first, 1, True)     # no pending draw behind it: its law
            else:
                def law(g: Any = g, k: int = k, table: dict = table) -> Any:
                    values = tuple(value_of(c) for c in g.deps)    # the draws the weights depend on, in order
                    row = exact_rows(table[values])[0][k][1]
                    return row if exact else tuple(field.convert(x) for x in row)
                d = PendingDraw.of_law(rng, law)
                d.domain = list(domains[k])
                if exact:   # its law as a row indexed by those draws' values: it can be held jointly with them
                    d.given = (g.deps, lambda values, k=k, table=table: exact_rows(table[values])[0][k][1])
            out[r, 0] = (d, 0)
        shape = (1,) if gi.ndim == 1 else (n_rows, 1)
        return _lazy(out.reshape(shape), torch.zeros(shape, dtype=torch.int64), None)
else:  # pragma: no cover
    LazyWorldsTensor = None  # type: ignore[assignment,misc]

    def force(x: Any) -> Any:
        return x

    def live(x: Any) -> bool:
        return False

    def force_in_slices(items: Any) -> None:
        return None
