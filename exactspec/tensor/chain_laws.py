"""Per-step laws of chain rules at large vocabularies, as float64 tensor computations (torch, CPU or GPU).

Input: per-position target laws ``p [gamma + 1, V]`` and draft laws ``q [gamma, V]`` (optionally
batched: ``[B, gamma + 1, V]``, ``[B, gamma, V]``), the laws a step sees when they do not depend
on the drafted prefix (a per-position model). For every catalog chain rule the step law factors
into per-position pieces:

- ``s_j``: the law draft j is really drawn from (``q_j``, or the point mass on ``argmax q_j``);
- ``alpha_j(x)``: the probability of accepting draft ``x`` at position j;
- ``rej_j(y) = sum_x s_j(x) (1 - alpha_j(x)) rho_j(x)(y)``: the mass of rejecting at j and emitting y;
- the bonus law after ``gamma`` accepted drafts (``p_gamma``, or none).

From these, with ``a_j = sum_x s_j(x) alpha_j(x)``, the law of the accepted length is
``P(n) = prod_{i<n} a_i * (1 - a_n)`` (``prod_i a_i`` at n = gamma), the joint law of (n, emitted
correction or bonus token) is ``prod_{i<n} a_i * rej_n(y)`` (bonus: ``prod_i a_i * p_gamma(y)``),
and the token emitted at position j has law ``prod_{i<j} a_i * (s_j alpha_j + rej_j)``, to be
compared with ``p_j`` once normalised by the probability that position j is emitted. No loop
over tokens: every rule is a handful of vector operations over V.

>>> import torch
>>> p = torch.tensor([[0.6, 0.4], [0.5, 0.5]], dtype=torch.float64)
>>> q = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
>>> law = chain_step_laws("greedy_match_sampled", p, q)
>>> [round(x, 6) for x in law.position_marginals[0].tolist()]    # (4/5, 1/5): biased
[0.8, 0.2]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._device import best_device  # re-exported: exactspec.tensor.best_device
from ..errors import ExactSpecError, InvalidValue

__all__ = ["chain_step_laws", "TensorStepLaw", "TENSOR_CHAIN_RULES", "best_device"]

TINY = 2.0 ** -126


@dataclass
class TensorStepLaw:
    """Float64 laws of one step; each tensor has a leading batch dimension only if the inputs had one.

    ``accepted_length [gamma + 1]``: P(n drafts accepted); ``joint [gamma + 1, V]``: P(n accepted, then
    y emitted as the correction or bonus); ``position_marginals [gamma + 1, V]``: P(position j is
    emitted and is y); ``emitted [gamma + 1]``: P(position j is emitted); ``target``: the p_j.
    """

    rule: str
    batched: bool
    _length: Any
    _joint: Any
    _marg: Any
    _emitted: Any
    _target: Any

    def _out(self, x: Any) -> Any:
        return x if self.batched else x[0]

    @property
    def accepted_length(self) -> Any:
        return self._out(self._length)

    @property
    def joint(self) -> Any:
        return self._out(self._joint)

    @property
    def position_marginals(self) -> Any:
        return self._out(self._marg)

    @property
    def emitted(self) -> Any:
        return self._out(self._emitted)

    @property
    def target(self) -> Any:
        return self._out(self._target)

    @property
    def position_tv(self) -> Any:
        """TV between the law of the token at position j (given it is emitted) and p_j."""
        import torch
        cond = self._marg / self._emitted.clamp(min=1e-300).unsqueeze(-1)
        tv = 0.5 * (cond - self._target).abs().sum(-1)
        return self._out(torch.where(self._emitted > 0, tv, torch.zeros_like(tv)))

    @property
    def tv(self) -> Any:
        """The largest per-position TV of the step: 0 (to float64 rounding) for a lossless rule."""
        return self.position_tv.max(-1).values

    def worst_tokens(self, position: int = 0, k: int = 5, row: int = 0) -> list[tuple[int, float, float]]:
        """(token, P(token | position emitted), p_position(token)) for the k largest deviations."""
        cond = self._marg[row, position] / max(float(self._emitted[row, position]), 1e-300)
        diff = (cond - self._target[row, position]).abs()
        top = diff.topk(min(k, diff.numel())).indices.tolist()
        return [(t, float(cond[t]), float(self._target[row, position, t])) for t in top]


def _pieces(rule: str, p: Any, q: Any, sampling: str, claim: str, weight: float) -> tuple[Any, Any, Any, Any]:
    """(s, alpha, rej, bonus) with shapes [B, gamma, V] x3 and [B, V] or None.

    With point-mass claims the claimed law of draft x is the point mass on x, so the ratio is
    p(x) and the standard residual after rejecting x is p without x, renormalised; summed over x
    with weights c_x = s(x) (1 - alpha(x)) / (1 - p(x)) that is ``p(y) (C - c_y)``, C = sum c.
    """
    import torch
    gamma = q.shape[1]
    pj = p[:, :gamma]
    s = torch.zeros_like(q).scatter_(-1, q.argmax(-1, keepdim=True), 1.0) if sampling == "argmax" else q
    pm = claim == "point_mass"
    bonus = p[:, gamma]

    def ratio(num: Any, den: Any) -> Any:
        # min(1, num/den); den == 0: accept iff num > 0 (what float code computes: inf or nan)
        r = torch.where(den > 0, num / den.clamp(min=1e-300), (num > 0).to(num.dtype))
        return r.clamp(max=1.0)

    def residual(a: Any, b: Any, floor: float = 0.0) -> Any:
        d = (a - b).clamp(min=floor)
        return d / d.sum(-1, keepdim=True).clamp(min=1e-300)

    def without_x(c: Any) -> Any:
        """sum_x c_x * (p(y) [y != x]) for each y."""
        return pj * (c.sum(-1, keepdim=True) - c)

    if rule in ("speculative_sampling", "no_bonus", "resample_from_target", "tiny_clamp_residual",
                "unverified_first_draft", "ensemble"):
        if rule == "ensemble":
            rel = pj if pm else torch.where(q > 0, pj / q.clamp(min=1e-300), torch.full_like(pj, float("inf")))
            alpha = (1 - weight + weight * rel).clamp(max=1.0)
        else:
            alpha = pj.clone() if pm else ratio(pj, q)
        if rule == "unverified_first_draft":
            alpha = alpha.clone()
            alpha[:, 0] = 1.0
        lost = s * (1 - alpha)                                   # mass of rejecting each x
        if rule == "resample_from_target":
            rej = lost.sum(-1, keepdim=True) * pj
        elif pm and rule == "tiny_clamp_residual":
            c = lost / (1 - pj + TINY)
            rej = without_x(c) + TINY * c
        elif pm:
            rej = without_x(torch.where(pj < 1, lost / (1 - pj).clamp(min=1e-300), torch.zeros_like(lost)))
        else:
            rej = lost.sum(-1, keepdim=True) * residual(pj, q, TINY if rule == "tiny_clamp_residual" else 0.0)
        return s, alpha, rej, (None if rule == "no_bonus" else bonus)
    if rule in ("greedy_match", "greedy_match_sampled"):
        best = torch.zeros_like(pj).scatter_(-1, pj.argmax(-1, keepdim=True), 1.0)   # ties: lowest id
        reject_mass = (s * (1 - best)).sum(-1, keepdim=True)
        if rule == "greedy_match":
            return s, best, reject_mass * best, torch.zeros_like(bonus).scatter_(-1, bonus.argmax(-1, keepdim=True),
                                                                                 1.0)
        return s, best, reject_mass * pj, bonus
    if rule == "stale_draft_probs":
        if pm:
            raise ExactSpecError("stale_draft_probs with point-mass claims couples consecutive drafts: no per-position "
                                 "tensor form (use the exact engine)")
        stale = torch.cat([q[:, :1], q[:, :-1]], dim=1)          # position j >= 1 uses q_{j-1}
        alpha = ratio(pj, stale)
        return s, alpha, (s * (1 - alpha)).sum(-1, keepdim=True) * residual(pj, stale), bonus
    if rule == "sample_and_match":
        return s, pj, pj * (1 - s), bonus                     # sum_x s(x) p(y) [y != x] = p(y) (1 - s(y))
    raise InvalidValue(f"no tensor form for rule {rule!r}; tensor rules: {', '.join(TENSOR_CHAIN_RULES)}")


TENSOR_CHAIN_RULES = ("speculative_sampling", "greedy_match", "greedy_match_sampled", "resample_from_target",
                      "stale_draft_probs", "unverified_first_draft", "no_bonus", "tiny_clamp_residual",
                      "sample_and_match", "ensemble")


def chain_step_laws(rule: Any, target: Any, draft: Any, *, sampling: str = "sample", claim: str = "draft",
                    device: str | None = None) -> TensorStepLaw:
    """The float64 per-step laws of a catalog chain rule for per-position laws ``target``, ``draft``.

    ``rule`` is a catalog rule or its name (``ensemble(w)`` uses its weight); ``target`` is
    ``[gamma + 1, V]`` (or ``[B, gamma + 1, V]``), ``draft`` ``[gamma, V]`` (or batched);
    ``device`` defaults to :func:`best_device`.
    """
    import torch
    name = getattr(rule, "name", rule)
    weight = float(getattr(rule, "params", {}).get("weight", 0.5))
    base = name.split("(")[0]
    if base == "ensemble" and "(" in name and not hasattr(rule, "params"):
        from fractions import Fraction
        weight = float(Fraction(name[len("ensemble("):-1]))
    device = device or best_device()
    p = torch.as_tensor(target, dtype=torch.float64, device=device)
    q = torch.as_tensor(draft, dtype=torch.float64, device=device)
    batched = p.dim() == 3
    if not batched:
        p, q = p.unsqueeze(0), q.unsqueeze(0)
    if p.dim() != 3 or q.dim() != 3 or p.shape[0] != q.shape[0] or p.shape[2] != q.shape[2] \
            or p.shape[1] != q.shape[1] + 1:
        raise InvalidValue(f"chain_step_laws: target must be [B?, gamma + 1, V] and draft [B?, gamma, V]; got "
                           f"{tuple(p.shape)} and {tuple(q.shape)}")
    if sampling not in ("sample", "argmax") or claim not in ("draft", "point_mass"):
        raise InvalidValue("chain_step_laws: sampling must be sample|argmax and claim draft|point_mass")
    s, alpha, rej, bonus = _pieces(base, p, q, sampling, claim, weight)
    gamma = q.shape[1]
    accept = (s * alpha).sum(-1)                                            # a_j: [B, gamma]
    reach = torch.cat([torch.ones_like(accept[:, :1]), torch.cumprod(accept, dim=1)], dim=1)   # [B, gamma + 1]
    all_accepted = reach[:, gamma]
    length = torch.cat([reach[:, :gamma] * (1 - accept), all_accepted.unsqueeze(1)], dim=1)
    joint = torch.cat([reach[:, :gamma].unsqueeze(-1) * rej,
                       (all_accepted.unsqueeze(-1) * bonus).unsqueeze(1) if bonus is not None
                       else torch.zeros_like(p[:, :1])], dim=1)
    marg = torch.cat([reach[:, :gamma].unsqueeze(-1) * (s * alpha + rej),
                      (all_accepted.unsqueeze(-1) * bonus).unsqueeze(1) if bonus is not None
                      else torch.zeros_like(p[:, :1])], dim=1)
    emitted = marg.sum(-1)
    return TensorStepLaw(rule=name, batched=batched, _length=length, _joint=joint, _marg=marg, _emitted=emitted,
                         _target=p)
