"""What the commands of ``exactspec`` share: output that survives a closed pipe, option parsing, exit codes.

The exit codes (see :mod:`exactspec.cli`) come from the commands' results (``exit_code``) and
from :func:`run_command`, which maps what a command raised; the helpers here turn options into
values or one-line :class:`~exactspec.ExactSpecError` messages that name the option.

>>> _ints("0, 1", "--prompt", "token ids like '0 1'")
(0, 1)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
import time
from fractions import Fraction
from typing import Any, Callable

from .._audit import default_tokens
from .._loading import load_object
from .._numbers import finite_float
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, InvalidValue
from ..instances import make_instance
from ..laws import to_rational
from ..rules import Rule, as_rule, get

#: wall-clock seconds a command may run unless ``--time-limit`` says otherwise (then exit 3)
DEFAULT_TIME_LIMIT = 600.0

#: the widest line ``exactspec check`` prints without ``--wide``
TABLE_WIDTH = 120

#: JSON keys that hold wall-clock measurements, left out by ``--no-timings`` (at any depth)
TIMING_KEYS = frozenset({"seconds", "elapsed", "wall_time"})


class _Out:
    """stdout that survives a closed pipe: the rest of the output is dropped, the exit code is kept."""

    closed = False

    @classmethod
    def write(cls, text: str, *, err: bool = False) -> None:
        stream = sys.stderr if err else sys.stdout
        if cls.closed and not err:
            return
        try:
            stream.write(text + "\n")
            stream.flush()
        except BrokenPipeError:
            if err:
                return
            cls.closed = True
            try:  # later writes (and the interpreter's final flush) go nowhere
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError, AttributeError):
                pass


def _print(text: str = "") -> None:
    _Out.write(text)


def _warn(text: str) -> None:
    _Out.write(f"exactspec: warning: {text}", err=True)


def _tolerance(text: str) -> Any:
    """argparse type of ``--tolerance``: a rational TV >= 0, like ``1/1000``, ``1e-12`` or ``2**-40``.

    >>> _tolerance("2**-40") == Fraction(1, 2 ** 40), _tolerance("0")
    (True, Fraction(0, 1))
    """
    m = re.fullmatch(r"\s*2\s*\*\*\s*-\s*(\d{1,4})\s*", text)
    try:
        v = Fraction(1, 2 ** int(m.group(1))) if m else to_rational(text, "--tolerance", floats=False)
    except ExactSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"--tolerance must be >= 0, got {text!r}")
    return v


def _seconds(text: str) -> float:
    """argparse type of ``--time-limit``: a positive, finite number of seconds."""
    try:
        v = finite_float(text, "--time-limit")
    except ExactSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"--time-limit must be a positive number of seconds, got {text!r}")
    return v


class _Clock:
    """The whole command's wall-clock budget: what is left of it, as a :class:`Budget` per audit."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def budget(self, done: str = "") -> Budget:
        left = self.left()
        if left <= 0:
            raise BudgetExceeded("seconds", self.seconds, covered={"done": done} if done else None)
        return Budget(seconds=left)


def _wrap(text: str, width: int = TABLE_WIDTH) -> list[str]:
    """Prose lines of at most ``width`` characters (words are never split)."""
    return textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]


def drop_timings(data: Any) -> Any:
    """``data`` (JSON-ready dicts and lists) without wall-clock fields, at any depth: what ``--no-timings`` prints.

    Keys in :data:`TIMING_KEYS` and keys ending in ``_seconds`` are left out, so two runs of the
    same command print byte-identical JSON.

    >>> drop_timings({"tv": "1/3", "seconds": 0.25, "rules": [{"seconds": 1.5, "paths": 7}]})
    {'tv': '1/3', 'rules': [{'paths': 7}]}
    """
    if isinstance(data, dict):
        return {k: drop_timings(v) for k, v in data.items()
                if not (isinstance(k, str) and (k in TIMING_KEYS or k.endswith("_seconds")))}
    if isinstance(data, list):
        return [drop_timings(v) for v in data]
    return data


def _dump(data: dict, args: Any) -> str:
    """The JSON a command prints (``--no-timings``: without wall-clock fields)."""
    return json.dumps(drop_timings(data) if getattr(args, "no_timings", False) else data, indent=1)


def _no_timings_needs_json(args: Any) -> None:
    if getattr(args, "no_timings", False) and not args.json:
        raise InvalidValue("--no-timings applies to --json output (add --json)")


def adapter_names() -> tuple[str, ...]:
    """The names ``exactspec audit-sampler --adapter`` accepts, as :func:`exactspec.samplers.get_adapter` knows them.

    >>> adapter_names()
    ('numpy', 'numpy-tree', 'transformers', 'vllm', 'flashinfer', 'vllm-v1', 'torch-tree', 'sglang', 'sglang-tree-greedy')
    """
    from ..samplers import adapters
    names = getattr(adapters, "ADAPTER_NAMES", None)
    if names:
        return tuple(names)
    found = list(adapters.ADAPTERS)
    try:  # get_adapter's error message lists every name, the torch adapters included
        adapters.get_adapter("\0")
    except ExactSpecError as exc:
        m = re.search(r"choose one of (.+?) or pass", str(exc))
        if m:
            found += [n.strip() for n in m.group(1).split(",") if n.strip() not in found]
    return tuple(found)


def _ints(text: str, flag: str, what: str, *, empty: bool = False) -> tuple[int, ...]:
    """Parse '0 1' or '0,1' into ints, or a one-line error naming the flag.

    Every option given as a list goes through here (or :func:`_names`), so a given but empty value
    (``--expansion ''``) is refused the same way everywhere, never taken for the default; only a
    list that may be empty (``--prompt ''``: the empty prompt) passes ``empty=True``.

    >>> _ints("2,1", "--expansion", "ints like '2 1'")
    (2, 1)
    >>> _ints(" ", "--expansion", "ints like '2 1'")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: --expansion must be ints like '2 1', got ' ' (empty)
    """
    parts = text.replace(",", " ").split()
    if not parts and not empty:
        raise InvalidValue(f"{flag} must be {what}, got {text!r} (empty)")
    if any(len(t) > 12 for t in parts):
        raise InvalidValue(f"{flag} must be {what}, got {text[:40]!r}")
    try:
        return tuple(int(t) for t in parts)
    except ValueError:
        raise InvalidValue(f"{flag} must be {what}, got {text!r}") from None


def _names(text: str, flag: str, what: str) -> list[str]:
    """Parse 'a,b' or 'a b' into names, or a one-line error naming the flag when none is given.

    >>> _names("speculative_sampling, mss", "--rules", "catalog names")
    ['speculative_sampling', 'mss']
    """
    names = [n for n in text.replace(",", " ").split() if n]
    if not names:
        raise InvalidValue(f"{flag} must be {what}, got {text!r} (empty)")
    return names


_load = load_object


def _rule(spec: str) -> Rule:
    """A catalog rule by name, or the user's rule ``MODULE:FUNCTION`` (a Rule or a plain fn(step, rng))."""
    if ":" in spec and "(" not in spec:
        return as_rule(_load(spec, "--rule"))
    return get(spec)


_CHAIN_ONLY = ("gamma", "sampling")
_TREE_ONLY = ("expansion", "children")


def _family_options(args: Any, family: str, what: str) -> None:
    """Options that do not apply to a chain (tree) rule or adapter are errors, not silently ignored."""
    wrong = _TREE_ONLY if family == "chain" else _CHAIN_ONLY
    given = [f"--{o}" for o in wrong if getattr(args, o, None) is not None]
    if given:
        raise InvalidValue(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to {what}, which "
                           f"verifies {family}s (use {' / '.join('--' + o for o in (_CHAIN_ONLY if family == 'chain' else _TREE_ONLY))})")


#: the one seeded instance of ``audit`` / ``audit-sampler --instance`` when --gamma / --expansion are left out (the
#: help texts state these values)
INSTANCE_GAMMA, INSTANCE_EXPANSION = 4, "2 1"


def _instance(args: Any, family: str, prompt: tuple | None) -> tuple[Any, Any]:
    """The seeded instance of ``audit``/``audit-sampler`` and its proposer (a tree for tree rules/adapters)."""
    gamma = INSTANCE_GAMMA if args.gamma is None else args.gamma
    inst = make_instance(vocab=args.vocab, order=args.order, gamma=gamma, tokens=1, seed=args.seed,
                         sampling=args.sampling or "sample", claim="draft" if family == "tree" else args.claim,
                         prompt=prompt)
    if family != "tree":
        return inst, inst.proposer
    from ..drafts import tree
    expansion = _ints(INSTANCE_EXPANSION if args.expansion is None else args.expansion, "--expansion", "ints like '2 1'")
    return inst, tree(expansion, children=args.children or "iid", claim=args.claim)


def _horizon(args: Any, proposer: Any) -> int:
    tokens = default_tokens(proposer) if args.tokens is None else args.tokens
    return tokens


def _report_out(args: Any, rep: Any) -> int:
    if args.json:
        _print(_dump(rep.to_dict(), args))
        for w in rep.warnings:
            _warn(w)
    else:
        _print(rep.summary())
    return rep.exit_code



def _code_search_out(args: Any, found: Any) -> int:
    """Print a search over a user's code (sampler or loop): the result, and for a counterexample the
    regression test that imports the code by the ``MODULE:FUNCTION`` it was given; return the exit code."""
    from dataclasses import replace
    if found.found:
        found = replace(found, sampler_ref=args.target)
    if args.json:
        _print(_dump(found.to_dict(), args))
    else:
        _print(str(found))
        if found.found:
            what = "crash remains" if found.kind == "crash" else "bias exists"
            _print(f"\nregression test (fails while the {what}):\n")
            _print(found.to_pytest())
    return found.exit_code


def run_command(cmd: Callable[[Any], int], args: Any) -> int:
    """Run a command under its time limit and map what it raised to the exit code (one message line on stderr).

    0/1/3 come from the command's own result; a :class:`~exactspec.BudgetExceeded`, a
    ``MemoryError`` or ``RecursionError`` is 3 (incomplete), an :class:`~exactspec.ExactSpecError`
    its ``exit_code`` (2: bad input or user code failed), user code calling ``sys.exit`` or a
    ``ValueError`` 2, Ctrl-C 130.

    >>> import argparse
    >>> run_command(lambda args: 0, argparse.Namespace(cmd="rules"))
    0
    """
    try:
        return _guarded(cmd, args)
    except KeyboardInterrupt:
        _Out.write("exactspec: interrupted", err=True)
        return 130
    except SystemExit as exc:  # user code (a rule, a sampler, a model) called sys.exit: it failed, exit 2
        _Out.write(f"exactspec: error: user code called sys.exit({exc.code!r}) during the {args.cmd}; nothing was "
                   "checked", err=True)
        return 2
    except BudgetExceeded as exc:
        _Out.write(f"exactspec: {exc}", err=True)
        return 3
    except ExactSpecError as exc:
        _Out.write(f"exactspec: error: {exc}", err=True)
        return exc.exit_code
    except (MemoryError, RecursionError) as exc:  # a budget the machine set: the check is not complete
        _Out.write(f"exactspec: budget exceeded: {type(exc).__name__} (the check did not complete)", err=True)
        return 3
    except ValueError as exc:  # e.g. a prompt that is not integers
        _Out.write(f"exactspec: error: {exc}", err=True)
        return 2


def _guarded(cmd: Callable[[Any], int], args: Any) -> int:
    """Run ``cmd`` under the command's wall-clock limit (a watchdog that also stops busy user code)."""
    limit = getattr(args, "time_limit", None)
    try:
        from ..enumerate.watchdog import deadline
    except ImportError:  # pragma: no cover - the watchdog ships with the engine
        return cmd(args)
    if limit is None:
        return cmd(args)
    # the command's own budgets stop it first and say what they covered; the watchdog is the backstop
    # for code that checks no clock (a user's busy loop, a long closed form)
    with deadline(limit + max(1.0, 0.05 * limit)):
        return cmd(args)
