"""Thread-safe interception of every randomness source a sampler can reach while it is audited.

It is kept as one module: the patching of the global functions, the branch each thread is bound to
and the detection of escaping draws share one lock, one table of installed patches and the frame walk
that tells exactspec's own draws from the audited code's; split, each part would reach into the others'
state.

While at least one audit runs (:func:`intercepting`), the global random functions of Python's
``random``, of ``numpy.random`` (the legacy global functions) and, when torch is already
imported, of ``torch`` are replaced by *dispatchers*: patched once under a module lock, counted
per user, restored by the last user. A dispatcher looks at the **current thread** (a
``contextvars`` variable): if it is running a branch of an audit (:func:`bind`, :func:`watch`),
the draw goes to that branch's enumerating ``rng``; otherwise the original function runs
unchanged, so unrelated threads keep their real random numbers and two audits in two threads
each see only their own branches.

What the enumeration does with each draw is exact (a lazy uniform, a uniform categorical, a
draw from exact weights), or it raises :class:`~exactspec.errors.UnsupportedRandomness` naming
the function and the sampler's ``file:line``; it never falls back to a real random number.
Seeding (``random.seed``, ``np.random.seed``, ``torch.manual_seed``) and making a seeded
generator inside the sampler (``np.random.default_rng(0)``, ``random.Random(0)``) raise too: a
generator seeded at every call repeats its numbers, and auditing those as fresh draws would
hide exactly that bug. Unseeded generators made inside the sampler (``np.random.default_rng()``,
``random.Random()``, ``np.random.RandomState()``) are audited exactly.

References taken before the audit (``from random import random`` at import, ``rnd =
np.random.random``) escape the patches; :func:`watch` catches them by comparing the global
generators' states before and after each sampler call (and those of private generators it finds
in the sampler's globals, closure and defaults, :func:`private_generators`). A change is an
``UnsupportedRandomness``, never a verdict; if another thread drew from the same generator
during the call, the error says so (the audit cannot tell a sampler's worker thread from an
unrelated one, so it does not guess).

>>> import random
>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> def program(rng):
...     with bind(rng):
...         return random.random() < 0.25
>>> with intercepting():
...     law = enumerate_program(program, get_field(backend="python"), exact_floats=True)
>>> law == {True: F(1, 4), False: F(3, 4)}
True
>>> random.random.__self__ is random._inst       # restored: the module's own bound method again
True
"""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import ctypes
import functools
import itertools
import operator
import os
import random as _pyrandom
import struct
import sys
import threading
import types
from bisect import bisect_right
from fractions import Fraction
from itertools import accumulate
from typing import Any, Callable, Iterator, Sequence

from ..._heap import frozen
from ...enumerate.rng import LATTICES, NATIVE, Lattice, PathRng
from ...errors import ExactSpecError, InterceptionError, UnsupportedRandomness
from .lazy_values import APPROXIMATIONS, lazy

__all__ = ["intercepting", "bind", "watch", "current_rng", "private_generators", "EnumRandom", "user_site", "deliberate",
           "own_failure",
           "uniform_law", "fisher_yates"]

# -- per-thread state ------------------------------------------------------------------------------------

#: the enumerating rng of the branch this thread (context) is running, or None: real draws
_BRANCH: contextvars.ContextVar[Any] = contextvars.ContextVar("exactspec_branch", default=None)
#: the audit session (per-audit bookkeeping) this thread works for, or None
_SESSION: contextvars.ContextVar["Session | None"] = contextvars.ContextVar("exactspec_session", default=None)

# -- process-wide state, guarded by _LOCK ------------------------------------------------------------------

_LOCK = threading.RLock()
_USERS = 0
_INSTALLED: list[tuple[Any, str, Any, bool]] = []     # (owner, name, original, owner had it in its own __dict__)
_GROUPS: set[str] = set()
#: per global generator, a counter advanced before and after every draw a thread with no audit branch makes
#: through a dispatcher: a window that sees it move knows another thread drew meanwhile
_FOREIGN = {"python": itertools.count(), "numpy": itertools.count(), "torch": itertools.count()}

_HERE = os.path.dirname(os.path.abspath(__file__))
_OWN = {os.path.join(_HERE, f) for f in ("interception.py", "numpy_rng.py", "lazy_values.py")} | {
    os.path.join(os.path.dirname(_HERE), "torch_draws", f) for f in ("torch_rng.py", "lazy_draws.py")}
_ENGINE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "enumerate") + os.sep
_FIELDS = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "fields.py")


def user_site(depth: int = 2) -> str:
    """``file:line in function`` of the first frame outside exactspec's interception and engine code.

    >>> user_site(1).split(":")[0].endswith((".py", ">"))
    True
    """
    frame: Any = sys._getframe(depth)
    libs = _library_dirs()
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name not in _OWN and not name.startswith(_ENGINE) and name != _FIELDS \
                and not name.endswith(("contextlib.py", "functools.py")) and not name.startswith(libs):
            break
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _library_dirs() -> tuple[str, ...]:
    """The package folders of torch and numpy (their Python frames between a sampler and exactspec are skipped)."""
    dirs = []
    for mod in ("torch", "numpy"):
        m = sys.modules.get(mod)
        f = getattr(m, "__file__", None)
        if f:
            dirs.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(dirs)


def unsupported(what: str, why: str) -> UnsupportedRandomness:
    """The error for a random function the audit does not follow: names it and the sampler's line."""
    return UnsupportedRandomness(f"{what} at {user_site(3)}: {why}")


def note_dtype(x: Any) -> None:
    """Tell the bound branch's observer (if any) about a float operand that meets randomness: a probability row
    handed to a draw, a tensor compared or combined with lazy uniforms. A sampler audit's float64 run uses it to
    see a sampler that casts down (:mod:`exactspec.samplers.rounding`); nothing happens without an observer.

    >>> note_dtype(0.5)        # no branch bound: nothing to tell
    """
    rng = _BRANCH.get()
    observe = getattr(rng, "observe", None) if rng is not None else None
    if observe is not None:
        observe(x)


def current_rng() -> Any:
    """The enumerating rng of the branch this thread runs (raises when none is bound).

    >>> current_rng()
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: a random draw was routed to an exactspec audit, but no audit branch is bound in this thread (use bind(rng) inside intercepting())
    """
    rng = _BRANCH.get()
    if rng is None:
        raise ExactSpecError("a random draw was routed to an exactspec audit, but no audit branch is bound in this "
                             "thread (use bind(rng) inside intercepting())")
    return rng


class Session:
    """One audit's bookkeeping (made by :func:`intercepting`): states of torch generators seen via ``generator=``."""

    def __init__(self) -> None:
        #: (id, state hash) of every torch generator state an intercepted ``generator=`` draw started from
        self.generator_states: set[tuple[int, int]] = set()
        #: per generator id, the state changes the audit itself made in the current sampler call (advancing it)
        self.own_moves: dict[int, dict[Any, Any]] = {}
        #: irrational probabilities rounded to 320 bits (what -> how many times; see lazy_values.RACE_PRECISION)
        self.approximations: dict[str, int] = {}
        #: under the native rng model, the (generator, lattice) of the uniforms drawn (see :func:`native_uniform`)
        self.lattices: set[tuple[str, Lattice]] = set()


def current_session() -> "Session | None":
    """The audit session of this thread (None outside :func:`intercepting`)."""
    return _SESSION.get()


# -- patching ---------------------------------------------------------------------------------------------

#: exactspec modules that call libraries on exactspec's own behalf during a branch and never call the audited
#: code: the exact arithmetic of lazy values (mpmath, and sympy, first imported there), the fields and laws
_LIBRARY_CALLERS = frozenset({"exactspec.samplers.randomness.lazy_values", "exactspec.fields", "exactspec.laws",
                              "exactspec._numbers", "exactspec.prove.field.arith",
                              "exactspec.prove.field.numbers", "exactspec.prove.field.decider",
                              "exactspec.prove.field.space"})
#: per code object, what a frame running it says about a draw made under it: True (exactspec's own), False
#: (the audit machinery, which calls the audited code), None (not exactspec's code: look further out)
_WHOSE: dict[Any, bool | None] = {}


def _whose(frame: Any) -> bool | None:
    code = frame.f_code
    got = _WHOSE.get(code, 0)
    if got != 0:
        return got          # type: ignore[return-value]
    name = frame.f_globals.get("__name__", "")
    if not isinstance(name, str) or not (name == "exactspec" or name.startswith("exactspec.")):
        got = None
    else:
        got = name in _LIBRARY_CALLERS
    if len(_WHOSE) > 65536:
        _WHOSE.clear()
    _WHOSE[code] = got
    return got


def _internal(frame: Any) -> bool:
    """Whether a draw made at ``frame`` is made on exactspec's behalf: never audited, the real function runs.

    A draw made by exactspec's own code (models, laws) is exactspec's; its samplers (the adapters'
    reference samplers and the bug zoo) are audited. A draw made in other code is exactspec's when
    the nearest exactspec frame walking out from it is one of the modules that call libraries on
    exactspec's behalf and never call the audited code (:data:`_LIBRARY_CALLERS`: the exact
    arithmetic of lazy values first imports sympy inside a branch, and sympy's ``Dummy`` makes a
    ``random.Random()`` then); when it is the audit machinery (the engine, the adapters, the loop
    audit), the draw is the audited code's: a user's sampler, its helper modules and the libraries
    it calls (transformers' ``generate``) are enumerated as before.

    >>> import sys
    >>> _internal(sys._getframe())       # this doctest runs in exactspec.samplers.randomness.interception: audited
    False
    """
    name = frame.f_globals.get("__name__", "")
    if isinstance(name, str) and name.startswith("exactspec."):
        return not name.startswith(("exactspec.samplers.", "exactspec.bugzoo.")) or name in _LIBRARY_CALLERS
    frame = frame.f_back
    whose = _WHOSE          # the memo of :func:`_whose` read in the loop, the function called on a miss only
    while frame is not None:
        got = whose.get(frame.f_code, _whose)      # (a memo of False is a hit too)
        if got is _whose:
            got = _whose(frame)
        if got is not None:
            return got          # type: ignore[return-value]
        frame = frame.f_back
    return False


def deliberate(exc: BaseException) -> BaseException:
    """Mark an exception the interception raises on purpose, as the function it stands in for would: the audited
    code's error (``torch.multinomial`` on a 3-d tensor), never exactspec's (:func:`own_failure`).

    >>> getattr(deliberate(ValueError("empty range for randrange()")), "_exactspec_deliberate")
    True
    """
    exc._exactspec_deliberate = True      # type: ignore[attr-defined]
    return exc


#: top-level modules whose frames between exactspec's code and an exception are transparent (the libraries it calls)
_TRANSPARENT = frozenset(getattr(sys, "stdlib_module_names", ())) | {"torch", "numpy", "mpmath", "sympy", "gmpy2",
                                                                       "flint"}


def _raised_in_exactspec(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback outside the libraries exactspec calls is exactspec's own
    (its bug zoo excepted: audited code), rather than code of the caller's (a tensor subclass, a sequence type)."""
    ours = False
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        name = name if isinstance(name, str) else ""
        if name == "exactspec" or name.startswith("exactspec."):
            ours = not name.startswith("exactspec.bugzoo")
        elif name.partition(".")[0] not in _TRANSPARENT:
            ours = False
        tb = tb.tb_next
    return ours


def _dtypes(args: tuple, kwargs: dict) -> str:
    """The dtypes of a call's tensor and array arguments (and its ``dtype=``), or the types of its arguments."""
    found: list[str] = []
    for x in (*args, *kwargs.values()):
        dt = getattr(x, "dtype", None) if not isinstance(x, type) else None
        if dt is None and type(x).__name__ == "dtype":
            dt = x
        if dt is not None:
            name = str(dt).replace("torch.", "")
            if name not in found:
                found.append(name)
    if found:
        return ", ".join(found)
    return "arguments of type (" + ", ".join(type(x).__name__ for x in (*args, *kwargs.values())) + ")"


def own_failure(what: str, args: tuple, kwargs: dict, exc: BaseException) -> InterceptionError | None:
    """The :class:`~exactspec.errors.InterceptionError` to raise for ``exc``, raised while the interception stood in
    for ``what``; None when ``exc`` is not exactspec's failure (re-raise it as it is).

    exactspec's failure: raised in exactspec's own frames (:func:`_raised_in_exactspec`), not on purpose
    (:func:`deliberate`), and not one of exactspec's own exception types (its typed errors, its control flow).

    >>> def bug():
    ...     return None.numpy()
    >>> try:
    ...     bug()
    ... except AttributeError as exc:
    ...     print(own_failure("torch.multinomial", (), {}, exc).operation)
    torch.multinomial
    >>> own_failure("random.choice", ([],), {}, deliberate(IndexError("Cannot choose from an empty sequence"))) is None
    True
    """
    if getattr(exc, "_exactspec_deliberate", False) or isinstance(exc, (MemoryError, RecursionError)):
        return None
    module = type(exc).__module__
    if module == "exactspec" or module.startswith("exactspec.") or not _raised_in_exactspec(exc):
        return None
    return InterceptionError(what, _dtypes(args, kwargs), exc, user_site(3))


def _dispatcher(original: Any, impl: Callable, source: str | None, what: str = "") -> Callable:
    counter = _FOREIGN[source] if source else None
    what = what or getattr(original, "__qualname__", "") or getattr(original, "__name__", "a random function")

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        if _BRANCH.get() is not None:
            if _internal(sys._getframe(1)):      # e.g. a seeded model table built lazily inside the sampler call
                return original(*args, **kwargs)
            try:
                return impl(*args, **kwargs)
            except Exception as exc:
                failed = own_failure(what, args, kwargs, exc)
                if failed is None:
                    raise
                raise failed from exc
        if counter is None:
            return original(*args, **kwargs)
        next(counter)
        try:
            return original(*args, **kwargs)
        finally:
            next(counter)
    try:
        functools.update_wrapper(dispatch, original)
    except (AttributeError, TypeError):  # pragma: no cover - exotic originals
        pass
    dispatch._exactspec_original = original  # type: ignore[attr-defined]
    return dispatch


class ClassProxy:
    """Stands in for a class (``random.Random``, ``np.random.Generator``, ``torch.Generator``) while patched.

    Calling it inside an audit branch runs ``impl``; elsewhere it builds the real class.
    ``isinstance``, ``issubclass``, subclassing and attribute access go to the real class.
    """

    def __init__(self, original: type, impl: Callable, what: str = "") -> None:
        self._exactspec_original = original
        self._impl = impl
        self._what = what or getattr(original, "__qualname__", "a random generator")
        for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
            object.__setattr__(self, attr, getattr(original, attr, None))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _BRANCH.get() is not None and not _internal(sys._getframe(1)):
            try:
                return self._impl(*args, **kwargs)
            except Exception as exc:
                failed = own_failure(self._what, args, kwargs, exc)
                if failed is None:
                    raise
                raise failed from exc
        return self._exactspec_original(*args, **kwargs)

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, self._exactspec_original)

    def __subclasscheck__(self, cls: Any) -> bool:
        return issubclass(cls, self._exactspec_original)

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (self._exactspec_original,)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exactspec_original, name)

    def __repr__(self) -> str:
        return repr(self._exactspec_original)


#: group ("numpy", "torch") -> the function listing what to patch in it, ``(owner, name, impl[, source])``.
#: numpy_rng and torch_rng read this module's branch state, so this module does not import them: the
#: randomness package registers their lists (:func:`register_patches`) when it is imported, before any audit
_PATCHES: dict[str, Callable[[], list[tuple]]] = {}


def register_patches(group: str, specs: Callable[[], list[tuple]]) -> None:
    """Have :func:`intercepting` patch ``group`` with the ``(owner, name, impl[, source])`` tuples ``specs()`` lists.

    ``exactspec.samplers.randomness`` registers numpy's (:func:`~.numpy_rng.legacy_specs`), ``exactspec.samplers``
    torch's (:func:`exactspec.samplers.torch_draws.torch_rng.torch_specs`, asked for only once torch is imported).

    >>> sorted(_PATCHES)
    ['numpy', 'torch']
    """
    _PATCHES[group] = specs


def _install(specs: Sequence[tuple]) -> None:
    for spec in specs:
        owner, name, impl = spec[0], spec[1], spec[2]
        if not hasattr(owner, name):
            continue
        had = name in vars(owner)
        original = getattr(owner, name)
        source = spec[3] if len(spec) > 3 else None
        what = f"{_owner_name(owner)}.{name}"
        if source == "class":
            replacement: Any = ClassProxy(original, impl, what)
        else:
            replacement = _dispatcher(original, impl, source, what)
        setattr(owner, name, replacement)
        _INSTALLED.append((owner, name, original, had))


def _owner_name(owner: Any) -> str:
    """How an error names the module or class a patched function belongs to: ``torch``, ``Tensor``, ``numpy.random``."""
    name = getattr(owner, "__name__", None) or type(owner).__name__
    return "Tensor" if name == "TensorBase" else name


def _restore() -> None:
    while _INSTALLED:
        owner, name, original, had = _INSTALLED.pop()
        if had:
            setattr(owner, name, original)
        else:
            try:
                delattr(owner, name)
            except AttributeError:  # pragma: no cover - someone else removed it
                pass
            if getattr(owner, name, None) is not original:  # pragma: no cover - inherited differently
                setattr(owner, name, original)
    _GROUPS.clear()


def _acquire() -> None:
    global _USERS
    with _LOCK:
        try:
            if "python" not in _GROUPS:
                _install(_python_specs())
                _GROUPS.add("python")
            if "numpy" not in _GROUPS:
                _install(_PATCHES["numpy"]())
                _GROUPS.add("numpy")
            _install_torch()
        except BaseException:
            if _USERS == 0:
                _restore()
            raise
        _USERS += 1


def _install_torch() -> None:
    """Patch torch too, once it is imported (called under ``_LOCK``)."""
    if "torch" not in _GROUPS and "torch" in sys.modules:
        _install(_PATCHES["torch"]())
        _GROUPS.add("torch")


def _torch_arrived(name: str) -> None:
    """torch was first imported during a sampler call: patch it from now on; refuse if it already drew."""
    with _LOCK:
        if _USERS:
            _install_torch()
    import torch
    fresh = torch.Generator().manual_seed(torch.initial_seed()).get_state()
    if not torch.equal(torch.random.default_generator.get_state(), fresh):
        raise UnsupportedRandomness(
            f"sampler {name} imported torch during the audit and drew from torch's default generator before "
            "exactspec could intercept it, so the audit gives no verdict: import torch before the audit")


def _release() -> None:
    global _USERS
    with _LOCK:
        _USERS -= 1
        if _USERS == 0:
            _restore()


@contextlib.contextmanager
def intercepting() -> Iterator[Session]:
    """Patch the random functions (once for all audits in the process) for the duration of the block.

    The functions are dispatchers while any thread is inside such a block; draws made in a
    thread's bound branch (:func:`bind`, :func:`watch`) are enumerated, every other call runs the
    original function. The last block to exit restores the originals (also on error or
    KeyboardInterrupt). torch is patched only if it is already imported.

    >>> import numpy as np
    >>> original = np.random.random
    >>> with intercepting():
    ...     patched = np.random.random is not original
    ...     real = isinstance(np.random.random(), float)      # no branch bound: the real function
    >>> patched, real, np.random.random is original
    (True, True, True)
    """
    session = Session()
    _acquire()
    token = _SESSION.set(session)
    atoken = APPROXIMATIONS.set(session.approximations)
    try:
        with frozen():              # the heap alive now out of the collector's walks while the audit runs
            yield session
    finally:
        APPROXIMATIONS.reset(atoken)
        _SESSION.reset(token)
        if _SESSION.get() is None:   # the outermost audit of this thread: no branch may stay bound past it
            _BRANCH.set(None)
        _release()


def _enumerating(rng: Any) -> bool:
    from ...enumerate.rng import PathRng
    return isinstance(rng, PathRng)


@contextlib.contextmanager
def bind(rng: Any) -> Iterator[None]:
    """Route this thread's intercepted draws to ``rng`` (one branch of the enumeration) inside the block.

    Inside :func:`intercepting` (in this thread) any ``rng`` is bound; elsewhere only an
    enumerating :class:`~exactspec.enumerate.rng.PathRng` is, and only while some audit has the
    functions patched, so a sampling rng (``audit_statistically``) keeps real draws.

    >>> with intercepting(), bind("the rng of one branch"):
    ...     current_rng()
    'the rng of one branch'
    """
    if _SESSION.get() is None and not (_USERS and _enumerating(rng)):
        yield
        return
    token = _BRANCH.set(rng)
    try:
        yield
    finally:
        _BRANCH.reset(token)


# -- detection: the generators' states around each sampler call --------------------------------------------

def _python_snapshot() -> Callable[[], Any]:
    """A cheap exact snapshot of Python's global generator (the Mersenne Twister words and index)."""
    inst = _pyrandom._inst
    if sys.implementation.name == "cpython":
        try:
            addr = id(inst) + object.__basicsize__        # struct { PyObject_HEAD; int index; uint32 state[624]; }
            raw = ctypes.string_at(addr, 4 + 624 * 4)
            state = inst.getstate()[1]
            if struct.unpack_from("i", raw, 0)[0] == state[-1] and struct.unpack_from("624I", raw, 4) == state[:-1]:
                # (gauss_next: the second normal Random.gauss keeps for its next call; typeshed does not declare it)
                return lambda: (ctypes.string_at(addr, 2500), inst.gauss_next)  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover - another layout: the slower public API
            pass
    return inst.getstate  # pragma: no cover


def _numpy_snapshot() -> Callable[[], Any]:
    """A cheap exact snapshot of numpy's legacy global generator (MT19937 key and position)."""
    import numpy as np
    legacy = np.random.mtrand._rand
    try:
        bitgen = legacy._bit_generator
        addr = bitgen.ctypes.state_address
        raw = ctypes.string_at(addr, 2500)
        st = legacy.get_state(legacy=True)
        if type(bitgen).__name__ == "MT19937" and isinstance(st, tuple) \
                and raw[:2496] == st[1].astype("<u4").tobytes() and struct.unpack_from("i", raw, 2496)[0] == st[2]:
            return lambda: ctypes.string_at(addr, 2500)
    except Exception:  # pragma: no cover
        pass
    return lambda: _freeze(legacy.get_state(legacy=False))  # pragma: no cover


def _torch_snapshot() -> Callable[[], Any]:
    import torch
    gen = torch.random.default_generator
    return lambda: gen.get_state().numpy().tobytes()


_SNAPSHOTS: dict[str, Callable[[], Any]] = {}
_LABELS = {"python": "Python's global random generator (random.random, ...)",
           "numpy": "numpy's legacy global generator (np.random.random, ...)",
           "torch": "torch's default generator (torch.rand, ...)"}


_SOURCE_LIST: list[tuple[str, Callable[[], Any], Any]] = []   # (name, snapshot, foreign counter)


def _sources() -> list[tuple[str, Callable[[], Any], Any]]:
    if not _SOURCE_LIST or ("torch" not in _SNAPSHOTS and "torch" in sys.modules):
        with _LOCK:
            if not _SNAPSHOTS:
                _SNAPSHOTS["python"] = _python_snapshot()
                _SNAPSHOTS["numpy"] = _numpy_snapshot()
            if "torch" not in _SNAPSHOTS and "torch" in sys.modules:
                _SNAPSHOTS["torch"] = _torch_snapshot()
            _SOURCE_LIST[:] = [(src, snap, _FOREIGN[src]) for src, snap in _SNAPSHOTS.items()]
    return _SOURCE_LIST


def _freeze(x: Any) -> Any:
    """A hashable, comparable copy of a generator state (dicts, arrays, tensors, lists)."""
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    if hasattr(x, "tobytes"):
        return (str(getattr(x, "dtype", "")), tuple(getattr(x, "shape", ())), x.tobytes())
    if type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
        return x.numpy().tobytes()
    return x


#: how many levels of helper functions (closures, globals, defaults) are searched for private generators
_HELPER_DEPTH = 3


def private_generators(sampler: Any) -> list[tuple[str, Callable[[], Any], Any]]:
    """Generators a sampler holds (module globals, closure, defaults, attributes): (label, state snapshot, object).

    The helper functions it reaches the same way (a coin passed in a closure, a module function it
    calls) are searched too, :data:`_HELPER_DEPTH` levels deep, and so are the attributes it names
    of the modules and objects it reads (``helpers.gen.random()``, ``CONFIG.rng.random()``).

    Draws from them cannot be intercepted; :func:`watch` compares their states around each call.

    >>> import numpy as np
    >>> g = np.random.default_rng(0)
    >>> [label for label, _, _ in private_generators(lambda: g.random())]
    ['g (a Generator)']
    """
    found: dict[int, tuple[str, Callable[[], Any], Any]] = {}
    seen: set[int] = {id(sampler)}

    def consider(value: Any, where: str, depth: int) -> None:
        owner = getattr(value, "__self__", None)
        if owner is not None and not isinstance(value, type) and callable(value):
            value, where = owner, f"{where}.__self__"      # a bound method: rnd = gen.random
        snap = _snapshot_of(value)
        if snap is not None and id(value) not in found:
            found[id(value)] = (f"{where} (a {type(value).__name__})", snap, value)
        elif depth > 0 and isinstance(value, (types.FunctionType, functools.partial)) and id(value) not in seen \
                and not str(getattr(value, "__module__", "") or "").startswith(("numpy", "torch")):
            seen.add(id(value))      # a helper the sampler calls (a closure's coin, a module function): its
            scan(value, depth - 1)   # generators are the sampler's too

    def members(value: Any, where: str, names: set[str], depth: int) -> None:
        """``mod.g.random()`` / ``obj.g.random()``: the attributes the code names, of a module or object it reads."""
        if isinstance(value, type(sys)):
            if str(getattr(value, "__name__", "")).startswith(("numpy", "torch", "random", "exactspec")):
                return
            attrs = vars(value)
        elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) or callable(value):
            return
        else:
            own = getattr(value, "__dict__", None)
            if not isinstance(own, dict):
                return
            attrs = own
        for k in names & set(attrs):
            consider(attrs[k], f"{where}.{k}", depth)

    def scan(obj: Any, depth: int) -> None:
        if isinstance(obj, functools.partial):
            for i, v in enumerate(obj.args):
                consider(v, f"partial argument {i}", depth)
            for k, v in (obj.keywords or {}).items():
                consider(v, k, depth)
            scan(obj.func, depth)
            return
        fn = getattr(obj, "__func__", obj)
        owner = getattr(obj, "__self__", None)
        if owner is not None and not isinstance(owner, type(sys)):
            consider(owner, "self", depth)
            for k, v in list(getattr(owner, "__dict__", {}).items()):
                consider(v, f"self.{k}", depth)
        code = getattr(fn, "__code__", None)
        if code is None:
            if depth and not isinstance(obj, type) and callable(obj):
                for k, v in list(getattr(obj, "__dict__", {}).items()):
                    consider(v, f"self.{k}", depth)
                for method in ("forward", "__call__"):      # a torch module's forward, a callable's __call__
                    func = getattr(getattr(obj, method, None), "__func__", None)
                    if func is not None:
                        scan(func, depth - 1)
            return
        names = _names(code)
        for k, v in list(getattr(fn, "__globals__", {}).items()):
            if k in names:
                consider(v, k, depth)
                members(v, k, names, depth)
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                consider(cell.cell_contents, name, depth)
            except ValueError:
                pass
        for i, v in enumerate(getattr(fn, "__defaults__", None) or ()):
            consider(v, f"default {i}", depth)
        for k, v in (getattr(fn, "__kwdefaults__", None) or {}).items():
            consider(v, k, depth)

    scan(sampler, _HELPER_DEPTH)
    return [found[k] for k in found]


def _names(code: Any) -> set[str]:
    """Global names a code object (and the comprehensions and functions nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def _snapshot_of(value: Any) -> Callable[[], Any] | None:
    """A state snapshot for a private generator object, or None if ``value`` is not one we watch."""
    if isinstance(value, _pyrandom.Random) and value is not _pyrandom._inst:
        if isinstance(value, _pyrandom.SystemRandom):
            return None                          # no state: its draws are fresh entropy, nothing to compare
        return value.getstate
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        if isinstance(value, np_random.Generator):
            return lambda: _freeze(value.bit_generator.state)
        if isinstance(value, np_random.RandomState) and value is not np_random.mtrand._rand:
            return lambda: _freeze(value.get_state(legacy=False))
        if isinstance(value, np_random.BitGenerator) \
                and value is not getattr(np_random.mtrand._rand, "_bit_generator", None):
            return lambda: _freeze(value.state)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch._C.Generator) \
            and value is not torch.random.default_generator:
        return lambda: generator_state(value)
    return None


def generator_state(gen: Any) -> int:
    """A fingerprint (hash) of a torch generator's state."""
    return hash(gen.get_state().numpy().tobytes())


class watch:
    """Run one sampler call as a bound branch and check that no randomness escaped the interception.

    Snapshots the global generators (and ``private`` ones, see :func:`private_generators`)
    before the call; after a call that returns, a changed state raises UnsupportedRandomness
    naming the generator and the sampler. If another thread drew from the same generator through
    a dispatcher meanwhile, the error says it may have been that thread.

    >>> from exactspec.enumerate.rng import PathRng
    >>> from exactspec.fields import get_field
    >>> import random
    >>> with intercepting():
    ...     with watch(PathRng((), 1, get_field(backend="python"), [], {}, exact_floats=True), "mine"):
    ...         random.random() < 0.5               # intercepted: fine
    True
    """

    __slots__ = ("rng", "name", "private", "session", "_tokens", "_before", "_pbefore", "_torch")

    def __init__(self, rng: Any, name: str = "sampler", private: Sequence[tuple[str, Callable, Any]] = (),
                 session: Session | None = None) -> None:
        self.rng, self.name, self.private = rng, name, private
        self.session = session if session is not None else _SESSION.get()

    def __enter__(self) -> "watch":
        self._tokens = (_SESSION.set(self.session), _BRANCH.set(self.rng),
                        APPROXIMATIONS.set(self.session.approximations if self.session is not None else None))
        try:
            self._torch = "torch" in sys.modules
            self._before = [(src, snap, count, next(count), snap()) for src, snap, count in _sources()]
            self._pbefore = [snap() for _, snap, _ in self.private] if self.private else ()
        except BaseException:   # __exit__ will not run: unbind here
            stok, btok, atok = self._tokens
            APPROXIMATIONS.reset(atok)
            _BRANCH.reset(btok)
            _SESSION.reset(stok)
            raise
        if self.session is not None:
            self.session.own_moves.clear()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stok, btok, atok = self._tokens
        APPROXIMATIONS.reset(atok)
        _BRANCH.reset(btok)
        _SESSION.reset(stok)
        if exc_type is not None:
            return None
        if not self._torch and "torch" in sys.modules:
            _torch_arrived(self.name)
        for (label, snap, obj), before in zip(self.private, self._pbefore):
            after = snap()
            moves = self.session.own_moves.get(id(obj), {}) if self.session is not None else {}
            for _ in range(len(moves)):       # the audit's own advances of a generator passed as generator=
                if before == after or before not in moves:
                    break
                before = moves[before]
            if after != before:
                raise UnsupportedRandomness(
                    f"the generator {label} changed while sampler {self.name} ran, not through a draw exactspec "
                    "intercepted (a draw it cannot see, or a re-seed), so the audit cannot give a verdict: draw "
                    "from the rng the adapter passes, or through the random functions at call time, and do not "
                    "re-seed inside the sampler (another thread using that generator would also show here)")
        for src, snap, count, start, before in self._before:
            if snap() == before:
                continue
            others = next(count) - start > 1
            what = _LABELS[src]
            if others:
                raise UnsupportedRandomness(
                    f"{what} changed while sampler {self.name} ran, and another thread drew from it meanwhile: it may "
                    "have been that thread, or the sampler through a reference exactspec cannot see; the audit "
                    "cannot tell which, so it gives no verdict. Audits should not share the global generator "
                    "with other threads drawing from it")
            more = " (or another thread drew from it through such a reference)" if threading.active_count() > 1 \
                else ""
            raise UnsupportedRandomness(
                f"sampler {self.name} drew from {what} through a reference taken before the audit (e.g. "
                f"`from random import random` or `rnd = np.random.random` at import, or a re-seed){more}; "
                "exactspec cannot see that draw, so the audit gives no verdict: call the module's function at "
                "call time (random.random(), np.random.random(), torch.rand()) or use the rng the adapter passes")
        return None


# -- Python's random ---------------------------------------------------------------------------------------

_MAX_CATEGORIES = 1 << 16


#: the lattice of numpy's (Generator and legacy) and Python's ``random`` uniforms: ``k * 2**-53``, 0 included
FLOAT64_LATTICE = LATTICES["float64"]


def native_uniform(rng: Any, lattice: Lattice, source: str) -> Any:
    """A uniform from ``rng`` drawn by the generator ``source`` (``"numpy"``, ``"torch float32"``, ...) whose values
    lie on ``lattice``.

    Under the ``native`` rng model the draw lies on ``lattice`` (and the audit's session notes
    ``source``); under another model the model's lattice (or none) applies; an rng that is not the
    enumerating one (a sampling rng) draws as it does.

    >>> from fractions import Fraction as F
    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> law = enumerate_program(lambda rng: native_uniform(rng, FLOAT64_LATTICE, "numpy") <= 0,
    ...                         get_field(backend="python"), rng_model="native")
    >>> law[True] == F(1, 2 ** 53)          # numpy and random return exactly 0 with probability 2**-53
    True
    """
    if type(rng) is PathRng:
        if rng.lattice is NATIVE:
            session = _SESSION.get()
            if session is not None:
                session.lattices.add((source, lattice))
        return rng.uniform(lattice)
    return rng.uniform()


def describe_rng_model(rng_model: str, used: Any = ()) -> str:
    """The rng model of an audit in words; for ``native``, the generators whose uniforms were drawn and their lattices.

    >>> describe_rng_model("native", {("numpy", FLOAT64_LATTICE)})
    'rng model native: numpy uniforms on k * 2**-53 for k = 0 .. 2**53 - 1 (0 included)'
    >>> describe_rng_model("continuous")
    'rng model continuous: every uniform an ideal draw on [0, 1) (no generator lattice, no exact 0)'
    """
    if rng_model == "continuous":
        return "rng model continuous: every uniform an ideal draw on [0, 1) (no generator lattice, no exact 0)"
    if rng_model != "native":
        return f"rng model {rng_model}: every uniform on {LATTICES[rng_model].note}"
    if not used:
        return ("rng model native: no generator uniform drawn (numpy and random would be on k * 2**-53, torch "
                "float32 on k * 2**-24, 0 included)")
    parts = []
    for source, lat in sorted(used, key=lambda x: (x[0], x[1].name)):
        note = lat.note.split(", as ")[0]
        parts.append(f"{source} uniforms on {note}")
    return "rng model native: " + "; ".join(parts)


@functools.lru_cache(maxsize=256)
def uniform_law(n: int) -> tuple[Fraction, ...]:
    """The uniform law on ``n`` outcomes (one tuple per ``n``, so the engine caches its support).

    >>> uniform_law(2)
    (Fraction(1, 2), Fraction(1, 2))
    """
    return tuple(Fraction(1, n) for _ in range(n))


def below(rng: Any, n: int, what: str) -> int:
    """A uniform integer in ``0 .. n - 1`` drawn exactly (``n`` at most 65536)."""
    if n > _MAX_CATEGORIES:
        raise unsupported(what, f"a uniform integer among {n} values (more than {_MAX_CATEGORIES}) is not enumerated")
    return 0 if n == 1 else rng.categorical(uniform_law(n))


def fisher_yates(rng: Any, n: int, what: str) -> list[int]:
    """A uniform permutation of ``range(n)`` by Fisher-Yates swaps, each swap an exact categorical draw.

    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> law = enumerate_program(lambda rng: tuple(fisher_yates(rng, 3, "x")), get_field(backend="python"))
    >>> len(law), set(law.values())
    (6, {Fraction(1, 6)})
    """
    perm = list(range(n))
    for i in reversed(range(1, n)):
        j = below(rng, i + 1, what)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _index(x: Any, what: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        if isinstance(x, float) and x == int(x):
            return int(x)
        raise deliberate(ValueError(f"non-integer argument {x!r} for {what}")) from None


class EnumRandom:
    """Python's ``random`` API with draws that fork the exact enumeration.

    ``random`` and ``uniform`` are lazy uniforms; ``randint``, ``randrange``, ``choice``,
    ``shuffle``, ``sample``, ``getrandbits`` (up to 16 bits) are exact uniform choices;
    ``choices`` compares one lazy uniform with the cumulative weights, as CPython does. Anything
    else (``gauss``, ``expovariate``, ``seed``, ...) raises UnsupportedRandomness.

    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> law = enumerate_program(lambda rng: EnumRandom(rng).choice("ab"), get_field(backend="python"))
    >>> sorted(law.items())
    [('a', Fraction(1, 2)), ('b', Fraction(1, 2))]
    """

    def __init__(self, rng: Any, owner: str = "random") -> None:
        self._rng = rng
        self._owner = owner

    def random(self) -> Any:
        """A lazy uniform on [0, 1) (``k * 2**-53`` under the native rng model)."""
        return lazy(native_uniform(self._rng, FLOAT64_LATTICE, "Python random"))

    def uniform(self, a: Any, b: Any) -> Any:
        """``a + (b - a) * u``, as CPython computes it."""
        return a + (b - a) * self.random()

    def randrange(self, start: Any, stop: Any = None, step: Any = 1) -> int:
        """A uniform element of ``range(start, stop, step)``."""
        what = f"{self._owner}.randrange"
        r = range(_index(start, what)) if stop is None else range(_index(start, what), _index(stop, what),
                                                                   _index(step, what))
        if not r:
            raise deliberate(ValueError("empty range for randrange()"))
        return r[below(self._rng, len(r), what)]

    def randint(self, a: Any, b: Any) -> int:
        """A uniform integer in ``[a, b]``."""
        return self.randrange(a, _index(b, f"{self._owner}.randint") + 1)

    def choice(self, seq: Sequence[Any]) -> Any:
        """A uniform element of a non-empty sequence."""
        if not len(seq):
            raise deliberate(IndexError("Cannot choose from an empty sequence"))
        return seq[below(self._rng, len(seq), f"{self._owner}.choice")]

    def shuffle(self, x: Any) -> None:
        """Shuffle a mutable sequence in place (a uniform permutation)."""
        perm = fisher_yates(self._rng, len(x), f"{self._owner}.shuffle")
        x[:] = [x[k] for k in perm]

    def sample(self, population: Sequence[Any], k: int, *, counts: Any = None) -> list:
        """``k`` distinct positions of ``population``, uniform over ordered selections."""
        if not isinstance(population, collections.abc.Sequence):
            raise deliberate(TypeError("Population must be a sequence.  For dicts or sets, use sorted(d)."))
        n = len(population)
        if counts is not None:
            cum = list(accumulate(counts))
            if len(cum) != n:
                raise deliberate(ValueError("The number of counts does not match the population"))
            total = cum.pop()
            if not isinstance(total, int):
                raise deliberate(TypeError("Counts must be integers"))
            if total <= 0:
                raise deliberate(ValueError("Total of counts must be greater than zero"))
            return [population[bisect_right(cum, s)] for s in self.sample(range(total), k)]
        if not 0 <= k <= n:
            raise deliberate(ValueError("Sample larger than population or is negative"))
        pool, out = list(population), []
        for i in range(k):
            j = below(self._rng, n - i, f"{self._owner}.sample")
            out.append(pool[j])
            pool[j] = pool[n - i - 1]
        return out

    def choices(self, population: Sequence[Any], weights: Any = None, *, cum_weights: Any = None,
                k: int = 1) -> list:
        """CPython's ``choices``: ``floor(u * n)``, or the first cumulative weight above ``u * total``."""
        n = len(population)
        if cum_weights is None:
            if weights is None:
                return [population[self._threshold(n, [i + 1 for i in range(n - 1)])] for _ in range(k)]
            cum_weights = list(accumulate(weights))
        elif weights is not None:
            raise deliberate(TypeError("Cannot specify both weights and cumulative weights"))
        if len(cum_weights) != n:
            raise deliberate(ValueError("The number of weights does not match the population"))
        total = cum_weights[-1] + 0.0
        if total <= 0.0:
            raise deliberate(ValueError("Total of weights must be greater than zero"))
        if total != total or total in (float("inf"), float("-inf")):
            raise deliberate(ValueError("Total of weights must be finite"))
        return [population[self._threshold(total, cum_weights[:n - 1])] for _ in range(k)]

    def _threshold(self, scale: Any, cuts: Sequence[Any]) -> int:
        """The first ``i`` with ``u * scale < cuts[i]`` (``len(cuts)`` if none): bisect_right of ``u * scale``."""
        x = native_uniform(self._rng, FLOAT64_LATTICE, "Python random") * scale
        for i, c in enumerate(cuts):
            if x < c:
                return i
        return len(cuts)

    def getrandbits(self, k: int) -> int:
        """A uniform integer of ``k`` bits (``k`` at most 16)."""
        k = _index(k, f"{self._owner}.getrandbits")
        if k < 0:
            raise deliberate(ValueError("number of bits must be non-negative"))
        return 0 if k == 0 else below(self._rng, 1 << k, f"{self._owner}.getrandbits({k})")

    def seed(self, *args: Any, **kwargs: Any) -> None:
        """Seeding inside an audited sampler: UnsupportedRandomness (the numbers would repeat)."""
        raise unsupported(f"{self._owner}.seed", "seeding inside the sampler makes its draws repeat from call to call, "
                          "so they are not random; exactspec will not audit them as random draws")

    setstate = seed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"{self._owner}.{name}", "the audit enumerates random, uniform, randint, randrange, choice, "
                          "choices, shuffle, sample and getrandbits (<= 16 bits) of Python's random; other draws "
                          "cannot be enumerated exactly")


_PY_FUNCTIONS = ("random", "uniform", "triangular", "randint", "choice", "randrange", "sample", "shuffle", "choices",
                 "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate", "gauss",
                 "betavariate", "paretovariate", "weibullvariate", "getrandbits", "randbytes", "seed", "setstate",
                 "binomialvariate")


def _python_impl(name: str) -> Callable:
    def impl(*args: Any, **kwargs: Any) -> Any:
        return getattr(EnumRandom(current_rng()), name)(*args, **kwargs)
    impl.__name__ = name
    return impl


def _new_random(x: Any = None, *args: Any, **kwargs: Any) -> EnumRandom:
    if x is not None:
        raise unsupported(f"random.Random({x!r})", "a generator seeded inside the sampler draws the same numbers at "
                          "every call, so its draws are not random (the re-seeding bug); exactspec will not audit "
                          "them as random draws: make it without a seed, or use the random module's functions")
    return EnumRandom(current_rng(), "random.Random()")


def _new_system_random(*args: Any, **kwargs: Any) -> EnumRandom:
    return EnumRandom(current_rng(), "random.SystemRandom()")


def _python_specs() -> list[tuple]:
    specs: list[tuple] = [(_pyrandom, name, _python_impl(name), "python") for name in _PY_FUNCTIONS]
    specs += [(_pyrandom, "Random", _new_random, "class"), (_pyrandom, "SystemRandom", _new_system_random, "class")]
    return specs
