"""Hypothesis strategies for your own property tests: exact laws, toy models, whole audit instances.

Write the property, let Hypothesis search the instances, and get the smallest one that breaks it:

.. code-block:: python

    from hypothesis import given, settings
    import exactspec as es
    from exactspec import strategies as ess

    @settings(deadline=None)   # an audit enumerates exactly: allow it more than 200 ms
    @given(ess.instances())
    def test_my_rule_is_lossless(inst):
        assert es.audit(rule=my_rule, **inst).tv == 0

The same test, run here on the catalog's ``speculative_sampling``:

>>> from hypothesis import given, settings
>>> import exactspec as es
>>> from exactspec import strategies as ess
>>> @settings(max_examples=10, deadline=None)
... @given(ess.instances())
... def test_speculative_sampling_is_lossless(inst):
...     assert es.audit(rule=es.rules.speculative_sampling, **inst).tv == 0
>>> test_speculative_sampling_is_lossless()

Every drawn model carries its laws in its ``name``, written as the ``es.models`` call that
rebuilds it, so a failing example Hypothesis prints can be pasted into a regression test.

Arguments are checked when a strategy is built: a bad plain argument (``vocab=0``,
``family="banana"``) raises :class:`~exactspec.errors.ExactSpecError` at the call, before any
test runs (Hypothesis's own strategies defer the check to the first draw; ours are cheap to
check, so the error points at the line that wrote it). A strategy-valued argument
(``vocab=st.integers(...)``) can only be checked value by value: a bad drawn value raises
``ExactSpecError`` when drawn, and ``@given`` reports it as the test's error.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any, Callable, TypeGuard, cast

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from . import models as _models
from .drafts import chain as _chain, tree as _tree
from .errors import InvalidType, InvalidValue
from .models import Model

__all__ = ["distributions", "models", "instances", "FAMILIES", "PROPOSERS"]

FAMILIES = ("context_free", "per_position", "table")
PROPOSERS = ("chain", "tree")
TABLE_ORDERS = (1, 2)

Law = tuple[Fraction, ...]


# -- argument checks -----------------------------------------------------------------------------------

def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_int(where: str, name: str, value: Any, low: int) -> int:
    if not _is_int(value):
        raise InvalidType(f"{where}: {name} must be an int >= {low}, got {value!r}")
    if value < low:
        raise InvalidValue(f"{where}: {name} must be an int >= {low}, got {value!r}")
    return value


def _check_int_or_strategy(where: str, name: str, value: Any, low: int) -> Any:
    """A plain int is checked now; a strategy's values are checked by :func:`_draw_int` when drawn."""
    if isinstance(value, SearchStrategy):
        return value
    if not _is_int(value):
        raise InvalidType(f"{where}: {name} must be an int >= {low} or a strategy of such ints, got {value!r}")
    if value < low:
        raise InvalidValue(f"{where}: {name} must be an int >= {low} or a strategy of such ints, got {value!r}")
    return value


def _draw_int(draw: Callable[[SearchStrategy[Any]], Any], where: str, name: str, value: Any, low: int) -> int:
    if not isinstance(value, SearchStrategy):
        return cast("int", value)
    x = draw(value)
    if not _is_int(x):
        raise InvalidType(f"{where}: {name} must be an int >= {low}, but the strategy {value!r} drew {x!r}")
    if x < low:
        raise InvalidValue(f"{where}: {name} must be an int >= {low}, but the strategy {value!r} drew {x!r}")
    return x


def _check_nonzero_fits(where: str, vocab: int, max_denominator: int) -> None:
    # With no zero entry every part of the composition is >= 1, so the denominator is >= vocab.
    if max_denominator < vocab:
        raise InvalidValue(f"{where}: allow_zero=False needs max_denominator >= vocab (every one of the {vocab} "
                           f"tokens gets at least 1/denominator), got max_denominator={max_denominator}")


def _check_family(where: str, family: Any) -> None:
    if family is not None and family not in FAMILIES:
        raise InvalidValue(f"{where}: family must be None or one of {', '.join(FAMILIES)}, got {family!r}")


# -- names that rebuild the model ----------------------------------------------------------------------

def _entry(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f'"{x}"'


def _law_text(law: Law) -> str:
    inner = ", ".join(_entry(x) for x in law)
    return f"({inner},)" if len(law) == 1 else f"({inner})"


# -- distributions -------------------------------------------------------------------------------------

@st.composite
def _law(draw: Any, vocab: int, max_denominator: int, allow_zero: bool) -> Law:
    # Draw the common denominator d, then a composition of d (or of the d - vocab units left once
    # every token has its 1) into vocab parts by vocab - 1 sorted cut points. Each cut is drawn as
    # free - k so that shrinking k to 0 pushes every cut to the end: all the mass on token 0.
    d = draw(st.integers(1 if allow_zero else vocab, max_denominator))
    free = d if allow_zero else d - vocab
    cuts = sorted(free - draw(st.integers(0, free)) for _ in range(vocab - 1))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, free])]
    base = 0 if allow_zero else 1
    return tuple(Fraction(base + x, d) for x in parts)


@st.composite
def _distribution(draw: Any, vocab: Any, max_denominator: int, allow_zero: bool) -> Law:
    v = _draw_int(draw, "distributions", "vocab", vocab, 1)
    if not allow_zero:
        _check_nonzero_fits("distributions", v, max_denominator)
    return cast("tuple[Fraction, ...]", draw(_law(v, max_denominator, allow_zero)))


def distributions(vocab: int | SearchStrategy[int], *, max_denominator: int = 12,
                  allow_zero: bool = True) -> SearchStrategy[Law]:
    """Rational laws over ``vocab`` tokens: tuples of Fractions summing to exactly 1.

    Every law has a common denominator ``d <= max_denominator`` (each entry's reduced
    denominator divides ``d``). ``allow_zero=False`` gives every token probability >= 1/d, so it
    needs ``max_denominator >= vocab``. ``vocab`` may be a strategy of ints. Shrinks towards small
    denominators and towards the point mass on token 0 (the uniform law when zeros are not allowed):

    >>> from hypothesis import find
    >>> find(distributions(3), lambda law: True)
    (Fraction(1, 1), Fraction(0, 1), Fraction(0, 1))
    >>> find(distributions(3, allow_zero=False), lambda law: True)
    (Fraction(1, 3), Fraction(1, 3), Fraction(1, 3))
    >>> find(distributions(3), lambda law: law[2] > law[0])
    (Fraction(0, 1), Fraction(0, 1), Fraction(1, 1))
    >>> distributions(5, max_denominator=4, allow_zero=False)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: distributions: allow_zero=False needs max_denominator >= vocab (every one of the 5 tokens gets at least 1/denominator), got max_denominator=4
    """
    vocab = _check_int_or_strategy("distributions", "vocab", vocab, 1)
    _check_int("distributions", "max_denominator", max_denominator, 1)
    if not isinstance(allow_zero, bool):
        raise InvalidType(f"distributions: allow_zero must be True or False, got {allow_zero!r}")
    if not allow_zero and _is_int(vocab):
        _check_nonzero_fits("distributions", vocab, max_denominator)
    return _distribution(vocab, max_denominator, allow_zero)


# -- models --------------------------------------------------------------------------------------------

def _per_position(vocab: int, laws: list[Law]) -> Model:
    last = len(laws) - 1
    frozen = tuple(laws)
    table = "(" + ", ".join(_law_text(law) for law in frozen) + ")"
    name = f"from_function(vocab={vocab}, order=None, fn=lambda c: {table}[min(len(c), {last})])"

    def by_position(context: tuple[Any, ...]) -> Law:
        return frozen[min(len(context), last)]

    return _models.from_function(vocab=vocab, fn=by_position, order=None, name=name)


@st.composite
def _model(draw: Any, vocab: int, family: str, order: int, max_denominator: int) -> Model:
    law = _law(vocab, max_denominator, True)
    if family == "context_free":
        first = draw(law)
        return _models.context_free(first, name=f"context_free({_law_text(first)})")
    if family == "per_position":
        count = draw(st.integers(2, 3))
        return _per_position(vocab, [draw(law) for _ in range(count)])
    keys = [k for n in range(order + 1) for k in itertools.product(range(vocab), repeat=n)]
    table = {k: draw(law) for k in keys}
    text = "{" + ", ".join(f"{k!r}: {_law_text(v)}" for k, v in table.items()) + "}"
    return _models.table(vocab=vocab, order=order, table=table,
                         name=f"table(vocab={vocab}, order={order}, table={text})")


@st.composite
def _any_model(draw: Any, vocab: Any, family: str | None, order: int, max_denominator: int) -> Model:
    v = _draw_int(draw, "models", "vocab", vocab, 1)
    fam = family if family is not None else draw(st.sampled_from(FAMILIES))
    return cast("Model", draw(_model(v, fam, order, max_denominator)))


def models(vocab: int | SearchStrategy[int], *, order: int = 1, family: str | None = None,
           max_denominator: int = 12) -> SearchStrategy[Model]:
    """Exact toy models (``es.models.*``) over ``vocab`` tokens whose laws come from :func:`distributions`.

    Families: ``"context_free"`` (one law everywhere, order 0), ``"per_position"`` (a law for
    each context length 0, 1 (, 2), the last one repeating; ``from_function`` with
    ``order=None``), ``"table"`` (``es.models.table`` of the given ``order``, 1 or 2, with a law
    for every context of length <= ``order``, so any prompt works). ``family=None`` draws one
    (shrinking towards ``"context_free"``). Laws are drawn independently, so they may coincide.
    A model's ``name`` is the ``es.models`` call that rebuilds it:

    >>> from hypothesis import find
    >>> m = find(models(2, family="table"), lambda m: m((1,))[1] > 0)
    >>> m.name
    'table(vocab=2, order=1, table={(): (1, 0), (0,): (1, 0), (1,): (0, 1)})'
    >>> m((0, 1)), m.order
    ((Fraction(0, 1), Fraction(1, 1)), 1)
    >>> import exactspec as es
    >>> eval(m.name, vars(es.models))((0, 1))
    (Fraction(0, 1), Fraction(1, 1))
    """
    vocab = _check_int_or_strategy("models", "vocab", vocab, 1)
    _check_family("models", family)
    if order not in TABLE_ORDERS or not _is_int(order):
        raise InvalidValue(f"models: order must be 1 or 2 (the table family's order), got {order!r}")
    _check_int("models", "max_denominator", max_denominator, 1)
    return _any_model(vocab, family, order, max_denominator)


# -- instances -----------------------------------------------------------------------------------------

@st.composite
def _instance(draw: Any, vocab: Any, gamma: Any, tokens: Any, family: str | None, max_denominator: int,
              proposer: str) -> dict[str, Any]:
    v = _draw_int(draw, "instances", "vocab", vocab, 1)
    fam = family if family is not None else draw(st.sampled_from(FAMILIES))
    order = draw(st.sampled_from(TABLE_ORDERS)) if fam == "table" else 1
    target = draw(_model(v, fam, order, max_denominator))
    draft = draw(_model(v, fam, order, max_denominator))
    if proposer == "chain":
        prop: Any = _chain(_draw_int(draw, "instances", "gamma", gamma, 1))
    else:
        prop = _tree(tuple(draw(st.lists(st.integers(1, 2), min_size=1, max_size=2))))
    prompt = tuple(draw(st.lists(st.integers(0, v - 1), max_size=2)))
    n = _draw_int(draw, "instances", "tokens", tokens, 1)
    return {"target": target, "draft": draft, "proposer": prop, "prompt": prompt, "tokens": n}


def instances(*, vocab: int | SearchStrategy[int] = st.integers(2, 4),
              gamma: int | SearchStrategy[int] = st.integers(1, 3),
              tokens: int | SearchStrategy[int] = st.integers(1, 3), family: str | None = None,
              max_denominator: int = 12, proposer: str = "chain") -> SearchStrategy[dict[str, Any]]:
    """Keyword arguments for ``es.audit(rule=..., **inst)``: ``target``, ``draft``, ``proposer``, ``prompt``, ``tokens``.

    ``target`` and ``draft`` are :func:`models` of the same vocabulary and family (a table
    family draws its order, 1 or 2, once for both). ``proposer="chain"`` gives
    ``es.drafts.chain(gamma)``; ``"tree"`` gives ``es.drafts.tree(expansion)`` (iid children,
    honest ``draft`` claims) with ``expansion`` 1-2 levels of 1-2 children, for tree rules
    (``gamma`` is then unused). ``prompt`` has 0-2 tokens. ``vocab``, ``gamma`` and ``tokens``
    may be ints or strategies of ints. The smallest instance where a rule is biased:

    >>> from hypothesis import find
    >>> import exactspec as es
    >>> inst = find(instances(), lambda inst: es.audit(rule=es.rules.greedy_match_sampled, **inst).tv > 0)
    >>> sorted(inst), inst["tokens"], inst["prompt"]
    (['draft', 'prompt', 'proposer', 'target', 'tokens'], 1, ())
    >>> es.audit(rule=es.rules.greedy_match_sampled, **inst).tv > 0
    True
    """
    vocab = _check_int_or_strategy("instances", "vocab", vocab, 1)
    gamma = _check_int_or_strategy("instances", "gamma", gamma, 1)
    tokens = _check_int_or_strategy("instances", "tokens", tokens, 1)
    _check_family("instances", family)
    _check_int("instances", "max_denominator", max_denominator, 1)
    if proposer not in PROPOSERS:
        raise InvalidValue(f"instances: proposer must be one of {', '.join(PROPOSERS)}, got {proposer!r}")
    return _instance(vocab, gamma, tokens, family, max_denominator, proposer)
