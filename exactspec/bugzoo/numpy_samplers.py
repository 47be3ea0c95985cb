"""Minimal numpy chain samplers reproducing reported bug patterns (own code), each with its fix.

All take ``(draft_ids [gamma], draft_probs [gamma, V], target_probs [gamma + 1, V], rng)`` with a
numpy ``Generator`` (the ``numpy`` adapter) and return the emitted token ids.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

F32_TINY = np.finfo(np.float32).tiny


def _residual_draw(p: np.ndarray, q: np.ndarray, rng: Any) -> int:
    residual = np.maximum(p - q, 0.0)
    return int(rng.choice(len(p), p=residual / residual.sum()))


def correct(draft_ids, draft_probs, target_probs, rng):
    """The fixed sampler: one fresh uniform per position, strict ``u < p/q``, residual, bonus."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
        else:
            out.append(_residual_draw(p, q, rng))
            return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def shared_uniform(draft_ids, draft_probs, target_probs, rng):
    """One uniform for every position (a tutorial re-seeds its generator inside the loop)."""
    u = rng.random()
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if u < p[x] / q[x]:
            out.append(int(x))
        else:
            out.append(_residual_draw(p, q, rng))
            return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def zero_uniform(draft_ids, draft_probs, target_probs, rng):
    """The uniform hard-coded to 0: every draft the target gives positive probability is accepted."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if 0.0 < p[x] / q[x]:
            out.append(int(x))
        else:
            out.append(_residual_draw(p, q, rng))
            return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def accept_at_zero(draft_ids, draft_probs, target_probs, rng):
    """``u <= p/q``: a generator that can return 0 accepts drafts of probability 0 (sgl-project/sglang#35771)."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() <= p[x] / q[x]:
            out.append(int(x))
        else:
            out.append(_residual_draw(p, q, rng))
            return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def tiny_clamp(draft_ids, draft_probs, target_probs, rng):
    """The residual clamped at float32's tiny instead of 0 (the vLLM v0 rejection sampler)."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
        else:
            residual = np.maximum(p - q, F32_TINY)
            out.append(int(rng.choice(len(p), p=residual / residual.sum())))
            return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


def _inverse_cdf(law: np.ndarray, u: Any, side: Literal["left", "right"]) -> int:
    cdf = np.cumsum(law)
    cdf /= cdf[-1]                  # as numpy's choice does: the float cumsum may end below 1, this ends at 1.0
    return int(np.searchsorted(cdf, u, side=side))


def _searchsorted_chain(draft_ids, draft_probs, target_probs, rng, side):
    """Algorithm 1 with the residual and bonus drawn by ``searchsorted(cumsum(law), u, side=side)``."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
        else:
            residual = np.maximum(p - q, 0.0)
            out.append(_inverse_cdf(residual / residual.sum(), rng.random(), side))
            return out
    out.append(_inverse_cdf(target_probs[-1], rng.random(), side))
    return out


def searchsorted_left(draft_ids, draft_probs, target_probs, rng):
    """Residual and bonus drawn by ``searchsorted(cumsum(law), u, side='left')``: the first token whose cumulative
    probability is ``>= u``, so ``u == 0`` (which numpy's generator returns) emits a leading token of probability 0."""
    return _searchsorted_chain(draft_ids, draft_probs, target_probs, rng, "left")


def searchsorted_right(draft_ids, draft_probs, target_probs, rng):
    """The fix of :func:`searchsorted_left`: ``side='right'``, the first token whose cumulative probability is ``> u``
    (what ``Generator.choice`` does)."""
    return _searchsorted_chain(draft_ids, draft_probs, target_probs, rng, "right")


def cumsum_not_above(draft_ids, draft_probs, target_probs, rng):
    """The bonus token counted as ``sum(cumsum(p) < u)``: with ``u == 0`` no entry is below, token 0 is emitted even
    when the target gives it probability 0 (the fix counts ``cumsum(p) <= u``)."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
        else:
            out.append(_residual_draw(p, q, rng))
            return out
    cdf = np.cumsum(target_probs[-1])
    cdf /= cdf[-1]                  # ends at 1.0: u < 1 is never counted past the last token
    u = rng.random()
    out.append(int(sum(bool(c < u) for c in cdf)))
    return out


#: (sampler, its fix, where the pattern was reported)
ZOO = [
    (shared_uniform, correct, "one uniform reused at every position: a tutorial re-seeding inside its loop"),
    (zero_uniform, correct, "the uniform hard-coded to 0"),
    (accept_at_zero, correct, "u <= p/q with a generator that returns 0: sgl-project/sglang#35771 (fix: PR #35798)"),
    (tiny_clamp, correct, "residual clamped at float32 tiny: vLLM v0 rejection_sampler.py (vllm-project/vllm#2336)"),
    (searchsorted_left, correct, "inverse-CDF draw with searchsorted(side='left'): u == 0 emits a leading "
     "token of probability 0 (own example)"),
    (cumsum_not_above, correct, "inverse-CDF by counting cumsum(p) < u: u == 0 emits token 0 whatever its "
     "probability (own example)"),
]


# -- tree samplers (the ``numpy-tree`` adapter) --------------------------------------------------------

def mss_tree(tokens, parents, claimed, target, rng):
    """Multi-step speculative sampling over the drafted tree: correct when every claimed law is honest."""
    from exactspec.samplers.adapters.registry import reference_numpy_tree
    return reference_numpy_tree(tokens, parents, claimed, target, rng)


def multi_sample_match_tree(tokens, parents, claimed, target, rng):
    """Several target samples per node, move to the child matching the first that matches any
    (foundation-model-stack/fms-extras#12)."""
    children: dict = {}
    for n in range(1, len(tokens)):
        children.setdefault(int(parents[n]), []).append(n)
    node, out = 0, []
    while True:
        kids = children.get(node, [])
        p = target[node]
        samples = [int(rng.choice(len(p), p=p)) for _ in range(max(1, len(kids)))]
        match = next(((s, c) for s in samples for c in kids if int(tokens[c]) == s), None)
        if match is None:
            out.append(samples[0])
            return out
        out.append(match[0])
        node = match[1]


def single_sample_tree(tokens, parents, claimed, target, rng):
    """The fix: one target sample per node, move to the child that matches it (naive tree sampling)."""
    children: dict = {}
    for n in range(1, len(tokens)):
        children.setdefault(int(parents[n]), []).append(n)
    node, out = 0, []
    while True:
        p = target[node]
        y = int(rng.choice(len(p), p=p))
        out.append(y)
        nxt = next((c for c in children.get(node, []) if int(tokens[c]) == y), None)
        if nxt is None:
            return out
        node = nxt


TREE_ZOO = [
    (mss_tree, "top-k children scored with renormalised soft draft probabilities (proposer claim 'renormalized')"
               "; the fix tells the verifier point masses"),
    (multi_sample_match_tree, "several target samples matched against the candidates: "
                              "foundation-model-stack/fms-extras#12; the fix is single_sample_tree"),
]
