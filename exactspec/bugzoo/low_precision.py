"""Speculative samplers and loops computing in float32, float16 and bfloat16, correct and subtly biased (own code).

The yardstick of "right verdicts at every precision a serving engine uses" (issue 35): each entry is
written the way serving engines write it (softmax, ratio and residual in the model's dtype,
``.half()`` / ``.to(torch.bfloat16)`` / ``dtype=``, a temperature kept as a numpy scalar,
``torch.multinomial`` on 16-bit weights, exponential races, ``torch.distributions.Categorical``,
``torch.bernoulli``, vectorised acceptance with ``cumprod``, mixed casts) and carries a claim:
``"correct"`` (the algorithm is exact in exact arithmetic: an audit must read it lossless up to
rounding) or ``"buggy"`` (a small algorithmic bug that stays in exact arithmetic, or a precision bug
whose bias does not shrink with rounding: never lossless). The exact law of every entry on fixed
instances is derived independently of exactspec in ``tests/low_precision_truth.py``.

Signatures: the ``vllm`` adapter's ``(target_probs [B, k, V], draft_probs [B, k, V],
draft_token_ids [B, k], bonus_token_ids [B, 1]) -> [B, k + 1]`` padded with -1 (float32
probabilities handed over); the ``transformers`` adapter's ``(candidate_input_ids,
candidate_logits [1, k, V], k, new_logits [1, k + 1, V]) -> (tokens [1, n], n_matches)`` (float32
logits); the ``numpy`` adapter's ``(draft_ids [k], draft_probs [k, V], target_probs [k + 1, V],
rng) -> tokens`` (float64 arrays); loops ``(target, draft, prompt_ids) -> ids`` as
:func:`exactspec.audit_loop` runs them (audit them with ``dtype=`` the entry's dtype). Entries in
:data:`TEMPERATURE` sample at temperature 1/2: audit them with ``expected=es.models.sharpen(target, 2)``.

torch is imported inside the functions, so importing this module needs no torch.

>>> len(SAMPLERS) >= 30 and len(LOOPS) >= 6
True
>>> sorted({e.dtype for e in ZOO})
['bfloat16', 'float16', 'float32', 'numpy-float16', 'numpy-float32']
>>> e = by_name("f32_residual_eps")
>>> e.adapter, e.dtype, e.claim
('vllm', 'float32', 'buggy')
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["Entry", "ZOO", "SAMPLERS", "LOOPS", "TEMPERATURE", "LOOP_GAMMA", "LOOP_NEW_TOKENS", "by_name"]

#: tokens drafted per step by the loops
LOOP_GAMMA = 1
#: new tokens each loop generates (at least): the largest horizon of the default loop search
LOOP_NEW_TOKENS = 4


class Entry(NamedTuple):
    """One zoo entry: the function, its adapter (``"loop"`` for a whole loop), dtype, claim and what is wrong."""

    fn: Callable[..., Any]
    adapter: str
    dtype: str
    claim: str
    description: str

    @property
    def name(self) -> str:
        """The function's name."""
        return self.fn.__name__


# -- the vLLM-style chain: one uniform per draft, the first rejection's token recovered, the bonus token ---------

def _vllm(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any,
          accept: Callable[[Any, Any, int], Any], recover: Callable[[Any, Any], Any],
          bonus: Callable[[int, Any], Any] | None = None) -> Any:
    """Row by row, position by position: ``accept(p_j, q_j, x)`` (a truthy tensor), ``recover(p_j, q_j)`` a token,
    ``bonus(b, bonus_token_ids)`` the token after k accepted drafts (default: the adapter's bonus token)."""
    import torch
    batch, k, _ = target_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if bool(accept(target_probs[b, j], draft_probs[b, j], x)):
                out[b, j] = x
                continue
            out[b, j] = int(recover(target_probs[b, j], draft_probs[b, j]))
            break
        else:
            out[b, k] = int(bonus_token_ids[b, 0]) if bonus is None else int(bonus(b, target_probs))
    return out


def _race(weights: Any) -> Any:
    """The exponential race ``argmax(w / E)`` (vLLM's recovered-token draw): a draw from ``w / sum(w)``."""
    import torch
    return (weights / torch.empty_like(weights).exponential_(1.0)).argmax(dim=-1)


def f32_multinomial(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, float32: ``u < p(x) / q(x)``, the residual normalised and drawn by ``torch.multinomial``."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p[x] / q[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0)
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f16_half_ratio(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, float16: laws ``.half()``, the ratio in float16 compared with a float32 uniform, the float16
    residual drawn unnormalised by ``torch.multinomial``."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        ratio = p.half()[x] / q.half()[x]
        return torch.rand(1)[0] < ratio

    def recover(p: Any, q: Any) -> Any:
        return torch.multinomial(torch.clamp(p.half() - q.half(), min=0), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_multinomial(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, bfloat16 throughout: ratio, residual and its normalisation in bfloat16, ``torch.multinomial`` on the
    bfloat16 weights (as a bf16 serving engine calls it)."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p.to(bf) - q.to(bf), min=0)
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_exponential_race(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, bfloat16: the recovered token by the exponential race ``argmax(residual / E)`` on bf16 weights."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        return _race(torch.clamp(p.to(bf) - q.to(bf), min=0))
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_compute_f32_accept(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, mixed: ratio and residual computed in bfloat16, cast ``.float()`` to accept and to normalise."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        ratio = (p.to(bf) / q.to(bf)).float()
        return torch.rand(1)[0] < ratio[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p.to(bf) - q.to(bf), min=0).float()
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f16_cumprod_argmax(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, float16, vectorised (vLLM v0's shape): all positions accepted at once, the accepted prefix by
    ``cumprod``, a recovered token drawn at every position from the float16 residual and the first rejection's kept."""
    import torch
    batch, k, vocab = target_probs.shape
    p, q = target_probs.half(), draft_probs.half()
    idx = draft_token_ids.unsqueeze(-1)
    ratio = p.gather(-1, idx).squeeze(-1) / q.gather(-1, idx).squeeze(-1)
    accepted = (torch.rand(batch, k) < ratio).int()
    n_accepted = accepted.cumprod(dim=-1).sum(dim=-1)
    residual = torch.clamp(p - q, min=0).float()
    safe = torch.where(residual.sum(-1, keepdim=True) > 0, residual, torch.ones_like(residual))
    recovered = torch.multinomial(safe.reshape(batch * k, vocab), 1).reshape(batch, k)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        n = int(n_accepted[b])
        out[b, :n] = draft_token_ids[b, :n]
        out[b, n] = bonus_token_ids[b, 0] if n == k else recovered[b, n]
    return out


def bf16_bernoulli(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, bfloat16: acceptance by ``torch.bernoulli(min(1, p/q))`` on the bf16 ratio, the residual cast to
    float32 for ``torch.multinomial``."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.bernoulli(torch.clamp(p.to(bf)[x:x + 1] / q.to(bf)[x:x + 1], max=1))[0] == 1

    def recover(p: Any, q: Any) -> Any:
        return torch.multinomial(torch.clamp(p.to(bf) - q.to(bf), min=0).float(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f32_categorical(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, float32: the recovered token drawn by ``torch.distributions.Categorical(probs=residual)``."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p[x] / q[x]

    def recover(p: Any, q: Any) -> Any:
        return torch.distributions.Categorical(probs=torch.clamp(p - q, min=0)).sample()
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_log_race(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, bfloat16 weights: the recovered token by the race ``argmax(log(u) / w)`` (Gumbel-max's twin, on the
    weights themselves) over the bf16 residual cast to float32."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        w = torch.clamp(p.to(bf) - q.to(bf), min=0).float()
        return torch.argmax(torch.log(torch.rand(w.shape[-1])) / w)
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f32_searchsorted_right(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct, float32: the recovered token by inverse CDF, ``searchsorted(cumsum / cumsum[-1], u, right=True)``."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p[x] / q[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0)
        cdf = torch.cumsum(residual / residual.sum(), dim=-1)
        cdf = cdf / cdf[-1]
        return min(int(torch.searchsorted(cdf, torch.rand(1), right=True)[0]), residual.shape[-1] - 1)
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f32_residual_eps(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, float32: ``+ 1e-6`` "for stability" on every residual entry, so tokens whose residual is 0 are
    recovered with probability ~1e-6."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p[x] / q[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p - q, min=0) + 1e-6
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_residual_eps(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, bfloat16: ``+ 1e-4`` on the bf16 residual (the stability epsilon of a bf16 engine), ~1e-4 of the
    recovered mass on tokens whose residual is 0."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        residual = torch.clamp(p.to(bf) - q.to(bf), min=0) + 1e-4
        return torch.multinomial(residual.float(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def f16_accept_le(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, float16: ``u <= p(x) / q(x)`` instead of ``<``: differs only where ``u`` lands exactly on the
    ratio, and with ``u == 0`` (probability 2**-24) accepts a draft the target gives probability 0."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] <= p.half()[x] / q.half()[x]

    def recover(p: Any, q: Any) -> Any:
        return torch.multinomial(torch.clamp(p.half() - q.half(), min=0).float(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_residual_abs(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, bfloat16: the residual not clamped at 0 but taken as ``|p - q|``: tokens where ``q > p`` get mass."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        return torch.multinomial((p.to(bf) - q.to(bf)).abs().float(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_bonus_from_last_draft(target_probs: Any, draft_probs: Any, draft_token_ids: Any,
                               bonus_token_ids: Any) -> Any:
    """Buggy, bfloat16: the bonus token drawn from the target law at the last draft position (``target_probs[:,
    k - 1]``) instead of the bonus position; invisible when the target's law does not change with the position."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        return _race(torch.clamp(p.to(bf) - q.to(bf), min=0))

    def bonus(b: Any, target: Any) -> Any:
        return torch.multinomial(target[b, -1].to(bf).float(), 1)[0]
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover, bonus)


def f16_residual_wrong_sum(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, float16: the residual normalised by the target's sum instead of its own, drawn by inverse CDF; the
    CDF ends below 1 and the uniforms past it land on the last token."""
    import torch

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.half()[x] / q.half()[x]

    def recover(p: Any, q: Any) -> Any:
        p16 = p.half()
        residual = torch.clamp(p16 - q.half(), min=0)
        cdf = torch.cumsum(residual / p16.sum(), dim=-1)
        return min(int(torch.searchsorted(cdf.float(), torch.rand(1), right=True)[0]), p16.shape[-1] - 1)
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def bf16_resample_target(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, bfloat16: after a rejection the token is drawn from the target law (exponential race) instead of the
    residual."""
    import torch
    bf = torch.bfloat16

    def accept(p: Any, q: Any, x: int) -> Any:
        return torch.rand(1)[0] < p.to(bf)[x] / q.to(bf)[x]

    def recover(p: Any, q: Any) -> Any:
        return _race(p.to(bf))
    return _vllm(target_probs, draft_probs, draft_token_ids, bonus_token_ids, accept, recover)


def _bf16_uniforms(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any,
                   accept: Callable[[Any, Any], Any]) -> Any:
    """vLLM-style verification in bfloat16 with its acceptance uniforms drawn in bfloat16 too."""
    import torch
    bf = torch.bfloat16
    batch, k, _ = target_probs.shape
    u = torch.rand(batch, k, dtype=bf)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        for j in range(k):
            x = int(draft_token_ids[b, j])
            p, q = target_probs[b, j].to(bf), draft_probs[b, j].to(bf)
            if accept(u[b, j], p[x] / q[x]):
                out[b, j] = x
                continue
            out[b, j] = int(_race(torch.clamp(p - q, min=0)))
            break
        else:
            out[b, k] = bonus_token_ids[b, 0]
    return out


def bf16_uniforms(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Correct up to bfloat16 rounding: the acceptance uniforms drawn in bfloat16 (``torch.rand(B, k,
    dtype=torch.bfloat16)``), a coin off by up to ~2**-9, as rounding the laws to bfloat16 is. A generator's
    precision is its rng model's (the float64 run draws these at float64): the generator's rounding, not bias."""
    return _bf16_uniforms(target_probs, draft_probs, draft_token_ids, bonus_token_ids, lambda u, r: u < r)


def bf16_uniforms_accept_le(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, bfloat16: as :func:`bf16_uniforms` with ``u <= p/q``: a bfloat16 uniform is exactly 0 with probability
    32769 * 2**-24 (about 2**-9), so a draft the target never emits is accepted that often."""
    return _bf16_uniforms(target_probs, draft_probs, draft_token_ids, bonus_token_ids, lambda u, r: u <= r)


def f16_sum_not_cumprod(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """Buggy, float16, vectorised: the accepted prefix counted by ``accepted.sum()`` instead of ``cumprod``, so a
    draft accepted after a rejected one extends the prefix past the rejection (needs gamma >= 2)."""
    import torch
    batch, k, vocab = target_probs.shape
    p, q = target_probs.half(), draft_probs.half()
    idx = draft_token_ids.unsqueeze(-1)
    ratio = p.gather(-1, idx).squeeze(-1) / q.gather(-1, idx).squeeze(-1)
    accepted = (torch.rand(batch, k) < ratio).int()
    n_accepted = accepted.sum(dim=-1)
    residual = torch.clamp(p - q, min=0).float()
    safe = torch.where(residual.sum(-1, keepdim=True) > 0, residual, torch.ones_like(residual))
    recovered = torch.multinomial(safe.reshape(batch * k, vocab), 1).reshape(batch, k)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        n = int(n_accepted[b])
        out[b, :n] = draft_token_ids[b, :n]
        out[b, n] = bonus_token_ids[b, 0] if n == k else recovered[b, n]
    return out


# -- numpy (float64 arrays handed over; the sampler casts to float32 / float16) ------------------------------------

def _choice(rng: Any, law: np.ndarray) -> int:
    return int(rng.choice(law.shape[-1], p=law / law.sum()))


def np32_item_compare(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Correct, numpy float32: laws stored ``astype(np.float32)``, the ratio compared as a Python float
    (``.item()``), the float32 residual drawn by ``rng.choice``."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < (p32[j, x] / q32[j, x]).item():
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p32[j] - q32[j], np.float32(0))))
        return out
    out.append(_choice(rng, p32[-1]))
    return out


def np16_choice(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Correct, numpy float16: laws ``astype(np.float16)``, ratio and residual in float16, ``rng.choice`` on the
    float16 residual normalised in float16."""
    p16, q16 = target_probs.astype(np.float16), draft_probs.astype(np.float16)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < float(p16[j, x] / q16[j, x]):
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p16[j] - q16[j], np.float16(0))))
        return out
    out.append(_choice(rng, p16[-1]))
    return out


#: the temperature the tempered numpy samplers keep, as a numpy scalar
_T = np.float32(0.5)


def np32_temperature(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Correct at temperature 1/2 (kept as ``np.float32(0.5)``), numpy float32: the target's laws tempered
    ``p ** (1 / T)`` and renormalised in float32; the draft's law, the one the drafts were sampled from, untouched."""
    p = target_probs.astype(np.float32) ** (1 / _T)
    p = p / p.sum(axis=-1, keepdims=True)
    q32 = draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < (p[j, x] / q32[j, x]).item():
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p[j] - q32[j], np.float32(0))))
        return out
    out.append(_choice(rng, p[-1]))
    return out


def np32_shared_uniform(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Buggy, numpy float32: the acceptance uniform reused for the inverse-CDF draw of the recovered token (after a
    rejection it is known to be >= the ratio, so the residual draw is skewed to its last tokens)."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        u = rng.random()
        if u < (p32[j, x] / q32[j, x]).item():
            out.append(int(x))
            continue
        residual = np.maximum(p32[j] - q32[j], np.float32(0))
        cdf = np.cumsum(residual / residual.sum())
        out.append(min(int(np.searchsorted(cdf, u, side="right")), len(cdf) - 1))
        return out
    out.append(_choice(rng, p32[-1]))
    return out


def np16_temperature_both(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Buggy at temperature 1/2 (``np.float32(0.5)``, float16 laws): the draft's law tempered too, though the drafts
    were sampled from the untempered draft (temperature applied to the wrong side, vllm-project/vllm#9834)."""
    p16, q16 = target_probs.astype(np.float16), draft_probs.astype(np.float16)
    p = p16 ** (1 / _T)
    p = p / p.sum(axis=-1, keepdims=True)
    q = q16 ** (1 / _T)
    q = q / q.sum(axis=-1, keepdims=True)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < (p[j, x] / q[j, x]).item():
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p[j] - q[j], np.float32(0))))
        return out
    out.append(_choice(rng, p[-1]))
    return out


def np32_accept_le(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Buggy, numpy float32: ``u <= p(x) / q(x)``: numpy's generator returns 0 (probability 2**-53), and then a
    draft the target gives probability 0 is accepted."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() <= (p32[j, x] / q32[j, x]).item():
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p32[j] - q32[j], np.float32(0))))
        return out
    out.append(_choice(rng, p32[-1]))
    return out


def np16_residual_eps(draft_ids: Any, draft_probs: Any, target_probs: Any, rng: Any) -> list[int]:
    """Buggy, numpy float16: ``+ 1e-4`` on the float16 residual before ``rng.choice``."""
    p16, q16 = target_probs.astype(np.float16), draft_probs.astype(np.float16)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < float(p16[j, x] / q16[j, x]):
            out.append(int(x))
            continue
        out.append(_choice(rng, np.maximum(p16[j] - q16[j], np.float16(0)) + 1e-4))
        return out
    out.append(_choice(rng, p16[-1]))
    return out


# -- transformers' signature (float32 logits handed over) ----------------------------------------------------------

def _hf(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int, new_logits: Any,
        probs: Callable[[Any], Any], draw: Callable[[Any], Any], bonus_row: Callable[[Any, Any, int], Any],
        residual_row: Callable[[Any, int], Any] | None = None) -> tuple[Any, Any]:
    """transformers' ``_speculative_sampling`` shape: ``probs`` turns logits into laws, ``draw`` draws from weights,
    ``bonus_row(p, new_logits, k)`` is the bonus law, ``residual_row(p, j)`` the target row the residual uses."""
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
        row = p[j] if residual_row is None else residual_row(p, j)
        out.append(int(draw(torch.clamp(row - q[j], min=0))))
        return torch.tensor([out]), torch.tensor(j)
    out.append(int(draw(bonus_row(p, new_logits, candidate_length))))
    return torch.tensor([out]), torch.tensor(candidate_length)


def _multinomial_f32(w: Any) -> Any:
    import torch
    return torch.multinomial(w.float(), 1)[0]


def tf_f32_softmax(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                   new_logits: Any) -> tuple[Any, Any]:
    """Correct, float32: transformers' own shape (softmax of the float32 logits, strict ``<``, multinomial)."""
    return _hf(candidate_input_ids, candidate_logits, candidate_length, new_logits,
               lambda logits: logits.softmax(dim=-1), _multinomial_f32, lambda p, logits, k: p[k])


def tf_bf16_softmax(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                    new_logits: Any) -> tuple[Any, Any]:
    """Correct, bfloat16: the logits ``.to(torch.bfloat16)`` before the softmax (a bf16 model's laws), ratio and
    residual in bf16, drawn by ``torch.multinomial`` on the residual cast to float32."""
    import torch
    return _hf(candidate_input_ids, candidate_logits, candidate_length, new_logits,
               lambda logits: logits.to(torch.bfloat16).softmax(dim=-1), _multinomial_f32, lambda p, logits, k: p[k])


def tf_f16_softmax_dtype(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                         new_logits: Any) -> tuple[Any, Any]:
    """Correct, float16: ``torch.softmax(logits, -1, dtype=torch.float16)``, the recovered and bonus tokens by
    ``torch.distributions.Categorical``."""
    import torch

    def categorical(w: Any) -> Any:
        return torch.distributions.Categorical(probs=w.float()).sample()
    return _hf(candidate_input_ids, candidate_logits, candidate_length, new_logits,
               lambda logits: torch.softmax(logits, dim=-1, dtype=torch.float16), categorical,
               lambda p, logits, k: p[k])


def tf_bf16_bonus_from_last_draft(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                                  new_logits: Any) -> tuple[Any, Any]:
    """Buggy, bfloat16: the bonus token drawn from the target law at the last draft position (``p[k - 1]``)."""
    import torch
    return _hf(candidate_input_ids, candidate_logits, candidate_length, new_logits,
               lambda logits: logits.to(torch.bfloat16).softmax(dim=-1), _multinomial_f32,
               lambda p, logits, k: p[k - 1])


def tf_f16_bonus_untempered(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                            new_logits: Any) -> tuple[Any, Any]:
    """Buggy at temperature 1/2, float16: the target's logits divided by the temperature at the draft positions, but
    the bonus token drawn from the untempered target (temperature applied to one row only)."""
    import torch

    def bonus(p: Any, logits: Any, k: int) -> Any:
        return torch.softmax(logits[0, k], dim=-1, dtype=torch.float16)

    def probs_q(logits: Any) -> Any:
        return torch.softmax(logits, dim=-1, dtype=torch.float16)
    drafts_tempered = new_logits / 0.5
    return _hf(candidate_input_ids, candidate_logits, candidate_length, drafts_tempered,
               probs_q, _multinomial_f32, lambda p, logits, k: bonus(p, new_logits, k))


def tf_f32_residual_next_position(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                                  new_logits: Any) -> tuple[Any, Any]:
    """Buggy, float32: the residual after a rejection at position j built from the target row j + 1 (an
    off-by-one between the draft and target rows)."""
    return _hf(candidate_input_ids, candidate_logits, candidate_length, new_logits,
               lambda logits: logits.softmax(dim=-1), _multinomial_f32, lambda p, logits, k: p[k],
               lambda p, j: p[j + 1])


# -- whole loops (torch-lm stand-ins returning logits in the audit's dtype=) ------------------------------------

def _loop(target: Any, draft: Any, prompt: Any, *, probs: Callable[[Any], Any],
          sample_probs: Callable[[Any], Any] | None = None, residual: Callable[[Any, Any], Any],
          draw: Callable[[Any], Any], bonus_from_draft: bool = False) -> Any:
    """Speculative sampling, LOOP_GAMMA drafts per step, until LOOP_NEW_TOKENS new tokens: ``probs(logits)`` the
    laws verified with (target and draft), ``sample_probs`` the law drafts are sampled from (default ``probs``),
    ``residual(p, q)`` the weights recovered from, ``draw(w)`` one token ``[1]`` drawn from weights."""
    import torch
    sample_from = probs if sample_probs is None else sample_probs
    ids = prompt
    while ids.shape[1] - prompt.shape[1] < LOOP_NEW_TOKENS:
        drafted, qs = ids, []
        for _ in range(LOOP_GAMMA):
            logits = draft(drafted)[0, -1]
            qs.append(probs(logits))
            drafted = torch.cat([drafted, draw(sample_from(logits)).view(1, 1)], dim=1)
        n = ids.shape[1]
        ps = probs(target(drafted)[0, n - 1:])
        for i in range(LOOP_GAMMA):
            x = int(drafted[0, n + i])
            if torch.rand(1)[0] < ps[i, x] / qs[i][x]:
                continue
            fix = draw(residual(ps[i], qs[i])).view(1, 1)
            ids = torch.cat([drafted[:, :n + i], fix], dim=1)
            break
        else:
            law = probs(draft(drafted)[0, -1]) if bonus_from_draft else ps[LOOP_GAMMA]
            ids = torch.cat([drafted, draw(law).view(1, 1)], dim=1)
    return ids


def _mult(w: Any) -> Any:
    import torch
    return torch.multinomial(w, 1)


def _clamped(p: Any, q: Any) -> Any:
    import torch
    return torch.clamp(p - q, min=0)


def loop_bf16_multinomial(target: Any, draft: Any, prompt: Any) -> Any:
    """Correct loop, bfloat16 models: softmax, ratio and residual in bf16, ``torch.multinomial`` on bf16 weights."""
    return _loop(target, draft, prompt, probs=lambda logits: logits.softmax(-1), residual=_clamped, draw=_mult)


def loop_f16_mixed(target: Any, draft: Any, prompt: Any) -> Any:
    """Correct loop, float16 models: the softmax in float16, cast ``.float()`` for everything after it."""
    return _loop(target, draft, prompt, probs=lambda logits: logits.softmax(-1).float(), residual=_clamped,
                 draw=_mult)


def loop_f32_temperature_tensor(target: Any, draft: Any, prompt: Any) -> Any:
    """Correct loop at temperature 1/2, float32 models: logits cast ``.double()`` and divided by a float32 tensor
    temperature (the result float64), both models tempered."""
    import torch
    t = torch.tensor([0.5], dtype=torch.float32)
    return _loop(target, draft, prompt, probs=lambda logits: (logits.double() / t).softmax(-1), residual=_clamped,
                 draw=_mult)


def loop_bf16_residual_eps(target: Any, draft: Any, prompt: Any) -> Any:
    """Buggy loop, bfloat16 models: ``+ 1e-4`` on the bf16 residual, drawn after ``.float()``."""
    import torch
    return _loop(target, draft, prompt, probs=lambda logits: logits.softmax(-1),
                 residual=lambda p, q: torch.clamp(p - q, min=0) + 1e-4, draw=lambda w: _mult(w.float()))


def loop_f16_temperature_draft_only(target: Any, draft: Any, prompt: Any) -> Any:
    """Buggy loop at temperature 1/2, float16 models: the drafts sampled from the draft at temperature 1/2, but
    verified with the draft's untempered law (temperature applied on one side only, vllm-project/vllm#9834)."""
    return _loop(target, draft, prompt, probs=lambda logits: logits.softmax(-1).float(),
                 sample_probs=lambda logits: (logits / 0.5).softmax(-1).float(), residual=_clamped, draw=_mult)


def loop_f32_bonus_from_draft(target: Any, draft: Any, prompt: Any) -> Any:
    """Buggy loop, float32 models: the bonus token after an all-accepted step drawn from the draft's law."""
    return _loop(target, draft, prompt, probs=lambda logits: logits.softmax(-1), residual=_clamped, draw=_mult,
                 bonus_from_draft=True)


#: every entry: (function, adapter or "loop", dtype, claim, what is wrong or how it is written)
ZOO: list[Entry] = [
    # vLLM adapter (float32 probabilities handed over)
    Entry(f32_multinomial, "vllm", "float32", "correct", "plain float32 chain, residual by torch.multinomial"),
    Entry(f16_half_ratio, "vllm", "float16", "correct", ".half() laws, float16 ratio, multinomial on fp16 weights"),
    Entry(bf16_multinomial, "vllm", "bfloat16", "correct", "bf16 throughout, torch.multinomial on bf16 weights"),
    Entry(bf16_exponential_race, "vllm", "bfloat16", "correct", "bf16 residual, exponential race argmax(w / E)"),
    Entry(bf16_compute_f32_accept, "vllm", "bfloat16", "correct", "compute in bf16, accept and normalise in fp32"),
    Entry(f16_cumprod_argmax, "vllm", "float16", "correct", "vectorised fp16 acceptance, prefix by cumprod"),
    Entry(bf16_bernoulli, "vllm", "bfloat16", "correct", "torch.bernoulli(min(1, p/q)) on the bf16 ratio"),
    Entry(f32_categorical, "vllm", "float32", "correct", "residual drawn by torch.distributions.Categorical"),
    Entry(bf16_log_race, "vllm", "bfloat16", "correct", "race argmax(log(u) / w) over the bf16 residual"),
    Entry(f32_searchsorted_right, "vllm", "float32", "correct", "inverse CDF, searchsorted(right=True)"),
    Entry(f32_residual_eps, "vllm", "float32", "buggy", "+ 1e-6 stability epsilon on the float32 residual"),
    Entry(bf16_residual_eps, "vllm", "bfloat16", "buggy", "+ 1e-4 stability epsilon on the bf16 residual"),
    Entry(f16_accept_le, "vllm", "float16", "buggy", "u <= p/q: accepts p(x) = 0 drafts when u == 0"),
    Entry(bf16_residual_abs, "vllm", "bfloat16", "buggy", "residual not clamped: |p - q| instead of max(p - q, 0)"),
    Entry(bf16_bonus_from_last_draft, "vllm", "bfloat16", "buggy", "bonus drawn from the last draft position"),
    Entry(f16_residual_wrong_sum, "vllm", "float16", "buggy", "residual normalised by the target's sum, inverse CDF"),
    Entry(bf16_resample_target, "vllm", "bfloat16", "buggy", "recovered token drawn from the target, not the residual"),
    Entry(bf16_uniforms, "vllm", "bfloat16", "correct", "acceptance uniforms drawn in bfloat16: the generator's rounding"),
    Entry(bf16_uniforms_accept_le, "vllm", "bfloat16", "buggy", "bfloat16 uniforms and u <= p/q (P(u = 0) ~ 2**-9)"),
    Entry(f16_sum_not_cumprod, "vllm", "float16", "buggy", "accepted prefix by sum() instead of cumprod (gamma 2)"),
    # numpy adapter (float64 arrays handed over)
    Entry(np32_item_compare, "numpy", "numpy-float32", "correct", "float32 laws, ratio compared via .item()"),
    Entry(np16_choice, "numpy", "numpy-float16", "correct", "float16 laws and residual, rng.choice"),
    Entry(np32_temperature, "numpy", "numpy-float32", "correct", "temperature np.float32(0.5) on the target only"),
    Entry(np32_shared_uniform, "numpy", "numpy-float32", "buggy", "acceptance uniform reused for the residual draw"),
    Entry(np16_temperature_both, "numpy", "numpy-float16", "buggy", "temperature applied to the draft's law too"),
    Entry(np32_accept_le, "numpy", "numpy-float32", "buggy", "u <= p/q: accepts p(x) = 0 drafts when u == 0"),
    Entry(np16_residual_eps, "numpy", "numpy-float16", "buggy", "+ 1e-4 on the float16 residual"),
    # transformers adapter (float32 logits handed over)
    Entry(tf_f32_softmax, "transformers", "float32", "correct", "transformers' shape, float32 softmax, strict <"),
    Entry(tf_bf16_softmax, "transformers", "bfloat16", "correct", "logits .to(bfloat16) before the softmax"),
    Entry(tf_f16_softmax_dtype, "transformers", "float16", "correct", "softmax(dtype=float16), Categorical draws"),
    Entry(tf_bf16_bonus_from_last_draft, "transformers", "bfloat16", "buggy", "bonus drawn from p[k - 1], not p[k]"),
    Entry(tf_f16_bonus_untempered, "transformers", "float16", "buggy", "temperature 1/2 on every row but the bonus"),
    Entry(tf_f32_residual_next_position, "transformers", "float32", "buggy", "residual built from the target row j+1"),
    # whole loops (stand-ins' logits in the dtype)
    Entry(loop_bf16_multinomial, "loop", "bfloat16", "correct", "bf16 softmax, ratio, residual, multinomial"),
    Entry(loop_f16_mixed, "loop", "float16", "correct", "fp16 softmax cast .float() for the rest"),
    Entry(loop_f32_temperature_tensor, "loop", "float32", "correct", "temperature 1/2 as a float32 tensor, .double()"),
    Entry(loop_bf16_residual_eps, "loop", "bfloat16", "buggy", "+ 1e-4 on the bf16 residual"),
    Entry(loop_f16_temperature_draft_only, "loop", "float16", "buggy", "drafts sampled at T=1/2, verified untempered"),
    Entry(loop_f32_bonus_from_draft, "loop", "float32", "buggy", "bonus token drawn from the draft's law"),
]

#: the sampler entries (every adapter but "loop")
SAMPLERS = [e for e in ZOO if e.adapter != "loop"]
#: the whole-loop entries
LOOPS = [e for e in ZOO if e.adapter == "loop"]

#: entries that sample at a temperature: the exact law they claim is the target sharpened by this power
TEMPERATURE = {"np32_temperature": 2, "np16_temperature_both": 2, "tf_f16_bonus_untempered": 2,
               "loop_f32_temperature_tensor": 2}


def by_name(name: str) -> Entry:
    """The entry whose function is called ``name``.

    >>> by_name("bf16_multinomial").claim
    'correct'
    """
    for e in ZOO:
        if e.name == name:
            return e
    raise KeyError(name)
