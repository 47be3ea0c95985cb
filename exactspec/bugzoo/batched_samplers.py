"""vLLM-style batched rejection samplers, written vectorised as serving code is, with bugs in how positions combine.

Own code. Signature of the ``vllm`` adapter and of :func:`exactspec.tensor.audit_batched_sampler`:
``(target_probs [B, k, V], draft_probs [B, k, V], draft_token_ids [B, k], bonus_token_ids [B, 1])
-> [B, k + 1]`` padded with -1. :func:`correct` is the fix of every bug here. Each bug changes only
how the ``k`` accept/reject decisions of a row combine into its output (or which row a value is read
from), so an audit calling the sampler with one position per call cannot see it.

torch is imported inside the samplers, so importing this module works without torch.

>>> [f.__name__ for f, fix, what in ZOO]
['prefix_counts_all_accepted', 'bonus_after_rejection', 'no_all_accepted_fixup', 'bonus_from_wrong_row', 'row0_probs']
"""

from __future__ import annotations

from typing import Any


def _decide(target_probs: Any, draft_probs: Any, draft_token_ids: Any) -> tuple[Any, Any]:
    """(accepted [B, k] bool, recovered [B, k]: the exponential-race draw from each position's residual)."""
    import torch
    idx = draft_token_ids.unsqueeze(-1)
    p_x = target_probs.gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    accepted = torch.rand(target_probs.shape[0], target_probs.shape[1]) < p_x / q_x
    residual = torch.clamp(target_probs - draft_probs, min=0)
    residual = residual / residual.sum(-1, keepdim=True).clamp(min=torch.finfo(residual.dtype).tiny)
    recovered = (residual / torch.empty_like(residual).exponential_(1.0)).argmax(dim=-1)   # exponential race
    return accepted, recovered


def _assemble(accepted: Any, recovered: Any, draft_token_ids: Any, bonus_token_ids: Any, n: Any,
              bonus_when: Any, bonus_col: Any = None, bonus_src: Any = None) -> Any:
    import torch
    batch, k = accepted.shape
    cols = torch.arange(k + 1).unsqueeze(0)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    drafts = torch.cat([draft_token_ids, torch.zeros(batch, 1, dtype=torch.long)], dim=1)
    out = torch.where(cols < n.unsqueeze(1), drafts, out)
    rec = torch.cat([recovered, torch.zeros(batch, 1, dtype=torch.long)], dim=1).gather(1, n.clamp(max=k).unsqueeze(1))
    out = torch.where((cols == n.unsqueeze(1)) & (n < k).unsqueeze(1), rec, out)
    bonus = bonus_token_ids[:, 0] if bonus_src is None else bonus_src
    col = torch.full_like(n, k) if bonus_col is None else bonus_col
    return torch.where((cols == col.unsqueeze(1)) & bonus_when.unsqueeze(1), bonus.unsqueeze(1), out)


def correct(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """The fix: n = the first rejected position (k when none), the recovered token there, the bonus only at n = k."""
    import torch
    accepted, recovered = _decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    rejected = ~accepted
    n = torch.where(rejected.any(1), rejected.int().argmax(1), torch.full_like(rejected[:, 0], k, dtype=torch.long))
    return _assemble(accepted, recovered, draft_token_ids, bonus_token_ids, n, n == k)


def prefix_counts_all_accepted(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """(a) The accepted prefix is the *number* of accepted positions, not the first rejection."""
    accepted, recovered = _decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    n = accepted.long().sum(1)
    return _assemble(accepted, recovered, draft_token_ids, bonus_token_ids, n, n == k)


def bonus_after_rejection(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """(b) After a rejection at n the recovered token is emitted, then the bonus token at n + 1."""
    import torch
    accepted, recovered = _decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    rejected = ~accepted
    n = torch.where(rejected.any(1), rejected.int().argmax(1), torch.full_like(rejected[:, 0], k, dtype=torch.long))
    return _assemble(accepted, recovered, draft_token_ids, bonus_token_ids, n, torch.ones_like(n, dtype=torch.bool),
                     bonus_col=torch.where(n == k, n, n + 1))


def no_all_accepted_fixup(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """(c) The all-accepted fix-up forgotten: the token after the accepted drafts is read at ``argmax(rejected)``,
    which is 0 when every draft was accepted, so an all-accepted row ends with position 0's recovered token instead
    of the bonus token (vLLM v0 sets ``limits[~rejected.any(1)] = k``; this code forgets it)."""
    import torch
    accepted, recovered = _decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    rejected = ~accepted
    first = rejected.int().argmax(1).long()                    # 0 when nothing was rejected: the missing fix-up
    n = torch.where(rejected.any(1), first, torch.full_like(first, k))
    out = _assemble(accepted, recovered, draft_token_ids, bonus_token_ids, n, torch.zeros_like(n, dtype=torch.bool))
    last = recovered.gather(1, first.unsqueeze(1))[:, 0]
    return torch.where((torch.arange(k + 1).unsqueeze(0) == k) & (n == k).unsqueeze(1), last.unsqueeze(1), out)


def bonus_from_wrong_row(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """(c') The all-accepted fix-up reads the bonus token of the next row (an off-by-one in a flattened index)."""
    import torch
    accepted, recovered = _decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    rejected = ~accepted
    n = torch.where(rejected.any(1), rejected.int().argmax(1), torch.full_like(rejected[:, 0], k, dtype=torch.long))
    shifted = torch.roll(bonus_token_ids[:, 0], shifts=-1)
    return _assemble(accepted, recovered, draft_token_ids, bonus_token_ids, n, n == k, bonus_src=shifted)


def row0_probs(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Reads row 0's probabilities for every row (right for a batch of one, wrong for rows > 0)."""
    batch = target_probs.shape[0]
    return correct(target_probs[:1].expand(batch, -1, -1), draft_probs[:1].expand(batch, -1, -1), draft_token_ids,
                   bonus_token_ids)


ZOO = [
    (prefix_counts_all_accepted, correct, "accepted prefix = number of accepted positions, not the first rejection"),
    (bonus_after_rejection, correct, "the bonus token emitted after a rejection"),
    (no_all_accepted_fixup, correct, "the all-accepted fix-up forgotten: an all-accepted row ends with position 0's "
                                     "recovered token instead of the bonus"),
    (bonus_from_wrong_row, correct, "the all-accepted fix-up takes the bonus token of another row"),
    (row0_probs, correct, "every row reads row 0's probabilities"),
]
