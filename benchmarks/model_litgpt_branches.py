"""How many branches litgpt's whole-loop audit takes, counted by a model of its control flow, three ways.

A planning measurement for issue 17's litgpt row, and a check of the audit's fork points, not a
speed figure. A whole-loop audit reruns the loop once per branch; a branch forks where the loop
reads a pending token. This script replays litgpt 0.5.13's ``generate`` / ``speculative_decoding``
control flow as a small abstract program over the same exact tables and counts its branches:

- **eager**: a token forks where the stand-ins are fed it (the forwards), as well as where a
  decision reads it (the stand-ins reading every token: ``_fast_path.DEFER_READS`` off);
- **deferred**: a token forks only where a Python decision needs its value (the comparison
  ``target_prob >= draft_prob`` of its verification, which also needs the token before it), a
  token's own law read first when it depends on an earlier token, and the tokens the loop returns
  unread are spread, as the audit spreads them (``lazy_worlds.REFINE`` off);
- **refined**: a decision forks on its answer, not on the last token it depends on:
  ``target_prob >= draft_prob`` narrows the draft to the values that give the answer, and
  ``torch.rand(1) <= 1 - p/q`` is decided jointly with the draft, which stays unread (its law
  conditioned on the answer); a token is read where its value itself is needed (the next
  position's context, a law to spread).

- **joint** (the default since ``joint_draws`` was built): every pending token held jointly,
  decisions keeping the assignments of values that give their answer, a token's law a row indexed
  by the token before it (no read), the returned tokens spread jointly where the branch ends
  (``joint_draws.JOINT``; off, the audit forks as ``refined`` does).

The two-way fork of ``if not should_discard_token`` is in every mode. Each count is checked
against the real audit's (``es.audit_loop`` on litgpt's own ``generate``, same tables, same run,
with the switches set as the mode says); a count that differs exits 1. The models were written
first, to size each lever before it was built (``joint``'s 27 branches at gamma 3 before the audit
gave 27). ``floor`` is the count times the loop's own cost
per plain call (measured here, outside any audit).

``python -m benchmarks.model_litgpt_branches`` (``--quick``: gamma 2 only).

>>> count_branches(2, 2, seeds=(1, 4), mode="eager") >= count_branches(2, 2, seeds=(1, 4), mode="refined")
True
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from typing import Any, Callable

import exactspec as es


class _Fork(Exception):
    """A branch reached a fork its prefix does not decide: rerun with each value appended."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n = n


class _Replay:
    """The choices of one branch: a prefix replayed, the first choice beyond it raises :class:`_Fork`."""

    def __init__(self, prefix: tuple) -> None:
        self.prefix, self.i = prefix, 0

    def choice(self, n: int) -> int:
        if self.i >= len(self.prefix):
            raise _Fork(n)
        self.i += 1
        return self.prefix[self.i - 1]


class _Token:
    """A pending token: its law is computed (reading what it depends on) and the branch forks on the first read;
    a decision on it alone narrows the values it can take (two ways, where both are possible)."""

    def __init__(self, rng: _Replay, law: Callable[[], list]) -> None:
        self.rng, self.law, self.value, self.cell = rng, law, None, None

    def support(self) -> list:
        return [i for i, p in enumerate(self.law()) if p > 0 and (self.cell is None or i in self.cell)]

    def read(self) -> int:
        if self.value is None:
            support = self.support()
            self.value = support[self.rng.choice(len(support))] if len(support) > 1 else support[0]
        return self.value

    def decide(self, holds: Callable[[int], bool]) -> bool:
        """``holds(token)``, forking on the answer, not on the token."""
        if self.value is not None:
            return holds(self.value)
        support = self.support()
        yes = [v for v in support if holds(v)]
        if len(yes) in (0, len(support)):
            return bool(yes)
        answer = self.rng.choice(2) == 0
        self.cell = yes if answer else [v for v in support if not holds(v)]
        return answer


def _generate(rng: _Replay, target: Any, draft: Any, gamma: int, n: int, prompt: tuple, mode: str) -> None:
    """litgpt's ``generate(draft, target, prompt, speculative_k=gamma, max_returned_tokens=len(prompt) + n + 1)``;
    ``mode`` one of :data:`MODES`."""
    eager = mode == "eager"
    p = lambda ctx: [Fraction(x) for x in target(ctx)]        # noqa: E731
    q = lambda ctx: [Fraction(x) for x in draft(ctx)]         # noqa: E731

    def ctx_of(tokens: list) -> tuple:
        if mode == "refined":       # order-1 tables read the last token only (the stand-ins' worlds: its values)
            return prompt + tuple(t.read() for t in tokens[-1:])
        return prompt + tuple(t.read() for t in tokens)

    max_returned = len(prompt) + n + 1
    committed: list = []
    returned: list = []
    token = _Token(rng, lambda: p(prompt))                    # the target's prefill sample
    pos = len(prompt)
    while pos < max_returned - 1:
        k = min(gamma, max_returned - pos - 1)
        drafts: list = []
        for _ in range(k):
            before = committed + [token] + drafts
            if eager:
                before[-1].read()                             # the draft forward reads the token it is fed
            drafts.append(_Token(rng, lambda b=before: q(ctx_of(b))))
        if eager:
            drafts[-1].read()                                 # the target forward reads every candidate
        new: list = []
        for i, d in enumerate(drafts):
            ctx = ctx_of(committed + [token] + drafts[:i])
            if mode == "refined":
                pc, qc = p(ctx), q(ctx)
                confident = d.decide(lambda x: pc[x] >= qc[x])
            else:
                x = d.read()
                confident = p(ctx)[x] >= q(ctx)[x]
            if confident:
                new.append(d)
                continue
            if rng.choice(2) == 0:      # ``not should_discard_token`` (refined: decided jointly, the draft unread)
                new.append(d)
                continue
            new.append(_Token(rng, lambda c=ctx: [max(a - b, Fraction(0)) for a, b in zip(p(c), q(c))]))
            break
        else:
            last = committed + [token] + drafts
            new.append(_Token(rng, lambda b=last: p(ctx_of(b))))   # the bonus token
        committed += [token] + new[:-1]
        returned += new               # (the prefill's token is fed, never returned: litgpt 0.5.13 leaves it out)
        token = new[-1]
        pos += len(new)
    for t in returned[:n]:
        if t.value is None:           # returned unread: spread over its values, its law read (what it depends on drawn)
            t.support()


#: how the model forks: where the stand-ins read a token (``eager``), where a decision reads it (``deferred``), on a
#: decision rather than on the last token it depends on (``refined``), every pending token held jointly (``joint``)
MODES = ("eager", "deferred", "refined", "joint")


class _Joint:
    """Every pending token of a branch held jointly (``joint_draws`` in the audit): the assignments of
    values to them that are still possible. A new token extends each assignment by the values its law (given that
    assignment) can take; a decision keeps the assignments that give its answer (forking where both answers are
    possible); a read keeps those with the value read (forking where several are possible)."""

    def __init__(self, rng: _Replay) -> None:
        self.rng, self.worlds, self.n = rng, [{}], 0

    def new(self, law: Callable[[dict], list]) -> int:
        token, self.n = self.n, self.n + 1
        self.worlds = [{**w, token: v} for w in self.worlds for v, p in enumerate(law(w)) if p > 0]
        return token

    def decide(self, holds: Callable[[dict], bool]) -> bool:
        yes = [w for w in self.worlds if holds(w)]
        if len(yes) in (0, len(self.worlds)):
            return bool(yes)
        answer = self.rng.choice(2) == 0
        self.worlds = yes if answer else [w for w in self.worlds if not holds(w)]
        return answer

    def read(self, token: int) -> int:
        values = sorted({w[token] for w in self.worlds})
        value = values[self.rng.choice(len(values))] if len(values) > 1 else values[0]
        self.worlds = [w for w in self.worlds if w[token] == value]
        return value


def _generate_joint(rng: _Replay, target: Any, draft: Any, gamma: int, n: int, prompt: tuple, spread: bool) -> None:
    """:func:`_generate` with every pending token held jointly (:class:`_Joint`), order-1 tables. ``spread``: the
    returned tokens are spread jointly where the branch ends; otherwise each but the last is read there (what an
    audit that spreads one token at a time, its law given the token before it, does)."""
    p = lambda ctx: [Fraction(x) for x in target(ctx)]        # noqa: E731
    q = lambda ctx: [Fraction(x) for x in draft(ctx)]         # noqa: E731
    joint = _Joint(rng)

    def ctx(w: dict, tokens: list) -> tuple:
        return prompt + (w[tokens[-1]],)

    max_returned = len(prompt) + n + 1
    committed: list = []
    returned: list = []
    token = joint.new(lambda w: p(prompt))
    pos = len(prompt)
    while pos < max_returned - 1:
        k = min(gamma, max_returned - pos - 1)
        drafts: list = []
        for _ in range(k):
            before = committed + [token] + drafts
            drafts.append(joint.new(lambda w, b=before: q(ctx(w, b))))
        new: list = []
        for i, d in enumerate(drafts):
            c = committed + [token] + drafts[:i]
            if joint.decide(lambda w: p(ctx(w, c))[w[d]] >= q(ctx(w, c))[w[d]]):
                new.append(d)
                continue
            # ``not should_discard_token``: possible where p(x) > 0 (the uniform decided jointly, as the audit does)
            keep = [w for w in joint.worlds if p(ctx(w, c))[w[d]] > 0]
            if keep and rng.choice(2) == 0:
                joint.worlds = keep
                new.append(d)
                continue
            new.append(joint.new(lambda w, c=c: [max(a - b, Fraction(0)) for a, b in zip(p(ctx(w, c)), q(ctx(w, c)))]))
            break
        else:
            last = committed + [token] + drafts
            new.append(joint.new(lambda w, b=last: p(ctx(w, b))))
        committed += [token] + new[:-1]
        returned += new
        token = new[-1]
        pos += len(new)
    if not spread:
        for t in returned[:n][:-1]:
            joint.read(t)


def _branches(run: Callable[[_Replay, Any, Any], None], seeds: tuple, vocab: int) -> int:
    """The branches of a depth-first enumeration (one rerun per branch) of ``run(replay, target, draft)`` on the
    order-1 tables of ``seeds``."""
    target = es.models.random_table(vocab=vocab, order=1, seed=seeds[0])
    draft = es.models.random_table(vocab=vocab, order=1, seed=seeds[1])
    todo, done = [()], 0
    while todo:
        prefix = todo.pop()
        try:
            run(_Replay(prefix), target, draft)
        except _Fork as f:
            todo.extend(prefix + (j,) for j in range(f.n))
            continue
        done += 1
    return done


def count_joint(gamma: int, n: int, seeds: tuple = (1, 4), spread: bool = True, vocab: int = 3) -> int:
    """Branches with every pending token held jointly (``spread``: the returned tokens spread jointly, as the audit
    does; otherwise each but the last read where the branch ends).

    >>> count_joint(1, 1) <= count_branches(1, 1, mode="refined")
    True
    """
    return _branches(lambda rng, t, d: _generate_joint(rng, t, d, gamma, n, (0,), spread), seeds, vocab)


def count_branches(gamma: int, n: int, seeds: tuple = (1, 4), mode: str = "eager", vocab: int = 3) -> int:
    """The branches of an enumeration of the abstract loop (depth first, one rerun per branch), order-1 tables.

    >>> count_branches(1, 1, mode="refined") <= count_branches(1, 1, mode="deferred") <= count_branches(1, 1)
    True
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "joint":
        return count_joint(gamma, n, seeds, vocab=vocab)
    return _branches(lambda rng, t, d: _generate(rng, t, d, gamma, n, (0,), mode), seeds, vocab)


def _audited(gamma: int, n: int, seeds: tuple, mode: str) -> tuple[int, float]:
    """The real audit's branch count on litgpt's own ``generate`` (the stand-ins deferring their reads or not, decisions
    refined or not: ``mode``), and one plain call's seconds (CPU, outside audits)."""
    import torch

    import litgpt.generate.speculative_decoding as litgpt_sd
    from exactspec.samplers.randomness import _fast_path, joint_draws
    from exactspec.samplers.torch_draws import lazy_worlds
    t = es.models.random_table(vocab=3, order=1, seed=seeds[0])
    d = es.models.random_table(vocab=3, order=1, seed=seeds[1])

    def loop(target: Any, draft: Any, prompt: Any) -> Any:
        tokens, _ = litgpt_sd.generate(draft, target, prompt[0], speculative_k=gamma,
                                       max_returned_tokens=prompt.shape[1] + n + 1)
        return tokens
    saved = lazy_worlds.REFINE, joint_draws.JOINT
    lazy_worlds.REFINE, joint_draws.JOINT = mode in ("refined", "joint"), mode == "joint"
    try:
        with _fast_path.reads_deferred(mode != "eager"):
            r = es.audit_loop(loop, target=t, draft=d, prompt=(0,), rng_model="continuous", tokens=n, progress=False)
    finally:
        lazy_worlds.REFINE, joint_draws.JOINT = saved
    tl, dl = es.stand_in(t, kind="torch-lm", dtype=torch.float64), es.stand_in(d, kind="torch-lm",
                                                                                 dtype=torch.float64)
    prompt = torch.tensor([[0]])
    calls, c0 = 200, time.process_time()
    for _ in range(calls):
        tl.reset(), dl.reset()
        loop(tl, dl, prompt)
    return r.paths, (time.process_time() - c0) / calls


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    print("litgpt 0.5.13 generate, vocab 3 order-1 tables, prompt (0,), 3 tokens, ideal uniforms: branches when tokens "
          "fork where the stand-ins read them (eager), where only decisions read them (deferred), when a decision "
          "forks on its answer rather than on the last token it depends on (refined), and with every pending token "
          "held jointly (joint: the default); each model count checked against the audit's")
    ok = True
    for gamma, seeds in ([(2, (1, 4))] if quick else [(2, (1, 4)), (3, (1, 4)), (3, (2, 5))]):
        parts, plain, counts = [], 0.0, {}
        for mode in MODES:
            model = count_branches(gamma, 3, seeds, mode)
            audited, plain = _audited(gamma, 3, seeds, mode)
            counts[mode] = model
            same = audited == model
            ok = ok and same
            parts.append(f"{mode} model {model}, audit {audited}{'' if same else ' (DO NOT MATCH)'}")
        print(f"gamma {gamma}, seeds {seeds}: " + "; ".join(parts) + f" ({counts['eager'] / counts['joint']:.1f}x "
              f"fewer than eager); plain call {plain * 1e3:.2f} ms CPU, floor {counts['joint'] * plain:.2f} s "
              f"joint vs {counts['refined'] * plain:.2f} s refined vs {counts['eager'] * plain:.2f} s eager (one "
              "core)")
        sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
