"""``audit_loop``: the exact law of a whole generation loop (drafting included) run on stand-in models.

It is kept as one module (past 800 lines): ``audit_loop``, its float-boundary runs (own precision, float64,
precision watch, casts lifted), its per-branch runner and the horizon read from the loop's trace share the loop's
options and that runner, and split apart they would pass a dozen of them back and forth. The search over small
instances (:mod:`.loop_search`), the stand-ins, the workers and the torch module behind the stand-ins are modules
of their own.

Much published speculative decoding has no verification function with a fixed signature: the
draft loop, the target call, the acceptance test and the bonus token live in one function
(litgpt's ``speculative_decoding``/``generate``, lucidrains' ``speculative_decoding(net,
small_net, ...)``, transformers' ``generate(..., assistant_model=...)``). :func:`audit_loop`
audits such a function as it is written: it hands it stand-in models
(:func:`exactspec.samplers.loops.stand_in.stand_in`) with the exact laws of ``target`` and ``draft``,
runs it once per branch of its randomness under the same interception as
:func:`exactspec.audit_sampler` (every torch, numpy and Python draw enumerated exactly, floats
taken as the rationals they are; randomness the audit cannot see is an error, never a verdict),
and compares the law of the first ``tokens`` tokens it returns with the target's own law.

Categorical draws (``torch.multinomial``) fork only when their value is read
(:mod:`exactspec.samplers.torch_draws.lazy_draws`) and the stand-ins memoise their forward passes, so loops
that draw a token at every position and discard most stay small. A stand-in fed a pending token does not read
it: its logits stay functions of the token until the loop reads a value computed from them
(:mod:`exactspec.samplers.torch_draws.lazy_worlds`), and here the context-free model never needs it. A token the
loop returns without having read it is spread over its values where the branch ends rather than forked: 1 run
of the loop stands for the 9 outcomes.

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
('lossless', Fraction(0, 1), 1)
>>> len(r.output)
9
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import re
import time
from fractions import Fraction
from typing import Any, Callable, Sequence

from ... import _progress, parallel
from ..._progress import MassProgress
from ..._audit import prompt_tokens
from ...enumerate import Budget
from ...enumerate.rng import PathRng, lattice_for
from ...enumerate.step import Meter, check_budget
from ...enumerate.stream import target_law
from ..._crash import CrashReport, crash_site
from ...errors import (BudgetExceeded, ExactSpecError, InvalidArgument, InvalidType, InvalidValue, ReplayDiverged,
                       RuleError)
from ...fields import get_field
from ...laws import to_rational, total_variation
from ...models import Model
from ...report import AuditReport
from ..adapters.base import lowest, precision_of
from ..rounding import ROUNDING_CAP, coarser_than_float64, decide, rounding_allowance, rounding_cap
from ..randomness.interception import FLOAT64_LATTICE, describe_rng_model, intercepting, private_generators, watch
from ..randomness.precision_watch import lifting, user_site, watching
from ..._device import one_torch_thread as _one_torch_thread
from ..audit import ROUNDING_TOLERANCE
from ..signatures import refusing
from .stand_in import KINDS, stand_in

__all__ = ["audit_loop", "reference_loop", "LoopReport", "DEFAULT_TOKENS"]

#: the shortest default horizon of a whole-loop audit: without ``tokens=`` the horizon comes from the
#: loop's trace (every token of a first step and the first of a second), and is at least this when the
#: loop returns that many tokens
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

    @property
    def horizon_incomplete(self) -> bool:
        """The loop's trace asked for a longer horizon than its shortest output allowed, and ``tokens=`` was not
        given: tokens of a first step (or the first of a second) went unobserved, so no ``lossless``."""
        return self.scope.get("horizon_from") == "the loop" and not self.scope.get("complete", True)

    @property
    def lossless(self) -> bool:  # noqa: D102
        return super().lossless and not self.horizon_incomplete

    @property
    def undecided(self) -> bool:  # noqa: D102
        if super().undecided:
            return True
        return self.horizon_incomplete and self.error_probability == 0 and super(CrashReport, self).lossless

    def summary(self) -> str:  # noqa: D102
        text = super().summary()
        if self.horizon_incomplete and self.undecided and not super().undecided:
            first, _, rest = text.partition("\n")
            head = first.split(" — ", 1)[0]
            text = f"{head} — INCOMPLETE (tokens of a first or second step unobserved)\n{rest}"
        return text

    @property
    def verdict_text(self) -> str:  # noqa: D102
        text = super().verdict_text       # a crash, if any, leads (CrashReport)
        if self.horizon_incomplete and self.undecided and not super().undecided:
            text = f"{self.scope.get('note')}; on the tokens observed: {text}"
        return text


def _check_fn(fn: Any, where: str = "audit_loop") -> str:
    if not callable(fn):
        raise InvalidType(f"{where}: fn must be a function fn(target, draft, prompt_ids) -> tokens, got "
                          f"{type(fn).__name__} {fn!r}")
    return getattr(fn, "__name__", None) or type(fn).__name__


def _tokens_of(res: Any, prompt: tuple, output: str, tokens: int | None, vocab: int, name: str,
               rng: Any = None) -> tuple[list, int]:
    """The new token ids in what ``fn`` returned, with their probabilities given the branch, and how many new
    tokens it returned.

    With ``tokens`` given (the horizon), only the first ``tokens`` new ids are read: a pending draw after them is
    never read, so it never forks the enumeration (the law of the first ``tokens`` is the same, in fewer
    branches); the rest are only counted (the horizon's note needs every branch's length). Without it every id
    is read (the horizon comes from the loop, and its ids are checked up to it).

    ``rng`` given (the branch's): a pending draw among the ids read that the loop never read
    is spread here over its values (:func:`_spread`), since no code runs after the loop returned, instead of
    forking the enumeration (which reruns the whole loop once per value). The result lists ``(ids, p)``: the
    probability ``p`` of ``ids`` given the branch, None for 1.
    """
    import torch

    from ..torch_draws.lazy_draws import PendingDraw, unread_entries
    n0 = len(prompt) if output == "full" else 0
    keep = None if tokens is None else n0 + tokens
    if isinstance(res, torch.Tensor):
        if res.dim() == 2:
            if res.shape[0] != 1:
                raise RuleError(f"loop {name} returned a tensor of shape {tuple(res.shape)}: audit_loop reads one "
                                "sequence ([1, n], [n] or a list of token ids)", rule=name)
            res = res[0]
        if res.dim() != 1:
            raise RuleError(f"loop {name} returned a tensor of shape {tuple(res.shape)}: audit_loop reads one "
                            "sequence ([1, n], [n] or a list of token ids)", rule=name)
        total = int(res.shape[0])
        kept = res if keep is None or total <= keep else res[:keep]
        unread = unread_entries(kept, rng) if rng is not None else None
        items: list = unread if unread is not None else kept.tolist()
    else:
        if res is None:
            raise RuleError(f"loop {name} returned None: return the tokens (prompt + continuation, as generate "
                            "does, or only the continuation with output='new')", rule=name)
        try:
            items = list(res)
        except TypeError:
            raise RuleError(f"loop {name} returned {type(res).__name__} {res!r}, not a sequence of token ids",
                            rule=name) from None
        total = len(items)
    ids: list = []
    for i, t in enumerate(items):
        if type(t) is PendingDraw:
            ids.append(t)
            continue
        if isinstance(t, torch.Tensor):
            if t.numel() != 1:
                raise RuleError(f"loop {name} returned a sequence whose item {i} is a tensor of {t.numel()} values, "
                                "not one token id (does fn return a tuple such as (tokens, stats)? return the "
                                "tokens only)", rule=name)
            if keep is not None and i >= keep:      # past the horizon: counted and checked, not read
                if t.is_floating_point() or t.is_complex():
                    raise RuleError(f"loop {name} returned a {t.dtype} tensor at index {i}, not a token id",
                                    rule=name)
                continue
            one = unread_entries(t, rng) if rng is not None else None
            if one is not None:
                ids.append(one[0])
                continue
            t = t.reshape(()).item()
        try:
            t = operator.index(t)
        except TypeError:
            raise RuleError(f"loop {name} returned {t!r} at index {i}, not a token id", rule=name) from None
        if keep is None or i < keep:
            ids.append(t)
    outs = _spread(ids, n0, rng)
    if output == "full":
        for seq, _ in outs:
            if seq[:n0] != prompt:
                raise RuleError(f"loop {name} returned {list(seq[:n0 + (tokens or 0)])}... which does not start "
                                f"with the prompt {list(prompt)}; pass output='new' if fn returns only the "
                                "continuation", rule=name)
        outs = [(seq[n0:], p) for seq, p in outs]
    new = max(total - n0, 0)
    if tokens is not None and new < tokens:
        raise RuleError(f"loop {name} returned {new} new token(s) {list(outs[0][0])} on a branch, fewer than "
                        f"tokens={tokens}: make it generate at least that many (or lower tokens=)", rule=name)
    return outs, new


#: the most value combinations one branch spreads where it ends (:func:`_spread`); the draws beyond them (the
#: earliest) are drawn for real, one fork each, so that a loop returning many unread draws keeps its budgets
SPREAD_LIMIT = 1024


def _spread(ids: list, n0: int, rng: Any) -> list:
    """Every value of the pending draws among ``ids`` (ints and :class:`PendingDraw`), as ``(ids, p)`` pairs: the
    joint law of those draws, categorical draws no code reads any more (independent, or held jointly with other
    pending draws: :func:`~exactspec.samplers.randomness.joint_draws.spread`). A draw that appears twice (one token
    written twice) takes one value in both places.

    They are drawn for real (each forking the enumeration, as reading them did, in the same order) where
    spreading could change what the audit does: a draw among the first ``n0`` ids (the prompt, checked
    against it) or a branch the depth budget would stop there; and the earliest draws are, until the rest
    have at most :data:`SPREAD_LIMIT` combinations of values (the path, time and depth budgets then bound
    the work as they bound the forks). A draw that was drawn after it was listed (reading a later id drew it)
    keeps the value drawn.
    """
    from ..randomness.joint_draws import conditional, spread
    from ..torch_draws.lazy_draws import PendingDraw
    # a draw that reading a later id drew (a law computed on its read may read others) holds its value
    ids = [t.values()[0] if type(t) is PendingDraw and t.drawn else t for t in ids]
    draws: list = []
    for t in ids:
        if type(t) is PendingDraw and not any(t is d for d in draws):
            draws.append(t)
    if not draws:
        return [(tuple(ids), None)]
    depth = getattr(rng, "max_depth", None)
    if any(type(t) is PendingDraw for t in ids[:n0]) or (depth is not None and rng._pos + len(draws) > depth):
        return [(tuple(t.values()[0] if type(t) is PendingDraw else t for t in ids), None)]
    if any(d.joint is not None or conditional(d) for d in draws):
        # held jointly (or a law indexed by other pending draws): their joint law, its other members summed out
        law = spread(draws, SPREAD_LIMIT)
        if law is None:         # no joint applies: each drawn for real, in order (the laws chain as reads chain them)
            return [(tuple(t.values()[0] if type(t) is PendingDraw else t for t in ids), None)]
        outs = []
        for values, p in law:
            value = {id(d): v for d, v in zip(draws, values)}
            outs.append((tuple(value[id(t)] if type(t) is PendingDraw else t for t in ids), p))
        return outs
    supports = [rng._support(d.law_of_one()) for d in draws]
    first, combos = len(draws), 1
    while first and combos * len(supports[first - 1]) <= SPREAD_LIMIT:
        first -= 1
        combos *= len(supports[first])
    for d in draws[:first]:            # too many combinations: the earliest are drawn, in order, forking
        d.values()
    if first:
        ids = [t.values()[0] if type(t) is PendingDraw and t.drawn else t for t in ids]
        draws, supports = draws[first:], supports[first:]
    one = rng._one
    outs = []
    for combo in itertools.product(*supports):
        value = {id(d): v for d, (v, _) in zip(draws, combo)}
        p = one
        for _, q in combo:
            p = p * q
        outs.append((tuple(value[id(t)] if type(t) is PendingDraw else t for t in ids), p))
    return outs


#: the options of the loop search only: given to :func:`audit_loop`, a typed error naming ``search_loop``
_SEARCH_ONLY = ("space", "seed", "max_instances", "instance_budget", "executor", "chunk_size")
_SEARCH_REFUSED = ("audit_loop: {names}: search options, taken by es.search_loop(fn, ...), which searches small "
                   "instances (audit_loop audits one)")


@refusing({"search": "audit_loop(search=True) is search_loop(...) now: es.search_loop(fn, ...) searches small "
                     "instances; audit_loop audits one (drop search=)",
           **{k: _SEARCH_REFUSED for k in _SEARCH_ONLY}})
def audit_loop(fn: Callable[..., Any], *, target: Model | None = None, draft: Model | None = None,
               prompt: Sequence[int] | None = None,
               tokens: int | None = None, kind: str = "torch-lm", dtype: Any = None, output: str = "full",
               on_error: str = "raise", expected: Model | None = None, budget: Budget | None = None,
               tolerance: Any = ROUNDING_TOLERANCE, rng_model: str = "native",
               worst: int = 5, reference: Callable[..., Any] | int | None = None, progress: Any = None,
               workers: int | str | None = parallel.AUTO) -> LoopReport:
    """Audit a whole generation loop exactly: ``fn(target_lm, draft_lm, prompt_ids)`` run on every branch.

    ``fn`` receives stand-ins of ``target`` and ``draft`` (``kind="torch-lm"``: ``torch.nn.Module``
    LMs returning logits ``[B, T, V]``; ``kind="transformers"``: ``PreTrainedModel`` stand-ins for
    ``generate``; ``draft=None`` hands it ``None``) and the prompt as a LongTensor ``[1, len(prompt)]``,
    and returns the tokens it generated: prompt + continuation (``output="full"``, as ``generate``
    returns them) or the continuation only (``output="new"``), as a tensor ``[1, n]`` or ``[n]`` or a
    list. The law of its first ``tokens`` new tokens (default: from the loop, see below) is compared
    with the target's own law from ``prompt`` (default ``(0,)``; or that of ``expected``, a declared law such as
    ``es.models.sharpen(target, 2)`` for temperature 1/2).

    The stand-ins' logits are the exact log-laws rounded once to ``dtype`` (default
    ``torch.float64``). Every float the loop computes is taken as the exact rational it is. The
    verdict is :func:`exactspec.samplers.rounding.decide`'s (``extra["float_boundary"]``):
    with float64 stand-ins and ideal or float64 uniforms, one run, ``lossless`` when the exact TV is at
    most ``tolerance`` (2**-40 by default: what float64 rounding may cost; 0 demands exactness) with
    no support violation and no failing branch. With a ``dtype`` coarser than float64
    (``torch.float32``, ``bfloat16``, ``float16``) or an ``rng_model`` coarser than float64
    (``"torch-float32"``, ``"curand"``, ...), the loop runs twice: as asked (the law its users get:
    ``report.output``, ``report.tv``, ``extra["tv_own"]``) and on float64 stand-ins with the generator
    on its float64 lattice (``"continuous"`` stays continuous): ``extra["tv_float64"]``. Algorithmic
    bias is what stays in the float64 run: ``biased`` iff it exceeds ``tolerance`` (or a support
    violation at either precision), else ``lossless up to <precision> rounding``. A loop that
    computes coarser than float64 whatever it is handed (a ``.float()``, transformers' float32
    logits, a float32 constant: a coarser dtype seen in the float64 run among the weights handed to
    ``multinomial`` and the numbers compared with uniforms; ``extra["forced_precision"]``) is held to
    :func:`~exactspec.samplers.rounding.rounding_allowance` at that precision instead, and
    reads ``undecided`` (exit 3) where rounding and bias cannot be told apart.

    ``reference``: a correct loop audited on the same instance and stand-ins, returning prompt +
    continuation (an int ``gamma`` means :func:`reference_loop` with that gamma): a figure, never a
    tolerance. ``extra["rounding_tv"]`` is its distance from the expected law (what float arithmetic
    at ``dtype`` costs a correct loop here) and ``extra["reference_tv_to_loop"]`` this loop's distance
    from it; a reference further than
    :data:`~exactspec.samplers.rounding.ROUNDING_CAP` from the expected law (another
    temperature, greedy where sampling was meant) is refused with an ExactSpecError.

    ``tokens`` (the horizon): by default it comes from the loop. The stand-ins see every forward
    pass, so on every branch the audit knows where the first step ended (the second verifying
    target call); the horizon covers every token of a first step and the first token of a second on
    every branch (at least :data:`DEFAULT_TOKENS` when the loop returns that many;
    ``scope["largest_step"]`` is the longest step seen). When a branch returns fewer tokens than
    that, the audit is incomplete (``scope["unobserved"]``, verdict ``undecided``, exit 3, unless a
    bias shows on the tokens observed). An explicit ``tokens=`` is audited as asked; tokens of a
    first or second step it leaves out are stated (``scope["unobserved"]``, a WARNING). With ``tokens=``
    given, the tokens a branch returns after the first ``tokens`` are counted, never read: a draw that only
    they hold never forks, so the same law takes fewer branches (``report.paths``) than without it. A
    token the loop returns without having read it (the last step's correction or bonus token, drawn and
    returned) is spread over its values where the branch ends, since no code runs after the loop
    returned, instead of forking the enumeration: one run of the loop stands for all its values. The
    ``torch-lm`` stand-ins read no pending token they are fed: their logits stay functions of it
    (:mod:`exactspec.samplers.torch_draws.lazy_worlds`) through the loop's torch operations until a value
    computed from them reaches Python, so a draft forks where verification reads it, not where the next
    forward consumes it (litgpt's ``generate`` at gamma 3: 321 branches instead of 2,421). The law is the same.

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

    ``progress``: None or True (default) shows the audit's progress on stderr, by the probability of the
    branches run so far (a bar with an ETA on a terminal past a second, a line every few seconds in
    a log; :mod:`exactspec._progress`), False nothing, a function ``progress(done, total)`` receives
    it (``done`` percent of ``total`` 100, per run of the loop).

    ``workers``: ``"auto"`` (default) runs the
    branches left after :data:`~exactspec.samplers.loops._on_workers.SWITCH_AFTER` seconds on every core
    (forked worker processes that inherit the loop and the stand-ins; a shorter audit never starts them),
    a number of processes (0: every core), or None or 1: this process only. Where the platform cannot fork,
    this process only. The report is the same either way: the branches merge in this process's order.
    What a branch changes outside the loop's return value (a global it appends to) changes in the
    worker that ran it, not here: pass ``workers=None`` to observe such side effects.

    One instance is rarely enough: :func:`~exactspec.samplers.loops.loop_search.search_loop`
    (``es.search_loop``) audits the loop on every instance of a small space and returns a minimal
    counterexample; ``search=`` and the search's own options (``space``, ``seed``, ``max_instances``, ...) are
    refused here with an :class:`~exactspec.errors.InvalidType` naming it.

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
    if not (workers is None or (isinstance(workers, str) and workers == parallel.AUTO)
            or (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 0)):
        bad = InvalidValue if isinstance(workers, (int, str)) and not isinstance(workers, bool) else InvalidType
        raise bad(f"audit_loop: workers must be 'auto', an int >= 0 (0: every core) or None, got {workers!r}")
    if not isinstance(target, Model):
        raise InvalidType(f"audit_loop: target must be an exactspec model (es.models.*), got {target!r}")
    for label, m in (("draft", draft), ("expected", expected)):
        if m is not None and not isinstance(m, Model):
            raise InvalidType(f"audit_loop: {label} must be an exactspec model (es.models.*), got {m!r}")
        if m is not None and m.vocab != target.vocab:
            raise InvalidValue(f"audit_loop: {label} model has vocab {m.vocab} but the target has vocab "
                               f"{target.vocab}")
    _check_options("audit_loop", tokens=tokens, kind=kind, output=output, on_error=on_error, worst=worst)
    if isinstance(reference, int) and not isinstance(reference, bool):
        if draft is None:
            raise InvalidValue("audit_loop: reference=<gamma> runs reference_loop, which needs a draft model: pass "
                               "draft=")
        if reference < 1:
            raise InvalidValue(f"audit_loop: reference (a gamma for reference_loop) must be >= 1, got {reference!r}")
    elif reference is not None and not callable(reference):
        raise InvalidType(f"audit_loop: reference must be a loop fn(target, draft, prompt_ids) or a gamma for "
                          f"reference_loop, got {reference!r}")
    check_budget(budget, "audit_loop")
    tol = to_rational(tolerance, "audit_loop tolerance")
    if tol < 0:
        raise InvalidValue(f"audit_loop: tolerance must be >= 0, got {tolerance!r}")
    try:
        prompt_t = prompt_tokens((0,) if prompt is None else prompt, target.vocab)
    except InvalidArgument as exc:      # the same class (InvalidValue, InvalidType), the message prefixed
        raise (InvalidType if isinstance(exc, TypeError) else InvalidValue)(f"audit_loop: {exc}") from None
    lattice_for(rng_model)
    import torch

    from ..torch_draws import torch_rng  # noqa: F401  (torch is patched in the audit)
    if dtype is None:
        dtype = torch.float64
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise (InvalidValue if isinstance(dtype, torch.dtype) else InvalidType)(
            f"audit_loop: dtype must be a torch floating dtype such as torch.float64, got {dtype!r}")
    own_precision = precision_of(torch.zeros((), dtype=dtype)) or "float64"
    # a second run on float64 stand-ins (and the generator on its float64 lattice) separates bias from rounding
    # whenever the stand-ins or the generator are coarser than float64 (float_boundary)
    twice = coarser_than_float64(own_precision) or rng_model not in ("continuous", "float64")
    precision = lowest({own_precision, _rng_precision(rng_model)}) or "float64"
    t0 = time.perf_counter()
    fld = get_field(backend="python")
    meter = Meter(budget or Budget())
    # the stand-ins are built before the interception (building a transformers one imports transformers)
    lms = (stand_in(target, kind=kind, dtype=dtype), None if draft is None else stand_in(draft, kind=kind, dtype=dtype))
    lms64 = None
    if twice:
        lms64 = (stand_in(target, kind=kind, dtype=torch.float64),
                 None if draft is None else stand_in(draft, kind=kind, dtype=torch.float64))
    shown: list = []

    def mass(what: str) -> MassProgress | None:
        """The progress of one run of the loop (closing the previous one's bar)."""
        for done in shown:
            _progress.close(done)
        cb = _progress.resolve(progress, f"audit_loop {name}{what}", unit=_progress.PERCENT)
        shown[:] = [cb]
        return None if cb is None else MassProgress(cb)

    def close_shown() -> None:
        for done in shown:
            _progress.close(done)
    with intercepting() as session, _one_torch_thread(), meter.guard(), contextlib.ExitStack() as ends:
        ends.callback(close_shown)
        run = _enumerate(fn, name, lms, prompt_t, vocab=target.vocab, rng_model=rng_model,
                         output=output, on_error=on_error, tokens=tokens, meter=meter, fld=fld, session=session,
                         observe=not twice or rng_model == "native", mass=mass(" (own precision)" if twice else ""),
                         workers=workers)
        used = set(session.lattices)      # the generators the loop drew from (native), before the float64 run
        if twice and rng_model == "native" and not coarser_than_float64(own_precision):
            # native draws of numpy or random are on float64's lattice already: a coarser generator needs the run
            twice = any(lat is not FLOAT64_LATTICE for _, lat in used)
            if not twice:
                precision = "float64"
        f64 = None
        if twice and lms64 is not None:     # (lms64: built whenever twice was set)
            # the generator at float64 too: native draws each on the 53-bit lattice (races still ideal), a named
            # lattice becomes float64's, continuous stays continuous
            model64 = "native-float64" if rng_model == "native" else (
                "continuous" if rng_model == "continuous" else "float64")
            f64 = _enumerate(fn, name, lms64, prompt_t, vocab=target.vocab, rng_model=model64, output=output,
                             on_error=on_error, tokens=tokens, meter=meter, fld=fld, session=session, observe=True,
                             mass=mass(" (float64 run)"), workers=workers, at_once=run.on_workers)
        horizon = _horizon(run if f64 is None else run.merged(f64), tokens, name)
        h = horizon["tokens"]
        ref_model = expected if expected is not None else target
        exp = target_law(ref_model, prompt_t, h, fld, [ref_model.order], meter=meter)
    law, errors, err_p = run.at(h, target.vocab, name, fld)
    sites = run.sites
    tv = total_variation(law, exp)
    ok = 1 - err_p
    instance = {"vocab": target.vocab, "loop": name, "prompt": list(prompt_t), "tokens": h,
                "decoding": "sample", "target": target.name, "draft": None if draft is None else draft.name,
                "stand_in": kind, "dtype": str(dtype).replace("torch.", "")}
    if rng_model != "continuous":
        instance["rng_model"] = rng_model
    if expected is not None:
        instance["expected"] = expected.name
    scope = {"of": "this instance (one whole run of the loop, drafting included)", "whole_loop": True, **horizon,
             "rng": describe_rng_model(rng_model, used)}
    target_calls = run.calls / ok if ok else fld.zero
    report = LoopReport(rule=name, claim="lossless", instance=instance, field=fld, output=law, expected=exp, tv=tv,
                        tolerance=tol, tokens_per_call=(Fraction(h) / target_calls) if target_calls else fld.zero,
                        target_calls=target_calls, seconds=time.perf_counter() - t0, paths=run.paths,
                        worst_count=worst, scope=scope)
    report.extra.update({"adapter": "whole loop", "stand_in": kind, "dtype": instance["dtype"],
                         "error_probability": str(err_p), "errors": {k: str(v) for k, v in errors.items()},
                         "error_sites": dict(sites),
                         "target_forward_calls": str(target_calls), "tolerance": str(tol), "rng_model": rng_model,
                         "rng": scope["rng"], "largest_step": horizon["largest_step"]})
    f64_tv = f64_violations = None
    forced = False
    coarsest = lowest(run.seen)
    if f64 is not None:
        law64, _, _ = f64.at(h, target.vocab, name, fld)
        f64_tv = total_variation(law64, exp)
        f64_violations = any(v > 0 and not exp.get(k, 0) for k, v in law64.items())
        forced = coarser_than_float64(lowest(f64.seen))
        report.extra.update({"tv_float64": str(f64_tv), "float64_paths": f64.paths,
                             "float64_run": "float64 stand-ins" + ("" if rng_model == "continuous" else
                                                                   ", the generator on its float64 lattice"),
                             "forced_precision": lowest(f64.seen) if forced else None})
    elif coarsest is not None and coarser_than_float64(coarsest):
        # float64 stand-ins, and yet the loop computes coarser (a cast down, a float32 constant): this run is the
        # float64 run, held to what that precision's rounding can cost (never to float64 rounding)
        precision = coarsest
        f64_tv, f64_violations, forced = tv, bool(report.support_violations), True
        report.extra["forced_precision"] = precision
    report.extra["tv_own"] = str(tv)
    if tv == 0:     # exactly the expected law as it runs: nothing for the float64 run to separate
        f64_tv, f64_violations, forced = None, False, False
    positions = h * (horizon["largest_step"] + 1)
    algorithmic = tv if f64_tv is None else f64_tv
    if not forced and not report.support_violations and not f64_violations and tol < algorithmic <= ROUNDING_CAP:
        # not lossless, by no more than rounding can cost, and nothing coarser than float64 seen at the draws: the
        # run the verdict rests on again, every torch operation of the loop watched for a coarser dtype meeting
        # float64 data (a .float() and back, a float32 constant) -- rounding that is not bias
        again = f64 if f64 is not None else run
        with intercepting() as session, _one_torch_thread(), meter.guard():
            watched = _enumerate(fn, name, lms64 if f64 is not None and lms64 is not None else lms, prompt_t,
                                 vocab=target.vocab, rng_model=model64 if f64 is not None else rng_model, output=output,
                                 on_error=on_error, tokens=tokens, meter=meter, fld=fld, session=session,
                                 observe=True, mass=mass(" (precision watch)"), workers=None, watch=True)
        for done in shown:
            _progress.close(done)
        if watched.at(h, target.vocab, name, fld)[0] != again.at(h, target.vocab, name, fld)[0]:
            raise ExactSpecError(f"audit_loop: loop {name} gave another law when run again on the same stand-ins "
                                 "(it depends on something besides its inputs and its draws: a global it changes, "
                                 "the clock); audit a loop that is a function of them")
        coarse = lowest(p for p in watched.seen if coarser_than_float64(p))
        if coarse is not None:
            forced, f64_tv, f64_violations = True, algorithmic, False
            precision = lowest({precision, coarse}) or coarse
            report.extra["forced_precision"] = coarse
            report.extra["forced_precision_from"] = (
                f"a torch operation of the loop at {watched.precision_sites.get(coarse, 'an unknown line')} where a "
                f"{coarse} tensor met float64 data (a cast down and back, a coarser constant), seen by running the "
                "loop again with every operation watched")
            report.extra["lowest_precision"] = {"precision": coarse,
                                                "where": watched.precision_sites.get(coarse, "unknown")}
    lifted_tv, lifted_violations = None, False
    if forced and not report.support_violations and not f64_violations and f64_tv is not None and f64_tv > tol:
        # the loop casts down: once more with its casts lifted to float64; when nothing coarser is met then, that
        # run is the same algorithm at float64, and rounding and bias separate exactly
        lifts: dict = {}
        try:
            with intercepting() as session, _one_torch_thread(), meter.guard():
                lifted = _enumerate(fn, name, lms64 if lms64 is not None else lms, prompt_t, vocab=target.vocab,
                                    rng_model=model64 if f64 is not None else rng_model, output=output,
                                    on_error=on_error, tokens=tokens, meter=meter, fld=fld, session=session,
                                    observe=True, mass=mass(" (casts lifted to float64)"), workers=None, lift=lifts)
        except (BudgetExceeded, KeyboardInterrupt):
            raise
        except Exception as exc:     # noqa: BLE001  a cast the loop needs coarse (a bit view): the bounds decide
            report.extra["lifted_run"] = {"completed": False, "why": f"{type(exc).__name__}: {exc}"}
        else:
            still = lowest(p for p in lifted.seen if coarser_than_float64(p))
            law_l, _, _ = lifted.at(h, target.vocab, name, fld)
            tv_l = total_variation(law_l, exp)
            report.extra["lifted_run"] = {"completed": True, "tv": str(tv_l), "casts_lifted": dict(lifts),
                                          "still_coarse": still or "none"}
            if still is not None:
                report.extra["lifted_run"]["still_coarse_at"] = lifted.precision_sites.get(still, "at a draw")
            if still is None:
                lifted_tv = tv_l
                lifted_violations = any(v > 0 and not exp.get(k, 0) for k, v in law_l.items())
        for done in shown:
            _progress.close(done)
    boundary = decide(precision=precision if f64_tv is not None else "float64", own_tv=tv,
                      own_violations=bool(report.support_violations), f64_tv=f64_tv,
                      f64_violations=bool(f64_violations), forced=forced, tolerance=tol, lifted_tv=lifted_tv,
                      lifted_violations=lifted_violations,
                      allowance=rounding_allowance(precision if f64_tv is not None else "float64", vocab=target.vocab,
                                                   positions=positions))
    report.extra["float_boundary"] = boundary.to_dict()
    report.extra["algorithmic_tv"] = str(boundary.algorithmic_tv)
    if coarser_than_float64(boundary.precision) and "lowest_precision" not in report.extra:
        where = {**run.precision_sites, **(f64.precision_sites if f64 is not None else {})}.get(boundary.precision)
        report.extra["lowest_precision"] = {
            "precision": boundary.precision,
            "where": where or (f"the stand-ins (dtype {instance['dtype']})" if boundary.precision == own_precision
                               else "the generator's lattice")}
    if reference is not None:
        if isinstance(reference, int):
            reference = reference_loop(reference, h)
        _reference_figure(report, reference, target=target, draft=draft, prompt=prompt_t, tokens=h, kind=kind,
                          dtype=dtype, expected=expected, budget=budget, rng_model=rng_model, progress=progress,
                          workers=workers)
    if session.approximations:
        report.extra["approximations"] = dict(session.approximations)
    report.seconds = time.perf_counter() - t0
    return report


def _rng_precision(rng_model: str) -> str:
    """The float precision of a generator model's uniforms: float64 for ideal or 53-bit uniforms, float32 for a
    24-bit lattice, and (an rng model this module does not know the grid of) float32, the coarser assumption."""
    if rng_model in ("continuous", "float64"):
        return "float64"
    lat = lattice_for(rng_model)
    step = getattr(lat, "step", None)
    if isinstance(step, Fraction) and step <= Fraction(1, 2 ** 53):
        return "float64"
    return "float32"


def _reference_figure(report: "LoopReport", reference: Callable, **kw: Any) -> None:
    """A reference loop's distance from the expected law, as a figure in ``extra`` (never a tolerance).

    A reference further than :func:`~exactspec.samplers.rounding.rounding_cap` of its dtype from the expected
    law is not rounding but a broken baseline (another temperature, ``generate`` without ``do_sample``):
    refused with an ExactSpecError, since no verdict should rest on it.
    """
    name = getattr(reference, "__name__", None) or "reference"
    ref = audit_loop(reference, target=kw["target"], draft=kw["draft"], prompt=kw["prompt"], tokens=kw["tokens"],
                     kind=kw["kind"], dtype=kw["dtype"], output="full", expected=kw["expected"], budget=kw["budget"],
                     tolerance=0, rng_model=kw["rng_model"], worst=0, progress=kw.get("progress"),
                     workers=kw.get("workers"))
    import torch
    cap = rounding_cap(precision_of(torch.zeros((), dtype=kw["dtype"] or torch.float64)) or "float64")
    if ref.tv > cap or ref.support_violations or ref.error_probability:
        raise ExactSpecError(
            f"audit_loop: the reference loop {name} lands TV {float(ref.tv):.6g} from the expected law on this "
            f"instance, more than float rounding can cost (at most {float(cap):.3g})"
            + (" and emits outcomes it never emits" if ref.support_violations else "")
            + (f" and raises with probability {ref.error_probability}" if ref.error_probability else "")
            + ": it is not a correct loop for this law (another temperature or truncation than expected=, greedy "
              "where sampling was meant, a generate call without do_sample=True), so no verdict rests on it; fix "
              "the reference or drop reference=")
    report.extra["reference"] = name
    report.extra["rounding_tv"] = str(ref.tv)
    report.extra["reference_tv_to_loop"] = str(total_variation(report.output, ref.output))


class _Run:
    """One enumeration of a loop: the law of everything it returned (full new-token tuples), its failing branches,
    its forward-call statistics and the float precisions it was seen computing in."""

    def __init__(self) -> None:
        self.law: dict = {}
        self.errors: dict = {}
        self.sites: dict = {}        # each exception's line in the audited code (file:line in function)
        self.calls: Any = 0
        self.paths = 0
        self.seen: set = set()
        self.precision_sites: dict = {}   # each coarser precision -> where the loop first met it (file:line)
        self.need = 0                # the most tokens a branch needs observed: a first step and a second's first
        self.shortest: int | None = None
        self.largest_step = 0
        self.on_workers = False      # whether its branches went to worker processes (see _on_workers)

    def note_branch(self, n: int, contexts: list, n0: int) -> None:
        """Fold one branch's number of new tokens and its target forward contexts into the step statistics."""
        self.shortest = n if self.shortest is None else min(self.shortest, n)
        first, step = _steps(contexts, n0)
        self.largest_step = max(self.largest_step, step)
        self.need = max(self.need, n if first is None else min(n, first + 1))

    def absorb(self, other: "_Run", zero: Any) -> None:
        """Fold in the branches ``other`` ran, as if this run had run them next (a worker's share of them)."""
        for table, more in ((self.law, other.law), (self.errors, other.errors)):
            for k, w in more.items():
                table[k] = table.get(k, zero) + w
        for k, site in other.sites.items():
            self.sites.setdefault(k, site)
        self.seen |= other.seen
        for k, site in other.precision_sites.items():
            self.precision_sites.setdefault(k, site)
        self.calls += other.calls
        self.seen |= other.seen
        self.need = max(self.need, other.need)
        self.largest_step = max(self.largest_step, other.largest_step)
        if other.shortest is not None:
            self.shortest = other.shortest if self.shortest is None else min(self.shortest, other.shortest)

    def merged(self, other: "_Run") -> "_Run":
        """The step statistics of two runs of the same loop together (for the horizon)."""
        out = _Run()
        out.need = max(self.need, other.need)
        out.largest_step = max(self.largest_step, other.largest_step)
        out.shortest = min(x for x in (self.shortest, other.shortest) if x is not None) if (
            self.shortest is not None or other.shortest is not None) else None
        return out

    def at(self, h: int, vocab: int, name: str, fld: Any) -> tuple[dict, dict, Any]:
        """The law of the first ``h`` new tokens, the failing branches and their probability."""
        law: dict = {}
        for ids, w in self.law.items():
            out = ids[:h]
            for i, t in enumerate(out):
                if not 0 <= t < vocab:
                    raise RuleError(f"loop {name} emitted token {t} (new token {i}), outside the vocabulary "
                                    f"0..{vocab - 1}", rule=name)
            law[out] = law.get(out, fld.zero) + w
        return law, self.errors, sum(self.errors.values(), fld.zero)


def _contexts(lm: Any) -> list:
    """A stand-in's forward contexts of this branch, a pending draw it was fed (kept pending) as
    its value where it was drawn since, else as itself: equal only to itself, not to any value it might take.

    >>> _contexts(None)
    []
    """
    out = []
    for c in getattr(lm, "contexts", ()) or ():
        if any(type(t) is tuple for t in c):
            c = tuple(t[0].values()[t[1]] if type(t) is tuple and t[0].drawn else t for t in c)
        out.append(c)
    return out


def _steps(contexts: list, n0: int) -> tuple[int | None, int]:
    """From a branch's target forward contexts: the tokens its first step emitted (None: one step only) and the
    largest step output seen (drafts verified by one target call, plus the token that call adds).

    A call scoring only the prompt (a prefill) verifies nothing and is skipped. The first verifying call
    scores the prompt and the step's drafts; a later call scores what was committed since (the shared
    prefix with the call before, plus the correction or bonus token) and the next drafts. The first step
    emitted the tokens committed when the second verifying call came.

    >>> _steps([(0,), (0, 1, 2), (0, 1, 0, 2, 2)], 1)     # prefill, drafts (1, 2), 1 kept + correction 0
    (2, 3)
    """
    calls = [c for c in contexts if len(c) > n0]
    if not calls:
        return None, 1
    largest = len(calls[0]) - n0 + 1
    for a, b in zip(calls, calls[1:]):
        largest = max(largest, len(b) - _shared(a, b))
    first = _shared(calls[0], calls[1]) + 1 - n0 if len(calls) > 1 else None
    return first, largest


def _shared(a: tuple, b: tuple) -> int:
    """The length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _horizon(run: _Run, tokens: int | None, name: str) -> dict:
    """The horizon of a loop audit and what it leaves unobserved (the scope's entries).

    The loop's trace says how many tokens its first step emitted on every branch; a first step and the
    first token of a second are observed when the horizon reaches them wherever the loop emits them.
    ``tokens`` given: that horizon, unobserved positions stated (a warning, as ``es.audit`` does for a
    horizon shorter than a step); not given: the longest the loop's trace asks for (at least
    :data:`DEFAULT_TOKENS` when the loop returns that many), and, when some branch returns fewer tokens
    than that, an incomplete audit (exit 3) naming the positions it could not observe.
    """
    shortest = run.shortest
    if shortest is None:    # every branch raised (on_error="record"): nothing returned to read
        h = tokens if tokens is not None else DEFAULT_TOKENS
        return {"tokens": h, "complete": True, "largest_step": run.largest_step, "horizon_from": "tokens=" if (
            tokens is not None) else "the default", "note": f"every branch of {name} raised: no token returned"}
    need = max(run.need, 1)
    if tokens is not None:
        h, source = tokens, "tokens="
    else:
        if shortest < 1:
            raise RuleError(f"loop {name} returned no new token on a branch: audit_loop reads the tokens it "
                            "generates", rule=name)
        h, source = min(shortest, max(need, min(DEFAULT_TOKENS, shortest))), "the loop"
    scope = {"tokens": h, "largest_step": run.largest_step, "horizon_from": source, "complete": need <= h}
    step = f"its longest step emits {run.largest_step} token(s)"
    if need <= h:
        scope["note"] = (f"a whole-loop audit of {name} on one instance: the law of its first {h} new token(s); "
                         f"{step}, and on every branch the horizon observes every token of its first step and "
                         "the first token of a second")
        return scope
    missing = list(range(h + 1, need + 1))
    scope["unobserved"] = {"new_tokens": missing}
    which = (f"new token {missing[0]}" if len(missing) == 1 else f"new tokens {missing[0]}..{missing[-1]}")
    if source == "tokens=":
        scope["note"] = (f"tokens={h} leaves {which} unobserved: {step}, and a first step and the first token "
                         f"of a second reach token {need} on some branch; use tokens >= {need} to observe them")
    else:
        scope["note"] = (f"incomplete: {step}, a first step and the first token of a second reach new token {need} "
                         f"on some branch, but {name} returns only {shortest} new token(s) on some branch, so "
                         f"{which} went unobserved; make it generate at least {need} tokens, or pass "
                         f"tokens={shortest} to accept the shorter horizon")
    return scope


def _enumerate(fn: Callable, name: str, lms: tuple, prompt_t: tuple, *, vocab: int, rng_model: str, output: str,
               on_error: str, tokens: int | None, meter: Meter, fld: Any, session: Any, observe: bool,
               mass: MassProgress | None = None, workers: Any = None, at_once: bool = False,
               watch: bool = False, lift: dict | None = None) -> _Run:
    """Run the loop once per branch of its randomness on the stand-ins ``lms`` (inside ``intercepting()``);
    ``mass`` counts the probability of every branch run.

    ``workers``: None runs every branch in this process; otherwise (``parallel.AUTO``, or a number of
    processes) the branches left after :data:`~exactspec.samplers.loops._on_workers.SWITCH_AFTER` seconds go to
    worker processes (:func:`~exactspec.samplers.loops._on_workers.finish_on_workers`), merged in this
    process's order: the same run, the same first error. ``at_once``: after the first branch instead (the
    float64 run of an audit whose first run went to workers: as long, it would pay for them as well).
    ``watch``: every torch operation of the loop watched for a dtype coarser than float64 meeting float64 data
    (:mod:`~exactspec.samplers.randomness.precision_watch`), noted in the run's ``seen`` (and where, in its
    ``precision_sites``). ``lift``: a dict: the loop's own casts to a coarser float dtype lifted to float64
    (:func:`~exactspec.samplers.randomness.precision_watch.lifting`), the first site of each precision lifted noted
    in it.
    """
    from . import _on_workers
    branches = _Branches(fn, name, lms, prompt_t, vocab=vocab, lattice=lattice_for(rng_model), output=output,
                         on_error=on_error, tokens=tokens, fld=fld, session=session, observe=observe,
                         depth=meter.budget.depth)
    branches.watch = watch or lift is not None
    if lift is not None:
        branches.lift, branches.lifted = True, lift
    run = branches.run
    stack: list = [((), fld.one)]
    start = meter.paths
    plan = _on_workers.plan(workers, meter)
    switch = None if plan is None else time.perf_counter() + (0.0 if at_once else plan.after)
    while stack:
        if plan is not None and switch is not None and time.perf_counter() >= switch and meter.paths > start:
            _on_workers.finish_on_workers(branches, stack, meter, mass, plan.workers)
            run.on_workers = True
            break
        prefix, w = stack.pop()
        meter.tick()
        branches.branch(prefix, w, stack, mass)
    run.paths = meter.paths - start
    return run


class _Branches:
    """One enumeration of a loop, branch by branch: what :func:`_enumerate` runs in this process and a worker
    (:mod:`~exactspec.samplers.loops._on_workers`) runs on its share of the branches; ``run`` collects them."""

    def __init__(self, fn: Callable, name: str, lms: tuple, prompt_t: tuple, *, vocab: int, lattice: Any,
                 output: str, on_error: str, tokens: int | None, fld: Any, session: Any, observe: bool,
                 depth: int | None) -> None:
        self.fn, self.name, self.lms, self.prompt_t = fn, name, lms, prompt_t
        self.vocab, self.lattice, self.output, self.on_error, self.tokens = vocab, lattice, output, on_error, tokens
        self.fld, self.session, self.observe, self.depth = fld, session, observe, depth
        self.private = private_generators(fn)
        self.supports: dict = {}
        self.watch = False      # every torch operation watched for a coarser dtype meeting float64 data
        self.lift = False       # and the loop's casts to a coarser float dtype lifted to float64
        self.lifted: dict = {}  # precision -> the first site of a cast lifted
        self.run = self.fresh_run()

    def fresh_run(self) -> _Run:
        """An empty :class:`_Run` (whose precisions seen the branches run from now on fill)."""
        import torch
        run = _Run()
        run.calls = self.fld.zero
        seen, sites = run.seen, run.precision_sites
        by_dtype: dict = {}      # a torch tensor's precision is its dtype's: looked up once per dtype

        def note(x: Any) -> None:
            if isinstance(x, torch.Tensor):
                dt = x.dtype
                p = by_dtype.get(dt, by_dtype)
                if p is by_dtype:
                    p = by_dtype[dt] = precision_of(x)
            else:
                p = precision_of(x)
            if p is not None:
                seen.add(p)
                if p != "float64" and p not in sites:
                    sites[p] = user_site(2)
        self._note = note
        self.run = run
        return run

    def branch(self, prefix: tuple, w: Any, stack: list, mass: Any) -> Any:
        """Run the loop on the branch ``prefix`` (weight ``w``), pushing the branches it forks onto ``stack``;
        fold its output (or its error, under ``on_error="record"``) into ``run``; return its probability."""
        import torch
        fn, name, run, fld = self.fn, self.name, self.run, self.fld
        t_lm, d_lm = self.lms
        rng = PathRng(prefix, w, fld, stack, self.supports, self.depth, self.lattice, True)
        if self.observe:
            rng.observe = self._note
        for lm in (t_lm, d_lm):
            if lm is not None:
                _reset(lm)
        ids = torch.tensor([list(self.prompt_t)], dtype=torch.long)
        try:
            with watch(rng, name, self.private, self.session), \
                    (lifting(self.lifted.setdefault, run.seen.add, run.precision_sites) if self.lift else
                     watching(run.seen.add, run.precision_sites) if self.watch else contextlib.nullcontext()):
                try:
                    res = fn(t_lm, d_lm, ids)
                    outs, n_new = _tokens_of(res, self.prompt_t, self.output, self.tokens, self.vocab, name,
                                             rng)
                except SystemExit as exc:
                    raise RuleError(f"loop {name} called sys.exit({exc.code!r}) while audited (draws "
                                    f"{rng.trace})", rule=name, trace=rng.trace) from exc
        except RuleError as exc:
            if not exc.trace:
                exc.trace = rng.trace
            raise
        except ReplayDiverged as exc:
            raise RuleError(f"loop {name}: {exc}", rule=name, trace=rng.trace) from exc
        except (ExactSpecError, MemoryError, RecursionError):
            raise
        except Exception as exc:
            what = f"{type(exc).__name__}: {exc}"
            site = crash_site(exc)
            if self.on_error == "raise" or site is None:   # None: raised calling fn, not inside it (no crash of fn)
                raise RuleError(
                    f"loop {name} raised {what} on a branch of probability {rng.weight} (draws {rng.trace})"
                    + (f" at {site}; pass on_error='record' to report the probability of every failing branch "
                       "instead" if site else ", calling it (not inside it): check fn's signature, "
                       "fn(target, draft, prompt_ids)"),
                    rule=name, trace=rng.trace) from exc
            run.errors[what] = run.errors.get(what, fld.zero) + rng.weight
            run.sites.setdefault(what, site)
            if mass is not None:
                mass.add(rng.weight)
            return rng.weight
        if mass is not None:
            mass.add(rng.weight)
        law, w = run.law, rng.weight
        for out, p in outs:
            law[out] = law.get(out, fld.zero) + (w if p is None else w * p)
        run.calls += rng.weight * _calls(t_lm)
        run.note_branch(n_new, _contexts(t_lm), len(self.prompt_t))
        return rng.weight


def _check_options(where: str, *, tokens: Any, kind: Any, output: Any, on_error: Any, worst: Any) -> None:
    """Refuse a bad option of :func:`audit_loop` or of the loop search (``where``) with an error naming it."""
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        what = "tokens (the horizon of every instance)" if where == "search_loop" else "tokens"
        raise _int_error(tokens)(f"{where}: {what} must be an int >= 1, got {tokens!r}")
    if kind not in KINDS:
        raise InvalidValue(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if output not in _OUTPUTS:
        raise InvalidValue(f"{where}: output must be 'full' (prompt + continuation) or 'new' (continuation only), "
                           f"got {output!r}")
    if on_error not in _ON_ERROR:
        raise InvalidValue(f"{where}: on_error must be 'raise' or 'record', got {on_error!r}")
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise _int_error(worst)(f"{where}: worst must be an int >= 0, got {worst!r}")


def _int_error(value: Any) -> type[InvalidArgument]:
    """The error for a bad count: :class:`InvalidValue` for an int out of range, :class:`InvalidType` otherwise.

    >>> _int_error(0).__name__, _int_error(True).__name__, _int_error("2").__name__
    ('InvalidValue', 'InvalidType', 'InvalidType')
    """
    return InvalidValue if isinstance(value, int) and not isinstance(value, bool) else InvalidType


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
            raise _int_error(v)(f"reference_loop: {label} must be an int >= 1, got {v!r}")
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
