"""``exactspec audit-sampler``: search small instances for a third-party sampler's bias (or audit one)."""

from __future__ import annotations

from typing import Any

from ..enumerate import Budget
from ..errors import InvalidValue
from .._numbers import PRECISIONS
from .common import (_code_search_out, _family_options, _horizon, _instance, _ints, _load, _no_timings_needs_json,
                     _report_out, _tolerance, adapter_names)
from .parser import Options, search_words

#: ``--vocab``'s default: the search's largest vocabulary (chain and tree adapters alike), or the --instance's
SEARCH_VOCAB = 4


def _sampler_search_space(args: Any, family: str) -> Any:
    """``audit-sampler``'s search space: --vocab, --gamma / --expansion bound the default, --tokens sets the horizon."""
    import itertools
    import math
    from ..drafts import chain, tree
    from ..samplers.search import sampler_space
    if args.order != 1:
        raise InvalidValue("--order applies with --instance (the search covers context-free, per-position and "
                           "order-1 models)")
    proposer = chain(1, sampling=args.sampling or "sample", claim=args.claim) if family == "chain" else tree(
        (1,), children=args.children or "iid", claim=args.claim)
    space = sampler_space(family, proposer)
    changes: dict[str, Any] = {}
    if args.vocab < 2:
        raise InvalidValue(f"--vocab (the search's largest vocabulary) must be >= 2, got {args.vocab}")
    changes["vocabs"] = tuple(range(2, args.vocab + 1))
    if args.gamma is not None:
        if args.gamma < 1:
            raise InvalidValue(f"--gamma (the search's largest gamma) must be >= 1, got {args.gamma}")
        changes["shapes"] = tuple((g,) for g in range(1, args.gamma + 1))
    if args.expansion is not None:
        top = _ints(args.expansion, "--expansion", "ints like '2 1'")
        if not top or min(top) < 1:
            raise InvalidValue(f"--expansion must be ints >= 1 like '2 1', got {args.expansion!r}")
        shapes = [s for d in range(1, len(top) + 1) for s in itertools.product(*(range(1, k + 1) for k in top[:d]))]
        changes["shapes"] = tuple(sorted(shapes, key=lambda s: (sum(math.prod(s[:i + 1]) for i in range(len(s))), s)))
    if args.tokens is not None:  # every cell at this horizon (fewer tokens are its marginals)
        if args.tokens < 1:
            raise InvalidValue(f"--tokens (the search's horizon) must be >= 1, got {args.tokens}")
        changes.update(tokens=(args.tokens,), extra_tokens=None, only_longest=False)
    return space.with_(**changes)


def _cmd_audit_sampler(args: Any) -> int:
    from ..samplers import audit_sampler, get_adapter
    _no_timings_needs_json(args)
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    adapter = get_adapter(args.adapter or "numpy")
    given = adapter if args.adapter else None     # not given: numpy, checked (a sampler it cannot call: exit 2)
    _family_options(args, adapter.family, f"the {adapter.name} adapter")
    needs_torch = getattr(adapter, "needs_torch", False)
    sampler = _load(args.target, "the sampler", preload=("numpy",) + (("torch",) if needs_torch else ()))
    precision = {k: v for k, v in (("precision", args.precision), ("tolerance", args.tolerance)) if v is not None}
    if not args.instance:  # the default: an exact search over small instances, exit codes as `search`
        from .. import parallel
        from ..samplers.search import search_sampler
        space = _sampler_search_space(args, adapter.family)
        workers = parallel.AUTO if args.workers is None else args.workers   # default: every core for a long search
        found = search_sampler(sampler, adapter=given, space=space, rng_model=args.rng_model, seed=args.seed,
                               budget=args.time_limit, progress=not args.quiet, workers=workers, **precision)
        return _code_search_out(args, found)
    inst, proposer = _instance(args, adapter.family, None)
    rep = audit_sampler(sampler, adapter=given, target=inst.target, draft=inst.draft, proposer=proposer,
                        prompt=inst.prompt, tokens=_horizon(args, proposer), rng_model=args.rng_model,
                        budget=Budget(seconds=args.time_limit), on_error=args.on_error, progress=not args.quiet,
                        **precision)
    return _report_out(args, rep)


def register(sub: Any, o: Options) -> None:
    """Add the ``audit-sampler`` sub-command to ``sub`` (the parser's sub-parsers)."""
    from ..samplers.search import sampler_space
    words = search_words(sampler_space("chain"), sampler_space("tree"))
    sa = sub.add_parser("audit-sampler", help="audit a third-party sampler MODULE:FUNCTION exactly",
                        description=f"Search small instances (vocab 2..VOCAB, default {SEARCH_VOCAB}; gamma "
                                    f"{words['gamma']} or the trees {words['expansion']}; each at {words['tokens']} "
                                    f"tokens; {words['models']} models) for the smallest one on "
                                    "which the sampler is biased or crashes, exit codes as `search` (0: none in the "
                                    "stated space, 1: a minimal counterexample with a regression test calling the "
                                    "sampler; a crash is one, of kind 'crash', 3: incomplete). Without --instance, "
                                    "--vocab and --gamma / --expansion bound the "
                                    "search, --tokens sets its horizon and --seed seeds its random part; --instance "
                                    "audits the one seeded instance they describe.")
    sa.add_argument("target", metavar="MODULE:FUNCTION",
                    help="the sampler, e.g. exactspec.bugzoo.numpy_samplers:shared_uniform (MODULE is imported with "
                         "the current directory on sys.path)")
    names = adapter_names()
    sa.add_argument("--adapter", choices=list(names), default=None, metavar="ADAPTER",
                    help=f"how the sampler is called, one of {', '.join(names)} (default numpy, checked: a sampler "
                         "that raises on its first call under numpy while another adapter runs it exits 2 naming "
                         "the adapters that fit; the torch adapters need torch)")
    o.instance(sa, SEARCH_VOCAB, 1, "adapters", search=words)
    sa.add_argument("--rng-model", choices=list(o.RNG_MODELS), default="native", metavar="RNG_MODEL", help=o.rng_help)
    sa.add_argument("--precision", choices=list(PRECISIONS), default=None,
                    help=f"hand the sampler its laws in this float dtype, one of {', '.join(PRECISIONS)} (default: "
                         "what the adapter hands; the precision is then what the adapter declares, else the "
                         "coarsest float dtype seen); a sampler coarser than float64 is also run on float64 "
                         "inputs, and only what stays there is bias")
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
    sa.add_argument("--workers", type=int, default=None, metavar="N",
                    help="search in chunks of instances on N local worker processes (0: every core; 1: in this "
                         "process; default: every core when the search is long enough to pay for starting them and "
                         "the sampler can be imported by them, in this process otherwise); the output is the same "
                         "for any N")
    o.code_search_output(sa)


run = _cmd_audit_sampler
