"""The pytest plugin (entry point ``pytest11``): the ``assert_lossless``, ``assert_sampler_lossless`` and
``assert_loop_lossless`` fixtures, the ``exactspec_sampler`` / ``exactspec_loop`` markers and a report header.

Installed with exactspec, so any test can write::

    def test_my_rule(assert_lossless):
        assert_lossless(my_rule, target=target, draft=draft, proposer=es.drafts.chain(2), tokens=3)

    @pytest.mark.exactspec_sampler(adapter="vllm", vocab=3)
    def test_my_sampler(assert_sampler_lossless):
        assert_sampler_lossless(my_sampler)           # an exact search over small instances

    def test_my_loop(assert_loop_lossless):
        assert_loop_lossless(my_generate)

On failure the test shows the exact TV, the worst outcomes and the minimal counterexample with
its regression test instead of a bare ``assert`` message; a check that did not finish fails too.
A marker's keyword arguments are the defaults of its fixture in that test (the nearest marker
wins: function over class over module ``pytestmark``); the call's own keywords override them.

>>> callable(assert_lossless_fixture), callable(assert_sampler_lossless_fixture)
(True, True)
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from . import __version__
from .assertions import assert_lossless, assert_loop_lossless, assert_sampler_lossless

#: marker name -> what its keyword arguments configure
MARKERS = {"exactspec_sampler": "assert_sampler_lossless", "exactspec_loop": "assert_loop_lossless"}


def pytest_configure(config: Any) -> None:
    """Register the markers, so ``--strict-markers`` accepts them."""
    for marker, fixture in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}(**options): default keyword options of the {fixture} fixture "
                                           f"(exactspec.{fixture}) in this test")


def pytest_report_header(config: Any) -> str:
    return (f"exactspec {__version__}: exact speculative-decoding audits (fixtures: assert_lossless, "
            "assert_sampler_lossless, assert_loop_lossless)")


def marker_options(node: Any, marker: str) -> dict:
    """The keyword options of ``marker`` on ``node`` and its parents, the nearest one winning.

    >>> class Mark:
    ...     def __init__(self, **kw): self.args, self.kwargs = (), kw
    >>> class Node:
    ...     def iter_markers(self, name): return iter([Mark(vocab=2), Mark(vocab=4, gamma=1)])
    >>> marker_options(Node(), "exactspec_sampler")
    {'vocab': 2, 'gamma': 1}
    """
    from .errors import InvalidType
    options: dict = {}
    for mark in reversed(list(node.iter_markers(name=marker))):
        if mark.args:
            raise InvalidType(f"@pytest.mark.{marker} takes keyword options only (the defaults of the "
                              f"{MARKERS[marker]} fixture), got positional {mark.args!r}")
        options.update(mark.kwargs)
    return options


def assert_lossless_fixture() -> Callable[..., Any]:
    """The fixture's value: :func:`exactspec.assert_lossless`."""
    return assert_lossless


def _with_defaults(fn: Callable[..., Any], options: dict) -> Callable[..., Any]:
    def check(code: Any, /, **kwargs: Any) -> Any:
        __tracebackhide__ = True     # pytest shows the test's line and the assertion's message, not this frame
        return fn(code, **{**options, **kwargs})
    check.__name__, check.__doc__ = fn.__name__, fn.__doc__
    check.options = dict(options)    # type: ignore[attr-defined]
    return check


def assert_sampler_lossless_fixture(request: Any) -> Callable[..., Any]:
    """The fixture's value: :func:`exactspec.assert_sampler_lossless` with the test's ``exactspec_sampler`` options."""
    return _with_defaults(assert_sampler_lossless, marker_options(request.node, "exactspec_sampler"))


def assert_loop_lossless_fixture(request: Any) -> Callable[..., Any]:
    """The fixture's value: :func:`exactspec.assert_loop_lossless` with the test's ``exactspec_loop`` options."""
    return _with_defaults(assert_loop_lossless, marker_options(request.node, "exactspec_loop"))


assert_lossless_fixture_ = pytest.fixture(name="assert_lossless")(assert_lossless_fixture)
assert_sampler_lossless_fixture_ = pytest.fixture(name="assert_sampler_lossless")(assert_sampler_lossless_fixture)
assert_loop_lossless_fixture_ = pytest.fixture(name="assert_loop_lossless")(assert_loop_lossless_fixture)
