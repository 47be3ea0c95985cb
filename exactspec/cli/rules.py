"""``exactspec rules``: the catalog with claims and references, and the configurations ``check`` audits."""

from __future__ import annotations

import json
from typing import Any

from ..instances import check_cases
from ..rules import catalog
from .common import _print
from .parser import Options


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


def register(sub: Any, o: Options) -> None:
    """Add the ``rules`` sub-command to ``sub`` (the parser's sub-parsers)."""
    r = sub.add_parser("rules", help="list the catalog with claims and references")
    r.add_argument("--names", action="store_true", help="rule names only, one a line (default: the full records)")
    r.add_argument("--json", action="store_true",
                   help="the catalog and the configurations `exactspec check` audits as JSON (default: text; with "
                        "--names: a JSON list of names)")


run = _cmd_rules
