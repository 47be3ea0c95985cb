"""The n-token stream: steps composed from the prompt until ``tokens`` tokens are out.

The law of the first ``r`` tokens from a context depends only on the context suffix the
models read (the state) and on ``r``, so it is memoised by ``(state, r)``; a step's law is
memoised the same way and each step is cut at the horizon ``r``.

>>> import exactspec as es
>>> from exactspec.fields import get_field
>>> p, q = es.models.context_free(("3/5", "2/5")), es.models.context_free(("1/2", "1/2"))
>>> eng = Engine(es.rules.speculative_sampling, es.drafts.chain(2), p, q, get_field(backend="python"))
>>> law, calls = eng.output((), 2)
>>> law == {(0, 0): F(9, 25), (0, 1): F(6, 25), (1, 0): F(6, 25), (1, 1): F(4, 25)}
True
"""

from __future__ import annotations

from fractions import Fraction as F  # noqa: F401  (doctest)
from typing import Any

from ..errors import InvalidType, InvalidValue
from ..fields import Field
from ..laws import clear_memo
from ..models import Model
from .env import Env, state_key
from .step import Budget, Meter, StepEnumerator, check_budget, crash_index, crash_outcome, engine_rule, is_crash
from .watchdog import guard as BudgetGuard

__all__ = ["Engine", "target_law", "greedy_sequence"]


class Engine:
    """Exact output law of a rule + proposer over a target (and draft) model, memoised by state.

    ``rule`` is a rule record (``es.rules.Rule``) or a plain function ``fn(step, rng)``; the
    engine knows no rule by name (``es.audit`` resolves names). ``lazy=True`` defers the rule's
    categorical draws (see :class:`~exactspec.enumerate.rng.DeferredToken`): the
    entry points for rules ask for it; a sampler audit does not. In an exact field the output law
    is composed forwards, shorter horizons are cut from longer ones and the efficiency comes with
    the first step; in an inexact field the output law is composed backwards from memoised
    sub-laws, the efficiency from the whole uncut first step, nothing deferred, so float results
    keep their rounding (``tests/test_engine_paths.py`` checks the exact path against the plain
    recursion of ``benchmarks/baseline.py``).
    """

    def __init__(self, rule: Any, proposer: Any, target: Model, draft: Model | None, field: Field, *,
                 budget: Budget | None = None, closed_form: bool = True, lattice: Any = None,
                 exact_floats: bool = False, on_error: str = "raise", lazy: bool = False) -> None:
        budget = check_budget(budget, "Engine")
        self.rule = engine_rule(rule, "Engine")
        self.proposer = proposer
        self.field = field
        #: exact fields: forward composition, horizons cut from longer ones, efficiency with the first step;
        #: inexact fields: backward composition (their rounding as it always was)
        self.fast = field.exact
        self.env = Env(target, draft, field)
        self.env.fast = self.fast
        self.meter = Meter(budget or Budget())
        self.steps = StepEnumerator(self.rule, proposer, self.env, self.meter, lattice=lattice,
                                    exact_floats=exact_floats, on_error=on_error, lazy=lazy and self.fast)
        self.use_closed_form = bool(closed_form and getattr(self.rule, "closed_form", None) is not None
                                    and hasattr(proposer, "laws") and proposer.family == self.rule.family)
        orders = [target.order] + ([draft.order] if draft is not None else []) + list(proposer.orders())
        self._orders = orders
        self._step_memo: dict[tuple, dict] = {}
        self._out_memo: dict[tuple, tuple[dict, Any]] = {}
        #: fast path: the horizons each state's step law was computed at, and the laws any shorter horizon may be
        #: cut from (a law of the first step computed uncut, or any law when no crash is recorded)
        self._horizons: dict[tuple, list] = {}
        self._cut_from: set = set()
        self._first: tuple | None = None     # the memo key of the first step's law computed with the efficiency
        clear_memo()

    def key(self, context: tuple) -> tuple:
        return state_key(context, self._orders)

    def _closed(self, key: tuple, horizon: int | None, lengths: bool = False) -> dict | None:
        """The rule's closed-form step law, or None when it has none for this proposer."""
        if not self.use_closed_form:
            return None
        self.meter.check_time()
        law = self.rule.closed_form(self.proposer.laws(self.env, key), horizon, lengths=lengths)
        if law is not None:
            self.meter.steps += 1
        return law

    def step_law(self, context: tuple, horizon: int | None) -> dict:
        """Law of one step's emitted tokens from ``context``, each cut at ``horizon`` (None: uncut)."""
        key = self.key(context)
        memo = self._step_memo
        law = memo.get((key, horizon))
        if law is not None:
            return law
        full = memo.get((key, None))
        if full is None and self.fast and horizon is not None:
            full = self._longer(key, horizon)
        if full is not None and horizon is not None:
            law = {}
            for e, w in full.items():
                e = crash_outcome(crash_index(e), horizon) if is_crash(e) else e[:horizon]   # a crash stays a leaf
                law[e] = law.get(e, 0) + w
        else:
            self._check_length(horizon)
            law = self._closed(key, horizon)
            if law is None:
                law = self.steps.law(key, horizon)
                if self.fast and not self.steps.record:   # no crash can hide behind a cut: any law may be cut
                    self._cut_from.add((key, horizon))
        self._remember(key, horizon, law)
        return law

    def _remember(self, key: tuple, horizon: int | None, law: dict) -> None:
        self._step_memo[(key, horizon)] = law
        if self.fast:
            self._horizons.setdefault(key, []).append(horizon)

    def _longer(self, key: tuple, horizon: int) -> dict | None:
        """A law of this state at a longer horizon, enumerated, to cut at ``horizon``, or None.

        Without ``lazy`` (a sampler audit, which caches its sampler's calls by their inputs and
        answers the shorter horizons from that cache itself) only the first step's law is cut, as
        the inexact fields' path cuts its uncut law.

        Cutting gives the law enumerating at ``horizon`` gives: a branch runs the same draws up to
        its ``horizon``-th token either way. Not with recorded crashes (a branch crashing after its
        ``horizon``-th token is a crash only in the longer law), except from the first step's law
        computed with the efficiency, as the inexact fields' path cuts its uncut law.
        """
        best: Any = None          # the shortest longer horizon (None: uncut, the longest)
        found = False
        lazy, first = self.steps.lazy, self._first
        for h in self._horizons.get(key, ()):
            if ((key, h) in self._cut_from if lazy else (key, h) == first) and (h is None or h > horizon) and (
                    not found or (h is not None and (best is None or h < best))):
                best, found = h, True
        return self._step_memo[(key, best)] if found else None

    def _check_length(self, horizon: int | None) -> None:
        """Refuse a step that may draft more positions than the depth budget allows draws.

        A chain of ``gamma`` sampled drafts that are all accepted is one branch of ``gamma`` draws
        or more, and its closed form walks prefixes as long: with ``gamma`` past the depth budget
        neither can finish, so say so at once instead of filling memory.
        """
        depth, cap = self.meter.budget.depth, self.steps.cap
        if depth is None or cap is None:
            return
        longest = cap if horizon is None else min(cap, horizon)
        if longest - 1 > depth:
            from ..errors import BudgetExceeded
            raise BudgetExceeded("depth", depth, covered=dict(self.meter.covered(), **{
                "tokens one step may emit": longest}))

    def guard(self) -> BudgetGuard:
        """The budget guard of this engine's audit (see :meth:`Meter.guard`): wrap every computation in it.

        >>> import exactspec as es
        >>> from exactspec.fields import get_field
        >>> p = es.models.context_free(("1/2", "1/2"))
        >>> eng = Engine(es.rules.speculative_sampling, es.drafts.chain(2), p, p, get_field(),
        ...              budget=Budget(seconds=10))
        >>> with eng.guard():
        ...     law, calls = eng.output((), 3)
        ...     expected = target_law(p, (), 3, eng.field)
        >>> law == expected
        True
        """
        return self.meter.guard()

    def output(self, prompt: tuple, tokens: int) -> tuple[dict, Any]:
        """(law of the first ``tokens`` emitted tokens, expected number of steps to emit them)."""
        if self.fast:
            return self._forward(tuple(prompt), tokens)
        return self._output(tuple(prompt), tokens)

    def _forward(self, context: tuple, tokens: int) -> tuple[dict, Any]:
        """The law of the first ``tokens`` tokens, composed forwards over the tokens emitted so far.

        ``levels[n]`` holds, for every sequence of ``n`` tokens after which a step starts, the
        probability of starting one there; sequences reached by different splits into steps are
        merged before their next step is expanded. Each level is expanded once, in order, and
        freed: memory is the outcomes plus one level. The expected number of steps is the sum of
        those probabilities (1 for the first step). Same law as :meth:`_output`, summed in another
        order (exact fields only).
        """
        memo = self._out_memo
        root = (self.key(context), tokens)
        hit = memo.get(root)
        if hit is not None:
            return hit
        meter = self.meter
        held, most = meter.outcomes, meter.budget.outcomes or float("inf")   # outcomes held, counted here
        out: dict = {}
        levels: list = [None] * tokens
        levels[0] = {(): self.field.one}
        calls: Any = 1
        mass = meter.mass
        for n in range(tokens):
            level, levels[n] = levels[n], None
            if not level:
                continue
            r = tokens - n
            for e0, w0 in level.items():
                if n:
                    calls += w0
                meter.check_time()
                for e, pe in self.step_law(context + e0, r).items():
                    m = len(e)
                    if m >= r:
                        dest = out
                    else:
                        dest = levels[n + m]
                        if dest is None:
                            dest = levels[n + m] = {}
                    k = e0 + e
                    old = dest.get(k)
                    if old is None:
                        dest[k] = w0 * pe
                        held += 1
                    else:
                        dest[k] = old + w0 * pe
                    if mass is not None and dest is out:
                        mass.add(w0 * pe)
                if held > most:
                    meter.hold(held - meter.outcomes)
        meter.outcomes = held
        done = memo[root] = (out, calls)
        return done

    def _output(self, context: tuple, r: int) -> tuple[dict, Any]:
        """The law from ``context`` by remaining tokens ``r``, memoised by ``(state, r)``.

        A loop over an explicit stack, not recursion: one frame per step on the current path, so
        thousands of tokens need no deeper Python stack. Frames add in the order recursion would.
        """
        memo = self._out_memo
        root = (self.key(context), r)
        hit = memo.get(root)
        if hit is not None:
            return hit
        meter = self.meter
        held, most = meter.outcomes, meter.budget.outcomes or float("inf")   # outcomes held, counted here
        # a frame: [memo key, context, r, step-law items, law, calls, (e, pe) waiting for its sub-law]
        stack = [self._frame(root, context, r)]
        done: Any = None
        mass = meter.mass
        while stack:
            f = stack[-1]
            key, ctx, r, items, law, calls, waiting = f
            get = law.get
            if waiting is not None:   # the frame above finished: fold its law in
                e, pe = waiting
                sub, sub_calls = done
                held += len(sub)
                if held > most:
                    meter.hold(held - meter.outcomes)
                calls += pe * sub_calls
                for rest, pr in sub.items():
                    k = e + rest
                    law[k] = get(k, 0) + pe * pr
                if mass is not None and len(stack) == 1:     # the root's outcomes: decided
                    mass.add(pe)
            for e, pe in items:
                n = len(e)
                if n >= r:
                    held += 1
                    law[e] = get(e, 0) + pe
                    if mass is not None and len(stack) == 1:
                        mass.add(pe)
                    continue
                nxt = ctx + e
                sub_key = (self.key(nxt), r - n)
                f[5], f[6] = calls, (e, pe)
                hit = memo.get(sub_key)
                if hit is None:
                    stack.append(self._frame(sub_key, nxt, r - n))
                else:   # memoised: come back to this frame and fold it in as if a frame above had finished
                    done = hit
                break
            else:
                stack.pop()
                done = memo[key] = (law, calls)
                if held > most:
                    meter.hold(held - meter.outcomes)
        meter.outcomes = held
        return done

    def _frame(self, key: tuple, context: tuple, r: int) -> list:
        self.meter.check_time()
        return [key, context, r, iter(self.step_law(context, r).items()), {}, 1, None]

    def efficiency(self, prompt: tuple, tokens: int | None = None) -> tuple[Any, Any, Any]:
        """Exact expectations for the first (uncut) step from ``prompt``.

        Returns (tokens emitted, drafts accepted or None when the rule marks no acceptance,
        speculated nodes the target verifies). ``tokens``: the horizon the output law will be asked
        for; the fast path then keeps the first step's law cut there, computed on the way (every
        branch of the first step runs to its end either way), instead of the uncut one.
        """
        key = self.key(tuple(prompt))
        self._check_length(None)
        nodes = self.proposer.expected_nodes(self.env, key)
        by_len = self._closed(key, None, lengths=True)
        if by_len is not None:
            emitted_tokens: Any = 0
            accepted: Any = 0
            for (n, a), w in by_len.items():
                emitted_tokens += n * w
                accepted += a * w
            return emitted_tokens, accepted, nodes
        stats: dict = {}
        marks = getattr(self.rule, "marks_accepted", False)
        if self.fast:
            law = self.steps.law(key, tokens, stats)
            self._remember(key, tokens, law)
            self._cut_from.add((key, tokens))   # cut as the inexact fields' path cuts its uncut law
            self._first = (key, tokens)
            marked = stats.get("marked") or marks
            return stats.get("tokens", 0), (stats.get("accepted", 0) if marked else None), nodes
        full = self.steps.law(key, None, stats)
        self._step_memo[(key, None)] = full
        emitted: Any = 0
        for e, w in full.items():
            if not is_crash(e):          # a branch that crashed emitted nothing
                emitted += len(e) * w
        marked = stats.get("marked") or marks
        return emitted, (stats.get("accepted", 0) if marked else None), nodes

    def close(self) -> None:
        clear_memo()


def target_law(target: Model, prompt: tuple, tokens: int, field: Field, orders: list | None = None, *,
               meter: Meter | None = None, fast: bool | None = None) -> dict:
    """The target's own autoregressive law of the first ``tokens`` tokens after ``prompt``.

    With ``meter`` (an engine's), the outcomes it holds count against that audit's budget.
    ``fast`` (default: in exact fields) extends the prefixes one
    token at a time (``tokens * vocab ** tokens`` products at most, none of the sub-laws); otherwise
    the law is composed backwards from sub-laws memoised by state, as inexact fields need to keep
    their rounding. Both count the same outcomes against the budget.

    >>> import exactspec as es
    >>> from exactspec.fields import get_field
    >>> sorted(target_law(es.models.context_free(("1/4", "3/4")), (), 2, get_field(backend="python")).values())
    [Fraction(1, 16), Fraction(3, 16), Fraction(3, 16), Fraction(9, 16)]
    """
    from .env import ModelView
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise InvalidType(f"tokens must be an int >= 1, got {tokens!r}")
    elif tokens < 1:
        raise InvalidValue(f"tokens must be an int >= 1, got {tokens!r}")
    view = ModelView(target, field)
    if fast is None:
        fast = field.exact
    if fast:
        return _target_forward(view, tuple(prompt), tokens, meter)
    orders = orders or [target.order]
    memo: dict[tuple, dict] = {}
    root = (state_key(tuple(prompt), orders), tokens)
    # a loop over an explicit stack (one frame per token), folding in the order recursion would;
    # a frame: [memo key, context, r, (token, prob) items, law, (t, pt) waiting for its sub-law]
    stack: list[list[Any]] = [[root, tuple(prompt), tokens, iter(enumerate(view(tuple(prompt)))), {}, None]]
    done: dict = {}
    hold = meter.hold if meter is not None else _ignore
    while stack:
        f = stack[-1]
        key, context, r, items, law, waiting = f
        if waiting is not None:
            t, pt = waiting
            hold(len(done))
            for rest, pr in done.items():
                law[(t,) + rest] = pt * pr
        for t, pt in items:
            if not pt:
                continue
            if r == 1:
                hold(1)
                law[(t,)] = pt
                continue
            nxt = context + (t,)
            sub_key = (state_key(nxt, orders), r - 1)
            hit = memo.get(sub_key)
            if hit is None:
                f[5] = (t, pt)
                stack.append([sub_key, nxt, r - 1, iter(enumerate(view(nxt))), {}, None])
                break
            hold(len(hit))
            for rest, pr in hit.items():
                law[(t,) + rest] = pt * pr
        else:
            stack.pop()
            done = memo[key] = law
    return done


def _target_forward(view: Any, prompt: tuple, tokens: int, meter: Meter | None) -> dict:
    """:func:`target_law` one token at a time: each level's prefixes times the next token's law."""
    hold = meter.hold if meter is not None else _ignore
    level: dict = {(): None}
    for n in range(tokens):
        nxt: dict = {}
        for prefix, w in level.items():
            for t, pt in enumerate(view(prompt + prefix)):
                if pt:
                    nxt[prefix + (t,)] = pt if w is None else w * pt
        hold(len(nxt))
        level = nxt
    return level


def _ignore(n: int) -> None:
    """Counts nothing (target_law without a meter)."""


def greedy_sequence(target: Model, prompt: tuple, tokens: int) -> tuple[int, ...]:
    """The target's greedy continuation (argmax at every position, ties to the lowest id).

    >>> import exactspec as es
    >>> greedy_sequence(es.models.context_free(("1/2", "1/2")), (), 3)
    (0, 0, 0)
    """
    from ..laws import argmax
    if tokens < 1:
        raise InvalidValue("tokens must be >= 1")
    ctx = tuple(prompt)
    out = []
    for _ in range(tokens):
        t = argmax(target(ctx))
        out.append(t)
        ctx = ctx + (t,)
    return tuple(out)
