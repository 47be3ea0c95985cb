"""Tree proposers: an expansion tree drafted from one draft model, and SpecInfer's merge of chains.

>>> tree((2, 1), children="without_replacement", claim="renormalized")
tree(expansion=(2, 1), children='without_replacement', claim='renormalized')
>>> merge([__import__("exactspec").models.context_free(("1/2", "1/2"))], gamma=2)
merge(1 draft models, gamma=2)
"""

from __future__ import annotations

from typing import Any, Generator, Iterator, Sequence, cast

from ..errors import InvalidType, InvalidValue
from ..models import Model

__all__ = ["TreeProposer", "MergeProposer", "FixedTreeProposer", "TreeStep", "TreeLaws", "tree", "merge", "fixed"]

CHILDREN = ("iid", "without_replacement", "topk")
CLAIMS = ("draft", "renormalized", "point_mass")


def _topk(law: tuple[Any, ...], k: int) -> list[int]:
    """The k most likely tokens with positive probability, ties to the lowest id."""
    ranked = sorted((i for i, x in enumerate(law) if x > 0), key=lambda i: (-law[i], i))
    return ranked[:k]


class _Children:
    """A node's children, drawn one at a time as the verifier reaches them."""

    __slots__ = ("_step", "_node")

    def __init__(self, step: "TreeStep", node: int) -> None:
        self._step, self._node = step, node

    def __iter__(self) -> Iterator[int]:
        i = 0
        while self._step._child(self._node, i) is not None:
            yield self._step._kids[self._node][i]
            i += 1

    def __len__(self) -> int:
        return len(self._step._all_children(self._node))

    def __getitem__(self, i: int) -> int:
        kids = self._step._all_children(self._node) if i < 0 else None
        if kids is not None:
            return kids[i]
        if self._step._child(self._node, i) is None:
            raise IndexError(f"node {self._node} has fewer than {i + 1} children")
        return self._step._kids[self._node][i]

    def __repr__(self) -> str:
        return f"<children of node {self._node}>"


class TreeStep:
    """What a tree rule sees on one branch: a token tree drawn lazily below the verified root.

    Node 0 is the root (the last context token); ``children(n)`` are drawn one by one as a rule
    iterates over them; ``proposals(n)`` yields ``(child, claimed law)`` in proposal order (for a
    merge tree, one per draft model passing through ``n``); ``target(n)`` is the target law after
    the path to ``n``; ``accept(c)`` returns ``c``'s token and counts it as an accepted draft.
    """

    family = "tree"
    root = 0

    def __init__(self, proposer: Any, env: Any, context: tuple[Any, ...], rng: Any) -> None:
        self._prop, self._env, self._rng = proposer, env, rng
        self.vocab = env.vocab
        self.max_depth = proposer.depth
        self._tok: list[int | None] = [context[-1] if context else None]
        self._parent = [-1]
        self._depth = [0]
        self._ctx = [context]
        self._claim: list[tuple[Any, ...] | None] = [None]
        self._kids: list[list[int]] = [[]]
        self._done = [False]
        self._props: list[list[tuple[int, tuple[Any, ...]]]] = [[]]
        self._through: list[list[int]] = [list(range(len(getattr(proposer, "models", ()))))]
        self._fixed = [0]
        self.accepted = 0

    # -- structure ------------------------------------------------------------------------------
    def token(self, node: int) -> int:
        """The token at ``node`` (the root's is the last context token)."""
        return self._tok[node]  # type: ignore[return-value]

    def parent(self, node: int) -> int:
        return self._parent[node]

    def depth(self, node: int) -> int:
        return self._depth[node]

    def path(self, node: int) -> tuple[int, ...]:
        """Tokens from the root's child down to ``node``."""
        n0 = len(self._ctx[0])
        return self._ctx[node][n0:]

    def target(self, node: int) -> tuple[Any, ...]:
        """The target law after the path to ``node``."""
        return cast("tuple[Any, ...]", self._env.p(self._ctx[node]))

    def claimed(self, node: int) -> tuple[Any, ...]:
        """The law the verifier is told ``node`` was drawn from (the first proposal's, for merge trees)."""
        law = self._claim[node]
        if law is None:
            raise ValueError("the root carries no claimed law")
        return law

    def children(self, node: int) -> _Children:
        """``node``'s children (a lazy sequence: iterate, index or take ``len``)."""
        return _Children(self, node)

    def proposals(self, node: int) -> Iterator[tuple[int, tuple[Any, ...]]]:
        """``(child, claimed law)`` pairs in the order the verifier tries them, drawn lazily."""
        i = 0
        while True:
            if i >= len(self._props[node]) and not self._draw_next(node):
                return
            yield self._props[node][i]
            i += 1

    def accept(self, node: int) -> int:
        """Mark ``node`` accepted (for the efficiency figures) and return its token."""
        self.accepted += 1
        return self._tok[node]  # type: ignore[return-value]

    def number(self, x: Any) -> Any:
        """A rational constant as a number of the audit's field."""
        return self._env.number(x)

    # -- lazy drafting ----------------------------------------------------------------------------
    def _new(self, node: int, x: int, claim: tuple[Any, ...]) -> int:
        c = len(self._tok)
        self._tok.append(x)
        self._parent.append(node)
        self._depth.append(self._depth[node] + 1)
        self._ctx.append(self._ctx[node] + (x,))
        self._claim.append(claim)
        self._kids.append([])
        self._done.append(False)
        self._props.append([])
        self._through.append([])
        self._fixed.append(-1)
        self._kids[node].append(c)
        return c

    def _child(self, node: int, i: int) -> int | None:
        while len(self._kids[node]) <= i:
            if not self._draw_next(node):
                return None
        return self._kids[node][i]

    def _all_children(self, node: int) -> list[int]:
        while self._draw_next(node):
            pass
        return self._kids[node]

    def _draw_next(self, node: int) -> bool:
        """Draw the next proposal at ``node``; False when there is none."""
        if self._done[node]:
            return False
        if self._depth[node] >= self.max_depth:
            self._done[node] = True
            return False
        if self._prop.kind == "merge":
            return self._draw_merge(node)
        if self._prop.kind == "fixed":
            return self._draw_fixed(node)
        env, prop = self._env, self._prop
        kids = self._kids[node]
        k = prop.expansion[self._depth[node]]
        if len(kids) >= k:
            self._done[node] = True
            return False
        q = env.q(self._ctx[node])
        earlier = tuple(self._tok[c] for c in kids)
        if prop.children == "iid":
            law = q
            x = _draw_now(self._rng, law)
        elif prop.children == "without_replacement":
            law = env.without(q, earlier)
            if law is None:
                self._done[node] = True
                return False
            x = _draw_now(self._rng, law)
        else:
            top = _topk(q, k)
            if len(kids) >= len(top):
                self._done[node] = True
                return False
            x = top[len(kids)]
        claim = (q if prop.claim == "draft" else env.point_mass(x) if prop.claim == "point_mass"
                 else env.without(q, earlier))
        c = self._new(node, x, claim)
        self._props[node].append((c, claim))
        return True

    def _draw_fixed(self, node: int) -> bool:
        tree = self._prop.tree
        kids = self._kids[node]
        below = tree.children(self._fixed[node])
        if len(kids) >= len(below):
            self._done[node] = True
            return False
        f = below[len(kids)]
        claim = self._prop.field_claim(self._env, f)
        c = self._new(node, tree.tokens[f], claim)
        self._fixed[c] = f
        self._props[node].append((c, claim))
        return True

    def _draw_merge(self, node: int) -> bool:
        props = self._props[node]
        through = self._through[node]
        if len(props) >= len(through):
            self._done[node] = True
            return False
        m = through[len(props)]
        q = self._env.view(self._prop.models[m])(self._ctx[node])
        x = _draw_now(self._rng, q)
        c = next((c for c in self._kids[node] if self._tok[c] == x), None)
        if c is None:
            c = self._new(node, x, q)
        self._through[c].append(m)
        props.append((c, q))
        return True


def _draw_now(rng: Any, law: tuple[Any, ...]) -> int:
    """A drafted token, drawn at once: the proposer reads it as soon as it is drawn (never a deferred draw)."""
    draw = getattr(rng, "draw_now", None)
    return cast("int", draw(law) if draw is not None else rng.categorical(law))


class TreeLaws:
    """Per-node laws of an expansion tree for closed-form step laws (no rng)."""

    def __init__(self, proposer: "TreeProposer", env: Any, context: tuple[Any, ...]) -> None:
        self.proposer, self.env, self.context = proposer, env, context
        self.depth = proposer.depth
        self._p: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def target(self, path: tuple[Any, ...]) -> tuple[Any, ...]:
        p = self._p.get(path)
        if p is None:
            p = self._p[path] = self.env.p(self.context + path)
        return p

    def next_child(self, path: tuple[Any, ...], siblings: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The law of the next child's token after ``siblings`` were drawn (None: no more children)."""
        prop, env = self.proposer, self.env
        if len(path) >= self.depth or len(siblings) >= prop.expansion[len(path)]:
            return None
        k = prop.expansion[len(path)]
        q = env.q(self.context + path)
        if prop.children == "iid":
            return cast("tuple[Any, ...] | None", q)
        if prop.children == "without_replacement":
            return cast("tuple[Any, ...] | None", env.without(q, siblings))
        top = _topk(q, k)
        return env.point_mass(top[len(siblings)]) if len(siblings) < len(top) else None

    def claimed(self, path: tuple[Any, ...], siblings: tuple[Any, ...], x: int) -> tuple[Any, ...]:
        prop, env = self.proposer, self.env
        q = env.q(self.context + path)
        if prop.claim == "draft":
            return cast("tuple[Any, ...]", q)
        if prop.claim == "point_mass":
            return cast("tuple[Any, ...]", env.point_mass(x))
        return cast("tuple[Any, ...]", env.without(q, siblings))


class TreeProposer:
    """Drafts an expansion tree from the draft model; see :func:`tree`."""

    family = "tree"
    kind = "tree"

    def __init__(self, expansion: tuple[int, ...], children: str, claim: str) -> None:
        self.expansion, self.children, self.claim = expansion, children, claim
        self.depth = len(expansion)

    def needs_draft(self) -> bool:
        return True

    def orders(self) -> list[Any]:
        return []

    def step(self, env: Any, context: tuple[Any, ...], rng: Any) -> TreeStep:
        return TreeStep(self, env, context, rng)

    def laws(self, env: Any, context: tuple[Any, ...]) -> TreeLaws:
        return TreeLaws(self, env, context)

    def max_tokens(self) -> int:
        return self.depth + 1

    def expected_nodes(self, env: Any, context: tuple[Any, ...]) -> Any:
        """Exact expected number of speculated nodes (what the target verifies in one call)."""
        laws = self.laws(env, context)
        memo: dict[Any, Any] = {}
        zero, one = env.field.zero, env.field.one

        def known(path: tuple[Any, ...]) -> Any:
            return zero if len(path) >= self.depth else memo.get(path)

        def size(path: tuple[Any, ...]) -> Generator[tuple[Any, ...], Any, Any]:
            """Expected nodes below ``path``; yields each child path and is sent that child's size."""
            total = zero
            stack: list[tuple[tuple[int, ...], Any]] = [((), one)]
            while stack:
                sib, w = stack.pop()
                law = laws.next_child(path, sib)
                if law is None:
                    continue
                for x, px in enumerate(law):
                    if px:
                        sub = yield path + (x,)
                        total += w * px * (1 + sub)
                        stack.append((sib + (x,), w * px))
            return total

        # run the frames from an explicit stack, not by recursion: the tree's depth is the user's to choose
        top = known(())
        if top is not None:
            return top
        frames = [((), size(()))]
        sent: Any = None
        while True:
            path, frame = frames[-1]
            try:
                child = frame.send(sent)
            except StopIteration as stop:
                memo[path] = sent = stop.value
                frames.pop()
                if not frames:
                    return sent
                continue
            sent = known(child)
            if sent is None:
                frames.append((child, size(child)))

    def describe(self) -> str:
        return f"tree(expansion={self.expansion}, children={self.children!r}, claim={self.claim!r})"

    __repr__ = describe


class MergeProposer:
    """SpecInfer's merge: each draft model samples a chain; chains merged into one tree; see :func:`merge`."""

    family = "tree"
    kind = "merge"

    def __init__(self, models: list[Model], gamma: int) -> None:
        self.models, self.gamma, self.depth = models, gamma, gamma

    def needs_draft(self) -> bool:
        return False

    def orders(self) -> list[Any]:
        return [m.order for m in self.models]

    def step(self, env: Any, context: tuple[Any, ...], rng: Any) -> TreeStep:
        return TreeStep(self, env, context, rng)

    def max_tokens(self) -> int:
        return self.gamma + 1

    def expected_nodes(self, env: Any, context: tuple[Any, ...]) -> Any:
        """Exact expected number of distinct nodes of the merged tree."""
        views = [env.view(m) for m in self.models]
        one = env.field.one
        total = env.field.zero
        stack: list[tuple[tuple[int, ...], list[Any]]] = [((), [one] * len(views))]
        while stack:
            path, probs = stack.pop()
            if len(path) >= self.gamma:
                continue
            laws = [v(context + path) for v in views]
            for x in range(env.vocab):
                nxt = [pr * law[x] for pr, law in zip(probs, laws)]
                if any(nxt):
                    miss = one
                    for pr in nxt:
                        miss *= 1 - pr
                    total += 1 - miss
                    stack.append((path + (x,), nxt))
        return total

    def describe(self) -> str:
        return f"merge({len(self.models)} draft models, gamma={self.gamma})"

    __repr__ = describe


class FixedTreeProposer:
    """Proposes the same given token tree at every step; see :func:`fixed`."""

    family = "tree"
    kind = "fixed"

    def __init__(self, tree: Any, claims: dict[int, tuple[Any, ...]]) -> None:
        self.tree, self.claims = tree, claims
        self.depth = max(tree.depths)

    def needs_draft(self) -> bool:
        return False

    def orders(self) -> list[Any]:
        return []

    def field_claim(self, env: Any, node: int) -> tuple[Any, ...]:
        key = ("fixed claim", node)
        law = env._numbers.get(key)
        if law is None:
            law = tuple(env.field.convert(x) for x in self.claims[node])
            env._numbers[key] = law
        return cast("tuple[Any, ...]", law)

    def step(self, env: Any, context: tuple[Any, ...], rng: Any) -> TreeStep:
        return TreeStep(self, env, context, rng)

    def max_tokens(self) -> int:
        return cast("int", self.depth + 1)

    def expected_nodes(self, env: Any, context: tuple[Any, ...]) -> int:
        return cast("int", self.tree.n_speculated)

    def describe(self) -> str:
        return f"fixed({self.tree.n_speculated}-node tree)"

    __repr__ = describe


def fixed(tree: Any, claims: Any) -> FixedTreeProposer:
    """Propose one given token tree (an ``es.trees.TokenTree``) at every step, with given claimed laws.

    ``claims`` maps every speculated node id to the law the verifier is told it came from (a
    dict, or a list indexed by node id with anything at index 0). The tree's root token is not
    used: the root is the context's last token. Use it to condition on particular drafts, e.g.
    to compute a verifier's acceptance probability for one drafted tree.

    >>> from exactspec.trees import TokenTree
    >>> t = TokenTree.from_chains(0, [[1], [2]])
    >>> fixed(t, {1: ("0", "1", "0"), 2: ("0", "0", "1")}).describe()
    'fixed(2-node tree)'
    """
    from ..laws import to_law
    from ..trees import TokenTree
    if not isinstance(tree, TokenTree):
        raise InvalidType(f"fixed: tree must be an es.trees.TokenTree, got {tree!r}")
    if tree.n_speculated < 1:
        raise InvalidValue("fixed: the tree has no speculated node")
    items = claims.items() if isinstance(claims, dict) else enumerate(claims)
    given = {int(k): v for k, v in items if int(k) != 0 or isinstance(claims, dict)}
    vocab = None
    laws: dict[int, tuple[Any, ...]] = {}
    for node in range(1, len(tree)):
        if node not in given:
            raise InvalidValue(f"fixed: no claimed law for node {node} (token {tree.tokens[node]})")
        law = given[node]
        vocab = vocab or len(law)
        laws[node] = to_law(law, vocab, where=f"fixed tree, claimed law of node {node}")
        if not 0 <= tree.tokens[node] < vocab:
            raise InvalidValue(f"fixed: node {node} has token {tree.tokens[node]}, outside 0..{vocab - 1}")
    return FixedTreeProposer(tree, laws)


def tree(expansion: Sequence[int] = (2, 2, 1), *, children: str = "iid", claim: str = "draft") -> TreeProposer:
    """Draft a token tree: at depth i every node gets ``expansion[i]`` children drawn from ``q(.|path)``.

    ``children``: ``"iid"`` (with replacement; duplicates stay separate proposals),
    ``"without_replacement"`` (each next child from q with earlier siblings removed and
    renormalised; stops early when q's support is used up), ``"topk"`` (the k most likely tokens
    of q with positive probability, ties to the lowest id). ``claim``: what the verifier is told
    each child came from: ``"draft"`` (q), ``"renormalized"`` (q without earlier siblings,
    renormalised, as EAGLE-style code does) or ``"point_mass"``.

    >>> tree((3,), children="topk", claim="point_mass").depth
    1
    >>> tree((0,))
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: tree: expansion must be a non-empty sequence of ints >= 1, got (0,)
    """
    exp = tuple(expansion) if not isinstance(expansion, int) else (expansion,)
    if not exp or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in exp):
        raise InvalidValue(f"tree: expansion must be a non-empty sequence of ints >= 1, got {expansion!r}")
    if children not in CHILDREN:
        raise InvalidValue(f"tree: children must be one of {', '.join(CHILDREN)}, got {children!r}")
    if claim not in CLAIMS:
        raise InvalidValue(f"tree: claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
    return TreeProposer(exp, children, claim)


def merge(models: Sequence[Model], gamma: int) -> MergeProposer:
    """SpecInfer's merge-based tree: each draft model samples its own chain of ``gamma`` tokens.

    The chains are merged into one tree (shared prefixes once); every proposal keeps the claimed
    law of the model that made it, and the verifier tries a node's proposals in model order.
    Use it with ``es.audit(..., draft=None, proposer=es.drafts.merge([q1, q2], gamma))``.

    >>> merge([], 2)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: merge: needs a non-empty list of draft models (es.models.*)
    """
    models = list(models)
    if not models or not all(isinstance(m, Model) for m in models):
        raise InvalidValue("merge: needs a non-empty list of draft models (es.models.*)")
    if len({m.vocab for m in models}) != 1:
        raise InvalidValue(f"merge: draft models have different vocabularies {[m.vocab for m in models]}")
    if isinstance(gamma, bool) or not isinstance(gamma, int):
        raise InvalidType(f"merge: gamma must be an int >= 1, got {gamma!r}")
    elif gamma < 1:
        raise InvalidValue(f"merge: gamma must be an int >= 1, got {gamma!r}")
    return MergeProposer(models, gamma)
