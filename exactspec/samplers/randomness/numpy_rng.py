"""A ``numpy.random.Generator`` look-alike whose draws fork the exact enumeration.

A third-party numpy sampler receives an :class:`EnumGenerator` where it expects a
``numpy.random.Generator``. Its uniforms are lazy
(:class:`~exactspec.samplers.randomness.lazy_values.LazyUniform`): comparing one with a number (a float is
taken as the rational it is) or with an array of thresholds (entry by entry, in order), scaling
and shifting it keep the law exact, and ``np.searchsorted(np.cumsum(p), u)`` is the inverse-CDF
draw over the float ``cumsum``; ``choice`` with ``p=`` follows numpy's own algorithm (cumulative
sum in float64, normalised by its last entry, one uniform searched into it), so the law is that
of the implementation as it computes. ``exponential``, ``standard_exponential``, ``gumbel``
and ``np.log`` / ``**`` of uniforms are race values followed into ``np.argmax`` (see
:mod:`exactspec.samplers.randomness.lazy_values`).

>>> import numpy as np
>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> law = enumerate_program(lambda rng: int(EnumGenerator(rng).choice(2, p=np.array([0.25, 0.75]))),
...                         get_field(backend="python"), exact_floats=True)
>>> law == {0: F(1, 4), 1: F(3, 4)}
True

During an audit, numpy's legacy global functions (``np.random.random``, ``rand``, ``uniform``,
``randint``, ``choice``, ``binomial(1, p)``, ``permutation``, ``shuffle``) are intercepted the same
way (:class:`EnumLegacy`, see :mod:`exactspec.samplers.randomness.interception`); ``np.random.default_rng()``
and ``np.random.RandomState()`` made inside the sampler without a seed are enumerating
generators too; a seed, ``np.random.seed`` and every other distribution raise
UnsupportedRandomness.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...enumerate.rng import LATTICES, Uniform
from ...errors import UnsupportedRandomness
from ...fields import caller_site
from .interception import FLOAT64_LATTICE, current_rng, deliberate, fisher_yates, native_uniform, unsupported
from .lazy_values import exponential, gumbel, lazy

__all__ = ["EnumGenerator", "EnumLegacy", "legacy_specs"]


def _shape(size: Any) -> tuple[int, ...] | None:
    if size is None:
        return None
    return (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)


class EnumGenerator:
    """The numpy ``Generator`` methods samplers use: ``random``, ``uniform``, ``integers``, ``choice``, ``binomial``,
    ``permutation`` and ``shuffle``."""

    def __init__(self, rng: Any) -> None:
        self._rng = rng

    def _fill(self, size: Any, draw: Any) -> Any:
        shape = _shape(size)
        if shape is None:
            return draw()
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = draw()
        return out

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        """Lazy uniforms on [0, 1) (a scalar, or an object array of them)."""
        if out is not None:
            raise UnsupportedRandomness(f"Generator.random(out=...) at {caller_site(2)}: pass size= instead")
        lat = LATTICES["torch-float32"] if np.dtype(dtype) == np.float32 else FLOAT64_LATTICE   # k * 2**-24 in float32
        return self._fill(size, lambda: lazy(native_uniform(self._rng, lat, "numpy")))

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """Lazy uniforms on [low, high): ``low + (high - low) * u``."""
        return self._fill(size, lambda: low + (high - low) * lazy(native_uniform(self._rng, FLOAT64_LATTICE, "numpy")))

    def exponential(self, scale: Any = 1.0, size: Any = None) -> Any:
        """Exp(1) draws times ``scale``, as race values (followed into argmax: ``argmax(p / E)``).

        >>> from fractions import Fraction as F
        >>> from exactspec.enumerate.rng import enumerate_program
        >>> from exactspec.fields import get_field
        >>> p = np.array([0.25, 0.75])
        >>> law = enumerate_program(lambda rng: int(np.argmax(p / EnumGenerator(rng).exponential(size=2))),
        ...                         get_field(backend="python"))
        >>> law == {0: F(1, 4), 1: F(3, 4)}
        True
        """
        if np.ndim(scale) != 0 or not float(scale) > 0:
            raise UnsupportedRandomness(f"Generator.exponential(scale={scale!r}) at {caller_site(2)}: only one "
                                        "positive scale is followed")
        return self._fill(size, lambda: exponential(self._rng) * scale)

    def standard_exponential(self, size: Any = None, dtype: Any = np.float64, method: str = "zig",
                             out: Any = None) -> Any:
        """Exp(1) draws as race values."""
        if out is not None:
            raise UnsupportedRandomness(f"standard_exponential(out=...) at {caller_site(2)}: pass size= instead")
        return self._fill(size, lambda: exponential(self._rng))

    def gumbel(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        """Gumbel draws ``loc - scale * log(E)`` as race values (followed into argmax: ``argmax(log p + g)``)."""
        if np.ndim(loc) != 0 or np.ndim(scale) != 0 or not float(scale) > 0:
            raise UnsupportedRandomness(f"Generator.gumbel(loc={loc!r}, scale={scale!r}) at {caller_site(2)}: only "
                                        "one location and one positive scale are followed")
        return self._fill(size, lambda: gumbel(self._rng) * scale + loc)

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        """Uniform integers in [low, high) (or [low, high] with ``endpoint``), exactly."""
        if high is None:
            low, high = 0, low
        n = int(high) - int(low) + (1 if endpoint else 0)
        if n < 1:
            raise deliberate(ValueError(f"integers: empty range [{low}, {high}{']' if endpoint else ')'}"))
        from fractions import Fraction
        law = tuple(Fraction(1, n) for _ in range(n))
        return self._fill(size, lambda: int(low) + self._rng.categorical(law))

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None, shuffle: bool = True) -> Any:
        """numpy's ``choice``: with ``p``, one uniform searched into the float64 cumulative sum of ``p``."""
        if not replace:
            raise UnsupportedRandomness(f"Generator.choice(replace=False) at {caller_site(2)} is not intercepted")
        pool = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        if p is None:
            return self._fill(size, lambda: pool[self.integers(len(pool))])
        cdf = _cdf(p, len(pool))
        if cdf is not None:
            observe = getattr(self._rng, "observe", None)
            if observe is not None:   # as below: a float32 p is a sampler computing in float32
                observe(p)
            return self._fill(size, lambda: self._search(pool, cdf))
        atol = np.sqrt(np.finfo(np.float64).eps)
        if isinstance(p, np.ndarray) and np.issubdtype(p.dtype, np.floating):   # numpy's tolerance for p's dtype
            atol = max(atol, np.sqrt(np.finfo(p.dtype).eps))
            observe = getattr(self._rng, "observe", None)
            if observe is not None:       # a float32 p is a sampler computing in float32 (the float64 run's cast check)
                observe(p)
        pf = np.asarray(p, dtype=np.float64)
        if pf.shape != (len(pool),) or np.any(pf < 0) or not np.isfinite(pf).all():
            raise deliberate(ValueError("probabilities are not non-negative, finite and of the right length"))
        if abs(float(pf.sum()) - 1.0) > atol:
            raise deliberate(ValueError("probabilities do not sum to 1"))
        cdf = np.cumsum(pf)
        cdf /= cdf[-1]

        def draw() -> Any:
            u = native_uniform(self._rng, FLOAT64_LATTICE, "numpy")
            for i in range(len(pool) - 1):   # searchsorted(cdf, u, side="right")
                if u < cdf[i]:
                    return pool[i]
            return pool[-1]
        return self._fill(size, draw)

    def _search(self, pool: Any, cdf: Any) -> Any:
        """One uniform searched into ``cdf`` (``searchsorted(cdf, u, side="right")``), as :meth:`choice` draws."""
        u = native_uniform(self._rng, FLOAT64_LATTICE, "numpy")
        for i in range(len(pool) - 1):
            if u < cdf[i]:
                return pool[i]
        return pool[-1]

    def binomial(self, n: int, p: Any, size: Any = None) -> Any:
        """``n = 1`` only (a coin): ``u < p``."""
        if int(n) != 1:
            raise UnsupportedRandomness(f"Generator.binomial(n={n}) at {caller_site(2)}: only n = 1 is intercepted")
        return self._fill(size, lambda: int(native_uniform(self._rng, FLOAT64_LATTICE, "numpy") < p))

    def permutation(self, x: Any, axis: int = 0) -> Any:
        """A uniformly permuted copy of ``x`` (or of ``arange(x)`` for an int), exactly (Fisher-Yates)."""
        arr = np.arange(int(x)) if np.ndim(x) == 0 else np.array(x, copy=True)
        self.shuffle(arr, axis)
        return arr

    def shuffle(self, x: Any, axis: int = 0) -> None:
        """Shuffle ``x`` in place along its first axis, a uniform permutation drawn exactly."""
        if axis != 0:
            raise UnsupportedRandomness(f"shuffle(axis={axis}) at {caller_site(2)}: only axis 0 is intercepted")
        perm = fisher_yates(self._rng, len(x), "shuffle")
        if isinstance(x, np.ndarray):
            x[...] = x[perm]
        else:
            x[:] = [x[k] for k in perm]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedRandomness(f"numpy Generator.{name} is not intercepted (at {caller_site(2)}); the enumerator "
                                    "follows random, uniform, integers, choice, binomial(1, p), permutation, "
                                    "shuffle, and exponential and gumbel draws into argmax races")


#: (dtype, bytes) of a valid 1-D float ``p`` handed to ``choice`` -> its normalised float64 cumulative sum
_CDFS: dict = {}


def _cdf(p: Any, n: int) -> Any:
    """The cdf :meth:`EnumGenerator.choice` searches for a float array ``p`` it accepted before (None: not yet, or
    not a float array: ``choice`` checks it and computes it as numpy does, and remembers it when valid)."""
    if type(p) is not np.ndarray or p.dtype.kind != "f" or p.shape != (n,):
        return None
    key = (p.dtype.str, p.tobytes())
    hit = _CDFS.get(key)
    if hit is None:
        atol = max(np.sqrt(np.finfo(np.float64).eps), np.sqrt(np.finfo(p.dtype).eps))
        pf = np.asarray(p, dtype=np.float64)
        if np.any(pf < 0) or not np.isfinite(pf).all() or abs(float(pf.sum()) - 1.0) > atol:
            return None     # choice raises numpy's error
        cdf = np.cumsum(pf)
        cdf /= cdf[-1]
        if len(_CDFS) > 1 << 14:
            _CDFS.clear()
        hit = _CDFS[key] = cdf
    return hit


class EnumLegacy:
    """numpy's legacy global functions (``np.random.random``, ``rand``, ``choice``, ...) under the enumeration.

    ``random``/``random_sample``/``ranf``/``sample``/``rand`` and ``uniform`` are lazy uniforms,
    ``randint`` and ``choice`` follow numpy's algorithms exactly (as :class:`EnumGenerator`),
    ``binomial`` with ``n = 1``, ``permutation`` and ``shuffle`` too; every other function
    raises UnsupportedRandomness naming it.

    >>> from fractions import Fraction as F
    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> law = enumerate_program(lambda rng: bool(EnumLegacy(rng).rand() < 0.5), get_field(backend="python"),
    ...                         exact_floats=True)
    >>> law == {True: F(1, 2), False: F(1, 2)}
    True
    """

    def __init__(self, rng: Any, owner: str = "numpy.random") -> None:
        self._g = EnumGenerator(rng)
        self._owner = owner

    def random_sample(self, size: Any = None) -> Any:
        """Lazy uniforms on [0, 1) (a scalar, or an object array of them)."""
        return self._g.random(size)

    random = ranf = sample = random_sample

    def rand(self, *shape: int) -> Any:
        """``rand(d0, d1, ...)``: lazy uniforms of that shape (a scalar without arguments)."""
        return self._g.random(shape if shape else None)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """Lazy uniforms on [low, high)."""
        return self._g.uniform(low, high, size)

    def randint(self, low: int, high: int | None = None, size: Any = None, dtype: Any = int) -> Any:
        """Uniform integers in [low, high) (or [0, low)), exactly."""
        return self._g.integers(low, high, size)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
        """numpy's legacy ``choice`` (same algorithm as the Generator's with ``p``)."""
        return self._g.choice(a, size, replace, p)

    def binomial(self, n: int, p: Any, size: Any = None) -> Any:
        """``n = 1`` only (a coin): ``u < p``."""
        return self._g.binomial(n, p, size)

    def exponential(self, scale: Any = 1.0, size: Any = None) -> Any:
        """Exp(1) draws times ``scale`` (race values, see :meth:`EnumGenerator.exponential`)."""
        return self._g.exponential(scale, size)

    def standard_exponential(self, size: Any = None) -> Any:
        """Exp(1) draws (race values)."""
        return self._g.standard_exponential(size)

    def gumbel(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        """Gumbel draws (race values, see :meth:`EnumGenerator.gumbel`)."""
        return self._g.gumbel(loc, scale, size)

    def permutation(self, x: Any) -> Any:
        """A uniformly permuted copy (or ``arange(x)`` permuted), exactly."""
        return self._g.permutation(x)

    def shuffle(self, x: Any) -> None:
        """Shuffle in place along the first axis, exactly."""
        self._g.shuffle(x)

    def seed(self, *args: Any, **kwargs: Any) -> None:
        """Seeding inside an audited sampler: UnsupportedRandomness (the numbers would repeat)."""
        raise unsupported(f"{self._owner}.seed", "seeding inside the sampler makes its draws repeat from call to call, "
                          "so they are not random; exactspec will not audit them as random draws")

    set_state = seed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(f"{self._owner}.{name}", "the audit enumerates random, random_sample, ranf, sample, rand, "
                          "uniform, randint, choice, binomial(1, p), permutation, shuffle, and exponential and gumbel "
                          "(into argmax races) of numpy's legacy generator; other draws cannot be enumerated exactly")


def _legacy_impl(name: str) -> Any:
    def impl(*args: Any, **kwargs: Any) -> Any:
        return getattr(EnumLegacy(current_rng()), name)(*args, **kwargs)
    impl.__name__ = name
    return impl


_SEEDED = ("a generator seeded inside the sampler draws the same numbers at every call, so its draws are not random "
           "(the re-seeding bug); exactspec will not audit them as random draws: make it without a seed, or draw from "
           "the rng the adapter passes")


def _default_rng(seed: Any = None) -> Any:
    if seed is None:
        return EnumGenerator(current_rng())
    if isinstance(seed, EnumGenerator):
        return seed                      # default_rng(rng) hands a Generator back unchanged, as numpy does
    if isinstance(seed, (np.random.Generator, np.random.BitGenerator)):
        raise unsupported("numpy.random.default_rng(<a generator>)", "a generator made before the audit cannot be "
                          "intercepted: draw from the rng the adapter passes")
    raise unsupported(f"numpy.random.default_rng({seed!r})", _SEEDED)


def _random_state(seed: Any = None) -> Any:
    if seed is None:
        return EnumLegacy(current_rng(), "RandomState()")
    raise unsupported(f"numpy.random.RandomState({seed!r})", _SEEDED)


def _generator(*args: Any, **kwargs: Any) -> Any:
    raise unsupported("numpy.random.Generator(...)", "a Generator built on an explicit bit generator cannot be "
                      "intercepted; make it with np.random.default_rng() (no seed) or draw from the rng the adapter "
                      "passes")


_SEARCHSORTED = np.searchsorted


def _searchsorted(a: Any, v: Any, side: Literal["left", "right"] = "left", sorter: Any = None) -> Any:
    """``np.searchsorted`` with lazy uniforms among the keys: each key searched on its own, exactly.

    numpy's own search compares consecutive keys with each other (two different uniforms, which
    the enumeration cannot compare); here each key counts the boundaries below it (``<=`` it with
    ``side="right"``), in order, so the index has the exact measure of its interval.
    """
    keys = np.asarray(v, dtype=object) if not isinstance(v, Uniform) else None
    if keys is None or (keys.dtype == object and any(isinstance(k, Uniform) for k in keys.ravel())):
        bounds = np.asarray(a)
        if sorter is not None:
            bounds = bounds[np.asarray(sorter)]
        if bounds.ndim != 1:
            raise deliberate(ValueError("object too deep for desired array"))

        def index(u: Any) -> int:
            k = 0
            for c in bounds:
                if (u >= c) if side == "right" else (u > c):
                    k += 1
                else:
                    break
            return k
        if keys is None:
            return np.intp(index(v))
        out = np.empty(keys.shape, dtype=np.intp)
        for idx in np.ndindex(*keys.shape):
            out[idx] = index(keys[idx])
        return out
    return _SEARCHSORTED(a, v, side=side, sorter=sorter)


def legacy_specs() -> list[tuple]:
    """What :func:`~exactspec.samplers.randomness.interception.intercepting` patches in ``numpy.random``."""
    legacy = np.random.mtrand._rand
    names = [n for n in dir(np.random) if getattr(getattr(np.random, n, None), "__self__", None) is legacy
             and n != "get_state"]
    names += [n for n in ("ranf", "sample", "seed") if n not in names]
    specs: list[tuple] = [(np.random, n, _legacy_impl(n), "numpy") for n in names]
    specs += [(np.random, "default_rng", _default_rng, None), (np.random, "RandomState", _random_state, "class"),
              (np.random, "Generator", _generator, "class"), (np, "searchsorted", _searchsorted, None)]
    return specs


