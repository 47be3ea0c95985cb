"""Closed-form step laws of chain rules: accepted prefixes and merged rejection mass, no rng.

A chain rule that accepts draft ``x`` at position ``j`` with probability ``accept(...)`` and
otherwise emits one token from a law ``reject(...)`` (then stops) has a step law computable
by walking the accepted prefixes only: the rejection mass of every draft sharing one rejection
law is merged before that law is expanded. Tests check each closed form against the rule's
rng form, branch for branch.

>>> import exactspec as es
>>> from exactspec.enumerate.env import Env
>>> from exactspec.fields import get_field
>>> env = Env(es.models.context_free(("3/5", "2/5")), es.models.context_free(("1/2", "1/2")), get_field(backend="python"))
>>> laws = es.drafts.chain(1).laws(env, ())
>>> sorted(es.rules.speculative_sampling.closed_form(laws, 1).items())
[((0,), Fraction(3, 5)), ((1,), Fraction(2, 5))]
"""

from __future__ import annotations

from typing import Any, Callable, cast

__all__ = ["chain_step_law"]

Accept = Callable[[Any, tuple[Any, ...], int], Any]
Reject = Callable[[Any, tuple[Any, ...], int], tuple[Any, ...]]
Bonus = Callable[[Any, tuple[Any, ...]], "tuple[Any, ...] | None"]
RowKey = Callable[[Any, tuple[Any, ...]], Any]


def chain_step_law(laws: Any, horizon: int | None, accept: Accept, reject: Reject, bonus: Bonus, *,
                   lengths: bool = False, row_key: RowKey | None = None) -> dict[Any, Any]:
    """The law of one chain step's emitted tokens (cut at ``horizon``) from per-position pieces.

    With ``lengths=True`` it returns the law of (number of emitted tokens, number of accepted
    drafts) instead; the token emitted after a rejection or at the bonus is never expanded.

    ``accept(laws, prefix, x)``: probability of accepting draft ``x`` after accepted ``prefix``;
    ``reject(laws, prefix, x)``: law of the token emitted when ``x`` is rejected (identical
    objects are merged); ``bonus(laws, prefix)``: law of the bonus after all drafts, or None.

    In an exact field (``env.fast``; inexact fields run without it) the pieces of one prefix are gathered once into a row (see :func:`_row`):
    the accepted drafts with their mass and the rejection mass of every token, merged. With
    ``row_key(laws, prefix)`` (a hashable naming everything ``accept`` and ``reject`` read at
    ``prefix``, e.g. :meth:`ChainLaws.row_key` when they read only the laws at ``prefix``) rows
    are memoised for the whole audit, so each model state's row is computed once.
    """
    if not getattr(laws.env, "fast", False) or (lengths and row_key is None):
        return _plain_step_law(laws, horizon, accept, reject, bonus, lengths)
    if lengths:
        return _lengths_law(laws, horizon, accept, reject, bonus, row_key)  # type: ignore[arg-type]
    gamma = laws.gamma
    cap = gamma + 1 if horizon is None else horizon
    out: dict[Any, Any] = {}
    get = out.get
    row = None if row_key is None else _rows(laws, accept, reject, row_key)
    stack: list[Any] = [((), None, laws.env.field.one)]
    push = stack.append
    while stack:
        prefix, x, w = stack.pop()
        if x is not None:
            prefix = prefix + (x,)
        j = len(prefix)
        if j == gamma:
            b = bonus(laws, prefix)
            if b is None:
                out[prefix] = get(prefix, 0) + w
            else:
                for y, py in enumerate(b):
                    if py:
                        k = prefix + (y,)
                        out[k] = get(k, 0) + w * py
            continue
        acc, rej, leaf, _ = _row(laws, prefix, accept, reject) if row is None else row(prefix)
        if j + 1 >= cap:                 # the next token is the last one kept: accepted or not, a leaf
            for t, m in leaf:
                k = prefix + (t,)
                out[k] = get(k, 0) + w * m
            continue
        for x, m in acc:
            push((prefix, x, w * m))
        for t, m in rej:
            k = prefix + (t,)
            out[k] = get(k, 0) + w * m
    return out


def _rows(laws: Any, accept: Accept, reject: Reject, row_key: RowKey) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The memoised row of a prefix (see :func:`_row`), by ``row_key``, for the whole audit."""
    rows = laws.env.cache.setdefault(("chain rows", accept, reject), {})

    def row(prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        rk = row_key(laws, prefix)
        hit = rows.get(rk)
        if hit is None:
            hit = rows[rk] = _row(laws, prefix, accept, reject)
        return cast("tuple[Any, ...]", hit)
    return row


def _lengths_law(laws: Any, horizon: int | None, accept: Accept, reject: Reject, bonus: Bonus,
                 row_key: RowKey) -> dict[Any, Any]:
    """``chain_step_law(lengths=True)`` one position at a time, prefixes with the same model state merged.

    The law of (tokens emitted, drafts accepted) does not say which tokens: two accepted prefixes
    after which every model reads the same context suffix have the same future (``row_key`` says the
    rule reads only the laws at the prefix), so their masses are added before the next position.
    """
    gamma = laws.gamma
    cap = gamma + 1 if horizon is None else horizon
    out: dict[Any, Any] = {}
    get = out.get
    row = _rows(laws, accept, reject, row_key)
    state = laws.state
    level: dict[Any, Any] = {state(()): [(), laws.env.field.one]}
    for j in range(gamma):
        nxt: dict[Any, Any] = {}
        for prefix, w in level.values():
            acc, _, _, rejected = row(prefix)
            if rejected is not None:
                out[(j + 1, j)] = get((j + 1, j), 0) + w * rejected
            for x, m in acc:
                if j + 1 >= cap:
                    out[(j + 1, j + 1)] = get((j + 1, j + 1), 0) + w * m
                    continue
                p2 = prefix + (x,)
                sk = state(p2)
                e = nxt.get(sk)
                if e is None:
                    nxt[sk] = [p2, w * m]
                else:
                    e[1] += w * m
        level = nxt
    for prefix, w in level.values():
        k = (gamma, gamma) if bonus(laws, prefix) is None else (gamma + 1, gamma)
        out[k] = get(k, 0) + w
    return out


def _row(laws: Any, prefix: tuple[Any, ...], accept: Accept, reject: Reject) -> tuple[list[Any], list[Any], list[Any], Any]:
    """The pieces of one prefix: (accepted drafts ``(x, P(draw x) * P(accept x))``, rejection mass by emitted
    token, both merged by token), each mass exact; rejection laws shared by several drafts are weighed once."""
    acc: list[Any] = []
    groups: dict[int, list[Any]] = {}
    for x, sx in enumerate(laws.sampling(prefix)):
        if not sx:
            continue
        a = accept(laws, prefix, x)
        if a:
            acc.append((x, sx if a == 1 else sx * a))
        if a != 1:
            rl = reject(laws, prefix, x)
            g = groups.get(id(rl))
            m = sx if not a else sx * (1 - a)
            if g is None:
                groups[id(rl)] = [rl, m]
            else:
                g[1] += m
    rej: dict[Any, Any] = {}
    for rl, m in groups.values():
        for y, py in enumerate(rl):
            if py:
                rej[y] = rej[y] + m * py if y in rej else m * py
    both = dict(acc)
    for y, m in rej.items():
        both[y] = both[y] + m if y in both else m
    rejected = None
    if groups:
        rejected = sum(m for _, m in groups.values())
    return acc, list(rej.items()), list(both.items()), rejected


def _plain_step_law(laws: Any, horizon: int | None, accept: Accept, reject: Reject, bonus: Bonus,
                    lengths: bool) -> dict[Any, Any]:
    """:func:`chain_step_law` one prefix at a time, summing in the order the earlier engine did (inexact fields
    keep their rounding; the efficiency's lengths)."""
    gamma = laws.gamma
    cap = gamma + 1 if horizon is None else horizon
    out: dict[Any, Any] = {}
    get = out.get
    # an entry is (accepted prefix, next accepted draft or None, weight): siblings share their
    # parent's prefix tuple, built into the child's only when popped (memory: one tuple per level)
    stack: list[Any] = [((), None, laws.env.field.one)]
    while stack:
        prefix, x, w = stack.pop()
        if x is not None:
            prefix = prefix + (x,)
        j = len(prefix)
        if j == gamma:
            b = bonus(laws, prefix)
            if b is None:
                k = (j, j) if lengths else prefix
                out[k] = get(k, 0) + w
            elif lengths:
                out[(j + 1, j)] = get((j + 1, j), 0) + w
            else:
                for y, py in enumerate(b):
                    if py:
                        k = prefix + (y,)
                        out[k] = get(k, 0) + w * py
            continue
        groups: dict[int, list[Any]] = {}
        for x, sx in enumerate(laws.sampling(prefix)):
            if not sx:
                continue
            a = accept(laws, prefix, x)
            if a:
                wa = w * sx if a == 1 else w * sx * a
                if j + 1 >= cap:
                    k = (j + 1, j + 1) if lengths else prefix + (x,)
                    out[k] = get(k, 0) + wa
                else:
                    stack.append((prefix, x, wa))
            if a != 1:
                rl = reject(laws, prefix, x)
                g = groups.get(id(rl))
                m = sx if not a else sx * (1 - a)
                if g is None:
                    groups[id(rl)] = [rl, m]
                else:
                    g[1] += m
        if lengths:
            if groups:
                mass = sum(m for _, m in groups.values())
                out[(j + 1, j)] = get((j + 1, j), 0) + w * mass
            continue
        for rl, m in groups.values():
            wm = w * m
            for y, py in enumerate(rl):
                if py:
                    k = prefix + (y,)
                    out[k] = get(k, 0) + wm * py
    return out
