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

import contextvars
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field as dc_field
from fractions import Fraction
from typing import Any, Callable, Iterator

from ..errors import BudgetExceeded, ExactSpecError, RuleError
from ._field import _memo, _set_qq
from ._field import NEG, POS, ZERO, Decider, Space, SymbolicModel, SolverUnknown

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


def _vocab_words(a: dict) -> str:
    """``vocab 3``, or ``every vocabulary size >= 2`` for an all-vocabulary proof."""
    if a["vocab"] == "all":
        return (f"every vocabulary size >= {a['min_vocab']} (the tokens outside the outcome as "
                f"{len(a['classes'])} class(es) of exchangeable unnamed tokens)")
    return f"vocab {a['vocab']}"


def _prove_every_vocab(rule: Any, proposer: Any, tokens: int, family: Any, timeout: Any, prompt: tuple,
                       check_ms: int, workers: Any, progress: Any) -> "Proof | Refutation":
    """``prove(..., vocab="all")``: checks its arguments, then :func:`._all_vocab.prove_all_vocab`."""
    from ._all_vocab import prove_all_vocab
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ExactSpecError(f"prove: tokens must be an int >= 1, got {tokens!r}")
    if family not in (None, "context_free"):
        raise ExactSpecError(f"prove: vocab='all' proves the context_free family only, got family={family!r}")
    if tuple(prompt):
        raise ExactSpecError("prove: vocab='all' takes no prompt (context-free laws do not read it)")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ExactSpecError(f"prove: timeout must be a positive number of seconds or None, got {timeout!r}")
    if workers not in (None, 1):
        raise ExactSpecError("prove: vocab='all' runs in this process (workers=None or 1)")
    if rule.claim == "declared-target":
        raise ExactSpecError(f"prove: {rule.name} claims a declared target; es.prove checks the target's own law only")
    proposer = proposer if proposer is not None else _default_proposer(rule)
    if getattr(proposer, "family", None) != rule.family:
        raise ExactSpecError(f"prove: rule {rule.name} is a {rule.family} rule but the proposer is {proposer!r}")
    res = None
    if timeout is not None:
        # a time limit: one worker process, stopped at the limit (sympy's factorisation or z3 can run long
        # between two looks at the clock; a stop must not leave this process's sympy half-changed either)
        from ..parallel import NotPicklable, portable, portable_rule
        try:
            sent = (portable_rule(rule), portable(proposer, "proposer"))
        except NotPicklable:   # a rule that cannot travel: here, the limit looked at between cells
            sent = None
        if sent is not None:
            res = _every_vocab_in_worker(sent, tokens, timeout, check_ms)
    if res is None:
        res = prove_all_vocab(rule, proposer, tokens, timeout=timeout, check_ms=check_ms, kit=_every_vocab_kit(),
                              progress=progress)
    res.assumptions["family_source"] = "default" if family is None else "given"
    return res


def _every_vocab_kit() -> Any:
    """What :mod:`._all_vocab` needs from this module, handed down (no import cycle)."""
    from types import SimpleNamespace
    return SimpleNamespace(Proof=Proof, Refutation=Refutation, prove=prove, rational_point=_rational_point,
                           forget_symbolic_caches=_forget_symbolic_caches)


def _every_vocab_in_worker(sent: tuple, tokens: int, timeout: float, check_ms: int) -> "Proof | Refutation":
    """``prove(vocab="all", timeout=...)`` in one worker process, stopped at the limit (``BudgetExceeded``)."""
    from .. import parallel
    wall = parallel.wall_deadline(timeout)
    with parallel.executor_for(workers=1, isolate=True) as (ex, owned):
        run = parallel.run_chunks(_every_vocab_chunk, [(sent, tokens, wall, check_ms)], executor=ex, owned=owned,
                                  deadline=wall)
    res = run.results.get(0)
    if res is None:
        if time.time() >= wall:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": "unknown (stopped in a worker)"})
        run.require_all("es.prove(vocab='all')")
    _raise_from(res, timeout, {"cells proven": res.get("budget", {}).get("cells proven", 0)}
                if "budget" in res else {})
    return res["result"]


def _every_vocab_chunk(task: tuple) -> dict:
    """The worker's side of :func:`_every_vocab_in_worker`: the proof, or its error as data."""
    from ..parallel import load_portable, load_rule
    from ._all_vocab import prove_all_vocab
    (rule_ref, proposer_ref), tokens, wall, check_ms = task
    left = wall - time.time()
    if left <= 0:
        return {"budget": {"cells proven": 0}}
    try:
        res = prove_all_vocab(load_rule(rule_ref), load_portable(proposer_ref), tokens, timeout=left,
                              check_ms=check_ms, kit=_every_vocab_kit(), progress=None)
    except BudgetExceeded as exc:
        return {"budget": exc.covered}
    except ExactSpecError as exc:
        return _error_as_data(exc)
    return {"result": res}


def _default_note(a: dict) -> str:
    if a.get("family_source") != "default":
        return ""
    others = [f for f in FAMILIES if f != a["family"]]
    return (f" Family: the default at this size, not the one asked for: the rule was not proven for "
            f"{' or '.join(others)} laws, so this proof exits 3 (not checked in full); name the family "
            f"(family='{a['family']}', --family {a['family']}) to accept this proof as the check, or prove the "
            "others at a vocab where they are feasible.")


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

    def __bool__(self) -> bool:
        return True

    @property
    def exit_code(self) -> int:
        """0 for a proof of the family the caller named; 3 for one of a default family (narrower than asked).

        A call without ``family=`` asks about the rule, not about one family of laws; the default family is
        the one feasible at the size, so the proof did not cover what was asked: never exit 0.
        """
        return 3 if self.assumptions.get("family_source") == "default" else 0

    @property
    def family(self) -> str:
        """The family of target and draft laws the proof covers (``context_free``, ``per_position``, ``table``)."""
        return self.assumptions["family"]

    def summary(self) -> str:
        a = self.assumptions
        if a["vocab"] == "all":
            trip = a.get("tripwire", {})
            return (f"PROVEN: {self.rule} emits exactly the {a['expected']} law for every {_family_words(a)} at "
                    f"{_vocab_words(a)}, {a['proposer']}, first {a['tokens']} token(s): {len(self.cells)} cell(s), "
                    f"{self.paths} enumerated path(s), {self.atoms} atom(s), {self.seconds:.2f} s. Theorem: "
                    f"{a.get('theorem', '')}. Scope: that family, proposer and horizon, every vocabulary size; the "
                    "abstraction and its soundness: docs/proofs-scale-out.md. Tripwire (a check on the prover, "
                    f"not part of the proof): {trip.get('audits', 0)} exact audits at vocab 2-6 and es.prove at "
                    f"vocab {', '.join(str(v) for v in trip.get('concrete_proofs', {})) or '-'} agree."
                    + _default_note(a))
        return (f"PROVEN: {self.rule} emits exactly the {a['expected']} law for every {_family_words(a)} at "
                f"{_vocab_words(a)}, {a['proposer']}, first {a['tokens']} "
                f"token(s), prompt {tuple(a['prompt'])}: {len(self.cells)} cell(s), "
                f"{self.stats.get('step laws', 0)} step law(s) ({self.paths} enumerated path(s), the rest closed "
                f"forms), {self.atoms} atom(s), "
                f"{self.seconds:.2f} s. Scope: that family, vocab, proposer and horizon only."
                + _default_note(a))

    __str__ = summary

    def to_dict(self) -> dict:
        return {"verdict": "proven", "rule": self.rule, "family": self.assumptions["family"],
                "family_named": self.assumptions.get("family_source") != "default", "exit_code": self.exit_code,
                "theorem": self.assumptions.get("theorem"), "assumptions": self.assumptions, "cells": self.cells,
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
        where = (f"every vocabulary size >= {a['min_vocab']} searched; the witness has vocab {len(self.witness['p'])}"
                 if a["vocab"] == "all" else f"vocab {a['vocab']}")
        return (f"REFUTED: {self.rule} does not emit the {a['expected']} law for some {_family_words(a)} "
                f"({where}, {a['proposer']}, {a['tokens']} token(s)). On the cell "
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


#: proofs in one process run one at a time: the symbolic field's memos are the process's (``_field``), so a second
#: thread's ``es.prove`` waits for the first to finish (re-entrant: a proof calls ``prove`` at smaller sizes)
_PROVING = threading.RLock()


def prove(rule: Any, *, proposer: Any = None, vocab: "int | str", tokens: int, family: str | None = None,
          timeout: float | None = None, closed_form: bool = True, prompt: tuple = (),
          check_ms: int = 10_000, workers: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> "Proof | Refutation":
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

    ``workers``: processes that run the cells (``0``: every core; ``1``: this process). ``None``
    (the default) splits the cells over every core when the proof is long (at least
    ``PARALLEL_MIN_VARIABLES`` = 6 free variables: context-free vocab 4 and up), runs it in this
    process otherwise, and in one worker process when ``timeout`` is given (so a proof stopped
    mid-computation never leaves sympy unusable in this process). Every split gives the same
    cells in the same order, the same counts and the same first refuted cell as one process (a
    rule that cannot be sent to a worker is proven here under the default, and raises
    ``NotPicklable`` when ``workers`` asks for processes). ``progress(done, total)`` is called
    as cells finish (``total``: the cells known so far, which grows as cells fork).

    ``vocab="all"``: one proof for every vocabulary size (>= 2) at once, for chain rules with drafts
    sampled from the draft law and context-free target and draft: ``tokens`` named tokens and the
    rest of the vocabulary as classes of exchangeable unnamed tokens with their total masses (see
    :mod:`exactspec.prove._all_vocab` and the docs' soundness argument). A rule the abstraction
    cannot follow (an argmax over the vocabulary, ``len`` of a law, ...) raises
    ``AbstractionRefused`` (exit 2); a refutation's witness is replayed exactly at a concrete vocabulary.

    A proof exits 0 (``exit_code``) only for the family the caller named: with ``family=None`` it exits 3,
    since the default family is narrower than "every law". Proofs in one process run one at a time (a
    second thread's call waits); ``workers`` runs one proof's cells on several processes.

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1).proven
    True
    """
    with _PROVING:   # in a copy of the caller's context: the proof's memos and hooks end with it
        return contextvars.copy_context().run(
            _prove, rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, timeout=timeout,
            closed_form=closed_form, prompt=prompt, check_ms=check_ms, workers=workers, progress=progress)


def _prove(rule: Any, *, proposer: Any, vocab: "int | str", tokens: int, family: str | None, timeout: float | None,
           closed_form: bool, prompt: tuple, check_ms: int, workers: int | None,
           progress: Callable[[int, int], None] | None) -> "Proof | Refutation":
    """The body of :func:`prove`, under its lock."""
    from ..parallel import NotPicklable
    from ..rules import as_rule
    try:
        import z3  # noqa: F401
    except ImportError:
        raise ExactSpecError("es.prove needs z3: pip install 'exactspec[prove]' (the z3-solver package)") from None
    t0 = time.perf_counter()
    rule = as_rule(rule)
    if vocab == "all":
        return _prove_every_vocab(rule, proposer, tokens, family, timeout, prompt, check_ms, workers, progress)
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
    job = _Job(rule=rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, prompt=prompt,
               decoding=decoding, closed_form=closed_form, check_ms=check_ms, nonce=_nonce())
    n = _workers_for(workers, family, vocab, tokens, timeout)
    if n is not None:
        try:
            sent = _sendable(job)
        except NotPicklable:
            if workers is not None:
                raise
            n = None   # the automatic choice only: a rule that cannot travel is proven here, as before
    if n is None:
        su = _Setup(job, rule, proposer)
        assumptions = _assumptions(job, su.space, family_source)
        deadline = None if timeout is None else t0 + timeout
        stats: dict = {}
        cells, paths, ref = _dfs(su, [([], None)], stats, deadline, timeout, t0, progress)
        if ref is not None:
            ref.assumptions, ref.seconds = assumptions, time.perf_counter() - t0
            return ref
        stats["cells"] = len(cells)
        return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(su.space.atoms), assumptions=assumptions,
                     seconds=time.perf_counter() - t0, stats=stats)
    return _prove_in_workers(job, sent, n, rule.name, family_source, timeout, t0, progress)


# -- the cells ------------------------------------------------------------------------------------------------

#: the fewest free variables at which ``workers=None`` splits the cells over every core (6: context-free vocab 4,
#: 815 cells, seconds; 4 variables take well under a second, less than starting the worker processes pays back)
PARALLEL_MIN_VARIABLES = 6
#: subtrees of cells handed to the workers, per worker (more: better balance, more cells run before the split)
CHUNKS_PER_WORKER = 16
#: without a time limit, run the first cells (the split) in this process before the workers start, so they
#: inherit its caches (False: in a worker, as under a time limit)
LOCAL_EXPAND = True


@dataclass(frozen=True)
class _Job:
    """What a worker needs to run cells of one proof (``rule`` and ``proposer`` as sent: see :func:`_sendable`)."""

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
    import os
    global _COUNTER
    _COUNTER += 1
    return (os.getpid(), _COUNTER, time.time())


_COUNTER = 0


class _Setup:
    """The symbolic space, models and field of one proof, in the process that runs its cells."""

    def __init__(self, job: _Job, rule: Any, proposer: Any) -> None:
        self.job, self.rule, self.proposer = job, rule, proposer
        positions = {"context_free": 1, "per_position": job.tokens, "table": job.vocab}[job.family]
        self.space = Space(job.vocab, positions, job.check_ms)   # starts the field's memos (raw ones included)
        order = {"context_free": 0, "per_position": None, "table": 1}[job.family]
        self.target = SymbolicModel(job.vocab, self.space.laws["p"], order, "p", len(job.prompt))
        self.draft = SymbolicModel(job.vocab, self.space.laws["q"], order, "q", len(job.prompt))


def _assumptions(job: _Job, space: Space, family_source: str) -> dict:
    return {"family": job.family, "family_source": family_source, "vocab": job.vocab, "tokens": job.tokens,
            "prompt": list(job.prompt), "proposer": job.proposer.describe(),
            "expected": "greedy-sequence" if job.decoding == "greedy" else "target",
            "variables": list(space.names), "ties": "argmax ties resolve to the lowest token id",
            "closed_form": job.closed_form}


def _run_cell(su: _Setup, start: list, point: Any, pending: list, stats: dict, deadline: float | None,
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
            _forget_symbolic_caches()
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
            if FAST_DIFFERENCE:
                # a - b vanishes on the cell iff a.numer * b.denom - b.numer * a.denom does once the cell's
                # equalities are substituted: it is a - b's numerator times a divisor of the denominators
                # (non-zero on the cell, so on the affine span of its equalities too): no gcd needed
                raws = _memo().raw
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
            if not FAST_DIFFERENCE:
                stats["reductions"] = stats.get("reductions", 0) + 1
            if num.is_zero:
                continue
            # denominators are non-zero on the cell: d != 0 there iff its numerator is
            poly = d.numer.monic()
            if not dec.may_be_nonzero(num):
                continue
            return _refute(rule, space, dec, poly, d, o, su.proposer, job.family, job.tokens, job.prompt,
                           job.decoding, {}, t0, 0), eng.meter.paths
        return [space.show(p, s) for p, s in dec.order], eng.meter.paths




def _dfs(su: _Setup, pending: list, stats: dict, deadline: float | None, timeout: Any, t0: float,
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
        res, p = _run_cell(su, start, point, pending, stats, deadline, t0)
        paths += p
        if isinstance(res, Refutation):
            res.cells_done = len(cells)
            return cells, paths, res
        cells.append(res)
        if progress is not None:
            progress(len(cells), len(cells) + len(pending))
    return cells, paths, None


def _expand(su: _Setup, target: int, stats: dict, deadline: float | None, timeout: Any, t0: float) -> tuple:
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
        res, p = _run_cell(su, items[k][1], items[k][2], forks, stats, deadline, t0)
        paths += p
        if isinstance(res, Refutation):
            items[k:] = [("refuted", res)]
        else:
            items[k:k + 1] = [("cell", res)] + [("sub", c, pt) for c, pt in reversed(forks)]


# -- worker processes ---------------------------------------------------------------------------------------

def _workers_for(workers: Any, family: str, vocab: int, tokens: int, timeout: Any) -> int | None:
    """How many worker processes run the proof (None: in this process, the sequential path)."""
    from .. import parallel
    if _LEGACY:
        return None
    if workers is not None:
        n = parallel.resolve_workers(workers)
        return None if n == 1 else n
    cores = parallel.resolve_workers(0)
    if _variables(family, vocab, tokens) >= PARALLEL_MIN_VARIABLES and cores > 1:
        return cores
    return 1 if timeout is not None else None   # a time limit: one worker process, so a stop cannot touch this one


def _sendable(job: _Job) -> _Job:
    """``job`` with its rule and proposer made ready for a worker process (``NotPicklable`` when they cannot go)."""
    from ..parallel import portable, portable_rule
    from dataclasses import replace
    return replace(job, rule=portable_rule(job.rule), proposer=portable(job.proposer, "proposer"))


_CURRENT: Any = None   # (nonce, _Setup) of the proof this worker process is running cells of


def _setup_in_worker(job: _Job) -> _Setup:
    global _CURRENT
    if _CURRENT is not None and _CURRENT[0] == job.nonce:
        return _CURRENT[1]
    from ..parallel import load_portable, load_rule
    from ..rules import as_rule
    su = _Setup(job, as_rule(load_rule(job.rule)), load_portable(job.proposer))
    _CURRENT = (job.nonce, su)
    return su


def _pack(poly: Any) -> tuple:
    """A polynomial as plain data (sympy's own pickling of ring elements is not reliable)."""
    return tuple((m, int(c.numerator), int(c.denominator)) for m, c in poly.terms())


def _unpack(space: Space, data: tuple) -> Any:
    R = space.K.ring
    from sympy import QQ
    return R.from_dict({m: QQ(a, b) for m, a, b in data})


def _chunk(task: tuple) -> dict:
    """One worker task: ``("expand", target)`` (the first cells and the subtrees left) or ``("dfs", subtree)``."""
    global _CURRENT
    job, kind, payload, wall = task
    su = _setup_in_worker(job)
    space = su.space
    t0 = time.perf_counter()
    deadline = None if wall is None else t0 + (wall - time.time())
    stats: dict = {}
    before = set(space.atoms)
    try:
        if kind == "expand":
            items, paths = _expand(su, payload, stats, deadline, None, t0)
            out: dict = {"items": [(it[0], [(_pack(p), s) for p, s in it[1]], it[2]) if it[0] == "sub" else it
                                   for it in items], "paths": paths}
        else:
            start, point = payload
            cells, paths, ref = _dfs(su, [([(_unpack(space, p), s) for p, s in start], point)], stats, deadline,
                                     None, t0)
            out = {"cells": cells, "paths": paths, "refutation": ref}
    except BudgetExceeded as exc:   # its caches were dropped: the next task of this process builds its own
        _CURRENT = None
        return {"budget": exc.covered}
    except ExactSpecError as exc:
        _CURRENT = None
        return _error_as_data(exc)
    out["stats"] = stats
    out["atoms"] = [_pack(a) for a in space.atoms - before]
    return out


def _error_as_data(exc: ExactSpecError) -> dict:
    """A worker's error as it travels back (:func:`exactspec.parallel.error_as_data`)."""
    from .. import parallel
    return {"error": parallel.error_as_data(exc)}


def _raise_from(res: dict, timeout: Any, covered: dict) -> None:
    if "budget" in res:
        raise BudgetExceeded("seconds", timeout, covered=covered)
    if "error" in res:
        from .. import parallel
        parallel.raise_error_data(res["error"])


def _prove_in_workers(job: _Job, sent: _Job, n: int, rule_name: str, family_source: str, timeout: Any, t0: float,
                      progress: Any) -> "Proof | Refutation":
    """The proof on ``n`` worker processes (1: one process, for isolation): the same cells, verdict and counts.

    The first cells run breadth first until ``CHUNKS_PER_WORKER * n`` subtrees are left
    (:func:`_expand`); the subtrees then run depth first on every worker, merged in the order of
    the sequential run, so the cells, the counts and the first refuted cell are the sequential
    run's. Without a time limit the first cells run in this process, before the workers start:
    they inherit its computations (``LOCAL_EXPAND``); with one, they run in a worker and this
    process only merges (a time limit stops the workers, never sympy here).
    """
    from .. import parallel
    space = Space(job.vocab, {"context_free": 1, "per_position": job.tokens, "table": job.vocab}[job.family],
                  job.check_ms)   # the names for the assumptions (no arithmetic here)
    assumptions = _assumptions(job, space, family_source)
    wall = parallel.wall_deadline(timeout)
    covered: dict = {"cells proven": 0}
    total: dict = {}
    atoms: set = set()

    def merge(res: dict) -> None:
        for k, v in res["stats"].items():
            total[k] = total.get(k, 0) + v
        atoms.update(res["atoms"])

    def lost(run: Any, what: str) -> None:
        if run.lost:
            if wall is not None and time.time() >= wall:
                raise BudgetExceeded("seconds", timeout, covered=covered)
            run.require_all(what)

    global _CURRENT
    local = None
    if n > 1 and timeout is None and LOCAL_EXPAND:
        # the first cells here; the workers, forked next, start from this process's setup and its caches
        su = _Setup(job, job.rule, job.proposer)
        stats: dict = {}
        items, paths = _expand(su, CHUNKS_PER_WORKER * n, stats, None, None, t0)
        local = {"stats": stats, "atoms": [_pack(a) for a in su.space.atoms]}
        items = [(it[0], [(_pack(p), sg) for p, sg in it[1]], it[2]) if it[0] == "sub" else it for it in items]
        _CURRENT = (job.nonce, su)
    with parallel.executor_for(workers=n, isolate=True) as (ex, owned):
        _CURRENT = None   # the workers, started, have it; this process needs it no more
        rebuild = parallel.pool_maker(n, isolate=True)
        if local is not None:
            merge(local)
        elif n == 1:
            items = [("sub", [], None)]
            paths = 0
        else:
            run = parallel.run_chunks(_chunk, [(sent, "expand", CHUNKS_PER_WORKER * n, wall)], executor=ex,
                                      owned=owned, deadline=wall, rebuild=rebuild)
            lost(run, "es.prove")
            first = run.results[0]
            _raise_from(first, timeout, covered)
            merge(first)
            items, paths = first["items"], first["paths"]
        subs = [it for it in items if it[0] == "sub"]
        done = [sum(it[0] == "cell" for it in items)]
        covered["cells proven"] = done[0]
        if progress is not None and n > 1:
            progress(done[0], done[0] + len(subs))

        def tick(finished: int, _total: int) -> None:
            if progress is not None:
                progress(done[0], done[0] + len(subs) - finished)

        def keep(res: dict) -> dict:
            if "cells" in res:
                done[0] += len(res["cells"])
                covered["cells proven"] = done[0]
            return res

        run = parallel.run_chunks(_chunk, [(sent, "dfs", (it[1], it[2]), wall) for it in subs], executor=ex,
                                  owned=owned, deadline=wall, rebuild=rebuild, on_result=keep, progress=tick,
                                  final=lambda r: r.get("refutation") is not None or "cells" not in r,
                                  order=sorted(range(len(subs)), key=lambda k: (len(subs[k][1]), k)))
    stop = len(subs) if run.stop_at is None else run.stop_at
    for k in range(stop + 1 if run.stop_at is not None else stop):
        if k in run.results:
            _raise_from(run.results[k], timeout, covered)
    lost(run, "es.prove")
    cells: list = []
    j = 0
    for it in items:
        if it[0] == "cell":
            cells.append(it[1])
            continue
        if it[0] == "refuted":
            ref = it[1]
        else:
            res = run.results[j]
            j += 1
            merge(res)
            paths += res["paths"]
            ref = res["refutation"]
            if ref is None:
                cells.extend(res["cells"])
                continue
            cells.extend(res["cells"])   # the cells of this subtree before its refuted one
            ref.cells_done = len(cells) - len(res["cells"]) + ref.cells_done
        ref.cells_done = min(ref.cells_done, len(cells)) if it[0] != "refuted" else len(cells)
        ref.assumptions, ref.seconds = assumptions, time.perf_counter() - t0
        return ref
    stats = dict(total)   # keys in the order they first arose (the first phase's cells come first)
    stats["cells"] = len(cells)
    return Proof(rule=rule_name, cells=cells, paths=paths, atoms=len(atoms), assumptions=assumptions,
                 seconds=time.perf_counter() - t0, stats=stats)


# -- the old path (benchmarks) ------------------------------------------------------------------------------

_LEGACY = False
#: decide ``output - expected == 0`` on a cell from the cross-multiplied numerator (no gcd; False: the old path,
#: which cancelled the difference first)
FAST_DIFFERENCE = True


@contextmanager
def legacy_path() -> Iterator[None]:
    """Run ``es.prove`` as before issue 17 inside this block: in this process, every new cache off (benchmarks)."""
    global _LEGACY
    from . import _field
    global FRESH_WITNESS, FAST_DIFFERENCE
    names = ("SHARE_ATOMS", "CACHE_CONSTANTS", "CACHE_REDUCE", "CACHE_Z3", "SHARED_SOLVER", "UNFACTORED", "FAST_ARITH",
             "FAST_COMPOSE", "LINEAR_SOLVER")
    saved = _LEGACY, FRESH_WITNESS, FAST_DIFFERENCE, {k: getattr(_field, k) for k in names}
    _LEGACY, FRESH_WITNESS, FAST_DIFFERENCE = True, False, False
    for k in names:
        setattr(_field, k, False)
    try:
        yield
    finally:
        _LEGACY, FRESH_WITNESS, FAST_DIFFERENCE = saved[0], saved[1], saved[2]
        for k, v in saved[3].items():
            setattr(_field, k, v)


def _as_fraction(v: Any) -> Fraction | None:
    """A z3 rational value as a Fraction (a huge one rounded to 40 digits: every candidate is re-checked by z3)."""
    import z3
    if z3.is_rational_value(v):
        try:
            return Fraction(v.numerator_as_long(), v.denominator_as_long())
        except ValueError:   # beyond Python's int/str digit limit
            return Fraction(v.as_decimal(40).rstrip("?")).limit_denominator(10 ** 12)
    return None


#: look for a refutation's witness in a fresh z3 context that holds the cell's constraints only, so the witness
#: depends on the cell alone: not on what this process solved before, nor on how the cells were split over
#: workers (False: the old path, on the cell's own solver, whose models depend on the process's z3 history)
FRESH_WITNESS = True


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


def _rational_point(space: Space, dec: Decider, poly: Any) -> dict | None:
    """A rational point of the cell where ``poly != 0``, fixing one variable at a time (z3 picks)."""
    import z3
    if FRESH_WITNESS or dec._shared is not None:   # a shared solver holds the cell as assumptions only
        s, zvars, sign, ctx = _cell_solver(space, dec)
    else:
        s, zvars, sign, ctx = dec.solver, space.z3vars, space.z3_sign, space.ctx
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
    from ..counterexamples.searching import rule_reference, evaluate
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
                        rule_ref=rule_reference(rule))
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
