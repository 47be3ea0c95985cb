"""Adapters: turn one step into a third-party sampler's arguments, and its return value into tokens.

An adapter is an object with ``family`` ("chain" or "tree"), ``name``, ``reference`` (a
correct sampler with the same signature) and ``reference_rule`` (the catalog rule it implements:
the two together measure what floating-point rounding alone costs) and
``call(sampler, step, rng) -> list of emitted tokens``. Writing one takes a few lines::

    class MyAdapter(es.samplers.Adapter):
        name, family = "mine", "chain"

        def call(self, sampler, step, rng):
            drafts, q, p = self.chain_arrays(step)          # numpy: [gamma], [gamma, V], [gamma + 1, V]
            out = sampler(p, q, drafts, generator=es.samplers.EnumGenerator(rng))
            return self.tokens(out)                          # drop padding (negative ids)

Precision: the rounding baseline is the reference sampler run at the precision the sampler
computes in. An adapter that knows it sets ``precision = "float32"`` (or has a ``dtype``
attribute); otherwise the audit takes the coarsest float dtype it sees handed to the sampler or
compared with its uniforms. ``reference_at(precision)`` gives the reference at either precision
(``at_precision``: the reference with its float arguments cast); a custom adapter may override it
or pick ``reference_numpy_chain`` at ``"float32"`` or ``"float64"``, and may give a
``fast_reference(precision)`` rule with the same law (the transformers adapter does).
``call_key(step)`` says what a call depends on (drafts and laws), so calls with equal inputs are
enumerated once; an adapter whose ``call`` reads more of the step sets ``cacheable = False``.

>>> numpy_chain.name, numpy_chain.family
('numpy', 'chain')
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import numpy as np

from ...protocols import Rng, Step, TreeStep
from .base import Adapter
from ..randomness.interception import FLOAT64_LATTICE, native_uniform
from ..randomness.numpy_rng import EnumGenerator

__all__ = ["Adapter", "ADAPTER_NAMES", "NumpyChainAdapter", "numpy_chain", "reference_numpy_chain", "NumpyTreeAdapter", "numpy_tree",
           "reference_numpy_tree", "get_adapter", "ADAPTERS"]


def reference_numpy_chain(draft_ids: np.ndarray, draft_probs: np.ndarray, target_probs: np.ndarray,
                          rng: Any) -> list[int]:
    """A correct float64 rejection sampler (Leviathan et al. Algorithm 1), the reference for rounding.

    >>> import numpy as np
    >>> reference_numpy_chain(np.array([0]), np.array([[0.5, 0.5]]), np.array([[1.0, 0.0], [0.5, 0.5]]),
    ...                       np.random.default_rng(0))[0]
    0
    """
    out: list[int] = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
            continue
        residual = np.maximum(p - q, 0.0)
        out.append(int(rng.choice(len(p), p=residual / residual.sum())))
        return out
    out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
    return out


class NumpyChainAdapter(Adapter):
    """``sampler(draft_ids [gamma], draft_probs [gamma, V], target_probs [gamma + 1, V], rng)`` with a
    numpy-``Generator``-like ``rng``; returns the emitted token ids (padding with negatives allowed)."""

    name = "numpy"
    family = "chain"
    reference = staticmethod(reference_numpy_chain)

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        drafts, q, p = self.chain_arrays(step)
        return self.tokens(sampler(drafts, q, p, EnumGenerator(rng)))

    def fast_reference(self, precision: str) -> Callable[[Step, Rng], list[int]] | None:
        """``reference_numpy_chain`` at ``precision`` as a rule: its arithmetic (ratios, residuals) done once per
        input, its draws (``random``, ``choice``) made through the same :class:`EnumGenerator` code; None for a
        subclass that calls samplers differently.

        >>> import exactspec as es
        >>> from fractions import Fraction as F
        >>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
        >>> law = es.audit(rule=numpy_chain.fast_reference("float32"), target=p, draft=q,
        ...                proposer=es.drafts.chain(1), tokens=1, exact_floats=True).output
        >>> 0 < abs(law[(0,)] - F(3, 5)) < F(1, 10 ** 7)     # 3/5 up to float32 rounding
        True
        """
        if type(self).call is not NumpyChainAdapter.call or self.reference is not reference_numpy_chain:
            return None
        dtype = np.dtype(precision)
        #: call key -> (laws kept alive, drafts, ratios, target laws, draft laws, residual law per position)
        memo: dict[Hashable, tuple[Any, ...]] = {}

        def reference(step: Step, rng: Rng) -> list[int]:
            key, laws = self._keyed(step)
            hit = memo.get(key)
            if hit is None:
                ids, q, p = self.chain_arrays(step)
                q, p = q.astype(dtype), p.astype(dtype)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratios = [p[j][x] / q[j][x] for j, x in enumerate(ids)]
                hit = memo[key] = (laws, [int(x) for x in ids], ratios, p, q, {})
            _, drafts, ratios, p, q, residuals = hit
            gen = EnumGenerator(rng)
            out: list[int] = []
            for j, x in enumerate(drafts):
                if native_uniform(rng, FLOAT64_LATTICE, "numpy") < ratios[j]:     # Generator.random(): k * 2**-53
                    out.append(x)
                    continue
                if j not in residuals:
                    residual = np.maximum(p[j] - q[j], 0.0)
                    residuals[j] = residual / residual.sum()
                out.append(int(gen.choice(len(p[j]), p=residuals[j])))
                return out
            out.append(int(gen.choice(p.shape[1], p=p[-1])))
            return out
        return reference


numpy_chain = NumpyChainAdapter()
ADAPTERS: dict[str, Adapter] = {"numpy": numpy_chain}
#: every adapter name :func:`get_adapter` knows (the torch ones need torch), in the order messages list them
ADAPTER_NAMES = ("numpy", "numpy-tree", "transformers", "vllm", "flashinfer", "vllm-v1", "torch-tree", "sglang",
                 "sglang-tree-greedy")


def get_adapter(adapter: Any) -> Adapter:
    """An adapter by name ("numpy") or the adapter itself.

    >>> get_adapter("numpy") is numpy_chain
    True
    """
    from ...errors import ExactSpecError, InvalidType, InvalidValue
    if isinstance(adapter, Adapter):
        return adapter
    if adapter in ("transformers", "vllm", "flashinfer"):
        try:
            from .explicit_uniforms import flashinfer_chain
            from .torch_adapters import transformers_chain, vllm_chain
        except ImportError:
            raise ExactSpecError(f"the {adapter} adapter needs torch: pip install torch==2.13.0") from None
        return {"transformers": transformers_chain, "vllm": vllm_chain, "flashinfer": flashinfer_chain}[adapter]
    if adapter in ("sglang", "sglang-tree-greedy"):
        try:
            from .engines.sglang_kernels import sglang_chain, sglang_tree_greedy
        except ImportError:
            raise ExactSpecError(f"the {adapter} adapter needs torch: pip install torch==2.13.0") from None
        return sglang_chain if adapter == "sglang" else sglang_tree_greedy
    if adapter == "vllm-v1":
        try:
            from .engines.vllm_v1 import vllm_rejection
        except ImportError:
            raise ExactSpecError("the vllm-v1 adapter needs torch: pip install torch==2.13.0") from None
        return vllm_rejection
    if adapter == "torch-tree":
        try:
            from .torch_tree_adapter import torch_tree
        except ImportError:
            raise ExactSpecError("the torch-tree adapter needs torch: pip install torch==2.13.0") from None
        return torch_tree
    try:
        return ADAPTERS[adapter]
    except (KeyError, TypeError):
        bad = InvalidValue if isinstance(adapter, str) else InvalidType
        raise bad(f"unknown adapter {adapter!r}: choose one of {', '.join(ADAPTER_NAMES)} or pass an "
                  "es.samplers.Adapter") from None


def reference_numpy_tree(tokens: np.ndarray, parents: np.ndarray, claimed: np.ndarray, target: np.ndarray,
                         rng: Any) -> list[int]:
    """SpecInfer's multi-step speculative sampling over a whole drafted tree, in float64 (own code).

    ``tokens [N]`` and ``parents [N]`` in depth-first order (node 0 is the root, parent -1);
    ``claimed [N, V]`` the law each node was claimed to come from; ``target [N, V]`` the target
    law after the path to each node. Returns the emitted tokens.
    """
    children: dict[int, list[int]] = {}
    for n in range(1, len(tokens)):
        children.setdefault(int(parents[n]), []).append(n)
    node, out = 0, []
    while True:
        r = target[node].copy()
        for c in children.get(node, []):
            x, q = int(tokens[c]), claimed[c]
            if q[x] > 0 and rng.random() < r[x] / q[x]:
                out.append(x)
                node = c
                break
            r = np.maximum(r - q, 0.0)
            r = r / r.sum()
        else:
            out.append(int(rng.choice(len(r), p=r)))
            return out


class NumpyTreeAdapter(Adapter):
    """``sampler(tokens [N], parents [N], claimed [N, V], target [N, V], rng)`` over the whole drafted tree
    (depth-first order, node 0 the root), with a numpy-``Generator``-like ``rng``."""

    name = "numpy-tree"
    family = "tree"
    reference = staticmethod(reference_numpy_tree)
    reference_rule_name = "mss"

    def call(self, sampler: Callable, step: TreeStep, rng: Rng) -> list[int]:
        order: list[int] = []

        def visit(n: int) -> None:           # draws the whole tree, depth first
            order.append(n)
            for c in step.children(n):
                visit(c)
        visit(step.root)
        index = {n: i for i, n in enumerate(order)}
        vocab = step.vocab
        tokens = np.array([step.token(n) if n else -1 for n in order], dtype=np.int64)
        parents = np.array([index[step.parent(n)] if n else -1 for n in order], dtype=np.int64)
        zero = np.zeros(vocab)
        claimed = np.stack([self.floats(step.claimed(n)) if n else zero for n in order])
        target = np.stack([self.floats(step.target(n)) for n in order])
        return self.tokens(sampler(tokens, parents, claimed, target, EnumGenerator(rng)))


numpy_tree = NumpyTreeAdapter()
ADAPTERS["numpy-tree"] = numpy_tree
