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
import sys
import time
from dataclasses import replace
from fractions import Fraction
from typing import Any, Callable, Iterator, Sequence

from .._audit import AuditInputs, audit, run_audit, validate_audit
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ..laws import to_rational, total_variation
from ..models import Model
from ..report import AuditReport
from ..rules import Rule
from .adapters import get_adapter
from .interception import current_session, intercepting, private_generators, watch

__all__ = ["audit_sampler", "ROUNDING_TOLERANCE"]

#: a float64 implementation of a correct rule lands within this TV of the target on small instances;
#: biases above it are algorithmic (stated in every sampler report)
ROUNDING_TOLERANCE = Fraction(1, 2 ** 40)


def _as_rule(sampler: Callable, adapter: Any, name: str) -> Rule:
    """The sampler as a rule: each call is a watched branch (escaped randomness raises); ``sys.exit`` is a RuleError."""
    private = private_generators(sampler)
    session = current_session()

    def run(step: Any, rng: Any) -> list[int]:
        with watch(rng, name, private, session):
            try:
                return adapter.call(sampler, step, rng)
            except SystemExit as exc:
                raise RuleError(f"sampler {name} called sys.exit({exc.code!r}) (raised SystemExit) while audited; a "
                                "sampler must return the tokens it emits, not end the process", rule=name) from exc
    return Rule(run, name=name, family=adapter.family, claim="lossless",
                description=f"{name} through the {adapter.name} adapter")


def audit_sampler(sampler: Callable, *, adapter: Any = "numpy", target: Model, draft: Model | None = None,
                  proposer: Any = None, prompt: Sequence[int] = (), tokens: int | None = None,
                  rng_model: str = "continuous", expected: Model | None = None, reference: bool = True,
                  tolerance: Any = ROUNDING_TOLERANCE, budget: Budget | None = None) -> AuditReport:
    """Audit a real sampler exactly: every draw it makes forks the enumeration, floats are exact rationals.

    The report's law is the exact law of the implementation as it computes in its own floating
    point (the laws are handed to it as float64). To separate algorithmic bias from rounding, the
    adapter's correct reference sampler runs through the same pipeline: ``extra`` holds
    ``rounding_tv`` (that reference sampler vs the exact rule it implements, same proposer and
    generator: what float arithmetic alone costs), ``algorithmic_tv`` (this sampler vs the
    reference sampler) and ``sampler_calls``. The verdict is ``lossless`` (up to rounding)
    when the TV to the target is at most ``max(tolerance, 2 * rounding_tv)`` (``tolerance``
    2**-40 by default; 0 with ``reference=False`` demands exactness); a support violation (an
    outcome the target never emits) always makes it ``biased``.

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
    """
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
    with intercepting(), _one_torch_thread():
        return _audit_sampler(sampler, adapter, name, inputs, expected, _Shared(budget), tol, reference)


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
                   shared: "_Shared", tolerance: Any, reference: bool) -> AuditReport:
    report = run_audit(replace(inputs, rule=_as_rule(sampler, adapter, name)), budget=shared.next(), exact_floats=True)
    report.tolerance = tolerance
    if reference and adapter.reference is not None and adapter.reference_rule is not None:
        ref = run_audit(replace(inputs, rule=_as_rule(adapter.reference, adapter, "reference")), budget=shared.next(),
                        exact_floats=True)
        exact = audit(rule=adapter.reference_rule, budget=shared.next(), target=inputs.target, draft=inputs.draft,
                      proposer=inputs.proposer, prompt=inputs.prompt, tokens=inputs.tokens, expected=expected,
                      rng_model=inputs.rng_model, exact_floats=True)
        report.extra["exact_rule"] = adapter.reference_rule.name
        rounding = total_variation(ref.output, exact.output)
        report.extra["rounding_tv"] = str(rounding)
        report.extra["algorithmic_tv"] = str(total_variation(report.output, ref.output))
        # what the float pipeline and the generator cost a correct sampler is not the sampler's bias
        report.tolerance = max(report.tolerance, 2 * rounding)
    report.extra["sampler_calls"] = report.paths
    report.extra["adapter"] = adapter.name
    report.extra["rng_model"] = inputs.rng_model
    if hasattr(adapter, "resolution"):
        report.extra["resolution"] = adapter.resolution(inputs.rng_model)
    report.extra["tolerance"] = str(report.tolerance)
    return report
