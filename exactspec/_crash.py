"""Whose exception is it: the audited code's (a crash, a finding) or exactspec's calling it wrongly (bad input).

A sampler or a loop that raises on a branch of its randomness crashes on a valid input with that
branch's probability: a defect of that code, which a search reports as a counterexample of kind
``"crash"``. An exception that never entered the audited code (a ``TypeError`` because the
function does not take the arguments its adapter hands it) is not a crash of that code: it stays
an error (exit 2).

:func:`crash_site` tells the two apart from the exception's traceback and names the line of the
audited code where the crash happened (``file:line in function``): the innermost frame that is
neither exactspec's own code (its bug zoo excepted: those samplers are audited code) nor torch's
or numpy's Python code (an error torch raises is reported at the user's line that called torch).

>>> def sampler():
...     return [1, 2][5]
>>> try:
...     sampler()
... except IndexError as exc:
...     site = crash_site(exc)
>>> site.split(":")[0].startswith("<doctest"), site.endswith("in sampler")
(True, True)
"""

from __future__ import annotations

import os
import sys
from fractions import Fraction
from typing import Any

from .report import AuditReport

__all__ = ["crash_site", "CrashReport"]

#: the package folder; its bug zoo holds audited code (deliberately broken samplers), not the tool's
_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ZOO = os.path.join(_PKG, "bugzoo") + os.sep


def _library_dirs() -> tuple[str, ...]:
    """The package folders of torch and numpy: frames in them are between the user's line and the error."""
    dirs = [_PKG]
    for mod in ("torch", "numpy"):
        f = getattr(sys.modules.get(mod), "__file__", None)
        if f:
            dirs.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(dirs)


def _tool(filename: str, libs: tuple[str, ...]) -> bool:
    name = os.path.abspath(filename) if not filename.startswith("<") else filename
    return name.startswith(libs) and not name.startswith(_ZOO)


def crash_site(exc: BaseException) -> str | None:
    """``file:line in function`` of the audited code's innermost frame in ``exc``'s traceback, or None.

    None when the traceback never enters code outside exactspec, torch and numpy: the exception
    was raised calling the audited code (a wrong signature), not inside it, so it is no crash of
    that code.

    >>> crash_site(ValueError("never raised: no traceback")) is None
    True
    """
    libs = _library_dirs()
    tb: Any = exc.__traceback__
    site = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _tool(code.co_filename, libs):
            site = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
        tb = tb.tb_next
    return site


class CrashReport(AuditReport):
    """An :class:`~exactspec.AuditReport` that also reports the branches on which the audited code raised.

    What ``es.audit_loop(..., on_error="record")`` and ``es.audit_sampler(..., on_error="record")``
    return: ``extra["error_probability"]`` (a string, exact) is the probability that the code
    raises on this instance, ``extra["errors"]`` the probability of each exception (``"Type:
    message"``) and ``extra["error_sites"]`` the line of the audited code each came from. Code that
    raises with positive probability is never ``lossless``; the ``output`` law holds the branches
    that returned (it sums to ``1 - error_probability``), so the TV is at least half that.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import numpy_samplers as zoo
    >>> def fragile(draft_ids, draft_probs, target_probs, rng):
    ...     if rng.random() < 0.25:
    ...         raise ValueError("unlucky")
    ...     return zoo.correct(draft_ids, draft_probs, target_probs, rng)
    >>> half = es.models.context_free(("1/2", "1/2"))
    >>> r = es.audit_sampler(fragile, target=half, draft=half, proposer=es.drafts.chain(1), tokens=1,
    ...                      on_error="record")
    >>> r.error_probability, r.lossless, r.warnings[-1]
    (Fraction(1, 4), False, 'the sampler raised ValueError: unlucky with probability 1/4 on this instance')
    """

    @property
    def error_probability(self) -> Fraction:
        """The exact probability that the audited code raised (0 when it never did)."""
        return Fraction(self.extra.get("error_probability", "0"))

    @property
    def lossless(self) -> bool:  # noqa: D102
        return self.error_probability == 0 and super().lossless

    @property
    def undecided(self) -> bool:  # noqa: D102  (a crash is a defect whatever the float rounding: never undecided)
        return self.error_probability == 0 and bool(getattr(super(), "undecided", False))

    @property
    def warnings(self) -> list[str]:  # noqa: D102
        out = list(super().warnings)
        code = "loop" if self.extra.get("adapter") == "whole loop" else "sampler"
        for what, prob in self.extra.get("errors", {}).items():
            out.append(f"the {code} raised {what} with probability {prob} on this instance")
        return out

    @property
    def verdict_text(self) -> str:  # noqa: D102
        text = super().verdict_text
        if self.error_probability:
            sites = sorted(set(self.extra.get("error_sites", {}).values()))
            at = f" at {sites[0]}" + (f" and {len(sites) - 1} other line(s)" if len(sites) > 1 else "") if sites else ""
            text = (f"this code crashes with probability {self.extra['error_probability']} on this instance{at} "
                    f"(see warnings); {text}")
        return text
