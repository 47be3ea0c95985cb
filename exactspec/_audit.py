"""``audit``: the exact output law of a rule on one instance, compared with the expected law."""

from __future__ import annotations

import operator
import time
from typing import Any, Sequence

from .drafts import chain
from .enumerate import Budget, Engine, greedy_sequence, target_law
from .errors import ExactSpecError
from .fields import Field, get_field
from .laws import total_variation
from .models import Model
from .report import AuditReport
from .rules import Rule, as_rule

__all__ = ["audit"]

DECODINGS = ("sample", "greedy")


def _prompt(prompt: Any, vocab: int) -> tuple[int, ...]:
    try:
        items = list(prompt)
    except TypeError:
        raise ExactSpecError(f"prompt must be a sequence of token ids, got {prompt!r}") from None
    out = []
    for i, t in enumerate(items):
        try:
            t = operator.index(t)
        except TypeError:
            raise ExactSpecError(f"prompt[{i}] = {t!r} is not a token id") from None
        if not 0 <= t < vocab:
            raise ExactSpecError(f"prompt[{i}] = {t} is outside the vocabulary 0..{vocab - 1}")
        out.append(t)
    return tuple(out)


def audit(*, target: Model, rule: Any, draft: Model | None = None, proposer: Any = None,
          prompt: Sequence[int] = (), tokens: int = 1, decoding: str | None = None,
          field: str | Field = "fraction", precision: int | None = None, tolerance: Any = None,
          expected: Model | None = None, budget: Budget | None = None, closed_form: bool = True,
          worst: int = 5, backend: str = "auto", rng_model: str = "continuous",
          exact_floats: bool = False) -> AuditReport:
    """Compute the exact law of the first ``tokens`` tokens emitted after ``prompt`` and compare it.

    ``rule`` is a catalog rule, its name, or a function ``fn(step, rng)``; ``proposer`` defaults
    to ``es.drafts.chain(gamma=4)`` for chain rules and ``es.drafts.tree((2, 2, 1))`` for tree rules
    (or the proposer a rule's claim is stated for). The expected law is the target's sampling law
    (``decoding="sample"``), its greedy sequence (``"greedy"``), or the law of ``expected`` (a
    declared target model; rules claiming ``declared-target`` supply it themselves). ``decoding=None`` picks ``"greedy"`` for ``lossless-greedy`` rules
    and ``"sample"`` otherwise. ``closed_form=False`` forces the generic rng enumeration.
    ``backend`` picks the fraction field's rational type ("auto": gmpy2 when installed, else
    Fraction; "python": always Fraction); reports always hold Fractions, identical either way.
    ``rng_model`` says what ``rng.uniform()`` is: ``"continuous"`` ([0, 1)) or a real generator's
    lattice (``"torch-float32"``, ``"float64"``, ``"curand"``), on which ties have positive
    probability. ``exact_floats=True`` lets a rule compare uniforms with floats, each taken as the
    rational it is (what auditing float implementations needs).

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> r = es.audit(target=es.models.context_free((F(3, 5), F(2, 5))),
    ...              draft=es.models.context_free((F(1, 2), F(1, 2))),
    ...              proposer=es.drafts.chain(gamma=1), rule=es.rules.speculative_sampling, tokens=1)
    >>> r.output == {(0,): F(3, 5), (1,): F(2, 5)}, r.tv, r.lossless
    (True, Fraction(0, 1), True)
    """
    t0 = time.perf_counter()
    if not isinstance(target, Model):
        raise ExactSpecError(f"target must be an exactspec model (es.models.*), got {target!r}")
    rule_obj: Rule = as_rule(rule)
    if proposer is None:   # the proposer the rule's claim is about, else the family's default
        from .drafts import tree
        proposer = rule_obj.proposer or (chain(4) if rule_obj.family == "chain" else tree((2, 2, 1)))
    if not hasattr(proposer, "step") or not hasattr(proposer, "family"):
        raise ExactSpecError(f"proposer must be an exactspec proposer (es.drafts.*), got {proposer!r}")
    if proposer.family != rule_obj.family:
        raise ExactSpecError(f"rule {rule_obj.name} verifies {rule_obj.family}s but the proposer drafts a "
                             f"{proposer.family}")
    if proposer.needs_draft() and draft is None:
        raise ExactSpecError(f"the {proposer.describe()} proposer needs a draft model: pass draft=")
    for name, m in [("draft model", draft), ("expected model", expected)] + [
            (f"merge draft model {i}" if getattr(proposer, "kind", "") == "merge" else "the proposer's sampled_from model",
             m) for i, m in enumerate(getattr(proposer, "models", []))]:
        if m is not None and not isinstance(m, Model):
            label = name.removesuffix(" model") if name in ("draft model", "expected model") else name
            raise ExactSpecError(f"{label} must be an exactspec model (es.models.*), got {m!r}")
        if m is not None and m.vocab != target.vocab:
            raise ExactSpecError(f"{name} has vocab {m.vocab} but the target has vocab {target.vocab}")
    claims = getattr(proposer, "claims", None)
    if claims and len(next(iter(claims.values()))) != target.vocab:
        raise ExactSpecError(f"the fixed tree's claimed laws have {len(next(iter(claims.values())))} entries but the "
                             f"target has vocab {target.vocab}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ExactSpecError(f"tokens must be an int >= 1, got {tokens!r}")
    if expected is None and rule_obj.declared_target is not None:
        expected = rule_obj.declared_target(target, draft)
    if decoding is None:
        decoding = rule_obj.decoding
    if decoding not in DECODINGS:
        raise ExactSpecError(f"decoding must be one of {', '.join(DECODINGS)}, got {decoding!r}")
    if expected is not None and decoding == "greedy":
        raise ExactSpecError("expected= declares a sampling law; it cannot be combined with decoding='greedy'")
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise ExactSpecError(f"worst must be an int >= 0, got {worst!r}")
    fld = get_field(field, precision=precision, tolerance=tolerance, backend=backend)
    prompt_t = _prompt(prompt, target.vocab)

    from .enumerate.rng import lattice_for
    engine = Engine(rule_obj, proposer, target, draft, fld, budget=budget, closed_form=closed_form,
                    lattice=lattice_for(rng_model), exact_floats=exact_floats)
    try:
        tpc, accepted, nodes = engine.efficiency(prompt_t)
        output, calls = engine.output(prompt_t, tokens)
    finally:
        engine.close()
    if decoding == "greedy":
        exp = {greedy_sequence(target, prompt_t, tokens): fld.one}
    else:
        ref = expected if expected is not None else target
        exp = target_law(ref, prompt_t, tokens, fld, [ref.order])
    tv = total_variation(output, exp)
    ex = fld.export
    if ex(fld.one) is not fld.one:  # hand users Fractions whatever rational type computed them
        output = {k: ex(v) for k, v in output.items()}
        exp = {k: ex(v) for k, v in exp.items()}
        tv, tpc, calls = ex(tv), ex(tpc), ex(calls)
        accepted = None if accepted is None else ex(accepted)
        nodes = ex(nodes) if not isinstance(nodes, int) else nodes
    instance = {"vocab": target.vocab, "proposer": proposer.describe(), "prompt": list(prompt_t), "tokens": tokens,
                "decoding": decoding, "target": target.name, "draft": None if draft is None else draft.name}
    if rng_model != "continuous":
        instance["rng_model"] = rng_model
    if expected is not None:
        instance["expected"] = expected.name
    return AuditReport(rule=rule_obj.name, claim=rule_obj.claim, instance=instance, field=fld, output=output,
                       expected=exp, tv=tv, tolerance=fld.tolerance(), tokens_per_call=tpc, target_calls=calls,
                       seconds=time.perf_counter() - t0, paths=engine.meter.paths, step_laws=engine.meter.steps,
                       reference=rule_obj.reference, worst_count=worst, accepted_per_call=accepted,
                       nodes_per_call=nodes)


