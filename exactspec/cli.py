"""The ``exactspec`` command: ``check`` (the main job), ``audit`` and ``rules``.

Exit codes: 0 claim holds / lossless, 1 bias or broken claim, 2 bad input, 3 budget exceeded.

>>> main(["rules", "--names"])  # doctest: +ELLIPSIS
speculative_sampling
...
0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Sequence

from . import __version__
from ._audit import audit
from .enumerate import Budget
from .errors import BudgetExceeded, ExactSpecError
from .instances import check_cases, default_instance, make_instance
from .rules import catalog, get

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        self.exit(2, f"exactspec: error: {message} (see `{self.prog} --help`)\n")


def _tv_text(report: Any) -> str:
    if report.tv == 0:
        return "0 (exact)" if report.field.exact else "0"
    s = report.field.to_str(report.tv)
    return s if len(s) <= 20 else f"~{float(report.tv):.4g}"


def _budget(args: Any) -> Budget:
    return Budget(seconds=args.time_limit) if args.time_limit is not None else Budget()


def _num(report: Any, x: Any) -> str:
    return "n/a" if x is None else f"{float(x):.4f}"


def _ints(text: str, flag: str, what: str) -> tuple[int, ...]:
    """Parse '0 1' or '0,1' into ints, or a one-line error naming the flag."""
    try:
        return tuple(int(t) for t in text.replace(",", " ").split())
    except ValueError:
        raise ExactSpecError(f"{flag} must be {what}, got {text!r}") from None


def _instance(args: Any, family: str, prompt: tuple | None) -> tuple[Any, Any]:
    """The seeded instance of ``audit``/``audit-sampler`` and its proposer (a tree for tree rules/adapters)."""
    inst = make_instance(vocab=args.vocab, order=args.order, gamma=args.gamma, tokens=args.tokens, seed=args.seed,
                         sampling=args.sampling, claim="draft" if family == "tree" else args.claim, prompt=prompt)
    if family != "tree":
        return inst, inst.proposer
    from .drafts import tree
    expansion = _ints(args.expansion, "--expansion", "ints like '2 1'")
    return inst, tree(expansion, children=args.children, claim=args.claim)


def _cmd_check(args: Any) -> int:
    inst = default_instance()
    rows, reports, ok = [], [], True
    for case in check_cases(inst):
        t0 = time.perf_counter()
        rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                    case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                    prompt=inst.prompt, tokens=case.tokens, field=args.field, precision=args.precision,
                    budget=_budget(args))
        rep.claim = case.claim
        dt = time.perf_counter() - t0
        ok &= rep.claim_holds
        reports.append(rep)
        rows.append((case.rule.name, case.proposer.describe(), str(case.tokens), case.claim, _tv_text(rep),
                     rep.verdict, "yes" if rep.claim_holds else "NO", _num(rep, rep.tokens_per_call),
                     _num(rep, rep.accepted_per_call), _num(rep, rep.nodes_per_call), f"{dt:.3f}s"))
    if args.json:
        print(json.dumps({"instance": {k: v for k, v in reports[0].instance.items() if k not in ("proposer", "tokens")},
                          "field": args.field, "ok": ok,
                          "rules": [r.to_dict() | {"output": None, "expected": None} for r in reports]}, indent=1))
        return 0 if ok else 1
    head = ("rule", "proposer", "tokens", "claim", "exact TV", "verdict", "holds", "tokens/call", "accepted/call",
            "nodes/call", "time")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    print(f"exactspec check — vocab {inst.target.vocab}, order {inst.target.order} seeded tables (seed 0), "
          f"perturbed draft (seed 1), prompt {inst.prompt}; field {reports[0].field.describe()}")
    print(line(head))
    print(line(tuple("-" * w for w in widths)))
    for r in rows:
        print(line(r))
    broken = [f"{r[0]} with {r[1]}" for r in rows if r[6] == "NO"]
    print(f"\n{len(rows) - len(broken)}/{len(rows)} claims hold" + (f"; broken: {', '.join(broken)}" if broken else ""))
    return 0 if ok else 1


def _cmd_audit(args: Any) -> int:
    rule = get(args.rule)
    prompt = None if args.prompt is None else _ints(args.prompt, "--prompt", "token ids like '0 1'")
    inst, proposer = _instance(args, rule.family, prompt)
    rep = audit(target=inst.target, draft=inst.draft, proposer=proposer, rule=rule, prompt=inst.prompt,
                tokens=inst.tokens, decoding=args.decoding, field=args.field, precision=args.precision,
                budget=_budget(args))
    print(rep.to_json(indent=1) if args.json else rep.summary())
    return 0 if rep.lossless else 1


def _cmd_search(args: Any) -> int:
    from .counterexamples import default_space, search
    from .drafts import chain, tree
    rule = get(args.rule)
    if rule.family == "tree":
        proposer = tree((1,), children=args.children or "iid", claim=args.claim or "draft") if (
            args.children or args.claim) else None
    else:
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
    if args.json:
        print(found.to_json(indent=1) if found else json.dumps({"rule": rule.name, "found": False,
                                                                "space": found.space, "audited": found.audited}))
        return 1 if found else 0
    print(found)
    if found:
        print("\nregression test (fails while the bias exists):\n")
        print(found.to_pytest())
    return 1 if found else 0


def _cmd_audit_sampler(args: Any) -> int:
    import importlib
    from .samplers import audit_sampler
    mod_name, _, fn_name = args.target.partition(":")
    if not mod_name or not fn_name:
        raise ExactSpecError(f"sampler must be MODULE:FUNCTION, got {args.target!r}")
    import os
    if os.getcwd() not in sys.path:  # MODULE is looked up from the current directory too, as `python -m` does
        sys.path.insert(0, os.getcwd())
    try:
        sampler = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as exc:
        raise ExactSpecError(f"cannot load {args.target}: {exc}") from None
    from .samplers import get_adapter
    adapter = get_adapter(args.adapter)
    inst, proposer = _instance(args, adapter.family, None)
    rep = audit_sampler(sampler, adapter=adapter, target=inst.target, draft=inst.draft, proposer=proposer,
                        prompt=inst.prompt, tokens=inst.tokens, rng_model=args.rng_model)
    print(rep.to_json(indent=1) if args.json else rep.summary())
    return 0 if rep.lossless else 1


def _cmd_rules(args: Any) -> int:
    if args.names:
        for r in catalog():
            print(r.name)
        return 0
    for r in catalog():
        print(f"{r.name}  [{r.family}, claim: {r.claim}]\n    {r.description}\n    reference: {r.reference}")
    print("\nconfigurations `exactspec check` audits (rule, proposer, the claim it must bear out):")
    for case in check_cases():
        print(f"  {case.rule.name:32} {case.proposer.describe():78} {case.claim}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="exactspec", description="Prove or refute, exactly, that speculative-decoding rules keep "
                                               "the target's law.")
    p.add_argument("--version", action="version", version=f"exactspec {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--field", choices=["fraction", "mpmath", "float"], default="fraction")
        sp.add_argument("--precision", type=int, default=None, help="mpmath precision in bits (default 113)")
        sp.add_argument("--time-limit", type=float, default=None, help="seconds per audit before giving up (exit 3)")
        sp.add_argument("--json", action="store_true", help="print JSON (exact numbers as strings like '3/5')")

    c = sub.add_parser("check", help="audit every catalog rule on the default instance (the main job)")
    common(c)
    a = sub.add_parser("audit", help="audit one rule on one seeded instance")
    a.add_argument("--rule", required=True, help="catalog name, e.g. speculative_sampling or 'ensemble(1/3)'")
    a.add_argument("--vocab", type=int, default=5)
    a.add_argument("--order", type=int, default=2)
    a.add_argument("--gamma", type=int, default=4)
    a.add_argument("--tokens", type=int, default=4)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--prompt", default=None, help="token ids, e.g. '0 1' (default: 0..order-1)")
    a.add_argument("--sampling", choices=["sample", "argmax"], default="sample")
    a.add_argument("--claim", choices=["draft", "point_mass", "renormalized"], default="draft")
    a.add_argument("--expansion", default="2 1", help="tree rules: the expansion, e.g. '2 2 1'")
    a.add_argument("--children", choices=["iid", "without_replacement", "topk"], default="iid",
                   help="tree rules: how children are drafted")
    a.add_argument("--decoding", choices=["sample", "greedy"], default=None,
                   help="default: greedy for lossless-greedy rules, else sample")
    common(a)
    se = sub.add_parser("search", help="find the minimal counterexample of a rule (exit 1) or cover a space (exit 0)")
    se.add_argument("--rule", required=True)
    se.add_argument("--max-vocab", type=int, default=None)
    se.add_argument("--max-gamma", type=int, default=None, help="chains: largest gamma; trees: deepest expansion")
    se.add_argument("--max-denominator", type=int, default=None)
    se.add_argument("--tokens", type=int, default=None, help="largest number of tokens")
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--sampling", choices=["sample", "argmax"], default=None, help="chain drafts")
    se.add_argument("--children", choices=["iid", "without_replacement", "topk"], default=None, help="tree drafts")
    se.add_argument("--claim", choices=["draft", "point_mass", "renormalized"], default=None)
    se.add_argument("--time-limit", type=float, default=None, help="seconds before stopping (reports what was covered)")
    se.add_argument("--json", action="store_true")
    sa = sub.add_parser("audit-sampler", help="audit a third-party sampler MODULE:FUNCTION exactly")
    sa.add_argument("target", metavar="MODULE:FUNCTION")
    sa.add_argument("--adapter", default="numpy")
    sa.add_argument("--vocab", type=int, default=4)
    sa.add_argument("--order", type=int, default=1)
    sa.add_argument("--gamma", type=int, default=2)
    sa.add_argument("--tokens", type=int, default=2)
    sa.add_argument("--seed", type=int, default=0)
    sa.add_argument("--sampling", choices=["sample", "argmax"], default="sample")
    sa.add_argument("--claim", choices=["draft", "point_mass", "renormalized"], default="draft")
    sa.add_argument("--expansion", default="2 1", help="tree adapters: the expansion, e.g. '2 1'")
    sa.add_argument("--children", choices=["iid", "without_replacement", "topk"], default="iid",
                    help="tree adapters: how children are drafted")
    sa.add_argument("--rng-model", choices=["continuous", "torch-float32", "float64", "curand"], default="continuous")
    sa.add_argument("--json", action="store_true")
    r = sub.add_parser("rules", help="list the catalog with claims and references")
    r.add_argument("--names", action="store_true", help="names only")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` and return the exit code (0 holds, 1 bias, 2 bad input, 3 budget)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return {"check": _cmd_check, "audit": _cmd_audit, "rules": _cmd_rules, "search": _cmd_search,
                "audit-sampler": _cmd_audit_sampler}[args.cmd](args)
    except BudgetExceeded as exc:
        print(f"exactspec: {exc}", file=sys.stderr)
        return 3
    except ExactSpecError as exc:
        print(f"exactspec: error: {exc}", file=sys.stderr)
        return exc.exit_code if exc.exit_code != 3 else 3
    except ValueError as exc:  # e.g. a prompt that is not integers
        print(f"exactspec: error: {exc}", file=sys.stderr)
        return 2


def entry() -> None:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `exactspec search ... | head`
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
