"""``exactspec audit-loop``: search small instances for a whole generation loop's bias (or audit one)."""

from __future__ import annotations

from typing import Any

from .. import parallel
from ..enumerate import Budget
from ..errors import InvalidValue
from ..instances import make_instance
from .common import _code_search_out, _load, _no_timings_needs_json, _report_out, _tolerance
from .parser import Options


def _cmd_audit_loop(args: Any) -> int:
    """``exactspec audit-loop``: search small instances for a whole loop's bias (default), or audit one (--instance)."""
    _no_timings_needs_json(args)
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    if args.reference is not None and args.reference < 1:
        raise InvalidValue(f"--reference (the gamma of the correct reference loop) must be >= 1, got "
                           f"{args.reference}")
    if args.tokens is not None and args.tokens < 1:
        raise InvalidValue(f"--tokens must be >= 1, got {args.tokens}")
    fn = _load(args.target, "the loop", preload=("numpy", "torch") + (
        ("transformers",) if args.kind == "transformers" else ()))
    if args.dtype is not None and args.precision is not None and args.dtype != args.precision:
        raise InvalidValue(f"--dtype {args.dtype} and --precision {args.precision} disagree: they name the same "
                           "thing (the stand-ins' dtype); pass one")
    from ..samplers.rounding import F64_ALLOWANCE
    tolerance = F64_ALLOWANCE if args.tolerance is None else args.tolerance
    import torch
    from ..samplers.loops.loop_audit import audit_loop
    from ..samplers.loops.loop_search import loop_space, search_loop
    options = dict(kind=args.kind, dtype=getattr(torch, args.precision or args.dtype or "float64"),
                   output=args.output, on_error=args.on_error, reference=args.reference, tolerance=tolerance,
                   rng_model=args.rng_model)
    if not args.instance:  # the default: an exact search over small instances, exit codes as `search`
        if args.order != 1:
            raise InvalidValue("--order applies with --instance (the search covers context-free, per-position and "
                               "order-1 models)")
        if args.vocab < 2:
            raise InvalidValue(f"--vocab (the search's largest vocabulary) must be >= 2, got {args.vocab}")
        space = loop_space(None, args.tokens).with_(vocabs=tuple(range(2, args.vocab + 1)))
        workers = parallel.AUTO if args.workers is None else args.workers   # default: every core for a long search
        found = search_loop(fn, space=space, seed=args.seed, budget=args.time_limit, progress=not args.quiet,
                            workers=workers, **options)
        return _code_search_out(args, found)
    inst = make_instance(vocab=args.vocab, order=args.order, gamma=1, tokens=1, seed=args.seed)
    rep = audit_loop(fn, target=inst.target, draft=inst.draft, prompt=inst.prompt or (0,), tokens=args.tokens,
                     budget=Budget(seconds=args.time_limit), progress=not args.quiet,
                     workers=parallel.AUTO if args.workers is None else args.workers, **options)
    return _report_out(args, rep)


def register(sub: Any, o: Options) -> None:
    """Add the ``audit-loop`` sub-command to ``sub`` (the parser's sub-parsers)."""
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
    lo.add_argument("--rng-model", choices=list(o.RNG_MODELS), default="native", metavar="RNG_MODEL", help=o.rng_help)
    lo.add_argument("--instance", action="store_true",
                    help="audit one seeded instance (--vocab, --order, --tokens, --seed) instead of searching")
    lo.add_argument("--workers", type=int, default=None, metavar="N",
                    help="search in chunks of instances on N local worker processes (0: every core; 1: in this "
                         "process; default: every core when the search is long enough to pay for starting them and "
                         "the loop can be imported by them, in this process otherwise); with --instance, the "
                         "branches left after 0.05 s on N forked processes (default: every core); the output is "
                         "the same for any N")
    o.code_search_output(lo)


run = _cmd_audit_loop
