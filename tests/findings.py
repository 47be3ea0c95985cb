"""The suite's side of the findings data (``exactspec.published``): which release a test audits, and ``observe``.

A test that pins a finding measures it, then calls :func:`observe` with the verdict and the figure it measured;
``observe`` records the observation (for ``python -m benchmarks.release_watch``, when ``EXACTSPEC_FINDINGS_OUT``
names a file) and asserts it equals the result the data holds for the installed release. So the README's table,
rendered from the data, says exactly what the tests assert.

The release a test expects is the pinned one (``exactspec.published.package(name).pinned``, the same as
tests/published*.txt), or the one the release watch names in ``EXACTSPEC_WATCH`` (``transformers==5.25.0``).
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from importlib.metadata import PackageNotFoundError, version

import pytest

import exactspec as es

#: the float32 rounding bound the lossless rows state (each audit's own tolerance)
FLOAT32_BOUND = Fraction(1, 2 ** 20)
FLOAT32_TEXT = "TV <= 2^-20 each (float32 rounding)"


def watched() -> dict[str, str]:
    """The releases the release watch put under audit: ``{"transformers": "5.25.0"}`` from ``EXACTSPEC_WATCH``."""
    spec = os.environ.get("EXACTSPEC_WATCH", "")
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, release = item.partition("==")
        if not sep:
            raise ValueError(f"EXACTSPEC_WATCH={spec!r}: expected name==release[,name==release]")
        out[name] = release
    return out


def release(name: str) -> str:
    """The release of ``name`` this run audits: the installed one, which must be the expected one (else fail)."""
    expected = watched().get(name) or es.published.package(name).pinned
    try:
        installed = version(name)
    except PackageNotFoundError:
        installed = None
    if installed != expected:
        pytest.fail(f"{name}: the findings this test pins describe {name}=={expected}; installed is "
                    f"{installed or 'nothing'} (install tests/published*.txt, or audit another release with "
                    f"python -m benchmarks.release_watch {name}=={installed or '<release>'})", pytrace=False)
    return expected


def tv_text(tv: Fraction) -> str:
    """An exact TV as the table writes it: the fraction when short, else its value to 4 significant digits."""
    text = str(Fraction(tv))
    return text if len(text) <= 40 else f"~{float(tv):.4g}"


def lossless_figure(tv: Fraction, bound: Fraction = FLOAT32_BOUND, text: str = FLOAT32_TEXT) -> str:
    """The lossless rows' figure: ``text`` when the TV is within ``bound``, else the TV itself (which then differs)."""
    return text if tv <= bound else tv_text(tv)


def observe(finding: str, verdict: str, figure: str, *, instance: str = "", measured: object = None) -> None:
    """Record what a test measured for ``finding`` and assert it is what the data holds for the audited release."""
    f = es.published.finding(finding)
    rel = release(f.package)
    out = os.environ.get("EXACTSPEC_FINDINGS_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps({"finding": finding, "package": f.package, "release": rel, "instance": instance,
                                 "verdict": verdict, "figure": figure,
                                 "measured": None if measured is None else str(measured),
                                 "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]}) + "\n")
    expected = f.result(rel)
    if expected is None:
        if f.package in watched():
            return                                  # a release under watch: recorded, nothing to compare with yet
        pytest.fail(f"{finding}: exactspec/published/_data.py holds no result for {f.package} {rel}")
    want = (expected.verdict, expected.figures.get(instance))
    assert (verdict, figure) == want, (f"{finding} [{instance or 'the instance'}] on {f.package} {rel}: measured "
                                       f"{verdict}, {figure}; the findings data says {want[0]}, {want[1]}")
