"""The abstraction's limits, its control flow through a rule, and the session of one all-vocabulary proof.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ...errors import AbstractionRefused
from ..field import where


#: the most predicates the classes of unnamed tokens may be split by (each split restarts the proof)
MAX_PREDICATES = 6
#: the most tokens one branch may draw from one class (the symbols are made up front; more restarts with more)
MAX_DRAWS = 8


#: the theorem a ``vocab="all"`` proof states (its summary and JSON carry it)
THEOREM = ("for every vocabulary size V >= {min_vocab}, every context-free target p and draft q over V tokens (any "
           "entries, zeros and ties included), {proposer}: the first {tokens} emitted token(s) follow p's own law. "
           "Preconditions, checked while the rule runs: the rule reads a law only at tokens it was handed (drafts, "
           "draws) and through es.laws' vocabulary-wide helpers (normalize, residual, positive_part, acceptance); "
           "it compares tokens only with tokens (==, !=); it uses rng.bernoulli and rng.categorical. Anything else "
           "(iterating, counting or measuring a law, a constant token id, ordering, hashing or printing tokens, "
           "rng.uniform) is refused, never assumed")


def _refuse(what: str) -> Any:
    session = _SESSION.get()
    earlier = "" if session is None or session.inexact is None else f"; before that, the rule {session.inexact}"
    raise AbstractionRefused(f"vocab='all': {what} (at {where()}){earlier}; the all-vocabulary abstraction follows "
                             "per-token arithmetic, comparisons whose answer is the same for every token of a "
                             "class, and vocabulary-wide sums through es.laws; prove at a given vocab instead")


def _inexact(what: str) -> None:
    """Note an observation the abstraction cannot represent exactly for every class size (the first one is kept).

    The run goes on, so that a bias it meets is still found and replayed exactly (a refutation needs no
    abstraction); but no proof is given: :func:`_prove_all_vocab` refuses it, naming ``what`` and the line.
    """
    session = _SESSION.get()
    if session is not None and session.inexact is None:
        session.inexact = f"{what} (at {where()})"


class _Control(Exception):
    """The abstraction's own control flow through a rule's code (never the rule's error)."""


class _Refine(_Control):
    """A comparison on an unnamed token's probabilities has different answers across a class: split by it."""

    def __init__(self, pred: Any) -> None:
        super().__init__(str(pred))
        self.pred = pred


class _MoreDraws(_Control):
    """A branch draws more tokens from one class than the layout has symbols for: restart with more."""


class _EmptyCell(_Control):
    """The cell holds no instance once a class's signs are taken into account: nothing to prove there."""


class _DeadBranch(_Control):
    """The classes this branch drew from cannot all have mass on the cell: the branch weighs 0 there."""


class _Session:
    """One all-vocabulary proof's state, held in a context variable (:data:`_SESSION`) while it runs.

    ``kit``: what the concrete prover hands down; ``space``: the layout's symbols (None between layouts);
    ``inexact``: the first observation the abstraction cannot represent exactly (no proof is given then);
    ``irreducible``: the irreducible factors met, by ring (:func:`_factors`).
    """

    def __init__(self, kit: Any) -> None:
        self.kit = kit
        self.space: Any = None
        self.hook: Any = None
        self.run: Any = None
        self.inexact: str | None = None
        self.inhabited: tuple | None = None   # the classes the branch's last iteration over a law saw
        self.irreducible: dict = {}


_SESSION: ContextVar[_Session | None] = ContextVar("exactspec_all_vocab_session", default=None)
