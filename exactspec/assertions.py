"""``assert_lossless``: the one-line check for users' test suites, with a minimal counterexample on failure.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> es.assert_lossless(es.rules.speculative_sampling, target=es.models.context_free((F(3, 5), F(2, 5))),
...                    draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(2)).tv
Fraction(0, 1)
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Sequence, TypeVar

from ._audit import audit
from .errors import IncompleteCheckError, InvalidType, InvalidValue, LossAssertionError
from .models import Model
from .rules import as_rule

__all__ = ["assert_lossless", "assert_sampler_lossless", "assert_loop_lossless", "LossAssertionError",
           "IncompleteCheckError", "HorizonWarning"]


class HorizonWarning(UserWarning):
    """An assertion passed over a horizon that never observes some positions of a step."""


def _ours(excinfo: Any) -> bool:
    """pytest's ``__tracebackhide__`` filter: hide exactspec's assertion frames for exactspec's own failures.

    A failed check (:class:`LossAssertionError`) or a refused argument (:class:`~exactspec.errors.ExactSpecError`)
    carries a complete message, so pytest shows the user's test line and that message, not this module's source.
    Any other exception (a bug) keeps every frame.

    >>> class Info:
    ...     def __init__(self, exc): self.value = exc
    >>> _ours(Info(LossAssertionError("biased", None, None))), _ours(Info(KeyError("x")))
    (True, False)
    """
    from .errors import ExactSpecError
    return isinstance(getattr(excinfo, "value", None), (LossAssertionError, ExactSpecError))


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _user_facing(fn: _Fn) -> _Fn:
    """``fn`` raising exactspec's own errors from the user's call, not from the library frames that found them.

    An :class:`~exactspec.errors.ExactSpecError` (a refused argument, a model that is no law, a rule or
    sampler that raised: its message names what and where) keeps its type, message and cause; only the
    frames between this call and its raise are dropped, so pytest shows the user's line and the
    message. A failed check (:class:`LossAssertionError`) passes unchanged, its frames hidden by
    :func:`_ours`.
    """
    from .errors import ExactSpecError

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
        try:
            return fn(*args, **kwargs)
        except ExactSpecError as exc:
            raise exc.with_traceback(None)    # the same error, raised here: its cause and message kept
    return call  # type: ignore[return-value]


def _tv_text(report: Any) -> str:
    """The report's TV as exact text, or to 6 digits when the exact value is too long to read on one line."""
    tv = report.field.to_str(report.tv)
    return tv if len(tv) < 40 else f"~{float(report.tv):.6g} (exact value in the report below)"


@_user_facing
def assert_lossless(rule: Any, *, target: Model, draft: Model | None = None, proposer: Any = None,
                    prompt: Sequence[int] = (), tokens: int | None = None, decoding: str | None = None,
                    expected: Model | None = None, field: str = "fraction", search: bool = True,
                    search_budget: float = 10.0) -> Any:
    """Assert that ``rule`` keeps the expected law exactly on this instance; return the report.

    ``tokens`` defaults to the proposer's ``max_tokens() + 1`` (gamma + 2 for a chain): every
    position of a first and a second step is observed. With a smaller horizon the assertion still
    runs, but a :class:`HorizonWarning` names the positions it never observed. In an inexact
    ``field`` (float, mpmath) it passes when the TV is within the field's tolerance, which is not a
    proof: keep the default exact field in CI.

    On failure the AssertionError states the exact TV, the worst outcomes and (``search=True``)
    the minimal counterexample of the same rule and proposer kind, with its regression test.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> try:
    ...     es.assert_lossless(es.rules.greedy_match_sampled, target=es.models.context_free((F(3, 5), F(2, 5))),
    ...                        draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(1),
    ...                        tokens=1)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    greedy_match_sampled is not lossless: exact TV 1/5 (decoding sample)
    """
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    rule = as_rule(rule)
    report = audit(target=target, draft=draft, proposer=proposer, rule=rule, prompt=prompt, tokens=tokens,
                   decoding=decoding, expected=expected, field=field, progress=False)
    if report.lossless:
        if report.scope.get("note") and not report.scope.get("complete", True):
            import warnings
            warnings.warn(HorizonWarning(f"assert_lossless({rule.name}): {report.scope['note']}"),
                          stacklevel=3)   # the user's call: past this function and _user_facing's wrapper
        return report
    lines = [f"{rule.name} is not lossless: exact TV {_tv_text(report)} (decoding {report.instance['decoding']})",
             report.summary()]
    ce = None
    if search:
        from .counterexamples import Counterexample, search as find
        from .errors import ExactSpecError
        try:
            found = find(rule, proposer=proposer, budget=search_budget, progress=False)
        except ExactSpecError as exc:  # e.g. the rule raised on every instance of the search space
            lines += ["", f"(the search for a smaller counterexample failed: {type(exc).__name__}: {exc})"]
        else:
            if isinstance(found, Counterexample):
                ce = found
                lines += ["", "minimal counterexample of the same rule:", str(ce), "", "regression test:",
                          ce.to_pytest()]
            elif found.complete:
                lines += ["", f"(no smaller counterexample: {found})"]
            else:  # an IncompleteSearch: say what was not covered, never "no counterexample"
                lines += ["", f"(the search for a smaller counterexample did not finish: {found})"]
    raise LossAssertionError("\n".join(lines), report, ce)


# -- samplers and whole loops ----------------------------------------------------------------------------------

#: the keyword arguments of :func:`assert_sampler_lossless` / :func:`assert_loop_lossless` that are not passed to
#: every audit unchanged (each audit's instance, the search's space and limits)
_OWN = ("search", "space", "budget", "max_instances", "seed", "vocab", "gamma", "target", "draft", "prompt", "tokens",
        "expected", "proposer", "adapter", "progress", "instance_budget")


def _audit_options(fn: Callable[..., Any], given: dict[Any, Any], where: str) -> dict[Any, Any]:
    """``given`` checked against ``fn``'s keywords (what each audit accepts): a typed error names any other."""
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    params = inspect.signature(fn).parameters
    known = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} - set(_OWN)
    bad = sorted(k for k in given if k not in known)
    if bad:
        options = sorted(known | set(_OWN) - {"progress", "instance_budget"})
        raise InvalidValue(f"{where}: unknown option(s) {', '.join(bad)} (options: {', '.join(options)})")
    return dict(given)


def _small_space(space: Any, family: str, vocab: int | None, gamma: int | None, tokens: int | None,
                 where: str, loop: bool = False) -> Any:
    """The search space: ``space`` (or the default one) bounded by ``vocab`` / ``gamma``, at horizon ``tokens``."""
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    for label, v, lo in (("vocab", vocab, 2), ("gamma", gamma, 1), ("tokens", tokens, 1)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise InvalidType(f"{where}: {label} must be an int >= {lo}, got {v!r}")
        if v is not None and v < lo:
            raise InvalidValue(f"{where}: {label} must be an int >= {lo}, got {v!r}")
    if space is None and vocab is None and gamma is None and (tokens is None or loop):
        return None
    if space is None:
        if loop:
            from .samplers.loops.loop_search import loop_space
            space = loop_space(None, tokens)
        else:
            from .samplers.search import sampler_space
            space = sampler_space(family)
    changes: dict[Any, Any] = {}
    if vocab is not None:
        changes["vocabs"] = tuple(v for v in space.vocabs if v <= vocab) or (vocab,)
    if gamma is not None:
        if loop or family != "chain":
            raise InvalidValue(f"{where}: gamma= bounds a chain sampler's search (a loop drafts with its own "
                               "gamma; a tree search takes space=)")
        changes["shapes"] = tuple((g,) for g in range(1, gamma + 1))
    if tokens is not None and not loop:   # every instance at this horizon (fewer tokens are its marginals)
        changes.update(tokens=(tokens,), extra_tokens=None, only_longest=False)
    return space.with_(**changes) if changes else space


def _budget_parts(budget: Any, where: str) -> tuple[Any, Any]:
    """A search's budget: seconds for the whole search, and the per-audit limits of an ``es.Budget``."""
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    from .enumerate import Budget
    if budget is None:
        return None, None
    if isinstance(budget, Budget):
        return budget.seconds, Budget(paths=budget.paths, depth=budget.depth, outcomes=budget.outcomes)
    if isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0:
        return float(budget), None
    raise InvalidType(f"{where}: budget must be seconds (a positive number) or an es.Budget, got {budget!r}")


def _regression(result: Any) -> list[str]:
    """The counterexample's regression test, or why none can be rendered."""
    from .errors import ExactSpecError
    try:
        return ["", "regression test (fails while the bias exists):", result.to_pytest()]
    except ExactSpecError as exc:
        return ["", f"(no regression test: {exc})"]


def _judge(result: Any, what: str, *, stacklevel: int = 4) -> Any:
    """Pass (return ``result``) only on a complete check that found no bias (exit code 0); otherwise raise.

    Decided by the result's ``exit_code``, as the CLI is: 0 passes, 1 (a bias) raises
    :class:`LossAssertionError`, anything else (3: incomplete or undecided) :class:`IncompleteCheckError`.
    """
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    from .report import AuditReport
    code = getattr(result, "exit_code", None)
    if not isinstance(result, AuditReport):      # a search: a Counterexample, an EmptySearch, an IncompleteSearch
        if code == 0 and result.complete and not result.found:
            return result
        if code == 1 and result.found:
            kind = getattr(result, "kind", "")
            verdict = "crashes on valid inputs" if kind == "crash" else "is biased"
            lines = [f"{what} {verdict}: an exact search over small instances found this minimal counterexample", "",
                     str(result)] + _regression(result)
            raise LossAssertionError("\n".join(lines), None, result)
        lines = [f"{what}: the exact search did not cover its space, so nothing was proven and this assertion fails "
                 "(an incomplete check never passes)", "", str(result), "",
                 "to finish it: raise budget= (seconds) or max_instances=, or bound the space (vocab=, gamma=, "
                 "tokens=, space=)"]
        err = IncompleteCheckError("\n".join(lines), None, None)
        err.result = result
        raise err
    report = result    # one instance
    if code == 0:
        if report.scope.get("note") and not report.scope.get("complete", True):
            warnings.warn(HorizonWarning(f"{what}: {report.scope['note']}"), stacklevel=stacklevel)
        return report
    if code == 1:
        raise LossAssertionError("\n".join([f"{what} is not lossless on this instance: exact TV "
                                            f"{_tv_text(report)}", report.summary(),
                                            "", "(search=True, the default, finds a minimal counterexample with its "
                                            "regression test; the error's .report has the whole audit, "
                                            ".report.to_json() every exact value)"]), report, None)
    raise IncompleteCheckError("\n".join([f"{what}: the audit did not decide (exit code {code}: {report.verdict}), "
                                          "so this assertion fails (an undecided check never passes)",
                                          report.summary()]), report, None)


def _budget_spent(exc: Exception, what: str) -> IncompleteCheckError:
    return IncompleteCheckError(f"{what}: the check ran past its budget before it was complete, so nothing was "
                                f"proven and this assertion fails (an incomplete check never passes): {exc}", None, None)


@_user_facing
def assert_sampler_lossless(sampler: Any, *, adapter: Any = None, search: bool = True, proposer: Any = None,
                            space: Any = None, vocab: int | None = None, gamma: int | None = None,
                            tokens: int | None = None, budget: Any = None, max_instances: int | None = None,
                            seed: int = 0, target: Model | None = None, draft: Model | None = None,
                            prompt: Sequence[int] = (), expected: Model | None = None, **audit_options: Any) -> Any:
    """Assert that a third-party sampler is lossless (up to float rounding) over small instances; return the result.

    By default (``search=True``) this is ``exactspec audit-sampler``'s check: an exact search
    (:func:`exactspec.samplers.search.search_sampler`) over the small instances of
    :func:`~exactspec.samplers.search.sampler_space` for the adapter's family, each
    audited by :func:`exactspec.audit_sampler` through ``adapter`` (left out: numpy, checked as
    ``audit_sampler`` checks it: a sampler only another adapter can call raises
    :class:`~exactspec.errors.AdapterMismatch`). It passes, returning the
    :class:`~exactspec.counterexamples.EmptySearch`, only when every instance of the space was
    decided lossless. A bias raises :class:`LossAssertionError` with the minimal counterexample
    and its regression test (``.counterexample``); a search that did not cover its space (a
    ``budget`` in seconds, ``max_instances``, instances it could not decide) raises
    :class:`IncompleteCheckError`, an ``AssertionError`` too: an incomplete check never passes.

    ``vocab`` (largest vocabulary), ``gamma`` (largest gamma, chains) and ``tokens`` (the horizon
    of every instance) bound the default space, as ``audit-sampler --vocab/--gamma/--tokens`` do;
    ``space`` replaces it; ``proposer`` fixes how drafts are made and scored. ``budget``: seconds
    for the whole search, or an :class:`exactspec.Budget` (its ``seconds`` for the search, its
    other limits for each audit). Any other keyword (``rng_model``, ``precision``, ...) goes to
    every :func:`exactspec.audit_sampler` call unchanged.

    ``search=False`` audits the one instance ``target``, ``draft``, ``proposer``, ``prompt``,
    ``tokens`` (``expected``: a declared law) and returns its report: a single instance is not an
    audit, so use it for a regression test of a known instance, not as the CI check.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> es.assert_sampler_lossless(zoo.correct, adapter="numpy", vocab=2, gamma=1).audited
    27
    >>> try:
    ...     es.assert_sampler_lossless(zoo.shared_uniform, adapter="numpy")
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    sampler shared_uniform (adapter numpy) is biased: an exact search over small instances found this minimal counterexample
    """
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    from .errors import BudgetExceeded
    from .samplers import audit_sampler, get_adapter
    where = "assert_sampler_lossless"
    opts = _audit_options(audit_sampler, audit_options, where)
    chosen = None if adapter is None else get_adapter(adapter)     # None: numpy, checked by the audits
    adapter = chosen if chosen is not None else get_adapter("numpy")
    if isinstance(sampler, str) and not search:
        from ._loading import load_object
        sampler = load_object(sampler, "the sampler", preload=("numpy",))
    name = sampler if isinstance(sampler, str) else getattr(sampler, "__name__", type(sampler).__name__)
    what = f"sampler {name} (adapter {adapter.name})"
    try:
        if search:
            given = [k for k, v in (("target", target), ("draft", draft), ("expected", expected)) if v is not None] + (
                ["prompt"] if tuple(prompt) != () else [])
            if given:
                raise InvalidValue(f"{where}: {'= and '.join(given)}= do{'es' if len(given) == 1 else ''} not apply "
                                   "to the search (it chooses the laws and prompts): pass search=False to assert "
                                   "one instance")
            from .samplers.search import search_sampler
            seconds, limits = _budget_parts(budget, where)
            result = search_sampler(sampler, adapter=chosen, proposer=proposer, seed=seed, budget=seconds,
                                    space=_small_space(space, adapter.family, vocab, gamma, tokens, where),
                                    max_instances=max_instances, progress=False, instance_budget=limits, **opts)
        else:
            for label, v in (("space", space), ("vocab", vocab), ("gamma", gamma), ("max_instances", max_instances)):
                if v is not None:
                    raise InvalidValue(f"{where}: {label}= applies to the search, not to one instance (search=False)")
            if target is None:
                raise InvalidValue(f"{where}(search=False): pass target= (and draft=, proposer=) for the instance")
            from .enumerate import Budget
            seconds, limits = _budget_parts(budget, where)
            one = Budget(seconds=seconds) if limits is None else Budget(
                paths=limits.paths, depth=limits.depth, outcomes=limits.outcomes, seconds=seconds)
            result = audit_sampler(sampler, adapter=chosen, target=target, draft=draft, proposer=proposer,
                                   prompt=prompt, tokens=tokens, expected=expected, budget=one, progress=False,
                                   **opts)
    except BudgetExceeded as exc:
        raise _budget_spent(exc, what) from exc
    return _judge(result, what)


@_user_facing
def assert_loop_lossless(loop: Any, *, search: bool = True, space: Any = None, vocab: int | None = None,
                         tokens: int | None = None, budget: Any = None, max_instances: int | None = None,
                         seed: int = 0, target: Model | None = None, draft: Model | None = None,
                         prompt: Sequence[int] | None = None, expected: Model | None = None,
                         **audit_options: Any) -> Any:
    """Assert that a whole generation loop ``fn(target, draft, prompt_ids)`` keeps the target's law; return the result.

    By default (``search=True``) this is ``exactspec audit-loop``'s check: an exact search over
    small instances (``es.search_loop(loop)``, the loop run on stand-in models on
    every branch of its randomness). It passes, returning the
    :class:`~exactspec.counterexamples.EmptySearch`, only when every instance of the space was
    decided lossless; a bias raises :class:`LossAssertionError` with the minimal counterexample
    and its regression test; a search that did not cover its space raises
    :class:`IncompleteCheckError`: an incomplete check never passes.

    ``vocab`` (largest vocabulary) and ``tokens`` (the horizon of every instance) bound the
    default space; ``space`` replaces it; ``budget``: seconds for the whole search or an
    :class:`exactspec.Budget`; ``max_instances``, ``seed``. Any other keyword (``kind``, ``dtype``,
    ``output``, ``reference``, ``rng_model``, ...) goes to every :func:`exactspec.audit_loop` call.
    ``loop`` may be ``"module:function"``. ``search=False`` audits the one instance ``target``,
    ``draft``, ``prompt``, ``tokens`` and returns its report.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import loops
    >>> try:
    ...     es.assert_loop_lossless(loops.bonus_from_draft, vocab=2)
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    loop bonus_from_draft is biased: an exact search over small instances found this minimal counterexample
    """
    __tracebackhide__ = _ours     # pytest: the user's line and the message, not this frame
    from .errors import BudgetExceeded
    from .samplers import audit_loop, search_loop
    where = "assert_loop_lossless"
    opts = _audit_options(audit_loop, audit_options, where)
    if isinstance(loop, str):
        from ._loading import load_object
        loop = load_object(loop, "the loop", preload=("torch",))
    what = f"loop {getattr(loop, '__name__', type(loop).__name__)}"
    try:
        if search:
            given = [k for k, v in (("target", target), ("draft", draft), ("prompt", prompt), ("expected", expected))
                     if v is not None]
            if given:
                raise InvalidValue(f"{where}: {'= and '.join(given)}= do{'es' if len(given) == 1 else ''} not apply "
                                   "to the search (it chooses the laws and prompts): pass search=False to assert "
                                   "one instance")
            from .enumerate import Budget
            if budget is not None and not isinstance(budget, Budget):
                budget = _budget_parts(budget, where)[0]
            small = _small_space(space, "chain", vocab, None, tokens, where, loop=True)
            result: Any = search_loop(loop, tokens=tokens, budget=budget, seed=seed,
                                 max_instances=max_instances, progress=False, **({"space": small} if small else {}),
                                 **opts)
        else:
            for label, v in (("space", space), ("vocab", vocab), ("max_instances", max_instances)):
                if v is not None:
                    raise InvalidValue(f"{where}: {label}= applies to the search, not to one instance (search=False)")
            if target is None:
                raise InvalidValue(f"{where}(search=False): pass target= (and draft=, prompt=) for the instance")
            from .enumerate import Budget
            seconds, limits = _budget_parts(budget, where)
            one = None if budget is None else Budget(seconds=seconds) if limits is None else Budget(
                paths=limits.paths, depth=limits.depth, outcomes=limits.outcomes, seconds=seconds)
            result = audit_loop(loop, target=target, draft=draft, prompt=prompt, tokens=tokens, expected=expected,
                                budget=one, **opts)
    except BudgetExceeded as exc:
        raise _budget_spent(exc, what) from exc
    return _judge(result, what)
