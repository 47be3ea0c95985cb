"""Packaging and CLI details (issue 13): ``python -m exactspec``, one version, LICENSE/py.typed/CHANGELOG,
help with defaults, ``rules --json``, a ``check`` table that fits 120 columns, ``--no-timings``, and
the bug zoo runnable from any directory.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

import exactspec as es
from exactspec import cli
from exactspec.instances import check_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
ADAPTERS = ("numpy", "numpy-tree", "transformers", "vllm", "flashinfer", "vllm-v1", "torch-tree", "sglang",
            "sglang-tree-greedy")


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_quiet(*argv: str) -> tuple[int, str]:
    """``main(argv)`` -> (exit code, stdout), usable from module-scoped fixtures."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(list(argv))
    return code, buf.getvalue()


# -- packaging ---------------------------------------------------------------------------------------

def test_python_dash_m_runs_the_cli_with_its_exit_codes(tmp_path):
    def pym(*argv):
        return subprocess.run([sys.executable, "-m", "exactspec", *argv], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
    res = pym("rules", "--names")
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.splitlines() == [r.name for r in es.rules.catalog()]
    res = pym("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"exactspec {es.__version__}"
    res = pym("audit", "--rule", "nope")
    assert res.returncode == 2 and res.stdout == "" and "unknown rule 'nope'" in res.stderr
    res = pym("audit", "--rule", "greedy_match_sampled", "--vocab", "3", "--gamma", "1")
    assert res.returncode == 1 and "BIASED" in res.stdout


def test_the_version_is_written_in_one_place():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "exactspec.__version__"}
    assert importlib.metadata.version("exactspec") == es.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", es.__version__)


def test_license_py_typed_changelog_and_markers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == {"text": "MIT"}
    lic = (ROOT / "LICENSE").read_text()
    assert lic.startswith("MIT License") and "the exactspec authors" in lic
    assert (ROOT / "exactspec" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["exactspec"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog and f"## {es.__version__} - " in changelog
    assert any(m.startswith("slow:") for m in project["tool"]["pytest"]["ini_options"]["markers"])


# -- help ------------------------------------------------------------------------------------------------

def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_is_walked():
    assert set(subparsers()) == {"check", "audit", "search", "audit-sampler", "audit-loop", "rules", "prove", "sweep",
                                 "findings", "fetch-vllm"}


@pytest.mark.parametrize("name", ["check", "audit", "search", "audit-sampler", "audit-loop", "rules", "prove",
                                  "sweep", "findings", "fetch-vllm"])
def test_every_option_has_help_with_its_default(name):
    sp = subparsers()[name]
    for action in sp._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        assert action.help, f"{name} {action.option_strings[0]} has no help"
        if isinstance(action, argparse._StoreTrueAction):
            continue
        assert "default" in action.help, f"{name} {action.option_strings[0]}: the help does not state its default"
        if action.choices:
            for choice in action.choices:
                assert choice in action.help, f"{name} {action.option_strings[0]}: choice {choice} not in the help"


def test_adapter_help_lists_every_adapter_and_rejects_others(capsys):
    adapter = next(a for a in subparsers()["audit-sampler"]._actions if "--adapter" in a.option_strings)
    assert cli.adapter_names() == ADAPTERS
    for name in ADAPTERS + tuple(es.samplers.ADAPTERS):
        assert name in adapter.help and name in adapter.choices
    assert "default numpy" in adapter.help
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--adapter", "nope")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--adapter" in err


def test_search_help_states_the_default_space():
    from exactspec.counterexamples import default_space
    chain_space = default_space(es.rules.get("speculative_sampling"))
    tree_space = default_space(es.rules.mss)
    helps = {a.option_strings[0]: " ".join(a.help.split()) for a in subparsers()["search"]._actions
             if a.option_strings}
    vocabs = f"default {max(chain_space.vocabs)} for chain rules, {max(tree_space.vocabs)} for tree"
    assert vocabs in helps["--max-vocab"]
    assert f"default {chain_space.max_denominator}" in helps["--max-denominator"]
    assert f"default {max(chain_space.tokens)} for chain rules" in helps["--tokens"]
    assert f"largest gamma (default {max(s[0] for s in chain_space.shapes)})" in helps["--max-gamma"]


# -- rules --json ------------------------------------------------------------------------------------------

def test_rules_json_is_the_catalog_and_the_check_configurations(capsys):
    code, out, err = run(capsys, "rules", "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    catalog = es.rules.catalog()
    assert [r["name"] for r in d["rules"]] == [r.name for r in catalog]
    for rec, rule in zip(d["rules"], catalog):
        assert rec == {"name": rule.name, "family": rule.family, "claim": rule.claim,
                       "condition": None if rule.condition is None else str(rule.condition),
                       "otherwise": rule.otherwise, "claim_text": rule.claim_text,
                       "description": rule.description, "reference": rule.reference,
                       "params": {str(k): str(v) for k, v in rule.params.items()}}
    assert any(rec["params"] for rec in d["rules"])   # parameterised rules carry their arguments, as strings
    cases = check_cases()
    assert d["check"] == [{"rule": c.rule.name, "proposer": c.proposer.describe(), "claim": c.claim,
                           "tokens": c.tokens} for c in cases]
    code, out, _ = run(capsys, "rules", "--json", "--names")
    assert code == 0 and json.loads(out) == [r.name for r in catalog]


# -- the check table -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def check_text() -> str:
    code, out = run_quiet("check")
    assert code == 0
    return out


@pytest.fixture(scope="module")
def check_wide() -> str:
    code, out = run_quiet("check", "--wide")
    assert code == 0
    return out


def table_rows(out: str) -> list[str]:
    lines = out.splitlines()
    dash = next(i for i, ln in enumerate(lines) if ln.startswith("----"))
    return lines[dash + 1:lines.index("", dash)]


def tv_column(out: str) -> list[str]:
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.startswith("rule "))
    start = header.index(" TV ") + 1
    return [row[start:].split()[0] for row in table_rows(out)]


@pytest.mark.slow
def test_check_fits_120_columns(check_text):
    assert max(len(ln) for ln in check_text.splitlines()) <= cli.TABLE_WIDTH == 120
    rows = table_rows(check_text)
    cases = check_cases()
    assert len(rows) == len(cases)
    for row, case in zip(rows, cases):
        assert row.startswith(case.rule.name + " ")
    assert "chain g=4 sample/draft" in check_text and "tree (2,1) topk/point_mass" in check_text
    assert "merge 2x g=2" in check_text
    header = next(ln for ln in check_text.splitlines() if ln.startswith("rule "))
    assert header.split() == ["rule", "proposer", "tokens", "claim", "TV", "verdict", "holds"]
    assert "25/25 claims hold" in check_text


@pytest.mark.slow
def test_check_tv_column_has_one_format(check_text, check_wide):
    for out in (check_text, check_wide):
        tvs = tv_column(out)
        assert len(tvs) == len(check_cases())
        for tv in tvs:
            assert "/" not in tv and "~" not in tv
            assert tv == "0" or re.fullmatch(r"\d\.\d{0,3}(e-\d+)?|0\.\d+", tv), tv
            assert tv == "0" or len(re.sub(r"e-\d+$", "", tv).lstrip("0.").replace(".", "")) <= 4, tv
        assert "6.779e-38" in tvs            # tiny_clamp_residual, far below float formatting of "~"
        assert "0.9748" in tvs               # typical_acceptance: once printed as a 17-digit fraction
    assert tv_column(check_text) == tv_column(check_wide)


@pytest.mark.slow
def test_check_wide_shows_every_column_and_the_full_proposer(check_wide):
    header = next(ln for ln in check_wide.splitlines() if ln.startswith("rule "))
    for col in ("tokens/call", "accepted/call", "nodes/call", "time"):
        assert col in header
    for row, case in zip(table_rows(check_wide), check_cases()):
        assert case.proposer.describe() in row


@pytest.mark.slow
def test_check_float_field_fits_and_says_it_is_not_a_proof(capsys):
    code, out, _ = run(capsys, "check", "--field", "float")
    assert code == 3
    assert max(len(ln) for ln in out.splitlines()) <= 120
    assert "not an exact proof" in out and "lossless (within 1e-12)" in out
    assert all("/" not in tv for tv in tv_column(out))


def test_sig4_rounds_exactly():
    from fractions import Fraction
    assert cli._sig4(Fraction(146767916, 175720125)) == "0.8352"
    assert cli._sig4(Fraction(2549, 10000)) == "0.2549"
    assert cli._sig4(Fraction(1, 3 * 10 ** 500)) == "3.333e-501"
    assert cli._sig4(0) == "0" and cli._sig4(0.0) == "0"


# -- --no-timings: byte-identical JSON ---------------------------------------------------------------------

def twice(capsys, *argv):
    first = run(capsys, *argv)
    second = run(capsys, *argv)
    assert first == second, "two runs printed different output"
    assert '"seconds"' not in first[1]
    return first


def test_audit_json_no_timings_is_byte_identical(capsys):
    code, out, _ = twice(capsys, "audit", "--rule", "greedy_match_sampled", "--vocab", "3", "--gamma", "2", "--json",
                         "--no-timings")
    assert code == 1 and json.loads(out)["tv"] != "0"
    # without the option the timing is there
    assert "seconds" in json.loads(run(capsys, "audit", "--rule", "greedy_match_sampled", "--vocab", "3", "--gamma",
                                       "2", "--json")[1])


def test_search_json_no_timings_is_byte_identical(capsys):
    code, out, _ = twice(capsys, "search", "--rule", "greedy_match_sampled", "--json", "--no-timings")
    assert code == 1 and json.loads(out)["found"] is True


@pytest.mark.slow
def test_check_json_no_timings_is_byte_identical(capsys, monkeypatch):
    # a chain, a tree and the merge configuration (every row carries the same timing fields)
    monkeypatch.setattr(cli.check, "check_cases",
                        lambda inst: [c for i, c in enumerate(check_cases(inst)) if i in (0, 2, 12, 18)])
    code, out, _ = twice(capsys, "check", "--json", "--no-timings")
    assert code == 0 and len(json.loads(out)["rules"]) == 4


@pytest.mark.parametrize("mode", [[], ["--instance"]])
def test_audit_sampler_json_no_timings_is_byte_identical(capsys, mode):
    code, out, _ = twice(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "3",
                         "--gamma", "2", "--json", "--no-timings", *mode)
    assert code == 1


@pytest.mark.parametrize("argv", [["audit", "--rule", "speculative_sampling", "--no-timings"],
                                  ["search", "--rule", "no_bonus", "--no-timings"],
                                  ["check", "--no-timings"], ["check", "--wide", "--json"],
                                  ["audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--no-timings"]])
def test_options_for_the_other_output_are_refused(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("exactspec: error: ")


def test_drop_timings_is_recursive():
    d = {"seconds": 1.0, "a": [{"seconds": 2, "wall_seconds": 3, "b": {"elapsed": 4, "paths": 5}}], "tv": "0"}
    assert cli.drop_timings(d) == {"a": [{"b": {"paths": 5}}], "tv": "0"}


# -- the bug zoo from any directory --------------------------------------------------------------------------

def test_bug_zoo_runs_from_any_directory(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    # neither the repository root nor the current directory can supply the zoo: it comes with the package
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".") and pathlib.Path(p).resolve() != ROOT])
    monkeypatch.delitem(sys.modules, "exactspec.bugzoo.numpy_samplers", raising=False)
    monkeypatch.delitem(sys.modules, "exactspec.bugzoo", raising=False)
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "3",
                         "--instance")
    assert code == 1 and "BIASED" in out, err
    code, out, _ = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--vocab", "3", "--instance")
    assert code == 0
    # the default is a search: the README's command finds the minimal counterexample from here too
    code, out, err = run(capsys, "audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "3")
    assert code == 1 and "counterexample for shared_uniform" in out, err


def test_the_readme_names_the_installed_zoo():
    readme = (ROOT / "README.md").read_text()
    assert "exactspec audit-sampler exactspec.bugzoo.numpy_samplers:shared_uniform --vocab 3" in readme
    assert "examples/bugzoo" not in readme and "examples.bugzoo" not in readme
    assert not (ROOT / "examples" / "bugzoo").exists()


def test_the_zoo_package_does_not_import_torch():
    res = subprocess.run([sys.executable, "-c", "import sys, exactspec.bugzoo, exactspec.bugzoo.numpy_samplers; "
                                                "print('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr
