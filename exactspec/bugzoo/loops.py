"""Whole speculative decoding loops, one correct and one with a bonus-token bug, for ``exactspec audit-loop``.

Each takes ``(target, draft, prompt_ids)`` -- two language models returning logits ``[1, T, V]``
(stand-ins, :func:`exactspec.stand_in`) and a LongTensor ``[1, n]`` -- and returns prompt +
continuation, at least :data:`NEW_TOKENS` new tokens, drafting :data:`GAMMA` tokens per step.
Audit one from any directory:

    exactspec audit-loop exactspec.bugzoo.loops:bonus_from_draft    # exit 1: biased, with a regression test

torch is imported inside the loops, so importing this module needs no torch.

>>> import exactspec as es
>>> p, q = es.models.context_free(("3/4", "1/4")), es.models.context_free(("1/2", "1/2"))
>>> es.audit_loop(speculative_sampling, target=p, draft=q, tokens=2).tv
Fraction(0, 1)
>>> es.audit_loop(bonus_from_draft, target=p, draft=q, tokens=2).tv   # P(accept) * TV(p, q) = (3/4) * (1/4)
Fraction(3, 16)
"""

from __future__ import annotations

from typing import Any

__all__ = ["speculative_sampling", "bonus_from_draft", "GAMMA", "NEW_TOKENS", "ZOO"]

#: tokens drafted per step
GAMMA = 1
#: new tokens each loop generates (at least): the largest horizon of the default loop search
NEW_TOKENS = 4


def _law(model: Any, ids: Any) -> Any:
    """The model's next-token law after ``ids`` (``[1, n]``), a vector of probabilities."""
    return model(ids)[0, -1].softmax(-1)


def _loop(target: Any, draft: Any, prompt: Any, bonus_from_draft: bool) -> Any:
    import torch
    ids = prompt
    while ids.shape[1] - prompt.shape[1] < NEW_TOKENS:
        drafted, q_laws = ids, []
        for _ in range(GAMMA):                        # draft GAMMA tokens from the draft model
            q = _law(draft, drafted)
            q_laws.append(q)
            drafted = torch.cat([drafted, torch.multinomial(q, 1).view(1, 1)], dim=1)
        n = ids.shape[1]
        p_rows = target(drafted)[0, n - 1:].softmax(-1)   # the target's law at each drafted position and after them
        for i in range(GAMMA):
            x = int(drafted[0, n + i])
            p, q = p_rows[i], q_laws[i]
            if torch.rand(1).item() < float(p[x] / q[x]):   # accept with probability min(1, p(x) / q(x))
                continue
            residual = torch.clamp(p - q, min=0)
            fix = torch.multinomial(residual / residual.sum(), 1).view(1, 1)
            ids = torch.cat([drafted[:, :n + i], fix], dim=1)
            break
        else:                                         # every draft accepted: one more token for free
            law = _law(draft, drafted) if bonus_from_draft else p_rows[GAMMA]
            ids = torch.cat([drafted, torch.multinomial(law, 1).view(1, 1)], dim=1)
    return ids


def speculative_sampling(target: Any, draft: Any, prompt: Any) -> Any:
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1) as a whole loop: lossless.

    >>> import exactspec as es
    >>> p, q = es.models.context_free(("1/2", "1/2")), es.models.context_free(("1", "0"))
    >>> es.audit_loop(speculative_sampling, target=p, draft=q, tokens=1).verdict
    'lossless'
    """
    return _loop(target, draft, prompt, bonus_from_draft=False)


def bonus_from_draft(target: Any, draft: Any, prompt: Any) -> Any:
    """The same loop, but the bonus token after an all-accepted step is drawn from the draft's law: biased.

    Every token right after a verification is right; the bonus is not, so a one-instance audit
    of ``GAMMA`` tokens cannot see the bug and a search over horizons finds it at ``GAMMA + 1``.

    >>> import exactspec as es
    >>> p, q = es.models.context_free(("1/2", "1/2")), es.models.context_free(("1", "0"))
    >>> es.audit_loop(bonus_from_draft, target=p, draft=q, tokens=1).verdict, es.audit_loop(
    ...     bonus_from_draft, target=p, draft=q, tokens=2).verdict
    ('lossless', 'biased')
    """
    return _loop(target, draft, prompt, bonus_from_draft=True)


#: (the biased loop, its fix, what is wrong)
ZOO = [(bonus_from_draft, speculative_sampling, "the bonus token is drawn from the draft instead of the target")]
