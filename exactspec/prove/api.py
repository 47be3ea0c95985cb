"""``es.prove``: a rule keeps the target's law for every target and draft law, or a region and a witness.

:func:`prove` checks its arguments and runs the cells (:mod:`.cells`) in this process or on worker
processes (:mod:`.workers`); ``vocab="all"`` goes to the all-vocabulary abstraction
(:mod:`exactspec.prove.all_vocab`). Each call runs in a copy of its caller's context, with a proof
session of its own (:mod:`.session`): proofs in two threads run at once without sharing state.
"""

from __future__ import annotations

import contextvars
import time
from typing import Any, Callable

from ..errors import BudgetExceeded, ExactSpecError, InvalidType, InvalidValue
from .cells import Job, Setup, assumptions_of, dfs, forget_symbolic_caches, rational_point, _nonce
from .families import FAMILIES, default_family
from .results import Proof, Refutation
from .workers import _error_as_data, _raise_from, prove_in_workers, sendable, workers_for

__all__ = ["prove", "Proof", "Refutation", "default_family"]


def _prove_every_vocab(rule: Any, proposer: Any, tokens: int, family: Any, timeout: Any, prompt: tuple,
                       check_ms: int, workers: Any, progress: Any) -> "Proof | Refutation":
    """``prove(..., vocab="all")``: checks its arguments, then :func:`.all_vocab.prove_all_vocab`."""
    from .all_vocab import prove_all_vocab
    _check_int("tokens", tokens, 1)
    if family not in (None, "context_free"):
        raise InvalidValue(f"prove: vocab='all' proves the context_free family only, got family={family!r}")
    if tuple(prompt):
        raise InvalidValue("prove: vocab='all' takes no prompt (context-free laws do not read it)")
    _check_timeout(timeout)
    if workers not in (None, 1):
        raise InvalidValue("prove: vocab='all' runs in this process (workers=None or 1)")
    proposer = _check_rule_and_proposer(rule, proposer)
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
    """What :mod:`.all_vocab` needs from this module, handed down (no import cycle)."""
    from types import SimpleNamespace
    return SimpleNamespace(Proof=Proof, Refutation=Refutation, prove=prove, rational_point=rational_point,
                           forget_symbolic_caches=forget_symbolic_caches)


def _every_vocab_in_worker(sent: tuple, tokens: int, timeout: float, check_ms: int) -> "Proof | Refutation":
    """``prove(vocab="all", timeout=...)`` in one worker process, stopped at the limit (``BudgetExceeded``)."""
    from .. import parallel
    wall = parallel.wall_deadline(timeout)
    with parallel.executor_for(workers=1, isolate=True) as (ex, owned):
        run = parallel.run_chunks(_every_vocab_chunk, [(sent, tokens, wall, check_ms)], executor=ex, owned=owned,
                                  deadline=wall)
    res = run.results.get(0)
    if res is None:
        if wall is not None and time.time() >= wall:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": "unknown (stopped in a worker)"})
        run.require_all("es.prove(vocab='all')")
        raise AssertionError("es.prove(vocab='all'): the worker's result is missing")   # require_all raised
    _raise_from(res, timeout, {"cells proven": res.get("budget", {}).get("cells proven", 0)}
                if "budget" in res else {})
    return res["result"]


def _every_vocab_chunk(task: tuple) -> dict:
    """The worker's side of :func:`_every_vocab_in_worker`: the proof, or its error as data."""
    from ..parallel import load_portable, load_rule
    from .all_vocab import prove_all_vocab
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


def _check_int(name: str, v: Any, lo: int) -> int:
    """``v`` if it is an int (not a bool) ``>= lo``: else InvalidType or InvalidValue naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidType(f"prove: {name} must be an int >= {lo}, got {v!r}")
    if v < lo:
        raise InvalidValue(f"prove: {name} must be an int >= {lo}, got {v!r}")
    return v


def _check_timeout(timeout: Any) -> None:
    """``timeout`` is None or a positive number of seconds: else InvalidType or InvalidValue."""
    if timeout is None:
        return
    if not isinstance(timeout, (int, float)):
        raise InvalidType(f"prove: timeout must be a positive number of seconds or None, got {timeout!r}")
    if not timeout > 0:
        raise InvalidValue(f"prove: timeout must be a positive number of seconds or None, got {timeout!r}")


def _check_rule_and_proposer(rule: Any, proposer: Any) -> Any:
    """The proposer (the rule's default where None) after checking the rule's claim and the families match."""
    if rule.claim == "declared-target":
        raise InvalidValue(f"prove: {rule.name} claims a declared target; es.prove checks the target's own law only")
    proposer = proposer if proposer is not None else _default_proposer(rule)
    if getattr(proposer, "family", None) != rule.family:
        raise InvalidValue(f"prove: rule {rule.name} is a {rule.family} rule but the proposer is {proposer!r}")
    return proposer


def _default_proposer(rule: Any) -> Any:
    from .. import drafts
    if rule.proposer is not None:
        return rule.proposer
    return drafts.chain(1) if rule.family == "chain" else drafts.tree((2,))


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
    :mod:`exactspec.prove.all_vocab` and the docs' soundness argument). A rule the abstraction
    cannot follow (an argmax over the vocabulary, ``len`` of a law, ...) raises
    ``AbstractionRefused`` (exit 2); a refutation's witness is replayed exactly at a concrete vocabulary.

    A proof exits 0 (``exit_code``) only for the family the caller named: with ``family=None`` it exits 3,
    since the default family is narrower than "every law". Thread-safe: each call runs in a copy of
    its caller's context with a proof session of its own (:mod:`exactspec.prove.session`), so two
    threads may prove at once; ``workers`` runs one proof's cells on several processes.

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1).proven
    True
    """
    # in a copy of the caller's context: the proof's session (memos, solver, active cells) and hooks end with it
    return contextvars.copy_context().run(
        _prove, rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, timeout=timeout,
        closed_form=closed_form, prompt=prompt, check_ms=check_ms, workers=workers, progress=progress)


def _prove(rule: Any, *, proposer: Any, vocab: "int | str", tokens: int, family: str | None, timeout: float | None,
           closed_form: bool, prompt: tuple, check_ms: int, workers: int | None,
           progress: Callable[[int, int], None] | None) -> "Proof | Refutation":
    """The body of :func:`prove`, in its own context."""
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
    vocab = _check_int("vocab", vocab, 2)
    tokens = _check_int("tokens", tokens, 1)
    family_source = "given" if family is not None else "default"
    if family is None:
        family = default_family(vocab, tokens)
    if family not in FAMILIES:
        raise InvalidValue(f"prove: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    _check_timeout(timeout)
    proposer = _check_rule_and_proposer(rule, proposer)
    kind = getattr(proposer, "kind", "chain")
    if kind not in ("chain", "tree") or getattr(proposer, "sampled_from", None) is not None:
        raise InvalidValue(f"prove: proposer {proposer!r} is not supported (chain or expansion tree proposers "
                             "drafting from the draft model)")
    prompt = tuple(prompt)
    if family == "table" and not prompt:
        prompt = (0,)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        raise InvalidType(f"prove: prompt must be token ids in 0..{vocab - 1}, got {prompt!r}")
    if not all(0 <= t < vocab for t in prompt):
        raise InvalidValue(f"prove: prompt must be token ids in 0..{vocab - 1}, got {prompt!r}")
    decoding = "greedy" if rule.claim == "lossless-greedy" else "sample"
    job = Job(rule=rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, prompt=prompt,
              decoding=decoding, closed_form=closed_form, check_ms=check_ms, nonce=_nonce())
    n = workers_for(workers, family, vocab, tokens, timeout)
    if n is not None:
        try:
            sent = sendable(job)
        except NotPicklable:
            if workers is not None:
                raise
            n = None   # the automatic choice only: a rule that cannot travel is proven here, as before
    if n is None:
        su = Setup(job, rule, proposer)
        assumed = assumptions_of(job, su.space, family_source)
        deadline = None if timeout is None else t0 + timeout
        stats: dict = {}
        cells, paths, ref = dfs(su, [([], None)], stats, deadline, timeout, t0, progress)
        if ref is not None:
            ref.assumptions, ref.seconds = assumed, time.perf_counter() - t0
            return ref
        stats["cells"] = len(cells)
        return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(su.space.atoms), assumptions=assumed,
                     seconds=time.perf_counter() - t0, stats=stats)
    return prove_in_workers(job, sent, n, rule.name, family_source, timeout, t0, progress)

