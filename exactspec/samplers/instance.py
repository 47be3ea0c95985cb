"""The audit of a sampler on one instance: its exact law, run under the enumerating randomness.

:func:`audit_instance` is what :func:`exactspec.audit_sampler` (:mod:`exactspec.samplers.audit`) runs
for one instance and what the search (:mod:`exactspec.samplers.search`) runs on each of its instances;
this module imports neither of them (they sit above it).

>>> import exactspec as es
>>> from fractions import Fraction as F, Fraction
>>> p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
>>> r = es.audit_sampler(es.samplers.reference_numpy_chain, adapter="numpy", target=p, draft=q,
...                      proposer=es.drafts.chain(1), tokens=1)
>>> r.verdict, 0 < Fraction(r.extra["algorithmic_tv"]) < Fraction(1, 2 ** 40)    # float64 rounding
('lossless', True)
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import fields, replace
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np

from .._audit import AuditInputs, audit, run_audit, validate_audit
from .._crash import CrashReport
from .._device import one_torch_thread as _one_torch_thread
from ..enumerate import Budget
from ..enumerate.step import check_budget
from ..errors import BudgetExceeded, ExactSpecError, InvalidValue, RuleError
from ..laws import to_rational, total_variation
from ..models import Model
from ..report import AuditReport
from ..rules import Rule
from .adapters.registry import get_adapter
from .adapters.fit import DEFAULT_ADAPTER, check_default_adapter
from ..enumerate.rng import DeferredToken, lattice_for
from .adapters.base import PRECISIONS, at_precision, float_precision, lowest, precision_of
from .randomness.precision_watch import lifting, user_site, watching
from .rounding import (F64_ALLOWANCE, ROUNDING_CAP, Boundary, coarser_than_float64, decide, rounding_cap,
                       rounding_allowance)
from .randomness.interception import (FLOAT64_LATTICE, current_session, describe_rng_model, intercepting, private_generators,
                           watch)

__all__ = ["audit_instance", "ROUNDING_TOLERANCE"]

#: a float64 implementation of a correct rule lands within this TV of the target on small instances;
#: biases above it are algorithmic (stated in every sampler report)
ROUNDING_TOLERANCE = F64_ALLOWANCE


#: the float precision of a number by its type (numpy scalars, Python numbers), filled as types come
_BY_TYPE: dict = {}


class _Calls:
    """The sampler as a rule: each call a watched branch (escaped randomness raises; ``sys.exit`` is a RuleError).

    Precision: with ``seen`` (a set), the float precisions of the arrays handed to the sampler and
    of the numbers it compares its uniforms with are noted in it (:func:`~.adapters.base.float_precision`).

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
                 seen: set | None = None, arguments: bool = True, watch: bool = False, sites: dict | None = None,
                 lift: bool = False, lifted: Callable[[str, str], None] | None = None) -> None:
        self.sampler, self.adapter, self.name, self.cache, self.seen = sampler, adapter, name, cache, seen
        self.sites: dict = {} if sites is None else sites   # precision -> where the sampler first met it
        # the most significant bits of a Python float compared with a uniform and of a float handed to the sampler,
        # and where the first compared float of float32's width (12..24 bits) was: precision seen by value
        self.compared_bits = self.handed_bits = 0
        self.compared_site: str | None = None
        self.private = private_generators(getattr(sampler, "__wrapped__", sampler))
        self.session = current_session()
        self.runs = 0          # sampler calls made
        self.hits = 0          # calls answered from the cache
        # call key -> [False, laws kept alive, [(output, weight, None) or (tokens before a deferred last draw,
        #             weight, its values)], weight at the call, key] while noted,
        #             [True, laws kept alive, outputs, their probabilities] once complete
        self._laws: dict = {}
        self._open: list | None = None
        # the dtypes handed over are noted too unless the caller chose them (the float64 run: a float32 mask
        # among the adapter's tensors is not the sampler casting down)
        self.fn = self._observed(sampler, seen) if seen is not None and arguments else \
            self._handed(sampler) if seen is not None else sampler
        if watch and seen is not None:        # every torch operation of the sampler watched (precision_watch)
            self.fn = _watched(self.fn, seen, self.sites, lift, lifted)

    def rule(self) -> Rule:
        return Rule(self.run if self.cache else self.direct, name=self.name, family=self.adapter.family,
                    claim="lossless", description=f"{self.name} through the {self.adapter.name} adapter")

    def _observed(self, sampler: Callable, seen: set) -> Callable:
        """``sampler`` noting in ``seen`` the float precisions handed to it (its first 64 calls), once per signature."""

        signatures: set = set()     # argument types and dtypes whose precision is noted already

        @functools.wraps(sampler)
        def observed(*args: Any, **kwargs: Any) -> Any:
            if self.runs <= 64:     # the adapter hands the same dtypes on every call
                sig = _flat_signature(args, kwargs)
                if sig is None or sig not in signatures:
                    self.handed_bits = max(self.handed_bits, _widest((args, kwargs), 4))
                    p = float_precision((args, kwargs), 4)
                    if p is not None:
                        seen.add(p)
                        self.sites.setdefault(p, "the inputs the adapter hands")
                    if sig is not None:
                        signatures.add(sig)
            return sampler(*args, **kwargs)
        return observed

    def _handed(self, sampler: Callable) -> Callable:
        """``sampler`` noting the most significant bits of the floats handed to it (its first 64 calls)."""
        @functools.wraps(sampler)
        def handed(*args: Any, **kwargs: Any) -> Any:
            if self.runs <= 64:
                self.handed_bits = max(self.handed_bits, _widest((args, kwargs), 4))
            return sampler(*args, **kwargs)
        return handed

    def _note(self, x: Any) -> None:
        """The rng's observer: the precision of a number compared with (or combined with) a uniform."""
        t = type(x)
        if t is float:
            b = _significant_bits(x)
            if b > self.compared_bits:
                self.compared_bits = b
            if self.compared_site is None and 11 < b <= 24:
                self.compared_site = user_site(2)
        p = _BY_TYPE.get(t, False)
        if p is False:              # not a type seen before (a tensor's precision is its dtype's: not by type)
            p = precision_of(x)
            if t in (float, int, bool, Fraction) or issubclass(t, np.generic):
                _BY_TYPE[t] = p
        seen = self.seen
        if p is not None and seen is not None:     # a set: the observer is installed only with one (direct)
            seen.add(p)
            if p != "float64" and p not in self.sites:
                self.sites[p] = user_site(2)

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
        if out and type(out[-1]) is DeferredToken:   # left undrawn (the engine spreads it): each of its values,
            entry[2].append((tuple(out[:-1]), rng.weight, out[-1].values()))   # weighed if the input comes again
        else:
            entry[2].append((tuple(out), rng.weight, None))
        return out

    def _close(self, entry: list) -> None:
        """An input's branches are over: its output law when their weights add up to the weight at entry."""
        weights: dict = {}
        for t, w, values in entry[2]:
            if values is None:
                weights[t] = weights.get(t, 0) + w
                continue
            for v, pv in values:
                k = t + (v,)
                weights[k] = weights.get(k, 0) + w * pv
        if sum(weights.values()) != entry[3]:    # interrupted (or not a function of inputs and draws): forget it
            del self._laws[entry[4]]
            return
        order = list(weights)                    # first-come order; the rng takes the first option and pushes
        order = order[:1] + order[:0:-1]         # the rest, which come back last-pushed first
        entry[:] = [True, entry[1], order, tuple(weights[o] / entry[3] for o in order)]


def _significant_bits(x: float) -> int:
    """The significant bits of a float: 1 for 0.5, 24 for a float32 number that needs all of float32's, 53 for 1/3.

    >>> _significant_bits(0.5), _significant_bits(float(np.float32(0.1))), _significant_bits(1 / 3)
    (1, 24, 53)
    """
    try:
        n, _ = x.as_integer_ratio()
    except (OverflowError, ValueError):     # inf, nan
        return 0
    n = abs(n)
    return (n >> ((n & -n).bit_length() - 1)).bit_length() if n else 0


def _widest(obj: Any, depth: int) -> int:
    """The most significant bits among the float64 arrays, tensors and floats in ``obj`` (containers ``depth`` deep)."""
    if isinstance(obj, float):
        return _significant_bits(obj)
    if precision_of(obj) == "float64":
        return max((_significant_bits(float(v)) for v in np.asarray(obj.tolist(), dtype=np.float64).ravel()),
                   default=0)
    if depth and isinstance(obj, (list, tuple, dict)):
        items = obj.values() if isinstance(obj, dict) else obj
        return max((_widest(c, depth - 1) for c in items), default=0)
    if depth and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return max((_widest(getattr(obj, f.name), depth - 1) for f in fields(obj)), default=0)
    return 0


def _by_value(calls: "_Calls") -> str | None:
    """The precision a float64 run's numbers show by value: every float compared with a uniform is a float32 (or
    float16) number, needing more than the next coarser format's bits, while the laws handed need more: the code
    rounds to that format where no dtype shows it (``.item()`` of a float32 array, ``float(np.float32(x))``)."""
    b = calls.compared_bits
    if 11 < b <= 24 < calls.handed_bits:
        return "float32"
    if 8 < b <= 11 < calls.handed_bits:
        return "float16"
    return None


def _flat_signature(args: tuple, kwargs: dict) -> tuple | None:
    """The types and dtypes of a call's arguments when none is a container :func:`~.base.float_precision` searches
    (then equal signatures have equal float precisions); None otherwise."""
    sig = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple, dict)) or (dataclasses.is_dataclass(a) and not isinstance(a, type)):
            return None
        sig.append((type(a), a.dtype if precision_of(a) is not None else None))
    return tuple(sig), tuple(kwargs)


def audit_instance(sampler: Callable, *, adapter: Any = None, target: Model | None = None,
                   draft: Model | None = None, proposer: Any = None, prompt: Sequence[int] = (),
                   tokens: int | None = None, rng_model: str = "native", expected: Model | None = None,
                   reference: bool | None = None, tolerance: Any = ROUNDING_TOLERANCE, budget: Budget | None = None,
                   precision: str | None = None, cache: bool = True, on_error: str = "raise",
                   progress: Any = None) -> AuditReport:
    """Audit a real sampler exactly on one instance: what :func:`exactspec.audit_sampler` runs.

    The arguments are :func:`~exactspec.samplers.audit.audit_sampler`'s (documented there); the search
    (:mod:`exactspec.samplers.search`) audits each of its instances through this.

    >>> import exactspec as es
    >>> r = audit_instance(es.samplers.reference_numpy_chain, adapter="numpy", tokens=1,
    ...                    target=es.models.context_free(("3/5", "2/5")), draft=es.models.context_free(("1/2", "1/2")),
    ...                    proposer=es.drafts.chain(1))
    >>> r.verdict
    'lossless'
    """
    check_budget(budget, "audit_sampler")
    reference = True if reference is None else bool(reference)
    explicit = adapter is not None
    adapter = get_adapter(DEFAULT_ADAPTER if adapter is None else adapter)
    adapter.check_rng_model(rng_model)      # a model the adapter cannot enumerate: refused, never replaced
    name = getattr(sampler, "__name__", "sampler")
    tol = to_rational(tolerance, "audit_sampler tolerance")
    if tol < 0:
        raise InvalidValue(f"audit_sampler tolerance must be >= 0, got {tolerance!r}")
    if proposer is None:
        from ..drafts import chain, tree
        proposer = chain(4) if adapter.family == "chain" else tree((2, 2, 1))
    # the instance is validated once, before any randomness is patched, for a rule of the adapter's family and
    # claim: the sampler's and its reference's audits share it (their rules, built inside the interception,
    # have that family and claim); the exact rule's audit validates again, for its own rule and field
    # (target may still be None: validate_audit refuses anything but a model with an InvalidType naming it)
    inputs = validate_audit(target=target, draft=draft, proposer=proposer, prompt=prompt,  # type: ignore[arg-type]
                            tokens=tokens, expected=expected, rng_model=rng_model, backend="python",
                            rule=Rule(_stand_in, name=name, family=adapter.family, claim="lossless"))
    if getattr(adapter, "needs_torch", False):
        from .torch_draws import torch_rng  # noqa: F401  (imports torch, so the interception patches it too)
    if on_error not in ("raise", "record"):
        raise InvalidValue(f"audit_sampler on_error must be 'raise' or 'record', got {on_error!r}")
    if precision is not None and precision not in PRECISIONS:
        raise InvalidValue(f"audit_sampler precision must be one of {', '.join(PRECISIONS)} (or None: detected), "
                           f"got {precision!r}")
    fit = dict(target=inputs.target, draft=inputs.draft, proposer=inputs.proposer, prompt=inputs.prompt,
               rng_model=rng_model)
    try:
        with intercepting() as session, _one_torch_thread():
            report = _audit_sampler(sampler, adapter, name, inputs, expected, _Shared(budget), tol, reference,
                                    precision, bool(cache), on_error, progress)
            if session.approximations:   # stated in the report and its warnings, never hidden in a verdict
                report.extra["approximations"] = dict(session.approximations)
    except RuleError as exc:   # under the default adapter: one that cannot call the sampler is a usage error
        if not explicit:
            check_default_adapter(sampler, adapter, failure=exc, **fit)
        raise
    if not explicit and report.extra.get("error_probability", "0") != "0":     # crashes recorded: the same check
        check_default_adapter(sampler, adapter, **fit)
    return report


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
                   cache: bool = True, on_error: str = "raise", progress: Any = False) -> AuditReport:
    declared = precision or adapter.declared_precision()
    own_sampler, own_adapter = _handing(sampler, adapter, precision)
    calls = _Calls(own_sampler, own_adapter, name, cache=cache, seen=None if declared else set())
    report = run_audit(replace(inputs, rule=calls.rule()), budget=shared.next(), exact_floats=True,
                       on_error=on_error, progress=progress, what=f"audit_sampler {name}")
    if on_error == "record":   # crashes recorded with their probability: never lossless while there are any
        report = CrashReport(**{f.name: getattr(report, f.name) for f in fields(report)})
    extra = report.extra
    session = current_session()     # the generators the sampler itself drew from (not the references below)
    used = set(session.lattices) if session else set()
    extra["rng"] = report.scope["rng"] = describe_rng_model(inputs.rng_model, used)
    if declared:
        prec, source = declared, "given" if precision else f"declared by the {adapter.name} adapter"
    else:
        prec = lowest(calls.seen) or "float64"
        source = ("detected: the coarsest float dtype handed to the sampler or compared with its uniforms"
                  if calls.seen else "default: no float array or float dtype seen")
    extra["precision"], extra["precision_from"] = prec, source
    # the floor the adapter's own enumeration resolves the law to (a race followed to float32 ulps): the float64 run
    # cannot be judged finer than that, whatever rounding would allow
    floor = adapter.resolution_floor(inputs.rng_model, tokens=inputs.tokens)
    held, held_from = tolerance, "float64 rounding"
    if floor is not None:
        extra["resolution_floor"], extra["resolution_floor_from"] = str(floor[0]), floor[1]
        if floor[0] > tolerance:
            held, held_from = floor
    boundary = _float_boundary(sampler, adapter, name, inputs, report, prec, calls, shared, held, cache, used,
                               on_error, progress, tolerance_from=held_from)
    extra["float_boundary"] = boundary.to_dict()
    extra["algorithmic_tv"] = str(boundary.algorithmic_tv)
    extra["algorithmic_tv_against"] = ("the declared law (expected=)" if expected is not None else "the target law") + (
        " from the run on float64 inputs" if boundary.f64_tv is not None else "")
    report.tolerance = boundary.allowance
    extra["tolerance_from"] = boundary.reason
    if reference and adapter.reference is not None and adapter.reference_rule is not None:
        ref_law = _rounding_figures(adapter, prec, inputs, expected, shared, cache, extra)
        extra["reference_tv"] = str(total_variation(report.output, ref_law))
    extra["sampler_calls"] = calls.runs
    if calls.hits:
        extra["cached_calls"] = calls.hits
    extra["adapter"] = adapter.name
    extra["rng_model"] = inputs.rng_model
    if hasattr(adapter, "resolution"):
        extra["resolution"] = adapter.resolution(inputs.rng_model)
    extra["tolerance"] = str(report.tolerance)
    return report


def _handing(sampler: Callable, adapter: Any, precision: str | None) -> tuple[Callable, Any]:
    """The sampler and adapter that hand the sampler its laws in ``precision`` (None: as the adapter hands them).

    An adapter that can hand that precision does (:meth:`~.adapters.base.Adapter.with_precision`); otherwise the
    sampler's float arguments are cast to it (:func:`~.adapters.base.at_precision`). numpy has no bfloat16: a numpy
    adapter asked for it is refused.
    """
    if precision is None or precision == adapter.declared_precision():
        return sampler, adapter
    other = adapter.with_precision(precision)
    if other is not None and other.declared_precision() == precision:
        return sampler, other
    if precision == "bfloat16" and not getattr(adapter, "needs_torch", False):
        raise InvalidValue(f"audit_sampler precision 'bfloat16': the {adapter.name} adapter hands numpy arrays, and "
                           "numpy has no bfloat16; choose float16, float32 or float64, or a torch adapter")
    return at_precision(sampler, precision), adapter


def _watched(sampler: Callable, seen: set, sites: dict | None = None, lift: bool = False,
             lifted: Callable[[str, str], None] | None = None) -> Callable:
    """``sampler`` noting in ``seen`` (and ``sites``) each dtype coarser than float64 that meets float64 data in its
    torch operations; with ``lift``, its casts to a coarser float dtype lifted to float64 (``lifted`` told of each)."""
    @functools.wraps(sampler)
    def watched(*args: Any, **kwargs: Any) -> Any:
        with lifting(lifted, seen.add, sites) if lift else watching(seen.add, sites):
            return sampler(*args, **kwargs)
    return watched


def _float_boundary(sampler: Callable, adapter: Any, name: str, inputs: AuditInputs, report: AuditReport,
                    prec: str, calls: "_Calls", shared: "_Shared", tolerance: Fraction, cache: bool,
                    used: set, on_error: str = "raise", progress: Any = False,
                    tolerance_from: str = "float64 rounding") -> Boundary:
    """Rounding or bias: the sampler run again on float64 inputs and a float64 generator when it computed coarser.

    The run at the sampler's own precision is ``report``; a second run hands the same sampler float64
    laws (:meth:`~.adapters.base.Adapter.with_precision`) and draws its uniforms on the float64 lattice (or the
    continuous model, as the first run did), every torch operation watched
    (:mod:`~.randomness.precision_watch`): a dtype coarser than float64 met there (at the draws, or meeting float64
    data in an operation: a cast down and back, a float32 or numpy float32 constant) means the sampler casts down.
    Then a third run lifts the sampler's own casts to float64 (:func:`~.randomness.precision_watch.lifting`): when
    nothing coarser is met any more, that run is the algorithm at float64 and decides alone (bias and rounding
    separated exactly); otherwise (a cast it cannot lift: numpy, a constant made before the call) the verdict is
    :func:`~.rounding.decide`'s size-derived bounds at the coarsest precision met. ``used``: the (generator,
    lattice) pairs the first run drew from under the ``native`` model. ``tolerance_from``: what
    ``tolerance`` stands for (float64 rounding, or the floor the adapter resolves to), passed to ``decide``.
    """
    if inputs.rng_model == "native":
        coarse_generator = any(lat is not FLOAT64_LATTICE for _, lat in used)
    else:
        coarse_generator = inputs.lattice is not None and inputs.rng_model != "float64"
    extra = report.extra
    if report.tv == 0:      # exactly the expected law as it ships: nothing for a second run to separate
        return decide(precision=prec, own_tv=report.tv, own_violations=False, f64_tv=None, f64_violations=False,
                      forced=False, tolerance=tolerance, tolerance_from=tolerance_from, allowance=tolerance)
    import sys
    torch_code = "torch" in sys.modules and adapter.watch_operations
    adapter64 = adapter.with_precision("float64")
    fn = sampler if adapter64 is not None else at_precision(sampler, "float64")
    model = ("native-float64" if inputs.rng_model == "native" else
             "float64" if inputs.lattice is not None else "continuous")

    def run64(what: str, lift: bool) -> tuple[AuditReport, "_Calls", dict]:
        sites: dict = {}
        c = _Calls(fn, adapter64 or adapter, name, cache=cache, seen=set(), arguments=False, watch=torch_code,
                   sites=sites, lift=lift, lifted=lambda p, site: lifts.setdefault(p, site))
        r = run_audit(replace(inputs, rule=c.rule(), rng_model=model, lattice=lattice_for(model)),
                      budget=shared.next(), exact_floats=True, on_error=on_error,   # a crash: recorded there too
                      progress=progress, what=f"audit_sampler {name} ({what})")
        return r, c, sites

    lifts: dict = {}
    f64: AuditReport | None = None
    lifted_run: AuditReport | None = None
    again = not (adapter64 is adapter and not coarse_generator and calls.seen is not None)
    if not again and torch_code and not report.support_violations and \
            tolerance < report.tv <= rounding_allowance("bfloat16", vocab=inputs.target.vocab, positions=1):
        again = True      # float64 inputs and generator already, but a torch operation may cast down: watched
    if not again:
        # the first run already had float64 inputs and generator, its dtypes noted: it is the float64 run
        f64, seen64, sites64 = report, set(calls.seen or ()), dict(calls.sites)
    else:
        # torch code: the float64 run lifts the sampler's casts to a coarser float dtype as it goes; when it lifted
        # some and met nothing coarser, it is the algorithm at float64 and decides alone; when something coarser is
        # still met (a numpy cast, a constant made before the call), the plain float64 run is run for the bounds
        lifted64 = None
        if torch_code:
            try:
                lifted64, calls64, sites64 = run64("float64 run, its casts lifted to float64", True)
            except (BudgetExceeded, KeyboardInterrupt):
                raise
            except Exception as exc:     # noqa: BLE001  a cast the code needs coarse (a bit view): the plain run
                extra["lifted_run"] = {"completed": False, "why": f"{type(exc).__name__}: {exc}"}
        if lifted64 is not None:
            still = lowest(p for p in (calls64.seen or ()) if coarser_than_float64(p))
            if lifts:
                extra["lifted_run"] = {"completed": True, "tv": str(lifted64.tv), "casts_lifted": dict(lifts),
                                       "still_coarse": still or "none",
                                       **({"still_coarse_at": sites64.get(still, "at a draw")} if still else {})}
            if still is None and lifts and adapter64 is not None:
                lifted_run = lifted64
            if still is None or not lifts:       # nothing lifted: the plain float64 run itself
                f64 = lifted64
        if f64 is None:
            f64, calls64, sites64 = run64("float64 run", False)
        assert f64 is not None
        seen64 = set(calls64.seen or ()) | set(lifts)
        sites64 = {**{p: site for p, site in lifts.items()}, **sites64}
        extra["float64_sampler_calls"] = calls64.runs
        if calls64.hits:
            extra["float64_cached_calls"] = calls64.hits
    coarse64 = lowest(p for p in seen64 if coarser_than_float64(p))
    rounded_inputs = None
    if coarse64 is None and adapter64 is not None and adapter.reference is not None and \
            not f64.support_violations and tolerance < f64.tv <= ROUNDING_CAP:
        # float64 code off by no more than float32 rounding, nothing coarser seen: code that rounds its inputs to
        # float32 where no dtype shows it (a numpy cast, .item() floats) has, on float64 inputs, the law the reference
        # sampler has on inputs already rounded to float32 -- when the reference is lossless on the inputs as they
        # are (else the instance itself, a proposer drawing from another law, is what is off); a bias has not
        ref64 = _Calls(adapter.reference, adapter64, "reference", cache=cache)
        ref32 = _Calls(at_precision(at_precision(adapter.reference, "float64"), "float32"), adapter64, "reference",
                       cache=cache)
        laws = [run_audit(replace(inputs, rule=c.rule(), rng_model=model, lattice=lattice_for(model)),
                          budget=shared.next(), exact_floats=True, progress=False,
                          what=f"audit_sampler {name} (the reference sampler {what})")
                for c, what in ((ref64, "on float64 inputs"), (ref32, "on inputs rounded to float32"))]
        reference_tv = laws[0].tv
        rounded_inputs = total_variation(f64.output, laws[1].output) if reference_tv <= tolerance else None
        extra["rounded_inputs_run"] = {"reference_tv": str(reference_tv), "precision": "float32",
                                       "tv_to_reference": "not compared (the reference itself is off)"
                                       if rounded_inputs is None else str(rounded_inputs)}
        if rounded_inputs is not None and rounded_inputs <= tolerance:
            coarse64 = "float32"
            sites64[coarse64] = ("its inputs: its law is the reference sampler's on inputs already rounded to float32 "
                                 f"(TV {float(rounded_inputs):.3g}), so it rounds what it is handed to float32")
        else:
            rounded_inputs = None
    if coarse64 is None:
        coarse64 = _by_value(calls if f64 is report else calls64)
        if coarse64 is not None:
            sites64[coarse64] = (f"{(calls if f64 is report else calls64).compared_site} (by value: every number the "
                                 f"sampler compared with a uniform is a {coarse64} number, though its float64 inputs "
                                 "are not)")
    forced = adapter64 is None or coarse64 is not None
    met = {p for p in (prec, coarse64) if coarser_than_float64(p)}
    sites = {**calls.sites, **sites64}
    extra["float64_run"] = {"tv": str(f64.tv), "rng_model": model if f64 is not report else inputs.rng_model,
                            "inputs": "float64" if adapter64 is not None else
                            f"{prec} laws cast to float64 (the {adapter.name} adapter cannot hand float64)",
                            "coarsest_dtype_seen": coarse64 or "none"}
    seen_as_dtype = coarse64 is not None and coarse64 in seen64      # not by value, not by its rounded inputs
    lowest_met = lowest(met) or "float64"
    if met:
        where = sites.get(lowest_met) or ("the inputs the adapter hands" if lowest_met == prec else "unknown")
        extra["lowest_precision"] = {"precision": lowest_met, "where": where}
    positions = inputs.tokens * inputs.proposer.max_tokens()
    at = lowest_met if met else "float64"
    allowance = max(tolerance, rounding_allowance(at, vocab=inputs.target.vocab, positions=positions))
    measured = None
    if forced and lifted_run is None and rounded_inputs is None and adapter.reference is not None and \
            coarser_than_float64(at) and not (report.support_violations or f64.support_violations):
        # bounds decide: what rounding at that precision costs the adapter's correct reference here, measured
        try:
            measured = _reference(adapter, at, inputs, shared, cache).tv
        except (BudgetExceeded, KeyboardInterrupt):
            raise
        except ExactSpecError:
            measured = None
        if measured is not None:
            extra["measured_rounding"] = {"precision": at, "reference_tv": str(measured)}
    if not met and f64 is report:       # float64 throughout: one run decides
        return decide(precision="float64", own_tv=report.tv, own_violations=bool(report.support_violations),
                      f64_tv=None, f64_violations=False, forced=False, tolerance=tolerance,
                      tolerance_from=tolerance_from, allowance=allowance)
    if not met:     # float64 code on a coarser generator lattice (float32 uniforms): the float64 run decides
        return decide(precision="float32", own_tv=report.tv, own_violations=bool(report.support_violations),
                      f64_tv=f64.tv, f64_violations=bool(f64.support_violations), forced=False,
                      tolerance=tolerance, tolerance_from=tolerance_from,
                      allowance=max(tolerance, rounding_allowance("float32", vocab=inputs.target.vocab,
                                                                  positions=positions)))
    if forced:
        extra["forced_precision"] = coarse64 or prec
        how = ("seen by value" if coarse64 is not None and not seen_as_dtype else
               "seen at a draw or by the watch over every torch operation of the sampler (watched)")
        extra["forced_precision_from"] = (
            f"the sampler met {coarse64 or prec} at {sites.get(coarse64 or prec, 'a draw')} on float64 inputs "
            f"(a cast down, a coarser constant), {how}" + (
                "" if "lifted_run" not in extra else "; with its casts lifted to float64 nothing coarser was met, "
                "so that run decides" if lifted_run is not None else "; lifting its casts to float64 did not remove "
                "it, so size-derived bounds decide"))
    return decide(precision=at, own_tv=report.tv, own_violations=bool(report.support_violations),
                  f64_tv=f64.tv, f64_violations=bool(f64.support_violations), forced=forced, tolerance=tolerance,
                  tolerance_from=tolerance_from, allowance=allowance,
                  lifted_tv=rounded_inputs if lifted_run is None else lifted_run.tv,
                  lifted_violations=lifted_run is not None and bool(lifted_run.support_violations),
                  measured=measured,
                  lifted_how=None if lifted_run is not None or rounded_inputs is None else
                  "its law is the reference sampler's on inputs already rounded to float32")


def _rounding_figures(adapter: Any, prec: str, inputs: AuditInputs, expected: Model | None, shared: "_Shared",
                      cache: bool, extra: dict) -> dict:
    """What rounding costs the adapter's correct reference sampler at each precision on this instance (figures only:
    the verdict is the float boundary's); a reference further than rounding_cap(precision) from its exact rule is refused.
    Returns the reference's law at the sampler's precision."""
    exact = audit(rule=adapter.reference_rule, budget=shared.next(), target=inputs.target, draft=inputs.draft,
                  proposer=inputs.proposer, prompt=inputs.prompt, tokens=inputs.tokens, expected=expected,
                  rng_model=inputs.rng_model, exact_floats=True, progress=False)
    extra["exact_rule"] = adapter.reference_rule.name
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
    if rounding > rounding_cap(prec):
        # a correct sampler far from its exact rule is a broken reference, not rounding (no false pass)
        raise ExactSpecError(
            f"the {adapter.name} adapter's reference sampler at {prec} lands TV {float(rounding):.6g} from its "
            f"exact rule {adapter.reference_rule.name} on this instance, more than float rounding can cost "
            f"(at most {rounding_cap(prec)}): the reference is broken, so "
            "no verdict (check the adapter's reference and reference_rule; reference=False audits without one)")
    extra["rounding_tv"] = str(rounding)
    return ref_law


def _reference(adapter: Any, precision: str, inputs: AuditInputs, shared: "_Shared", cache: bool) -> AuditReport:
    """The reference sampler's audit at ``precision``: a fast rule when the adapter has one (and ``cache``),
    else the reference through the adapter and the interception, as the sampler ran."""
    fast = adapter._fast_reference_tokens(precision) if cache else None
    if fast is not None:
        rule = Rule(fast, name="reference", family=adapter.family, claim="lossless",
                    description=f"the {adapter.name} adapter's reference sampler at {precision}, as a rule")
    else:
        rule = _Calls(adapter.reference_at(precision), adapter, "reference", cache=cache).rule()
    # lazy: a rule giving its tokens one by one has its last draw spread instead of forked on, and each
    # state's step law is enumerated once, at its longest horizon (the law is the same; only TVs are read from it)
    return run_audit(replace(inputs, rule=rule), budget=shared.next(), exact_floats=True,
                     lazy=fast is not None)
