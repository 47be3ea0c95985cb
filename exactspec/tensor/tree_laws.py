"""Per-step laws of ``mss`` and ``naive_tree_sampling`` on trees of small width, as tensor computations.

With per-depth laws (the target ``p_j`` and draft ``q_j`` at depth j do not depend on the path),
every node at depth j sees the same laws, so the step reduces to one small loop over the width k
per depth, vectorised over V:

- ``mss`` with iid children told q (``children="iid", claim="draft"``): child i is accepted with
  token y with mass ``reach_i * q(y) min(1, r_{i-1}(y)/q(y))``; after a rejection the residual is
  ``r_i = norm(max(0, r_{i-1} - q))`` whichever token was rejected. With top-k children told point
  masses (``children="topk", claim="point_mass"``) child i has the fixed token t_i, accepted with
  probability ``r_{i-1}(t_i)``, and the residual removes t_i.
- ``naive_tree_sampling``: y ~ p_j is emitted; it moves down iff y is among the children:
  ``1 - (1 - q(y))**k`` for iid children, ``[y in top-k]`` for top-k.

The outputs have the shape of :func:`exactspec.tensor.chain_step_laws`'s (depth plays gamma).

>>> import torch
>>> p = torch.tensor([[0.25] * 4, [0.25] * 4], dtype=torch.float64)
>>> q = torch.tensor([[0.25] * 4], dtype=torch.float64)
>>> law = tree_step_laws("mss", p, q, width=2)
>>> round(float(law.accepted_length[1]), 6)       # two iid uniform proposals on a uniform target: 1
1.0
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidType, InvalidValue
from .chain_laws import TensorStepLaw, best_device

__all__ = ["tree_step_laws"]


def tree_step_laws(rule: Any, target: Any, draft: Any, *, width: int, children: str = "iid", claim: str = "draft",
                   device: str | None = None) -> TensorStepLaw:
    """Float64 per-step laws of ``mss`` / ``naive_tree_sampling`` on the expansion ``(width,) * depth``.

    ``target [depth + 1, V]``, ``draft [depth, V]`` (or batched with a leading B). Supported:
    ``mss`` with (iid, draft) or (topk, point_mass); ``naive_tree_sampling`` with iid or topk children.
    """
    import torch
    name = getattr(rule, "name", rule)
    if isinstance(width, bool) or not isinstance(width, int):
        raise InvalidType(f"tree_step_laws: width must be an int >= 1, got {width!r}")
    elif width < 1:
        raise InvalidValue(f"tree_step_laws: width must be an int >= 1, got {width!r}")
    device = device or best_device()
    p = torch.as_tensor(target, dtype=torch.float64, device=device)
    q = torch.as_tensor(draft, dtype=torch.float64, device=device)
    batched = p.dim() == 3
    if not batched:
        p, q = p.unsqueeze(0), q.unsqueeze(0)
    if p.dim() != 3 or q.dim() != 3 or p.shape[1] != q.shape[1] + 1 or p.shape[2] != q.shape[2]:
        raise InvalidValue(f"tree_step_laws: target must be [B?, depth + 1, V] and draft [B?, depth, V]; got "
                           f"{tuple(p.shape)} and {tuple(q.shape)}")
    depth = q.shape[1]
    cont, emit = [], []        # per depth: P(move down | reached) [B]; mass of (emit y and stop) [B, V]; marg [B, V]
    margs = []
    for j in range(depth):
        pj, qj = p[:, j], q[:, j]
        if name == "mss" and (children, claim) == ("iid", "draft"):
            r = pj
            reach = torch.ones_like(pj[:, 0])
            accepted = torch.zeros_like(pj)
            for _ in range(width):
                ratio = torch.where(qj > 0, r / qj.clamp(min=1e-300), (r > 0).to(r.dtype)).clamp(max=1.0)
                acc = qj * ratio
                accepted = accepted + reach.unsqueeze(-1) * acc
                reach = reach * (1 - acc.sum(-1))
                d = (r - qj).clamp(min=0)
                r = d / d.sum(-1, keepdim=True).clamp(min=1e-300)
            stop = reach.unsqueeze(-1) * r
        elif name == "mss" and (children, claim) == ("topk", "point_mass"):
            top = _topk(qj, width)
            r = pj
            reach = torch.ones_like(pj[:, 0])
            accepted = torch.zeros_like(pj)
            for i in range(top.shape[1]):
                t = top[:, i:i + 1]
                valid = (t >= 0)
                tt = t.clamp(min=0)
                a = r.gather(-1, tt) * valid                       # accept t_i w.p. r(t_i)
                accepted = accepted.scatter_add(-1, tt, reach.unsqueeze(-1) * a)
                reach = reach * (1 - a.squeeze(-1))
                d = r.scatter(-1, tt, torch.where(valid, torch.zeros_like(a), r.gather(-1, tt)))
                r = d / d.sum(-1, keepdim=True).clamp(min=1e-300)
            stop = reach.unsqueeze(-1) * r
        elif name == "naive_tree_sampling" and children in ("iid", "topk"):
            if children == "iid":
                hit = 1 - (1 - qj) ** width
            else:
                top = _topk(qj, width)
                hit = torch.zeros_like(qj).scatter_add_(-1, top.clamp(min=0), (top >= 0).to(qj.dtype))  # -1 pads add 0
            accepted = pj * hit
            stop = pj * (1 - hit)
        else:
            raise InvalidValue(f"no tensor tree form for {name!r} with children={children!r}, claim={claim!r}; "
                               "supported: mss (iid, draft) or (topk, point_mass); naive_tree_sampling (iid, topk)")
        cont.append(accepted.sum(-1))
        emit.append(stop)
        margs.append(accepted + stop)
    reach = torch.cat([torch.ones_like(p[:, :1, 0]), torch.cumprod(torch.stack(cont, 1), dim=1)], dim=1)
    bonus = p[:, depth]
    joint = torch.cat([reach[:, :depth].unsqueeze(-1) * torch.stack(emit, 1),
                       (reach[:, depth].unsqueeze(-1) * bonus).unsqueeze(1)], dim=1)
    marg = torch.cat([reach[:, :depth].unsqueeze(-1) * torch.stack(margs, 1),
                      (reach[:, depth].unsqueeze(-1) * bonus).unsqueeze(1)], dim=1)
    length = joint.sum(-1)
    return TensorStepLaw(rule=name, batched=batched, _length=length, _joint=joint, _marg=marg, _emitted=marg.sum(-1),
                         _target=p)


def _topk(q: Any, k: int) -> Any:
    """[B, k] ids of the k most likely tokens with positive probability (ties to the lowest id), -1 padded."""
    import torch
    vocab = q.shape[-1]
    # sort by (-q, id): a stable sort of -q keeps the lowest id first among ties
    order = torch.sort(-q, dim=-1, stable=True).indices[:, :min(k, vocab)]
    vals = q.gather(-1, order)
    order = torch.where(vals > 0, order, torch.full_like(order, -1))
    if order.shape[1] < k:
        order = torch.cat([order, torch.full((q.shape[0], k - order.shape[1]), -1, dtype=order.dtype,
                                             device=q.device)], dim=1)
    return order
