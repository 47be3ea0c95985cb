"""The tree-rule catalog: SpecInfer's verifiers and the misuses reported against tree verification.

A tree rule walks the drafted tree from ``step.root``: ``step.proposals(n)`` / ``step.children(n)``
draw the tree lazily, ``yield step.accept(c)`` emits an accepted child's token, and the rule
ends after emitting one token that is not an accepted child (a correction or a bonus).

>>> [r.name for r in TREE_RULES][:3]
['mss', 'naive_tree_sampling', 'greedy_tree']
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Iterator

from ..errors import InvalidValue
from ..laws import argmax, exceeds_typical_threshold, normalize, residual, to_rational
from ..protocols import Rng, TreeStep
from .chain import _ratio
from ..drafts.tree import tree
from .record import Rule

__all__ = ["mss", "naive_tree_sampling", "greedy_tree", "multi_sample_match", "shared_coin_tree",
           "typical_acceptance", "TREE_RULES"]

SPECINFER = ("Miao et al. SpecInfer: Accelerating Large Language Model Serving with Tree-based Speculative "
             "Inference and Verification. ASPLOS 2024 (arXiv:2305.09781)")


# -- mss ------------------------------------------------------------------------------------------------
def _mss(step: TreeStep, rng: Rng) -> Iterator[int]:
    node = step.root
    while True:
        r = step.target(node)
        for child, q in step.proposals(node):
            if rng.bernoulli(_ratio(r, q, step.token(child))):
                yield step.accept(child)
                node = child
                break
            r = residual(r, q)
        else:  # every proposal rejected, or a leaf: emit from the residual (p itself at a leaf: the bonus)
            yield rng.categorical(r)
            return


def _mss_closed_form(laws: Any, horizon: int | None, lengths: bool = False) -> dict[Any, Any] | None:
    """MSS's step law by recursion over accepted nodes; a subtree's law is memoised by its path.

    Below an accepted child the tree is drawn afresh whatever its siblings were, so the law of
    what is emitted from a node depends only on the node's path and the remaining horizon.
    """
    if not hasattr(laws, "next_child"):
        return None  # merge trees: no closed form, the engine enumerates the rng form
    env = laws.env
    one = env.field.one
    cap = laws.depth + 1 if horizon is None else horizon
    memo: dict[tuple[Any, ...], dict[Any, Any]] = {}

    def node_law(path: tuple[Any, ...], h: int) -> dict[Any, Any]:
        key = (path, h)
        hit = memo.get(key)
        if hit is not None:
            return hit
        out: dict[Any, Any] = {}
        get = out.get
        stack: list[tuple[tuple[int, ...], Any, Any]] = [((), laws.target(path), one)]
        while stack:
            sib, r, w = stack.pop()
            law = laws.next_child(path, sib)
            if law is None:
                for y, ry in enumerate(r):
                    if ry:
                        out[(y,)] = get((y,), 0) + w * ry
                continue
            for x, sx in enumerate(law):
                if not sx:
                    continue
                q = laws.claimed(path, sib, x)
                a = _ratio(r, q, x)
                if a:
                    wa = w * sx * a
                    if h == 1:
                        out[(x,)] = get((x,), 0) + wa
                    else:
                        for suffix, ps in node_law(path + (x,), h - 1).items():
                            k = (x,) + suffix
                            out[k] = get(k, 0) + wa * ps
                if a != 1:
                    stack.append((sib + (x,), residual(r, q), w * sx * (1 - a)))
        memo[key] = out
        return out

    law = node_law((), cap)
    if not lengths:
        return law
    by_len: dict[Any, Any] = {}
    for e, w in law.items():
        k = (len(e), len(e) - 1)   # every MSS step emits exactly one token that is not an accepted node
        by_len[k] = by_len.get(k, 0) + w
    return by_len


mss = Rule(
    _mss, name="mss", family="tree", claim="lossless",
    description="SpecInfer VerifyStochastic (multi-step speculative sampling): try a node's proposals in order, "
                "accept x w.p. min(1, r(x)/q_j(x)), on rejection r = norm(max(0, r - q_j)); all rejected: emit from "
                "r; an accepted leaf emits a bonus from p. Lossless when every claim is honest",
    reference=SPECINFER + ", Algorithm 2 (VerifyStochastic)", marks_accepted=True, closed_form=_mss_closed_form)


# -- naive_tree_sampling ------------------------------------------------------------------------------------
def _naive_tree_sampling(step: TreeStep, rng: Rng) -> Iterator[int]:
    node = step.root
    while True:
        y = rng.categorical(step.target(node))
        for child in step.children(node):
            if step.token(child) == y:
                yield step.accept(child)
                node = child
                break
        else:
            yield y
            return


naive_tree_sampling = Rule(
    _naive_tree_sampling, name="naive_tree_sampling", family="tree", claim="lossless",
    description="sample y from p; move to the child y if there is one, otherwise emit y (a bonus at a leaf); "
                "lossless for any children",
    reference=SPECINFER + ", naive sampling baseline (section 4.3)", marks_accepted=True)


# -- greedy_tree ---------------------------------------------------------------------------------------------
def _greedy_tree(step: TreeStep, rng: Rng) -> Iterator[int]:
    node = step.root
    while True:
        y = argmax(step.target(node))
        for child in step.children(node):
            if step.token(child) == y:
                yield step.accept(child)
                node = child
                break
        else:
            yield y
            return


greedy_tree = Rule(
    _greedy_tree, name="greedy_tree", family="tree", claim="lossless-greedy",
    description="SpecInfer VerifyGreedy: follow the child equal to argmax p; emit argmax p where none matches",
    reference=SPECINFER + ", VerifyGreedy", marks_accepted=True)


# -- multi_sample_match ----------------------------------------------------------------------------------------
def _multi_sample_match(step: TreeStep, rng: Rng) -> Iterator[int]:
    node = step.root
    while True:
        kids, p = step.children(node), step.target(node)
        n = len(kids)
        if n == 0:
            yield rng.categorical(p)
            return
        # n independent target samples; the ones after the first match are never looked at,
        # so they are drawn lazily (the same law, fewer branches)
        first = 0   # n >= 1: the first sample, set below
        for i in range(n):
            s = rng.categorical(p)
            if i == 0:
                first = s
            match = next((c for c in kids if step.token(c) == s), None)
            if match is not None:
                yield step.accept(match)
                node = match
                break
        else:
            yield first
            return


def _multi_sample_match_closed_form(laws: Any, horizon: int | None, lengths: bool = False) -> dict[Any, Any] | None:
    """multi_sample_match's step law by recursion over accepted nodes, without the rng.

    At a node with children ``kids`` (tokens drawn in order, multiplicities kept) and target ``p``,
    let ``m = 1 - p(S)`` be the mass off the set ``S`` of the children's tokens. The first of the
    ``n = len(kids)`` samples that lands in ``S`` is the ``i``-th with probability ``m**i p(x)``,
    so child token ``x`` is accepted with probability ``p(x) (1 + m + ... + m**(n-1))``; none
    lands in ``S`` when the first sample is some ``y`` off ``S`` and the other ``n - 1`` miss too:
    ``y`` is emitted with probability ``p(y) m**(n-1)``. A leaf emits a sample of ``p``. As for
    MSS, the subtree below an accepted child is drawn afresh, so its law depends only on its path.
    In an inexact field it returns None (the engine enumerates, keeping the earlier rounding).

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> from exactspec.enumerate.env import Env
    >>> from exactspec.fields import get_field
    >>> env = Env(es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((1, 0)), get_field(backend="python"))
    >>> law = _multi_sample_match_closed_form(es.drafts.tree((2,), children="iid").laws(env, ()), 1)
    >>> law == {(0,): F(3, 4), (1,): F(1, 4)}
    True
    """
    env = getattr(laws, "env", None)
    if not hasattr(laws, "next_child") or env is None or not env.field.exact:
        return None  # merge trees, or rounding that must stay the enumeration's: the engine enumerates
    one, zero = env.field.one, env.field.zero
    cap = laws.depth + 1 if horizon is None else horizon
    memo: dict[tuple[Any, ...], dict[Any, Any]] = {}

    def node_law(path: tuple[Any, ...], h: int) -> dict[Any, Any]:
        key = (path, h)
        hit = memo.get(key)
        if hit is not None:
            return hit
        out: dict[Any, Any] = {}
        get = out.get
        p = laws.target(path)
        accepted: dict[Any, Any] = {}   # child token -> probability it is the one accepted, over every draw of the children
        stack: list[tuple[tuple[int, ...], Any]] = [((), one)]
        while stack:
            sib, w = stack.pop()
            law = laws.next_child(path, sib)
            if law is not None:
                stack.extend((sib + (x,), w * sx) for x, sx in enumerate(law) if sx)
                continue
            if not sib:   # a leaf: one sample of p
                for y, py in enumerate(p):
                    if py:
                        out[(y,)] = get((y,), 0) + w * py
                continue
            drafted = set(sib)
            miss = one - sum((p[x] for x in drafted), zero)
            power, geometric = one, zero       # miss ** i and 1 + miss + ... + miss ** (i - 1)
            for _ in range(len(sib) - 1):
                geometric += power
                power *= miss
            geometric += power                  # power == miss ** (n - 1)
            for x in drafted:
                if p[x]:
                    accepted[x] = accepted.get(x, 0) + w * p[x] * geometric
            if power:
                for y, py in enumerate(p):
                    if py and y not in drafted:
                        out[(y,)] = get((y,), 0) + w * power * py
        for x, a in accepted.items():
            if h == 1:
                out[(x,)] = get((x,), 0) + a
            else:
                for suffix, ps in node_law(path + (x,), h - 1).items():
                    k = (x,) + suffix
                    out[k] = get(k, 0) + a * ps
        memo[key] = out
        return out

    law = node_law((), cap)
    if not lengths:
        return law
    by_len: dict[Any, Any] = {}
    for e, w in law.items():
        k = (len(e), len(e) - 1)   # every step emits exactly one token that is not an accepted node
        by_len[k] = by_len.get(k, 0) + w
    return by_len


multi_sample_match = Rule(
    _multi_sample_match, name="multi_sample_match", family="tree", claim="biased",
    # with one child per node it draws one target sample and emits it, matched or not: exactly the target's law
    when="width >= 2", otherwise="lossless",
    description="draw one target sample per child; move to the child matching the first sample that matches any "
                "child; if none matches emit the first sample",
    reference="accept-if-any-of-several-target-samples-matches: foundation-model-stack/fms-extras#12; the same "
              "pattern in Medusa-style nucleus verification", marks_accepted=True,
    closed_form=_multi_sample_match_closed_form)


# -- shared_coin_tree ---------------------------------------------------------------------------------------------
def shared_coin_tree(threshold_single: Any = 1, threshold_acc: Any = 1) -> Rule:
    """SGLang's target-only tree verification with its relaxation thresholds (lossless at 1, 1).

    >>> shared_coin_tree().claim, shared_coin_tree(1, "1/2").claim
    ('lossless', 'biased')
    """
    ts = to_rational(threshold_single, "shared_coin_tree threshold_single must be a rational")
    ta = to_rational(threshold_acc, "shared_coin_tree threshold_acc must be a rational")
    if not (0 < ts <= 1 and 0 < ta <= 1):
        raise InvalidValue(f"shared_coin_tree thresholds must lie in (0, 1], got {ts}, {ta}")

    def _shared_coin_tree(step: TreeStep, rng: Rng) -> Iterator[int]:
        t_single, t_acc = step.number(ts), step.number(ta)
        node = step.root
        while True:
            kids, p = step.children(node), step.target(node)
            if len(kids) == 0:
                yield rng.categorical(p)
                return
            u = rng.uniform()
            acc = 0
            for child in kids:
                x = step.token(child)
                acc += p[x]
                if u <= acc / t_acc or p[x] >= t_single:
                    yield step.accept(child)
                    node = child
                    break
            else:
                drafted = {step.token(c) for c in kids}
                yield rng.categorical(normalize([0 if i in drafted else v for i, v in enumerate(p)]))
                return

    name = "shared_coin_tree" if (ts, ta) == (1, 1) else f"shared_coin_tree({ts}, {ta})"
    return Rule(
        _shared_coin_tree, name=name, family="tree", claim="lossless" if (ts, ta) == (1, 1) else "biased",
        description=f"one uniform per node; children tried in order with target probabilities accumulated; accept "
                    f"child i if u <= acc_i / {ta} or p(x_i) >= {ts}; if none, emit from p without the children "
                    "(lossless at thresholds 1 for distinct children)",
        reference="SGLang target-only tree verification with speculative_accept_threshold_single / _acc "
                  "(sgl-project/sglang tree_speculative_sampling_target_only)",
        params={"threshold_single": ts, "threshold_acc": ta}, marks_accepted=True,
        proposer=tree((2, 1), children="topk", claim="point_mass"))


# -- typical_acceptance -------------------------------------------------------------------------------------------
def typical_acceptance(posterior_threshold: Any = Fraction(9, 100), posterior_alpha: Any = Fraction(3, 10)) -> Rule:
    """Medusa's typical acceptance: accept the first child with ``p(x) > min(eps, alpha * exp(-H(p)))``.

    The comparison with the irrational ``exp(-H(p))`` is decided exactly (see
    :func:`exactspec.laws.exceeds_typical_threshold`).

    >>> typical_acceptance().name
    'typical_acceptance(9/100, 3/10)'
    """
    eps = to_rational(posterior_threshold, "typical_acceptance posterior_threshold must be a rational like '9/100'")
    alpha = to_rational(posterior_alpha, "typical_acceptance posterior_alpha must be a rational like '3/10'")
    if eps < 0 or alpha < 0:
        raise InvalidValue("typical_acceptance parameters must be >= 0")

    def _typical_acceptance(step: TreeStep, rng: Rng) -> Iterator[int]:
        e, al = step.number(eps), step.number(alpha)
        node = step.root
        while True:
            p = step.target(node)
            for child in step.children(node):
                px = p[step.token(child)]
                if px > e or exceeds_typical_threshold(px, p, al):
                    yield step.accept(child)
                    node = child
                    break
            else:
                yield rng.categorical(p)
                return

    return Rule(
        _typical_acceptance, name=f"typical_acceptance({eps}, {alpha})", family="tree", claim="biased",
        description=f"Medusa typical acceptance: accept the first child with p(x) > min({eps}, {alpha} * exp(-H(p))); "
                    "if none, emit a sample of p; a bonus at a leaf",
        reference="Cai et al. Medusa (arXiv:2401.10774), typical acceptance with posterior_threshold / "
                  "posterior_alpha", params={"posterior_threshold": eps, "posterior_alpha": alpha},
        marks_accepted=True)


TREE_RULES = [mss, naive_tree_sampling, greedy_tree, multi_sample_match, shared_coin_tree(), typical_acceptance()]
