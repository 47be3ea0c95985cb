"""Suite-wide guard: no test may hang the run.

A test that runs past ``EXACTSPEC_TEST_TIMEOUT`` seconds (default 300; the slowest test takes
well under a minute on 2 cores) fails with ``TestTimeout`` raised into it, after every thread's
stack has been printed to stderr, and the suite goes on. A test stuck where that exception
cannot land (inside C code) ends the whole run 60 s later, again with every thread's stack
printed (``faulthandler``), so CI reports where it hung instead of sitting until its own limit.
Applies to the doctests under ``exactspec/`` and ``benchmarks/`` too (this file is at the root).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import sys
import threading

import pytest

LIMIT = float(os.environ.get("EXACTSPEC_TEST_TIMEOUT", "300"))
HARD_EXTRA = 60.0


class TestTimeout(BaseException):
    """Raised into a test that ran past the suite's per-test limit."""

    __test__ = False


def _raise_in(tid: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(TestTimeout))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    if LIMIT <= 0:
        yield
        return
    tid = threading.get_ident()
    done = threading.Event()
    lock = threading.Lock()   # the test's end and the timer's firing never interleave

    def fire() -> None:
        if done.wait(LIMIT):
            return
        with lock:
            if done.is_set():
                return
            sys.stderr.write(f"\n*** {item.nodeid} ran past {LIMIT:g} s: stacks of every thread follow; failing it\n")
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            _raise_in(tid)

    faulthandler.dump_traceback_later(LIMIT + HARD_EXTRA, exit=True)
    timer = threading.Thread(target=fire, daemon=True, name="exactspec-test-timeout")
    timer.start()
    try:
        yield
    finally:
        with lock:
            done.set()
        faulthandler.cancel_dump_traceback_later()
