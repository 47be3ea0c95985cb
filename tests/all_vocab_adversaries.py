"""Adversarial chain rules for ``es.prove(rule, vocab="all")``: Python that the vocabulary abstraction may get wrong.

``vocab="all"`` proves a rule for every vocabulary size at once: a few *named* tokens plus *classes* of
exchangeable unnamed tokens (any number of them, possibly none), each class standing for every token whose
probabilities have the same signs on a few predicates. A rule that quantifies over the vocabulary (``all``,
``any``, ``min``, ``sorted``, a ``for`` loop with ``break``), counts tokens (``len``, ``n += 1``, ``Counter``,
``set``), treats token ids asymmetrically (``x == 0``, ``x + 1``, ``if x:``, ``p[-1]``, a dict keyed by
tokens) or reaches for the rest of Python (numpy, ``functools.reduce``, ``hash``, ``str``, recursion,
exceptions) may see a class where concretely there are zero, one or many tokens, and be "proven" where it is
biased. Each rule here is meant to break that abstraction; most are biased only on some instances (only when
a class of tokens is empty, only at vocab >= 3, only when a count reaches a threshold, only when a given token
id is drafted), and a good share are truly lossless but written in the same unusual styles, so that a prover
that refuses or loses everything is noticed too.

Every record's ground truth (``truth``) is derived by hand (``why``); for biased rules ``witness`` is an
instance with the exact total variation derived by hand, and ``clean_when`` a hand-derived *sufficient*
condition on an instance for the rule to be exact there. ``tests/test_all_vocab_adversaries.py`` confirms all
of it with exact audits (``es.audit``, rational arithmetic) at vocab 2..6. Nothing here runs the prover;
``rule(adv)`` wraps a record for ``es.prove``, at the ``(gamma, tokens)`` pairs in ``adv.settings``.

Notation in the ``why`` lines: ``E`` is the set of tokens with ``p > q``, ``beta = sum (p - q)+`` the
rejection mass of speculative sampling (SS), ``min = min(p, q)`` entrywise. With context-free models a rule
that is exact at every position of a step (the emitted token has law ``p`` whatever happened before) is
lossless for every gamma and horizon, so each derivation is done for one position at gamma 1, 1 token.
"""

from __future__ import annotations

import collections
import functools
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction as F
from typing import Any

import exactspec as es
from exactspec.laws import normalize, point_mass, residual

Law = Sequence[Any]
#: ``clean_when(p, q, gamma, tokens)``: True where the hand derivation says the rule is exact
Clean = Callable[[Law, Law, int, int], bool]

#: the (gamma, tokens) pairs the audits cover, and the default ones to prove at
ALL_SETTINGS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 2))


@dataclass(frozen=True)
class Witness:
    """An instance (context-free target ``p``, draft ``q``) where a biased rule shows; ``tv`` derived by hand."""

    p: tuple[F, ...]
    q: tuple[F, ...]
    gamma: int = 1
    tokens: int = 1
    tv: F | None = None


@dataclass(frozen=True)
class Adversary:
    """One adversarial rule and its hand-derived ground truth.

    ``truth``: ``"lossless"``, ``"biased"`` or ``"error"`` (the exact engine refuses it: ``error`` is the
    ``es.ExactSpecError`` subclass it raises). ``settings``: the (gamma, tokens) pairs at which the truth
    shows (a biased rule has TV > 0 at its witness's laws at each of them). ``clean_when``: a sufficient
    condition, derived by hand, for a biased rule to be exact on an instance.
    """

    name: str
    fn: Callable[..., Iterator[int]]
    truth: str
    why: str
    hole: str
    settings: tuple[tuple[int, int], ...] = ALL_SETTINGS
    witness: Witness | None = None
    clean_when: Clean | None = None
    error: type[es.ExactSpecError] | None = None


def rule(adv: Adversary) -> es.rules.Rule:
    """The record as a rule claimed lossless, ready for ``es.prove`` (or ``es.audit``)."""
    return es.rules.Rule(adv.fn, name=adv.name, claim="lossless")


# -- shared pieces ------------------------------------------------------------------------------------------
def _law(text: str) -> tuple[F, ...]:
    return tuple(F(x) for x in text.split())


def _w(p: str, q: str, tv: str | None, gamma: int = 1, tokens: int = 1) -> Witness:
    return Witness(_law(p), _law(q), gamma, tokens, None if tv is None else F(tv))


def _ratio(p: Law, q: Law, x: int) -> Any:
    """``min(1, p(x)/q(x))``; a draft its claimed law gives no mass is accepted iff ``p(x) > 0``."""
    if not q[x]:
        return 1 if p[x] else 0
    r = p[x] / q[x]
    return r if r < 1 else 1


def _sample_residual(rng: Any, p: Law, q: Law, x: int) -> int:
    return rng.categorical(residual(p, q))


def _chain(step: Any, rng: Any, *, skip: Callable[[Law, Law, int], bool] | None = None,
           accept: Callable[[Law, Law, int], Any] = _ratio,
           reject: Callable[[Any, Law, Law, int], int] = _sample_residual,
           bonus: Callable[[Any, Law], int] | None = None) -> Iterator[int]:
    """Speculative sampling with hooks: ``skip`` accepts a draft without its test, ``accept`` gives the
    acceptance probability, ``reject`` the token emitted at a rejection, ``bonus`` the bonus token."""
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if (skip is not None and skip(p, q, x)) or rng.bernoulli(accept(p, q, x)):
            yield step.accept(j)
        else:
            yield reject(rng, p, q, x)
            return
    last = step.target(step.gamma)
    yield rng.categorical(last) if bonus is None else bonus(rng, last)


def _shortcut_when(step: Any, rng: Any, flat: Callable[[Law], bool]) -> Iterator[int]:
    """Where ``flat(q)``: keep the draft with probability ``p(x)``, else sample ``p``; elsewhere SS."""
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if flat(q):
            if rng.bernoulli(p[x]):
                yield step.accept(j)
                continue
            yield rng.categorical(p)
            return
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def _excess(p: Law, q: Law) -> list[int]:
    """The tokens with ``p > q`` (the residual's support)."""
    return [t for t in range(len(p)) if p[t] > q[t]]


def _same(p: Law, q: Law) -> bool:
    return tuple(p) == tuple(q)


# == 1. quantifiers over the vocabulary, without drawing ====================================================
def any_3p_below_q(step, rng):
    """The accept test only runs when some token has 3 p < q; otherwise every draft is kept."""
    yield from _chain(step, rng, skip=lambda p, q, x: not any(3 * a < b for a, b in zip(p, q)))


def all_p_positive_resample(step, rng):
    """A rejection samples p (not the residual) when p has full support."""
    def reject(rng, p, q, x):
        return rng.categorical(p) if all(a > 0 for a in p) else rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def any_tie_or_resample(step, rng):
    """A rejection samples p unless some token (zeros included) has p == q."""
    def reject(rng, p, q, x):
        return rng.categorical(residual(p, q)) if any(a == b for a, b in zip(p, q)) else rng.categorical(p)
    yield from _chain(step, rng, reject=reject)


def for_break_else_emit_draft(step, rng):
    """A rejection emits the draft itself when the for loop finds no token with p == q > 0 (for/else)."""
    def reject(rng, p, q, x):
        for a, b in zip(p, q):
            if a == b and a > 0:
                break
        else:
            return x
        return rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def min_q_zero_skip(step, rng):
    """Drafts are kept without a test when the draft law has a zero (min(q) == 0)."""
    yield from _chain(step, rng, skip=lambda p, q, x: min(q) == 0)


def max_eq_min_skip(step, rng):
    """Drafts are kept without a test when the target is uniform (max(p) == min(p))."""
    yield from _chain(step, rng, skip=lambda p, q, x: max(p) == min(p))


def sorted_second_zero_skip(step, rng):
    """Drafts are kept without a test when sorted(p)[1] == 0: two zeros in p, impossible at vocab 2."""
    yield from _chain(step, rng, skip=lambda p, q, x: sorted(p)[1] == 0)


def all_q_within_3p_overaccept(step, rng):
    """When every token has q <= 3 p the test is relaxed to min(1, 2 p/q)."""
    def accept(p, q, x):
        if all(b <= 3 * a for a, b in zip(p, q)):
            r = 2 * p[x] / q[x]
            return r if r < 1 else 1
        return _ratio(p, q, x)
    yield from _chain(step, rng, accept=accept)


# == 2. counting tokens ======================================================================================
def support_ge3_resample(step, rng):
    """A rejection samples p when 3 or more tokens have p > 0 (counted with a generator sum)."""
    def reject(rng, p, q, x):
        n = sum(1 for a in p if a > 0)
        return rng.categorical(p) if n >= 3 else rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def len_excess_ge2_emit0(step, rng):
    """A rejection emits token 0 when len([...]) says two or more tokens have p > q."""
    def reject(rng, p, q, x):
        k = len([a for a, b in zip(p, q) if a > b])
        return 0 if k >= 2 else rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def loop_count_zeros_skip(step, rng):
    """Drafts are kept without a test when a counting loop (n += 1) finds two or more zeros in p."""
    def skip(p, q, x):
        n = 0
        for a in p:
            if a == 0:
                n += 1
        return n >= 2
    yield from _chain(step, rng, skip=skip)


def enumerate_uniform_over_excess(step, rng):
    """A rejection emits the only token with p > q, or one of them uniformly (enumerate indices as tokens)."""
    def reject(rng, p, q, x):
        idx = [i for i, (a, b) in enumerate(zip(p, q)) if a > b]
        if len(idx) == 1:
            return idx[0]
        return rng.categorical([F(1, len(idx)) if i in idx else 0 for i in range(len(p))])
    yield from _chain(step, rng, reject=reject)


def dict_zip_collapse_skip(step, rng):
    """dict(zip(p, q)) drops the q of tied p entries; drafts are kept without a test when its values miss mass."""
    yield from _chain(step, rng, skip=lambda p, q, x: sum(dict(zip(p, q)).values()) != 1)


def counter_thrice_emit0(step, rng):
    """A rejection emits token 0 when some probability value occurs 3 or more times in p (Counter)."""
    def reject(rng, p, q, x):
        if collections.Counter(p).most_common(1)[0][1] >= 3:
            return 0
        return rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def set_q_two_values_shortcut(step, rng):
    """len(set(q)) <= 2: keep the draft w.p. p(x), else sample p (exact only when q is flat on p's support)."""
    yield from _shortcut_when(step, rng, lambda q: len(set(q)) <= 2)


def q_support_ge3_skip(step, rng):
    """Drafts are kept without a test when 3 or more tokens have q > 0 (a sum of bools)."""
    yield from _chain(step, rng, skip=lambda p, q, x: sum(b > 0 for b in q) >= 3)


def ties_ge2_skip(step, rng):
    """Drafts are kept without a test when 2 or more tokens have p == q (needs vocab >= 4 to matter)."""
    yield from _chain(step, rng, skip=lambda p, q, x: sum(1 for a, b in zip(p, q) if a == b) >= 2)


# == 3. token ids that are not symmetric =====================================================================
def eos_zero_unverified(step, rng):
    """Token 0 (EOS-like) is kept without a test."""
    yield from _chain(step, rng, skip=lambda p, q, x: x == 0)


def next_token_on_reject(step, rng):
    """A rejection emits the next token id, (x + 1) mod vocab."""
    yield from _chain(step, rng, reject=lambda rng, p, q, x: (x + 1) % step.vocab)


def odd_unverified(step, rng):
    """Odd token ids are kept without a test (x % 2)."""
    yield from _chain(step, rng, skip=lambda p, q, x: x % 2 == 1)


def zero_falsy_or_draft(step, rng):
    """A rejection emits ``y or x``: a residual draw of token 0 is falsy and becomes the draft."""
    def reject(rng, p, q, x):
        y = rng.categorical(residual(p, q))
        return y or x
    yield from _chain(step, rng, reject=reject)


def first_excess_index(step, rng):
    """A rejection emits the first enumerate index with p > q."""
    def reject(rng, p, q, x):
        for i, (a, b) in enumerate(zip(p, q)):
            if a > b:
                return i
        raise AssertionError("a rejection needs a token with p > q")
    yield from _chain(step, rng, reject=reject)


def last_excess_shortcut(step, rng):
    """A rejection emits the last token when p[-1] > q[-1]."""
    def reject(rng, p, q, x):
        return len(p) - 1 if p[-1] > q[-1] else rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def p0_zero_skip(step, rng):
    """Drafts are kept without a test when p[0] == 0."""
    yield from _chain(step, rng, skip=lambda p, q, x: p[0] == 0)


def constant_bonus(step, rng):
    """The bonus emits the constant token 0 when p[0] > 1/2 (a greedy shortcut)."""
    def bonus(rng, p):
        return 0 if p[0] > F(1, 2) else rng.categorical(p)
    yield from _chain(step, rng, bonus=bonus)


def later_draft_above_unverified(step, rng):
    """A draft whose id is above the previous draft's (x_j > x_{j-1}) is kept without a test."""
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if (j >= 1 and x > step.draft(j - 1)) or rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def next_iter_excess_set(step, rng):
    """A rejection emits next(iter(...)) of the set of tokens with p > q (small ints: the smallest)."""
    def reject(rng, p, q, x):
        cands = {i for i in range(len(p)) if p[i] > q[i]}
        return next(iter(cands))
    yield from _chain(step, rng, reject=reject)


def seen_token_dict_unverified(step, rng):
    """A dict keyed by tokens remembers accepted drafts; a repeated draft in the step is kept without a test."""
    verified: dict[int, bool] = {}
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if verified.get(x) or rng.bernoulli(_ratio(p, q, x)):
            verified[x] = True
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def min_of_two_target_draws(step, rng):
    """Two target draws y, z; emits the smaller id (an order comparison between drawn tokens)."""
    p = step.target(0)
    y, z = rng.categorical(p), rng.categorical(p)
    yield y if y <= z else z


def draws_agree_else_fresh(step, rng):
    """Two target draws; emits y if they agree, else a fresh third draw."""
    p = step.target(0)
    y, z = rng.categorical(p), rng.categorical(p)
    yield y if y == z else rng.categorical(p)


# == 4. the rest of Python ===================================================================================
def zip_tail_residual(step, rng):
    """The residual is built from zip(p[1:], q[1:]) (token 0 forgotten); no mass left there: emit token 0."""
    def reject(rng, p, q, x):
        tail = [a - b if a > b else 0 for a, b in zip(p[1:], q[1:])]
        if sum(tail) == 0:
            return 0
        return 1 + rng.categorical(normalize(tail))
    yield from _chain(step, rng, reject=reject)


def numpy_abs_residual(step, rng):
    """The residual is norm(|p - q|) computed with numpy object arrays (should be the positive part)."""
    import numpy as np

    def reject(rng, p, q, x):
        d = np.abs(np.array(p) - np.array(q))
        return rng.categorical(tuple(d / d.sum()))
    yield from _chain(step, rng, reject=reject)


def reduce_product_zero_skip(step, rng):
    """Drafts are kept without a test when functools.reduce(mul, p) == 0 (p has a zero)."""
    yield from _chain(step, rng, skip=lambda p, q, x: functools.reduce(operator.mul, p) == 0)


def uniform_on_reject_vocab4(step, rng):
    """From vocab 4 on (len(p)), a rejection draws from a hand-built uniform law over the vocabulary."""
    def reject(rng, p, q, x):
        if len(p) >= 4:
            return rng.categorical([F(1, len(p))] * len(p))
        return rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def vocab_ge5_skip(step, rng):
    """From step.vocab 5 on, drafts are kept without a test."""
    yield from _chain(step, rng, skip=lambda p, q, x: step.vocab >= 5)


def point_mass_argmax_residual(step, rng):
    """A rejection draws from a hand-built point mass on the residual's argmax (lowest id on ties)."""
    def reject(rng, p, q, x):
        return rng.categorical(point_mass(len(p), es.laws.argmax(residual(p, q)), F(1), F(0)))
    yield from _chain(step, rng, reject=reject)


def index_of_max_unverified(step, rng):
    """The draft equal to p.index(max(p)) (the target's mode) is kept without a test."""
    yield from _chain(step, rng, skip=lambda p, q, x: x == p.index(max(p)))


def count_tied_draft_unverified(step, rng):
    """A draft whose target probability is shared with another token (list(p).count) is kept without a test."""
    yield from _chain(step, rng, skip=lambda p, q, x: list(p).count(p[x]) > 1)


def reversed_last_excess(step, rng):
    """A rejection emits the last token with p > q, searched with reversed(range(len(p)))."""
    def reject(rng, p, q, x):
        return next(i for i in reversed(range(len(p))) if p[i] > q[i])
    yield from _chain(step, rng, reject=reject)


def reversed_q_skip(step, rng):
    """Drafts are kept without a test when tuple(p) == tuple(q)[::-1]."""
    yield from _chain(step, rng, skip=lambda p, q, x: tuple(p) == tuple(q)[::-1])


def hash_ties_skip(step, rng):
    """Drafts are kept without a test when two entries of p hash alike (ties in p)."""
    yield from _chain(step, rng, skip=lambda p, q, x: len({hash(a) for a in p}) < len(p))


def str_one_unverified(step, rng):
    """Drafts whose str() starts with "1" (token 1 at vocab <= 10) are kept without a test."""
    yield from _chain(step, rng, skip=lambda p, q, x: str(x).startswith("1"))


def recursive_skip_rejected(step, rng):
    """Recursion: a rejected draft emits nothing and verification goes on at the next position."""
    def verify(j: int) -> Iterator[int]:
        if j == step.gamma:
            yield rng.categorical(step.target(j))
            return
        x = step.draft(j)
        if rng.bernoulli(_ratio(step.target(j), step.claimed(j), x)):
            yield step.accept(j)
        yield from verify(j + 1)
    yield from verify(0)


def zero_division_accepts(step, rng):
    """The ratio is 1 / (q/p); the ZeroDivisionError at p(x) == 0 is caught as "accept"."""
    def accept(p, q, x):
        try:
            r = 1 / (q[x] / p[x])
        except ZeroDivisionError:
            return 1
        return r if r < 1 else 1
    yield from _chain(step, rng, accept=accept)


def bernoulli_loop_unnormalised(step, rng):
    """A rejection walks the residual with rng.bernoulli(w) per token (no w / remaining), the last token
    taking what falls through."""
    def reject(rng, p, q, x):
        r = residual(p, q)
        for y, w in enumerate(r):
            if rng.bernoulli(w):
                return y
        return len(r) - 1
    yield from _chain(step, rng, reject=reject)


# == errors: floats reach the exact engine ===================================================================
def float_ratio(step, rng):
    """The acceptance probability is computed in floats."""
    yield from _chain(step, rng, accept=lambda p, q, x: min(1.0, float(p[x]) / float(q[x])))


def numpy_float_residual(step, rng):
    """A rejection draws from a float64 numpy residual."""
    import numpy as np

    def reject(rng, p, q, x):
        d = np.maximum(np.array(p, dtype=float) - np.array(q, dtype=float), 0.0)
        return rng.categorical(d / d.sum())
    yield from _chain(step, rng, reject=reject)


# == lossless rules in the same unusual styles ===============================================================
def ss_comprehension_normalize(step, rng):
    """SS with the residual written as a comprehension and normalised with es.laws.normalize."""
    def reject(rng, p, q, x):
        return rng.categorical(normalize([a - b if a > b else 0 for a, b in zip(p, q)]))
    yield from _chain(step, rng, reject=reject)


def ss_dead_loops(step, rng):
    """SS after loops, counts, max and sorted whose results never change what is emitted."""
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        zeros = 0
        for a in p:
            if a == 0:
                zeros += 1
        top, order = max(p), sorted(range(len(p)), key=lambda t: p[t])
        del top, order
        r = _ratio(p, q, x)
        if zeros >= 2:      # both arms are the same test
            ok = rng.bernoulli(r)
        else:
            ok = rng.bernoulli(r)
        if ok:
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def sample_and_match_eq(step, rng):
    """sample_and_match: the target draws y; keep the draft while x == y, else emit y."""
    for j in range(step.gamma):
        x = step.draft(j)
        y = rng.categorical(step.target(j))
        if x == y:
            yield step.accept(j)
        else:
            yield y
            return
    yield rng.categorical(step.target(step.gamma))


def draws_agree(step, rng):
    """Two target draws compared for equality; either way the second is emitted."""
    p = step.target(0)
    y, z = rng.categorical(p), rng.categorical(p)
    yield y if y == z else z


def ss_recursive(step, rng):
    """SS written as a recursion over positions."""
    def verify(j: int) -> Iterator[int]:
        if j == step.gamma:
            yield rng.categorical(step.target(j))
            return
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
            yield from verify(j + 1)
        else:
            yield rng.categorical(residual(p, q))
    yield from verify(0)


def ss_try_tie(step, rng):
    """SS; a ZeroDivisionError on 1 / (p(x) - q(x)) (a tie, ratio 1) keeps the draft."""
    def skip(p, q, x):
        try:
            1 / (p[x] - q[x])
        except ZeroDivisionError:
            return True
        return False
    yield from _chain(step, rng, skip=skip)


def whole_law_equal_skip(step, rng):
    """Drafts are kept without a test when p == q (whole laws compared)."""
    yield from _chain(step, rng, skip=lambda p, q, x: p == q)


def isinstance_guard(step, rng):
    """SS behind isinstance checks that always hold in exact runs (else: keep the draft, never taken)."""
    def skip(p, q, x):
        return not (isinstance(x, int) and isinstance(p[x], numbers.Rational))
    yield from _chain(step, rng, skip=skip)


def ss_reduce(step, rng):
    """SS with the residual normalised by functools.reduce(add, ...)."""
    def reject(rng, p, q, x):
        r = [a - b if a > b else 0 for a, b in zip(p, q)]
        z = functools.reduce(operator.add, r, 0)
        return rng.categorical([w / z for w in r])
    yield from _chain(step, rng, reject=reject)


def ss_numpy(step, rng):
    """SS with a numpy object-array residual, normalised by sum|p - q| / 2 (= the residual's mass)."""
    import numpy as np

    def reject(rng, p, q, x):
        P, Q = np.array(p, dtype=object), np.array(q, dtype=object)
        r = np.maximum(P - Q, 0)
        return rng.categorical(tuple(r / (np.abs(P - Q).sum() / 2)))
    yield from _chain(step, rng, reject=reject)


def ss_bernoulli_chain(step, rng):
    """SS whose residual is drawn by a chain of rng.bernoulli(w / remaining) over the entries."""
    def reject(rng, p, q, x):
        rem = F(1)
        for y, w in enumerate(residual(p, q)):
            if w and rng.bernoulli(w / rem):
                return y
            rem -= w
        raise AssertionError("the last token with residual mass is drawn with probability 1")
    yield from _chain(step, rng, reject=reject)


def set_single_excess(step, rng):
    """SS; when the set of tokens with p > q has one element, it is popped instead of drawn."""
    def reject(rng, p, q, x):
        cands = {t for t, (a, b) in enumerate(zip(p, q)) if a > b}
        return cands.pop() if len(cands) == 1 else rng.categorical(residual(p, q))
    yield from _chain(step, rng, reject=reject)


def const_token_point_residual(step, rng):
    """SS; the constant token 0 is emitted when the residual is the point mass on 0."""
    def reject(rng, p, q, x):
        r = residual(p, q)
        return 0 if r[0] == 1 else rng.categorical(r)
    yield from _chain(step, rng, reject=reject)


def fsum_guard(step, rng):
    """SS behind a math.fsum sanity check (floats, never reaching a draw) that always passes."""
    def skip(p, q, x):
        return abs(math.fsum(p) - 1.0) > 1e-9 or abs(math.fsum(q) - 1.0) > 1e-9
    yield from _chain(step, rng, skip=skip)


def ss_reversed(step, rng):
    """SS whose residual is built on reversed(p), reversed(q) and turned back."""
    def reject(rng, p, q, x):
        r = [max(a - b, 0) for a, b in zip(reversed(p), reversed(q))]
        r.reverse()
        return rng.categorical(normalize(r))
    yield from _chain(step, rng, reject=reject)


def ss_uniform_accept(step, rng):
    """SS with the test written on a uniform: keep x iff u * q(x) < p(x)."""
    def accept_by_uniform(p, q, x):
        return rng.uniform() * q[x] < p[x]
    yield from _chain(step, rng, skip=accept_by_uniform, accept=lambda p, q, x: 0)


def half_accept(step, rng):
    """Keep x w.p. min(1, p/q) / 2; a rejection draws norm(p - min(p, q) / 2) (exact: the mixture is p)."""
    def reject(rng, p, q, x):
        return rng.categorical(normalize([a - min(a, b) / 2 for a, b in zip(p, q)]))
    yield from _chain(step, rng, accept=lambda p, q, x: F(1, 2) * _ratio(p, q, x), reject=reject)


def dict_ratio_table(step, rng):
    """SS with the acceptance ratios tabulated in a dict keyed by token (enumerate), looked up by the draft."""
    def accept(p, q, x):
        table = {t: (a / b if a < b else 1) for t, (a, b) in enumerate(zip(p, q)) if b}
        return table[x]
    yield from _chain(step, rng, accept=accept)


def set_q_uniform_shortcut(step, rng):
    """len(set(q)) == 1 (q uniform): keep x w.p. p(x), else sample p; otherwise SS."""
    yield from _shortcut_when(step, rng, lambda q: len(set(q)) == 1)


def generator_ratio(step, rng):
    """SS with p(x)/q(x) found by next() over a generator of (index, entries)."""
    def accept(p, q, x):
        r = next(a / b for t, (a, b) in enumerate(zip(p, q)) if t == x)
        return r if r < 1 else 1
    yield from _chain(step, rng, accept=accept)


def uniform_proposal_mix(step, rng):
    """Ignores the drafts: y from a hand-built uniform law over step.vocab, kept w.p. p(y), else a draw of p."""
    p = step.target(0)
    y = rng.categorical([F(1, step.vocab)] * step.vocab)
    yield y if rng.bernoulli(p[y]) else rng.categorical(p)


# == the records =============================================================================================
def _q_le_p(p: Law, q: Law, tokens: Any) -> bool:
    return all(q[t] <= p[t] for t in tokens)


def _first_pos_only(p: Law, q: Law, gamma: int, tokens: int) -> bool:
    return gamma == 1 or tokens == 1 or _same(p, q)


_SS_ALT = "per position the emitted token has law p (same accept and residual as SS), so lossless"
B, L, E = "biased", "lossless", "error"

ADVERSARIES: list[Adversary] = [
    # -- 1. quantifiers --
    Adversary("any_3p_below_q", any_3p_below_q, B, "no token with 3p < q: every draft kept, output q; "
              "p=(1/2,1/2), q=(1/3,2/3): TV(p, q) = 1/6", "quantifier",
              witness=_w("1/2 1/2", "1/3 2/3", "1/6"),
              clean_when=lambda p, q, g, t: any(3 * a < b for a, b in zip(p, q)) or _same(p, q)),
    Adversary("all_p_positive_resample", all_p_positive_resample, B, "full-support p: output min + beta p; "
              "p=(1/2,1/2), q=(1/3,2/3): (5/12,7/12), TV 1/12 (exact when some p is 0: class possibly empty)",
              "quantifier", witness=_w("1/2 1/2", "1/3 2/3", "1/12"),
              clean_when=lambda p, q, g, t: not all(a > 0 for a in p) or _same(p, q)),
    Adversary("any_tie_or_resample", any_tie_or_resample, B, "no token with p == q: output min + beta p; "
              "p=(1/3,1/3,1/3), q=(1/2,1/4,1/4): (7/18,11/36,11/36), TV 1/18", "quantifier",
              witness=_w("1/3 1/3 1/3", "1/2 1/4 1/4", "1/18"),
              clean_when=lambda p, q, g, t: any(a == b for a, b in zip(p, q)) or _same(p, q)),
    Adversary("for_break_else_emit_draft", for_break_else_emit_draft, B, "no positive tie: a rejection emits "
              "x, so the output is q; p=(1/2,1/2), q=(1/3,2/3): TV 1/6", "quantifier",
              witness=_w("1/2 1/2", "1/3 2/3", "1/6"),
              clean_when=lambda p, q, g, t: any(a == b > 0 for a, b in zip(p, q)) or _same(p, q)),
    Adversary("min_q_zero_skip", min_q_zero_skip, B, "q has a zero: every draft kept, output q; "
              "p=(1/2,1/2), q=(1,0): TV 1/2", "quantifier", witness=_w("1/2 1/2", "1 0", "1/2"),
              clean_when=lambda p, q, g, t: min(q) > 0 or _same(p, q)),
    Adversary("max_eq_min_skip", max_eq_min_skip, B, "uniform p: output q; p=(1/3,1/3,1/3), q=(1/2,1/4,1/4): "
              "TV 1/6", "quantifier", witness=_w("1/3 1/3 1/3", "1/2 1/4 1/4", "1/6"),
              clean_when=lambda p, q, g, t: max(p) != min(p) or _same(p, q)),
    Adversary("sorted_second_zero_skip", sorted_second_zero_skip, B, "sorted(p)[1] == 0 needs two zeros "
              "(vocab >= 3): output q; p=(1,0,0), q=(1/3,1/3,1/3): TV 2/3", "quantifier",
              witness=_w("1 0 0", "1/3 1/3 1/3", "2/3"),
              clean_when=lambda p, q, g, t: sorted(p)[1] > 0 or _same(p, q)),
    Adversary("all_q_within_3p_overaccept", all_q_within_3p_overaccept, B, "q <= 3p everywhere: accept "
              "min(1, 2p/q); p=(1/2,1/4,1/4), q=(1/4,1/4,1/2): all kept, output q, TV 1/4", "quantifier",
              witness=_w("1/2 1/4 1/4", "1/4 1/4 1/2", "1/4"),
              clean_when=lambda p, q, g, t: any(b > 3 * a for a, b in zip(p, q)) or _same(p, q)),
    # -- 2. counting --
    Adversary("support_ge3_resample", support_ge3_resample, B, "support >= 3: output min + beta p; "
              "p=(1/3,1/3,1/3), q=(1/2,1/4,1/4): TV 1/18", "counting",
              witness=_w("1/3 1/3 1/3", "1/2 1/4 1/4", "1/18"),
              clean_when=lambda p, q, g, t: sum(1 for a in p if a > 0) < 3 or _same(p, q)),
    Adversary("len_excess_ge2_emit0", len_excess_ge2_emit0, B, "|E| >= 2: a rejection emits 0; "
              "p=(1/3,1/3,1/3), q=(1/6,1/6,2/3): min + (1/3)d0 = (1/2,1/6,1/3), TV 1/6", "counting",
              witness=_w("1/3 1/3 1/3", "1/6 1/6 2/3", "1/6"),
              clean_when=lambda p, q, g, t: len(_excess(p, q)) < 2),
    Adversary("loop_count_zeros_skip", loop_count_zeros_skip, B, "two zeros in p: output q; p=(1,0,0), "
              "q=(1/2,1/4,1/4): TV 1/2", "counting", witness=_w("1 0 0", "1/2 1/4 1/4", "1/2"),
              clean_when=lambda p, q, g, t: sum(1 for a in p if a == 0) < 2 or _same(p, q)),
    Adversary("enumerate_uniform_over_excess", enumerate_uniform_over_excess, B, "|E| >= 2 with unequal "
              "excess: uniform over E; p=(1/2,1/4,1/4), q=(1/3,0,2/3): (13/24,5/24,6/24), TV 1/24", "counting",
              witness=_w("1/2 1/4 1/4", "1/3 0 2/3", "1/24"),
              clean_when=lambda p, q, g, t: len({p[i] - q[i] for i in _excess(p, q)}) <= 1),
    Adversary("dict_zip_collapse_skip", dict_zip_collapse_skip, B, "ties in p collapse dict(zip(p, q)): "
              "output q; p=(1/2,1/2), q=(1/3,2/3): dict {1/2: 2/3}, TV 1/6", "counting",
              witness=_w("1/2 1/2", "1/3 2/3", "1/6"),
              clean_when=lambda p, q, g, t: sum(dict(zip(p, q)).values()) == 1 or _same(p, q)),
    Adversary("counter_thrice_emit0", counter_thrice_emit0, B, "a value thrice in p: a rejection emits 0; "
              "p=(1/3,1/3,1/3), q=(1/2,1/4,1/4): (1/2,1/4,1/4), TV 1/6", "counting",
              witness=_w("1/3 1/3 1/3", "1/2 1/4 1/4", "1/6"),
              clean_when=lambda p, q, g, t: collections.Counter(p).most_common(1)[0][1] < 3
              or set(_excess(p, q)) <= {0}),
    Adversary("set_q_two_values_shortcut", set_q_two_values_shortcut, B, "the shortcut gives q p + (1 - sum "
              "q p) p, exact iff q is flat on supp p; p=(1/2,1/2), q=(1/3,2/3): (5/12,7/12), TV 1/12", "counting",
              witness=_w("1/2 1/2", "1/3 2/3", "1/12"),
              clean_when=lambda p, q, g, t: len(set(q)) > 2 or len({b for a, b in zip(p, q) if a > 0}) == 1),
    Adversary("q_support_ge3_skip", q_support_ge3_skip, B, "q has 3+ tokens in its support: output q; "
              "p=(1/2,1/2,0), q=(1/3,1/3,1/3): TV 1/3", "counting", witness=_w("1/2 1/2 0", "1/3 1/3 1/3", "1/3"),
              clean_when=lambda p, q, g, t: sum(b > 0 for b in q) < 3 or _same(p, q)),
    Adversary("ties_ge2_skip", ties_ge2_skip, B, "2 ties with p != q need vocab >= 4: output q; "
              "p=(1/4,1/4,1/4,1/4), q=(1/4,1/4,1/8,3/8): TV 1/8", "counting",
              witness=_w("1/4 1/4 1/4 1/4", "1/4 1/4 1/8 3/8", "1/8"),
              clean_when=lambda p, q, g, t: sum(1 for a, b in zip(p, q) if a == b) < 2 or _same(p, q)),
    # -- 3. token ids --
    Adversary("eos_zero_unverified", eos_zero_unverified, B, "token 0 kept untested: biased iff q0 > p0; "
              "p=(1/2,1/2), q=(2/3,1/3): output q, TV 1/6", "token-id", witness=_w("1/2 1/2", "2/3 1/3", "1/6"),
              clean_when=lambda p, q, g, t: q[0] <= p[0]),
    Adversary("next_token_on_reject", next_token_on_reject, B, "at vocab 2 x + 1 is the only excess token "
              "(exact); p=(1/3,1/3,1/3), q=(1/2,1/2,0): (1/3,1/2,1/6), TV 1/6", "token-id",
              witness=_w("1/3 1/3 1/3", "1/2 1/2 0", "1/6"),
              clean_when=lambda p, q, g, t: len(p) == 2 or _same(p, q)),
    Adversary("odd_unverified", odd_unverified, B, "odd ids kept untested: biased iff an odd token has q > p; "
              "p=(1/3,1/3,1/3), q=(1/6,1/2,1/3): output q, TV 1/6", "token-id",
              witness=_w("1/3 1/3 1/3", "1/6 1/2 1/3", "1/6"),
              clean_when=lambda p, q, g, t: _q_le_p(p, q, range(1, len(p), 2))),
    Adversary("zero_falsy_or_draft", zero_falsy_or_draft, B, "a residual draw of 0 becomes x: needs p0 > q0; "
              "p=(1/2,1/2), q=(1/3,2/3): rejections emit 1, output q, TV 1/6", "token-id",
              witness=_w("1/2 1/2", "1/3 2/3", "1/6"), clean_when=lambda p, q, g, t: p[0] <= q[0]),
    Adversary("first_excess_index", first_excess_index, B, "emits min E: exact iff |E| <= 1 (always at vocab "
              "2); p=(1/3,1/3,1/3), q=(1/6,1/6,2/3): (1/2,1/6,1/3), TV 1/6", "token-id",
              witness=_w("1/3 1/3 1/3", "1/6 1/6 2/3", "1/6"), clean_when=lambda p, q, g, t: len(_excess(p, q)) <= 1),
    Adversary("last_excess_shortcut", last_excess_shortcut, B, "emits V-1 when it is in E: exact iff E = {V-1}; "
              "p=(1/3,1/3,1/3), q=(2/3,1/6,1/6): (1/3,1/6,1/2), TV 1/6", "token-id",
              witness=_w("1/3 1/3 1/3", "2/3 1/6 1/6", "1/6"),
              clean_when=lambda p, q, g, t: not p[-1] > q[-1] or len(_excess(p, q)) == 1),
    Adversary("p0_zero_skip", p0_zero_skip, B, "p[0] == 0: output q; p=(0,1), q=(1/2,1/2): TV 1/2", "token-id",
              witness=_w("0 1", "1/2 1/2", "1/2"), clean_when=lambda p, q, g, t: p[0] > 0 or _same(p, q)),
    Adversary("constant_bonus", constant_bonus, B, "the bonus is seen at gamma 1, 2 tokens: p=q=(2/3,1/3) "
              "always reaches it, output p x d0, TV = 1 - 2/3 = 1/3", "token-id", settings=((1, 2),),
              witness=_w("2/3 1/3", "2/3 1/3", "1/3", gamma=1, tokens=2),
              clean_when=lambda p, q, g, t: t <= g or not p[0] > F(1, 2) or p[0] == 1),
    Adversary("later_draft_above_unverified", later_draft_above_unverified, B, "x1 > x0 kept untested (gamma "
              "2); p=(1/2,1/2), q=(1/3,2/3): pairs (7,11,9,9)/36, TV 1/18", "token-id", settings=((2, 2),),
              witness=_w("1/2 1/2", "1/3 2/3", "1/18", gamma=2, tokens=2), clean_when=_first_pos_only),
    Adversary("next_iter_excess_set", next_iter_excess_set, B, "emits the smallest of E: exact iff |E| <= 1; "
              "p=(1/3,1/3,1/3), q=(0,1/6,5/6): (1/2,1/6,1/3), TV 1/6", "token-id",
              witness=_w("1/3 1/3 1/3", "0 1/6 5/6", "1/6"), clean_when=lambda p, q, g, t: len(_excess(p, q)) <= 1),
    Adversary("seen_token_dict_unverified", seen_token_dict_unverified, B, "x1 == x0 kept untested (gamma 2); "
              "p=(1/2,1/2), q=(1/3,2/3): pairs (1/4,1/4,1/6,1/3), TV 1/12", "token-id", settings=((2, 2),),
              witness=_w("1/2 1/2", "1/3 2/3", "1/12", gamma=2, tokens=2), clean_when=_first_pos_only),
    Adversary("min_of_two_target_draws", min_of_two_target_draws, B, "min of two draws of p: exact iff p is a "
              "point mass; p=(1/2,1/2): P(0) = 3/4, TV 1/4", "token-id", witness=_w("1/2 1/2", "1/3 2/3", "1/4"),
              clean_when=lambda p, q, g, t: max(p) == 1),
    Adversary("draws_agree_else_fresh", draws_agree_else_fresh, B, "P(t) = p_t^2 + (1 - sum p^2) p_t: exact "
              "iff p is flat on its support; p=(2/3,1/3): P(0) = 20/27, TV 2/27", "token-id",
              witness=_w("2/3 1/3", "1/2 1/2", "2/27"),
              clean_when=lambda p, q, g, t: len({a for a in p if a > 0}) == 1),
    # -- 4. the rest of Python --
    Adversary("zip_tail_residual", zip_tail_residual, B, "token 0 left out of the residual: wrong iff 0 in E "
              "and |E| >= 2; p=(1/3,1/3,1/3), q=(1/6,1/6,2/3): (1/6,1/2,1/3), TV 1/6", "other",
              witness=_w("1/3 1/3 1/3", "1/6 1/6 2/3", "1/6"),
              clean_when=lambda p, q, g, t: not (p[0] > q[0] and len(_excess(p, q)) >= 2)),
    Adversary("numpy_abs_residual", numpy_abs_residual, B, "norm|p - q| is not the residual unless p == q; "
              "p=(1/2,1/2), q=(1/3,2/3): (5/12,7/12), TV 1/12", "other", witness=_w("1/2 1/2", "1/3 2/3", "1/12"),
              clean_when=lambda p, q, g, t: _same(p, q)),
    Adversary("reduce_product_zero_skip", reduce_product_zero_skip, B, "p has a zero: output q; "
              "p=(1/2,1/2,0), q=(1/3,1/3,1/3): TV 1/3", "other", witness=_w("1/2 1/2 0", "1/3 1/3 1/3", "1/3"),
              clean_when=lambda p, q, g, t: all(a > 0 for a in p) or _same(p, q)),
    Adversary("uniform_on_reject_vocab4", uniform_on_reject_vocab4, B, "vocab >= 4: min + beta uniform; "
              "p=(1/4,1/4,1/4,1/4), q=(1/2,1/2,0,0): (3/8,3/8,1/8,1/8), TV 1/4", "other",
              witness=_w("1/4 1/4 1/4 1/4", "1/2 1/2 0 0", "1/4"),
              clean_when=lambda p, q, g, t: len(p) < 4 or _same(p, q)),
    Adversary("vocab_ge5_skip", vocab_ge5_skip, B, "vocab >= 5: output q; p uniform on 5, "
              "q=(1/2,1/8,1/8,1/8,1/8): TV 3/10", "other", witness=_w("1/5 1/5 1/5 1/5 1/5", "1/2 1/8 1/8 1/8 1/8",
                                                                        "3/10"),
              clean_when=lambda p, q, g, t: len(p) < 5 or _same(p, q)),
    Adversary("point_mass_argmax_residual", point_mass_argmax_residual, B, "point mass on the residual's "
              "argmax: exact iff |E| <= 1; p=(1/4,1/2,1/4), q=(0,1/4,3/4): (1/2,1/4,1/4), TV 1/4", "other",
              witness=_w("1/4 1/2 1/4", "0 1/4 3/4", "1/4"), clean_when=lambda p, q, g, t: len(_excess(p, q)) <= 1),
    Adversary("index_of_max_unverified", index_of_max_unverified, B, "the mode m kept untested: biased iff "
              "q_m > p_m; p=(2/3,1/3), q=(5/6,1/6): output q, TV 1/6", "other",
              witness=_w("2/3 1/3", "5/6 1/6", "1/6"),
              clean_when=lambda p, q, g, t: _q_le_p(p, q, [p.index(max(p))])),
    Adversary("count_tied_draft_unverified", count_tied_draft_unverified, B, "tied-p drafts kept untested: "
              "p=(1/4,1/4,1/2), q=(1/2,1/4,1/4): output q, TV 1/4", "other",
              witness=_w("1/4 1/4 1/2", "1/2 1/4 1/4", "1/4"),
              clean_when=lambda p, q, g, t: _q_le_p(p, q, [x for x in range(len(p)) if list(p).count(p[x]) > 1])),
    Adversary("reversed_last_excess", reversed_last_excess, B, "emits max E: exact iff |E| <= 1; "
              "p=(1/3,1/3,1/3), q=(1/6,1/6,2/3): (1/6,1/2,1/3), TV 1/6", "other",
              witness=_w("1/3 1/3 1/3", "1/6 1/6 2/3", "1/6"), clean_when=lambda p, q, g, t: len(_excess(p, q)) <= 1),
    Adversary("reversed_q_skip", reversed_q_skip, B, "q = reversed p: output q; p=(1/3,2/3), q=(2/3,1/3): "
              "TV 1/3", "other", witness=_w("1/3 2/3", "2/3 1/3", "1/3"),
              clean_when=lambda p, q, g, t: tuple(p) != tuple(q)[::-1] or _same(p, q)),
    Adversary("hash_ties_skip", hash_ties_skip, B, "tied entries hash alike: output q; p=(1/2,1/2), "
              "q=(1/3,2/3): TV 1/6", "other", witness=_w("1/2 1/2", "1/3 2/3", "1/6"),
              clean_when=lambda p, q, g, t: len({hash(a) for a in p}) == len(p) or _same(p, q)),
    Adversary("str_one_unverified", str_one_unverified, B, "token 1 kept untested: biased iff q1 > p1; "
              "p=(1/2,1/2), q=(1/3,2/3): output q, TV 1/6", "other", witness=_w("1/2 1/2", "1/3 2/3", "1/6"),
              clean_when=lambda p, q, g, t: _q_le_p(p, q, [x for x in range(len(p)) if str(x).startswith("1")])),
    Adversary("recursive_skip_rejected", recursive_skip_rejected, B, "a rejection falls through to the next "
              "position; gamma 1: min + beta p, p=(1/2,1/2), q=(1/3,2/3): TV 1/12", "other",
              witness=_w("1/2 1/2", "1/3 2/3", "1/12"), clean_when=lambda p, q, g, t: _same(p, q)),
    Adversary("zero_division_accepts", zero_division_accepts, B, "q(x)/0 caught as accept: a p = 0 < q token "
              "is emitted; p=(1,0), q=(1/2,1/2): output q, TV 1/2", "other", witness=_w("1 0", "1/2 1/2", "1/2"),
              clean_when=lambda p, q, g, t: not any(a == 0 < b for a, b in zip(p, q))),
    Adversary("bernoulli_loop_unnormalised", bernoulli_loop_unnormalised, B, "r_y prod(1 - r_z) before y: "
              "exact iff E has <= 1 token below V-1; p=(1/3,1/3,1/3), q=(1/6,1/6,2/3): (1/3,1/4,5/12), TV 1/12",
              "other", witness=_w("1/3 1/3 1/3", "1/6 1/6 2/3", "1/12"),
              clean_when=lambda p, q, g, t: len([y for y in _excess(p, q) if y < len(p) - 1]) <= 1),
    # -- errors --
    Adversary("float_ratio", float_ratio, E, "rng.bernoulli gets a float at the first draft: InexactArithmetic",
              "other", witness=_w("1/2 1/2", "1/3 2/3", None), error=es.InexactArithmetic),
    Adversary("numpy_float_residual", numpy_float_residual, E, "a rejection hands rng.categorical a float64 "
              "array: InvalidDistribution wherever p != q (a rejection can happen)", "other",
              witness=_w("1/2 1/2", "1/3 2/3", None), error=es.InvalidDistribution),
    # -- lossless, same styles --
    Adversary("ss_comprehension_normalize", ss_comprehension_normalize, L, "the comprehension is the residual; "
              + _SS_ALT, "other"),
    Adversary("ss_dead_loops", ss_dead_loops, L, "the counts and sorts never change the draws; " + _SS_ALT,
              "counting"),
    Adversary("sample_and_match_eq", sample_and_match_eq, L, "the emitted token is always y ~ p (x == y keeps "
              "x = y)", "token-id"),
    Adversary("draws_agree", draws_agree, L, "y if y == z else z is z ~ p", "token-id"),
    Adversary("ss_recursive", ss_recursive, L, "the recursion unrolls to SS", "other"),
    Adversary("ss_try_tie", ss_try_tie, L, "ZeroDivisionError only on p(x) == q(x) > 0, where SS keeps x "
              "w.p. 1", "other"),
    Adversary("whole_law_equal_skip", whole_law_equal_skip, L, "p == q: keeping every draft emits q = p",
              "other"),
    Adversary("isinstance_guard", isinstance_guard, L, "drafts are ints and entries Fractions: always SS",
              "other"),
    Adversary("ss_reduce", ss_reduce, L, "reduce(add) is the residual's mass; " + _SS_ALT, "other"),
    Adversary("ss_numpy", ss_numpy, L, "sum|p - q| / 2 = sum (p - q)+ = beta; " + _SS_ALT, "other"),
    Adversary("ss_bernoulli_chain", ss_bernoulli_chain, L, "bernoulli(w / remaining) in turn is the chain rule "
              "of the residual", "other"),
    Adversary("set_single_excess", set_single_excess, L, "|E| == 1: the residual is the point mass on it",
              "token-id"),
    Adversary("const_token_point_residual", const_token_point_residual, L, "token 0 is emitted exactly when "
              "the residual is d0", "token-id"),
    Adversary("fsum_guard", fsum_guard, L, "fsum of a law is 1.0 within 1e-9: the skip never fires", "other"),
    Adversary("ss_reversed", ss_reversed, L, "reversing both laws and the result back is the residual",
              "other"),
    Adversary("ss_uniform_accept", ss_uniform_accept, L, "P(u q(x) < p(x)) = min(1, p(x)/q(x)) for q(x) > 0",
              "other"),
    Adversary("half_accept", half_accept, L, "min/2 + (1 - sum min/2) norm(p - min/2) = p", "quantifier"),
    Adversary("dict_ratio_table", dict_ratio_table, L, "the table holds min(1, p/q) for every draftable token",
              "token-id"),
    Adversary("set_q_uniform_shortcut", set_q_uniform_shortcut, L, "q uniform: q p + (1 - sum q p) p = p/V + "
              "(1 - 1/V) p = p; otherwise SS", "counting"),
    Adversary("generator_ratio", generator_ratio, L, "the generator yields p(x)/q(x); " + _SS_ALT, "other"),
    Adversary("uniform_proposal_mix", uniform_proposal_mix, L, "P(t) = p_t/V + (1 - sum p/V) p_t = p_t",
              "other"),
]
