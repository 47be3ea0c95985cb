"""The ``native`` rng model: each intercepted draw lies on the lattice of the generator it comes from (issue 16, §2).

numpy (Generator and legacy) and Python's ``random`` return ``k * 2**-53`` (0 included), torch's CPU
``rand`` in float32 ``k * 2**-24`` (0 included); bugs that live on an exact 0 from the generator
(``u <= p/q``, ``searchsorted(side='left')``, a strict/non-strict swap) are visible by default.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
import sys
from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as nzoo
from exactspec.enumerate.rng import LATTICES, NATIVE, RNG_MODELS, enumerate_program, lattice_for
from exactspec.fields import get_field
from exactspec.samplers.randomness.interception import FLOAT64_LATTICE, native_uniform

CF = es.models.context_free
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the draft always proposes token 0, which the target never emits: p/q = 0 at the drafted token
P01, Q10 = CF((F(0), F(1))), CF((F(1), F(0)))
# the draft proposes token 0 half of the time; p(0) = 0, so it is always rejected and the residual is (0, 1)
QHALF = CF((F(1, 2), F(1, 2)))
ONE = dict(proposer=es.drafts.chain(1), tokens=1)


def nonzero(law):
    return {k: v for k, v in law.items() if v}


# -- the model and its lattices ------------------------------------------------------------------------------

def test_native_is_an_rng_model_and_the_default_of_sampler_and_loop_audits_only():
    assert "native" in RNG_MODELS and lattice_for("native") is NATIVE and "continuous" in RNG_MODELS
    from exactspec.samplers.search import search_sampler
    for fn in (es.audit_sampler, es.audit_loop, search_sampler, es.search_loop):
        assert inspect.signature(fn).parameters["rng_model"].default == "native", fn
    # rules are abstract programs: their uniforms stay continuous by default
    assert inspect.signature(es.audit).parameters["rng_model"].default == "continuous"


def test_each_draw_carries_its_own_lattice_under_native():
    # one numpy-like draw (k * 2**-53) and one torch-float32 draw (k * 2**-24) in the same program
    def program(rng):
        a = native_uniform(rng, FLOAT64_LATTICE, "numpy") <= 0
        b = native_uniform(rng, LATTICES["torch-float32"], "torch float32") <= 0
        return a, b
    law = enumerate_program(program, get_field(backend="python"), rng_model="native")
    pa, pb = F(1, 2 ** 53), F(1, 2 ** 24)
    assert law == {(True, True): pa * pb, (True, False): pa * (1 - pb), (False, True): (1 - pa) * pb,
                   (False, False): (1 - pa) * (1 - pb)}
    # a named model overrides every draw's lattice; continuous has no exact 0; a draw of no generator is continuous
    assert enumerate_program(program, get_field(backend="python"), rng_model="torch-float32")[(True, True)] == pb * pb
    assert enumerate_program(program, get_field(backend="python")) == {(False, False): 1}
    assert enumerate_program(lambda rng: rng.uniform() <= 0, get_field(backend="python"),
                             rng_model="native") == {False: 1}


def test_rounded_lattices_match_torch_conversion():
    torch = pytest.importorskip("torch")
    rnd = random.Random(7)
    for name, dtype, mantissa in (("torch-float16", torch.float16, 11), ("torch-bfloat16", torch.bfloat16, 8)):
        lat = LATTICES[name]
        wrapped = 2 ** (24 - mantissa - 1)               # k * 2**-24 >= 1 - 2**-(mantissa + 1) rounds to 1.0
        assert -lat.kmin == wrapped and lat.kmax - lat.kmin + 1 == 2 ** 24
        ks = list(range(3000)) + [rnd.randrange(2 ** 24) for _ in range(20000)] + list(range(2 ** 24 - 3000, 2 ** 24))
        vals = (torch.tensor(ks, dtype=torch.float64) * 2.0 ** -24).to(torch.float32).to(dtype).double().tolist()
        for k, v in zip(ks, vals):
            if v == 1.0:                                 # torch maps a draw that rounds to 1.0 back to 0
                assert k >= 2 ** 24 - wrapped
                continue
            assert lat.value(k) == F(v), (name, k)       # k below the wrapped ones keeps its index


@pytest.mark.slow
def test_rounded_lattices_count_every_float32_draw():
    torch = pytest.importorskip("torch")
    k = torch.arange(2 ** 24, dtype=torch.float64) * 2.0 ** -24           # every float32 draw, exactly
    for name, dtype in (("torch-float16", torch.float16), ("torch-bfloat16", torch.bfloat16)):
        lat = LATTICES[name]
        vals = k.to(torch.float32).to(dtype).float()                       # torch's rounding to nearest even
        assert -lat.kmin == int((vals == 1).sum())
        vals[vals == 1] = 0                                                # torch maps 1.0 back to 0
        for t in (0.0, 2.0 ** -8, float(np.float32(1 / 3)), 255 / 256):  # each exact in float32
            for strict in (True, False):
                n = int(((vals < t) if strict else (vals <= t)).sum())
                assert lat.cut(F(t), strict) - lat.kmin + 1 == n, (name, t, strict)


def test_torch_rand_float32_is_on_the_2_pow_24_lattice_with_zero():
    # the measured fact the model rests on (torch 2.13 CPU): every draw is k * 2**-24; 0 is one of the k
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2_000_000, generator=g).double() * 2.0 ** 24
    assert bool((x == x.floor()).all()) and float(x.max()) <= 2 ** 24 - 1
    h = torch.rand(200_000, generator=g, dtype=torch.float64).double() * 2.0 ** 53
    assert bool((h == h.floor()).all())


def test_narrow_torch_draws_follow_the_rounded_law():
    torch = pytest.importorskip("torch")
    from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch

    def law(dtype, t):
        def program(rng):
            with bind(rng):
                return bool(torch.rand(1, dtype=dtype)[0] < t)
        with intercept_torch():
            return enumerate_program(program, get_field(backend="python"), rng_model="native", exact_floats=True)
    # float32 draws rounded to bfloat16, 1.0 -> 0: 2**15 wrapped points and k < 65408 are below 2**-8
    assert law(torch.bfloat16, 2.0 ** -8)[True] == F(2 ** 15 + 65408, 2 ** 24)
    assert law(torch.float32, 2.0 ** -8)[True] == F(1, 2 ** 8)
    assert law(torch.float64, 1 / 3)[True] == F(-(-F(1 / 3) * 2 ** 53 // 1), 2 ** 53)


# -- bugs that live on an exact 0, caught with default arguments ------------------------------------------

def test_numpy_accept_at_zero_is_a_support_violation_by_default():
    r = es.audit_sampler(nzoo.accept_at_zero, target=P01, draft=Q10, **ONE)
    assert r.verdict == "biased" and r.support_violations == [(0,)]
    assert r.output == {(0,): F(1, 2 ** 53), (1,): 1 - F(1, 2 ** 53)}
    assert r.extra["rng_model"] == "native"
    assert r.scope["rng"] == r.extra["rng"] == ("rng model native: numpy uniforms on k * 2**-53 for k = 0 .. "
                                                "2**53 - 1 (0 included)")
    assert "rng model native: numpy uniforms on k * 2**-53" in r.summary()
    fixed = es.audit_sampler(nzoo.correct, target=P01, draft=Q10, **ONE)
    assert fixed.verdict == "lossless" and fixed.tv == 0


def test_python_random_is_on_the_53_bit_lattice():
    def sampler(draft_ids, draft_probs, target_probs, rng):   # Python's random instead of the generator handed in
        x = int(draft_ids[0])
        if random.random() <= target_probs[0][x] / draft_probs[0][x]:
            return [x]
        r = np.maximum(target_probs[0] - draft_probs[0], 0.0)
        return [int(rng.choice(len(r), p=r / r.sum()))]
    r = es.audit_sampler(sampler, target=P01, draft=Q10, **ONE)
    assert r.output == {(0,): F(1, 2 ** 53), (1,): 1 - F(1, 2 ** 53)} and r.verdict == "biased"
    assert "Python random uniforms on k * 2**-53" in r.extra["rng"]


def test_numpy_inverse_cdf_with_side_left_emits_a_zero_probability_token():
    # draft 0 (q = 1/2) is always rejected (p(0) = 0); the residual (0, 1) has cdf (0, 1): side='left' returns
    # token 0 for u == 0 (probability 2**-53)
    r = es.audit_sampler(nzoo.searchsorted_left, target=P01, draft=QHALF, **ONE)
    assert r.output == {(0,): F(1, 2) * F(1, 2 ** 53), (1,): 1 - F(1, 2) * F(1, 2 ** 53)}
    assert r.support_violations == [(0,)] and r.verdict == "biased"
    assert es.audit_sampler(nzoo.searchsorted_right, target=P01, draft=QHALF, **ONE).tv == 0
    assert es.audit_sampler(nzoo.searchsorted_left, target=P01, draft=QHALF, rng_model="continuous",
                            **ONE).tv == 0                   # invisible to a uniform that is never 0


def test_numpy_cumsum_count_emits_a_zero_probability_bonus():
    # gamma 1, the draft 1 is accepted (p/q = 1); the bonus counts cumsum((0, 1)) < u: token 0 iff u == 0
    r = es.audit_sampler(nzoo.cumsum_not_above, target=P01, draft=CF((F(0), F(1))), proposer=es.drafts.chain(1),
                         tokens=2)
    assert nonzero(r.output) == {(1, 0): F(1, 2 ** 53), (1, 1): 1 - F(1, 2 ** 53)}
    assert r.support_violations == [(1, 0)] and r.verdict == "biased"


def test_torch_strict_non_strict_swap_and_searchsorted_left():
    pytest.importorskip("torch")
    from exactspec.bugzoo import torch_samplers as tzoo
    # p/q >= u accepts the drafted token 0 (p = 0) when torch's float32 u == 0: probability 2**-24
    r = es.audit_sampler(tzoo.ratio_not_below_uniform, adapter="vllm", target=P01, draft=Q10, **ONE)
    assert r.output == {(0,): F(1, 2 ** 24), (1,): 1 - F(1, 2 ** 24)} and r.verdict == "biased"
    assert "torch float32 uniforms on k * 2**-24" in r.extra["rng"]
    # torch.searchsorted(cumsum, u) (right=False) puts u == 0 on the leading zero of the residual (0, 1)
    s = es.audit_sampler(tzoo.searchsorted_left, adapter="vllm", target=P01, draft=QHALF, **ONE)
    assert s.output == {(0,): F(1, 2) * F(1, 2 ** 24), (1,): 1 - F(1, 2) * F(1, 2 ** 24)}
    assert s.support_violations == [(0,)] and s.verdict == "biased"
    for bad in (tzoo.ratio_not_below_uniform, tzoo.searchsorted_left):
        assert es.audit_sampler(bad, adapter="vllm", target=P01, draft=QHALF, rng_model="continuous", **ONE).tv == 0
    assert es.audit_sampler(tzoo.correct, adapter="vllm", target=P01, draft=QHALF, **ONE).tv == 0


def test_the_default_search_finds_a_zero_bug_and_its_regression_test_keeps_the_model():
    ce = es.search_sampler(nzoo.searchsorted_left)
    assert isinstance(ce, es.Counterexample) and ce.rng_model == "native"
    # minimal: vocab 2, gamma 1, p = q = (0, 1): the draft is accepted and the bonus, searched with side='left'
    # into cdf (0, 1), is token 0 when u == 0
    assert (ce.instance.vocab, ce.instance.shape, ce.instance.tokens) == (2, (1,), 2)
    assert (ce.instance.target, ce.instance.draft) == (((F(0), F(1)),), ((F(0), F(1)),))
    assert nonzero(ce.output) == {(1, 0): F(1, 2 ** 53), (1, 1): 1 - F(1, 2 ** 53)} and ce.tv == F(1, 2 ** 53)
    assert "rng_model='native'" in ce.to_pytest()


def test_cli_audit_sampler_catches_a_zero_bug_by_default():
    cmd = [sys.executable, "-m", "exactspec", "audit-sampler", "exactspec.bugzoo.numpy_samplers:searchsorted_left",
           "--vocab", "3", "--json", "--no-timings"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    d = json.loads(done.stdout)
    assert d["found"] and d["kind"] == "sampler" and d["rng_model"] == "native" and d["tv"] == f"1/{2 ** 53}"
    # the same sampler under the old default (continuous) reads clean (over vocab 2, to keep the test short)
    old = subprocess.run(cmd[:5] + ["--vocab", "2", "--rng-model", "continuous"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert old.returncode == 0, old.stderr


def test_a_loop_accepting_at_zero_is_biased_by_default():
    torch = pytest.importorskip("torch")

    def loop(target, draft, prompt):       # one step of gamma 1, acceptance written u <= p/q
        q = draft(prompt)[0, -1].softmax(-1)
        x = torch.multinomial(q, 1).view(1, 1)
        drafted = torch.cat([prompt, x], dim=1)
        p = target(drafted)[0, -2].softmax(-1)
        tok = int(x[0, 0])
        if torch.rand(1)[0] <= p[tok] / q[tok]:
            return drafted
        residual = torch.clamp(p - q, min=0)
        return torch.cat([prompt, torch.multinomial(residual / residual.sum(), 1).view(1, 1)], dim=1)
    r = es.audit_loop(loop, target=P01, draft=Q10, tokens=1)
    assert r.output == {(0,): F(1, 2 ** 24), (1,): 1 - F(1, 2 ** 24)} and r.verdict == "biased"
    assert r.extra["rng_model"] == "native" and "torch float32 uniforms on k * 2**-24" in r.scope["rng"]
    assert es.audit_loop(loop, target=P01, draft=Q10, tokens=1, rng_model="continuous").tv == 0


def test_an_exact_rational_threshold_is_not_rounded_through_a_float():
    """With ``exact_floats`` (sampler audits) a float threshold becomes its exact rational; an exact one (gmpy2's
    ``mpq``, a numpy int) must stay what it is: ``u < mpq(1, 3)`` once weighed float(1/3) = 6004799503160661/2**54."""
    from fractions import Fraction as F
    from exactspec.enumerate.rng import PathRng
    from exactspec.fields import get_field
    gmpy2 = pytest.importorskip("gmpy2")
    for backend in ("python", "gmpy2"):
        for threshold, expected in ((gmpy2.mpq(1, 3), F(1, 3)), (gmpy2.mpq(2**60 + 1, 2**61), F(2**60 + 1, 2**61)),
                                    (1 / 3, F(1 / 3))):
            stack: list = []
            rng = PathRng((), 1, get_field(backend=backend), stack, {}, exact_floats=True)
            below = rng.uniform() < threshold
            assert F(str(rng.weight)) == (expected if below else 1 - expected), (backend, threshold)
