"""What a search keeps while it runs: its limits, its clock, the instances it plans, its progress display.

Shared by the rule search (:mod:`exactspec.counterexamples.searching`) and the sampler search
(:mod:`exactspec.samplers.search`): the ``budget=`` / ``max_instances=`` / ``chunk_size=``
checks, the :class:`SearchClock` that counts audits and says when a limit stopped the search, the
instances of a space's cells in search order (:func:`cell_instances`, :func:`planned_instances`,
:func:`cell_sizes`), the default progress reporters, the tallies a chunk run on a worker sends back
(:class:`ChunkOut`, :func:`merge_chunk`), the chunks a parallel search cuts its instances into
(:class:`ChunkPlan`), and the :class:`IncompleteSearch` a stopped search returns.
Every object here belongs to one search call; nothing is shared between calls or threads.

>>> import exactspec as es
>>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",),
...                                  random_points=2)
>>> cell_sizes(space, space.cells())
[51]
>>> clock = SearchClock(seconds_limit(None, "budget"), count_limit(10, "max_instances", 1), None)
>>> clock.audited = 10
>>> clock.spent(), clock.stop_reason
(True, 'max_instances 10 reached')
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import numbers
import random
import time
from typing import Any, Callable, Iterator, Literal, Protocol, overload, cast

from .. import _progress
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, InvalidType, InvalidValue, RuleError
from .counterexample import IncompleteSearch
from .space import SearchInstance, Space, _denominator, random_law, simplex_grid

__all__ = ["ERROR_SAMPLES", "seconds_limit", "count_limit", "SearchClock", "describe_instance", "tally_failure",
           "incomplete_search", "cell_instances", "cell_sizes", "planned_instances", "PlannedProgress",
           "default_progress", "end_progress", "ChunkOut", "ChunkTally", "merge_chunk", "chunk_progress", "ChunkBar", "ChunkPlan"]


class ChunkTally(Protocol):
    """What :func:`merge_chunk` reads of a chunk's result (a :class:`ChunkOut`, or a sampler search's own)."""

    audited: int
    errors: list[int]
    samples: list[tuple[str, str]]
    over_budget: list[int]


class Named(Protocol):
    """What a search reports on: a rule, or a sampler's stand-in, with a ``name``."""

    @property
    def name(self) -> str: ...


#: how many (instance, message) pairs of instances where the rule raised a result keeps
ERROR_SAMPLES = 5


def seconds_limit(x: Any, name: str) -> float | None:
    """A time limit: None or ``inf`` (no limit), else a finite number of seconds > 0.

    >>> seconds_limit(2, "search: budget"), seconds_limit(float("inf"), "search: budget")
    (2.0, None)
    >>> seconds_limit(0, "search: budget")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: search: budget must be > 0 seconds (None for no limit), got 0
    """
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise InvalidType(f"{name} must be a number of seconds > 0 (or None for no limit), got {x!r}")
    try:
        v = float(x)
    except OverflowError:  # a huge Fraction or int: no practical limit
        v = math.inf
    if math.isnan(v):
        raise InvalidValue(f"{name} must be a number of seconds > 0 (or None for no limit), got nan")
    if v <= 0:
        raise InvalidValue(f"{name} must be > 0 seconds (None for no limit), got {x!r}")
    return None if math.isinf(v) else v


@overload
def count_limit(x: Any, name: str, lo: int, none_ok: Literal[False]) -> int: ...
@overload
def count_limit(x: Any, name: str, lo: int, none_ok: bool = True) -> int | None: ...


def count_limit(x: Any, name: str, lo: int, none_ok: bool = True) -> int | None:
    """A count option: an int >= ``lo`` (a bool is not one), or None when ``none_ok``.

    >>> count_limit(3, "search: max_instances", 1), count_limit(None, "search: max_instances", 1)
    (3, None)
    >>> count_limit(True, "worst: steps", 0, none_ok=False)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidType: worst: steps must be an int >= 0, got True
    """
    if x is None and none_ok:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        raise InvalidType(f"{name} must be an int >= {lo}{' or None' if none_ok else ''}, got {x!r}")
    elif x < lo:
        raise InvalidValue(f"{name} must be an int >= {lo}{' or None' if none_ok else ''}, got {x!r}")
    return x


class SearchClock:
    """Counts audits, watches the limits, and records the instances whose TV could not be computed.

    One clock per search call (``progress``: the search's reporter, or None).

    >>> clock = SearchClock(None, 2, None)
    >>> clock.spent(), clock.reasons()
    (False, [])
    >>> clock.audited = 2
    >>> clock.spent(), clock.reasons()
    (True, ['max_instances 2 reached'])
    """

    def __init__(self, seconds: float | None, instances: int | None, progress: Callable[..., Any] | None) -> None:
        self.start = time.perf_counter()
        self.seconds = seconds
        self.deadline = None if seconds is None else self.start + seconds
        self.max_instances = instances
        self.audited = 0
        self.errors = 0
        self.error_samples: list[tuple[str, str]] = []
        self.first_error: ExactSpecError | None = None
        self.over_budget = 0
        self.undecided = 0        # float code whose bias could not be told from its rounding (exit 3 each)
        self.stop_reason = ""     # set once a limit stopped the search
        self.progress = progress

    def spent(self) -> bool:
        if self.stop_reason:
            return True
        if self.max_instances is not None and self.audited >= self.max_instances:
            self.stop_reason = f"max_instances {self.max_instances} reached"
        elif self.deadline is not None and time.perf_counter() > self.deadline:
            self.stop_reason = f"time limit {self.seconds:g} s reached"
        return bool(self.stop_reason)

    def audit_budget(self) -> Budget | None:
        """The per-audit budget that keeps one audit inside the search's time limit."""
        if self.deadline is None:
            return None
        return Budget(seconds=max(self.deadline - time.perf_counter(), 1e-9))

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def report(self) -> None:
        """Tell ``progress`` how many audits are done: the default reporter at every audit, a user's callable
        ``progress(n, seconds)`` every 50."""
        if self.progress is not None and (isinstance(self.progress, PlannedProgress) or not self.audited % 50):
            self.progress(self.audited, self.elapsed())

    def reasons(self) -> list[str]:
        out = [self.stop_reason] if self.stop_reason else []
        if self.errors:
            out.append(f"the rule raised on {self.errors} of {self.audited} instances")
        if self.over_budget:
            out.append(f"the audit budget was exceeded on {self.over_budget} of {self.audited} instances")
        if self.undecided:
            out.append(f"undecided within float rounding on {self.undecided} of {self.audited} instances (bias and "
                       "rounding could not be told apart there)")
        return out


def describe_instance(inst: SearchInstance) -> str:
    """An instance with its laws, on one line (the error samples of a search report show it).

    >>> import exactspec as es
    >>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",))
    >>> describe_instance(next(cell_instances(space, space.cells()[0], random.Random(0)))).split("; ", 1)[1]
    'target (0, 1); draft (0, 1)'
    """
    laws = "; ".join(f"{name} " + " ".join("(" + ", ".join(str(x) for x in law) + ")" for law in group)
                     for name, group in (("target", inst.target), ("draft", inst.draft)))
    return f"{inst.describe()}; {laws}"


def tally_failure(clock: "SearchClock", exc: ExactSpecError, inst: SearchInstance, timed: bool) -> None:
    """Count an instance whose audit raised: cut by the search's own time limit (not audited), over a
    budget (exit code 3: covered incompletely), or an error of the rule (sampled for the report)."""
    if isinstance(exc, BudgetExceeded) and timed and exc.what == "seconds" and clock.deadline is not None \
            and time.perf_counter() >= clock.deadline:
        clock.audited -= 1
        clock.stop_reason = clock.stop_reason or f"time limit {clock.seconds:g} s reached"
    elif exc.exit_code == 3:
        clock.over_budget += 1
    else:
        clock.errors += 1
        clock.first_error = clock.first_error or exc
        if len(clock.error_samples) < ERROR_SAMPLES:
            clock.error_samples.append((describe_instance(inst), f"{type(exc).__name__}: {exc}"))


def _raise_if_all_raised(rule: Named, clock: SearchClock) -> None:
    """A rule that raised on every instance audited is broken, not unexamined: a RuleError (exit 2)."""
    if not clock.errors or clock.errors != clock.audited:
        return
    first = clock.first_error
    desc, msg = clock.error_samples[0]
    err = RuleError(f"{rule.name} raised on every one of the {clock.errors} instances the search audited; "
                    f"the first: {desc}: {msg}", rule=rule.name, trace=getattr(first, "trace", None),
                    replay=getattr(first, "_replay", None))
    raise err from first


def incomplete_search(rule: Named, space: Space, clock: SearchClock, cells: list[Any], covered: list[str],
                      stopped_in: tuple[Any, ...] | None) -> IncompleteSearch:
    """The :class:`IncompleteSearch` of a search that stopped (``covered``: the cells it finished).

    A rule that raised on every instance audited is not unexamined but broken: a :class:`RuleError`.

    >>> import exactspec as es
    >>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",))
    >>> clock = SearchClock(None, 1, None)
    >>> clock.audited = 1
    >>> clock.spent()
    True
    >>> incomplete_search(es.rules.speculative_sampling, space, clock, space.cells(), [], space.cells()[0]).reason
    'max_instances 1 reached'
    """
    _raise_if_all_raised(rule, clock)
    return IncompleteSearch(rule=rule.name, space=space.describe(), reason="; ".join(clock.reasons()),
                            audited=clock.audited, seconds=clock.elapsed(), cells_covered=len(covered),
                            cells_total=len(cells), covered=tuple(covered),
                            stopped_in="" if stopped_in is None else space.describe_cell(stopped_in),
                            errors=clock.errors, error_samples=tuple(clock.error_samples),
                            over_budget=clock.over_budget)


@functools.lru_cache(maxsize=64)
def _grid_pairs(vocab: int, denominator: int) -> tuple[Any, ...]:
    """Every (p, q) pair of the simplex grid, simplest first (the same for every cell of a vocab: made once)."""
    grid = simplex_grid(vocab, denominator)
    return tuple(sorted(itertools.product(grid, grid), key=lambda pq: (max(_denominator(pq[0]), _denominator(pq[1])),
                                                                       pq)))


def cell_instances(space: Space, cell: tuple[Any, ...], rng: random.Random) -> Iterator[SearchInstance]:
    """The instances of one cell in search order: the exhaustive grid pairs (context-free), then random points.

    >>> import exactspec as es
    >>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",),
    ...                                  random_points=2)
    >>> sum(1 for _ in cell_instances(space, space.cells()[0], random.Random(0))) == cell_sizes(space, space.cells())[0]
    True
    """
    vocab, shape, tokens, family = cell
    n = space.n_laws(vocab, family)
    if family == "context_free":
        for p, q in _grid_pairs(vocab, space.exhaustive_denominator)[: space.exhaustive_limit]:
            yield space.instance(vocab, shape, tokens, family, (p,), (q,))
    for _ in range(space.random_points):
        target = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        draft = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        yield space.instance(vocab, shape, tokens, family, target, draft)


class PlannedProgress:
    """The default progress of a search, as the clock calls it (``n, seconds``): ``n`` of the ``total``
    instances the space plans, on :func:`exactspec._progress.reporter` (a bar, or a line every few seconds)."""

    def __init__(self, bar: _progress.Reporter, total: int | None) -> None:
        self.bar, self.total = bar, total

    def __call__(self, done: int, seconds: float = 0.0) -> None:
        self.bar(done, self.total)

    def close(self) -> None:
        self.bar.close()


def default_progress(progress: Any = None, space: Space | None = None, limit: int | None = None,
                      what: str = "searching") -> Callable[..., Any] | None:
    """The clock's ``progress(n, seconds)`` for a search's ``progress=`` argument: the default reporter
    counting instances against the space's total (None or True), a user's callable as given, or None (False)."""
    if progress is False:
        return None
    if callable(progress) and progress is not True:
        return cast("Callable[..., Any] | None", progress)
    total = None
    if space is not None:
        total = sum(cell_sizes(space, space.cells()))
        total = total if limit is None else min(total, limit)
    bar = _progress.reporter(what, unit="instances")
    return None if bar is None else PlannedProgress(bar, total)


def end_progress(clock: "SearchClock") -> None:
    """Close the clock's default reporter (a user's callable is left alone)."""
    if isinstance(clock.progress, PlannedProgress):
        clock.progress.close()


class ChunkOut:
    """What one chunk of a parallel search or worst() sends back (picklable, small)."""

    __slots__ = ("audited", "biased_at", "errors", "samples", "over_budget", "cut", "tvs")

    def __init__(self) -> None:
        self.audited = 0                       # instances audited (an audit cut by the deadline is not counted)
        self.biased_at: int | None = None      # offset of the first biased instance (search: the chunk stops there)
        self.errors: list[int] = []            # offsets where the rule raised
        self.samples: list[tuple[str, str]] = []
        self.over_budget: list[int] = []       # offsets whose audit ran past its own budget
        self.cut = False                       # stopped by the deadline before its last instance
        self.tvs: list[Any] | None = None           # worst(): the TV of every audited instance (None: unknown)


def cell_sizes(space: Space, cells: list[Any]) -> list[int]:
    """How many instances :func:`cell_instances` yields for each cell (without making them).

    >>> import exactspec as es
    >>> cell_sizes(es.counterexamples.Space(vocabs=(2, 3), shapes=((1,),), tokens=(1,), families=("context_free",),
    ...                                     random_points=0), [(2, (1,), 1, "context_free")])
    [49]
    """
    grids: dict[int, int] = {}
    out = []
    for vocab, _, _, family in cells:
        n = space.random_points
        if family == "context_free":
            if vocab not in grids:
                grids[vocab] = len(simplex_grid(vocab, space.exhaustive_denominator))
            n += min(grids[vocab] ** 2, space.exhaustive_limit)
        out.append(n)
    return out


def planned_instances(space: Space, cells: list[Any], rng: random.Random, limit: int | None) -> Iterator[SearchInstance]:
    """Every instance of the space in search order, at most ``limit``: what the sequential search visits.

    >>> import exactspec as es
    >>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",))
    >>> len(list(planned_instances(space, space.cells(), random.Random(0), 5)))
    5
    """
    made = 0
    for cell in cells:
        for inst in cell_instances(space, cell, rng):
            if limit is not None and made >= limit:
                return
            made += 1
            yield inst


def merge_chunk(clock: SearchClock, out: ChunkTally, upto: int | None = None) -> None:
    """Add a chunk's counts to the clock (only offsets < ``upto``, when given: the sequential prefix).

    >>> clock, out = SearchClock(None, None, None), ChunkOut()
    >>> out.audited, out.errors, out.samples = 4, [1, 3], [("a", "ValueError: x"), ("b", "ValueError: y")]
    >>> merge_chunk(clock, out, upto=2)
    >>> clock.audited, clock.errors, clock.error_samples
    (2, 1, [('a', 'ValueError: x')])
    """
    for e, i in enumerate(out.errors):
        if upto is not None and i >= upto:
            break
        clock.errors += 1
        if len(clock.error_samples) < ERROR_SAMPLES and e < len(out.samples):
            clock.error_samples.append(out.samples[e])
    clock.over_budget += sum(1 for i in out.over_budget if upto is None or i < upto)
    clock.audited += out.audited if upto is None else min(out.audited, upto)


class ChunkPlan:
    """A search's instances cut into chunks of ``size`` for workers, in search order: both parallel searches' plan.

    It holds the space's cells and where each ends in the search order, the instances to cover (``n``:
    all of them, or the clock's ``max_instances``), the wall-clock deadline of the clock's budget
    (``time.time()``, as workers read it), and every chunk made so far (``parts``, filled as
    :meth:`jobs` hands them out).

    >>> import exactspec as es
    >>> space = es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",),
    ...                                  random_points=2)
    >>> plan = ChunkPlan(space, random.Random(0), SearchClock(None, None, None), None, 20, "search")
    >>> plan.n, plan.total, [len(job) for job in plan.jobs(lambda part: part)]
    (51, 3, [20, 20, 11])
    >>> plan.incomplete(es.rules.speculative_sampling, 51).cells_covered
    1
    """

    def __init__(self, space: Space, rng: random.Random, clock: SearchClock, chunk_size: Any, default_size: int,
                 what: str) -> None:
        self.space, self.rng, self.clock = space, rng, clock
        self.cells = space.cells()
        self.ends = list(itertools.accumulate(cell_sizes(space, self.cells)))   # where each cell ends
        self.everything = self.ends[-1] if self.ends else 0
        limit = clock.max_instances
        self.n = self.everything if limit is None else min(limit, self.everything)
        self.size = count_limit(chunk_size, f"{what}: chunk_size", 1) or default_size
        self.total = -(-self.n // self.size)
        self.deadline = None if clock.deadline is None else time.time() + (clock.deadline - time.perf_counter())
        self.parts: dict[int, list[SearchInstance]] = {}

    def jobs(self, job: Callable[[list[SearchInstance]], Any]) -> Iterator[Any]:
        """``job(instances)`` of each chunk in order, the chunk kept in :attr:`parts`."""
        stream = planned_instances(self.space, self.cells, self.rng, self.n)
        for k in range(self.total):
            self.parts[k] = list(itertools.islice(stream, self.size))
            yield job(self.parts[k])

    def lost(self, k: int, why: str | None) -> None:
        """Chunk ``k`` did not come back (``why``: the runner's reason, None for the time limit): the clock says so."""
        reason = why or "not finished by the time limit"
        start = k * self.size
        self.clock.stop_reason = self.clock.stop_reason or (
            f"time limit {self.clock.seconds:g} s reached" if "time limit" in reason else
            f"instances {start + 1}..{min(start + self.size, self.n)} of the search were not covered: {reason}")

    def incomplete(self, who: Named, pos: int) -> IncompleteSearch:
        """The search stopped before instance ``pos`` in search order: the cells wholly before it are covered."""
        c = bisect.bisect_right(self.ends, pos)
        cells = self.cells
        return incomplete_search(who, self.space, self.clock, cells, [self.space.describe_cell(cells[j])
                                                                      for j in range(c)],
                                 cells[c] if c < len(cells) else None)


def chunk_progress(clock: SearchClock, what: str, progress: Any, size: int,
                   n: int) -> Callable[[int, int], None] | None:
    """``run_chunks``' ``progress(done chunks, total)``: the default reporter counting instances (``size`` a chunk,
    ``n`` in all), or a user's ``progress(done chunks, seconds)``."""
    if progress is False:
        return None
    if progress is None or progress is True:
        bar = _progress.reporter(what, unit="instances")
        return None if bar is None else ChunkBar(bar, size, n)
    return lambda done, total: progress(done, clock.elapsed())


class ChunkBar:
    """Finished chunks as instances on a reporter (a chunk holds ``size`` of the ``n`` instances)."""

    def __init__(self, bar: _progress.Reporter, size: int, n: int) -> None:
        self.bar, self.size, self.n = bar, size, n

    def __call__(self, done: int, total: int) -> None:
        self.bar(min(done * self.size, self.n), self.n)

    def close(self) -> None:
        self.bar.close()

