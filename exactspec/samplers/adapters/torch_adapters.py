"""Adapters for PyTorch samplers (need the ``audit`` extra): transformers-style and vLLM-style.

>>> transformers_chain.name, transformers_chain.family
('transformers', 'chain')
"""

from __future__ import annotations

import inspect
import threading
from fractions import Fraction
from typing import Any, Callable, Iterator

import numpy as np

from ...enumerate.rng import PathRng
from ...laws import memoised
from ...protocols import Law, Rng, Step
from ..torch_draws.lazy_draws import LazyCategoricalTensor, PendingDraw, as_array, tokens_deferring_last
from ..torch_draws.torch_rng import bind
from .base import Adapter

__all__ = ["TransformersChainAdapter", "transformers_chain", "reference_transformers_style", "VllmChainAdapter",
           "vllm_chain", "reference_vllm_style"]


def reference_transformers_style(candidate_input_ids: Any, candidate_logits: Any, candidate_length: int,
                                 new_logits: Any) -> tuple[Any, Any]:
    """A correct Algorithm 1 with transformers' signature: one uniform per position, strict ``<``."""
    import torch
    drafts = candidate_input_ids[0, -candidate_length:]
    q = candidate_logits.softmax(dim=-1)[0]
    p = new_logits.softmax(dim=-1)[0]
    out = []
    for j in range(candidate_length):
        x = int(drafts[j])
        if torch.rand(1)[0] < p[j, x] / q[j, x]:
            out.append(x)
            continue
        residual = torch.clamp(p[j] - q[j], min=0)
        out.append(int(torch.multinomial(residual / residual.sum(), 1)[0]))
        return torch.tensor([out]), torch.tensor(j)
    out.append(int(torch.multinomial(p[candidate_length], 1)[0]))
    return torch.tensor([out]), torch.tensor(candidate_length)


class TransformersChainAdapter(Adapter):
    """``sampler(candidate_input_ids [1, n + gamma], candidate_logits [1, gamma, V], gamma,
    new_logits [1, gamma + 1, V], **kwargs) -> (valid_tokens [1, k], n_matches)``, the signature of
    ``transformers.generation.utils._speculative_sampling``; laws are handed over as float32 logits
    (``log p``, ``-inf`` where ``p = 0``), so the sampler's precision is float32.
    ``candidate_input_ids`` (long) holds the drafts only, no prompt columns; ``candidate_length`` is
    the int ``gamma``; ``**kwargs`` are the ones given to the constructor (e.g.
    ``assistant_ensemble_weight=w``). Only ``valid_tokens`` of the returned pair is read, negative ids
    dropped as padding. Every adapter's call is written out in docs/adapters.md.

    The tensors of a step are built once per input (drafts and laws) and handed again to later
    calls with the same input; a sampler that modifies them in place (torch's version counter
    moves) gets fresh ones on its next call.
    """

    name = "transformers"
    family = "chain"
    needs_torch = True
    reference = staticmethod(reference_transformers_style)
    precision = "float32"

    def __init__(self, **sampler_kwargs: Any) -> None:
        self.kwargs = sampler_kwargs
        self._local = threading.local()

    def logits(self, law: Law) -> Any:
        """A law as logits (``log p``) in the adapter's precision (float32 unless :meth:`with_precision`)."""
        import torch
        dtype = getattr(torch, self.precision)

        def compute() -> Any:
            probs = torch.tensor([float(x) for x in law], dtype=dtype)
            return torch.log(probs)
        return memoised(f"{self.precision} logits", law, None, compute)

    def with_precision(self, precision: str) -> "TransformersChainAdapter":
        """This adapter handing its logits in ``precision`` (the float64 run of a float32 audit).

        >>> transformers_chain.with_precision("float64").precision
        'float64'
        """
        return self if precision == self.precision else self._copy_at(precision)

    def _tensors(self, step: Step) -> tuple[Any, Any, Any, tuple]:
        """(ids, candidate logits, new logits, their version counters), cached by the step's drafts and laws."""
        import torch
        key, laws = self._keyed(step)
        local = self.__dict__.get("_local")
        if local is None:                  # a subclass that did not call __init__
            local = self._local = threading.local()
        cache = getattr(local, "tensors", None)
        if cache is None:
            cache = local.tensors = {}
        hit = cache.get(key)
        if hit is not None and tuple(t._version for t in hit[1][:3]) == hit[1][3]:
            return hit[1]
        cand_logits = torch.stack([self.logits(step.claimed(j)) for j in range(step.gamma)])[None]
        new_logits = torch.stack([self.logits(step.target(j)) for j in range(step.gamma + 1)])[None]
        ids = torch.tensor([list(step.drafts)], dtype=torch.long)
        made = (ids, cand_logits, new_logits, (ids._version, cand_logits._version, new_logits._version))
        if len(cache) >= 4096:
            cache.clear()
        cache[key] = (laws, made)      # the laws stay alive while their ids key the cache
        return made

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        ids, cand_logits, new_logits, _ = self._tensors(step)
        kwargs = self.kwargs if inspect.unwrap(sampler) is not self.reference else {}
        with bind(rng):
            valid, _ = sampler(ids, cand_logits, step.gamma, new_logits, **kwargs)
        deferred = tokens_deferring_last(valid, rng)     # the last token still pending: one call for all its values
        return deferred if deferred is not None else self.tokens(as_array(valid))

    def fast_reference(self, precision: str, *, lazy: bool = False) -> Callable[[Step, Rng], Any]:
        """``reference_transformers_style`` at ``precision`` as a rule: the same torch arithmetic (softmax,
        ratios, residuals), done once per input, and the same draws made on the rng directly (``lazy``: see
        :meth:`_fast_reference_tokens`).

        >>> import exactspec as es
        >>> from fractions import Fraction as F
        >>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
        >>> law = es.audit(rule=transformers_chain.fast_reference("float32"), target=p, draft=q,
        ...                proposer=es.drafts.chain(1), tokens=1, exact_floats=True).output
        >>> 0 < abs(law[(0,)] - F(3, 5)) < F(1, 10 ** 7)     # 3/5 up to float32 rounding
        True
        """
        import torch
        from ...enumerate.rng import LATTICES
        from ..randomness.interception import native_uniform
        FLOAT32 = LATTICES["torch-float32"]
        dtype = getattr(torch, precision)
        memo: dict = {}

        def prepared(step: Step) -> tuple:
            key, laws = self._keyed(step)
            hit = memo.get(key)
            if hit is None:
                _, cand_logits, new_logits, _ = self._tensors(step)
                q = cand_logits.to(dtype).softmax(dim=-1)[0]
                p = new_logits.to(dtype).softmax(dim=-1)[0]
                drafts = step.drafts
                at = torch.arange(len(drafts))      # the divisions in one tensor operation
                idx = torch.tensor(drafts, dtype=torch.long)
                ratios = (p[at, idx] / q[at, idx]).tolist()
                hit = memo[key] = (laws, drafts, ratios, p, q, {})
            return hit

        def law(row: Any) -> tuple:
            return _normalised(row.double().tolist())

        def tokens(step: Step, rng: Rng) -> Iterator[int]:
            """Each token as soon as it is decided: the engine stops at its horizon and, when it defers categorical
            draws, spreads the last one instead of forking on it."""
            _, drafts, ratios, p, q, laws = prepared(step)
            for j, x in enumerate(drafts):
                if native_uniform(rng, FLOAT32, "torch float32") < ratios[j]:   # torch.rand(1): float32, always
                    yield x
                    continue
                if j not in laws:
                    residual = torch.clamp(p[j] - q[j], min=0)
                    laws[j] = law(residual / residual.sum())
                yield rng.categorical(laws[j])
                return
            if "bonus" not in laws:
                laws["bonus"] = law(p[len(drafts)])
            yield rng.categorical(laws["bonus"])
        if lazy:
            return tokens

        def reference(step: Step, rng: Rng) -> list[int]:
            return list(tokens(step, rng))
        return reference

    def _fast_reference_tokens(self, precision: str) -> Callable[[Step, Rng], Iterator[int]]:
        """:meth:`fast_reference` giving each token as it is decided (a generator rule): the same law, its outcomes
        in another order when the engine defers draws (the sampler audit's rounding figures, which read TVs only).

        >>> import exactspec as es
        >>> from fractions import Fraction as F
        >>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
        >>> kw = dict(target=p, draft=q, proposer=es.drafts.chain(2), tokens=3, exact_floats=True)
        >>> fast = transformers_chain.fast_reference("float32")
        >>> es.audit(rule=transformers_chain._fast_reference_tokens("float32"), **kw).output == \\
        ...     es.audit(rule=fast, **kw).output
        True
        """
        return self.fast_reference(precision, lazy=True)


def _normalised(weights: list[float]) -> tuple[Fraction, ...]:
    """Float weights divided by their sum, exactly: the multinomial law torch draws from (raises as it does).

    Each float is ``n * 2**-k``: on the common denominator ``2**K`` the weights are integers, so the law is
    ``N_i / sum(N)``, one reduction per entry (the same Fractions as ``Fraction(x) / sum(...)``).

    >>> _normalised([0.25, 0.5, 0.25])
    (Fraction(1, 4), Fraction(1, 2), Fraction(1, 4))
    >>> _normalised([0.0, -0.0])
    Traceback (most recent call last):
    ...
    RuntimeError: invalid multinomial distribution (sum of probabilities <= 0)
    """
    ratios = [x.as_integer_ratio() for x in weights]    # raises on nan and inf, as Fraction(x) does
    top = max(d for _, d in ratios).bit_length() - 1  # every denominator is a power of two
    ints = [n << (top - d.bit_length() + 1) for n, d in ratios]
    total = sum(ints)
    if total <= 0 or any(n < 0 for n in ints):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    return tuple(Fraction(n, total) for n in ints)


transformers_chain = TransformersChainAdapter()


def reference_vllm_style(target_probs: Any, draft_probs: Any, draft_token_ids: Any, bonus_token_ids: Any) -> Any:
    """A correct batched rejection sampler with a vLLM-style signature (own code).

    ``target_probs`` and ``draft_probs`` are ``[B, k, V]``, ``draft_token_ids`` ``[B, k]``,
    ``bonus_token_ids`` ``[B, 1]``; returns ``[B, k + 1]`` token ids, ``-1`` after the first
    rejection's recovered token. The recovered token is an exponential race over the residual.
    """
    import torch
    batch, k, _ = target_probs.shape
    idx = draft_token_ids.unsqueeze(-1)
    p_x = target_probs.gather(-1, idx).squeeze(-1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)
    accepted = torch.rand(batch, k) < p_x / q_x
    residual = torch.clamp(target_probs - draft_probs, min=0)
    residual = residual / residual.sum(-1, keepdim=True).clamp(min=torch.finfo(residual.dtype).tiny)
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        row = accepted[b].tolist()
        n = row.index(False) if False in row else k
        out[b, :n] = draft_token_ids[b, :n]
        if n == k:
            out[b, k] = bonus_token_ids[b, 0]
        else:
            race = residual[b, n] / torch.empty_like(residual[b, n]).exponential_(1.0)
            out[b, n] = race.argmax(dim=-1)
    return out


class VllmChainAdapter(Adapter):
    """``sampler(target_probs [B, k, V], draft_probs [B, k, V], draft_token_ids [B, k], bonus_token_ids [B, 1])
    -> [B, k + 1]`` token ids padded with ``-1``: a vLLM-style batched rejection sampler; laws are float32
    probabilities, and the bonus token is drawn from the target law at the bonus position before the
    call, as the serving engine does. ``draft_token_ids`` and ``bonus_token_ids`` are long tensors; the
    output's negative ids are padding, the others (in order) the tokens the step emitted. Every
    adapter's call is written out in docs/adapters.md.

    ``batch`` (default 1) rows are handed over, each an independent request: row ``i`` holds the step's
    laws and drafts with the vocabulary shifted by ``i`` (token ``t`` is ``(t + i) mod V``), so rows
    differ and a sampler that reads one row's values for another is caught. The audit reads row
    ``row`` (default the last), mapped back; every row's draws are enumerated (rows other than the
    audited one get the target's most likely bonus token, not a draw). Audit each row with ``row=i``
    to check them all.

    >>> VllmChainAdapter(batch=3).row
    2
    """

    name = "vllm"
    family = "chain"
    needs_torch = True
    reference = staticmethod(reference_vllm_style)
    precision = "float32"

    def __init__(self, batch: int = 1, row: int | None = None) -> None:
        from ...errors import InvalidType, InvalidValue
        if not isinstance(batch, int):
            raise InvalidType(f"VllmChainAdapter batch must be an integer >= 1, got {batch!r}")
        if batch < 1:
            raise InvalidValue(f"VllmChainAdapter batch must be an integer >= 1, got {batch!r}")
        row = batch - 1 if row is None else row
        if not isinstance(row, int):
            raise InvalidType(f"VllmChainAdapter row must be in 0 .. {batch - 1}, got {row!r}")
        if not 0 <= row < batch:
            raise InvalidValue(f"VllmChainAdapter row must be in 0 .. {batch - 1}, got {row!r}")
        self.batch, self.row = batch, row

    def probs(self, law: Law) -> Any:
        """A law as a probability tensor in the adapter's precision (float32 unless :meth:`with_precision`)."""
        import torch
        dtype = getattr(torch, self.precision)
        return memoised(f"{self.precision} probs", law, None,
                        lambda: torch.tensor([float(x) for x in law], dtype=dtype))

    def with_precision(self, precision: str) -> "VllmChainAdapter":
        """This adapter handing its laws in ``precision`` (the float64 run of a float32 audit).

        >>> vllm_chain.with_precision("float64").probs((Fraction(1, 3), Fraction(2, 3))).dtype
        torch.float64
        """
        return self if precision == self.precision else self._copy_at(precision)

    def _inputs(self, step: Step) -> tuple[Any, Any, Any]:
        """(target laws [1, gamma, V], draft laws [1, gamma, V], drafts [1, gamma]) of a step, built once per input
        (its call key): each call gets its own copies, so a sampler writing into them changes nothing for the next."""
        import torch
        got = self.call_key(step)
        key = None if got is None else (id(self), got[0])
        hit = _INPUTS.get(key) if key is not None else None
        if hit is None:
            g = step.gamma
            hit = (torch.stack([self.probs(step.target(j)) for j in range(g)])[None],
                   torch.stack([self.probs(step.claimed(j)) for j in range(g)])[None],
                   torch.tensor([list(step.drafts)], dtype=torch.long), got, self)
            if key is None:
                return hit[:3]
            if len(_INPUTS) >= 4096:
                _INPUTS.clear()
            _INPUTS[key] = hit       # the laws and the adapter stay alive while their ids key the entry
        return hit[0].clone(), hit[1].clone(), hit[2].clone()

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        import torch
        if isinstance(rng, PathRng):
            # the bonus token is drawn when the sampler reads it (a pending draw), not before the call: a sampler
            # that rejects a draft never reads it, and its branches are not multiplied by the bonus's support (the
            # law is the same: the bonus draw is independent of the sampler's own draws). Enumerations only: a
            # sampling rng (the statistical audit) keeps its draws in their old order, so seeded runs repeat
            return self._call_lazy_bonus(sampler, step, rng, *self._inputs(step))
        drafts = step.drafts
        target = torch.stack([self.probs(step.target(j)) for j in range(step.gamma)])[None]
        draft = torch.stack([self.probs(step.claimed(j)) for j in range(step.gamma)])[None]
        bonus = rng.categorical(step.target(step.gamma))
        ids = torch.tensor([list(drafts)], dtype=torch.long)
        if self.batch == 1:
            with bind(rng):
                out = sampler(target, draft, ids, torch.tensor([[bonus]], dtype=torch.long))
            return self.tokens(as_array(out))
        vocab = target.shape[-1]
        likely = int(np.argmax([float(x) for x in step.target(step.gamma)]))
        shifts = range(self.batch)
        target_b = torch.cat([torch.roll(target, i, dims=-1) for i in shifts])
        draft_b = torch.cat([torch.roll(draft, i, dims=-1) for i in shifts])
        ids_b = torch.cat([(ids + i) % vocab for i in shifts])
        bonus_b = torch.tensor([[((bonus if i == self.row else likely) + i) % vocab] for i in shifts], dtype=torch.long)
        with bind(rng):
            out = sampler(target_b, draft_b, ids_b, bonus_b)
        mine = as_array(out)[self.row]
        return [(int(t) - self.row) % vocab for t in mine if int(t) >= 0]

    def _call_lazy_bonus(self, sampler: Callable, step: Step, rng: Rng, target: Any, draft: Any, ids: Any) -> list[int]:
        """:meth:`call` with the audited row's bonus token a pending draw from the target's bonus law, drawn
        (the enumeration forking) only when the sampler reads it; the other rows' bonus tokens are fixed."""
        import torch
        law = step.target(step.gamma)
        if self.batch == 1:
            cells = np.empty((1, 1), dtype=object)
            cells[0, 0] = (PendingDraw.of_law(rng, law), 0)
            with bind(rng):
                out = sampler(target, draft, ids, LazyCategoricalTensor(cells))
            deferred = tokens_deferring_last(out, rng)   # the last token still pending: one call for all its values
            return deferred if deferred is not None else self.tokens(as_array(out))
        vocab = target.shape[-1]
        likely = int(np.argmax([float(x) for x in law]))
        row = self.row
        shifts = range(self.batch)
        shifted = _shifted_law(law, row)      # token t drawn as (t + row) mod V, as the eager path hands it
        cells = np.empty((self.batch, 1), dtype=object)
        for i in shifts:
            cells[i, 0] = (PendingDraw.of_law(rng, shifted), 0) if i == row else \
                (PendingDraw.of_law(None, (likely + i) % vocab), 0)
        target_b = torch.cat([torch.roll(target, i, dims=-1) for i in shifts])
        draft_b = torch.cat([torch.roll(draft, i, dims=-1) for i in shifts])
        ids_b = torch.cat([(ids + i) % vocab for i in shifts])
        with bind(rng):
            out = sampler(target_b, draft_b, ids_b, LazyCategoricalTensor(cells))
        mine = as_array(out)[row]
        return [(int(t) - row) % vocab for t in mine if int(t) >= 0]


def _shifted_law(law: Law, shift: int) -> Law:
    """``law`` with token ``t`` moved to ``(t + shift) mod V`` (memoised per law object: the rng caches its support).

    >>> _shifted_law((1, 2, 3), 1)
    (3, 1, 2)
    """
    if not shift:
        return law
    return memoised(f"shifted {shift}", law, None,
                    lambda: tuple(law[(t - shift) % len(law)] for t in range(len(law))))


#: (adapter id, call key) -> a step's input tensors for the vLLM-style adapter (see ``VllmChainAdapter._inputs``)
_INPUTS: dict = {}

vllm_chain = VllmChainAdapter()
