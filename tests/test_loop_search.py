"""Loop searches are first-class: ``es.search_loop(...)`` and ``exactspec audit-loop`` return a loop's minimal
counterexample whose ``to_pytest()`` imports and audits the user's loop, and whose JSON is validated on the way back.

Expected laws are derived by hand for gamma-1 loops on context-free models p (target) and q (draft): a draft ``a``
is accepted with probability min(1, p_a / q_a), so the first token of a step is ``a`` after acceptance with
probability min(p_a, q_a) and the step accepts with probability acc = sum_a min(p_a, q_a).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from fractions import Fraction as F
from itertools import product

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec import cli  # noqa: E402
from exactspec.bugzoo import loops  # noqa: E402
from exactspec.counterexamples import Counterexample, EmptySearch, IncompleteSearch  # noqa: E402
from exactspec.counterexamples.space import Space  # noqa: E402

ZOO = "exactspec.bugzoo.loops"
DEFAULT_OPTIONS = {"stand_in": "torch-lm", "dtype": "float64", "output": "full", "on_error": "raise",
                   "tolerance": "1/1099511627776", "reference": None, "error_probability": "0"}
HALF, POINTS = (F(1, 2), F(1, 2)), ((F(1), F(0)), (F(0), F(1)))

#: a user's loop in a file of their own: a rejection resamples from the target instead of the residual max(p - q, 0)
USER_MODULE = "exactspec_test_user_loops"
USER_SOURCE = textwrap.dedent('''
    import torch


    def resample_from_target(target, draft, prompt):
        ids = prompt
        while ids.shape[1] - prompt.shape[1] < 4:
            q = draft(ids)[0, -1].softmax(-1)
            x = torch.multinomial(q, 1).view(1, 1)
            p_rows = target(torch.cat([ids, x], dim=1))[0, -2:].softmax(-1)
            if torch.rand(1) < p_rows[0, int(x)] / q[int(x)]:
                ids = torch.cat([ids, x, torch.multinomial(p_rows[1], 1).view(1, 1)], dim=1)
            else:
                ids = torch.cat([ids, torch.multinomial(p_rows[0], 1).view(1, 1)], dim=1)
        return ids


    def crash_on_one(target, draft, prompt):
        """Sample two tokens from the target; raise on a 1 (with probability 1 - p_0 ** 2)."""
        ids = prompt
        for _ in range(2):
            t = torch.multinomial(target(ids)[0, -1].softmax(-1), 1).view(1, 1)
            if int(t) == 1:
                raise ValueError("token 1 drawn")
            ids = torch.cat([ids, t], dim=1)
        return ids
''')


@pytest.fixture
def user_loops(tmp_path, monkeypatch):
    """The user's loop module, written into tmp_path and imported from there."""
    (tmp_path / f"{USER_MODULE}.py").write_text(USER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    try:
        yield importlib.import_module(USER_MODULE)
    finally:
        sys.modules.pop(USER_MODULE, None)


def cf(law):
    return es.models.context_free(law)


def nonzero(law):
    return {k: v for k, v in law.items() if v}


def bonus_from_draft_law(p, q):
    """gamma 1, 2 tokens: after an acceptance the bonus comes from q, after a rejection the next step is right."""
    return nonzero({(a, b): min(p[a], q[a]) * q[b] + (p[a] - min(p[a], q[a])) * p[b]
                    for a, b in product(range(len(p)), repeat=2)})


def resample_from_target_law(p, q):
    """gamma 1, 1 token: accepted ``a`` w.p. min(p_a, q_a), rejected (1 - acc) then ``a`` ~ p."""
    acc = sum(min(a, b) for a, b in zip(p, q))
    return nonzero({(a,): min(p[a], q[a]) + (1 - acc) * p[a] for a in range(len(p))})


def tv(law, ref):
    return sum(abs(law.get(k, 0) - ref.get(k, 0)) for k in set(law) | set(ref)) / 2


def product_law(p, n):
    return nonzero({seq: _prod(p[t] for t in seq) for seq in product(range(len(p)), repeat=n)})


def _prod(xs):
    out = F(1)
    for x in xs:
        out *= x
    return out


def run_test_function(text):
    """Run the one test function of a rendered regression test in this process (the import lines included)."""
    ns: dict = {}
    exec(compile(text, "<rendered regression test>", "exec"), ns)
    (name,) = [k for k in ns if k.startswith("test_")]
    ns[name]()


# -- the search -------------------------------------------------------------------------------------------------

def test_search_returns_the_minimal_loop_counterexample_and_the_smaller_instances_are_lossless():
    found = es.search_loop(loops.bonus_from_draft, progress=False)
    assert isinstance(found, Counterexample) and found.kind == "loop"
    assert found.sampler_ref == f"{ZOO}:bonus_from_draft" and found.rule == "bonus_from_draft"
    assert found.loop == DEFAULT_OPTIONS and found.rng_model == "native"     # the default (issue 16)
    inst = found.instance
    assert (inst.vocab, inst.tokens, inst.family, inst.prompt) == (2, 2, "context_free", (0,))
    # the law and TV by hand (the instance's laws are dyadic, so the float64 stand-ins are exact)
    p, q = inst.target[0], inst.draft[0]
    assert nonzero(found.output) == bonus_from_draft_law(p, q)
    assert found.expected == product_law(p, 2)
    assert found.tv == sum(min(a, b) for a, b in zip(p, q)) * tv(dict(enumerate(p)), dict(enumerate(q))) > 0
    # minimal: every smaller instance, audited directly, is lossless -- one token (any family) ...
    for laws in product([*POINTS, HALF], repeat=2):
        rep = es.audit_loop(loops.bonus_from_draft, target=cf(laws[0]), draft=cf(laws[1]), tokens=1)
        assert rep.tv == 0, laws
    table = es.models.table(vocab=2, order=1, table={(0,): (F(1, 4), F(3, 4)), (1,): HALF})
    assert es.audit_loop(loops.bonus_from_draft, target=table, draft=cf(HALF), tokens=1).tv == 0
    # ... and two tokens on point masses (denominator 1): a point-mass draft is the target or always rejected
    for pt, qt in product(POINTS, repeat=2):
        assert es.audit_loop(loops.bonus_from_draft, target=cf(pt), draft=cf(qt), tokens=2).tv == 0
    assert inst.max_denominator() == 2


def test_the_search_of_a_correct_loop_states_the_space_it_covered():
    space = Space(vocabs=(2,), shapes=((1,),), tokens=(1, 2), random_points=2, exhaustive_denominator=2,
                  max_denominator=4)
    empty = es.search_loop(loops.speculative_sampling, space=space, progress=False)
    assert isinstance(empty, EmptySearch) and not empty and empty.exit_code == 0
    # context-free cells: 9 grid pairs + 2 random; per-position and table cells: 2 random; two horizons
    assert empty.audited == 2 * (11 + 2 + 2) and "vocab 2..2" in empty.space
    # the loop drafts with its own gamma: the statement names no gamma, and the prompt every instance starts from
    assert "gamma" not in empty.space and "prompt (0,)" in empty.space


def test_a_loop_in_the_users_own_file_is_found_and_its_regression_test_replays_it(user_loops):
    found = es.search_loop(user_loops.resample_from_target, progress=False)
    assert found.kind == "loop" and found.sampler_ref == f"{USER_MODULE}:resample_from_target"
    inst = found.instance
    assert (inst.vocab, inst.tokens, inst.family) == (2, 1, "context_free")
    p, q = inst.target[0], inst.draft[0]
    assert nonzero(found.output) == resample_from_target_law(p, q) and found.tv > 0
    # minimal: the point-mass instances (denominator 1) are lossless
    for pt, qt in product(POINTS, repeat=2):
        assert es.audit_loop(user_loops.resample_from_target, target=cf(pt), draft=cf(qt), tokens=1).tv == 0
    text = found.to_pytest()
    assert f"import {USER_MODULE} as loop_module" in text
    assert "es.audit_loop(loop_module.resample_from_target, target=target, draft=draft, prompt=(0,)," in text
    with pytest.raises(AssertionError, match="biased"):
        run_test_function(text)


def test_the_regression_test_replays_the_search_options():
    # (issue 16: at float32 the loop also runs on float64 stand-ins and the tolerance is what float64 rounding may
    # cost there; the reference is a figure, no longer a widening, so tolerance 0 would demand an exact float64
    # run of the fixed loop below: a non-default tolerance still shows the option is replayed)
    found = es.search_loop(loops.bonus_from_draft, progress=False, dtype=torch.float32,
                          reference=1, on_error="record", tolerance=F(1, 2 ** 50))
    assert found.loop == {**DEFAULT_OPTIONS, "dtype": "float32", "reference": 1, "on_error": "record",
                          "tolerance": str(F(1, 2 ** 50))}
    assert "algorithmic_tv" in found.extra and "rounding_tv" in found.extra
    text = found.to_pytest()
    assert "dtype=torch.float32" in text and "reference=1," in text and "on_error='record'" in text
    assert f"tolerance=F(1, {2 ** 50})" in text
    with pytest.raises(AssertionError, match="biased"):
        run_test_function(text)
    # on the fixed loop, the same test passes (it is about the loop, not bound to fail)
    run_test_function(text.replace("loop_module.bonus_from_draft", "loop_module.speculative_sampling"))


def test_an_importable_reference_loop_is_imported_by_the_regression_test():
    found = es.search_loop(loops.bonus_from_draft, progress=False,
                          reference=loops.speculative_sampling)
    assert found.loop["reference"] == f"{ZOO}:speculative_sampling"
    text = found.to_pytest()
    assert f"import {ZOO} as reference_module" in text and "reference=reference_module.speculative_sampling" in text
    with pytest.raises(AssertionError, match="biased"):
        run_test_function(text)


def test_loops_and_references_no_test_can_import_get_typed_errors_from_to_pytest():
    closure = lambda t, d, p: loops.bonus_from_draft(t, d, p)  # noqa: E731
    found = es.search_loop(closure, progress=False)
    assert found.kind == "loop" and found.sampler_ref == ""
    with pytest.raises(es.ExactSpecError, match="the loop '<lambda>' cannot be imported by a test"):
        found.to_pytest()
    found = es.search_loop(loops.bonus_from_draft, progress=False,
                          reference=lambda t, d, p: loops.speculative_sampling(t, d, p))
    assert found.loop["reference"] == ""
    with pytest.raises(es.ExactSpecError, match="reference loop .* cannot be imported by a test"):
        found.to_pytest()


@pytest.mark.parametrize("kw, match", [
    (dict(output="neither"), "output must be 'full'"),
    (dict(kind="jax"), "kind must be one of torch-lm, transformers"),
    (dict(on_error="ignore"), "on_error must be 'raise' or 'record'"),
    (dict(dtype=torch.int64), "dtype must be a torch floating dtype"),
    (dict(reference=0), "must be >= 1"),
    (dict(reference="2"), "reference must be a loop"),
    (dict(tolerance=-1), "tolerance must be >= 0"),
    (dict(tokens=0), "tokens .* must be an int >= 1"),
    (dict(rng_model="bogus"), "bogus"),
    (dict(budget=es.Budget(paths=3), instance_budget=es.Budget(paths=3)), "not both"),
])
def test_search_options_are_checked_before_any_audit(kw, match):
    with pytest.raises(es.ExactSpecError, match=match):
        es.search_loop(loops.speculative_sampling, progress=False, **kw)


def test_search_budgets_make_an_incomplete_search_never_an_empty_one():
    timed = es.search_loop(loops.speculative_sampling, progress=False,
                          budget=es.Budget(seconds=0.001))
    assert isinstance(timed, IncompleteSearch) and timed.exit_code == 3 and "time limit" in timed.reason
    short = es.search_loop(loops.speculative_sampling, progress=False,
                          budget=es.Budget(paths=3), max_instances=10)
    # the paths limit applies to each audit: point-mass instances fit in 3 paths, the others do not
    assert isinstance(short, IncompleteSearch) and 0 < short.over_budget < short.audited == 10
    assert "the audit budget was exceeded" in short.reason
    assert es.search_loop(loops.speculative_sampling, progress=False,
                         budget=0.001).exit_code == 3


def test_a_loop_that_raises_is_a_crash_counterexample_whatever_on_error_says(user_loops):
    # issue 16 section 5: a crash on a valid input is a finding (a counterexample of kind "crash", exit 1), not an
    # instance left uncovered (it was an IncompleteSearch with on_error="raise", a kind "loop" with "record")
    found = es.search_loop(user_loops.crash_on_one, progress=False, on_error="record")
    assert found.kind == "crash" and found.loop["on_error"] == "record" and found.exit_code == 1
    p = found.instance.target[0]
    assert found.instance.tokens == 1 and p[1] > 0
    # by hand: the loop returns only when both draws are 0, with probability p_0 ** 2
    assert found.loop["error_probability"] == str(1 - p[0] ** 2) == found.crash["probability"]
    assert found.crash["of"] == "loop" and found.crash["exception"] == "ValueError"
    assert found.crash["message"] == "token 1 drawn"
    line = [i for i, text in enumerate(USER_SOURCE.splitlines(), 1) if 'raise ValueError("token 1 drawn")' in text]
    assert found.crash["where"].endswith(f"{USER_MODULE}.py:{line[0]} in crash_on_one")   # the user's raise line
    assert nonzero(found.output) == nonzero({(0,): p[0] ** 2}) and found.expected == nonzero({(0,): p[0], (1,): p[1]})
    assert (f"the loop raises ValueError: token 1 drawn with probability {1 - p[0] ** 2} on this instance, at "
            f"{found.crash['where']}") in str(found)
    assert str(found).startswith("crash counterexample for crash_on_one")
    again = Counterexample.from_json(found.to_json())
    assert again == found and again.to_pytest() == found.to_pytest()
    with pytest.raises(AssertionError, match="this code crashes with probability"):
        run_test_function(found.to_pytest())
    # the output law of the JSON must leave exactly the error mass out
    d = json.loads(found.to_json())
    d["crash"]["probability"] = d["loop"]["error_probability"] = "1/3"
    with pytest.raises(es.ExactSpecError, match="output: (is empty, but its probabilities must sum to|sums to )"):
        Counterexample.from_json(json.dumps(d))
    # on_error="raise" (the default): the same crash counterexample (a search records every crash)
    default = es.search_loop(user_loops.crash_on_one, progress=False)
    assert default == found


# -- JSON ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loop_ce():
    return es.search_loop(loops.bonus_from_draft, progress=False, reference=2)


def test_a_loop_counterexample_round_trips_through_json(loop_ce):
    d = json.loads(loop_ce.to_json())
    assert d["kind"] == "loop" and d["sampler_ref"] == f"{ZOO}:bonus_from_draft"
    assert d["loop"] == {**DEFAULT_OPTIONS, "reference": 2}
    # error_probability may be left out (0)
    del d["loop"]["error_probability"]
    assert Counterexample.from_json(json.dumps(d)) == loop_ce
    again = Counterexample.from_json(loop_ce.to_json())
    assert again == loop_ce and again.loop == loop_ce.loop and again.kind == "loop"
    assert again.to_pytest() == loop_ce.to_pytest()
    # equality sees the replay options
    assert dataclasses.replace(loop_ce, loop={**loop_ce.loop, "dtype": "float32"}) != loop_ce


@pytest.mark.parametrize("path, value, match", [
    ("loop.dtype", "float64; import os", "loop.dtype: must be one of"),
    ("loop.stand_in", "jax", "loop.stand_in: must be one of torch-lm, transformers"),
    ("loop.output", 1, "loop.output: expected one of full, new"),
    ("loop.on_error", "ignore", "loop.on_error"),
    ("loop.tolerance", 0.5, "loop.tolerance: expected a rational written as a string"),
    ("loop.tolerance", "-1/2", "loop.tolerance: must be >= 0"),
    ("loop.tolerance", "1e-999999999", "loop.tolerance"),
    ("loop.reference", True, "loop.reference: expected null, a gamma"),
    ("loop.reference", 10 ** 6, "loop.reference"),
    ("loop.reference", 0, "loop.reference"),
    ("loop.reference", "os:system; rm -rf", "loop.reference: .* is not MODULE:FUNCTION"),
    ("loop.reference", ["a"], "loop.reference: expected null"),
    ("loop.extra_key", "x", "loop: unknown field 'extra_key'"),
    ("loop.error_probability", "3/2", "loop.error_probability: must be a probability in"),
    ("loop.error_probability", 0.5, "loop.error_probability: expected a rational written as a string"),
    ("loop.error_probability", "1/2", "output: sums to 1, not exactly 1/2"),
    ("loop", "torch-lm", "loop: expected an object"),
    ("loop", None, "loop: expected an object"),
    ("sampler_ref", "os:system(1)", "sampler_ref: .* is not MODULE:FUNCTION"),
    ("sampler_ref", "import:os", "sampler_ref"),
    ("rng_model", "x' + __import__('os')", "rng_model"),
    ("kind", "loops", "kind: must be one of rule, sampler, audit, loop"),
])
def test_hostile_loop_json_is_refused_with_a_typed_error(loop_ce, path, value, match):
    d = json.loads(loop_ce.to_json())
    node = d
    *parents, last = path.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    with pytest.raises(es.ExactSpecError, match=f"not a counterexample JSON: {match}"):
        Counterexample.from_json(json.dumps(d))


def test_loop_json_without_its_options_is_refused(loop_ce):
    for key in ("stand_in", "dtype", "output", "on_error", "tolerance", "reference"):
        d = json.loads(loop_ce.to_json())
        del d["loop"][key]
        with pytest.raises(es.ExactSpecError, match=f"loop: missing field.* {key}"):
            Counterexample.from_json(json.dumps(d))
    d = json.loads(loop_ce.to_json())
    del d["loop"]
    with pytest.raises(es.ExactSpecError, match="loop: expected an object"):
        Counterexample.from_json(json.dumps(d))


def test_check_refuses_hostile_options_set_in_python(loop_ce):
    bad = dataclasses.replace(loop_ce, loop={**loop_ce.loop, "dtype": "float64)\nimport os\n("})
    with pytest.raises(es.ExactSpecError, match="loop.dtype"):
        bad.to_pytest()
    bad = dataclasses.replace(loop_ce, sampler_ref="exactspec.bugzoo.loops:bonus_from_draft\nimport os")
    with pytest.raises(es.ExactSpecError, match="sampler_ref"):
        bad.to_pytest()


# -- the regression test under pytest --------------------------------------------------------------------------

@pytest.mark.slow  # one pytest subprocess (torch imported there): about 5 s
def test_the_regression_tests_fail_under_pytest_while_the_loop_is_biased(tmp_path, user_loops):
    text = es.search_loop(loops.bonus_from_draft, progress=False).to_pytest()
    (tmp_path / "test_biased.py").write_text(text)
    (tmp_path / "test_fixed.py").write_text(text.replace("loop_module.bonus_from_draft",
                                                         "loop_module.speculative_sampling"))
    user = es.search_loop(user_loops.resample_from_target, progress=False)
    (tmp_path / "test_user.py").write_text(user.to_pytest())
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 failed, 1 passed" in res.stdout, res.stdout
    assert "FAILED test_biased.py::test_bonus_from_draft_keeps_the_target_law" in res.stdout
    assert "FAILED test_user.py::test_resample_from_target_keeps_the_target_law" in res.stdout


# -- the command line ------------------------------------------------------------------------------------------

def main(capsys, *argv):
    code = cli.main(["audit-loop", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_search_finds_the_bias_and_prints_the_regression_test(capsys):
    code, out, _ = main(capsys, f"{ZOO}:bonus_from_draft")
    assert code == 1
    assert out.startswith("counterexample for bonus_from_draft (claim: lossless): vocab 2, 2 token(s), "
                          "context-free models, prompt (0,) (a whole run of the loop, drafting included)")
    assert "gamma" not in out.split("regression test")[0]
    assert "regression test (fails while the bias exists)" in out
    assert f"import {ZOO} as loop_module" in out
    run_test_function(out.split("regression test (fails while the bias exists):")[1]
                      .replace("loop_module.bonus_from_draft", "loop_module.speculative_sampling"))


def test_cli_json_is_the_counterexample_the_api_returns(capsys):
    code, out, _ = main(capsys, f"{ZOO}:bonus_from_draft", "--json", "--no-timings", "--reference", "2")
    assert code == 1
    d = json.loads(out)
    assert "seconds" not in d and d["kind"] == "loop" and d["loop"] == {**DEFAULT_OPTIONS, "reference": 2}
    api = es.search_loop(loops.bonus_from_draft, progress=False, reference=2)
    assert Counterexample.from_json(out) == api
    # --no-timings: a second run prints the same bytes
    assert main(capsys, f"{ZOO}:bonus_from_draft", "--json", "--no-timings", "--reference", "2")[1] == out


def test_cli_search_of_a_correct_loop_exits_0_over_the_stated_space(capsys):
    code, out, _ = main(capsys, f"{ZOO}:speculative_sampling", "--vocab", "2", "--tokens", "2", "--json")
    assert code == 0
    d = json.loads(out)
    # one horizon (2), vocab 2: 9 grid pairs + 6 random context-free, 6 per-position, 6 order-1 instances
    assert d["found"] is False and d["complete"] is True and d["audited"] == 27
    assert d["space"].startswith("vocab 2..2")


def test_cli_time_limit_makes_the_search_incomplete(capsys):
    code, out, _ = main(capsys, f"{ZOO}:speculative_sampling", "--time-limit", "0.001")
    assert code == 3 and out.startswith("INCOMPLETE search for speculative_sampling: time limit")


def test_cli_options_reach_the_counterexample(capsys):
    code, out, _ = main(capsys, f"{ZOO}:bonus_from_draft", "--json", "--dtype", "float32", "--on-error", "record",
                        "--kind", "torch-lm", "--output", "full")
    assert code == 1
    assert json.loads(out)["loop"] == {**DEFAULT_OPTIONS, "dtype": "float32", "on_error": "record"}


def test_cli_instance_audits_one_seeded_instance(capsys):
    code, out, _ = main(capsys, f"{ZOO}:bonus_from_draft", "--instance", "--vocab", "3", "--tokens", "1", "--json")
    assert code == 0   # the bonus is never observed in one token
    d = json.loads(out)
    assert d["instance"]["loop"] == "bonus_from_draft" and d["instance"]["tokens"] == 1
    inst = es.instances.make_instance(vocab=3, order=1, gamma=1, tokens=1, seed=0)
    rep = es.audit_loop(loops.bonus_from_draft, target=inst.target, draft=inst.draft, prompt=inst.prompt, tokens=2)
    assert rep.verdict == "biased"
    code, out, _ = main(capsys, f"{ZOO}:bonus_from_draft", "--instance", "--vocab", "3", "--tokens", "2", "--json")
    assert code == 1 and F(json.loads(out)["tv"]) == rep.tv
    code, out, _ = main(capsys, f"{ZOO}:speculative_sampling", "--instance", "--vocab", "3", "--tokens", "2",
                        "--dtype", "float32", "--reference", "1")
    assert code == 0 and "lossless" in out


@pytest.mark.parametrize("argv, match", [
    (["--order", "2"], "--order applies with --instance"),
    (["--reference", "0"], "--reference .* must be >= 1"),
    (["--tokens", "0"], "--tokens must be >= 1"),
    (["--vocab", "1"], "--vocab .* must be >= 2"),
    (["--no-timings"], "--no-timings applies to --json"),
    (["--kind", "jax"], "invalid choice: 'jax'"),
    (["--dtype", "int64"], "invalid choice: 'int64'"),
    (["--time-limit", "0"], "--time-limit must be a positive number"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, match):
    code, out, err = main(capsys, f"{ZOO}:speculative_sampling", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    import re
    assert re.search(match, err), err


def test_cli_a_loop_that_cannot_be_loaded_exits_2(capsys):
    code, _, err = main(capsys, "exactspec_no_such_module_xyz:loop")
    assert code == 2 and "cannot load exactspec_no_such_module_xyz:loop" in err
    code, _, err = main(capsys, f"{ZOO}:GAMMA")
    assert code == 2 and "not a function" in err


def test_cli_a_loop_that_raises(capsys, user_loops, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)   # the CLI imports MODULE with the current directory on sys.path
    loop = f"{USER_MODULE}:crash_on_one"
    code, _, err = main(capsys, loop, "--instance", "--vocab", "2", "--tokens", "1")
    assert code == 2 and "raised ValueError: token 1 drawn on a branch of probability" in err
    code, out, _ = main(capsys, loop, "--instance", "--vocab", "2", "--tokens", "1", "--on-error", "record", "--json")
    inst = es.instances.make_instance(vocab=2, order=1, gamma=1, tokens=1, seed=0)
    p, p0_next = inst.target(inst.prompt), inst.target(inst.prompt + (0,))   # the law after (0,), then (0, 0)
    err_p = F(json.loads(out)["extra"]["error_probability"])
    api = es.audit_loop(user_loops.crash_on_one, target=inst.target, draft=inst.draft, prompt=inst.prompt, tokens=1,
                        on_error="record")
    assert code == 1 and err_p == api.error_probability
    # by hand it is 1 - p_0 * p_0|0, up to the float64 rounding of the stand-ins' logits (far below 2**-40)
    assert abs(err_p - (1 - p[0] * p0_next[0])) < F(1, 2 ** 40)
    code, out, _ = main(capsys, loop, "--on-error", "record", "--json")
    assert code == 1 and json.loads(out)["loop"]["on_error"] == "record"
    code, out, _ = main(capsys, loop, "--vocab", "2", "--tokens", "1")   # a crash is a finding: exit 1
    assert code == 1 and out.startswith("crash counterexample for crash_on_one") and "raises ValueError" in out


@pytest.mark.parametrize("given", [{"target": es.models.context_free(("1/2", "1/2"))},
                                   {"draft": es.models.context_free(("1/2", "1/2"))},
                                   {"prompt": (1,)},
                                   {"expected": es.models.context_free(("1/2", "1/2"))}])
def test_search_refuses_the_instance_arguments_it_would_ignore(given):
    from exactspec.bugzoo import loops
    with pytest.raises(es.ExactSpecError, match="do not apply: the search chooses"):
        es.search_loop(loops.speculative_sampling, **given)
