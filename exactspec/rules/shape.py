"""Is this callable a rule ``fn(step, rng)``, or a sampler or a whole loop handed where a rule is expected?

The rule entry points (``es.audit``, ``es.assert_lossless``, ``es.counterexamples.search``,
``es.prove``, the CLI's ``--rule``) call a rule as ``fn(step, rng)``. A third-party sampler
(``sampler(draft_ids, draft_probs, target_probs, rng)``, the transformers / vLLM / flashinfer /
tree signatures of :mod:`exactspec.samplers`) or a generation loop (``fn(target, draft,
prompt_ids)``) handed there would fail on its first call with a bare ``TypeError``. This module
tells them apart by the signature, conservatively: a callable is refused only when it
*cannot* be called with two positional arguments (three or more required positional
parameters), so nothing a rule can be (``*args``, ``**kwargs``, defaults, ``functools.partial``,
a class with ``__call__``, an ``es.rule``-decorated function) is ever refused.

>>> def sampler(draft_ids, draft_probs, target_probs, rng): ...
>>> looks_like_sampler(sampler).kind, looks_like_sampler(sampler).adapter
('sampler', 'numpy')
>>> looks_like_sampler(lambda step, rng: [0]) is None
True
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any, Callable

__all__ = ["Shape", "looks_like_sampler", "not_a_rule_message", "binding_hint", "own_codes"]

#: the adapters a sampler hint can name, in the order the message lists them
ADAPTER_NAMES = ("numpy", "numpy-tree", "transformers", "vllm", "flashinfer", "vllm-v1", "torch-tree", "sglang",
                 "sglang-tree-greedy")


@dataclass(frozen=True)
class Shape:
    """What a callable that is not a rule looks like: ``kind`` "sampler", "loop" or "sampler or loop"."""

    kind: str
    signature: str
    #: the adapter its parameter names match ("" when they match none)
    adapter: str = ""
    #: why: the signature it matched, in words
    why: str = ""


def _signature(fn: Any) -> inspect.Signature | None:
    """The signature a call ``fn(a, b)`` is bound against, or None when it cannot be read (never refuse then)."""
    target = fn
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(fn, torch.nn.Module):
        target = getattr(fn, "forward", fn)      # Module.__call__ is (*args, **kwargs): forward is what binds
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    empty = inspect.Parameter.empty      # annotations off: the message shows the parameters as called
    return sig.replace(parameters=[p.replace(annotation=empty) for p in sig.parameters.values()],
                       return_annotation=inspect.Signature.empty)


def _required_positional(sig: inspect.Signature) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]


def _has(names: list[str], *words: str) -> bool:
    return any(w in n.lower() for n in names for w in words)


def looks_like_sampler(fn: Any) -> Shape | None:
    """The :class:`Shape` of ``fn`` when it cannot be a rule ``fn(step, rng)``; None when it can (or is unreadable).

    Refused only when the signature needs three or more positional arguments, so the call
    ``fn(step, rng)`` could never bind. Parameter names then say which adapter (or a loop):

    >>> def loop(target, draft, prompt_ids): ...
    >>> looks_like_sampler(loop).kind
    'loop'
    >>> def vllm_like(target_probs, draft_probs, draft_token_ids, bonus_token_ids): ...
    >>> looks_like_sampler(vllm_like).adapter
    'vllm'
    >>> looks_like_sampler(lambda *args, **kwargs: [0]) is None       # a rule may take anything
    True
    >>> looks_like_sampler(functools.partial(lambda step, rng, k: [k], k=1)) is None
    True
    """
    if not callable(fn):
        return None
    sig = _signature(fn)
    if sig is None:
        return None
    try:
        sig.bind(None, None)
        return None                     # callable as fn(step, rng): a rule as far as the signature can tell
    except TypeError:
        pass
    names = _required_positional(sig)
    if len(names) < 3:                  # fn(step) or required keyword-only arguments: not a sampler's shape
        return None
    shown = f"{getattr(fn, '__name__', type(fn).__name__)}{sig}"
    n = len(names)
    if _has(names, "bonus_token"):
        return Shape("sampler", shown, "vllm", "a vLLM-style batched rejection sampler")
    if _has(names, "uniform_samples"):
        return Shape("sampler", shown, "flashinfer", "a flashinfer-style kernel reading its uniforms from a tensor")
    if _has(names, "candidate_logits", "new_logits", "candidate_input_ids"):
        return Shape("sampler", shown, "transformers", "transformers' _speculative_sampling")
    if _has(names, "parent"):
        return Shape("sampler", shown, "numpy-tree", "a tree verifier taking tokens, parents, claimed, target, rng")
    if n == 3 and _has(names[2:], "tree"):
        return Shape("sampler", shown, "torch-tree", "an EAGLE / Medusa tree verifier taking candidates, logits, tree")
    if n == 3 and _has(names[:2], "model", "target", "draft", "lm", "net", "assistant", "small", "large") and \
            _has(names[2:], "prompt", "ids", "token", "input", "context", "prefix"):
        return Shape("loop", shown, "", "a whole generation loop fn(target, draft, prompt_ids)")
    if _has(names[-1:], "rng", "gen", "random") and n in (4, 5):
        adapter = "numpy" if n == 4 else "numpy-tree"
        return Shape("sampler", shown, adapter, "a numpy-style sampler taking a generator last")
    if n == 3:
        return Shape("sampler or loop", shown)
    return Shape("sampler", shown)


def not_a_rule_message(fn: Any, shape: Shape, where: str = "a rule") -> str:
    """The message of :class:`~exactspec.errors.NotARule`: what ``fn`` looks like and which call audits it.

    >>> def sampler(draft_ids, draft_probs, target_probs, rng): ...
    >>> print(not_a_rule_message(sampler, looks_like_sampler(sampler)).split(": use")[0])
    sampler(draft_ids, draft_probs, target_probs, rng) was handed where a rule fn(step, rng) is expected, but it needs 4 positional arguments, so it cannot be called as a rule: this looks like a sampler (a numpy-style sampler taking a generator last)
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    sig = _signature(fn)
    n = len(_required_positional(sig)) if sig is not None else 0
    head = (f"{shape.signature} was handed where {where} fn(step, rng) is expected, but it needs {n} positional "
            "arguments, so it cannot be called as a rule: ")
    loop = (f"use es.search_loop({name}) (an exact search over small instances; es.audit_loop({name}, "
            "target=...) audits one), "
            f"es.assert_loop_lossless({name}) in a test, or `exactspec audit-loop MODULE:{name}` in a shell")
    adapter = shape.adapter or "..."
    sampler = (f"use es.search_sampler({name}, adapter={adapter!r}) (an exact search over small "
               f"instances), es.assert_sampler_lossless({name}, adapter={adapter!r}) in a test, or "
               f"`exactspec audit-sampler MODULE:{name} --adapter {shape.adapter or 'ADAPTER'}` in a shell")
    if not shape.adapter:
        sampler += (f" (the adapter turns a step into the sampler's arguments: one of {', '.join(ADAPTER_NAMES)}, "
                    "or your own es.samplers.Adapter)")
    if shape.kind == "loop":
        return head + f"this looks like {shape.why}: " + loop
    if shape.kind == "sampler":
        return head + f"this looks like a sampler{f' ({shape.why})' if shape.why else ''}: " + sampler
    return (head + "this looks like a sampler or a whole generation loop fn(target, draft, prompt_ids). For a "
            f"sampler, {sampler}. For a loop, {loop}")


#: a TypeError raised when a call does not bind (Python's wording, 3.10+)
_BINDING = ("required positional argument", "positional argument but", "positional arguments but",
            "unexpected keyword argument", "required keyword-only argument")


def own_codes(fn: Any) -> set[CodeType]:
    """The code objects that run when ``fn`` is called: the function's, a bound method's, ``__call__``'s, a partial's.

    >>> def rule(step, rng): ...
    >>> own_codes(rule) == {rule.__code__}
    True
    """
    codes: set[CodeType] = set()
    f: Any = fn
    for _ in range(8):
        while isinstance(f, functools.partial):
            f = f.func
        code = getattr(f, "__code__", None)
        if isinstance(code, CodeType):
            codes.add(code)
        wrapped = getattr(f, "__wrapped__", None)
        call = getattr(type(f), "__call__", None)
        code = getattr(call, "__code__", None)
        if isinstance(code, CodeType) and not inspect.isfunction(f) and not inspect.ismethod(f):
            codes.add(code)
        if wrapped is None:
            break
        f = wrapped
    return codes


def binding_hint(fn: Any, exc: BaseException, caller: CodeType, first: bool) -> str:
    """The hint a RuleError adds when a rule's first call failed with a TypeError from argument binding; or "".

    Given only when the TypeError says a call did not bind, it was raised on the rule's first call,
    and in the frame that called the rule (``caller``: the rule's own signature refused the two
    arguments) or in the code of a rule taking ``*args`` (a wrapper passing them on); never for a
    TypeError raised deeper (an adapter inside a sampler audit, a helper the rule calls wrongly).

    >>> def caller(fn):
    ...     try:
    ...         fn(1, 2)
    ...     except TypeError as exc:
    ...         return binding_hint(fn, exc, caller.__code__, True)
    >>> def sampler(draft_ids, draft_probs, target_probs, rng): ...
    >>> caller(sampler).split(";")[0]
    ' (exactspec calls a rule as fn(step, rng), and the two arguments did not bind'
    """
    if not first or not isinstance(exc, TypeError) or not any(b in str(exc) for b in _BINDING):
        return ""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if code is not caller:
        if code not in own_codes(fn):
            return ""
        sig = _signature(fn)           # inside the rule: only a wrapper passing ``*args`` on (not a helper's bad call)
        if sig is None or not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
            return ""
    name = getattr(fn, "__name__", type(fn).__name__)
    return (" (exactspec calls a rule as fn(step, rng), and the two arguments did not bind; if "
            f"{name} is a sampler, audit it with es.search_sampler({name}, adapter=...) or "
            f"es.assert_sampler_lossless / `exactspec audit-sampler`; if it is a whole generation loop "
            f"fn(target, draft, prompt_ids), with es.search_loop({name}) (es.audit_loop({name}, target=...) for "
            "one instance) or es.assert_loop_lossless / "
            "`exactspec audit-loop`)")
