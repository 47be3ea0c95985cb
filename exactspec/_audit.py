"""``audit``: the exact output law of a rule on one instance, compared with the expected law."""

from __future__ import annotations

import contextlib
import contextvars
import operator
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, cast

from . import _progress
from .drafts import chain
from .enumerate import Budget, Engine, greedy_sequence, target_law
from .enumerate.rng import RngLattice, lattice_for
from .enumerate.step import check_budget, crash_index, is_crash
from .errors import InvalidType, InvalidValue
from .fields import Field, get_field
from .laws import total_variation
from .models import Model
from .report import AuditReport
from .rules import Rule, as_rule

__all__ = ["audit", "default_tokens", "horizon_scope", "AuditInputs", "validate_audit", "build_engine", "AuditLaws",
           "compute_laws", "assemble_report", "run_audit"]

DECODINGS = ("sample", "greedy")


def prompt_tokens(prompt: Any, vocab: int) -> tuple[int, ...]:
    """The prompt as a tuple of token ids in ``0..vocab - 1``, or an argument error naming the entry.

    >>> prompt_tokens([1, 0], 2)
    (1, 0)
    >>> prompt_tokens((0, 2), 2)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: prompt[1] = 2 is outside the vocabulary 0..1
    """
    try:
        items = list(prompt)
    except TypeError:
        raise InvalidType(f"prompt must be a sequence of token ids, got {prompt!r}") from None
    out = []
    for i, t in enumerate(items):
        try:
            t = operator.index(t)
        except TypeError:
            raise InvalidType(f"prompt[{i}] = {t!r} is not a token id") from None
        if not 0 <= t < vocab:
            raise InvalidValue(f"prompt[{i}] = {t} is outside the vocabulary 0..{vocab - 1}")
        out.append(t)
    return tuple(out)


def _positions(proposer: Any) -> int | None:
    """Tokens one step can emit at most (chain: gamma + 1; tree: depth + 1), or None when unknown."""
    m = getattr(proposer, "max_tokens", None)
    if m is None:
        return None
    try:
        n = m()
    except Exception:  # a user's proposer with a broken max_tokens: no horizon default, say so in the scope
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def default_tokens(proposer: Any) -> int:
    """The default horizon: every position of the first step and of a second step is observed.

    A step emits 1 .. ``max_tokens`` tokens (a chain's ``gamma`` drafts and its bonus), so
    ``max_tokens + 1`` tokens see every position of the first step on some branch and every
    position of the second step after a first-position rejection (bugs that carry state from
    one step to the next, such as a stale draft law, show only there).

    >>> import exactspec as es
    >>> default_tokens(es.drafts.chain(4)), default_tokens(es.drafts.tree((2, 1)))
    (6, 4)
    """
    n = _positions(proposer)
    return 2 if n is None else n + 1


def horizon_scope(proposer: Any, tokens: int) -> dict[Any, Any]:
    """What a horizon of ``tokens`` observes of a step: positions per step and the unobserved ones.

    Positions are 0-based (a chain's position ``gamma`` is the bonus token). The first step's
    position ``j`` is observed on some branch iff ``j < tokens``; the second step starts after at
    least one token, so its position ``j`` is observed iff ``j < tokens - 1``.

    >>> s = horizon_scope(__import__("exactspec").drafts.chain(2), 2)
    >>> s["unobserved"], s["complete"]
    ({'first_step': [2], 'second_step': [1, 2]}, False)
    """
    n = _positions(proposer)
    if n is None:
        return {"tokens": tokens, "positions_per_step": None, "complete": False,
                "unobserved": None, "note": "the proposer does not say how many tokens a step emits "
                                            "(no max_tokens()): which positions were observed is unknown"}
    first = [j for j in range(n) if j >= tokens]
    second = [j for j in range(n) if j >= tokens - 1]
    scope: dict[Any, Any] = {"tokens": tokens, "positions_per_step": n, "complete": not first and not second,
                   "unobserved": {"first_step": first, "second_step": second}}
    if first or second:
        scope["note"] = (_unobserved_text(n, first, second) + f"; use tokens >= {n + 1} to observe every position "
                         "of a first and a second step")
    return scope


def _unobserved_text(n: int, first: list[Any], second: list[Any]) -> str:
    def names(js: list[Any]) -> str:
        return f"position {js[0]}" if len(js) == 1 else f"positions {js[0]}..{js[-1]}"
    parts = [f"{names(first)} of the first step"] if first else []
    if second:
        parts.append(f"{names(second)} of a second step")
    return (f"the horizon never observes {' nor '.join(parts)} (positions 0..{n - 1}; position {n - 1} is a step's "
            "last token, a chain's bonus token)")


def audit(*, target: Model, rule: Any, draft: Model | None = None, proposer: Any = None,
          prompt: Sequence[int] = (), tokens: int | None = None, decoding: str | None = None,
          field: str | Field = "fraction", precision: int | None = None, tolerance: Any = None,
          expected: Model | None = None, budget: Budget | None = None, closed_form: bool = True,
          worst: int = 5, backend: str = "auto", rng_model: str = "continuous",
          exact_floats: bool = False, progress: Any = None) -> AuditReport:
    """Compute the exact law of the first ``tokens`` tokens emitted after ``prompt`` and compare it.

    ``tokens`` defaults to :func:`default_tokens` (the proposer's ``max_tokens() + 1``: every
    position of a first and a second step is observed). A smaller horizon is allowed, but the
    report's ``scope`` lists the positions it never observes and its summary warns about them.

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
    rational it is (what auditing float implementations needs). ``progress``: None or True (default)
    shows the audit's progress on stderr by the probability of the outcomes decided so far (a bar with
    an ETA on a terminal past a second, a line every few seconds in a log), False nothing, a function
    ``progress(done, total)`` receives it (percent, of 100).

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> r = es.audit(target=es.models.context_free((F(3, 5), F(2, 5))),
    ...              draft=es.models.context_free((F(1, 2), F(1, 2))),
    ...              proposer=es.drafts.chain(gamma=1), rule=es.rules.speculative_sampling, tokens=1)
    >>> r.output == {(0,): F(3, 5), (1,): F(2, 5)}, r.tv, r.lossless
    (True, Fraction(0, 1), True)
    """
    t0 = time.perf_counter()
    check_budget(budget, "audit")
    inputs = validate_audit(target=target, rule=rule, draft=draft, proposer=proposer, prompt=prompt, tokens=tokens,
                            decoding=decoding, field=field, precision=precision, tolerance=tolerance,
                            expected=expected, worst=worst, backend=backend, rng_model=rng_model)
    return run_audit(inputs, budget=budget, closed_form=closed_form, exact_floats=exact_floats, start=t0, lazy=True,
                     progress=progress)


# -- the steps of an audit: validate, build the engine, compute the laws, assemble the report ----------------

@dataclass(frozen=True)
class AuditInputs:
    """An audit's inputs, checked and with their defaults filled in (what :func:`validate_audit` returns).

    ``prompt`` is a tuple of token ids, ``field`` a :class:`~exactspec.fields.Field`, ``expected``
    the declared target model (``None``: the target's own law), ``lattice`` the rng model's lattice
    (``None`` for ``"continuous"``).

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> inputs = validate_audit(target=m, draft=m, rule="greedy_match", prompt=[1])
    >>> inputs.rule.name, inputs.prompt, inputs.tokens, inputs.decoding
    ('greedy_match', (1,), 6, 'greedy')
    """

    target: Model
    rule: Rule
    proposer: Any
    draft: Model | None
    prompt: tuple[int, ...]
    tokens: int
    decoding: str
    field: Field
    expected: Model | None
    worst: int
    rng_model: str
    lattice: RngLattice


def validate_audit(*, target: Model, rule: Any, draft: Model | None = None, proposer: Any = None,
                   prompt: Sequence[int] = (), tokens: int | None = None, decoding: str | None = None,
                   field: str | Field = "fraction", precision: int | None = None, tolerance: Any = None,
                   expected: Model | None = None, worst: int = 5, backend: str = "auto",
                   rng_model: str = "continuous") -> AuditInputs:
    """Check :func:`audit`'s inputs and fill in its defaults, raising its errors; computes nothing.

    The same arguments as :func:`audit` less the engine's options (``budget``, ``closed_form``,
    ``exact_floats``); every entry point that audits an instance validates it here, so its
    messages are :func:`audit`'s.

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> validate_audit(target=m, draft=m, rule="mss").proposer
    tree(expansion=(2, 2, 1), children='iid', claim='draft')
    >>> validate_audit(target=m, draft=m, rule="mss", tokens=0)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: tokens must be an int >= 1, got 0
    """
    if not isinstance(target, Model):
        raise InvalidType(f"target must be an exactspec model (es.models.*), got {target!r}")
    rule_obj: Rule = as_rule(rule)
    if proposer is None:   # the proposer the rule's claim is about, else the family's default
        from .drafts import tree
        proposer = rule_obj.proposer or (chain(4) if rule_obj.family == "chain" else tree((2, 2, 1)))
    if not hasattr(proposer, "step") or not hasattr(proposer, "family"):
        raise InvalidType(f"proposer must be an exactspec proposer (es.drafts.*), got {proposer!r}")
    if proposer.family != rule_obj.family:
        raise InvalidValue(f"rule {rule_obj.name} verifies {rule_obj.family}s but the proposer drafts a "
                           f"{proposer.family}")
    if proposer.needs_draft() and draft is None:
        raise InvalidValue(f"the {proposer.describe()} proposer needs a draft model: pass draft=")
    for name, m in [("draft model", draft), ("expected model", expected)] + [
            (f"merge draft model {i}" if getattr(proposer, "kind", "") == "merge" else "the proposer's sampled_from model",
             m) for i, m in enumerate(getattr(proposer, "models", []))]:
        if m is not None and not isinstance(m, Model):
            label = name.removesuffix(" model") if name in ("draft model", "expected model") else name
            raise InvalidType(f"{label} must be an exactspec model (es.models.*), got {m!r}")
        if m is not None and m.vocab != target.vocab:
            raise InvalidValue(f"{name} has vocab {m.vocab} but the target has vocab {target.vocab}")
    claims = getattr(proposer, "claims", None)
    if claims and len(next(iter(claims.values()))) != target.vocab:
        raise InvalidValue(f"the fixed tree's claimed laws have {len(next(iter(claims.values())))} entries but the "
                           f"target has vocab {target.vocab}")
    if tokens is None:
        tokens = default_tokens(proposer)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise InvalidType(f"tokens must be an int >= 1, got {tokens!r}")
    elif tokens < 1:
        raise InvalidValue(f"tokens must be an int >= 1, got {tokens!r}")
    if expected is None and rule_obj.declared_target is not None:
        expected = rule_obj.declared_target(target, draft)
    if decoding is None:
        decoding = rule_obj.decoding
    if decoding not in DECODINGS:
        raise InvalidValue(f"decoding must be one of {', '.join(DECODINGS)}, got {decoding!r}")
    if expected is not None and decoding == "greedy":
        raise InvalidValue("expected= declares a sampling law; it cannot be combined with decoding='greedy'")
    if isinstance(worst, bool) or not isinstance(worst, int):
        raise InvalidType(f"worst must be an int >= 0, got {worst!r}")
    elif worst < 0:
        raise InvalidValue(f"worst must be an int >= 0, got {worst!r}")
    fld = get_field(field, precision=precision, tolerance=tolerance, backend=backend)
    prompt_t = prompt_tokens(prompt, target.vocab)
    lattice = lattice_for(rng_model)
    return AuditInputs(target=target, rule=rule_obj, proposer=proposer, draft=draft, prompt=prompt_t, tokens=tokens,
                       decoding=decoding, field=fld, expected=expected, worst=worst, rng_model=rng_model,
                       lattice=lattice)


def build_engine(inputs: AuditInputs, *, budget: Budget | None = None, closed_form: bool = True,
                 exact_floats: bool = False, on_error: str = "raise", lazy: bool = False) -> Engine:
    """The engine that enumerates ``inputs`` (nothing is enumerated until :func:`compute_laws`).

    ``lazy=True`` lets the engine defer a rule's categorical draws until it looks at them (see
    :class:`~exactspec.enumerate.rng.DeferredToken`): what :func:`audit` asks for rules; a
    sampler audit, whose code hands drawn tokens to numpy and torch, does not.

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> build_engine(validate_audit(target=m, draft=m, rule="speculative_sampling")).use_closed_form
    True
    """
    return Engine(inputs.rule, inputs.proposer, inputs.target, inputs.draft, inputs.field, budget=budget,
                  closed_form=closed_form, lattice=inputs.lattice, exact_floats=exact_floats, on_error=on_error,
                  lazy=lazy)


@dataclass
class AuditLaws:
    """What an audit computed: the output and expected laws, their TV, and the efficiency figures.

    Numbers are Fractions in the fraction field, whatever rational type computed them.

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> inputs = validate_audit(target=m, draft=m, rule="speculative_sampling", proposer=es.drafts.chain(1), tokens=1)
    >>> laws = compute_laws(build_engine(inputs), inputs)
    >>> laws.output == laws.expected, laws.tokens_per_call
    (True, Fraction(2, 1))
    """

    output: dict[Any, Any]
    expected: dict[Any, Any]
    tv: Any
    tokens_per_call: Any
    accepted_per_call: Any
    nodes_per_call: Any
    target_calls: Any
    #: with ``on_error="record"``: per crash (``"Type: message"``), its exact probability and the line of the
    #: rule's code it happened at (``{what: (probability, "file:line in function")}``); None otherwise
    crashes: dict[Any, Any] | None = None


def compute_laws(engine: Engine, inputs: AuditInputs) -> AuditLaws:
    """Enumerate: the efficiency figures, the output law, the expected law and their TV, within the budget.

    >>> import exactspec as es
    >>> from fractions import Fraction as F
    >>> inputs = validate_audit(target=es.models.context_free((F(3, 5), F(2, 5))),
    ...                         draft=es.models.context_free((F(1, 2), F(1, 2))), proposer=es.drafts.chain(1),
    ...                         rule="greedy_match_sampled", tokens=1)
    >>> compute_laws(build_engine(inputs), inputs).tv
    Fraction(1, 5)
    """
    fld, prompt_t, tokens = inputs.field, inputs.prompt, inputs.tokens
    # the budget holds for everything below: the watchdog stops code that checks no clock, and a
    # MemoryError / RecursionError is a budget too (exit 3), never a verdict
    with engine.guard():
        try:
            tpc, accepted, nodes = engine.efficiency(prompt_t, tokens)
            output, calls = engine.output(prompt_t, tokens)
        finally:
            engine.close()
        crashes: dict[str, Any] | None = None   # what crashed -> (its probability, where)
        if engine.steps.record:   # the branches that crashed leave the output law; their mass is reported apart
            crashes, kept = {}, {}
            for k, v in output.items():
                if is_crash(k):
                    what, site = engine.steps.crashes[crash_index(k)]
                    crashes[what] = (crashes.get(what, (fld.zero, site))[0] + v, site)
                else:
                    kept[k] = v
            output = kept
        shared = None
        if inputs.decoding == "greedy":
            exp = {greedy_sequence(inputs.target, prompt_t, tokens): fld.one}
        else:
            ref = inputs.expected if inputs.expected is not None else inputs.target
            shared = _shared_expected(ref, prompt_t, tokens, fld, engine)
            exp = shared[1] if shared is not None else \
                target_law(ref, prompt_t, tokens, fld, [ref.order], meter=engine.meter, fast=engine.fast)
        tv = total_variation(output, exp)
    ex = fld.export if engine.fast else _export_plain(fld)
    if ex(fld.one) is not fld.one:  # hand users Fractions whatever rational type computed them
        output = {k: ex(v) for k, v in output.items()}
        if shared is None:
            exp = {k: ex(v) for k, v in exp.items()}
        else:   # exported once, a copy for each report
            if shared[2] is None:
                shared[2] = {k: ex(v) for k, v in exp.items()}
            exp = dict(shared[2])
        tv, tpc, calls = ex(tv), ex(tpc), ex(calls)
        accepted = None if accepted is None else ex(accepted)
        nodes = ex(nodes) if not isinstance(nodes, int) else nodes
        if crashes:
            crashes = {k: (ex(p), site) for k, (p, site) in crashes.items()}
    return AuditLaws(output=output, expected=exp, tv=tv, tokens_per_call=tpc, accepted_per_call=accepted,
                     nodes_per_call=nodes, target_calls=calls, crashes=crashes)


#: inside :func:`shared_expected_laws`: (target, prompt, tokens, rational type) -> [target, its law, the law exported
#: or None, the outcomes each token's level holds]
_EXPECTED: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar("exactspec_expected_laws", default=None)


@contextlib.contextmanager
def shared_expected_laws(memo: dict[Any, Any] | None = None) -> Iterator[None]:
    """Inside the block, audits in exact fields of one target (``expected=``), prompt and horizon share its law.

    The expected law is computed (and converted to Fractions) once, not once per audit: for a caller
    auditing many configurations of one instance whose models no one changes meanwhile
    (``exactspec check``). Each report gets its own dict; the outcomes it holds still count
    against each audit's budget. ``memo`` (a dict the caller keeps): the laws are shared with the
    blocks given the same dict.

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> with shared_expected_laws():
    ...     a = audit(target=m, draft=m, rule="speculative_sampling")
    ...     b = audit(target=m, draft=m, rule="greedy_match_sampled")
    >>> a.expected == b.expected and a.expected is not b.expected
    True
    """
    token = _EXPECTED.set({} if memo is None else memo)
    try:
        yield
    finally:
        _EXPECTED.reset(token)


def _shared_expected(ref: Model, prompt: tuple[Any, ...], tokens: int, fld: Field, engine: Engine) -> list[Any] | None:
    """The memo entry of ``ref``'s law inside :func:`shared_expected_laws` (computed on a miss), or None outside it
    (and in an inexact field)."""
    memo = _EXPECTED.get()
    if memo is None or not engine.fast or not fld.exact:
        return None
    key = (id(ref), prompt, tokens, getattr(fld, "Q", None))
    hit = memo.get(key)
    if hit is not None and hit[0] is ref:
        for n in hit[3]:
            engine.meter.hold(n)
        return cast("list[Any] | None", hit)
    law = target_law(ref, prompt, tokens, fld, [ref.order], meter=engine.meter, fast=True)
    levels = [len({k[:n] for k in law}) for n in range(1, tokens + 1)]   # what the levels held, as counted
    hit = memo[key] = [ref, law, None, levels]
    return hit


def _export_plain(fld: Field) -> Any:
    """An inexact field's conversion to Fractions (reduced again: same Fractions, slower)."""
    if fld.export(fld.one) is fld.one:
        return fld.export
    from fractions import Fraction
    return lambda x: x if type(x) is Fraction else Fraction(int(x.numerator), int(x.denominator))


def assemble_report(inputs: AuditInputs, engine: Engine, laws: AuditLaws, *, seconds: float) -> AuditReport:
    """The :class:`~exactspec.AuditReport` of computed laws: the instance, the horizon's scope, the counters.

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> inputs = validate_audit(target=m, draft=m, rule="speculative_sampling", proposer=es.drafts.chain(1))
    >>> engine = build_engine(inputs)
    >>> report = assemble_report(inputs, engine, compute_laws(engine, inputs), seconds=0.0)
    >>> report.instance["tokens"], report.scope["complete"], report.lossless
    (3, True, True)
    """
    rule_obj, proposer, target, draft = inputs.rule, inputs.proposer, inputs.target, inputs.draft
    instance = {"vocab": target.vocab, "proposer": proposer.describe(), "prompt": list(inputs.prompt),
                "tokens": inputs.tokens, "decoding": inputs.decoding, "target": target.name,
                "draft": None if draft is None else draft.name}
    if inputs.rng_model != "continuous":
        instance["rng_model"] = inputs.rng_model
    if inputs.expected is not None:
        instance["expected"] = inputs.expected.name
    scope = horizon_scope(proposer, inputs.tokens) | {"of": "this instance"}
    fld = inputs.field
    from .rules.record import configuration
    # a claim with a condition (stale_draft_probs: biased when gamma >= 2 ...) is judged by the claim at this
    # configuration
    claim = rule_obj.claim_for(configuration(proposer, target=target, draft=draft, tokens=inputs.tokens))
    report = AuditReport(rule=rule_obj.name, claim=claim, instance=instance, field=fld, output=laws.output,
                         expected=laws.expected, tv=laws.tv, tolerance=fld.tolerance(),
                         tokens_per_call=laws.tokens_per_call, target_calls=laws.target_calls, seconds=seconds,
                         paths=engine.meter.paths, step_laws=engine.meter.steps, reference=rule_obj.reference,
                         worst_count=inputs.worst, accepted_per_call=laws.accepted_per_call,
                         nodes_per_call=laws.nodes_per_call, scope=scope)
    if laws.crashes is not None:   # recorded crashes (on_error="record"), as a whole-loop audit states them
        report.extra["error_probability"] = fld.to_str(sum((p for p, _ in laws.crashes.values()), fld.zero))
        report.extra["errors"] = {k: fld.to_str(p) for k, (p, _) in laws.crashes.items()}
        report.extra["error_sites"] = {k: site for k, (_, site) in laws.crashes.items()}
    return report


def run_audit(inputs: AuditInputs, *, budget: Budget | None = None, closed_form: bool = True,
              exact_floats: bool = False, start: float | None = None, on_error: str = "raise",
              lazy: bool = False, progress: Any = False, what: str | None = None) -> AuditReport:
    """Audit validated inputs: build the engine, compute the laws, assemble the report.

    ``start`` is the ``time.perf_counter()`` the report's ``seconds`` count from (default: now).
    ``on_error="record"``: a branch on which the rule's own code raises is no error but a crash,
    reported with its exact probability (see :func:`compute_laws`). ``lazy``: see :func:`build_engine`.
    ``progress`` (default: none) as :func:`audit`'s, its line or bar named ``what`` (default ``audit RULE``).

    >>> import exactspec as es
    >>> m = es.models.context_free(("1/2", "1/2"))
    >>> run_audit(validate_audit(target=m, draft=m, rule="speculative_sampling")).verdict
    'lossless'
    """
    t0 = time.perf_counter() if start is None else start
    engine = build_engine(inputs, budget=budget, closed_form=closed_form, exact_floats=exact_floats,
                          on_error=on_error, lazy=lazy)
    shown = _progress.resolve(progress, what or f"audit {inputs.rule.name}", unit=_progress.PERCENT)
    if shown is not None:
        engine.meter.mass = _progress.MassProgress(shown)
    try:
        laws = compute_laws(engine, inputs)
    finally:
        _progress.close(shown)
    return assemble_report(inputs, engine, laws, seconds=time.perf_counter() - t0)
