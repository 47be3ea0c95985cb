"""``es.prove(vocab="all")`` is sound by construction: what the abstraction cannot represent is never proven.

Each rule here is biased at small vocabularies (checked by exact audits, an independent method) through one of
the holes the abstraction had: a quantifier over the vocabulary that draws nothing, a count of tokens, a token id
treated specially. The prover may refute it (its witness replayed exactly) or refuse it (exit 2); it must never
prove it. Then: the theorem a proof states, the tripwire, a rule's own error, the default family, and threads.
"""

from __future__ import annotations

import threading
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.prove import AbstractionRefused

pytest.importorskip("z3")


def _rule(fn):
    return es.rules.Rule(fn, name=fn.__name__, claim="lossless")


def _tv(fn, p, q, gamma=1, tokens=1):
    return es.audit(rule=_rule(fn), proposer=es.drafts.chain(gamma), target=es.models.context_free(p),
                    draft=es.models.context_free(q), tokens=tokens).tv


def _accept_or_resample(step, rng, x, p, q):
    if p[x] >= q[x] or rng.bernoulli(p[x] / q[x]):
        return x
    return rng.categorical(es.laws.residual(p, q))


def skip_test_unless_starved(step, rng):
    """The issue's rule: no token with 3 p < q, so the draft is accepted blind (biased whenever p != q then)."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    for a, b in zip(p, q):
        if 3 * a < b:
            break
    else:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_unless_all_positive(step, rng):
    """Accept blind when some token has p == 0 (an all() over the vocabulary)."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if not all(a > 0 for a in p):
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_with_a_wide_support(step, rng):
    """Accept blind when three or more tokens have p > 0 (a count of tokens)."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    n = 0
    for a in p:
        if a > 0:
            n += 1
    if n >= 3:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_at_token_zero(step, rng):
    """Token 0 (an end-of-sequence id, say) is accepted without a test."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if x == 0:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_when_the_draft_is_falsy(step, rng):
    """``if not x`` is true for token 0 only."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if not x:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_by_the_first_entry(step, rng):
    """Reads the law at the constant position 0."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if p[0] >= q[0]:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_on_the_smaller_of_two_drafts(step, rng):
    """gamma 2: orders two drafts by id."""
    p, q = step.target(0), step.claimed(0)
    x, y = step.draft(0), step.draft(1)
    if x < y:
        yield step.accept(0)
        return
    yield _accept_or_resample(step, rng, x, p, q)


def blind_on_the_first_of_a_set(step, rng):
    """gamma 2: a set of drafts, iterated in id order."""
    p, q = step.target(0), step.claimed(0)
    x, y = step.draft(0), step.draft(1)
    if next(iter({x, y})) == x:
        yield step.accept(0)
        return
    yield _accept_or_resample(step, rng, x, p, q)


#: (rule, gamma, an instance where an exact audit shows its bias)
HOLES = [
    (skip_test_unless_starved, 1, (F(1, 2), F(1, 2)), (F(1, 3), F(2, 3))),
    (blind_unless_all_positive, 1, (F(1, 2), F(1, 2), F(0)), (F(1, 3), F(1, 3), F(1, 3))),
    (blind_with_a_wide_support, 1, (F(1, 2), F(1, 4), F(1, 4)), (F(1, 4), F(1, 4), F(1, 2))),
    (blind_at_token_zero, 1, (F(1, 4), F(3, 4)), (F(1, 2), F(1, 2))),
    (blind_when_the_draft_is_falsy, 1, (F(1, 4), F(3, 4)), (F(1, 2), F(1, 2))),
    (blind_by_the_first_entry, 1, (F(1, 2), F(1, 4), F(1, 4)), (F(1, 4), F(1, 2), F(1, 4))),
    (blind_on_the_smaller_of_two_drafts, 2, (F(1, 4), F(3, 4)), (F(1, 2), F(1, 2))),
    (blind_on_the_first_of_a_set, 2, (F(1, 4), F(3, 4)), (F(1, 2), F(1, 2))),
]


@pytest.mark.parametrize("fn, gamma, p, q", HOLES, ids=[h[0].__name__ for h in HOLES])
def test_a_rule_biased_through_a_hole_of_the_abstraction_is_never_proven(fn, gamma, p, q):
    assert _tv(fn, p, q, gamma) > 0   # the ground truth, by the exact engine
    try:
        res = es.prove(_rule(fn), proposer=es.drafts.chain(gamma), vocab="all", tokens=1, family="context_free")
    except AbstractionRefused as exc:
        assert exc.exit_code == 2 and "vocab='all'" in str(exc)
        return
    assert not res.proven and res.exit_code == 1, res.summary()
    assert _tv(fn, res.witness["p"], res.witness["q"], gamma) == res.report.tv > 0


def counts_the_support_to_no_effect(step, rng):
    """Speculative sampling with a count of the support that changes nothing: lossless, but not provable here."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    n = sum(1 for a in p if a > 0)
    if n >= 1:
        yield _accept_or_resample(step, rng, x, p, q)
        return
    yield _accept_or_resample(step, rng, x, p, q)


def test_a_lossless_rule_that_counts_tokens_is_refused_naming_what_it_did_and_where():
    assert _tv(counts_the_support_to_no_effect, (F(1, 2), F(1, 4), F(1, 4)), (F(1, 4), F(1, 2), F(1, 4))) == 0
    with pytest.raises(AbstractionRefused) as info:
        es.prove(_rule(counts_the_support_to_no_effect), proposer=es.drafts.chain(1), vocab="all", tokens=1,
                 family="context_free")
    text = str(info.value)
    assert info.value.exit_code == 2
    assert "iterates over a law" in text and "counts_the_support_to_no_effect" in text and "no bias" in text


def test_a_constant_token_id_found_biased_is_refuted_not_just_refused():
    """The run goes on past an inexact observation: the bias it meets is replayed exactly and reported."""
    res = es.prove(_rule(blind_at_token_zero), proposer=es.drafts.chain(1), vocab="all", tokens=1,
                   family="context_free")
    assert not res.proven
    assert _tv(blind_at_token_zero, res.witness["p"], res.witness["q"]) == res.report.tv > 0


# -- what a proof states ---------------------------------------------------------------------------------------
def test_a_proof_states_its_theorem_and_its_tripwire():
    res = es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab="all", tokens=1,
                   family="context_free")
    assert res.proven and res.exit_code == 0
    d = res.to_dict()
    assert d["theorem"] and "every vocabulary size V >= 2" in d["theorem"] and "refused" in d["theorem"]
    assert d["family_named"] is True and d["exit_code"] == 0
    trip = res.assumptions["tripwire"]
    assert trip["what"] == "a check on the prover, not part of the proof"
    assert trip["audits"] == 15 and sorted(trip["concrete_proofs"]) == [2, 3]
    assert "Theorem:" in res.summary() and "Tripwire" in res.summary()


def looks_at_the_token_type(step, rng):
    """Biased on ints (every concrete run) and lossless on anything else: the abstraction cannot see ``type``."""
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if type(x) is int:
        yield x
        return
    yield _accept_or_resample(step, rng, x, p, q)


def test_the_tripwire_turns_a_disagreement_into_an_internal_error():
    """``type(x) is int`` is invisible to the abstraction, which proves the rule; the exact replay at small
    vocabularies disagrees: exit 3 with the instance, never a verdict."""
    from exactspec.prove import AbstractionDisagrees
    with pytest.raises(AbstractionDisagrees) as info:
        es.prove(_rule(looks_at_the_token_type), proposer=es.drafts.chain(1), vocab="all", tokens=1,
                 family="context_free")
    assert info.value.exit_code == 3 and "internal error" in str(info.value)
    inst = info.value.instance
    rep = es.audit(rule=_rule(looks_at_the_token_type), proposer=es.drafts.chain(1),
                   target=es.models.context_free(inst.target[0]), draft=es.models.context_free(inst.draft[0]),
                   tokens=1)
    assert rep.tv > 0


def raises_a_type_error(step, rng):
    x = step.draft(0)
    return [x] + None   # the rule's own bug


def test_a_rule_that_raises_is_a_rule_error():
    with pytest.raises(es.RuleError) as info:
        es.prove(_rule(raises_a_type_error), proposer=es.drafts.chain(1), vocab="all", tokens=1)
    assert info.value.exit_code == 2 and "TypeError" in str(info.value)
    from exactspec.cli import main
    assert main(["prove", "--rule", f"{__name__}:raises_a_type_error", "--vocab", "all", "--tokens", "1",
                 "-q"]) == 2


# -- the family the user asked about ----------------------------------------------------------------------------
def test_a_proof_of_a_default_family_does_not_exit_0():
    """stale_draft_probs is biased on context-dependent laws only: its context-free proofs must not pass a gate."""
    rule = es.rules.stale_draft_probs
    assert not es.prove(rule, proposer=es.drafts.chain(2), vocab=2, tokens=2).proven   # per-position: refuted
    default = es.prove(rule, proposer=es.drafts.chain(2), vocab=3, tokens=2)
    assert default.proven and default.family == "context_free" and default.exit_code == 3
    assert "exits 3" in default.summary() and default.to_dict()["family_named"] is False
    named = es.prove(rule, proposer=es.drafts.chain(2), vocab=3, tokens=2, family="context_free")
    assert named.exit_code == 0
    every = es.prove(rule, proposer=es.drafts.chain(1), vocab="all", tokens=1)
    assert every.proven and every.exit_code == 3
    from exactspec.cli import main
    base = ["prove", "--rule", "stale_draft_probs", "--gamma", "2", "--tokens", "2", "-q"]
    assert main(base + ["--vocab", "3"]) == 3
    assert main(base + ["--vocab", "3", "--family", "context_free"]) == 0
    assert main(["prove", "--rule", "stale_draft_probs", "--vocab", "all", "--tokens", "1", "-q"]) == 3


# -- threads --------------------------------------------------------------------------------------------------
def test_an_unrelated_threads_sum_and_laws_are_untouched_during_a_proof():
    """Nothing of the process is switched: another thread's sum() and es.laws run as always meanwhile."""
    seen: list = []
    stop = threading.Event()

    def other() -> None:
        while not stop.wait(0.0005):   # hand the interpreter back between rounds: the proof goes on meanwhile
            seen.append((sum([1, 1, 1]), es.laws.normalize((1, 3)), es.laws.residual((F(1), F(0)), (F(0), F(1)))))

    t = threading.Thread(target=other)
    t.start()
    try:
        res = es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab="all", tokens=1,
                       family="context_free")
    finally:
        stop.set()
        t.join()
    assert res.proven and seen
    assert all(s == (3, (F(1, 4), F(3, 4)), (F(1), F(0))) for s in seen)


def test_three_proofs_in_three_threads_give_the_results_of_one_thread():
    jobs = [(es.rules.speculative_sampling, "all"), (es.rules.resample_from_target, "all"),
            (es.rules.no_bonus, 3)]

    def run(rule, vocab):
        return es.prove(rule, proposer=es.drafts.chain(1), vocab=vocab, tokens=1, family="context_free")

    alone = [run(r, v) for r, v in jobs]
    results: dict = {}
    errors: list = []

    def work(i: int) -> None:
        try:
            results[i] = run(*jobs[i])
        except BaseException as exc:   # noqa: BLE001 - reported below with its thread
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, one in enumerate(alone):
        assert results[i].proven == one.proven
        if one.proven:
            assert results[i].cells == one.cells
        else:
            assert results[i].witness == one.witness and results[i].report.tv == one.report.tv
