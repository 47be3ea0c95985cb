"""Auditing a real batched torch sampler at large V: all k positions per call, every branch pattern a row.

:func:`audit_batched_sampler` calls a vLLM-style sampler with all ``k`` draft positions at once. Rows
of a batch are independent, so each row is one *draft sequence* together with one *branch pattern*:
the side (below or not below its threshold) that each of the row's ``k`` uniforms takes. A row's
comparisons return that pattern, and the row's weight is the product of the exact probabilities of
those sides (``t`` or ``1 - t`` for each threshold ``t`` the sampler computed); all ``2**k`` patterns
of a draft sequence are rows of the same call. Draws whose result is only copied to the output (the
exponential race ``argmax(w / E)``, ``multinomial``) are recorded as laws instead of forked, and
every row receives its own bonus token (a marker whose law is the target's at position ``k``), so
the audit sees where each output token comes from. Rows are distinct requests: row ``r`` sees the
vocabulary shifted by ``r`` (token ``t`` is ``(t + r) mod V``; outputs are mapped back), so a row
that reads another row's probabilities, drafts, bonus token or recovered token emits tokens of the
wrong law, which the laws show.

Kept as one module: the stand-ins for torch's draws and comparisons and the row accounting (weights,
patterns, the full and diagonal coverings) read and write one per-call state (:class:`_State`); split,
each half would have to export that state's internals to the other.

Two ways of covering the draft sequences, chosen by size:

- **full** (when ``prod_j |supp q_j| * 2**k <= max_rows``): every draft sequence is a group of rows,
  so the law of the whole output sequence is computed (float64), and with it whether positions
  combine correctly: the law of the token at position ``j`` given the tokens before it must be the
  target's ``p_j`` (the ``sequence_tv``), not only its marginal.
- **diagonal** (larger vocabularies): row ``r`` holds the ``r``-th candidate of every position, under
  every pattern. This is exact under one more assumption: the token at position ``j`` and the
  threshold of uniform ``j`` depend on the pattern and on draft ``j`` only (and the token at position
  ``k`` on the pattern only). The first is spot-checked on a second, random pairing of up to
  ``check_rows`` draft sequences (every output, threshold and recorded law compared with the first
  pairing's), the second on every row; a sampler failing either falls back (see below). Given the
  pattern, positions are then independent, which gives the per-position laws exactly; the sequence
  check is an upper bound (exact when the prefixes emitted before position ``j`` have one law), so
  ``sequence_tv`` is ``None`` when it cannot decide, and the verdict is then not ``lossless``.

Cost: ``2**k`` rows per draft sequence (full) or per candidate (diagonal), each a full ``[k, V]`` row
for the sampler: about ``2**k * k * V**2`` float operations in the diagonal covering (V = 2000, k = 2:
under a second on one core; V = 32000, k = 1: a few minutes).

Structural findings make the verdict ``biased`` whatever the TV: a row emitting another row's token
(bonus or recovered), a bonus token emitted at a position other than ``k`` (after a rejection), a
hole in the output, an id outside the vocabulary. Assumptions, stated in the result: rows do not
interact except as reported; each row's uniforms are compared at most once each with a threshold
(``u < t``); the recovered token is an exponential race or a ``multinomial`` copied to the output.
When the sampler does anything else with its randomness, :func:`audit_batched_sampler` falls back
to :func:`exactspec.audit_statistically`, saying so, and never reads ``lossless``.

>>> import torch
>>> from exactspec.samplers.adapters.torch_adapters import reference_vllm_style
>>> p = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4]], dtype=torch.float64)
>>> q = torch.tensor([[0.3, 0.4, 0.3], [0.4, 0.4, 0.2]], dtype=torch.float64)
>>> a = audit_batched_sampler(reference_vllm_style, target=p, draft=q, device="cpu", reference=False)
>>> a.mode, a.sequence_checked, a.tv < 1e-6
('full', True, True)
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .._device import one_torch_thread
from ..errors import ExactSpecError, InvalidValue, UnsupportedRandomness
from .chain_laws import TensorStepLaw, best_device

__all__ = ["audit_batched_sampler", "BatchedAudit"]

ASSUMPTIONS = ("rows independent; each uniform compared at most once with a threshold (u < t); the recovered token "
               "an exponential race or multinomial copied to the output")
DIAGONAL = ("the token at position j and the threshold of uniform j depend on the branch pattern and on draft j only "
            "(spot-checked on a second, random pairing of the candidates), the token at position k on the pattern only")

_SHAPE_OPS = {"__getitem__", "view", "reshape", "squeeze", "unsqueeze", "flatten", "clone", "contiguous", "expand",
              "expand_as", "t", "transpose", "permute", "narrow", "select", "unbind", "split", "chunk"}
_DTYPE_OPS = {"to", "float", "double", "detach", "cpu", "type_as", "half", "bfloat16"}
_META_OPS = {"__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__", "__repr__", "shape",
             "device", "dtype", "is_floating_point", "element_size", "stride", "is_contiguous"}
_BELOW = {"__lt__": True, "lt": True, "less": True, "__le__": True, "le": True, "less_equal": True,
          "__gt__": False, "gt": False, "greater": False, "__ge__": False, "ge": False, "greater_equal": False}


class _NeedMore(Exception):
    pass


class _State:
    """One sampler call: the rows' patterns, the factors of their comparisons, the recorded laws."""

    def __init__(self, rows: int, bits: int, vocab: int, patterns: Any) -> None:
        import torch
        self.rows, self.bits, self.vocab = rows, bits, vocab
        self.patterns = patterns                                    # [rows, bits] bool: the side of each uniform
        self.factor = torch.ones(rows, max(bits, 1), dtype=torch.float64)
        self.compared = torch.zeros(rows, max(bits, 1), dtype=torch.bool)
        self.slots = torch.zeros(rows, dtype=torch.long)           # uniforms handed to each row so far
        self.laws: list[Any] = []                                   # recorded race / multinomial weights [n, V]
        self._table: Any = None
        self.law_rows: list[Any] = []                               # their rows (-1: unknown)
        self.recorded = 0
        self.drafts: Any = None                                     # [rows, k]: the draft tokens handed over
        self.shift: Any = None                                      # [rows]: each row's vocabulary shift
        self.notes: set[str] = set()

    def record(self, w: Any) -> Any:
        """Record the rows of ``w [..., V]`` as laws; return their marker ids (shape ``w.shape[:-1]``).

        The weights are kept as the sampler computed them (a copy, in its dtype); a row is normalised
        in float64 only when its marker is emitted.
        """
        import torch
        flat = w.detach().reshape(-1, w.shape[-1]).cpu()
        n = flat.shape[0]
        lead = tuple(w.shape[:-1])
        rows = torch.arange(n) // max(n // self.rows, 1) if lead and lead[0] == self.rows else torch.full((n,), -1)
        self.laws.append(flat)
        self.law_rows.append(rows)
        start = self.vocab + self.rows + self.recorded
        self.recorded += n
        self._table = None
        return torch.arange(start, start + n, dtype=torch.long).reshape(lead)

    def law(self, index: Any, readers: Any) -> Any:
        """The recorded laws ``index`` (float64, normalised), ``[len(index), V]``, in the audit's vocabulary as the
        rows ``readers`` that emitted them see it (each row's vocabulary is shifted, see :class:`_Calls`)."""
        import torch
        if self._table is None:
            self._table = ((self.laws[0] if len(self.laws) == 1 else torch.cat(self.laws)), torch.cat(self.law_rows))
        raw = self._table[0][index]
        if self.shift is not None and raw.numel():
            cols = (torch.arange(self.vocab).unsqueeze(0) + self.shift[readers].unsqueeze(1)) % self.vocab
            raw = raw.gather(1, cols)
        raw = raw.to(torch.float64)
        total = raw.sum(-1, keepdim=True)
        if not bool((torch.isfinite(total) & (total > 0)).all()) or (raw.numel() and float(raw.min()) < 0):
            raise UnsupportedRandomness("row-wise audit: a race or multinomial over weights that are not finite and "
                                        "non-negative with a positive sum")
        return raw / total

    def owners(self) -> Any:
        self.law(torch_empty_index(), torch_empty_index())
        return self._table[1]


def torch_empty_index() -> Any:
    import torch
    return torch.zeros(0, dtype=torch.long)


#: the state of the sampler call running in this context (this thread's, or this task's)
_STATE: contextvars.ContextVar[_State | None] = contextvars.ContextVar("exactspec_rowwise_state", default=None)


def _state() -> _State:
    st = _STATE.get()
    if st is None:
        raise ExactSpecError("row-wise interception used outside audit_batched_sampler")
    return st


def _meta(func: Any, args: tuple, kwargs: dict | None) -> Any:
    import torch
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **(kwargs or {}))


_CLASSES: list[tuple] = []


def _tensor_classes() -> tuple[type, type, type]:
    if _CLASSES:
        return _CLASSES[0]
    import torch

    class RowUniform(torch.Tensor):
        """Uniforms of the batch: ``_ids`` holds, per element, ``row * 2**32 + slot``."""

        _ids: Any

        @staticmethod
        def __new__(cls, ids: Any) -> "RowUniform":
            t = torch.Tensor._make_subclass(cls, torch.zeros(tuple(ids.shape)))
            t._ids = ids
            return t

        def __repr__(self) -> str:  # type: ignore[override]  # torch's takes tensor_contents=: none to show here
            return f"RowUniform(shape={tuple(self._ids.shape)})"

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name in _BELOW:
                return _compare(name, args)
            if name in _META_OPS:
                return RowUniform.__repr__(args[0]) if name == "__repr__" else _meta(func, args, kwargs)
            if name in _DTYPE_OPS:
                return RowUniform(args[0]._ids)
            if name in _SHAPE_OPS:
                with torch._C.DisableTorchFunctionSubclass():
                    out = func(args[0]._ids, *args[1:], **(kwargs or {}))
                if isinstance(out, (tuple, list)):
                    return type(out)(RowUniform(o) for o in out)
                return RowUniform(out)
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on a uniform (only comparisons with a "
                                        "threshold, indexing and reshaping are followed)")

    class RowExp(torch.Tensor):
        @staticmethod
        def __new__(cls, shape: tuple) -> "RowExp":
            return torch.Tensor._make_subclass(cls, torch.empty(shape))

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name in ("__truediv__", "div", "div_", "divide", "true_divide") and len(args) == 2 \
                    and isinstance(args[1], RowExp) and not isinstance(args[0], (RowExp, RowRace)):
                if name == "div_":                      # w.div_(E) as a statement: w itself becomes the race
                    w = _meta(lambda x: x.clone(), (args[0],), None)
                    args[0].__class__ = RowRace
                    args[0]._w = w.detach()
                    return args[0]
                return RowRace(args[0])
            if name in _META_OPS:
                return "RowExp()" if name == "__repr__" else _meta(func, args, kwargs)
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on exponential draws (only the race "
                                        "argmax(w / E) is followed)")

    class RowRace(torch.Tensor):
        _w: Any

        @staticmethod
        def __new__(cls, w: Any) -> "RowRace":
            t = torch.Tensor._make_subclass(cls, torch.empty(tuple(w.shape)))
            t._w = w.detach()                   # the sampler's weights, read when its argmax is taken
            return t

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name == "argmax":
                w = args[0]._w
                dim = (kwargs or {}).get("dim", args[1] if len(args) > 1 else None)
                if dim not in (-1, w.dim() - 1):
                    raise UnsupportedRandomness(f"row-wise audit: the race's argmax over dim {dim}")
                ids = _state().record(w)
                return ids.unsqueeze(-1) if (kwargs or {}).get("keepdim", False) else ids
            if name in _META_OPS:
                return "RowRace()" if name == "__repr__" else _meta(func, args, kwargs)
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on an exponential race")

    _CLASSES.append((RowUniform, RowExp, RowRace))
    return _CLASSES[0]


def _compare(name: str, args: tuple) -> Any:
    import torch
    RowUniform = _tensor_classes()[0]
    a, b = args[0], args[1]
    below = _BELOW[name]
    if isinstance(b, RowUniform) and not isinstance(a, RowUniform):
        a, b, below = b, a, not below                    # t > u  <=>  u < t
    if isinstance(b, RowUniform):
        raise UnsupportedRandomness("row-wise audit: two uniforms compared with each other")
    st = _state()
    ids = a._ids
    t = torch.as_tensor(b).detach().to(torch.float64).cpu()
    t = torch.broadcast_to(t, tuple(ids.shape)).reshape(-1).clamp(0, 1)
    t = torch.nan_to_num(t, nan=1.0)
    flat = ids.reshape(-1)
    rows, slots = flat // 2 ** 32, flat % 2 ** 32
    if bool((slots >= st.bits).any()):
        raise _NeedMore()
    if bool(st.compared[rows, slots].any()) or torch.unique(flat).numel() != flat.numel():
        raise UnsupportedRandomness("row-wise audit: a uniform compared twice (the side of a second threshold is "
                                    "not followed)")
    side = st.patterns[rows, slots]
    st.compared[rows, slots] = True
    st.factor[rows, slots] = torch.where(side, t, 1 - t)
    res = side if below else ~side
    return res.reshape(tuple(ids.shape))


def _new_uniforms(shape: tuple) -> Any:
    """Ids of fresh uniforms of ``shape``: dimension 0 the rows, or a flat ``[rows * m]`` vector."""
    import torch
    st = _state()
    numel = 1
    for s in shape:
        numel *= int(s)
    if shape and int(shape[0]) == st.rows:
        per = numel // st.rows
        rows = torch.arange(st.rows).repeat_interleave(per)
        local = torch.arange(per).repeat(st.rows)
    elif len(shape) == 1 and numel % st.rows == 0 and numel > 0:
        per = numel // st.rows
        rows = torch.arange(st.rows).repeat_interleave(per)
        local = torch.arange(per).repeat(st.rows)
    else:
        raise UnsupportedRandomness(f"row-wise audit: uniforms of shape {tuple(shape)} are not one group per row "
                                    f"of the batch ({st.rows} rows)")
    slots = st.slots[rows] + local
    st.slots += per
    return (rows * 2 ** 32 + slots).reshape(tuple(int(s) for s in shape))


@contextlib.contextmanager
def _intercept() -> Iterator[None]:
    import torch
    RowUniform, RowExp, _ = _tensor_classes()

    def size_of(size: tuple) -> tuple:
        return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size

    def rand(*size: Any, **kw: Any) -> Any:
        ids = _new_uniforms(tuple(int(s) for s in size_of(kw.get("size", size))))
        out = kw.get("out")
        if out is not None:
            out.__class__ = RowUniform
            out._ids = ids
            return out
        return RowUniform(ids)

    def uniform_(self: Any, a: float = 0.0, b: float = 1.0, **kw: Any) -> Any:
        if (float(kw.get("from", a)), float(kw.get("to", b))) != (0.0, 1.0):
            raise UnsupportedRandomness("row-wise audit: uniform_ on an interval other than [0, 1)")
        ids = _new_uniforms(tuple(self.shape))
        self.__class__ = RowUniform
        self._ids = ids
        return self

    def exponential_(self: Any, lambd: float = 1.0, **kw: Any) -> Any:
        if float(lambd) != 1.0:
            raise UnsupportedRandomness(f"row-wise audit: exponential_({lambd}): only rate 1 (the race) is followed")
        self.__class__ = RowExp                          # q.exponential_() as a statement: q holds the draws
        return self

    def multinomial(probs: Any, num_samples: int = 1, replacement: bool = False, **k: Any) -> Any:
        if int(num_samples) != 1:
            raise UnsupportedRandomness("row-wise audit: multinomial with num_samples > 1 is not followed")
        return _state().record(probs).unsqueeze(-1)

    def rand_like(t: Any, **kw: Any) -> Any:
        return RowUniform(_new_uniforms(tuple(t.shape)))

    standing_in = {torch.rand: rand, torch.rand_like: rand_like, torch.Tensor.uniform_: uniform_,
                   torch.Tensor.exponential_: exponential_, torch.multinomial: multinomial}

    class Draws(torch.overrides.TorchFunctionMode):
        """torch's draws stood in for, in this thread only (torch keeps function modes per thread)."""

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            return standing_in.get(func, func)(*args, **(kwargs or {}))

    with Draws():
        yield


@dataclass
class BatchedAudit:
    """The step laws of a real batched sampler, how its positions combine, and the conditions for exactness.

    ``law``: per-position laws (:class:`exactspec.tensor.TensorStepLaw`); ``mode``: ``"full"`` (every
    draft sequence enumerated) or ``"diagonal"``; ``sequence_tv``: the largest, over positions j, of
    the TV between the law of the token at j given the tokens before it and ``p_j``, averaged over
    those prefixes (``None`` where undecided); ``findings``: structural faults (each makes the verdict
    ``biased``); ``rounding_tv``: the same figures for the correct reference sampler (what float32
    costs); ``support_violation``: a token emitted at a position whose target gives it probability 0.
    """

    law: TensorStepLaw | None
    exact: bool
    assumptions: str
    sampler_calls: int
    statistical: Any = None
    mode: str = "full"
    sequence_tv: float | None = None
    findings: list[str] = field(default_factory=list)
    rounding_tv: float | None = None
    support_violation: bool = False
    tolerance: float = 1e-12

    @property
    def tv(self) -> float:
        return float(self.law.tv) if self.law is not None else float("nan")

    @property
    def sequence_checked(self) -> bool:
        """Whether how positions combine was decided (not only the per-position laws)."""
        return self.exact and self.sequence_tv is not None

    @property
    def verdict(self) -> str:
        """``biased``, ``lossless`` (within rounding, positions combined) or ``undetermined``."""
        if not self.exact:
            stat = getattr(self.statistical, "verdict", None)
            return "biased" if stat == "biased" else "undetermined"
        bound = max(self.tolerance, 2 * (self.rounding_tv or 0.0))
        if self.findings or self.support_violation or self.tv > bound \
                or (self.sequence_tv is not None and self.sequence_tv > bound):
            return "biased"
        return "lossless" if self.sequence_checked else "undetermined"

    def __str__(self) -> str:
        if not self.exact:
            return f"row-wise audit impossible ({self.assumptions}); statistical audit instead:\n{self.statistical}"
        seq = (f"sequence TV {self.sequence_tv:.3e}" if self.sequence_tv is not None else
               "only the per-position laws were checked: how positions combine was not decided, so no claim about "
               "the sequence")
        ref = f", rounding TV of the reference {self.rounding_tv:.3e}" if self.rounding_tv is not None else ""
        found = "".join(f"\n  finding: {f}" for f in self.findings)
        support = "\n  finding: emits a token the target gives probability 0" if self.support_violation else ""
        return (f"row-wise audit, {self.mode} ({self.verdict}; float64 sums of the sampler's own thresholds, assuming: "
                f"{self.assumptions}): max position TV {self.tv:.3e}, {seq}{ref}, {self.sampler_calls} sampler "
                f"calls{found}{support}")


def audit_batched_sampler(sampler: Callable, *, target: Any, draft: Any, chunk: int = 4096,
                          device: str | None = None, fallback_samples: int = 2000, max_rows: int = 2 ** 15,
                          reference: bool = True, check_pairing: bool = True, check_rows: int = 512,
                          tolerance: float = 1e-12) -> BatchedAudit:
    """Audit a vLLM-style batched sampler with per-position laws ``target [k+1, V]``, ``draft [k, V]``.

    ``sampler(target_probs [B, k, V], draft_probs [B, k, V], draft_token_ids [B, k], bonus_token_ids
    [B, 1]) -> [B, k + 1]`` (padded with -1) is called with all ``k`` positions; each row is one draft
    sequence under one of the ``2**k`` branch patterns (``chunk`` rows a call at most). ``max_rows``
    bounds the full enumeration of draft sequences (beyond it, the diagonal covering, whose assumption
    is spot-checked on ``check_rows`` sequences of a second pairing unless ``check_pairing=False``).
    With ``reference`` the correct :func:`reference_vectorized` (float32, as the sampler is handed its
    laws) is audited the same way and its figures are the rounding baseline of the verdict
    (``lossless`` when the position and sequence TVs are within ``max(tolerance, 2 * rounding_tv)``, no
    finding, no support violation, and the sequence decided; ``reference=False`` demands ``tolerance``).
    A sampler the row-wise audit cannot follow is audited statistically (``fallback_samples``) instead.

    >>> import torch
    >>> from exactspec.samplers.adapters.torch_adapters import reference_vllm_style
    >>> p = torch.tensor([[0.6, 0.4], [0.5, 0.5]], dtype=torch.float64)
    >>> a = audit_batched_sampler(reference_vllm_style, target=p, draft=[[0.5, 0.5]], device="cpu")
    >>> a.verdict, a.mode, a.sampler_calls
    ('lossless', 'full', 1)
    """
    import torch

    device = device or best_device()
    p = torch.as_tensor(target, dtype=torch.float64).cpu()
    q = torch.as_tensor(draft, dtype=torch.float64).cpu()
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != q.shape[0] + 1 or p.shape[1] != q.shape[1] or q.shape[0] < 1:
        raise InvalidValue(f"audit_batched_sampler: target must be [k + 1, V] and draft [k, V] with k >= 1; got "
                           f"{tuple(p.shape)} and {tuple(q.shape)}")
    with one_torch_thread():
        try:
            out = _audit(sampler, p, q, chunk, max_rows, check_pairing, tolerance, check_rows)
        except (UnsupportedRandomness, _NeedMore, ExactSpecError) as exc:
            why = str(exc) or "a row used more than k uniforms"
            return BatchedAudit(law=None, exact=False, assumptions=f"{ASSUMPTIONS} — not met: {why}",
                                sampler_calls=0, tolerance=tolerance,
                                statistical=_statistical_fallback(sampler, p, q, fallback_samples))
        if reference:
            ref = _audit(reference_vectorized, p, q, chunk, max_rows, False, tolerance)
            out.rounding_tv = max(ref.tv, ref.sequence_tv or 0.0)
    if device != "cpu" and out.law is not None:
        law = out.law
        out.law = TensorStepLaw(rule=law.rule, batched=False, **{k: getattr(law, k).to(device) for k in
                                                                  ("_length", "_joint", "_marg", "_emitted",
                                                                   "_target")})
    return out


class _Calls:
    """Runs the sampler on rows (draft sequences x patterns) in chunks; yields each chunk's outputs."""

    def __init__(self, sampler: Callable, p: Any, q: Any, chunk: int) -> None:
        import torch
        self.sampler, self.k, self.vocab = sampler, q.shape[0], q.shape[1]
        self.p32 = p[:self.k].to(torch.float32)
        self.p_bonus = p[self.k]
        self.q32 = q.to(torch.float32)
        self.chunk = max(1, min(chunk, max(2 ** 24 // max(self.k * self.vocab, 1), 1)))
        self.calls = 0

    def _unshift(self, out: Any, st: _State) -> Any:
        """Tokens back in the audit's vocabulary; another row's bonus marker becomes a recorded law (that row's
        bonus law, as this row reads it), so its bias shows in the laws as well as in the findings."""
        import torch
        vocab, rows = self.vocab, out.shape[0]
        shift = st.shift.unsqueeze(1)
        real = (out >= 0) & (out < vocab)
        out = torch.where(real, (out - shift) % vocab, out)
        row = torch.arange(rows).unsqueeze(1).expand_as(out)
        owner = out - vocab
        cross = (out >= vocab) & (out < vocab + rows) & (owner != row)
        if bool(cross.any()):
            st.notes.add("a row emits another row's bonus token (rows interact)")
            owners = owner[cross]
            bonus = self.p_bonus
            cols = (torch.arange(vocab).unsqueeze(0) - st.shift[owners].unsqueeze(1)) % vocab
            ids = st.record(bonus[cols]).reshape(-1)       # the owner's bonus law, in the owner's shifted vocabulary
            st.law_rows[-1] = owners
            out = out.clone()
            out[cross] = ids
        return out

    def run(self, seqs: Any) -> Iterator[tuple[Any, Any, Any, Any, _State]]:
        """For each chunk: (sequence index [R], pattern [R, k], output [R, k + 1], factors [R, k], state)."""
        import torch
        k = self.k
        n_pat = 2 ** k
        patterns = torch.tensor(list(itertools.product((True, False), repeat=k)), dtype=torch.bool)   # [2**k, k]
        per = max(1, self.chunk // n_pat)
        for start in range(0, seqs.shape[0], per):
            block = seqs[start:start + per]
            rows = block.shape[0] * n_pat
            ids = block.repeat_interleave(n_pat, dim=0)
            pats = patterns.repeat(block.shape[0], 1)
            seq_index = torch.arange(start, start + block.shape[0]).repeat_interleave(n_pat)
            st = _State(rows, k, self.vocab, pats)
            st.drafts = ids
            # rows are distinct requests: row r sees the vocabulary shifted by r (token t is (t + r) mod V), so a
            # row that reads another row's values emits tokens of the wrong law
            vocab = self.vocab
            st.shift = shift = torch.arange(rows) % vocab
            gather = (torch.arange(vocab).unsqueeze(0) - shift.unsqueeze(1)) % vocab       # [R, V]
            target = self.p32[:, gather].permute(1, 0, 2).contiguous()
            draft = self.q32[:, gather].permute(1, 0, 2).contiguous()
            bonus = (vocab + torch.arange(rows)).reshape(rows, 1)
            token = _STATE.set(st)
            try:
                with _intercept():
                    out = self.sampler(target, draft, (ids + shift.unsqueeze(1)) % vocab, bonus)
            except (UnsupportedRandomness, ExactSpecError, _NeedMore):
                raise
            except Exception as exc:          # e.g. the marker bonus ids (>= V) used as indices
                raise UnsupportedRandomness(f"the sampler raised {type(exc).__name__} on the row-wise inputs ({exc}); "
                                            "they hold marker ids >= V for the bonus tokens and stand-in tensors "
                                            "for the draws") from exc
            finally:
                _STATE.reset(token)
            self.calls += 1
            out = torch.as_tensor(out).to(torch.long).cpu()
            if tuple(out.shape) != (rows, k + 1):
                raise ExactSpecError(f"the sampler returned shape {tuple(out.shape)}, expected [B, k + 1] = "
                                     f"{(rows, k + 1)}")
            out = self._unshift(out, st)
            # a uniform never compared: its two sides are one row counted twice; keep the "not below" copy
            factor = st.factor[:, :k].clone()
            dup = (~st.compared[:, :k]) & pats
            factor[dup] = 0.0
            yield seq_index, pats, out, factor, st


def _symbols(out: Any, st: _State, findings: set[str]) -> tuple[Any, Any]:
    """Classify each output id: (kind [R, k+1]: 0 token, 1 not emitted, 2 bonus, 3 recorded law; law index)."""
    import torch
    rows, cols = out.shape
    k, vocab = cols - 1, st.vocab
    row = torch.arange(rows).unsqueeze(1).expand(rows, cols)
    col = torch.arange(cols).unsqueeze(0).expand(rows, cols)
    kind = torch.full((rows, cols), -1, dtype=torch.long)
    kind[(out >= 0) & (out < vocab)] = 0
    kind[out == -1] = 1
    is_bonus = (out >= vocab) & (out < vocab + rows)
    kind[is_bonus] = 2
    law_index = out - vocab - rows
    is_law = (law_index >= 0) & (law_index < st.recorded)
    kind[is_law] = 3
    findings.update(st.notes)
    if bool((kind < 0).any()):
        bad = int(out[kind < 0][0])
        findings.add(f"emits id {bad}, outside the vocabulary [0, {vocab}) (and not -1 padding)")
        kind[kind < 0] = 1
    if bool((is_bonus & (out - vocab != row)).any()):
        findings.add("a row emits another row's bonus token (rows interact)")
    if bool((is_bonus & (col != k)).any()):
        j = int(col[is_bonus & (col != k)].min())
        findings.add(f"the bonus token is emitted at position {j}: it is drawn from the target's law after all "
                     f"{k} drafts (position {k}), so it may appear only at position {k}, after every draft was "
                     "accepted")
    at_k = is_bonus[:, k]
    if bool(at_k.any()):
        drafts = torch.as_tensor(st.drafts)
        if not bool((out[at_k, :k] == drafts[at_k]).all()):
            findings.add(f"the bonus token is emitted at position {k} after a position that is not its draft (after "
                         "a rejection): it is drawn from the target's law after all drafts were accepted")
    if st.recorded:
        law_rows = st.owners()
        idx = law_index.clamp(0, st.recorded - 1)
        owner = law_rows[idx]
        if bool((is_law & (owner >= 0) & (owner != row)).any()):
            findings.add("a row emits a token drawn for another row (rows interact)")
    emitted = kind != 1
    hole = (~emitted[:, :-1]) & emitted[:, 1:]
    if bool(hole.any()):
        findings.add("an output has a hole: a position emitted after one that was not")
    return kind, law_index


def _position_vectors(kind: Any, law_index: Any, out: Any, j: int, weight: Any, st: _State, bonus: Any,
                      vocab: int, rows: Any = None) -> Any:
    """``sum_rows weight * law of the token at position j`` as a ``[R, V + 1]`` tensor (column V: not emitted)."""
    import torch
    rows = torch.arange(kind.shape[0]) if rows is None else rows
    vec = torch.zeros(kind.shape[0], vocab + 1, dtype=torch.float64)
    kj = kind[:, j]
    tok = kj == 0
    vec[tok, out[tok, j]] = weight[tok]
    ne = kj == 1
    vec[ne, vocab] = weight[ne]
    bo = kj == 2
    if bool(bo.any()):
        vec[bo, :vocab] = weight[bo].unsqueeze(1) * bonus
    la = kj == 3
    if bool(la.any()):
        vec[la, :vocab] = weight[la].unsqueeze(1) * st.law(law_index[la, j], rows[la])
    return vec


def _audit(sampler: Callable, p: Any, q: Any, chunk: int, max_rows: int, check_pairing: bool,
           tolerance: float, check_rows: int = 512) -> BatchedAudit:
    import torch
    k, vocab = q.shape
    cands = [torch.nonzero(q[j] > 0).flatten() for j in range(k)]
    n_seq = 1
    for c in cands:
        n_seq *= len(c)
    full = n_seq * 2 ** k <= max_rows and (vocab + 1) ** (k + 1) <= 2 ** 24
    calls = _Calls(sampler, p, q, chunk)
    findings: set[str] = set()
    seq_tv: float | None                # None: the sequence bound cannot decide
    if full:
        law, seq_tv = _full(calls, p, q, cands, findings)
        mode, note = "full", ASSUMPTIONS
    else:
        law, seq_tv = _diagonal(calls, p, q, cands, findings, check_pairing, check_rows)
        mode, note = "diagonal", f"{ASSUMPTIONS}; {DIAGONAL}"
    support = bool(((law._marg[0, :, :] > 0) & (law._target[0] == 0)).any())
    return BatchedAudit(law=law, exact=True, assumptions=note, sampler_calls=calls.calls, mode=mode,
                        sequence_tv=seq_tv, findings=sorted(findings), support_violation=support, tolerance=tolerance)


def _step_law(sampler: Callable, p: Any, length: Any, joint: Any, marg: Any) -> TensorStepLaw:
    return TensorStepLaw(rule=getattr(sampler, "__name__", "sampler"), batched=False, _length=length.unsqueeze(0),
                         _joint=joint.unsqueeze(0), _marg=marg.unsqueeze(0), _emitted=marg.sum(-1).unsqueeze(0),
                         _target=p.unsqueeze(0))


def _accumulate(G: Any, group: Any, kind: Any, out: Any, law_index: Any, weight: Any, st: _State, bonus: Any,
                vocab: int, square: bool = False) -> None:
    """``G[group[r]] += weight[r] * law of row r's symbol`` (``G [groups, V + 1]``, column V: not emitted)."""
    import torch
    w = weight * weight if square else weight
    flat = G.view(-1) if G.is_contiguous() else None
    tok = kind == 0
    ne = kind == 1
    if flat is not None:
        flat.index_add_(0, group[tok] * (vocab + 1) + out[tok], w[tok])
        flat.index_add_(0, group[ne] * (vocab + 1) + vocab, w[ne])
    else:
        G.index_put_((group[tok], out[tok]), w[tok], accumulate=True)
        G.index_put_((group[ne], torch.full_like(group[ne], vocab)), w[ne], accumulate=True)
    bo = kind == 2
    if bool(bo.any()):
        per = torch.zeros(G.shape[0], dtype=torch.float64).index_add_(0, group[bo], w[bo])
        G[:, :vocab] += per.unsqueeze(1) * (bonus * bonus if square else bonus)
    la = (kind == 3).nonzero().flatten()
    step = max(1, 2 ** 22 // max(vocab, 1))
    for start in range(0, la.numel(), step):
        sub = la[start:start + step]
        law = st.law(law_index[sub], sub)
        G[:, :vocab].index_add_(0, group[sub], w[sub].unsqueeze(1) * (law * law if square else law))


def _full(calls: _Calls, p: Any, q: Any, cands: list, findings: set[str]) -> tuple[TensorStepLaw, float]:
    """Every draft sequence: the dense law over output sequences ``[(V + 1)] * (k + 1)`` (V: not emitted)."""
    import torch
    k, vocab = q.shape
    seqs = torch.cartesian_prod(*cands).reshape(-1, k) if k > 1 else cands[0].reshape(-1, 1)
    seq_weight = torch.ones(seqs.shape[0], dtype=torch.float64)
    for j in range(k):
        seq_weight = seq_weight * q[j, seqs[:, j]]
    size = (vocab + 1) ** (k + 1)
    dense = torch.zeros(size, dtype=torch.float64)
    strides = [(vocab + 1) ** (k - j) for j in range(k + 1)]
    for seq_index, pats, out, factor, st in calls.run(seqs):
        kind, law_index = _symbols(out, st, findings)
        weight = seq_weight[seq_index] * factor.prod(-1)
        # a token or "not emitted" is one index; a recorded law (race, bonus) spreads over V: rows with at most
        # one such position are a scatter, the rare others an outer product
        spread = (kind >= 2).sum(-1)
        code = torch.where(kind == 0, out, torch.full_like(out, vocab))
        base = torch.zeros(out.shape[0], dtype=torch.long)
        for j in range(k + 1):
            base += torch.where(kind[:, j] >= 2, torch.zeros_like(base), code[:, j]) * strides[j]
        plain = spread == 0
        dense.index_add_(0, base[plain], weight[plain])
        for j in range(k + 1):
            one = (spread == 1) & (kind[:, j] >= 2)
            if bool(one.any()):
                ones = torch.ones(int(one.sum()), dtype=torch.float64)
                sub = one.nonzero().flatten()
                vec = _position_vectors(kind[sub], law_index[sub], out[sub], j, ones, st, p[k], vocab, sub)[:, :vocab]
                idx = base[sub].unsqueeze(1) + torch.arange(vocab).unsqueeze(0) * strides[j]
                dense.index_add_(0, idx.reshape(-1), (weight[sub].unsqueeze(1) * vec).reshape(-1))
        # rows showing several recorded laws: the bonus law is the same in every row, so rows with one race at
        # most, the same positions and the same tokens elsewhere are summed first, then spread over the cells
        pow2 = 2 ** torch.arange(k + 1)
        multi = (kind >= 2) & (spread > 1).unsqueeze(1)
        code_of = (multi.long() * pow2).sum(-1)
        race_of = ((kind == 3) & multi).long().sum(-1)
        race_pos = ((kind == 3) & multi).long().argmax(-1)
        simple = (spread > 1) & (race_of <= 1)
        if bool(simple.any()):
            rows = simple.nonzero().flatten()
            key = torch.stack([code_of[rows], torch.where(race_of[rows] == 1, race_pos[rows], -1), base[rows]], 1)
            groups, inverse = torch.unique(key, dim=0, return_inverse=True)
            summed = torch.zeros(groups.shape[0], vocab, dtype=torch.float64)
            plain_mass = torch.zeros(groups.shape[0], dtype=torch.float64).index_add_(0, inverse, weight[rows])
            has_race = race_of[rows] == 1
            sub = rows[has_race]
            step = max(1, 2 ** 22 // max(vocab, 1))
            for start in range(0, sub.numel(), step):
                part = sub[start:start + step]
                laws = st.law(law_index[part, race_pos[part]], part)
                summed.index_add_(0, inverse[has_race][start:start + step], weight[part].unsqueeze(1) * laws)
            for g in range(groups.shape[0]):
                which, rpos, gbase = (int(x) for x in groups[g])
                acc = (summed[g] if rpos >= 0 else plain_mass[g].reshape(1)).reshape(1, -1)
                idx = (gbase + torch.arange(vocab) * strides[rpos]).reshape(1, -1) if rpos >= 0 else \
                    torch.full((1, 1), gbase, dtype=torch.long)
                for j in range(k + 1):
                    if which >> j & 1 and j != rpos:              # a bonus token: the target's law at position k
                        acc = (acc.unsqueeze(-1) * p[k].reshape(1, 1, -1)).reshape(1, -1)
                        idx = (idx.unsqueeze(-1) + torch.arange(vocab).reshape(1, 1, -1) * strides[j]).reshape(1, -1)
                dense.index_add_(0, idx.reshape(-1), acc.reshape(-1))
        for which in torch.unique(code_of[(spread > 1) & ~simple]).tolist():
            where = [j for j in range(k + 1) if which >> j & 1]
            many = ((code_of == which) & ~simple).nonzero().flatten()
            step = max(1, 2 ** 24 // vocab ** len(where))
            for start in range(0, many.numel(), step):
                sub = many[start:start + step]
                acc = weight[sub].unsqueeze(1)                  # [n, cells]: the product over the laws so far
                idx = base[sub].unsqueeze(1)
                ones = torch.ones(sub.numel(), dtype=torch.float64)
                for j in where:
                    vec = _position_vectors(kind[sub], law_index[sub], out[sub], j, ones, st, p[k], vocab,
                                            sub)[:, :vocab]
                    acc = (acc.unsqueeze(-1) * vec.unsqueeze(1)).reshape(sub.numel(), -1)
                    idx = (idx.unsqueeze(-1) + torch.arange(vocab).reshape(1, 1, -1) * strides[j]).reshape(
                        sub.numel(), -1)
                dense.index_add_(0, idx.reshape(-1), acc.reshape(-1))
    law = dense.reshape((vocab + 1,) * (k + 1))
    marg = torch.zeros(k + 1, vocab, dtype=torch.float64)
    joint = torch.zeros(k + 1, vocab, dtype=torch.float64)
    length = torch.zeros(k + 1, dtype=torch.float64)
    seq_tv = 0.0
    for j in range(k + 1):
        m = law.reshape((vocab + 1) ** j, vocab + 1, -1)                    # [prefixes, token at j, the rest]
        mj = m.sum(-1)                                                     # [prefixes, V + 1]
        marg[j] = mj[:, :vocab].sum(0)
        if j < k:                                                          # j emitted, j + 1 not: j is the last
            joint[j] = law.reshape((vocab + 1) ** j, vocab + 1, vocab + 1, -1)[:, :vocab, vocab, :].sum((0, 2))
        else:
            joint[j] = marg[j]
        length[j] = joint[j].sum()
        emitted = float(marg[j].sum())
        if emitted > 0:
            rows = mj[:, :vocab]
            dev = (rows - rows.sum(-1, keepdim=True) * p[j]).abs().sum() / 2 / emitted
            seq_tv = max(seq_tv, float(dev))
    return _step_law(calls.sampler, p, length, joint, marg), seq_tv


def _diagonal(calls: _Calls, p: Any, q: Any, cands: list, findings: set[str], check_pairing: bool,
              check_rows: int) -> tuple[TensorStepLaw, float | None]:
    """Row r holds candidate r of every position; per (pattern, position) sums, positions independent given b."""
    import torch
    k, vocab = q.shape
    longest = max(len(c) for c in cands)
    n_pat = 2 ** k

    phi = torch.rand(vocab, generator=torch.Generator().manual_seed(2 ** 31 - 1), dtype=torch.float64)

    def rows_of(seqs: Any, keep: bool, F: Any = None, G: Any = None, last_sq: Any = None) -> Any:
        """Run the rows; add to F, G (when given); return per-row (kind, token, fingerprint, factor) when ``keep``."""
        kept = []
        zero = torch.zeros(1, dtype=torch.float64)
        for seq_index, pats, out, factor, st in calls.run(seqs):
            kind, law_index = _symbols(out, st, findings)
            pat_id = torch.arange(out.shape[0]) % n_pat
            if G is not None:
                for j in range(k):
                    real = seq_index < len(cands[j])                   # each candidate of position j once
                    w = torch.where(real, q[j, seqs[seq_index, j]] * factor[:, j], zero)
                    F[:, j].index_add_(0, pat_id, w)
                    _accumulate(G[:, j], pat_id, kind[:, j], out[:, j], law_index[:, j], w, st, p[k], vocab)
                # position k has no draft of its own: its law must be the same in every row of a pattern
                w = torch.full((out.shape[0],), 1.0 / longest, dtype=torch.float64)
                _accumulate(G[:, k], pat_id, kind[:, k], out[:, k], law_index[:, k], w, st, p[k], vocab)
                _accumulate(last_sq, pat_id, kind[:, k], out[:, k], law_index[:, k], w, st, p[k], vocab, square=True)
            if keep:
                fp = torch.zeros(out.shape, dtype=torch.float64)
                la = kind == 3
                if bool(la.any()):
                    readers = torch.arange(out.shape[0]).unsqueeze(1).expand_as(la)[la]
                    fp[la] = st.law(law_index[la], readers) @ phi
                kept.append((kind, torch.where(kind == 0, out, -1), fp, factor))
        if keep:
            return tuple(torch.cat(parts) for parts in zip(*kept))
        return None

    seqs = torch.stack([c[torch.arange(longest) % len(c)] for c in cands], dim=1)
    F = torch.zeros(n_pat, k, dtype=torch.float64)
    G = torch.zeros(n_pat, k + 1, vocab + 1, dtype=torch.float64)
    last_sq = torch.zeros(n_pat, vocab + 1, dtype=torch.float64)             # second moment of position k's law
    check = check_pairing and longest > 1
    first = rows_of(seqs, check, F, G, last_sq)
    spread = last_sq * longest - G[:, k] * G[:, k]                           # variance across rows, per pattern
    if float(spread.abs().max()) > 1e-12:
        raise UnsupportedRandomness("row-wise audit (diagonal): the token at position k depends on the drafts "
                                    "(the per-position covering cannot follow it)")
    if check:
        # a second pairing of the candidates, on a random subset of rows: each position's output, fingerprint of
        # its law and threshold factor must be those of the first pairing's row holding the same draft there (to
        # float32 rounding: the rows' vocabularies are shifted differently, so float32 sums round differently)
        gen = torch.Generator().manual_seed(12345)
        n = min(longest, check_rows)
        perms = [torch.randperm(len(c), generator=gen)[torch.arange(n) % len(c)] for c in cands]
        other = torch.stack([c[o] for c, o in zip(cands, perms)], dim=1)
        kind2, tok2, fp2, fac2 = rows_of(other, True)
        kind1, tok1, fp1, fac1 = first
        pat = torch.arange(n * n_pat) % n_pat
        for j in range(k):
            src = perms[j].repeat_interleave(n_pat) * n_pat + pat                # the first pairing's rows
            same = (torch.equal(kind2[:, j], kind1[src, j]) and torch.equal(tok2[:, j], tok1[src, j])
                    and torch.allclose(fp2[:, j], fp1[src, j], rtol=1e-5, atol=1e-12)
                    and torch.allclose(fac2[:, j], fac1[src, j], rtol=1e-5, atol=1e-12))
            if not same:
                raise UnsupportedRandomness("row-wise audit (diagonal): the output at a position depends on the "
                                            "drafts at other positions (two pairings of the candidates disagree)")
    # G[b, j] sums to F[b, j] for j < k (the token at j is emitted or not, for each draft of j); G[b, k] sums to 1
    total = torch.cat([F, torch.ones(n_pat, 1, dtype=torch.float64)], dim=1)        # [2**k, k + 1]
    # where a uniform was not compared (a duplicate pattern) the row had factor 0: F is 0 there, as is G
    emitted_frac = G[:, :, :vocab].sum(-1) / total.clamp(min=1e-300)                 # [2**k, k + 1]
    on = emitted_frac > 1 - 1e-9
    off = emitted_frac < 1e-9
    if not bool((on | off | (total <= 0)).all()):
        raise UnsupportedRandomness("row-wise audit (diagonal): whether a position is emitted depends on its draft, "
                                    "not only on the branch pattern")
    pat_mass = total[:, :k].prod(-1)                                                 # P(pattern b)
    marg = torch.zeros(k + 1, vocab, dtype=torch.float64)
    joint = torch.zeros(k + 1, vocab, dtype=torch.float64)
    length = torch.zeros(k + 1, dtype=torch.float64)
    for j in range(k + 1):
        others = torch.ones(n_pat, dtype=torch.float64)
        for i in range(k):
            if i != j:
                others = others * total[:, i]
        contrib = others.unsqueeze(1) * G[:, j, :vocab]                              # [2**k, V]
        marg[j] = contrib.sum(0)
        last = on[:, j] & (off[:, j + 1] if j < k else torch.ones(n_pat, dtype=torch.bool))
        joint[j] = contrib[last].sum(0)
        length[j] = pat_mass[last].sum() if j < k else (pat_mass[last]).sum()
    # sequence: group the patterns emitting j by the laws of the tokens before it; exact with one group,
    # an upper bound (sum over groups) otherwise
    seq_tv = 0.0
    decided = True                               # False: the bound cannot decide (no claim)
    for j in range(1, k + 1):
        groups: dict[tuple, Any] = {}
        for b in range(n_pat):
            if not bool(on[b, j]):
                continue
            if not bool(on[b, :j].all()):
                continue                          # a hole: reported as a finding already
            pre = tuple(G[b, i, :vocab].numpy().tobytes() for i in range(j))
            scale = float(torch.prod(torch.stack([G[b, i, :vocab].sum() for i in range(j)]))) if j else 1.0
            after = torch.ones((), dtype=torch.float64)
            for i in range(j + 1, k):
                after = after * total[b, i]
            h = G[b, j, :vocab] * after
            groups[pre] = groups.get(pre, 0) + h * scale
        emitted = float(marg[j].sum())
        if emitted <= 0:
            continue
        dev = sum(float((h - h.sum() * p[j]).abs().sum()) for h in groups.values()) / 2 / emitted
        if len(groups) > 1 and dev > 1e-12:
            decided = False                      # the bound cannot decide: no claim about the sequence
            break
        seq_tv = max(seq_tv, dev)
    return _step_law(calls.sampler, p, length, joint, marg), (seq_tv if decided else None)


def reference_vectorized(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """A correct batched rejection sampler written with whole-batch tensor operations (own code): the rounding
    reference of :func:`audit_batched_sampler` (the same law as
    :func:`exactspec.samplers.adapters.torch_adapters.reference_vllm_style`, without its loop over rows)."""
    import torch
    batch, k, _ = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    ratio = target_probs.gather(-1, idx).squeeze(-1) / draft_probs.gather(-1, idx).squeeze(-1)
    rejected = ~(torch.rand(batch, k) < ratio)
    residual = torch.clamp(target_probs - draft_probs, min=0)
    residual = residual / residual.sum(-1, keepdim=True).clamp(min=torch.finfo(residual.dtype).tiny)
    recovered = (residual / torch.empty_like(residual).exponential_(1.0)).argmax(dim=-1)        # [B, k]
    n = torch.where(rejected.any(1), rejected.int().argmax(1).long(), torch.full((batch,), k, dtype=torch.long))
    cols = torch.arange(k + 1).unsqueeze(0)
    out = torch.cat([draft_token_ids, bonus_token_ids], dim=1)
    rec = torch.cat([recovered, bonus_token_ids], dim=1).gather(1, n.unsqueeze(1))
    out = torch.where(cols == n.unsqueeze(1), rec, out)
    return torch.where(cols > n.unsqueeze(1), torch.full_like(out, -1), out)


def _statistical_fallback(sampler: Callable, p: Any, q: Any, samples: int) -> Any:
    """Sample the sampler natively through the vllm adapter (rationals rebuilt from float64 laws).

    The adapter goes by its name: the statistical audit resolves it through the samplers registry, which sits
    above this module and is loaded by name there."""
    from fractions import Fraction

    from .. import drafts, models
    from ..statistical import audit_statistically

    def model(rows: Any) -> Any:
        laws = [tuple(Fraction(float(x)) for x in row) for row in rows.tolist()]
        laws = [tuple(x / sum(law) for x in law) for law in laws]
        last = len(laws) - 1
        return models.from_function(vocab=len(laws[0]), order=None, fn=lambda ctx: laws[min(len(ctx), last)])

    return audit_statistically(sampler, adapter="vllm", target=model(p), draft=model(q),
                               proposer=drafts.chain(q.shape[0]), tokens=1, samples=samples)
