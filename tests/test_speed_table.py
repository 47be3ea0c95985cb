"""benchmarks/speed_table.py: the speed table of docs/performance.md, one run, each row beside its baseline."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from benchmarks import speed_table

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_page_shows_the_recorded_run():
    """docs/performance.md's marked section is the table of benchmarks/speed_rows.json, written by --write."""
    text, ok = speed_table.table(json.loads(speed_table.ROWS_FILE.read_text()))
    page = speed_table.PAGE.read_text()
    assert f"{speed_table.START}\n{text}\n{speed_table.END}" in page
    assert ok and page.count(speed_table.START) == 1


def test_write_replaces_the_section_of_a_page_with_one_cheap_row(tmp_path, capsys):
    page = tmp_path / "performance.md"
    page.write_text(f"# Performance\n\nbefore\n\n{speed_table.START}\nold table\n{speed_table.END}\n\nafter\n")
    rows_file = tmp_path / "rows.json"
    recorded = speed_table.ROWS_FILE.read_text()
    code = speed_table.main(["--only", "baseline", "--job", "gamma 1 tokens 3", "--write", "--output", str(page),
                             "--rows-file", str(rows_file)])
    assert code == 0
    body = page.read_text()
    assert "old table" not in body and body.startswith("# Performance\n\nbefore\n") and body.endswith("\nafter\n")
    section = body.split(speed_table.START)[1].split(speed_table.END)[0]
    run = json.loads(rows_file.read_text())["run"]
    assert run["cores"] == os.cpu_count() and run["subset"]
    assert f"Run: {run['when']}, {os.cpu_count()} cores" in section and "load average (1 min)" in section
    [row] = [line for line in section.splitlines() if line.startswith("| exact engine vs plain recursion")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0].endswith("gamma 1 tokens 3") and cells[5] == "identical"
    assert all(c.endswith(" s") and float(c.split()[0]) > 0 for c in cells[1:3])
    assert cells[3].endswith("x") and float(cells[3][:-1]) > 0
    # a subset never touches the recorded run or the page
    assert speed_table.ROWS_FILE.read_text() == recorded
    assert "subset: " in section


def test_a_subset_is_never_written_over_the_page(capsys):
    with pytest.raises(SystemExit) as info:
        speed_table.main(["--only", "baseline", "--write"])
    assert info.value.code == 2
    assert "--output" in capsys.readouterr().err


def test_rows_that_disagree_fail_the_table():
    run = {"when": "2026-01-01 00:00 UTC", "cores": 2, "python": "3.11.7", "load_start": "0.1", "load_end": "0.2"}
    rows = [{"job": "a", "new_s": 1.0, "old_s": 3.0, "same": True, "target_s": 2.0, "note": "n"},
            {"job": "b", "new_s": 1.0, "old_s": None, "old_capped_s": 60.0, "same": False, "target_s": None}]
    module = {"rows": rows, "seconds": 64.0, "when": "00:01 UTC", "load": "0.1 at the start, 0.2 at the end"}
    text, ok = speed_table.table({"run": run, "modules": {"bench_speed_x": module}})
    assert ok and "| a | 3.00 s | 1.00 s | 3.0x | <= 2.00 s (yes) | identical | n |" in text
    assert "| b | > 60.00 s (stopped) | 1.00 s | >= 60.0x | - | not compared (baseline stopped) |  |" in text
    rows[0]["same"] = False
    text, ok = speed_table.table({"run": run, "modules": {"bench_speed_x": module}})
    assert not ok and "**DIFFER**" in text
