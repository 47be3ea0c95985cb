"""A plain reference for audits of numpy chain samplers: every draw enumerated eagerly, no interception.

It shares no code with exactspec's sampler audit (no interception, no pending or lazy draws, no deferral,
no joint draws, no caches): the sampler is called with a stand-in generator that follows a fixed list of
choices and stops at the first draw past it, the way ``benchmarks/baseline.py`` enumerates rules, and the
whole stream is a plain recursion over every branch (drafts drawn from the draft model, the sampler run
once per branch of its own draws, the next step from what it emitted). A draw is what numpy's
``Generator`` makes of its 53 random bits (``random()`` is ``k * 2**-53``, ``k`` uniform in
``0 .. 2**53 - 1``; ``choice(n, p=)`` searches one such uniform into the float64 cumulative sum of ``p``,
normalised by its last entry, as numpy's code does), each outcome with its exact count of ``k``.
A comparison of a uniform with a number splits the remaining range of ``k`` in two, so no value is
enumerated one by one.

The inputs are handed as the ``numpy`` adapter hands them: the drafted ids (int64), the claimed draft laws
and the target laws as float64 rows (``float`` of each exact probability).

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> from exactspec.bugzoo import numpy_samplers as zoo
>>> p, q = es.models.context_free((F(3, 4), F(1, 4))), es.models.context_free((F(1, 2), F(1, 2)))
>>> plain_sampler_law(zoo.correct, p, q, gamma=1, prompt=(), tokens=1) == {(0,): F(3, 4), (1,): F(1, 4)}
True
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from itertools import product
from typing import Any, Callable

import numpy as np

#: numpy's float64 uniforms: ``k * 2**-53``, ``k = 0 .. 2**53 - 1``
_N = 2 ** 53


class Branch(BaseException):
    """The first choice past the list: its options (a BaseException, so code that catches Exception lets it by)."""

    def __init__(self, options: list) -> None:
        self.options = options


class Choices:
    """A fixed list of choices; the first choice past it raises Branch with its options and their weights.

    >>> c = Choices([1])
    >>> c.pick([(0, Fraction(1, 3)), (1, Fraction(2, 3))]), c.w
    (1, Fraction(2, 3))
    """

    def __init__(self, choices: list) -> None:
        self.choices, self.i, self.w = choices, 0, Fraction(1)

    def pick(self, options: list) -> Any:
        options = [(v, pr) for v, pr in options if pr > 0]
        if self.i == len(self.choices):
            raise Branch(options)
        v = self.choices[self.i]
        self.i += 1
        self.w *= dict(options)[v]
        return v


def _below(t: Any, strict: bool) -> int:
    """How many ``k`` in ``0 .. 2**53`` have ``k * 2**-53 < t`` (``<= t`` when not ``strict``), capped to the range."""
    x = Fraction(t) * _N
    n = math.ceil(x) if strict else math.floor(x) + 1
    return min(max(n, 0), _N)


class _Uniform:
    """One ``random()`` draw: the range ``lo <= k < hi`` still possible, split by each comparison."""

    def __init__(self, choices: Choices) -> None:
        self.choices, self.lo, self.hi = choices, 0, _N

    def _split(self, t: Any, strict: bool) -> bool:
        cut = min(max(_below(t, strict), self.lo), self.hi)
        size = self.hi - self.lo
        below = self.choices.pick([(True, Fraction(cut - self.lo, size)), (False, Fraction(self.hi - cut, size))])
        if below:
            self.hi = cut
        else:
            self.lo = cut
        return below

    def __lt__(self, t: Any) -> bool:
        return self._split(t, True)

    def __le__(self, t: Any) -> bool:
        return self._split(t, False)

    def __gt__(self, t: Any) -> bool:
        return not self._split(t, False)

    def __ge__(self, t: Any) -> bool:
        return not self._split(t, True)


class PlainGenerator:
    """The stand-in for numpy's ``Generator`` a sampler is handed: ``random()`` and ``choice(n, p=)``.

    >>> g = PlainGenerator(Choices([True]))
    >>> g.random() < 0.25, g.choices.w
    (True, Fraction(1, 4))
    """

    def __init__(self, choices: Choices) -> None:
        self.choices = choices

    def random(self) -> _Uniform:
        return _Uniform(self.choices)

    def choice(self, a: Any, p: Any = None) -> int:
        if p is None:
            raise TypeError("the plain reference draws choice(n, p=) only")
        n = int(a) if np.ndim(a) == 0 else len(a)
        cdf = np.asarray(p, dtype=np.float64).cumsum()
        cdf /= cdf[-1]
        # searchsorted(cdf, u, side="right") is i where cdf[i - 1] <= u < cdf[i]: count the k of each i
        edges = [0] + [_below(c, True) for c in cdf[:-1].tolist()] + [_N]
        edges = [min(max(e, 0), _N) for e in edges]
        options = [(i, Fraction(max(edges[i + 1] - edges[i], 0), _N)) for i in range(n)]
        return self.choices.pick(options)


def _sampler_outcomes(sampler: Callable, args: tuple, choices: list, deadline: float | None):
    if deadline is not None and time.perf_counter() > deadline:
        raise TimeoutError("plain reference ran past its deadline")
    c = Choices(choices)
    try:
        out = tuple(int(t) for t in sampler(*args, PlainGenerator(c)))
    except Branch as b:
        for v, _ in b.options:
            yield from _sampler_outcomes(sampler, args, choices + [v], deadline)
        return
    yield out, c.w


def stream_law(target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
               step: Callable[[tuple, list, list], Any]) -> dict:
    """Law of the first ``tokens`` tokens of a chain stream, by plain recursion over every branch.

    At each step every draft block is drawn from ``draft`` (claimed with its law), and
    ``step(drafts, claims, targets)`` yields each (emitted tokens, probability) of the sampler on it
    (``targets`` holds the target's laws at the ``gamma + 1`` positions); the next step starts from
    what was emitted.

    >>> import exactspec as es
    >>> p = es.models.context_free((Fraction(1, 2), Fraction(1, 2)))
    >>> stream_law(p, p, gamma=1, prompt=(), tokens=1, step=lambda d, c, t: [(d, Fraction(1))])
    {(0,): Fraction(1, 2), (1,): Fraction(1, 2)}
    """
    law: dict = {}

    def stream(ctx: tuple, emitted: tuple, w: Fraction) -> None:
        if len(emitted) >= tokens:
            k = emitted[:tokens]
            law[k] = law.get(k, 0) + w
            return
        for drafts in product(range(draft.vocab), repeat=gamma):
            wd, claims, c = Fraction(1), [], ctx
            for x in drafts:
                q = draft(c)
                wd *= Fraction(q[x])
                claims.append(q)
                c = c + (x,)
            if not wd:
                continue
            targets = [target(ctx + drafts[:j]) for j in range(gamma + 1)]
            for out, wo in step(drafts, claims, targets):
                stream(ctx + out, emitted + out, w * wd * wo)

    stream(tuple(prompt), (), Fraction(1))
    return law


def plain_sampler_law(sampler: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
                      seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` tokens of a numpy chain sampler, by recursion over every branch of the stream.

    Drafts are sampled from ``draft`` and claimed with its law; raises TimeoutError once ``seconds`` have passed.
    """
    deadline = None if seconds is None else time.perf_counter() + seconds

    def step(drafts: tuple, claims: list, targets: list) -> Any:
        args = (np.array(drafts, dtype=np.int64),
                np.array([[float(v) for v in row] for row in claims], dtype=np.float64).reshape(gamma, -1),
                np.array([[float(v) for v in row] for row in targets], dtype=np.float64))
        return _sampler_outcomes(sampler, args, [], deadline)
    return stream_law(target, draft, gamma=gamma, prompt=prompt, tokens=tokens, step=step)
