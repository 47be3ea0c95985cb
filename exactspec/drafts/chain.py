"""The chain proposer: ``gamma`` tokens drafted one after another from the draft model.

>>> p = chain(gamma=2, sampling="argmax", claim="point_mass")
>>> p.gamma, p.sampling, p.claim
(2, 'argmax', 'point_mass')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidType, InvalidValue

if TYPE_CHECKING:
    from ..models import Model

__all__ = ["ChainProposer", "ChainStep", "ChainLaws", "chain"]

SAMPLINGS = ("sample", "argmax")
CLAIMS = ("draft", "point_mass")
#: over models reading the whole context, a chain step keeps the context of this many first positions; later ones
#: are rebuilt when asked for
KEEP_CONTEXTS = 256


def _state_length(proposer: "ChainProposer", env: Any) -> int | None:
    """How many last tokens of a context every model of a chain step reads (None: the whole context)."""
    orders = [env.p.model.order] + ([env.q.model.order] if env.q is not None else []) + (
        [proposer.sampled_from.order] if proposer.sampled_from is not None else [])
    if any(o is None for o in orders):
        return None
    return cast("int | None", max(orders))


class _Node:
    """What every branch of a step that drafted the same prefix shares: the context the models read there and
    the target, draft and sampling laws at that position, each looked up once; the nodes after one more draft."""

    __slots__ = ("ctx", "p", "q", "s", "kids")

    def __init__(self, ctx: tuple[Any, ...] | None) -> None:
        self.ctx = ctx           # None: deeper than KEEP_CONTEXTS in a chain over an unbounded context (rebuilt)
        self.p: Any = None
        self.q: Any = None
        self.s: Any = None
        self.kids: dict[Any, Any] | None = None


class ChainStep:
    """What a chain rule sees on one branch: lazily drafted tokens and the laws at every position.

    Positions are 0-based: ``draft(j)`` is the j-th drafted token, ``claimed(j)`` the law the
    verifier is told it was drawn from, ``target(j)`` the target law after ``j`` drafted tokens
    (``target(gamma)`` is the bonus position). A draft is drawn the first time anything at or
    after its position is asked for, so a rule that rejects early never pays for later drafts.

    The laws at each drafted prefix live in a tree of nodes the branches of one step law share (the
    engine runs them one context after another; :class:`~exactspec.enumerate.env.Env` keeps the tree of
    the last context), so a branch replaying the drafts of an earlier one looks no law up again.
    """

    __slots__ = ("gamma", "vocab", "_env", "_rng", "_nodes", "_drafts", "_claims", "_sample", "_point", "accepted",
                 "_source", "_draw", "_keep")

    family = "chain"

    def __init__(self, proposer: "ChainProposer", env: Any, context: tuple[Any, ...], rng: Any) -> None:
        self.gamma = proposer.gamma
        self.vocab = env.vocab
        self._env = env
        self._rng = rng
        # the proposer reads a draft as soon as it is drawn: never a deferred draw (see PathRng.draw_now)
        self._draw: Any = getattr(rng, "draw_now", None) or getattr(rng, "categorical", None)
        hit = getattr(env, "chain_nodes", None)
        if hit is None or hit[0] is not proposer or not (hit[1] is context or hit[1] == context):
            hit = (proposer, context, _Node(context), _state_length(proposer, env), proposer.sampling == "sample",
                   proposer.claim == "point_mass", proposer.sampled_from)
            if hasattr(env, "chain_nodes"):
                env.chain_nodes = hit
        self._keep: int | None
        self._sample: bool
        self._point: bool
        self._source: Model | None
        _, _, root, self._keep, self._sample, self._point, self._source = hit
        self._nodes = [root]     # the node after each draft drawn so far (and the root)
        self._drafts: list[int] = []
        self._claims: list[tuple[Any, ...]] = []
        self.accepted = 0

    def _kid(self, node: _Node, x: int, depth: int) -> _Node:
        """The node after ``node``'s prefix and the draft ``x`` (``depth`` drafts in all), made once."""
        ctx = node.ctx
        keep = self._keep
        if ctx is None or (keep is None and depth >= KEEP_CONTEXTS):   # keeping them all costs gamma**2
            ctx = None
        else:
            ctx = ctx + (x,)
            if keep is not None and len(ctx) > keep:
                ctx = ctx[-keep:] if keep else ()
        kids = node.kids
        if kids is None:
            kids = node.kids = {}
        kid = kids[x] = _Node(ctx)
        return kid

    def _context(self, j: int, node: _Node) -> tuple[Any, ...]:
        """The context the models read after drafts ``0..j-1``."""
        ctx = node.ctx
        return ctx if ctx is not None else self._nodes[0].ctx + tuple(self._drafts[:j])  # type: ignore[operator]

    def _draw_until(self, j: int) -> None:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        while len(self._drafts) <= j:
            self._next()

    def _next(self) -> int:
        """Draw the next draft (the caller checked there is one) and return it."""
        drafts, nodes = self._drafts, self._nodes
        n = len(drafts)
        node = nodes[n]
        s = node.s
        env = self._env
        if s is None:
            ctx = self._context(n, node)
            node.q = env.q(ctx)
            s = node.s = node.q if self._source is None else env.view(self._source)(ctx)
        x = self._draw(s) if self._sample else env.argmax(s)
        drafts.append(x)
        self._claims.append(env.point_mass(x) if self._point else node.q)
        kids = node.kids
        kid = None if kids is None else kids.get(x)
        nodes.append(kid if kid is not None else self._kid(node, x, n + 1))
        return cast("int", x)

    def draft(self, j: int) -> int:
        """The j-th drafted token (0-based), drawn on first use."""
        drafts = self._drafts
        n = len(drafts)
        if j < n:
            return drafts[j]
        if j == n and j < self.gamma:   # the next one: the common case
            return self._next()
        self._draw_until(j)
        return drafts[j]

    def accept(self, j: int) -> int:
        """Mark draft ``j`` accepted (for the efficiency figures) and return its token."""
        self.accepted += 1
        return self.draft(j)

    def claimed(self, j: int) -> tuple[Any, ...]:
        """The law the verifier is told draft ``j`` was drawn from."""
        if j >= len(self._drafts):
            self._draw_until(j)
        return self._claims[j]

    def target(self, j: int) -> tuple[Any, ...]:
        """The target law at position ``j``, after drafts ``0..j-1`` (``j = gamma``: the bonus position)."""
        if j > 0 and j > len(self._drafts):
            self._draw_until(j - 1)
        if not 0 <= j <= self.gamma:
            raise IndexError(f"target position {j} is outside 0..{self.gamma}")
        node = self._nodes[j]
        p = node.p
        if p is None:
            p = node.p = self._env.p(self._context(j, node))
        return cast("tuple[Any, ...]", p)

    @property
    def drafts(self) -> tuple[int, ...]:
        """All ``gamma`` drafted tokens (draws every one of them)."""
        if self.gamma:
            self._draw_until(self.gamma - 1)
        return tuple(self._drafts)

    def number(self, x: Any) -> Any:
        """A rational constant as a number of the audit's field (e.g. ``step.number("1/2")``)."""
        return self._env.number(x)


class ChainLaws:
    """The laws of one chain step by drafted prefix, for closed-form step laws (no rng)."""

    __slots__ = ("gamma", "vocab", "env", "context", "_sample", "_point", "_p", "_q", "proposer")

    def __init__(self, proposer: "ChainProposer", env: Any, context: tuple[Any, ...]) -> None:
        self.gamma, self.vocab, self.env, self.context = proposer.gamma, env.vocab, env, context
        self.proposer = proposer
        self._sample = proposer.sampling == "sample"
        self._point = proposer.claim == "point_mass"
        self._p: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._q: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _draft_law(self, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        q = self._q.get(prefix)
        if q is None:
            q = self._q[prefix] = self.env.q(self.context + prefix)
        return q

    def sampling(self, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        """The law the next draft is really drawn from, after ``prefix``."""
        src = self.proposer.sampled_from
        q = self._draft_law(prefix) if src is None else self.env.view(src)(self.context + prefix)
        return q if self._sample else self.env.point_mass(self.env.argmax(q))

    def claimed(self, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
        """The law the verifier is told draft ``x`` (after ``prefix``) came from."""
        return self.env.point_mass(x) if self._point else self._draft_law(prefix)

    def target(self, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        """The target law after ``prefix``."""
        p = self._p.get(prefix)
        if p is None:
            p = self._p[prefix] = self.env.p(self.context + prefix)
        return p

    def state(self, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        """The context suffix every model of the step reads after ``prefix`` (the whole context for a model of
        order None): prefixes with the same state have the same laws at every later position."""
        ctx = self.context + prefix
        k = _state_length(self.proposer, self.env)
        if k is None:
            return ctx
        return ctx[-k:] if k else ()

    def row_key(self, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
        """What names every law at ``prefix`` for the audit: the identities of the target, sampling and draft laws
        (shared objects, alive while the audit runs), and the claim kind. Two prefixes with equal keys have equal
        laws, so a closed form reading only those may reuse its work (see ``chain_step_law``'s ``row_key``)."""
        return (id(self.target(prefix)), id(self.sampling(prefix)),
                None if self._point else id(self._draft_law(prefix)))


class ChainProposer:
    """Drafts ``gamma`` tokens from the draft model; see :func:`chain`."""

    family = "chain"

    def __init__(self, gamma: int, sampling: str, claim: str, sampled_from: Any = None) -> None:
        self.gamma, self.sampling, self.claim = gamma, sampling, claim
        self.sampled_from = sampled_from

    def needs_draft(self) -> bool:
        return True

    def orders(self) -> list[Any]:
        """Orders of the models this proposer reads beyond the audit's target and draft."""
        return [] if self.sampled_from is None else [self.sampled_from.order]

    @property
    def models(self) -> list[Any]:
        """Models the proposer itself reads (checked for the audit's vocabulary)."""
        return [] if self.sampled_from is None else [self.sampled_from]

    def step(self, env: Any, context: tuple[Any, ...], rng: Any) -> ChainStep:
        return ChainStep(self, env, context, rng)

    def laws(self, env: Any, context: tuple[Any, ...]) -> ChainLaws:
        return ChainLaws(self, env, context)

    def max_tokens(self) -> int:
        return self.gamma + 1

    def expected_nodes(self, env: Any, context: tuple[Any, ...]) -> int:
        """Speculated tokens the target verifies per call: always ``gamma`` for a chain."""
        return self.gamma

    def describe(self) -> str:
        src = "" if self.sampled_from is None else f", sampled_from={self.sampled_from.name!r}"
        return f"chain(gamma={self.gamma}, sampling={self.sampling!r}, claim={self.claim!r}{src})"

    __repr__ = describe

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChainProposer) and (self.gamma, self.sampling, self.claim) == (
            other.gamma, other.sampling, other.claim) and self.sampled_from is other.sampled_from

    def __hash__(self) -> int:
        return hash((self.gamma, self.sampling, self.claim, id(self.sampled_from)))


def chain(gamma: int = 4, *, sampling: str = "sample", claim: str = "draft", sampled_from: Any = None) -> ChainProposer:
    """Draft a chain of ``gamma`` tokens, each from ``q(. | context + earlier drafts)``.

    ``sampling="sample"`` draws each draft from ``q``; ``"argmax"`` takes the argmax of ``q``
    (ties to the lowest id). ``claim="draft"`` tells the verifier ``q`` (honest only for sampled
    drafts); ``"point_mass"`` tells it the point mass on the drafted token (honest for both).

    >>> chain(3)
    chain(gamma=3, sampling='sample', claim='draft')
    >>> chain(0)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: chain: gamma must be an int >= 1, got 0
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int):
        raise InvalidType(f"chain: gamma must be an int >= 1, got {gamma!r}")
    elif gamma < 1:
        raise InvalidValue(f"chain: gamma must be an int >= 1, got {gamma!r}")
    if sampling not in SAMPLINGS:
        raise InvalidValue(f"chain: sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if claim not in CLAIMS:
        raise InvalidValue(f"chain: claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
    from ..models import Model
    if sampled_from is not None and not isinstance(sampled_from, Model):
        raise InvalidType(f"chain: sampled_from must be an exactspec model, got {sampled_from!r}")
    return ChainProposer(gamma, sampling, claim, sampled_from)
