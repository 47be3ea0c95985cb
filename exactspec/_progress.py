"""Progress of long jobs on stderr: a ``tqdm`` bar on a terminal, a summary line every few seconds in logs.

Every long job (a search, ``check``, a sweep, a sampler or loop search, a proof) reports through
one callback protocol, ``progress(done, total)``: ``done`` units finished so far, ``total`` the
number known up front (``None``: unknown, then a counter without an ETA). :func:`reporter` makes
such a callback for a job:

- on a terminal (the stream's ``isatty()``), a ``tqdm`` bar with the total and an ETA, shown
  only once the job has run :data:`DELAY` seconds and erased when it is closed;
- elsewhere (a CI log, a pipe, a file), one line every :data:`EVERY` seconds, such as
  ``searching: 1200/5000 instances, 34 s, ETA 1 min 52 s``, and a last line when a job that
  printed one ends;
- nothing for a job that ends first (under :data:`DELAY` seconds on a terminal, under
  :data:`EVERY` in a log), nothing at all with ``enabled=False`` (``--quiet``,
  ``progress=False``), and nothing when ``sys.stderr`` has been replaced by an in-memory stream
  (a test's captured output, ``contextlib.redirect_stderr(io.StringIO())``): what a program
  captures there is its messages, which progress would change with the machine's speed.

>>> import io
>>> ticks, log = iter([0.0, 12.0, 20.0, 25.0]), io.StringIO()    # a fake clock: no sleeping
>>> bar = reporter("searching", unit="instances", stream=log, clock=lambda: next(ticks))
>>> bar(1200, 5000)    # 12 s in: the first line
>>> bar(5000, 5000)    # 20 s in: the next line is due at 22 s
>>> bar.close()        # 25 s in: a last line, since the log had one
>>> print(log.getvalue(), end="")
searching: 1200/5000 instances, 12 s, ETA 38 s
searching: 5000/5000 instances, 25 s, done

The callback also has ``close()`` (idempotent; the job's ``finally`` calls it) and is a context
manager: ``with reporter("sweep", unit="cells") as progress: ...``.
"""

from __future__ import annotations

import io
import sys
import time
from typing import Any, Callable, TextIO

__all__ = ["reporter", "resolve", "close", "Reporter", "MassProgress", "duration", "DELAY", "EVERY", "PERCENT"]

#: seconds a job runs before a terminal shows its bar (shorter jobs print nothing)
DELAY = 1.0
#: the ``unit`` of a job counted in percent (:class:`MassProgress`): shown as ``43%``, not ``43/100 units``
PERCENT = "% of the probability"
#: seconds between two summary lines when stderr is not a terminal (the first after this long)
EVERY = 10.0


def duration(seconds: float) -> str:
    """``seconds`` as a person reads it: ``34 s``, ``1 min 52 s``, ``2 h 5 min``.

    >>> duration(0.4), duration(34.2), duration(112), duration(7500)
    ('0 s', '34 s', '1 min 52 s', '2 h 5 min')
    """
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _has_fd(stream: Any) -> bool:
    """Whether ``stream`` writes to an operating-system file (a terminal, a pipe, a CI log, a file)."""
    try:
        return stream.fileno() >= 0
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class Reporter:
    """The callback :func:`reporter` returns: ``progress(done, total)``, then ``close()``.

    ``clock`` (seconds, monotonic) decides when anything is shown, so a test drives it without
    sleeping; ``tqdm`` computes the bar's own rate and ETA.
    """

    def __init__(self, what: str, unit: str, stream: Any, clock: Callable[[], float], delay: float,
                 every: float) -> None:
        self.what, self.unit, self.stream, self.clock = what, unit, stream, clock
        self.delay, self.every = delay, every
        self.terminal = _is_terminal(stream)
        self.start = clock()
        self.next_line = self.start + every   # when the next summary line is due (not on a terminal)
        self.lines = 0                         # summary lines printed
        self.bar: Any = None                   # the tqdm bar, once shown
        self.done: int = 0
        self.total: int | None = None
        self.closed = False

    def __call__(self, done: int, total: int | None = None) -> None:
        if self.closed:
            return
        if total is not None and done > total:   # extra work past the plan (a search shrinking its find)
            done = total
        self.done, self.total = done, total
        now = self.clock()
        if self.terminal:
            self._bar(now)
        elif now >= self.next_line:
            self._line(now)
            self.next_line = now + self.every

    def _bar(self, now: float) -> None:
        if self.bar is None:
            if now - self.start < self.delay:
                return
            from tqdm import tqdm
            unit = "%" if self.unit == PERCENT else f" {self.unit}"
            self.bar = tqdm(total=self.total, initial=self.done, desc=self.what, unit=unit,
                            file=self.stream, leave=False, dynamic_ncols=True, mininterval=0.25)
            return
        if self.bar.total != self.total:
            self.bar.total = self.total
            self.bar.refresh()
        if self.done != self.bar.n:
            self.bar.update(self.done - self.bar.n)

    def _line(self, now: float, end: bool = False) -> None:
        elapsed = now - self.start
        if self.unit == PERCENT:
            text = f"{self.what}: {self.done}{self.unit}, {duration(elapsed)}"
        else:
            count = f"{self.done}" if self.total is None else f"{self.done}/{self.total}"
            text = f"{self.what}: {count} {self.unit}, {duration(elapsed)}"
        if end:
            text += ", ended" if self.total is None else ", done" if self.done >= self.total else ", stopped"
        elif self.total is not None and self.done > 0:
            text += f", ETA {duration(elapsed * (self.total - self.done) / self.done)}"
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr: progress is never worth an error
            self.closed = True
        self.lines += 1

    def close(self) -> None:
        """End the report: erase the terminal bar, or print a last line in a log that has had one."""
        if self.closed:
            return
        if self.bar is not None:
            self.bar.close()
        elif self.lines:
            self._line(self.clock(), end=True)
        self.closed = True

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def reporter(what: str, *, unit: str = "chunks", enabled: bool = True, stream: TextIO | None = None,
             clock: Callable[[], float] = time.monotonic, delay: float | None = None, every: float | None = None
             ) -> Reporter | None:
    """The progress callback ``progress(done, total)`` of one job named ``what``, counting ``unit``; None when not ``enabled``.

    ``stream`` defaults to ``sys.stderr`` (read when called) when that is an operating-system file
    (None, nothing to report, when it is an in-memory stream such as a test's captured stderr); a
    ``stream`` given is always written to. ``delay`` and ``every`` default to :data:`DELAY` and
    :data:`EVERY`, ``clock`` to :func:`time.monotonic`.

    >>> reporter("check", enabled=False) is None
    True
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()):
    ...     reporter("check") is None
    True
    """
    if not enabled:
        return None
    if stream is None:
        stream = sys.stderr
        if not _has_fd(stream):
            return None
    return Reporter(what, unit, stream, clock, DELAY if delay is None else delay, EVERY if every is None else every)


def resolve(progress: Any, what: str, *, unit: str = "chunks") -> Callable[..., None] | None:
    """A job's ``progress=`` argument as a callback: None or True the default :func:`reporter`, False none, a callable itself.

    >>> resolve(False, "sweep") is None, callable(resolve(print, "sweep"))
    (True, True)
    """
    if progress is None or progress is True:
        return reporter(what, unit=unit)
    if progress is False:
        return None
    if not callable(progress):
        from .errors import InvalidType
        raise InvalidType(f"progress must be True, False, None or a function progress(done, total), got "
                          f"{progress!r}")
    return progress


def close(progress: Any) -> None:
    """Close ``progress`` when it is a :class:`Reporter` (a user's callable is left alone).

    >>> close(None), close(print)
    (None, None)
    """
    if isinstance(progress, Reporter):
        progress.close()


class MassProgress:
    """The progress of one enumeration of branches, by the probability they cover: ``add(weight)`` after each branch.

    An audit that runs code once per branch of its randomness cannot count its branches up front,
    but the probabilities of the branches it has finished add up to 1 when it is complete: that is
    its total. ``progress(done, 100)`` sees the whole percent covered so far (rounded down, so 100
    only once every branch is in), after every branch. A depth-first enumeration finishes its
    likeliest branches first, so the ETA this gives is an estimate, not a bound.

    >>> from fractions import Fraction
    >>> seen = []
    >>> mass = MassProgress(lambda done, total: seen.append((done, total)))
    >>> for w in (Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)):
    ...     mass.add(w)
    >>> seen
    [(50, 100), (83, 100), (100, 100)]
    """

    __slots__ = ("progress", "covered")

    def __init__(self, progress: Callable[[int, int | None], None]) -> None:
        self.progress = progress
        self.covered = 0.0

    def add(self, weight: Any) -> None:
        """Count a finished branch of probability ``weight`` (exact or float)."""
        self.covered += float(weight)
        # float sums drift by ulps: 1 - 1e-12 is done; nothing is shown past 100
        self.progress(min(100, int(self.covered * 100 + 1e-9)), 100)
