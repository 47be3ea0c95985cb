"""The ``exactspec`` command: ``check`` (the main job), ``audit``, ``search``, ``audit-sampler``, ``audit-loop``,
``sweep``, ``prove`` and ``rules``.

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

>>> main(["rules", "--names"])  # doctest: +ELLIPSIS
speculative_sampling
...
0
"""

from __future__ import annotations

import argparse
import decimal
import json
import os
import re
import sys
import textwrap
import time
from fractions import Fraction
from typing import Any, Callable, Sequence

from . import __version__
from ._audit import audit, default_tokens
from ._numbers import finite_float
from .laws import to_rational
from .samplers.adapters.base import PRECISIONS
from .enumerate import Budget
from ._loading import load_object
from .errors import BudgetExceeded, ExactSpecError
from .instances import check_cases, default_instance, make_instance
from .rules import Rule, as_rule, catalog, get

__all__ = ["main", "entry", "DEFAULT_TIME_LIMIT", "TABLE_WIDTH", "TIMING_KEYS", "adapter_names", "drop_timings",
           "rules_json"]

#: wall-clock seconds a command may run unless ``--time-limit`` says otherwise (then exit 3)
DEFAULT_TIME_LIMIT = 600.0

#: the widest line ``exactspec check`` prints without ``--wide``
TABLE_WIDTH = 120

#: JSON keys that hold wall-clock measurements, left out by ``--no-timings`` (at any depth)
TIMING_KEYS = frozenset({"seconds", "elapsed", "wall_time"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        self.exit(2, f"exactspec: error: {message} (see `{self.prog} --help`)\n")


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


def _sig4(x: Any) -> str:
    """``x`` (a rational, float or mpmath number) as a decimal with 4 significant digits.

    The one format of the TV column of ``exactspec check``; exact values are in ``--json``.
    Rationals are rounded exactly, so a value below float range is not printed as 0.

    >>> from fractions import Fraction
    >>> _sig4(0), _sig4(Fraction(146767916, 175720125)), _sig4(Fraction(1, 3)), _sig4(Fraction(1, 10 ** 400))
    ('0', '0.8352', '0.3333', '1e-400')
    >>> _sig4(6.7791e-38), _sig4(1)
    ('6.779e-38', '1')
    """
    if x == 0:
        return "0"
    with decimal.localcontext() as ctx:
        ctx.prec, ctx.Emin, ctx.Emax = 4, decimal.MIN_EMIN, decimal.MAX_EMAX
        num, den = getattr(x, "numerator", None), getattr(x, "denominator", None)
        if num is not None and den is not None and not callable(num):  # Fraction, gmpy2 mpq, int
            d = decimal.Decimal(int(num)) / decimal.Decimal(int(den))
        else:  # float, mpmath mpf: their decimal string, rounded to 4 digits
            try:
                d = +decimal.Decimal(str(x))
            except decimal.InvalidOperation:
                return str(x)
    if not d.is_finite():
        return str(d).lower()
    if decimal.Decimal("1e-300") < abs(d) < decimal.Decimal("1e300"):
        return f"{float(d):.4g}"
    return format(d.normalize(), ".4g").replace("E", "e")


def _num(report: Any, x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


def _short_proposer(proposer: Any) -> str:
    """A compact description of a proposer for the ``check`` table (``--wide`` shows ``describe()``).

    >>> from exactspec import drafts
    >>> _short_proposer(drafts.chain(4)), _short_proposer(drafts.tree((2, 1), children="topk", claim="point_mass"))
    ('chain g=4 sample/draft', 'tree (2,1) topk/point_mass')
    >>> _short_proposer(drafts.tree((2, 1), children="without_replacement", claim="renormalized"))
    'tree (2,1) wor/renormalized'
    """
    if hasattr(proposer, "expansion") and hasattr(proposer, "children"):
        children = {"without_replacement": "wor"}.get(proposer.children, proposer.children)
        return f"tree ({','.join(map(str, proposer.expansion))}) {children}/{proposer.claim}"
    if hasattr(proposer, "gamma") and hasattr(proposer, "sampling"):
        src = getattr(proposer, "sampled_from", None)
        return f"chain g={proposer.gamma} {proposer.sampling}/{proposer.claim}" + (
            "" if src is None else f" from {getattr(src, 'name', src)}")
    if isinstance(getattr(proposer, "models", None), (list, tuple)) and hasattr(proposer, "gamma"):
        return f"merge {len(proposer.models)}x g={proposer.gamma}"
    return str(proposer.describe())


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
        raise ExactSpecError("--no-timings applies to --json output (add --json)")


def adapter_names() -> tuple[str, ...]:
    """The names ``exactspec audit-sampler --adapter`` accepts, as :func:`exactspec.samplers.get_adapter` knows them.

    >>> adapter_names()
    ('numpy', 'numpy-tree', 'transformers', 'vllm', 'flashinfer', 'torch-tree')
    """
    from .samplers import adapters
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
    exactspec.errors.ExactSpecError: --expansion must be ints like '2 1', got ' ' (empty)
    """
    parts = text.replace(",", " ").split()
    if not parts and not empty:
        raise ExactSpecError(f"{flag} must be {what}, got {text!r} (empty)")
    if any(len(t) > 12 for t in parts):
        raise ExactSpecError(f"{flag} must be {what}, got {text[:40]!r}")
    try:
        return tuple(int(t) for t in parts)
    except ValueError:
        raise ExactSpecError(f"{flag} must be {what}, got {text!r}") from None


def _names(text: str, flag: str, what: str) -> list[str]:
    """Parse 'a,b' or 'a b' into names, or a one-line error naming the flag when none is given.

    >>> _names("speculative_sampling, mss", "--rules", "catalog names")
    ['speculative_sampling', 'mss']
    """
    names = [n for n in text.replace(",", " ").split() if n]
    if not names:
        raise ExactSpecError(f"{flag} must be {what}, got {text!r} (empty)")
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
        raise ExactSpecError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to {what}, which "
                             f"verifies {family}s (use {' / '.join('--' + o for o in (_CHAIN_ONLY if family == 'chain' else _TREE_ONLY))})")


def _instance(args: Any, family: str, prompt: tuple | None) -> tuple[Any, Any]:
    """The seeded instance of ``audit``/``audit-sampler`` and its proposer (a tree for tree rules/adapters)."""
    gamma = 4 if args.gamma is None else args.gamma
    inst = make_instance(vocab=args.vocab, order=args.order, gamma=gamma, tokens=1, seed=args.seed,
                         sampling=args.sampling or "sample", claim="draft" if family == "tree" else args.claim,
                         prompt=prompt)
    if family != "tree":
        return inst, inst.proposer
    from .drafts import tree
    expansion = _ints("2 1" if args.expansion is None else args.expansion, "--expansion", "ints like '2 1'")
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


def _parallel_args(args: Any) -> bool:
    """Whether ``--workers`` or ``--scheduler`` asked for the chunked (parallel) path."""
    return getattr(args, "workers", None) is not None or getattr(args, "scheduler", None) is not None


_CHECK_CASES: dict[int, Any] = {}


def _check_chunk(job: tuple) -> tuple:
    """One configuration of ``check``, audited in a worker: ``("ok", report, seconds)`` or ``("error", ...)``."""
    i, field, precision, deadline, with_worst = job
    if "cases" not in _CHECK_CASES:  # rebuilt once per worker process from the embedded instance
        _CHECK_CASES["inst"] = inst = default_instance()
        _CHECK_CASES["cases"] = check_cases(inst)
    inst, case = _CHECK_CASES["inst"], _CHECK_CASES["cases"][i]
    t0 = time.perf_counter()
    try:
        left = None if deadline is None else deadline - time.time()
        if left is not None and left <= 0:
            raise BudgetExceeded("seconds", left)
        rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                    case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                    prompt=inst.prompt, tokens=case.tokens, field=field, precision=precision,
                    budget=None if left is None else Budget(seconds=left))
    except BudgetExceeded:
        return ("budget", None, 0.0)
    except ExactSpecError as exc:
        return ("error", (type(exc).__name__, str(exc), exc.exit_code), 0.0)
    # the table and the JSON of `check` use the laws only through the support violations and (JSON: it prints
    # "output": null) the worst outcomes: keep those outcomes, not 15,625 exact pairs per report
    keep = set(rep.support_violations) | ({o.tokens for o in rep.worst} if with_worst else set())
    rep.output = {k: v for k, v in rep.output.items() if k in keep}
    rep.expected = {k: v for k, v in rep.expected.items() if k in keep}
    return ("ok", rep, time.perf_counter() - t0)


def _check_parallel(args: Any, cases: list) -> list[tuple[Any, float]]:
    """Every configuration of ``check`` on ``--workers`` processes or a ``--scheduler``; reports in table order.

    Configurations without a closed form (enumerated branch by branch: the long ones) are
    submitted first, for load balance; the table's order, and every figure in it, is the same.
    """
    from . import parallel
    if args.workers is not None and args.workers < 0:
        raise ExactSpecError(f"--workers must be >= 0 (0: every core), got {args.workers}")
    deadline = parallel.wall_deadline(args.time_limit)
    order = sorted(range(len(cases)), key=lambda i: (cases[i].rule.closed_form is not None, i))
    jobs = [(i, args.field, args.precision, deadline, bool(args.json)) for i in range(len(cases))]
    with parallel.executor_for(None, args.workers, args.scheduler) as (ex, owned):
        run = parallel.run_chunks(_check_chunk, jobs, executor=ex or parallel._Inline(), owned=owned or ex is None,
                                  order=order, deadline=deadline, rebuild=parallel.pool_maker(args.workers),
                                  progress=parallel.terminal_progress("check"))
    out: list[tuple[Any, float]] = []
    for i, case in enumerate(cases):
        if i not in run.results:
            reason = run.lost.get(i, "not finished by the time limit")
            if "time limit" in reason:
                raise BudgetExceeded("seconds", args.time_limit, covered={"done": f"{i} of the configurations"})
            missing = [f"{c.rule.name} with {c.proposer.describe()}: {run.lost.get(j, 'not run')}"
                       for j, c in enumerate(cases) if j not in run.results]
            raise parallel.WorkersLost(f"check: {len(missing)} of {len(cases)} configurations were not covered (their "
                                       f"workers died): {'; '.join(missing)}", missing=missing)
        status, value, dt = run.results[i]
        if status == "budget":
            raise BudgetExceeded("seconds", args.time_limit, covered={"done": f"{i} of the configurations"})
        if status == "error":
            err = ExactSpecError(f"{value[0]}: {value[1]}")
            err.exit_code = value[2]
            raise err
        out.append((value, dt))
    return out


def _cmd_check(args: Any) -> int:
    _no_timings_needs_json(args)
    if args.wide and args.json:
        raise ExactSpecError("--wide applies to the table, not to --json output (which has every field)")
    inst = default_instance()
    clock = _Clock(args.time_limit)
    rows: list[dict[str, str]] = []
    reports = []
    cases = check_cases(inst)
    done = _check_parallel(args, cases) if _parallel_args(args) else None
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        if done is not None:  # audited in chunks on workers; merged here in the table's order
            rep, dt = done[i]
        else:
            rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                        case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                        prompt=inst.prompt, tokens=case.tokens, field=args.field, precision=args.precision,
                        budget=clock.budget(f"{i} of the configurations"))
        rep.claim = case.claim
        dt = time.perf_counter() - t0 if done is None else dt
        reports.append(rep)
        inexact_lossless = rep.lossless and not rep.exact  # an inexact field only bounds the TV
        if inexact_lossless:
            holds = "undecided" if rep.claim == "biased" else "within tol"
        else:
            holds = "yes" if rep.claim_holds else "NO"
        rows.append({"rule": case.rule.name, "proposer": case.proposer.describe(),
                     "short": _short_proposer(case.proposer), "tokens": str(case.tokens), "claim": case.claim,
                     "tv": _sig4(rep.tv), "holds": holds,
                     "verdict": f"lossless (within {_sig4(rep.tolerance)})" if inexact_lossless else rep.verdict,
                     "verdict_short": "<= tol" if inexact_lossless else rep.verdict,
                     "tokens/call": _num(rep, rep.tokens_per_call), "accepted/call": _num(rep, rep.accepted_per_call),
                     "nodes/call": _num(rep, rep.nodes_per_call), "time": f"{dt:.3f}s"})
    broken = [f"{r['rule']} with {r['proposer']}" for r in rows if r["holds"] == "NO"]
    inexact = [r for r in rows if r["holds"] in ("undecided", "within tol")]
    ok = not broken
    code = 1 if broken else (3 if inexact else 0)
    conditional = {c.rule.name: c.rule.claim_text for c in cases if c.rule.condition is not None}
    if args.json:
        _print(_dump({"instance": {k: v for k, v in reports[0].instance.items() if k not in ("proposer", "tokens")},
                      "field": args.field, "ok": ok, "exact": not inexact, "exit_code": code,
                      "rules": [r.to_dict() | {"output": None, "expected": None} | (
                          {"claim_condition": conditional[r.rule]} if r.rule in conditional else {})
                          for r in reports]}, args))
        return code
    if args.wide:
        cols = [("rule", "rule"), ("proposer", "proposer"), ("tokens", "tokens"), ("claim", "claim"), ("TV", "tv"),
                ("verdict", "verdict"), ("holds", "holds"), ("tokens/call", "tokens/call"),
                ("accepted/call", "accepted/call"), ("nodes/call", "nodes/call"), ("time", "time")]
    else:
        cols = [("rule", "rule"), ("proposer", "short"), ("tokens", "tokens"), ("claim", "claim"), ("TV", "tv"),
                ("verdict", "verdict_short"), ("holds", "holds")]
    table = [[h for h, _ in cols]] + [[r[k] for _, k in cols] for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    if not args.wide:  # a proposer text that would still push a line past the width is cut short
        over = sum(widths) + 2 * (len(widths) - 1) - TABLE_WIDTH
        if over > 0:
            widths[1] = max(len("proposer"), widths[1] - over)
            for t in table[1:]:
                if len(t[1]) > widths[1]:
                    t[1] = t[1][:widths[1] - 1] + "~"
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    width = None if args.wide else TABLE_WIDTH
    prose = (lambda text: [text]) if width is None else _wrap  # noqa: E731
    for ln in prose(f"exactspec check — vocab {inst.target.vocab}, order {inst.target.order} seeded tables (seed 0), "
                    f"perturbed draft (seed 1), prompt {inst.prompt}"):
        _print(ln)
    for ln in prose(f"field: {reports[0].field.describe()}"):
        _print(ln)
    _print(line(table[0]))
    _print(line(["-" * w for w in widths]))
    for r in table[1:]:
        _print(line(r))
    _print()
    held = sum(r["holds"] == "yes" for r in rows)
    for ln in prose(f"{held}/{len(rows)} claims hold on this instance, every position of a first and a second step "
                    "observed" + (f"; broken: {', '.join(broken)}" if broken else "")):
        _print(ln)
    for name, text in conditional.items():   # the claim column gives the claim at this configuration
        for ln in prose(f"conditional claim: {name}: {text}"):
            _print(ln)
    if inexact and ok:
        tol = _sig4(reports[0].tolerance)
        for ln in prose(f"not an exact proof: {len(inexact)} claim(s) read lossless (within {tol}), the {args.field} "
                        "field's tolerance: lossless claims hold within tol, biased claims are undecided (exit 3); "
                        "run without --field for the exact check"):
            _print(ln)
    if not args.wide:
        for ln in _wrap("TV: total variation from the expected law, 4 significant digits (exact values: --json). "
                        "Proposers: chain g=GAMMA SAMPLING/CLAIM, tree (EXPANSION) CHILDREN/CLAIM "
                        "(wor: without_replacement), merge Nx g=GAMMA (N draft models). --wide: full proposer "
                        "descriptions, tokens/call, accepted/call, nodes/call and time."):
            _print(ln)
    return code


def _cmd_audit(args: Any) -> int:
    _no_timings_needs_json(args)
    rule = _rule(args.rule)
    _family_options(args, rule.family, f"rule {rule.name}")
    prompt = None if args.prompt is None else _ints(args.prompt, "--prompt", "token ids like '0 1'", empty=True)
    inst, proposer = _instance(args, rule.family, prompt)
    rep = audit(target=inst.target, draft=inst.draft, proposer=proposer, rule=rule, prompt=inst.prompt,
                tokens=_horizon(args, proposer), decoding=args.decoding, field=args.field, precision=args.precision,
                budget=Budget(seconds=args.time_limit))
    return _report_out(args, rep)


def _search_result_json(found: Any, rule: Any, args: Any) -> str:
    if hasattr(found, "to_dict"):
        return _dump(found.to_dict(), args)
    if hasattr(found, "to_json"):
        return _dump(json.loads(found.to_json()), args)
    return _dump({"rule": rule.name, "found": False, "space": found.space, "audited": found.audited}, args)


def _cmd_search(args: Any) -> int:
    from .counterexamples import default_space, search
    from .drafts import chain, tree
    _no_timings_needs_json(args)
    rule = _rule(args.rule)
    if rule.family == "tree":
        if args.sampling is not None:
            raise ExactSpecError(f"--sampling does not apply to rule {rule.name}, which verifies trees")
        proposer = tree((1,), children=args.children or "iid", claim=args.claim or "draft") if (
            args.children or args.claim) else None
    else:
        if args.children is not None:
            raise ExactSpecError(f"--children does not apply to rule {rule.name}, which verifies chains")
        proposer = chain(1, sampling=args.sampling or "sample", claim=args.claim or "draft")
    space = default_space(rule, proposer)
    changes: dict[str, Any] = {}
    if args.max_vocab is not None:
        if args.max_vocab < 2:
            raise ExactSpecError(f"--max-vocab must be >= 2, got {args.max_vocab}")
        changes["vocabs"] = tuple(range(2, args.max_vocab + 1))
    if args.max_gamma is not None:
        if args.max_gamma < 1:
            raise ExactSpecError(f"--max-gamma must be >= 1, got {args.max_gamma}")
        changes["shapes"] = (tuple((g,) for g in range(1, args.max_gamma + 1)) if rule.family == "chain"
                             else tuple(s for s in space.shapes if len(s) <= args.max_gamma))
    if args.tokens is not None:
        if args.tokens < 1:
            raise ExactSpecError(f"--tokens must be >= 1, got {args.tokens}")
        changes["tokens"] = tuple(range(1, args.tokens + 1))
    if args.max_denominator is not None:
        if args.max_denominator < 1:
            raise ExactSpecError(f"--max-denominator must be >= 1, got {args.max_denominator}")
        changes["max_denominator"] = args.max_denominator
        changes["exhaustive_denominator"] = min(space.exhaustive_denominator, args.max_denominator)
    space = space.with_(**changes)
    from . import parallel
    if args.workers is not None and args.workers < 0:
        raise ExactSpecError(f"--workers must be >= 0 (0: every core), got {args.workers}")
    with parallel.executor_for(None, None, args.scheduler) as (ex, _):
        found = search(rule, proposer=proposer, space=space, seed=args.seed, budget=args.time_limit, executor=ex,
                       workers=None if ex is not None else args.workers)
    code = getattr(found, "exit_code", None)
    if code is None:
        code = 1 if found.__class__.__name__ == "Counterexample" else 0
    if args.json:
        _print(_search_result_json(found, rule, args))
        return code
    _print(str(found))
    if code == 1:
        _print("\nregression test (fails while the bias exists):\n")
        _print(found.to_pytest())
    return code


def _cmd_prove(args: Any) -> int:
    """``exactspec prove``: exit 0 proven, 1 refuted (with a witness replayed exactly), 2 bad input, 3 gave up."""
    from .drafts import chain, tree
    from .prove import prove
    rule = _rule(args.rule)
    if rule.family == "tree":
        if args.gamma is not None or args.sampling is not None:
            raise ExactSpecError(f"--gamma and --sampling do not apply to rule {rule.name}, which verifies trees")
        exp = (2,) if args.expansion is None else _ints(args.expansion, "--expansion",
                                                          "children per depth like '2' or '2 1'")
        proposer = tree(tuple(exp), children=args.children or "iid", claim=args.claim or "draft")
    else:
        if args.expansion is not None or args.children is not None:
            raise ExactSpecError(f"--expansion and --children do not apply to rule {rule.name}, which verifies chains")
        proposer = chain(1 if args.gamma is None else args.gamma, sampling=args.sampling or "sample",
                         claim=args.claim or "draft")
    res = prove(rule, proposer=proposer, vocab=args.vocab, tokens=args.tokens, family=args.family,
                timeout=args.time_limit)
    if args.json:
        _print(res.to_json())
    else:
        _print(res.summary())
        if not res:
            _print("\nregression test (fails while the bias exists):\n")
            _print(res.counterexample.to_pytest())
    return res.exit_code


def _cmd_sweep(args: Any) -> int:
    from . import parallel
    from .sweep import sweep
    if args.json and args.csv:
        raise ExactSpecError("--json and --csv are exclusive")
    if args.no_timings and not (args.json or args.csv):
        raise ExactSpecError("--no-timings applies to --json or --csv output")
    if args.workers is not None and args.workers < 0:
        raise ExactSpecError(f"--workers must be >= 0 (0: every core), got {args.workers}")
    rules = None if args.rules is None else _names(args.rules, "--rules", "catalog names like 'speculative_sampling,mss'")
    proposers = None if args.proposers is None else _names(args.proposers, "--proposers", "proposers like "
                                                           "'sample/draft argmax/point_mass'")
    tokens: tuple = (None,) if args.tokens is None else _ints(args.tokens, "--tokens", "ints like '3 6'")
    table = sweep(rules, proposers, _ints(args.vocabs, "--vocabs", "ints like '2 3'"),
                  _ints(args.gammas, "--gammas", "ints like '1 2 4'"), tokens, family=args.family, order=args.order,
                  seed=args.seed, search=args.search, field=args.field, seconds=args.time_limit,
                  workers=args.workers, scheduler=args.scheduler)
    if args.json:
        _print(_dump(table.to_dict(), args))
    elif args.csv:
        _Out.write(table.to_csv(timings=not args.no_timings).rstrip("\n"))
    else:
        _print(str(table))
    return table.exit_code


def _sampler_search_space(args: Any, family: str) -> Any:
    """``audit-sampler``'s search space: --vocab, --gamma / --expansion bound the default, --tokens sets the horizon."""
    import itertools
    import math
    from .drafts import chain, tree
    from .samplers.sampler_search import sampler_space
    if args.order != 1:
        raise ExactSpecError("--order applies with --instance (the search covers context-free, per-position and "
                             "order-1 models)")
    proposer = chain(1, sampling=args.sampling or "sample", claim=args.claim) if family == "chain" else tree(
        (1,), children=args.children or "iid", claim=args.claim)
    space = sampler_space(family, proposer)
    changes: dict[str, Any] = {}
    if args.vocab < 2:
        raise ExactSpecError(f"--vocab (the search's largest vocabulary) must be >= 2, got {args.vocab}")
    changes["vocabs"] = tuple(range(2, args.vocab + 1))
    if args.gamma is not None:
        if args.gamma < 1:
            raise ExactSpecError(f"--gamma (the search's largest gamma) must be >= 1, got {args.gamma}")
        changes["shapes"] = tuple((g,) for g in range(1, args.gamma + 1))
    if args.expansion is not None:
        top = _ints(args.expansion, "--expansion", "ints like '2 1'")
        if not top or min(top) < 1:
            raise ExactSpecError(f"--expansion must be ints >= 1 like '2 1', got {args.expansion!r}")
        shapes = [s for d in range(1, len(top) + 1) for s in itertools.product(*(range(1, k + 1) for k in top[:d]))]
        changes["shapes"] = tuple(sorted(shapes, key=lambda s: (sum(math.prod(s[:i + 1]) for i in range(len(s))), s)))
    if args.tokens is not None:  # every cell at this horizon (fewer tokens are its marginals)
        if args.tokens < 1:
            raise ExactSpecError(f"--tokens (the search's horizon) must be >= 1, got {args.tokens}")
        changes.update(tokens=(args.tokens,), extra_tokens=None, only_longest=False)
    return space.with_(**changes)


def _cmd_audit_sampler(args: Any) -> int:
    from .samplers import audit_sampler, get_adapter
    _no_timings_needs_json(args)
    adapter = get_adapter(args.adapter)
    _family_options(args, adapter.family, f"the {adapter.name} adapter")
    needs_torch = getattr(adapter, "needs_torch", False)
    sampler = _load(args.target, "the sampler", preload=("numpy",) + (("torch",) if needs_torch else ()))
    precision = {k: v for k, v in (("precision", args.precision), ("tolerance", args.tolerance)) if v is not None}
    if not args.instance:  # the default: an exact search over small instances, exit codes as `search`
        from .samplers.sampler_search import search_sampler
        space = _sampler_search_space(args, adapter.family)
        found = search_sampler(sampler, adapter=adapter, space=space, rng_model=args.rng_model, seed=args.seed,
                               budget=args.time_limit, **precision)
        return _code_search_out(args, found)
    inst, proposer = _instance(args, adapter.family, None)
    rep = audit_sampler(sampler, adapter=adapter, target=inst.target, draft=inst.draft, proposer=proposer,
                        prompt=inst.prompt, tokens=_horizon(args, proposer), rng_model=args.rng_model,
                        budget=Budget(seconds=args.time_limit), on_error=args.on_error, **precision)
    return _report_out(args, rep)


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


def _cmd_audit_loop(args: Any) -> int:
    """``exactspec audit-loop``: search small instances for a whole loop's bias (default), or audit one (--instance)."""
    _no_timings_needs_json(args)
    if args.reference is not None and args.reference < 1:
        raise ExactSpecError(f"--reference (the gamma of the correct reference loop) must be >= 1, got "
                             f"{args.reference}")
    if args.tokens is not None and args.tokens < 1:
        raise ExactSpecError(f"--tokens must be >= 1, got {args.tokens}")
    fn = _load(args.target, "the loop", preload=("numpy", "torch") + (
        ("transformers",) if args.kind == "transformers" else ()))
    if args.dtype is not None and args.precision is not None and args.dtype != args.precision:
        raise ExactSpecError(f"--dtype {args.dtype} and --precision {args.precision} disagree: they name the same "
                             "thing (the stand-ins' dtype); pass one")
    from .samplers.float_boundary import F64_ALLOWANCE
    tolerance = F64_ALLOWANCE if args.tolerance is None else args.tolerance
    import torch
    from .samplers.loops.loop_audit import DEFAULT_TOKENS, _loop_space, audit_loop
    options = dict(kind=args.kind, dtype=getattr(torch, args.precision or args.dtype or "float64"),
                   output=args.output, on_error=args.on_error, reference=args.reference, tolerance=tolerance,
                   rng_model=args.rng_model)
    if not args.instance:  # the default: an exact search over small instances, exit codes as `search`
        if args.order != 1:
            raise ExactSpecError("--order applies with --instance (the search covers context-free, per-position and "
                                 "order-1 models)")
        if args.vocab < 2:
            raise ExactSpecError(f"--vocab (the search's largest vocabulary) must be >= 2, got {args.vocab}")
        space = _loop_space(None, args.tokens).with_(vocabs=tuple(range(2, args.vocab + 1)))
        found = audit_loop(fn, target=None, search=True, space=space, seed=args.seed, budget=args.time_limit,
                           **options)
        return _code_search_out(args, found)
    inst = make_instance(vocab=args.vocab, order=args.order, gamma=1, tokens=1, seed=args.seed)
    rep = audit_loop(fn, target=inst.target, draft=inst.draft, prompt=inst.prompt or (0,), tokens=args.tokens,
                     budget=Budget(seconds=args.time_limit), **options)
    return _report_out(args, rep)


def rules_json() -> dict[str, list[dict[str, Any]]]:
    """What ``exactspec rules --json`` prints: the catalog and the configurations ``exactspec check`` audits.

    ``rules``: one record per catalog rule (``name``, ``family``, ``claim``, ``condition`` and
    ``otherwise`` for a claim that holds only under a condition, else None, ``claim_text``,
    ``description``, ``reference``, ``params`` with values as strings); ``check``: ``rule``, ``proposer`` (its
    description), ``claim`` (the claim it must bear out) and ``tokens`` (the horizon).

    >>> d = rules_json()
    >>> d["rules"][0]["name"], d["rules"][0]["claim"], d["check"][0]["tokens"]
    ('speculative_sampling', 'lossless', 6)
    """
    return {"rules": [{"name": r.name, "family": r.family, "claim": r.claim,
                       "condition": None if r.condition is None else str(r.condition), "otherwise": r.otherwise,
                       "claim_text": r.claim_text, "description": r.description,
                       "reference": r.reference, "params": {str(k): str(v) for k, v in r.params.items()}}
                      for r in catalog()],
            "check": [{"rule": c.rule.name, "proposer": c.proposer.describe(), "claim": c.claim, "tokens": c.tokens}
                      for c in check_cases()]}


def _cmd_rules(args: Any) -> int:
    if args.json:
        _print(json.dumps([r.name for r in catalog()] if args.names else rules_json(), indent=1))
        return 0
    if args.names:
        for r in catalog():
            _print(r.name)
        return 0
    for r in catalog():
        _print(f"{r.name}  [{r.family}, claim: {r.claim_text}]\n    {r.description}\n    reference: {r.reference}")
    _print("\nconfigurations `exactspec check` audits (rule, proposer, the claim it must bear out):")
    for case in check_cases():
        _print(f"  {case.rule.name:32} {case.proposer.describe():78} {case.claim}")
    return 0


def _search_defaults() -> dict[str, Any]:
    """The bounds of the space ``exactspec search`` covers when no option narrows it, for chain and tree rules."""
    from .counterexamples import default_space
    from .rules import mss
    chain_space, tree_space = default_space(get("speculative_sampling")), default_space(mss)
    return {"vocab": (max(chain_space.vocabs), max(tree_space.vocabs)),
            "gamma": (max(s[0] for s in chain_space.shapes), max(len(s) for s in tree_space.shapes)),
            "tokens": (max(chain_space.tokens), max(tree_space.tokens)),
            "denominator": (chain_space.max_denominator, tree_space.max_denominator),
            "exhaustive": (chain_space.exhaustive_denominator, tree_space.exhaustive_denominator)}


def _lattice_text(lattice: Any) -> str:
    """A generator lattice in a few words: ``[0, 1) in steps of 2**-24`` (``[0, 1)`` for the continuous model).

    >>> from exactspec.enumerate.rng import LATTICES
    >>> _lattice_text(None), _lattice_text(LATTICES["curand"])
    ('[0, 1)', '(0, 1] in steps of 2**-24')
    """
    if lattice is None:
        return "[0, 1)"
    if getattr(lattice, "name", None) == "native":
        return ("each draw on its generator's lattice: numpy and random k * 2**-53, torch CPU float32 k * 2**-24, "
                "0 included")
    if hasattr(lattice, "mantissa"):   # torch float16 / bfloat16: a float32 draw rounded to the dtype
        return f"a float32 draw rounded to {lattice.name[6:]}, 1.0 mapped to 0"
    step = lattice.step
    lo, hi = lattice.offset + lattice.kmin * step, lattice.offset + lattice.kmax * step
    left = "[0" if lo == 0 else "(0"
    right = "1]" if hi == 1 else "1)"
    if step.numerator == 1 and step.denominator & (step.denominator - 1) == 0:
        step_text = f"2**-{step.denominator.bit_length() - 1}"
    else:
        step_text = str(step)
    return f"{left}, {right} in steps of {step_text}"


def _parser() -> argparse.ArgumentParser:
    from .drafts.chain import SAMPLINGS
    from .drafts.tree import CHILDREN
    from .enumerate.rng import RNG_MODELS, lattice_for
    claims = ["draft", "point_mass", "renormalized"]
    p = _Parser(prog="exactspec", description="Prove or refute, exactly, that speculative-decoding rules keep "
                                               "the target's law. Exit codes: 0 holds / lossless (exactly), "
                                               "1 bias found or claim broken, 2 bad input or user code failed, "
                                               "3 incomplete check (budget spent, search stopped early, inexact "
                                               "field), 130 interrupted.")
    p.add_argument("--version", action="version", version=f"exactspec {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    limit = (f"wall-clock seconds for the whole command (default {DEFAULT_TIME_LIMIT:g}); past it the command "
             "stops and exits 3, saying what it covered")
    json_help = "print JSON instead of text (default: text; exact numbers as strings like '3/5')"
    no_timings = ("with --json: leave out every wall-clock field (\"seconds\"), so two runs print byte-identical "
                  "JSON (default: timings included)")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--field", choices=["fraction", "mpmath", "float"], default="fraction",
                        help="number system (default fraction: exact; float and mpmath only bound the TV by a "
                             "tolerance, and a lossless verdict there exits 3)")
        sp.add_argument("--precision", type=int, default=None, help="mpmath precision in bits (default 113)")
        sp.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=limit)
        sp.add_argument("--json", action="store_true", help=json_help)
        sp.add_argument("--no-timings", action="store_true", help=no_timings)

    def parallel_options(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run in chunks on N local worker processes (0: every core; default: in this process); "
                             "the output is the same for any N")
        sp.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run the chunks on a Dask cluster, e.g. tcp://10.0.0.1:8786 (needs exactspec[dask]; "
                             "default: none)")

    def instance_options(sp: argparse.ArgumentParser, vocab: int, order: int, what: str) -> None:
        sp.add_argument("--vocab", type=int, default=vocab, help=f"vocabulary size (default {vocab})")
        sp.add_argument("--order", type=int, default=order,
                        help=f"context length the seeded target tables read (default {order})")
        sp.add_argument("--gamma", type=int, default=None, help=f"chain {what}: drafted tokens per step (default 4)")
        sp.add_argument("--tokens", type=int, default=None,
                        help="horizon: tokens whose law is audited (default: a step's largest output + 1, i.e. "
                             "gamma + 2 for chains and depth + 2 for trees, so every position of a first and a "
                             "second step is observed; a smaller horizon is reported as a warning)")
        sp.add_argument("--seed", type=int, default=0, help="seed of the target tables; the draft uses seed + 1 "
                                                            "(default 0)")
        sp.add_argument("--sampling", choices=list(SAMPLINGS), default=None,
                        help=f"chain {what}: how drafts are drawn, one of {', '.join(SAMPLINGS)} (default sample)")
        sp.add_argument("--claim", choices=claims, default="draft",
                        help=f"the law the verifier is told each draft came from, one of {', '.join(claims)} "
                             "(default draft; renormalized for trees only)")
        sp.add_argument("--expansion", default=None,
                        help=f"tree {what}: children per depth, e.g. '2 1' or '3,2' (default '2 1')")
        sp.add_argument("--children", choices=list(CHILDREN), default=None,
                        help=f"tree {what}: how children are drafted, one of {', '.join(CHILDREN)} (default iid)")

    c = sub.add_parser("check", help="audit every catalog rule on the default instance (the main job)",
                       description="Audit every configuration of `exactspec rules` on the default instance and "
                                   "exit on the rules' claims (0: every claim holds exactly).")
    common(c)
    c.add_argument("--wide", action="store_true",
                   help=f"table with every column and the full proposer descriptions (default: a table that fits "
                        f"{TABLE_WIDTH} columns, without tokens/call, accepted/call, nodes/call and time)")
    parallel_options(c)
    a = sub.add_parser("audit", help="audit one rule on one seeded instance")
    a.add_argument("--rule", required=True, help="catalog name (e.g. speculative_sampling, 'ensemble(1/3)') or "
                                                 "your own rule as MODULE:FUNCTION (required: no default)")
    instance_options(a, 5, 2, "rules")
    a.add_argument("--prompt", default=None, help="token ids, e.g. '0 1' (default: 0..order-1)")
    a.add_argument("--decoding", choices=["sample", "greedy"], default=None,
                   help="the expected law: the target's sampling law or its greedy sequence (default: greedy for "
                        "lossless-greedy rules, else sample)")
    common(a)
    d = _search_defaults()
    se = sub.add_parser("search", help="find the minimal counterexample of a rule (exit 1) or cover a space (exit 0)")
    se.add_argument("--rule", required=True, help="catalog name or MODULE:FUNCTION (required: no default)")
    se.add_argument("--max-vocab", type=int, default=None,
                    help="largest vocabulary searched, from 2 up (default {} for chain rules, {} for tree "
                         "rules)".format(*d["vocab"]))
    se.add_argument("--max-gamma", type=int, default=None,
                    help="chain rules: largest gamma (default {}); tree rules: deepest expansion "
                         "(default {})".format(*d["gamma"]))
    se.add_argument("--max-denominator", type=int, default=None,
                    help="largest denominator of the probabilities tried (default {}); grids up to denominator {} "
                         "(chains) / {} (trees) are covered exhaustively".format(d["denominator"][0],
                                                                                 *d["exhaustive"]))
    se.add_argument("--tokens", type=int, default=None,
                    help="largest horizon in tokens, from 1 up (default {} for chain rules, {} for tree "
                         "rules)".format(*d["tokens"]))
    se.add_argument("--seed", type=int, default=0, help="seed of the randomly sampled part of the space (default 0)")
    se.add_argument("--sampling", choices=list(SAMPLINGS), default=None,
                    help=f"chain rules: how drafts are drawn, one of {', '.join(SAMPLINGS)} (default sample)")
    se.add_argument("--children", choices=list(CHILDREN), default=None,
                    help=f"tree rules: how children are drafted, one of {', '.join(CHILDREN)} (default iid)")
    se.add_argument("--claim", choices=claims, default=None,
                    help=f"the law the verifier is told each draft came from, one of {', '.join(claims)} "
                         "(default draft)")
    se.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=limit + "; a search stopped early is incomplete, never 'no counterexample'")
    se.add_argument("--json", action="store_true", help=json_help)
    se.add_argument("--no-timings", action="store_true", help=no_timings)
    parallel_options(se)
    sw = sub.add_parser("sweep", help="audit (or search) a grid of rules x proposers x vocabs x gammas x tokens",
                        description="Audit every cell of a grid on seeded instances (or search each cell with "
                                    "--search) and print one table (text, --json or --csv); exit on the claims like "
                                    "`check` (0: every claim holds exactly).")
    sw.add_argument("--rules", default=None, help="catalog names, e.g. 'speculative_sampling,mss' (default: every "
                                                  "catalog rule of --family)")
    sw.add_argument("--family", choices=["chain", "tree"], default="chain", help="chain or tree rules (default chain)")
    sw.add_argument("--proposers", default=None,
                    help="SAMPLING/CLAIM for chains (e.g. 'sample/draft argmax/point_mass'), CHILDREN/CLAIM for trees "
                         "(default sample/draft; iid/draft for trees)")
    sw.add_argument("--vocabs", default="5", help="vocabulary sizes, e.g. '2 3 4' (default 5)")
    sw.add_argument("--gammas", default="4", help="chain lengths, e.g. '1 2 4'; for trees the children of a one-level "
                                                  "tree (default 4)")
    sw.add_argument("--tokens", default=None, help="horizons, e.g. '3 6' (default: every position of a first and a "
                                                   "second step observed)")
    sw.add_argument("--order", type=int, default=2, help="context length of the seeded tables (default 2)")
    sw.add_argument("--seed", type=int, default=0, help="seed of the target tables and of searches (default 0)")
    sw.add_argument("--search", action="store_true",
                    help="search each cell for a counterexample instead of auditing one seeded instance")
    sw.add_argument("--field", choices=["fraction", "mpmath", "float"], default="fraction",
                    help="number system: fraction (default, exact), mpmath or float (inexact fields only bound the "
                         "TV: a lossless cell is undecided, exit 3)")
    sw.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=limit + "; cells not finished are incomplete")
    sw.add_argument("--json", action="store_true", help=json_help)
    sw.add_argument("--csv", action="store_true", help="print CSV, one row per cell (default: text)")
    sw.add_argument("--no-timings", action="store_true", help="with --json or --csv: leave out the seconds column")
    parallel_options(sw)
    sa = sub.add_parser("audit-sampler", help="audit a third-party sampler MODULE:FUNCTION exactly",
                        description="Search small instances (vocab 2..4, gamma 1..3 or small trees, depth + 1 "
                                    "tokens, context-free, per-position and order-1 models) for the smallest one on "
                                    "which the sampler is biased or crashes, exit codes as `search` (0: none in the "
                                    "stated space, 1: a minimal counterexample with a regression test calling the "
                                    "sampler; a crash is one, of kind 'crash', 3: incomplete). Without --instance, --vocab and --gamma / --expansion bound the "
                                    "search, --tokens sets its horizon and --seed seeds its random part; --instance "
                                    "audits the one seeded instance they describe.")
    sa.add_argument("target", metavar="MODULE:FUNCTION",
                    help="the sampler, e.g. exactspec.bugzoo.numpy_samplers:shared_uniform (MODULE is imported with "
                         "the current directory on sys.path)")
    names = adapter_names()
    sa.add_argument("--adapter", choices=list(names), default="numpy", metavar="ADAPTER",
                    help=f"how the sampler is called, one of {', '.join(names)} (default numpy; the torch adapters "
                         "need torch)")
    instance_options(sa, 4, 1, "adapters")
    models = ", ".join(f"{n} ({_lattice_text(lattice_for(n))})" for n in RNG_MODELS)
    rng_help = (f"what a uniform draw is, one of {models} (default native: bugs that live on an exact 0 from the "
                "generator, such as u <= p/q or searchsorted(side='left'), show; continuous hides them)")
    sa.add_argument("--rng-model", choices=list(RNG_MODELS), default="native", metavar="RNG_MODEL", help=rng_help)
    sa.add_argument("--precision", choices=list(PRECISIONS), default=None,
                    help=f"the float precision the sampler computes in, one of {', '.join(PRECISIONS)} (default: "
                         "what the adapter declares, else the coarsest float dtype seen); a sampler coarser than "
                         "float64 is also run on float64 inputs, and only what stays there is bias")
    sa.add_argument("--tolerance", type=_tolerance, default=None, metavar="TV",
                    help="what float64 rounding may cost, a TV like 1e-12 or 2**-40 (default 2**-40; 0 demands "
                         "exactness)")
    sa.add_argument("--instance", action="store_true",
                    help="audit one seeded instance (--vocab, --order, --gamma, --tokens, --seed) instead of searching")
    sa.add_argument("--on-error", choices=["raise", "record"], default="raise",
                    help="with --instance, a branch on which the sampler raises: raise (an error naming the "
                         "exception, the branch and the sampler's line: exit 2) or record (the exact probability of "
                         "the crashing branches is reported, a finding: exit 1) (default raise); a search always "
                         "reports a crash as a counterexample of kind 'crash' (exit 1)")
    sa.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=limit + "; a search stopped early is incomplete (exit 3), never 'no counterexample'")
    sa.add_argument("--json", action="store_true", help=json_help)
    sa.add_argument("--no-timings", action="store_true", help=no_timings)
    lo = sub.add_parser("audit-loop", help="audit a whole generation loop MODULE:FUNCTION (drafting included) on "
                                           "stand-in models",
                        description="Run the loop fn(target, draft, prompt_ids) on stand-in language models with "
                                    "exact laws, every branch of its randomness enumerated, and compare the law of "
                                    "the tokens it returns with the target's. By default, search small instances "
                                    "(vocab 2..4, context-free, per-position and order-1 models, prompt (0,), "
                                    "1..4 tokens) for the smallest one on which the loop is biased, exit codes as "
                                    "`search` (0: none in the stated space, 1: a minimal counterexample with a "
                                    "regression test calling the loop, 3: incomplete); --vocab bounds the search, "
                                    "--tokens sets its horizon and --seed seeds its random part. --instance audits "
                                    "the one seeded instance they describe.")
    lo.add_argument("target", metavar="MODULE:FUNCTION",
                    help="the loop, e.g. exactspec.bugzoo.loops:bonus_from_draft, called as fn(target, draft, "
                         "prompt_ids) (MODULE is imported with the current directory on sys.path)")
    lo.add_argument("--kind", choices=["torch-lm", "transformers"], default="torch-lm",
                    help="the stand-in models handed to the loop: torch-lm (torch.nn.Module returning logits "
                         "[B, T, V]) or transformers (PreTrainedModel stand-ins for generate; needs transformers) "
                         "(default torch-lm)")
    lo.add_argument("--dtype", choices=["float64", "float32"], default=None,
                    help="dtype of the stand-ins' logits, float64 or float32 (the same as --precision; kept for older "
                         "scripts; default float64)")
    lo.add_argument("--precision", choices=["float64", "float32", "bfloat16", "float16"], default=None,
                    help="dtype of the stand-ins' logits, one of float64, float32, bfloat16, float16 (default float64); "
                         "coarser than float64, the loop is also "
                         "run on float64 stand-ins and a bias is what stays there (the float-boundary decision)")
    lo.add_argument("--tolerance", type=_tolerance, default=None, metavar="TV",
                    help="what float64 rounding may cost a correct loop, a TV such as 2**-40 or 1/1000000 "
                         "(default 2**-40; 0 demands exactness)")
    lo.add_argument("--output", choices=["full", "new"], default="full",
                    help="what the loop returns: full (prompt + continuation, as generate does) or new (the "
                         "continuation only) (default full)")
    lo.add_argument("--on-error", choices=["raise", "record"], default="raise",
                    help="with --instance, a branch on which the loop raises: raise (an error stating that branch's "
                         "probability and the loop's line: exit 2) or record (the exact probability of the failing "
                         "branches is reported, a finding: never lossless, exit 1) (default raise); a search always "
                         "reports a crash as a counterexample of kind 'crash' (exit 1)")
    lo.add_argument("--reference", type=int, default=None, metavar="GAMMA",
                    help="also audit a correct speculative sampling loop drafting GAMMA tokens per step on the same "
                         "stand-ins and report its rounding TV (a figure, never a tolerance; a reference further "
                         "than float rounding from the target is refused) (default: none)")
    lo.add_argument("--vocab", type=int, default=4,
                    help="vocabulary size: the search's largest, or the --instance's (default 4)")
    lo.add_argument("--order", type=int, default=1,
                    help="with --instance: context length the seeded target tables read (default 1)")
    lo.add_argument("--seed", type=int, default=0,
                    help="seed of the search's random part, or of the --instance's target tables (the draft uses "
                         "seed + 1) (default 0)")
    lo.add_argument("--tokens", type=int, default=None,
                    help="horizon: new tokens whose law is audited (default: 1..4 in the search; with --instance, "
                         "from the loop: every token of a first step and the first of a second, at least 3)")
    lo.add_argument("--rng-model", choices=list(RNG_MODELS), default="native", metavar="RNG_MODEL", help=rng_help)
    lo.add_argument("--instance", action="store_true",
                    help="audit one seeded instance (--vocab, --order, --tokens, --seed) instead of searching")
    lo.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=limit + "; a search stopped early is incomplete (exit 3), never 'no counterexample'")
    lo.add_argument("--json", action="store_true", help=json_help)
    lo.add_argument("--no-timings", action="store_true", help=no_timings)
    pr = sub.add_parser("prove", help="prove a rule lossless for every target and draft law, or refute it with a "
                                      "witness (needs exactspec[prove])")
    pr.add_argument("--rule", required=True, help="catalog name or MODULE:FUNCTION (required: no default)")
    pr.add_argument("--vocab", type=int, required=True, help="vocabulary size of the symbolic laws (required: no "
                                                              "default; 2 to 4 is practical)")
    pr.add_argument("--tokens", type=int, required=True, help="horizon: tokens whose law is proven (required: no "
                                                               "default)")
    pr.add_argument("--gamma", type=int, default=None, help="chain rules: drafted tokens per step (default 1)")
    pr.add_argument("--expansion", default=None, help="tree rules: children per depth, e.g. '2' (default '2')")
    pr.add_argument("--sampling", choices=list(SAMPLINGS), default=None,
                    help=f"chain rules: how drafts are drawn, one of {', '.join(SAMPLINGS)} (default sample)")
    pr.add_argument("--children", choices=list(CHILDREN), default=None,
                    help=f"tree rules: how children are drafted, one of {', '.join(CHILDREN)} (default iid)")
    pr.add_argument("--claim", choices=claims, default=None,
                    help=f"the law the verifier is told each draft came from, one of {', '.join(claims)} "
                         "(default draft)")
    pr.add_argument("--family", choices=["context_free", "per_position", "table"], default=None,
                    help="context_free: one symbolic p and q at every position; per_position: one p and q per "
                         "position; table: order-1 tables, prompt (0,) (default: the most general one feasible at "
                         "the size, named in the verdict: per_position at vocab 2 and 2 tokens, table at vocab 2 "
                         "otherwise, context_free from vocab 3)")
    pr.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=limit)
    pr.add_argument("--json", action="store_true", help=json_help)
    r = sub.add_parser("rules", help="list the catalog with claims and references")
    r.add_argument("--names", action="store_true", help="rule names only, one a line (default: the full records)")
    r.add_argument("--json", action="store_true",
                   help="the catalog and the configurations `exactspec check` audits as JSON (default: text; with "
                        "--names: a JSON list of names)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit code (see the module docstring for their meaning)."""
    _Out.closed = False
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    cmd: Callable[[Any], int] = {"check": _cmd_check, "audit": _cmd_audit, "rules": _cmd_rules,
                                 "search": _cmd_search, "sweep": _cmd_sweep, "audit-sampler": _cmd_audit_sampler,
                                 "audit-loop": _cmd_audit_loop,
                                 "prove": _cmd_prove}[args.cmd]
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
        from .enumerate.watchdog import deadline
    except ImportError:  # pragma: no cover - the watchdog ships with the engine
        return cmd(args)
    if limit is None:
        return cmd(args)
    # the command's own budgets stop it first and say what they covered; the watchdog is the backstop
    # for code that checks no clock (a user's busy loop, a long closed form)
    with deadline(limit + max(1.0, 0.05 * limit)):
        return cmd(args)


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
