"""Counterexample search: exhaustive small spaces, random rational points, hill climbing, shrinking.

>>> import exactspec as es
>>> found = es.counterexamples.search(es.rules.speculative_sampling, space=es.counterexamples.Space(
...     vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=2))
>>> bool(found), found.audited, found.complete
(False, 51, True)

A search that stops before covering its space returns an :class:`IncompleteSearch` (whose
``bool()`` raises), never a falsy "no counterexample":

>>> cut = es.counterexamples.search(es.rules.speculative_sampling, max_instances=3)
>>> cut.complete, cut.exit_code, cut.reason
(False, 3, 'max_instances 3 reached')
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import random
import time
from dataclasses import replace
from fractions import Fraction
from typing import Any, Callable, Iterator

from .. import _progress, parallel
from .._audit import audit
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ..rules import Rule, as_rule
from .counterexample import Counterexample, EmptySearch, IncompleteSearch
from .counterexample import _rule_ref as _valid_rule_ref
from .space import SearchInstance, Space, _denominator, default_space, random_law, simplex_grid

__all__ = ["search", "worst", "shrink", "shrink_by", "evaluate"]

#: how many (instance, message) pairs of instances where the rule raised a result keeps
ERROR_SAMPLES = 5

#: instances per chunk of a parallel search (about 40 ms of audits on the default space; see
#: benchmarks/bench_parallel.py for the per-chunk overhead this amortises)
SEARCH_CHUNK = 256

#: what ``workers="auto"`` assumes one audit of a search costs in this process, in seconds (the default
#: spaces' audits take 0.2-2.5 ms on a loaded 2-core machine; catalog rules' closed forms are the fast end)
SEARCH_INSTANCE_SECONDS = 1e-3


def _seconds(x: Any, name: str) -> float | None:
    """A time limit: None or ``inf`` (no limit), else a finite number of seconds > 0."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ExactSpecError(f"{name} must be a number of seconds > 0 (or None for no limit), got {x!r}")
    try:
        v = float(x)
    except OverflowError:  # a huge Fraction or int: no practical limit
        v = math.inf
    if math.isnan(v):
        raise ExactSpecError(f"{name} must be a number of seconds > 0 (or None for no limit), got nan")
    if v <= 0:
        raise ExactSpecError(f"{name} must be > 0 seconds (None for no limit), got {x!r}")
    return None if math.isinf(v) else v


def _count(x: Any, name: str, lo: int, none_ok: bool = True) -> int | None:
    if x is None and none_ok:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < lo:
        raise ExactSpecError(f"{name} must be an int >= {lo}{' or None' if none_ok else ''}, got {x!r}")
    return x


class _Clock:
    """Counts audits, watches the limits, and records the instances whose TV could not be computed."""

    def __init__(self, seconds: float | None, instances: int | None, progress: Callable | None) -> None:
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
        if self.progress is not None and (isinstance(self.progress, _Planned) or not self.audited % 50):
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


def _audit_one(rule: Rule, inst: SearchInstance, budget: Budget | None = None) -> Any:
    """The report, or the ExactSpecError the audit raised (a BudgetExceeded included)."""
    try:
        return audit(rule=rule, worst=0, budget=budget, progress=False, **inst.audit_kwargs())
    except ExactSpecError as exc:
        return exc


def evaluate(rule: Rule, inst: SearchInstance) -> Any:
    """The exact audit report of ``rule`` on ``inst``, or None when the rule raised there.

    A :class:`~exactspec.BudgetExceeded` propagates: it is not the rule's fault, but not an answer either.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> inst = es.counterexamples.SearchInstance(vocab=2, family="context_free", target=((F(3, 5), F(2, 5)),),
    ...                                          draft=((F(1, 2), F(1, 2)),), shape=(1,), tokens=1)
    >>> evaluate(es.rules.greedy_match_sampled, inst).tv
    Fraction(1, 5)
    """
    rep = _audit_one(rule, inst)
    if isinstance(rep, ExactSpecError):
        if rep.exit_code == 3:
            raise rep
        return None
    return rep


def _describe(inst: SearchInstance) -> str:
    laws = "; ".join(f"{name} " + " ".join("(" + ", ".join(str(x) for x in law) + ")" for law in group)
                     for name, group in (("target", inst.target), ("draft", inst.draft)))
    return f"{inst.describe()}; {laws}"


def _tv(rule: Rule, inst: SearchInstance, clock: _Clock, timed: bool = False) -> Fraction | None:
    """The exact TV on ``inst``, or None when it is unknown (the rule raised, or the audit ran past a budget).

    ``timed``: give the audit what is left of the search's time limit; an audit cut by it is not
    counted as audited, and the clock's ``stop_reason`` says the time limit was reached.
    """
    clock.audited += 1
    clock.report()
    rep = _audit_one(rule, inst, clock.audit_budget() if timed else None)
    if not isinstance(rep, ExactSpecError):
        return rep.tv
    _tally_failure(clock, rep, inst, timed)
    return None


def _tally_failure(clock: "_Clock", exc: ExactSpecError, inst: SearchInstance, timed: bool) -> None:
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
            clock.error_samples.append((_describe(inst), f"{type(exc).__name__}: {exc}"))


def _raise_if_all_raised(rule: Rule, clock: _Clock) -> None:
    """A rule that raised on every instance audited is broken, not unexamined: a RuleError (exit 2)."""
    if not clock.errors or clock.errors != clock.audited:
        return
    first = clock.first_error
    desc, msg = clock.error_samples[0]
    err = RuleError(f"{rule.name} raised on every one of the {clock.errors} instances the search audited; "
                    f"the first: {desc}: {msg}", rule=rule.name, trace=getattr(first, "trace", None),
                    replay=getattr(first, "_replay", None))
    raise err from first


def _incomplete(rule: Rule, space: Space, clock: _Clock, cells: list, covered: list[str],
                stopped_in: tuple | None) -> IncompleteSearch:
    _raise_if_all_raised(rule, clock)
    return IncompleteSearch(rule=rule.name, space=space.describe(), reason="; ".join(clock.reasons()),
                            audited=clock.audited, seconds=clock.elapsed(), cells_covered=len(covered),
                            cells_total=len(cells), covered=tuple(covered),
                            stopped_in="" if stopped_in is None else space.describe_cell(stopped_in),
                            errors=clock.errors, error_samples=tuple(clock.error_samples),
                            over_budget=clock.over_budget)


@functools.lru_cache(maxsize=64)
def _grid_pairs(vocab: int, denominator: int) -> tuple:
    """Every (p, q) pair of the simplex grid, simplest first (the same for every cell of a vocab: made once)."""
    grid = simplex_grid(vocab, denominator)
    return tuple(sorted(itertools.product(grid, grid), key=lambda pq: (max(_denominator(pq[0]), _denominator(pq[1])),
                                                                       pq)))


def _cell_instances(space: Space, cell: tuple, rng: random.Random) -> Iterator[SearchInstance]:
    vocab, shape, tokens, family = cell
    n = space.n_laws(vocab, family)
    if family == "context_free":
        for p, q in _grid_pairs(vocab, space.exhaustive_denominator)[: space.exhaustive_limit]:
            yield space.instance(vocab, shape, tokens, family, (p,), (q,))
    for _ in range(space.random_points):
        target = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        draft = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        yield space.instance(vocab, shape, tokens, family, target, draft)


class _Planned:
    """The default progress of a search, as the clock calls it (``n, seconds``): ``n`` of the ``total``
    instances the space plans, on :func:`exactspec._progress.reporter` (a bar, or a line every few seconds)."""

    def __init__(self, bar: _progress.Reporter, total: int) -> None:
        self.bar, self.total = bar, total

    def __call__(self, done: int, seconds: float = 0.0) -> None:
        self.bar(done, self.total)

    def close(self) -> None:
        self.bar.close()


def _default_progress(progress: Any = None, space: Space | None = None, limit: int | None = None,
                      what: str = "searching") -> Callable | None:
    """The clock's ``progress(n, seconds)`` for a search's ``progress=`` argument: the default reporter
    counting instances against the space's total (None or True), a user's callable as given, or None (False)."""
    if progress is False:
        return None
    if callable(progress) and progress is not True:
        return progress
    total = None
    if space is not None:
        total = sum(_cell_sizes(space, space.cells()))
        total = total if limit is None else min(total, limit)
    bar = _progress.reporter(what, unit="instances")
    return None if bar is None else _Planned(bar, total)


def _end_progress(clock: "_Clock") -> None:
    """Close the clock's default reporter (a user's callable is left alone)."""
    if isinstance(clock.progress, _Planned):
        clock.progress.close()


def rule_reference(rule: Rule) -> str:
    from ..rules import catalog
    if any(r is rule or r.name == rule.name for r in catalog()):
        return ""
    mod, qual = getattr(rule.fn, "__module__", ""), getattr(rule.fn, "__qualname__", "")
    if isinstance(mod, str) and isinstance(qual, str) and mod and mod != "__main__" and "<" not in qual:
        ref = f"{mod}.{qual}"
        try:  # rendered as an import line: only a dotted path of identifiers qualifies
            return _valid_rule_ref(ref)
        except ExactSpecError:
            return ""
    return ""


def _counterexample(rule: Rule, inst: SearchInstance, space: Space, clock: _Clock, steps: int,
                    stopped: str = "") -> Counterexample:
    rep = evaluate(rule, inst)
    return Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                          expected=dict(rep.expected), tv=rep.tv, space=space.describe(), audited=clock.audited,
                          seconds=clock.elapsed(), shrink_steps=steps, rule_ref=rule_reference(rule),
                          complete=not stopped, stopped=stopped)


def search(rule: Any, *, proposer: Any = None, space: Space | None = None, seed: int = 0,
           budget: float | None = None, max_instances: int | None = None,
           progress: Callable[[int, float], None] | bool | None = None, executor: Any = None,
           workers: int | str | None = parallel.AUTO, chunk_size: int | None = None
           ) -> Counterexample | EmptySearch | IncompleteSearch:
    """Look for the smallest instance on which ``rule``'s output law differs from the expected law.

    Cells of the space are visited in shrink order (vocab, drafts, tokens, family); in each,
    every context-free pair on the small-denominator grid is audited, then random rational
    instances. The first biased instance is shrunk (see :func:`shrink`) and returned as a
    :class:`Counterexample`. Rules claiming ``lossless-greedy`` are compared with the greedy
    sequence. Deterministic for a given ``seed``.

    Without a counterexample, the result says how much of the space was covered:

    - :class:`EmptySearch` (falsy, exit code 0): every instance of the space was audited
      and is lossless;
    - :class:`IncompleteSearch` (``bool()`` raises, exit code 3): the search stopped at
      ``budget`` seconds or ``max_instances`` audits, or the TV of some instances is unknown
      because the rule raised there or their audit ran past its budget (a budget is not the
      rule's fault: the instance is recorded as uncovered and the search goes on);
    - a rule that raised on *every* instance audited raises :class:`~exactspec.RuleError`.

    ``budget``: seconds > 0, ``None`` or ``float("inf")`` for no limit (an audit in progress
    is cut at the limit). ``max_instances``: an int >= 1 or ``None``. Anything else (0, a
    negative number, NaN, a bool, a string) is an :class:`~exactspec.ExactSpecError`.

    ``executor`` (any :class:`concurrent.futures.Executor`, e.g. a Dask client's
    ``get_executor()``) or ``workers`` (a local process pool; ``0``: every core; ``1``: this
    process) run the audits in chunks of ``chunk_size`` consecutive instances (default
    :data:`SEARCH_CHUNK`), through :mod:`exactspec.parallel`. The result is the same as
    in-process, whatever the number of workers: the first biased instance *in search order*
    is shrunk here (chunks after it are cancelled, chunks before it finish), the counts are
    those of the sequential search. Budgets hold across workers; chunks lost with their workers
    are retried, and a chunk still not covered makes the result an :class:`IncompleteSearch`.
    There, ``progress(n, seconds)`` counts finished chunks. ``workers="auto"`` (the default, here and on
    the command line) is every core when the space plans enough instances to pay for a pool
    (:func:`exactspec.parallel.auto_workers`), this process otherwise, and this process too for a rule
    that cannot be sent to workers (a lambda or closure without cloudpickle) or with a ``progress``
    function (:func:`exactspec.parallel.auto_stays_here`); ``workers=None`` keeps every audit here.

    ``progress``: ``None`` or ``True`` (default) shows the search's progress on stderr, counting
    instances against the space's total (a bar with an ETA on a terminal, a line every few
    seconds elsewhere, nothing for a search shorter than that: :mod:`exactspec._progress`);
    ``False`` shows nothing; a callable is called as ``progress(n, seconds)`` every 50 audits.

    >>> import exactspec as es
    >>> ce = search(es.rules.greedy_match_sampled)
    >>> ce.explanation
    'token 0 is emitted with probability 3/4 but the target gives 1/2 (exact TV 1/4)'
    >>> ce.instance.target, ce.instance.draft   # p = q = (1/2, 1/2): the tie goes to token 0, and so does the bias
    (((Fraction(1, 2), Fraction(1, 2)),), ((Fraction(1, 2), Fraction(1, 2)),))
    >>> search(es.rules.greedy_match_sampled, budget=0)
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: search: budget must be > 0 seconds (None for no limit), got 0
    """
    rule = as_rule(rule)
    seconds = _seconds(budget, "search: budget")
    max_instances = _count(max_instances, "search: max_instances", 1)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"search|{seed}")
    if isinstance(workers, str) and workers == parallel.AUTO:
        planned = sum(_cell_sizes(space, space.cells()))
        planned = planned if max_instances is None else min(planned, max_instances)
        workers = parallel.auto_workers(workers, planned * SEARCH_INSTANCE_SECONDS, seconds)
        if workers is not None and parallel.auto_stays_here(progress, lambda: parallel.portable_rule(rule)):
            workers = None
    if parallel.parallel_requested(executor, workers):
        return _search_chunked(rule, space, rng, _Clock(seconds, max_instances, progress if callable(progress)
                                                        and progress is not True else None),
                               executor, workers, chunk_size, progress)
    clock = _Clock(seconds, max_instances, _default_progress(progress, space, max_instances))
    cells = space.cells()
    covered: list[str] = []
    try:
        for cell in cells:
            for inst in _cell_instances(space, cell, rng):
                if clock.spent():
                    return _incomplete(rule, space, clock, cells, covered, cell)
                tv = _tv(rule, inst, clock, timed=True)
                if tv is not None and tv > 0:
                    small, steps = shrink(rule, inst, space=space, _clock=clock)
                    return _counterexample(rule, small, space, clock, steps)
            if clock.stop_reason:  # the cell's last audit was cut by the time limit
                return _incomplete(rule, space, clock, cells, covered, cell)
            covered.append(space.describe_cell(cell))
        if clock.errors or clock.over_budget:
            return _incomplete(rule, space, clock, cells, covered, None)
        return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())
    finally:
        _end_progress(clock)


# -- the chunked (parallel) search ----------------------------------------------------------------------

class _ChunkOut:
    """What one chunk of a parallel search or worst() sends back (picklable, small)."""

    __slots__ = ("audited", "biased_at", "errors", "samples", "over_budget", "cut", "tvs")

    def __init__(self) -> None:
        self.audited = 0                       # instances audited (an audit cut by the deadline is not counted)
        self.biased_at: int | None = None      # offset of the first biased instance (search: the chunk stops there)
        self.errors: list[int] = []            # offsets where the rule raised
        self.samples: list[tuple[str, str]] = []
        self.over_budget: list[int] = []       # offsets whose audit ran past its own budget
        self.cut = False                       # stopped by the deadline before its last instance
        self.tvs: list | None = None           # worst(): the TV of every audited instance (None: unknown)


def _audit_chunk(job: tuple) -> _ChunkOut:
    """Audit a chunk's instances in order (a worker's side); stop at the first bias when asked, or at the deadline."""
    rule_ref, insts, deadline, stop_at_bias, keep_tvs = job
    rule = parallel.load_rule(rule_ref)
    out = _ChunkOut()
    if keep_tvs:
        out.tvs = []
    for i, inst in enumerate(insts):
        budget = None
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                out.cut = True
                break
            budget = Budget(seconds=left)
        rep = _audit_one(rule, inst, budget)
        if isinstance(rep, ExactSpecError):
            if isinstance(rep, BudgetExceeded) and rep.what == "seconds" and deadline is not None \
                    and time.time() >= deadline:
                out.cut = True
                break
            out.audited += 1
            if rep.exit_code == 3:
                out.over_budget.append(i)
            else:
                out.errors.append(i)
                if len(out.samples) < ERROR_SAMPLES:
                    out.samples.append((_describe(inst), f"{type(rep).__name__}: {rep}"))
            if keep_tvs:
                out.tvs.append(None)
            continue
        out.audited += 1
        if keep_tvs:
            out.tvs.append(rep.tv)
        if stop_at_bias and rep.tv > 0:
            out.biased_at = i
            break
    return out


def _cell_sizes(space: Space, cells: list) -> list[int]:
    """How many instances :func:`_cell_instances` yields for each cell (without making them)."""
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


def _planned(space: Space, cells: list, rng: random.Random, limit: int | None) -> Iterator[SearchInstance]:
    """Every instance of the space in search order, at most ``limit``: what the sequential search visits."""
    made = 0
    for cell in cells:
        for inst in _cell_instances(space, cell, rng):
            if limit is not None and made >= limit:
                return
            made += 1
            yield inst


def _merge_chunk(clock: _Clock, out: _ChunkOut, upto: int | None = None) -> None:
    """Add a chunk's counts to the clock (only offsets < ``upto``, when given: the sequential prefix)."""
    for e, i in enumerate(out.errors):
        if upto is not None and i >= upto:
            break
        clock.errors += 1
        if len(clock.error_samples) < ERROR_SAMPLES and e < len(out.samples):
            clock.error_samples.append(out.samples[e])
    clock.over_budget += sum(1 for i in out.over_budget if upto is None or i < upto)
    clock.audited += out.audited if upto is None else min(out.audited, upto)


def _chunk_progress(clock: _Clock, what: str, progress: Any, size: int, n: int) -> Callable[[int, int], None] | None:
    """``run_chunks``' ``progress(done chunks, total)``: the default reporter counting instances (``size`` a chunk,
    ``n`` in all), or a user's ``progress(done chunks, seconds)``."""
    if progress is False:
        return None
    if progress is None or progress is True:
        bar = _progress.reporter(what, unit="instances")
        return None if bar is None else _ChunkBar(bar, size, n)
    return lambda done, total: progress(done, clock.elapsed())


class _ChunkBar:
    """Finished chunks as instances on a reporter (a chunk holds ``size`` of the ``n`` instances)."""

    def __init__(self, bar: _progress.Reporter, size: int, n: int) -> None:
        self.bar, self.size, self.n = bar, size, n

    def __call__(self, done: int, total: int) -> None:
        self.bar(min(done * self.size, self.n), self.n)

    def close(self) -> None:
        self.bar.close()


def _first_error(rule: Rule, clock: _Clock, parts: dict, run: Any) -> None:
    """Rebuild the first error (the audit is replayed here) so that a rule that always raised is a RuleError."""
    if clock.errors and clock.errors == clock.audited:
        for k in sorted(run.results):
            out = run.results[k]
            if out.errors and k in parts:
                clock.first_error = _audit_one(rule, parts[k][out.errors[0]])
                if not isinstance(clock.first_error, ExactSpecError):
                    clock.first_error = None
                return


def _search_chunked(rule: Rule, space: Space, rng: random.Random, clock: _Clock, executor: Any, workers: Any,
                    chunk_size: int | None, progress: Any) -> Counterexample | EmptySearch | IncompleteSearch:
    import bisect
    cells = space.cells()
    sizes = _cell_sizes(space, cells)
    ends = list(itertools.accumulate(sizes))        # instance positions where each cell ends
    everything = ends[-1] if ends else 0
    limit = clock.max_instances
    n = everything if limit is None else min(limit, everything)
    limited = n < everything                        # max_instances stops the search before the space's end
    size = _count(chunk_size, "search: chunk_size", 1) or SEARCH_CHUNK
    total = -(-n // size)
    deadline = None if clock.deadline is None else time.time() + (clock.deadline - time.perf_counter())
    ref = parallel.portable_rule(rule)
    parts: dict[int, list[SearchInstance]] = {}     # the instances of every chunk made so far

    def jobs() -> Iterator[tuple]:
        stream = _planned(space, cells, rng, n)
        for k in range(total):
            parts[k] = list(itertools.islice(stream, size))
            yield (ref, parts[k], deadline, True, False)

    shown = _chunk_progress(clock, "searching", progress, size, n)
    try:
        run = parallel.run_on(_audit_chunk, jobs(), total=total, executor=executor, workers=workers,
                              deadline=deadline, final=lambda out: out.biased_at is not None or out.cut,
                              progress=shown)
    finally:
        if isinstance(shown, _ChunkBar):
            shown.close()

    def cell_of(pos: int) -> int:  # the cell of instance ``pos`` (len(cells) past the last one)
        return bisect.bisect_right(ends, pos)

    def stop(pos: int) -> IncompleteSearch:  # incomplete, the sequential search having stopped before ``pos``
        _first_error(rule, clock, parts, run)
        c = cell_of(pos)
        return _incomplete(rule, space, clock, cells, [space.describe_cell(cells[j]) for j in range(c)],
                           cells[c] if c < len(cells) else None)

    for k in range(total):
        start = k * size
        out = run.results.get(k)
        if out is None:  # lost (a worker died too often, or it did not return by the time limit)
            reason = run.lost.get(k, "not finished by the time limit")
            clock.stop_reason = clock.stop_reason or (
                f"time limit {clock.seconds:g} s reached" if "time limit" in reason else
                f"instances {start + 1}..{min(start + size, n)} of the search were not covered: {reason}")
            return stop(start)
        if out.biased_at is not None:
            _merge_chunk(clock, out, upto=out.biased_at + 1)
            small, steps = shrink(rule, parts[k][out.biased_at], space=space, _clock=clock)
            return _counterexample(rule, small, space, clock, steps)
        _merge_chunk(clock, out)
        if out.cut:
            clock.stop_reason = clock.stop_reason or f"time limit {clock.seconds:g} s reached"
            later = [j for j in run.results if j > k and run.results[j].biased_at is not None]
            if later:
                j = min(later)
                clock.stop_reason += (f"; a biased instance was found later in the search order "
                                      f"({_describe(parts[j][run.results[j].biased_at])}) before the earlier "
                                      "instances were covered: rerun with more time for the minimal one")
            return stop(start + out.audited)
    if limited:
        clock.stop_reason = f"max_instances {limit} reached"
        return stop(n)
    if clock.errors or clock.over_budget:
        _first_error(rule, clock, parts, run)
        return _incomplete(rule, space, clock, cells, [space.describe_cell(c) for c in cells], None)
    return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())


def _sample_chunked(rule: Rule, space: Space, cells: list, rng: random.Random, clock: _Clock, scored: list,
                    covered: list, executor: Any, workers: Any, chunk_size: int | None) -> tuple | None:
    """worst()'s sampling phase on an executor: fills ``scored`` and ``covered`` as the sequential loop would."""
    import bisect
    ends = list(itertools.accumulate(_cell_sizes(space, cells)))
    n = ends[-1] if ends else 0
    size = _count(chunk_size, "worst: chunk_size", 1) or SEARCH_CHUNK
    total = -(-n // size)
    deadline = None if clock.deadline is None else time.time() + (clock.deadline - time.perf_counter())
    ref = parallel.portable_rule(rule)
    parts: dict[int, list[SearchInstance]] = {}

    def jobs() -> Iterator[tuple]:
        stream = _planned(space, cells, rng, None)
        for k in range(total):
            parts[k] = list(itertools.islice(stream, size))
            yield (ref, parts[k], deadline, False, True)

    run = parallel.run_on(_audit_chunk, jobs(), total=total, executor=executor, workers=workers, deadline=deadline,
                          final=lambda out: out.cut)
    pos = n
    for k in range(total):
        out = run.results.get(k)
        if out is None:
            reason = run.lost.get(k, "not finished by the time limit")
            clock.stop_reason = clock.stop_reason or (
                f"time limit {clock.seconds:g} s reached" if "time limit" in reason else
                f"instances {k * size + 1}..{min(k * size + size, n)} were not covered: {reason}")
            pos = k * size
            break
        _merge_chunk(clock, out)
        for inst, tv in zip(parts[k], out.tvs or []):
            if tv is not None:
                scored.append((tv, len(scored), inst))
        if out.cut:
            clock.stop_reason = clock.stop_reason or f"time limit {clock.seconds:g} s reached"
            pos = k * size + out.audited
            break
    c = bisect.bisect_right(ends, pos) if pos < n else len(cells)
    covered.extend(space.describe_cell(cells[j]) for j in range(c))
    return cells[c] if c < len(cells) else None


# -- shrinking ----------------------------------------------------------------------------------------

def _drop_token(inst: SearchInstance, t: int) -> SearchInstance | None:
    def squash(law: tuple) -> tuple | None:
        kept = law[:t] + law[t + 1:]
        total = sum(kept)
        return None if not total else tuple(x / total for x in kept)
    laws = []
    for group in (inst.target, inst.draft):
        rows = group if inst.family != "table" else group[:t] + group[t + 1:]
        new = tuple(squash(law) for law in rows)
        if any(law is None for law in new):
            return None
        laws.append(new)
    prompt = tuple(x - (x > t) for x in inst.prompt if x != t) or (() if inst.family != "table" else (0,))
    return replace(inst, vocab=inst.vocab - 1, target=laws[0], draft=laws[1], prompt=prompt)


def _smaller_shapes(inst: SearchInstance) -> list[tuple[int, ...]]:
    s = inst.shape
    if inst.proposer_kind == "chain":
        return [(g,) for g in range(1, s[0])]
    out = [s[:-1]] if len(s) > 1 else []
    out += [s[:i] + (s[i] - 1,) + s[i + 1:] for i in range(len(s)) if s[i] > 1]
    return out


def _simpler_families(inst: SearchInstance) -> list[SearchInstance]:
    out = []
    if inst.family == "per_position" or inst.family == "table":
        for i in range(len(inst.target)):
            out.append(replace(inst, family="context_free", target=(inst.target[i],), draft=(inst.draft[i],),
                               prompt=()))
    if inst.family == "table" and inst.vocab >= 2:
        out.append(replace(inst, family="per_position", target=inst.target[:2], draft=inst.draft[:2], prompt=()))
    return out


def _simpler_laws(inst: SearchInstance, limit: int = 60) -> Iterator[SearchInstance]:
    """Replace one law at a time by a law of a strictly smaller denominator."""
    d = inst.max_denominator()
    if d <= 1:
        return
    grid = [law for law in simplex_grid(inst.vocab, d - 1)][:limit]
    for which in ("target", "draft"):
        group = getattr(inst, which)
        for i, law in enumerate(group):
            if _denominator(law) < d:
                continue
            for cand in grid:
                yield replace(inst, **{which: group[:i] + (cand,) + group[i + 1:]})


def shrink(rule: Any, inst: SearchInstance, *, space: Space | None = None,
           _clock: _Clock | None = None) -> tuple[SearchInstance, int]:
    """Shrink a biased instance: smaller vocab, then drafts, tokens, family, denominators; keep TV > 0.

    Returns the smallest instance reached and the number of accepted shrink steps; every step
    strictly lowers :meth:`SearchInstance.key`, so shrinking ends.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> big = es.counterexamples.SearchInstance(vocab=3, family="context_free",
    ...     target=((F(1, 6), F(1, 2), F(1, 3)),), draft=((F(1, 3), F(1, 3), F(1, 3)),), shape=(3,), tokens=3)
    >>> small, _ = shrink(es.rules.greedy_match_sampled, big)
    >>> small.vocab, small.shape, small.tokens
    (2, (1,), 1)
    """
    rule = as_rule(rule)
    clock = _clock or _Clock(None, None, None)

    def biased(cand: SearchInstance) -> bool:
        tv = _tv(rule, cand, clock)
        return tv is not None and tv > 0
    return shrink_by(biased, inst)


def shrink_by(biased: Callable[[SearchInstance], bool], inst: SearchInstance) -> tuple[SearchInstance, int]:
    """:func:`shrink` with any test of bias: ``biased(candidate)`` says whether a smaller candidate is still biased.

    Candidates are tried in shrink order (one token fewer, fewer drafts, fewer tokens, a simpler
    family, smaller denominators); the first biased one is kept and shrinking starts again from
    it. Returns the smallest instance reached and the number of accepted steps.

    >>> from fractions import Fraction as F
    >>> big = SearchInstance(vocab=3, family="context_free", target=((F(1, 3), F(1, 3), F(1, 3)),),
    ...                      draft=((F(1, 3), F(1, 3), F(1, 3)),), shape=(2,), tokens=3)
    >>> small, steps = shrink_by(lambda cand: cand.tokens >= 2, big)   # "biased" from 2 tokens on
    >>> small.vocab, small.shape, small.tokens, steps
    (2, (1,), 2, 3)
    """
    steps = 0

    def smaller_and_biased(cand: SearchInstance | None) -> bool:
        return cand is not None and cand.key() < inst.key() and biased(cand)

    improved = True
    while improved:
        improved = False
        candidates: list[Callable[[], Iterator[SearchInstance | None]]] = [
            lambda: (_drop_token(inst, t) for t in range(inst.vocab) if inst.vocab > 2),
            lambda: (replace(inst, shape=s) for s in _smaller_shapes(inst)),
            lambda: (replace(inst, tokens=n) for n in range(1, inst.tokens)),
            lambda: iter(_simpler_families(inst)),
            lambda: _simpler_laws(inst),
        ]
        for make in candidates:
            for cand in make():
                if smaller_and_biased(cand):
                    inst, steps, improved = cand, steps + 1, True
                    break
            if improved:
                break
    return inst, steps


# -- worst ------------------------------------------------------------------------------------------------

def _neighbours(inst: SearchInstance, rng: random.Random, denominator: int) -> SearchInstance:
    """Move 1/denominator of mass between two entries of one random law."""
    which = rng.choice(("target", "draft"))
    group = list(getattr(inst, which))
    i = rng.randrange(len(group))
    law = list(group[i])
    a, b = rng.sample(range(len(law)), 2)
    step = min(Fraction(1, denominator), law[a])
    if step:
        law[a] -= step
        law[b] += step
    group[i] = tuple(law)
    return replace(inst, **{which: tuple(group)})


def worst(rule: Any, space: Space | None = None, *, proposer: Any = None, seed: int = 0,
          budget: float | None = 10.0, restarts: int = 4, steps: int = 60, executor: Any = None,
          workers: int | None = None, chunk_size: int | None = None
          ) -> Counterexample | EmptySearch | IncompleteSearch:
    """The largest exact TV found in ``space``: random rational instances, then hill climbing on the TV.

    The plan: sample every cell (at most 200 grid pairs per cell, then the random points),
    then climb from the ``restarts`` best instances for ``steps`` moves each. A plan cut short
    by ``budget`` (seconds; ``None`` or ``inf``: no limit), or with instances whose TV is
    unknown (the rule raised, or an audit ran past its budget), is incomplete:

    - a bias was found: a :class:`Counterexample` with ``complete=False`` and ``stopped``
      giving the reason (the largest TV *found so far*; its text says so);
    - none was found: an :class:`IncompleteSearch` (exit code 3), never an :class:`EmptySearch`;
    - the rule raised on every instance: :class:`~exactspec.RuleError`.

    ``executor`` / ``workers`` / ``chunk_size``: the sampling phase runs in chunks on an executor
    (see :func:`search`) and is merged in order, so the result does not depend on the number of
    workers; the hill climbs (a few hundred audits that follow one another) run here.

    >>> import exactspec as es
    >>> w = worst(es.rules.greedy_match_sampled, es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,),
    ...           families=("context_free",), random_points=5), steps=10, restarts=1)
    >>> w.tv, w.complete   # TV = q(a) * (1 - p(a)) with a = argmax p: largest at q(a) = 1, p(a) = 1/2
    (Fraction(1, 2), True)
    """
    rule = as_rule(rule)
    seconds = _seconds(budget, "worst: budget")
    restarts = _count(restarts, "worst: restarts", 0, none_ok=False)
    steps = _count(steps, "worst: steps", 0, none_ok=False)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"worst|{seed}")
    clock = _Clock(seconds, None, None)
    scored: list[tuple[Fraction, int, SearchInstance]] = []
    cells = space.cells()
    covered: list[str] = []
    stopped_in: tuple | None = None
    sampled = space.with_(exhaustive_limit=min(space.exhaustive_limit, 200))
    if parallel.parallel_requested(executor, workers):
        stopped_in = _sample_chunked(rule, sampled, cells, rng, clock, scored, covered, executor, workers,
                                     chunk_size)
    for cell in ([] if parallel.parallel_requested(executor, workers) else cells):
        for inst in _cell_instances(sampled, cell, rng):
            if clock.spent():
                break
            tv = _tv(rule, inst, clock, timed=True)
            if tv is not None:
                scored.append((tv, len(scored), inst))
        if clock.stop_reason:
            stopped_in = cell
            break
        covered.append(space.describe_cell(cell))
    best_tv, best = Fraction(0), None
    if scored:
        scored.sort(key=lambda s: (-s[0], s[1]))
        best_tv, _, best = scored[0]
    for start_tv, _, start in scored[:restarts]:
        cur_tv, cur = start_tv, start
        for _ in range(steps):
            if clock.spent():
                break
            cand = _neighbours(cur, rng, max(space.max_denominator, cur.max_denominator()))
            tv = _tv(rule, cand, clock, timed=True)
            if tv is not None and tv > cur_tv:
                cur_tv, cur = tv, cand
        if cur_tv > best_tv:
            best_tv, best = cur_tv, cur
    reasons = clock.reasons()
    if best_tv > 0:
        return _counterexample(rule, best, space, clock, 0, stopped="; ".join(reasons))
    if reasons:
        return _incomplete(rule, space, clock, cells, covered, stopped_in)
    return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())
