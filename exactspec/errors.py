"""The error types a user can catch; every exactspec failure is an :class:`ExactSpecError`.

>>> import exactspec as es
>>> issubclass(es.InvalidDistribution, es.ExactSpecError)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ExactSpecError(Exception):
    """Base class of every error exactspec raises on purpose.

    >>> import exactspec as es
    >>> try:
    ...     es.models.context_free((1, 1))
    ... except es.ExactSpecError as e:
    ...     print(type(e).__name__)
    InvalidDistribution
    """

    exit_code = 2


class InvalidArgument(ExactSpecError):
    """An argument of a public function or command is wrong: names the argument and what was wrong with it.

    Never raised itself: an invalid argument is an :class:`InvalidValue` (also a ``ValueError``) or an
    :class:`InvalidType` (also a ``TypeError``), so code that catches the builtin error catches it too.
    Exit code 2.

    >>> import exactspec as es
    >>> try:
    ...     es.models.context_free(("1/2", "1/3"))
    ... except es.errors.InvalidArgument as e:
    ...     print(type(e).__name__, isinstance(e, ValueError), e.exit_code)
    InvalidDistribution True 2
    """

    exit_code = 2


class InvalidValue(InvalidArgument, ValueError):
    """An argument has the right type but a value exactspec cannot use (out of range, unknown name, ...).

    >>> import exactspec as es
    >>> issubclass(es.errors.InvalidValue, ValueError), issubclass(es.errors.InvalidValue, es.ExactSpecError)
    (True, True)
    """


class InvalidType(InvalidArgument, TypeError):
    """An argument has a type exactspec cannot use (a float where exact numbers are needed, ...).

    >>> import exactspec as es
    >>> issubclass(es.errors.InvalidType, TypeError), issubclass(es.errors.InvalidType, es.ExactSpecError)
    (True, True)
    """


class InvalidDistribution(InvalidValue):
    """A distribution has the wrong length, a negative/NaN/infinite entry, or does not sum to 1.

    >>> import exactspec as es
    >>> es.models.context_free((1, 2))
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidDistribution: context_free model, context (): law (1, 2) sums to 3, not exactly 1
    """


class InexactArithmetic(InvalidType):
    """A float reached exact arithmetic without the caller asking for exact conversion.

    >>> import exactspec as es
    >>> es.models.context_free((0.5, 0.5))
    Traceback (most recent call last):
    ...
    exactspec.errors.InexactArithmetic: context_free model, context (): entry 0 is the float 0.5; floats are not exact here (pass exact_floats=True to convert each float to the rational it is)
    """


class ModelError(ExactSpecError):
    """A model's function raised, or returned something that is not a law; names the model and the context.

    >>> import exactspec as es
    >>> m = es.models.from_function(vocab=2, fn=lambda ctx: 1 / 0, order=0)
    >>> try:
    ...     m(())
    ... except es.ModelError as e:
    ...     print(type(e).__name__)
    ModelError
    """


class BudgetExceeded(ExactSpecError):
    """The enumeration ran past a budget (paths, depth or time); ``covered`` says how far it got.

    >>> import exactspec as es
    >>> err = es.BudgetExceeded("paths", 10, covered={"paths": 10})
    >>> err.covered["paths"]
    10
    """

    exit_code = 3

    def __init__(self, what: str, limit: Any, *, covered: dict[str, Any] | None = None) -> None:
        self.what = what
        self.limit = limit
        self.covered = dict(covered or {})
        done = ", ".join(f"{k}={v}" for k, v in self.covered.items())
        super().__init__(f"budget exceeded: {what} limit {limit} reached" + (f" (covered: {done})" if done else ""))


class RuleError(ExactSpecError):
    """The rule raised (or misbehaved) on one branch; ``trace`` holds the draws that lead there.

    ``replay()`` runs the rule again along that branch so the original exception can be debugged.

    >>> import exactspec as es
    >>> def broken(step, rng):
    ...     x = step.draft(0)
    ...     if x == 1:
    ...         raise ValueError("boom")
    ...     yield x
    >>> try:
    ...     es.audit(target=es.models.context_free((1, 1)) if False else es.models.context_free(("1/2", "1/2")),
    ...              draft=es.models.context_free(("1/2", "1/2")), rule=broken, tokens=1)
    ... except es.RuleError as e:
    ...     print(e.trace)
    [('categorical', 1)]
    """

    exit_code = 2

    def __init__(self, message: str, *, rule: str = "", trace: list[tuple[str, Any]] | None = None,
                 replay: Any = None) -> None:
        self.rule = rule
        self.trace = list(trace or [])
        self._replay = replay
        super().__init__(message)

    def replay(self) -> Any:
        """Run the rule again along the recorded branch, letting the original exception propagate."""
        if self._replay is None:
            raise ExactSpecError("this RuleError carries no replay")
        return self._replay()


class NotARule(RuleError, TypeError):
    """A sampler or a whole generation loop was handed where a rule ``fn(step, rng)`` is expected.

    Raised before anything is enumerated, by every rule entry point (``es.audit``,
    ``es.assert_lossless``, ``es.counterexamples.search``, ``es.prove``, the CLI's ``--rule``),
    when the signature cannot be called as ``fn(step, rng)`` and looks like a sampler or a loop;
    the message names the call that audits it (``es.audit_sampler(..., adapter=...)``,
    ``es.audit_loop``, their assertions and CLI commands). ``kind`` is ``"sampler"``, ``"loop"``
    or ``"sampler or loop"``; ``adapter`` the adapter its parameter names match (``""``: none).

    >>> import exactspec as es
    >>> def my_sampler(draft_ids, draft_probs, target_probs, rng): ...
    >>> try:
    ...     es.audit(rule=my_sampler, target=es.models.context_free(("1/2", "1/2")))
    ... except es.errors.NotARule as e:
    ...     print(e.kind, e.adapter)
    sampler numpy
    """

    def __init__(self, message: str, *, rule: str = "", kind: str = "sampler", adapter: str = "",
                 signature: str = "") -> None:
        super().__init__(message, rule=rule)
        self.kind, self.adapter, self.signature = kind, adapter, signature


class ReplayDiverged(ExactSpecError):
    """A replayed run made different draws than the run it replays (the rule is not deterministic).

    Internal: the engine raises it while it replays a branch and turns it into a :class:`RuleError`
    naming the rule and the draws, so a user never catches it.

    >>> issubclass(ReplayDiverged, ExactSpecError), ReplayDiverged.exit_code
    (True, 2)
    """


class UnsupportedRandomness(ExactSpecError):
    """A uniform draw was used in a way the enumerator cannot follow exactly (names the operation).

    >>> import exactspec as es
    >>> issubclass(es.UnsupportedRandomness, es.ExactSpecError)
    True
    """

    exit_code = 2


class UnsupportedRngModel(UnsupportedRandomness, ValueError):
    """An adapter cannot enumerate its sampler's uniforms under the rng model asked for (names both).

    Raised before anything runs, never answered by enumerating another model in its place.

    >>> import exactspec as es
    >>> e = es.UnsupportedRngModel("refused", adapter="flashinfer", rng_model="continuous")
    >>> (e.adapter, e.rng_model, e.exit_code, isinstance(e, ValueError))
    ('flashinfer', 'continuous', 2, True)
    """

    def __init__(self, message: str, *, adapter: str = "", rng_model: str = "") -> None:
        super().__init__(message)
        self.adapter, self.rng_model = adapter, rng_model


class InterceptionError(UnsupportedRandomness):
    """exactspec's own interception of a random draw failed (not the audited code): names the operation and dtype.

    Raised when the code that stands in for a random function while a sampler is audited
    (``torch.multinomial``, ``Tensor.bernoulli_``, ``random.random``, ...) fails in exactspec's own
    frames on arguments the real function takes: a gap or a bug of exactspec's, never a crash of
    the sampler, so never a ``RuleError``, a recorded crash or a ``"crash"`` counterexample. The
    errors the interception raises on purpose where the real function raises too (``torch.multinomial``
    on a 3-d tensor) stay the audited code's. ``operation``, ``dtype`` and ``cause`` say what failed.

    >>> import exactspec as es
    >>> err = es.errors.InterceptionError("torch.multinomial", "bfloat16", TypeError("boom"))
    >>> str(err).split(";")[0], err.exit_code
    ('unsupported: torch.multinomial on bfloat16: TypeError: boom', 2)
    """

    def __init__(self, operation: str, dtype: str, cause: BaseException, where: str = "") -> None:
        self.operation, self.dtype, self.cause = operation, dtype, cause
        at = f" (at {where})" if where else ""
        super().__init__(f"unsupported: {operation} on {dtype}: {type(cause).__name__}: {cause}{at}; exactspec's "
                         f"interception of {operation} failed in its own code, not the audited code (a gap in "
                         "exactspec: please report it)")


class AdapterMismatch(InvalidType):
    """The default adapter cannot drive a sampler that another registered adapter can: a usage error (exit 2).

    Raised by ``es.audit_sampler``, ``es.samplers.search_sampler`` and ``exactspec audit-sampler``
    when no adapter was given, the sampler raised on its first call under the default (numpy) one,
    and a call under some other adapter returned: ``fits`` names those adapters, ``adapter`` the one
    tried, ``cause`` the exception of that first call. Passing an adapter explicitly skips the
    check (a crash under it is then the sampler's, as always).

    >>> import exactspec as es
    >>> err = es.errors.AdapterMismatch("correct", "numpy", ["vllm"], IndexError("x"))
    >>> err.fits, err.exit_code
    (['vllm'], 2)
    """

    def __init__(self, sampler: str, adapter: str, fits: list[str], cause: BaseException, where: str = "") -> None:
        self.sampler, self.adapter, self.fits, self.cause = sampler, adapter, list(fits), cause
        at = f" at {where}" if where else ""
        names = ", ".join(fits)
        first = fits[0] if fits else "ADAPTER"
        super().__init__(
            f"sampler {sampler} does not run under the {adapter} adapter (the default: no adapter was given): its "
            f"first call raised {type(cause).__name__}: {cause}{at}; it runs under the {names} adapter"
            f"{'s' if len(fits) > 1 else ''}: pass adapter={first!r} (on the command line: --adapter {first}). "
            f"If it is written for the {adapter} adapter, pass adapter={adapter!r} explicitly and the crash is "
            "audited as the sampler's")


class ReleaseUnsupported(ExactSpecError):
    """A vLLM release whose audited module is not in its wheel (the message says what changed).

    >>> ReleaseUnsupported.exit_code
    2
    """

    exit_code = 2


class UnsupportedSymbolic(UnsupportedRandomness):
    """The rule did something with a symbolic probability that the prover cannot follow exactly.

    Names the operation and the rule's line (``float()``, ``exp``/``log``, ``**`` by a non-integer,
    use as an index, ...). Exit code 2: never a verdict.

    >>> UnsupportedSymbolic.exit_code
    2
    """


class UnhashableSymbolic(UnsupportedSymbolic, TypeError):
    """A symbolic probability was hashed (a set or a dict key): whether two are equal depends on the cell.

    Also a ``TypeError``, as hashing an unhashable object is in Python; exit code 2, never a verdict.

    >>> issubclass(UnhashableSymbolic, TypeError)
    True
    """


class SolverUnknown(ExactSpecError):
    """z3 could not decide a constraint set within its per-check timeout (the proof gives up: exit 3).

    >>> SolverUnknown.exit_code
    3
    """

    exit_code = 3


class AbstractionRefused(UnsupportedSymbolic):
    """The rule did something the vocabulary abstraction of ``vocab="all"`` cannot follow soundly (exit 2).

    The message names the operation and the rule's line; prove the rule at a given vocabulary instead.

    >>> issubclass(AbstractionRefused, UnsupportedSymbolic), AbstractionRefused.exit_code
    (True, 2)
    """


class AbstractionDisagrees(ExactSpecError):
    """The all-vocabulary abstraction and an exact check disagree: an internal error of the prover (exit 3).

    Raised by the tripwire before a ``vocab="all"`` proof is reported, when an exact audit at a small
    vocabulary finds a bias, or the concrete prover refutes the rule, where the abstraction proved
    it. Never a verdict: ``instance`` holds the instance that disagrees, to replay and report.

    >>> AbstractionDisagrees("x", instance=(1, 2)).instance
    (1, 2)
    """

    exit_code = 3

    def __init__(self, message: str, instance: Any = None) -> None:
        super().__init__(message)
        self.instance = instance


class NotPicklable(ExactSpecError):
    """A rule, sampler or model cannot be sent to worker processes (a lambda or closure without cloudpickle).

    >>> issubclass(NotPicklable, ExactSpecError), NotPicklable.exit_code
    (True, 2)
    """

    exit_code = 2


class WorkersLost(ExactSpecError):
    """Chunks of a parallel job were not covered: their workers died more often than the retries allowed.

    ``missing`` names each chunk that was not covered, with the reason. Exit code 3: the job is
    incomplete (never read as a pass).

    >>> err = WorkersLost("check: 1 of 25 configurations not covered", missing=("speculative_sampling: KilledWorker",))
    >>> err.exit_code, err.missing
    (3, ('speculative_sampling: KilledWorker',))
    """

    exit_code = 3

    def __init__(self, message: str, *, missing: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.missing = tuple(missing)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_lost, (str(self), self.missing))


def _rebuild_lost(message: str, missing: tuple[str, ...]) -> WorkersLost:
    return WorkersLost(message, missing=missing)


class LossAssertionError(AssertionError):
    """Raised by ``assert_lossless`` and its siblings; carries the report and, when found, the minimal counterexample.

    An ``AssertionError`` (so pytest shows it as a failed assertion), not an :class:`ExactSpecError`.

    >>> err = LossAssertionError("biased", report=None, counterexample="witness")
    >>> err.result
    'witness'
    """

    def __init__(self, message: str, report: Any, counterexample: Any) -> None:
        super().__init__(message)
        self.report, self.counterexample = report, counterexample
        #: what the check returned: the report (one instance) or the search result (a Counterexample, an
        #: IncompleteSearch); None when the check stopped on a budget
        self.result: Any = report if report is not None else counterexample


class IncompleteCheckError(LossAssertionError):
    """Raised by ``assert_sampler_lossless`` / ``assert_loop_lossless`` when the check did not finish.

    A search that did not cover its space (a time budget, ``max_instances``, instances it could
    not decide), an audit past its budget, or a verdict the audit could not decide (the CLI's
    exit 3): nothing was proven, so the assertion fails, never passes. ``result`` is the
    ``IncompleteSearch`` (or the report; None for a budget error, kept as ``__cause__``).

    >>> issubclass(IncompleteCheckError, LossAssertionError)
    True
    """
