"""Stand-in language models: an exact toy law behind the interface real decoding code calls.

:func:`stand_in` turns an :class:`exactspec.Model` into something generation code can drive
as it would a trained network, so a whole generate loop (drafting, verification, bonus
token) can be audited as it is written (:func:`exactspec.audit_loop`).

``kind="torch-lm"`` gives a :class:`TorchLM`, a ``torch.nn.Module`` whose ``forward(idx, ...)``
takes token ids ``[B, T]`` (or ``[T]``) and returns logits ``[B, T, V]`` with
``softmax(logits[b, t])`` the model's law for the context ``idx[b, :t + 1]``: each logit is the
log of the exact probability, rounded once to ``dtype`` (``-inf`` where the probability is 0).
KV-cache arguments are accepted; ``input_pos`` (litgpt's convention: the positions of the ids
passed, the earlier ones being in the cache) is honoured, because such code passes only the new
ids and the law depends on the whole context. Other cache and position arguments
(``past_key_values``, ``use_cache``, ``cache``, ``seq_start_pos``, ``input_pos_maxp1``...) are
ignored: the stand-in always reads the ids it is given. Rows are memoised on the context suffix
the model reads (``model.key(context)``), so the replays of an audit recompute nothing.

``kind="transformers"`` gives a real ``transformers.PreTrainedModel`` usable by ``generate``
(including ``assistant_model=``), built by :func:`exactspec.samplers.loops.hf_stand_in.transformers_stand_in`.

>>> import torch, exactspec as es
>>> lm = stand_in(es.models.context_free(("1/4", "3/4")), dtype=torch.float64)
>>> logits = lm(torch.tensor([[0, 1]]))
>>> logits.shape, logits[0, -1].softmax(-1).tolist()
(torch.Size([1, 2, 2]), [0.25, 0.75])
"""

from __future__ import annotations

from typing import Any

from ...errors import ExactSpecError, InvalidType, InvalidValue
from ...models import Model

__all__ = ["stand_in", "TorchLM", "KINDS"]

#: the kinds of stand-in :func:`stand_in` builds
KINDS = ("torch-lm", "transformers")


def __getattr__(name: str) -> Any:
    """``TorchLM`` lives in a torch-only module, imported on first use (``import exactspec`` needs no torch)."""
    if name == "TorchLM":
        from ._torch_lm import TorchLM
        return TorchLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stand_in(model: Model, *, kind: str = "torch-lm", dtype: Any = None, **options: Any) -> Any:
    """A language model for decoding code, with the exact law of ``model`` at every position.

    ``kind="torch-lm"`` (default): a :class:`TorchLM` (``torch.nn.Module``) returning logits
    ``[B, T, V]`` in ``dtype`` (default ``torch.float32``); ``kind="transformers"``: a
    ``transformers.PreTrainedModel`` usable by ``generate`` (``options`` go to
    :func:`exactspec.samplers.loops.hf_stand_in.transformers_stand_in`).

    >>> import torch, exactspec as es
    >>> lm = stand_in(es.models.context_free(("1/2", "1/4", "1/4")))
    >>> lm(torch.tensor([[2]])).softmax(-1).tolist()
    [[[0.5, 0.25, 0.25]]]
    >>> stand_in(es.models.context_free(("1/2", "1/2")), kind="jax")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: stand_in: kind must be one of torch-lm, transformers, got 'jax'
    """
    try:
        from ._torch_lm import TorchLM
    except ImportError:  # pragma: no cover - exercised only without the torch extra
        raise ExactSpecError("stand_in needs torch installed: pip install torch==2.13.0") from None
    if not isinstance(model, Model):
        raise InvalidType(f"stand_in: model must be an exactspec model (es.models.*), got {model!r}")
    if kind == "torch-lm":
        if options:
            raise InvalidType(f"stand_in(kind='torch-lm') takes no options, got {sorted(options)}")
        return TorchLM(model, dtype)
    if kind == "transformers":
        from .hf_stand_in import transformers_stand_in
        kw = dict(options)
        if dtype is not None:
            kw["dtype"] = dtype
        return transformers_stand_in(model, **kw)
    raise InvalidValue(f"stand_in: kind must be one of {', '.join(KINDS)}, got {kind!r}")
