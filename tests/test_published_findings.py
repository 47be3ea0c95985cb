"""exactspec.published: the findings data, its rendering into the README and docs, and the release watch's logic.

The findings themselves are measured by the tests each row names (``tests/findings.py``'s ``observe``); here: the
data is consistent (pins, ids, tests that exist and select something), the rendered tables are current, and the
release watch reports changes and mismatches as it should.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

import exactspec as es
import findings as observing
from benchmarks import release_watch
from exactspec.cli import main
from exactspec.published import Finding, Result

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for name in ("published.txt", "published-nodeps.txt"):
        for line in (ROOT / "tests" / name).read_text().splitlines():
            if line and not line.startswith("#"):
                package, release = line.split("==")
                pins[package.strip()] = release.strip()
    return pins


def test_the_rendered_tables_are_current():
    # the README carries the packages table (its front door); docs/real-code.md carries both
    for doc, names in (("README.md", ("packages",)), ("docs/real-code.md", ("packages", "rows"))):
        text = (ROOT / doc).read_text()
        for name, body in es.published.tables().items():
            if name not in names:
                continue
            assert f"findings:{name} begin" in text, doc
            assert body in text, f"{doc}: the {name} table is stale; run exactspec findings --write README.md docs/real-code.md"


def test_every_pin_is_the_one_the_requirement_files_install():
    pins = _pins()
    for package in es.published.packages():
        if package.name == "vllm":            # fetched by exactspec.published.fetch_vllm, not pip-installed
            assert package.pinned == es.published.fetch_vllm.__defaults__[0]
        else:
            assert pins[package.name] == package.pinned, package.name


def test_every_finding_has_its_pinned_release_and_a_unique_id():
    ids = [f.id for f in es.published.findings()]
    assert len(ids) == len(set(ids))
    for f in es.published.findings():
        pinned = es.published.package(f.package).pinned
        assert f.result(pinned) is not None, f.id
        assert not set(f.results) & set(f.not_run), f.id


def _selects(expression: str, name: str) -> bool:
    """pytest's ``-k`` on one test name: words match substrings (case-insensitive), with and / or / not."""
    words = re.sub(r"[A-Za-z_0-9\[\]=.-]+", lambda m: m.group(0) if m.group(0) in ("and", "or", "not")
                   else repr(m.group(0).lower() in name.lower()), expression)
    return bool(eval(words, {"__builtins__": {}}))


def test_every_finding_names_a_test_that_exists_and_selects_something():
    for f in es.published.findings():
        observed = False
        for path, selection in f.selections():
            module = ROOT / path
            assert module.is_file(), f"{f.id}: {path}"
            names = re.findall(r"^def (test_\w+)", module.read_text(), flags=re.M)
            selected = [n for n in names if selection is None or _selects(selection, n)]
            assert selected, f"{f.id}: {path} -k {selection!r} selects no test"
            observed = observed or f'"{f.id}"' in module.read_text()
        assert observed, f"{f.id}: no test it names observes it"


def test_the_selection_helper_follows_pytest():
    assert _selects("truncation or top_k_top_p", "test_option_temperature_top_k_top_p_over_a_second_round")
    assert not _selects("own_generator and top_k2", "test_lucidrains_verification_on_torchs_own_generator")
    assert _selects("lucidrains and own_generator", "test_lucidrains_verification_on_torchs_own_generator")
    assert _selects("not medusa", "test_eagle_alpha")


def test_a_fix_renders_as_fixed_with_its_release():
    f = Finding("demo-fix", "transformers", "`f`", "s", "k", "tests/test_recipes_transformers.py",
                {"5.24.0": Result("biased", "1/3"), "5.25.0": Result("lossless", "0")}, {"5.26.0": "needs torch 9"})
    assert f.fixed_in() == "5.25.0"
    row = es.published._render.row(f, {p.name: p for p in es.published.packages()})
    assert "5.24.0: **biased**; 5.25.0: lossless; fixed in 5.25.0; 5.26.0: not audited (why: the packages table)" in row
    assert "5.24.0: 1/3; 5.25.0: 0" in row


def test_a_finding_that_was_never_fixed_has_no_fix():
    f = Finding("demo", "specdec", "`f`", "s", "k", "t", {"0.1.0": Result("lossless", "0"),
                                                          "0.2.0": Result("biased", "1/2")})
    assert f.fixed_in() is None


def test_a_bad_verdict_is_refused():
    with pytest.raises(ValueError, match="verdict 'lossy'"):
        Result("lossy", "1")


def test_unknown_names_are_errors_naming_the_known_ones():
    with pytest.raises(ValueError, match="known: transformers, vllm"):
        es.published.package("nope")
    with pytest.raises(ValueError, match="transformers-lossless"):
        es.published.finding("transformers-nope")


def test_the_findings_command(capsys):
    assert main(["findings", "--package", "transformers"]) == 0
    out = capsys.readouterr().out
    assert "| transformers | 5.24.0 | 5.25.0 | 5.24.0, 5.25.0 |" in out and "fixed in 5.25.0" in out
    assert main(["findings", "--package", "nope"]) == 2
    assert "no audited package 'nope'" in capsys.readouterr().err


def test_fetch_vllm_refuses_a_release_without_the_v1_sampler(capsys):
    assert main(["fetch-vllm", "--release", "0.34.0"]) == 2
    assert "0.34.0 removed the v1 GPU model runner" in capsys.readouterr().err


def test_write_tables_needs_the_markers(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("no markers here\n")
    with pytest.raises(ValueError, match="holds no findings block"):
        es.published.write_tables(doc)


# -- the test side: observe and the release a test expects ----------------------------------------------------------

def test_observe_records_and_compares_with_the_data(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    out = tmp_path / "obs.jsonl"
    monkeypatch.setenv("EXACTSPEC_FINDINGS_OUT", str(out))
    monkeypatch.delenv("EXACTSPEC_WATCH", raising=False)
    observing.observe("transformers-uag-permuted", "biased", "3/8")
    with pytest.raises(AssertionError, match="measured biased, 1/2; the findings data says biased, 3/8"):
        observing.observe("transformers-uag-permuted", "biased", "1/2")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(o["finding"], o["release"], o["figure"]) for o in lines] == [
        ("transformers-uag-permuted", "5.24.0", "3/8"), ("transformers-uag-permuted", "5.24.0", "1/2")]


def test_a_test_fails_naming_the_installed_release_when_it_is_not_the_expected_one(monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("EXACTSPEC_WATCH", "transformers==5.99.0")
    with pytest.raises(pytest.fail.Exception, match=rf"transformers==5.99.0; installed is {transformers.__version__}"):
        observing.release("transformers")


def test_under_watch_a_release_without_data_is_recorded_not_failed(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("EXACTSPEC_WATCH", f"transformers=={transformers.__version__}")
    bare = Finding("transformers-uag-permuted", "transformers", "`f`", "s", "k", "t")      # no release recorded
    monkeypatch.setattr(es.published, "finding", lambda id: bare)
    observing.observe("transformers-uag-permuted", "biased", "anything")        # nothing to compare with: no failure


def test_watch_spec_is_parsed_and_checked(monkeypatch):
    monkeypatch.setenv("EXACTSPEC_WATCH", "transformers==5.25.0, vllm==0.33.0")
    assert observing.watched() == {"transformers": "5.25.0", "vllm": "0.33.0"}
    monkeypatch.setenv("EXACTSPEC_WATCH", "transformers")
    with pytest.raises(ValueError, match="expected name==release"):
        observing.watched()


# -- the release watch's report -------------------------------------------------------------------------------------

def test_the_watch_reports_a_fix_a_regression_and_a_changed_figure():
    assert release_watch._change(["1", "2"], ["biased", "lossless"], ["biased, x", "lossless, y"]) == "fixed in 2"
    assert release_watch._change(["1", "2"], ["lossless", "biased"], ["a", "b"]) == "new in 2"
    assert release_watch._change(["1", "2", "3"], ["biased", "biased", None], ["b, 1", "b, 2", "x"]) == \
        "figure changed in 2"
    assert release_watch._change(["1", "2"], ["lossless", "lossless"], ["a", "a"]) == "unchanged"


def test_the_watch_table_flags_a_result_that_differs_from_the_data():
    observed = {("transformers-uag-permuted", "5.24.0", ""): {("biased", "3/8")},
                ("transformers-uag-permuted", "5.25.0", ""): {("biased", "1/2")}}
    text, ok = release_watch.table("transformers", ["5.24.0", "5.25.0"], observed, {})
    row = next(line for line in text.splitlines() if line.startswith("| transformers-uag-permuted"))
    assert "figure changed in 5.25.0" in row and "differs on 5.25.0" in row and not ok
    # a finding its test never observed is reported, never read as unchanged
    assert "not observed" in text


def test_the_watch_groups_the_selections_by_module():
    args = release_watch.pytest_args("vllm")
    assert args == [["tests/test_published_vllm.py", "-k", " or ".join(
        f"({f.selections()[0][1]})" for f in es.published.findings("vllm"))]]


@pytest.mark.slow
def test_the_release_watch_runs_a_package_end_to_end():
    # the command as a maintainer runs it: the index's newest eagle-llm (1.2.1, the pin), its findings tests, the table
    pytest.importorskip("eagle.model.utils")
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "benchmarks.release_watch", "eagle-llm"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| eagle-")]
    instances = sum(len(f.result("1.2.1").figures) for f in es.published.findings("eagle-llm"))
    assert len(rows) == instances == 13 and all(row.endswith("| unchanged | matches |") for row in rows)
    assert "## eagle-llm: pinned 1.2.1, newest on the index 1.2.1" in done.stdout
