"""The embedded default instance of ``exactspec check`` and builders for CLI instances.

Vocabulary 5, order-2 seeded rational tables (seed 0), a perturbed draft (seed 1), prompt
``(0, 1)``, gamma 4, 4 tokens.

>>> inst = default_instance()
>>> inst.target.vocab, inst.proposer.gamma, inst.prompt, inst.tokens
(5, 4, (0, 1), 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import drafts, models
from .errors import ExactSpecError
from .rules import Rule, catalog, speculative_sampling

__all__ = ["Instance", "default_instance", "make_instance", "check_cases"]


@dataclass(frozen=True)
class Instance:
    """Target, draft, proposer, prompt and number of tokens of one audit."""

    target: models.Model
    draft: models.Model
    proposer: Any
    prompt: tuple
    tokens: int


def make_instance(*, vocab: int = 5, order: int = 2, gamma: int = 4, tokens: int = 4, seed: int = 0,
                  sampling: str = "sample", claim: str = "draft", prompt: tuple | None = None) -> Instance:
    """A seeded instance: ``random_table(vocab, order, seed)`` target, ``perturbed(target, seed + 1)`` draft.

    The prompt defaults to ``(0, 1, ..., order - 1)`` (tokens taken modulo ``vocab``).

    >>> make_instance(vocab=3, order=1, gamma=2, tokens=3).prompt
    (0,)
    """
    for name, v, lo in (("vocab", vocab, 2), ("order", order, 0), ("gamma", gamma, 1), ("tokens", tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ExactSpecError(f"{name} must be an int >= {lo}, got {v!r}")
    target = models.random_table(vocab=vocab, order=order, seed=seed)
    draft = models.perturbed(target, seed=seed + 1)
    if prompt is None:
        prompt = tuple(i % vocab for i in range(order))
    return Instance(target, draft, drafts.chain(gamma, sampling=sampling, claim=claim), tuple(prompt), tokens)


def default_instance() -> Instance:
    """The instance ``exactspec check`` audits every catalog rule on."""
    return make_instance(vocab=5, order=2, gamma=4, tokens=4, seed=0)


def check_cases(instance: Instance | None = None) -> list[tuple[Rule, Any, str]]:
    """(rule, proposer, claim) for every configuration ``exactspec check`` audits.

    Every catalog rule with the instance's sampled chain, plus speculative_sampling with argmax
    drafts: scored with the soft draft law (biased: argmax drafts are not samples of q) and
    with point masses (lossless).

    >>> [(r.name, p.sampling, p.claim, c) for r, p, c in check_cases()][-2:]
    [('speculative_sampling', 'argmax', 'draft', 'biased'), ('speculative_sampling', 'argmax', 'point_mass', 'lossless')]
    """
    inst = instance or default_instance()
    gamma = inst.proposer.gamma
    cases = [(r, inst.proposer, r.claim) for r in catalog()]
    cases.append((speculative_sampling, drafts.chain(gamma, sampling="argmax", claim="draft"), "biased"))
    cases.append((speculative_sampling, drafts.chain(gamma, sampling="argmax", claim="point_mass"), "lossless"))
    return cases
