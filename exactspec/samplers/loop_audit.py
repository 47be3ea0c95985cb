"""``audit_loop``: the exact law of a whole generation loop (drafting included) run on stand-in models.

Much published speculative decoding has no verification function with a fixed signature: the
draft loop, the target call, the acceptance test and the bonus token live in one function
(litgpt's ``speculative_decoding``/``generate``, lucidrains' ``speculative_decoding(net,
small_net, ...)``, transformers' ``generate(..., assistant_model=...)``). :func:`audit_loop`
audits such a function as it is written: it hands it stand-in models
(:func:`exactspec.samplers.stand_in.stand_in`) with the exact laws of ``target`` and ``draft``,
runs it once per branch of its randomness under the same interception as
:func:`exactspec.audit_sampler` (every torch, numpy and Python draw enumerated exactly, floats
taken as the rationals they are; randomness the audit cannot see is an error, never a verdict),
and compares the law of the first ``tokens`` tokens it returns with the target's own law.

Categorical draws (``torch.multinomial``) fork only when their value is read
(:mod:`exactspec.samplers.lazy_draws`) and the stand-ins memoise their forward passes, so loops
that draw a token at every position and discard most stay small.

>>> import torch, exactspec as es
>>> p = es.models.context_free(("1/2", "1/4", "1/4"))
>>> def sample_loop(target, draft, prompt):              # plain autoregressive sampling
...     ids = prompt
...     for _ in range(2):
...         probs = target(ids)[0, -1].softmax(-1)
...         ids = torch.cat([ids, torch.multinomial(probs, 1)[None]], dim=-1)
...     return ids
>>> r = audit_loop(sample_loop, target=p, tokens=2)
>>> r.verdict, r.tv, r.paths
('lossless', Fraction(0, 1), 9)
"""

from __future__ import annotations

import operator
import re
import time
from fractions import Fraction
from typing import Any, Callable, Sequence

from .._audit import _prompt
from ..enumerate import Budget
from ..enumerate.rng import PathRng, _Diverged, lattice_for
from ..enumerate.step import Meter, check_budget
from ..enumerate.stream import target_law
from .._crash import CrashReport, crash_site
from ..errors import ExactSpecError, RuleError
from ..fields import get_field
from ..laws import to_rational, total_variation
from ..models import Model
from ..report import AuditReport
from .interception import describe_rng_model, intercepting, private_generators, watch
from .sampler_audit import ROUNDING_TOLERANCE, _one_torch_thread
from .stand_in import KINDS, stand_in

__all__ = ["audit_loop", "reference_loop", "LoopReport", "DEFAULT_TOKENS"]

#: the default horizon of a whole-loop audit (a loop's gamma is not known to exactspec): a step of
#: gamma 2 (two drafts and a bonus) is observed entirely; pass ``gamma + 2`` to observe every
#: position of a first and of a second step
DEFAULT_TOKENS = 3

_OUTPUTS = ("full", "new")
_ON_ERROR = ("raise", "record")


class LoopReport(CrashReport):
    """An :class:`~exactspec.AuditReport` of a whole-loop audit; it also reports the branches on which the loop raised.

    ``extra["error_probability"]`` (a string, exact) is the probability that the loop raises on
    this instance, ``extra["errors"]`` the probability of each exception (``"Type: message"``) and
    ``extra["error_sites"]`` the line of the audited code each was raised at (``file:line in
    function``). A loop that raises with positive probability is never ``lossless``; its ``output``
    law holds the branches that returned (it sums to ``1 - error_probability``), so its TV (that
    sub-law against the target's law, as written in ``to_json()``) is at least ``error_probability / 2``.
    (The crash-aware verdict, shared with ``es.audit_sampler(..., on_error="record")``, is
    ``exactspec._crash.CrashReport``'s.)

    >>> import torch, exactspec as es
    >>> def fragile(target, draft, prompt):
    ...     t = torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)
    ...     if int(t) == 1:
    ...         raise ValueError("no residual left")
    ...     return torch.cat([prompt[0], t])
    >>> r = audit_loop(fragile, target=es.models.context_free(("3/4", "1/4")), tokens=1, on_error="record")
    >>> r.error_probability, r.lossless, r.warnings
    (Fraction(1, 4), False, ['the loop raised ValueError: no residual left with probability 1/4 on this instance'])
    """


def _check_fn(fn: Any) -> str:
    if not callable(fn):
        raise ExactSpecError(f"audit_loop: fn must be a function fn(target, draft, prompt_ids) -> tokens, got "
                             f"{type(fn).__name__} {fn!r}")
    return getattr(fn, "__name__", None) or type(fn).__name__


def _tokens_of(res: Any, prompt: tuple, output: str, tokens: int, vocab: int, name: str) -> tuple:
    """The first ``tokens`` new token ids in what ``fn`` returned (reading pending draws as it goes)."""
    import torch
    if isinstance(res, torch.Tensor):
        if res.dim() == 2:
            if res.shape[0] != 1:
                raise RuleError(f"loop {name} returned a tensor of shape {tuple(res.shape)}: audit_loop reads one "
                                "sequence ([1, n], [n] or a list of token ids)", rule=name)
            res = res[0]
        if res.dim() != 1:
            raise RuleError(f"loop {name} returned a tensor of shape {tuple(res.shape)}: audit_loop reads one "
                            "sequence ([1, n], [n] or a list of token ids)", rule=name)
        items: list = res.tolist()
    else:
        if res is None:
            raise RuleError(f"loop {name} returned None: return the tokens (prompt + continuation, as generate "
                            "does, or only the continuation with output='new')", rule=name)
        try:
            items = list(res)
        except TypeError:
            raise RuleError(f"loop {name} returned {type(res).__name__} {res!r}, not a sequence of token ids",
                            rule=name) from None
    ids = []
    for i, t in enumerate(items):
        if isinstance(t, torch.Tensor):
            if t.numel() != 1:
                raise RuleError(f"loop {name} returned a sequence whose item {i} is a tensor of {t.numel()} values, "
                                "not one token id (does fn return a tuple such as (tokens, stats)? return the "
                                "tokens only)", rule=name)
            t = t.reshape(()).item()
        try:
            t = operator.index(t)
        except TypeError:
            raise RuleError(f"loop {name} returned {t!r} at index {i}, not a token id", rule=name) from None
        ids.append(t)
    if output == "full":
        n0 = len(prompt)
        if tuple(ids[:n0]) != prompt:
            raise RuleError(f"loop {name} returned {ids[:n0 + tokens]}... which does not start with the prompt "
                            f"{list(prompt)}; pass output='new' if fn returns only the continuation", rule=name)
        ids = ids[n0:]
    if len(ids) < tokens:
        raise RuleError(f"loop {name} returned {len(ids)} new token(s) {ids} on a branch, fewer than tokens={tokens}: "
                        "make it generate at least that many (or lower tokens=)", rule=name)
    ids = ids[:tokens]
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            raise RuleError(f"loop {name} emitted token {t} (new token {i}), outside the vocabulary 0..{vocab - 1}",
                            rule=name)
    return tuple(ids)


def audit_loop(fn: Callable[..., Any], *, target: Model | None = None, draft: Model | None = None,
               prompt: Sequence[int] | None = None,
               tokens: int | None = None, kind: str = "torch-lm", dtype: Any = None, output: str = "full",
               on_error: str = "raise", expected: Model | None = None, budget: Budget | None = None,
               tolerance: Any = ROUNDING_TOLERANCE, search: bool = False, rng_model: str = "native",
               worst: int = 5, reference: Callable[..., Any] | None = None, **search_options: Any) -> Any:
    """Audit a whole generation loop exactly: ``fn(target_lm, draft_lm, prompt_ids)`` run on every branch.

    ``fn`` receives stand-ins of ``target`` and ``draft`` (``kind="torch-lm"``: ``torch.nn.Module``
    LMs returning logits ``[B, T, V]``; ``kind="transformers"``: ``PreTrainedModel`` stand-ins for
    ``generate``; ``draft=None`` hands it ``None``) and the prompt as a LongTensor ``[1, len(prompt)]``,
    and returns the tokens it generated: prompt + continuation (``output="full"``, as ``generate``
    returns them) or the continuation only (``output="new"``), as a tensor ``[1, n]`` or ``[n]`` or a
    list. The law of its first ``tokens`` new tokens (default :data:`DEFAULT_TOKENS`, 3) is compared
    with the target's own law from ``prompt`` (default ``(0,)``; or that of ``expected``, a declared law such as
    ``es.models.sharpen(target, 2)`` for temperature 1/2).

    The stand-ins' logits are the exact log-laws rounded once to ``dtype`` (default
    ``torch.float64``: its rounding stays below the default ``tolerance`` 2**-40 on small
    instances; at ``torch.float32`` a correct loop lands ~1e-8 from the target: pass
    ``reference=``). Every float the loop computes is taken as the exact rational it is; the
    verdict is ``lossless`` when the exact TV is at most ``tolerance`` (0 demands exactness) with
    no support violation and no failing branch.

    ``reference``: a correct loop audited on the same instance and stand-ins, returning prompt +
    continuation (an int ``gamma`` means :func:`reference_loop` with that gamma): what float
    arithmetic at ``dtype`` alone costs a correct loop. ``extra`` then holds ``rounding_tv``
    (that loop vs the expected law) and ``algorithmic_tv`` (this loop vs that one), and the
    verdict allows ``max(tolerance, 2 * rounding_tv)``, as :func:`exactspec.audit_sampler` does
    (a support violation stays biased).

    ``rng_model`` (default ``"native"``): each draw on the lattice of its library (torch CPU float32
    ``rand``: ``k * 2**-24``, 0 included; numpy and ``random``: ``k * 2**-53``), as in
    :func:`exactspec.audit_sampler`; ``scope["rng"]`` says which were drawn.

    ``on_error="raise"`` (default): the first branch on which ``fn`` raises stops the audit with a
    :class:`~exactspec.RuleError` stating that branch's probability and the exception;
    ``on_error="record"``: failing branches are an outcome of their own, reported with their exact
    probability (``report.extra["error_probability"]``, ``extra["errors"]``, ``warnings``) in a
    :class:`LoopReport` that is never ``lossless``. An exception raised calling ``fn``, not inside it
    (a wrong signature), is always a RuleError. Randomness the audit cannot follow, budgets,
    and a loop that returns too few tokens or tokens outside the vocabulary always raise.

    ``search=True`` audits the loop on every instance of a small space instead (vocab 2..4,
    context-free, per-position and order-1 models; ``tokens`` 1..4) and returns a minimal
    :class:`~exactspec.counterexamples.Counterexample` (of ``kind`` ``"crash"`` when the loop raises
    on an instance: every instance is audited with ``on_error="record"``, a crash is a finding), an
    :class:`~exactspec.counterexamples.EmptySearch` or an
    :class:`~exactspec.counterexamples.IncompleteSearch` (``search_options`` go to
    :func:`exactspec.samplers.sampler_search.search_instances`: ``space``, ``budget`` seconds,
    ``max_instances``, ``seed``); the search chooses the laws, prompt and horizon, so ``target``,
    ``draft``, ``prompt`` and ``expected`` are refused with it (a typed error, never ignored).

    >>> import torch, exactspec as es
    >>> from fractions import Fraction as F
    >>> def argmax_loop(target, draft, prompt):           # greedy decoding is not sampling
    ...     ids = prompt
    ...     for _ in range(1):
    ...         ids = torch.cat([ids, target(ids)[:, -1:].argmax(-1)], dim=-1)
    ...     return ids
    >>> r = audit_loop(argmax_loop, target=es.models.context_free(("3/4", "1/4")), tokens=1)
    >>> r.verdict, r.tv, r.scope["of"]
    ('biased', Fraction(1, 4), 'this instance (one whole run of the loop, drafting included)')
    """
    name = _check_fn(fn)
    if search:
        given = [k for k, v in (("target", target), ("draft", draft), ("prompt", prompt), ("expected", expected))
                 if v is not None]
        if given:
            raise ExactSpecError(f"audit_loop(search=True): {'= and '.join(given)}= do not apply: the search chooses "
                                 "the laws, prompts and horizons (use search=False to audit one instance)")
        return _search(fn, name, tokens=tokens, kind=kind, dtype=dtype, output=output, on_error=on_error,
                       tolerance=tolerance, rng_model=rng_model, worst=worst, reference=reference,
                       options=search_options, budget=budget)
    if search_options:
        raise ExactSpecError(f"audit_loop: unexpected keyword argument(s) {sorted(search_options)} (they are search "
                             "options: pass search=True)")
    if not isinstance(target, Model):
        raise ExactSpecError(f"audit_loop: target must be an exactspec model (es.models.*), got {target!r}")
    for label, m in (("draft", draft), ("expected", expected)):
        if m is not None and not isinstance(m, Model):
            raise ExactSpecError(f"audit_loop: {label} must be an exactspec model (es.models.*), got {m!r}")
        if m is not None and m.vocab != target.vocab:
            raise ExactSpecError(f"audit_loop: {label} model has vocab {m.vocab} but the target has vocab "
                                 f"{target.vocab}")
    if tokens is None:
        tokens = DEFAULT_TOKENS
    _check_options("audit_loop", tokens=tokens, kind=kind, output=output, on_error=on_error, worst=worst)
    if isinstance(reference, int) and not isinstance(reference, bool):
        if draft is None:
            raise ExactSpecError("audit_loop: reference=<gamma> runs reference_loop, which needs a draft model: pass "
                                 "draft=")
        reference = reference_loop(reference, tokens)
    if reference is not None and not callable(reference):
        raise ExactSpecError(f"audit_loop: reference must be a loop fn(target, draft, prompt_ids) or a gamma for "
                             f"reference_loop, got {reference!r}")
    check_budget(budget, "audit_loop")
    tol = to_rational(tolerance, "audit_loop tolerance")
    if tol < 0:
        raise ExactSpecError(f"audit_loop: tolerance must be >= 0, got {tolerance!r}")
    try:
        prompt_t = _prompt((0,) if prompt is None else prompt, target.vocab)
    except ExactSpecError as exc:
        raise ExactSpecError(f"audit_loop: {exc}") from None
    lattice = lattice_for(rng_model)
    import torch

    from . import torch_rng  # noqa: F401  (torch is patched in the audit)
    if dtype is None:
        dtype = torch.float64
    t_lm = stand_in(target, kind=kind, dtype=dtype)
    d_lm = None if draft is None else stand_in(draft, kind=kind, dtype=dtype)
    t0 = time.perf_counter()
    fld = get_field(backend="python")
    meter = Meter(budget or Budget())
    law: dict = {}
    errors: dict = {}
    sites: dict = {}
    calls_total: Any = fld.zero
    private = private_generators(fn)
    with intercepting() as session, _one_torch_thread(), meter.guard():
        stack: list = [((), fld.one)]
        supports: dict = {}
        while stack:
            prefix, w = stack.pop()
            meter.tick()
            rng = PathRng(prefix, w, fld, stack, supports, meter.budget.depth, lattice, True)
            for lm in (t_lm, d_lm):
                if lm is not None:
                    _reset(lm)
            ids = torch.tensor([list(prompt_t)], dtype=torch.long)
            try:
                with watch(rng, name, private, session):
                    try:
                        res = fn(t_lm, d_lm, ids)
                        out = _tokens_of(res, prompt_t, output, tokens, target.vocab, name)
                    except SystemExit as exc:
                        raise RuleError(f"loop {name} called sys.exit({exc.code!r}) while audited (draws "
                                        f"{rng.trace})", rule=name, trace=rng.trace) from exc
            except RuleError as exc:
                if not exc.trace:
                    exc.trace = rng.trace
                raise
            except _Diverged as exc:
                raise RuleError(f"loop {name}: {exc}", rule=name, trace=rng.trace) from exc
            except (ExactSpecError, MemoryError, RecursionError):
                raise
            except Exception as exc:
                what = f"{type(exc).__name__}: {exc}"
                site = crash_site(exc)
                if on_error == "raise" or site is None:   # None: raised calling fn, not inside it (no crash of fn)
                    raise RuleError(
                        f"loop {name} raised {what} on a branch of probability {rng.weight} (draws {rng.trace})"
                        + (f" at {site}; pass on_error='record' to report the probability of every failing branch "
                           "instead" if site else ", calling it (not inside it): check fn's signature, "
                           "fn(target, draft, prompt_ids)"),
                        rule=name, trace=rng.trace) from exc
                errors[what] = errors.get(what, fld.zero) + rng.weight
                sites.setdefault(what, site)
                continue
            law[out] = law.get(out, fld.zero) + rng.weight
            calls_total += rng.weight * _calls(t_lm)
        ref = expected if expected is not None else target
        exp = target_law(ref, prompt_t, tokens, fld, [ref.order], meter=meter)
    err_p = sum(errors.values(), fld.zero)
    # the failing branches' mass is missing from ``law``: TV >= err_p / 2 counts it once
    tv = total_variation(law, exp)
    ok = 1 - err_p
    instance = {"vocab": target.vocab, "loop": name, "prompt": list(prompt_t), "tokens": tokens,
                "decoding": "sample", "target": target.name, "draft": None if draft is None else draft.name,
                "stand_in": kind, "dtype": str(dtype).replace("torch.", "")}
    if rng_model != "continuous":
        instance["rng_model"] = rng_model
    if expected is not None:
        instance["expected"] = expected.name
    scope = {"of": "this instance (one whole run of the loop, drafting included)", "tokens": tokens,
             "complete": True, "whole_loop": True,
             "note": f"a whole-loop audit of {name} on one instance: the law of its first {tokens} new token(s); "
                     f"every position of a first step is observed for a loop drafting at most {tokens - 1} token(s) "
                     f"per step (its bonus included): a loop with gamma >= {tokens} needs tokens=gamma + 2",
             "rng": describe_rng_model(rng_model, session.lattices)}
    target_calls = calls_total / ok if ok else fld.zero
    report = LoopReport(rule=name, claim="lossless", instance=instance, field=fld, output=law, expected=exp, tv=tv,
                        tolerance=tol, tokens_per_call=(Fraction(tokens) / target_calls) if target_calls else fld.zero,
                        target_calls=target_calls, seconds=time.perf_counter() - t0, paths=meter.paths,
                        worst_count=worst, scope=scope)
    report.extra.update({"adapter": "whole loop", "stand_in": kind, "dtype": instance["dtype"],
                         "error_probability": str(err_p), "errors": {k: str(v) for k, v in errors.items()},
                         "error_sites": dict(sites),
                         "target_forward_calls": str(target_calls), "tolerance": str(tol), "rng_model": rng_model,
                         "rng": scope["rng"]})
    if reference is not None:
        ref = audit_loop(reference, target=target, draft=draft, prompt=prompt_t, tokens=tokens, kind=kind,
                         dtype=dtype, output="full", expected=expected, budget=budget, tolerance=0,
                         rng_model=rng_model, worst=0)
        rounding = ref.tv
        report.extra["reference"] = getattr(reference, "__name__", "reference")
        report.extra["rounding_tv"] = str(rounding)
        report.extra["algorithmic_tv"] = str(total_variation(report.output, ref.output))
        report.tolerance = max(tol, 2 * rounding)
        report.extra["tolerance"] = str(report.tolerance)
        report.seconds = time.perf_counter() - t0
    return report


def _check_options(where: str, *, tokens: Any, kind: Any, output: Any, on_error: Any, worst: Any) -> None:
    """Refuse a bad option of :func:`audit_loop` (one instance or the search) with a typed error naming it."""
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        what = "tokens (the horizon of every instance)" if where.endswith("(search=True)") else "tokens"
        raise ExactSpecError(f"{where}: {what} must be an int >= 1, got {tokens!r}")
    if kind not in KINDS:
        raise ExactSpecError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if output not in _OUTPUTS:
        raise ExactSpecError(f"{where}: output must be 'full' (prompt + continuation) or 'new' (continuation only), "
                             f"got {output!r}")
    if on_error not in _ON_ERROR:
        raise ExactSpecError(f"{where}: on_error must be 'raise' or 'record', got {on_error!r}")
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise ExactSpecError(f"{where}: worst must be an int >= 0, got {worst!r}")


def reference_loop(gamma: int = 2, tokens: int = DEFAULT_TOKENS) -> Callable[..., Any]:
    """A correct speculative sampling loop (Leviathan et al., Algorithm 1) on stand-ins, for ``audit_loop(reference=)``.

    Drafts ``gamma`` tokens with ``torch.multinomial`` from the draft's softmax, accepts each with
    probability ``min(1, p / q)`` (``torch.rand(1) < p / q``), samples a rejection from
    ``max(p - q, 0)`` normalised and, when every draft is accepted, a bonus token from the
    target, step after step until at least ``tokens`` new tokens are out; it computes at the
    stand-ins' dtype and returns prompt + continuation. Works with
    ``kind="torch-lm"`` and ``kind="transformers"`` stand-ins (it reads ``.logits`` when present).

    >>> import torch, exactspec as es
    >>> p, q = es.models.context_free(("1/2", "1/4", "1/4")), es.models.context_free(("1/4", "1/4", "1/2"))
    >>> audit_loop(reference_loop(2, tokens=2), target=p, draft=q, tokens=2).tv
    Fraction(0, 1)
    """
    for label, v in (("gamma", gamma), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ExactSpecError(f"reference_loop: {label} must be an int >= 1, got {v!r}")
    import torch

    def probs(lm: Any, ids: Any) -> Any:
        out = lm(ids)
        return getattr(out, "logits", out)[0].softmax(-1)

    def speculative_sampling(target: Any, draft: Any, prompt: Any) -> Any:
        ids, n0 = prompt, prompt.shape[1]
        while True:
            x, qs = ids, []
            for _ in range(gamma):
                q = probs(draft, x)[-1]
                qs.append(q)
                x = torch.cat([x, torch.multinomial(q, 1)[None]], dim=1)
            ps = probs(target, x)[-(gamma + 1):]
            k = ids.shape[1]
            for i in range(gamma):
                tok = int(x[0, k + i])
                if bool(torch.rand(1) < ps[i, tok] / qs[i][tok]):
                    continue
                residual = torch.clamp(ps[i] - qs[i], min=0)
                ids = torch.cat([x[:, :k + i], torch.multinomial(residual / residual.sum(), 1)[None]], dim=1)
                break
            else:
                ids = torch.cat([x, torch.multinomial(ps[gamma], 1)[None]], dim=1)
            if ids.shape[1] - n0 >= tokens:
                return ids
    speculative_sampling.__name__ = f"reference_loop(gamma={gamma})"
    return speculative_sampling


def _reset(lm: Any) -> None:
    """Empty a stand-in's per-branch state (its token cache) before a branch runs."""
    reset = getattr(lm, "reset", None) or getattr(lm, "exactspec_reset", None)
    if callable(reset):
        reset()


def _calls(lm: Any) -> int:
    """The target forward calls of this branch (0 when the stand-in does not count them)."""
    n = getattr(lm, "calls", None)
    return n if isinstance(n, int) else 0


def _loop_space(space: Any, tokens: int | None) -> Any:
    """The space of a loop search: every instance gets the prompt ``(0,)`` (loops need a context to start from)."""
    import dataclasses

    from ..counterexamples.space import Space

    class LoopSpace(Space):
        """A :class:`~exactspec.counterexamples.space.Space` whose instances all start from the prompt ``(0,)``."""

        def instance(self, *args: Any, **kwargs: Any) -> Any:
            inst = super().instance(*args, **kwargs)
            return inst if inst.prompt else dataclasses.replace(inst, prompt=(0,))

        def describe(self) -> str:   # the loop drafts with its own gamma: the space's one shape is not a gamma
            return re.sub(r", gamma \{[^}]*\}", "", super().describe()).replace(", families", ", prompt (0,), families",
                                                                              1)

        def describe_cell(self, cell: Any) -> str:
            return re.sub(r", gamma \d+", "", super().describe_cell(cell))

    if space is None:   # the loop drafts with its own gamma: one shape, horizons 1..4 (or the one asked for)
        return LoopSpace(vocabs=(2, 3, 4), shapes=((1,),), tokens=(tokens,) if tokens else (1, 2, 3, 4),
                         max_denominator=7, random_points=6, exhaustive_denominator=2, exhaustive_limit=36)
    if not isinstance(space, Space):
        raise ExactSpecError(f"audit_loop(search=True): space must be an exactspec Space, got {space!r}")
    return LoopSpace(**{f.name: getattr(space, f.name) for f in dataclasses.fields(space)})


def _search(fn: Callable, name: str, *, tokens: int | None, kind: str, dtype: Any, output: str,
            on_error: str, tolerance: Any, rng_model: str, worst: int, reference: Any, options: dict,
            budget: Any = None) -> Any:
    """``audit_loop(..., search=True)``: every instance of a small space (see :func:`audit_loop`).

    The options are checked before any audit (bad input is an error, not an instance that
    raised). ``budget``: seconds for the whole search (a number), or an :class:`~exactspec.Budget`
    whose ``seconds`` limit the whole search and whose other limits each audit. A counterexample
    is of ``kind`` ``"loop"``: ``sampler_ref`` is the loop's ``module:qualname`` (``""`` when no
    test can import it), ``loop`` the options its ``to_pytest()`` replays.
    """
    import dataclasses

    from ..counterexamples.counterexample import Counterexample, _loop_options
    from .sampler_search import sampler_reference, search_instances
    where = "audit_loop(search=True)"
    _check_options(where, tokens=tokens, kind=kind, output=output, on_error=on_error, worst=worst)
    tol = to_rational(tolerance, f"{where} tolerance")
    if tol < 0:
        raise ExactSpecError(f"{where}: tolerance must be >= 0, got {tolerance!r}")
    lattice_for(rng_model)   # an unknown rng model is an error here, not on every instance
    if isinstance(reference, bool) or not (reference is None or isinstance(reference, int) or callable(reference)):
        raise ExactSpecError(f"{where}: reference must be a loop fn(target, draft, prompt_ids) or a gamma for "
                             f"reference_loop, got {reference!r}")
    if isinstance(reference, int) and reference < 1:
        raise ExactSpecError(f"{where}: reference (a gamma for reference_loop) must be >= 1, got {reference!r}")
    import torch
    if dtype is None:
        dtype = torch.float64
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ExactSpecError(f"{where}: dtype must be a torch floating dtype such as torch.float64, got {dtype!r}")
    opts = dict(options)
    space = _loop_space(opts.pop("space", None), tokens)
    if isinstance(budget, Budget):
        if "instance_budget" in opts:
            raise ExactSpecError(f"{where}: pass the per-audit limits either in budget= (an es.Budget) or in "
                                 "instance_budget=, not both")
        opts["instance_budget"] = Budget(paths=budget.paths, depth=budget.depth, outcomes=budget.outcomes)
        budget = budget.seconds
    ref_record: Any = None
    if isinstance(reference, int):
        ref_record = reference
    elif reference is not None:
        ref_record = sampler_reference(reference)
    record = _loop_options({"stand_in": kind, "dtype": str(dtype).replace("torch.", ""), "output": output,
                            "on_error": on_error, "tolerance": str(tol), "reference": ref_record})

    def audit_one(inst: dict) -> AuditReport:   # crashes recorded whatever on_error says: each is a finding
        return audit_loop(fn, target=inst["target"], draft=inst["draft"], prompt=inst["prompt"],
                          tokens=inst["tokens"], kind=kind, dtype=dtype, output=output, on_error="record",
                          tolerance=tol, rng_model=rng_model, worst=worst, budget=inst.get("budget"),
                          reference=reference)
    found = search_instances(audit_one, space=space, name=name, budget=budget, **opts)
    if isinstance(found, Counterexample):  # the output law misses the mass of the branches that raised
        record["error_probability"] = str(1 - sum(found.output.values(), Fraction(0)))
        if found.kind == "crash":          # replayed with on_error="record": the test sees the crash's probability
            record["on_error"] = "record"
            return dataclasses.replace(found, sampler_ref=sampler_reference(fn), rng_model=rng_model,
                                       loop=_loop_options(record), crash={**found.crash, "of": "loop"})
        return dataclasses.replace(found, kind="loop", sampler_ref=sampler_reference(fn), rng_model=rng_model,
                                   loop=record)
    return found
