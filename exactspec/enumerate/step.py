"""One step: the exact law of the tokens a rule emits, by enumerating every branch of its draws.

>>> import exactspec as es
>>> from exactspec.enumerate.env import Env
>>> from exactspec.fields import get_field
>>> p, q = es.models.context_free(("3/5", "2/5")), es.models.context_free(("1/2", "1/2"))
>>> env = Env(p, q, get_field(backend="python"))
>>> law = StepEnumerator(es.rules.greedy_match_sampled, es.drafts.chain(1), env).law((), 1)
>>> sorted(law.items())
[((0,), Fraction(4, 5)), ((1,), Fraction(1, 5))]
"""

from __future__ import annotations

import itertools
import time
from types import GeneratorType
from typing import Any, Callable

from ..errors import (BudgetExceeded, ExactSpecError, InvalidType, InvalidValue, ReplayDiverged, RuleError,
                      UnsupportedRandomness)
from .rng import DeferredToken, PathRng, _Touched
from .watchdog import guard

__all__ = ["Budget", "StepEnumerator", "run_rule", "check_budget", "crash_outcome", "is_crash", "crash_index",
           "engine_rule"]


class Budget:
    """Limits on one audit: total branches (``paths``), draws per branch (``depth``), ``seconds``.

    ``depth`` also bounds the tokens one step may emit (a chain's ``gamma + 1``): a longer step is
    refused up front. ``outcomes`` bounds the outcomes the memoised laws of the stream (and of the
    expected law) hold together, which is what their memory grows with: the law of ``tokens``
    tokens can have ``vocab ** tokens`` of them.

    ``clock`` is the time source ``seconds`` are measured on (default :func:`time.perf_counter`).
    With the default clock a watchdog thread also stops code that never returns to the engine (a
    rule's busy loop); a clock of your own (a test's, to check the budget without depending on the
    machine's speed) is read only at the engine's checkpoints: every 256 branches and before each
    step law, and no watchdog thread is started.

    >>> Budget(paths=1000).paths
    1000
    >>> now = [0.0]
    >>> Budget(seconds=2, clock=lambda: now[0]).clock()
    0.0
    """

    def __init__(self, *, paths: int | None = 5_000_000, depth: int | None = 10_000,
                 seconds: float | None = None, outcomes: int | None = 5_000_000,
                 clock: Callable[[], float] | None = None) -> None:
        for name, v in (("paths", paths), ("depth", depth), ("outcomes", outcomes)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise InvalidType(f"Budget: {name} must be a positive int or None, got {v!r}")
            if v is not None and v < 1:
                raise InvalidValue(f"Budget: {name} must be a positive int or None, got {v!r}")
        if seconds is not None and not isinstance(seconds, (int, float)):
            raise InvalidType(f"Budget: seconds must be a positive number or None, got {seconds!r}")
        if seconds is not None and not seconds > 0:
            raise InvalidValue(f"Budget: seconds must be a positive number or None, got {seconds!r}")
        if clock is not None and not callable(clock):
            raise InvalidType(f"Budget: clock must be a function returning seconds (like time.perf_counter) "
                              f"or None, got {clock!r}")
        self.paths, self.depth, self.seconds, self.outcomes = paths, depth, seconds, outcomes
        self.custom_clock = clock is not None
        self.clock: Callable[[], float] = time.perf_counter if clock is None else clock

    def __repr__(self) -> str:
        clock = f", clock={self.clock!r}" if self.custom_clock else ""
        return (f"Budget(paths={self.paths}, depth={self.depth}, seconds={self.seconds}, "
                f"outcomes={self.outcomes}{clock})")


def check_budget(budget: Any, where: str, name: str = "budget") -> Budget | None:
    """``budget`` if it is a :class:`Budget` or None; otherwise a typed error naming ``where``, ``name`` and what to pass.

    A bare number is refused rather than guessed at (seconds? paths?): ``es.Budget(seconds=5)``
    says which limit it is.

    >>> check_budget(None, "audit") is None
    True
    >>> check_budget(5, "audit")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidType: audit: budget must be an es.Budget or None, got 5 (int); for a time limit of 5 seconds pass budget=es.Budget(seconds=5) (es.Budget also limits paths, depth and outcomes)
    """
    if budget is None or isinstance(budget, Budget):
        return budget
    hint = ""
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        hint = f"; for a time limit of {budget!r} seconds pass {name}=es.Budget(seconds={budget!r})"
    else:
        hint = f"; e.g. {name}=es.Budget(seconds=5)"
    raise InvalidType(f"{where}: {name} must be an es.Budget or None, got {budget!r} ({type(budget).__name__})"
                      f"{hint} (es.Budget also limits paths, depth and outcomes)")


class Meter:
    """Counts branches and watches the clock for one audit."""

    def __init__(self, budget: Budget) -> None:
        check_budget(budget, "Meter")
        self.budget = budget
        self.paths = 0
        self.steps = 0
        self.outcomes = 0
        self.clock = budget.clock
        self.start = self.clock()
        self.deadline = None if budget.seconds is None else self.start + budget.seconds
        #: counts the probability of the outcomes decided so far (an audit's progress); None: nothing counts it
        self.mass: Any = None

    def covered(self) -> dict[str, Any]:
        return {"paths": self.paths, "step laws": self.steps,
                "seconds": round(self.clock() - self.start, 3)}

    def tick(self) -> None:
        """Count one more branch, or raise BudgetExceeded if the paths or time budget is spent."""
        b = self.budget
        if b.paths is not None and self.paths >= b.paths:
            raise BudgetExceeded("paths", b.paths, covered=self.covered())
        self.paths += 1
        if self.deadline is not None and not self.paths & 255:
            self.check_time()

    def hold(self, n: int) -> None:
        """Count ``n`` more outcomes held in memoised laws, or raise BudgetExceeded past the budget."""
        self.outcomes += n
        limit = self.budget.outcomes
        if limit is not None and self.outcomes > limit:
            raise BudgetExceeded("outcomes", limit, covered=dict(self.covered(), outcomes=self.outcomes))

    def check_time(self) -> None:
        """Raise BudgetExceeded if the time budget is spent."""
        if self.deadline is not None and self.clock() > self.deadline:
            raise BudgetExceeded("seconds", self.budget.seconds, covered=self.covered())

    def guard(self) -> guard:
        """The budget guard of this audit: wrap everything it computes in ``with meter.guard():``.

        It stops the block when the time budget (counted from the meter's start) is spent,
        wherever it is (a rule's busy loop, a closed form, the expected law), and turns
        ``MemoryError`` and ``RecursionError`` into BudgetExceeded; each error carries ``covered()``.
        Without a time budget, or with a clock of the caller's (``Budget(clock=...)``: not real time),
        no thread is started.

        >>> meter = Meter(Budget(seconds=0.05))
        >>> try:
        ...     with meter.guard():
        ...         while True:
        ...             pass
        ... except BudgetExceeded as e:
        ...     print(e.what, e.limit, sorted(e.covered)[:2])
        seconds 0.05 ['paths', 'seconds']
        """
        if self.deadline is None or self.budget.custom_clock:
            return guard(None, covered=self.covered, limit=self.budget.seconds)
        left = max(0.0, self.deadline - self.clock())
        return guard(left, covered=self.covered, limit=self.budget.seconds)


def _token(tok: Any, vocab: int, name: str) -> int:
    if type(tok) is int and 0 <= tok < vocab:
        return tok
    if type(tok) is DeferredToken:   # a deferred draw emitted unread: every value it stands for must be a token
        if tok.values()[-1][0] >= vocab:
            tok._es_touch()          # one is not: draw it for real, so the branch that emits it raises below
        return tok  # type: ignore[return-value]
    try:
        import operator
        t = operator.index(tok)
    except TypeError:
        raise RuleError(f"rule {name} emitted {tok!r}, not a token id") from None
    if not 0 <= t < vocab:
        raise RuleError(f"rule {name} emitted token {t}, outside 0..{vocab - 1}")
    return t


def _too_many(name: str, cap: int) -> RuleError:
    return RuleError(f"rule {name} emitted more than {cap} tokens in one step (at most {cap - 1} accepted "
                     "drafts plus one correction or bonus)")


def run_rule(fn: Callable, step: Any, rng: Any, horizon: int | None, vocab: int, name: str,
             cap: int | None = None, lazy_from: int | None = None) -> tuple:
    """Run a rule once and return the tokens it emits, cut at ``horizon``.

    A generator rule is stopped as soon as ``horizon`` tokens are out, so nothing after the
    horizon is drawn; a rule returning a sequence is cut after it returns. A step emitting more
    than ``cap`` tokens (the proposer's ``max_tokens()``: ``gamma + 1`` for a chain, ``depth + 1``
    for a tree) is a RuleError, raised as soon as the token past ``cap`` is out, so an endless
    generator stops at once even uncut. Whatever iterable a rule returns is read the same way, at
    most ``cap + 1`` items (``horizon`` without a cap): an endless iterator is never materialised.

    >>> def endless(step, rng):
    ...     while True:
    ...         yield 0
    >>> run_rule(endless, None, None, 3, 2, "endless", cap=5)
    (0, 0, 0)
    >>> run_rule(endless, None, None, None, 2, "endless", cap=5)
    Traceback (most recent call last):
    ...
    exactspec.errors.RuleError: rule endless emitted more than 5 tokens in one step (at most 4 accepted drafts plus one correction or bonus)
    >>> import itertools
    >>> run_rule(lambda step, rng: itertools.repeat(1), None, None, None, 2, "repeats", cap=2)
    Traceback (most recent call last):
    ...
    exactspec.errors.RuleError: rule repeats emitted more than 2 tokens in one step (at most 1 accepted drafts plus one correction or bonus)

    ``lazy_from`` (a generator rule and a :class:`PathRng` only): while the rule computes its token
    number ``lazy_from`` (0-based) or a later one, the rng defers categorical draws (``rng.defer``),
    so the tokens emitted from there on may be :class:`DeferredToken`.
    """
    res = fn(step, rng)
    out: list[int] = []
    stop = horizon if cap is None else cap + 1 if horizon is None else min(horizon, cap + 1)
    if lazy_from is not None and isinstance(res, GeneratorType):
        append = out.append
        try:
            rng.defer = lazy_from <= 0
            for tok in res:
                append(tok if type(tok) is int and 0 <= tok < vocab else _token(tok, vocab, name))
                n = len(out)
                if stop is not None and n >= stop:
                    rng.defer = False
                    res.close()
                    break
                if n == lazy_from:
                    rng.defer = True
        finally:
            rng.defer = False
        if cap is not None and len(out) > cap:
            raise _too_many(name, cap)
    elif isinstance(res, GeneratorType):
        if stop is None:
            for tok in res:
                out.append(_token(tok, vocab, name))
        else:
            for tok in res:
                out.append(_token(tok, vocab, name))
                if len(out) >= stop:
                    res.close()
                    break
        if cap is not None and len(out) > cap:
            raise _too_many(name, cap)
    else:
        if res is None:
            raise RuleError(f"rule {name} returned None: return (or yield) the emitted tokens")
        try:
            items = iter(res)
        except TypeError:
            raise RuleError(f"rule {name} returned {res!r}: return (or yield) the emitted tokens") from None
        # an iterator may be endless (itertools.count()): read no more than can be legal, plus one to tell
        seq = list(items if stop is None else itertools.islice(items, stop if cap is None else cap + 1))
        if cap is not None and len(seq) > cap:
            raise _too_many(name, cap)
        out = [_token(t, vocab, name) for t in (seq if horizon is None else seq[:horizon])]
    if not out:
        raise RuleError(f"rule {name} emitted no token: every step must emit at least one")
    return tuple(out)


def crash_outcome(index: int, horizon: int | None) -> tuple:
    """The outcome standing for crash ``index`` in a step law recorded with ``on_error="record"``.

    Its entries are all ``-1 - index`` (never a token id) and it is ``horizon`` long (1 uncut),
    so the stream takes it as a leaf, as it does an outcome that fills the horizon; the law of
    the whole horizon then holds, for every crashing branch, the tokens emitted before the crash
    followed by that marker (:func:`is_crash`).

    >>> crash_outcome(0, 3), is_crash(crash_outcome(0, 3)), crash_index((1, 0) + crash_outcome(2, 1))
    ((-1, -1, -1), True, 2)
    """
    return (-1 - index,) * (1 if horizon is None else horizon)


def is_crash(outcome: tuple) -> bool:
    """Whether an outcome of a recorded law stands for a crash (see :func:`crash_outcome`).

    >>> is_crash((0, 1)), is_crash((0, -1)), is_crash(())
    (False, True, False)
    """
    return bool(outcome) and outcome[-1] < 0


def crash_index(outcome: tuple) -> int:
    """Which crash (an index into ``StepEnumerator.crashes``) a crash outcome stands for.

    >>> crash_index(crash_outcome(4, 2))
    4
    """
    return -1 - outcome[-1]


class _BareRule:
    """A plain function ``fn(step, rng)`` handed to the engine itself: no claim, no closed form, no record."""

    __slots__ = ("fn", "name", "family", "closed_form", "marks_accepted")

    def __init__(self, fn: Callable) -> None:
        self.fn, self.name = fn, getattr(fn, "__name__", "rule")
        self.family, self.closed_form, self.marks_accepted = None, None, False

    def __repr__(self) -> str:
        return f"<rule {self.name}: a plain function>"


def engine_rule(rule: Any, where: str = "the engine") -> Any:
    """The rule object the engine runs: a rule record (``fn``, ``name``, optional ``closed_form``, ``family``,
    ``marks_accepted``, ``binding_hint``), or a plain function ``fn(step, rng)`` as it is.

    The engine knows no rule by name: the entry points (``es.audit``, the CLI, search, sweep)
    resolve a catalog name with ``es.rules.get`` and hand the engine the rule.

    >>> engine_rule(lambda step, rng: [0]).closed_form is None
    True
    >>> engine_rule("speculative_sampling")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidType: the engine takes a rule, not the name 'speculative_sampling': pass es.rules.get('speculative_sampling') (es.audit and the other entry points take names)
    """
    if isinstance(rule, str):
        raise InvalidType(f"{where} takes a rule, not the name {rule!r}: pass es.rules.get({rule!r}) (es.audit and "
                          "the other entry points take names)")
    if callable(getattr(rule, "fn", None)) and isinstance(getattr(rule, "name", None), str):
        return rule
    if callable(rule):
        return _BareRule(rule)
    raise InvalidType(f"rule must be a Rule, a function fn(step, rng) or a catalog name, got {rule!r}")


def _to_redraw(rng: PathRng, tok: DeferredToken | None = None) -> DeferredToken:
    """The deferred draw to draw for real after a branch failed: the first one touched, else ``tok`` or the last."""
    for t in rng.deferred:
        if t._es_touched:
            return t
    return tok if tok is not None else rng.deferred[-1]


class StepEnumerator:
    """Enumerates a rule on a proposer's steps, memo-free: ``law(context, horizon)``.

    ``lazy=True`` defers the rule's categorical draws (see
    :class:`~exactspec.enumerate.rng.DeferredToken`): a rule emitting such a draw unread as the last
    token a step keeps runs once for all its values. Exact fields only (the law is the same; only the
    order of its sums differs).
    """

    def __init__(self, rule: Any, proposer: Any, env: Any, meter: Meter | None = None, *,
                 lattice: Any = None, exact_floats: bool = False, on_error: str = "raise",
                 lazy: bool = False) -> None:
        self.lattice, self.exact_floats = lattice, exact_floats
        self.lazy = bool(lazy)
        #: deferred draws made, and redrawn because the rule looked at them (a rule that looks at most of its
        #: draws gains nothing from deferring them and pays a partial run each time: deferring stops then)
        self.deferrals, self.redraws = 0, 0
        if on_error not in ("raise", "record"):
            raise InvalidValue(f"on_error must be 'raise' or 'record', got {on_error!r}")
        #: ``on_error="record"``: a branch on which the rule's own code raises is an outcome of its own (see
        #: :meth:`law`), ``crashes[i]`` its ``(what, site)``; otherwise the first one raises a RuleError
        self.record = on_error == "record"
        self.crashes: list[tuple[str, str]] = []
        self.rule = engine_rule(rule, "StepEnumerator")
        self.proposer = proposer
        self.env = env
        self.meter = meter or Meter(Budget())
        self._supports: dict = {}
        max_tokens = getattr(proposer, "max_tokens", None)
        self.cap: int | None = max_tokens() if callable(max_tokens) else None
        #: the rule has returned at least once (a binding TypeError after that is not about its signature)
        self._ran = False

    def law(self, context: tuple, horizon: int | None, stats: dict | None = None) -> dict:
        """Exact law of the emitted tokens (each tuple cut at ``horizon``) of one step from ``context``.

        With ``stats`` (a dict), every branch runs to the end of the step (only its outcome is cut
        at ``horizon``) and the call also accumulates ``stats["tokens"]``, the expected number of
        tokens the uncut step emits (branches that crashed emit none), ``stats["accepted"]``, the
        expected number of drafts the rule marked accepted (``step.accept``), and
        ``stats["marked"]``, whether any was.
        """
        env, field = self.env, self.env.field
        rule, fn, name, vocab, cap = self.rule, self.rule.fn, self.rule.name, env.vocab, self.cap
        proposer, meter, supports = self.proposer, self.meter, self._supports
        depth = meter.budget.depth
        run_h = horizon if stats is None else None     # how far each branch runs
        keep = horizon if cap is None or (horizon is not None and horizon < cap) else cap   # tokens kept
        lazy_from = 0 if self.lazy and keep is not None and not (
            self.redraws > 64 and 2 * self.redraws > self.deferrals) else None
        law: dict = {}
        #: emitted deferred draws by (tokens before, values): their branches' weights, summed before spreading
        spread: dict = {}
        stack: list = [((), field.one)]
        meter.steps += 1
        paths = meter.budget.paths
        pop, make_step, lattice, exact_floats = stack.pop, proposer.step, self.lattice, self.exact_floats
        while stack:
            prefix, w = pop()
            if paths is not None and meter.paths >= paths or meter.deadline is not None:
                meter.tick()
            else:
                meter.paths += 1     # as meter.tick(), which has nothing more to check
            rng = PathRng(prefix, w, field, stack, supports, depth, lattice, exact_floats)
            rng.spreads = True      # a DeferredToken returned as the last token kept is spread below
            step = make_step(env, context, rng)
            try:
                out = run_rule(fn, step, rng, run_h, vocab, name, cap, lazy_from)
            except _Touched as exc:   # the rule looked at a deferred draw: draw it for real, run the branch again
                self._redraw(rng, exc.token)
                continue
            except RuleError as exc:
                if rng.deferred:     # whatever failed, see it on a branch with every draw drawn
                    self._redraw(rng)
                    continue
                if not exc.trace:
                    exc.trace = rng.trace
                    exc.rule = name
                    exc._replay = self._replayer(context, run_h, rng.choices)
                raise
            except ReplayDiverged as exc:
                if rng.deferred:
                    self._redraw(rng)
                    continue
                raise RuleError(f"rule {name}: {exc}", rule=name, trace=rng.trace) from exc
            except (ExactSpecError, MemoryError, RecursionError) as exc:
                # randomness the audit could not see (another thread's draw, a generator moved behind its back)
                # is never retried: a run again need not show it, and a verdict without it would be a false pass
                if rng.deferred and isinstance(exc, ExactSpecError) and \
                        not isinstance(exc, (BudgetExceeded, UnsupportedRandomness)):
                    self._redraw(rng)
                    continue
                raise   # resources run out are budget errors (see watchdog.guard), not the rule's fault
            except Exception as exc:
                if rng.deferred:
                    self._redraw(rng)
                    continue
                from .._crash import crash_site
                site = crash_site(exc)
                if self.record and site is not None:   # the rule's code crashed on this branch: an outcome
                    what = (f"{type(exc).__name__}: {exc}", site)
                    if what not in self.crashes:
                        self.crashes.append(what)
                    key = crash_outcome(self.crashes.index(what), horizon)
                    law[key] = law.get(key, 0) + rng.weight
                    continue
                trace = rng.trace
                hint_of = getattr(rule, "binding_hint", None)   # a sampler or loop whose first call as fn(step, rng) failed
                hint = hint_of(exc, run_rule.__code__, not self._ran) if hint_of is not None else ""
                raise RuleError(
                    f"rule {name} raised {type(exc).__name__}: {exc}{hint} (context {context}, draws {trace})"
                    f"{f' at {site}' if site else ''}; call .replay() on this error to re-run that branch",
                    rule=name, trace=trace, replay=self._replayer(context, run_h, rng.choices)) from exc
            except SystemExit as exc:   # user code ending the process is a failure (exit 2), never a verdict
                if rng.deferred:
                    self._redraw(rng)
                    continue
                trace = rng.trace
                raise RuleError(f"rule {name} called sys.exit({exc.code!r}) (context {context}, draws {trace})",
                                rule=name, trace=trace,
                                replay=self._replayer(context, run_h, rng.choices)) from None
            self._ran = True
            w = rng.weight
            deferred = rng.deferred
            if deferred:
                if deferred[0]._es_touched if len(deferred) == 1 else any(t._es_touched for t in deferred):
                    self._redraw(rng)   # a touch the rule caught and went on from
                    continue
                self.deferrals += len(deferred)
                key = out if keep is None or len(out) <= keep else out[:keep]
                last = key[-1]
                if len(key) > 1 and (len(deferred) > 1 or type(last) is not DeferredToken) and \
                        DeferredToken in map(type, key[:-1]):   # emitted unread before the last token kept:
                    self._redraw(rng, next(t for t in key[:-1] if type(t) is DeferredToken))   # draw it for real
                    continue
                if type(last) is DeferredToken:   # emitted unread: stands for all its values (spread below)
                    values = last.values()
                    sk = (key[:-1], id(values))
                    hit = spread.get(sk)
                    if hit is None:
                        spread[sk] = [values, w]
                    else:
                        hit[1] += w
                else:
                    law[key] = law.get(key, 0) + w
            elif run_h is None and keep is not None and len(out) > keep:
                key = out[:keep]
                law[key] = law.get(key, 0) + w
            else:
                law[out] = law.get(out, 0) + w
            if stats is not None:
                stats["tokens"] = stats.get("tokens", 0) + len(out) * w
                n = getattr(step, "accepted", 0)
                if n:
                    stats["marked"] = True
                    stats["accepted"] = stats.get("accepted", 0) + n * w
        for (base, _), (values, w) in spread.items():
            for v, pv in values:
                k = base + (v,)
                law[k] = law.get(k, 0) + w * pv
        return law

    def _redraw(self, rng: PathRng, tok: DeferredToken | None = None) -> None:
        """Draw a deferred draw of this failed branch for real (see :func:`_to_redraw`), and count it."""
        self.deferrals += len(rng.deferred)
        self.redraws += 1
        rng.redraw(_to_redraw(rng, tok))

    def _replayer(self, context: tuple, horizon: int | None, choices: tuple) -> Callable[[], Any]:
        def replay() -> Any:
            rng = PathRng(choices, self.env.field.one, self.env.field, [], {}, None, self.lattice, self.exact_floats)
            step = self.proposer.step(self.env, context, rng)
            return run_rule(self.rule.fn, step, rng, horizon, self.env.vocab, self.rule.name, self.cap)
        return replay
