"""Sweep: audit (or search) a whole grid of rules x proposers x vocabs x gammas x tokens, one table out.

The CI job of a team that maintains several samplers: every cell of the grid is one exact audit
on a seeded instance (or, with ``search=True``, one counterexample search over that cell), run
in chunks through :mod:`exactspec.parallel` (``workers=`` / ``executor=``) and merged in grid
order, so the table does not depend on the number of workers.

>>> import exactspec as es
>>> t = es.sweep(["speculative_sampling", "greedy_match_sampled"], vocabs=(3,), gammas=(1, 2), order=1)
>>> [(r["rule"], r["gamma"], r["verdict"], r["holds"]) for r in t.rows]
[('speculative_sampling', 1, 'lossless', 'yes'), ('speculative_sampling', 2, 'lossless', 'yes'), ('greedy_match_sampled', 1, 'biased', 'yes'), ('greedy_match_sampled', 2, 'biased', 'yes')]
>>> t.exit_code
0
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

from . import _progress, parallel
from .errors import BudgetExceeded, ExactSpecError, InvalidType, InvalidValue

__all__ = ["sweep", "SweepTable", "COLUMNS"]

#: what ``workers="auto"`` assumes a cell costs in this process, in seconds: one exact audit of a seeded
#: instance (vocab 5, gamma 4: 0.05-0.5 s), or a search over the cell's small instances (seconds)
CELL_SECONDS = {"audit": 0.2, "search": 5.0}

#: the columns of a sweep table, in order (``seconds`` is a wall-clock field, left out by ``--no-timings``)
COLUMNS = ("rule", "family", "proposer", "vocab", "gamma", "tokens", "claim", "tv", "verdict", "holds", "detail",
           "seconds")


def _s(x: Any) -> str:
    if x is None:
        return ""
    try:
        f = Fraction(x)
    except (TypeError, ValueError):
        return str(x)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


@dataclass
class SweepTable:
    """The rows of a sweep, in grid order, and what they add up to.

    ``exit_code``: 1 when some claim is broken (``holds == "NO"``), else 2 when some cell raised
    (bad input or a rule that failed), else 3 when some cell is incomplete (time limit, inexact
    field, a worker lost), else 0.
    """

    rows: list[dict[Any, Any]] = field(default_factory=list[Any])
    mode: str = "audit"
    scope: str = ""
    #: the claims with a condition, by rule name (``Rule.claim_text``): each row's ``claim`` is the claim at its cell
    conditions: dict[Any, Any] = field(default_factory=dict[Any, Any])

    @property
    def exit_code(self) -> int:
        holds = [r["holds"] for r in self.rows]
        if "NO" in holds:
            return 1
        if any(r["verdict"] == "error" for r in self.rows):
            return 2
        if any(h != "yes" for h in holds):
            return 3
        return 0

    @property
    def ok(self) -> bool:
        """Every claim holds over everything the table covers (``exit_code == 0``)."""
        return self.exit_code == 0

    def to_dict(self) -> dict[Any, Any]:
        return {"mode": self.mode, "scope": self.scope, "exit_code": self.exit_code, "ok": self.ok,
                "conditions": dict(self.conditions), "rows": [dict(r) for r in self.rows]}

    def to_json(self, **kw: Any) -> str:
        """JSON with exact TVs as ``"p/q"`` strings."""
        return json.dumps(self.to_dict(), **kw)

    def to_csv(self, timings: bool = True) -> str:
        """CSV, one row per cell, the columns of :data:`COLUMNS` (``timings=False``: without ``seconds``)."""
        cols = [c for c in COLUMNS if timings or c != "seconds"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow(r)
        return buf.getvalue()

    def __str__(self) -> str:
        cols = [c for c in COLUMNS if c not in ("family", "detail", "seconds")]
        table = [cols] + [[str(r[c]) if c != "tv" else _short(r[c]) for c in cols] for r in self.rows]
        widths = [max(len(t[i]) for t in table) for i in range(len(cols))]

        def line(row: list[str]) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
        out = [f"exactspec sweep ({self.mode}) — {self.scope}", line(table[0]), line(["-" * w for w in widths])]
        out += [line(t) for t in table[1:]]
        held = sum(r["holds"] == "yes" for r in self.rows)
        out.append("")
        out.append(f"{held}/{len(self.rows)} claims hold over the grid")
        out += [f"  {r['rule']} {r['proposer']} vocab {r['vocab']} gamma {r['gamma']}: {r['detail']}"
                for r in self.rows if r["detail"] and r["holds"] != "yes"]
        out += [f"conditional claim: {name}: {text} (the claim column is the claim at each cell)"
                for name, text in self.conditions.items()]
        return "\n".join(out)


def _short(tv: str) -> str:
    if not tv or len(tv) <= 12:
        return tv
    return f"~{float(Fraction(tv)):.4g}"


def _proposer(family: str, spec: str, gamma: Any) -> Any:
    from .drafts import chain, tree
    how, _, claim = spec.partition("/")
    if family == "chain":
        return chain(gamma, sampling=how or "sample", claim=claim or "draft")
    expansion = (gamma,) if isinstance(gamma, int) else tuple(gamma)
    return tree(expansion, children=how or "iid", claim=claim or "draft")


def _cell(job: tuple[Any, ...]) -> dict[Any, Any]:
    """One grid cell, in a worker: an exact audit (or a search) and the row it fills."""
    mode, rule_ref, family, spec, vocab, gamma, tokens, order, seed, fieldname, deadline = job
    from ._audit import audit, default_tokens
    from .instances import make_instance
    from .rules.record import configuration
    rule = parallel.load_rule(rule_ref)
    row = {"rule": rule.name, "family": family, "proposer": spec, "vocab": vocab,
           "gamma": gamma if isinstance(gamma, int) else " ".join(map(str, gamma)), "tokens": tokens,
           "claim": rule.claim, "tv": "", "verdict": "", "holds": "", "detail": "", "seconds": 0.0}
    t0 = time.perf_counter()
    left = None if deadline is None else deadline - time.time()
    try:
        if left is not None and left <= 0:
            raise BudgetExceeded("seconds", 0)
        proposer = _proposer(family, spec, gamma)
        n = default_tokens(proposer) if tokens is None else tokens
        row["tokens"] = n
        if mode == "search":
            _search_row(row, rule, proposer, family, vocab, gamma, n, seed, left)
        else:
            from .enumerate import Budget
            inst = make_instance(vocab=vocab, order=order, gamma=gamma if family == "chain" else 1, tokens=n,
                                 seed=seed)
            draft = inst.draft if family == "chain" or proposer.needs_draft() else None
            # a conditional claim (stale_draft_probs: biased when gamma >= 2 ...) is the claim at this cell
            row["claim"] = rule.claim_for(configuration(proposer, target=inst.target, draft=draft, tokens=n))
            rep = audit(target=inst.target, draft=draft, proposer=proposer, rule=rule, prompt=inst.prompt, tokens=n,
                        field=fieldname, budget=None if left is None else Budget(seconds=left), worst=0,
                        progress=False)
            row["tv"] = _s(rep.tv) if rep.exact else f"{float(rep.tv):.6g}"
            inexact = rep.lossless and not rep.exact
            row["verdict"] = f"lossless (within {float(rep.tolerance):.3g})" if inexact else rep.verdict
            row["holds"] = "undecided" if inexact else ("yes" if rep.claim_holds else "NO")
    except BudgetExceeded as exc:
        row.update(verdict="incomplete", holds="incomplete", detail=f"not covered: {exc}")
    except ExactSpecError as exc:
        row.update(verdict="error", holds="error", detail=f"{type(exc).__name__}: {exc}")
    row["seconds"] = round(time.perf_counter() - t0, 4)
    return row


def _search_row(row: dict[Any, Any], rule: Any, proposer: Any, family: str, vocab: int, gamma: Any, tokens: int, seed: int,
                left: float | None) -> None:
    from .counterexamples import Counterexample, EmptySearch, default_space, search
    from .rules.record import configuration
    shape = (gamma,) if family == "chain" or isinstance(gamma, int) else tuple(gamma)
    space = default_space(rule, proposer).with_(vocabs=(vocab,), shapes=(shape,), tokens=(tokens,))
    found = search(rule, space=space, seed=seed, budget=left, progress=False)
    # the search covers every family of the space: a condition on the models reads the most general one
    models = "context_free" if set(space.families) <= {"context_free"} else "context_dependent"
    row["claim"] = rule.claim_for(configuration(proposer, tokens=tokens, models=models) | {"vocab": vocab})
    lossless_claim = row["claim"] != "biased"
    if isinstance(found, Counterexample):
        row.update(tv=_s(found.tv), verdict="biased", holds="NO" if lossless_claim else "yes",
                   detail=f"{found.explanation} on {found.instance.describe()}")
    elif isinstance(found, EmptySearch):
        row.update(tv="0", verdict="lossless", holds="yes" if lossless_claim else "NO",
                   detail=f"no counterexample among {found.audited} instances of this cell")
    else:
        row.update(verdict="incomplete", holds="incomplete", detail=found.reason)


def _names(xs: Any, what: str) -> list[Any]:
    if isinstance(xs, (str, int)) or not isinstance(xs, Sequence):
        raise InvalidType(f"sweep: {what} must be a non-empty list, got {xs!r}")
    if not xs:
        raise InvalidValue(f"sweep: {what} must be a non-empty list, got {xs!r}")
    return list(xs)


def sweep(rules: Sequence[Any] | None = None, proposers: Sequence[str] | None = None, vocabs: Sequence[int] = (5,),
          gammas: Sequence[Any] = (4,), tokens: Sequence[int | None] = (None,), *, family: str = "chain",
          order: int = 2, seed: int = 0, search: bool = False, field: str = "fraction",
          seconds: float | None = None, executor: Any = None, workers: int | str | None = parallel.AUTO,
          scheduler: str | None = None, progress: Any = None) -> SweepTable:
    """Audit every rule x proposer x vocab x gamma x tokens cell and return the table (text, JSON, CSV).

    ``rules``: catalog names or :class:`~exactspec.Rule` objects (default: every catalog rule of
    ``family``). ``proposers``: ``"SAMPLING/CLAIM"`` for chains (``"sample/draft"``,
    ``"argmax/point_mass"``; default ``"sample/draft"``), ``"CHILDREN/CLAIM"`` for trees
    (``"iid/draft"``, ``"topk/point_mass"``; default ``"iid/draft"``). ``gammas``: chain lengths,
    or tree expansions (a tuple like ``(2, 1)``; an int ``k`` is ``(k,)``). ``tokens``: horizons
    (``None``: the default, every position of a first and a second step observed).

    Each cell audits the seeded instance ``make_instance(vocab, order, gamma, seed)`` (target
    ``random_table(seed)``, draft ``perturbed(seed + 1)``); ``search=True`` runs a counterexample
    search over the cell instead (every small-denominator law pair, random points), so the
    verdict covers every model of the cell's size. A claim holds when the verdict bears it out; a
    claim with a condition (``Rule.condition``, e.g. ``stale_draft_probs``: biased when gamma >= 2,
    tokens >= 2 and the models context-dependent, lossless otherwise) is the claim at the cell
    (``Rule.claim_for``), so a lossless cell outside the condition holds and a lossless cell inside
    it is a broken claim.

    ``seconds``: a wall-clock budget for the whole sweep; cells it cuts are ``incomplete``
    (never a pass). ``workers`` / ``executor`` / ``scheduler``: run cells in parallel (see
    :mod:`exactspec.parallel`); cells lost with their workers are retried, then reported
    ``incomplete``. ``workers="auto"`` (the default, here and on the command line): every core when the
    grid is long enough to pay for a pool (:data:`CELL_SECONDS` a cell) and its rules can be sent to workers
    (a user's rule defined as a lambda or closure cannot without cloudpickle), this process otherwise;
    ``workers=None``: this process. The table is the same either way. ``progress``: ``None`` or ``True``
    (default) shows the cells done on stderr (:mod:`exactspec._progress`), ``False`` nothing, a callable is
    called ``progress(done, total)``.

    >>> table = sweep(["speculative_sampling"], vocabs=(2,), gammas=(1,), progress=False)
    >>> [(r["rule"], r["holds"]) for r in table.rows]
    [('speculative_sampling', 'yes')]
    """
    from .rules import catalog, get
    if family not in ("chain", "tree"):
        raise InvalidValue(f"sweep: family must be 'chain' or 'tree', got {family!r}")
    if rules is None:
        rule_objs = [r for r in catalog() if r.family == family]
    else:
        rule_objs = [get(r) if isinstance(r, str) else r for r in _names(rules, "rules")]
        from .rules import as_rule
        rule_objs = [as_rule(r) for r in rule_objs]
    wrong = [r.name for r in rule_objs if r.family != family]
    if wrong:
        raise InvalidValue(f"sweep: {', '.join(wrong)} verif{'ies' if len(wrong) == 1 else 'y'} "
                           f"{'trees' if family == 'chain' else 'chains'}, not {family}s (family={family!r})")
    specs = list(_names(proposers, "proposers")) if proposers is not None else [
        "sample/draft" if family == "chain" else "iid/draft"]
    vocabs, gammas, tokens = _names(vocabs, "vocabs"), _names(gammas, "gammas"), _names(tokens, "tokens")
    for spec in specs:  # bad specs fail here, before anything runs
        _proposer(family, spec, gammas[0])
    for v in vocabs:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidType(f"sweep: vocabs must be ints >= 2, got {v!r}")
        elif v < 2:
            raise InvalidValue(f"sweep: vocabs must be ints >= 2, got {v!r}")
    if seconds is not None and not isinstance(seconds, (int, float)):
        raise InvalidType(f"sweep: seconds must be > 0 (None for no limit), got {seconds!r}")
    if seconds is not None and seconds <= 0:
        raise InvalidValue(f"sweep: seconds must be > 0 (None for no limit), got {seconds!r}")
    mode = "search" if search else "audit"
    deadline = parallel.wall_deadline(seconds)
    grid = list(itertools.product(rule_objs, specs, vocabs, gammas, tokens))
    auto = isinstance(workers, str) and workers == parallel.AUTO
    workers = parallel.auto_workers(workers, len(grid) * CELL_SECONDS[mode], seconds)
    if auto and workers is not None and parallel.auto_stays_here(
            None, *(functools.partial(parallel.portable_rule, r) for r in rule_objs)):
        workers = None
    chunked = parallel.parallel_requested(executor, workers, scheduler)
    refs = {id(r): (parallel.portable_rule(r) if chunked else r) for r in rule_objs}
    jobs = [(mode, refs[id(r)], family, spec, v, g, n, order, seed, field, deadline) for r, spec, v, g, n in grid]
    shown = _progress.resolve(progress, "sweep", unit="cells")
    try:
        if chunked:
            run = parallel.run_on(_cell, jobs, executor=executor, workers=workers, scheduler=scheduler,
                                  deadline=deadline, progress=shown)
        else:
            run = parallel.run_chunks(_cell, jobs, progress=shown)
    finally:
        _progress.close(shown)
    rows = []
    for k, (r, spec, v, g, n) in enumerate(grid):
        row = run.results.get(k)
        if row is None:
            why = run.lost.get(k, "not finished by the time limit")
            row = {"rule": r.name, "family": family, "proposer": spec, "vocab": v,
                   "gamma": g if isinstance(g, int) else " ".join(map(str, g)), "tokens": n, "claim": r.claim,
                   "tv": "", "verdict": "incomplete", "holds": "incomplete", "detail": f"not covered: {why}",
                   "seconds": 0.0}
        rows.append(row)
    scope = (f"{family} rules {', '.join(r.name for r in rule_objs)}; proposers {', '.join(specs)}; vocabs "
             f"{', '.join(map(str, vocabs))}; gammas {', '.join(map(str, gammas))}; tokens "
             f"{', '.join('default' if n is None else str(n) for n in tokens)}; "
             + ("every cell searched" if search else f"seeded order-{order} tables (seed {seed}), field {field}"))
    conditions = {r.name: r.claim_text for r in rule_objs if r.condition is not None}
    return SweepTable(rows=rows, mode=mode, scope=scope, conditions=conditions)
