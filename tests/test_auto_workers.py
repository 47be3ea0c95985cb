"""Every core by default (workers="auto", the default of the searches and the sweep, in Python and on the command
line): a long job runs on a pool, a short one stays in this process, and the result is the same as in-process
(workers=1, workers=None) either way."""

from __future__ import annotations

import inspect
import json
import multiprocessing
import sys

import pytest

import exactspec as es
from exactspec import parallel
from exactspec.cli import main
from exactspec.counterexamples import Space

CORES = parallel.resolve_workers(0)
needs_two_cores = pytest.mark.skipif(CORES < 2, reason="every core is this process on a one-core machine")

SMALL = Space(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2), families=("context_free", "per_position"),
              random_points=3, exhaustive_denominator=3)


@pytest.fixture
def pools(monkeypatch):
    """Count the local pools started (the parallel path) without changing them."""
    started = []
    real = parallel._pool

    def counting(n):
        started.append(n)
        return real(n)
    monkeypatch.setattr(parallel, "_pool", counting)
    return started


@pytest.fixture
def long_enough(monkeypatch):
    """Every job counts as long: workers="auto" takes the parallel path (on 2 cores or more)."""
    monkeypatch.setattr(parallel, "AUTO_MIN_SECONDS", 0.0)
    monkeypatch.setattr(parallel, "AUTO_MIN_SECONDS_SPAWN", 0.0)


def test_auto_workers_decides_from_the_estimate_and_the_budget():
    assert parallel.auto_workers(None, 1e6) is None and parallel.auto_workers(1, 1e6) == 1
    assert parallel.auto_workers(3, 0.0) == 3                       # an explicit number is kept
    assert parallel.auto_workers(parallel.AUTO, 0.5) is None         # short: this process
    assert parallel.auto_workers(parallel.AUTO, 1e6, budget=0.5) is None   # the budget caps the estimate
    assert parallel.auto_workers(parallel.AUTO, 1e6) == (0 if CORES >= 2 else None)


def _same_search(a, b):
    assert type(a) is type(b)
    assert a.audited == b.audited and a.space == b.space
    if isinstance(a, es.counterexamples.Counterexample):
        assert a.instance == b.instance and a.tv == b.tv and a.output == b.output and a.expected == b.expected


@needs_two_cores
@pytest.mark.parametrize("rule", ["speculative_sampling", "stale_draft_probs"])
def test_a_long_search_takes_every_core_and_finds_what_one_worker_finds(pools, long_enough, rule):
    r = es.rules.get(rule)
    one = es.counterexamples.search(r, space=SMALL, workers=1, progress=False, chunk_size=16)
    assert pools == []                  # workers=1: in this process
    auto = es.counterexamples.search(r, space=SMALL, workers="auto", progress=False, chunk_size=16)
    assert pools == [CORES]             # the parallel path, on every core
    _same_search(auto, one)
    _same_search(auto, es.counterexamples.search(r, space=SMALL, progress=False, workers=None))   # and in-process


def test_a_short_search_stays_in_this_process(pools):
    tiny = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), families=("context_free",), random_points=2)
    found = es.counterexamples.search(es.rules.speculative_sampling, space=tiny, workers="auto", progress=False)
    assert pools == [] and not found and found.complete


@needs_two_cores
def test_a_long_sweep_takes_every_core_and_prints_the_same_table(pools, long_enough):
    grid = dict(rules=["speculative_sampling", "greedy_match_sampled"], vocabs=(2, 3), gammas=(1,), progress=False)
    one = es.sweep(workers=1, **grid)
    assert pools == []
    auto = es.sweep(workers="auto", **grid)
    assert pools == [CORES]
    assert auto.to_csv(timings=False) == one.to_csv(timings=False) == es.sweep(workers=None, **grid).to_csv(
        timings=False)


def test_a_short_sweep_stays_in_this_process(pools):
    es.sweep(["speculative_sampling"], vocabs=(2,), gammas=(1,), workers="auto", progress=False)
    assert pools == []


# -- the Python API: "auto" is the default of the searches and the sweep ---------------------------------------------

def test_the_searches_and_the_sweep_default_to_auto():
    from exactspec.samplers.search import search_sampler
    for fn in (es.counterexamples.search, search_sampler, es.sweep):
        assert inspect.signature(fn).parameters["workers"].default == parallel.AUTO, fn.__name__


@needs_two_cores
def test_a_long_search_takes_every_core_by_default(pools, long_enough):
    r = es.rules.get("stale_draft_probs")
    default = es.counterexamples.search(r, space=SMALL, progress=False)
    assert pools == [CORES]
    _same_search(default, es.counterexamples.search(r, space=SMALL, progress=False, workers=None))
    assert pools == [CORES]             # workers=None: this process


@needs_two_cores
def test_a_long_sampler_search_takes_every_core_by_default(pools, long_enough):
    from exactspec.bugzoo import numpy_samplers as zoo
    from exactspec.samplers.search import sampler_space, search_sampler
    space = sampler_space().with_(vocabs=(2,), tokens=(1,), random_points=1)
    default = search_sampler(zoo.shared_uniform, space=space, progress=False)
    assert pools == [CORES]
    here = search_sampler(zoo.shared_uniform, space=space, progress=False, workers=None)
    assert pools == [CORES] and type(default) is type(here)
    assert default.to_dict() | {"seconds": 0} == here.to_dict() | {"seconds": 0}
    es.search_sampler(zoo.shared_uniform, progress=False)       # its search takes the same default
    assert pools == [CORES, CORES]


@needs_two_cores
def test_a_long_loop_search_takes_every_core_by_default(pools, long_enough):
    pytest.importorskip("torch")
    from exactspec.bugzoo import loops
    from exactspec.samplers.loops.loop_search import loop_space as _loop_space
    space = _loop_space(None, None).with_(vocabs=(2,), tokens=(1,), random_points=1)
    default = es.search_loop(loops.bonus_from_draft, space=space, progress=False)
    assert pools == [CORES]
    here = es.search_loop(loops.bonus_from_draft, space=space, progress=False, workers=None)
    assert pools == [CORES] and default.to_dict() | {"seconds": 0} == here.to_dict() | {"seconds": 0}


@needs_two_cores
def test_auto_stays_here_for_what_cannot_travel_and_for_a_progress_function(pools, long_enough, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)      # no by-value pickling: a lambda cannot travel
    lam = es.Rule(lambda step, rng: es.rules.greedy_match_sampled.fn(step, rng), name="lam")
    found = es.counterexamples.search(lam, space=SMALL, progress=False)          # "auto": no error, this process
    assert pools == [] and found.found
    with pytest.raises(parallel.NotPicklable):                                   # asked for explicitly: an error
        es.counterexamples.search(lam, space=SMALL, progress=False, workers=2)
    grid = dict(vocabs=(2,), gammas=(1, 2), tokens=(2,), order=1, progress=False)
    table = es.sweep([lam], **grid)
    assert pools == []
    same = es.sweep(["greedy_match_sampled"], workers=None, **grid)
    assert [r["tv"] for r in table.rows] == [r["tv"] for r in same.rows] and all(r["tv"] != "0" for r in table.rows)
    # a progress function counts audits in this process (chunks on workers): "auto" keeps it here
    seen = []
    es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, progress=lambda n, s: seen.append(n))
    assert pools == [] and seen and seen == sorted(seen) and seen[0] == 50


def _auto_in_child(queue):
    queue.put((parallel.in_worker_process(), parallel.auto_workers(parallel.AUTO, 1e6)))


@pytest.mark.skipif(parallel.start_method() != "fork", reason="the child is forked")
def test_auto_stays_here_in_a_process_multiprocessing_started():
    assert parallel.in_worker_process() is False
    ctx = multiprocessing.get_context("fork")
    for daemon in (False, True):
        queue = ctx.Queue()
        child = ctx.Process(target=_auto_in_child, args=(queue,), daemon=daemon)
        child.start()
        got = queue.get(timeout=60)
        child.join(60)
        assert got == (True, None), daemon     # a sweep's cell searching on a worker starts no pool of its own


# -- the command line: no --workers is "auto"; --workers 1 forces this process ------------------------------------

SEARCH = ["search", "--rule", "stale_draft_probs", "--max-vocab", "2", "--max-gamma", "2", "--tokens", "2",
          "--max-denominator", "3", "--json", "--no-timings", "-q"]


@needs_two_cores
def test_cli_search_default_is_every_core_for_a_long_search_and_prints_the_same(capsys, pools, long_enough):
    assert main(SEARCH + ["--workers", "1"]) == 1
    one = capsys.readouterr().out
    assert pools == []
    assert main(SEARCH) == 1
    assert pools == [CORES]
    assert capsys.readouterr().out == one and json.loads(one)["found"] is True


def test_cli_search_default_stays_in_this_process_for_a_short_search(capsys, pools):
    assert main(SEARCH) == 1
    assert pools == []


def _few_cases(monkeypatch):
    from exactspec.cli import check
    from exactspec.instances import check_cases
    # a chain rule with a closed form, one enumerated branch by branch, a tree rule
    monkeypatch.setattr(check, "check_cases", lambda inst: [c for i, c in enumerate(check_cases(inst))
                                                            if i in (1, 10, 16)])


@needs_two_cores
def test_cli_check_default_is_every_core_for_a_long_check_and_prints_the_same(capsys, pools, monkeypatch):
    from exactspec.cli import check
    _few_cases(monkeypatch)
    monkeypatch.setattr(check, "CASE_SECONDS", 1e6)       # three configurations estimated long
    assert main(["check", "--json", "--no-timings", "--workers", "1", "-q"]) == 0
    one = capsys.readouterr().out
    assert pools == []
    assert main(["check", "--json", "--no-timings", "-q"]) == 0
    assert pools == [CORES]
    assert capsys.readouterr().out == one and len(json.loads(one)["rules"]) == 3


def test_cli_check_default_stays_in_this_process_for_a_short_check(capsys, pools, monkeypatch):
    from exactspec.cli import check
    _few_cases(monkeypatch)               # 3 configurations: estimated under parallel.AUTO_MIN_SECONDS
    called = []
    monkeypatch.setattr(check, "_check_parallel", lambda *a, **k: called.append(a))
    assert main(["check", "--json", "--no-timings", "-q"]) == 0
    assert called == [] and pools == []


def test_the_full_check_counts_as_long():
    """The 25 configurations of `exactspec check` are estimated past the bar: every core by default."""
    from exactspec.cli import check
    from exactspec.instances import check_cases
    assert len(check_cases()) * check.CASE_SECONDS >= parallel.AUTO_MIN_SECONDS


def test_check_on_workers_audits_the_cases_of_this_run_not_a_cached_earlier_set(capsys, monkeypatch):
    """The chunked check caches its cases per process; a later run with other cases must not read the old ones."""
    from exactspec.cli import check
    from exactspec.instances import check_cases
    for picks in ((1, 10, 16), (0, 12)):
        monkeypatch.setattr(check, "check_cases", lambda inst, picks=picks: [c for i, c in
                                                                           enumerate(check_cases(inst)) if i in picks])
        assert main(["check", "--json", "--no-timings", "--workers", "1", "-q"]) == 0
        rules = [r["rule"] for r in json.loads(capsys.readouterr().out)["rules"]]
        assert rules == [check_cases()[i].rule.name for i in picks]
