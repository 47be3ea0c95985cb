"""es.sweep / exactspec sweep: a grid of audits (or searches), one table, the same with any number of workers."""

import csv
import io
import json

import pytest

import exactspec as es
from exactspec.cli import main

GRID = dict(rules=["speculative_sampling", "stale_draft_probs"], proposers=["sample/draft", "argmax/point_mass"],
            vocabs=(2, 3), gammas=(1, 2), order=1)


def test_sweep_rows_in_grid_order_and_claims():
    t = es.sweep(**GRID)
    assert [(r["rule"], r["proposer"], r["vocab"], r["gamma"]) for r in t.rows][:3] == [
        ("speculative_sampling", "sample/draft", 2, 1), ("speculative_sampling", "sample/draft", 2, 2),
        ("speculative_sampling", "sample/draft", 3, 1)]
    assert all(r["holds"] == "yes" for r in t.rows if r["rule"] == "speculative_sampling")
    # a stale draft law needs a second draft position: at gamma 1 the claim is lossless (the claim's condition,
    # issue 16 section 6; this row read "biased" / NO before), and it holds
    assert {(r["claim"], r["verdict"], r["holds"]) for r in t.rows
            if r["rule"] == "stale_draft_probs" and r["gamma"] == 1} == {("lossless", "lossless", "yes")}
    # argmax drafts on this vocab-2 instance draft token 1 after either token, so the stale point mass is the right
    # one and this seeded instance does not bear out "biased" at gamma 2: still a broken claim, exit 1
    assert [(r["rule"], r["proposer"], r["vocab"], r["gamma"]) for r in t.rows if r["holds"] != "yes"] == [
        ("stale_draft_probs", "argmax/point_mass", 2, 2)]
    assert t.exit_code == 1 and not t.ok


def test_sweep_is_the_same_on_a_process_pool():
    a, b = es.sweep(**GRID, workers=None), es.sweep(**GRID, workers=2)
    assert a.to_csv(timings=False) == b.to_csv(timings=False)
    assert [r["tv"] for r in a.rows] == [r["tv"] for r in b.rows]


def test_sweep_json_and_csv():
    t = es.sweep(["speculative_sampling"], vocabs=(2,), gammas=(1,), order=1)
    d = json.loads(t.to_json())
    assert d["exit_code"] == 0 and d["rows"][0]["tv"] == "0" and d["rows"][0]["verdict"] == "lossless"
    rows = list(csv.DictReader(io.StringIO(t.to_csv(timings=False))))
    assert rows[0]["rule"] == "speculative_sampling" and "seconds" not in rows[0]


def test_sweep_search_mode_covers_each_cell():
    t = es.sweep(["stale_draft_probs"], vocabs=(2,), gammas=(1, 2), tokens=(2,), search=True, workers=2)
    assert [r["verdict"] for r in t.rows] == ["lossless", "biased"]
    assert t.rows[1]["tv"] == "1/2"


def test_sweep_time_limit_makes_cells_incomplete_never_a_pass():
    t = es.sweep(["speculative_sampling"], vocabs=(5,), gammas=(4,), seconds=1e-6)
    assert t.rows[0]["verdict"] == "incomplete" and t.exit_code == 3


def test_sweep_bad_arguments_are_typed_errors():
    with pytest.raises(es.ExactSpecError, match="family"):
        es.sweep(["speculative_sampling"], family="forest")
    with pytest.raises(es.ExactSpecError, match="verifies trees"):
        es.sweep(["mss"])
    with pytest.raises(es.ExactSpecError):
        es.sweep(["speculative_sampling"], proposers=["nonsense/draft"])


def test_cli_sweep_csv_and_exit_code(capsys):
    # argmax drafts told the soft draft law: the lossless claims break (speculative_sampling at gamma 1 and 2, and
    # stale_draft_probs at gamma 1, where its claim is lossless); on sample/draft every claim holds
    code = main(["sweep", "--rules", "speculative_sampling,stale_draft_probs", "--proposers",
                 "sample/draft argmax/draft", "--vocabs", "2", "--gammas", "1 2", "--order", "1", "--csv",
                 "--no-timings", "--workers", "2"])
    out = capsys.readouterr().out
    assert code == 1 and out.splitlines()[0].startswith("rule,family,proposer")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["rule"], r["proposer"], r["gamma"]) for r in rows if r["holds"] == "NO"] == [
        ("speculative_sampling", "argmax/draft", "1"), ("speculative_sampling", "argmax/draft", "2"),
        ("stale_draft_probs", "argmax/draft", "1")]
    assert main(["sweep", "--rules", "speculative_sampling,stale_draft_probs", "--vocabs", "2", "--gammas", "1 2",
                 "--order", "1"]) == 0
    assert main(["sweep", "--rules", "speculative_sampling", "--vocabs", "2", "--gammas", "1", "--order", "1"]) == 0
    assert "1/1 claims hold" in capsys.readouterr().out
