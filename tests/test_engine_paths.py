"""The engine's path (forward composition, deferred last-token draws, memoised closed-form rows) gives the laws of
the plain recursion of ``benchmarks/baseline.py`` and of its earlier path (deleted in issue 36; what it reported
here is recorded: ``tests/old_paths.py``) exactly; the engine knows rules only as objects handed to it."""

from __future__ import annotations

import ast
from fractions import Fraction as F
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import exactspec as es
from exactspec.enumerate import Engine
from exactspec.enumerate.rng import DeferredToken, _Touched
from exactspec.fields import get_field
from exactspec.instances import make_instance

from benchmarks.baseline import baseline_calls, baseline_law, baseline_target_law, memoised_law

import old_paths

ENGINE_DIR = Path(es.__file__).parent / "enumerate"


def audit_both(**kw):
    """What the earlier path reported for this audit (recorded), and the audit on today's path."""
    new = es.audit(**kw)
    old = old_paths.recorded("engine", lambda: es.audit(**kw))
    return old, new


def assert_baseline(report, fn, target, draft, *, gamma, prompt, tokens):
    """The report's laws, TV, verdict and efficiency are the plain step's, composed by a plain memoised recursion
    (``benchmarks/baseline.py``)."""
    output = memoised_law(fn, target, draft, gamma=gamma, prompt=prompt, tokens=tokens)
    expected = baseline_target_law(target, prompt=prompt, tokens=tokens)
    assert report.output == output and report.expected == expected
    tv = sum(abs(output.get(k, 0) - expected.get(k, 0)) for k in set(output) | set(expected)) / 2
    assert report.tv == tv and report.verdict == ("lossless" if tv == 0 else "biased")
    first, calls = baseline_calls(fn, target, draft, gamma=gamma, prompt=prompt, tokens=tokens)
    assert report.tokens_per_call == first and report.target_calls == calls


def assert_same(old, new):
    assert new.output == old.output
    assert new.expected == old.expected
    assert new.tv == old.tv and new.verdict == old.verdict
    assert new.tokens_per_call == old.tokens_per_call
    assert new.accepted_per_call == old.accepted_per_call
    assert new.target_calls == old.target_calls
    assert new.nodes_per_call == old.nodes_per_call


# -- user rules written against the rng ------------------------------------------------------------------
def ss_uniform(step, rng):
    """Speculative sampling with a lazy uniform (lossless)."""
    for j in range(step.gamma):
        x, p, q = step.draft(j), step.target(j), step.claimed(j)
        if rng.uniform() < p[x] / q[x]:
            yield x
        else:
            yield rng.categorical(es.laws.residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def resample_target(step, rng):
    """Rejection emits a fresh target sample instead of the residual (biased)."""
    for j in range(step.gamma):
        x, p, q = step.draft(j), step.target(j), step.claimed(j)
        if rng.uniform() < p[x] / q[x]:
            yield x
        else:
            yield rng.categorical(p)
            return
    yield rng.categorical(step.target(step.gamma))


def looks_at_its_sample(step, rng):
    """Draws a target sample and compares it with the draft (touches every deferred draw): biased."""
    for j in range(step.gamma):
        x = step.draft(j)
        y = rng.categorical(step.target(j))
        if y == x:
            yield x
        else:
            yield int(y)
            return
    yield rng.categorical(step.target(step.gamma))


def swallows_a_touch(step, rng):
    """Looks at its last sample inside a bare ``except`` (the touch must still be seen) and emits it."""
    y = rng.categorical(step.target(0))
    try:
        bigger = y > 0
    except BaseException:
        bigger = False
    yield y if bigger else 0


def hashes_and_formats(step, rng):
    """Uses the sample as a dict key and in a string before emitting it."""
    y = rng.categorical(step.target(0))
    seen = {y: f"{y}"}
    yield next(iter(seen))


def draws_then_ignores(step, rng):
    """Draws a sample it never looks at, then emits the draft: the unread draw must not change the law."""
    rng.categorical(step.target(0))
    yield step.draft(0)


@es.rules.rule(family="tree", claim="biased")
def tree_sample_match(step, rng):
    """A tree rule written by a user: sample from the target, follow the matching child, else emit the sample."""
    node = step.root
    while True:
        y = rng.categorical(step.target(node))
        match = next((c for c in step.children(node) if step.token(c) == y), None)
        if match is None:
            yield y
            return
        yield step.accept(match)
        node = match


def emits_a_sample_then_the_draft(step, rng):
    """Emits a target sample unread and then a draft: the deferred sample is not the last token kept."""
    yield rng.categorical(step.target(0))
    yield step.draft(step.gamma - 1)


def draws_before_it_decides(step, rng):
    """Draws a target sample first, forks on a uniform, then emits the sample last or first (biased)."""
    y = rng.categorical(step.target(0))
    x = step.draft(0)
    if rng.uniform() < step.target(0)[x]:
        yield x
        yield y
    else:
        yield y
        yield rng.categorical(step.target(1))


USER_CHAIN = [ss_uniform, resample_target, looks_at_its_sample, swallows_a_touch, hashes_and_formats,
              draws_then_ignores, emits_a_sample_then_the_draft, draws_before_it_decides]


@pytest.mark.parametrize("rule", USER_CHAIN, ids=lambda r: r.__name__)
@pytest.mark.parametrize("vocab, order, gamma, tokens", [(3, 1, 2, 3), (4, 2, 3, 2), (3, 0, 2, 4)])
def test_user_chain_rules_same_laws_on_both_paths(rule, vocab, order, gamma, tokens):
    inst = make_instance(vocab=vocab, order=order, gamma=gamma, tokens=tokens)
    old, new = audit_both(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule,
                          prompt=inst.prompt, tokens=tokens)
    assert_same(old, new)
    assert_baseline(new, rule, inst.target, inst.draft, gamma=gamma, prompt=inst.prompt, tokens=tokens)


def test_a_lossless_and_a_biased_user_rule_keep_their_verdicts():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=3)
    kw = dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=3)
    assert [r.verdict for r in audit_both(rule=ss_uniform, **kw)] == ["lossless", "lossless"]
    assert [r.verdict for r in audit_both(rule=resample_target, **kw)] == ["biased", "biased"]


@pytest.mark.parametrize("rule", [r for r in es.rules.catalog() if r.family == "chain"], ids=lambda r: r.name)
@pytest.mark.parametrize("closed_form", [True, False])
def test_catalog_chain_rules_same_laws_on_both_paths(rule, closed_form):
    inst = make_instance(vocab=4, order=2, gamma=3, tokens=4)
    old, new = audit_both(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule,
                          prompt=inst.prompt, tokens=4, closed_form=closed_form)
    assert_same(old, new)


@pytest.mark.parametrize("claim", ["draft", "point_mass"])
def test_argmax_drafts_and_point_mass_claims_same_laws(claim):
    inst = make_instance(vocab=4, order=2, gamma=3, tokens=4, sampling="argmax", claim=claim)
    for closed_form in (True, False):
        old, new = audit_both(target=inst.target, draft=inst.draft, proposer=inst.proposer,
                              rule=es.rules.speculative_sampling, prompt=inst.prompt, tokens=4,
                              closed_form=closed_form)
        assert_same(old, new)


@pytest.mark.parametrize("rule", [r for r in es.rules.catalog() if r.family == "tree"] + [tree_sample_match],
                         ids=lambda r: getattr(r, "name", getattr(r, "__name__", "")))
def test_tree_rules_same_laws_on_both_paths(rule):
    target = es.models.random_table(vocab=3, order=1, seed=4)
    draft = es.models.perturbed(target, seed=5)
    prop = es.drafts.tree((2, 1), children="topk" if getattr(rule, "name", "") in (
        "greedy_tree", "shared_coin_tree", "typical_acceptance") else "iid",
        claim="point_mass" if getattr(rule, "name", "") in ("greedy_tree", "shared_coin_tree",
                                                            "typical_acceptance") else "draft")
    old, new = audit_both(target=target, draft=draft, proposer=prop, rule=rule, prompt=(0,), tokens=4)
    assert_same(old, new)


def test_the_check_configurations_same_laws_on_both_paths():
    from exactspec.instances import check_cases, default_instance
    inst = default_instance()
    small = make_instance(vocab=3, order=2, gamma=2, tokens=4)
    for case in check_cases(small):
        draft = None if case.proposer.family == "tree" and not case.proposer.needs_draft() else small.draft
        old, new = audit_both(target=small.target, draft=draft, proposer=case.proposer, rule=case.rule,
                              prompt=small.prompt, tokens=case.tokens)
        assert_same(old, new)
    assert inst.tokens == 6   # the real check runs these at vocab 5, 6 tokens (benchmarks/bench_speed_engine.py)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10 ** 6), vocab=st.integers(2, 4), order=st.integers(0, 2), gamma=st.integers(1, 3),
          tokens=st.integers(1, 5), which=st.sampled_from(USER_CHAIN + [es.rules.speculative_sampling.fn,
                                                                     es.rules.sample_and_match.fn]),
       zero=st.sampled_from([0.0, 0.3]))
def test_random_instances_same_laws_as_the_plain_recursion(seed, vocab, order, gamma, tokens, which, zero):
    target = es.models.random_table(vocab=vocab, order=order, seed=seed, zero_prob=zero)
    draft = es.models.random_table(vocab=vocab, order=order, seed=seed + 1, zero_prob=zero)
    kw = dict(target=target, draft=draft, proposer=es.drafts.chain(gamma), rule=which,
              prompt=tuple(i % vocab for i in range(order)), tokens=tokens)
    assert_baseline(es.audit(**kw), which, target, draft, gamma=gamma, prompt=kw["prompt"], tokens=tokens)


def test_inexact_fields_run_the_earlier_path_bit_for_bit():
    inst = make_instance(vocab=4, order=2, gamma=3, tokens=4)
    for field in ("float", "mpmath"):
        old, new = audit_both(target=inst.target, draft=inst.draft, proposer=inst.proposer,
                              rule=ss_uniform, prompt=inst.prompt, tokens=4, field=field)
        assert list(new.output.items()) == list(old.output.items()) and new.tv == old.tv
        assert new.paths == old.paths


def test_errors_of_a_rule_are_the_same_on_both_paths():
    def emits_outside_the_vocabulary(step, rng):
        yield rng.categorical((F(1, 2), F(1, 4), F(1, 4)))    # token 2 with vocab 2
    half = es.models.context_free(("1/2", "1/2"))

    def message():
        with pytest.raises(es.RuleError) as info:
            es.audit(target=half, draft=half, rule=emits_outside_the_vocabulary, proposer=es.drafts.chain(1),
                     tokens=1)
        return str(info.value)
    msgs = [old_paths.recorded("engine", message), message()]
    assert msgs[0] == msgs[1] and "outside 0..1" in msgs[0]


# -- the deferred draw itself -------------------------------------------------------------------------------------
def test_a_deferred_draw_stands_for_all_its_values_and_any_use_is_seen():
    from exactspec.enumerate.rng import PathRng
    rng = PathRng((), F(1), get_field(backend="python"), [], {})
    rng.defer = True
    tok = rng.categorical((F(1, 3), F(2, 3)))
    assert type(tok) is DeferredToken and tok.values() == [(0, F(1, 3)), (1, F(2, 3))]
    for use in (lambda t: t == 0.0, lambda t: t == F(0), lambda t: hash(t), lambda t: int(t), lambda t: [0, 1][t], lambda t: t + 1,
                lambda t: str(t), lambda t: t.numerator, lambda t: bool(t), lambda t: f"{t}", lambda t: t < 1):
        with pytest.raises(_Touched):
            use(tok)
    assert rng.draw_now((F(1, 2), F(1, 2))) == 0   # a proposer's draw is never deferred


def test_comparing_a_deferred_draw_with_an_int_narrows_it():
    from exactspec.enumerate.rng import PathRng
    stack = []
    rng = PathRng((), F(1), get_field(backend="python"), stack, {})
    rng.defer = True
    tok = rng.categorical((F(1, 2), F(1, 4), F(1, 4)))
    assert (tok == 5) is False and not stack                 # not a value it can take: no fork
    assert (tok != 1) is False and rng.weight == F(1, 4)      # a fork: equal taken first, not-equal pushed
    assert stack[-1][1] == F(3, 4) and tok.values() == [(1, F(1))]
    assert (tok == 1) is True and len(stack) == 1             # decided: no second fork


def test_a_rule_s_draw_is_deferred_whichever_token_it_computes():
    # the residual of a rejection at the first position is one branch, not one per token, at any horizon
    p, q = es.models.context_free((F(1, 2), F(1, 3), F(1, 6))), es.models.context_free((F(1, 6), F(1, 3), F(1, 2)))
    env = es.enumerate.env.Env(p, q, get_field(backend="python"))
    steps = es.enumerate.StepEnumerator(lambda step, rng: (yield rng.categorical(step.target(0))),
                                        es.drafts.chain(2), env, lazy=True)
    assert steps.law((), 3) == {(0,): F(1, 2), (1,): F(1, 3), (2,): F(1, 6)}
    assert steps.meter.paths == 1
    both = es.enumerate.StepEnumerator(emits_a_sample_then_the_draft, es.drafts.chain(2), env, lazy=True)
    law = both.law((), 2)          # the sample is not the last token kept: drawn for real, branch by branch
    assert law == {(y, x): p(())[y] * q(())[x] for y in range(3) for x in range(3)}
    assert both.redraws == 1


def test_chain_steps_over_whole_contexts_rebuild_the_contexts_past_the_kept_ones(monkeypatch):
    import importlib
    chain_module = importlib.import_module("exactspec.drafts.chain")   # (exactspec.drafts.chain is the function)
    target = es.models.from_function(vocab=2, order=None,
                                     fn=lambda ctx: (F(1, 2 + len(ctx) % 3), 1 - F(1, 2 + len(ctx) % 3)))
    draft = es.models.from_function(vocab=2, order=None,
                                    fn=lambda ctx: (F(1, 3), F(2, 3)) if sum(ctx) % 2 else (F(3, 4), F(1, 4)))
    kw = dict(target=target, draft=draft, proposer=es.drafts.chain(4), rule=ss_uniform, prompt=(1,), tokens=5)
    kept = es.audit(**kw)
    monkeypatch.setattr(chain_module, "KEEP_CONTEXTS", 1)
    rebuilt = es.audit(**kw)
    assert_same(kept, rebuilt)
    assert kept.output == baseline_law(ss_uniform, target, draft, gamma=4, prompt=(1,), tokens=5)


def test_the_first_step_law_is_kept_cut_at_the_horizon_not_uncut():
    # memory linear in outcomes: at vocab 16, gamma 4, 4 tokens the uncut first step has 16**5 outcomes
    inst = make_instance(vocab=5, order=2, gamma=4, tokens=3)
    eng = Engine(ss_uniform, inst.proposer, inst.target, inst.draft, get_field(), lazy=True)
    eng.efficiency(inst.prompt, 3)
    eng.output(inst.prompt, 3)
    assert all(h is not None for _, h in eng._step_memo) and max(len(v) for v in eng._step_memo.values()) <= 5 ** 3 + 25 + 5


# -- layering: the engine knows no rule by name ------------------------------------------------------------------
def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
            found.update(f"{base}.{a.name}" if not node.module else base for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("path", sorted(ENGINE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_nothing_from_the_layers_above_it(path):
    above = ("rules", "samplers", "counterexamples", "cli", "_audit", "sweep")
    for imp in _imports(path):
        parts = imp.lstrip(".").split(".")
        if imp.startswith("..") or imp.startswith("exactspec"):
            head = parts[1] if imp.startswith("exactspec") and len(parts) > 1 else parts[0]
            assert head not in above, f"{path.name} imports {imp}"


def test_the_engine_takes_a_rule_object_and_refuses_a_name():
    half = es.models.context_free(("1/2", "1/2"))
    with pytest.raises(es.ExactSpecError, match=r"Engine takes a rule, not the name 'speculative_sampling': pass "
                                                 r"es.rules.get\('speculative_sampling'\)"):
        Engine("speculative_sampling", es.drafts.chain(1), half, half, get_field())
    eng = Engine(es.rules.get("speculative_sampling"), es.drafts.chain(1), half, half, get_field())
    assert eng.use_closed_form
    assert Engine(ss_uniform, es.drafts.chain(1), half, half, get_field()).rule.name == "ss_uniform"


def test_names_are_still_resolved_at_the_entry_points():
    half = es.models.context_free(("1/2", "1/2"))
    assert es.audit(target=half, draft=half, rule="speculative_sampling", tokens=2).lossless
    with pytest.raises(es.ExactSpecError) as info:
        es.audit(target=half, draft=half, rule="speculative", tokens=2)
    assert type(info.value) is es.errors.InvalidValue
    assert str(info.value) == ("unknown rule 'speculative': did you mean speculative_sampling? "
                               "(`exactspec rules` lists them)")


def test_a_function_that_does_not_bind_still_gets_its_hint_from_the_rule_record():
    def one_argument(step):
        return [0]
    half = es.models.context_free(("1/2", "1/2"))
    with pytest.raises(es.RuleError, match=r"exactspec calls a rule as fn\(step, rng\), and the two arguments did not bind"):
        es.audit(target=half, draft=half, rule=one_argument, tokens=1)


def crashes_after_a_one(step, rng):
    """Raises on the branches where a drawn token 1 follows an accepted draft (a crash, recorded as an outcome)."""
    x = step.draft(0)
    if rng.bernoulli(F(1, 2)):
        yield x
        y = rng.categorical(step.target(1))
        if y == 1:
            raise ValueError("one after an accepted draft")
        yield y
    else:
        yield rng.categorical(step.target(0))


@pytest.mark.parametrize("lazy", [False, True])
def test_recorded_crashes_are_the_same_on_both_paths(lazy):
    from exactspec._audit import run_audit, validate_audit
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=4)

    def run():
        inputs = validate_audit(target=inst.target, draft=inst.draft, proposer=inst.proposer,
                                rule=crashes_after_a_one, prompt=inst.prompt, tokens=4)
        return run_audit(inputs, on_error="record", lazy=lazy)
    old, new = old_paths.recorded("engine", run), run()
    assert_same(old, new)
    assert new.extra["errors"] == old.extra["errors"] and new.extra["error_probability"] != "0"
