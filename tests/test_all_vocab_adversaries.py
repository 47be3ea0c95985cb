"""Exact audits confirm the hand-derived ground truth of every adversary in ``all_vocab_adversaries``.

For each rule, at (gamma, tokens) in (1, 1), (1, 2), (2, 2) and vocab 2..6, on seeded random rational laws
(zeros, ties inside a law, p == q, a uniform law, a point mass, q the reverse of p, ties between p and q) plus
every record's witness: a lossless rule has TV == 0 everywhere; a biased rule has TV == 0 wherever its
hand-derived ``clean_when`` holds, TV > 0 at its witness's laws at each of its settings, and at the witness
exactly the TV derived by hand; an error rule raises the ``es.ExactSpecError`` subclass named.
"""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest

import exactspec as es

from all_vocab_adversaries import ADVERSARIES, ALL_SETTINGS, Adversary, rule  # tests/ is on sys.path under pytest

VOCABS = range(2, 7)
TRUTHS = {"lossless", "biased", "error"}


def _normal(w: list[int]) -> tuple[F, ...]:
    s = sum(w)
    return tuple(F(x, s) for x in w)


def _weights(rng: random.Random, vocab: int, zeros: int = 0) -> list[int]:
    w = [rng.randint(1, 6) for _ in range(vocab)]
    for i in rng.sample(range(vocab), zeros):
        w[i] = 0
    return w


def _random_instances(vocab: int) -> list[tuple[tuple[F, ...], tuple[F, ...]]]:
    """Seeded laws over ``vocab`` tokens, built to hit the special cases the adversaries test for."""
    rng = random.Random(f"all-vocab adversaries {vocab}")

    def law(zeros: int = 0) -> tuple[F, ...]:
        return _normal(_weights(rng, vocab, zeros))

    most = vocab - 1
    out = [(law(), law()),                                    # full support
           (law(1), law(1)),                                  # a zero in each
           (law(rng.randint(1, most)), law()),                # zeros in p only
           (law(), law(rng.randint(1, most)))]                # zeros in q only
    p = law(1)
    out.append((p, p))                                        # p == q
    w = _weights(rng, vocab)
    w[1] = w[0]
    out.append((_normal(w), law()))                           # a tie inside p
    out.append((_normal([1] * vocab), law(1)))                # p uniform
    out.append((law(), _normal([1] * vocab)))                 # q uniform
    out.append((_normal([0] * (vocab - 1) + [1]), law()))     # p a point mass (on the last token)
    p = law()
    out.append((p, p[::-1]))                                  # q the reverse of p
    if vocab >= 4:                                            # p == q on tokens 0 and 1, not on 2 and 3
        w = _weights(rng, vocab)
        w[1], w[3] = w[0], w[2] + 1
        v = list(w)
        v[2], v[3] = w[3], w[2]
        out.append((_normal(w), _normal(v)))
    return out


def _pool() -> dict[int, list[tuple[tuple[F, ...], tuple[F, ...]]]]:
    pool = {v: _random_instances(v) for v in VOCABS}
    for adv in ADVERSARIES:
        w = adv.witness
        if w is not None and (w.p, w.q) not in pool[len(w.p)]:
            pool[len(w.p)].append((w.p, w.q))
    return pool


POOL = _pool()


def _tv(adv: Adversary, p: tuple, q: tuple, gamma: int, tokens: int) -> F:
    rep = es.audit(rule=rule(adv), proposer=es.drafts.chain(gamma), target=es.models.context_free(p),
                   draft=es.models.context_free(q), tokens=tokens)
    return rep.tv


def test_the_suite_is_large_and_well_formed():
    names = [a.name for a in ADVERSARIES]
    assert len(names) == len(set(names)) >= 45
    assert {a.truth for a in ADVERSARIES} <= TRUTHS
    assert sum(a.truth == "lossless" for a in ADVERSARIES) >= 10
    for a in ADVERSARIES:
        assert a.why and "\n" not in a.why, a.name
        assert set(a.settings) <= set(ALL_SETTINGS), a.name
        if a.truth == "biased":
            assert a.witness is not None and a.clean_when is not None, a.name
            assert (a.witness.gamma, a.witness.tokens) in a.settings, a.name
        if a.truth == "error":
            assert a.witness is not None and a.error is not None and issubclass(a.error, es.ExactSpecError)
        for law in () if a.witness is None else (a.witness.p, a.witness.q):
            assert sum(law) == 1 and min(law) >= 0 and len(law) in VOCABS, a.name
        assert rule(a).claim == "lossless" and rule(a).name == a.name


@pytest.mark.parametrize("adv", [a for a in ADVERSARIES if a.truth == "lossless"], ids=lambda a: a.name)
def test_lossless_adversary_is_exact_everywhere(adv):
    for gamma, tokens in ALL_SETTINGS:
        for vocab in VOCABS:
            for p, q in POOL[vocab]:
                assert _tv(adv, p, q, gamma, tokens) == 0, (gamma, tokens, p, q)


@pytest.mark.parametrize("adv", [a for a in ADVERSARIES if a.truth == "biased"], ids=lambda a: a.name)
def test_biased_adversary_matches_its_hand_derivation(adv):
    w = adv.witness
    assert _tv(adv, w.p, w.q, w.gamma, w.tokens) == w.tv          # the exact TV derived by hand
    for gamma, tokens in adv.settings:                           # biased at each setting it names
        assert _tv(adv, w.p, w.q, gamma, tokens) > 0, (gamma, tokens)
    clean = biased = 0
    for gamma, tokens in ALL_SETTINGS:
        for vocab in VOCABS:
            for p, q in POOL[vocab]:
                tv = _tv(adv, p, q, gamma, tokens)
                if adv.clean_when(p, q, gamma, tokens):
                    clean += 1
                    assert tv == 0, ("clean_when holds but TV > 0", gamma, tokens, p, q, tv)
                biased += tv > 0
    assert clean > 0 and biased > 0                              # both sides of the derivation are exercised


@pytest.mark.parametrize("adv", [a for a in ADVERSARIES if a.truth == "error"], ids=lambda a: a.name)
def test_error_adversary_is_refused_by_the_exact_engine(adv):
    w = adv.witness
    for gamma, tokens in adv.settings:
        with pytest.raises(es.ExactSpecError) as info:
            _tv(adv, w.p, w.q, gamma, tokens)
        assert type(info.value) is adv.error, type(info.value)
    for vocab in VOCABS:          # and on every instance where a rejection can happen
        for p, q in POOL[vocab]:
            if p != q:
                with pytest.raises(adv.error):
                    _tv(adv, p, q, 1, 1)
