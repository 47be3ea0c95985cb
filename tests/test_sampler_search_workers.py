"""The sampler search on worker processes (issue 17): the same result as in this process, whatever the workers.

Every comparison is of the whole result but its wall-clock ``seconds``: the type, the minimal
instance, its laws and exact TV, the kind, the counts (audited, shrink steps, errors) and the space.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest

import exactspec as es
from exactspec import cli, parallel
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.counterexamples import Counterexample, EmptySearch, IncompleteSearch
from exactspec.samplers.search import sampler_space, search_sampler

SMALL = sampler_space().with_(vocabs=(2,), shapes=((1,), (2,)), tokens=(1, 2), random_points=2)


def fragile(draft_ids, draft_probs, target_probs, rng):
    """Correct, except that it raises at gamma 2: a crash on a valid input."""
    if len(draft_ids) == 2:
        raise ValueError("no gamma 2 here")
    return zoo.correct(draft_ids, draft_probs, target_probs, rng)


def outside(draft_ids, draft_probs, target_probs, rng):
    """Correct, except that it returns a token outside the vocabulary at gamma 2: no verdict there."""
    if len(draft_ids) == 2:
        return [len(target_probs[0])]
    return zoo.correct(draft_ids, draft_probs, target_probs, rng)


def outside_then_biased(draft_ids, draft_probs, target_probs, rng):
    """No verdict at gamma 1 (a token outside the vocabulary), shared_uniform's bias from gamma 2 on."""
    if len(draft_ids) == 1:
        return [len(target_probs[0])]
    return zoo.shared_uniform(draft_ids, draft_probs, target_probs, rng)


def leave(draft_ids, draft_probs, target_probs, rng):
    """Ends the process: an error the search never skips."""
    sys.exit(0)


def whole(found):
    """The result as a dict, without its wall-clock seconds."""
    out = dataclasses.asdict(found)
    out.pop("seconds", None)
    return out


def same_everywhere(sampler, **kw):
    """The search in this process, through the chunked path in this process, and on 2 workers: one result."""
    here = search_sampler(sampler, progress=False, workers=None, **kw)
    inline = search_sampler(sampler, progress=False, workers=1, **kw)
    two = search_sampler(sampler, progress=False, workers=2, chunk_size=5, **kw)
    assert whole(here) == whole(inline) == whole(two)
    assert type(here) is type(inline) is type(two)
    return here


def test_a_lossless_sampler_covers_the_same_space_on_workers():
    found = same_everywhere(zoo.correct, space=SMALL)
    assert isinstance(found, EmptySearch) and found.audited == 2 * 11 + 2 * 2 * 2


def test_a_biased_sampler_gives_the_same_minimal_counterexample_on_workers():
    found = same_everywhere(zoo.shared_uniform)     # the default space: the first bias is a few chunks in
    assert isinstance(found, Counterexample) and found.kind == "sampler"
    assert (found.instance.vocab, found.instance.shape, found.instance.tokens) == (2, (2,), 2)
    assert found.sampler_ref == "exactspec.bugzoo.numpy_samplers:shared_uniform"


def test_instances_without_a_verdict_before_the_first_bias_are_counted_as_in_this_process():
    found = same_everywhere(outside_then_biased, space=SMALL)     # 15 instances raise, in 3 chunks, before it
    assert isinstance(found, Counterexample) and found.instance.shape == (2,) and found.audited > 15


def test_a_crashing_sampler_gives_the_same_crash_counterexample_on_workers():
    found = same_everywhere(fragile, space=SMALL)
    assert isinstance(found, Counterexample) and found.kind == "crash" and found.crash["probability"] == "1"
    assert found.instance.shape == (2,) and found.crash["of"] == "sampler"


def test_a_torch_sampler_through_the_vllm_adapter_gives_the_same_counterexample_on_workers():
    pytest.importorskip("torch")
    from exactspec.bugzoo import torch_samplers
    space = sampler_space().with_(vocabs=(2,), shapes=((1,),), tokens=(2,), random_points=2)
    found = same_everywhere(torch_samplers.resample_target, adapter="vllm", space=space)
    assert isinstance(found, Counterexample) and found.kind == "sampler" and found.adapter == "vllm"
    assert found.tv > 0


def test_an_incomplete_search_stays_incomplete_with_the_same_accounting_on_workers():
    few = same_everywhere(zoo.correct, space=SMALL, max_instances=14)      # stops inside the third cell
    assert isinstance(few, IncompleteSearch) and few.exit_code == 3 and few.audited == 14
    assert few.reason == "max_instances 14 reached" and few.cells_covered == 2
    broken = same_everywhere(outside, space=SMALL)       # the audit raised on some instances: no verdict there
    assert isinstance(broken, IncompleteSearch) and broken.errors > 0 and "raised" in broken.reason


def test_an_error_the_search_never_skips_is_raised_from_workers_too():
    with pytest.raises(es.RuleError, match=r"sys.exit\(0\)"):
        search_sampler(leave, space=SMALL, progress=False, workers=2)


def test_a_lambda_sampler_on_workers_is_a_typed_error_and_runs_in_this_process_by_default(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)   # no by-value pickling: a lambda cannot travel
    biased = lambda draft_ids, draft_probs, target_probs, rng: zoo.shared_uniform(  # noqa: E731
        draft_ids, draft_probs, target_probs, rng)
    with pytest.raises(parallel.NotPicklable, match="cannot be sent to worker processes"):
        search_sampler(biased, space=SMALL, progress=False, workers=2)
    here = search_sampler(biased, space=SMALL, progress=False, workers=None)
    auto = search_sampler(biased, space=SMALL, progress=False)            # the default: "auto"
    assert isinstance(here, Counterexample) and whole(here) == whole(auto)


def test_the_cli_workers_flag(capsys):
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--workers", "-1", "-q"]) == 2
    assert "--workers must be >= 0" in capsys.readouterr().err
    outs = []
    for w in ("1", "2"):
        assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "2",
                         "--gamma", "2", "--workers", w, "-q", "--json", "--no-timings"]) == 1
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and '"found": true' in outs[0]


def test_a_time_limit_on_workers_gives_an_incomplete_search_never_an_empty_one():
    cut = search_sampler(zoo.correct, progress=False, workers=2, budget=0.05)   # the search takes seconds of CPU
    assert isinstance(cut, IncompleteSearch) and cut.exit_code == 3 and "time limit 0.05 s" in cut.reason
    with pytest.raises(es.ExactSpecError):
        bool(cut)


def _loop_space():
    from exactspec.samplers.loops.loop_search import loop_space as space
    return space(None, None).with_(vocabs=(2,), tokens=(1, 2), random_points=1)


def test_a_loop_search_gives_the_same_result_on_workers():
    pytest.importorskip("torch")
    from exactspec.bugzoo import loops
    runs = [es.search_loop(loops.bonus_from_draft, space=_loop_space(), progress=False, **kw)
            for kw in ({"workers": None}, {"workers": 1}, {"workers": 2, "chunk_size": 3})]
    assert isinstance(runs[0], Counterexample) and runs[0].kind == "loop"
    assert whole(runs[0]) == whole(runs[1]) == whole(runs[2])
    lossless = [es.search_loop(loops.speculative_sampling, space=_loop_space().with_(tokens=(1,)),
                              progress=False, max_instances=7,
                              **kw) for kw in ({"workers": None}, {"workers": 2, "chunk_size": 2})]
    assert isinstance(lossless[0], IncompleteSearch) and whole(lossless[0]) == whole(lossless[1])


def test_a_lambda_loop_on_workers_is_a_typed_error(monkeypatch, capsys):
    pytest.importorskip("torch")
    from exactspec.bugzoo import loops
    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    loop = lambda target, draft, prompt: loops.bonus_from_draft(target, draft, prompt)  # noqa: E731
    with pytest.raises(parallel.NotPicklable, match="cannot be sent to worker processes"):
        es.search_loop(loop, space=_loop_space(), progress=False, workers=2)
    assert cli.main(["audit-loop", "exactspec.bugzoo.loops:bonus_from_draft", "--workers", "-2", "-q"]) == 2
    assert "--workers must be >= 0" in capsys.readouterr().err
