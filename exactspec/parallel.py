"""Run a job's chunks on an executor and merge them deterministically: the one module that knows about executors.

A long job (a counterexample search, ``exactspec check``, a sweep, a statistical audit) is cut
into *chunks*: picklable values, numbered in the order the sequential job would visit them. A
module-level function turns one chunk into a picklable result. :func:`run_chunks` submits the
chunks to any :class:`concurrent.futures.Executor` (a local process pool, a Dask
``distributed.Client(...).get_executor()``, or none: in this process) and returns the results
**by chunk number**, so the merged answer never depends on the number of workers or on the order
in which chunks finish.

>>> def square(x):
...     return x * x
>>> run_chunks(square, [1, 2, 3]).results
{0: 1, 1: 4, 2: 9}

Rules of the layer (each is handled once, here):

- **Order and cancellation.** Chunks are submitted in their order, at most ``window`` in flight.
  When chunk ``k``'s result is *final* (``final(result)``: a search found a bias), chunks after
  ``k`` are cancelled or their results ignored; chunks before ``k`` still run, so the caller can
  take the *first* final chunk in order, the one a sequential run would have stopped at.
- **Retries.** A chunk whose worker died (a killed process, ``BrokenProcessPool``, Dask's
  ``KilledWorker``, a lost connection) is submitted again, up to ``retries`` times; a local pool
  that broke is rebuilt. Results are kept per chunk number, so a retried chunk is never counted
  twice. A chunk still lost after its retries is reported in :attr:`ChunkRun.lost` with the
  reason: callers turn it into a typed error or an incomplete verdict naming what was not
  covered, never into a pass.
- **Time.** ``deadline`` is a wall-clock time (``time.time()``, comparable across machines
  with synchronised clocks). Chunk functions receive it and stop on their own at it; the
  runner waits ``grace`` seconds more for their partial results, then records the rest as lost.
- **Pickling.** Chunks travel by :mod:`pickle`. A function the job needs in every chunk (a
  user's rule) is sent with :func:`portable`: by reference when it is importable by name,
  otherwise (a lambda, a closure, a function defined in ``__main__`` or a notebook) by value with
  ``cloudpickle`` when that is installed (it comes with the ``dask`` extra), otherwise a
  :class:`NotPicklable` error that says to define it at module level.

``workers=N`` is a shortcut for a local process pool of ``N`` processes (``0``: every core;
``1``: in this process, through the same chunked path); ``workers="auto"`` (:data:`AUTO`, the
default of ``search``, ``sweep``, the sampler and loop searches, in Python and on the command line) is
every core for a job long enough to pay for the pool, this process for a short one
(:func:`auto_workers`), and this process too where the job cannot go to workers as it is given (a
progress function, a lambda without cloudpickle: :func:`auto_stays_here`); ``executor=`` takes any
``concurrent.futures.Executor`` and wins over ``workers``. ``scheduler=ADDRESS`` (the CLI's
``--scheduler``) connects ``distributed.Client(ADDRESS)`` and uses its executor.

``es.prove`` splits its cells the same way: subtrees of cells are the chunks, merged in the order of
the sequential run.
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import math
import multiprocessing
import os
import pickle
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO, overload

from .errors import ExactSpecError, InvalidType, InvalidValue, NotPicklable, WorkersLost

__all__ = ["run_chunks", "ChunkRun", "executor_for", "resolve_workers", "portable", "load_portable",
           "derive_seed", "NotPicklable", "WorkersLost", "chunked", "terminal_progress", "DEFAULT_RETRIES",
           "DEFAULT_GRACE", "run_on", "parallel_requested", "wall_deadline", "portable_rule", "load_rule", "pool_maker",
           "AUTO", "AUTO_MIN_SECONDS", "auto_workers", "in_worker_process", "auto_stays_here", "start_method",
           "fork_pool", "stop_pool", "wait_first", "error_as_data", "raise_error_data"]

#: times a chunk whose worker died is submitted again before it is reported lost
DEFAULT_RETRIES = 2
#: seconds the runner waits past the deadline for chunks to return their partial results
DEFAULT_GRACE = 2.0
#: the runner never blocks longer than this at once, so Ctrl-C and the CLI's watchdog get through
_POLL = 0.25

#: ``workers=AUTO`` (the default of the searches and the sweep): every core for a long job, this process for a short one
AUTO = "auto"
#: under ``workers=AUTO``, a job estimated to take fewer seconds than this in this process stays in it; a
#: longer one runs on every core. A fork pool starts in 0.04-0.12 s on a loaded 2-core machine (measured:
#: benchmarks/bench_speed_parallel.py); where only spawn exists (macOS, Windows) workers re-import the package
#: (about a second each), so the bar there is :data:`AUTO_MIN_SECONDS_SPAWN`
AUTO_MIN_SECONDS = 2.0
AUTO_MIN_SECONDS_SPAWN = 8.0


# -- seeds and chunking -------------------------------------------------------------------------------

def derive_seed(seed: Any, *parts: Any) -> int:
    """A 63-bit seed for one chunk, derived from the job's ``seed`` and the chunk's number: independent of workers.

    >>> derive_seed(0, "stat", 3) == derive_seed(0, "stat", 3) != derive_seed(0, "stat", 4)
    True
    """
    import hashlib
    text = "|".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def chunked(items: Sequence[Any], size: int) -> list[tuple[int, list[Any]]]:
    """``items`` as consecutive chunks of at most ``size``, each with the index of its first item.

    >>> chunked("abcde", 2)
    [(0, ['a', 'b']), (2, ['c', 'd']), (4, ['e'])]
    """
    if size < 1:
        raise InvalidValue(f"chunk size must be >= 1, got {size!r}")
    return [(i, list(items[i:i + size])) for i in range(0, len(items), size)]


# -- pickling -------------------------------------------------------------------------------------------

class _Portable:
    """A value pickled by value with cloudpickle (lambdas, closures, ``__main__`` functions)."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob


def _describe(obj: Any) -> str:
    fn = getattr(obj, "fn", obj)
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    name = getattr(obj, "name", None) or qual or type(obj).__name__
    return f"{name} ({mod}.{qual})" if mod and qual else str(name)


def _by_reference_is_portable(obj: Any) -> bool:
    """Whether ``pickle`` sends ``obj`` by a reference a fresh worker can import (not ``__main__``, not local)."""
    try:
        blob = pickle.dumps(obj)
    except Exception:
        return False
    return b"__main__" not in blob


def _dumps_keeping_files(cloudpickle: Any, obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, each code object keeping its own file name.

    cloudpickle names every code it sends by value ``<dynamic-code>``, so a worker's traceback, a
    refusal's or a crash's ``file:line`` pointed there instead of at the user's file (issue 36).
    The line numbers travel as they are; only the file name is put back.

    >>> import cloudpickle, pickle
    >>> f = lambda: 1
    >>> pickle.loads(_dumps_keeping_files(cloudpickle, f)).__code__.co_filename == f.__code__.co_filename
    True
    >>> pickle.loads(cloudpickle.dumps(f)).__code__.co_filename
    '<dynamic-code>'
    """
    import io
    import types
    from collections import ChainMap
    base = cloudpickle.Pickler
    reduce_code = base.dispatch_table[types.CodeType]

    def code_with_its_file(code: types.CodeType) -> Any:
        made, args = reduce_code(code)
        return made, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)

    class Pickler(base):  # type: ignore[misc, valid-type]
        dispatch_table = ChainMap({types.CodeType: code_with_its_file}, base.dispatch_table)

    with io.BytesIO() as file:
        Pickler(file).dump(obj)
        return file.getvalue()


def portable(obj: Any, what: str = "rule") -> Any:
    """``obj`` ready for a worker: itself when it pickles by importable reference, else wrapped for cloudpickle.

    >>> import math
    >>> portable(math.comb) is math.comb
    True
    """
    if _by_reference_is_portable(obj):
        return obj
    try:
        import cloudpickle
    except ImportError:
        raise NotPicklable(
            f"the {what} {_describe(obj)} cannot be sent to worker processes: it is a lambda, a closure or defined "
            "in __main__ / a notebook, which pickle sends by a name workers cannot import. Define it at module level "
            "in an importable module (and pass that, or MODULE:FUNCTION on the command line), or install cloudpickle "
            "(pip install 'exactspec[dask]') to send it by value; without workers/executor it runs in this process "
            "as it is") from None
    try:
        return _Portable(_dumps_keeping_files(cloudpickle, obj))
    except Exception as exc:
        raise NotPicklable(f"the {what} {_describe(obj)} cannot be sent to worker processes, even with cloudpickle: "
                           f"{type(exc).__name__}: {exc}. Define it at module level in an importable module") from None


def load_portable(obj: Any) -> Any:
    """The value :func:`portable` wrapped (in a worker), or ``obj`` itself."""
    if isinstance(obj, _Portable):
        return pickle.loads(obj.blob)
    return obj


def _catalog_name(rule: Any) -> str | None:
    """The catalog name that rebuilds ``rule`` in a worker (``"ensemble(1/2)"`` included), or None."""
    from .rules import get
    name = getattr(rule, "name", None)
    if not isinstance(name, str):
        return None
    try:
        same = get(name)
    except ExactSpecError:
        return None
    if same is rule:
        return name
    code = getattr(getattr(rule, "fn", None), "__code__", None)
    if code is not None and code is getattr(same.fn, "__code__", None) and same.params == rule.params \
            and same.claim == rule.claim and same.family == rule.family \
            and (same.closed_form is None) == (rule.closed_form is None):
        return name
    return None


def portable_rule(rule: Any) -> Any:
    """A rule ready for a worker: its catalog name when it has one (rebuilt there), else :func:`portable`.

    >>> import exactspec as es
    >>> portable_rule(es.rules.get("ensemble(1/3)"))
    'ensemble(1/3)'
    """
    name = _catalog_name(rule)
    return name if name is not None else portable(rule, "rule")


_RULES: dict[str, Any] = {}


def load_rule(ref: Any) -> Any:
    """The rule :func:`portable_rule` sent (in a worker): a catalog name is looked up once per process."""
    if isinstance(ref, str):
        if ref not in _RULES:
            from .rules import get
            _RULES[ref] = get(ref)
        return _RULES[ref]
    return load_portable(ref)


# -- executors ----------------------------------------------------------------------------------------

@overload
def resolve_workers(workers: None) -> None: ...
@overload
def resolve_workers(workers: int) -> int: ...
@overload
def resolve_workers(workers: Any) -> int | None: ...


def resolve_workers(workers: Any) -> int | None:
    """``workers`` as a number of processes: ``None`` stays None, ``0`` is every core available to this process.

    >>> resolve_workers(None), resolve_workers(3), resolve_workers(0) >= 1
    (None, 3, True)
    """
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise InvalidType(f"workers must be an int >= 0 (0: every core) or None, got {workers!r}")
    elif workers < 0:
        raise InvalidValue(f"workers must be an int >= 0 (0: every core) or None, got {workers!r}")
    if workers == 0:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            return max(1, os.cpu_count() or 1)
    return workers


class _Inline(cf.Executor):
    """An executor that runs each chunk in this process when it is submitted (``workers=1``)."""

    _max_workers = 1

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:
        f: cf.Future = cf.Future()
        f.set_running_or_notify_cancel()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            f.set_exception(exc)
        return f


def _mp_context() -> Any:
    """fork where the platform has it (workers start in milliseconds and see ``__main__``), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods and sys.platform != "darwin" else "spawn")


def _pool(n: int) -> cf.ProcessPoolExecutor:
    """A local pool of ``n`` processes, started now with this process's objects frozen out of the collector.

    Forked workers share the parent's heap copy-on-write; a collection in a worker would touch (and
    copy) every inherited object, so the heap is frozen while they start.
    """
    from ._heap import frozen
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=_mp_context())
    with frozen():
        pool.submit(int).result()  # a fork pool starts all its processes at the first submit
    return pool


def start_method() -> str:
    """The start method worker processes use here: ``"fork"`` where the platform has it, else ``"spawn"``.

    >>> start_method() in ("fork", "spawn")
    True
    """
    return _mp_context().get_start_method()


def fork_pool(n: int) -> cf.ProcessPoolExecutor:
    """A pool of ``n`` processes forked now: they inherit this process as it is (closures, patches, caches).

    Only where :func:`start_method` is ``"fork"``; stop it with :func:`stop_pool`.
    """
    if start_method() != "fork":
        raise ExactSpecError("fork_pool: this platform cannot fork worker processes")
    return _pool(n)


def stop_pool(pool: cf.Executor) -> None:
    """Shut a pool down without waiting for the chunks still running (their workers are ended)."""
    _stop_pool(pool)


def wait_first(futures: Sequence[cf.Future], timeout: float | None = None) -> list[cf.Future]:
    """The futures among ``futures`` done now or within a short poll (maybe none: Ctrl-C gets through between polls).

    ``timeout``: seconds to wait at most (0: those done now); the short poll by default.
    A future whose worker process died raises :class:`WorkersLost` here.
    """
    done, _ = cf.wait(futures, timeout=_POLL if timeout is None else timeout, return_when=cf.FIRST_COMPLETED)
    for f in done:
        exc = f.exception()
        if exc is not None and _is_worker_failure(exc):
            raise WorkersLost(f"a worker process died ({type(exc).__name__}: {exc}); the job is incomplete",
                              missing=(type(exc).__name__,))
    return list(done)


def error_as_data(exc: BaseException) -> Any:
    """A worker's error as it travels back: itself, or its type, message and exit code when it cannot be pickled.

    >>> error_as_data(ExactSpecError("no"))
    ExactSpecError('no')
    """
    import pickle
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return (type(exc).__name__, str(exc), getattr(exc, "exit_code", 2))
    return exc


def raise_error_data(err: Any) -> None:
    """Raise the error :func:`error_as_data` made travel (an ExactSpecError naming it, when it could not).

    >>> raise_error_data(("Oops", "it broke", 3))
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: Oops: it broke
    """
    if isinstance(err, tuple):
        name, text, code = err
        exc = ExactSpecError(f"{name}: {text}")
        exc.exit_code = code
        raise exc
    raise err


def _slots(executor: cf.Executor) -> int:
    """How many chunks the executor runs at once (to size the submission window)."""
    n = getattr(executor, "_max_workers", None)
    if isinstance(n, int) and n > 0:
        return n
    client = getattr(executor, "_client", None)
    if client is not None:
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:  # a client that cannot answer: a modest window
            pass
    return max(2, os.cpu_count() or 2)


@contextmanager
def executor_for(executor: cf.Executor | None = None, workers: Any = None,
                 scheduler: str | None = None, isolate: bool = False) -> Iterator[tuple[cf.Executor | None, bool]]:
    """The executor a job runs on, and whether this layer owns it (and may rebuild or shut it down).

    ``executor`` wins; else ``scheduler`` (a Dask address); else ``workers`` (``None``: ``(None, False)``,
    the caller's own in-process path; ``1``: in this process through the chunked path; ``N``: a
    local process pool). ``isolate=True``: ``workers=1`` is one worker process instead (a job that may be
    stopped mid-computation, such as ``es.prove`` under a time limit, then never runs in the caller).

    >>> with executor_for(workers=None) as (ex, owned):
    ...     ex, owned
    (None, False)
    """
    if executor is not None:
        if not isinstance(executor, cf.Executor) and not hasattr(executor, "submit"):
            raise InvalidType(f"executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
        yield executor, False
        return
    if scheduler is not None:
        try:
            import distributed
        except ImportError:
            raise ExactSpecError("--scheduler needs Dask's distributed package: "
                                 "pip install 'exactspec[dask]'") from None
        try:
            client = distributed.Client(scheduler, timeout=30, set_as_default=False)
        except Exception as exc:
            raise ExactSpecError(f"cannot connect to the Dask scheduler at {scheduler!r}: {type(exc).__name__}: "
                                 f"{exc}") from None
        try:
            yield client.get_executor(pure=False), False
        finally:
            client.close()
        return
    n = resolve_workers(workers)
    if n is None:
        yield None, False
    elif n == 1 and not isolate:
        yield _Inline(), True
    else:
        pool = _pool(n)
        try:
            yield pool, True
        finally:
            _stop_pool(pool)


def _stop_pool(pool: cf.Executor) -> None:
    """Shut a pool this layer owns down without waiting for chunks still running (their workers are ended)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            if p.is_alive():
                p.terminate()
        except Exception:  # already gone
            pass
    for p in procs:
        try:
            p.join(timeout=1)
        except Exception:
            pass


# -- the runner -----------------------------------------------------------------------------------------

@dataclass
class ChunkRun:
    """What :func:`run_chunks` returns: results by chunk number, the chunks lost, and where it stopped.

    ``results[k]`` is chunk ``k``'s result; ``lost[k]`` the reason chunk ``k`` was not covered
    (its worker died more often than the retries allowed, or it had not returned ``grace``
    seconds after the deadline); ``stop_at`` the first chunk whose result was final (``None``:
    none was). Chunks after ``stop_at`` may be missing from both: they were cancelled.
    """

    results: dict[int, Any] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)
    stop_at: int | None = None
    retried: int = 0
    total: int = 0

    def require_all(self, what: str, describe: Callable[[int], str] = lambda k: f"chunk {k}") -> "ChunkRun":
        """``self`` when no chunk was lost, else :class:`WorkersLost` naming each lost chunk and why."""
        if self.lost:
            missing = [f"{describe(k)}: {self.lost[k]}" for k in sorted(self.lost)]
            raise WorkersLost(f"{what}: {len(missing)} of {self.total} chunks were not covered: {'; '.join(missing)}",
                              missing=missing)
        return self

    def covered_prefix(self) -> int:
        """How many chunks from the first on have a result (the prefix a sequential run would have covered)."""
        k = 0
        while k in self.results:
            k += 1
        return k


def _is_worker_failure(exc: BaseException) -> bool:
    """A failure of the machinery (a dead worker, a broken pool, a lost connection), not of the chunk's code."""
    if isinstance(exc, (cf.process.BrokenProcessPool, cf.CancelledError, EOFError, ConnectionError, OSError)):
        return True
    name = type(exc).__name__
    return name in ("KilledWorker", "CommClosedError", "FutureCancelledError", "TimeoutError", "BrokenExecutor")


def run_chunks(fn: Callable[[Any], Any], chunks: Sequence[Any] | Iterable[Any], *, executor: cf.Executor | None = None,
               owned: bool = False, final: Callable[[Any], bool] | None = None, deadline: float | None = None,
               grace: float = DEFAULT_GRACE, retries: int = DEFAULT_RETRIES, window: int | None = None,
               order: Sequence[int] | None = None, progress: Callable[[int, int], None] | None = None,
               rebuild: Callable[[], cf.Executor] | None = None, total: int | None = None,
               on_result: Callable[[Any], Any] | None = None) -> ChunkRun:
    """Run ``fn(chunk)`` for every chunk on ``executor`` (None: in this process, in order); results by chunk number.

    ``final(result)``: a result that ends the job (chunks after it are cancelled, chunks before it
    still run). ``order``: the order to *submit* in (a hint for load balance: long chunks first);
    it never changes the results or which chunk counts as the first final one. ``progress(done,
    total)`` is called as chunks finish, in this process. ``rebuild``: makes a fresh executor
    when an owned one broke (a local pool whose worker was killed). ``on_result(result)``: what is
    kept of a result, computed here as it arrives (while other chunks run). ``chunks`` may be an iterator
    when ``total`` says how many it yields: chunks are then made as they are submitted, in order.

    >>> def odd(x):
    ...     return x % 2 == 1
    >>> run = run_chunks(odd, [2, 4, 5, 7, 8], final=bool)
    >>> run.stop_at, sorted(run.results)
    (2, [0, 1, 2])
    """
    items: Any = chunks   # indexed below: the chunks as a sequence, or (an iterator) the view that makes them
    if total is None:
        items = list(chunks)
    n = len(items) if total is None else total
    if not hasattr(items, "__getitem__"):  # an iterator: chunks are made as the window asks for them
        made: list[Any] = []
        source = iter(items)

        class _Lazy:
            def __getitem__(self, k: int) -> Any:
                while len(made) <= k:
                    made.append(next(source))
                return made[k]
        items = _Lazy()
    run = ChunkRun(total=n)
    sequence = list(range(n)) if order is None else list(order)
    if sorted(sequence) != list(range(n)):
        raise InvalidValue("run_chunks: order must be a permutation of the chunk numbers")
    if executor is None:  # in this process, in order: the reference the parallel runs must match
        for k in range(n):
            r = fn(items[k])
            run.results[k] = r = r if on_result is None else on_result(r)
            if progress is not None:
                progress(len(run.results), n)
            if final is not None and final(r):
                run.stop_at = k
                break
        return run
    pool: cf.Executor = executor   # replaced by ``rebuild()`` when it breaks
    window = window or max(2, 2 * _slots(pool))
    attempts: dict[int, int] = {}
    pending: dict[cf.Future, int] = {}
    queue = list(sequence)  # chunk numbers still to submit, in submission order
    retry_queue: list[int] = []

    def submit(k: int) -> None:
        nonlocal pool
        try:
            pending[pool.submit(fn, items[k])] = k
        except (RuntimeError, cf.BrokenExecutor) as exc:  # a broken or shut-down pool
            if owned and rebuild is not None:
                _stop_pool(pool)
                pool = rebuild()
                pending[pool.submit(fn, items[k])] = k
            else:
                run.lost[k] = f"the executor refused it: {type(exc).__name__}: {exc}"

    def wanted(k: int) -> bool:
        return run.stop_at is None or k < run.stop_at

    try:
        while True:
            while (retry_queue or queue) and len(pending) < window:
                k = retry_queue.pop(0) if retry_queue else queue.pop(0)
                if wanted(k) and k not in run.results:
                    submit(k)
            if not pending:
                break
            timeout = _POLL
            if deadline is not None:
                left = deadline + grace - time.time()
                if left <= 0:
                    for f, k in pending.items():
                        f.cancel()
                        if wanted(k):
                            run.lost[k] = "not finished by the time limit"
                    pending.clear()
                    break
                timeout = min(timeout, left)
            done, _ = cf.wait(list(pending), timeout=timeout, return_when=cf.FIRST_COMPLETED)
            broken = False
            for f in sorted(done, key=lambda f: pending[f]):  # in chunk order, whatever order they finished in
                k = pending.pop(f)
                if not wanted(k):
                    continue
                try:
                    r = f.result()
                except NotPicklable:
                    raise
                except pickle.PicklingError as exc:
                    # a chunk that could not be sent, or a result the worker could not send back
                    raise NotPicklable(f"a chunk or its result could not travel between this process and a worker: "
                                       f"{exc}. Define rules, samplers and models at module level in an importable "
                                       "module, and return what pickle can send") from None
                except BaseException as exc:  # noqa: BLE001
                    if isinstance(exc, (KeyboardInterrupt, SystemExit)) or not _is_worker_failure(exc):
                        raise
                    broken = broken or isinstance(exc, cf.process.BrokenProcessPool)
                    attempts[k] = attempts.get(k, 0) + 1
                    if attempts[k] <= retries:
                        run.retried += 1
                        retry_queue.append(k)
                    else:
                        run.lost[k] = f"its worker failed {attempts[k]} times ({type(exc).__name__}: {exc})"
                    continue
                run.results[k] = r = r if on_result is None else on_result(r)
                if progress is not None:
                    progress(len(run.results), n)
                if final is not None and final(r) and wanted(k):
                    run.stop_at = k
                    for f2, j in pending.items():
                        if j > k:
                            f2.cancel()
                    for j in list(run.lost):
                        if j > k:
                            del run.lost[j]
            if broken and owned and rebuild is not None:
                # the pool is unusable: every chunk still pending on it fails; rebuild and resubmit them
                for f, k in list(pending.items()):
                    f.cancel()
                    retry_queue.append(k)
                pending.clear()
                _stop_pool(pool)
                pool = rebuild()
            retry_queue.sort()
    finally:
        for f in pending:
            f.cancel()
    return run


def pool_maker(workers: Any, isolate: bool = False) -> Callable[[], cf.Executor] | None:
    """What rebuilds the local pool ``workers`` names after a worker died (None: nothing to rebuild)."""
    n = resolve_workers(workers)
    return (lambda: _pool(n)) if n is not None and (n > 1 or (isolate and n == 1)) else None


def run_on(fn: Callable[[Any], Any], chunks: Sequence[Any] | Iterable[Any], *, executor: cf.Executor | None = None,
           workers: Any = None, scheduler: str | None = None, **kw: Any) -> ChunkRun:
    """:func:`run_chunks` on the executor ``executor`` / ``scheduler`` / ``workers`` name (see :func:`executor_for`).

    >>> import operator
    >>> sorted(run_on(operator.neg, [1, 2], workers=2).results.items())
    [(0, -1), (1, -2)]
    """
    n = resolve_workers(workers)
    with executor_for(executor, workers, scheduler) as (ex, owned):
        if ex is None:
            ex, owned = _Inline(), True
        rebuild = (lambda: _pool(n)) if owned and n and n > 1 else None
        return run_chunks(fn, chunks, executor=ex, owned=owned, rebuild=rebuild, **kw)


def parallel_requested(executor: Any = None, workers: Any = None, scheduler: Any = None) -> bool:
    """Whether the caller asked for the chunked path (any of ``executor``, ``workers``, ``scheduler`` given).

    >>> parallel_requested(), parallel_requested(workers=1)
    (False, True)
    """
    resolve_workers(workers)
    return executor is not None or workers is not None or scheduler is not None


def terminal_progress(what: str, stream: TextIO | None = None) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback counting finished chunks: :func:`exactspec._progress.reporter`.

    A bar with an ETA on a terminal, a line every few seconds elsewhere, nothing for a job shorter
    than that; ``close()`` it when the job ends.

    >>> import io
    >>> progress = terminal_progress("search", stream=io.StringIO())
    >>> progress(1, 4); progress.close()   # a short job prints nothing
    """
    from . import _progress
    return _progress.reporter(what, unit="chunks", stream=stream)


def auto_workers(workers: Any, estimate: float, budget: float | None = None) -> Any:
    """``workers`` as given, except :data:`AUTO`: ``0`` (every core) for a long job, ``None`` (this process) for a short one.

    ``estimate``: the seconds the job is expected to take in this process, from its size known up
    front (instances, configurations, cells); ``budget``: its time limit, which caps the estimate.
    A job under :data:`AUTO_MIN_SECONDS` (spawn platforms: :data:`AUTO_MIN_SECONDS_SPAWN`), a
    machine with one core, or a process :mod:`multiprocessing` started (:func:`in_worker_process`) stays
    in this process. The choice never changes a result: the chunked path merges in the sequential order.

    >>> auto_workers(None, 100.0), auto_workers(1, 100.0), auto_workers(AUTO, 0.5)
    (None, 1, None)
    >>> auto_workers(AUTO, 100.0) in (0, None)   # 0 where there are 2 cores or more
    True
    """
    if not (isinstance(workers, str) and workers == AUTO):
        return workers
    if resolve_workers(0) < 2 or in_worker_process():
        return None
    seconds = estimate if budget is None else min(estimate, budget)
    bar = AUTO_MIN_SECONDS if _mp_context().get_start_method() == "fork" else AUTO_MIN_SECONDS_SPAWN
    return 0 if seconds >= bar else None


def in_worker_process() -> bool:
    """Whether this process was started by :mod:`multiprocessing` (a pool's worker, a Dask worker, a daemon).

    ``workers="auto"`` stays in such a process: the job is already one of several spread over the cores (a
    sweep's cell searching on a worker), and a pool of pools would only oversubscribe them.

    >>> in_worker_process()
    False
    """
    return multiprocessing.parent_process() is not None or bool(multiprocessing.current_process().daemon)


def auto_stays_here(progress: Any, *needed: Callable[[], Any]) -> bool:
    """Whether a job that ``workers="auto"`` would spread over the cores must run in this process after all.

    It must when ``progress`` is a function (called per audit in this process, per finished chunk on workers:
    the caller's function keeps the meaning the docs give it), or when making one of ``needed`` (what the
    workers need, sent by value: a user's rule, a sampler) raises :class:`NotPicklable` (a lambda or a closure
    without cloudpickle): ``"auto"`` was never asked for explicitly, so it is not an error, and the job runs as
    it would without workers. An explicit ``workers=N`` still raises.

    >>> auto_stays_here(None, lambda: portable(len)), auto_stays_here(print)
    (False, True)
    """
    if callable(progress):
        return True
    for make in needed:
        try:
            make()
        except NotPicklable:
            return True
    return False


def wall_deadline(seconds: float | None) -> float | None:
    """The wall-clock (``time.time()``) deadline ``seconds`` from now, or None (``math.inf`` counts as None)."""
    if seconds is None or math.isinf(seconds):
        return None
    return time.time() + seconds
