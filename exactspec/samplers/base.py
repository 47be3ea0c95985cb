"""The :class:`Adapter` base class, below both the registry (:mod:`.adapters`) and every adapter module.

The registry (``get_adapter``, ``ADAPTERS``) imports the adapter modules, and each adapter module
subclasses :class:`Adapter`: the base class lives here, so neither side imports the other.

>>> class Mine(Adapter):
...     name, family = "mine", "chain"
>>> Mine().reference_rule.name
'speculative_sampling'
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..laws import memoised
from ..protocols import Rng, Step, TreeStep

__all__ = ["Adapter"]


class Adapter:
    """Base class of adapters (see :mod:`exactspec.samplers.adapters`).

    >>> Adapter.tokens([[3, 1, -1]])
    [3, 1]
    """

    name = "adapter"
    family = "chain"
    needs_torch = False
    reference: Callable | None = None
    #: the catalog rule the reference sampler implements (its exact law, for the rounding figure)
    reference_rule_name = "speculative_sampling"

    @property
    def reference_rule(self) -> Any:
        from ..rules import get
        return get(self.reference_rule_name) if self.reference_rule_name else None

    @staticmethod
    def floats(law: tuple) -> np.ndarray:
        """A law as float64 (memoised per law object), as a float implementation receives it."""
        return memoised("float64", law, None, lambda: np.array([float(x) for x in law], dtype=np.float64))

    def chain_arrays(self, step: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(drafted ids [gamma], claimed draft laws [gamma, V], target laws [gamma + 1, V]) in float64."""
        drafts = np.array(step.drafts, dtype=np.int64)
        q = np.stack([self.floats(step.claimed(j)) for j in range(step.gamma)])
        p = np.stack([self.floats(step.target(j)) for j in range(step.gamma + 1)])
        return drafts, q, p

    @staticmethod
    def tokens(out: Any) -> list[int]:
        """Emitted token ids from a sampler's return value (negative ids are padding)."""
        return [int(t) for t in np.asarray(out).ravel() if int(t) >= 0]

    def call(self, sampler: Callable, step: Step | TreeStep, rng: Rng) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError
