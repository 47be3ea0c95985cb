"""es.prove's faster paths (issue 17) give the plain reference's results; workers, time limits and witnesses.

The plain reference is ``benchmarks.prove_baseline.prove_plain`` (sympy's arithmetic as it is, a fresh
z3 solver per cell, nothing memoised). Identical means: the verdict, every cell (its constraints in
order), paths, atoms and counters for a proof (``z3 checks`` + ``unsat cores reused`` on the prover is
the reference's ``z3 checks``: the same questions); the refuted cell, outcome, difference and cells done
for a refutation, whose witness replays exactly. The witness itself is found in a fresh z3 context and
is the same in every process and split (``test_witness_does_not_depend_on_history``).
"""

from __future__ import annotations

import os
from fractions import Fraction as F

import pytest

import exactspec as es
from benchmarks.prove_baseline import PlainResult, prove_plain
from exactspec.parallel import resolve_workers
from exactspec.prove import Proof, Refutation
from exactspec.prove import session
from exactspec.prove import workers as _prove
from exactspec.prove.workers import workers_for
from exactspec.prove.field import Space
from exactspec.prove.field.arith import op

pytest.importorskip("z3")

R = es.rules
chain, tree = es.drafts.chain, es.drafts.tree

# the rules of the README's "Proofs for all distributions" table, at small sizes
CASES = [
    ("speculative_sampling", R.speculative_sampling, chain(2), 2, 2, "context_free"),
    ("speculative_sampling-V3", R.speculative_sampling, chain(1), 3, 1, "context_free"),
    ("no_bonus", R.no_bonus, chain(2), 2, 2, "context_free"),
    ("sample_and_match", R.sample_and_match, chain(1), 2, 2, "context_free"),
    ("argmax drafts, point-mass claims", R.speculative_sampling, chain(2, sampling="argmax", claim="point_mass"),
     2, 2, "context_free"),
    ("greedy_match_sampled", R.greedy_match_sampled, chain(1), 2, 1, "context_free"),
    ("resample_from_target", R.resample_from_target, chain(1), 2, 1, "context_free"),
    ("unverified_first_draft", R.unverified_first_draft, chain(1), 2, 1, "context_free"),
    ("ensemble(1/2)", R.ensemble(F(1, 2)), chain(1), 2, 1, "context_free"),
    ("argmax drafts, soft claims", R.speculative_sampling, chain(1, sampling="argmax"), 2, 1, "context_free"),
    ("tiny_clamp_residual", R.tiny_clamp_residual, chain(1), 2, 1, "context_free"),
    ("stale_draft_probs per_position", R.stale_draft_probs, chain(2), 2, 2, None),
    ("stale_draft_probs table", R.stale_draft_probs, chain(2), 2, 2, "table"),
    ("mss tree", R.mss, tree((2,)), 2, 2, None),
    ("mss top-k children", R.mss, tree((2,), children="topk"), 3, 2, "context_free"),
    ("greedy_match", R.greedy_match, chain(2), 2, 2, "context_free"),
]


def _key(res):
    if isinstance(res, PlainResult):   # the plain reference's verdict: the same fields, no witness
        if not res.proven:
            return ("refuted", res.cell, res.outcome, res.difference, res.cells_done, res.family)
        stats = dict(res.stats)
        return ("proven", res.cells, res.paths, res.atoms, stats, stats.pop("z3 checks", 0), res.family)
    if isinstance(res, Refutation):
        assert res.report.tv > 0 and res.counterexample.tv == res.report.tv
        return ("refuted", res.cell, res.outcome, res.difference, res.cells_done, res.family)
    assert isinstance(res, Proof)
    stats = dict(res.stats)
    questions = stats.pop("z3 checks", 0) + stats.pop("unsat cores reused", 0)
    stats.pop("z3 checks asked again", None)
    return ("proven", res.cells, res.paths, res.atoms, stats, questions, res.family)


def _replays(res) -> None:
    """The witness replays as a bias through the exact engine, with the refutation's TV."""
    inst = res.counterexample.instance
    assert es.audit(rule=es.rules.get(res.rule), **inst.audit_kwargs()).tv == res.report.tv > 0


@pytest.mark.parametrize("label, rule, proposer, vocab, tokens, family", CASES, ids=[c[0] for c in CASES])
def test_new_path_matches_the_old_path(label, rule, proposer, vocab, tokens, family):
    old = prove_plain(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family)
    new = es.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, workers=1)
    assert _key(new) == _key(old)
    if not new:
        _replays(new)


@pytest.mark.parametrize("label, rule, proposer, vocab, tokens, family",
                         [c for c in CASES if c[0] in ("speculative_sampling", "greedy_match_sampled",
                                                       "stale_draft_probs per_position", "mss tree",
                                                       "unverified_first_draft")],
                         ids=lambda c: c if isinstance(c, str) else None)
def test_workers_and_time_limit_give_the_same_result_and_witness(label, rule, proposer, vocab, tokens, family):
    one = es.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, workers=1)
    two = es.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, workers=2)
    limited = es.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family, timeout=600)
    assert _key(two) == _key(one) == _key(limited)
    if not one:
        assert two.witness == one.witness == limited.witness
        _replays(two)


def test_split_over_workers_keeps_the_sequential_order_of_cells():
    # vocab 3, gamma 2, 2 tokens: 103 cells, split into subtrees over 2 processes and merged in order
    one = es.prove(R.speculative_sampling, proposer=chain(2), vocab=3, tokens=2, workers=1)
    two = es.prove(R.speculative_sampling, proposer=chain(2), vocab=3, tokens=2, workers=2)
    assert len(one.cells) == 103 and _key(two) == _key(one)


def test_witness_does_not_depend_on_history():
    # Fails on the old path: the witness came from the cell's own z3 solver, whose models depended on what
    # this process had solved before (unverified_first_draft at vocab 2 gave another witness after two proofs).
    args = dict(proposer=chain(1), vocab=2, tokens=1, family="context_free")
    first = es.prove(R.unverified_first_draft, **args)
    es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2)
    es.prove(R.mss, proposer=tree((2,)), vocab=2, tokens=2)
    again = es.prove(R.unverified_first_draft, **args)
    assert again.witness == first.witness
    assert again.witness == {"p": (F(1, 3), F(2, 3)), "q": (F(2, 3), F(1, 3))}


def test_atoms_signs_survive_new_operations():
    # Fails on the old code: every arithmetic operation not met before emptied the atoms' signs and factors
    # (an indentation slip), so each cell factored its atoms again (vocab 4: 93 s -> 36 s with it fixed).
    sp = Space(3, 1, 1000)
    p = sp.laws["p"][0]
    atom = op("-", p[0].f, p[1].f)
    session.current().atoms[atom] = ("marker", 1)
    op("*", p[0].f, p[2].f)   # a new operation
    assert session.current().atoms.get(atom) == ("marker", 1)


def test_progress_counts_cells():
    seen: list = []
    res = es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2, family="context_free",
                   progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (len(res.cells), len(res.cells))
    assert all(d <= t for d, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    seen.clear()
    res = es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2, family="context_free", workers=2,
                   progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (len(res.cells), len(res.cells))


def test_default_workers():
    # every core from 6 free variables (context-free vocab 4); below, this process (or one worker for a time limit)
    cores = resolve_workers(0)
    assert workers_for(None, "context_free", 4, 2, None) == (cores if cores > 1 else None)
    assert workers_for(None, "context_free", 3, 2, None) is None
    assert workers_for(None, "context_free", 3, 2, 10.0) == 1
    assert workers_for(1, "context_free", 4, 2, 10.0) is None
    assert workers_for(3, "context_free", 2, 1, None) == 3


def spin_and_tell(step, rng):
    """A rule that never ends; it writes the id of the process it runs in first (module level: it travels)."""
    with open(os.environ["EXACTSPEC_TEST_SPIN_PID"], "w") as fh:
        fh.write(str(os.getpid()))
    x, p = step.draft(0), step.target(0)
    while p[x] < 2:   # always true: never ends
        pass
    return [x]


def test_time_limited_proof_runs_in_a_worker_and_leaves_this_process_usable(tmp_path, monkeypatch):
    # Fails on the old code: the busy loop ran (and was interrupted, possibly inside sympy) in this process.
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("EXACTSPEC_TEST_SPIN_PID", str(pid_file))
    with pytest.raises(es.BudgetExceeded) as info:
        es.prove(spin_and_tell, proposer=chain(1), vocab=2, tokens=1, timeout=1.0)
    assert info.value.exit_code == 3
    assert int(pid_file.read_text()) != os.getpid()
    res = es.prove(R.speculative_sampling, proposer=chain(1), vocab=2, tokens=1)   # sympy and z3 still fine here
    assert res.proven


@pytest.mark.parametrize("rule, proposer", [(R.greedy_match_sampled, chain(2)), (R.speculative_sampling, chain(2)),
                                            (R.resample_from_target, chain(2))],
                         ids=["greedy_match_sampled", "speculative_sampling", "resample_from_target"])
def test_small_split_keeps_order_counts_and_first_refutation(monkeypatch, rule, proposer):
    # 2 subtrees per worker: most cells, and the refuted one, are run in the subtrees, not in the first phase
    monkeypatch.setattr(_prove, "CHUNKS_PER_WORKER", 1)
    args = dict(proposer=proposer, vocab=3, tokens=2, family="context_free")
    one = es.prove(rule, workers=1, **args)
    two = es.prove(rule, workers=2, **args)
    assert _key(two) == _key(one)
    if not one:
        assert two.witness == one.witness


def late_bias(step, rng):
    """Speculative sampling, except where p_0 == q_0 and p_1 != q_1: a cell the depth-first run meets late."""
    p, q = step.target(0), step.claimed(0)
    if p[0] != q[0] or p[1] == q[1]:
        yield from R.speculative_sampling.fn(step, rng)
    else:
        yield 0


def test_a_refutation_found_in_a_subtree_is_the_first_in_order(monkeypatch):
    monkeypatch.setattr(_prove, "CHUNKS_PER_WORKER", 1)
    args = dict(proposer=chain(1), vocab=3, tokens=1, family="context_free")
    one = es.prove(late_bias, workers=1, **args)
    two = es.prove(late_bias, workers=2, **args)
    assert not one and one.cells_done > 0
    assert _key(two) == _key(one) and two.witness == one.witness
    assert es.audit(rule=late_bias, **two.counterexample.instance.audit_kwargs()).tv == two.report.tv > 0
