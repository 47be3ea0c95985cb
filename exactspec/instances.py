"""The embedded default instance of ``exactspec check`` and builders for CLI instances.

Vocabulary 5, order-2 seeded rational tables (seed 0), a perturbed draft (seed 1), prompt
``(0, 1)``, gamma 4, 6 tokens (every position of a first and a second step observed).

>>> inst = default_instance()
>>> inst.target.vocab, inst.proposer.gamma, inst.prompt, inst.tokens
(5, 4, (0, 1), 6)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from . import drafts, models
from .errors import InvalidType, InvalidValue
from .rules import Rule, catalog, speculative_sampling

__all__ = ["Instance", "CheckCase", "default_instance", "make_instance", "check_cases"]


@dataclass(frozen=True)
class Instance:
    """Target, draft, proposer, prompt and number of tokens of one audit."""

    target: models.Model
    draft: models.Model
    proposer: Any
    prompt: tuple[Any, ...]
    tokens: int


def make_instance(*, vocab: int = 5, order: int = 2, gamma: int = 4, tokens: int = 4, seed: int = 0,
                  sampling: str = "sample", claim: str = "draft", prompt: tuple[Any, ...] | None = None) -> Instance:
    """A seeded instance: ``random_table(vocab, order, seed)`` target, ``perturbed(target, seed + 1)`` draft.

    The prompt defaults to ``(0, 1, ..., order - 1)`` (tokens taken modulo ``vocab``).

    >>> make_instance(vocab=3, order=1, gamma=2, tokens=3).prompt
    (0,)
    """
    for name, v, lo in (("vocab", vocab, 2), ("order", order, 0), ("gamma", gamma, 1), ("tokens", tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidType(f"{name} must be an int >= {lo}, got {v!r}")
        elif v < lo:
            raise InvalidValue(f"{name} must be an int >= {lo}, got {v!r}")
    target = models.random_table(vocab=vocab, order=order, seed=seed)
    draft = models.perturbed(target, seed=seed + 1)
    if prompt is None:
        prompt = tuple(i % vocab for i in range(order))
    return Instance(target, draft, drafts.chain(gamma, sampling=sampling, claim=claim), tuple(prompt), tokens)


def default_instance() -> Instance:
    """The instance ``exactspec check`` audits every catalog rule on."""
    return make_instance(vocab=5, order=2, gamma=4, tokens=6, seed=0)


class CheckCase(NamedTuple):
    """One configuration ``exactspec check`` audits: a rule, a proposer, the claim, the tokens."""

    rule: Rule
    proposer: Any
    claim: str
    tokens: int


#: expansion and horizon of the tree configurations in ``exactspec check`` (depth + 2 tokens: every
#: position of a first and a second step observed)
CHECK_TREE_EXPANSION = (2, 1)
CHECK_TREE_TOKENS = len(CHECK_TREE_EXPANSION) + 2


def check_cases(instance: Instance | None = None) -> list[CheckCase]:
    """Every configuration ``exactspec check`` audits, with the claim each must bear out.

    A rule whose claim has a condition (``Rule.condition``) bears out the claim at the case's
    configuration (``Rule.claim_for``).

    Chains (the instance's gamma and tokens): every chain rule with sampled drafts, plus
    speculative_sampling with argmax drafts scored with the soft draft law (biased) and with
    point masses (lossless). Trees (expansion (2, 1), 3 tokens, same models and prompt): MSS with
    every honest claim (iid + draft, without replacement + renormalized, top-k + point mass,
    SpecInfer's merge of two draft models) and the dishonest ones (top-k + draft or renormalized,
    without replacement + draft), and every other tree rule.

    >>> [(c.rule.name, c.proposer.describe(), c.claim) for c in check_cases()][10:12]
    [('speculative_sampling', "chain(gamma=4, sampling='argmax', claim='draft')", 'biased'), ('speculative_sampling', "chain(gamma=4, sampling='argmax', claim='point_mass')", 'lossless')]
    """
    from .rules import TREE_RULES, mss, shared_coin_tree
    from .rules.chain import CHAIN_RULES
    from .rules.record import configuration
    inst = instance or default_instance()
    gamma, n = inst.proposer.gamma, inst.tokens

    def claim_at(r: Rule, proposer: Any, tokens: int) -> str:   # a conditional claim, at this configuration
        draft = inst.draft if proposer.family == "chain" or proposer.needs_draft() else None
        return r.claim_for(configuration(proposer, target=inst.target, draft=draft, tokens=tokens))

    cases = [CheckCase(r, inst.proposer, claim_at(r, inst.proposer, n), n) for r in CHAIN_RULES]
    cases.append(CheckCase(speculative_sampling, drafts.chain(gamma, sampling="argmax", claim="draft"), "biased", n))
    cases.append(CheckCase(speculative_sampling, drafts.chain(gamma, sampling="argmax", claim="point_mass"),
                           "lossless", n))
    e, t = CHECK_TREE_EXPANSION, CHECK_TREE_TOKENS
    second = models.perturbed(inst.target, seed=2)
    for children, claim, verdict in (("iid", "draft", "lossless"), ("without_replacement", "renormalized", "lossless"),
                                     ("topk", "point_mass", "lossless"), ("topk", "draft", "biased"),
                                     ("topk", "renormalized", "biased"), ("without_replacement", "draft", "biased")):
        cases.append(CheckCase(mss, drafts.tree(e, children=children, claim=claim), verdict, t))
    cases.append(CheckCase(mss, drafts.merge([inst.draft, second], gamma=len(e)), "lossless", t))
    topk = drafts.tree(e, children="topk", claim="point_mass")
    iid = drafts.tree(e, children="iid", claim="draft")
    for r in TREE_RULES:
        if r is not mss:
            prop = iid if r.name in ("naive_tree_sampling", "multi_sample_match") else topk
            cases.append(CheckCase(r, prop, claim_at(r, prop, t), t))
    cases.append(CheckCase(shared_coin_tree(1, "1/2"), topk, "biased", t))
    return cases
