"""Kernels that take explicit uniform samples: the law recovered by locating breakpoints by bisection.

Some kernels (FlashInfer's chain speculative sampling, compiled CUDA code) cannot be intercepted:
they take a ``uniform_samples`` tensor and return tokens. :class:`FlashinferChainAdapter` treats
such a kernel as a function of its uniforms and recovers its exact law on a lattice of uniform
values (float32's ``k * 2**-24`` unless the audit's ``rng_model`` names another): coordinate by
coordinate, it bisects over the lattice, batched over rows, to find where the kernel's output
changes, then weighs each cell by its count of lattice points.

Assumptions, stated in every report: each uniform is used through thresholds (the output is
piecewise constant in it, with no pattern A-B-A), and where a uniform's thresholds lie depends
only on the uniforms before it (a chain kernel uses one coin per position, then one uniform for
the recovered or bonus token). Each coordinate is probed with two settings of the later ones.

>>> flashinfer_chain.name
'flashinfer'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

import numpy as np

from ..enumerate.rng import LATTICES
from ..protocols import Step
from .base import Adapter

__all__ = ["FlashinferChainAdapter", "flashinfer_chain", "reference_flashinfer_style"]


def reference_flashinfer_style(draft_probs: Any, draft_token_ids: Any, uniform_samples: Any,
                               target_probs: Any) -> Any:
    """A correct chain kernel with FlashInfer's argument order (own code), batched over rows.

    ``draft_probs [B, k, V]``, ``draft_token_ids [B, k]``, ``uniform_samples [B, k + 1]``,
    ``target_probs [B, k + 1, V]`` -> ``[B, k + 1]`` ids padded with -1. Position j accepts iff
    ``u_j * q(x) < p(x)``; the recovered or bonus token is the inverse CDF of the residual (or of
    the bonus law) at ``u_k``.
    """
    import torch
    batch, k, _ = draft_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        u = uniform_samples[b]
        n = k
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if u[j] * draft_probs[b, j, x] < target_probs[b, j, x]:
                out[b, j] = x
                continue
            n = j
            break
        law = target_probs[b, n] if n == k else torch.clamp(target_probs[b, n] - draft_probs[b, n], min=0)
        cdf = torch.cumsum(law, 0)
        out[b, n] = min(int(torch.searchsorted(cdf, u[k] * cdf[-1], right=True)), law.shape[0] - 1)
    return out


class FlashinferChainAdapter(Adapter):
    """``kernel(draft_probs [B, k, V], draft_token_ids [B, k], uniform_samples [B, k + 1], target_probs
    [B, k + 1, V]) -> [B, k + 1]`` (padded with -1): the law is recovered by bisection over the uniforms."""

    name = "flashinfer"
    family = "chain"
    needs_torch = True
    reference = staticmethod(reference_flashinfer_style)

    def resolution(self, rng_model: str) -> str:
        lat = LATTICES.get(rng_model, LATTICES["torch-float32"])
        return (f"uniform inputs on the lattice {lat.note}; breakpoints located exactly on it by bisection "
                f"(assumes threshold use, see exactspec.samplers.explicit_uniforms)")

    def call(self, sampler: Callable, step: Step, rng: Any) -> list[int]:
        import torch
        lat = rng.lattice or LATTICES["torch-float32"]
        k = step.gamma
        drafts = torch.tensor([list(step.drafts)], dtype=torch.long)
        q = torch.stack([torch.tensor(self.floats(step.claimed(j)), dtype=torch.float32) for j in range(k)])[None]
        p = torch.stack([torch.tensor(self.floats(step.target(j)), dtype=torch.float32)
                         for j in range(k + 1)])[None]
        m = k + 1
        value = np.vectorize(lambda kk: float(lat.offset + kk * lat.step))

        def run(points: np.ndarray) -> list[tuple]:
            """Outputs for a batch of lattice-index rows [R, m]."""
            rows = points.shape[0]
            u = torch.tensor(value(points), dtype=torch.float32)
            out = sampler(q.expand(rows, -1, -1), drafts.expand(rows, -1), u, p.expand(rows, -1, -1))
            return [tuple(int(t) for t in r if int(t) >= 0) for r in np.asarray(out)]

        law: dict[tuple, Fraction] = {}
        total = lat.kmax - lat.kmin + 1

        def explore(cells: list[tuple[int, int]], weight: Fraction) -> None:
            j = len(cells)
            if j == m:
                point = np.array([[(a + b) // 2 for a, b in cells]])
                out = run(point)[0]
                law[out] = law.get(out, Fraction(0)) + weight
                return
            cuts: set[int] = set()
            for frac in (Fraction(1, 3), Fraction(2, 3)):
                rest = [lat.kmin + int((total - 1) * frac)] * (m - j - 1)
                cuts |= _breakpoints(lambda ks: run(np.array([[(a + b) // 2 for a, b in cells] + [kk] + rest
                                                              for kk in ks])), lat.kmin, lat.kmax)
            edges = [lat.kmin] + sorted(cuts) + [lat.kmax + 1]
            for a, b in zip(edges, edges[1:]):
                explore(cells + [(a, b - 1)], weight * Fraction(b - a, total))

        explore([], Fraction(1))
        outputs = sorted(law)
        conv = rng._field.convert
        pick = rng.categorical(tuple(conv(law[o]) for o in outputs))
        return list(outputs[pick])


def _breakpoints(g: Callable[[list[int]], list[tuple]], lo: int, hi: int) -> set[int]:
    """Lattice indices c where g(c - 1) != g(c), found by bisection batched over all open intervals."""
    ends = g([lo, hi])
    pending = [(lo, hi, ends[0], ends[1])] if ends[0] != ends[1] else []
    cuts: set[int] = set()
    while pending:
        mids = [(a + b) // 2 for a, b, _, _ in pending]
        vals = g(mids)
        nxt = []
        for (a, b, ga, gb), mid, gm in zip(pending, mids, vals):
            for x, y, gx, gy in ((a, mid, ga, gm), (mid, b, gm, gb)):
                if gx == gy or x == y:
                    continue
                if y == x + 1:
                    cuts.add(y)
                else:
                    nxt.append((x, y, gx, gy))
        pending = nxt
    return cuts


flashinfer_chain = FlashinferChainAdapter()
