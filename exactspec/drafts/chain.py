"""The chain proposer: ``gamma`` tokens drafted one after another from the draft model.

>>> p = chain(gamma=2, sampling="argmax", claim="point_mass")
>>> p.gamma, p.sampling, p.claim
(2, 'argmax', 'point_mass')
"""

from __future__ import annotations

from typing import Any

from ..errors import ExactSpecError

__all__ = ["ChainProposer", "ChainStep", "ChainLaws", "chain"]

SAMPLINGS = ("sample", "argmax")
CLAIMS = ("draft", "point_mass")
#: a chain step keeps the context of this many first positions; later ones are rebuilt when asked for
KEEP_CONTEXTS = 256


class ChainStep:
    """What a chain rule sees on one branch: lazily drafted tokens and the laws at every position.

    Positions are 0-based: ``draft(j)`` is the j-th drafted token, ``claimed(j)`` the law the
    verifier is told it was drawn from, ``target(j)`` the target law after ``j`` drafted tokens
    (``target(gamma)`` is the bonus position). A draft is drawn the first time anything at or
    after its position is asked for, so a rule that rejects early never pays for later drafts.
    """

    __slots__ = ("gamma", "vocab", "_env", "_rng", "_ctxs", "_drafts", "_claims", "_sample", "_point", "accepted",
                 "_source", "_last", "_draw")

    family = "chain"

    def __init__(self, proposer: "ChainProposer", env: Any, context: tuple, rng: Any) -> None:
        self.gamma = proposer.gamma
        self.vocab = env.vocab
        self._env = env
        self._rng = rng
        # the proposer reads a draft as soon as it is drawn: never a deferred draw (see PathRng.draw_now)
        self._draw = getattr(rng, "draw_now", None) or getattr(rng, "categorical", None)
        self._ctxs = [context]   # the context at each of the first KEEP_CONTEXTS positions (later: rebuilt)
        self._last = context     # the context after every draft drawn so far
        self._drafts: list[int] = []
        self._claims: list[tuple] = []
        self._sample = proposer.sampling == "sample"
        self._point = proposer.claim == "point_mass"
        self._source = proposer.sampled_from
        self.accepted = 0

    def _draw_until(self, j: int) -> None:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        env = self._env
        source = self._source
        while len(self._drafts) <= j:
            ctx = self._last
            q = env.q(ctx)
            s = q if source is None else env.view(source)(ctx)
            x = self._draw(s) if self._sample else env.argmax(s)
            self._drafts.append(x)
            self._claims.append(env.point_mass(x) if self._point else q)
            self._last = ctx = ctx + (x,)
            if len(self._ctxs) < KEEP_CONTEXTS:   # keeping every context of a long chain costs gamma**2 memory
                self._ctxs.append(ctx)

    def draft(self, j: int) -> int:
        """The j-th drafted token (0-based), drawn on first use."""
        if j >= len(self._drafts):
            self._draw_until(j)
        return self._drafts[j]

    def accept(self, j: int) -> int:
        """Mark draft ``j`` accepted (for the efficiency figures) and return its token."""
        self.accepted += 1
        return self.draft(j)

    def claimed(self, j: int) -> tuple:
        """The law the verifier is told draft ``j`` was drawn from."""
        if j >= len(self._drafts):
            self._draw_until(j)
        return self._claims[j]

    def target(self, j: int) -> tuple:
        """The target law at position ``j``, after drafts ``0..j-1`` (``j = gamma``: the bonus position)."""
        if j > 0 and j > len(self._drafts):
            self._draw_until(j - 1)
        if not 0 <= j <= self.gamma:
            raise IndexError(f"target position {j} is outside 0..{self.gamma}")
        ctxs = self._ctxs
        if j < len(ctxs):
            return self._env.p(ctxs[j])
        return self._env.p(self._last if j == len(self._drafts) else ctxs[0] + tuple(self._drafts[:j]))

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

    def __init__(self, proposer: "ChainProposer", env: Any, context: tuple) -> None:
        self.gamma, self.vocab, self.env, self.context = proposer.gamma, env.vocab, env, context
        self.proposer = proposer
        self._sample = proposer.sampling == "sample"
        self._point = proposer.claim == "point_mass"
        self._p: dict[tuple, tuple] = {}
        self._q: dict[tuple, tuple] = {}

    def _draft_law(self, prefix: tuple) -> tuple:
        q = self._q.get(prefix)
        if q is None:
            q = self._q[prefix] = self.env.q(self.context + prefix)
        return q

    def sampling(self, prefix: tuple) -> tuple:
        """The law the next draft is really drawn from, after ``prefix``."""
        src = self.proposer.sampled_from
        q = self._draft_law(prefix) if src is None else self.env.view(src)(self.context + prefix)
        return q if self._sample else self.env.point_mass(self.env.argmax(q))

    def claimed(self, prefix: tuple, x: int) -> tuple:
        """The law the verifier is told draft ``x`` (after ``prefix``) came from."""
        return self.env.point_mass(x) if self._point else self._draft_law(prefix)

    def target(self, prefix: tuple) -> tuple:
        """The target law after ``prefix``."""
        p = self._p.get(prefix)
        if p is None:
            p = self._p[prefix] = self.env.p(self.context + prefix)
        return p

    def state(self, prefix: tuple) -> tuple:
        """The context suffix every model of the step reads after ``prefix`` (the whole context for a model of
        order None): prefixes with the same state have the same laws at every later position."""
        ctx = self.context + prefix
        orders = [self.env.p.model.order] + ([self.env.q.model.order] if self.env.q is not None else []) + (
            [self.proposer.sampled_from.order] if self.proposer.sampled_from is not None else [])
        if any(o is None for o in orders):
            return ctx
        k = max(orders)
        return ctx[-k:] if k else ()

    def row_key(self, prefix: tuple) -> tuple:
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

    def orders(self) -> list:
        """Orders of the models this proposer reads beyond the audit's target and draft."""
        return [] if self.sampled_from is None else [self.sampled_from.order]

    @property
    def models(self) -> list:
        """Models the proposer itself reads (checked for the audit's vocabulary)."""
        return [] if self.sampled_from is None else [self.sampled_from]

    def step(self, env: Any, context: tuple, rng: Any) -> ChainStep:
        return ChainStep(self, env, context, rng)

    def laws(self, env: Any, context: tuple) -> ChainLaws:
        return ChainLaws(self, env, context)

    def max_tokens(self) -> int:
        return self.gamma + 1

    def expected_nodes(self, env: Any, context: tuple) -> int:
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
    exactspec.errors.ExactSpecError: chain: gamma must be an int >= 1, got 0
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ExactSpecError(f"chain: gamma must be an int >= 1, got {gamma!r}")
    if sampling not in SAMPLINGS:
        raise ExactSpecError(f"chain: sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if claim not in CLAIMS:
        raise ExactSpecError(f"chain: claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
    from ..models import Model
    if sampled_from is not None and not isinstance(sampled_from, Model):
        raise ExactSpecError(f"chain: sampled_from must be an exactspec model, got {sampled_from!r}")
    return ChainProposer(gamma, sampling, claim, sampled_from)
