"""Token trees for tree verification (SpecInfer, Medusa): linearisation, attention mask, position ids.

A :class:`TokenTree` holds one step's speculation. Node 0 is the root, the last verified context
token; every other node is a speculated token with a parent. Node ids are in depth-first order
(every ancestor before its descendants, children in insertion order), which is also the order of
the rows of :meth:`TokenTree.attention_mask`. :func:`check_tree_attention` compares a user's own
mask and position builders with these on many seeded random trees.

The SpecInfer example: three chains below ``machine`` share the prefix ``learning``.

>>> w = {"machine": 0, "learning": 1, "algorithm": 2, "system": 3, "design": 4, "translation": 5, "model": 6}
>>> t = TokenTree.from_chains(w["machine"], [[w["learning"], w["algorithm"]],
...                                          [w["learning"], w["system"], w["design"]],
...                                          [w["translation"], w["model"]]])
>>> t
TokenTree.from_parents([0, 1, 2, 3, 4, 5, 6], [-1, 0, 1, 1, 3, 0, 5])
>>> t.attention_mask().astype(int)
array([[1, 0, 0, 0, 0, 0, 0],
       [1, 1, 0, 0, 0, 0, 0],
       [1, 1, 1, 0, 0, 0, 0],
       [1, 1, 0, 1, 0, 0, 0],
       [1, 1, 0, 1, 1, 0, 0],
       [1, 0, 0, 0, 0, 1, 0],
       [1, 0, 0, 0, 0, 1, 1]])
>>> t.position_ids(prefix_len=10).tolist()
[10, 11, 12, 12, 13, 11, 12]
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, cast

import numpy as np

from .errors import InvalidType, InvalidValue

__all__ = ["TokenTree", "check_tree_attention", "TreeAttentionReport"]


def _index(value: Any, what: str) -> int:
    """``value`` as a Python int (numpy ints accepted; bools, floats and strings refused)."""
    if isinstance(value, bool):
        raise InvalidType(f"{what} is the bool {value!r}; expected an int")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidType(f"{what} is {value!r}; expected an int") from None


def _token(value: Any, what: str) -> int:
    tok = _index(value, what)
    if tok < 0:
        raise InvalidValue(f"{what} is {tok}; token ids must be non-negative ints")
    return tok


def _count(value: Any, name: str, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{name} must be an int >= {least}, got {value!r}")
    elif value < least:
        raise InvalidValue(f"{name} must be an int >= {least}, got {value!r}")
    return value


class TokenTree:
    """An immutable token tree: node 0 is the root (last verified token), the rest are speculated.

    Build one with :meth:`from_parents`, :meth:`from_chains` or :meth:`from_expansion`. Node ids
    are depth-first: a node's ancestors come before it and its subtree follows it contiguously.
    Two trees are equal when they have the same tokens and parents in this order.

    >>> t = TokenTree.from_parents([9, 4, 7, 4], [-1, 0, 0, 2])
    >>> len(t), t.n_speculated, t.depths, t.children(0), t.path(3), t.ancestors(3)
    (4, 3, (0, 1, 1, 2), (1, 2), (7, 4), (0, 2))
    """

    __slots__ = ("_tokens", "_parents", "_depths", "_children", "_order")
    _tokens: tuple[int, ...]
    _parents: tuple[int, ...]
    _depths: tuple[int, ...]
    _children: tuple[tuple[int, ...], ...]
    _order: tuple[int, ...]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise InvalidType("build a TokenTree with TokenTree.from_parents, from_chains or from_expansion")

    @classmethod
    def _make(cls, tokens: Sequence[int], parents: Sequence[int], *, record_order: bool = True) -> TokenTree:
        """Linearise validated data (root at 0, every parent chain reaches it) depth-first.

        With ``record_order`` :meth:`order` maps node ids to input indices; without, it is the identity.
        """
        n = len(tokens)
        kids: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            kids[parents[i]].append(i)  # ascending input index = insertion order
        dfs: list[int] = []
        stack = [0]
        while stack:  # iterative: a chain of thousands of tokens must not hit the recursion limit
            i = stack.pop()
            dfs.append(i)
            stack.extend(reversed(kids[i]))
        new_id = {old: new for new, old in enumerate(dfs)}
        self = object.__new__(cls)
        self._tokens = tuple(tokens[i] for i in dfs)
        self._parents = tuple(-1 if i == 0 else new_id[parents[i]] for i in dfs)
        depths = [0] * n
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            p = self._parents[i]
            depths[i] = depths[p] + 1
            children[p].append(i)
        self._depths = tuple(depths)
        self._children = tuple(tuple(c) for c in children)
        self._order = tuple(dfs) if record_order else tuple(range(n))
        return self

    # -- constructors --------------------------------------------------------------------------------
    @classmethod
    def from_parents(cls, tokens: Sequence[int], parents: Sequence[int]) -> TokenTree:
        """A tree given node by node: ``tokens[i]`` with parent ``parents[i]``; ``parents[0] == -1``.

        Nodes may come in any order (breadth-first, as Medusa lists them, is fine) as long as node
        0 is the only root and every parent chain reaches it; the tree is re-linearised depth-first,
        siblings kept in input order, and :meth:`order` says where each node came from.

        >>> t = TokenTree.from_parents([5, 8, 9, 6], [-1, 0, 0, 1])   # breadth-first input
        >>> t.tokens, t.parents, t.order()
        ((5, 8, 6, 9), (-1, 0, 1, 0), [0, 1, 3, 2])

        Bad input names the node:

        >>> TokenTree.from_parents([5, 8, 9], [-1, 2, 1])
        Traceback (most recent call last):
        ...
        exactspec.errors.InvalidValue: from_parents: nodes 1 -> 2 -> 1 form a cycle (node 1's parent chain never reaches the root 0)
        """
        tokens, parents = list(tokens), list(parents)
        n = len(tokens)
        if n == 0:
            raise InvalidValue("from_parents: a tree needs at least the root (node 0); got no tokens")
        if len(parents) != n:
            raise InvalidValue(f"from_parents: {n} tokens but {len(parents)} parents; give one parent per token")
        tokens = [_token(t, f"from_parents: token of node {i}") for i, t in enumerate(tokens)]
        parents = [_index(p, f"from_parents: parent of node {i}") for i, p in enumerate(parents)]
        if parents[0] != -1:
            raise InvalidValue(f"from_parents: node 0 must be the root (parent -1), but its parent is {parents[0]}")
        for i in range(1, n):
            p = parents[i]
            if p == -1:
                raise InvalidValue(f"from_parents: node {i} has parent -1 too (two roots); only node 0 is the root")
            if not 0 <= p < n:
                raise InvalidValue(f"from_parents: node {i} has parent {p}, outside the nodes 0..{n - 1}")
            if p == i:
                raise InvalidValue(f"from_parents: node {i} is its own parent (a cycle)")
        reaches_root = [False] * n
        reaches_root[0] = True
        for i in range(1, n):  # walk up from i; a node met twice on one walk is on a cycle
            walk: list[int] = []
            on_walk: set[int] = set()
            j = i
            while not reaches_root[j]:
                if j in on_walk:
                    cycle = walk[walk.index(j):] + [j]
                    raise InvalidValue(f"from_parents: nodes {' -> '.join(map(str, cycle))} form a cycle (node "
                                       f"{cycle[0]}'s parent chain never reaches the root 0)")
                walk.append(j)
                on_walk.add(j)
                j = parents[j]
            for k in walk:
                reaches_root[k] = True
        return cls._make(tokens, parents)

    @classmethod
    def from_chains(cls, root_token: int, chains: Iterable[Sequence[int]]) -> TokenTree:
        """Merge several chains of tokens below ``root_token``; shared prefixes are stored once.

        This is SpecInfer's merge of several draft models' (or samples') chains. Children keep the
        order in which they first appear; an empty chain adds nothing.

        >>> t = TokenTree.from_chains(0, [[1, 2], [3], [1, 4], [1, 2]])
        >>> t.tokens, t.parents
        ((0, 1, 2, 4, 3), (-1, 0, 1, 1, 0))
        """
        tokens = [_token(root_token, "from_chains: root_token")]
        parents = [-1]
        child_of: dict[tuple[int, int], int] = {}  # (parent node, token) -> child node
        for c, chain in enumerate(chains):
            node = 0
            for k, tok in enumerate(chain):
                tok = _token(tok, f"from_chains: chain {c}, token {k}")
                nxt = child_of.get((node, tok))
                if nxt is None:
                    nxt = child_of[node, tok] = len(tokens)
                    tokens.append(tok)
                    parents.append(node)
                node = nxt
        return cls._make(tokens, parents, record_order=False)  # chains have no input node ids

    @classmethod
    def from_expansion(cls, root_token: int, expansion: Sequence[int],
                       tokens_fn: Callable[[tuple[int, ...]], Sequence[int]]) -> TokenTree:
        """Give every node at depth ``i - 1`` exactly ``expansion[i - 1]`` children (SpecInfer's <k1, ..., kd>).

        ``tokens_fn(path)`` returns the children's tokens, where ``path`` is the tuple of tokens
        from the root's child down to the node (``()`` for the root); it is called in depth-first
        order. Duplicate tokens among siblings stay separate nodes (as top-k or sampled drafts
        with replacement produce them).

        >>> t = TokenTree.from_expansion(0, (2, 1), lambda path: [7, 7] if not path else [path[-1] + 1])
        >>> t.tokens, t.parents
        ((0, 7, 8, 7, 8), (-1, 0, 1, 0, 3))
        """
        root = _token(root_token, "from_expansion: root_token")
        widths = [_count(k, f"from_expansion: expansion[{d}]", least=1) for d, k in enumerate(expansion)]
        if not callable(tokens_fn):
            raise InvalidType(f"from_expansion: tokens_fn must be callable, got {tokens_fn!r}")
        tokens, parents = [root], [-1]

        def grow(node: int, path: tuple[int, ...]) -> None:
            if len(path) == len(widths):
                return
            k = widths[len(path)]
            got = list(tokens_fn(path))
            if len(got) != k:
                raise InvalidValue(f"from_expansion: tokens_fn({path}) returned {len(got)} tokens; expansion asks "
                                   f"for {k} children at depth {len(path) + 1}")
            for j, tok in enumerate(got):
                tok = _token(tok, f"from_expansion: tokens_fn({path})[{j}]")
                tokens.append(tok)
                parents.append(node)
                grow(len(tokens) - 1, path + (tok,))

        grow(0, ())
        return cls._make(tokens, parents)

    # -- structure -----------------------------------------------------------------------------------
    @property
    def tokens(self) -> tuple[int, ...]:
        """The token of every node, root first, in depth-first node order."""
        return self._tokens

    @property
    def parents(self) -> tuple[int, ...]:
        """The parent of every node (``-1`` for the root); a parent always precedes its children."""
        return self._parents

    @property
    def depths(self) -> tuple[int, ...]:
        """The depth of every node: 0 for the root, 1 for its children, and so on."""
        return self._depths

    @property
    def n_speculated(self) -> int:
        """The number of speculated tokens: every node but the root.

        >>> TokenTree.from_chains(0, [[1, 2], [1, 3]]).n_speculated
        3
        """
        return len(self._tokens) - 1

    def __len__(self) -> int:
        return len(self._tokens)

    def _node(self, i: Any) -> int:
        i = _index(i, "node")
        if not 0 <= i < len(self._tokens):
            raise InvalidValue(f"node {i} is not in this tree (nodes 0..{len(self._tokens) - 1})")
        return cast("int", i)

    def children(self, i: int) -> tuple[int, ...]:
        """The children of node ``i``, in insertion order.

        >>> TokenTree.from_chains(0, [[1, 2], [3]]).children(0)
        (1, 3)
        """
        return self._children[self._node(i)]

    def ancestors(self, i: int) -> tuple[int, ...]:
        """The proper ancestors of node ``i``, root first (``()`` for the root).

        >>> TokenTree.from_chains(0, [[1, 2], [3]]).ancestors(2)
        (0, 1)
        """
        i = self._node(i)
        up = []
        while i != 0:
            i = self._parents[i]
            up.append(i)
        return tuple(reversed(up))

    def path(self, i: int) -> tuple[int, ...]:
        """The tokens from the root's child down to node ``i`` (``()`` for the root).

        >>> TokenTree.from_chains(0, [[1, 2], [3]]).path(2)
        (1, 2)
        """
        i = self._node(i)
        return tuple(self._tokens[a] for a in self.ancestors(i)[1:]) + ((self._tokens[i],) if i else ())

    def order(self) -> list[int]:
        """Where each node came from: ``order()[k]`` is node ``k``'s index in the ``from_parents`` input.

        The identity for trees built already depth-first, and for :meth:`from_chains` and
        :meth:`from_expansion`.

        >>> TokenTree.from_parents([5, 8, 9, 6], [-1, 0, 0, 1]).order()
        [0, 1, 3, 2]
        """
        return list(self._order)

    def linearise(self) -> list[int]:
        """The depth-first linearised node order; node ids already follow it, so it is ``range(len)``.

        >>> TokenTree.from_chains(0, [[1, 2], [3]]).linearise()
        [0, 1, 2, 3]
        """
        return list(range(len(self._tokens)))

    def index_paths(self) -> list[tuple[int, ...]]:
        """Medusa-style paths: for every speculated node, the child indices leading to it from the root.

        >>> TokenTree.from_chains(0, [[1, 2], [1, 4], [3]]).index_paths()
        [(0,), (0, 0), (0, 1), (1,)]
        """
        idx: list[tuple[int, ...]] = [()]
        for i in range(1, len(self._tokens)):
            p = self._parents[i]
            idx.append(idx[p] + (self._children[p].index(i),))
        return idx[1:]

    # -- what the target model is called with --------------------------------------------------------
    def attention_mask(self, prefix_len: int = 0) -> np.ndarray:
        """The tree attention mask: bool ``[n, prefix_len + n]``; node ``i`` sees the prefix, its ancestors and itself.

        The first ``prefix_len`` columns are the verified tokens before the root (all visible);
        column ``prefix_len + j`` is node ``j``.

        >>> TokenTree.from_chains(0, [[1], [2]]).attention_mask(prefix_len=1).astype(int)
        array([[1, 1, 0, 0],
               [1, 1, 1, 0],
               [1, 1, 0, 1]])
        """
        prefix_len = _count(prefix_len, "prefix_len", least=0)
        n = len(self._tokens)
        sees = np.zeros((n, n), dtype=bool)
        for i in range(n):  # parents precede children: copy the parent's row, add the diagonal
            if i:
                sees[i] = sees[self._parents[i]]
            sees[i, i] = True
        return np.hstack([np.ones((n, prefix_len), dtype=bool), sees])

    def position_ids(self, prefix_len: int = 0) -> np.ndarray:
        """Each node's position: ``prefix_len + depth`` (siblings share a position).

        >>> TokenTree.from_chains(0, [[1, 2], [3]]).position_ids(prefix_len=4).tolist()
        [4, 5, 6, 5]
        """
        prefix_len = _count(prefix_len, "prefix_len", least=0)
        return np.array(self._depths, dtype=np.int64) + prefix_len

    # -- value semantics -----------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenTree):
            return NotImplemented
        return self._tokens == other._tokens and self._parents == other._parents

    def __hash__(self) -> int:
        return hash((self._tokens, self._parents))

    def __repr__(self) -> str:
        return f"TokenTree.from_parents({list(self._tokens)}, {list(self._parents)})"


# -- checking a user's mask / position builders ------------------------------------------------------

_INPUTS = ("tree", "parents", "paths")


@dataclass(frozen=True)
class TreeAttentionReport:
    """The result of :func:`check_tree_attention`: ``ok``, or the first disagreement and its tree.

    ``what`` is ``"mask"`` or ``"positions"`` (a wrong value at ``node``, and ``column`` for
    masks, in the coordinates of the array the builder returned), ``"shape"`` (the returned
    array's shape or dtype is wrong) or ``"error"`` (the builder raised; the exception is in
    ``error``).

    >>> r = check_tree_attention(lambda t: t.attention_mask(), trees=5)
    >>> r.ok, r.trees_checked, r.what
    (True, 5, None)
    """

    ok: bool
    trees_checked: int
    tree: TokenTree | None = None
    what: str | None = None
    node: int | None = None
    column: int | None = None
    expected: Any = None
    got: Any = None
    builder: str | None = None
    error: BaseException | None = None
    detail: str = ""
    prefix_len: int = 0
    input: str = "tree"

    def __str__(self) -> str:
        if self.ok:
            return (f"tree attention OK: {self.trees_checked} trees agree with TokenTree.attention_mask/position_ids "
                    f"(prefix_len={self.prefix_len}, input={self.input!r})")
        assert self.tree is not None
        head = {"mask": f"{self.builder} disagrees at node {self.node}, column {self.column}",
                "positions": f"{self.builder} disagrees at node {self.node}",
                "shape": f"{self.builder} returned the wrong shape",
                "error": f"{self.builder} raised {self.got}"}[self.what or "error"]
        lines = [f"tree attention check failed on tree {self.trees_checked}: {head}",
                 f"  tree:     {self.tree!r}  (prefix_len={self.prefix_len}, input={self.input!r})"]
        if self.input != "tree":
            lines.append(f"  input:    {_builder_input(self.tree, self.input)!r}")
        if self.node is not None:
            t, i = self.tree, self.node
            lines.append(f"  node {i}:   token {t.tokens[i]}, depth {t.depths[i]}, parent {t.parents[i]}, "
                         f"ancestors {list(t.ancestors(i))}")
        if self.what != "error":
            lines += [f"  expected: {self.expected}", f"  got:      {self.got}"]
        if self.detail:
            lines += ["  " + ln for ln in self.detail.splitlines()]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` with the readable description unless every tree agreed.

        >>> check_tree_attention(lambda t: np.tril(np.ones((len(t), len(t)))), trees=3).assert_ok()
        Traceback (most recent call last):
        ...
        AssertionError: tree attention check failed on tree 3: mask_fn disagrees at node 2, column 1
        ...
        """
        if not self.ok:
            raise AssertionError(str(self))


def _builder_input(tree: TokenTree, form: str) -> Any:
    if form == "tree":
        return tree
    if form == "parents":
        return list(tree.parents)
    return tree.index_paths()


def _as_array(got: Any) -> tuple[np.ndarray | None, str]:
    try:
        arr = np.asarray(got)
    except Exception as e:  # ragged nested lists, GPU tensors, ...
        return None, f"could not be read as an array ({type(e).__name__}: {e})"
    if arr.dtype.kind not in "biuf":
        return None, f"has dtype {arr.dtype}; expected bools or numbers"
    return arr, ""


def _compare_mask(got: Any, tree: TokenTree, prefix_len: int) -> dict[Any, Any] | None:
    """The first disagreement between a user's mask and the tree's, or None."""
    n = len(tree)
    shapes = [(n, n)] if prefix_len == 0 else [(n, n), (n, prefix_len + n)]
    want = " or ".join(map(str, shapes))
    arr, why = _as_array(got)
    if arr is None:
        return dict(what="shape", expected=want, got=type(got).__name__, detail=f"the mask {why}")
    if arr.shape not in shapes:
        return dict(what="shape", expected=want, got=arr.shape,
                    detail=f"the mask must be [n, n] (tree part) or [n, prefix_len + n]; here n = {n}"
                           + (" (squeeze batch/head dimensions first)" if arr.ndim > 2 else ""))
    full = tree.attention_mask(prefix_len)
    exp = full if arr.shape[1] == full.shape[1] else full[:, prefix_len:]
    offset = arr.shape[1] - n  # columns before node 0 in the user's array
    with np.errstate(invalid="ignore"):
        binary = (arr == 0) | (arr == 1)
        bad = ~binary | ((arr != 0) != exp)
    if not bad.any():
        return None
    i, c = (int(x) for x in np.argwhere(bad)[0])
    value = arr[i, c].item()
    if not binary[i, c]:
        note = f"entry [{i}, {c}] is {value!r}; a mask holds bools or 0/1 (for an additive mask (0 / -inf) pass mask == 0)"
    elif c < offset:
        note = f"column {c} is prefix token {c}, which every node sees"
    else:
        j = c - offset
        rel = (f"node {i} itself" if j == i else f"an ancestor of node {i}" if j in tree.ancestors(i)
               else f"neither node {i} nor one of its ancestors")
        note = f"column {c} is node {j} (token {tree.tokens[j]}), {rel}"
    if not binary.all() and binary[i, c]:
        note += "\nthe mask also holds values other than 0/1; for an additive mask (0 / -inf) pass mask == 0"
    row = "".join("1" if v else "0" for v in exp[i])
    got_row = "".join(("1" if v else "0") if b else "?" for v, b in zip(arr[i] != 0, binary[i]))
    return dict(what="mask", node=i, column=c, expected=bool(exp[i, c]),
                got=bool(value) if binary[i, c] else value,
                detail=f"{note}\nexpected row {i}: {row}\ngot row {i}:      {got_row}")


def _compare_positions(got: Any, tree: TokenTree, prefix_len: int) -> dict[Any, Any] | None:
    n = len(tree)
    arr, why = _as_array(got)
    if arr is None or arr.dtype.kind == "b":
        why = why or "has dtype bool; expected ints"
        return dict(what="shape", expected=(n,), got=type(got).__name__, detail=f"the position ids {why}")
    if arr.shape != (n,):
        return dict(what="shape", expected=(n,), got=arr.shape,
                    detail=f"position ids must have shape [n], one per node; here n = {n}")
    exp = tree.position_ids(prefix_len)
    bad = arr != exp
    if not bad.any():
        return None
    i = int(np.argwhere(bad)[0][0])
    return dict(what="positions", node=i, expected=int(exp[i]), got=arr[i].item(),
                detail=f"a node's position is prefix_len + its depth = {prefix_len} + {tree.depths[i]}\n"
                       f"expected: {exp.tolist()}\ngot:      {arr.tolist()}")


def _random_tree(rng: random.Random, max_depth: int, max_width: int) -> TokenTree:
    tokens, parents = [rng.randrange(4)], [-1]

    def grow(node: int, depth: int) -> None:
        if depth == max_depth:
            return
        for _ in range(rng.randint(1 if node == 0 else 0, max_width)):
            tokens.append(rng.randrange(4))  # 4 tokens: duplicate siblings are common
            parents.append(node)
            grow(len(tokens) - 1, depth + 1)

    grow(0, 0)
    return TokenTree.from_parents(tokens, parents)


def _trees_to_check(count: int, max_depth: int, max_width: int, seed: int) -> Iterable[TokenTree]:
    """Edge cases first (root only, a chain, a star, duplicate siblings), then seeded random trees."""
    yield TokenTree.from_parents([0], [-1])
    yield TokenTree.from_chains(0, [list(range(1, max_depth + 1))])
    yield TokenTree.from_chains(0, [[k] for k in range(1, max_width + 1)])
    # every token 3: a builder that matches nodes by token instead of by id sees too much here
    yield TokenTree.from_expansion(3, (max_width,) * min(2, max_depth), lambda path: [3] * max_width)
    rng = random.Random(seed)
    for _ in range(count - 4):
        yield _random_tree(rng, max_depth, max_width)


def check_tree_attention(mask_fn: Callable[[Any], Any], positions_fn: Callable[[Any], Any] | None = None, *,
                         trees: int = 200, max_depth: int = 4, max_width: int = 3, prefix_len: int = 0,
                         seed: int = 0, input: str = "tree") -> TreeAttentionReport:
    """Check a user's tree attention mask (and position ids) builder against :class:`TokenTree` on random trees.

    ``trees`` trees are checked: first a root-only tree, a chain, a star and a tree of duplicate
    siblings, then random trees (depth <= ``max_depth``, <= ``max_width`` children per node),
    all determined by ``seed``. ``input`` is what the builders receive: ``"tree"`` (the
    :class:`TokenTree`), ``"parents"`` (list of parent ids, root ``-1``, depth-first order) or
    ``"paths"`` (for each speculated node, depth-first, the child indices leading to it from the
    root, as in Medusa). A mask may be bools or 0/1 numbers in anything ``numpy.asarray`` reads
    (a numpy array, a CPU tensor, nested lists), of shape ``[n, n]`` (the tree part) or
    ``[n, prefix_len + n]``, with one row per node including the root. Position ids have shape
    ``[n]`` and must equal ``prefix_len + depth``: the builders are not told ``prefix_len``, so a
    builder checked with ``prefix_len > 0`` closes over it.

    The report stops at the first disagreement (a tree, then mask before positions, then row
    by row) and carries that tree; a builder that raises is reported the same way.

    >>> def causal(t):                      # the classic bug: a chain's mask on a tree
    ...     return np.tril(np.ones((len(t), len(t)), dtype=bool))
    >>> r = check_tree_attention(causal)
    >>> r.ok, r.what, r.node, r.column, r.expected, r.got
    (False, 'mask', 2, 1, False, True)
    >>> print(r)
    tree attention check failed on tree 3: mask_fn disagrees at node 2, column 1
      tree:     TokenTree.from_parents([0, 1, 2, 3], [-1, 0, 0, 0])  (prefix_len=0, input='tree')
      node 2:   token 2, depth 1, parent 0, ancestors [0]
      expected: False
      got:      True
      column 1 is node 1 (token 1), neither node 2 nor one of its ancestors
      expected row 2: 1010
      got row 2:      1110
    """
    if not callable(mask_fn):
        raise InvalidType(f"check_tree_attention: mask_fn must be callable, got {mask_fn!r}")
    if positions_fn is not None and not callable(positions_fn):
        raise InvalidType(f"check_tree_attention: positions_fn must be callable or None, got {positions_fn!r}")
    trees = _count(trees, "check_tree_attention: trees", least=1)
    max_depth = _count(max_depth, "check_tree_attention: max_depth", least=1)
    max_width = _count(max_width, "check_tree_attention: max_width", least=1)
    prefix_len = _count(prefix_len, "check_tree_attention: prefix_len", least=0)
    if input not in _INPUTS:
        raise InvalidValue(f"check_tree_attention: input must be one of {', '.join(map(repr, _INPUTS))}; "
                           f"got {input!r}")
    checked = 0
    for tree in _trees_to_check(trees, max_depth, max_width, seed):
        if checked == trees:
            break
        checked += 1
        builders = [("mask_fn", mask_fn, _compare_mask)]
        if positions_fn is not None:
            builders.append(("positions_fn", positions_fn, _compare_positions))
        for name, fn, compare in builders:
            try:
                got = fn(_builder_input(tree, input))
            except Exception as e:
                return TreeAttentionReport(False, checked, tree, "error", got=f"{type(e).__name__}: {e}",
                                           builder=name, error=e, prefix_len=prefix_len, input=input,
                                           detail=f"(the exception is report.error; call {name} on report.tree "
                                                  f"to debug it)")
            diff = compare(got, tree, prefix_len)
            if diff is not None:
                return TreeAttentionReport(False, checked, tree, builder=name, prefix_len=prefix_len, input=input,
                                           **diff)
    return TreeAttentionReport(True, checked, prefix_len=prefix_len, input=input)
