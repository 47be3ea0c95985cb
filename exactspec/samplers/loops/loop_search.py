"""``search_loop``: a whole generation loop audited on every instance of a small space, for its minimal counterexample.

:func:`search_loop` (``es.search_loop``) runs :func:`~exactspec.samplers.loops.loop_audit.audit_loop` on every
instance of a small space (vocab 2..4, context-free, per-position and order-1 models, horizons 1..4) through the
generic search of :func:`exactspec.samplers.search.search_instances`, and returns a minimal
:class:`~exactspec.counterexamples.Counterexample` (of ``kind`` ``"loop"``, or ``"crash"`` when the loop raises on
an instance), an :class:`~exactspec.counterexamples.EmptySearch` or an
:class:`~exactspec.counterexamples.IncompleteSearch`. ``audit_loop`` audits one instance; each function refuses the
other's keywords with a typed error naming it (:mod:`exactspec.samplers.signatures`).

>>> import exactspec as es
>>> from exactspec.bugzoo import loops
>>> space = loop_space(None, 2).with_(vocabs=(2,), families=("context_free",), random_points=0)
>>> found = search_loop(loops.bonus_from_draft, space=space, progress=False, workers=None)
>>> found.kind, found.instance.vocab, found.instance.tokens     # the bonus token is drawn from the draft
('loop', 2, 2)
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import Any, Callable

from ... import parallel
from ...counterexamples.counterexample import Counterexample, EmptySearch, IncompleteSearch, valid_loop_options
from ...counterexamples.space import Space
from ...enumerate import Budget
from ...enumerate.rng import lattice_for
from ...errors import InvalidType, InvalidValue
from ...laws import to_rational
from ...report import AuditReport
from ..audit import ROUNDING_TOLERANCE
from ..search import sampler_reference, search_instances, search_workers, split_budget
from ..signatures import refusing
from .loop_audit import _check_fn, _check_options, audit_loop

__all__ = ["search_loop", "loop_space", "LOOP_INSTANCE_SECONDS"]

#: what ``workers="auto"`` assumes one instance of a loop search costs in this process, in seconds (the default
#: search of ``exactspec.bugzoo.loops:speculative_sampling``, 540 instances, took 169 s CPU on a loaded 2-core machine)
LOOP_INSTANCE_SECONDS = 0.3


class _LoopAudit:
    """``audit_one`` of the loop search (crashes recorded whatever ``on_error`` says: each is a finding).

    ``for_workers()``: the same audit with the loop (and a reference loop) ready for worker processes
    (:func:`exactspec.parallel.portable`); ``rebuild()`` undoes that in a worker.
    """

    def __init__(self, fn: Callable, kind: str, dtype: Any, output: str, tol: Fraction, rng_model: str, worst: int,
                 reference: Any) -> None:
        self.fn, self.kind, self.dtype, self.output, self.tol = fn, kind, dtype, output, tol
        self.rng_model, self.worst, self.reference = rng_model, worst, reference

    def __call__(self, inst: dict) -> AuditReport:
        return audit_loop(self.fn, target=inst["target"], draft=inst["draft"], prompt=inst["prompt"],
                          tokens=inst["tokens"], kind=self.kind, dtype=self.dtype, output=self.output,
                          on_error="record", tolerance=self.tol, rng_model=self.rng_model, worst=self.worst,
                          budget=inst.get("budget"), reference=self.reference, progress=False, workers=None)

    def _with(self, fn: Any, reference: Any) -> "_LoopAudit":
        return _LoopAudit(fn, self.kind, self.dtype, self.output, self.tol, self.rng_model, self.worst, reference)

    def for_workers(self) -> "_LoopAudit":
        return self._with(parallel.portable(self.fn, "loop"), parallel.portable(self.reference, "reference loop")
                          if callable(self.reference) else self.reference)

    def rebuild(self) -> "_LoopAudit":
        return self._with(parallel.load_portable(self.fn), parallel.load_portable(self.reference))


def loop_space(space: Any, tokens: int | None) -> Any:
    """The space of a loop search: every instance gets the prompt ``(0,)`` (loops need a context to start from).

    ``space`` None gives the default (one draft shape, horizons 1..4 or ``tokens``); an exactspec
    :class:`~exactspec.counterexamples.space.Space` is taken as it is, with the prompt added.

    >>> loop_space(None, 2).describe().split(";")[0]
    'vocab 2..4, tokens 2..2, prompt (0,), families context_free, per_position, table'
    """
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
        raise InvalidType(f"search_loop: space must be an exactspec Space, got {space!r}")
    return LoopSpace(**{f.name: getattr(space, f.name) for f in dataclasses.fields(space)})


_INSTANCE_REFUSED = ("search_loop: {names} do not apply: the search chooses the laws, prompts and horizons "
                     "(es.audit_loop(fn, target=..., ...) audits one instance)")


@refusing({"search": "search_loop searches already: drop search= (es.audit_loop audits one instance)",
           **{k: _INSTANCE_REFUSED for k in ("target", "draft", "prompt", "expected")}})
def search_loop(fn: Callable[..., Any], *, tokens: int | None = None, kind: str = "torch-lm", dtype: Any = None,
                output: str = "full", on_error: str = "raise", tolerance: Any = ROUNDING_TOLERANCE,
                rng_model: str = "native", worst: int = 5, reference: Callable[..., Any] | int | None = None,
                budget: float | Budget | None = None, space: Space | None = None, seed: int = 0,
                max_instances: int | None = None, instance_budget: Budget | None = None, progress: Any = None,
                workers: int | str | None = parallel.AUTO, executor: Any = None, chunk_size: int | None = None
                ) -> Counterexample | EmptySearch | IncompleteSearch:
    """Search a whole generation loop for the smallest instance on which it is biased (or crashes).

    ``fn(target_lm, draft_lm, prompt_ids)`` is audited by :func:`~exactspec.samplers.loops.loop_audit.audit_loop`
    on every instance of a small space (``space``, default :func:`loop_space`: vocab 2..4, context-free,
    per-position and order-1 models, the prompt ``(0,)``, horizons 1..4 or ``tokens``), smallest first, with the
    loop options ``kind``, ``dtype``, ``output``, ``tolerance``, ``rng_model``, ``worst`` and ``reference`` as
    ``audit_loop`` takes them. Every instance is audited with ``on_error="record"``: a crash is a finding, a
    :class:`~exactspec.counterexamples.Counterexample` of ``kind`` ``"crash"`` (``on_error`` is recorded for the
    counterexample's ``to_pytest()``). The search chooses the laws, prompt and horizon, so ``target``, ``draft``,
    ``prompt`` and ``expected`` are refused (an :class:`~exactspec.errors.InvalidType`, never ignored); the options
    are checked before any audit (bad input is an error, not an instance that raised).

    Returns a minimal Counterexample of ``kind`` ``"loop"`` (``sampler_ref`` the loop's ``module:qualname``,
    ``""`` when no test can import it; ``loop`` the options its ``to_pytest()`` replays), an
    :class:`~exactspec.counterexamples.EmptySearch` stating the space covered, or an
    :class:`~exactspec.counterexamples.IncompleteSearch` (exit 3) when a limit stopped it.

    ``budget``: seconds for the whole search (a number), or an :class:`~exactspec.Budget` whose ``seconds`` limit
    the whole search and whose other limits each audit (``instance_budget`` gives those otherwise). ``seed``,
    ``max_instances``, ``progress``, ``executor`` and ``chunk_size`` are
    :func:`~exactspec.samplers.search.search_instances`'s. ``workers``: ``"auto"`` (default) every core for a
    search long enough to pay for a pool (:data:`LOOP_INSTANCE_SECONDS` an instance), the instances of a chunk
    each audited in one process; a number of processes; None: this process. The result is the same either way.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import loops
    >>> space = loop_space(None, 1).with_(vocabs=(2,), random_points=1)
    >>> empty = es.search_loop(loops.speculative_sampling, space=space, progress=False, workers=None)
    >>> bool(empty), empty.audited
    (False, 12)
    """
    where = "search_loop"
    name = _check_fn(fn, where)
    _check_options(where, tokens=tokens, kind=kind, output=output, on_error=on_error, worst=worst)
    tol = to_rational(tolerance, f"{where} tolerance")
    if tol < 0:
        raise InvalidValue(f"{where}: tolerance must be >= 0, got {tolerance!r}")
    lattice_for(rng_model)   # an unknown rng model is an error here, not on every instance
    if isinstance(reference, bool) or not (reference is None or isinstance(reference, int) or callable(reference)):
        raise InvalidType(f"{where}: reference must be a loop fn(target, draft, prompt_ids) or a gamma for "
                          f"reference_loop, got {reference!r}")
    if isinstance(reference, int) and reference < 1:
        raise InvalidValue(f"{where}: reference (a gamma for reference_loop) must be >= 1, got {reference!r}")
    import torch
    if dtype is None:
        dtype = torch.float64
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidType(f"{where}: dtype must be a torch floating dtype such as torch.float64, got {dtype!r}")
    space = loop_space(space, tokens)
    seconds, instance_budget = split_budget(budget, instance_budget, where)
    ref_record: Any = None
    if isinstance(reference, int):
        ref_record = reference
    elif reference is not None:
        ref_record = sampler_reference(reference)
    record = valid_loop_options({"stand_in": kind, "dtype": str(dtype).replace("torch.", ""), "output": output,
                                 "on_error": on_error, "tolerance": str(tol), "reference": ref_record})

    audit_one = _LoopAudit(fn, kind, dtype, output, tol, rng_model, worst, reference)
    pool: Any = workers
    if isinstance(workers, str) and workers == parallel.AUTO:   # every core for a long search
        pool = search_workers(audit_one, space, LOOP_INSTANCE_SECONDS, seconds, max_instances, progress)
    found = search_instances(audit_one, space=space, name=name, budget=seconds, seed=seed,
                             max_instances=max_instances, progress=progress, instance_budget=instance_budget,
                             workers=pool, executor=executor, chunk_size=chunk_size)
    if isinstance(found, Counterexample):  # the output law misses the mass of the branches that raised
        record["error_probability"] = str(1 - sum(found.output.values(), Fraction(0)))
        if found.kind == "crash":          # replayed with on_error="record": the test sees the crash's probability
            record["on_error"] = "record"
            return dataclasses.replace(found, sampler_ref=sampler_reference(fn), rng_model=rng_model,
                                       loop=valid_loop_options(record), crash={**found.crash, "of": "loop"})
        return dataclasses.replace(found, kind="loop", sampler_ref=sampler_reference(fn), rng_model=rng_model,
                                   loop=record)
    return found
