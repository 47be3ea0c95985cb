"""float32 torch samplers written the ways real code is, correct and subtly biased (own code): the float boundary.

Correct float32 code rounds (TV ~1e-8), and rounds differently from any one reference; an audit
must call it lossless up to float32 rounding, not biased. The biased ones carry an algorithmic
bias that stays at float64 (a ``1e-9`` epsilon, a bonus token drawn from the wrong position), so
the float64 run shows it whatever float32 rounding hides. See
:mod:`exactspec.samplers.rounding`.

Signatures: ``vllm`` adapter ``(target_probs [B, k, V], draft_probs [B, k, V], draft_token_ids
[B, k], bonus_token_ids [B, 1]) -> [B, k + 1]`` padded with -1; ``transformers`` adapter
``(candidate_input_ids, candidate_logits [1, k, V], k, new_logits [1, k + 1, V]) -> (tokens
[1, n], n_matches)``. Every sampler computes in the dtype it is handed. torch is imported inside
the samplers, so importing this module needs no torch.

>>> [f.__name__ for f, adapter, claim in ZOO][:2]
['gumbel_residual', 'topk_multinomial']
"""

from __future__ import annotations

from typing import Any, Callable

from .torch_samplers import chain as _chain


def gumbel_residual(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct: the recovered token by Gumbel-max over the residual's log weights (float32 logs)."""
    import torch

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0)
        gumbel = -torch.log(-torch.log(torch.rand(residual.shape[-1])))
        return torch.argmax(torch.log(residual) + gumbel)
    return _chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


def topk_multinomial(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct: the recovered token drawn by ``torch.multinomial`` among the residual's positive entries (top-k)."""
    import torch

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0)
        values, ids = torch.topk(residual, int((residual > 0).sum()))
        return ids[torch.multinomial(values / values.sum(), 1)[0]]
    return _chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


def cumprod_acceptance(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, vLLM v0's shape: acceptance by ``cumprod`` of the accept mask, a recovered token drawn by
    ``torch.multinomial`` at every position, the first rejection's kept."""
    import torch
    batch, k, vocab = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    p_x = target_probs.gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    accepted = (torch.rand(batch, k) < p_x / q_x).long()
    n_accepted = accepted.cumprod(dim=-1).sum(dim=-1)
    residual = torch.clamp(target_probs - draft_probs, min=0)
    safe = torch.where(residual.sum(-1, keepdim=True) > 0, residual, torch.ones_like(residual))
    recovered = torch.multinomial(safe.reshape(batch * k, vocab), 1).reshape(batch, k)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        n = int(n_accepted[b])
        out[b, :n] = draft_token_ids[b, :n]
        out[b, n] = bonus_token_ids[b, 0] if n == k else recovered[b, n]
    return out


def residual_epsilon(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Biased (algorithmic, ~1e-9): ``1e-9`` added to every residual entry "for stability", so tokens whose
    residual is 0 are recovered with positive probability; below float32 rounding at float32, plain at float64."""
    import torch

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0) + 1e-9
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return _chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


def _transformers_chain(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int, new_logits: Any,
                        probs: Callable[[Any], Any], bonus_at: Callable[[int], int]) -> tuple[Any, Any]:
    import torch
    drafts = candidate_input_ids[0, -candidate_length:]
    q = probs(candidate_logits[0])
    p = probs(new_logits[0])
    out = []
    for j in range(candidate_length):
        x = int(drafts[j])
        if torch.rand(1)[0] < p[j, x] / q[j, x]:
            out.append(x)
            continue
        residual = torch.clamp(p[j] - q[j], min=0)
        out.append(int(torch.multinomial(residual / residual.sum(), 1)[0]))
        return torch.tensor([out]), torch.tensor(j)
    out.append(int(torch.multinomial(p[bonus_at(candidate_length)], 1)[0]))
    return torch.tensor([out]), torch.tensor(candidate_length)


def nan_to_num_logits(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                      new_logits: Any) -> tuple[Any, Any]:
    """Correct: ``-inf`` logits replaced by ``-1e4`` before the softmax (its exp is 0 in float32 and float64)."""
    import torch

    def probs(logits: Any) -> Any:
        return torch.nan_to_num(logits, neginf=-1e4).softmax(dim=-1)
    return _transformers_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits, probs,
                               lambda k: k)


def bonus_from_first_position(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                              new_logits: Any) -> tuple[Any, Any]:
    """Biased (algorithmic): the bonus token is drawn from the target law at the first drafted position instead
    of the bonus position; invisible when the target law does not change with the position."""
    return _transformers_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                               lambda logits: logits.softmax(dim=-1), lambda k: 0)


def mss_from_logits(candidates: Any, logits: Any, tree: Any) -> list[int]:
    """Correct (``torch-tree`` adapter): SpecInfer's multi-step speculative sampling with the target laws taken
    from the tree's logits by a softmax and acceptance written ``u * q(x) < r(x)`` (no division)."""
    import torch
    tokens = tree.tree_candidates[0]
    node, out = 0, []
    while True:
        r = tree.tree_logits[0, node].softmax(dim=-1)
        for c in tree.buffers.children(node):
            x, q = int(tokens[c]), tree.claimed[c]
            if torch.rand(1)[0] * q[x] < r[x]:
                out.append(x)
                node = c
                break
            rest = torch.clamp(r - q, min=0)
            if not rest.sum() > 0:      # r == q up to rounding: the rejection is rounding's; accept
                out.append(x)
                node = c
                break
            r = rest / rest.sum()
        else:
            out.append(int(torch.multinomial(r, 1)[0]))
            return out


#: (sampler, adapter, what an audit must say)
ZOO = [
    (gumbel_residual, "vllm", "lossless"),
    (topk_multinomial, "vllm", "lossless"),
    (cumprod_acceptance, "vllm", "lossless"),
    (nan_to_num_logits, "transformers", "lossless"),
    (residual_epsilon, "vllm", "biased"),
    (bonus_from_first_position, "transformers", "biased"),
]
