"""A deadline that fired leaves the interpreter as it found it.

Regression: the watchdog dropped a still-pending delivery with ``PyThreadState_SetAsyncExc(tid,
NULL)``. On CPython 3.11 that call signals the eval breaker without anything left to clear it,
and from then on the first function call made under ``sys.settrace`` spins forever at its first
instruction. Hypothesis traces its ``find`` and shrinking runs (the explain phase), so a
``find`` after any audit whose time limit fired hung the process: the CI run of the whole suite
never finished (the doctest of ``exactspec.strategies.distributions`` hung after those of
``exactspec.enumerate.watchdog``).

Each case runs in a child process with a time limit, since the failure is a hang.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import sys
    from exactspec.enumerate.watchdog import deadline, guard
    from exactspec.errors import BudgetExceeded

    def busy():
        while True:
            pass

    for block in ({block}):
        try:
            with block:
                busy()
        except BudgetExceeded:
            pass

    def f():
        return 1

    def tracer(frame, event, arg):
        return tracer

    sys.settrace(tracer)
    f()
    sys.settrace(None)
    print("traced call returned")
""")


@pytest.mark.parametrize("block", [
    "deadline(0.05),",
    "guard(0.05),",
    "deadline(0.05), deadline(0.05)",
])
def test_a_traced_call_after_a_fired_deadline_returns(block: str) -> None:
    try:
        out = subprocess.run([sys.executable, "-c", PROGRAM.format(block=block)], capture_output=True, text=True,
                             timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a function call under sys.settrace hung after {block} fired")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "traced call returned"


def test_hypothesis_find_after_a_fired_deadline_finishes() -> None:
    program = textwrap.dedent("""
        from exactspec.enumerate.watchdog import deadline
        from exactspec.errors import BudgetExceeded
        try:
            with deadline(0.05):
                while True:
                    pass
        except BudgetExceeded:
            pass
        from hypothesis import find, strategies as st
        print(find(st.integers(0, 10), lambda x: x > 3))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("hypothesis.find hung after a deadline fired")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"
