"""The ``exactspec`` command: ``check`` (the main job), ``audit``, ``search``, ``audit-sampler`` and ``rules``.

Exit codes, the same for every command:

- 0: every claim checked holds (``check``) / the law is kept (``audit``, ``search``,
  ``audit-sampler``), decided in exact arithmetic over everything the command says it covered;
- 1: a bias was found (``audit``, ``search``, ``audit-sampler``) or a claim is broken (``check``);
- 2: bad input, or user code failed (raised, called ``sys.exit``, drew randomness the audit
  cannot see, could not be imported);
- 3: the check is not complete: a budget (time, paths, depth, memory) ran out first, a search
  stopped before covering its space or skipped instances where the rule raised, or an inexact
  field (``--field float`` / ``mpmath``) could only bound the TV by its tolerance;
- 130: interrupted (Ctrl-C).

``check`` exits on the rules' claims (a rule claimed ``biased`` that is found biased holds);
``audit``, ``search`` and ``audit-sampler`` exit on the law itself (1 whenever the output law
differs from the expected law, whatever the rule claims; the summary says when a claim is broken).
A closed pipe (``exactspec search ... | head -1``) does not change the exit code.

>>> main(["rules", "--names"])  # doctest: +ELLIPSIS
speculative_sampling
...
0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Callable, Sequence

from . import __version__
from ._audit import audit, default_tokens
from ._numbers import finite_float
from .enumerate import Budget
from .errors import BudgetExceeded, ExactSpecError
from .instances import check_cases, default_instance, make_instance
from .rules import Rule, as_rule, catalog, get

__all__ = ["main", "DEFAULT_TIME_LIMIT"]

#: wall-clock seconds a command may run unless ``--time-limit`` says otherwise (then exit 3)
DEFAULT_TIME_LIMIT = 600.0


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


def _tv_text(report: Any) -> str:
    if report.tv == 0:
        return "0 (exact)" if report.exact else "0"
    s = report.field.to_str(report.tv)
    return s if len(s) <= 20 else f"~{float(report.tv):.4g}"


def _num(report: Any, x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


def _ints(text: str, flag: str, what: str) -> tuple[int, ...]:
    """Parse '0 1' or '0,1' into ints, or a one-line error naming the flag."""
    parts = text.replace(",", " ").split()
    if any(len(t) > 12 for t in parts):
        raise ExactSpecError(f"{flag} must be {what}, got {text[:40]!r}")
    try:
        return tuple(int(t) for t in parts)
    except ValueError:
        raise ExactSpecError(f"{flag} must be {what}, got {text!r}") from None


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _load(spec: str, what: str, preload: Sequence[str] = ()) -> Any:
    """The object ``MODULE:NAME`` names, imported with the current directory on ``sys.path`` for the import only.

    ``preload`` modules (the audit's own dependencies, e.g. torch) are imported first, so a file
    of the same name in the current directory cannot stand in for them. Anything the import
    raises (SyntaxError, an exception, ``sys.exit``) becomes one ExactSpecError line.
    """
    import importlib
    mod_name, _, name = spec.partition(":")
    if not _DOTTED.fullmatch(mod_name) or not _DOTTED.fullmatch(name):
        raise ExactSpecError(f"{what} must be MODULE:FUNCTION (dotted Python names), got {spec!r}")
    for dep in preload:
        try:
            importlib.import_module(dep)
        except ImportError:
            pass
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # MODULE is looked up from the current directory too, as `python -m` does, for this import only
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(mod_name)
    except SystemExit as exc:
        raise ExactSpecError(f"cannot load {spec}: importing {mod_name} called sys.exit({exc.code!r})") from None
    except SyntaxError as exc:
        raise ExactSpecError(f"cannot load {spec}: syntax error in {exc.filename}, line {exc.lineno}: "
                             f"{exc.msg}") from None
    except ImportError as exc:
        raise ExactSpecError(f"cannot load {spec}: {exc}") from None
    except Exception as exc:  # the user's module raised at import: one line naming it
        raise ExactSpecError(f"cannot load {spec}: importing {mod_name} raised {type(exc).__name__}: "
                             f"{exc}") from None
    finally:
        if added:
            try:
                sys.path.remove(cwd)
            except ValueError:
                pass
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ExactSpecError(f"cannot load {spec}: {mod_name} has no attribute {name!r}") from None
    if not callable(obj):
        raise ExactSpecError(f"{spec} is {type(obj).__name__}, not a function")
    return obj


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
    expansion = _ints(args.expansion or "2 1", "--expansion", "ints like '2 1'")
    return inst, tree(expansion, children=args.children or "iid", claim=args.claim)


def _horizon(args: Any, proposer: Any) -> int:
    tokens = default_tokens(proposer) if args.tokens is None else args.tokens
    return tokens


def _report_out(args: Any, rep: Any) -> int:
    if args.json:
        _print(rep.to_json(indent=1))
        for w in rep.warnings:
            _warn(w)
    else:
        _print(rep.summary())
    return rep.exit_code


def _cmd_check(args: Any) -> int:
    inst = default_instance()
    clock = _Clock(args.time_limit)
    rows, reports = [], []
    for i, case in enumerate(check_cases(inst)):
        t0 = time.perf_counter()
        rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                    case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                    prompt=inst.prompt, tokens=case.tokens, field=args.field, precision=args.precision,
                    budget=clock.budget(f"{i} of the configurations"))
        rep.claim = case.claim
        dt = time.perf_counter() - t0
        reports.append(rep)
        verdict = rep.verdict if rep.exact or not rep.lossless else \
            f"lossless (within {rep.field.to_str(rep.tolerance)})"
        if rep.lossless and not rep.exact:   # an inexact field only bounds the TV: neither held nor broken
            holds = "undecided" if rep.claim == "biased" else "within tol"
        else:
            holds = "yes" if rep.claim_holds else "NO"
        rows.append((case.rule.name, case.proposer.describe(), str(case.tokens), case.claim, _tv_text(rep),
                     verdict, holds, _num(rep, rep.tokens_per_call),
                     _num(rep, rep.accepted_per_call), _num(rep, rep.nodes_per_call), f"{dt:.3f}s"))
    broken = [f"{r[0]} with {r[1]}" for r in rows if r[6] == "NO"]
    inexact = [r for r in rows if r[6] in ("undecided", "within tol")]
    ok = not broken
    code = 1 if broken else (3 if inexact else 0)
    if args.json:
        _print(json.dumps({"instance": {k: v for k, v in reports[0].instance.items() if k not in ("proposer", "tokens")},
                           "field": args.field, "ok": ok, "exact": not inexact, "exit_code": code,
                           "rules": [r.to_dict() | {"output": None, "expected": None} for r in reports]}, indent=1))
        return code
    head = ("rule", "proposer", "tokens", "claim", "exact TV" if reports[0].exact else "TV", "verdict", "holds",
            "tokens/call", "accepted/call", "nodes/call", "time")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    _print(f"exactspec check — vocab {inst.target.vocab}, order {inst.target.order} seeded tables (seed 0), "
           f"perturbed draft (seed 1), prompt {inst.prompt}; field {reports[0].field.describe()}")
    _print(line(head))
    _print(line(tuple("-" * w for w in widths)))
    for r in rows:
        _print(line(r))
    held = sum(r[6] == "yes" for r in rows)
    _print(f"\n{held}/{len(rows)} claims hold on this instance, every position of a first and "
           "a second step observed" + (f"; broken: {', '.join(broken)}" if broken else ""))
    if inexact and ok:
        _print(f"not an exact proof: {len(inexact)} claim(s) could only be bounded by the {args.field} field's "
               "tolerance (TV within it: lossless claims hold within tol, biased claims undecided; exit 3); run "
               "without --field for the exact check")
    return code


def _cmd_audit(args: Any) -> int:
    rule = _rule(args.rule)
    _family_options(args, rule.family, f"rule {rule.name}")
    prompt = None if args.prompt is None else _ints(args.prompt, "--prompt", "token ids like '0 1'")
    inst, proposer = _instance(args, rule.family, prompt)
    rep = audit(target=inst.target, draft=inst.draft, proposer=proposer, rule=rule, prompt=inst.prompt,
                tokens=_horizon(args, proposer), decoding=args.decoding, field=args.field, precision=args.precision,
                budget=Budget(seconds=args.time_limit))
    return _report_out(args, rep)


def _search_result_json(found: Any, rule: Any) -> str:
    if hasattr(found, "to_json"):
        return found.to_json(indent=1)
    return json.dumps({"rule": rule.name, "found": False, "space": found.space, "audited": found.audited}, indent=1)


def _cmd_search(args: Any) -> int:
    from .counterexamples import default_space, search
    from .drafts import chain, tree
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
    found = search(rule, proposer=proposer, space=space, seed=args.seed, budget=args.time_limit)
    code = getattr(found, "exit_code", None)
    if code is None:
        code = 1 if found.__class__.__name__ == "Counterexample" else 0
    if args.json:
        _print(_search_result_json(found, rule))
        return code
    _print(str(found))
    if code == 1:
        _print("\nregression test (fails while the bias exists):\n")
        _print(found.to_pytest())
    return code


def _cmd_audit_sampler(args: Any) -> int:
    from .samplers import audit_sampler, get_adapter
    adapter = get_adapter(args.adapter)
    _family_options(args, adapter.family, f"the {adapter.name} adapter")
    needs_torch = getattr(adapter, "needs_torch", False)
    sampler = _load(args.target, "the sampler", preload=("numpy",) + (("torch",) if needs_torch else ()))
    inst, proposer = _instance(args, adapter.family, None)
    rep = audit_sampler(sampler, adapter=adapter, target=inst.target, draft=inst.draft, proposer=proposer,
                        prompt=inst.prompt, tokens=_horizon(args, proposer), rng_model=args.rng_model,
                        budget=Budget(seconds=args.time_limit))
    return _report_out(args, rep)


def _cmd_rules(args: Any) -> int:
    if args.names:
        for r in catalog():
            _print(r.name)
        return 0
    for r in catalog():
        _print(f"{r.name}  [{r.family}, claim: {r.claim}]\n    {r.description}\n    reference: {r.reference}")
    _print("\nconfigurations `exactspec check` audits (rule, proposer, the claim it must bear out):")
    for case in check_cases():
        _print(f"  {case.rule.name:32} {case.proposer.describe():78} {case.claim}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="exactspec", description="Prove or refute, exactly, that speculative-decoding rules keep "
                                               "the target's law. Exit codes: 0 holds / lossless (exactly), "
                                               "1 bias found or claim broken, 2 bad input or user code failed, "
                                               "3 incomplete check (budget spent, search stopped early, inexact "
                                               "field), 130 interrupted.")
    p.add_argument("--version", action="version", version=f"exactspec {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    limit = (f"wall-clock seconds for the whole command (default {DEFAULT_TIME_LIMIT:g}); past it the command "
             "stops and exits 3, saying what it covered")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--field", choices=["fraction", "mpmath", "float"], default="fraction",
                        help="number system (default fraction: exact; float and mpmath only bound the TV by a "
                             "tolerance, and a lossless verdict there exits 3)")
        sp.add_argument("--precision", type=int, default=None, help="mpmath precision in bits (default 113)")
        sp.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=limit)
        sp.add_argument("--json", action="store_true", help="print JSON (exact numbers as strings like '3/5')")

    def instance_options(sp: argparse.ArgumentParser, vocab: int, order: int, what: str) -> None:
        sp.add_argument("--vocab", type=int, default=vocab, help=f"vocabulary size (default {vocab})")
        sp.add_argument("--order", type=int, default=order,
                        help=f"context length the seeded target tables read (default {order})")
        sp.add_argument("--gamma", type=int, default=None, help=f"drafted tokens per step, chain {what} (default 4)")
        sp.add_argument("--tokens", type=int, default=None,
                        help="horizon: tokens whose law is audited (default: a step's largest output + 1, i.e. "
                             "gamma + 2 for chains and depth + 2 for trees, so every position of a first and a "
                             "second step is observed; a smaller horizon is reported as a warning)")
        sp.add_argument("--seed", type=int, default=0, help="seed of the target tables; the draft uses seed + 1 "
                                                            "(default 0)")
        sp.add_argument("--sampling", choices=["sample", "argmax"], default=None,
                        help=f"chain {what}: how drafts are drawn (default sample)")
        sp.add_argument("--claim", choices=["draft", "point_mass", "renormalized"], default="draft",
                        help="the law the verifier is told each draft came from (default draft)")
        sp.add_argument("--expansion", default=None, help=f"tree {what}: the expansion (default '2 1')")
        sp.add_argument("--children", choices=["iid", "without_replacement", "topk"], default=None,
                        help=f"tree {what}: how children are drafted (default iid)")

    c = sub.add_parser("check", help="audit every catalog rule on the default instance (the main job)")
    common(c)
    a = sub.add_parser("audit", help="audit one rule on one seeded instance")
    a.add_argument("--rule", required=True, help="catalog name (e.g. speculative_sampling, 'ensemble(1/3)') or "
                                                 "your own rule as MODULE:FUNCTION")
    instance_options(a, 5, 2, "rules")
    a.add_argument("--prompt", default=None, help="token ids, e.g. '0 1' (default: 0..order-1)")
    a.add_argument("--decoding", choices=["sample", "greedy"], default=None,
                   help="default: greedy for lossless-greedy rules, else sample")
    common(a)
    se = sub.add_parser("search", help="find the minimal counterexample of a rule (exit 1) or cover a space (exit 0)")
    se.add_argument("--rule", required=True, help="catalog name or MODULE:FUNCTION")
    se.add_argument("--max-vocab", type=int, default=None)
    se.add_argument("--max-gamma", type=int, default=None, help="chains: largest gamma; trees: deepest expansion")
    se.add_argument("--max-denominator", type=int, default=None)
    se.add_argument("--tokens", type=int, default=None, help="largest number of tokens")
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--sampling", choices=["sample", "argmax"], default=None, help="chain drafts")
    se.add_argument("--children", choices=["iid", "without_replacement", "topk"], default=None, help="tree drafts")
    se.add_argument("--claim", choices=["draft", "point_mass", "renormalized"], default=None)
    se.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=limit + "; a search stopped early is incomplete, never 'no counterexample'")
    se.add_argument("--json", action="store_true")
    sa = sub.add_parser("audit-sampler", help="audit a third-party sampler MODULE:FUNCTION exactly")
    sa.add_argument("target", metavar="MODULE:FUNCTION")
    sa.add_argument("--adapter", default="numpy",
                    help="how the sampler is called: numpy, numpy-tree, transformers, vllm, flashinfer (default numpy)")
    instance_options(sa, 4, 1, "adapters")
    sa.add_argument("--rng-model", choices=["continuous", "torch-float32", "float64", "curand"], default="continuous",
                    help="what a uniform draw is (default continuous)")
    sa.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=limit)
    sa.add_argument("--json", action="store_true")
    r = sub.add_parser("rules", help="list the catalog with claims and references")
    r.add_argument("--names", action="store_true", help="names only")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit code (see the module docstring for their meaning)."""
    _Out.closed = False
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    cmd: Callable[[Any], int] = {"check": _cmd_check, "audit": _cmd_audit, "rules": _cmd_rules,
                                 "search": _cmd_search, "audit-sampler": _cmd_audit_sampler}[args.cmd]
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
    sys.exit(code)
