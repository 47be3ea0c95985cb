"""The all-vocabulary proof: layouts restarted as classes split, cells, the tripwire and the exact replay.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

import itertools
import time
from fractions import Fraction
from typing import Any, Callable

from ...errors import AbstractionDisagrees, AbstractionRefused, ExactSpecError, SolverUnknown
from ..field import Decider
from .decider import _AbsDecider
from .run import _enumerate
from .space import _AbsSpace, _Layout
from .state import MAX_DRAWS, MAX_PREDICATES, THEOREM, _EmptyCell, _MoreDraws, _Refine, _SESSION, _Session
from .values import _Hook


def prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                    kit: Any, progress: Callable[[int, int], None] | None = None) -> Any:
    """The body of ``es.prove(rule, vocab="all", ...)`` (see :func:`exactspec.prove`): chain and i.i.d. tree rules.

    ``kit``: the concrete prover's ``Proof``, ``Refutation``, ``prove``, ``rational_point`` and
    ``forget_symbolic_caches``, handed down by :func:`exactspec.prove` (which imports this module). The
    proof's state lives in a :class:`_Session` in a context variable, and es.laws' hook in another
    (:data:`exactspec.laws.ABSTRACT`): nothing of the process is switched, so other threads and other code
    are untouched.

    >>> import exactspec as es
    >>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab="all", tokens=1).proven
    True
    """
    token = _SESSION.set(_Session(kit))
    try:
        return _prove_all_vocab(rule, proposer, tokens, timeout=timeout, check_ms=check_ms, kit=kit,
                                progress=progress)
    finally:
        _SESSION.reset(token)


def _prove_all_vocab(rule: Any, proposer: Any, tokens: int, *, timeout: float | None, check_ms: int,
                     kit: Any, progress: Any) -> Any:
    from ...errors import BudgetExceeded
    Proof, _forget_symbolic_caches = kit.Proof, kit.forget_symbolic_caches
    session = _SESSION.get()
    assert session is not None
    t0 = time.perf_counter()
    kind = getattr(proposer, "kind", "chain")
    if (rule.family, kind) not in (("chain", "chain"), ("tree", "tree")):
        raise AbstractionRefused(f"vocab='all' proves chain rules with chain proposers and tree rules with "
                                 f"expansion trees; not a {rule.family} rule with {proposer!r}")
    if kind == "tree":
        if proposer.children != "iid" or proposer.claim != "draft":
            raise AbstractionRefused(f"vocab='all' follows trees whose children are drawn i.i.d. from the draft "
                                     f"law and claimed as it; not {proposer.describe()}")
    elif getattr(proposer, "sampled_from", None) is not None or proposer.claim not in ("draft", "point_mass") or \
            (proposer.sampling == "sample" and proposer.claim != "draft"):
        raise AbstractionRefused(f"vocab='all' follows drafts sampled from the draft law, or its argmax, claimed as "
                                 f"the draft law or a point mass; not {proposer.describe()}")
    if rule.claim == "lossless-greedy":
        raise AbstractionRefused("vocab='all' does not follow greedy rules (their argmax over the vocabulary)")
    deadline = None if timeout is None else t0 + timeout
    preds: list = []
    draws = 1
    # argmax drafts: one more named token, token 0, the draft law's argmax (the outcome may or may not hold it)
    argmax_q = kind == "chain" and proposer.sampling == "argmax"
    named = tokens + 1 if argmax_q else tokens
    stats: dict = {"restarts": 0}
    while True:
        layout = _Layout(named, preds, draws, argmax_q)
        try:
            res = _prove_layout(rule, proposer, layout, tokens, check_ms, deadline, timeout, stats, progress, t0)
        except _Refine as r:
            if r.pred in preds or len(preds) >= MAX_PREDICATES:
                raise AbstractionRefused(f"vocab='all': the classes of unnamed tokens would need more than "
                                         f"{MAX_PREDICATES} predicates (next: {r.pred})") from None
            preds.append(r.pred)
            stats["restarts"] += 1
            continue
        except _MoreDraws:
            if draws >= MAX_DRAWS:
                raise AbstractionRefused(f"vocab='all': a branch draws more than {MAX_DRAWS} tokens from one "
                                         "class of unnamed tokens") from None
            draws *= 2
            stats["restarts"] += 1
            continue
        except BudgetExceeded:
            _forget_symbolic_caches()
            raise
        finally:
            session.space = session.hook = session.run = None
        break
    cells, paths, space, found = res
    ref = None if found is None else _replay(rule, proposer, tokens, found, t0)
    assumptions = {"family": "context_free", "family_source": "given", "vocab": "all", "min_vocab": 2,
                   "abstract_from": named, "smaller_vocabularies": {},
                   "tokens": tokens, "prompt": [], "proposer": proposer.describe(), "expected": "target",
                   "named_tokens": named, "classes": space.describe_classes(),
                   "variables": list(space.names), "closed_form": False,
                   "abstraction": "exchangeable unnamed tokens (docs: proofs-scale-out, every vocabulary size)"}
    if ref is not None:
        ref.assumptions, ref.seconds = assumptions, time.perf_counter() - t0
        return ref
    if session.inexact is not None:   # no bias met, but the run observed what the abstraction cannot represent
        raise AbstractionRefused(
            f"vocab='all': no proof for {rule.name}: the rule {session.inexact}. The abstraction stands for any "
            "number of unnamed tokens (none included) and for tokens up to renaming, so that is not exact for "
            "every vocabulary size; the run found no bias (a bias is replayed exactly and reported). Prove at a "
            "given vocab instead (es.prove(..., vocab=3))")
    small: dict = {}
    for vocab in range(2, named):   # the abstraction needs `named` distinct tokens: smaller vocabularies, concretely
        left = None if deadline is None else max(deadline - time.perf_counter(), 1.0)
        concrete = kit.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family="context_free",
                             timeout=left)
        if not concrete.proven:
            concrete.assumptions = dict(concrete.assumptions, vocab_asked="all")
            return concrete
        small[vocab] = f"proven by es.prove at vocab {vocab} ({len(concrete.cells)} cells)"
    assumptions["smaller_vocabularies"] = small
    assumptions["tripwire"] = _tripwire(rule, proposer, tokens, named, deadline, kit)
    assumptions["theorem"] = THEOREM.format(min_vocab=2, proposer=proposer.describe(), tokens=tokens)
    stats["cells"] = len(cells)
    return Proof(rule=rule.name, cells=cells, paths=paths, atoms=len(space.atoms), assumptions=assumptions,
                 seconds=time.perf_counter() - t0, stats=stats)


#: the tripwire's exact audits: this many random instances at each vocabulary size
TRIPWIRE_INSTANCES = 3
#: ... at these vocabulary sizes
TRIPWIRE_VOCABS = (2, 3, 4, 5, 6)
#: ... and the concrete prover at these (those below the abstraction's named tokens are part of the proof itself)
TRIPWIRE_PROVER_VOCABS = (2, 3)


def _tripwire_laws(rng: Any, vocab: int, kind: int) -> tuple:
    """A random rational ``(p, q)`` pair at ``vocab``: ``kind`` 0 zeros and ties, 1 ``p == q``, 2 disjoint-ish."""
    def law(zeros: int, tie: bool) -> tuple:
        w = [rng.randint(1, 6) for _ in range(vocab)]
        for i in rng.sample(range(vocab), min(zeros, vocab - 1)):
            w[i] = 0
        if tie and vocab >= 2:
            a, b = rng.sample(range(vocab), 2)
            w[b] = w[a]
        if not any(w):
            w[rng.randrange(vocab)] = 1
        s = sum(w)
        return tuple(Fraction(x, s) for x in w)
    if kind == 1:
        p = law(rng.randint(0, 1), True)
        return p, p
    if kind == 2:
        p = law(vocab // 2, False)
        q = tuple(Fraction(0) if x else Fraction(1) for x in p)
        return p, tuple(x / sum(q) for x in q)
    return law(rng.randint(0, 1), True), law(rng.randint(0, 1), True)


def _tripwire(rule: Any, proposer: Any, tokens: int, named: int, deadline: float | None, kit: Any) -> dict:
    """Exact checks the proof must agree with, run before it is reported: a check on the prover, not a proof.

    The exact engine on random rational laws at vocab 2..6 (zeros, ties, ``p == q``, disjoint supports), and
    the concrete prover at vocab 2 and 3. A bias or a refutation where the abstraction proved the rule is
    :class:`AbstractionDisagrees` (exit 3, with the instance), never a verdict.
    """
    import random
    from ...counterexamples.searching import evaluate
    rng = random.Random(f"es.prove tripwire {rule.name} {proposer.describe()} {tokens}")
    audited = 0
    for vocab in TRIPWIRE_VOCABS:
        for kind in range(TRIPWIRE_INSTANCES):
            p, q = _tripwire_laws(rng, vocab, kind)
            inst = _instance(proposer, tokens, p, q)
            rep = evaluate(rule, inst)
            if rep is None or rep.tv != 0:
                what = "raised" if rep is None else f"is biased there (TV {rep.tv})"
                raise AbstractionDisagrees(
                    f"internal error of es.prove(vocab='all'): the abstraction proved {rule.name}, but the exact "
                    f"engine at vocab {vocab}, p = {p}, q = {q}, {proposer.describe()}, {tokens} token(s) finds it "
                    f"{what}; not a verdict (please report it with this instance)", instance=inst)
            audited += 1
    proven = {}
    for vocab in TRIPWIRE_PROVER_VOCABS:
        if vocab < named:
            continue   # part of the proof itself (concretely, above)
        left = None if deadline is None else max(deadline - time.perf_counter(), 1.0)
        concrete = kit.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family="context_free",
                             timeout=left)
        if not concrete.proven:
            raise AbstractionDisagrees(
                f"internal error of es.prove(vocab='all'): the abstraction proved {rule.name}, but es.prove at vocab "
                f"{vocab} refutes it: {concrete.summary()}; not a verdict (please report it)",
                instance=concrete.counterexample.instance)
        proven[vocab] = f"proven by es.prove at vocab {vocab} ({len(concrete.cells)} cells)"
    return {"what": "a check on the prover, not part of the proof", "audits": audited,
            "audit_vocabs": list(TRIPWIRE_VOCABS), "concrete_proofs": proven}


def _prove_layout(rule: Any, proposer: Any, layout: _Layout, tokens: int, check_ms: int, deadline: Any,
                  timeout: Any, stats: dict, progress: Any, t0: float) -> tuple:
    from ... import laws
    space = _AbsSpace(layout, check_ms)
    session = _SESSION.get()
    assert session is not None
    session.space, session.hook = space, _Hook(space)
    hooked = laws.ABSTRACT.set(session.hook)
    try:
        return _run_cells(rule, proposer, space, tokens, deadline, timeout, stats, progress, t0)
    finally:
        laws.ABSTRACT.reset(hooked)


def _run_cells(rule: Any, proposer: Any, space: "_AbsSpace", tokens: int, deadline: Any, timeout: Any,
               stats: dict, progress: Any, t0: float) -> tuple:
    from ...errors import BudgetExceeded
    layout = space.layout
    c = layout.named
    pending: list = [([], None)]
    cells: list = []
    paths = 0
    while pending:
        if deadline is not None and time.perf_counter() > deadline:
            raise BudgetExceeded("seconds", timeout, covered={"cells proven": len(cells), "cells pending": len(pending)})
        start, point = pending.pop()
        with _AbsDecider(space, start, pending, stats, point) as dec:
            try:
                out, n = _enumerate(rule, space, proposer, tokens)
            except _EmptyCell:
                stats["empty cells"] = stats.get("empty cells", 0) + 1
                continue
            paths += n
            for o in itertools.product(range(c), repeat=tokens):
                expected: Any = space.field.one
                for t in o:
                    expected = expected * space.laws["p"][0][t]
                a = space.field.check(out.get(o, 0), "an output probability").f
                d = a - expected.f
                if d.numer.is_zero:
                    continue
                num, _den = dec.reduce(d, numer_only=True)
                if num.is_zero or not dec.may_be_nonzero(num):
                    continue
                return cells, paths, space, _refute_all(rule, proposer, space, dec, d, o, tokens, t0, len(cells))
            cells.append([space.show(p, s) for p, s in dec.order])
        if progress is not None:
            progress(len(cells), len(cells) + len(pending))
    return cells, paths, space, None


def _kit() -> Any:
    session = _SESSION.get()
    assert session is not None
    return session.kit


def _refute_all(rule: Any, proposer: Any, space: _AbsSpace, dec: Decider, d: Any, o: tuple, tokens: int,
                t0: float, cells_done: int) -> dict:
    """A rational point of the cell where the output differs, as concrete laws: each class one token (replayed
    later, by :func:`_replay`, once the abstraction is switched off)."""
    _rational_point = _kit().rational_point
    cell = [space.show(p, s) for p, s in dec.order]
    point = _rational_point(space, dec, d.numer.monic())
    if point is None:
        raise SolverUnknown(f"es.prove(vocab='all') found a cell where {rule.name} may be biased ({', '.join(cell)}) "
                            "but no rational witness inside it; not a verdict")
    P = [space.value(x, point) for x in space.named_p] + [space.value(x, point) for x in space.totals_p]
    Q = [space.value(x, point) for x in space.named_q] + [space.value(x, point) for x in space.totals_q]
    c = space.layout.named
    keep = list(range(c)) + [c + i for i in range(len(space.layout.classes)) if P[c + i] or Q[c + i]]
    p_law, q_law = [P[j] for j in keep], [Q[j] for j in keep]
    if space.layout.argmax_q and Q[0] > 0:   # a class as equal tokens of draft probability <= q_0: 0 stays the argmax
        pl, ql = p_law[:c], q_law[:c]
        for a, b in zip(p_law[c:], q_law[c:]):
            n = max(1, -(-b // Q[0]))
            pl += [a / n] * int(n)
            ql += [b / n] * int(n)
        p_law, q_law = pl, ql
    p_out, q_out = tuple(p_law), tuple(q_law)
    if len(keep) < 2:
        p_out, q_out = p_out + (Fraction(0),), q_out + (Fraction(0),)
    return {"cell": cell, "outcome": o, "difference": str(d.as_expr()), "p": p_out, "q": q_out,
            "cells_done": cells_done}


def _replay(rule: Any, proposer: Any, tokens: int, found: dict, t0: float) -> Any:
    """The Refutation of a cell's point: replayed exactly (outside the abstraction), then made as small as found."""
    from ...counterexamples.counterexample import Counterexample
    from ...counterexamples.searching import evaluate, rule_reference
    Refutation = _kit().Refutation
    p_law, q_law, cell = found["p"], found["q"], found["cell"]
    inst = _instance(proposer, tokens, p_law, q_law)
    rep = evaluate(rule, inst)
    session = _SESSION.get()
    if (rep is None or not rep.tv > 0) and session is not None and session.inexact is not None:
        raise AbstractionRefused(f"vocab='all': no verdict for {rule.name}: the rule {session.inexact}; the bias "
                                 "the abstraction met there did not replay in the exact engine (each class of unnamed "
                                 f"tokens as one token, vocab {len(p_law)}); prove at a given vocab instead")
    if rep is None or not rep.tv > 0:
        raise AbstractionDisagrees(f"internal error of es.prove(vocab='all'): its witness for {rule.name} (each class "
                                   f"of unnamed tokens as one token, vocab {len(p_law)}) did not replay as a bias in "
                                   f"the exact engine: undecided, not a verdict (cell: {', '.join(cell)})",
                                   instance=inst)
    p_law, q_law, inst, rep = _smallest(rule, proposer, tokens, p_law, q_law, inst, rep)
    ce = Counterexample(rule=rule.name, claim=rule.claim, instance=inst, output=dict(rep.output),
                        expected=dict(rep.expected), tv=rep.tv,
                        space=f"es.prove (context_free, every vocab; witness at vocab {len(p_law)})",
                        rule_ref=rule_reference(rule))
    return Refutation(rule=rule.name, cell=cell, outcome=found["outcome"], difference=found["difference"],
                      witness={"p": tuple(p_law), "q": tuple(q_law)}, report=rep, counterexample=ce, assumptions={},
                      seconds=time.perf_counter() - t0, cells_done=found["cells_done"])


def _instance(proposer: Any, tokens: int, p_law: tuple, q_law: tuple) -> Any:
    from ...counterexamples.space import SearchInstance
    if getattr(proposer, "kind", "chain") == "tree":
        return SearchInstance(vocab=len(p_law), family="context_free", target=(p_law,), draft=(q_law,),
                              shape=tuple(proposer.expansion), tokens=tokens, prompt=(), decoding="sample",
                              proposer_kind="tree", sampling=proposer.children, claim=proposer.claim)
    return SearchInstance(vocab=len(p_law), family="context_free", target=(p_law,), draft=(q_law,),
                          shape=(proposer.gamma,), tokens=tokens, prompt=(), decoding="sample",
                          proposer_kind="chain", sampling=proposer.sampling, claim=proposer.claim)


def _smallest(rule: Any, proposer: Any, tokens: int, p_law: tuple, q_law: tuple, inst: Any, rep: Any) -> tuple:
    """A witness at the smallest vocabulary found: tokens merged (masses added) while the exact audit stays biased.

    Then, if more than 2 tokens are left, the concrete prover at vocab 2 (context-free): a refutation there is
    smaller still. Every candidate is an exact replay; the first biased one at each size is kept.
    """
    from ...counterexamples.searching import evaluate
    p, q = list(p_law), list(q_law)
    shrunk = True
    while shrunk and len(p) > 2:
        shrunk = False
        for i in range(len(p) - 1, 0, -1):
            for j in range(i):
                p2 = p[:i] + p[i + 1:]
                q2 = q[:i] + q[i + 1:]
                p2[j] += p[i]
                q2[j] += q[i]
                cand = _instance(proposer, tokens, tuple(p2), tuple(q2))
                r = evaluate(rule, cand)
                if r is not None and r.tv > 0:
                    p, q, inst, rep, shrunk = p2, q2, cand, r, True
                    break
            if shrunk:
                break
    if len(p) > 2:
        prove = _kit().prove
        try:
            small = prove(rule, proposer=proposer, vocab=2, tokens=tokens, family="context_free", timeout=60)
        except ExactSpecError:
            small = None
        if small is not None and not small.proven:
            w = small.witness
            return w["p"], w["q"], small.counterexample.instance, small.report
    return tuple(p), tuple(q), inst, rep
