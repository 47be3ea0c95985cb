"""A stand-in ``transformers.PreTrainedModel`` with an exact toy law: ``generate(...)`` audited as it is written.

:func:`transformers_stand_in` turns an :class:`exactspec.Model` into a real ``PreTrainedModel``
(with ``GenerationMixin``) that transformers' ``generate`` drives like any causal language model:
sampling, greedy search, assisted generation with ``assistant_model=`` (the stand-in of a draft
model), prompt lookup decoding and universal assisted generation with two tokenizers. Its
logits at every position are the log of the model's exact law for the context up to that
position, rounded once to ``dtype`` (probability 0 is the dtype's most negative finite value,
whose softmax is exactly 0 as ``-inf``'s is, and which a linear head can carry exactly).

There are no weights. The network is three pieces that only carry token ids and laws:

* ``embed_tokens``: an ``nn.Embedding(V, 1)`` holding each token's own id (float64), so the
  forward pass reads the ids through the input embedding (transformers' universal assisted
  generation remaps ids there);
* the KV cache: a real ``transformers`` cache whose one layer stores the token ids seen so
  far, so ``get_seq_length``, ``crop`` and the cache bookkeeping of ``generate`` work unchanged,
  and the forward pass recovers the full context from the cache and the new ids;
* ``lm_head``: an identity ``nn.Linear(V, V)`` applied to the exact log-law rows (transformers
  prunes it for a draft whose vocabulary is not a subset of the target's); a product with the
  identity is exact in every dtype.

Log-law rows are memoised on the context the model reads (``model.key(context)``), so replays
of an audit recompute nothing. ``calls`` / ``total_calls`` count forward calls (since
``reset()`` / since built) and ``longest_forward`` is the most positions scored in one call
since ``reset()`` (a target call scoring several positions shows that drafting happened).

>>> import torch, exactspec as es
>>> m = transformers_stand_in(es.models.context_free(("1/4", "3/4")))
>>> out = m(torch.tensor([[0, 1]]))
>>> out.logits.shape, [round(float(x), 4) for x in out.logits[0, -1].softmax(-1)]
(torch.Size([1, 2, 2]), [0.25, 0.75])
>>> m.generate(torch.tensor([[0]]), do_sample=False, max_new_tokens=2).tolist()
[[0, 1, 1]]
"""

from __future__ import annotations

import copy
import inspect
import math
import sys
from fractions import Fraction
from typing import Any, cast

import torch
import torch.nn.modules.module as _module
from transformers import DynamicCache, GenerationConfig, GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from ...errors import ExactSpecError, InvalidType, InvalidValue
from ..randomness.precision_watch import unwatched
from ...models import Model

__all__ = ["transformers_stand_in", "ExactLMConfig", "ExactLMForCausalLM"]

_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _log(p: Fraction) -> float:
    """``log(p)`` rounded from the double nearest ``p`` (``-inf`` for 0; a probability below the float range
    through its numerator and denominator)."""
    if p <= 0:
        return -math.inf
    x = float(p)
    if x >= sys.float_info.min:
        return math.log(x)
    return math.log(p.numerator) - math.log(p.denominator)


#: the types whose values ``copy.deepcopy`` returns as they are (and compares by value with :func:`_same`)
_ATOMS = (type(None), bool, int, str, bytes)
_IMMUTABLE = (*_ATOMS, float)


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` is what ``copy.deepcopy(b)`` would be, for atoms and lists, tuples and dicts of them (False when
    unsure: an object, a float that is NaN, a zero of another sign)."""
    t = type(a)
    if t is not type(b):
        return False
    if t in _ATOMS:
        return a == b
    if t is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if t is list or t is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if t is dict:
        return len(a) == len(b) and all(_same(x, y) and _same(a[x], b[y]) for x, y in zip(a, b))
    return False


def _restore(live: Any, snapshot: Any) -> bool:
    """Make ``live`` (a generation config) hold what ``copy.deepcopy(snapshot)`` holds, copying only the attributes
    that differ; False (nothing done) where its attributes are not the snapshot's, in the same order.

    >>> from types import SimpleNamespace as NS
    >>> live, snap = NS(a=1, b=[2]), NS(a=1, b=[3])
    >>> _restore(live, snap), live.b, live.b is snap.b
    (True, [3], False)
    """
    if type(live) is not type(snapshot):
        return False
    have, want = vars(live), vars(snapshot)
    if list(have) != list(want):
        return False
    memo: dict = {}
    for k, v in want.items():
        a = have[k]
        if (a is v and type(v) in _IMMUTABLE) or _same(a, v):     # (the same immutable object: what deepcopy gives)
            continue
        have[k] = copy.deepcopy(v, memo)
    return True


class ExactLMConfig(PreTrainedConfig):
    """The configuration of a stand-in: a vocabulary size and one (token-id) cache layer.

    >>> ExactLMConfig(vocab_size=3).vocab_size
    3
    """

    model_type = "exactspec_stand_in"

    def __init__(self, vocab_size: int = 2, num_hidden_layers: int = 1, use_cache: bool = True,
                 **kwargs: Any) -> None:
        self.vocab_size = vocab_size
        self.num_hidden_layers = num_hidden_layers
        self.use_cache = use_cache
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


class ExactLMForCausalLM(PreTrainedModel, GenerationMixin):
    """A causal LM whose logits are an exact :class:`exactspec.Model` law; build it with :func:`transformers_stand_in`.

    >>> import exactspec as es
    >>> m = transformers_stand_in(es.models.context_free(("1/2", "1/2")))
    >>> isinstance(m, ExactLMForCausalLM), m.dtype
    (True, torch.float32)
    """

    config_class = ExactLMConfig
    base_model_prefix = "exactspec_stand_in"
    _no_split_modules: list[str] = []
    _supports_cache_class = True

    def __init__(self, config: ExactLMConfig, law_model: Model | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(config)
        V = config.vocab_size
        head, embed = torch.nn.Linear(V, V, bias=False, dtype=dtype), torch.nn.Embedding(V, 1, dtype=torch.float64)
        with torch.no_grad():
            head.weight.copy_(torch.eye(V, dtype=dtype))
            embed.weight.copy_(torch.arange(V, dtype=torch.float64)[:, None])
        head.weight.requires_grad_(False)
        embed.weight.requires_grad_(False)
        # any module in their place (transformers replaces them): registered head first, as PreTrainedModel.dtype
        # is the first floating parameter's dtype
        self.lm_head: torch.nn.Module = head
        self.embed_tokens: torch.nn.Module = embed
        self.law_model = law_model
        self._logit_dtype = dtype
        self._rows: dict[tuple, torch.Tensor] = {}
        self.calls = 0               # forward calls since the last reset()
        self.total_calls = 0         # forward calls since it was built
        self.longest_forward = 0     # the most positions scored in one call since the last reset()
        self.contexts: list[tuple] = []   # per forward call since the last reset(): the first row's whole context
        self._config_snapshot: GenerationConfig | None = None
        #: the identity pieces as built (module, weight, weight version): while they are in place, unchanged and
        #: without hooks, reading them is the identity (:meth:`_plain`), which forward skips
        self._built = {m: (m, m.weight, m.weight._version) for m in (embed, head)}

    def reset(self) -> None:
        """Start a branch afresh: zero ``calls`` and ``longest_forward``, restore ``generation_config``.

        An audit calls it before every branch. The first call snapshots ``generation_config``; later
        calls restore that snapshot, so what ``generate`` writes back into it (``num_assistant_tokens``
        under the ``"heuristic"`` schedule, persistent across calls by design) does not leak from
        one branch into the next. The KV cache lives in ``generate``'s own cache objects and the
        memo of laws is kept.

        >>> import exactspec as es
        >>> m = transformers_stand_in(es.models.context_free(("1/2", "1/2")))
        >>> m.reset(); m.generation_config.num_assistant_tokens = 7; m.reset()
        >>> m.generation_config.num_assistant_tokens is None
        True
        """
        self.calls = 0
        self.longest_forward = 0
        self.contexts = []
        if self._config_snapshot is None:
            self._config_snapshot = copy.deepcopy(self.generation_config)
        elif not _restore(self.generation_config, self._config_snapshot):
            self.generation_config = copy.deepcopy(self._config_snapshot)

    # transformers' hooks for the pieces it may replace (universal assisted generation prunes them)
    def get_input_embeddings(self) -> torch.nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.embed_tokens = value

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: torch.nn.Module) -> None:
        self.lm_head = value

    def _init_weights(self, module: torch.nn.Module) -> None:  # the identity pieces are set in __init__
        return

    def _row(self, m: Model, context: tuple) -> torch.Tensor:
        """The log-law of ``context`` under ``m`` (the stand-in's law) as a ``vocab_size`` row in the logit dtype
        (memoised on what the model reads)."""
        key = m.key(context)
        row = self._rows.get(key)
        if row is None:
            law = m(context)
            floor = torch.finfo(self._logit_dtype).min
            vals = [_log(x) for x in law]
            vals += [-math.inf] * (self.config.vocab_size - len(vals))
            row = torch.tensor(vals, dtype=torch.float64).clamp(min=floor).to(self._logit_dtype)
            self._rows[key] = row
        return row

    def _plain(self, module: Any) -> bool:
        """Whether ``module`` is one of the stand-in's identity pieces as built: the same weight, unchanged and without
        gradient, and no hook (of its own or global) nor replaced ``forward`` that calling it would run."""
        built = (self.__dict__.get("_built") or {}).get(module)
        if built is None:
            return False
        weight = built[1]
        return module.__dict__["_parameters"].get("weight") is weight and weight._version == built[2] and \
            not weight.requires_grad and "forward" not in module.__dict__ and not (
                module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or
                module._backward_pre_hooks or _module._global_forward_hooks or _module._global_forward_pre_hooks or
                _module._global_backward_hooks or _module._global_backward_pre_hooks)

    def _ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token ids as the (possibly remapped) input embedding sees them."""
        emb_module = self.get_input_embeddings()
        if input_ids.dtype in (torch.long, torch.int) and input_ids.numel() and \
                type(emb_module) is torch.nn.Embedding and emb_module.max_norm is None and self._plain(emb_module):
            # the embedding as built holds each id's own value: what it gives back, rounded, is the ids (read and
            # checked to lie in the vocabulary by forward)
            return input_ids.to(torch.long, copy=True)
        emb = emb_module(input_ids)
        return emb[..., 0].round().to(torch.long)

    @unwatched      # the stand-in's own arithmetic, not the audited loop's
    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None, cache: Any = None, inputs_embeds: Any = None,
                use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0,
                return_dict: bool | None = None, **kwargs: Any) -> Any:
        """Logits ``[B, T, vocab_size]``: ``log`` of the exact law of every context, the cache extended by the ids.

        ``past_key_values`` is accepted as the old name of ``cache``. Left padding is honoured
        through ``attention_mask`` (masked positions are left out of every context).
        """
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        law_model = self.law_model
        if law_model is None:
            raise ExactSpecError("this stand-in has no law: build it with transformers_stand_in(model)")
        if input_ids is None:
            raise ExactSpecError("an exactspec stand-in reads token ids: pass input_ids (inputs_embeds are not "
                                 "token ids it can read)")
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if input_ids.dim() != 2:
            raise ExactSpecError(f"stand-in of {law_model.name}: input_ids must have shape [B, T] or [T], got "
                                 f"{tuple(input_ids.shape)}")
        rows_in = cast(torch.Tensor, self.get_input_embeddings().weight).shape[0]    # (a module's parameter)
        if input_ids.numel() and not 0 <= int(input_ids.min()) <= int(input_ids.max()) < rows_in:
            bad = [t for t in input_ids.flatten().tolist() if not 0 <= t < rows_in][0]
            raise ExactSpecError(f"stand-in of {law_model.name}: token id {bad} is outside its vocabulary "
                                 f"0..{rows_in - 1}")
        if cache is not None and not isinstance(cache, DynamicCache):
            raise ExactSpecError(f"stand-in of {law_model.name}: it keeps the ids it has seen in a DynamicCache; "
                                 f"got a {type(cache).__name__} (leave generate's cache_implementation unset)")
        ids = self._ids(input_ids)
        batch, new = ids.shape
        past = None
        if cache is not None and cache.get_seq_length() > 0:
            layer: Any = cache.layers[0]     # the DynamicLayer the stand-in fills (its keys: the ids it has seen)
            past = layer.keys[:, 0, :, 0].round().to(torch.long)
            if past.shape[0] != batch:
                raise ExactSpecError(f"the stand-in's cache holds {past.shape[0]} rows but {batch} were passed")
        if cache is None and (use_cache if use_cache is not None else self.config.use_cache):
            cache = DynamicCache(config=self.config)
        full = ids if past is None else torch.cat([past, ids], dim=-1)
        if cache is not None:
            stored = ids.to(torch.float64)[:, None, :, None]
            cache.update(stored, stored, 0)
        mask = None
        if attention_mask is not None and attention_mask.dim() == 2:
            if attention_mask.shape != full.shape:
                raise ExactSpecError(f"attention_mask has shape {tuple(attention_mask.shape)}, the stand-in sees "
                                     f"{tuple(full.shape)} positions (cache + new ids)")
            mask = attention_mask.tolist()
        keep = min(logits_to_keep, new) if isinstance(logits_to_keep, int) and logits_to_keep > 0 else new
        vocab = law_model.vocab
        rows = []
        for b, seq in enumerate(full.tolist()):
            n0 = len(seq) - new
            context = tuple(seq[:n0]) if mask is None else tuple(t for t, m in zip(seq[:n0], mask[b][:n0]) if m)
            if b == 0:
                self.contexts.append(tuple(seq) if mask is None else tuple(t for t, m in zip(seq, mask[0]) if m))
            for t in range(new):
                tok = seq[n0 + t]
                if mask is None or mask[b][n0 + t]:
                    if not 0 <= tok < vocab:
                        raise ExactSpecError(f"stand-in of {law_model.name}: token id {tok} at position "
                                             f"{n0 + t} is outside the model's vocabulary 0..{vocab - 1}")
                    context = context + (tok,)
                if t >= new - keep:
                    rows.append(self._row(law_model, context))
        hidden = torch.stack(rows).view(batch, keep, -1)
        head = self.get_output_embeddings()
        if type(head) is torch.nn.Linear and head.bias is None and self._plain(head) and \
                head.weight.dtype == hidden.dtype:
            logits = hidden      # the identity head as built: its product with these finite rows is them, exactly
        else:
            logits = head(hidden)
        d = self.__dict__        # plain counters: written without nn.Module.__setattr__'s look-ups
        d["calls"] += 1
        d["total_calls"] += 1
        d["longest_forward"] = max(d["longest_forward"], new)
        out = CausalLMOutputWithPast(logits=logits, cache=cache)
        return out if return_dict is not False else out.to_tuple()


def _signature_once() -> None:
    """Give ``ExactLMForCausalLM.forward`` its signature once.

    ``generate`` asks ``inspect.signature(self.forward)`` several times per call (the kwargs it may
    pass, ``logits_to_keep``, multimodal inputs); ``inspect`` returns a function's ``__signature__``
    when it has one, the same signature it would compute.

    >>> _signature_once(); "logits_to_keep" in inspect.signature(ExactLMForCausalLM.forward).parameters
    True
    """
    fwd = ExactLMForCausalLM.forward
    fwd.__signature__ = inspect.signature(fwd)  # type: ignore[attr-defined]  # a function attribute inspect reads


_signature_once()


def _import_lazy_dependencies() -> None:
    """Import now what ``generate`` would import lazily inside an audit.

    With scikit-learn installed, assisted generation adapts the assistant's confidence threshold
    from an ROC curve (``AssistedCandidateGenerator.update_candidate_strategy``) and imports
    ``sklearn.metrics`` at its first adaptation, mid-``generate``. That import loads ``scipy.stats``,
    which seeds ``numpy.random.default_rng`` at import time: inside an audit the interception would
    refuse it as a seeded generator (``UnsupportedRandomness``), though it is no draw of the loop.
    Importing it here, when a stand-in is built (before any interception), keeps it out of the audit.

    >>> _import_lazy_dependencies()      # a no-op without scikit-learn
    """
    from transformers.utils import is_sklearn_available
    if is_sklearn_available():
        import sklearn.metrics  # type: ignore[import-untyped]  # noqa: F401  (scikit-learn ships no type information)


def transformers_stand_in(model: Model, *, dtype: torch.dtype = torch.float32, vocab_size: int | None = None,
                          **options: Any) -> ExactLMForCausalLM:
    """A ``transformers`` causal LM whose next-token law is ``model``'s, exactly up to ``dtype``.

    ``vocab_size`` (default ``model.vocab``) widens the logits with probability-0 tokens (a
    tokenizer with more ids than the model's law); other ``options`` go to the config
    (``eos_token_id``, ``pad_token_id``, ``bos_token_id``, ...). ``generate`` works as with any
    causal LM: ``do_sample``, temperature, ``top_k``, ``top_p``, greedy search,
    ``assistant_model=`` another stand-in, ``prompt_lookup_num_tokens=``, ``tokenizer=`` /
    ``assistant_tokenizer=``. Contexts the model has no law for (a token id outside its
    vocabulary) raise ExactSpecError naming the token and position; a bad argument here is an
    :class:`~exactspec.errors.InvalidValue` or :class:`~exactspec.errors.InvalidType`.

    >>> import torch, exactspec as es
    >>> target = transformers_stand_in(es.models.context_free(("1/3", "2/3")), dtype=torch.float64)
    >>> target(torch.tensor([[1]])).logits.exp().tolist()
    [[[0.3333333333333333, 0.6666666666666666]]]
    """
    if not isinstance(model, Model):
        raise InvalidType(f"transformers_stand_in needs an exactspec Model, got {model!r}")
    if dtype not in _DTYPES:
        bad_dtype = InvalidValue if isinstance(dtype, torch.dtype) else InvalidType
        raise bad_dtype(f"transformers_stand_in dtype must be one of {', '.join(map(str, _DTYPES))}, got {dtype!r}")
    size = model.vocab if vocab_size is None else vocab_size
    if isinstance(size, bool) or not isinstance(size, int) or size < model.vocab:
        bad_size = InvalidValue if isinstance(size, int) and not isinstance(size, bool) else InvalidType
        raise bad_size(f"transformers_stand_in vocab_size must be an int >= the model's vocab ({model.vocab}), "
                       f"got {vocab_size!r}")
    _import_lazy_dependencies()
    config = ExactLMConfig(vocab_size=size, **options)
    stand_in = ExactLMForCausalLM(config, model, dtype)
    stand_in.generation_config = GenerationConfig.from_model_config(config)
    stand_in.eval()
    return stand_in
