"""``assert_lossless``: the one-line check for users' test suites, with a minimal counterexample on failure.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> es.assert_lossless(es.rules.speculative_sampling, target=es.models.context_free((F(3, 5), F(2, 5))),
...                    draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(2), tokens=2).tv
Fraction(0, 1)
"""

from __future__ import annotations

from typing import Any, Sequence

from ._audit import audit
from .models import Model
from .rules import as_rule

__all__ = ["assert_lossless", "LossAssertionError"]


class LossAssertionError(AssertionError):
    """Raised by :func:`assert_lossless`; carries the report and, when found, the minimal counterexample."""

    def __init__(self, message: str, report: Any, counterexample: Any) -> None:
        super().__init__(message)
        self.report, self.counterexample = report, counterexample


def assert_lossless(rule: Any, *, target: Model, draft: Model | None = None, proposer: Any = None,
                    prompt: Sequence[int] = (), tokens: int = 1, decoding: str | None = None,
                    expected: Model | None = None, field: str = "fraction", search: bool = True,
                    search_budget: float = 10.0) -> Any:
    """Assert that ``rule`` keeps the expected law exactly on this instance; return the report.

    On failure the AssertionError states the exact TV, the worst outcomes and (``search=True``)
    the minimal counterexample of the same rule and proposer kind, with its regression test.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> try:
    ...     es.assert_lossless(es.rules.greedy_match_sampled, target=es.models.context_free((F(3, 5), F(2, 5))),
    ...                        draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(1))
    ... except AssertionError as e:
    ...     print(str(e).splitlines()[0])
    greedy_match_sampled is not lossless: exact TV 1/5 (decoding sample)
    """
    rule = as_rule(rule)
    report = audit(target=target, draft=draft, proposer=proposer, rule=rule, prompt=prompt, tokens=tokens,
                   decoding=decoding, expected=expected, field=field)
    if report.lossless:
        return report
    tv = report.field.to_str(report.tv)
    tv = tv if len(tv) < 40 else f"~{float(report.tv):.6g} (exact value in the report below)"
    lines = [f"{rule.name} is not lossless: exact TV {tv} (decoding {report.instance['decoding']})", report.summary()]
    ce = None
    if search:
        from .counterexamples import search as find
        ce = find(rule, proposer=proposer, budget=search_budget, progress=False)
        if ce:
            lines += ["", "minimal counterexample of the same rule:", str(ce), "", "regression test:", ce.to_pytest()]
        else:
            lines += ["", f"(no smaller counterexample: {ce})"]
    raise LossAssertionError("\n".join(lines), report, ce if ce else None)
