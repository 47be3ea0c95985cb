"""Adapters for PyTorch samplers (need the ``audit`` extra): transformers-style and vLLM-style.

>>> transformers_chain.name, transformers_chain.family
('transformers', 'chain')
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..laws import memoised
from ..protocols import Rng, Step
from .base import Adapter
from .torch_rng import bind

__all__ = ["TransformersChainAdapter", "transformers_chain", "reference_transformers_style", "VllmChainAdapter",
           "vllm_chain", "reference_vllm_style"]


def reference_transformers_style(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                                 new_logits: Any) -> tuple[Any, Any]:
    """A correct Algorithm 1 with transformers' signature: one uniform per position, strict ``<``."""
    import torch
    drafts = candidate_input_ids[0, -candidate_length:]
    q = candidate_logits.softmax(dim=-1)[0]
    p = new_logits.softmax(dim=-1)[0]
    out = []
    for j in range(candidate_length):
        x = int(drafts[j])
        if torch.rand(1)[0] < p[j, x] / q[j, x]:
            out.append(x)
            continue
        residual = torch.clamp(p[j] - q[j], min=0)
        out.append(int(torch.multinomial(residual / residual.sum(), 1)[0]))
        return torch.tensor([out]), torch.tensor(j)
    out.append(int(torch.multinomial(p[candidate_length], 1)[0]))
    return torch.tensor([out]), torch.tensor(candidate_length)


class TransformersChainAdapter(Adapter):
    """``sampler(candidate_input_ids [1, n + gamma], candidate_logits [1, gamma, V], gamma,
    new_logits [1, gamma + 1, V], **kwargs) -> (valid_tokens [1, k], n_matches)``, the signature of
    ``transformers.generation.utils._speculative_sampling``; laws are handed over as float32 logits
    (``log p``, ``-inf`` where ``p = 0``)."""

    name = "transformers"
    family = "chain"
    needs_torch = True
    reference = staticmethod(reference_transformers_style)

    def __init__(self, **sampler_kwargs: Any) -> None:
        self.kwargs = sampler_kwargs

    @staticmethod
    def logits(law: tuple) -> Any:
        import torch
        def compute() -> Any:
            probs = torch.tensor([float(x) for x in law], dtype=torch.float32)
            return torch.log(probs)
        return memoised("float32 logits", law, None, compute)

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        import torch
        drafts = step.drafts
        cand_logits = torch.stack([self.logits(step.claimed(j)) for j in range(step.gamma)])[None]
        new_logits = torch.stack([self.logits(step.target(j)) for j in range(step.gamma + 1)])[None]
        ids = torch.tensor([list(drafts)], dtype=torch.long)
        kwargs = self.kwargs if sampler is not self.reference else {}
        with bind(rng):
            valid, _ = sampler(ids, cand_logits, step.gamma, new_logits, **kwargs)
        return self.tokens(np.asarray(valid))


transformers_chain = TransformersChainAdapter()


def reference_vllm_style(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """A correct batched rejection sampler with a vLLM-style signature (own code).

    ``target_probs`` and ``draft_probs`` are ``[B, k, V]``, ``draft_token_ids`` ``[B, k]``,
    ``bonus_token_ids`` ``[B, 1]``; returns ``[B, k + 1]`` token ids, ``-1`` after the first
    rejection's recovered token. The recovered token is an exponential race over the residual.
    """
    import torch
    batch, k, _ = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    p_x = target_probs.gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    accepted = torch.rand(batch, k) < p_x / q_x
    residual = torch.clamp(target_probs - draft_probs, min=0)
    residual = residual / residual.sum(-1, keepdim=True).clamp(min=torch.finfo(residual.dtype).tiny)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        row = accepted[b].tolist()
        n = row.index(False) if False in row else k
        out[b, :n] = draft_token_ids[b, :n]
        if n == k:
            out[b, k] = bonus_token_ids[b, 0]
        else:
            race = residual[b, n] / torch.empty_like(residual[b, n]).exponential_(1.0)
            out[b, n] = race.argmax(dim=-1)
    return out


class VllmChainAdapter(Adapter):
    """``sampler(target_probs [B, k, V], draft_probs [B, k, V], draft_token_ids [B, k], bonus_token_ids [B, 1])
    -> [B, k + 1]`` token ids padded with ``-1``: a vLLM-style batched rejection sampler, called with
    ``B = 1``; laws are float32 probabilities, and the bonus token is drawn from the target law at
    the bonus position before the call, as the serving engine does."""

    name = "vllm"
    family = "chain"
    needs_torch = True
    reference = staticmethod(reference_vllm_style)

    @staticmethod
    def probs(law: tuple) -> Any:
        import torch
        return memoised("float32 probs", law, None,
                        lambda: torch.tensor([float(x) for x in law], dtype=torch.float32))

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        import torch
        drafts = step.drafts
        target = torch.stack([self.probs(step.target(j)) for j in range(step.gamma)])[None]
        draft = torch.stack([self.probs(step.claimed(j)) for j in range(step.gamma)])[None]
        bonus = rng.categorical(step.target(step.gamma))
        with bind(rng):
            out = sampler(target, draft, torch.tensor([list(drafts)], dtype=torch.long),
                          torch.tensor([[bonus]], dtype=torch.long))
        return self.tokens(np.asarray(out))


vllm_chain = VllmChainAdapter()
