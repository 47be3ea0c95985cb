"""A straightforward baseline enumerator: plain recursion over every branch, no memoisation.

It shares no code with exactspec's engine (its own step, rng and recursion), so it doubles
as an independent oracle in the tests. Drafts are drawn eagerly (all ``gamma`` of them, every
combination), each step's rule is re-run once per branch of its draws, and every emitted
sequence recurses into the next step until ``tokens`` tokens are out.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
>>> baseline_law(es.rules.greedy_match_sampled.fn, p, q, gamma=1, prompt=(), tokens=1)
{(0,): Fraction(4, 5), (1,): Fraction(1, 5)}
"""

from __future__ import annotations

import time
from fractions import Fraction
from itertools import product
from typing import Any, Callable


class _Branch(Exception):
    def __init__(self, options: list) -> None:
        self.options = options


class _Rng:
    """Follows a fixed list of choices; the first draw past it raises _Branch with its options."""

    def __init__(self, choices: list) -> None:
        self.choices, self.i, self.w = choices, 0, Fraction(1)

    def _pick(self, options: list) -> Any:
        options = [(v, pr) for v, pr in options if pr > 0]
        if self.i == len(self.choices):
            raise _Branch(options)
        v = self.choices[self.i]
        self.i += 1
        self.w *= dict(options)[v]
        return v

    def categorical(self, law: Any) -> int:
        return self._pick(list(enumerate(law)))

    def bernoulli(self, prob: Any) -> bool:
        return self._pick([(True, prob), (False, 1 - prob)])

    def uniform(self) -> "_U":
        return _U(self)

    random = uniform


class _U:
    def __init__(self, rng: _Rng) -> None:
        self.rng, self.lo, self.hi = rng, Fraction(0), Fraction(1)

    def __lt__(self, t: Any) -> bool:
        if t <= self.lo:
            return False
        if t >= self.hi:
            return True
        below = self.rng._pick([(True, (t - self.lo) / (self.hi - self.lo)), (False, (self.hi - t) / (self.hi - self.lo))])
        if below:
            self.hi = t
        else:
            self.lo = t
        return below

    __le__ = __lt__

    def __gt__(self, t: Any) -> bool:
        return not self < t

    __ge__ = __gt__


class _Step:
    def __init__(self, p: Any, q: Any, ctx: tuple, drafts: tuple, claims: list) -> None:
        self.gamma, self.vocab = len(drafts), p.vocab
        self._p, self._ctx, self._drafts, self._claims = p, ctx, drafts, claims

    def draft(self, j: int) -> int:
        return self._drafts[j]

    def accept(self, j: int) -> int:
        return self._drafts[j]

    def claimed(self, j: int) -> tuple:
        return self._claims[j]

    def target(self, j: int) -> tuple:
        return self._p(self._ctx + self._drafts[:j])

    @property
    def drafts(self) -> tuple:
        return self._drafts

    def number(self, x: Any) -> Fraction:
        return Fraction(x)


def _argmax(law: tuple) -> int:
    return max(range(len(law)), key=lambda i: (law[i], -i))


def _all_drafts(q: Any, ctx: tuple, gamma: int, sampling: str, claim: str):
    vocab = q.vocab
    for drafts in product(range(vocab), repeat=gamma):
        w, claims, c = Fraction(1), [], ctx
        for x in drafts:
            law = q(c)
            if sampling == "argmax":
                w *= 1 if x == _argmax(law) else 0
            else:
                w *= law[x]
            claims.append(tuple(Fraction(int(i == x)) for i in range(vocab)) if claim == "point_mass" else law)
            c = c + (x,)
            if not w:
                break
        if w:
            yield drafts, w, claims


def _rule_outcomes(fn: Callable, step: _Step, choices: list, deadline: float | None):
    if deadline is not None and time.perf_counter() > deadline:
        raise TimeoutError("baseline ran past its deadline")
    rng = _Rng(choices)
    try:
        out = tuple(fn(step, rng))
    except _Branch as b:
        for v, _ in b.options:
            yield from _rule_outcomes(fn, step, choices + [v], deadline)
        return
    yield out, rng.w


def baseline_law(fn: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
                 sampling: str = "sample", claim: str = "draft", seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` tokens, by recursion over every branch of the whole stream.

    Raises TimeoutError once ``seconds`` have passed (so a benchmark can bound its wait).
    """
    deadline = None if seconds is None else time.perf_counter() + seconds
    law: dict = {}

    def stream(ctx: tuple, emitted: tuple, w: Fraction) -> None:
        if len(emitted) >= tokens:
            k = emitted[:tokens]
            law[k] = law.get(k, 0) + w
            return
        for drafts, wd, claims in _all_drafts(draft, ctx, gamma, sampling, claim):
            step = _Step(target, draft, ctx, drafts, claims)
            for out, wo in _rule_outcomes(fn, step, [], deadline):
                stream(ctx + out, emitted + out, w * wd * wo)

    stream(tuple(prompt), (), Fraction(1))
    return law


def _span(*models: Any) -> int | None:
    """How many trailing tokens of the context the models read (None: all of it)."""
    orders = [m.order for m in models]
    return None if any(o is None for o in orders) else max(orders)


def _suffix(ctx: tuple, span: int | None) -> tuple:
    return ctx if span is None else ctx[max(len(ctx) - span, 0):]


def memoised_law(fn: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
                 sampling: str = "sample", claim: str = "draft") -> dict:
    """:func:`baseline_law` with each sub-law memoised by the context suffix the models read and the tokens left.

    The same plain step (every draft combination, the rule re-run once per branch of its draws), composed
    backwards; for instances too large for the unmemoised recursion.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    >>> memoised_law(es.rules.speculative_sampling.fn, p, q, gamma=1, prompt=(), tokens=2) == \\
    ...     baseline_law(es.rules.speculative_sampling.fn, p, q, gamma=1, prompt=(), tokens=2)
    True
    """
    span = _span(target, draft)
    memo: dict = {}

    def sub(ctx: tuple, r: int) -> dict:
        key = (_suffix(ctx, span), r)
        hit = memo.get(key)
        if hit is not None:
            return hit
        law: dict = {}
        for drafts, wd, claims in _all_drafts(draft, ctx, gamma, sampling, claim):
            for out, wo in _rule_outcomes(fn, _Step(target, draft, ctx, drafts, claims), [], None):
                if len(out) >= r:
                    law[out[:r]] = law.get(out[:r], 0) + wd * wo
                    continue
                for rest, pr in sub(ctx + out, r - len(out)).items():
                    law[out + rest] = law.get(out + rest, 0) + wd * wo * pr
        memo[key] = law
        return law

    return sub(tuple(prompt), tokens)


def baseline_calls(fn: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
                   sampling: str = "sample", claim: str = "draft") -> tuple[Fraction, Fraction]:
    """(expected tokens the first, uncut, step emits; expected number of steps until ``tokens`` tokens are out).

    The plain step of :func:`baseline_law`, counting instead of collecting outcomes (the expected steps memoised
    as :func:`memoised_law` memoises sub-laws).

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> p = es.models.context_free((F(1, 2), F(1, 2)))
    >>> baseline_calls(es.rules.speculative_sampling.fn, p, p, gamma=1, prompt=(), tokens=3)
    (Fraction(2, 1), Fraction(2, 1))
    """
    first: Fraction = Fraction(0)
    for drafts, wd, claims in _all_drafts(draft, tuple(prompt), gamma, sampling, claim):
        for out, wo in _rule_outcomes(fn, _Step(target, draft, tuple(prompt), drafts, claims), [], None):
            first += len(out) * wd * wo
    span = _span(target, draft)
    memo: dict = {}

    def steps(ctx: tuple, r: int) -> Fraction:
        key = (_suffix(ctx, span), r)
        hit = memo.get(key)
        if hit is not None:
            return hit
        n = Fraction(1)
        for drafts, wd, claims in _all_drafts(draft, ctx, gamma, sampling, claim):
            for out, wo in _rule_outcomes(fn, _Step(target, draft, ctx, drafts, claims), [], None):
                if len(out) < r:
                    n += wd * wo * steps(ctx + out, r - len(out))
        memo[key] = n
        return n

    return first, steps(tuple(prompt), tokens)


def baseline_target_law(target: Any, *, prompt: tuple, tokens: int) -> dict:
    """The target's own law of the first ``tokens`` tokens (one plain sample a step), by the same recursion.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> baseline_target_law(es.models.context_free((F(1, 4), F(3, 4))), prompt=(), tokens=1)
    {(0,): Fraction(1, 4), (1,): Fraction(3, 4)}
    """
    return baseline_law(lambda step, rng: [rng.categorical(step.target(0))], target, target, gamma=0,
                        prompt=prompt, tokens=tokens)


class _TreeStep:
    """A token tree whose node's children are all drawn (through the baseline rng) when first asked for."""

    root = 0

    def __init__(self, p: Any, q: Any, ctx: tuple, rng: _Rng, expansion: tuple, children: str, claim: str) -> None:
        self._p, self._q, self._rng = p, q, rng
        self._exp, self._kind, self._claim_kind = expansion, children, claim
        self._tok, self._ctx, self._depth, self._claims = [ctx[-1] if ctx else -1], [ctx], [0], [None]
        self._kids: dict[int, list[int]] = {}

    def _draw(self, node: int) -> list[int]:
        if node in self._kids:
            return self._kids[node]
        kids: list[int] = []
        d = self._depth[node]
        if d < len(self._exp):
            q = self._q(self._ctx[node])
            vocab = len(q)
            earlier: list[int] = []
            for _ in range(self._exp[d]):
                if self._kind == "topk":
                    left = [i for i in sorted(range(vocab), key=lambda i: (-q[i], i)) if q[i] > 0 and i not in earlier]
                    if not left:
                        break
                    x = left[0]
                else:
                    law = list(q)
                    if self._kind == "without_replacement":
                        for e in earlier:
                            law[e] = Fraction(0)
                        if sum(law) == 0:
                            break
                        law = [v / sum(law) for v in law]
                    x = self._rng.categorical(law)
                if self._claim_kind == "draft":
                    claim = tuple(q)
                elif self._claim_kind == "point_mass":
                    claim = tuple(Fraction(int(i == x)) for i in range(vocab))
                else:
                    rest = sum(v for i, v in enumerate(q) if i not in earlier)
                    claim = tuple(Fraction(0) if i in earlier else v / rest for i, v in enumerate(q))
                earlier.append(x)
                self._tok.append(x)
                self._ctx.append(self._ctx[node] + (x,))
                self._depth.append(d + 1)
                self._claims.append(claim)
                kids.append(len(self._tok) - 1)
        self._kids[node] = kids
        return kids

    def children(self, node: int) -> list[int]:
        return self._draw(node)

    def proposals(self, node: int):
        return [(c, self._claims[c]) for c in self._draw(node)]

    def token(self, node: int) -> int:
        return self._tok[node]

    def target(self, node: int) -> tuple:
        return self._p(self._ctx[node])

    def claimed(self, node: int) -> tuple:
        return self._claims[node]

    def accept(self, node: int) -> int:
        return self._tok[node]

    def number(self, x: Any) -> Fraction:
        return Fraction(x)


def baseline_tree_law(fn: Callable, target: Any, draft: Any, *, expansion: tuple, children: str, claim: str,
                      prompt: tuple, tokens: int, seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` tokens of a tree rule, by recursion over every branch of the stream.

    The whole stream (drafting each step's tree and verifying it, step after step) is one program
    re-run once per branch of its draws: no memoisation, no horizon cut.
    """
    deadline = None if seconds is None else time.perf_counter() + seconds
    law: dict = {}

    def program(rng: _Rng) -> tuple:
        ctx, emitted = tuple(prompt), ()
        while len(emitted) < tokens:
            step = _TreeStep(target, draft, ctx, rng, tuple(expansion), children, claim)
            out = tuple(fn(step, rng))
            ctx, emitted = ctx + out, emitted + out
        return emitted[:tokens]

    def explore(choices: list) -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeoutError("baseline ran past its deadline")
        rng = _Rng(choices)
        try:
            out = program(rng)
        except _Branch as b:
            for v, _ in b.options:
                explore(choices + [v])
            return
        law[out] = law.get(out, 0) + rng.w

    explore([])
    return law
