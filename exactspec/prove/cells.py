"""The cells of one proof: the engine run over the symbolic field, cell by cell, and a refutation's witness.

The engine runs unchanged over the symbolic field (:mod:`exactspec.prove.field`). A *cell* is a
conjunction of sign conditions on polynomials in the laws' entries; one run of the engine computes the
output law and the expected law on one cell, forking the cell (pushing the other side, to be run later)
wherever a comparison is undecided there. On each finished cell, ``output(o) - expected(o)`` must be
identically 0, or z3 must show it cannot be non-zero inside the cell; otherwise z3's point in that
region, made rational, is replayed through the exact engine (``es.audit``) and only that exact replay
refutes.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import BudgetExceeded, ExactSpecError, RuleError
from . import session
from .field import NEG, POS, ZERO, Decider, SolverUnknown, Space, SymbolicModel
from .results import Refutation

__all__ = ["Job", "Setup", "assumptions_of", "run_cell", "dfs", "expand", "rational_point", "forget_symbolic_caches"]


@dataclass(frozen=True)
class Job:
    """What a worker needs to run cells of one proof (``rule`` and ``proposer`` as sent: see :func:`sendable`)."""

    rule: Any
    proposer: Any
    vocab: int
    tokens: int
    family: str
    prompt: tuple
    decoding: str
    closed_form: bool
    check_ms: int
    nonce: tuple


def _nonce() -> tuple:
    """A name for one proof, unique across processes and threads (a worker keeps the setup of one proof)."""
    return (os.getpid(), uuid.uuid4().hex, time.time())


class Setup:
    """The symbolic space, models and field of one proof, in the process that runs its cells."""

    def __init__(self, job: Job, rule: Any, proposer: Any) -> None:
        self.job, self.rule, self.proposer = job, rule, proposer
        positions = {"context_free": 1, "per_position": job.tokens, "table": job.vocab}[job.family]
        self.space = Space(job.vocab, positions, job.check_ms)   # starts the field's memos (raw ones included)
        order = {"context_free": 0, "per_position": None, "table": 1}[job.family]
        self.target = SymbolicModel(job.vocab, self.space.laws["p"], order, "p", len(job.prompt))
        self.draft = SymbolicModel(job.vocab, self.space.laws["q"], order, "q", len(job.prompt))


def assumptions_of(job: Job, space: Space, family_source: str) -> dict:
    return {"family": job.family, "family_source": family_source, "vocab": job.vocab, "tokens": job.tokens,
            "prompt": list(job.prompt), "proposer": job.proposer.describe(),
            "expected": "greedy-sequence" if job.decoding == "greedy" else "target",
            "variables": list(space.names), "ties": "argmax ties resolve to the lowest token id",
            "closed_form": job.closed_form}


def run_cell(su: Setup, start: list, point: Any, pending: list, stats: dict, deadline: float | None,
              t0: float) -> tuple:
    """Run the engine on one cell: ``(cell text, paths)`` when it keeps the law, else ``(Refutation, paths)``.

    Forks of the cell are appended to ``pending`` (``(constraints, point)``, in the order they arose).
    """
    from ..enumerate import Budget
    from ..enumerate.stream import Engine, greedy_sequence, target_law
    rule, space, job = su.rule, su.space, su.job
    fld = space.field
    left = None if deadline is None else max(deadline - time.perf_counter(), 1e-3)
    with Decider(space, start, pending, stats, point) as dec:
        eng = Engine(rule, su.proposer, su.target, su.draft, fld, budget=Budget(seconds=left),
                     closed_form=job.closed_form)
        try:
            with eng.guard():   # stops a rule's busy loop at the deadline (BudgetExceeded, exit 3)
                out, _ = eng.output(job.prompt, job.tokens)
                if job.decoding == "greedy":
                    expected = {greedy_sequence(su.target, job.prompt, job.tokens): fld.one}
                else:
                    expected = target_law(su.target, job.prompt, job.tokens, fld, orders=eng._orders)
        except BudgetExceeded:
            # the watchdog interrupts wherever the code is, sympy's caches included: drop them so a
            # half-built entry can never be read by a later computation in this process
            forget_symbolic_caches()
            space.forget_solver()
            raise
        except RuleError as exc:
            cell = [space.show(p, s) for p, s in dec.order]
            raise RuleError(f"{exc} [es.prove: on the cell {{{', '.join(cell)}}}]", rule=rule.name,
                            trace=exc.trace) from exc
        except ExactSpecError as exc:   # e.g. a law the rule built is invalid on this cell: say where
            if exc.exit_code == 2 and hasattr(exc, "add_note"):
                exc.add_note("es.prove: on the cell {" + ", ".join(space.show(p, s) for p, s in dec.order) + "}")
            raise
        finally:
            eng.close()
        stats["step laws"] = stats.get("step laws", 0) + eng.meter.steps
        for o in sorted(set(out) | set(expected)):
            a = fld.check(out.get(o, 0), "an output probability").f
            b = fld.check(expected.get(o, 0), "an expected probability").f
            # a - b vanishes on the cell iff a.numer * b.denom - b.numer * a.denom does once the cell's
            # equalities are substituted: it is a - b's numerator times a divisor of the denominators
            # (non-zero on the cell, so on the affine span of its equalities too): no gcd needed
            raws = session.current().raw
            raw = raws.get((a, b))
            if raw is None:
                raw = a.numer * b.denom - b.numer * a.denom
                if len(raws) >= 500_000:
                    raws.clear()
                raws[(a, b)] = raw
            if raw.is_zero:
                continue
            stats["reductions"] = stats.get("reductions", 0) + 1
            if dec.reduce_poly(raw).is_zero:
                continue
            d = a - b
            if d.numer.is_zero:
                continue
            num, _den = dec.reduce(d, numer_only=True)   # the cell's linear equalities substituted
            if num.is_zero:
                continue
            # denominators are non-zero on the cell: d != 0 there iff its numerator is
            poly = d.numer.monic()
            if not dec.may_be_nonzero(num):
                continue
            return _refute(rule, space, dec, poly, d, o, su.proposer, job.family, job.tokens, job.prompt,
                           job.decoding, {}, t0, 0), eng.meter.paths
        return [space.show(p, s) for p, s in dec.order], eng.meter.paths


def dfs(su: Setup, pending: list, stats: dict, deadline: float | None, timeout: Any, t0: float,
         progress: Any = None) -> tuple:
    """Run the cells of ``pending`` and of their forks depth first (last pushed first): ``(cells, paths, ref)``.

    ``ref`` is the first Refutation in that order (None: every cell keeps the law); this is the
    order of the sequential proof, so a subtree run in a worker lists its cells as the whole run would.
    """
    cells: list = []
    paths = 0
    while pending:
        if deadline is not None and time.perf_counter() > deadline:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": len(cells), "cells pending": len(pending),
                                                              "paths": paths})
        start, point = pending.pop()
        res, p = run_cell(su, start, point, pending, stats, deadline, t0)
        paths += p
        if isinstance(res, Refutation):
            res.cells_done = len(cells)
            return cells, paths, res
        cells.append(res)
        if progress is not None:
            progress(len(cells), len(cells) + len(pending))
    return cells, paths, None


def expand(su: Setup, target: int, stats: dict, deadline: float | None, timeout: Any, t0: float) -> tuple:
    """The proof's cells in depth-first order as ``items``: cells run here and subtrees left to run.

    Starting from the whole space, the shallowest subtree is run (its cell) and replaced, in place,
    by its cell and its forks in the order the depth-first run would visit them (last pushed first),
    until ``target`` subtrees are left or none. An item is ``("cell", text)``, ``("sub", constraints,
    point)`` or ``("refuted", Refutation)`` (nothing after it is needed). Returns ``(items, paths)``.
    """
    items: list = [("sub", [], None)]
    paths = 0
    while True:
        subs = [i for i, it in enumerate(items) if it[0] == "sub"]
        if not subs or len(subs) >= target:
            return items, paths
        k = min(subs, key=lambda i: (len(items[i][1]), i))
        if deadline is not None and time.perf_counter() > deadline:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": sum(it[0] == "cell" for it in items),
                                                              "paths": paths})
        forks: list = []
        res, p = run_cell(su, items[k][1], items[k][2], forks, stats, deadline, t0)
        paths += p
        if isinstance(res, Refutation):
            items[k:] = [("refuted", res)]
        else:
            items[k:k + 1] = [("cell", res)] + [("sub", c, pt) for c, pt in reversed(forks)]


def _as_fraction(v: Any) -> Fraction | None:
    """A z3 rational value as a Fraction (a huge one rounded to 40 digits: every candidate is re-checked by z3)."""
    import z3
    if z3.is_rational_value(v):
        try:
            return Fraction(v.numerator_as_long(), v.denominator_as_long())
        except ValueError:   # beyond Python's int/str digit limit
            return Fraction(v.as_decimal(40).rstrip("?")).limit_denominator(10 ** 12)
    return None


def _cell_solver(space: Space, dec: Decider) -> tuple:
    """``(solver, variables, sign)``: a new z3 context and solver asserting the cell's known signs, in order."""
    import z3
    ctx = z3.Context()
    zvars = [z3.Real(n, ctx) for n in space.names]
    solver = z3.SolverFor(space.logic, ctx=ctx) if space.logic else z3.Solver(ctx=ctx)
    solver.set("timeout", space.check_ms)

    def sign(poly: Any, signs: frozenset) -> Any:
        terms = []
        for monom, c in poly.terms():
            t = z3.RealVal(f"{int(c.numerator)}/{int(c.denominator)}", ctx)
            for i, e in enumerate(monom):
                if e:
                    t = t * (zvars[i] if e == 1 else zvars[i] ** e)
            terms.append(t)
        e = z3.Sum(terms) if len(terms) > 1 else terms[0]
        return z3.Or([e < 0 if x == NEG else e == 0 if x == ZERO else e > 0 for x in sorted(signs)])
    for poly, signs in dec.known.items():
        solver.add(sign(poly, signs))
    return solver, zvars, sign, ctx


def rational_point(space: Space, dec: Decider, poly: Any) -> dict | None:
    """A rational point of the cell where ``poly != 0``, fixing one variable at a time (z3 picks).

    In a fresh z3 context that holds the cell's constraints only, so the witness depends on the cell alone:
    not on what this process solved before, nor on how the cells were split over workers.
    """
    import z3
    s, zvars, sign, ctx = _cell_solver(space, dec)
    n0 = s.num_scopes()
    s.push()
    try:
        s.add(sign(poly, frozenset((NEG, POS))))
        if s.check() != z3.sat:
            return None
        point: dict = {}
        for name, var in zip(space.names, zvars):
            m = s.model()
            v = m.eval(var, model_completion=True)
            c = _as_fraction(v)
            candidates = [c] if c is not None else []
            if c is None:
                approx = v.approx(30) if hasattr(v, "approx") else v
                a = _as_fraction(approx)
                if a is not None:
                    candidates += [a.limit_denominator(d) for d in (10, 100, 10 ** 4, 10 ** 8)] + [a]
            for cand in candidates:
                s.push()
                s.add(var == z3.RealVal(f"{cand.numerator}/{cand.denominator}", ctx))
                if s.check() == z3.sat:
                    point[name] = cand
                    break
                s.pop()
            else:
                return None
        return point
    finally:
        while s.num_scopes() > n0:   # pop everything pushed above (the first, one per fixed variable)
            s.pop()


def _refute(rule: Any, space: Space, dec: Decider, poly: Any, d: Any, o: tuple, proposer: Any, family: str,
            tokens: int, prompt: tuple, decoding: str, assumptions: dict, t0: float, cells_done: int) -> Refutation:
    from ..counterexamples.counterexample import Counterexample
    from ..counterexamples.searching import evaluate, rule_reference
    from ..counterexamples.space import SearchInstance
    cell = [space.show(p, s) for p, s in dec.order]
    point = rational_point(space, dec, poly)
    if point is None or space.value(d, point) == 0:
        raise SolverUnknown(f"es.prove found a cell where {rule.name} may be biased ({', '.join(cell)}) but no "
                            "rational witness inside it; not a verdict")
    laws = {}
    for who in ("p", "q"):
        laws[who] = tuple(tuple(space.value(x.f, point) for x in law) for law in space.laws[who])
    vocab = space.vocab
    assert isinstance(vocab, int)   # a concrete vocabulary (the all-vocabulary proof replays its own witness)
    kind = getattr(proposer, "kind", "chain")
    if kind == "chain":
        inst = SearchInstance(vocab=vocab, family=family, target=laws["p"], draft=laws["q"],
                              shape=(proposer.gamma,), tokens=tokens, prompt=prompt, decoding=decoding,
                              proposer_kind="chain", sampling=proposer.sampling, claim=proposer.claim)
    else:
        inst = SearchInstance(vocab=vocab, family=family, target=laws["p"], draft=laws["q"],
                              shape=tuple(proposer.expansion), tokens=tokens, prompt=prompt, decoding=decoding,
                              proposer_kind="tree", sampling=proposer.children, claim=proposer.claim)
    rep = evaluate(rule, inst)
    if rep is None or not rep.tv > 0:
        raise SolverUnknown(f"es.prove's witness for {rule.name} on the cell ({', '.join(cell)}) did not replay as a "
                            "bias in the exact engine; not a verdict (please report this)")
    ce = Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                        expected=dict(rep.expected), tv=rep.tv, space=f"es.prove ({family}, vocab {space.vocab})",
                        rule_ref=rule_reference(rule))
    witness = {}
    for who in ("p", "q"):
        for j, law in enumerate(laws[who]):
            witness[who if len(laws[who]) == 1 else f"{who}{j}"] = law
    return Refutation(rule=rule.name, cell=cell, outcome=o, difference=str(d.as_expr()), witness=witness,
                      report=rep, counterexample=ce, assumptions=assumptions, seconds=time.perf_counter() - t0,
                      cells_done=cells_done)


def forget_symbolic_caches() -> None:
    """Clear sympy's caches (and exactspec's symbolic ones) after an interrupted computation."""
    from sympy.core.cache import clear_cache  # type: ignore[import-untyped]  # sympy ships no type information
    clear_cache()
    session.current().forget()

