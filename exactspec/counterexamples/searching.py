"""Counterexample search: exhaustive small spaces, random rational points, hill climbing, shrinking.

>>> import exactspec as es
>>> found = es.counterexamples.search(es.rules.speculative_sampling, space=es.counterexamples.Space(
...     vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=2))
>>> bool(found), found.audited
(False, 51)
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import time
from dataclasses import replace
from fractions import Fraction
from typing import Any, Callable, Iterator

from .._audit import audit
from ..errors import ExactSpecError
from ..rules import Rule, as_rule
from .counterexample import Counterexample, EmptySearch
from .space import SearchInstance, Space, _denominator, default_space, random_law, simplex_grid

__all__ = ["search", "worst", "shrink", "evaluate"]


class _Clock:
    def __init__(self, seconds: float | None, instances: int | None, progress: Callable | None) -> None:
        self.start = time.perf_counter()
        self.deadline = None if seconds is None else self.start + seconds
        self.max_instances = instances
        self.audited = 0
        self.errors = 0
        self.progress = progress

    def spent(self) -> bool:
        if self.max_instances is not None and self.audited >= self.max_instances:
            return True
        return self.deadline is not None and time.perf_counter() > self.deadline

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def evaluate(rule: Rule, inst: SearchInstance) -> Any:
    """The exact audit report of ``rule`` on ``inst``, or None when the rule raised there.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> inst = es.counterexamples.SearchInstance(vocab=2, family="context_free", target=((F(3, 5), F(2, 5)),),
    ...                                          draft=((F(1, 2), F(1, 2)),), shape=(1,), tokens=1)
    >>> evaluate(es.rules.greedy_match_sampled, inst).tv
    Fraction(1, 5)
    """
    try:
        return audit(rule=rule, worst=0, **inst.audit_kwargs())
    except ExactSpecError as exc:
        if exc.exit_code == 3:  # budget: not the rule's fault, but not an answer either
            raise
        return None


def _tv(rule: Rule, inst: SearchInstance, clock: _Clock) -> Fraction:
    clock.audited += 1
    if clock.progress is not None and not clock.audited % 50:
        clock.progress(clock.audited, clock.elapsed())
    rep = evaluate(rule, inst)
    if rep is None:
        clock.errors += 1
        return Fraction(0)
    return rep.tv


def _cell_instances(space: Space, cell: tuple, rng: random.Random) -> Iterator[SearchInstance]:
    vocab, shape, tokens, family = cell
    n = space.n_laws(vocab, family)
    if family == "context_free":
        grid = simplex_grid(vocab, space.exhaustive_denominator)
        pairs = sorted(itertools.product(grid, grid), key=lambda pq: (max(_denominator(pq[0]), _denominator(pq[1])),
                                                                       pq))
        for p, q in pairs[: space.exhaustive_limit]:
            yield space.instance(vocab, shape, tokens, family, (p,), (q,))
    for _ in range(space.random_points):
        target = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        draft = tuple(random_law(rng, vocab, space.max_denominator) for _ in range(n))
        yield space.instance(vocab, shape, tokens, family, target, draft)


def _default_progress() -> Callable | None:
    if os.environ.get("CI") or not sys.stderr.isatty():
        return None

    def show(done: int, seconds: float) -> None:
        sys.stderr.write(f"\r  searching: {done} instances audited, {seconds:.1f} s")
        sys.stderr.flush()
    return show


def _rule_ref(rule: Rule) -> str:
    from ..rules import catalog
    if any(r is rule or r.name == rule.name for r in catalog()):
        return ""
    mod, qual = getattr(rule.fn, "__module__", ""), getattr(rule.fn, "__qualname__", "")
    if mod and mod != "__main__" and "<" not in qual:
        return f"{mod}.{qual}"
    return ""


def _counterexample(rule: Rule, inst: SearchInstance, space: Space, clock: _Clock, steps: int) -> Counterexample:
    rep = evaluate(rule, inst)
    return Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                          expected=dict(rep.expected), tv=rep.tv, space=space.describe(), audited=clock.audited,
                          seconds=clock.elapsed(), shrink_steps=steps, rule_ref=_rule_ref(rule))


def search(rule: Any, *, proposer: Any = None, space: Space | None = None, seed: int = 0,
           budget: float | None = None, max_instances: int | None = None,
           progress: Callable[[int, float], None] | bool | None = None) -> Counterexample | EmptySearch:
    """Look for the smallest instance on which ``rule``'s output law differs from the expected law.

    Cells of the space are visited in shrink order (vocab, drafts, tokens, family); in each,
    every context-free pair on the small-denominator grid is audited, then random rational
    instances. The first biased instance is shrunk (see :func:`shrink`) and returned as a
    :class:`Counterexample`; otherwise an :class:`EmptySearch` (falsy) records what was covered.
    Rules claiming ``lossless-greedy`` are compared with the greedy sequence. Deterministic for
    a given ``seed``; ``budget`` (seconds) and ``max_instances`` bound the work.

    >>> import exactspec as es
    >>> ce = search(es.rules.greedy_match_sampled)
    >>> ce.explanation
    'token 0 is emitted with probability 3/4 but the target gives 1/2 (exact TV 1/4)'
    >>> ce.instance.target, ce.instance.draft   # p = q = (1/2, 1/2): the tie goes to token 0, and so does the bias
    (((Fraction(1, 2), Fraction(1, 2)),), ((Fraction(1, 2), Fraction(1, 2)),))
    """
    rule = as_rule(rule)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"search|{seed}")
    clock = _Clock(budget, max_instances, _default_progress() if progress is None or progress is True
                   else (progress or None))
    try:
        for cell in space.cells():
            for inst in _cell_instances(space, cell, rng):
                if clock.spent():
                    return EmptySearch(rule.name, space.describe() + " (stopped early: budget spent)", clock.audited,
                                       clock.elapsed(), clock.errors)
                if _tv(rule, inst, clock) > 0:
                    small, steps = shrink(rule, inst, space=space, _clock=clock)
                    return _counterexample(rule, small, space, clock, steps)
        return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed(), clock.errors)
    finally:
        if clock.progress is not None and clock.audited >= 50:
            sys.stderr.write("\n")


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
    steps = 0

    def biased(cand: SearchInstance | None) -> bool:
        return cand is not None and cand.key() < inst.key() and _tv(rule, cand, clock) > 0

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
                if biased(cand):
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
          budget: float | None = 10.0, restarts: int = 4, steps: int = 60) -> Counterexample | EmptySearch:
    """The largest exact TV found in ``space``: random rational instances, then hill climbing on the TV.

    >>> import exactspec as es
    >>> w = worst(es.rules.greedy_match_sampled, es.counterexamples.Space(vocabs=(2,), shapes=((1,),), tokens=(1,),
    ...           families=("context_free",), random_points=5), steps=10, restarts=1)
    >>> w.tv   # TV = q(a) * (1 - p(a)) with a = argmax p: largest at q(a) = 1, p(a) = 1/2
    Fraction(1, 2)
    """
    rule = as_rule(rule)
    space = space or default_space(rule, proposer)
    rng = random.Random(f"worst|{seed}")
    clock = _Clock(budget, None, None)
    scored: list[tuple[Fraction, int, SearchInstance]] = []
    for cell in space.cells():
        for inst in _cell_instances(space.with_(exhaustive_limit=min(space.exhaustive_limit, 200)), cell, rng):
            if clock.spent():
                break
            scored.append((_tv(rule, inst, clock), len(scored), inst))
    if not scored:
        return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed(), clock.errors)
    scored.sort(key=lambda s: (-s[0], s[1]))
    best_tv, _, best = scored[0]
    for start_tv, _, start in scored[:restarts]:
        cur_tv, cur = start_tv, start
        for _ in range(steps):
            if clock.spent():
                break
            cand = _neighbours(cur, rng, max(space.max_denominator, cur.max_denominator()))
            tv = _tv(rule, cand, clock)
            if tv > cur_tv:
                cur_tv, cur = tv, cand
        if cur_tv > best_tv:
            best_tv, best = cur_tv, cur
    if best_tv == 0:
        return EmptySearch(rule.name, space.describe(), clock.audited, clock.elapsed(), clock.errors)
    return _counterexample(rule, best, space, clock, 0)


