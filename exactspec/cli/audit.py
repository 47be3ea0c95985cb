"""``exactspec audit``: audit one rule on one seeded instance (exit on the law: 0 lossless, 1 biased)."""

from __future__ import annotations

from typing import Any

from .._audit import audit
from ..enumerate import Budget
from .common import _family_options, _horizon, _instance, _ints, _no_timings_needs_json, _report_out, _rule
from .parser import Options


def _cmd_audit(args: Any) -> int:
    _no_timings_needs_json(args)
    rule = _rule(args.rule)
    _family_options(args, rule.family, f"rule {rule.name}")
    prompt = None if args.prompt is None else _ints(args.prompt, "--prompt", "token ids like '0 1'", empty=True)
    inst, proposer = _instance(args, rule.family, prompt)
    rep = audit(target=inst.target, draft=inst.draft, proposer=proposer, rule=rule, prompt=inst.prompt,
                tokens=_horizon(args, proposer), decoding=args.decoding, field=args.field, precision=args.precision,
                budget=Budget(seconds=args.time_limit), progress=not args.quiet)
    return _report_out(args, rep)


def register(sub: Any, o: Options) -> None:
    """Add the ``audit`` sub-command to ``sub`` (the parser's sub-parsers)."""
    a = sub.add_parser("audit", help="audit one rule on one seeded instance")
    a.add_argument("--rule", required=True, help="catalog name (e.g. speculative_sampling, 'ensemble(1/3)') or "
                                                 "your own rule as MODULE:FUNCTION (required: no default)")
    o.instance(a, 5, 2, "rules")
    a.add_argument("--prompt", default=None, help="token ids, e.g. '0 1' (default: 0..order-1)")
    a.add_argument("--decoding", choices=["sample", "greedy"], default=None,
                   help="the expected law: the target's sampling law or its greedy sequence (default: greedy for "
                        "lossless-greedy rules, else sample)")
    o.common(a)
    o.quiet(a)


run = _cmd_audit
