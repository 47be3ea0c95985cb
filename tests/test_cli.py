"""The ``exactspec`` command: ``check``, ``audit``, ``rules``, exit codes and one-line errors.

Exit codes (DESIGN.md, Errors): 0 claim holds / lossless, 1 bias or broken claim, 2 bad input,
3 budget exceeded.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from fractions import Fraction

import mpmath
import pytest

import exactspec as es
from exactspec import cli
from exactspec.instances import check_cases, make_instance
from exactspec.laws import argmax

SMALL = ["--vocab", "3", "--gamma", "2"]  # default horizon: gamma + 2 = 4 tokens


def run(capsys, *argv):
    """``main(argv)`` -> (exit code, stdout, stderr)."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str) -> None:
    """A bad-input message: exactly one line on stderr, prefixed, with no traceback."""
    assert err.endswith("\n")
    assert err.count("\n") == 1, err
    assert err.startswith("exactspec: ")
    assert "Traceback" not in err


def frac(s: str) -> Fraction:
    return Fraction(s)


# -- check -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_check_prints_every_configuration(capsys):
    code, out, err = run(capsys, "check")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    # the table body: between the dashes line and the blank line before the tally
    dash = next(i for i, ln in enumerate(lines) if ln.startswith("----"))
    blank = lines.index("", dash)
    rows = lines[dash + 1:blank]
    cases = check_cases()
    # 10 chain rules + speculative_sampling with argmax drafts (soft and point-mass claims) + 13 tree cases
    assert len(rows) == len(cases) == 25
    for row, case in zip(rows, cases):
        assert row.startswith(case.rule.name + " ")
        assert cli._short_proposer(case.proposer) in row   # the full description is in --wide
        assert row.endswith(" yes")
    assert "25/25 claims hold" in out
    assert "broken" not in out
    # rows whose claim is lossless report an exact zero; biased rows a positive TV (4 significant digits)
    start = lines[dash - 1].index(" TV ") + 1
    tvs = [row[start:].split()[0] for row in rows]
    for tv, case in zip(tvs, cases):
        if case.claim in ("lossless", "lossless-greedy"):
            assert tv == "0"
        else:
            assert case.claim == "biased" and float(tv) > 0 and "/" not in tv
    assert tvs.count("0") == 5 + 7  # chain: 4 rules + argmax/point_mass; tree: 7


@pytest.mark.slow
def test_check_json_parses_and_is_ok(capsys):
    code, out, err = run(capsys, "check", "--json")
    assert code == 0
    assert err == ""
    d = json.loads(out)
    assert d["ok"] is True
    assert d["field"] == "fraction"
    assert d["instance"]["vocab"] == 5 and d["instance"]["prompt"] == [0, 1]
    assert [r["instance"]["tokens"] for r in d["rules"]] == [c.tokens for c in check_cases()]
    assert len(d["rules"]) == len(check_cases())
    assert all(r["claim_holds"] is True for r in d["rules"])
    by_claim = {(r["rule"], r["claim"]): r for r in d["rules"]}
    # lossless claims: TV is the exact string "0"
    for name in ("speculative_sampling", "no_bonus", "sample_and_match"):
        assert by_claim[(name, "lossless")]["tv"] == "0"
        assert by_claim[(name, "lossless")]["lossless"] is True
    assert by_claim[("greedy_match", "lossless-greedy")]["tv"] == "0"
    # the biased rows carry the exact TV the Python API computes on the same default instance
    inst = make_instance(vocab=5, order=2, gamma=4, tokens=6, seed=0)  # the default instance: gamma 4, 6 tokens
    api = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer,
                   rule=es.rules.greedy_match_sampled, prompt=inst.prompt, tokens=inst.tokens)
    row = by_claim[("greedy_match_sampled", "biased")]
    assert frac(row["tv"]) == api.tv
    assert row["tv"] == f"{api.tv.numerator}/{api.tv.denominator}"
    assert frac(row["tv"]) > 0


# -- audit -------------------------------------------------------------------------------------

def test_audit_speculative_sampling_is_lossless(capsys):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", *SMALL)
    assert code == 0
    assert err == ""
    assert "LOSSLESS" in out
    assert "TV(output, expected) = 0" in out
    assert "CLAIM BROKEN" not in out


def test_audit_greedy_match_sampled_is_biased(capsys):
    code, out, err = run(capsys, "audit", "--rule", "greedy_match_sampled", *SMALL)
    assert code == 1
    assert err == ""
    assert "BIASED" in out
    assert "LOSSLESS" not in out


@pytest.mark.parametrize("rule", ["speculative_sampling", "greedy_match_sampled", "resample_from_target"])
def test_audit_json_matches_python_api(capsys, rule):
    code, out, _ = run(capsys, "audit", "--rule", rule, *SMALL, "--json")
    d = json.loads(out)
    inst = make_instance(vocab=3, gamma=2, tokens=4)
    api = es.audit(target=inst.target, draft=inst.draft, proposer=inst.proposer, rule=rule,
                   prompt=inst.prompt, tokens=inst.tokens)
    assert code == (0 if api.lossless else 1)
    assert d["rule"] == rule
    assert d["field"] == "fraction"
    assert frac(d["tv"]) == api.tv
    if api.tv == 0:
        assert d["tv"] == "0"
    else:
        assert d["tv"] == f"{api.tv.numerator}/{api.tv.denominator}"
    assert d["lossless"] is api.lossless
    assert {tuple(k): frac(v) for k, v in d["output"]} == api.output
    assert {tuple(k): frac(v) for k, v in d["expected"]} == api.expected
    assert frac(d["tokens_per_call"]) == api.tokens_per_call
    assert frac(d["target_calls"]) == api.target_calls
    # the output law is a law: it sums to exactly 1
    assert sum(frac(v) for _, v in d["output"]) == 1


def test_audit_json_tv_matches_hand_derivation(capsys):
    # greedy_match_sampled with gamma = 1, tokens = 1: x ~ q; emit x if x == a = argmax p, else
    # emit a sample of p. So out(t) = q(a)[t == a] + (1 - q(a)) p(t) and
    # TV = 1/2 * sum_t |q(a)[t == a] - q(a) p(t)| = 1/2 * q(a) * ((1 - p(a)) + sum_{t != a} p(t))
    #    = q(a) * (1 - p(a)).
    # Tokens per call: 2 when x == a is accepted (then the bonus), else 1: 1 + q(a).
    code, out, _ = run(capsys, "audit", "--rule", "greedy_match_sampled", "--vocab", "3", "--gamma", "1",
                       "--tokens", "1", "--json")
    assert code == 1
    d = json.loads(out)
    inst = make_instance(vocab=3, gamma=1, tokens=1)
    assert d["instance"]["prompt"] == [0, 1] == list(inst.prompt)
    p, q = inst.target(inst.prompt), inst.draft(inst.prompt)
    a = argmax(p)
    assert frac(d["tv"]) == q[a] * (1 - p[a])
    assert frac(d["tokens_per_call"]) == 1 + q[a]
    out_law = {tuple(k): frac(v) for k, v in d["output"]}
    assert out_law == {(t,): (q[a] if t == a else 0) + (1 - q[a]) * p[t] for t in range(3)}


def test_audit_ensemble_with_argument(capsys):
    code, out, err = run(capsys, "audit", "--rule", "ensemble(1/3)", *SMALL, "--json")
    assert err == ""
    d = json.loads(out)
    assert d["rule"] == "ensemble(1/3)"
    assert d["claim"] == "biased"
    # relaxed acceptance with w = 1/3 < 1 accepts too often: biased on this instance
    assert code == 1
    assert frac(d["tv"]) > 0
    assert d["claim_holds"] is True


def test_audit_ensemble_weight_one_is_speculative_sampling(capsys):
    # w = 1: min(1, 1 - 1 + 1 * p/q) = min(1, p/q), exactly speculative sampling -> lossless
    code, out, _ = run(capsys, "audit", "--rule", "ensemble(1)", *SMALL)
    assert code == 0
    assert "LOSSLESS" in out


def test_audit_greedy_match_defaults_to_greedy_decoding(capsys):
    code, out, err = run(capsys, "audit", "--rule", "greedy_match", *SMALL, "--json")
    assert code == 0
    assert err == ""
    d = json.loads(out)
    assert d["instance"]["decoding"] == "greedy"
    assert d["tv"] == "0"
    # the expected law is the target's greedy sequence: a single outcome of probability 1
    assert len(d["expected"]) == 1 and d["expected"][0][1] == "1"


def test_audit_greedy_match_under_sampling_is_biased(capsys):
    # The seeded tables have all weights in 1..9, so every target law has full support and the
    # sampling law of 2 tokens is not a point mass, while greedy_match's output is one.
    code, out, _ = run(capsys, "audit", "--rule", "greedy_match", *SMALL, "--decoding", "sample")
    assert code == 1
    assert "decoding=sample" in out
    assert "BIASED" in out


def test_audit_field_float(capsys):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", *SMALL, "--field", "float", "--json")
    assert code == 3   # lossless within the float tolerance is not an exact proof (issue 9)
    assert err.startswith("exactspec: warning: inexact field: float")
    d = json.loads(out)
    assert d["field"] == "float" and d["exact"] is False
    assert d["tolerance"] == "1e-12"
    assert float(d["tv"]) <= 1e-12
    assert d["lossless"] is True
    # a biased rule under floats: within float rounding of the exact TV
    code, out, _ = run(capsys, "audit", "--rule", "greedy_match_sampled", *SMALL, "--field", "float", "--json")
    assert code == 1
    exact = run(capsys, "audit", "--rule", "greedy_match_sampled", *SMALL, "--json")[1]
    exact_tv = frac(json.loads(exact)["tv"])
    assert abs(Fraction(float(json.loads(out)["tv"])) - exact_tv) < Fraction(1, 10 ** 12)


def test_audit_field_mpmath_precision_200(capsys):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", *SMALL, "--field", "mpmath",
                         "--precision", "200", "--json")
    assert code == 3   # not an exact proof either
    assert err.startswith("exactspec: warning: inexact field: mpmath")
    d = json.loads(out)
    assert d["field"] == "mpmath"
    assert d["precision"] == 200
    ctx = mpmath.MPContext()
    ctx.prec = 400
    # default mpmath tolerance: 2**(16 - precision) = 2**-184 (printed to ~60 significant digits)
    tol = ctx.mpf(d["tolerance"])
    assert abs(tol / ctx.mpf(2) ** -184 - 1) < ctx.mpf(10) ** -50
    assert ctx.mpf(d["tv"]) <= tol
    assert d["lossless"] is True
    # a biased rule at 200 bits agrees with the exact TV far below the tolerance
    code, out, _ = run(capsys, "audit", "--rule", "greedy_match_sampled", *SMALL, "--field", "mpmath",
                       "--precision", "200", "--json")
    assert code == 1
    exact_tv = frac(json.loads(run(capsys, "audit", "--rule", "greedy_match_sampled", *SMALL, "--json")[1])["tv"])
    got = ctx.mpf(json.loads(out)["tv"])
    assert abs(got - ctx.mpf(exact_tv.numerator) / exact_tv.denominator) < ctx.mpf(2) ** -150


# -- bad input: exit 2, one line on stderr ---------------------------------------------------------

def test_unknown_rule(capsys):
    code, out, err = run(capsys, "audit", "--rule", "nope")
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert "unknown rule 'nope'" in err


@pytest.mark.parametrize("typo, meant", [("speculativ_sampling", "speculative_sampling"),
                                         ("greedy_mtch", "greedy_match"),
                                         ("no_bonuss", "no_bonus")])
def test_unknown_rule_suggests_near_miss(capsys, typo, meant):
    code, out, err = run(capsys, "audit", "--rule", typo)
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert "unknown rule" in err
    assert f"did you mean {meant}?" in err


@pytest.mark.parametrize("args, fragment", [
    (["--vocab", "1"], "vocab must be an int >= 2, got 1"),
    (["--gamma", "0"], "gamma must be an int >= 1, got 0"),
    (["--tokens", "0"], "tokens must be an int >= 1, got 0"),
    (["--order", "-1"], "order must be an int >= 0, got -1"),
    (["--vocab", "abc"], "--vocab: invalid int value: 'abc'"),
    (["--gamma", "1.5"], "--gamma: invalid int value: '1.5'"),
    (["--prompt", "9 9"], "prompt[0] = 9 is outside the vocabulary 0..4"),
    (["--field", "decimal"], "--field: invalid choice: 'decimal'"),
    (["--field", "mpmath", "--precision", "3"], "precision must be an int >= 16"),
    (["--time-limit", "-1"], "--time-limit must be a positive number of seconds"),
])
def test_bad_arguments_exit_2_one_line(capsys, args, fragment):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", *args)
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert fragment in err


def test_bad_prompt_names_the_prompt(capsys):
    # a non-integer prompt token is bad input; the message must say it is the prompt that is wrong
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", "--prompt", "0 x")
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert "prompt" in err


@pytest.mark.parametrize("rule, fragment", [("ensemble(2)", "ensemble weight must be a rational in [0, 1]"),
                                            ("ensemble(x)", "bad arguments for rule ensemble")])
def test_bad_rule_arguments(capsys, rule, fragment):
    code, out, err = run(capsys, "audit", "--rule", rule)
    assert code == 2
    assert out == ""
    assert_one_line_error(err)
    assert fragment in err


def test_missing_subcommand_and_missing_rule(capsys):
    code, out, err = run(capsys)
    assert code == 2
    assert_one_line_error(err)
    code, out, err = run(capsys, "audit")
    assert code == 2
    assert_one_line_error(err)
    assert "--rule" in err


# -- budget: exit 3 ------------------------------------------------------------------------------

def test_time_limit_exit_3_when_enumerating_paths(capsys, monkeypatch):
    # Catalog rules use their closed form, which enumerates no rng paths; force the generic rng
    # enumeration, where the deadline is checked every 256 paths. One step of vocab 8, gamma 4
    # has far more than 256 branches, and 256 branches take far longer than 1 ms.
    real_get = cli.common.get   # the lookup `--rule NAME` goes through (exactspec.cli.common._rule)
    monkeypatch.setattr(cli.common, "get", lambda name: real_get(name).without_closed_form())
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", "--vocab", "8", "--gamma", "4",
                         "--tokens", "5", "--time-limit", "0.001")
    assert code == 3
    assert out == ""
    assert_one_line_error(err)
    assert "budget exceeded: seconds limit 0.001" in err
    assert re.search(r"covered: paths=\d+", err)


def test_budget_exceeded_maps_to_exit_3(capsys, monkeypatch):
    def over_budget(**kwargs):
        raise es.BudgetExceeded("paths", 7, covered={"paths": 7})
    monkeypatch.setattr(cli.audit, "audit", over_budget)   # the audit `exactspec audit` calls
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling")
    assert code == 3
    assert out == ""
    assert_one_line_error(err)
    assert "budget exceeded: paths limit 7 reached (covered: paths=7)" in err


def test_time_limit_applies_to_closed_form_rules(capsys):
    # Without the monkeypatch this audit takes ~0.2 s (about 100 closed-form step laws), two
    # orders of magnitude over the 1 ms limit: `--time-limit` must stop it with exit code 3.
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", "--vocab", "8", "--gamma", "3",
                         "--tokens", "4", "--time-limit", "0.001")
    assert code == 3, out
    assert_one_line_error(err)
    assert "budget exceeded" in err


# -- rules ---------------------------------------------------------------------------------------

def test_rules_lists_catalog_with_claim_and_reference(capsys):
    code, out, err = run(capsys, "rules")
    assert code == 0
    assert err == ""
    catalog = es.rules.catalog()
    assert len(catalog) == 16  # 10 chain rules, 6 tree rules
    for r in catalog:
        # a conditional claim is listed with its condition (claim_text == claim for the others)
        assert f"{r.name}  [{r.family}, claim: {r.claim_text}]" in out
        assert r.reference
        assert f"reference: {r.reference}" in out
        assert r.description in out


def test_rules_names(capsys):
    code, out, _ = run(capsys, "rules", "--names")
    assert code == 0
    assert out.splitlines() == [r.name for r in es.rules.catalog()]


def test_console_script_rules_names():
    exe = shutil.which("exactspec")
    assert exe is not None, "the exactspec console script is not installed"
    proc = subprocess.run([exe, "rules", "--names"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stderr == ""
    names = proc.stdout.splitlines()
    assert names == [r.name for r in es.rules.catalog()]
    assert "speculative_sampling" in names and "ensemble(1/2)" in names


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"exactspec {es.__version__}"


def test_audit_tree_rules_from_the_cli(capsys):
    code, out, _ = run(capsys, "audit", "--rule", "mss", "--vocab", "3", "--tokens", "2")
    assert code == 0 and "tree(expansion=(2, 1), children='iid', claim='draft')" in out and "LOSSLESS" in out
    code, out, _ = run(capsys, "audit", "--rule", "mss", "--vocab", "3", "--tokens", "2", "--children", "topk",
                       "--claim", "draft")
    assert code == 1 and "BIASED" in out
    code, _, err = run(capsys, "audit", "--rule", "speculative_sampling", "--claim", "renormalized")
    assert code == 2 and "claim must be one of draft, point_mass, got 'renormalized'" in err
