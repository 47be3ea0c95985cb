"""``exactspec prove``: a rule lossless for every target and draft law (exit 0), or refuted with a witness (1)."""

from __future__ import annotations

from typing import Any

from .. import _progress
from ..errors import InvalidValue
from .common import DEFAULT_TIME_LIMIT, _ints, _print, _rule, _seconds
from .parser import Options


def _cmd_prove(args: Any) -> int:
    """``exactspec prove``: exit 0 proven, 1 refuted (with a witness replayed exactly), 2 bad input, 3 gave up."""
    from ..drafts import ChainProposer, TreeProposer, chain, tree
    from ..prove import Refutation, prove
    rule = _rule(args.rule)
    proposer: ChainProposer | TreeProposer
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    if rule.family == "tree":
        if args.gamma is not None or args.sampling is not None:
            raise InvalidValue(f"--gamma and --sampling do not apply to rule {rule.name}, which verifies trees")
        exp = (2,) if args.expansion is None else _ints(args.expansion, "--expansion",
                                                          "children per depth like '2' or '2 1'")
        proposer = tree(tuple(exp), children=args.children or "iid", claim=args.claim or "draft")
    else:
        if args.expansion is not None or args.children is not None:
            raise InvalidValue(f"--expansion and --children do not apply to rule {rule.name}, which verifies chains")
        proposer = chain(1 if args.gamma is None else args.gamma, sampling=args.sampling or "sample",
                         claim=args.claim or "draft")
    shown = _progress.reporter("proving", unit="cells proven", enabled=not args.quiet)
    try:
        res = prove(rule, proposer=proposer, vocab=args.vocab, tokens=args.tokens, family=args.family,
                    timeout=args.time_limit, workers=args.workers, progress=shown)
    finally:
        _progress.close(shown)
    if args.json:
        _print(res.to_json())
    else:
        _print(res.summary())
        if isinstance(res, Refutation):   # a refutation is falsy, a proof truthy
            _print("\nregression test (fails while the bias exists):\n")
            _print(res.counterexample.to_pytest())
    return res.exit_code


def _vocab(text: str) -> "int | str":
    """``--vocab``: an int, or ``all`` (every vocabulary size)."""
    import argparse
    if text.strip().lower() == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a vocabulary size like 3, or 'all', got {text!r}") from None


def register(sub: Any, o: Options) -> None:
    """Add the ``prove`` sub-command to ``sub`` (the parser's sub-parsers)."""
    pr = sub.add_parser("prove", help="prove a rule lossless for every target and draft law, or refute it with a "
                                      "witness (needs exactspec[prove])")
    pr.add_argument("--rule", required=True, help="catalog name or MODULE:FUNCTION (required: no default)")
    pr.add_argument("--vocab", type=_vocab, required=True,
                    help="vocabulary size of the symbolic laws (required: no default; 2 to 4 is practical), or "
                         "'all': one proof for every vocabulary size (chain rules, sampled drafts, context-free "
                         "laws; the tokens outside the outcome as classes of exchangeable unnamed tokens)")
    pr.add_argument("--tokens", type=int, required=True, help="horizon: tokens whose law is proven (required: no "
                                                               "default)")
    pr.add_argument("--gamma", type=int, default=None, help="chain rules: drafted tokens per step (default 1)")
    pr.add_argument("--expansion", default=None, help="tree rules: children per depth, e.g. '2' (default '2')")
    o.drafting(pr)
    pr.add_argument("--family", choices=["context_free", "per_position", "table"], default=None,
                    help="context_free: one symbolic p and q at every position; per_position: one p and q per "
                         "position; table: order-1 tables, prompt (0,) (default: the most general one feasible at "
                         "the size, named in the verdict: per_position at vocab 2 and 2 tokens, table at vocab 2 "
                         "otherwise, context_free from vocab 3)")
    pr.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=o.limit)
    pr.add_argument("--workers", type=int, default=None, metavar="N",
                    help="processes that prove the cells (0: every core; 1: in this process; default: every core "
                         "from 6 free variables, e.g. context-free vocab 4, else one worker process under the time "
                         "limit); the verdict, cells and witness are the same for any N")
    pr.add_argument("--json", action="store_true", help=o.json_help)
    o.quiet(pr)


run = _cmd_prove
