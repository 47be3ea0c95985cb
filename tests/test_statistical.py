"""Statistical audits: the test rejects real biases, its TV interval covers the exact TV, radii by hand."""

import math
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.instances import make_instance
from exactspec.statistical import _g_test, samples_needed, tv_radius

INST = make_instance(vocab=3, order=1, gamma=2, tokens=2)
KW = dict(target=INST.target, draft=INST.draft, proposer=INST.proposer, prompt=INST.prompt, tokens=2)


def test_radius_and_samples_needed_by_hand():
    # r = sqrt((K ln 2 + ln(2 / delta)) / (2 N)); N for a bias b is (K ln 2 + ln(2 / delta)) / (2 b^2)
    # float path: equal to 1e-12 relative (ln(2 / (1 - 0.99)) is not exactly ln 200 in floats)
    assert abs(tv_radius(10_000, 2, 0.99) / math.sqrt((2 * math.log(2) + math.log(200)) / 20_000) - 1) < 1e-12
    assert abs(samples_needed(0.01, outcomes=2) / ((2 * math.log(2) + math.log(200)) / (2 * 0.01 ** 2)) - 1) < 1e-12
    assert samples_needed(0.0, outcomes=2) == math.inf


def test_correct_sampler_shows_no_bias_and_the_interval_covers_the_exact_tv():
    rep = es.audit_statistically(zoo.correct, samples=4000, seed=3, **KW)
    exact = es.audit_sampler(zoo.correct, **KW)
    assert rep.verdict == "no bias detected" and rep.p_value > 0.01
    lo, hi = rep.tv_interval
    assert lo <= float(exact.tv) <= hi and hi - lo <= 2 * rep.detectable_tv + 1e-12
    assert sum(rep.counts.values()) == 4000 and sum(rep.expected.values()) == 1


def test_a_biased_sampler_is_rejected_and_its_exact_tv_is_in_the_interval():
    rep = es.audit_statistically(zoo.shared_uniform, samples=20_000, seed=1, **KW)
    exact = es.audit_sampler(zoo.shared_uniform, **KW)
    assert rep.verdict == "biased" and rep.p_value < 1e-6
    lo, hi = rep.tv_interval
    assert lo <= float(exact.tv) <= hi


def test_g_test_merges_small_bins_and_flags_impossible_outcomes():
    # tokens 2 and 3 expect 1 count each: they are merged into one bin, so 4 outcomes make 3 bins, 2 df
    expected = {(0,): F(1, 2), (1,): F(1, 2) - F(2, 1000), (2,): F(1, 1000), (3,): F(1, 1000)}
    g, df, p = _g_test({(0,): 500, (1,): 498, (2,): 2}, expected, 1000)
    # observed equals expected bin by bin: G is 0 up to float rounding of the logs (tolerance 1e-9)
    assert df == 2 and abs(g) < 1e-9 and p > 1 - 1e-9
    assert _g_test({(0,): 999, (7,): 1}, expected, 1000)[2] == 0.0   # token 7: expected probability 0


def test_statistical_audit_of_transformers_sampler():
    pytest.importorskip("transformers")
    from transformers.generation.utils import _speculative_sampling
    rep = es.audit_statistically(_speculative_sampling, adapter="transformers", samples=600, seed=0, **KW)
    assert rep.verdict == "no bias detected" and rep.samples_per_second > 0


def test_bad_arguments():
    with pytest.raises(es.ExactSpecError, match="confidence must lie in"):
        es.audit_statistically(zoo.correct, confidence=1.5, **KW)
    with pytest.raises(es.ExactSpecError, match="samples must be a positive int"):
        es.audit_statistically(zoo.correct, samples=0, **KW)


def test_a_time_budget_stops_sampling():
    rep = es.audit_statistically(zoo.correct, samples=10 ** 9, seconds=0.3, **KW)
    assert 0 < rep.samples < 10 ** 9 and sum(rep.counts.values()) == rep.samples and rep.seconds < 5


def test_batched_sampling_of_a_vllm_style_sampler():
    pytest.importorskip("torch")
    from exactspec.bugzoo import torch_samplers as tzoo
    kw = dict(target=INST.target, draft=INST.draft, proposer=INST.proposer, prompt=INST.prompt, tokens=1)
    good = es.audit_statistically(tzoo.correct, adapter="vllm", samples=3000, batch=500, device="cpu", seed=2, **kw)
    bad = es.audit_statistically(tzoo.resample_target, adapter="vllm", samples=3000, batch=500, device="cpu",
                                 seed=2, **kw)
    assert good.samples == 3000 and good.verdict == "no bias detected"
    assert bad.verdict == "biased"
    with pytest.raises(es.ExactSpecError, match="batch > 1 needs the vllm adapter"):
        es.audit_statistically(zoo.correct, batch=10, **kw)


@pytest.mark.parametrize("entry", ["import exactspec as es\n",
                                   "import types\nfrom exactspec.statistical import audit_statistically\n"
                                   "es = types.SimpleNamespace(audit_statistically=audit_statistically)\n"])
def test_adapter_names_resolve_in_a_fresh_interpreter_that_never_touched_es_samplers(entry):
    # `exactspec` loads its samplers on first use (issue 17: `exactspec check` imports none of them); the
    # statistical audit sits below the samplers layer and resolves adapter names with the lookup it hands down,
    # so `es.audit_statistically(..., adapter="numpy")` must load that layer itself (notebook 01 did this)
    import subprocess
    import sys
    code = (entry +
            "import sys; assert 'exactspec.samplers' not in sys.modules\n"
            "from exactspec.bugzoo import numpy_samplers as zoo\n"
            "from exactspec.instances import make_instance\n"
            "i = make_instance(vocab=2, order=0, gamma=1, tokens=1)\n"
            "rep = es.audit_statistically(zoo.correct, adapter='numpy', samples=200, seed=0, target=i.target, "
            "draft=i.draft, proposer=i.proposer, prompt=i.prompt, tokens=1)\n"
            "print(rep.samples)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "200"
