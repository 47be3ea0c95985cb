"""``exactspec search``: the minimal counterexample of a rule (exit 1), or the space covered (exit 0, 3)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidValue
from ..rules import get
from .common import DEFAULT_TIME_LIMIT, _dump, _no_timings_needs_json, _print, _rule, _seconds
from .parser import Options


def _search_defaults() -> dict[str, Any]:
    """The bounds of the space ``exactspec search`` covers when no option narrows it, for chain and tree rules."""
    from ..counterexamples import default_space
    from ..rules import mss
    chain_space, tree_space = default_space(get("speculative_sampling")), default_space(mss)
    return {"vocab": (max(chain_space.vocabs), max(tree_space.vocabs)),
            "gamma": (max(s[0] for s in chain_space.shapes), max(len(s) for s in tree_space.shapes)),
            "tokens": (max(chain_space.tokens), max(tree_space.tokens)),
            "denominator": (chain_space.max_denominator, tree_space.max_denominator),
            "exhaustive": (chain_space.exhaustive_denominator, tree_space.exhaustive_denominator)}


def _search_result_json(found: Any, rule: Any, args: Any) -> str:
    if hasattr(found, "to_dict"):
        return _dump(found.to_dict(), args)
    if hasattr(found, "to_json"):
        return _dump(json.loads(found.to_json()), args)
    return _dump({"rule": rule.name, "found": False, "space": found.space, "audited": found.audited}, args)


def _cmd_search(args: Any) -> int:
    from ..counterexamples import Counterexample, default_space, search
    from ..drafts import ChainProposer, TreeProposer, chain, tree
    _no_timings_needs_json(args)
    rule = _rule(args.rule)
    proposer: ChainProposer | TreeProposer | None
    if rule.family == "tree":
        if args.sampling is not None:
            raise InvalidValue(f"--sampling does not apply to rule {rule.name}, which verifies trees")
        proposer = tree((1,), children=args.children or "iid", claim=args.claim or "draft") if (
            args.children or args.claim) else None
    else:
        if args.children is not None:
            raise InvalidValue(f"--children does not apply to rule {rule.name}, which verifies chains")
        proposer = chain(1, sampling=args.sampling or "sample", claim=args.claim or "draft")
    space = default_space(rule, proposer)
    changes: dict[str, Any] = {}
    if args.max_vocab is not None:
        if args.max_vocab < 2:
            raise InvalidValue(f"--max-vocab must be >= 2, got {args.max_vocab}")
        changes["vocabs"] = tuple(range(2, args.max_vocab + 1))
    if args.max_gamma is not None:
        if args.max_gamma < 1:
            raise InvalidValue(f"--max-gamma must be >= 1, got {args.max_gamma}")
        changes["shapes"] = (tuple((g,) for g in range(1, args.max_gamma + 1)) if rule.family == "chain"
                             else tuple(s for s in space.shapes if len(s) <= args.max_gamma))
    if args.tokens is not None:
        if args.tokens < 1:
            raise InvalidValue(f"--tokens must be >= 1, got {args.tokens}")
        changes["tokens"] = tuple(range(1, args.tokens + 1))
    if args.max_denominator is not None:
        if args.max_denominator < 1:
            raise InvalidValue(f"--max-denominator must be >= 1, got {args.max_denominator}")
        changes["max_denominator"] = args.max_denominator
        changes["exhaustive_denominator"] = min(space.exhaustive_denominator, args.max_denominator)
    space = space.with_(**changes)
    from .. import parallel
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    workers = parallel.AUTO if args.workers is None else args.workers   # default: every core for a long search
    with parallel.executor_for(None, None, args.scheduler) as (ex, _):
        found = search(rule, proposer=proposer, space=space, seed=args.seed, budget=args.time_limit, executor=ex,
                       workers=None if ex is not None else workers, progress=not args.quiet)
    code = getattr(found, "exit_code", None)
    if code is None:
        code = 1 if found.__class__.__name__ == "Counterexample" else 0
    if args.json:
        _print(_search_result_json(found, rule, args))
        return code
    _print(str(found))
    if isinstance(found, Counterexample):   # code 1
        _print("\nregression test (fails while the bias exists):\n")
        _print(found.to_pytest())
    return code


def register(sub: Any, o: Options) -> None:
    """Add the ``search`` sub-command to ``sub`` (the parser's sub-parsers)."""
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
    o.drafting(se)
    se.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=o.limit + "; a search stopped early is incomplete, never 'no counterexample'")
    se.add_argument("--json", action="store_true", help=o.json_help)
    se.add_argument("--no-timings", action="store_true", help=o.no_timings)
    o.parallel(se)
    o.quiet(se)


run = _cmd_search
