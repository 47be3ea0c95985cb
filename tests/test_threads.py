"""Audits in threads: each gets exactly its sequential law, other threads keep real random numbers.

The interception of torch's, numpy's and Python's random functions is patched once for all
audits in the process and dispatched per thread (exactspec.samplers.randomness.interception).
"""

import functools
import random
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers_utils = pytest.importorskip("transformers.generation.utils")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import torch_samplers as tzoo  # noqa: E402
from exactspec.instances import make_instance  # noqa: E402

torch.set_num_threads(1)
SPEC = transformers_utils._speculative_sampling
WAIT = 60       # seconds; a barrier that times out fails the test instead of hanging it


def originals():
    return (torch.rand, torch.rand_like, torch.multinomial, torch.Tensor.uniform_, torch.Tensor.exponential_,
            torch.Generator, random.random, random.Random, np.random.random, np.random.default_rng)


ORIGINALS = originals()


def assert_restored():
    now = originals()
    assert all(a is b for a, b in zip(now, ORIGINALS)), [a for a, b in zip(now, ORIGINALS) if a is not b]


def audit(sampler, adapter, gamma):
    inst = make_instance(vocab=3, order=1, gamma=gamma, tokens=2)
    return es.audit_sampler(sampler, adapter=adapter, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                            prompt=inst.prompt, tokens=2)


def hooked(sampler, hooks):
    """``sampler`` that runs ``hooks[k]()`` before its k-th call (k = 0, 1, ...)."""
    calls = [0]

    @functools.wraps(sampler)
    def run(*args, **kwargs):
        k = calls[0]
        calls[0] += 1
        if k < len(hooks):
            hooks[k]()
        return sampler(*args, **kwargs)
    return run


def run_threads(*targets):
    results, errors = {}, {}

    def wrap(key, fn):
        def go():
            try:
                results[key] = fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors[key] = exc
        return go
    threads = [threading.Thread(target=wrap(k, fn)) for k, fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    return results, errors


def test_two_torch_audits_in_threads_each_get_their_sequential_law():
    correct = audit(SPEC, "transformers", 1)
    biased = audit(tzoo.resample_target, "vllm", 2)
    assert correct.verdict == "lossless" and biased.verdict == "biased"
    both_in = threading.Barrier(2, timeout=WAIT)
    first_done = threading.Event()

    def wait_first():
        assert first_done.wait(WAIT)

    # both audits are inside the interception at once; the first finishes (and leaves it) while the second is
    # between two sampler calls, then the second goes on
    a = hooked(SPEC, [both_in.wait])
    b = hooked(tzoo.resample_target, [both_in.wait, wait_first])

    def first():
        try:
            return audit(a, "transformers", 1)
        finally:
            first_done.set()
    results, errors = run_threads(("a", first), ("b", lambda: audit(b, "vllm", 2)))
    assert not errors, errors
    assert results["a"].output == correct.output and results["a"].verdict == "lossless"
    assert results["b"].output == biased.output and results["b"].tv == biased.tv and results["b"].verdict == "biased"
    assert_restored()


def test_an_unrelated_thread_drawing_during_a_torch_audit_gets_real_numbers():
    inst = make_instance(vocab=3, order=1, gamma=1, tokens=2)
    alone = audit(SPEC, "transformers", 1)
    go, done = threading.Event(), threading.Event()
    seen: dict = {}

    def unrelated():
        assert go.wait(WAIT)
        try:
            seen["patched"] = random.random is not ORIGINALS[6]       # the audit's dispatcher is in place
            seen["draws"] = [random.random() for _ in range(500)]
            seen["torch"] = torch.rand(3)
        finally:
            done.set()

    proposer = inst.proposer
    real_step = type(proposer).step
    calls = [0]

    class Hooked(type(proposer)):
        def step(self, env, context, rng):                          # outside any sampler call, inside the audit
            calls[0] += 1
            if calls[0] == 1:
                go.set()
                assert done.wait(WAIT)
            return real_step(self, env, context, rng)
    hooked_proposer = Hooked.__new__(Hooked)
    hooked_proposer.__dict__.update(proposer.__dict__)

    def audited():
        return es.audit_sampler(SPEC, adapter="transformers", target=inst.target, draft=inst.draft,
                                proposer=hooked_proposer, prompt=inst.prompt, tokens=2)
    results, errors = run_threads(("audit", audited), ("unrelated", unrelated))
    assert not errors, errors
    assert seen["patched"] and all(type(x) is float and 0 <= x < 1 for x in seen["draws"])
    assert len(set(seen["draws"])) > 400 and type(seen["torch"]) is torch.Tensor
    assert results["audit"].output == alone.output and results["audit"].verdict == "lossless"
    assert_restored()


def test_a_draw_by_another_thread_during_a_sampler_call_is_no_verdict():
    # the sampler could have used that thread's number: the audit cannot tell, so it refuses
    go, done = threading.Event(), threading.Event()

    def other():
        assert go.wait(WAIT)
        try:
            random.random()
        finally:
            done.set()

    def ask():
        go.set()
        assert done.wait(WAIT)
    sampler = hooked(SPEC, [ask])
    results, errors = run_threads(("audit", lambda: audit(sampler, "transformers", 1)), ("other", other))
    assert set(errors) == {"audit"} and isinstance(errors["audit"], es.UnsupportedRandomness)
    assert "another thread drew from it" in str(errors["audit"])
    assert_restored()


def test_no_branch_stays_bound_past_the_outermost_audit():
    # a binding that was never reset (an exception between set and reset) must not outlive the audit: it
    # would send later draws of this thread to a finished audit's rng
    from exactspec.samplers.randomness import interception as I
    with I.intercepting():
        I._BRANCH.set("a branch whose block never exited")
    assert I._BRANCH.get() is None
