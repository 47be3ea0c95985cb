"""``assert_lossless``: the one-line check for users' test suites, with a minimal counterexample on failure.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> es.assert_lossless(es.rules.speculative_sampling, target=es.models.context_free((F(3, 5), F(2, 5))),
...                    draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(2)).tv
Fraction(0, 1)
"""

from __future__ import annotations

from typing import Any, Sequence

from ._audit import audit
from .models import Model
from .rules import as_rule

__all__ = ["assert_lossless", "LossAssertionError", "HorizonWarning"]


class HorizonWarning(UserWarning):
    """An assertion passed over a horizon that never observes some positions of a step."""


class LossAssertionError(AssertionError):
    """Raised by :func:`assert_lossless`; carries the report and, when found, the minimal counterexample."""

    def __init__(self, message: str, report: Any, counterexample: Any) -> None:
        super().__init__(message)
        self.report, self.counterexample = report, counterexample


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
    rule = as_rule(rule)
    report = audit(target=target, draft=draft, proposer=proposer, rule=rule, prompt=prompt, tokens=tokens,
                   decoding=decoding, expected=expected, field=field)
    if report.lossless:
        if report.scope.get("note") and not report.scope.get("complete", True):
            import warnings
            warnings.warn(HorizonWarning(f"assert_lossless({rule.name}): {report.scope['note']}"), stacklevel=2)
        return report
    tv = report.field.to_str(report.tv)
    tv = tv if len(tv) < 40 else f"~{float(report.tv):.6g} (exact value in the report below)"
    lines = [f"{rule.name} is not lossless: exact TV {tv} (decoding {report.instance['decoding']})", report.summary()]
    ce = None
    if search:
        from .counterexamples import search as find
        from .errors import ExactSpecError
        try:
            found = find(rule, proposer=proposer, budget=search_budget, progress=False)
        except ExactSpecError as exc:  # e.g. the rule raised on every instance of the search space
            lines += ["", f"(the search for a smaller counterexample failed: {type(exc).__name__}: {exc})"]
        else:
            if found.found:
                ce = found
                lines += ["", "minimal counterexample of the same rule:", str(ce), "", "regression test:",
                          ce.to_pytest()]
            elif found.complete:
                lines += ["", f"(no smaller counterexample: {found})"]
            else:  # an IncompleteSearch: say what was not covered, never "no counterexample"
                lines += ["", f"(the search for a smaller counterexample did not finish: {found})"]
    raise LossAssertionError("\n".join(lines), report, ce)
