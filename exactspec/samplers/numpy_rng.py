"""A ``numpy.random.Generator`` look-alike whose draws fork the exact enumeration.

A third-party numpy sampler receives an :class:`EnumGenerator` where it expects a
``numpy.random.Generator``. Its uniforms are lazy: comparing one with a number (a float is
taken as the rational it is) or scaling and shifting it keeps the law exact; ``choice`` with
``p=`` follows numpy's own algorithm (cumulative sum in float64, normalised by its last entry,
one uniform searched into it), so the law is that of the implementation as it computes.

>>> import numpy as np
>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> law = enumerate_program(lambda rng: int(EnumGenerator(rng).choice(2, p=np.array([0.25, 0.75]))),
...                         get_field(backend="python"), exact_floats=True)
>>> law == {0: F(1, 4), 1: F(3, 4)}
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UnsupportedRandomness
from ..fields import _caller

__all__ = ["EnumGenerator"]


def _shape(size: Any) -> tuple[int, ...] | None:
    if size is None:
        return None
    return (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)


class EnumGenerator:
    """The numpy ``Generator`` methods samplers use: ``random``, ``uniform``, ``integers``, ``choice``, ``binomial``."""

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
            raise UnsupportedRandomness(f"Generator.random(out=...) at {_caller(2)}: pass size= instead")
        return self._fill(size, self._rng.uniform)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """Lazy uniforms on [low, high): ``low + (high - low) * u``."""
        return self._fill(size, lambda: low + (high - low) * self._rng.uniform())

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        """Uniform integers in [low, high) (or [low, high] with ``endpoint``), exactly."""
        if high is None:
            low, high = 0, low
        n = int(high) - int(low) + (1 if endpoint else 0)
        if n < 1:
            raise ValueError(f"integers: empty range [{low}, {high}{']' if endpoint else ')'}")
        from fractions import Fraction
        law = tuple(Fraction(1, n) for _ in range(n))
        return self._fill(size, lambda: int(low) + self._rng.categorical(law))

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None, shuffle: bool = True) -> Any:
        """numpy's ``choice``: with ``p``, one uniform searched into the float64 cumulative sum of ``p``."""
        if not replace:
            raise UnsupportedRandomness(f"Generator.choice(replace=False) at {_caller(2)} is not intercepted")
        pool = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        if p is None:
            return self._fill(size, lambda: pool[self.integers(len(pool))])
        pf = np.asarray(p, dtype=np.float64)
        if pf.shape != (len(pool),) or np.any(pf < 0) or not np.isfinite(pf).all():
            raise ValueError("probabilities are not non-negative, finite and of the right length")
        if abs(float(pf.sum()) - 1.0) > np.sqrt(np.finfo(np.float64).eps):
            raise ValueError("probabilities do not sum to 1")
        cdf = np.cumsum(pf)
        cdf /= cdf[-1]

        def draw() -> Any:
            u = self._rng.uniform()
            for i in range(len(pool) - 1):   # searchsorted(cdf, u, side="right")
                if u < cdf[i]:
                    return pool[i]
            return pool[-1]
        return self._fill(size, draw)

    def binomial(self, n: int, p: Any, size: Any = None) -> Any:
        """``n = 1`` only (a coin): ``u < p``."""
        if int(n) != 1:
            raise UnsupportedRandomness(f"Generator.binomial(n={n}) at {_caller(2)}: only n = 1 is intercepted")
        return self._fill(size, lambda: int(self._rng.uniform() < p))

    def __getattr__(self, name: str) -> Any:
        raise UnsupportedRandomness(f"numpy Generator.{name} is not intercepted (at {_caller(2)}); the enumerator "
                                    "follows random, uniform, integers, choice and binomial(1, p)")


