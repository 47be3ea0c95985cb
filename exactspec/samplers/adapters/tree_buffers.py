"""The tree buffers EAGLE- and Medusa-style verifiers take, built from a tree shape or a list of tree paths.

Tree verifiers written for Medusa and EAGLE do not walk a tree: they take the speculated tree
*linearised* (root first, then every node sorted by depth, then by its path), an attention mask
and position ids for the one target call over all nodes, and ``retrieve_indices``, one row per
root-to-leaf path listing the linear index of every node on it (``-1`` past a short path's leaf).
``candidates = tree_candidates[retrieve_indices]`` ``[num_paths, depth + 1]`` and
``logits = tree_logits[retrieve_indices]`` ``[num_paths, depth + 1, V]`` are what their
``evaluate_posterior`` reads.

A tree is named by its **choices**: the path of every non-root node as the child indices taken
from the root (``[0]`` the root's first child, ``[0, 1]`` that child's second child), the format
of EAGLE's ``mc_sim_7b_63`` and of later Medusa releases; or by an exactspec **expansion**
``(k1, k2, ...)`` (``k_d`` children under every node of depth ``d - 1``, the shape
``es.drafts.tree((k1, k2))`` draws), which is Medusa 0.1's ``medusa_choices=[1, k1, k2]``
without its leading root count.

>>> b = tree_buffers((2, 1))
>>> b.choices
((0,), (1,), (0, 0), (1, 0))
>>> b.retrieve_indices.tolist()
[[0, 1, 3], [0, 2, 4]]
>>> b.position_ids.tolist(), b.parents.tolist()
([0, 1, 1, 2, 2], [-1, 0, 0, 1, 2])
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ...errors import InvalidType, InvalidValue

__all__ = ["TreeBuffers", "tree_buffers", "choices_of"]


@dataclass(frozen=True, eq=False)
class TreeBuffers:
    """One tree shape's buffers (CPU tensors; ``.to(device)`` them as needed).

    - ``choices``: the non-root nodes' paths in linear order (sorted by depth, then path);
    - ``tree_indices`` ``[N]``: where each node's token sits in a flat candidate list
      ``[root, depth-1 slots, depth-2 slots, ...]`` with ``widths[d]`` slots per depth, the
      node with path ``c`` in slot ``c[-1]`` of its depth (Medusa's layout: a head's top-k);
    - ``attn_mask`` ``[1, 1, N, N]`` float: 1 where a node sees a node (itself, its ancestors, the root);
    - ``position_ids`` ``[N]``: each node's depth (add the context length);
    - ``retrieve_indices`` ``[num_paths, depth + 1]``: per root-to-leaf path (in path order), the
      linear index of its nodes, ``-1`` past the leaf of a shorter path;
    - ``parents`` ``[N]``: each node's parent's linear index (``-1`` for the root);
    - ``widths``: the slots per depth used by ``tree_indices``.
    """

    choices: tuple[tuple[int, ...], ...]
    tree_indices: torch.Tensor
    attn_mask: torch.Tensor
    position_ids: torch.Tensor
    retrieve_indices: torch.Tensor
    parents: torch.Tensor
    widths: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        """Nodes including the root."""
        return len(self.choices) + 1

    @property
    def depth(self) -> int:
        """Length of the longest path below the root."""
        return self.retrieve_indices.shape[1] - 1

    @property
    def num_paths(self) -> int:
        """Root-to-leaf paths (rows of ``candidates``)."""
        return self.retrieve_indices.shape[0]

    def children(self, node: int) -> list[int]:
        """Linear indices of ``node``'s children, in path order.

        >>> tree_buffers([[0], [1], [0, 0]]).children(0)
        [1, 2]
        """
        return [i for i, par in enumerate(self.parents.tolist()) if par == node]


def _path(c: Any, where: str) -> tuple[int, ...]:
    if isinstance(c, (str, bytes)) or not isinstance(c, Sequence) and not isinstance(c, torch.Tensor):
        raise InvalidType(f"{where} is {c!r}; a tree path is a sequence of child indices like [0, 1]")
    out = []
    for k in (c.tolist() if isinstance(c, torch.Tensor) else c):
        if isinstance(k, bool):
            raise InvalidType(f"{where} holds the bool {k!r}; child indices are ints >= 0")
        try:
            k = operator.index(k)
        except TypeError:
            raise InvalidType(f"{where} holds {k!r}; child indices are ints >= 0") from None
        if k < 0:
            raise InvalidValue(f"{where} holds {k}; child indices are ints >= 0")
        out.append(k)
    if not out:
        raise InvalidValue(f"{where} is empty; the root is implicit, list only the nodes below it")
    return tuple(out)


def _choices(shape: Any) -> list[tuple[int, ...]]:
    """An expansion tuple or a choices list as the list of node paths (validated, any order)."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, torch.Tensor)) or len(shape) == 0:
        bad = InvalidValue if isinstance(shape, (Sequence, torch.Tensor)) and not isinstance(shape, (str, bytes)) \
            else InvalidType
        raise bad(f"tree_buffers takes an expansion like (2, 1) or choices like [[0], [1], [0, 0]], "
                  f"got {shape!r}")
    items = shape.tolist() if isinstance(shape, torch.Tensor) else list(shape)
    if all(not isinstance(k, (Sequence, torch.Tensor)) or isinstance(k, (str, bytes)) for k in items):
        widths = _path(items, "the expansion")
        if 0 in widths:
            raise InvalidValue(f"the expansion {tuple(widths)} has a depth with 0 children; drop the depths below it")
        paths: list[tuple[int, ...]] = [()]
        out: list[tuple[int, ...]] = []
        for k in widths:
            paths = [p + (i,) for p in paths for i in range(k)]
            out.extend(paths)
        return out
    out = [_path(c, f"choice {i} ({c!r})") for i, c in enumerate(items)]
    seen = set(out)
    if len(seen) != len(out):
        dup = next(c for c in out if out.count(c) > 1)
        raise InvalidValue(f"the choices list {list(dup)} twice; each node once")
    for c in out:
        if len(c) > 1 and c[:-1] not in seen:
            raise InvalidValue(f"the choice {list(c)} has no parent {list(c[:-1])} in the choices; list every "
                               "node of the tree (each path's prefixes too)")
    return out


def tree_buffers(expansion_or_choices: Any, *, topk: int | None = None) -> TreeBuffers:
    """The linearised tree, attention mask, position ids and retrieve indices of a tree shape.

    ``expansion_or_choices`` is an exactspec expansion ``(k1, k2, ...)`` (a full tree: Medusa 0.1's
    ``medusa_choices=[1, k1, k2, ...]``) or a list of node paths (EAGLE / Medusa ``choices``,
    prefix-closed, in any order). ``topk`` fixes the slots per depth of ``tree_indices`` (later Medusa
    releases use 10); by default a depth has as many slots as its largest child index + 1, Medusa
    0.1's layout. (EAGLE lays its flat candidate list out per parent, ``TOPK`` slots under each
    parent; its ``tree_indices`` are not reproduced: the torch tree adapter hands the tokens in
    tree order, ``tree_candidates``, directly.)

    >>> b = tree_buffers([[0], [1], [0, 0]])
    >>> b.attn_mask[0, 0].int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    >>> b.retrieve_indices.tolist(), b.tree_indices.tolist()
    ([[0, 1, 3], [0, 2, -1]], [0, 1, 2, 3])

    Bad shapes name what is wrong:

    >>> tree_buffers([[0, 1]])
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: the choice [0, 1] has no parent [0] in the choices; list every node ...
    """
    choices = sorted(_choices(expansion_or_choices), key=lambda c: (len(c), c))
    depth = max(len(c) for c in choices)
    index: dict[tuple[int, ...], int] = {(): 0}
    index.update({c: i + 1 for i, c in enumerate(choices)})
    n = len(choices) + 1
    if topk is not None:
        if isinstance(topk, bool) or not isinstance(topk, int):
            raise InvalidType(f"topk must be an int >= 1, got {topk!r}")
        if topk < 1:
            raise InvalidValue(f"topk must be an int >= 1, got {topk!r}")
        wide = max(c[-1] for c in choices)
        if wide >= topk:
            raise InvalidValue(f"a choice takes child index {wide}, past topk={topk} slots")
        widths = (topk,) * depth
    else:
        widths = tuple(max(c[-1] for c in choices if len(c) == d) + 1 for d in range(1, depth + 1))
    offsets = [1]
    for w in widths:
        offsets.append(offsets[-1] + w)
    tree_indices = [0] + [offsets[len(c) - 1] + c[-1] for c in choices]
    parents = [-1] + [index[c[:-1]] for c in choices]
    mask = torch.eye(n, dtype=torch.float32)
    for c in choices:
        row = index[c]
        for k in range(len(c)):
            mask[row, index[c[:k]]] = 1.0
    inner = {c[:-1] for c in choices}
    leaves = sorted(c for c in choices if c not in inner)
    rows = [[0] + [index[c[:k]] for k in range(1, len(c) + 1)] + [-1] * (depth - len(c)) for c in leaves]
    return TreeBuffers(
        choices=tuple(choices),
        tree_indices=torch.tensor(tree_indices, dtype=torch.long),
        attn_mask=mask[None, None],
        position_ids=torch.tensor([0] + [len(c) for c in choices], dtype=torch.long),
        retrieve_indices=torch.tensor(rows, dtype=torch.long),
        parents=torch.tensor(parents, dtype=torch.long),
        widths=widths,
    )


def choices_of(parents: Sequence[int]) -> list[tuple[int, ...]]:
    """The choices (node paths) of a tree given by parent indices (node 0 the root, parents before children).

    Children are numbered in the order they appear.

    >>> choices_of([-1, 0, 0, 1])
    [(0,), (1,), (0, 0)]
    """
    paths: list[tuple[int, ...]] = [()]
    count: dict[int, int] = {}
    for i, par in enumerate(parents[1:], start=1):
        par = operator.index(par)
        if not 0 <= par < i:
            raise InvalidValue(f"node {i} has parent {par}; parents come before their children (node 0 is the root)")
        k = count.get(par, 0)
        count[par] = k + 1
        paths.append(paths[par] + (k,))
    return paths[1:]
