"""One run of the rule over the abstraction: its steps, its draws and its branches on one cell.

Part of the all-vocabulary abstraction (:mod:`exactspec.prove.all_vocab`).
"""

from __future__ import annotations

from typing import Any

from ...errors import AbstractionRefused, ExactSpecError, InvalidDistribution, RuleError
from ..field import SymNum, active, where
from .decider import _AbsDecider
from .space import _AbsSpace, _space
from .state import _Control, _DeadBranch, _MoreDraws, _SESSION, _inexact, _refuse
from .values import AbstractLaw, ClassEntry, NamedToken, UnnamedToken, _Hook, _as_law, _is_zero, _sum_over_class


def _decider() -> _AbsDecider:
    """The abstraction's decider of the cell being run in this context."""
    dec = active()
    assert isinstance(dec, _AbsDecider)
    return dec


class _Run:
    """One branch: replays ``prefix`` (option indices), then takes option 0 at each new draw, pushing the rest."""

    def __init__(self, prefix: tuple, pending: list, fld: Any, named: int, draws: int, supports: dict) -> None:
        self.prefix, self.pending, self.fld, self.named, self.draws = prefix, pending, fld, named, draws
        self.pos = 0
        self.choices: list = []
        self.weight: Any = fld.one
        self.ambiguous_seen = False
        self.count: dict = {}
        self.supports = supports   # shared by the branches of one cell: a law's support is decided once there

    def _choose(self, options: list) -> Any:
        pos = self.pos
        self.pos += 1
        if pos < len(self.prefix):
            idx = self.prefix[pos]
        else:
            idx = 0
            for j in range(1, len(options)):
                self.pending.append(tuple(self.choices) + (j,))
        self.choices.append(idx)
        value, w = options[idx]
        if w is not None:
            self.weight = self.weight * w
        return value

    def ambiguous(self) -> bool:
        """Two drawn unnamed tokens of one class compared: both answers are followed, the branch marked."""
        self.ambiguous_seen = True
        return self._choose([(True, None), (False, None)])

    def number(self, x: Any, what: str = "a number") -> Any:
        if isinstance(x, ClassEntry):
            _refuse(f"uses an entry of a law at a class of unnamed tokens as {what} (one number for a class)")
        return self.fld.check(x, what)

    def categorical(self, law: Any) -> Any:
        key = (id(law), _decider().assumed)
        hit = self.supports.get(key)
        if hit is None or hit[0] is not law:
            hit = self.supports[key] = (law, self._support(law))   # the law kept alive with its entry
        options = hit[1]
        value = self._choose(options)
        if isinstance(value, tuple):
            _tag, i, x = value
            k = self.count.get(i, 0) + 1
            if k > self.draws:
                raise _MoreDraws()
            self.count[i] = k
            dec = _decider()
            dec.assumed = dec.assumed | {i}   # the branch holds a token of class i: it has one where it weighs
            self.weight = self.weight * SymNum(_space().to_draw(x.f, i, k))
            return UnnamedToken(i, k, self)
        return NamedToken(value)

    draw_now = categorical

    def _support(self, law: Any) -> list:
        """``[(token or ("class", i, entry), probability or None)]`` of a law, validated (once per law and cell)."""
        fld = self.fld
        space = _space()
        c = self.named
        if isinstance(law, AbstractLaw):
            entries: Any = law.entries
        elif isinstance(law, (list, tuple)):   # built by the rule: from a law's entries (an inexact run) or not
            entries = _as_law(law, c, "draws from")
        else:
            _refuse(f"draws from a {type(law).__name__}, not a law")
        options: list = []
        for a, x in enumerate(entries[:c]):
            x = fld.check(x, "a law passed to rng.categorical")
            if not x >= 0:
                raise InvalidDistribution(f"a law passed to rng.categorical has entry {a} < 0")
            if x != 0:
                options.append((a, x))
        hook = _Hook(space)
        total: Any = sum((x for _a, x in options), fld.zero)
        for i, x in enumerate(entries[c:]):
            if _is_zero(x):
                continue
            if not isinstance(x, ClassEntry):
                _refuse("draws from a law with a constant entry at a class of unnamed tokens")
            if not x >= 0:
                raise InvalidDistribution(f"a law passed to rng.categorical is negative on class C{i}")
            if x == 0:   # 0 at every token of the class (decided for the class): none of them is drawn
                continue
            total = total + hook.class_total(x, i)
            options.append((("class", i, x), None))
        if total != 1:
            raise InvalidDistribution("a law passed to rng.categorical does not sum to exactly 1 over the vocabulary")
        return options

    def bernoulli(self, prob: Any) -> bool:
        prob = self.number(prob, "the probability passed to rng.bernoulli")
        if not (prob >= 0 and prob <= 1):
            raise InvalidDistribution(f"rng.bernoulli got a probability outside [0, 1] (at {where()})")
        if prob == 1:
            return True
        if prob == 0:
            return False
        return self._choose([(True, prob), (False, 1 - prob)])

    def uniform(self, *a: Any, **k: Any) -> Any:
        return _refuse("draws rng.uniform() (not followed by the all-vocabulary abstraction yet)")

    random = uniform


class _Step:
    """The chain step a rule sees: drafts sampled from the draft law, the same target law at every position."""

    def __init__(self, run: _Run, gamma: int, p: AbstractLaw, q: AbstractLaw, argmax: bool = False,
                 claim: AbstractLaw | None = None) -> None:
        self._run, self.gamma, self._p, self._q = run, gamma, p, q
        self._argmax, self._claim = argmax, (q if claim is None else claim)
        self._drafts: list = []
        self.accepted = 0

    @property
    def vocab(self) -> int:
        return _refuse("reads step.vocab: the vocabulary size is symbolic")

    def _check(self, j: int) -> None:
        if not 0 <= j <= self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma}")

    def draft(self, j: int) -> Any:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        while len(self._drafts) <= j:   # argmax drafts: named token 0, q's argmax by the layout (context-free q)
            self._drafts.append(NamedToken(0) if self._argmax else self._run.categorical(self._q))
        return self._drafts[j]

    def claimed(self, j: int) -> AbstractLaw:
        if not 0 <= j < self.gamma:
            raise IndexError(f"draft position {j} is outside 0..{self.gamma - 1}")
        return self._claim

    def target(self, j: int) -> AbstractLaw:
        self._check(j)
        return self._p

    def accept(self, j: int) -> Any:
        self.accepted = max(self.accepted, j + 1)
        return self.draft(j)

    @property
    def drafts(self) -> tuple:
        return tuple(self.draft(j) for j in range(self.gamma))

    def number(self, x: Any) -> Any:
        from ...laws import to_rational
        return self._run.fld.convert(to_rational(x, "step.number"))


class _TreeStep:
    """The tree step a tree rule sees: children drawn i.i.d. from the draft law, claimed as it (context-free)."""

    family = "tree"
    root = 0

    def __init__(self, run: _Run, expansion: tuple, p: AbstractLaw, q: AbstractLaw) -> None:
        self._run, self._exp, self._p, self._q = run, expansion, p, q
        self.max_depth = len(expansion)
        self._tok: list = [None]
        self._parent = [-1]
        self._depth = [0]
        self._path: list = [()]
        self._kids: list = [[]]
        self.accepted = 0

    @property
    def vocab(self) -> int:
        return _refuse("reads step.vocab: the vocabulary size is symbolic")

    def token(self, node: int) -> Any:
        return self._tok[node]

    def parent(self, node: int) -> int:
        return self._parent[node]

    def depth(self, node: int) -> int:
        return self._depth[node]

    def path(self, node: int) -> tuple:
        return self._path[node]

    def target(self, node: int) -> AbstractLaw:
        self._depth[node]   # IndexError for a node that does not exist
        return self._p

    def claimed(self, node: int) -> AbstractLaw:
        if node == 0:
            raise ValueError("the root carries no claimed law")
        self._depth[node]
        return self._q

    def _draw_next(self, node: int) -> bool:
        d = self._depth[node]
        if d >= self.max_depth or len(self._kids[node]) >= self._exp[d]:
            return False
        x = self._run.categorical(self._q)
        c = len(self._tok)
        self._tok.append(x)
        self._parent.append(node)
        self._depth.append(d + 1)
        self._path.append(self._path[node] + (x,))
        self._kids.append([])
        self._kids[node].append(c)
        return True

    def children(self, node: int) -> list:
        while self._draw_next(node):
            pass
        return list(self._kids[node])

    def proposals(self, node: int) -> Any:
        i = 0
        while True:
            if i >= len(self._kids[node]) and not self._draw_next(node):
                return
            yield self._kids[node][i], self._q
            i += 1

    def accept(self, node: int) -> Any:
        self.accepted += 1
        return self._tok[node]

    def number(self, x: Any) -> Any:
        from ...laws import to_rational
        return self._run.fld.convert(to_rational(x, "step.number"))


def _run_branch(rule: Any, run: _Run, proposer: Any, tree: bool, gamma: Any, p: AbstractLaw, q: AbstractLaw,
                argmax: bool, claim: Any, tokens: int, c: int) -> tuple:
    """One branch, step after step: ``(emitted tokens, whether they are all named)`` (stops at an unnamed one)."""
    emitted: list = []
    named_only = True
    while len(emitted) < tokens and named_only:
        step = _TreeStep(run, tuple(proposer.expansion), p, q) if tree else _Step(run, gamma, p, q, argmax, claim)
        gen = rule.fn(step, run)
        n0 = len(emitted)
        try:
            for tok in gen:
                if isinstance(tok, UnnamedToken):
                    named_only = False
                    break
                if isinstance(tok, NamedToken):
                    tok = tok.name
                elif isinstance(tok, int) and not isinstance(tok, bool):
                    _inexact(f"emits the constant token id {tok} (a special token id is not symmetric)")
                    if not 0 <= tok < c:
                        _refuse(f"emits the token id {tok}: ids past the named tokens stand for classes")
                else:
                    raise RuleError(f"rule {rule.name} emitted {tok!r}, not a token", rule=rule.name)
                emitted.append(tok)
                if len(emitted) >= tokens:
                    break
        finally:
            gen.close()
        if named_only and len(emitted) == n0:
            raise RuleError(f"rule {rule.name} emitted no token in a step", rule=rule.name)
    return emitted, named_only


def _enumerate(rule: Any, space: _AbsSpace, proposer: Any, tokens: int) -> tuple:
    """Every branch of ``tokens`` emitted tokens on the current cell: ``({named outcome: probability}, branches)``."""
    fld = space.field
    c = space.layout.named
    session = _SESSION.get()
    assert session is not None
    p = AbstractLaw(list(space.laws["p"][0]) + [ClassEntry(space.gens[space.member_names[(i, 0)][0]] / 1, i)
                                                for i in range(len(space.layout.classes))], c)
    q = AbstractLaw(list(space.laws["q"][0]) + [ClassEntry(space.gens[space.member_names[(i, 0)][1]] / 1, i)
                                                for i in range(len(space.layout.classes))], c)
    tree = getattr(proposer, "kind", "chain") == "tree"
    gamma = None if tree else proposer.gamma
    argmax = not tree and proposer.sampling == "argmax"
    claim = None
    if not tree and proposer.claim == "point_mass":
        claim = AbstractLaw([fld.one if a == 0 else 0 for a in range(c)] + [0] * len(space.layout.classes), c)
    out: dict = {}
    pending: list = [()]
    supports: dict = {}
    branches = 0
    while pending:
        prefix = pending.pop()
        run = _Run(prefix, pending, fld, c, space.layout.draws, supports)
        session.run, session.inhabited = run, None
        session.hook.residuals.clear()
        dec = _decider()
        dec.assumed = frozenset()
        try:
            emitted, named_only = _run_branch(rule, run, proposer, tree, gamma, p, q, argmax, claim, tokens, c)
        except _DeadBranch:
            branches += 1
            dec.stats["dead branches"] = dec.stats.get("dead branches", 0) + 1
            continue
        except (_Control, ExactSpecError, KeyboardInterrupt):
            raise
        except BaseException as exc:   # the rule's own error (SystemExit included): exit 2, as the concrete prover
            if _tool_error(exc):   # raised inside exactspec's prover, sympy or z3: exactspec's own bug, as it is
                raise
            if session.inexact is not None:   # after an inexact observation its values are the abstraction's
                raise AbstractionRefused(
                    f"vocab='all': the rule {session.inexact}, and then raised {type(exc).__name__}: {exc} "
                    f"(at {_raised_at(exc)}) on values that stand for a class of tokens, not concrete ones; "
                    "prove at a given vocab instead") from exc
            raise RuleError(f"rule {rule.name} raised {type(exc).__name__}: {exc} under es.prove(vocab='all') "
                            f"(at {_raised_at(exc)})", rule=rule.name) from exc
        branches += 1
        if not named_only:
            continue
        if run.ambiguous_seen:
            _refuse("two drawn unnamed tokens of one class were compared and a named outcome depends on the answer")
        w = run.weight.f
        draws = {(i, k) for i, n in run.count.items() for k in range(1, n + 1)}
        if space.members_in(w.denom):
            _refuse("a branch's probability has an unnamed token's probability in its denominator")
        total = _sum_over_class(space, w.numer, draws) / space.K(w.denom) if draws else w
        o = tuple(emitted[:tokens])
        out[o] = out[o] + SymNum(total) if o in out else SymNum(total)
    return out, branches


def _tool_error(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside exactspec's prover or engine, sympy or z3 (not by the rule's own code)."""
    import os
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    name = os.path.abspath(tb.tb_frame.f_code.co_filename)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tool = (os.path.join(pkg, "prove") + os.sep, os.path.join(pkg, "enumerate") + os.sep,
            os.sep + "sympy" + os.sep, os.sep + "z3" + os.sep)
    return any(t in name if t.startswith(os.sep + "sympy") or t.startswith(os.sep + "z3") else name.startswith(t)
               for t in tool)


def _raised_at(exc: BaseException) -> str:
    """``file:line in function`` where ``exc`` was raised: its traceback's innermost frame."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "<unknown>"
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
