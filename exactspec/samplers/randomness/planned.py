"""Planned draws: torch's uniform and exponential fills write values the audit chose, as real tensors.

Lazy uniforms (:mod:`.torch_rng`) follow Python and torch code exactly, but a Triton kernel (even
under ``TRITON_INTERPRET=1``) reads raw memory (``untyped_storage``, ``data_ptr``), where a lazy
tensor has nothing. An adapter that evaluates such code as a function of its random values (the
breakpoint search of :mod:`exactspec.samplers.adapters.explicit_uniforms`) binds a :class:`DrawPlan`
around the call (:func:`planned_draws`): while it is bound, in that thread, ``torch.rand``,
``torch.rand_like``, ``Tensor.uniform_`` and ``Tensor.exponential_`` fill their tensors with the
plan's concrete values (a real tensor, views included: a ``uniform_`` on a slice writes the plan's
values at the slice's elements), note the dtype that meets the randomness (the float64 run's
check of a sampler that casts down) and record which ``generator=`` filled which elements
(:attr:`DrawPlan.fills`). Every other draw still goes to the enumeration.

The first fill of a kind makes the *base* tensor of that kind (its values: the plan's, in row-major
order); a later fill of the same kind must be a view of that base (the per-request generator idiom
``u[start:end].uniform_(generator=g)``), and gets the base's planned values at its elements.

>>> import torch
>>> from exactspec.samplers.randomness.torch_rng import bind, intercept_torch
>>> plan = DrawPlan(uniform=np.array([0.25, 0.5, 0.75]), exponential=np.ones(2))
>>> with intercept_torch(), bind("one branch"), planned_draws(plan):
...     u = torch.rand(3, dtype=torch.float64)
...     _ = u[1:].uniform_(generator=None)
>>> u.tolist(), [(kind, idx) for kind, idx, _ in plan.fills]
([0.25, 0.5, 0.75], [('uniform', (0, 1, 2)), ('uniform', (1, 2))])
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

import numpy as np

from ...errors import UnsupportedRandomness
from .interception import note_dtype, user_site

__all__ = ["DrawPlan", "planned_draws", "current_plan"]

_PLAN: contextvars.ContextVar["DrawPlan | None"] = contextvars.ContextVar("exactspec_draw_plan", default=None)


class DrawPlan:
    """The values torch's fills write while the plan is bound: ``uniform`` and ``exponential`` arrays (row-major).

    ``fills`` records each fill: ``(kind, element indices in the base tensor, generator or None)``.
    """

    def __init__(self, *, uniform: Any = None, exponential: Any = None) -> None:
        self.values = {"uniform": None if uniform is None else np.asarray(uniform, dtype=np.float64).ravel(),
                       "exponential": None if exponential is None else np.asarray(exponential,
                                                                                  dtype=np.float64).ravel()}
        self.bases: dict[str, Any] = {}
        self.fills: list[tuple[str, tuple[int, ...], Any]] = []

    def fill(self, kind: str, tensor: Any, generator: Any = None) -> Any:
        """Write the planned ``kind`` values into ``tensor`` (the base, or a view of it) and return it."""
        import torch
        values = self.values[kind]
        if values is None:
            raise UnsupportedRandomness(f"a {kind} draw at {user_site(3)}: the adapter planned no {kind} values")
        base = self.bases.get(kind)
        if base is None:
            if tensor._base is not None or not tensor.is_contiguous() or tensor.numel() != values.size:
                raise UnsupportedRandomness(
                    f"a {kind} draw at {user_site(3)}: expected a fresh contiguous tensor of {values.size} values "
                    f"(the plan's), got shape {tuple(tensor.shape)}")
            self.bases[kind] = base = tensor
            index = np.arange(values.size)
        else:
            if tensor.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
                raise UnsupportedRandomness(f"a second {kind} draw at {user_site(3)} into a tensor that is not a view "
                                            f"of the first: the plan covers one {kind} tensor")
            flat = torch.arange(base.untyped_storage().nbytes() // base.element_size())
            index = torch.as_strided(flat, tuple(tensor.shape), tensor.stride(),
                                     tensor.storage_offset()).numpy().ravel() - base.storage_offset()
        note_dtype(tensor)
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(values[index].reshape(tuple(tensor.shape))).to(tensor.dtype))
        self.fills.append((kind, tuple(int(i) for i in index), generator))
        return tensor


def current_plan() -> "DrawPlan | None":
    """The plan bound in this thread (None: draws are enumerated lazily, as usual)."""
    return _PLAN.get()


@contextlib.contextmanager
def planned_draws(plan: DrawPlan) -> Iterator[DrawPlan]:
    """Bind ``plan`` in this thread: torch's uniform and exponential fills write its values (see the module)."""
    token = _PLAN.set(plan)
    try:
        yield plan
    finally:
        _PLAN.reset(token)
