"""exactspec.parallel: the same results in-process, on a process pool and on a Dask LocalCluster; budgets,
retries of killed workers, typed errors for what cannot be pickled."""

import os
import sys
import time
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec import parallel
from exactspec.cli import main
from exactspec.counterexamples import IncompleteSearch, Space

SMALL = Space(vocabs=(2, 3), shapes=((1,), (2,)), tokens=(1, 2), random_points=6)


def _same(a, b):
    """Two search results equal in everything but wall-clock time."""
    da, db = a.to_dict(), b.to_dict()
    da.pop("seconds", None)
    db.pop("seconds", None)
    assert da == db
    return True


# -- rules used by the tests (module level: workers import them by name; fork shares this module) ----------

_KILL_ONCE = {"flag": None}


def _ss(step, rng):
    return es.rules.speculative_sampling.fn(step, rng)


def dies_once(step, rng):
    """speculative sampling, but the first call in any process kills that process (once per test)."""
    flag = _KILL_ONCE["flag"] or os.environ.get("EXACTSPEC_TEST_KILL_FLAG")
    if flag and not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    return es.rules.speculative_sampling.fn(step, rng)


def always_dies(step, rng):
    if os.getpid() != _KILL_ONCE.get("parent"):
        os._exit(1)
    return es.rules.speculative_sampling.fn(step, rng)


# -- search ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["greedy_match_sampled", "stale_draft_probs", "resample_from_target"])
def test_search_finds_the_same_minimal_counterexample_with_any_number_of_workers(name):
    reference = es.counterexamples.search(name, progress=False, workers=None)     # in this process
    for kw in ({"workers": 1, "chunk_size": 7}, {"workers": 2, "chunk_size": 16}, {"workers": 2}):
        got = es.counterexamples.search(name, progress=False, **kw)
        assert got == reference and _same(got, reference), kw


def test_search_covers_the_same_space_on_a_pool():
    a = es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, progress=False, workers=None)
    b = es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, progress=False, workers=2, chunk_size=9)
    assert not a.found and a.complete and _same(a, b)


@pytest.mark.parametrize("limit", [3, 40, 41, 200])
def test_max_instances_holds_across_workers(limit):
    a = es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, max_instances=limit, progress=False,
                                  workers=None)
    b = es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, max_instances=limit, progress=False,
                                  workers=2, chunk_size=16)
    assert _same(a, b)


def test_time_limit_holds_across_workers_and_is_incomplete():
    t0 = time.perf_counter()
    found = es.counterexamples.search(es.rules.speculative_sampling, budget=0.3, workers=2, progress=False)
    assert time.perf_counter() - t0 < 0.3 + parallel.DEFAULT_GRACE + 1
    assert isinstance(found, IncompleteSearch) and found.exit_code == 3 and "time limit" in found.reason


def test_worst_samples_in_chunks_with_the_same_result():
    sp = Space(vocabs=(2,), shapes=((1,), (2,)), tokens=(1,), families=("context_free",), random_points=8)
    a = es.counterexamples.worst(es.rules.greedy_match_sampled, sp, steps=10, restarts=2, budget=None)
    b = es.counterexamples.worst(es.rules.greedy_match_sampled, sp, steps=10, restarts=2, budget=None, workers=2,
                                 chunk_size=5)
    assert a.tv == b.tv and _same(a, b)


# -- pickling ----------------------------------------------------------------------------------------

def test_a_lambda_rule_travels_with_cloudpickle():
    pytest.importorskip("cloudpickle")
    rule = es.Rule(lambda step, rng: es.rules.speculative_sampling.fn(step, rng), name="lam")
    a = es.counterexamples.search(rule, space=SMALL, progress=False, max_instances=30, workers=None)
    b = es.counterexamples.search(rule, space=SMALL, progress=False, max_instances=30, workers=2, chunk_size=8)
    assert _same(a, b)


def test_a_lambda_rule_without_cloudpickle_is_a_typed_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle raises ImportError
    rule = es.Rule(lambda step, rng: [0], name="lam")
    with pytest.raises(parallel.NotPicklable, match="define it at module level|Define it at module level"):
        es.counterexamples.search(rule, space=SMALL, workers=2, progress=False)
    assert parallel.NotPicklable.exit_code == 2
    # in this process nothing needs pickling
    assert es.counterexamples.search(rule, space=SMALL, max_instances=2, progress=False).found


def test_catalog_rules_travel_by_name():
    assert parallel.portable_rule(es.rules.get("ensemble(1/3)")) == "ensemble(1/3)"
    assert parallel.portable_rule(es.rules.speculative_sampling) == "speculative_sampling"
    assert parallel.portable_rule(es.rules.speculative_sampling.without_closed_form()) != "speculative_sampling"


# -- workers that die ----------------------------------------------------------------------------------

def test_a_killed_worker_is_retried_without_losing_or_duplicating_results(tmp_path):
    _KILL_ONCE["flag"] = str(tmp_path / "killed")
    try:
        rule = es.Rule(dies_once, name="dies_once")
        b = es.counterexamples.search(rule, space=SMALL, progress=False, workers=2, chunk_size=16)
    finally:
        _KILL_ONCE["flag"] = None
    assert os.path.exists(tmp_path / "killed")  # a worker really died
    a = es.counterexamples.search(es.Rule(dies_once, name="dies_once"), space=SMALL, progress=False, workers=None)
    assert _same(a, b) and b.audited == a.audited


def test_a_chunk_whose_worker_always_dies_is_incomplete_never_a_pass():
    _KILL_ONCE["parent"] = os.getpid()
    rule = es.Rule(always_dies, name="always_dies")
    found = es.counterexamples.search(rule, space=SMALL, progress=False, workers=2, chunk_size=64)
    assert isinstance(found, IncompleteSearch) and found.exit_code == 3
    assert "were not covered" in found.reason and "worker failed" in found.reason


def test_run_chunks_merges_by_chunk_number_and_cancels_only_later_chunks():
    run = parallel.run_on(_slow_odd, [2, 4, 6, 7, 9, 10, 12], workers=2, final=bool, window=4)
    assert run.stop_at == 3 and all(k in run.results for k in range(4))
    assert not any(run.results.get(k) for k in range(3))


def _slow_odd(x):
    time.sleep(0.02 * (7 - x % 7))
    return x % 2 == 1


# -- statistical audits ----------------------------------------------------------------------------------

def test_statistical_audit_gives_the_same_figures_with_any_number_of_workers():
    from exactspec.bugzoo import numpy_samplers
    t = es.models.random_table(vocab=3, order=1, seed=0)
    kw = dict(adapter="numpy", target=t, draft=es.models.perturbed(t, seed=1), proposer=es.drafts.chain(2),
              prompt=(0,), tokens=2, samples=3000, seed=7, chunk_samples=700)
    reps = [es.audit_statistically(numpy_samplers.shared_uniform, workers=w, **kw) for w in (1, 2, 3)]
    assert reps[0].counts == reps[1].counts == reps[2].counts
    assert reps[0].g_statistic == reps[1].g_statistic and reps[0].samples == 3000


# -- check ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_check_prints_the_same_table_with_workers(capsys):
    assert main(["check", "--json", "--no-timings"]) == 0
    ref = capsys.readouterr().out
    assert main(["check", "--json", "--no-timings", "--workers", "2"]) == 0
    assert capsys.readouterr().out == ref


@pytest.mark.slow
def test_check_time_limit_holds_across_workers(capsys):
    t0 = time.perf_counter()
    assert main(["check", "--workers", "2", "--time-limit", "0.5"]) == 3
    assert time.perf_counter() - t0 < 0.5 + parallel.DEFAULT_GRACE + 2
    assert "budget exceeded" in capsys.readouterr().err


# -- a Dask cluster ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_search_check_and_sweep_on_a_dask_local_cluster(capsys, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    flag = tmp_path / "killed"
    monkeypatch.setenv("EXACTSPEC_TEST_KILL_FLAG", str(flag))  # the workers start with it: one of them dies once
    monkeypatch.syspath_prepend(os.path.dirname(__file__))      # ... and import this module to run dies_once
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        ex = client.get_executor(pure=False)
        killed = es.counterexamples.search(es.Rule(dies_once, name="dies_once"), space=SMALL, progress=False,
                                           executor=ex, chunk_size=16, budget=120)  # a budget: never hangs
        assert flag.exists()  # a Dask worker process really died; Dask ran its chunk again elsewhere
        assert _same(killed, es.counterexamples.search(es.Rule(_ss, name="dies_once"), space=SMALL, progress=False,
                                                       workers=None))
        for name in ("greedy_match_sampled", "stale_draft_probs"):
            assert _same(es.counterexamples.search(name, progress=False, executor=ex, budget=120),
                         es.counterexamples.search(name, progress=False, workers=None))
        a = es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, progress=False, workers=None)
        assert _same(a, es.counterexamples.search(es.rules.speculative_sampling, space=SMALL, progress=False,
                                                  executor=ex, chunk_size=16, budget=120))
        grid = dict(rules=["speculative_sampling", "stale_draft_probs"], vocabs=(2, 3), gammas=(1, 2), order=1)
        on_dask = es.sweep(**grid, executor=ex, seconds=120)
        assert on_dask.to_csv(timings=False) == es.sweep(**grid, workers=None).to_csv(timings=False)
        assert main(["check", "--json", "--no-timings", "--time-limit", "120", "--scheduler",
                     cluster.scheduler_address]) == 0
        on_cluster = capsys.readouterr().out
    assert main(["check", "--json", "--no-timings"]) == 0
    assert capsys.readouterr().out == on_cluster
