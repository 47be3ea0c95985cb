"""A single instance is not an audit: the sampler search (``es.search_sampler(...)``, the
``audit-sampler`` default) finds the minimal biased instance, states the space it covered, or says it
is incomplete, and its counterexample renders a regression test that calls the user's sampler.

Expected laws and minimal instances are derived here by hand (the arithmetic is in the comments) and
checked by auditing every smaller instance of a grid directly, not read back from the search.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
import textwrap
from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec import cli
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.counterexamples import Counterexample, EmptySearch, IncompleteSearch, Space, simplex_grid
from exactspec.samplers.search import INSTANCE_KEYS, sampler_reference, sampler_space, search_instances, search_sampler

CF = es.models.context_free


def bonus_from_draft(draft_ids, draft_probs, target_probs, rng):
    """Correct but for the bonus token, drawn from the draft's law instead of the target's."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if rng.random() < p[x] / q[x]:
            out.append(int(x))
            continue
        r = np.maximum(p - q, 0.0)
        out.append(int(rng.choice(len(p), p=r / r.sum())))
        return out
    out.append(int(rng.choice(len(draft_probs[-1]), p=draft_probs[-1])))
    return out


def lossless_on_grid(sampler, gamma, tokens, denominator, vocab=2, rng_model="native"):
    """Audit ``sampler`` directly on every context-free (p, q) of the grid: True when every one is lossless."""
    grid = simplex_grid(vocab, denominator)
    return all(es.audit_sampler(sampler, target=CF(p), draft=CF(q), proposer=es.drafts.chain(gamma), tokens=tokens,
                                rng_model=rng_model).verdict == "lossless" for p, q in itertools.product(grid, grid))


def nonzero(law):
    return {k: v for k, v in law.items() if v}


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the minimal counterexample ------------------------------------------------------------------------------

def test_default_search_finds_the_minimal_shared_uniform_counterexample():
    ce = es.search_sampler(zoo.shared_uniform, adapter="numpy")
    assert isinstance(ce, Counterexample) and ce.found and ce.exit_code == 1 and ce.kind == "sampler"
    inst = ce.instance
    assert (inst.vocab, inst.shape, inst.tokens, inst.family) == (2, (2,), 2, "context_free")
    assert ce.sampler_ref == "exactspec.bugzoo.numpy_samplers:shared_uniform" and ce.adapter == "numpy"
    # minimal: every smaller instance is lossless when audited directly. One uniform per step is only reused
    # from a step's second draft on, so gamma 1 (any horizon) and gamma 2 with one token are unbiased ...
    for tokens in (1, 2, 3):
        assert lossless_on_grid(zoo.shared_uniform, 1, tokens, 3)
    assert lossless_on_grid(zoo.shared_uniform, 2, 1, 3)
    # ... and at gamma 2, 2 tokens, laws of denominator 1 (point masses) accept with probability 0 or 1
    assert lossless_on_grid(zoo.shared_uniform, 2, 2, 1)
    assert max(x.denominator for law in inst.target + inst.draft for x in law) == 2
    # the law by hand: p = (1/2, 1/2), q = (0, 1): both drafts are 1 and p/q = 1/2. The shared u accepts both
    # (u < 1/2: (1, 1) w.p. 1/2) or rejects the first (residual (1, 0): token 0, then a fresh step emits 0 or 1
    # w.p. 1/4 each); (1, 0) never. The target gives 1/4 to each pair: TV = (1/4 + 1/4 + 0 + 0) / 2 = 1/4
    assert (inst.target, inst.draft) == (((F(1, 2), F(1, 2)),), ((F(0), F(1)),))
    assert nonzero(ce.output) == {(1, 1): F(1, 2), (0, 0): F(1, 4), (0, 1): F(1, 4)}
    assert ce.tv == F(1, 4)


def test_a_bonus_token_bug_invisible_at_one_old_default_instance_is_found_by_the_search():
    # the old default audit, one instance at gamma 2 and 2 tokens, never observes the bonus token (position 3)
    inst = es.instances.make_instance(vocab=4, order=1, gamma=2, tokens=1, seed=0)
    one = es.audit_sampler(bonus_from_draft, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                           prompt=inst.prompt, tokens=2)
    assert one.verdict == "lossless"
    ce = es.search_sampler(bonus_from_draft)
    assert ce.found and (ce.instance.vocab, ce.instance.shape, ce.instance.tokens) == (2, (1,), 2)
    # minimal: with one token the bonus is never observed
    assert lossless_on_grid(bonus_from_draft, 1, 1, 3)
    # by hand, p = (0, 1), q = (1/2, 1/2): the first token is always 1 (a draft 0 is rejected, the residual is
    # (0, 1)); the draft 1 is accepted (p/q = 2) w.p. 1/2 and the bonus then comes from q: (1, 0) w.p. 1/4
    assert (ce.instance.target, ce.instance.draft) == (((F(0), F(1)),), ((F(1, 2), F(1, 2)),))
    assert nonzero(ce.output) == {(1, 1): F(3, 4), (1, 0): F(1, 4)} and ce.tv == F(1, 4)
    assert ce.sampler_ref == f"{__name__}:bonus_from_draft"


@pytest.mark.slow  # a pytest subprocess: about 3 s on an idle machine
def test_the_regression_test_calls_the_sampler_and_fails_while_it_is_biased(tmp_path):
    ce = search_sampler("exactspec.bugzoo.numpy_samplers:shared_uniform")
    text = ce.to_pytest()
    assert "import exactspec.bugzoo.numpy_samplers as sampler_module" in text
    assert "es.audit_sampler(sampler_module.shared_uniform, adapter='numpy'" in text
    (tmp_path / "test_biased.py").write_text(text)
    # the same test on the fixed sampler passes: the test is about the sampler, not bound to fail
    (tmp_path / "test_fixed.py").write_text(text.replace("sampler_module.shared_uniform", "sampler_module.correct"))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed, 1 passed" in res.stdout
    assert "FAILED test_biased.py::test_shared_uniform_keeps_the_target_law" in res.stdout


def test_a_sampler_no_test_can_import_gets_a_typed_error_from_to_pytest():
    biased = lambda d, q, p, rng: zoo.zero_uniform(d, q, p, rng)  # noqa: E731
    ce = search_sampler(biased)
    assert ce.found and ce.sampler_ref == "" and sampler_reference(biased) == ""
    with pytest.raises(es.ExactSpecError, match="cannot be imported by a test .*'module:function'"):
        ce.to_pytest()
    # nor can it build an adapter that is not built in
    mine = dataclasses.replace(search_sampler(zoo.zero_uniform), adapter="mine")
    with pytest.raises(es.ExactSpecError, match="the adapter 'mine' is not built in"):
        mine.to_pytest()


def test_a_sampler_counterexample_round_trips_through_json_and_hostile_json_is_refused():
    ce = search_sampler(zoo.zero_uniform)
    again = Counterexample.from_json(ce.to_json())
    assert again == ce and again.to_pytest() == ce.to_pytest() and again.kind == "sampler"
    d = json.loads(ce.to_json())
    for key, bad, fragment in [("sampler_ref", "os:system; rm", "sampler_ref"), ("adapter", "numpy'); x('", "adapter"),
                               ("kind", "shell", "kind"), ("rng_model", ["continuous"], "rng_model")]:
        with pytest.raises(es.ExactSpecError, match=fragment):
            Counterexample.from_json(json.dumps({**d, key: bad}))


# -- the stated empty space, incomplete searches ---------------------------------------------------------------

def test_the_correct_sampler_covers_a_stated_space():
    space = sampler_space().with_(vocabs=(2, 3), shapes=((1,), (2,)))
    found = search_sampler(zoo.correct, space=space)
    assert isinstance(found, EmptySearch) and not found and found.complete and found.exit_code == 0
    assert found.space == space.describe() and "gamma {1, 2}, tokens gamma + 1" in found.space
    # per vocab: gamma 1 at 2 tokens and gamma 2 at 3 tokens, one cell per family; a context-free cell has the 9
    # first grid pairs and 6 random points, the other families 6 random points: 2 * (15 + 6 + 6)
    assert found.audited == 2 * 2 * (15 + 6 + 6)


def test_trees_are_searched_through_tree_adapters():
    ce = es.search_sampler(zoo.multi_sample_match_tree, adapter="numpy-tree")
    assert ce.found and ce.instance.proposer_kind == "tree" and ce.adapter == "numpy-tree"
    assert (ce.instance.vocab, ce.instance.shape, ce.instance.tokens) == (2, (2,), 1)
    # minimal: a single child is matched by the single target sample, exactly like the fix
    p = simplex_grid(2, 3)
    assert all(es.audit_sampler(zoo.multi_sample_match_tree, adapter="numpy-tree", target=CF(a), draft=CF(b),
                                proposer=es.drafts.tree((1,)), tokens=1).verdict == "lossless"
               for a, b in itertools.product(p, p))
    small = sampler_space("tree").with_(vocabs=(2,), shapes=((1,), (2,)))
    assert isinstance(search_sampler(zoo.single_sample_tree, adapter="numpy-tree", space=small), EmptySearch)


def test_a_time_limit_or_max_instances_gives_an_incomplete_search_never_an_empty_one():
    cut = es.search_sampler(zoo.correct, budget=es.Budget(seconds=0.05))
    assert isinstance(cut, IncompleteSearch) and cut.exit_code == 3 and "time limit 0.05 s" in cut.reason
    with pytest.raises(es.ExactSpecError):
        bool(cut)
    few = search_sampler(zoo.correct, max_instances=3)
    assert isinstance(few, IncompleteSearch) and few.audited == 3 and few.reason == "max_instances 3 reached"


def test_a_sampler_that_raises_on_some_instances_is_a_crash_counterexample():
    # issue 16 section 5: a crash on a valid input is a finding (kind "crash", exit 1); it made the search incomplete
    def fragile(draft_ids, draft_probs, target_probs, rng):
        if len(draft_ids) == 2:
            raise ValueError("no gamma 2 here")
        return zoo.correct(draft_ids, draft_probs, target_probs, rng)
    space = sampler_space().with_(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2), random_points=1)
    found = search_sampler(fragile, space=space)
    assert isinstance(found, Counterexample) and found.kind == "crash" and found.exit_code == 1
    assert found.instance.shape == (2,) and found.crash["probability"] == "1" and found.output == {}
    assert (found.crash["of"], found.crash["exception"], found.crash["message"]) == ("sampler", "ValueError",
                                                                                    "no gamma 2 here")
    assert found.crash["where"] == f"{__file__}:{fragile.__code__.co_firstlineno + 2} in fragile"

    def always(draft_ids, draft_probs, target_probs, rng):
        raise ValueError("never works")
    first = search_sampler(always, space=space)       # crashes with probability 1 everywhere: the smallest instance
    assert first.kind == "crash" and first.crash["probability"] == "1"
    assert (first.instance.vocab, first.instance.shape, first.instance.tokens) == (2, (1,), 1)

    def wrong_signature(draft_ids, draft_probs):      # raised calling it, never inside it: not a crash of the sampler
        return [0]
    with pytest.raises(es.RuleError, match="raised on every one"):
        search_sampler(wrong_signature, space=space)


def test_a_sampler_that_breaks_its_contract_on_some_instances_makes_the_search_incomplete():
    def outside(draft_ids, draft_probs, target_probs, rng):
        if len(draft_ids) == 2:
            return [len(target_probs[0])]                 # a token outside the vocabulary: an error, no verdict
        return zoo.correct(draft_ids, draft_probs, target_probs, rng)
    space = sampler_space().with_(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2), random_points=1)
    found = search_sampler(outside, space=space)
    assert isinstance(found, IncompleteSearch) and found.errors > 0 and "raised" in found.reason


def test_randomness_the_audit_cannot_see_and_sys_exit_stop_the_search_at_once():
    def unfollowed(draft_ids, draft_probs, target_probs, rng):
        rng.standard_cauchy()                  # a draw the enumerator does not follow
        return zoo.correct(draft_ids, draft_probs, target_probs, rng)
    calls = []

    def counting(inst):
        calls.append(inst)
        return es.audit_sampler(unfollowed, **inst)
    with pytest.raises(es.UnsupportedRandomness):
        search_instances(counting)
    assert len(calls) == 1

    def leave(draft_ids, draft_probs, target_probs, rng):
        calls.append(len(draft_ids))
        sys.exit(0)
    calls.clear()
    with pytest.raises(es.RuleError, match=r"sys.exit\(0\)") as err:
        search_sampler(leave)
    assert calls == [1] and "raised on every one" not in str(err.value)   # the first call ended the search


def test_search_instances_hands_audit_one_the_documented_keys():
    seen = []

    def audit_one(inst):
        seen.append(inst)
        return es.audit_sampler(zoo.correct, **inst)
    space = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("table",), random_points=2)
    found = search_instances(audit_one, space=space, name="correct", budget=60)
    assert isinstance(found, EmptySearch) and found.rule == "correct" and found.audited == len(seen) == 2
    assert all(tuple(inst) == INSTANCE_KEYS for inst in seen)
    assert seen[0]["prompt"] == (0,) and seen[0]["tokens"] == 1 and 0 < seen[0]["budget"].seconds <= 60
    # a generic search cannot render a regression test: a typed error says so
    ce = search_instances(lambda inst: es.audit_sampler(zoo.zero_uniform, **inst))
    assert ce.found and ce.kind == "audit"
    with pytest.raises(es.ExactSpecError, match="generic per-instance search"):
        ce.to_pytest()


def test_audit_sampler_search_refuses_what_the_search_chooses():
    for kw in [dict(target=CF(("1/2", "1/2"))), dict(tokens=2), dict(prompt=(0,)), dict(expected=CF(("1/2", "1/2")))]:
        with pytest.raises(es.ExactSpecError, match="does not apply"):
            es.search_sampler(zoo.correct, **kw)


def test_audit_sampler_search_applies_the_float64_tolerance_to_every_instance():
    # tolerance is what float64 rounding may cost (issue 16): the same for every instance, so a search takes it;
    # a tolerance of 0 demands exactness of the float64 run, which float64 rounding of the residual breaks
    loose = es.search_sampler(zoo.correct, tolerance=F(1, 2 ** 40))
    exact = es.search_sampler(zoo.correct, tolerance=0)
    assert not loose and loose.exit_code == 0
    assert exact.found and F(exact.extra["algorithmic_tv"]) > 0
    with pytest.raises(es.ExactSpecError, match="not a tree proposer"):
        es.search_sampler(zoo.mss_tree, adapter="numpy-tree", proposer=es.drafts.chain(1))


def test_space_extra_tokens_is_validated_and_stated():
    with pytest.raises(es.ExactSpecError, match="extra_tokens"):
        Space(extra_tokens=-1)
    with pytest.raises(es.ExactSpecError, match="only_longest needs extra_tokens"):
        Space(only_longest=True)
    space = Space(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2, 3, 4), families=("context_free",), extra_tokens=1)
    assert [(c[1][0], c[2]) for c in space.cells()] == [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]
    assert [(c[1][0], c[2]) for c in space.with_(only_longest=True).cells()] == [(1, 2), (2, 3)]


# -- the command ---------------------------------------------------------------------------------------------

def test_cli_searches_by_default_with_search_exit_codes(capsys):
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform")
    assert code == 1, err
    assert "counterexample for shared_uniform" in out and "def test_shared_uniform_keeps_the_target_law" in out
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--vocab", "2",
                         "--gamma", "1", "--json", "--no-timings")
    d = json.loads(out)
    assert code == 0 and d["found"] is False and d["complete"] is True and "seconds" not in d
    assert d["space"].startswith("vocab 2..2, gamma {1}, tokens gamma + 1 (shorter horizons are its marginals)")
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--time-limit", "0.05")
    assert code == 3 and "INCOMPLETE" in out and "time limit 0.05 s reached" in out
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--time-limit", "0.05",
                         "--json")
    assert code == 3 and json.loads(out)["complete"] is False


def test_cli_instance_runs_the_one_instance_audit(capsys):
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "3",
                         "--gamma", "2", "--instance", "--json")
    d = json.loads(out)
    assert code == 1 and d["verdict"] == "biased" and d["instance"]["tokens"] == 4   # gamma + 2, as before


@pytest.mark.parametrize("argv, fragment", [
    (["--vocab", "1"], "--vocab (the search's largest vocabulary) must be >= 2"),
    (["--gamma", "0"], "--gamma (the search's largest gamma) must be >= 1"),
    (["--tokens", "0"], "--tokens (the search's horizon) must be >= 1"),
    (["--order", "2"], "--order applies with --instance"),
])
def test_cli_bad_search_bounds_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and fragment in err


def test_cli_search_bounds(capsys):
    # --tokens sets the horizon of every cell; --expansion bounds a tree search
    code, out, _ = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--vocab", "2",
                       "--gamma", "1", "--tokens", "3", "--json")
    assert code == 0 and "gamma {1}, tokens 3..3, families" in json.loads(out)["space"]
    code, out, _ = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:single_sample_tree", "--adapter",
                       "numpy-tree", "--vocab", "2", "--expansion", "1 1", "--json")
    assert code == 0 and "expansion {(1,), (1, 1)}, tokens depth + 1" in json.loads(out)["space"]


@pytest.mark.slow
def test_cli_default_search_on_a_correct_sampler_covers_the_default_space(capsys):
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--json")
    d = json.loads(out)
    assert code == 0 and d["space"] == sampler_space().describe()
    # 3 vocabs x 3 gammas (each at gamma + 1 tokens); per cell 15 context-free, 6 per-position and 6 table instances
    assert d["audited"] == 3 * 3 * (15 + 6 + 6)


def test_the_rng_model_is_searched_under_and_rendered_into_the_regression_test():
    # u <= p/q accepts a draft the target never emits only when u can be exactly 0: never for a continuous
    # uniform, with probability 2**-24 for torch's float32 lattice (p = (0, 1), q = (1, 0) at the first instance)
    assert lossless_on_grid(zoo.accept_at_zero, 1, 1, 2, rng_model="continuous")
    # the default rng model (native) is numpy's own lattice k * 2**-53: the search finds it without being told
    native = search_sampler(zoo.accept_at_zero)
    assert native.found and native.rng_model == "native" and "rng_model='native'" in native.to_pytest()
    assert nonzero(native.output) == {(0,): F(1, 2 ** 53), (1,): 1 - F(1, 2 ** 53)}
    ce = search_sampler(zoo.accept_at_zero, rng_model="torch-float32")
    assert ce.found and ce.rng_model == "torch-float32" and "rng_model='torch-float32'" in ce.to_pytest()
    assert (ce.instance.shape, ce.instance.tokens) == ((1,), 1)
    assert (ce.instance.target, ce.instance.draft) == (((F(0), F(1)),), ((F(1), F(0)),))
    # the draft 0 has p/q = 0 and is accepted iff u == 0: token 0, which the target never emits, w.p. 2**-24
    assert nonzero(ce.output) == {(0,): F(1, 2 ** 24), (1,): 1 - F(1, 2 ** 24)} and ce.tv == F(1, 2 ** 24)
