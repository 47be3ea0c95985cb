"""Progress of long jobs (exactspec._progress): a bar on a terminal, a summary line every few seconds in logs,
nothing for short jobs or with --quiet / progress=False. A fake clock drives it: no sleeping, no dependence on
the machine's speed."""

from __future__ import annotations

import io
import re
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import _progress, parallel
from exactspec.cli import main


class FakeClock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_summary_line_every_ten_seconds_with_total_and_eta():
    clock, log = FakeClock(), io.StringIO()
    bar = _progress.reporter("searching", unit="instances", stream=log, clock=clock)
    for done in range(0, 5001, 100):    # 1 s per 100 instances: 50 s in all
        bar(done, 5000)
        clock.now += 1.0
    bar.close()
    lines = log.getvalue().splitlines()
    # every 10 s (at 10, 20, 30, 40 s), then a last line at the end
    assert lines[0] == "searching: 1000/5000 instances, 10 s, ETA 40 s"
    assert lines[1] == "searching: 2000/5000 instances, 20 s, ETA 30 s"
    assert len(lines) == 6 and lines[-1] == "searching: 5000/5000 instances, 51 s, done"
    assert all(re.fullmatch(r"searching: \d+/5000 instances, \d+ s, (ETA \d+ s|done)", ln) for ln in lines)


def test_eta_reads_in_minutes_and_an_unknown_total_is_a_counter():
    clock, log = FakeClock(), io.StringIO()
    bar = _progress.reporter("searching", unit="instances", stream=log, clock=clock)
    clock.now += 34
    bar(1200, 5000)
    assert log.getvalue() == "searching: 1200/5000 instances, 34 s, ETA 1 min 48 s\n"
    log2 = io.StringIO()
    cells = _progress.reporter("proving", unit="cells proven", stream=log2, clock=clock)
    clock.now += 12
    cells(7, None)
    cells.close()
    assert log2.getvalue() == "proving: 7 cells proven, 12 s\nproving: 7 cells proven, 12 s, ended\n"


@pytest.mark.parametrize("stream", [io.StringIO, Tty])
def test_a_job_shorter_than_the_delay_prints_nothing(stream):
    clock, out = FakeClock(), stream()
    bar = _progress.reporter("check", unit="configurations", stream=out, clock=clock)
    for done in range(1, 26):
        clock.now += 0.03   # 0.75 s in all: under a second, under ten
        bar(done, 25)
    bar.close()
    assert out.getvalue() == ""


def test_a_terminal_gets_a_bar_with_the_total_and_an_eta_and_it_is_erased_at_the_end():
    clock, tty = FakeClock(), Tty()
    bar = _progress.reporter("searching", unit="instances", stream=tty, clock=clock)
    bar(10, 5000)
    assert tty.getvalue() == ""            # not yet a second
    clock.now += 1.5
    bar(600, 5000)                         # shown now
    clock.now += 1.0
    bar(1200, 5000)
    bar.bar.refresh()                      # tqdm redraws at most every 0.25 s of its own clock
    shown = tty.getvalue()
    assert "searching" in shown and "1200/5000" in shown and "instances" in shown
    assert re.search(r"\[\d\d:\d\d<[\d:?]+", shown)   # elapsed<remaining: the ETA
    bar.close()                            # erased: the line is blanked, the cursor back at its start
    assert tty.getvalue().endswith("\r") and tty.getvalue().rsplit("\r", 2)[-2].strip() == ""


def test_disabled_is_none_and_a_users_callable_is_kept(capfd):
    assert _progress.reporter("sweep", enabled=False) is None
    assert _progress.resolve(False, "sweep") is None
    assert _progress.resolve(print, "sweep") is print
    assert isinstance(_progress.resolve(None, "sweep"), _progress.Reporter)
    with pytest.raises(es.ExactSpecError, match="progress must be"):
        _progress.resolve("yes", "sweep")


def test_terminal_progress_is_a_reporter_counting_chunks():
    out = io.StringIO()
    progress = parallel.terminal_progress("sweep", stream=out)
    assert isinstance(progress, _progress.Reporter) and progress.unit == "chunks"
    progress(1, 3)
    progress.close()
    assert out.getvalue() == ""


# -- the commands: lines appear when the interval is 0 s, and --quiet / progress=False silence them ---------------

SMALL_SEARCH = ["search", "--rule", "speculative_sampling", "--max-vocab", "2", "--max-gamma", "1", "--tokens", "1",
                "--max-denominator", "3", "--workers", "1", "--json", "--no-timings"]


@pytest.fixture
def every_report(monkeypatch):
    """Show progress at once and at every report (as a long job past its interval would)."""
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    monkeypatch.setattr(_progress, "DELAY", 0.0)


def test_search_reports_progress_and_quiet_silences_it(capfd, every_report):
    assert main(SMALL_SEARCH) == 0
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert lines and all(re.fullmatch(r"searching: \d+/\d+ instances, \d+ s(, ETA \d+ s|, done)?", ln) for ln in lines)
    assert main(SMALL_SEARCH + ["--quiet"]) == 0
    out_q, err_q = capfd.readouterr()
    assert err_q == "" and out_q == out


def test_search_in_process_counts_instances_against_the_planned_total(capfd, every_report):
    from exactspec.counterexamples import Space
    space = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=2)
    found = es.counterexamples.search(es.rules.speculative_sampling, space=space)
    err = capfd.readouterr().err
    assert f"/{found.audited} instances" in err and err.splitlines()[-1].endswith(", done")
    es.counterexamples.search(es.rules.speculative_sampling, space=space, progress=False)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("argv", [
    ["sweep", "--rules", "speculative_sampling", "--vocabs", "2", "--gammas", "1", "--workers", "1"],
    ["check", "--workers", "1"],
])
def test_sweep_and_check_report_and_quiet_silences(capfd, every_report, monkeypatch, argv):
    if argv[0] == "check":   # three configurations are enough to see it
        from exactspec.cli import check
        from exactspec.instances import check_cases
        monkeypatch.setattr(check, "check_cases", lambda inst: check_cases(inst)[:3])
    code = main(argv)
    out, err = capfd.readouterr()
    unit = "cells" if argv[0] == "sweep" else "configurations"
    assert re.search(rf"^{argv[0]}: \d+/\d+ {unit}, \d+ s", err, re.M)
    assert main(argv + ["-q"]) == code
    out_q, err_q = capfd.readouterr()
    assert err_q == ""


def test_sampler_search_reports_progress_and_false_silences(capfd, every_report):
    from exactspec.bugzoo import numpy_samplers as zoo
    from exactspec.counterexamples import Space
    from exactspec.samplers.search import search_sampler
    small = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=1,
                  exhaustive_denominator=2)
    found = search_sampler(zoo.correct, space=small)
    err = capfd.readouterr().err
    assert f"searching: {found.audited}/{found.audited} instances" in err
    search_sampler(zoo.correct, space=small, progress=False)
    assert capfd.readouterr().err == ""


def test_prove_reports_cells_and_quiet_silences(capfd, every_report):
    pytest.importorskip("z3")
    argv = ["prove", "--rule", "speculative_sampling", "--vocab", "2", "--tokens", "1", "--family", "table"]
    assert main(argv) == 0
    err = capfd.readouterr().err
    assert re.search(r"^proving: \d+/\d+ cells proven, \d+ s", err, re.M)   # the prover reports the cells known so far
    assert main(argv + ["--quiet"]) == 0
    assert capfd.readouterr().err == ""


def test_a_command_shorter_than_the_interval_prints_no_progress(capfd, monkeypatch):
    monkeypatch.setattr(_progress, "EVERY", 1e9)     # however slow the machine, the job is shorter than this
    monkeypatch.setattr(_progress, "DELAY", 1e9)
    assert main(SMALL_SEARCH) == 0                   # without --quiet
    assert capfd.readouterr().err == ""


def test_a_captured_in_memory_stderr_gets_no_progress_however_long_the_job(capsys, every_report):
    """stderr replaced by an in-memory stream (capsys here, redirect_stderr in a program): its messages only."""
    assert main(SMALL_SEARCH) == 0                   # without --quiet
    assert capsys.readouterr().err == ""
    found = es.counterexamples.search(es.rules.speculative_sampling, space=es.counterexamples.Space(
        vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=2))
    assert not found and capsys.readouterr().err == ""


def test_a_single_loop_audit_reports_the_probability_covered_and_quiet_silences(capfd, every_report):
    pytest.importorskip("torch")
    argv = ["audit-loop", "exactspec.bugzoo.loops:speculative_sampling", "--instance", "--vocab", "2", "--tokens",
            "1", "--json", "--no-timings"]
    code = main(argv)
    out, err = capfd.readouterr()
    lines = [ln for ln in err.splitlines() if not ln.startswith("exactspec: warning:")]   # tokens=1: a horizon warning
    assert lines and all(re.fullmatch(r"audit_loop \S+( \((own precision|float64 run)\))?: \d+% of the probability, "
                                      r"\d+ s(, ETA \d+ s|, done)?", ln) for ln in lines), lines
    assert re.fullmatch(r".*: 100% of the probability, \d+ s, done", lines[-1])
    assert main(argv + ["--quiet"]) == code
    out_q, err_q = capfd.readouterr()
    assert "% of the probability" not in err_q and out_q == out


def test_a_single_rule_audit_reports_the_probability_decided_and_quiet_silences(capfd, every_report):
    argv = ["audit", "--rule", "speculative_sampling", "--vocab", "3", "--gamma", "2", "--json", "--no-timings"]
    code = main(argv)
    out, err = capfd.readouterr()
    lines = err.splitlines()
    line = r"audit speculative_sampling: \d+% of the probability, \d+ s(, ETA \d+ s|, done)?"
    assert lines and all(re.fullmatch(line, ln) for ln in lines), lines
    assert re.fullmatch(r".*: 100% of the probability, \d+ s, done", lines[-1])
    assert main(argv + ["--quiet"]) == code
    out_q, err_q = capfd.readouterr()
    assert err_q == "" and out_q == out


@pytest.mark.parametrize("legacy", [False, True])
def test_the_engine_counts_the_probability_of_the_decided_outcomes_up_to_one(legacy):
    # both compositions of the stream (forwards on the fast path, the memoised recursion on the legacy one)
    from exactspec.enumerate import Engine
    from exactspec.fields import get_field
    p, q = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=2)
    eng = Engine(es.rules.speculative_sampling, es.drafts.chain(2), p, q, get_field(), legacy=legacy)
    seen = []
    eng.meter.mass = _progress.MassProgress(lambda done, total: seen.append(done))
    with eng.guard():
        law, _ = eng.output((0,), 4)
    assert sum(law.values()) == 1 and seen and seen[-1] == 100 and all(d < 100 for d in seen[:-1])
    assert seen == sorted(seen)
    seen.clear()
    r = es.audit(target=p, draft=q, proposer=es.drafts.chain(2), rule="speculative_sampling", prompt=(0,), tokens=4,
                 progress=lambda done, total: seen.append((done, total)))
    assert r.output == law and seen[-1] == (100, 100)


def test_a_single_sampler_audit_reports_each_run_and_false_silences(capfd, every_report):
    from exactspec.bugzoo import float32_samplers, numpy_samplers as zoo
    p, q = es.models.random_table(vocab=3, order=1, seed=1), es.models.random_table(vocab=3, order=1, seed=2)
    seen = []
    r = es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(2), prompt=(0,), tokens=3,
                         progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (100, 100) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert capfd.readouterr().err == ""              # a callable receives it; nothing is printed
    es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(2), prompt=(0,), tokens=3)
    err = capfd.readouterr().err
    assert re.search(r"^audit_sampler correct: 100% of the probability, \d+ s, done$", err, re.M), err
    es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(2), prompt=(0,), tokens=3,
                     progress=False)
    assert capfd.readouterr().err == ""
    # a float32 sampler runs twice (its own precision, then float64 with every torch operation watched and its casts
    # lifted as it goes; it used to take a third run for the watch): each run counts to 100 on its own
    pytest.importorskip("torch")
    third = es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))
    seen.clear()
    two = es.audit_sampler(float32_samplers.residual_epsilon, adapter="vllm", target=third,
                           draft=es.models.context_free((F(1, 6), F(1, 2), F(1, 3))), proposer=es.drafts.chain(1),
                           tokens=1, progress=lambda done, total: seen.append(done))
    assert "float64_run" in two.extra
    runs, current = [], []
    for done in seen:
        current.append(done)
        if done == 100:
            runs.append(current)
            current = []
    assert not current and len(runs) == 2 and "forced_precision" not in two.extra
    assert all(run == sorted(run) and run[0] < 100 for run in runs)
    assert r.output == es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(2), prompt=(0,),
                                        tokens=3, progress=False).output
