"""The ``exactspec`` command: ``check`` (the main job), ``audit``, ``search``, ``audit-sampler``, ``audit-loop``,
``sweep``, ``prove``, ``rules``, ``findings`` (the findings on published code) and ``fetch-vllm`` (vLLM's
rejection sampler files from its wheel).

Exit codes, the same for every command:

- 0: every claim checked holds (``check``) / the law is kept (``audit``, ``search``,
  ``audit-sampler``, ``audit-loop``), decided in exact arithmetic over everything the command says it covered;
- 1: a bias was found (``audit``, ``search``, ``audit-sampler``, ``audit-loop``) or a claim is broken (``check``);
- 2: bad input, or user code failed (raised, called ``sys.exit``, drew randomness the audit
  cannot see, could not be imported);
- 3: the check is not complete: a budget (time, paths, depth, memory) ran out first, a search
  stopped before covering its space or skipped instances where the rule raised, or an inexact
  field (``--field float`` / ``mpmath``) could only bound the TV by its tolerance;
- 130: interrupted (Ctrl-C).

``check`` exits on the rules' claims (a rule claimed ``biased`` that is found biased holds);
``audit``, ``search``, ``audit-sampler`` and ``audit-loop`` exit on the law itself (1 whenever the output law
differs from the expected law, whatever the rule claims; the summary says when a claim is broken).
A closed pipe (``exactspec search ... | head -1``) does not change the exit code.

``audit-sampler`` and ``audit-loop`` search small instances by default (``--instance``: one
seeded instance). ``--json --no-timings`` (``check``, ``audit``, ``search``, ``audit-sampler``,
``audit-loop``) leaves out every
wall-clock field, so two runs print byte-identical JSON (for diffing in CI). ``check`` prints a
table that fits 120 columns; ``check --wide`` adds the full proposer descriptions and the
efficiency and time columns. ``python -m exactspec`` is the same command.

The package: :mod:`exactspec.cli.parser` builds the parser from the options commands share;
one module per command (``check``, ``audit``, ``search``, ``sweep``, ``audit_sampler``,
``audit_loop``, ``prove``, ``rules``), each with ``register(sub, options)`` (its sub-parser) and
``run(args)`` (its exit code), listed in :data:`COMMANDS`; :mod:`exactspec.cli.common` holds
what they share (the exit-code mapping ``run_command``, output that survives a closed pipe,
option parsers such as ``_tolerance``, the time budget).

>>> main(["rules", "--names"])  # doctest: +ELLIPSIS
speculative_sampling
...
0
"""

from __future__ import annotations

import os
import sys
import time
from types import ModuleType
from typing import Any, Sequence

from . import audit_loop, audit_sampler, check, fetch_vllm, findings, prove, rules, search, sweep
from . import audit as audit_command
from .check import _short_proposer, _sig4  # noqa: F401 - the check table's formats, tested by name
from .common import DEFAULT_TIME_LIMIT, TABLE_WIDTH, TIMING_KEYS, _Out, adapter_names, drop_timings, run_command
from .common import _ints, _names, _tolerance  # noqa: F401 - the option parsers, tested by name
from .parser import build
from .rules import rules_json

__all__ = ["main", "entry", "DEFAULT_TIME_LIMIT", "TABLE_WIDTH", "TIMING_KEYS", "adapter_names", "drop_timings",
           "rules_json", "COMMANDS"]

#: the sub-commands in the order ``exactspec --help`` lists them: name -> module with ``register(sub, options)``
#: (adds its parser) and ``run(args) -> exit code``
COMMANDS: dict[str, ModuleType] = {"check": check, "audit": audit_command, "search": search, "sweep": sweep,
                                   "audit-sampler": audit_sampler, "audit-loop": audit_loop, "prove": prove,
                                   "rules": rules, "findings": findings, "fetch-vllm": fetch_vllm}


def _parser(only: str | None = None) -> Any:
    """The ``exactspec`` argument parser (:func:`exactspec.cli.parser.build` of :data:`COMMANDS`); ``only``: the
    one command whose options are registered (the arguments start with its name), None: every command's."""
    return build(COMMANDS, only)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit code (see the module docstring for their meaning)."""
    _Out.closed = False
    argv = list(sys.argv[1:] if argv is None else argv)
    # arguments that start with a command's name are parsed by that command's sub-parser alone
    only = argv[0] if argv and argv[0] in COMMANDS else None
    try:
        args = _parser(only).parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return run_command(COMMANDS[args.cmd].run, args)


#: seconds the command waits, once it has its exit code, for threads user code started to end by themselves
THREAD_GRACE = 2.0


def _lingering_threads(grace: float) -> list[Any]:
    """Non-daemon threads other than the main one still alive ``grace`` seconds from now (joined meanwhile).

    Python waits for every non-daemon thread before the process exits, so one that user code started
    and never ends (a module that starts a thread drawing random numbers in a loop) would keep the
    command from ever returning its exit code.

    >>> _lingering_threads(0.0)
    []
    """
    import threading
    end = time.monotonic() + grace
    alive = []
    for t in threading.enumerate():
        if t is threading.main_thread() or t.daemon:
            continue
        t.join(max(0.0, end - time.monotonic()))
        if t.is_alive():
            alive.append(t)
    return alive


def entry() -> None:
    """Console-script entry point."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the pipe closed after the last write: the verdict's exit code stands
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
    lingering = _lingering_threads(THREAD_GRACE)
    if lingering:   # the verdict is out: do not wait forever on threads user code started and never ends
        names = ", ".join(t.name for t in lingering[:5]) + (", ..." if len(lingering) > 5 else "")
        _Out.write(f"exactspec: note: {len(lingering)} thread(s) started by user code still running after "
                   f"{THREAD_GRACE:g} s ({names}); exiting without waiting for them", err=True)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, OSError):
            pass
        os._exit(code)
    sys.exit(code)
