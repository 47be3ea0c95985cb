"""Auditing a real batched torch sampler at large V: rows enumerated together, with per-row weights.

The rows of a batch are independent, so instead of forking the whole batch on every draw,
:func:`audit_batched_sampler` runs the sampler once per *branch pattern* (every row takes the same
side of each comparison) and keeps, for each row, the probability of that pattern; draws whose
result is only copied to the output (the exponential race ``argmax(w / E)``) are recorded as laws
instead of forked. Position j is audited by calling the sampler with one draft position and one
row per candidate draft token x (in chunks), which yields the acceptance probability of every x and
the law of the recovered token after rejecting it; the step's laws then follow as in
:func:`exactspec.tensor.chain_step_laws`.

What the sampler must satisfy for this to be exact (to float64 rounding), stated in the result:
rows do not interact; position j's decision uses only position j's inputs and one uniform
compared once with a threshold (``u < t``); the recovered token is an exponential race or a
``multinomial`` copied to the output. When the sampler does anything else with its randomness,
:func:`audit_batched_sampler` falls back to :func:`exactspec.audit_statistically`, saying so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..errors import ExactSpecError, UnsupportedRandomness
from .chain_laws import TensorStepLaw, best_device

__all__ = ["audit_batched_sampler", "BatchedAudit"]

ASSUMPTIONS = ("rows independent; position j decided by one uniform per row compared once with a threshold; "
               "the recovered token an exponential race or multinomial copied to the output")


class _State:
    def __init__(self, rows: int, vocab: int, pattern: list[bool], device: str) -> None:
        import torch
        self.weights = torch.ones(rows, dtype=torch.float64, device=device)
        self.pattern, self.used = pattern, 0
        self.laws: dict[int, Any] = {}
        self.vocab = vocab
        self.device = device


_STATE: list[_State] = []


def _state() -> _State:
    if not _STATE:
        raise ExactSpecError("row-wise interception used outside audit_batched_sampler")
    return _STATE[-1]


def _tensor_classes() -> tuple[type, type, type]:
    import torch

    class RowUniform(torch.Tensor):
        @staticmethod
        def __new__(cls, shape: tuple) -> "RowUniform":
            return torch.Tensor._make_subclass(cls, torch.zeros(shape))

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name in ("__lt__", "lt", "__le__", "le") and isinstance(args[0], RowUniform):
                st = _state()
                if st.used >= len(st.pattern):
                    raise _NeedMore()
                take = st.pattern[st.used]
                st.used += 1
                t = args[1].detach().to(torch.float64).clamp(0, 1)
                if t.dim() == 2 and t.shape[1] != 1:
                    raise UnsupportedRandomness("row-wise audit: one uniform column per call is followed")
                t = t.reshape(t.shape[0], -1)[:, 0].to(st.device)
                st.weights = st.weights * (t if take else 1 - t)
                with torch._C.DisableTorchFunctionSubclass():
                    return torch.full(tuple(args[0].shape), take, dtype=torch.bool)
            if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__", "__repr__"):
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on a uniform")

    class RowExp(torch.Tensor):
        @staticmethod
        def __new__(cls, shape: tuple) -> "RowExp":
            return torch.Tensor._make_subclass(cls, torch.ones(shape))

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name in ("__truediv__", "div", "div_", "divide") and isinstance(args[1], RowExp) \
                    and not isinstance(args[0], (RowExp, RowRace)):
                return RowRace(args[0])
            if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__", "__repr__"):
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on exponential draws")

    class RowRace(torch.Tensor):
        _w: Any

        @staticmethod
        def __new__(cls, w: Any) -> "RowRace":
            t = torch.Tensor._make_subclass(cls, torch.zeros(tuple(w.shape)))
            t._w = w.detach().to(torch.float64)
            return t

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = getattr(func, "__name__", str(func))
            if name == "argmax":
                st = _state()
                w = args[0]._w
                rows = w.reshape(-1, w.shape[-1])
                ids = []
                for row in rows:
                    sentinel = st.vocab + len(st.laws)
                    st.laws[sentinel] = row / row.sum().clamp(min=1e-300)
                    ids.append(sentinel)
                with torch._C.DisableTorchFunctionSubclass():
                    return torch.tensor(ids, dtype=torch.long).reshape(tuple(w.shape[:-1]))
            if name in ("__len__", "size", "dim", "numel", "__get__", "ndimension", "__format__", "__repr__"):
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **(kwargs or {}))
            raise UnsupportedRandomness(f"row-wise audit: torch {name} on an exponential race")

    return RowUniform, RowExp, RowRace


class _NeedMore(Exception):
    pass


@contextlib.contextmanager
def _intercept() -> Iterator[None]:
    import torch
    RowUniform, RowExp, _ = _tensor_classes()
    saved = (torch.rand, torch.Tensor.exponential_, torch.multinomial, torch.rand_like)

    def rand(*size: Any, **kw: Any) -> Any:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        return RowUniform(tuple(int(s) for s in shape))

    def multinomial(probs: Any, num_samples: int = 1, replacement: bool = False, **k: Any) -> Any:
        if int(num_samples) != 1:
            raise UnsupportedRandomness("row-wise audit: multinomial with num_samples > 1 is not followed")
        st = _state()
        w = probs.detach().to(torch.float64)
        ids = []
        for row in w.reshape(-1, w.shape[-1]):
            sentinel = st.vocab + len(st.laws)
            st.laws[sentinel] = row / row.sum().clamp(min=1e-300)      # recorded as a law, not forked
            ids.append(sentinel)
        return torch.tensor(ids, dtype=torch.long).reshape(tuple(w.shape[:-1]) + (1,))

    try:
        torch.rand = rand
        torch.rand_like = lambda t, **kw: RowUniform(tuple(t.shape))
        torch.Tensor.exponential_ = lambda self, lambd=1.0, **kw: RowExp(tuple(self.shape))
        torch.multinomial = multinomial
        yield
    finally:
        torch.rand, torch.Tensor.exponential_, torch.multinomial, torch.rand_like = saved


@dataclass
class BatchedAudit:
    """The step laws of a real batched sampler, with the conditions under which they are exact."""

    law: TensorStepLaw | None
    exact: bool
    assumptions: str
    sampler_calls: int
    statistical: Any = None

    @property
    def tv(self) -> float:
        return float(self.law.tv) if self.law is not None else float("nan")

    def __str__(self) -> str:
        if not self.exact:
            return f"row-wise audit impossible ({self.assumptions}); statistical audit instead:\n{self.statistical}"
        return (f"row-wise audit (exact to float64 rounding, assuming: {self.assumptions}): max position TV "
                f"{self.tv:.3e}, {self.sampler_calls} sampler calls")


def audit_batched_sampler(sampler: Callable, *, target: Any, draft: Any, chunk: int = 1024,
                          device: str | None = None, fallback_samples: int = 2000) -> BatchedAudit:
    """Audit a vLLM-style batched sampler at large V with per-position laws ``target [k+1, V]``, ``draft [k, V]``.

    ``sampler(target_probs [B, 1, V], draft_probs [B, 1, V], draft_token_ids [B, 1], bonus_token_ids [B, 1])``
    is called with one row per candidate draft token of each position (``chunk`` rows a call).
    """
    import torch
    device = device or best_device()
    p = torch.as_tensor(target, dtype=torch.float64)
    q = torch.as_tensor(draft, dtype=torch.float64)
    k, vocab = q.shape
    calls = 0
    accept_prob, rejected = [], []
    try:
        with _intercept():
            for j in range(k):
                cand = torch.nonzero(q[j] > 0).flatten()
                alpha = torch.zeros(vocab, dtype=torch.float64)
                rej = torch.zeros(vocab, dtype=torch.float64)
                for start in range(0, len(cand), chunk):
                    xs = cand[start:start + chunk]
                    rows = len(xs)
                    pt = p[j].to(torch.float32).expand(rows, 1, vocab)
                    qt = q[j].to(torch.float32).expand(rows, 1, vocab)
                    ids, bonus = xs.reshape(rows, 1), torch.zeros(rows, 1, dtype=torch.long)
                    for take in (True, False):
                        st = _State(rows, vocab, [take], "cpu")
                        _STATE.append(st)
                        try:
                            out = sampler(pt, qt, ids, bonus)
                        finally:
                            _STATE.pop()
                        calls += 1
                        first = torch.as_tensor(out)[:, 0]
                        if take:
                            if not torch.equal(first, xs):
                                raise UnsupportedRandomness("an accepted row did not emit its draft")
                            alpha[xs] = st.weights
                        else:
                            laws = torch.stack([st.laws[int(s)] for s in first])   # the recorded races
                            rej += (q[j, xs] * st.weights) @ laws
                accept_prob.append(alpha)
                rejected.append(rej)
    except (UnsupportedRandomness, _NeedMore, KeyError, ExactSpecError) as exc:
        note = f"{ASSUMPTIONS} — not met: {exc}"
        return BatchedAudit(law=None, exact=False, assumptions=note, sampler_calls=calls,
                            statistical=_statistical_fallback(sampler, p, q, fallback_samples))
    s = q.unsqueeze(0).to(device)
    alpha = torch.stack(accept_prob).unsqueeze(0).to(device)
    rej = torch.stack(rejected).unsqueeze(0).to(device)
    pb = p.unsqueeze(0).to(device)
    acc = (s * alpha).sum(-1)
    reach = torch.cat([torch.ones_like(acc[:, :1]), torch.cumprod(acc, dim=1)], dim=1)
    bonus = pb[:, k]
    joint = torch.cat([reach[:, :k].unsqueeze(-1) * rej, (reach[:, k].unsqueeze(-1) * bonus).unsqueeze(1)], dim=1)
    marg = torch.cat([reach[:, :k].unsqueeze(-1) * (s * alpha + rej),
                      (reach[:, k].unsqueeze(-1) * bonus).unsqueeze(1)], dim=1)
    length = torch.cat([reach[:, :k] * (1 - acc), reach[:, k:]], dim=1)
    law = TensorStepLaw(rule=getattr(sampler, "__name__", "sampler"), batched=False, _length=length, _joint=joint,
                        _marg=marg, _emitted=marg.sum(-1), _target=pb)
    return BatchedAudit(law=law, exact=True, assumptions=ASSUMPTIONS, sampler_calls=calls)


def _statistical_fallback(sampler: Callable, p: Any, q: Any, samples: int) -> Any:
    """Sample the sampler natively through the vllm adapter (rationals rebuilt from float64 laws)."""
    from fractions import Fraction

    from .. import drafts, models
    from ..samplers.torch_adapters import vllm_chain
    from ..statistical import audit_statistically

    def model(rows: Any) -> Any:
        laws = [tuple(Fraction(float(x)) for x in row) for row in rows.tolist()]
        laws = [tuple(x / sum(law) for x in law) for law in laws]
        last = len(laws) - 1
        return models.from_function(vocab=len(laws[0]), order=None, fn=lambda ctx: laws[min(len(ctx), last)])

    return audit_statistically(sampler, adapter=vllm_chain, target=model(p), draft=model(q),
                               proposer=drafts.chain(q.shape[0]), tokens=1, samples=samples)
