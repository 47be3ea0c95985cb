"""Planned draws: torch's uniform and exponential fills write values the audit chose, as real tensors.

Lazy uniforms (:mod:`exactspec.samplers.torch_draws.torch_rng`) follow Python and torch code exactly,
but a Triton kernel (even under ``TRITON_INTERPRET=1``) reads raw memory (``untyped_storage``, ``data_ptr``), where a lazy
tensor has nothing. An adapter that evaluates such code as a function of its random values (the
breakpoint search of :mod:`exactspec.samplers.adapters.explicit_uniforms`) binds a :class:`DrawPlan`
around the call (:func:`planned_draws`): while it is bound, in that thread, ``torch.rand``,
``torch.rand_like``, ``Tensor.uniform_`` and ``Tensor.exponential_`` fill their tensors with the
plan's concrete values (a real tensor, views included: a ``uniform_`` on a slice writes the plan's
values at the slice's elements), note the dtype that meets the randomness (the float64 run's
check of a sampler that casts down) and record which ``generator=`` filled which elements
(:attr:`DrawPlan.fills`). Every other draw still goes to the enumeration.

Each fresh tensor a kind is drawn into (or the tensor a first fill is a view of) takes the next
planned array of that kind, in row-major order; a fill of a view of a tensor filled before (the
per-request generator idiom ``u[start:end].uniform_(generator=g)``) gets that tensor's planned
values at its elements.

>>> import torch
>>> from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch
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
    """The values torch's fills write while the plan is bound: ``uniform`` and ``exponential`` arrays (row-major),
    or lists of arrays, one per fresh tensor of that kind in the order the code draws them.

    ``fills`` records each fill: ``(kind, element indices in the base tensor, generator or None)``.
    """

    def __init__(self, *, uniform: Any = None, exponential: Any = None) -> None:
        self.values = {"uniform": _arrays(uniform), "exponential": _arrays(exponential)}
        self.bases: dict[str, list] = {"uniform": [], "exponential": []}
        self.fills: list[tuple[str, tuple[int, ...], Any]] = []

    def fill(self, kind: str, tensor: Any, generator: Any = None) -> Any:
        """Write the planned ``kind`` values into ``tensor`` (a fresh tensor, or a view of one filled before) and
        return it. The n-th fresh tensor of a kind (or the tensor a first fill is a view of) gets the n-th array."""
        import torch
        bases, planned = self.bases[kind], self.values[kind]
        storage = tensor.untyped_storage().data_ptr()
        number = next((i for i, b in enumerate(bases) if b.untyped_storage().data_ptr() == storage), None)
        if number is None:
            root = tensor if tensor._base is None else tensor._base
            number = len(bases)
            if number >= len(planned):
                raise UnsupportedRandomness(f"a {kind} draw at {user_site(3)}: the adapter planned {len(planned)} "
                                            f"{kind} tensor(s), this is one more")
            if not root.is_contiguous() or root.numel() != planned[number].size:
                raise UnsupportedRandomness(
                    f"a {kind} draw at {user_site(3)}: expected a contiguous tensor of {planned[number].size} values "
                    f"(the plan's {kind} tensor {number}), got shape {tuple(root.shape)}")
            bases.append(root)
        base, values = bases[number], planned[number]
        flat = torch.arange(base.untyped_storage().nbytes() // base.element_size())
        index = torch.as_strided(flat, tuple(tensor.shape), tensor.stride(),
                                 tensor.storage_offset()).numpy().ravel() - base.storage_offset()
        note_dtype(tensor)
        with torch.no_grad():
            tensor.copy_(torch.from_numpy(values[index].reshape(tuple(tensor.shape))).to(tensor.dtype))
        self.fills.append((kind, tuple(int(i) for i in index), generator))
        return tensor


def _arrays(values: Any) -> list[np.ndarray]:
    """None -> no array; one array -> [it]; a list or tuple of arrays -> them (each flattened, float64)."""
    if values is None:
        return []
    if isinstance(values, (list, tuple)):
        return [np.asarray(v, dtype=np.float64).ravel() for v in values]
    return [np.asarray(values, dtype=np.float64).ravel()]


def current_plan() -> "DrawPlan | None":
    """The plan bound in this thread (None: draws are enumerated lazily, as usual).

    >>> current_plan() is None
    True
    """
    return _PLAN.get()


@contextlib.contextmanager
def planned_draws(plan: DrawPlan) -> Iterator[DrawPlan]:
    """Bind ``plan`` in this thread: torch's uniform and exponential fills write its values (see the module).

    >>> with planned_draws(DrawPlan(uniform=[0.5])) as plan:
    ...     current_plan() is plan
    True
    """
    token = _PLAN.set(plan)
    try:
        yield plan
    finally:
        _PLAN.reset(token)
