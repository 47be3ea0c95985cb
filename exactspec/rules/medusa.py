"""Medusa's typical acceptance as medusa-llm 0.1 implements it (``medusa/model/utils.py``, ``evaluate_posterior``).

The catalog's :func:`~exactspec.rules.typical_acceptance` follows the paper's description; the
published code differs from it in three ways, and :func:`typical_acceptance_medusa` is the
published variant, exactly:

1. **Entropy**: the threshold is ``min(eps, alpha * exp(-H'))`` with
   ``H' = -sum p_i log(p_i + 1e-5)`` (``posterior_prob + 1e-5`` inside the log), not the entropy
   ``H``; so ``exp(-H') = prod (p_i + 1e-5) ** p_i`` is slightly larger than ``exp(-H)`` and a
   token with ``p(x)`` between the two is accepted by the catalog rule and rejected by Medusa.
2. **Which path**: every root-to-leaf path gets its accepted length (leading tokens with
   ``p(x) > threshold``); the longest wins, ties broken by the largest likelihood
   ``prod p(x)`` over the accepted tokens, then by the lowest path (``torch.argmax``); the
   catalog rule walks down from the root into the first passing child.

   *Exact ties* are where this rule and the float code can part: two longest paths with equal
   likelihood (``1/3 * 3/4 == 1/2 * 1/2``) go here to the first path, while medusa-llm compares
   ``torch.sum(torch.log(candidates_prob))`` in float, where equal products round apart and the
   larger float wins whatever the path order; and ``p(x) == posterior_threshold`` exactly
   (``9/100``, e.g. sharpened weights (3, 9, 3, 1)) is rejected here (``>``) but may pass the
   code's float comparison. Off such ties the code's law has equalled this rule's exactly in every
   configuration tried (``tests/test_published_medusa_configurations.py`` pins both: the equality,
   and at each tie the law of this rule with the ties decided by the float code).
3. **After the accepted prefix** Medusa emits ``argmax p`` at the node after it (the next
   step's root token is ``torch.argmax(logits)`` in ``generate_candidates``): greedy, never a
   sample; the catalog rule draws that token from ``p``. So the published verifier makes no
   random draw at all: its law is the law of the drafted tree.

Temperature: ``evaluate_posterior(logits, candidates, temperature, ...)`` tests
``softmax(logits / temperature)``; at temperature ``1/k`` run this rule on
``es.models.sharpen(target, k)``. The argmax after the prefix is unchanged by temperature.
``posterior_threshold = 0.09, posterior_alpha = 0.3`` are medusa-llm 0.1's ``medusa_generate``
defaults.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> p = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
>>> r = es.audit(rule=typical_acceptance_medusa(), target=p, draft=p, tokens=2,
...              proposer=es.drafts.tree((2,), children="topk", claim="point_mass"))
>>> r.output          # accept 0 (the likelier of the two passing children), then argmax p = 0
{(0, 0): Fraction(1, 1)}
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Iterator, Sequence

from ..errors import InvalidValue
from ..laws import argmax, exceeds_typical_threshold, to_rational
from ..protocols import Rng, TreeStep
from .record import Rule

__all__ = ["typical_acceptance_medusa", "exceeds_medusa_threshold", "MEDUSA_ENTROPY_SHIFT"]

#: the ``1e-5`` medusa-llm adds inside the entropy's log, as the rational the code means
MEDUSA_ENTROPY_SHIFT = Fraction(1, 100000)

MEDUSA = ("medusa-llm 0.1 (PyPI), medusa/model/utils.py evaluate_posterior and generate_candidates; Cai et al. "
          "Medusa (arXiv:2401.10774)")


def exceeds_medusa_threshold(value: Any, p: Sequence[Any], alpha: Any, shift: Any = MEDUSA_ENTROPY_SHIFT) -> bool:
    """Decide ``value > alpha * prod (p_i + shift) ** p_i``: medusa-llm's ``p(x) > alpha * exp(-H')``, exactly.

    For rationals the test runs in interval arithmetic at rising precision (64 to 4096 bits) and,
    if still undecided, exactly: with ``p_i = a_i / b``, it is ``(value / alpha) ** b > prod
    (p_i + shift) ** a_i``. Float and mpmath inputs are compared directly.

    >>> from fractions import Fraction as F
    >>> exceeds_medusa_threshold(F(1, 2), (F(1, 2), F(1, 2)), F(199999, 200000))   # 0.5 < 0.5000075
    False
    >>> exceeds_medusa_threshold(F(1, 2), (F(1, 2), F(1, 2)), 1, shift=0)           # equality is not >
    False
    >>> exceeds_medusa_threshold(F(1, 2), (F(1, 2), F(1, 2)), F(1, 2))
    True
    """
    return exceeds_typical_threshold(value, p, alpha, shift=shift)


def typical_acceptance_medusa(posterior_threshold: Any = Fraction(9, 100), posterior_alpha: Any = Fraction(3, 10)
                              ) -> Rule:
    """Medusa's typical acceptance as medusa-llm 0.1's code does it (see :mod:`exactspec.rules.medusa`).

    Accepted length of a path: its leading tokens with ``p(x) > min(eps, alpha * prod (p_i + 1e-5) ** p_i)``
    (``p`` the target law at the token's parent); the longest path wins (ties: largest product of
    ``p(x)`` over the accepted tokens, then the first path); emit its accepted tokens, then ``argmax p``.

    >>> typical_acceptance_medusa().name
    'typical_acceptance_medusa(9/100, 3/10)'
    """
    eps = to_rational(posterior_threshold, "typical_acceptance_medusa posterior_threshold must be a rational")
    alpha = to_rational(posterior_alpha, "typical_acceptance_medusa posterior_alpha must be a rational")
    if eps < 0 or alpha < 0:
        raise InvalidValue("typical_acceptance_medusa parameters must be >= 0")

    def _typical_acceptance_medusa(step: TreeStep, rng: Rng) -> Iterator[int]:
        e, al, shift = step.number(eps), step.number(alpha), step.number(MEDUSA_ENTROPY_SHIFT)
        paths: list[list[int]] = []

        def visit(node: int, nodes: list[int]) -> None:   # draws the whole tree, paths in order
            kids = list(step.children(node))
            if not kids:
                paths.append(nodes)
            for c in kids:
                visit(c, nodes + [c])
        visit(step.root, [])
        passes: dict[int, bool] = {}

        def ok(c: int) -> bool:
            if c not in passes:
                p = step.target(step.parent(c))
                px = p[step.token(c)]
                passes[c] = px > e or exceeds_medusa_threshold(px, p, al, shift)
            return passes[c]

        lengths = []
        for nodes in paths:
            n = 0
            while n < len(nodes) and ok(nodes[n]):
                n += 1
            lengths.append(n)
        longest = max(lengths)
        best = 0
        if longest:
            best_like = None
            for i, nodes in enumerate(paths):
                if lengths[i] != longest:
                    continue
                like = step.number(1)
                for c in nodes[:longest]:
                    like = like * step.target(step.parent(c))[step.token(c)]
                if best_like is None or like > best_like:
                    best, best_like = i, like
        node = step.root
        for c in paths[best][:longest]:
            yield step.accept(c)
            node = c
        yield argmax(step.target(node))

    return Rule(
        _typical_acceptance_medusa, name=f"typical_acceptance_medusa({eps}, {alpha})", family="tree", claim="biased",
        description=f"Medusa typical acceptance as medusa-llm 0.1 implements it: per path, the leading tokens with "
                    f"p(x) > min({eps}, {alpha} * exp(sum p log(p + 1e-5))); the longest path wins (ties: largest "
                    "likelihood, then the first path); emit it, then argmax p (no random draw)",
        reference=MEDUSA, params={"posterior_threshold": eps, "posterior_alpha": alpha}, marks_accepted=True)
