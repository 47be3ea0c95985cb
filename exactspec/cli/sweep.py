"""``exactspec sweep``: audit (or search) a grid of rules x proposers x vocabs x gammas x tokens."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidValue
from .common import DEFAULT_TIME_LIMIT, _dump, _ints, _names, _Out, _print, _seconds
from .parser import Options


def _cmd_sweep(args: Any) -> int:
    from .. import parallel
    from ..sweep import sweep
    if args.json and args.csv:
        raise InvalidValue("--json and --csv are exclusive")
    if args.no_timings and not (args.json or args.csv):
        raise InvalidValue("--no-timings applies to --json or --csv output")
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    rules = None if args.rules is None else _names(args.rules, "--rules", "catalog names like 'speculative_sampling,mss'")
    proposers = None if args.proposers is None else _names(args.proposers, "--proposers", "proposers like "
                                                           "'sample/draft argmax/point_mass'")
    tokens: tuple = (None,) if args.tokens is None else _ints(args.tokens, "--tokens", "ints like '3 6'")
    table = sweep(rules, proposers, _ints(args.vocabs, "--vocabs", "ints like '2 3'"),
                  _ints(args.gammas, "--gammas", "ints like '1 2 4'"), tokens, family=args.family, order=args.order,
                  seed=args.seed, search=args.search, field=args.field, seconds=args.time_limit,
                  workers=parallel.AUTO if args.workers is None and args.scheduler is None else args.workers,
                  scheduler=args.scheduler, progress=not args.quiet)
    if args.json:
        _print(_dump(table.to_dict(), args))
    elif args.csv:
        _Out.write(table.to_csv(timings=not args.no_timings).rstrip("\n"))
    else:
        _print(str(table))
    return table.exit_code


def register(sub: Any, o: Options) -> None:
    """Add the ``sweep`` sub-command to ``sub`` (the parser's sub-parsers)."""
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
                    help="number system: fraction (exact), mpmath or float (inexact fields only bound the TV: a "
                         "lossless cell is undecided, exit 3) (default fraction)")
    sw.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                    help=o.limit + "; cells not finished are incomplete")
    sw.add_argument("--json", action="store_true", help=o.json_help)
    sw.add_argument("--csv", action="store_true", help="print CSV, one row per cell (default: text)")
    sw.add_argument("--no-timings", action="store_true", help="with --json or --csv: leave out the seconds column")
    o.parallel(sw)
    o.quiet(sw)


run = _cmd_sweep
