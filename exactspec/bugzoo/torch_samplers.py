"""Minimal vLLM-style torch samplers reproducing reported bug patterns (own code), with the fix.

Signature of the ``vllm`` adapter: ``(target_probs [B, k, V], draft_probs [B, k, V],
draft_token_ids [B, k], bonus_token_ids [B, 1]) -> [B, k + 1]`` padded with -1.

torch is imported inside the samplers, so importing this module (and collecting the package's
doctests) works without torch; calling a sampler needs it.
"""

from __future__ import annotations

from typing import Any, Callable

from exactspec.samplers.adapters.torch_adapters import reference_vllm_style as correct


def chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover, accept=None):
    """A vLLM-style chain verifier: one float32 uniform per draft, accepted while ``accept(u, p(x) / q(x))`` (default
    ``u < p(x) / q(x)``), the first rejection's token ``recover(p, q)``, the bonus token when all are accepted."""
    import torch
    batch, k, _ = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    p_x = target_probs.gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    u = torch.rand(batch, k)
    accepted = u < p_x / q_x if accept is None else accept(u, p_x / q_x)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        row = accepted[b].tolist()
        n = row.index(False) if False in row else k
        out[b, :n] = draft_token_ids[b, :n]
        if n == k:
            out[b, k] = bonus_token_ids[b, 0]
        else:
            out[b, n] = recover(target_probs[b, n], draft_probs[b, n])
    return out


def _run(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recovered_law):
    """:func:`chain` recovering by an exponential race over ``recovered_law(p, q)``."""
    def recover(p, q):
        import torch
        law = recovered_law(p, q)
        return (law / torch.empty_like(law).exponential_(1.0)).argmax(dim=-1)
    return chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


def tiny_clamp(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Recovered probabilities clamped at float32's tiny (vLLM v0's _get_recovered_probs)."""
    def law(p, q):
        import torch
        f = torch.clamp(p - q, min=torch.finfo(torch.float32).tiny)
        return f / f.sum()
    return _run(target_probs, draft_probs, draft_token_ids, bonus_token_ids, law)


def resample_target(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """A rejection resamples from the target law instead of the residual."""
    return _run(target_probs, draft_probs, draft_token_ids, bonus_token_ids, lambda p, q: p)


def ratio_not_below_uniform(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Acceptance written ``p/q >= u`` (non-strict) instead of ``u < p/q``: torch's float32 ``rand`` returns 0 with
    probability 2**-24, and then a draft the target gives probability 0 is accepted."""
    def recover(p, q):
        import torch
        f = torch.clamp(p - q, min=0)
        return torch.multinomial(f / f.sum(), 1)[0]
    return chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover,
                 accept=lambda u, ratio: ratio >= u)


def searchsorted_left(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """The recovered token drawn by ``torch.searchsorted(cumsum(f), u)`` (``right=False``): the first token whose
    cumulative probability is ``>= u``, so ``u == 0`` emits a leading token of probability 0 (fix:
    ``right=True``)."""
    def recover(p, q):
        import torch
        f = torch.clamp(p - q, min=0)
        cdf = torch.cumsum(f / f.sum(), dim=-1)
        cdf = cdf / cdf[-1]     # ends at 1.0 exactly, so u < 1 always lands on a token
        return torch.searchsorted(cdf, torch.rand(1))[0]
    return chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


#: (biased sampler, the correct sampler it departs from or None, what is wrong and where it was reported)
ZOO: list[tuple[Callable[..., Any], Callable[..., Any] | None, str]] = [
    (tiny_clamp, correct, "recovered probabilities clamped at float32 tiny: vLLM v0 rejection_sampler.py "
                          "(vllm-project/vllm#2336)"),
    (resample_target, correct, "resampling from the target after a rejection: ShopeeLLM/Spec-RL#14"),
    (ratio_not_below_uniform, correct, "acceptance p/q >= u (non-strict): torch's rand returns 0 (own example)"),
    (searchsorted_left, correct, "recovered token by torch.searchsorted(cumsum, u) with right=False: u == 0 emits a "
                                 "leading token of probability 0 (own example)"),
]


def flashinfer_accept_at_zero(draft_probs, draft_token_ids, uniform_samples, target_probs):
    """A FlashInfer-style kernel accepting with ``u * q(x) <= p(x)``: u = 0 accepts drafts of probability 0."""
    import torch
    batch, k, _ = draft_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        u = uniform_samples[b]
        n = k
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if u[j] * draft_probs[b, j, x] <= target_probs[b, j, x]:
                out[b, j] = x
                continue
            n = j
            break
        law = target_probs[b, n] if n == k else torch.clamp(target_probs[b, n] - draft_probs[b, n], min=0)
        cdf = torch.cumsum(law, 0)
        out[b, n] = min(int(torch.searchsorted(cdf, u[k] * cdf[-1], right=True)), law.shape[0] - 1)
    return out


ZOO.append((flashinfer_accept_at_zero, None, "u * q <= p in a kernel fed uniforms that include 0: "
                                             "sgl-project/sglang#35771's pattern, through explicit uniforms"))


def _race_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials, residual: bool):
    """Coins ``u * q(x) < p(x)`` from k uniforms; the recovered or bonus token by the race ``argmax(law / E)``."""
    import torch
    batch, k, _ = draft_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        n = k
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if uniform_samples[b, j] * draft_probs[b, j, x] < target_probs[b, j, x]:
                out[b, j] = x
                continue
            n = j
            break
        law = target_probs[b, n] if n == k or not residual else torch.clamp(target_probs[b, n] - draft_probs[b, n],
                                                                           min=0)
        out[b, n] = int((law / exponentials[b]).argmax())
    return out


def race_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials):
    """A kernel fed k uniforms and V exponentials per row (vLLM v1's shape), correct: the declarative
    adapter's example (``tensor_randomness(..., {"uniform_samples": "uniform k", "exponentials": "exponential V"})``)."""
    return _race_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials, residual=True)


def race_from_target(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials):
    """The same kernel with the bug: the recovered token races the target law, not the residual."""
    return _race_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials, residual=False)


def race_wrong_exponent(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials):
    """The race kernel with a wrong exponent: ``argmax(law / E**2)``, a draw from ``sqrt(law)`` normalised, not
    ``law`` (biased; the race is still ``argmax(w / E)`` with ``w = sqrt(law)``, so the declarative adapter follows it)."""
    return _race_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, exponentials ** 2,
                        residual=True)
