"""Budgets that hold: time limits stop any rule, memory stays linear, resources run out as BudgetExceeded.

Tests named ``test_audit_*`` go through ``es.audit`` and need its computation wrapped in
``engine.guard()``; each runs under a safety deadline so that, unwrapped, it fails instead of hanging.
"""

import itertools
import threading
import time
import tracemalloc
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.enumerate import Budget, Engine, target_law
from exactspec.enumerate.env import Env
from exactspec.fields import get_field
from exactspec.instances import make_instance

HALF = es.models.context_free(("1/2", "1/2"))
ZERO = es.models.context_free(("1", "0"))      # always token 0: the output law is one sequence
SAFETY = 10     # seconds: a test whose budget does not hold fails at this deadline instead of hanging


def engine(rule, *, seconds=None, gamma=1, target=HALF, draft=HALF, **kw):
    return Engine(rule, es.drafts.chain(gamma), target, draft, get_field(), budget=Budget(seconds=seconds, **kw))


def busy_after_one_draw(step, rng):
    rng.bernoulli(F(1, 2))
    while True:
        pass
    yield 0


def endless_tokens(step, rng):
    while True:
        yield 0


def out_of_memory(step, rng):
    if rng.bernoulli(F(1, 2)):
        raise MemoryError
    yield 0


def too_deep(step, rng):
    def down(n):
        return down(n + 1)
    return down(0)


def safety():
    """An outer deadline: a budget that fails to hold fails the test at SAFETY seconds."""
    from exactspec.enumerate.watchdog import deadline
    return deadline(SAFETY)


def stopped_within(fn, what):
    t0 = time.perf_counter()
    with pytest.raises(es.BudgetExceeded) as info:
        with safety():
            fn()
    assert info.value.what == what, info.value
    assert info.value.limit != SAFETY, "the audit's own budget did not stop it"
    return info.value, time.perf_counter() - t0


# -- the watchdog ---------------------------------------------------------------------------------
def test_busy_loop_rule_stopped_by_the_engine_guard():
    eng = engine(busy_after_one_draw, seconds=0.5)

    def run():
        with eng.guard():
            eng.efficiency(())
    err, elapsed = stopped_within(run, "seconds")
    assert err.limit == 0.5 and elapsed < 10
    assert "busy_after_one_draw" in err.covered["stopped in"] and err.covered["paths"] == 1


def test_rule_catching_exception_cannot_swallow_the_deadline():
    def stubborn(step, rng):
        while True:
            try:
                while True:
                    pass
            except Exception:
                pass
        yield 0
    eng = engine(stubborn, seconds=0.3)

    def run():
        with eng.guard():
            eng.output((), 1)
    stopped_within(run, "seconds")


def test_guard_stops_a_busy_loop_in_another_thread():
    eng = engine(busy_after_one_draw, seconds=0.3)
    seen = []

    def run():
        try:
            with eng.guard():
                eng.output((), 1)
        except es.BudgetExceeded as e:
            seen.append(e.what)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(SAFETY)
    assert not t.is_alive(), "the deadline did not stop the rule in its thread"
    assert seen == ["seconds"]


def test_nested_deadlines_earliest_wins_with_its_own_limit():
    from exactspec.enumerate.watchdog import deadline
    for outer, inner in ((5, 0.2), (0.2, 5)):
        with pytest.raises(es.BudgetExceeded) as info:
            with deadline(outer):
                with deadline(inner):
                    while True:
                        pass
        assert info.value.limit == min(outer, inner)


def test_outer_deadline_still_holds_after_an_inner_one_is_caught():
    from exactspec.enumerate.watchdog import deadline
    caught = []
    with pytest.raises(es.BudgetExceeded) as info:
        with deadline(0.6):
            try:
                with deadline(0.2):
                    while True:
                        pass
            except es.BudgetExceeded as e:
                caught.append(e.limit)
            while True:
                pass
    assert caught == [0.2] and info.value.limit == 0.6


def test_no_limit_starts_no_thread_and_quick_blocks_leave_nothing_pending():
    from exactspec.enumerate.watchdog import deadline
    before = threading.active_count()
    with deadline(None):
        assert threading.active_count() == before
    for _ in range(50):
        with deadline(30):
            x = sum(range(100))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.2:   # a stray delivery would land here
        x += 1
    assert x > 0


@pytest.mark.parametrize("field, order", [("float", 2), ("fraction", None)])
def test_time_limit_stops_a_closed_form_efficiency_computation(field, order):
    # exactspec audit --rule speculative_sampling --gamma 9 --tokens 1 --time-limit 2 ran 17.5 s; in an inexact
    # field the closed form still walks every drafted prefix there; in an exact one it merges prefixes by model
    # state, so it walks them all only when the models read the whole context (order None): 5**9 prefixes
    inst = make_instance(vocab=5, order=2, gamma=9, tokens=1)
    target = es.models.random_table(vocab=5, order=order, seed=0)
    eng = Engine(es.rules.speculative_sampling, inst.proposer, target, es.models.perturbed(target, seed=1),
                 get_field(field), budget=Budget(seconds=0.5))

    def run():
        with eng.guard():
            eng.efficiency(inst.prompt)
            eng.output(inst.prompt, 1)
    err, elapsed = stopped_within(run, "seconds")
    assert elapsed < 10


# -- steps that never end ---------------------------------------------------------------------------
def test_endless_generator_is_a_rule_error_even_uncut():
    # efficiency runs the first step uncut: the 3rd token of a gamma=1 step is an error at once
    eng = engine(endless_tokens, gamma=1)
    with pytest.raises(es.RuleError, match=r"emitted more than 2 tokens in one step"):
        eng.efficiency(())


def test_audit_of_endless_generator_fails_fast():
    t0 = time.perf_counter()
    with pytest.raises(es.RuleError, match="more than 5 tokens"):
        es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(4), rule=endless_tokens, tokens=2)
    assert time.perf_counter() - t0 < 10


def test_endless_generator_in_a_thread_fails_fast():
    seen = []

    def run():
        try:
            es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(2), rule=endless_tokens, tokens=1)
        except es.RuleError as e:
            seen.append(str(e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(SAFETY)
    assert not t.is_alive() and seen and "more than 3 tokens" in seen[0]


def test_returned_sequence_longer_than_a_step_is_a_rule_error():
    def five(step, rng):
        return [0] * 5
    with pytest.raises(es.RuleError, match="more than 3 tokens"):
        es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(2), rule=five, tokens=1)


class _Endless:
    """An endless iterator that counts what was pulled from it (and stops the test past 1000 items)."""

    def __init__(self, value=None):
        self.pulled, self.value = 0, value

    def __iter__(self):
        return self

    def __next__(self):
        self.pulled += 1
        if self.pulled > 1000:   # the old code read on, growing a list past 3 GB: stop it here instead
            raise AssertionError("the engine materialises the rule's endless iterator")
        return self.pulled - 1 if self.value is None else self.value


@pytest.mark.parametrize("proposer, family, cap", [(es.drafts.chain(1), "chain", 2), (es.drafts.chain(3), "chain", 4),
                                                   (es.drafts.tree((2,)), "tree", 2), (es.drafts.tree((2, 2)), "tree", 3)])
@pytest.mark.parametrize("value", [None, 0])   # itertools.count() and itertools.repeat(0)
def test_a_rule_returning_an_endless_iterator_is_a_rule_error_read_no_further_than_a_step(proposer, family, cap, value):
    # `return itertools.count()` hung and grew past 3 GB: a step emits at most gamma + 1 (chain) or
    # depth + 1 (tree) tokens, so the engine reads one item more than that and stops
    made = []

    def endless(step, rng):
        made.append(_Endless(value))
        return made[-1]
    with pytest.raises(es.RuleError) as info:
        es.audit(target=HALF, draft=HALF, proposer=proposer, rule=es.Rule(endless, name="endless", family=family))
    assert str(info.value) == (f"rule endless emitted more than {cap} tokens in one step (at most {cap - 1} "
                               "accepted drafts plus one correction or bonus)")
    assert info.value.rule == "endless"
    assert [it.pulled for it in made] == [cap + 1]


@pytest.mark.parametrize("proposer, family, cap", [(es.drafts.chain(2), "chain", 3), (es.drafts.tree((2, 2)), "tree", 3)])
def test_itertools_count_and_an_endless_int_generator_are_rule_errors(proposer, family, cap):
    def counts(step, rng):
        return itertools.count()

    def ints_forever(step, rng):
        i = 0
        while True:
            yield i % 2
            i += 1
    for fn in (counts, ints_forever):
        with pytest.raises(es.RuleError, match=f"^rule {fn.__name__} emitted more than {cap} tokens in one step"):
            es.audit(target=HALF, draft=HALF, proposer=proposer, rule=es.Rule(fn, name=fn.__name__, family=family),
                     tokens=1)


def test_gamma_past_the_depth_budget_is_refused_at_once():
    # --gamma 1000000 --time-limit 5 was still running at 30 s with 4.3 GB
    inst = make_instance(vocab=5, order=2, gamma=1_000_000, tokens=1)
    t0 = time.perf_counter()
    with pytest.raises(es.BudgetExceeded) as info:
        es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule="speculative_sampling",
                 prompt=inst.prompt, tokens=1)
    assert info.value.what == "depth" and info.value.limit == 10_000
    assert info.value.covered["tokens one step may emit"] == 1_000_001
    assert time.perf_counter() - t0 < 10


# -- memory: linear in the length of a branch ------------------------------------------------------
def test_a_long_branch_costs_linear_memory():
    def runaway(step, rng):
        while True:
            rng.bernoulli(F(1, 2))
        yield 0
    tracemalloc.start()
    try:
        with pytest.raises(es.BudgetExceeded) as info:
            es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(1), rule=runaway, tokens=1,
                     budget=Budget(depth=5000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.what == "depth"
    assert peak < 20 * 2 ** 20, f"{peak / 2 ** 20:.0f} MiB for 5000 draws"   # quadratic prefixes before: ~96 MiB


def test_a_long_chain_step_costs_linear_memory():
    def spec_sampling(step, rng):   # speculative sampling by the rng alone: two draws per position
        for j in range(step.gamma):
            x, p, q = step.draft(j), step.target(j), step.claimed(j)
            if not rng.bernoulli(min(1, p[x] / q[x])):
                yield rng.categorical(es.laws.residual(p, q))
                return
            yield x
        yield rng.categorical(step.target(step.gamma))
    target = es.models.context_free(("3/5", "2/5"))
    tracemalloc.start()
    try:
        with pytest.raises(es.BudgetExceeded) as info:
            es.audit(target=target, draft=HALF, proposer=es.drafts.chain(4999), rule=spec_sampling, tokens=1,
                     budget=Budget(depth=5000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.what == "depth"
    assert peak < 20 * 2 ** 20, f"{peak / 2 ** 20:.0f} MiB for 2500 drafted positions"   # quadratic before: ~190 MiB


# -- recursion: depth the user controls is a loop ---------------------------------------------------
def test_two_thousand_tokens_need_no_recursion():
    # exactspec audit --tokens 2000 --vocab 2 gave a RecursionError (exit 1, read as "biased")
    r = es.audit(target=ZERO, draft=HALF, proposer=es.drafts.chain(4), rule=es.rules.speculative_sampling,
                 tokens=2000)
    assert r.output == r.expected == {(0,) * 2000: 1}
    assert sum(r.output.values()) == 1 and r.tv == 0


def test_two_thousand_tokens_by_the_rng_form_and_the_target_law():
    eng = Engine(es.rules.speculative_sampling, es.drafts.chain(3), ZERO, HALF, get_field(), closed_form=False)
    law, calls = eng.output((), 2000)
    assert law == target_law(ZERO, (), 2000, get_field()) == {(0,) * 2000: 1}
    assert 500 <= calls <= 2000


def test_exponential_output_law_stops_at_the_outcomes_budget():
    # --tokens 2000 --vocab 2 on seeded tables: 2**2000 outcomes; it used to die of RecursionError
    inst = make_instance(vocab=2, order=2, gamma=4, tokens=2000)
    t0 = time.perf_counter()
    with pytest.raises(es.BudgetExceeded) as info:
        es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule="speculative_sampling",
                 prompt=inst.prompt, tokens=2000, budget=Budget(outcomes=100_000))
    assert info.value.what == "outcomes" and info.value.covered["outcomes"] > 100_000
    assert time.perf_counter() - t0 < 10


def test_target_law_counts_outcomes_against_a_meter():
    from exactspec.enumerate.step import Meter
    # 2 + 4 + ... + 2**tokens outcomes held: 1022 for 9 tokens, 2046 for 10
    assert len(target_law(HALF, (), 9, get_field(), meter=Meter(Budget(outcomes=1100)))) == 512
    with pytest.raises(es.BudgetExceeded, match="outcomes limit 1100"):
        target_law(HALF, (), 10, get_field(), meter=Meter(Budget(outcomes=1100)))


def test_deep_tree_expected_nodes_need_no_recursion():
    env = Env(HALF, HALF, get_field())
    assert es.drafts.tree((1,) * 3000, children="topk").expected_nodes(env, ()) == 3000


# -- resources run out: typed budget errors -----------------------------------------------------
def test_memory_error_in_a_rule_is_a_memory_budget_error():
    eng = engine(out_of_memory)
    with pytest.raises(es.BudgetExceeded) as info:
        with eng.guard():
            eng.output((), 1)
    assert info.value.what == "memory" and "paths" in info.value.covered
    assert info.value.exit_code == 3


def test_recursion_error_in_a_rule_is_a_recursion_budget_error():
    eng = engine(too_deep)
    with pytest.raises(es.BudgetExceeded) as info:
        with eng.guard():
            eng.output((), 1)
    assert info.value.what == "recursion" and isinstance(info.value.limit, int)


# -- the same through es.audit (needs audit() wrapped in engine.guard()) --------------------------------
def test_audit_stops_a_busy_loop_rule():
    def run():
        es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(1), rule=busy_after_one_draw, tokens=1,
                 budget=Budget(seconds=0.5))
    err, elapsed = stopped_within(run, "seconds")
    assert err.limit == 0.5 and elapsed < 10


def test_audit_stops_a_busy_loop_rule_in_a_thread():
    seen = []

    def run():
        try:
            with safety():
                es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(1), rule=busy_after_one_draw,
                         tokens=1, budget=Budget(seconds=0.3))
        except es.BudgetExceeded as e:
            seen.append(e.limit)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(SAFETY + 5)
    assert seen == [0.3]


@pytest.mark.parametrize("field, order", [("float", 2), ("fraction", None)])
def test_audit_time_limit_stops_the_closed_form(field, order):
    # its efficiency alone takes a minute: in an inexact field with order-2 tables; in an exact one (prefixes merged
    # by model state) with models that read the whole context
    inst = make_instance(vocab=5, order=2, gamma=10, tokens=1)
    target = es.models.random_table(vocab=5, order=order, seed=0)

    def run():
        es.audit(target=target, draft=es.models.perturbed(target, seed=1), proposer=inst.proposer,
                 rule="speculative_sampling", prompt=inst.prompt, tokens=1, budget=Budget(seconds=0.5), field=field)
    err, elapsed = stopped_within(run, "seconds")
    assert err.limit == 0.5 and elapsed < 10


@pytest.mark.parametrize("rule, what", [(out_of_memory, "memory"), (too_deep, "recursion")])
def test_audit_maps_resource_errors_to_budget_errors(rule, what):
    with pytest.raises(es.BudgetExceeded) as info:
        es.audit(target=HALF, draft=HALF, proposer=es.drafts.chain(1), rule=rule, tokens=1)
    assert info.value.what == what
