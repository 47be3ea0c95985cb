"""The :class:`Adapter` base class, below both the registry (:mod:`.registry`) and every adapter module.

The registry (``get_adapter``, ``ADAPTERS``) imports the adapter modules, and each adapter module
subclasses :class:`Adapter`: the base class lives here, so neither side imports the other.

Precision: a float sampler's law carries the rounding of the precision it computes in. The
audit measures that rounding with a correct reference sampler run *at the same precision*
(:meth:`Adapter.reference_at`): the precision an adapter declares (``precision``, or a ``dtype``
attribute), else the lowest float precision seen in the sampler's inputs
(:func:`float_precision`) and in the numbers it compares its uniforms with.

>>> class Mine(Adapter):
...     name, family = "mine", "chain"
>>> Mine().reference_rule.name
'speculative_sampling'
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import threading
from types import SimpleNamespace
from fractions import Fraction
from typing import Any, Callable, Hashable, Iterator, Self

import numpy as np

from ..._numbers import PRECISIONS   # float precisions from the coarsest to the finest
from ...errors import ExactSpecError
from ...laws import memoised
from ...protocols import Law, Rng, Step

__all__ = ["Adapter", "PRECISIONS", "float_precision", "precision_of", "cast_floats", "at_precision", "lowest"]


def precision_of(x: Any) -> str | None:
    """The float precision of one numpy array or scalar or torch tensor (None for anything else).

    A ``types.SimpleNamespace`` is read by its ``dtype`` attribute (how :meth:`Adapter.declared_precision`
    asks about a dtype); one without a ``dtype`` (sampling metadata a vLLM-style sampler is handed) has none.

    >>> precision_of(np.float32(0.5)), precision_of(np.zeros(2)), precision_of(0.5), precision_of(np.arange(2))
    ('float32', 'float64', None, None)
    >>> precision_of(SimpleNamespace(all_greedy=False)) is None
    True
    """
    if isinstance(x, (np.ndarray, np.generic)):
        dtype = x.dtype
    elif isinstance(x, SimpleNamespace):
        dtype = getattr(x, "dtype", None)
        if dtype is None:
            return None
    else:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(x, torch.Tensor):
            return None
        dtype = x.dtype
    key = (type(dtype), dtype)          # by type too: a numpy dtype compares equal to its name ("float")
    try:
        return _BY_DTYPE[key]
    except (KeyError, TypeError):       # a dtype not seen yet (or one that does not hash): spelled out
        pass
    name = str(dtype).replace("torch.", "")
    p = {"half": "float16", "float": "float32", "double": "float64"}.get(name, name) if name in (
        *PRECISIONS, "half", "float", "double") else None
    try:
        _BY_DTYPE[key] = p
    except TypeError:
        pass
    return p


#: (type of dtype, dtype) -> its precision name (or None), as :func:`precision_of` spells it out (audits ask per array)
_BY_DTYPE: dict = {}


def lowest(precisions: Any) -> str | None:
    """The coarsest of some precision names (None when there is none).

    >>> lowest({"float64", "float32"}), lowest(())
    ('float32', None)
    """
    seen = set(precisions)
    ranked = [p for p in PRECISIONS if p in seen]
    return ranked[0] if ranked else None


def _children(obj: Any) -> list:
    if isinstance(obj, (list, tuple)):
        return list(obj)
    if isinstance(obj, dict):
        return list(obj.values())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    return []


def float_precision(obj: Any, depth: int = 3) -> str | None:
    """The coarsest float precision among the arrays and tensors in ``obj`` (lists, tuples, dicts and
    dataclasses are searched ``depth`` levels deep); None when it holds no float array.

    >>> float_precision((np.zeros(2), [np.zeros(1, dtype=np.float32)], 3))
    'float32'
    """
    own = precision_of(obj)
    if own is not None or depth == 0:
        return own
    return lowest(p for p in (float_precision(c, depth - 1) for c in _children(obj)) if p)


def cast_floats(obj: Any, precision: str, depth: int = 3) -> Any:
    """``obj`` with every float numpy array or torch tensor in it cast to ``precision`` (copies; other values kept).

    >>> cast_floats([np.zeros(2), 1], "float32")[0].dtype
    dtype('float32')
    """
    if precision_of(obj) is not None:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return obj.to(getattr(torch, precision))
        if isinstance(obj, np.ndarray):
            return obj.astype(precision)
        return np.dtype(precision).type(obj)
    if depth == 0:
        return obj
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(cast_floats(c, precision, depth - 1) for c in obj)
    if isinstance(obj, dict):
        return {k: cast_floats(v, precision, depth - 1) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: cast_floats(getattr(obj, f.name), precision, depth - 1)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def at_precision(fn: Callable, precision: str) -> Callable:
    """``fn`` called with its float array and tensor arguments cast to ``precision``: a float64 reference
    sampler becomes a float32 one (and back). ``__wrapped__`` is ``fn``.

    >>> f = at_precision(lambda a: a.dtype, "float32")
    >>> f(np.zeros(3)), f.__wrapped__(np.zeros(3))
    (dtype('float32'), dtype('float64'))
    """
    @functools.wraps(fn)
    def cast(*args: Any, **kwargs: Any) -> Any:
        return fn(*cast_floats(args, precision, 4), **cast_floats(kwargs, precision, 4))
    cast.precision = precision  # type: ignore[attr-defined]
    return cast


#: per thread, the last step a call key was made for and its key
_LAST = threading.local()
#: (adapter id, call key) -> the chain arrays of that input, the laws and the adapter kept alive (ids in the key)
_ARRAYS: dict = {}


class Adapter:
    """Base class of adapters (see :mod:`exactspec.samplers.adapters.registry`).

    ``precision`` (``"float32"``, ``"float64"``, ...) declares the precision the sampler computes
    in; None (the default) lets the audit detect it (the coarsest float dtype among the arrays
    handed to the sampler and the numbers compared with its uniforms). An adapter with a
    ``dtype`` attribute (a torch or numpy dtype) declares that one.

    >>> Adapter.tokens([[3, 1, -1]])
    [3, 1]
    """

    name = "adapter"
    family = "chain"
    needs_torch = False
    reference: Callable | None = None
    #: the catalog rule the reference sampler implements (its exact law, for the rounding figure)
    reference_rule_name = "speculative_sampling"
    #: the precision the sampler computes in, when the adapter knows it (None: detected during the audit)
    precision: str | None = None
    #: whether ``call`` depends on nothing but the step's drafts and laws and the rng (sampler calls cached)
    cacheable = True
    #: whether the sampler's own torch operations are watched for casts and lifted to float64 by the float boundary
    #: (False for kernels handed their uniforms: their arithmetic is the kernel's, their fills the adapter's)
    watch_operations = True

    @property
    def reference_rule(self) -> Any:
        from ...rules import get
        return get(self.reference_rule_name) if self.reference_rule_name else None

    def declared_precision(self) -> str | None:
        """``precision``, or the precision of a ``dtype`` attribute, or None.

        >>> Adapter().declared_precision() is None
        True
        """
        if self.precision is not None:
            return self.precision
        dtype = getattr(self, "dtype", None)
        if dtype is None:
            return None
        return precision_of(SimpleNamespace(dtype=np.dtype(dtype) if isinstance(dtype, type) else dtype))

    def check_rng_model(self, rng_model: str) -> None:
        """Refuse (:class:`~exactspec.UnsupportedRngModel`, exit 2) an rng model this adapter cannot enumerate.

        An adapter whose sampler draws through the interception (numpy, torch, Python's ``random``)
        honours every model: the enumerating rng applies it to each draw. An adapter that hands its
        sampler uniforms as tensors (:class:`~.explicit_uniforms.KernelAdapter`) overrides this.

        >>> Adapter().check_rng_model("continuous") is None
        True
        """
        return None

    def resolution_floor(self, rng_model: str, *, tokens: int) -> tuple[Fraction, str] | None:
        """The TV the adapter's own enumeration may miss on an audit of ``tokens`` tokens, with why (None: exact).

        The float boundary holds the float64 run to no less than this floor
        (:func:`~exactspec.samplers.rounding.decide`'s ``tolerance``): a law the adapter
        resolves only to some precision cannot be judged finer than that.

        >>> Adapter().resolution_floor("native", tokens=2) is None
        True
        """
        return None

    def with_precision(self, precision: str) -> "Adapter | None":
        """This adapter handing the sampler its laws in ``precision``, or None when it cannot.

        The float64 run of a float32 audit (:mod:`exactspec.samplers.rounding`) hands the
        same sampler float64 laws through this. An adapter that declares no precision hands what
        it hands (numpy adapters: float64 arrays) and is returned as it is; one that declares
        another precision and does not override this returns None (the audit then casts what it
        hands up, and says the float64 run carries the input's rounding).

        >>> from exactspec.samplers import numpy_chain
        >>> numpy_chain.with_precision("float64") is numpy_chain
        True
        """
        declared = self.declared_precision()
        return self if declared is None or declared == precision else None

    def _copy_at(self, precision: str, **attrs: Any) -> Self:
        """A shallow copy declaring ``precision`` (and setting ``attrs``), its per-thread caches fresh."""
        new = copy.copy(self)
        new.precision = precision
        for k, v in attrs.items():
            setattr(new, k, v)
        if "_local" in new.__dict__:
            new.__dict__["_local"] = threading.local()
        return new

    def reference_at(self, precision: str) -> Callable | None:
        """The reference sampler computing at ``precision``: ``reference`` with its float inputs cast
        (:func:`at_precision`). Override for a reference that needs more than a cast.

        >>> from exactspec.samplers import numpy_chain
        >>> numpy_chain.reference_at("float32").__wrapped__ is numpy_chain.reference
        True
        """
        return None if self.reference is None else at_precision(self.reference, precision)

    def fast_reference(self, precision: str) -> Callable[[Any, Rng], list[int]] | None:
        """A rule ``fn(step, rng)`` whose law is exactly that of ``reference_at(precision)`` through this
        adapter, computed without the interception (faster); None: the reference runs through the pipeline."""
        return None

    def _fast_reference_tokens(self, precision: str) -> Callable[[Any, Rng], Any] | None:
        """:meth:`fast_reference`, or a rule with its law that gives each token as it is decided (a generator, so an
        engine deferring draws spreads its last draw instead of forking on it; the outcomes may come in another
        order). Internal: the sampler audit's rounding figures, which read TVs only.

        >>> from exactspec.samplers import numpy_chain
        >>> numpy_chain._fast_reference_tokens("float64") is not None
        True
        """
        return self.fast_reference(precision)

    def call_key(self, step: Any) -> tuple[Hashable, list[Law]] | None:
        """What ``call(sampler, step, rng)`` depends on besides the rng: the drafted tokens and the identities
        of the laws (a chain step: ``gamma`` claimed, ``gamma + 1`` target; a tree step: every node's token,
        parent and laws, which draws the whole tree), with the laws it names. None: not cached. Equal keys
        mean equal inputs.

        The laws themselves are kept alive by the caller's cache (``call_laws``), so an id is never reused
        while its key is held.
        """
        if not self.cacheable:
            return None
        last = _LAST.__dict__
        if last.get("step") is step:    # asked again for the same step (the audit, then the adapter's arrays)
            return last["key"]
        key = self._call_key(step)
        last["step"], last["key"] = step, key
        return key

    def _keyed(self, step: Any) -> tuple[Hashable, list[Law]]:
        """:meth:`call_key` of a step this adapter caches by (a cacheable adapter's chain or tree step): never None."""
        got = self.call_key(step)
        if got is None:
            raise ExactSpecError(f"the {self.name} adapter has no call key for a {type(step).__name__} "
                                 "(an internal error: a cacheable adapter is handed a chain or tree step)")
        return got

    @staticmethod
    def _call_key(step: Any) -> tuple[Hashable, list[Law]] | None:
        if hasattr(step, "drafts") and hasattr(step, "gamma"):
            laws: list[Law] = [step.claimed(j) for j in range(step.gamma)] + \
                [step.target(j) for j in range(step.gamma + 1)]
            return ("chain", tuple(step.drafts), tuple(map(id, laws))), laws
        if hasattr(step, "root") and hasattr(step, "children"):
            nodes: list[tuple[int, int, int, int] | None] = []
            laws = []

            def visit(n: Any, depth: int) -> None:
                for c in step.children(n):
                    nodes.append((step.token(c), depth, id(step.claimed(c)), id(step.target(c))))
                    laws.extend((step.claimed(c), step.target(c)))
                    visit(c, depth + 1)
                nodes.append(None)   # end of n's children: the tree's shape, not just its nodes
            laws.append(step.target(step.root))
            visit(step.root, 0)
            return ("tree", id(laws[0]), tuple(nodes)), laws
        return None

    @staticmethod
    def floats(law: Law) -> np.ndarray:
        """A law as float64 (memoised per law object), as a float implementation receives it."""
        return memoised("float64", law, None, lambda: np.array([float(x) for x in law], dtype=np.float64))

    def chain_arrays(self, step: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(drafted ids [gamma], claimed draft laws [gamma, V], target laws [gamma + 1, V]) in float64."""
        got = self.call_key(step) if self.cacheable else None
        if got is not None:
            # built once per input (the same key on every branch of a call): each call gets its own copies,
            # so a sampler writing into them changes nothing for the next
            key = (id(self), got[0])
            hit = _ARRAYS.get(key)
            if hit is None:
                laws, g = got[1], step.gamma
                hit = (np.array(step.drafts, dtype=np.int64), np.stack([self.floats(x) for x in laws[:g]]),
                       np.stack([self.floats(x) for x in laws[g:]]), laws, self)
                if len(_ARRAYS) >= 4096:
                    _ARRAYS.clear()
                _ARRAYS[key] = hit
            return hit[0].copy(), hit[1].copy(), hit[2].copy()
        drafts = np.array(step.drafts, dtype=np.int64)
        if got is not None:   # the step's laws, already gathered for the key
            laws, g = got[1], step.gamma
            return drafts, np.stack([self.floats(x) for x in laws[:g]]), np.stack([self.floats(x) for x in laws[g:]])
        q = np.stack([self.floats(step.claimed(j)) for j in range(step.gamma)])
        p = np.stack([self.floats(step.target(j)) for j in range(step.gamma + 1)])
        return drafts, q, p

    @staticmethod
    def tokens(out: Any) -> list[int]:
        """Emitted token ids from a sampler's return value (negative ids are padding)."""
        return [int(t) for t in np.asarray(out).ravel() if int(t) >= 0]

    def call(self, sampler: Callable, step: Any, rng: Rng) -> list[int]:  # pragma: no cover - abstract
        """Run ``sampler`` once on ``step`` (a :class:`~exactspec.protocols.Step` for a ``"chain"`` adapter, a
        :class:`~exactspec.protocols.TreeStep` for a ``"tree"`` one: each subclass names the one it takes)
        with ``rng`` behind its random draws; the tokens it emits."""
        raise NotImplementedError

