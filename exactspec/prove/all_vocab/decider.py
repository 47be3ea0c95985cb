"""The abstraction's decider: an answer about an unnamed token must hold for every token of its class.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

from typing import Any

from ...errors import SolverUnknown
from ..field import ALL, Decider, NEG, OPS, POS, ZERO
from ..field import arith
from .space import _factors
from .state import _DeadBranch, _Refine, _refuse


class _AbsDecider(Decider):
    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.member_signs: dict = {}   # a factor in a class's token symbols -> its sign at every token of the class
        self.assumed: frozenset = frozenset()   # the classes the running branch drew from
        self._assuming: dict = {}

    def _check(self, known: dict, question: tuple) -> bool:
        r = self._shared.check(known, question, self.stats)
        self.solver = self._shared.solver
        if r == self.z3.sat:
            return True
        if r == self.z3.unsat:
            return False
        raise SolverUnknown(f"z3 could not decide {self.space.show(*question)} on a cell within "
                            f"{self.space.check_ms} ms")

    def decide(self, frac: Any, op: str) -> bool:
        num = frac.numer
        if num.is_zero:
            return ZERO in OPS[op]
        poly = num * frac.denom
        if poly.is_ground:
            return (POS if poly.LC > 0 else NEG) in OPS[op]
        space = self.space
        members = space.members_in(poly)
        if not members:
            return self._plain(frac, op)
        csign, facs = _factors(poly.monic())
        sign = (POS if poly.LC > 0 else NEG) * csign
        for f, e in facs:
            mem = space.members_in(f)
            if not mem:   # a factor free of unnamed tokens: decided on the cell as usual (it may fork)
                s = ZERO if self._plain(space.K(f), "==") else POS if self._plain(space.K(f), ">") else NEG
            else:
                if len({i for i, _k in mem}) > 1:
                    _refuse("compares probabilities of tokens of two different classes of unnamed tokens (e.g. "
                            "an argmax or max over the vocabulary)")
                if len(mem) > 1:
                    _refuse("compares the probabilities of two different drawn unnamed tokens")
                (i, k), = mem
                s = self._sign_of(f, i, k)
            if s == ZERO:
                sign = ZERO
                break
            if s == NEG and e % 2:
                sign = -sign
        return sign in OPS[op]

    def _plain(self, frac: Any, op: str) -> bool:
        """A comparison free of unnamed tokens' symbols: on the cell, assuming the branch's classes have a token.

        Without such classes this is the prover's own decision (it may fork the cell). With them, a side that
        only the assumption rules out is not recorded in the cell (other branches need the cell's points where a
        class is empty); both sides possible: the cell forks as usual (each side holds instances); neither:
        the branch cannot happen where its classes have mass, so it weighs 0 (:class:`_DeadBranch`).
        """
        if not self.assumed:
            return Decider.decide(self, frac, op)
        num = frac.numer
        if num.is_zero:
            return ZERO in OPS[op]
        poly = num * frac.denom
        if poly.is_ground:
            return (POS if poly.LC > 0 else NEG) in OPS[op]
        known = self._known_assuming()
        csign, facs = _factors(poly.monic())
        sign = (POS if poly.LC > 0 else NEG) * csign
        rest = []
        for f, e in facs:   # drop the factors whose sign the cell (with the assumption) already fixes
            kf = known.get(f, ALL)
            if kf == frozenset((ZERO,)):
                return ZERO in OPS[op]
            if kf == frozenset((POS,)) or (e % 2 == 0 and ZERO not in kf):
                continue
            if kf == frozenset((NEG,)):
                sign = -sign if e % 2 else sign
                continue
            rest.append((f, e))
        if not rest:
            return sign in OPS[op]
        mono = rest[0][0] if len(rest) == 1 and rest[0][1] == 1 else arith.product(rest)
        want = OPS[op] if sign == POS else frozenset({NEG: POS, POS: NEG, ZERO: ZERO}[x] for x in OPS[op])
        k = known.get(mono, ALL)
        yes, no = k & want, k - want
        if not no:
            return True
        if not yes:
            return False
        yes_ok = self._check(known, (mono, yes))
        no_ok = self._check(known, (mono, no))
        if yes_ok and no_ok:
            self.stats["forks"] = self.stats.get("forks", 0) + 1
            self.pending.append((self.order + [(mono, no)], None))
            self._add(mono, yes)
            self.point = None
            return True
        if yes_ok or no_ok:
            return yes_ok
        raise _DeadBranch()

    def _known_assuming(self) -> dict:
        """The cell's known signs with the branch's classes' mass, token signs and strict totals."""
        key = (self.assumed, len(self.order))
        hit = self._assuming.get(key)
        if hit is None:
            space = self.space
            hit = dict(self.known)
            for i in self.assumed:
                mass, yes = space._monic(space.totals_p[i] + space.totals_q[i], frozenset((POS,)))
                hit[mass] = hit.get(mass, ALL) & yes
                for poly, signs in space.nonempty_signs[i]:
                    hit[poly] = hit.get(poly, ALL) & signs
            self._assuming = {key: hit}
        return hit

    def _sign_of(self, f: Any, i: int, k: int) -> int:
        """The sign of an irreducible factor at every token of class ``i``, or split the class by it.

        Decided on the cell *with the class's signs assumed* (the class has a token): where the class is empty
        its branches weigh 0 whatever is decided. The answer is kept for this cell but never added to it (that
        would drop the cell's points where the class is empty).
        """
        hit = self.member_signs.get((f, self.assumed))
        if hit is not None:
            return hit
        known = dict(self._known_assuming() if self.assumed else self.known)
        for poly, signs in self.space.class_signs[i]:
            known[poly] = known.get(poly, ALL) & signs
        cand = [s for s in (NEG, ZERO, POS) if s in known.get(f, ALL)]
        if len(cand) == 1:   # the class's own signs fix it (no z3 question)
            self.member_signs[(f, self.assumed)] = cand[0]
            return cand[0]
        ok = []
        for s in cand:
            if self._check(known, (f, frozenset((s,)))):
                ok.append(s)
        if len(ok) > 1:
            raise _Refine(self.space.predicate(self.space.to_generic(f, i, k), i))
        sign = ok[0] if ok else ZERO   # no token of the class can exist on this cell: its branches weigh 0
        self.member_signs[(f, self.assumed)] = sign
        return sign


# -- values: class entries, tokens, laws ---------------------------------------------------------------------
# What a rule can observe under vocab="all", and how (the soundness argument, docs/proofs-scale-out.md, follows
# this list): a law only at a token it holds (``p[x]``) and through es.laws' helpers (the hook below); a token only
# by ``==`` / ``!=`` with another token. Everything else on a law or a token either is refused at once (no value
# to go on with) or makes the run inexact (:func:`_inexact`): it goes on with a value, to find a bias that an
