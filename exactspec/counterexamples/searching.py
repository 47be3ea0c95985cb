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

import itertools
import random
import time
from dataclasses import replace
from fractions import Fraction
from typing import Any, Callable, Iterator, TypeGuard, cast

from .. import parallel
from .._audit import audit
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ..rules import Rule, as_rule
from .bookkeeping import (ERROR_SAMPLES, ChunkBar, ChunkOut, ChunkPlan, SearchClock, cell_instances, cell_sizes, chunk_progress,
                          count_limit, default_progress, describe_instance, end_progress, incomplete_search,
                          merge_chunk, planned_instances, seconds_limit, tally_failure)
from .counterexample import Counterexample, EmptySearch, IncompleteSearch
from .counterexample import valid_rule_ref
from .space import SearchInstance, Space, _denominator, default_space, simplex_grid

__all__ = ["search", "worst", "shrink", "shrink_by", "evaluate"]


#: instances per chunk of a parallel search (about 40 ms of audits on the default space; see
#: benchmarks/bench_parallel.py for the per-chunk overhead this amortises)
SEARCH_CHUNK = 256

#: what ``workers="auto"`` assumes one audit of a search costs in this process, in seconds (the default
#: spaces' audits take 0.2-2.5 ms on a loaded 2-core machine; catalog rules' closed forms are the fast end)
SEARCH_INSTANCE_SECONDS = 1e-3


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


def _tv(rule: Rule, inst: SearchInstance, clock: SearchClock, timed: bool = False) -> Fraction | None:
    """The exact TV on ``inst``, or None when it is unknown (the rule raised, or the audit ran past a budget).

    ``timed``: give the audit what is left of the search's time limit; an audit cut by it is not
    counted as audited, and the clock's ``stop_reason`` says the time limit was reached.
    """
    clock.audited += 1
    clock.report()
    rep = _audit_one(rule, inst, clock.audit_budget() if timed else None)
    if not isinstance(rep, ExactSpecError):
        return cast("Fraction | None", rep.tv)
    tally_failure(clock, rep, inst, timed)
    return None


def rule_reference(rule: Rule) -> str:
    """How a generated test imports ``rule``: ``module.qualname``, or ``""`` for a catalog rule (found by name)
    and for a rule no test can import (a lambda, a closure, a function defined in ``__main__``).

    >>> import exactspec as es
    >>> rule_reference(es.rules.speculative_sampling), rule_reference(es.rule()(lambda step, rng: [0]))
    ('', '')
    """
    from ..rules import catalog
    if any(r is rule or r.name == rule.name for r in catalog()):
        return ""
    mod, qual = getattr(rule.fn, "__module__", ""), getattr(rule.fn, "__qualname__", "")
    if isinstance(mod, str) and isinstance(qual, str) and mod and mod != "__main__" and "<" not in qual:
        ref = f"{mod}.{qual}"
        try:  # rendered as an import line: only a dotted path of identifiers qualifies
            return valid_rule_ref(ref)
        except ExactSpecError:
            return ""
    return ""


def _counterexample(rule: Rule, inst: SearchInstance, space: Space, clock: SearchClock, steps: int,
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
    exactspec.errors.InvalidValue: search: budget must be > 0 seconds (None for no limit), got 0
    """
    rule = as_rule(rule)
    seconds = seconds_limit(budget, "search: budget")
    max_instances = count_limit(max_instances, "search: max_instances", 1)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"search|{seed}")
    if isinstance(workers, str) and workers == parallel.AUTO:
        planned = sum(cell_sizes(space, space.cells()))
        planned = planned if max_instances is None else min(planned, max_instances)
        workers = parallel.auto_workers(workers, planned * SEARCH_INSTANCE_SECONDS, seconds)
        if workers is not None and parallel.auto_stays_here(progress, lambda: parallel.portable_rule(rule)):
            workers = None
    if parallel.parallel_requested(executor, workers):
        return _search_chunked(rule, space, rng, SearchClock(seconds, max_instances, progress if callable(progress)
                                                        and progress is not True else None),
                               executor, workers, chunk_size, progress)
    clock = SearchClock(seconds, max_instances, default_progress(progress, space, max_instances))
    cells = space.cells()
    covered: list[str] = []
    try:
        for cell in cells:
            for inst in cell_instances(space, cell, rng):
                if clock.spent():
                    return incomplete_search(rule, space, clock, cells, covered, cell)
                tv = _tv(rule, inst, clock, timed=True)
                if tv is not None and tv > 0:
                    small, steps = shrink(rule, inst, space=space, _clock=clock)
                    return _counterexample(rule, small, space, clock, steps)
            if clock.stop_reason:  # the cell's last audit was cut by the time limit
                return incomplete_search(rule, space, clock, cells, covered, cell)
            covered.append(space.describe_cell(cell))
        if clock.errors or clock.over_budget:
            return incomplete_search(rule, space, clock, cells, covered, None)
        return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())
    finally:
        end_progress(clock)


# -- the chunked (parallel) search ----------------------------------------------------------------------


def _audit_chunk(job: tuple[Any, ...]) -> ChunkOut:
    """Audit a chunk's instances in order (a worker's side); stop at the first bias when asked, or at the deadline."""
    rule_ref, insts, deadline, stop_at_bias, keep_tvs = job
    rule = parallel.load_rule(rule_ref)
    out = ChunkOut()
    tvs: list[Any] | None = None
    if keep_tvs:
        out.tvs = tvs = []
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
                    out.samples.append((describe_instance(inst), f"{type(rep).__name__}: {rep}"))
            if tvs is not None:
                tvs.append(None)
            continue
        out.audited += 1
        if tvs is not None:
            tvs.append(rep.tv)
        if stop_at_bias and rep.tv > 0:
            out.biased_at = i
            break
    return out


def _first_error(rule: Rule, clock: SearchClock, parts: dict[Any, Any], run: Any) -> None:
    """Rebuild the first error (the audit is replayed here) so that a rule that always raised is a RuleError."""
    if clock.errors and clock.errors == clock.audited:
        for k in sorted(run.results):
            out = run.results[k]
            if out.errors and k in parts:
                clock.first_error = _audit_one(rule, parts[k][out.errors[0]])
                if not isinstance(clock.first_error, ExactSpecError):
                    clock.first_error = None
                return


def _search_chunked(rule: Rule, space: Space, rng: random.Random, clock: SearchClock, executor: Any, workers: Any,
                    chunk_size: int | None, progress: Any) -> Counterexample | EmptySearch | IncompleteSearch:
    plan = ChunkPlan(space, rng, clock, chunk_size, SEARCH_CHUNK, "search")
    ref = parallel.portable_rule(rule)
    parts = plan.parts
    shown = chunk_progress(clock, "searching", progress, plan.size, plan.n)
    try:
        run = parallel.run_on(_audit_chunk, plan.jobs(lambda part: (ref, part, plan.deadline, True, False)),
                              total=plan.total, executor=executor, workers=workers, deadline=plan.deadline,
                              final=lambda out: out.biased_at is not None or out.cut, progress=shown)
    finally:
        if isinstance(shown, ChunkBar):
            shown.close()

    def stop(pos: int) -> IncompleteSearch:  # incomplete, the sequential search having stopped before ``pos``
        _first_error(rule, clock, parts, run)
        return plan.incomplete(rule, pos)

    for k in range(plan.total):
        start = k * plan.size
        out = run.results.get(k)
        if out is None:  # lost (a worker died too often, or it did not return by the time limit)
            plan.lost(k, run.lost.get(k))
            return stop(start)
        if out.biased_at is not None:
            merge_chunk(clock, out, upto=out.biased_at + 1)
            small, steps = shrink(rule, parts[k][out.biased_at], space=space, _clock=clock)
            return _counterexample(rule, small, space, clock, steps)
        merge_chunk(clock, out)
        if out.cut:
            clock.stop_reason = clock.stop_reason or f"time limit {clock.seconds:g} s reached"
            later = [j for j in run.results if j > k and run.results[j].biased_at is not None]
            if later:
                j = min(later)
                clock.stop_reason += (f"; a biased instance was found later in the search order "
                                      f"({describe_instance(parts[j][run.results[j].biased_at])}) before the earlier "
                                      "instances were covered: rerun with more time for the minimal one")
            return stop(start + out.audited)
    if plan.n < plan.everything:     # max_instances stopped the search before the space's end
        clock.stop_reason = f"max_instances {clock.max_instances} reached"
        return stop(plan.n)
    if clock.errors or clock.over_budget:
        _first_error(rule, clock, parts, run)
        return incomplete_search(rule, space, clock, plan.cells, [space.describe_cell(c) for c in plan.cells], None)
    return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())


def _sample_chunked(rule: Rule, space: Space, cells: list[Any], rng: random.Random, clock: SearchClock, scored: list[Any],
                    covered: list[Any], executor: Any, workers: Any, chunk_size: int | None) -> tuple[Any, ...] | None:
    """worst()'s sampling phase on an executor: fills ``scored`` and ``covered`` as the sequential loop would."""
    import bisect
    ends = list(itertools.accumulate(cell_sizes(space, cells)))
    n = ends[-1] if ends else 0
    size = count_limit(chunk_size, "worst: chunk_size", 1) or SEARCH_CHUNK
    total = -(-n // size)
    deadline = None if clock.deadline is None else time.time() + (clock.deadline - time.perf_counter())
    ref = parallel.portable_rule(rule)
    parts: dict[int, list[SearchInstance]] = {}

    def jobs() -> Iterator[tuple[Any, ...]]:
        stream = planned_instances(space, cells, rng, None)
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
        merge_chunk(clock, out)
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
    def squash(law: tuple[Any, ...]) -> tuple[Any, ...] | None:
        kept = law[:t] + law[t + 1:]
        total = sum(kept)
        return None if not total else tuple(x / total for x in kept)
    laws = []
    for group in (inst.target, inst.draft):
        rows = group if inst.family != "table" else group[:t] + group[t + 1:]
        squashed = [squash(law) for law in rows]
        new = tuple(law for law in squashed if law is not None)
        if len(new) != len(squashed):   # a law with all its mass on token t
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
           _clock: SearchClock | None = None) -> tuple[SearchInstance, int]:
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
    clock = _clock or SearchClock(None, None, None)

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

    def smaller_and_biased(cand: SearchInstance | None) -> TypeGuard[SearchInstance]:
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
    return replace(inst, target=tuple(group)) if which == "target" else replace(inst, draft=tuple(group))


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
    seconds = seconds_limit(budget, "worst: budget")
    restarts = count_limit(restarts, "worst: restarts", 0, none_ok=False)
    steps = count_limit(steps, "worst: steps", 0, none_ok=False)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"worst|{seed}")
    clock = SearchClock(seconds, None, None)
    scored: list[tuple[Fraction, int, SearchInstance]] = []
    cells = space.cells()
    covered: list[str] = []
    stopped_in: tuple[Any, ...] | None = None
    sampled = space.with_(exhaustive_limit=min(space.exhaustive_limit, 200))
    if parallel.parallel_requested(executor, workers):
        stopped_in = _sample_chunked(rule, sampled, cells, rng, clock, scored, covered, executor, workers,
                                     chunk_size)
    for cell in ([] if parallel.parallel_requested(executor, workers) else cells):
        for inst in cell_instances(sampled, cell, rng):
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
    if best_tv > 0 and best is not None:   # a positive TV was measured on ``best``
        return _counterexample(rule, best, space, clock, 0, stopped="; ".join(reasons))
    if reasons:
        return incomplete_search(rule, space, clock, cells, covered, stopped_in)
    return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed())
