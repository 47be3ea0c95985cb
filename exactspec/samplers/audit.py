"""``audit_sampler``: the exact law of a third-party sampler on one instance.

What a user calls (``es.audit_sampler``): the instance is audited by
:func:`~exactspec.samplers.instance.audit_instance`. Searching small instances is a function of its own,
:func:`~exactspec.samplers.search.search_sampler` (``es.search_sampler``), which audits each of them the same way;
``audit_sampler(search=True)`` is refused with a typed error naming it.

>>> import exactspec as es
>>> from exactspec.bugzoo import numpy_samplers as zoo
>>> p, q = es.models.context_free(("1/2", "1/2")), es.models.context_free(("1/4", "3/4"))
>>> es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(1), tokens=2).verdict
'lossless'
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..enumerate import Budget
from ..enumerate.step import check_budget
from ..models import Model
from .instance import ROUNDING_TOLERANCE, audit_instance
from .signatures import refusing

__all__ = ["audit_sampler", "ROUNDING_TOLERANCE"]


@refusing({"search": "audit_sampler(search=True) is search_sampler(...) now: es.search_sampler(sampler, "
                     "adapter=..., ...) searches small instances; audit_sampler audits one (drop search=)"})
def audit_sampler(sampler: Callable, *, adapter: Any = None, target: Model | None = None,
                  draft: Model | None = None, proposer: Any = None, prompt: Sequence[int] = (), tokens: int | None = None,
                  rng_model: str = "native", expected: Model | None = None, reference: bool | None = None,
                  tolerance: Any = ROUNDING_TOLERANCE, budget: Budget | None = None,
                  precision: str | None = None, cache: bool = True, on_error: str = "raise",
                  progress: Any = None) -> Any:
    """Audit a real sampler exactly: every draw it makes forks the enumeration, floats are exact rationals.

    The report's law is the exact law of the implementation as it computes in its own floating
    point (the adapter hands it the laws as float arrays). Rounding is told from bias by one
    definition, algorithmic bias is what stays at higher precision
    (:mod:`exactspec.samplers.rounding`): a sampler computing coarser than float64 (the
    ``precision`` given -- the sampler is then handed its laws in that dtype -- else the one the adapter declares,
    else the coarsest float dtype seen
    handed to it or compared with its uniforms) runs a second time on float64 inputs
    (:meth:`~exactspec.samplers.Adapter.with_precision`) with its uniforms on the float64 lattice,
    and the dtypes meeting its randomness there say whether it casts down. ``biased`` iff that run
    is further than ``tolerance`` (what float64 rounding may cost, 2**-40 by default; 0 demands
    exactness) from the target (or ``expected=``), or an outcome the target never emits appears at
    either precision; a sampler that casts down is held to size-derived float32 bounds instead, and
    between them the verdict is ``undecided`` (exit 3). ``extra["float_boundary"]`` holds the
    decision, ``extra["algorithmic_tv"]`` the TV it rests on, ``extra["float64_run"]`` the second
    run. With ``reference`` (default True here, False in :func:`~exactspec.samplers.search.search_sampler`) the
    adapter's correct reference sampler is audited too, as figures
    only: ``rounding_tv`` (at the sampler's precision, vs the exact rule it implements),
    ``rounding_tv_float32`` / ``rounding_tv_float64``, and ``reference_tv`` (this sampler vs that
    reference); a reference further than 2**-12 from its exact rule is refused as broken.

    ``rng_model`` (default ``"native"``): every draw the interception sees lies on the lattice of the
    library it comes from (numpy and Python's ``random``: ``k * 2**-53``; torch CPU float32:
    ``k * 2**-24``; 0 included), so code that misbehaves when the generator returns exactly 0 is
    caught; ``"continuous"`` or a named lattice (``exactspec.enumerate.rng.RNG_MODELS``) applies one
    model to every draw. ``extra["rng_model"]`` names it and ``extra["rng"]`` (also ``scope["rng"]``)
    says which generators were drawn from, on which lattice.

    ``cache`` (default True): sampler calls with the same inputs are enumerated once (see
    :class:`~exactspec.samplers.instance._Calls`) and the references run as fast rules where the adapter has them
    (``Adapter.fast_reference``); the laws are the same as with ``cache=False``, which runs every
    call (the benchmark's baseline).

    ``tokens`` defaults, as in :func:`exactspec.audit`, to the proposer's ``max_tokens() + 1``
    (every position of a first and a second step observed). ``budget`` (an :class:`exactspec.Budget`)
    bounds the whole audit: its ``seconds`` are shared by the sampler's, the reference's and the
    exact rule's enumerations.

    ``adapter`` (a name or an :class:`~exactspec.samplers.Adapter`): how a step becomes the sampler's
    arguments. Left out, it is ``"numpy"``, checked when the sampler crashes: if it raises on its
    first call there and another registered adapter runs it, :class:`~exactspec.errors.AdapterMismatch`
    (exit 2) names the adapters that fit instead of a crash being reported
    (:mod:`exactspec.samplers.adapters.fit`).

    Every randomness source the sampler can reach is intercepted while it runs, for every
    adapter (:mod:`exactspec.samplers.randomness.interception`): the adapter's ``rng``, Python's ``random``
    and numpy's legacy global functions, and torch's (when torch is imported). A draw the audit
    cannot enumerate, or one that escapes the interception (a reference taken before the audit,
    a generator the sampler holds), raises UnsupportedRandomness; ``sys.exit`` in the sampler
    raises RuleError; neither ever yields a verdict. Audits in several threads at once are safe:
    each thread's draws go to its own audit, and threads with no audit get the real functions.

    ``on_error``: a branch on which the sampler raises is a crash of the sampler on this (valid)
    instance. ``"raise"`` (default): the first one stops the audit with a
    :class:`~exactspec.RuleError` (exit 2) naming the exception, the branch's draws and the
    sampler's line; ``"record"``: every crashing branch is an outcome of its own, reported with
    its exact probability (``extra["error_probability"]``, ``extra["errors"]``,
    ``extra["error_sites"]``) in a report that is never ``lossless`` while it has any (as
    ``es.audit_loop(on_error="record")`` reports a loop's). An exception raised calling the
    sampler, not inside it (a wrong signature), is always an error.

    ``progress``: None or True (default) shows the audit's progress on stderr, by the probability of the
    outcomes decided so far, per run of the sampler (its own precision, then float64 when the float
    boundary runs it again): a bar with an ETA on a terminal past a second, a line every few seconds
    in a log; False nothing; a function ``progress(done, total)`` receives it (percent, of 100).

    One instance is rarely enough: :func:`~exactspec.samplers.search.search_sampler` (``es.search_sampler``)
    searches small ones exactly, returning a minimal Counterexample (of kind ``"crash"`` when the sampler raises on
    some instance), an EmptySearch or an IncompleteSearch; ``search=`` here is a typed error saying so.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> p, q = es.models.context_free(("1/2", "1/2")), es.models.context_free(("1/4", "3/4"))
    >>> r = es.audit_sampler(zoo.shared_uniform, target=p, draft=q, proposer=es.drafts.chain(2), tokens=3)
    >>> r.verdict
    'biased'
    """
    check_budget(budget, "audit_sampler")
    return audit_instance(sampler, adapter=adapter, target=target, draft=draft, proposer=proposer, prompt=prompt,
                          tokens=tokens, rng_model=rng_model, expected=expected, reference=reference,
                          tolerance=tolerance, budget=budget, precision=precision, cache=cache, on_error=on_error,
                          progress=progress)
