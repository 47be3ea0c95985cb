"""``es.prove``: a rule keeps the target's law for every target and draft law, or a region and a witness.

The engine runs unchanged over the symbolic field (see :mod:`exactspec.prove._field`). A *cell*
is a conjunction of sign conditions on polynomials in the laws' entries; one run of the
engine computes the output law and the expected law on one cell, forking the cell (pushing
the other side, to be run later) wherever a comparison is undecided there. On each finished
cell, ``output(o) - expected(o)`` must be identically 0 (sympy cancels it), or z3 must show
it cannot be non-zero inside the cell; otherwise z3's point in that region, made rational,
is replayed through the exact engine (``es.audit``) and only that exact replay refutes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field as dc_field
from fractions import Fraction
from typing import Any

from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ._field import _set_qq
from ._field import NEG, POS, Decider, Space, SymbolicModel, SolverUnknown

__all__ = ["prove", "Proof", "Refutation", "default_family"]

FAMILIES = ("context_free", "per_position", "table")

#: the most free variables (entries of the symbolic laws) a default family may have: measured on 2 shared
#: cores, 4 variables take 1-3 s (context-free vocab 3; per-position vocab 2, 2 tokens; table vocab 2),
#: 6 take 9-47 s (context-free vocab 4; per-position vocab 2, 3 tokens) and 8 run past 60 s
DEFAULT_MAX_VARIABLES = 4


def _variables(family: str, vocab: int, tokens: int) -> int:
    """The free variables of ``family``'s symbolic target and draft: ``vocab - 1`` per law, one law per position."""
    laws = {"context_free": 1, "per_position": tokens, "table": vocab}[family]
    return 2 * (vocab - 1) * laws


def default_family(vocab: int, tokens: int) -> str:
    """The family ``es.prove`` uses when none is given: the most general one that is feasible at this size.

    ``per_position`` (a law per position) when its symbolic laws have at most
    ``DEFAULT_MAX_VARIABLES`` (4) free variables and it is more than the context-free family
    (``tokens >= 2``); else ``table`` (order-1 tables) on the same condition (vocab 2); else
    ``context_free``, the only family left at larger sizes (pass ``family=`` to ask for more: it
    is slower, not wrong). Counting ``2 * (vocab - 1)`` variables per law: vocab 2 with 2 tokens
    is per-position, vocab 2 with 1 or 3+ tokens is table, vocab 3 and up is context-free.

    >>> default_family(2, 2), default_family(2, 1), default_family(2, 3), default_family(3, 2)
    ('per_position', 'table', 'table', 'context_free')
    """
    if tokens >= 2 and _variables("per_position", vocab, tokens) <= DEFAULT_MAX_VARIABLES:
        return "per_position"
    if _variables("table", vocab, tokens) <= DEFAULT_MAX_VARIABLES:
        return "table"
    return "context_free"


def _family_words(a: dict) -> str:
    """The family as the headline states it: which targets and drafts the verdict is about."""
    fam = a["family"]
    if fam == "context_free":
        return "context-free target and draft (one law at every position)"
    if fam == "per_position":
        n = a["tokens"]
        return ("per-position target and draft (a law of its own at each of the first "
                f"{n} position(s), later positions sharing the last)")
    return f"order-1 table target and draft (a law per previous token, prompt {tuple(a['prompt'])})"


def _default_note(a: dict) -> str:
    if a.get("family_source") != "default":
        return ""
    if a["family"] == "context_free":
        return (" Family: the default at this size (per-position and table laws are past the default's "
                "cost limit here; family='per_position' / --family per_position asks for them).")
    return " Family: the default at this size (the most general one feasible)."


@dataclass
class Proof:
    """The rule keeps the expected law on every cell: for every target and draft law of the family.

    ``cells``: the cells (each a list of readable constraints); ``paths``: branches enumerated
    over all cells; ``atoms``: distinct polynomials compared; ``assumptions``: the scope.
    """

    rule: str
    cells: list
    paths: int
    atoms: int
    assumptions: dict
    seconds: float
    stats: dict = dc_field(default_factory=dict)
    proven = True
    exit_code = 0

    def __bool__(self) -> bool:
        return True

    @property
    def family(self) -> str:
        """The family of target and draft laws the proof covers (``context_free``, ``per_position``, ``table``)."""
        return self.assumptions["family"]

    def summary(self) -> str:
        a = self.assumptions
        return (f"PROVEN: {self.rule} emits exactly the {a['expected']} law for every {_family_words(a)} at "
                f"vocab {a['vocab']}, {a['proposer']}, first {a['tokens']} "
                f"token(s), prompt {tuple(a['prompt'])}: {len(self.cells)} cell(s), "
                f"{self.stats.get('step laws', 0)} step law(s) ({self.paths} enumerated path(s), the rest closed "
                f"forms), {self.atoms} atom(s), "
                f"{self.seconds:.2f} s. Scope: that family, vocab, proposer and horizon only."
                + _default_note(a))

    __str__ = summary

    def to_dict(self) -> dict:
        return {"verdict": "proven", "rule": self.rule, "family": self.assumptions["family"],
                "assumptions": self.assumptions, "cells": self.cells,
                "n_cells": len(self.cells), "paths": self.paths, "atoms": self.atoms,
                "seconds": round(self.seconds, 3), "stats": self.stats, "summary": self.summary()}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)


@dataclass
class Refutation:
    """A cell where ``output(o) - expected(o)`` is not 0, and a rational witness replayed exactly.

    ``report`` is the exact :class:`~exactspec.AuditReport` at the witness (``tv > 0``) and
    ``counterexample`` the matching :class:`~exactspec.Counterexample` (``.to_pytest()``).
    """

    rule: str
    cell: list
    outcome: tuple
    difference: str
    witness: dict
    report: Any
    counterexample: Any
    assumptions: dict
    seconds: float
    cells_done: int = 0
    proven = False
    exit_code = 1

    def __bool__(self) -> bool:
        return False

    @property
    def family(self) -> str:
        """The family of target and draft laws the witness was found in."""
        return self.assumptions["family"]

    def summary(self) -> str:
        a = self.assumptions
        w = "; ".join(f"{k} = ({', '.join(str(x) for x in v)})" for k, v in self.witness.items())
        return (f"REFUTED: {self.rule} does not emit the {a['expected']} law for some {_family_words(a)} "
                f"(vocab {a['vocab']}, {a['proposer']}, {a['tokens']} token(s)). On the cell "
                f"{{{', '.join(self.cell)}}} output{self.outcome} - expected{self.outcome} = {self.difference}. "
                f"Witness {w}: the exact engine gives TV = {self.report.tv}.")

    __str__ = summary

    def to_dict(self) -> dict:
        return {"verdict": "refuted", "rule": self.rule, "family": self.assumptions["family"],
                "assumptions": self.assumptions, "cell": self.cell,
                "outcome": list(self.outcome), "difference": self.difference,
                "witness": {k: [str(x) for x in v] for k, v in self.witness.items()},
                "tv": str(self.report.tv), "seconds": round(self.seconds, 3),
                "counterexample": self.counterexample.to_dict(), "summary": self.summary()}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)


def _default_proposer(rule: Any) -> Any:
    from .. import drafts
    if rule.proposer is not None:
        return rule.proposer
    return drafts.chain(1) if rule.family == "chain" else drafts.tree((2,))


def prove(rule: Any, *, proposer: Any = None, vocab: int, tokens: int, family: str | None = None,
          timeout: float | None = None, closed_form: bool = True, prompt: tuple = (),
          check_ms: int = 10_000, progress: Any = None) -> "Proof | Refutation":
    """Prove that ``rule`` keeps the target's law for every target and draft law, or refute it exactly.

    ``family=None`` (the default) picks the most general family that is feasible at this size
    (:func:`default_family`: ``per_position`` at vocab 2 and 2 tokens, ``table`` at vocab 2
    otherwise, ``context_free`` from vocab 3 on); the verdict's headline and JSON name it
    (``assumptions["family"]``, and ``family_source`` says ``default`` or ``given``): "for every
    context-free target and draft" is a narrower claim than "for every per-position target and
    draft". ``family="context_free"``: one symbolic law ``p = (p_0, ..., 1 - sum)`` and one ``q`` at
    every position; ``"per_position"``: a law per position (``p0_*``, ``p1_*``, ...). Entries
    may be 0. ``proposer`` defaults to ``es.drafts.chain(1)`` for chain rules and
    ``es.drafts.tree((2,))`` for tree rules (or the proposer the rule's claim is stated for).
    ``family="table"``: order-1 tables, ``p<t>_<i>`` is ``p(i | previous token t)``; the prompt
    defaults to ``(0,)`` there (tractable at vocab 2).
    The expected law is the target's sampling law, or its greedy sequence for ``lossless-greedy``
    rules (argmax ties go to the lowest token id). Raises ``BudgetExceeded`` (exit 3) past
    ``timeout`` seconds, ``SolverUnknown`` (exit 3) where z3 cannot decide a check within
    ``check_ms``, and ``UnsupportedSymbolic`` (exit 2) naming an operation the prover cannot follow.
    ``progress(done, total)``, if given, is called as each cell is proven (``total`` None: the cells
    are found as the proof splits them).

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1).proven
    True
    """
    from ..enumerate import Budget
    from ..enumerate.stream import Engine, greedy_sequence, target_law
    from ..rules import as_rule
    try:
        import z3  # noqa: F401
    except ImportError:
        raise ExactSpecError("es.prove needs z3: pip install 'exactspec[prove]' (the z3-solver package)") from None
    t0 = time.perf_counter()
    rule = as_rule(rule)
    for name, v, lo in (("vocab", vocab, 2), ("tokens", tokens, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ExactSpecError(f"prove: {name} must be an int >= {lo}, got {v!r}")
    family_source = "given" if family is not None else "default"
    if family is None:
        family = default_family(vocab, tokens)
    if family not in FAMILIES:
        raise ExactSpecError(f"prove: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ExactSpecError(f"prove: timeout must be a positive number of seconds or None, got {timeout!r}")
    if rule.claim == "declared-target":
        raise ExactSpecError(f"prove: {rule.name} claims a declared target; es.prove checks the target's own law only")
    proposer = proposer if proposer is not None else _default_proposer(rule)
    if getattr(proposer, "family", None) != rule.family:
        raise ExactSpecError(f"prove: rule {rule.name} is a {rule.family} rule but the proposer is {proposer!r}")
    kind = getattr(proposer, "kind", "chain")
    if kind not in ("chain", "tree") or getattr(proposer, "sampled_from", None) is not None:
        raise ExactSpecError(f"prove: proposer {proposer!r} is not supported (chain or expansion tree proposers "
                             "drafting from the draft model)")
    prompt = tuple(prompt)
    if family == "table" and not prompt:
        prompt = (0,)
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in prompt):
        raise ExactSpecError(f"prove: prompt must be token ids in 0..{vocab - 1}, got {prompt!r}")
    decoding = "greedy" if rule.claim == "lossless-greedy" else "sample"
    positions = {"context_free": 1, "per_position": tokens, "table": vocab}[family]
    space = Space(vocab, positions, check_ms)
    order = {"context_free": 0, "per_position": None, "table": 1}[family]
    target = SymbolicModel(vocab, space.laws["p"], order, "p", len(prompt))
    draft = SymbolicModel(vocab, space.laws["q"], order, "q", len(prompt))
    fld = space.field
    assumptions = {"family": family, "family_source": family_source, "vocab": vocab, "tokens": tokens,
                   "prompt": list(prompt),
                   "proposer": proposer.describe(), "expected": "greedy-sequence" if decoding == "greedy" else "target",
                   "variables": list(space.names), "ties": "argmax ties resolve to the lowest token id",
                   "closed_form": closed_form}
    deadline = None if timeout is None else t0 + timeout
    pending: list = [([], None)]   # cells to run: (constraints, a rational point inside or None)
    stats: dict = {}
    cells: list = []
    paths = 0
    while pending:
        if deadline is not None and time.perf_counter() > deadline:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": len(cells), "cells pending": len(pending),
                                                              "paths": paths})
        start, point = pending.pop()
        left = None if deadline is None else max(deadline - time.perf_counter(), 1e-3)
        with Decider(space, start, pending, stats, point) as dec:
            eng = Engine(rule, proposer, target, draft, fld, budget=Budget(seconds=left), closed_form=closed_form)
            try:
                with eng.guard():   # stops a rule's busy loop at the deadline (BudgetExceeded, exit 3)
                    out, _ = eng.output(prompt, tokens)
                    if decoding == "greedy":
                        expected = {greedy_sequence(target, prompt, tokens): fld.one}
                    else:
                        expected = target_law(target, prompt, tokens, fld, orders=eng._orders)
            except BudgetExceeded:
                # the watchdog interrupts wherever the code is, sympy's caches included: drop them so a
                # half-built entry can never be read by a later computation in this process
                _forget_symbolic_caches()
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
            paths += eng.meter.paths
            stats["step laws"] = stats.get("step laws", 0) + eng.meter.steps
            for o in sorted(set(out) | set(expected)):
                d = fld.check(out.get(o, 0), "an output probability").f - \
                    fld.check(expected.get(o, 0), "an expected probability").f
                if d.numer.is_zero:
                    continue
                num, _den = dec.reduce(d)   # the cell's linear equalities substituted
                stats["reductions"] = stats.get("reductions", 0) + 1
                if num.is_zero:
                    continue
                # denominators are non-zero on the cell: d != 0 there iff its numerator is
                poly = d.numer.monic()
                if not dec.may_be_nonzero(num):
                    continue
                return _refute(rule, space, dec, poly, d, o, proposer, family, tokens, prompt, decoding,
                               assumptions, t0, len(cells))
            cells.append([space.show(p, s) for p, s in dec.order])
            if progress is not None:
                progress(len(cells), None)
    stats["cells"] = len(cells)
    return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(space.atoms), assumptions=assumptions,
                 seconds=time.perf_counter() - t0, stats=stats)


def _as_fraction(v: Any) -> Fraction | None:
    """A z3 rational value as a Fraction (a huge one rounded to 40 digits: every candidate is re-checked by z3)."""
    import z3
    if z3.is_rational_value(v):
        try:
            return Fraction(v.numerator_as_long(), v.denominator_as_long())
        except ValueError:   # beyond Python's int/str digit limit
            return Fraction(v.as_decimal(40).rstrip("?")).limit_denominator(10 ** 12)
    return None


def _rational_point(space: Space, dec: Decider, poly: Any) -> dict | None:
    """A rational point of the cell where ``poly != 0``, fixing one variable at a time (z3 picks)."""
    import z3
    s = dec.solver
    n0 = s.num_scopes()
    s.push()
    try:
        s.add(space.z3_sign(poly, frozenset((NEG, POS))))
        if s.check() != z3.sat:
            return None
        point: dict = {}
        for name, var in zip(space.names, space.z3vars):
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
                s.add(var == z3.RealVal(f"{cand.numerator}/{cand.denominator}"))
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
    from ..counterexamples.searching import _rule_ref, evaluate
    from ..counterexamples.space import SearchInstance
    cell = [space.show(p, s) for p, s in dec.order]
    point = _rational_point(space, dec, poly)
    if point is None or space.value(d, point) == 0:
        raise SolverUnknown(f"es.prove found a cell where {rule.name} may be biased ({', '.join(cell)}) but no "
                            "rational witness inside it; not a verdict")
    laws = {}
    for who in ("p", "q"):
        laws[who] = tuple(tuple(space.value(x.f, point) for x in law) for law in space.laws[who])
    kind = getattr(proposer, "kind", "chain")
    if kind == "chain":
        inst = SearchInstance(vocab=space.vocab, family=family, target=laws["p"], draft=laws["q"],
                              shape=(proposer.gamma,), tokens=tokens, prompt=prompt, decoding=decoding,
                              proposer_kind="chain", sampling=proposer.sampling, claim=proposer.claim)
    else:
        inst = SearchInstance(vocab=space.vocab, family=family, target=laws["p"], draft=laws["q"],
                              shape=tuple(proposer.expansion), tokens=tokens, prompt=prompt, decoding=decoding,
                              proposer_kind="tree", sampling=proposer.children, claim=proposer.claim)
    rep = evaluate(rule, inst)
    if rep is None or not rep.tv > 0:
        raise SolverUnknown(f"es.prove's witness for {rule.name} on the cell ({', '.join(cell)}) did not replay as a "
                            "bias in the exact engine; not a verdict (please report this)")
    ce = Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                        expected=dict(rep.expected), tv=rep.tv, space=f"es.prove ({family}, vocab {space.vocab})",
                        rule_ref=_rule_ref(rule))
    witness = {}
    for who in ("p", "q"):
        for j, law in enumerate(laws[who]):
            witness[who if len(laws[who]) == 1 else f"{who}{j}"] = law
    return Refutation(rule=rule.name, cell=cell, outcome=o, difference=str(d.as_expr()), witness=witness,
                      report=rep, counterexample=ce, assumptions=assumptions, seconds=time.perf_counter() - t0,
                      cells_done=cells_done)


def _forget_symbolic_caches() -> None:
    """Clear sympy's caches (and exactspec's symbolic ones) after an interrupted computation."""
    from sympy.core.cache import clear_cache
    clear_cache()
    _set_qq(None, None)
