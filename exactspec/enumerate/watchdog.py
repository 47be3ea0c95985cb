"""Budgets that hold: a watchdog that stops pure-Python code at a deadline, and typed resource errors.

A rule that never returns (a busy loop, an endless generator) never reaches the engine's own
clock checks, so :class:`deadline` arms a timer thread that, when the time is up, raises a private
``BaseException`` asynchronously in the thread that entered the block (CPython's
``PyThreadState_SetAsyncExc``: delivered between two bytecodes, so any pure-Python loop stops,
in any thread, and a rule's ``except Exception`` cannot swallow it). It surfaces as
``BudgetExceeded("seconds", ...)`` out of the ``with`` block. A call blocked inside C code
(``time.sleep``, one huge multiplication) is stopped when it returns to Python. No signal is
used: ``SIGALRM`` would also cut a ``time.sleep`` short, but only in the main thread, and it
would take over a process-wide handler that test runners and users set themselves.

:class:`guard` adds the conversion of ``MemoryError`` and ``RecursionError`` into
``BudgetExceeded("memory" | "recursion", ...)``, so an audit wraps its whole computation once.
Do not ``yield`` inside either block (the deadline would fire into whatever the thread runs next).

>>> try:
...     with deadline(0.05, covered=lambda: {"loops": "many"}):
...         while True:
...             pass
... except BudgetExceeded as e:
...     print(e.what, e.limit, e.covered["loops"])
seconds 0.05 many
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any, Callable, Iterator, Literal

from ..errors import BudgetExceeded

__all__ = ["deadline", "guard"]

#: how often (seconds) an expired deadline is raised again while its block still runs (a rule's
#: bare ``except:`` or a finaliser may swallow one delivery)
RESEND = 0.5


class _Deadline(BaseException):
    """Raised asynchronously into the audited thread when a deadline passes (never escapes a block)."""


_set_async_exc: Callable[[Any, Any], int] | None
try:
    _set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc   # (unsigned long id, PyObject *exc or NULL)
except (AttributeError, TypeError):  # not CPython: only the engine's cooperative clock checks remain
    _set_async_exc = None

_lock = threading.Lock()        # orders a timer's firing against its block's exit
_local = threading.local()      # per thread: the stack of active watches, innermost last


def _raise_in(tid: int, exc: type[BaseException]) -> None:
    """Make ``exc`` pending in thread ``tid`` (a watch is armed only where the C API exists)."""
    set_async_exc = _set_async_exc
    assert set_async_exc is not None
    n = set_async_exc(ctypes.c_ulong(tid), ctypes.py_object(exc))
    if n > 1:  # documented as impossible for one id (more than one thread state touched): undo
        set_async_exc(ctypes.c_ulong(tid), None)


def _landing() -> None:
    """A function entry: a pending asynchronous exception is raised here, into the caller."""


class _Watch:
    """One armed deadline: the thread it guards, whether it fired, whether its block is over."""

    __slots__ = ("seconds", "tid", "fired", "done", "wake")

    def __init__(self, seconds: float, tid: int) -> None:
        self.seconds, self.tid = seconds, tid
        self.fired = self.done = False
        self.wake = threading.Event()

    def run(self) -> None:
        """Timer thread: wait for the deadline (or the block's end), then raise until the block is over."""
        if self.wake.wait(self.seconds):
            return
        while True:
            with _lock:
                if self.done:
                    return
                self.fired = True
                _raise_in(self.tid, _Deadline)
            if self.wake.wait(RESEND):
                return

    def disarm(self) -> None:
        """Stop the timer, let a delivery of ours still pending land, leave the thread's stack (idempotent).

        Called in the guarded thread, inside a loop that catches ``_Deadline``: a pending
        delivery lands at the call of :func:`_landing` (a function entry checks for it) and the
        caller's loop absorbs it. It is never cleared with ``PyThreadState_SetAsyncExc(tid, NULL)``:
        on CPython 3.11 that leaves the eval breaker signalled with nothing to clear it, and every
        later function call under ``sys.settrace`` (Hypothesis's ``find`` and shrinking trace
        theirs) then spins forever at its first instruction.
        """
        if not self.done:
            with _lock:
                self.done = True
                fired = self.fired
            if fired:
                _landing()
        self.wake.set()
        stack = getattr(_local, "stack", None)
        if stack and self in stack:
            stack.remove(self)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised while handling (a few levels)."""
    for _ in range(8):
        if exc is None:
            return
        yield exc
        exc = exc.__context__


def _forget_tracebacks(exc: BaseException | None) -> None:
    """Drop the tracebacks of ``exc`` and its context, so the frames (and memory) they hold go now."""
    for e in _chain(exc):
        e.__traceback__ = None


def _stopped_in(tb: Any) -> str | None:
    """``function (file:line)`` of the innermost frame a deadline interrupted, outside this module."""
    where = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename != __file__:
            line = tb.tb_lineno if tb.tb_lineno is not None else tb.tb_frame.f_lineno
            where = f"{code.co_name} ({os.path.basename(code.co_filename)}" + (f":{line})" if line else ")")
        tb = tb.tb_next
    return where


def _covered(covered: Callable[[], dict] | None) -> dict[str, Any]:
    if covered is None:
        return {}
    try:
        return dict(covered())
    except Exception:  # a broken progress report must not hide the budget error
        return {}


class deadline:
    """Stop the block after ``seconds`` (``None``: no limit, no thread) with ``BudgetExceeded("seconds")``.

    The block is interrupted in the thread that entered it, wherever it is in Python code.
    Deadlines nest: the earliest wins, and each raises with its own ``seconds`` (when an
    enclosing deadline has passed too, the enclosing one's error is raised). ``covered`` is
    called when the deadline raises and fills the error's ``covered`` dict; the function the
    block was running when stopped is added as ``"stopped in"``. ``limit`` is the limit the
    error reports (default ``seconds``; e.g. a whole budget when part of it is already spent).
    A block that finishes anyway (its work complete) returns normally.

    >>> with deadline(None):
    ...     pass
    >>> with deadline(5) as d:
    ...     x = sum(range(10))
    >>> x, d.fired
    (45, False)
    """

    def __init__(self, seconds: float | None, *, covered: Callable[[], dict] | None = None,
                 limit: Any = None) -> None:
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
            raise TypeError(f"deadline: seconds must be a number or None, got {seconds!r}")
        self.seconds = seconds
        self.covered = covered
        self.limit = seconds if limit is None else limit   # what the error reports (a budget's full seconds)
        self._watch: _Watch | None = None

    @property
    def fired(self) -> bool:
        """Whether the deadline passed while the block ran."""
        return self._watch is not None and self._watch.fired

    def __enter__(self) -> "deadline":
        if self.seconds is None or _set_async_exc is None:
            return self
        if self._watch is not None:
            raise RuntimeError("a deadline cannot be entered twice")
        w = _Watch(max(0.0, float(self.seconds)), threading.get_ident())
        self._watch = w
        try:
            stack = getattr(_local, "stack", None)
            if stack is None:
                stack = _local.stack = []
            stack.append(w)
            # under the lock no deadline fires: while a thread is being created its state briefly carries
            # the creator's id, and a delivery then could reach the new thread instead
            with _lock:
                threading.Thread(target=w.run, name="exactspec-deadline", daemon=True).start()
        except BaseException:  # an enclosing deadline's delivery landed here: leave nothing armed
            while True:
                try:
                    w.disarm()
                    break
                except _Deadline:
                    pass
            raise
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> Literal[False]:
        w = self._watch
        if w is None:
            return False
        while True:   # a delivery may land while disarming: the block is over, so it only counts as late
            try:
                w.disarm()
                break
            except _Deadline:
                pass
        ours = any(isinstance(e, _Deadline) for e in _chain(ev))
        if any(o.fired for o in getattr(_local, "stack", ())):
            # an enclosing deadline passed: let a _Deadline reach it (disarming may have dropped its delivery)
            if ev is None:
                raise _Deadline()
            return False
        if not (w.fired and ours):
            return False   # no deadline, or the block finished (or failed on its own) before it took effect
        covered = _covered(self.covered)
        where = _stopped_in(tb)
        if where:
            covered["stopped in"] = where
        _forget_tracebacks(ev)
        tb = ev = None     # noqa: F841  (this frame is in the new error's traceback: hold nothing)
        raise BudgetExceeded("seconds", self.limit, covered=covered) from None


def _memory_limit() -> str:
    """Words for the memory limit that was hit (the address-space rlimit when one is set)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            return f"{soft} bytes (RLIMIT_AS)"
    except (ImportError, ValueError, OSError):
        pass
    return "of this process"


class guard:
    """The budget guard of one audit: :class:`deadline` plus typed ``MemoryError``/``RecursionError``.

    Inside the block a ``MemoryError`` becomes ``BudgetExceeded("memory", ...)`` and a
    ``RecursionError`` becomes ``BudgetExceeded("recursion", sys.getrecursionlimit(), ...)``, each
    with ``covered()`` (their tracebacks are dropped so the memory they hold is freed at once).

    >>> try:
    ...     with guard(None, covered=lambda: {"paths": 3}):
    ...         raise MemoryError
    ... except BudgetExceeded as e:
    ...     print(e.what, e.covered)
    memory {'paths': 3}
    """

    def __init__(self, seconds: float | None, *, covered: Callable[[], dict] | None = None,
                 limit: Any = None) -> None:
        self.covered = covered
        self._deadline = deadline(seconds, covered=covered, limit=limit)

    def __enter__(self) -> "guard":
        self._deadline.__enter__()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> Literal[False]:
        try:
            self._deadline.__exit__(et, ev, tb)
        except (MemoryError, RecursionError) as exc:  # raised while leaving: still ours to convert
            et, ev = type(exc), exc
        if et is None or not issubclass(et, (MemoryError, RecursionError)):
            return False
        _forget_tracebacks(ev)
        tb = ev = None  # noqa: F841  (this frame is in the new error's traceback: hold nothing)
        if issubclass(et, MemoryError):
            raise BudgetExceeded("memory", _memory_limit(), covered=_covered(self.covered)) from None
        raise BudgetExceeded("recursion", sys.getrecursionlimit(), covered=_covered(self.covered)) from None

