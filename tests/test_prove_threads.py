"""es.prove is thread-safe: proofs run at once in several threads give the results they give one after another.

Each call runs in a copy of its caller's context with a proof session of its own (memos, active cells,
the all-vocabulary abstraction's session and es.laws' hook): nothing is shared, nothing waits on a lock.
"""

from __future__ import annotations

import threading
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.prove import Proof, Refutation

pytest.importorskip("z3")

R = es.rules
chain, tree = es.drafts.chain, es.drafts.tree

JOBS = [
    (R.speculative_sampling, dict(proposer=chain(2), vocab=3, tokens=2, family="context_free", workers=1)),
    (R.unverified_first_draft, dict(proposer=chain(1), vocab=2, tokens=1, family="context_free", workers=1)),
    (R.mss, dict(proposer=tree((2,)), vocab=2, tokens=2, workers=1)),
    (R.speculative_sampling, dict(proposer=chain(1), vocab="all", tokens=1)),
    (R.greedy_match_sampled, dict(proposer=chain(1), vocab=2, tokens=1, family="context_free", workers=1)),
]


def _key(res):
    if isinstance(res, Refutation):
        return ("refuted", res.cell, res.outcome, res.difference, res.cells_done, res.family, res.witness)
    assert isinstance(res, Proof)
    stats = dict(res.stats)
    questions = stats.pop("z3 checks", 0) + stats.pop("unsat cores reused", 0)
    stats.pop("z3 checks asked again", None)
    return ("proven", res.cells, res.paths, res.atoms, stats, questions, res.family)


def test_two_threads_prove_at_once_as_one_after_another():
    sequential = [_key(es.prove(rule, **kw)) for rule, kw in JOBS]
    results: dict = {}
    errors: list = []
    start = threading.Barrier(len(JOBS))

    def work(i: int) -> None:
        rule, kw = JOBS[i]
        try:
            start.wait()
            results[i] = _key(es.prove(rule, **kw))
        except BaseException as exc:   # noqa: BLE001 - reported below, with the job
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(JOBS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [results[i] for i in range(len(JOBS))] == sequential
    assert sequential[0][0] == "proven" and len(sequential[0][1]) == 103
    assert sequential[1][0] == "refuted" and sequential[1][-1] == {"p": (F(1, 3), F(2, 3)), "q": (F(2, 3), F(1, 3))}


def test_a_symbolic_comparison_outside_a_proof_is_refused_in_another_thread():
    # a thread that never proved has no active cell: its own context, not the prover's of another thread
    from exactspec.prove.field import Space
    sp = Space(2, 1, 1000)
    p0 = sp.laws["p"][0][0]
    seen: list = []

    def compare() -> None:
        try:
            bool(p0 < F(1, 2))
        except es.ExactSpecError as exc:
            seen.append(str(exc))

    t = threading.Thread(target=compare)
    t.start()
    t.join()
    assert seen and "outside es.prove" in seen[0]
