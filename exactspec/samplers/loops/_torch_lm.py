"""The torch ``nn.Module`` behind :func:`exactspec.stand_in` (``kind="torch-lm"``); imported only when one is built.

>>> import torch, exactspec as es
>>> from exactspec.samplers.loops._torch_lm import TorchLM
>>> TorchLM(es.models.context_free(("1/4", "3/4")), torch.float64)(torch.tensor([[0]])).softmax(-1).tolist()
[[[0.25, 0.75]]]
"""

from __future__ import annotations

import itertools
import math
import operator
from fractions import Fraction
from typing import Any

import torch

from ...errors import ExactSpecError, InvalidType, InvalidValue
from ..torch_draws.lazy_draws import LazyCategoricalTensor
from ..torch_draws.lazy_worlds import WORLDS, deferring, domain, lazy_logits, value_of
from ..randomness.precision_watch import unwatched
from ...models import Model

__all__ = ["TorchLM"]


def _log(p: Fraction) -> float:
    """``log(p)`` for an exact probability (``-inf`` for 0), without overflow for huge denominators."""
    if p == 0:
        return float("-inf")
    return math.log(p.numerator) - math.log(p.denominator)


def _dtype(dtype: Any, where: str) -> Any:
    what = f"{where}: dtype must be a floating torch dtype (torch.float32, torch.float64, ...), got {dtype!r}"
    if not isinstance(dtype, torch.dtype):
        raise InvalidType(what)
    if not dtype.is_floating_point:
        raise InvalidValue(what)
    return dtype


class TorchLM(torch.nn.Module):
    """A causal LM over an exact law: ``forward(idx, input_pos=None, ...) -> logits [B, T, V]``.

    ``reset()`` empties its token cache (what ``input_pos`` calls write to); an audit calls it
    before every branch. ``calls`` counts forward calls since the last ``reset()`` and
    ``total_calls`` since it was built; ``contexts`` holds, per forward call since the last
    ``reset()``, the whole context its first row scored (cache + ids: what a loop audit reads its
    steps from). ``max_seq_length`` is settable, as litgpt expects.

    >>> import torch, exactspec as es
    >>> lm = TorchLM(es.models.from_function(vocab=2, order=1, fn=lambda c: ("1/2", "1/2") if not c or c[-1]
    ...                                      else ("1/4", "3/4")), torch.float64)
    >>> lm(torch.tensor([0, 1]))[0].softmax(-1).tolist()      # contexts (0,) and (0, 1)
    [[0.25, 0.75], [0.5, 0.5]]
    >>> _ = lm(torch.tensor([[0]]), input_pos=torch.tensor([0]))  # the cache holds (0,)
    >>> lm(torch.tensor([[1]]), input_pos=torch.tensor([1]))[0, 0].softmax(-1).tolist()
    [0.5, 0.5]
    """

    def __init__(self, model: Model, dtype: Any = None) -> None:
        super().__init__()
        if not isinstance(model, Model):
            raise InvalidType(f"stand_in: model must be an exactspec model (es.models.*), got {model!r}")
        self.model = model
        self.vocab = model.vocab
        self.dtype = _dtype(torch.float32 if dtype is None else dtype, "stand_in")
        self.max_seq_length = 1 << 20
        self._rows: dict[tuple, Any] = {}        # model.key(context) -> logits row [V]
        self._calls: dict[tuple, Any] = {}       # (cached prefix key, ids of the row) -> logits [T, V]
        self._cache: list[int] = []              # the token ids written through input_pos
        self._worlds: dict[tuple, dict] = {}     # (context shape, domains) -> per-world logits rows (lazy_worlds)
        self.calls = 0
        self.total_calls = 0
        self.contexts: list[tuple] = []
        # a parameter, so code asking for the module's device / dtype finds one
        self.register_buffer("_anchor", torch.zeros((), dtype=self.dtype), persistent=False)

    def extra_repr(self) -> str:  # noqa: D102
        return f"model={self.model.name}, vocab={self.vocab}, dtype={self.dtype}"

    # -- cache bookkeeping that real code calls ------------------------------------------------------
    # (plain attributes are written through __dict__: nn.Module.__setattr__ is slow, and an audit replays
    # the loop once per branch)
    def reset(self) -> None:
        """Empty the token cache and the per-branch call count (the memo of laws is kept)."""
        self.__dict__["_cache"] = []
        self.__dict__["calls"] = 0
        self.__dict__["contexts"] = []

    def set_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """litgpt's cache set-up: empties the token cache."""
        self.__dict__["_cache"] = []

    def clear_kv_cache(self) -> None:
        """litgpt's cache tear-down: empties the token cache."""
        self.__dict__["_cache"] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward`` without nn.Module's hook machinery (a stand-in has no hooks to run)."""
        return self.forward(*args, **kwargs)

    # -- the forward pass --------------------------------------------------------------------------
    def row(self, context: tuple) -> Any:
        """The logits row for ``context`` (memoised on the part of it the model reads)."""
        key = self.model.key(context)
        hit = self._rows.get(key)
        if hit is None:
            law = self.model(context)
            hit = self._rows[key] = torch.tensor([_log(Fraction(p)) for p in law], dtype=self.dtype)
        return hit

    @unwatched      # the stand-in's own arithmetic, not the audited loop's
    def forward(self, idx: Any = None, *args: Any, input_pos: Any = None, **kwargs: Any) -> Any:
        """Logits ``[B, T, V]`` for the ids ``idx`` (``[B, T]`` or ``[T]``); see the class docstring."""
        if idx is None:
            idx = kwargs.pop("input_ids", None)
        if idx is None:
            raise ExactSpecError("stand-in forward: pass the token ids (idx or input_ids)")
        if input_pos is None and args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
            input_pos = args[0]          # litgpt's GPT.forward(idx, input_pos, ...)
        d = self.__dict__
        if deferring() and (type(idx) is LazyCategoricalTensor or any(type(t) is tuple for t in self._cache)):
            out = self._deferred(idx, input_pos)
            if out is not None:
                return out
            self._read_cache()
        d["calls"] += 1
        d["total_calls"] += 1
        ids = torch.as_tensor(idx)
        if ids.dim() == 1:
            ids = ids.unsqueeze(0)
        if ids.dim() != 2:
            raise ExactSpecError(f"stand-in forward: token ids must have shape [B, T] or [T], got "
                                 f"{tuple(ids.shape)}")
        rows = [tuple(int(t) for t in r) for r in ids.tolist()]
        for r in rows:
            for t in r:
                if not 0 <= t < self.vocab:
                    raise ExactSpecError(f"stand-in forward: token id {t} is outside the vocabulary "
                                         f"0..{self.vocab - 1} of model {self.model.name}")
        if input_pos is None:
            out = [self._logits((), r) for r in rows]
            d["contexts"].append(rows[0] if rows else ())
        else:
            if len(rows) != 1:
                raise ExactSpecError("stand-in forward: input_pos (a KV cache) is followed for batch size 1 "
                                     f"only, got a batch of {len(rows)}")
            out = [self._cached(rows[0], input_pos)]
        return torch.stack(out)

    def _logits(self, prefix: tuple, ids: tuple) -> Any:
        key = (self.model.key(prefix), ids)
        hit = self._calls.get(key)
        if hit is None:
            ctx = list(prefix)
            rows = []
            for t in ids:
                ctx.append(t)
                rows.append(self.row(tuple(ctx)))
            hit = self._calls[key] = torch.stack(rows) if rows else torch.zeros((0, self.vocab), dtype=self.dtype)
        return hit         # forward stacks it into a fresh tensor: no copy of the memo escapes

    def _cached(self, ids: tuple, input_pos: Any) -> Any:
        pos = [operator.index(int(p)) for p in torch.as_tensor(input_pos).reshape(-1).tolist()]
        if len(pos) != len(ids):
            raise ExactSpecError(f"stand-in forward: {len(ids)} token ids but {len(pos)} positions in input_pos")
        if pos != list(range(pos[0], pos[0] + len(pos))) if pos else False:
            raise ExactSpecError(f"stand-in forward: input_pos must be consecutive positions, got {pos}")
        start = pos[0] if pos else len(self._cache)
        if start > len(self._cache):
            raise ExactSpecError(f"stand-in forward: input_pos starts at {start} but the cache holds only "
                                 f"{len(self._cache)} tokens (positions {len(self._cache)}..{start - 1} were "
                                 "never written)")
        del self._cache[start:]          # a KV cache overwrites from ``start``; later entries are stale
        prefix = tuple(self._cache)
        self._cache.extend(ids)
        self.__dict__["contexts"].append(prefix + ids)
        return self._logits(prefix, ids)

    # -- a forward fed pending draws (the whole-loop audit; see lazy_worlds) ----------------------------------------
    def _read_cache(self) -> None:
        """Draw the pending tokens the cache holds (a forward that cannot keep them pending reads them)."""
        self.__dict__["_cache"] = [value_of(t) if type(t) is tuple else t for t in self._cache]

    def _reads(self, context: list) -> list:
        """The entries of ``context`` the model reads (its key's part: the last ``order`` tokens, or all)."""
        model = self.model
        if type(model).key is not Model.key or model.order is None:
            return context
        return context[-model.order:] if model.order else []

    def _deferred(self, idx: Any, input_pos: Any) -> Any:
        """Logits for ids holding pending draws, as lazy worlds over the draws each position's law reads; None where
        that does not apply (a draw with no known set of values, one outside the vocabulary, too many worlds): the
        caller reads them. The same checks, cache writes and counts as :meth:`forward`."""
        if type(idx) is LazyCategoricalTensor and not idx._read and not idx._fam.written:
            cells = idx._cells
            if cells.shape != tuple(idx.shape):
                return None
            entries = [value_of(c) if c[0].drawn else c for c in cells.reshape(-1)]
            shape = cells.shape
        else:
            ids = torch.as_tensor(idx)
            entries, shape = [int(t) for t in ids.reshape(-1).tolist()], tuple(ids.shape)
        if len(shape) == 1:
            shape = (1,) + shape
        if len(shape) != 2:
            return None            # the ordinary path raises the error
        for t in entries:
            if type(t) is tuple:
                dom = domain(t)
                if dom is None or any(not 0 <= v < self.vocab for v in dom):
                    return None
            elif not 0 <= t < self.vocab:
                return None
        b, n = shape
        rows_ids = [entries[i * n:(i + 1) * n] for i in range(b)]
        if input_pos is None:
            prefix: list = []
        else:
            if b != 1:
                return None
            pos = [operator.index(int(p)) for p in torch.as_tensor(input_pos).reshape(-1).tolist()]
            if len(pos) != n or (pos and pos != list(range(pos[0], pos[0] + n))):
                return None
            start = pos[0] if pos else len(self._cache)
            if start > len(self._cache):
                return None
            prefix = [value_of(t) if type(t) is tuple and t[0].drawn else t for t in self._cache[:start]]
        rows = []
        for r in rows_ids:
            ctx = list(prefix)
            for t in r:
                ctx.append(t)
                rows.append(self._row_of(ctx))
                if rows[-1] is None:
                    return None
        d = self.__dict__
        d["calls"] += 1
        d["total_calls"] += 1
        if input_pos is None:
            d["contexts"].append(tuple(rows_ids[0]) if rows_ids else ())
        else:
            del self._cache[len(prefix):]
            self._cache[:len(prefix)] = prefix
            self._cache.extend(rows_ids[0])
            d["contexts"].append(tuple(prefix) + tuple(rows_ids[0]))
        return lazy_logits(rows, (b, n, self.vocab), self.dtype)

    def _row_of(self, context: list) -> Any:
        """The logits row for a context holding pending draws: an ordinary row where the part the model reads holds
        none undrawn, else (the draws, ``values -> row``); None beyond the worlds one operation may take."""
        read = self._reads(context)
        deps, seen = [], set()
        for t in read:
            if type(t) is tuple and not t[0].drawn and (id(t[0]), t[1]) not in seen:
                seen.add((id(t[0]), t[1]))
                deps.append(t)
        if not deps:
            return self.row(tuple(value_of(t) if type(t) is tuple else t for t in read))
        domains: list[list] = []
        count = 1
        for c in deps:
            dm = domain(c)
            if dm is None:      # a law known only once read (forward checked every entry: not met here)
                return None
            domains.append(dm)
            count *= len(dm)
        if count > WORLDS:
            return None
        # the context's shape: each entry a known token or the index of its draw among ``deps``
        index = {(id(c[0]), c[1]): j for j, c in enumerate(deps)}
        pattern = tuple(("d", index[(id(t[0]), t[1])]) if type(t) is tuple and not t[0].drawn else
                        ("v", value_of(t) if type(t) is tuple else t) for t in read)
        key = (pattern, tuple(tuple(dm) for dm in domains))
        worlds = self._worlds.get(key)
        if worlds is None:
            # one row per world; the same table on every branch that meets this shape (later operations on it are
            # memoised on the table: lazy_worlds)
            worlds = {}
            for values in itertools.product(*domains):
                worlds[values] = self.row(tuple(values[x] if kind == "d" else x for kind, x in pattern))
            if len(self._worlds) > 1 << 14:
                self._worlds.clear()
            self._worlds[key] = worlds
        return (tuple(deps), worlds)
