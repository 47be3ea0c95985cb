"""The torch tree adapter: a drafted tree handed over in the tensor layout EAGLE- and Medusa-style verifiers take.

``get_adapter("torch-tree")`` calls ``sampler(candidates, logits, tree)`` once per branch, where
(``P`` root-to-leaf paths, depth ``D``, vocabulary ``V``, ``N`` tree nodes, root first):

- ``candidates`` ``[P, D + 1]`` long: each path's tokens, the root (last context token; ``-1``
  with an empty prompt) in column 0, ``-1`` past the leaf of a shorter path;
- ``logits`` ``[P, D + 1, V]`` float32: ``log p`` (``-inf`` where ``p = 0``) of the target after
  each prefix of the path, i.e. ``tree.tree_logits[0, retrieve_indices]`` as their
  ``tree_decoding`` builds it (a ``-1`` index picks the last node, as it does there);
- ``tree`` a :class:`TorchTree`: the :class:`~exactspec.samplers.adapters.tree_buffers.TreeBuffers`, the
  linear tokens ``tree_candidates`` ``[1, N]``, and the draft side in EAGLE's layout
  (``draft_probs`` = ``cart_candidates_prob``, ``draft_laws`` = ``op``, ``p_indices``,
  ``b_indices``), plus per-node laws ``target`` / ``claimed`` ``[N, V]``.

The sampler returns the tokens it emits this step (the accepted path, then the token after it);
negative ids are padding. Recipes for the published verifiers (tested in
``tests/test_published_trees.py``)::

    from medusa.model.utils import evaluate_posterior          # medusa-llm 0.1
    def medusa(candidates, logits, tree):                      # next root token: argmax, as medusa_generate does
        best, n = evaluate_posterior(logits, candidates, 1.0, 0.09, 0.3)
        return [*candidates[best, 1:n + 1].tolist(), int(logits[best, n].argmax())]

    from eagle.model import utils                              # eagle-llm 1.2.1
    processor = utils.prepare_logits_processor(temperature=1.0)
    def eagle(candidates, logits, tree):                       # next token: multinomial(sample_p), as eagenerate does
        best, n, sample_p = utils.evaluate_posterior(logits, candidates, processor, tree.draft_probs,
                                                     tree.draft_laws, tree.p_indices, tree.tree_candidates,
                                                     tree.b_indices)
        return [*candidates[best, 1:n + 1].tolist(), int(torch.multinomial(sample_p, 1))]

    es.audit_sampler(eagle, adapter="torch-tree", target=p, draft=q,
                     proposer=es.drafts.tree((2, 1), children="without_replacement", claim="renormalized"))

EAGLE drafts children without replacement and is told each child's renormalised probability
(``children="without_replacement", claim="renormalized"``); Medusa's heads propose their top-k
(``children="topk", claim="point_mass"``; with a context-free draft every parent gets the same
top-k, Medusa 0.1's cartesian tree).

Logits are untempered: a verifier applying its own temperature ``1/k`` aims at
``es.models.sharpen(target, k)`` (pass it as ``expected=``). The reference sampler is
SpecInfer's multi-step speculative sampling (catalog rule ``mss``), written with these tensors.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> p, q = es.models.context_free((F(1, 2), F(1, 4), F(1, 4))), es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
>>> r = es.audit_sampler(reference_torch_tree, adapter="torch-tree", target=p, draft=q, tokens=2,
...                      proposer=es.drafts.tree((2,), children="without_replacement", claim="renormalized"))
>>> r.verdict
'lossless'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from ...errors import InvalidValue
from ...laws import memoised
from ...protocols import Law, Rng, TreeStep
from .base import Adapter
from ..torch_draws.torch_rng import bind
from .tree_buffers import TreeBuffers, tree_buffers

__all__ = ["TorchTree", "TorchTreeAdapter", "torch_tree", "reference_torch_tree", "torch_tree_inputs"]


@dataclass(eq=False)
class TorchTree:
    """One drafted tree as tensors (see the module docstring for every field's layout).

    ``draft_laws[d]`` ``[M_d, V]`` holds the draft law under each depth-``d`` node that has children
    (in linear order; the claimed law of its first child), ``p_indices[j][i]`` the row of
    ``draft_laws[i - 1]`` for the parent of path ``j``'s node ``i``, and ``b_indices[j][i]`` the
    linear indices of that node's earlier siblings (a long tensor, or ``[]`` when it has none).
    """

    buffers: TreeBuffers
    tree_candidates: torch.Tensor
    tree_logits: torch.Tensor
    candidates: torch.Tensor
    logits: torch.Tensor
    target: torch.Tensor
    claimed: torch.Tensor
    draft_probs: torch.Tensor
    draft_laws: list = field(default_factory=list)
    p_indices: list = field(default_factory=list)
    b_indices: list = field(default_factory=list)

    def in_path_order(self, retrieve_indices: torch.Tensor, *,
                      pad: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(candidates, logits, draft_probs)`` with the paths in the rows of another ``retrieve_indices``.

        For code whose own buffer builder lists the paths of the same tree in another order (or pads
        short paths with another token): each row follows the linear node indices of
        ``retrieve_indices`` as their ``generate_candidates`` and ``tree_decoding`` index them (a ``-1``
        index is ``pad`` in ``candidates``, probability 1 in ``draft_probs``, the last node's logits).

        >>> import exactspec as es
        >>> from exactspec.enumerate import PathRng
        >>> from exactspec.enumerate.env import Env
        >>> from exactspec.fields import get_field
        >>> fld, m = get_field(backend="python"), es.models.context_free(("1/2", "1/4", "1/4"))
        >>> step = es.drafts.tree((2,), children="topk", claim="point_mass").step(Env(m, m, fld), (2,),
        ...                                                                       PathRng((), 1, fld, [], {}))
        >>> tree = torch_tree_inputs(step)
        >>> candidates, logits, probs = tree.in_path_order(torch.tensor([[0, 2], [0, 1]]))
        >>> candidates.tolist(), probs.tolist()
        ([[2, 1], [2, 0]], [[1.0, 1.0], [1.0, 1.0]])
        """
        return _in_path_order(self.tree_candidates[0], self.claimed, self.tree_logits[0], retrieve_indices, pad)


def _tensor(law: Law, dtype: Any) -> torch.Tensor:
    return memoised(f"torch {dtype} probs", law, None,
                    lambda: torch.tensor([float(x) for x in law], dtype=dtype))


def _logits(law: Law, dtype: Any) -> torch.Tensor:
    return memoised(f"torch {dtype} logits", law, None, lambda: torch.log(_tensor(law, dtype)))


def torch_tree_inputs(step: TreeStep, dtype: Any = torch.float32) -> TorchTree:
    """Draw the whole tree of ``step`` and lay it out as tensors (what the adapter hands a sampler).

    >>> import exactspec as es
    >>> from exactspec.enumerate import PathRng
    >>> from exactspec.enumerate.env import Env
    >>> from exactspec.fields import get_field
    >>> fld, m = get_field(backend="python"), es.models.context_free(("1/2", "1/4", "1/4"))
    >>> proposer = es.drafts.tree((2,), children="topk", claim="point_mass")
    >>> step = proposer.step(Env(m, m, fld), (2,), PathRng((), 1, fld, [], {}))
    >>> t = torch_tree_inputs(step)
    >>> t.candidates.tolist(), t.logits.shape
    ([[2, 0], [2, 1]], torch.Size([2, 2, 3]))
    """
    nodes: list[int] = []
    paths: list[tuple[int, ...]] = []

    def visit(n: int, path: tuple[int, ...]) -> None:
        nodes.append(n)
        paths.append(path)
        for k, c in enumerate(step.children(n)):
            visit(c, path + (k,))
    visit(step.root, ())
    if len(nodes) == 1:
        raise InvalidValue("the drafted tree has no node below the root; the torch-tree adapter needs a tree with "
                           "at least one drafted token (a proposer of depth >= 1)")
    buffers = _buffers(tuple(paths[1:]))
    linear = {path: i for i, path in enumerate(((),) + buffers.choices)}
    order = [0] * len(nodes)
    for n, path in zip(nodes, paths):
        order[linear[path]] = n
    vocab = step.vocab
    root = step.token(order[0])
    tokens = torch.tensor([-1 if root is None else root] + [step.token(n) for n in order[1:]], dtype=torch.long)
    tree_logits = torch.stack([_logits(step.target(n), dtype) for n in order])
    target = torch.stack([_tensor(step.target(n), dtype) for n in order])
    zero = torch.zeros(vocab, dtype=dtype)
    claimed = torch.stack([zero] + [_tensor(step.claimed(n), dtype) for n in order[1:]])
    retrieve = buffers.retrieve_indices
    candidates, logits, draft_probs = _in_path_order(tokens, claimed, tree_logits, retrieve, -1)
    parents = buffers.parents.tolist()
    depth_of = buffers.position_ids.tolist()
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents[1:], start=1):
        kids.setdefault(par, []).append(i)
    rows: dict[int, int] = {}
    draft_laws: list[torch.Tensor] = []
    for d in range(buffers.depth):
        inner = [i for i in range(len(order)) if depth_of[i] == d and i in kids]
        for r, i in enumerate(inner):
            rows[i] = r
        draft_laws.append(torch.stack([claimed[kids[i][0]] for i in inner]) if inner
                          else torch.zeros((0, vocab), dtype=dtype))
    p_indices: list[list[int]] = []
    b_indices: list[list[Any]] = []
    for row in retrieve.tolist():
        p_indices.append([-1] + [rows[parents[i]] if i >= 0 else -1 for i in row[1:]])
        brow: list[Any] = [[]]
        for i in row[1:]:
            earlier = kids[parents[i]][:kids[parents[i]].index(i)] if i >= 0 else []
            brow.append(torch.tensor(earlier, dtype=torch.long) if earlier else [])
        b_indices.append(brow)
    return TorchTree(buffers=buffers, tree_candidates=tokens[None], tree_logits=tree_logits[None],
                     candidates=candidates, logits=logits, target=target, claimed=claimed,
                     draft_probs=draft_probs, draft_laws=draft_laws, p_indices=p_indices, b_indices=b_indices)


def _in_path_order(tokens: torch.Tensor, claimed: torch.Tensor, tree_logits: torch.Tensor, retrieve: torch.Tensor,
                   pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates, logits and claimed probabilities of the linear nodes ``tokens`` along the rows of ``retrieve``."""
    probs = claimed.gather(1, tokens.clamp(min=0)[:, None])[:, 0].clone()
    probs[0] = 1.0
    candidates = torch.cat([tokens, torch.tensor([pad], dtype=tokens.dtype)])[retrieve]
    return candidates, tree_logits[retrieve], torch.cat([probs, torch.ones(1, dtype=probs.dtype)])[retrieve]


_BUFFERS: dict[tuple, TreeBuffers] = {}


def _buffers(choices: tuple) -> TreeBuffers:
    """``tree_buffers`` memoised by shape (a few shapes recur on every branch of an audit)."""
    hit = _BUFFERS.get(choices)
    if hit is None:
        if len(_BUFFERS) > 4096:
            _BUFFERS.clear()
        hit = _BUFFERS[choices] = tree_buffers(list(choices))
    return hit


def reference_torch_tree(candidates: torch.Tensor, logits: torch.Tensor, tree: TorchTree) -> list[int]:
    """SpecInfer's multi-step speculative sampling over the tensors the adapter hands (own code, float32).

    From the root, try each child ``x`` in order: accept with probability ``min(1, r(x) / q(x))``
    (``q`` its claimed law), else ``r = norm(max(r - q, 0))``; with every child rejected, or at a
    leaf, emit a draw from ``r``. A rejection that leaves no residual mass (``r <= q`` everywhere: ``r ==
    q`` exactly, the rejection an artefact of rounding) accepts instead of dividing 0 by 0.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> p = es.models.context_free((F(1, 2), F(1, 2)))
    >>> es.audit_sampler(reference_torch_tree, adapter="torch-tree", target=p, draft=p, tokens=1,
    ...                  proposer=es.drafts.tree((1,))).verdict
    'lossless'
    """
    buffers = tree.buffers
    tokens = tree.tree_candidates[0]
    node, out = 0, []
    while True:
        r = tree.target[node]
        for c in buffers.children(node):
            x, q = int(tokens[c]), tree.claimed[c]
            if q[x] > 0 and torch.rand(1)[0] < r[x] / q[x]:
                out.append(x)
                node = c
                break
            rest = torch.clamp(r - q, min=0)
            if not rest.sum() > 0:
                # r <= q everywhere: in exact arithmetic r == q and x is accepted with probability 1; only
                # rounding of r(x) / q(x) below 1 let the rejection happen, so accept (no 0/0 residual)
                out.append(x)
                node = c
                break
            r = rest / rest.sum()
        else:
            out.append(int(torch.multinomial(r, 1)[0]))
            return out


class TorchTreeAdapter(Adapter):
    """``sampler(candidates [P, D + 1], logits [P, D + 1, V], tree: TorchTree) -> emitted tokens``: EAGLE /
    Medusa layout (see :mod:`exactspec.samplers.adapters.torch_tree_adapter`); laws as float32 by default.

    >>> TorchTreeAdapter().name, TorchTreeAdapter(dtype=torch.float64).dtype
    ('torch-tree', torch.float64)
    """

    name = "torch-tree"
    family = "tree"
    needs_torch = True
    reference = staticmethod(reference_torch_tree)
    reference_rule_name = "mss"

    def __init__(self, dtype: Any = torch.float32) -> None:
        if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            raise InvalidValue(f"TorchTreeAdapter dtype must be a torch floating dtype, got {dtype!r}")
        self.dtype = dtype

    def with_precision(self, precision: str) -> "TorchTreeAdapter":
        """This adapter handing its laws in ``precision`` (the float64 run of a float32 audit).

        >>> torch_tree.with_precision("float64").dtype
        torch.float64
        """
        dtype = getattr(torch, precision)
        return self if dtype == self.dtype else TorchTreeAdapter(dtype)

    def call(self, sampler: Callable, step: TreeStep, rng: Rng) -> list[int]:
        tree = torch_tree_inputs(step, self.dtype)
        with bind(rng):
            out = sampler(tree.candidates, tree.logits, tree)
        return self.tokens(np.asarray(out.cpu() if isinstance(out, torch.Tensor) else out))


torch_tree = TorchTreeAdapter()
