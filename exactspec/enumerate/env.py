"""What one audit's steps share: the models converted to the field, memoised by model state.

>>> from exactspec import models
>>> from exactspec.fields import get_field
>>> env = Env(models.context_free(("1/4", "3/4")), None, get_field("float"))
>>> env.p((0, 1))
(0.25, 0.75)
"""

from __future__ import annotations

from typing import Any, Sequence

from ..fields import Field
from ..laws import argmax, to_rational
from ..models import Model

__all__ = ["ModelView", "Env"]


class ModelView:
    """A model's laws in one field, memoised by the context suffix the model reads."""

    __slots__ = ("model", "field", "_cache", "_order")

    def __init__(self, model: Model, field: Field) -> None:
        self.model, self.field = model, field
        self._cache: dict[tuple, tuple] = {}
        self._order = model.order

    def __call__(self, context: tuple) -> tuple:
        order = self._order
        key = context if order is None else (() if order == 0 else context[-order:])
        law = self._cache.get(key)
        if law is None:
            exact = self.model(key)
            conv = self.field.convert
            law = exact if self.field.native else tuple(conv(x) for x in exact)
            self._cache[key] = law
        return law


class Env:
    """Target and draft views plus field constants, shared by every step of one audit."""

    def __init__(self, target: Model, draft: Model | None, field: Field) -> None:
        self.field = field
        self.vocab = target.vocab
        self.p = ModelView(target, field)
        self.q = ModelView(draft, field) if draft is not None else None
        self._views: dict[int, tuple[Model, ModelView]] = {}
        self._point: dict[int, tuple] = {}
        self._argmax: dict[int, tuple[tuple, int]] = {}
        self._numbers: dict[Any, Any] = {}
        #: what closed forms memoise for the whole audit (keyed by the closed form's own names)
        self.cache: dict[Any, Any] = {}
        #: closed forms may take their faster, exact-only paths (exact fields only)
        self.fast = field.exact
        #: the laws of the chain steps from the last context a chain proposer stepped from, by drafted prefix
        #: (see ``exactspec.drafts.chain.ChainStep``): the branches of one step law share them
        self.chain_nodes: tuple | None = None

    def view(self, model: Model) -> ModelView:
        """The field view of any other model (e.g. a merge proposer's draft models), one per model."""
        hit = self._views.get(id(model))
        if hit is None or hit[0] is not model:
            hit = (model, ModelView(model, self.field))
            self._views[id(model)] = hit
        return hit[1]

    def without(self, law: tuple, tokens: tuple) -> tuple | None:
        """``law`` with ``tokens`` removed and renormalised (None when nothing is left), memoised."""
        if not tokens:
            return law
        from ..laws import memoised

        def compute() -> tuple | None:
            kept = [self.field.zero if i in tokens else x for i, x in enumerate(law)]
            total = sum(kept)
            return None if not total else tuple(x / total for x in kept)
        return memoised(f"without{tokens}", law, None, compute)

    def point_mass(self, token: int) -> tuple:
        """The field's point mass on ``token`` (one shared tuple per token)."""
        law = self._point.get(token)
        if law is None:
            one, zero = self.field.one, self.field.zero
            law = tuple(one if i == token else zero for i in range(self.vocab))
            self._point[token] = law
        return law

    def argmax(self, law: tuple) -> int:
        """Argmax of a law (ties to the lowest id), memoised by identity."""
        hit = self._argmax.get(id(law))
        if hit is not None and hit[0] is law:
            return hit[1]
        a = argmax(law)
        self._argmax[id(law)] = (law, a)
        return a

    def number(self, x: Any) -> Any:
        """A rational constant (int, Fraction, finite float, bounded "p/q" string) as a number of this field."""
        hit = self._numbers.get(x)
        if hit is None:
            hit = self.field.convert(to_rational(x, "rule constant"))
            self._numbers[x] = hit
        return hit


def state_key(context: Sequence[int], orders: Sequence[int | None]) -> tuple:
    """The part of ``context`` that any of the models reads: the memo key of a step.

    >>> state_key((1, 2, 3, 4), [2, 1])
    (3, 4)
    >>> state_key((1, 2), [None, 0])
    (1, 2)
    """
    context = tuple(context)
    if any(o is None for o in orders):
        return context
    k = max(orders, default=0)  # type: ignore[type-var]  # no None left (returned above); hot: no filtering copy
    return context[-k:] if k else ()
