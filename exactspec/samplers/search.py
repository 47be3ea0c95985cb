"""A single instance is not an audit: search small instances for the smallest one on which a sampler is biased.

:func:`search_sampler` runs :func:`exactspec.audit_sampler` (with its rounding-aware verdict) on
every instance of a small space, smallest first, as :func:`exactspec.counterexamples.search`
does for rules, and returns

- a minimal :class:`~exactspec.counterexamples.Counterexample` (exit code 1) whose
  :meth:`~exactspec.counterexamples.Counterexample.to_pytest` imports the sampler and audits it
  on that instance through the same adapter; a sampler that raises on an instance (with
  positive probability: it crashes on a valid input) gives one of ``kind`` ``"crash"``, the
  minimal crashing instance with the crash's exact probability, exception and line,
- an :class:`~exactspec.counterexamples.EmptySearch` (falsy, exit code 0) stating the space
  it covered, every instance of it lossless up to rounding,
- or an :class:`~exactspec.counterexamples.IncompleteSearch` (exit code 3, ``bool()`` raises)
  when a time limit or ``max_instances`` stopped it, or the audit failed on some instances
  without a crash of the sampler (an audit budget, a broken contract such as a token outside
  the vocabulary): never an empty result.

:func:`search_instances` is the generic search under it: any per-instance audit
``audit_one(instance) -> AuditReport`` (a whole-loop audit, say) is searched the same way.

>>> import exactspec as es
>>> from exactspec.bugzoo import numpy_samplers as zoo
>>> ce = search_sampler(zoo.shared_uniform, adapter="numpy")
>>> ce.instance.vocab, ce.instance.shape, ce.instance.tokens, ce.sampler_ref
(2, (2,), 2, 'exactspec.bugzoo.numpy_samplers:shared_uniform')
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from dataclasses import replace
from fractions import Fraction
from typing import Any, Callable, Iterator

from ..counterexamples.counterexample import (Counterexample, EmptySearch, IncompleteSearch, crash_record,
                                              valid_sampler_ref)
from .. import parallel
from .._device import one_torch_thread
from ..counterexamples.bookkeeping import (ERROR_SAMPLES, ChunkBar, ChunkPlan, SearchClock, cell_instances, cell_sizes,
                                           chunk_progress, count_limit, default_progress, describe_instance,
                                           end_progress, incomplete_search, merge_chunk,
                                           seconds_limit, tally_failure)
from ..counterexamples.searching import shrink_by
from ..counterexamples.space import SearchInstance, Space
from ..enumerate import Budget
from ..enumerate.step import check_budget
from ..errors import (BudgetExceeded, ExactSpecError, InexactArithmetic, InvalidType, InvalidValue, RuleError,
                      UnsupportedRandomness)
from ..report import AuditReport
from .instance import audit_instance
from .adapters.fit import DEFAULT_ADAPTER, check_default_adapter
from .randomness.interception import intercepting

__all__ = ["search_sampler", "search_instances", "sampler_space", "sampler_reference", "split_budget"]

#: instances per chunk of a sampler search on workers (an instance's audit takes 5-200 ms: a chunk amortises
#: the worker's patching of the random functions and the transfer, and leaves a few chunks per core)
SAMPLER_CHUNK = 16

#: what ``workers="auto"`` assumes one instance of a sampler search costs in this process, in seconds: the numpy
#: adapters' and torch adapters' (measured on a loaded 2-core machine: the default search of numpy's correct
#: sampler, 243 instances, ~3 s CPU; of the vLLM-style torch one ~26 s CPU; benchmarks/bench_speed_sampler_workers.py)
SAMPLER_INSTANCE_SECONDS = 0.012
TORCH_SAMPLER_INSTANCE_SECONDS = 0.1

#: the keys of the instance dict handed to ``audit_one`` (see :func:`search_instances`)
INSTANCE_KEYS = ("target", "draft", "proposer", "prompt", "tokens", "budget")


def sampler_space(family: str = "chain", proposer: Any = None) -> Space:
    """The space a sampler search covers by default: small vocabularies and steps, tokens up to depth + 1.

    Chains: vocab 2..4, gamma 1..3; trees: vocab 2..3, expansions (1,) (2,) (1, 1) (3,) (2, 1). Each
    at the horizon depth + 1 (gamma + 1 for chains: a first step's bonus position is observed):
    the law of fewer tokens is a marginal of it, so its exact TV to the target is at most the TV
    at depth + 1 and a support violation there is one at depth + 1 too (a counterexample is then
    shrunk to the fewest tokens). Context-free, per-position and order-1 models; per cell, the
    first 9 context-free (p, q) pairs of the grid of denominators <= 2 (all of them for vocab 2,
    point masses for larger vocabularies) and 6 random rational instances with denominators <= 7
    (zeros included): 243 instances for chains, 270 for trees. A given ``proposer`` fixes how
    drafts are made and what the verifier is told (chains: ``sampling`` and ``claim``; trees:
    ``children`` and ``claim``).

    >>> sampler_space().describe()[:82]
    'vocab 2..4, gamma {1, 2, 3}, tokens gamma + 1 (shorter horizons are its marginals)'
    >>> len(sampler_space().cells()), len(sampler_space("tree").cells())   # 3 x 3 x 3 and 2 x 5 x 3
    (27, 30)
    """
    if family not in ("chain", "tree"):
        raise InvalidValue(f"sampler_space: family must be 'chain' or 'tree', got {family!r}")
    common: dict[str, Any] = dict(tokens=(1, 2, 3, 4), extra_tokens=1, only_longest=True, exhaustive_denominator=2,
                                  exhaustive_limit=9, max_denominator=7, random_points=6)
    claim = getattr(proposer, "claim", "draft") if proposer is not None else "draft"
    if family == "tree":
        children = getattr(proposer, "children", "iid") if proposer is not None else "iid"
        return Space(vocabs=(2, 3), shapes=((1,), (2,), (1, 1), (3,), (2, 1)), proposer_kind="tree",
                     sampling=children, claim=claim, **common)
    sampling = getattr(proposer, "sampling", "sample") if proposer is not None else "sample"
    return Space(vocabs=(2, 3, 4), shapes=((1,), (2,), (3,)), sampling=sampling, claim=claim, **common)


def _fatal(exc: ExactSpecError) -> bool:
    """Errors that say the audit cannot follow the code at all (not this instance's fault): never skipped.

    Randomness the audit cannot see, inexact arithmetic, and ``sys.exit`` in the audited code
    (a RuleError caused, at any depth, by SystemExit).
    """
    if isinstance(exc, (UnsupportedRandomness, InexactArithmetic)):
        return True
    cause: BaseException | None = exc
    for _ in range(16):
        if cause is None:
            return False
        if isinstance(cause, SystemExit):
            return True
        cause = cause.__cause__
    return False


def _instance_kwargs(inst: SearchInstance, budget: Budget) -> dict:
    kw = inst.audit_kwargs()
    kw.pop("decoding", None)
    kw["budget"] = budget
    return kw


def _budget(limits: Budget | None, seconds: Budget | None) -> Budget:
    """One audit's budget: the per-audit ``limits`` (paths, depth, outcomes), seconds capped by the search's clock."""
    if limits is None:
        return seconds or Budget()
    caps = [s for s in (limits.seconds, None if seconds is None else seconds.seconds) if s is not None]
    return Budget(paths=limits.paths, depth=limits.depth, outcomes=limits.outcomes, seconds=min(caps) if caps else None)


def _run(audit_one: Callable[[dict], AuditReport], inst: SearchInstance, clock: SearchClock,
         timed: bool, limits: Budget | None = None) -> AuditReport | None:
    """The report on ``inst``, or None when it is unknown (the code raised, or the audit ran past its budget).

    As :func:`exactspec.counterexamples.searching._tv` for rules: an audit cut by the search's time
    limit is not counted, and sets the clock's ``stop_reason``.
    """
    clock.audited += 1
    clock.report()
    budget = _budget(limits, clock.audit_budget() if timed else None)
    try:
        return audit_one(_instance_kwargs(inst, budget))
    except ExactSpecError as exc:
        if _fatal(exc):
            raise
        tally_failure(clock, exc, inst, timed)
    return None


class _Named:
    """What the counterexample helpers read of a rule: its name."""

    def __init__(self, name: str) -> None:
        self.name = name


def _is_biased(rep: AuditReport) -> bool:
    return rep.verdict == "biased"


def _crashes(rep: AuditReport) -> bool:
    """Whether the audited code raised on some branch of the instance (crashes recorded, ``on_error="record"``)."""
    return Fraction(rep.extra.get("error_probability", "0")) > 0


def search_instances(audit_one: Callable[[dict], AuditReport], *, space: Space | None = None, name: str = "sampler",
                     seed: int = 0, budget: float | None = None, max_instances: int | None = None,
                     progress: Callable[[int, float], None] | bool | None = None,
                     biased: Callable[[AuditReport], bool] | None = None, instance_budget: Budget | None = None,
                     workers: int | None = None, executor: Any = None, chunk_size: int | None = None
                     ) -> Counterexample | EmptySearch | IncompleteSearch:
    """Search ``space`` for the smallest instance on which ``audit_one``'s report is biased; shrink it.

    ``audit_one(instance) -> AuditReport`` audits one instance; ``instance`` is a dict with the
    keys ``target`` and ``draft`` (:class:`exactspec.models.Model`), ``proposer`` (a chain or a
    tree proposer), ``prompt`` (a tuple of token ids), ``tokens`` (the horizon) and ``budget``
    (an :class:`exactspec.Budget` holding what is left of the search's time limit), the keywords
    of :func:`exactspec.audit_sampler`: ``lambda inst: es.audit_sampler(fn, adapter="numpy", **inst)``.
    ``biased(report)`` decides (default: ``report.verdict == "biased"``, the rounding-aware verdict);
    a report whose ``extra["error_probability"]`` is positive (the audited code raised on some
    branch, recorded with ``on_error="record"``) is a crash, a finding whatever ``biased`` says.
    ``instance_budget`` (an :class:`exactspec.Budget`): limits on each audit (its seconds, if any,
    capped by what is left of ``budget``); an audit past them is counted as not covered.

    Cells of ``space`` (default :func:`sampler_space`) are visited in shrink order (vocab, drafts,
    tokens, family), then instances by denominator, as :func:`exactspec.counterexamples.search`
    does; the first biased instance is shrunk (:func:`exactspec.counterexamples.shrink_by`) and
    returned as a :class:`~exactspec.counterexamples.Counterexample` of ``kind`` ``"audit"``
    (:func:`search_sampler` makes it a sampler's, with a runnable ``to_pytest()``); the first
    crashing one is shrunk to the smallest instance that still crashes and returned with ``kind``
    ``"crash"`` (its ``crash`` record: the exact probability, the exception, the line). Without one:
    an :class:`~exactspec.counterexamples.EmptySearch` stating the space, or an
    :class:`~exactspec.counterexamples.IncompleteSearch` when ``budget`` seconds or
    ``max_instances`` audits stopped the search, or the audit raised on some instances (their
    verdict is unknown) without crashing the audited code, or some were ``undecided`` (float code whose bias
    could not be told from its rounding); one that failed so on every instance raises :class:`~exactspec.RuleError`.
    Randomness the audit cannot follow (:class:`~exactspec.UnsupportedRandomness`), inexact
    arithmetic and ``sys.exit`` in the audited code are raised at once, never skipped.

    ``workers`` (a local process pool; ``0``: every core; ``1``: this process, through the chunked
    path) or ``executor`` (any :class:`concurrent.futures.Executor`) audit the instances in chunks of
    ``chunk_size`` (default :data:`SAMPLER_CHUNK`) through :mod:`exactspec.parallel`; ``audit_one``
    and ``biased`` are then sent to the workers (``audit_one.for_workers()`` when it has one, as
    :func:`search_sampler`'s does, else :func:`exactspec.parallel.portable`: a lambda without
    cloudpickle raises :class:`~exactspec.parallel.NotPicklable`). The result is the in-process
    one: the verdicts are merged in search order, the first biased or crashing instance in that order
    is shrunk here, and the counts and incomplete accounting are the sequential search's. ``None``
    (the default): in this process, one instance after the other.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> small = Space(vocabs=(2,), shapes=((1,),), tokens=(1, 2), random_points=2, exhaustive_denominator=2)
    >>> found = search_instances(lambda inst: es.audit_sampler(zoo.correct, **inst), space=small, name="correct")
    >>> bool(found), found.audited   # 2 context-free cells of 9 grid pairs + 2 random, 4 other cells of 2
    (False, 30)
    """
    seconds = seconds_limit(budget, "search_instances: budget")
    check_budget(instance_budget, "search_instances", "instance_budget")
    max_instances = count_limit(max_instances, "search_instances: max_instances", 1)
    if not callable(audit_one):
        raise InvalidType(f"search_instances: audit_one must be a function instance -> AuditReport, got "
                          f"{type(audit_one).__name__}")
    space = space or sampler_space()
    biased = biased or _is_biased
    rng = random.Random(f"search|{seed}")
    if parallel.parallel_requested(executor, workers):
        return _search_chunked(audit_one, biased, name, space, rng, SearchClock(
            seconds, max_instances, progress if callable(progress) and progress is not True else None),
            instance_budget, executor, workers, chunk_size, progress)
    clock = SearchClock(seconds, max_instances, default_progress(progress, space, max_instances))
    who = _Named(name)
    cells = space.cells()
    covered: list[str] = []
    try:
        for cell in cells:
            for inst in cell_instances(space, cell, rng):
                if clock.spent():
                    return incomplete_search(who, space, clock, cells, covered, cell)
                rep = _run(audit_one, inst, clock, timed=True, limits=instance_budget)
                if rep is not None and (_crashes(rep) or biased(rep)):
                    return _shrunk(audit_one, biased, name, inst, rep, space, clock, instance_budget)
                if rep is not None and rep.undecided:     # not covered: the search cannot end empty
                    clock.undecided += 1
            if clock.stop_reason:  # the cell's last audit was cut by the time limit
                return incomplete_search(who, space, clock, cells, covered, cell)
            covered.append(space.describe_cell(cell))
        if clock.errors or clock.over_budget or clock.undecided:
            return incomplete_search(who, space, clock, cells, covered, None)
        return EmptySearch(name, space.describe(), clock.audited, clock.elapsed())
    finally:
        end_progress(clock)


# -- the chunked (parallel) search ----------------------------------------------------------------------

class _Verdicts:
    """What one chunk of a sampler search sends back (picklable, small): where it stopped and what it saw."""

    __slots__ = ("audited", "found_at", "report", "fatal_at", "errors", "samples", "over_budget", "undecided", "cut")

    def __init__(self) -> None:
        self.audited = 0                     # instances audited (an audit cut by the deadline is not counted)
        self.found_at: int | None = None     # offset of the first biased or crashing instance (the chunk stops there)
        self.report: AuditReport | None = None   # its report (None when it does not pickle: audited again here)
        self.fatal_at: int | None = None     # offset of an error never skipped (replayed here, where it is raised)
        self.errors: list[int] = []          # offsets where the audit raised (not the sampler: a broken contract)
        self.samples: list[tuple[str, str]] = []
        self.over_budget: list[int] = []     # offsets whose audit ran past its own budget
        self.undecided: list[int] = []       # offsets undecided within float rounding
        self.cut = False                     # stopped by the deadline before its last instance


def _picklable(rep: AuditReport) -> AuditReport | None:
    import pickle
    try:
        pickle.dumps(rep)
    except Exception:  # a report holding an object that cannot travel: the instance is audited again here
        return None
    return rep


def _audit_chunk(job: tuple) -> _Verdicts:
    """Audit a chunk's instances in order (a worker's side): stop at the first finding, a fatal error or the deadline.

    The random functions stay patched for the whole chunk and torch runs on one thread, as in this process.
    """
    audit_ref, biased_ref, insts, deadline, limits = job
    audit_one = parallel.load_portable(audit_ref)
    rebuild = getattr(audit_one, "rebuild", None)
    if rebuild is not None:     # an audit shipped by its ``for_workers()``: made whole again here
        audit_one = rebuild()
    biased = parallel.load_portable(biased_ref)
    session = getattr(audit_one, "session", None)
    out = _Verdicts()
    with (session() if session is not None else contextlib.nullcontext()), one_torch_thread():
        for i, inst in enumerate(insts):
            seconds = None
            if deadline is not None:
                left = deadline - time.time()
                if left <= 0:
                    out.cut = True
                    break
                seconds = Budget(seconds=left)
            try:
                rep = audit_one(_instance_kwargs(inst, _budget(limits, seconds)))
            except ExactSpecError as exc:
                if _fatal(exc):
                    out.fatal_at = i
                    break
                if isinstance(exc, BudgetExceeded) and exc.what == "seconds" and deadline is not None \
                        and time.time() >= deadline:
                    out.cut = True
                    break
                out.audited += 1
                if exc.exit_code == 3:
                    out.over_budget.append(i)
                else:
                    out.errors.append(i)
                    if len(out.samples) < ERROR_SAMPLES:
                        out.samples.append((describe_instance(inst), f"{type(exc).__name__}: {exc}"))
                continue
            out.audited += 1
            if _crashes(rep) or biased(rep):
                out.found_at, out.report = i, _picklable(rep)
                break
            if rep.undecided:
                out.undecided.append(i)
    return out


def _merge(clock: SearchClock, out: _Verdicts, upto: int | None = None) -> None:
    """Add a chunk's counts to the clock (only offsets < ``upto``, when given: the sequential prefix)."""
    merge_chunk(clock, out, upto)   # audited, errors and their samples, over budget: as the rule search's chunks
    clock.undecided += sum(1 for i in out.undecided if upto is None or i < upto)


def _for_workers(audit_one: Callable[[dict], AuditReport], biased: Callable[[AuditReport], bool]) -> tuple:
    """``audit_one`` and ``biased`` ready for worker processes (:class:`~exactspec.parallel.NotPicklable` if not)."""
    ship = getattr(audit_one, "for_workers", None)
    return (ship() if ship is not None else parallel.portable(audit_one, "audit"),
            parallel.portable(biased, "biased predicate"))


def _search_chunked(audit_one: Callable[[dict], AuditReport], biased: Callable[[AuditReport], bool], name: str,
                    space: Space, rng: random.Random, clock: SearchClock, limits: Budget | None, executor: Any,
                    workers: Any, chunk_size: int | None, progress: Any
                    ) -> Counterexample | EmptySearch | IncompleteSearch:
    """:func:`search_instances` on an executor: the sequential search's result, its verdicts merged in search order."""
    audit_ref, biased_ref = _for_workers(audit_one, biased)   # NotPicklable before any work
    plan = ChunkPlan(space, rng, clock, chunk_size, SAMPLER_CHUNK, "search_instances")
    parts, size, n, cells = plan.parts, plan.size, plan.n, plan.cells
    who = _Named(name)
    session = getattr(audit_one, "session", None)
    here = session if session is not None else contextlib.nullcontext

    shown = chunk_progress(clock, "searching", progress, size, n)
    try:
        run = parallel.run_on(_audit_chunk, plan.jobs(lambda part: (audit_ref, biased_ref, part, plan.deadline, limits)),
                              total=plan.total, executor=executor, workers=workers, deadline=plan.deadline,
                              progress=shown,
                              final=lambda out: out.found_at is not None or out.fatal_at is not None or out.cut)
    finally:
        if isinstance(shown, ChunkBar):
            shown.close()

    def replay(inst: SearchInstance) -> AuditReport | None:
        """``inst`` audited here (not counted): a fatal error raises, another error is kept as the first one."""
        try:
            with here():
                return audit_one(_instance_kwargs(inst, _budget(limits, None)))
        except ExactSpecError as exc:
            if _fatal(exc):
                raise
            clock.first_error = clock.first_error or exc
            return None

    def first_error() -> None:  # the first error rebuilt here, so that an audit that always raised is a RuleError
        if clock.errors and clock.errors == clock.audited:
            for k in sorted(run.results):
                if run.results[k].errors and k in parts:
                    replay(parts[k][run.results[k].errors[0]])
                    return

    def stop(pos: int) -> IncompleteSearch:  # incomplete, the sequential search having stopped before ``pos``
        first_error()
        return plan.incomplete(who, pos)

    for k in range(plan.total):
        start = k * size
        out = run.results.get(k)
        if out is None:  # lost (a worker died too often, or it did not return by the time limit)
            plan.lost(k, run.lost.get(k))
            return stop(start)
        if out.fatal_at is not None:
            _merge(clock, out, upto=out.fatal_at)
            replay(parts[k][out.fatal_at])
            raise ExactSpecError(f"{name}: the audit of {describe_instance(parts[k][out.fatal_at])} raised an error "
                                 "that cannot be skipped on a worker but not in this process (the audited code is "
                                 "not deterministic)")
        if out.found_at is not None:
            _merge(clock, out, upto=out.found_at + 1)
            inst = parts[k][out.found_at]
            rep = out.report or replay(inst)
            if rep is None or not (_crashes(rep) or biased(rep)):
                raise ExactSpecError(f"{name}: {describe_instance(inst)} was biased or crashed on a worker but not in "
                                     "this process (the audited code is not deterministic)")
            with here():
                return _shrunk(audit_one, biased, name, inst, rep, space, clock, limits)
        _merge(clock, out)
        if out.cut:
            clock.stop_reason = clock.stop_reason or f"time limit {clock.seconds:g} s reached"
            return stop(start + out.audited)
    if n < plan.everything:     # max_instances stopped the search before the space's end
        clock.stop_reason = f"max_instances {clock.max_instances} reached"
        return stop(n)
    if clock.errors or clock.over_budget or clock.undecided:
        first_error()
        return incomplete_search(who, space, clock, cells, [space.describe_cell(c) for c in cells], None)
    return EmptySearch(name, space.describe(), clock.audited, clock.elapsed())


def _shrunk(audit_one: Callable[[dict], AuditReport], biased: Callable[[AuditReport], bool], name: str,
            inst: SearchInstance, rep: AuditReport, space: Space, clock: SearchClock,
            limits: Budget | None) -> Counterexample:
    reports = {inst: rep}
    crash = _crashes(rep)      # a crash is shrunk to the smallest instance that still crashes
    keep = _crashes if crash else biased

    def still_biased(cand: SearchInstance) -> bool:
        r = _run(audit_one, cand, clock, timed=False, limits=limits)
        if r is not None and keep(r):
            reports[cand] = r
            return True
        return False
    small, steps = shrink_by(still_biased, inst)
    r = reports[small]
    extra = {k: str(r.extra[k]) for k in ("algorithmic_tv", "rounding_tv", "tolerance", "precision") if k in r.extra}
    if r.boundary is not None and not crash:   # why this instance is biased: the float64 run, not float32 rounding
        extra["verdict_reason"] = r.boundary["reason"]
    more: dict = {}
    if crash:
        extra["errors"] = "; ".join(f"{what} with probability {p}" for what, p in r.extra["errors"].items())
        more = {"kind": "crash", "crash": crash_record("audit", r)}
    return Counterexample(rule=name, claim="lossless", instance=small, output=dict(r.output),
                          expected=dict(r.expected), tv=r.tv, space=space.describe(), audited=clock.audited,
                          seconds=clock.elapsed(), shrink_steps=steps, **{"kind": "audit", **more}, extra=extra)


def sampler_reference(sampler: Any) -> str:
    """``module:qualname`` a test can import ``sampler`` from, or ``""`` (a lambda, a closure, ``__main__``).

    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> sampler_reference(zoo.correct)
    'exactspec.bugzoo.numpy_samplers:correct'
    >>> sampler_reference(lambda *a: [0])
    ''
    """
    mod, qual = getattr(sampler, "__module__", None), getattr(sampler, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or mod == "__main__" or "<" in qual:
        return ""
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not sampler:
        return ""
    try:
        return valid_sampler_ref(f"{mod}:{qual}")
    except ExactSpecError:
        return ""


#: the keywords of a one-instance audit that a search refuses: it chooses the laws, prompts and horizons itself
INSTANCE_ARGUMENTS = ("target", "draft", "prompt", "tokens", "expected")


def split_budget(budget: float | Budget | None, instance_budget: Budget | None, where: str
                 ) -> tuple[float | None, Budget | None]:
    """A search's ``budget`` as (seconds for the whole search, limits on each audit).

    A number is seconds for the whole search; an :class:`~exactspec.Budget`'s ``seconds`` limit the whole search
    and its other limits (paths, depth, outcomes) each audit, which ``instance_budget`` then must not also give.

    >>> seconds, each = split_budget(Budget(seconds=5, paths=100), None, "search_sampler")
    >>> seconds, each.paths, each.seconds
    (5, 100, None)
    >>> split_budget(2.5, None, "search_sampler")
    (2.5, None)
    """
    if not isinstance(budget, Budget):
        return budget, instance_budget
    if instance_budget is not None:
        raise InvalidValue(f"{where}: pass the per-audit limits either in budget= (an es.Budget) or in "
                           "instance_budget=, not both")
    return budget.seconds, Budget(paths=budget.paths, depth=budget.depth, outcomes=budget.outcomes)


def search_sampler(sampler: Any, *, adapter: Any = None, space: Space | None = None, proposer: Any = None,
                   rng_model: str = "native", seed: int = 0, budget: float | Budget | None = None,
                   max_instances: int | None = None, progress: Callable[[int, float], None] | bool | None = None,
                   instance_budget: Budget | None = None, workers: int | str | None = parallel.AUTO,
                   executor: Any = None, chunk_size: int | None = None, **audit_kwargs: Any
                   ) -> Counterexample | EmptySearch | IncompleteSearch:
    """The smallest small instance on which ``sampler`` is biased (``es.search_sampler``): the sampler's exact search.

    ``sampler``: a function, or ``"module:function"`` (imported, the current directory on
    ``sys.path`` for the import only). Each instance is audited by
    :func:`exactspec.audit_sampler` through ``adapter`` under ``rng_model``; ``space`` defaults to
    :func:`sampler_space` for the adapter's family (``proposer`` fixes its sampling / children and
    claim; its gamma or expansion is varied). ``budget``: seconds for the whole search (``None``: no limit), or an
    :class:`~exactspec.Budget` whose ``seconds`` limit the whole search and whose other limits each audit
    (:func:`split_budget`); ``max_instances``: audits; see
    :func:`search_instances` for the three results. A counterexample's ``to_pytest()`` imports
    the sampler from ``sampler_ref`` (``module:qualname``) and audits it on the minimal instance
    (a crash counterexample's with ``on_error="record"``: the test fails while the crash remains);
    every instance is audited with ``on_error="record"``, so a crash is a finding, never skipped;
    for a sampler no test can import (a lambda, a closure, ``__main__``) ``sampler_ref`` is ``""``
    and ``to_pytest()`` raises an :class:`~exactspec.ExactSpecError` saying so. ``audit_kwargs`` go
    to every :func:`exactspec.audit_sampler` call unchanged (the generated test does not repeat them):
    ``tolerance`` (what float64 rounding may cost), ``precision``, ``cache``, ``reference`` (the rounding
    figures, off unless asked for: they cost more audits an instance). The search chooses the laws, prompts and
    horizons, so ``target``, ``draft``, ``prompt``, ``tokens`` and ``expected`` are refused with an
    :class:`~exactspec.errors.InvalidType` (never ignored).
    ``adapter`` left out is ``"numpy"``, checked when the search finds a crash: a sampler that raises on
    its first call there while another registered adapter runs it is an
    :class:`~exactspec.errors.AdapterMismatch` naming those adapters, not a crash counterexample
    (:mod:`exactspec.samplers.adapters.fit`).

    ``workers`` / ``executor`` / ``chunk_size``: the instances are audited in chunks on worker processes
    (``0``: every core; ``1``: this process, through the chunked path), the sampler sent as its
    ``module:function`` reference and the adapter by name (see :func:`search_instances`); the result
    is the in-process one. ``"auto"`` (the default, here and on the command line): every core when the planned instances are estimated to take long enough
    (:data:`SAMPLER_INSTANCE_SECONDS` each, :data:`TORCH_SAMPLER_INSTANCE_SECONDS` through a torch
    adapter; :func:`exactspec.parallel.auto_workers`) and the sampler can be sent to workers, this
    process otherwise (and with a ``progress`` function, which counts audits here and chunks there).
    ``None``: in this process. A sampler that cannot be sent (a lambda, a closure, without cloudpickle)
    with ``workers`` or ``executor`` given raises :class:`~exactspec.parallel.NotPicklable`.

    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> ce = search_sampler(zoo.zero_uniform)
    >>> ce.instance.shape, ce.instance.tokens, ce.instance.target, ce.instance.draft   # u = 0 accepts every draft
    ((1,), 1, ((Fraction(1, 2), Fraction(1, 2)),), ((Fraction(0, 1), Fraction(1, 1)),))
    >>> on_two = search_sampler(zoo.zero_uniform, workers=2)    # two worker processes: the same counterexample
    >>> (on_two.instance, on_two.tv, on_two.audited) == (ce.instance, ce.tv, ce.audited)
    True
    """
    from .adapters.registry import get_adapter
    given = [k for k in INSTANCE_ARGUMENTS if k in audit_kwargs]
    if given:
        raise InvalidType(f"search_sampler: {'= and '.join(given)}= do{'es' if len(given) == 1 else ''} not apply: "
                          "the search chooses the laws, prompts and horizons (es.audit_sampler audits one instance)")
    budget, instance_budget = split_budget(budget, instance_budget, "search_sampler")
    if isinstance(sampler, str):
        from .._loading import load_object as _load
        ref = sampler
        sampler = _load(sampler, "the sampler", preload=("numpy",))
        ref = valid_sampler_ref(ref) if ":" in ref else sampler_reference(sampler)
    else:
        if not callable(sampler):
            raise InvalidType(f"search_sampler: the sampler must be a function or 'module:function', got "
                              f"{type(sampler).__name__}")
        ref = sampler_reference(sampler)
    explicit = adapter is not None
    adapter = get_adapter(DEFAULT_ADAPTER if adapter is None else adapter)
    if proposer is not None and (hasattr(proposer, "expansion") != (adapter.family == "tree")):
        raise InvalidValue(f"search_sampler: the {adapter.name} adapter verifies {adapter.family}s; the proposer "
                           f"{getattr(proposer, 'describe', lambda: proposer)()} is not a {adapter.family} proposer")
    space = space or sampler_space(adapter.family, proposer)
    if (space.proposer_kind == "tree") != (adapter.family == "tree"):
        raise InvalidValue(f"search_sampler: the {adapter.name} adapter verifies {adapter.family}s but the space "
                           f"has {space.proposer_kind} proposers")
    name = getattr(sampler, "__name__", "sampler")

    # the reference sampler's rounding figures inform a report but not its verdict (the float64 run decides):
    # a search does without them unless asked; it records crashes: each is a finding (see the docstring)
    options = {"reference": False, **audit_kwargs, "on_error": "record"}

    audit_one = _SamplerAudit(sampler, ref, adapter, rng_model, options)
    if isinstance(workers, str):     # "auto": a count or this process; another string is refused, naming it
        workers = search_workers(audit_one, space, TORCH_SAMPLER_INSTANCE_SECONDS if getattr(
            adapter, "needs_torch", False) else SAMPLER_INSTANCE_SECONDS, budget, max_instances, progress) \
            if workers == parallel.AUTO else parallel.resolve_workers(workers)
    try:
        if parallel.parallel_requested(executor, workers):   # each chunk patches on its worker; the shrink here
            found = search_instances(audit_one, space=space, name=name, seed=seed, budget=budget,
                                     max_instances=max_instances, progress=progress, instance_budget=instance_budget,
                                     workers=workers, executor=executor, chunk_size=chunk_size)
        else:
            with _patched_once(adapter):
                found = search_instances(audit_one, space=space, name=name, seed=seed, budget=budget,
                                         max_instances=max_instances, progress=progress,
                                         instance_budget=instance_budget)
    except RuleError as exc:   # under the default adapter: one that cannot call the sampler is a usage error
        if not explicit:
            check_default_adapter(sampler, adapter, failure=exc, rng_model=rng_model)
        raise
    if not explicit and isinstance(found, Counterexample) and found.kind == "crash":    # not a crash: a usage error
        check_default_adapter(sampler, adapter, rng_model=rng_model)
    if isinstance(found, Counterexample):
        if found.kind == "crash":
            return replace(found, sampler_ref=ref, adapter=adapter.name, rng_model=rng_model,
                           crash={**found.crash, "of": "sampler"})
        return replace(found, kind="sampler", sampler_ref=ref, adapter=adapter.name, rng_model=rng_model)
    return found


class _SamplerAudit:
    """``audit_one`` of :func:`search_sampler`: one instance audited as :func:`exactspec.audit_sampler` audits it.

    ``for_workers()`` is what a worker process rebuilds it from (the sampler's ``module:function``, the
    adapter's name when the registry gives it back); ``session()`` keeps the random functions patched
    for a run of audits (a whole search here, a chunk on a worker).
    """

    def __init__(self, sampler: Any, ref: str, adapter: Any, rng_model: str, options: dict) -> None:
        self.sampler, self.ref, self.adapter, self.rng_model, self.options = sampler, ref, adapter, rng_model, options

    def __call__(self, inst: dict) -> AuditReport:
        return audit_instance(self.sampler, adapter=self.adapter, rng_model=self.rng_model, progress=False,
                              **self.options, **inst)

    def session(self) -> Any:
        return _patched_once(self.adapter)

    def for_workers(self) -> "_ShippedAudit":
        from .adapters.registry import get_adapter
        sampler = self.ref if self.ref and _same(self.ref, self.sampler) else parallel.portable(self.sampler,
                                                                                                 "sampler")
        try:
            by_name = get_adapter(self.adapter.name) is self.adapter
        except ExactSpecError:
            by_name = False
        adapter = self.adapter.name if by_name else parallel.portable(self.adapter, "adapter")
        return _ShippedAudit(sampler, adapter, self.rng_model, parallel.portable(self.options, "audit options"))


def _same(ref: str, sampler: Any) -> bool:
    """Whether importing ``ref`` in a worker gives ``sampler`` (its module already imported here)."""
    mod, _, qual = ref.partition(":")
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return obj is sampler


class _ShippedAudit:
    """A :class:`_SamplerAudit` as it travels to a worker: references, rebuilt there on first use."""

    def __init__(self, sampler: Any, adapter: Any, rng_model: str, options: Any) -> None:
        self.parts = (sampler, adapter, rng_model, options)

    def __getstate__(self) -> tuple:
        return self.parts

    def __setstate__(self, parts: tuple) -> None:
        self.parts = parts

    def rebuild(self) -> _SamplerAudit:
        from .._loading import load_object
        from .adapters.registry import get_adapter
        sampler, adapter, rng_model, options = self.parts
        if isinstance(sampler, str):
            sampler = load_object(sampler, "the sampler", preload=("numpy",))
        adapter = get_adapter(parallel.load_portable(adapter))
        return _SamplerAudit(parallel.load_portable(sampler), "", adapter, rng_model, parallel.load_portable(options))


def search_workers(audit_one: Callable[[dict], AuditReport], space: Space, each: float, budget: float | None,
                   max_instances: int | None, progress: Any = None) -> int | None:
    """The workers of ``workers="auto"`` for a search of ``audit_one`` over ``space``: a count, or None (this process).

    Every core for a search estimated long enough (``each`` seconds an instance in this process), when its
    audit can go to workers (a lambda or closure without cloudpickle cannot) and ``progress`` is not a
    function (:func:`exactspec.parallel.auto_stays_here`); None (this process) otherwise.

    >>> search_workers(lambda inst: None, sampler_space(), each=0.0, budget=None, max_instances=None) is None
    True
    """
    planned = sum(cell_sizes(space, space.cells()))
    planned = planned if max_instances is None else min(planned, max_instances)
    workers = parallel.auto_workers(parallel.AUTO, planned * each, budget)
    if workers is not None and parallel.auto_stays_here(progress, lambda: _for_workers(audit_one, _is_biased)):
        return None
    return workers


@contextlib.contextmanager
def _patched_once(adapter: Any) -> Iterator[None]:
    """The random functions patched (and torch on one thread) once for a whole search, not once per instance.

    Each audit still opens its own interception session inside (its own bookkeeping); this block only keeps
    the patches installed between them.
    """
    if getattr(adapter, "needs_torch", False):
        from .torch_draws import torch_rng  # noqa: F401  (imports torch, so the interception patches it too)
    with intercepting(), one_torch_thread():
        yield
