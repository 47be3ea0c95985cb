"""``exactspec check``: audit every configuration of ``exactspec rules`` on the default instance.

It exits on the rules' claims (0: every claim holds exactly, 1: a claim is broken, 3: an inexact
field only bounds the TV) and prints a table that fits :data:`~exactspec.cli.TABLE_WIDTH` columns
(``--wide``: every column), or ``--json``.

>>> _sig4(1 / 3), _sig4(0)
('0.3333', '0')
"""

from __future__ import annotations

import decimal
import time
from typing import Any

from .._audit import audit, shared_expected_laws
from ..enumerate import Budget
from ..errors import BudgetExceeded, ExactSpecError, InvalidValue
from ..fields import gmpy2_mpq
from ..instances import check_cases, default_instance
from .. import _progress
from .common import TABLE_WIDTH, _Clock, _dump, _no_timings_needs_json, _print, _wrap
from .parser import Options

#: what ``check`` without ``--workers`` assumes one configuration costs in this process, in seconds: the
#: configurations go to every core when they add up to ``parallel.AUTO_MIN_SECONDS`` or more (measured on a
#: loaded 2-core machine: 2.6 s for the 25 configurations, 0.7 s of it tiny_clamp_residual's)
CASE_SECONDS = 0.1

#: rules whose audit costs several times what its outcomes suggest (measured): tiny_clamp_residual's laws
#: carry 2**-126, so its exact rationals are hundreds of digits long
_SLOW_RULES = {"tiny_clamp_residual": 4.0}


def _case_weight(case: Any, vocab: int) -> float:
    """A configuration's estimated relative cost: its outcomes (``vocab ** tokens``), times 16 without a closed
    form (enumerated branch by branch), times :data:`_SLOW_RULES`. Only the order of submission reads it.

    >>> from exactspec.instances import check_cases, default_instance
    >>> inst = default_instance()
    >>> cases = check_cases(inst)
    >>> max(cases, key=lambda c: _case_weight(c, inst.target.vocab)).rule.name
    'tiny_clamp_residual'
    """
    enumerated = 1 if case.rule.closed_form is not None else 16
    return float(vocab) ** case.tokens * enumerated * _SLOW_RULES.get(case.rule.name, 1.0)


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


_CHECK_CASES: dict[str, Any] = {}


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
        # the configurations of this process share the expected law of each horizon (the instance never changes)
        with shared_expected_laws(_CHECK_CASES.setdefault("expected", {})):
            rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                        case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                        prompt=inst.prompt, tokens=case.tokens, field=field, precision=precision,
                        budget=None if left is None else Budget(seconds=left), progress=False)
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


def _workers(args: Any, cases: list) -> Any:
    """The workers ``check`` runs on: ``--workers`` as given, else every core when its configurations are
    estimated long enough to pay for a pool (:func:`exactspec.parallel.auto_workers`), else None (this process)."""
    from .. import parallel
    if args.workers is not None or args.scheduler is not None:
        return args.workers
    return parallel.auto_workers(parallel.AUTO, len(cases) * CASE_SECONDS, args.time_limit)


def _check_parallel(args: Any, cases: list, workers: Any = None,
                    progress: Any = None) -> list[tuple[Any, float]]:
    """Every configuration of ``check`` on ``--workers`` processes or a ``--scheduler``; reports in table order.

    The configurations are submitted longest first (by :func:`_case_weight`), for load balance;
    the table's order, and every figure in it, is the same.
    """
    from .. import parallel
    if workers is not None and workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {workers}")
    deadline = parallel.wall_deadline(args.time_limit)
    vocab = default_instance().target.vocab
    order = sorted(range(len(cases)), key=lambda i: (-_case_weight(cases[i], vocab), i))
    jobs = [(i, args.field, args.precision, deadline, bool(args.json)) for i in range(len(cases))]
    _CHECK_CASES.clear()   # this process (workers=1) and forked workers rebuild the cases this run audits
    gmpy2_mpq()           # imported before the workers fork, not in each of them (tens of milliseconds apiece)
    with parallel.executor_for(None, workers, args.scheduler) as (ex, owned):
        run = parallel.run_chunks(_check_chunk, jobs, executor=ex or parallel._Inline(), owned=owned or ex is None,
                                  order=order, deadline=deadline, rebuild=parallel.pool_maker(workers),
                                  progress=progress)
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
        raise InvalidValue("--wide applies to the table, not to --json output (which has every field)")
    inst = default_instance()
    clock = _Clock(args.time_limit)
    cases = check_cases(inst)
    shown = _progress.reporter("check", unit="configurations", enabled=not args.quiet)
    try:
        return _check_table(args, inst, cases, clock, shown)
    finally:
        _progress.close(shown)


def _check_table(args: Any, inst: Any, cases: list, clock: _Clock, shown: Any) -> int:
    """Audit ``cases`` (in this process or on workers), print the table or the JSON, return the exit code."""
    rows: list[dict[str, str]] = []
    reports = []
    workers = _workers(args, cases)
    chunked = workers is not None or args.scheduler is not None
    done = _check_parallel(args, cases, workers, shown) if chunked else None
    with shared_expected_laws():   # audited here: the configurations share the expected law of each horizon
        for i, case in enumerate(cases):
            t0 = time.perf_counter()
            if done is not None:  # audited in chunks on workers; merged here in the table's order
                rep, dt = done[i]
            else:
                rep = audit(target=inst.target, draft=None if case.proposer.family == "tree" and not
                            case.proposer.needs_draft() else inst.draft, proposer=case.proposer, rule=case.rule,
                            prompt=inst.prompt, tokens=case.tokens, field=args.field, precision=args.precision,
                            budget=clock.budget(f"{i} of the configurations"), progress=False)
                if shown is not None:
                    shown(i + 1, len(cases))
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
                         "tokens/call": _num(rep, rep.tokens_per_call),
                         "accepted/call": _num(rep, rep.accepted_per_call),
                         "nodes/call": _num(rep, rep.nodes_per_call), "time": f"{dt:.3f}s"})
    _progress.close(shown)   # the bar is gone before the table is printed
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


def register(sub: Any, o: Options) -> None:
    """Add the ``check`` sub-command to ``sub`` (the parser's sub-parsers)."""
    c = sub.add_parser("check", help="audit every catalog rule on the default instance (the main job)",
                       description="Audit every configuration of `exactspec rules` on the default instance and "
                                   "exit on the rules' claims (0: every claim holds exactly).")
    o.common(c)
    c.add_argument("--wide", action="store_true",
                   help=f"table with every column and the full proposer descriptions (default: a table that fits "
                        f"{TABLE_WIDTH} columns, without tokens/call, accepted/call, nodes/call and time)")
    o.parallel(c)
    o.quiet(c)


run = _cmd_check
