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

from typing import Any, Callable

__all__ = ["chain_step_law"]

Accept = Callable[[Any, tuple, int], Any]
Reject = Callable[[Any, tuple, int], tuple]
Bonus = Callable[[Any, tuple], "tuple | None"]


def chain_step_law(laws: Any, horizon: int | None, accept: Accept, reject: Reject, bonus: Bonus, *,
                   lengths: bool = False) -> dict:
    """The law of one chain step's emitted tokens (cut at ``horizon``) from per-position pieces.

    With ``lengths=True`` it returns the law of (number of emitted tokens, number of accepted
    drafts) instead; the token emitted after a rejection or at the bonus is never expanded.

    ``accept(laws, prefix, x)``: probability of accepting draft ``x`` after accepted ``prefix``;
    ``reject(laws, prefix, x)``: law of the token emitted when ``x`` is rejected (identical
    objects are merged); ``bonus(laws, prefix)``: law of the bonus after all drafts, or None.
    """
    gamma = laws.gamma
    cap = gamma + 1 if horizon is None else horizon
    out: dict = {}
    get = out.get
    # an entry is (accepted prefix, next accepted draft or None, weight): siblings share their
    # parent's prefix tuple, built into the child's only when popped (memory: one tuple per level)
    stack: list = [((), None, laws.env.field.one)]
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
        groups: dict[int, list] = {}
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
