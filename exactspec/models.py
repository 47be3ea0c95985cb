"""Exact toy language models: context -> law over ``vocab`` tokens, in rationals.

Every model says which context suffix it reads (``order``: the last ``order`` tokens; ``None``
means the whole context), validates every law it returns, and memoises laws by that suffix.
A context shorter than ``order`` is looked up by the whole context.

>>> from fractions import Fraction as F
>>> m = table(vocab=2, order=1, table={(): (F(1, 2), F(1, 2)), (0,): (1, 0), (1,): (F(1, 3), F(2, 3))})
>>> m((1, 1, 0))
(Fraction(1, 1), Fraction(0, 1))
>>> m(())
(Fraction(1, 2), Fraction(1, 2))
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from .errors import ExactSpecError, InvalidDistribution, InvalidType, InvalidValue, ModelError
from .laws import to_law, to_rational

__all__ = ["Model", "table", "from_function", "context_free", "random_table", "perturbed", "sharpen", "mixture",
           "rounded", "round_to_format"]

Law = tuple[Fraction, ...]


def _check_vocab(vocab: Any) -> int:
    if isinstance(vocab, bool) or not isinstance(vocab, int):
        raise InvalidType(f"vocab must be a positive int, got {vocab!r}")
    elif vocab < 1:
        raise InvalidValue(f"vocab must be a positive int, got {vocab!r}")
    return vocab


def _check_order(order: Any) -> int | None:
    if order is None:
        return None
    if isinstance(order, bool) or not isinstance(order, int):
        raise InvalidType(f"order must be a non-negative int or None (whole context), got {order!r}")
    elif order < 0:
        raise InvalidValue(f"order must be a non-negative int or None (whole context), got {order!r}")
    return order


class Model:
    """A language model over ``vocab`` tokens that reads the last ``order`` context tokens.

    Call it with a context tuple to get its law (a tuple of Fractions summing to 1).

    >>> m = context_free(("3/5", "2/5"))
    >>> m((0, 1)), m.order, m.vocab
    ((Fraction(3, 5), Fraction(2, 5)), 0, 2)
    """

    def __init__(self, vocab: int, order: int | None, name: str, *, exact_floats: bool = False) -> None:
        self.vocab = _check_vocab(vocab)
        self.order = _check_order(order)
        self.name = name
        self.exact_floats = exact_floats
        self._cache: dict[tuple[Any, ...], Law] = {}

    def key(self, context: Sequence[int]) -> tuple[Any, ...]:
        """The part of ``context`` this model reads (its memo key).

        >>> random_table(vocab=3, order=2, seed=0).key((0, 1, 2))
        (1, 2)
        """
        if self.order is None:
            return tuple(context)
        if self.order == 0:
            return ()
        return tuple(context[-self.order:])

    def __call__(self, context: Sequence[int] = ()) -> Law:
        key = self.key(context)
        law = self._cache.get(key)
        if law is None:
            where = f"{self.name} model, context {key}"
            try:
                # to_law iterates what the model returned: a generator runs user code there too
                law = to_law(self._raw(key), self.vocab, where=where, exact_floats=self.exact_floats)
            except (ExactSpecError, MemoryError, RecursionError):
                raise                 # already names the model, or a budget the audit's guard reports (exit 3)
            except (Exception, SystemExit) as exc:  # sys.exit() in a model is a failure of user code too
                raise ModelError(f"{where}: the model raised {type(exc).__name__}: {exc}") from exc
            self._cache[key] = law
        return law

    law = __call__

    def _raw(self, key: tuple[Any, ...]) -> Any:
        raise NotImplementedError  # pragma: no cover - abstract

    def __repr__(self) -> str:
        return f"<{self.name} model: vocab={self.vocab}, order={self.order}>"


class _Table(Model):
    def __init__(self, vocab: int, order: int | None, entries: Mapping[tuple[Any, ...], Any], name: str,
                 exact_floats: bool) -> None:
        super().__init__(vocab, order, name, exact_floats=exact_floats)
        if not isinstance(entries, Mapping):
            raise InvalidType(f"{name} model: table must be a non-empty dict {{context tuple: law}}")
        if not entries:
            raise InvalidValue(f"{name} model: table must be a non-empty dict {{context tuple: law}}")
        self._entries: dict[tuple[Any, ...], Any] = {}
        for k, v in entries.items():
            key = (k,) if isinstance(k, int) and not isinstance(k, bool) else k
            if not isinstance(key, tuple) or not all(isinstance(t, int) and 0 <= t < vocab for t in key):
                raise InvalidValue(f"{name} model: table key {k!r} is not a tuple of tokens in 0..{vocab - 1}")
            if self.order is not None and len(key) > self.order:
                raise InvalidValue(f"{name} model: table key {k!r} is longer than order={self.order}")
            self._entries[key] = v
            self(key)  # validate every law now, where the user wrote it

    def _raw(self, key: tuple[Any, ...]) -> Any:
        try:
            return self._entries[key]
        except KeyError:
            raise InvalidDistribution(f"{self.name} model has no law for context {key}") from None


def table(*, vocab: int, order: int | None, table: Mapping[tuple[Any, ...], Any], exact_floats: bool = False,
          name: str = "table") -> Model:
    """A model given by an explicit table ``{last `order` tokens: law}``.

    Keys are tuples of the last ``order`` tokens; a context shorter than ``order`` is looked
    up by the whole context (so a table for prompts of length 1 needs keys of length 1).

    >>> m = table(vocab=2, order=1, table={(0,): ("1/2", "1/2"), (1,): (0, 1)})
    >>> m((0, 1))
    (Fraction(0, 1), Fraction(1, 1))
    >>> m(())
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: table model has no law for context ()
    """
    return _Table(vocab, order, table, name, exact_floats)


class _Function(Model):
    def __init__(self, vocab: int, fn: Callable[[tuple[Any, ...]], Any], order: int | None, name: str,
                 exact_floats: bool) -> None:
        if not callable(fn):
            raise InvalidType(f"from_function needs a callable, got {fn!r}")
        super().__init__(vocab, order, name, exact_floats=exact_floats)
        self._fn = fn

    def _raw(self, key: tuple[Any, ...]) -> Any:
        return self._fn(key)


def from_function(*, vocab: int, fn: Callable[[tuple[Any, ...]], Any], order: int | None = None,
                  exact_floats: bool = False, name: str | None = None) -> Model:
    """A model computed by ``fn(context) -> law``; ``fn`` receives only the last ``order`` tokens.

    With ``order=None`` the whole context is passed (and memoised) as it is.

    >>> m = from_function(vocab=2, order=1, fn=lambda c: (1, 0) if c == (1,) else ("1/2", "1/2"))
    >>> m((0, 1)), m((1, 0))
    ((Fraction(1, 1), Fraction(0, 1)), (Fraction(1, 2), Fraction(1, 2)))
    """
    return _Function(vocab, fn, order, name if name else getattr(fn, "__name__", "function"), exact_floats)


def context_free(law: Sequence[Any], *, exact_floats: bool = False, name: str = "context_free") -> Model:
    """The same law at every position (order 0).

    >>> context_free(("1/3", "2/3"))(())
    (Fraction(1, 3), Fraction(2, 3))
    """
    try:
        vocab = len(law)
    except TypeError:
        raise InvalidDistribution(f"{name} model: expected a sequence of probabilities, got {law!r}") from None
    if vocab == 0:
        raise InvalidDistribution(f"{name} model: the law is empty")
    return _Table(vocab, 0, {(): law}, name, exact_floats)


def _random_law(rng: random.Random, vocab: int, max_weight: int, zero_prob: float) -> Law:
    while True:
        w = [0 if zero_prob and rng.random() < zero_prob else rng.randint(1, max_weight) for _ in range(vocab)]
        s = sum(w)
        if s:
            return tuple(Fraction(x, s) for x in w)


class _Random(Model):
    def __init__(self, vocab: int, order: int | None, seed: Any, max_weight: int, zero_prob: float) -> None:
        super().__init__(vocab, order, f"random_table(seed={seed!r})")
        if isinstance(max_weight, bool) or not isinstance(max_weight, int):
            raise InvalidType(f"max_weight must be a positive int, got {max_weight!r}")
        elif max_weight < 1:
            raise InvalidValue(f"max_weight must be a positive int, got {max_weight!r}")
        if isinstance(zero_prob, bool) or not isinstance(zero_prob, (int, float)):
            raise InvalidType(f"zero_prob must lie in [0, 1), got {zero_prob!r}")
        if not 0 <= zero_prob < 1:
            raise InvalidValue(f"zero_prob must lie in [0, 1), got {zero_prob!r}")
        self.seed, self.max_weight, self.zero_prob = seed, max_weight, zero_prob

    def _raw(self, key: tuple[Any, ...]) -> Law:
        rng = random.Random(f"random_table|{self.seed!r}|{self.vocab}|{key}")
        return _random_law(rng, self.vocab, self.max_weight, self.zero_prob)


def random_table(*, vocab: int, order: int | None = 2, seed: Any = 0, max_weight: int = 9,
                 zero_prob: float = 0.0) -> Model:
    """A reproducible random rational table: each context's law is integer weights in 1..max_weight, normalised.

    The law of a context depends only on (seed, vocab, context), never on lookup order.
    ``zero_prob`` makes each weight 0 with that probability (keeping at least one positive).

    >>> m = random_table(vocab=3, order=2, seed=0)
    >>> m((0, 1)) == random_table(vocab=3, order=2, seed=0)((2, 0, 1))
    True
    >>> sum(m((0, 1)))
    Fraction(1, 1)
    """
    return _Random(vocab, order, seed, max_weight, zero_prob)


class _Perturbed(Model):
    def __init__(self, base: Model, seed: Any, strength: Fraction, max_weight: int) -> None:
        super().__init__(base.vocab, base.order, f"perturbed({base.name}, seed={seed!r})")
        self.base, self.seed, self.strength, self.max_weight = base, seed, strength, max_weight

    def _raw(self, key: tuple[Any, ...]) -> Law:
        rng = random.Random(f"perturbed|{self.seed!r}|{self.vocab}|{key}")
        noise = _random_law(rng, self.vocab, self.max_weight, 0.3)
        s = self.strength
        return tuple((1 - s) * a + s * b for a, b in zip(self.base(key), noise))


def perturbed(base: Model, *, seed: Any = 1, strength: Any = Fraction(1, 2), max_weight: int = 9) -> Model:
    """A related, different rational model: ``(1 - strength) * base + strength * noise`` per context.

    The noise is a seeded random rational law (some entries 0), so the draft differs from the
    target yet covers its support; use it as a draft model.

    >>> t = context_free(("1/2", "1/2"))
    >>> d = perturbed(t, seed=1)
    >>> d(()) != t(()) and sum(d(())) == 1
    True
    """
    if not isinstance(base, Model):
        raise InvalidType(f"perturbed needs a Model, got {base!r}")
    if isinstance(max_weight, bool) or not isinstance(max_weight, int):
        raise InvalidType(f"max_weight must be a positive int, got {max_weight!r}")
    elif max_weight < 1:
        raise InvalidValue(f"max_weight must be a positive int, got {max_weight!r}")
    try:
        s = None if isinstance(strength, float) else to_rational(strength, "perturbed strength")
    except ExactSpecError as exc:
        raise InvalidValue(f"strength must be a rational in [0, 1]: {exc}") from None
    if s is None or not 0 <= s <= 1:
        raise InvalidValue(f"strength must be a rational in [0, 1], got {strength!r}")
    return _Perturbed(base, seed, s, max_weight)


class _Sharpened(Model):
    def __init__(self, base: Model, k: int) -> None:
        super().__init__(base.vocab, base.order, f"sharpen({base.name}, {k})")
        self.base, self.k = base, k

    def _raw(self, key: tuple[Any, ...]) -> Law:
        w = [x ** self.k for x in self.base(key)]
        s = sum(w)
        return tuple(x / s for x in w)


def sharpen(base: Model, k: int) -> Model:
    """Integer-power sharpening ``p**k / sum(p**k)``: the exact law at temperature ``1/k``.

    >>> sharpen(context_free(("1/3", "2/3")), 2)(())
    (Fraction(1, 5), Fraction(4, 5))
    """
    if not isinstance(base, Model):
        raise InvalidType(f"sharpen needs a Model, got {base!r}")
    if isinstance(k, bool) or not isinstance(k, int):
        raise InvalidType(f"sharpen needs an int power k >= 1, got {k!r}")
    elif k < 1:
        raise InvalidValue(f"sharpen needs an int power k >= 1, got {k!r}")
    return _Sharpened(base, k)


class _Mixture(Model):
    def __init__(self, parts: list[Model], weights: tuple[Fraction, ...]) -> None:
        orders = [m.order for m in parts]
        order = None if any(o is None for o in orders) else max(o for o in orders if o is not None)
        name = "mixture(" + ", ".join(f"{w}*{m.name}" for m, w in zip(parts, weights)) + ")"
        super().__init__(parts[0].vocab, order, name)
        self.parts, self.weights = parts, weights

    def _raw(self, key: tuple[Any, ...]) -> Law:
        laws = [m(key) for m in self.parts]
        return tuple(sum((w * law[i] for w, law in zip(self.weights, laws)), Fraction(0)) for i in range(self.vocab))


def mixture(parts: Sequence[Model], weights: Sequence[Any]) -> Model:
    """The per-context mixture ``sum_i weights[i] * parts[i](context)`` (weights: rationals summing to 1).

    Useful as a declared target, e.g. ``w * p + (1 - w) * q`` for a relaxed acceptance test.

    >>> m = mixture([context_free((1, 0)), context_free((0, 1))], ["1/4", "3/4"])
    >>> m(())
    (Fraction(1, 4), Fraction(3, 4))
    """
    parts = list(parts)
    if not parts or not all(isinstance(m, Model) for m in parts):
        raise InvalidValue("mixture needs a non-empty list of Models")
    if len({m.vocab for m in parts}) != 1:
        raise InvalidValue(f"mixture parts have different vocabularies: {[m.vocab for m in parts]}")
    if len(weights) != len(parts):
        raise InvalidValue(f"mixture has {len(parts)} parts but {len(weights)} weights")
    w = to_law(weights, len(parts), where="mixture weights")
    return _Mixture(parts, w)


#: (significand bits including the implicit one, smallest normal exponent) of binary float formats
FORMATS = {"bfloat16": (8, -126), "float16": (11, -14), "float32": (24, -126)}


def round_to_format(x: Fraction, fmt: str) -> Fraction:
    """``x`` rounded to the nearest ``fmt`` number (ties to even), as an exact rational.

    >>> round_to_format(Fraction(1, 3), "bfloat16")
    Fraction(171, 512)
    """
    bits, emin = FORMATS[fmt]
    if x == 0:
        return Fraction(0)
    sign = -1 if x < 0 else 1
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    e = max(e, emin)                                   # subnormals share the smallest exponent
    scale = Fraction(2) ** (e - bits + 1)
    return sign * round(x / scale) * scale             # round() on a Fraction: ties to even


class _Rounded(Model):
    def __init__(self, base: Model, fmt: str) -> None:
        super().__init__(base.vocab, base.order, f"rounded({base.name}, {fmt!r})")
        self.base, self.fmt = base, fmt

    def _raw(self, key: tuple[Any, ...]) -> Law:
        w = [round_to_format(x, self.fmt) for x in self.base(key)]
        s = sum(w)
        return tuple(x / s for x in w)


def rounded(base: Model, fmt: str = "bfloat16") -> Model:
    """Each law rounded entrywise to a float format (bfloat16, float16, float32) and renormalised.

    The law a draft really comes from when it is sampled from low-precision probabilities.

    >>> rounded(context_free(("1/10", "9/10")), "bfloat16")(())   # 1/10 -> 205/2048, 9/10 -> 115/128
    (Fraction(41, 409), Fraction(368, 409))
    """
    if not isinstance(base, Model):
        raise InvalidType(f"rounded needs a Model, got {base!r}")
    if fmt not in FORMATS:
        raise InvalidValue(f"unknown float format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return _Rounded(base, fmt)
