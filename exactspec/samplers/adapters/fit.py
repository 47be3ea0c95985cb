"""Does the default adapter drive this sampler? A wrong adapter is a usage error, never a finding about the sampler.

``es.audit_sampler``, ``es.samplers.search_sampler`` and ``exactspec audit-sampler`` call a sampler
through the numpy adapter when no adapter is given. A torch sampler handed to it (vLLM's
``(target_probs, draft_probs, draft_token_ids, bonus_token_ids)``, transformers'
``(candidate_input_ids, candidate_logits, ...)``) raises on its very first call, and that used to
read as a crash counterexample of the sampler with probability 1. Here, when the adapter was not
given and the audit (or search) under the default adapter found the sampler crashing, the
sampler's first call under the default adapter is made again (:func:`first_call`: the first branch
of a one-call enumeration, every randomness source intercepted as in the audit; nothing is made
while the sampler runs fine, so a correct sampler is called exactly as before). If it raises, the
other registered adapters
(:data:`~exactspec.samplers.adapters.registry.ADAPTER_NAMES`) are tried on the same sampler, one call
each; when some of them run it, :class:`~exactspec.errors.AdapterMismatch` (exit 2) names them,
the one whose parameter names match the sampler's first. When none does, the audit goes on under
the default adapter and a crash is the sampler's, as it is whenever the adapter is given explicitly.

>>> import exactspec as es
>>> from exactspec.bugzoo import numpy_samplers as zoo
>>> p = es.models.context_free(("1/2", "1/2"))
>>> first_call(zoo.correct, es.samplers.get_adapter("numpy"), target=p, draft=p, proposer=es.drafts.chain(1)) is None
True
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Sequence

from ..._audit import audit
from ..._crash import crash_site
from ..._device import one_torch_thread
from ...errors import AdapterMismatch, BudgetExceeded, ExactSpecError, UnsupportedRandomness
from ...models import Model, context_free
from ...rules import Rule
from ...rules.shape import looks_like_sampler
from .registry import ADAPTER_NAMES, get_adapter
from ..randomness.interception import current_session, intercepting, private_generators, watch

__all__ = ["DEFAULT_ADAPTER", "first_call", "check_default_adapter"]

#: the adapter a sampler is called through when none is given
DEFAULT_ADAPTER = "numpy"


class _FirstCall(ExactSpecError):
    """Stops a probe's enumeration after the sampler's first call; ``raised`` is what that call raised (or None)."""

    def __init__(self, raised: BaseException | None) -> None:
        super().__init__("the sampler's first call was made")
        self.raised = raised


def first_call(sampler: Callable, adapter: Any, *, target: Model, draft: Model | None, proposer: Any,
               prompt: Sequence[int] = (), rng_model: str = "native") -> BaseException | None:
    """What the sampler's first call through ``adapter`` raised on the first branch of this instance (None: it returned).

    The call is made as an audit makes it (every randomness source intercepted, the sampler watched
    for escaped draws); an :class:`~exactspec.ExactSpecError` raised setting it up (an instance the
    adapter cannot hand over) is returned too.

    >>> import exactspec as es
    >>> p = es.models.context_free(("1/2", "1/2"))
    >>> def broken(draft_ids, draft_probs, target_probs, rng):
    ...     return [draft_ids[5]]
    >>> type(first_call(broken, es.samplers.get_adapter("numpy"), target=p, draft=p, proposer=es.drafts.chain(1)))
    <class 'IndexError'>
    """
    adapter = get_adapter(adapter)
    if getattr(adapter, "needs_torch", False):
        from ..torch_draws import torch_rng  # noqa: F401  (imports torch, so the interception patches it too)
    name = getattr(sampler, "__name__", "sampler")
    private = private_generators(getattr(sampler, "__wrapped__", sampler))

    def probe(step: Any, rng: Any) -> list[int]:
        try:
            with watch(rng, name, private, current_session()):
                adapter.call(sampler, step, rng)
        except _FirstCall:
            raise
        except (Exception, SystemExit) as exc:    # noqa: BLE001 - whatever it raised is the answer
            raise _FirstCall(exc) from None
        raise _FirstCall(None)

    try:
        with intercepting(), one_torch_thread():
            audit(rule=Rule(probe, name=name, family=adapter.family, claim="lossless"), target=target, draft=draft,
                  proposer=proposer, prompt=prompt, rng_model=rng_model, exact_floats=True, backend="python",
                  progress=False)
    except _FirstCall as stop:
        return stop.raised
    except ExactSpecError as exc:
        return exc
    return None


def _ran(raised: BaseException | None) -> bool:
    """Whether a first call got through the adapter into the sampler's own work: it returned, met randomness the
    audit cannot follow or a budget, or ended the process (the adapter drove it; the rest is the audit's business)."""
    return raised is None or isinstance(raised, (UnsupportedRandomness, BudgetExceeded)) or _exited(raised)


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _exited(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, the audited code's ``sys.exit`` (never an adapter mismatch)."""
    for _ in range(16):
        if exc is None:
            return False
        if isinstance(exc, SystemExit):
            return True
        exc = exc.__cause__
    return False


def check_default_adapter(sampler: Callable, adapter: Any, *, failure: BaseException | None = None,
                          target: Model | None = None, draft: Model | None = None, proposer: Any = None,
                          prompt: Sequence[int] = (), rng_model: str = "native") -> None:
    """Raise :class:`~exactspec.errors.AdapterMismatch` when ``adapter`` (the default, not chosen by the caller)
    cannot make the sampler's first call but another registered adapter can.

    Called once the audit or search under the default adapter failed (``failure``, the error it
    raised) or recorded a crash; nothing is probed when the sampler ended the process (``sys.exit``).
    The instance defaults to a small one (vocabulary 3, two drafts, or a three-node tree for a tree
    adapter); an adapter of the other family gets that small proposer. When no other adapter runs
    the sampler either, nothing is raised: the sampler's crash is audited as a crash.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import torch_samplers
    >>> try:
    ...     check_default_adapter(torch_samplers.correct, "numpy")
    ... except es.errors.AdapterMismatch as e:
    ...     print(e.fits[0])
    vllm
    """
    adapter = get_adapter(adapter)
    if _exited(failure):
        return
    if target is None:
        target = context_free(("1/2", "1/4", "1/4"))
        draft = context_free(("1/4", "1/4", "1/2"))

    def small(family: str) -> Any:
        from ...drafts import chain, tree
        return chain(2) if family == "chain" else tree((2, 1))

    def run(a: Any) -> BaseException | None:
        prop = proposer if proposer is not None and a.family == adapter.family else small(a.family)
        return first_call(sampler, a, target=target, draft=draft, proposer=prop, prompt=prompt, rng_model=rng_model)

    raised = run(adapter)
    if _ran(raised):
        return
    assert raised is not None
    torch_ok = _torch_available()
    fits = []
    for other in ADAPTER_NAMES:
        if other == adapter.name:
            continue
        try:
            candidate = get_adapter(other)
        except ExactSpecError:
            continue
        if getattr(candidate, "needs_torch", False) and not torch_ok:
            continue
        if _ran(run(candidate)):
            fits.append(other)
    if not fits:
        return
    shape = looks_like_sampler(sampler)
    named = shape.adapter if shape is not None else ""
    fits.sort(key=lambda n: n != named)          # the adapter the parameter names match first
    cause = raised.__cause__ if isinstance(raised, ExactSpecError) and raised.__cause__ is not None else raised
    raise AdapterMismatch(getattr(sampler, "__name__", "sampler"), adapter.name, fits, cause,
                          crash_site(cause) or "")
