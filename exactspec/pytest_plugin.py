"""The pytest plugin (entry point ``pytest11``): the ``assert_lossless`` fixture and a report header.

Installed with exactspec, so any test can write::

    def test_my_sampler(assert_lossless):
        assert_lossless(my_rule, target=target, draft=draft, proposer=es.drafts.chain(2), tokens=3)

On failure the test shows the exact TV, the worst outcomes and the minimal counterexample with
its regression test instead of a bare ``assert`` message.

>>> callable(assert_lossless_fixture)
True
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from . import __version__
from .assertions import assert_lossless


def pytest_report_header(config: Any) -> str:
    return f"exactspec {__version__}: exact speculative-decoding audits (fixture: assert_lossless)"


def assert_lossless_fixture() -> Callable[..., Any]:
    """The fixture's value: :func:`exactspec.assert_lossless`."""
    return assert_lossless


assert_lossless_fixture_ = pytest.fixture(name="assert_lossless")(assert_lossless_fixture)
