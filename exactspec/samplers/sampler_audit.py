"""``audit_sampler``: the exact law of a third-party sampler, run under the enumerating randomness.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
>>> r = es.audit_sampler(es.samplers.reference_numpy_chain, adapter="numpy", target=p, draft=q,
...                      proposer=es.drafts.chain(1), tokens=1)
>>> r.verdict, r.extra["algorithmic_tv"]
('lossless', '0')
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import fields, replace
from fractions import Fraction
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .._audit import AuditInputs, audit, run_audit, validate_audit
from .._crash import CrashReport
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ..laws import to_rational, total_variation
from ..models import Model
from ..report import AuditReport
from ..rules import Rule
from .adapters import get_adapter
from .base import PRECISIONS, float_precision, lowest, precision_of
from .interception import current_session, intercepting, private_generators, watch

__all__ = ["audit_sampler", "ROUNDING_TOLERANCE"]

#: a float64 implementation of a correct rule lands within this TV of the target on small instances;
#: biases above it are algorithmic (stated in every sampler report)
ROUNDING_TOLERANCE = Fraction(1, 2 ** 40)

#: the most float rounding may cost a correct reference sampler on the small instances audits run:
#: a reference further than this from its exact rule makes the audit refuse (a broken baseline)
ROUNDING_CAP = Fraction(1, 2 ** 12)

#: the search behind ``audit_sampler(search=True)``; :mod:`exactspec.samplers.sampler_search` installs it
#: when imported (``exactspec.samplers`` imports it), so this module does not import the search above it
_SEARCH: list[Callable[..., Any]] = []


#: the float precision of a number by its type (numpy scalars, Python numbers), filled as types come
_BY_TYPE: dict = {}


class _Calls:
    """The sampler as a rule: each call a watched branch (escaped randomness raises; ``sys.exit`` is a RuleError).

    Precision: with ``seen`` (a set), the float precisions of the arrays handed to the sampler and
    of the numbers it compares its uniforms with are noted in it (:func:`~.base.float_precision`).

    Cache (``cache=True``): a call's law depends only on its inputs (``adapter.call_key``: the drafts
    and the laws handed over) and on its own draws, as replay already assumes (an adapter whose call
    reads more of the step sets ``cacheable = False``). The branches of one call are consecutive in
    the enumeration: the first reaches the call with nothing left to replay, the others replay into
    it. Each branch's output and weight are noted; when the same input comes again, the weights of its
    outputs are added up and, if they make exactly the weight the branch had on reaching the call
    (every branch of the call seen), the input's output law is complete: this call, and every later
    one with that input (another horizon of the same state, another state with the same laws), is one
    categorical draw over it, the sampler not run. Outputs are drawn in the order they first came out,
    so the step laws (and the report) are the same as without the cache, key order included.
    """

    def __init__(self, sampler: Callable, adapter: Any, name: str, *, cache: bool = False,
                 seen: set | None = None) -> None:
        self.sampler, self.adapter, self.name, self.cache, self.seen = sampler, adapter, name, cache, seen
        self.private = private_generators(getattr(sampler, "__wrapped__", sampler))
        self.session = current_session()
        self.runs = 0          # sampler calls made
        self.hits = 0          # calls answered from the cache
        # call key -> [False, laws kept alive, [(output, weight)], weight at the call, key] while noted,
        #             [True, laws kept alive, outputs, their probabilities] once complete
        self._laws: dict = {}
        self._open: list | None = None
        self.fn = self._observed(sampler) if seen is not None else sampler

    def rule(self) -> Rule:
        return Rule(self.run if self.cache else self.direct, name=self.name, family=self.adapter.family,
                    claim="lossless", description=f"{self.name} through the {self.adapter.name} adapter")

    def _observed(self, sampler: Callable) -> Callable:
        seen = self.seen

        @functools.wraps(sampler)
        def observed(*args: Any, **kwargs: Any) -> Any:
            if self.runs <= 64:     # the adapter hands the same dtypes on every call
                p = float_precision((args, kwargs), 4)
                if p is not None:
                    seen.add(p)
            return sampler(*args, **kwargs)
        return observed

    def _note(self, x: Any) -> None:
        """The rng's observer: the precision of a number compared with (or combined with) a uniform."""
        t = type(x)
        p = _BY_TYPE.get(t, False)
        if p is False:              # not a type seen before (a tensor's precision is its dtype's: not by type)
            p = precision_of(x)
            if t in (float, int, bool, Fraction) or issubclass(t, np.generic):
                _BY_TYPE[t] = p
        if p is not None:
            self.seen.add(p)

    def direct(self, step: Any, rng: Any) -> list[int]:
        """One real call of the sampler on this branch."""
        self.runs += 1
        if self.seen is not None:
            rng.observe = self._note
        with watch(rng, self.name, self.private, self.session):
            try:
                return self.adapter.call(self.fn, step, rng)
            except SystemExit as exc:
                raise RuleError(f"sampler {self.name} called sys.exit({exc.code!r}) (raised SystemExit) while "
                                "audited; a sampler must return the tokens it emits, not end the process",
                                rule=self.name) from exc

    def run(self, step: Any, rng: Any) -> list[int]:
        got = self.adapter.call_key(step)        # draws the whole step (drafts, tree) on this branch first
        if got is None:
            return self.direct(step, rng)
        key, laws = got
        # nothing left to replay: the first branch of this call's subtree (a later one replays into the call),
        # so the branches of the input before it are over, and the weight here is the prefix's: each later
        # branch of the same input shares that prefix, and its weight after the call over this one is its
        # output's share (the product of the sampler's own draws)
        fresh = rng._pos >= rng._n
        if fresh:
            self._open = None                    # its law is added up if the input comes again
        entry = self._laws.get(key)
        if entry is not None and not entry[0] and entry is not self._open:
            self._close(entry)                   # met again after its branches: complete, or forgotten
            entry = self._laws.get(key)
        if entry is not None and entry[0]:
            self.hits += 1
            return list(entry[2][rng.categorical(entry[3])])
        if entry is None:
            if not fresh:
                return self.direct(step, rng)
            entry = self._laws[key] = self._open = [False, laws, [], rng.weight, key]
        out = self.direct(step, rng)
        entry[2].append((tuple(out), rng.weight))
        return out

    def _close(self, entry: list) -> None:
        """An input's branches are over: its output law when their weights add up to the weight at entry."""
        weights: dict = {}
        for t, w in entry[2]:
            weights[t] = weights.get(t, 0) + w
        if sum(weights.values()) != entry[3]:    # interrupted (or not a function of inputs and draws): forget it
            del self._laws[entry[4]]
            return
        order = list(weights)                    # first-come order; the rng takes the first option and pushes
        order = order[:1] + order[:0:-1]         # the rest, which come back last-pushed first
        entry[:] = [True, entry[1], order, tuple(weights[o] / entry[3] for o in order)]


def audit_sampler(sampler: Callable, *, adapter: Any = "numpy", target: Model | None = None,
                  draft: Model | None = None, proposer: Any = None, prompt: Sequence[int] = (), tokens: int | None = None,
                  rng_model: str = "continuous", expected: Model | None = None, reference: bool = True,
                  tolerance: Any = ROUNDING_TOLERANCE, budget: Budget | None = None, search: bool = False,
                  precision: str | None = None, cache: bool = True, on_error: str = "raise") -> Any:
    """Audit a real sampler exactly: every draw it makes forks the enumeration, floats are exact rationals.

    The report's law is the exact law of the implementation as it computes in its own floating
    point (the adapter hands it the laws as float arrays). To separate algorithmic bias from
    rounding, the adapter's correct reference sampler runs on the same instance *at the precision
    the sampler computes in*: ``precision`` if given, else the one the adapter declares
    (``Adapter.precision`` or its ``dtype``), else the coarsest float dtype seen in the arrays
    handed to the sampler and in the numbers it compares its uniforms with (float64 when none is
    seen). ``extra`` holds ``precision`` (and ``precision_from``, how it was found),
    ``rounding_tv`` (the reference sampler at that precision vs the exact rule it implements, same
    proposer and generator: what float arithmetic alone costs), ``rounding_tv_float32`` and
    ``rounding_tv_float64`` (the same at each precision), ``algorithmic_tv`` (this sampler vs that
    reference sampler; with ``expected=``, vs the declared law, since the reference implements the
    target: ``algorithmic_tv_against`` says which) and ``sampler_calls``. The verdict is
    ``lossless`` (up to rounding) when the TV to the target is at most ``max(tolerance,
    2 * rounding_tv)`` (``tolerance`` 2**-40 by default; 0 with ``reference=False`` demands
    exactness; ``extra["tolerance_from"]`` says which of the two applied); a support violation (an
    outcome the target never emits) always makes it ``biased``, whatever its size.

    ``cache`` (default True): sampler calls with the same inputs are enumerated once (see
    :class:`_Calls`) and the references run as fast rules where the adapter has them
    (``Adapter.fast_reference``); the laws are the same as with ``cache=False``, which runs every
    call (the benchmark's baseline).

    ``tokens`` defaults, as in :func:`exactspec.audit`, to the proposer's ``max_tokens() + 1``
    (every position of a first and a second step observed). ``budget`` (an :class:`exactspec.Budget`)
    bounds the whole audit: its ``seconds`` are shared by the sampler's, the reference's and the
    exact rule's enumerations.

    Every randomness source the sampler can reach is intercepted while it runs, for every
    adapter (:mod:`exactspec.samplers.interception`): the adapter's ``rng``, Python's ``random``
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

    ``search=True``: no single instance but an exact search over small ones, returning a minimal
    Counterexample (of kind ``"crash"`` when the sampler raises on some instance), an EmptySearch
    or an IncompleteSearch (:mod:`exactspec.samplers.sampler_search`).
    """
    if search:  # the search chooses target, draft, prompt and tokens; it audits each instance through here
        given = {k: v for k, v in locals().items() if k not in ("sampler", "search")}
        return _SEARCH[0](sampler, **given)
    adapter = get_adapter(adapter)
    name = getattr(sampler, "__name__", "sampler")
    tol = to_rational(tolerance, "audit_sampler tolerance")
    if tol < 0:
        raise ExactSpecError(f"audit_sampler tolerance must be >= 0, got {tolerance!r}")
    if proposer is None:
        from ..drafts import chain, tree
        proposer = chain(4) if adapter.family == "chain" else tree((2, 2, 1))
    # the instance is validated once, before any randomness is patched, for a rule of the adapter's family and
    # claim: the sampler's and its reference's audits share it (their rules, built inside the interception,
    # have that family and claim); the exact rule's audit validates again, for its own rule and field
    inputs = validate_audit(target=target, draft=draft, proposer=proposer, prompt=prompt, tokens=tokens,
                            expected=expected, rng_model=rng_model, backend="python",
                            rule=Rule(_stand_in, name=name, family=adapter.family, claim="lossless"))
    if getattr(adapter, "needs_torch", False):
        from . import torch_rng  # noqa: F401  (imports torch, so the interception patches it too)
    if on_error not in ("raise", "record"):
        raise ExactSpecError(f"audit_sampler on_error must be 'raise' or 'record', got {on_error!r}")
    if precision is not None and precision not in PRECISIONS:
        raise ExactSpecError(f"audit_sampler precision must be one of {', '.join(PRECISIONS)} (or None: detected), "
                             f"got {precision!r}")
    with intercepting() as session, _one_torch_thread():
        report = _audit_sampler(sampler, adapter, name, inputs, expected, _Shared(budget), tol, reference,
                                precision, bool(cache), on_error)
        if session.approximations:   # stated in the report and its warnings, never hidden in a verdict
            report.extra["approximations"] = dict(session.approximations)
        return report


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads spin on the tiny tensors an audit makes: one thread for the audit, restored after.

    (Measured on transformers' sampler at vocab 3, gamma 3, 3 tokens on 2 busy cores: 103 s with torch's
    default threads, 0.27 s with one.)
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _stand_in(step: Any, rng: Any) -> list[int]:  # pragma: no cover - validated, never run
    """The sampler's rule as validation sees it; the real one is bound inside the interception."""
    raise AssertionError("the stand-in rule of a sampler audit never runs")


class _Shared:
    """One budget for the three audits of a sampler audit: each gets the seconds the others left."""

    def __init__(self, budget: Budget | None) -> None:
        self.budget, self.start = budget or Budget(), time.perf_counter()

    def next(self) -> Budget:
        b = self.budget
        if b.seconds is None:
            return b
        left = b.seconds - (time.perf_counter() - self.start)
        if left <= 0:
            raise BudgetExceeded("seconds", b.seconds, covered={"done": "the sampler's own audit"})
        return Budget(paths=b.paths, depth=b.depth, seconds=left, outcomes=b.outcomes)


def _audit_sampler(sampler: Callable, adapter: Any, name: str, inputs: AuditInputs, expected: Model | None,
                   shared: "_Shared", tolerance: Any, reference: bool, precision: str | None = None,
                   cache: bool = True, on_error: str = "raise") -> AuditReport:
    declared = precision or adapter.declared_precision()
    calls = _Calls(sampler, adapter, name, cache=cache, seen=None if declared else set())
    report = run_audit(replace(inputs, rule=calls.rule()), budget=shared.next(), exact_floats=True,
                       on_error=on_error)
    if on_error == "record":   # crashes recorded with their probability: never lossless while there are any
        report = CrashReport(**{f.name: getattr(report, f.name) for f in fields(report)})
    report.tolerance = tolerance
    extra = report.extra
    if declared:
        prec, source = declared, "given" if precision else f"declared by the {adapter.name} adapter"
    else:
        prec = lowest(calls.seen) or "float64"
        source = ("detected: the coarsest float dtype handed to the sampler or compared with its uniforms"
                  if calls.seen else "default: no float array or float dtype seen")
    extra["precision"], extra["precision_from"] = prec, source
    if reference and adapter.reference is not None and adapter.reference_rule is not None:
        exact = audit(rule=adapter.reference_rule, budget=shared.next(), target=inputs.target, draft=inputs.draft,
                      proposer=inputs.proposer, prompt=inputs.prompt, tokens=inputs.tokens, expected=expected,
                      rng_model=inputs.rng_model, exact_floats=True)
        extra["exact_rule"] = adapter.reference_rule.name
        ref_law = None
        for p in sorted({prec, "float32", "float64"}, key=PRECISIONS.index):
            try:
                ref = _reference(adapter, p, inputs, shared, cache)
            except BudgetExceeded:
                raise
            except ExactSpecError as exc:   # the baseline at the sampler's precision is needed; another is a figure
                if p == prec:
                    raise
                extra[f"rounding_tv_{p}"] = f"unavailable: the reference at {p} failed ({exc})"
                continue
            extra[f"rounding_tv_{p}"] = str(total_variation(ref.output, exact.output))
            if p == prec:
                ref_law = ref.output
        rounding = Fraction(extra[f"rounding_tv_{prec}"])
        if rounding > ROUNDING_CAP:
            # a correct sampler far from its exact rule is a broken baseline, not rounding: allowing twice it
            # would pass a biased sampler (no false pass)
            raise ExactSpecError(
                f"the {adapter.name} adapter's reference sampler at {prec} lands TV {float(rounding):.6g} from its "
                f"exact rule {adapter.reference_rule.name} on this instance, more than float rounding can cost "
                f"(at most 2**-{ROUNDING_CAP.denominator.bit_length() - 1}): the rounding baseline is unusable, so "
                "no verdict (check the adapter's reference and reference_rule; reference=False audits without one)")
        extra["rounding_tv"] = str(rounding)
        if expected is None:
            extra["algorithmic_tv"] = str(total_variation(report.output, ref_law))
            extra["algorithmic_tv_against"] = f"the reference sampler at {prec}"
        else:   # the reference sampler implements the target: the bias is measured against the declared law
            extra["algorithmic_tv"] = str(report.tv)
            extra["algorithmic_tv_against"] = "the declared law (expected=)"
        # what the float pipeline and the generator cost a correct sampler is not the sampler's bias
        if 2 * rounding > tolerance:
            report.tolerance = 2 * rounding
            extra["tolerance_from"] = f"twice what {prec} rounding costs a correct sampler on the same pipeline"
        else:
            extra["tolerance_from"] = (f"{_floor_text(tolerance)}, above twice what {prec} rounding costs a correct "
                                       "sampler on the same pipeline")
    else:
        extra["tolerance_from"] = _floor_text(tolerance)
    extra["sampler_calls"] = calls.runs
    if calls.hits:
        extra["cached_calls"] = calls.hits
    extra["adapter"] = adapter.name
    extra["rng_model"] = inputs.rng_model
    if hasattr(adapter, "resolution"):
        extra["resolution"] = adapter.resolution(inputs.rng_model)
    extra["tolerance"] = str(report.tolerance)
    return report


def _floor_text(tolerance: Fraction) -> str:
    """How the tolerance floor reads in a report: "the 2**-40 floor", "exactness (tolerance 0)", ...

    >>> _floor_text(ROUNDING_TOLERANCE), _floor_text(Fraction(0)), _floor_text(Fraction(1, 10))
    ('the 2**-40 floor', 'exactness (tolerance 0)', 'the tolerance 1/10')
    """
    if tolerance == 0:
        return "exactness (tolerance 0)"
    n = tolerance.denominator.bit_length() - 1
    if tolerance.numerator == 1 and tolerance.denominator == 1 << n:
        return f"the 2**-{n} floor"
    return f"the tolerance {tolerance}"


def _reference(adapter: Any, precision: str, inputs: AuditInputs, shared: "_Shared", cache: bool) -> AuditReport:
    """The reference sampler's audit at ``precision``: a fast rule when the adapter has one (and ``cache``),
    else the reference through the adapter and the interception, as the sampler ran."""
    fast = adapter.fast_reference(precision) if cache else None
    if fast is not None:
        rule = Rule(fast, name="reference", family=adapter.family, claim="lossless",
                    description=f"the {adapter.name} adapter's reference sampler at {precision}, as a rule")
    else:
        rule = _Calls(adapter.reference_at(precision), adapter, "reference", cache=cache).rule()
    return run_audit(replace(inputs, rule=rule), budget=shared.next(), exact_floats=True)
