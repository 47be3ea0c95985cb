"""Rounding versus bias (issue 16, section 1): the float64 run decides, never a reference's luck on a tidy instance.

Each sampler here was misjudged by the previous rule (tolerance ``max(2**-40, 2 * rounding_tv)``
with ``rounding_tv`` what the adapter's reference happened to lose on the instance): correct
float32 code read "biased" wherever the reference rounded exactly, and a genuine 1e-9 bias read
"lossless" wherever the reference rounded more than it.
"""

from __future__ import annotations

import json
from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec import cli
from exactspec.instances import make_instance
from exactspec.samplers.rounding import F64_ALLOWANCE, ROUNDING_CAP, decide, rounding_allowance, typical_rounding

torch = pytest.importorskip("torch")
from exactspec.bugzoo import float32_samplers as z  # noqa: E402

P0 = es.models.context_free((0, F(2, 3), F(1, 3)))       # the instance: draft token 0 always rejected
Q0 = es.models.context_free((1, 0, 0))
ONE = dict(target=P0, draft=Q0, proposer=es.drafts.chain(1), tokens=1)


# -- the decision itself, on exact numbers --------------------------------------------------------------------
def test_rounding_allowance_is_sixteen_roundings_per_entry_and_position_capped():
    assert rounding_allowance("float32", vocab=3, positions=2) == F(16 * 3 * 2, 2 ** 24)
    assert typical_rounding("float32", vocab=3, positions=2) == F(3 * 2, 2 ** 24)
    assert rounding_allowance("float32", vocab=8 * 2 ** 10, positions=10) == ROUNDING_CAP
    # bfloat16's unit roundoff is 2**-8: its own cap, not float32's (2/3 alone rounds by 1.3e-3 in bfloat16)
    assert rounding_allowance("bfloat16", vocab=8, positions=10) == F(1, 16)
    assert rounding_allowance("float16", vocab=2, positions=1) == F(16 * 2, 2 ** 11) > ROUNDING_CAP
    with pytest.raises(ValueError):
        rounding_allowance("float8", vocab=2, positions=1)


@pytest.mark.parametrize("kw, verdict", [
    # float64 code: one run against the float64 allowance
    (dict(precision="float64", own_tv=F(0), f64_tv=None, forced=False), "lossless"),
    (dict(precision="float64", own_tv=F(1, 2 ** 41), f64_tv=None, forced=False), "lossless"),
    (dict(precision="float64", own_tv=F(1, 2 ** 39), f64_tv=None, forced=False), "biased"),
    # float32 code that honours its dtype: the float64 run decides, the float32 TV is rounding up to the cap
    (dict(precision="float32", own_tv=F(1, 10 ** 8), f64_tv=F(1, 10 ** 17), forced=False), "lossless"),
    (dict(precision="float32", own_tv=F(1, 10 ** 8), f64_tv=F(3, 10 ** 9), forced=False), "biased"),
    (dict(precision="float32", own_tv=ROUNDING_CAP + F(1, 10 ** 9), f64_tv=F(0), forced=False), "biased"),
    # float32 code that casts down: held to the size-derived bounds, undecided between them
    (dict(precision="float32", own_tv=F(1), f64_tv=F(1, 10 ** 8), forced=True), "lossless"),
    (dict(precision="float32", own_tv=F(1), f64_tv=F(1, 10 ** 6), forced=True), "undecided"),
    (dict(precision="float32", own_tv=F(1), f64_tv=F(2, 10 ** 5), forced=True), "biased"),
])
def test_decide(kw, verdict):
    allowance = F(1, 10 ** 5)
    b = decide(own_violations=False, f64_violations=False, tolerance=F64_ALLOWANCE, allowance=allowance, **kw)
    assert b.verdict == verdict and b.exit_code == {"lossless": 0, "biased": 1, "undecided": 3}[verdict]


def test_a_support_violation_at_either_precision_is_biased_whatever_its_size():
    for own, f64 in ((True, False), (False, True)):
        b = decide(precision="float32", own_tv=F(0), own_violations=own, f64_tv=F(0), f64_violations=f64,
                   forced=False, tolerance=F64_ALLOWANCE, allowance=F(1, 10 ** 5))
        assert b.verdict == "biased" and "support violation" in b.reason


# -- correct float32 code is lossless (the previous rule said "biased") ----------------------------------------
def test_gumbel_max_residual_in_float32_is_lossless_up_to_rounding():
    r = es.audit_sampler(z.gumbel_residual, adapter="vllm", **ONE)
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and r.exit_code == 0 and not b["forced"]
    assert 0 < r.tv < F(1, 10 ** 7)                             # float32 rounding of the Gumbel race
    assert F(b["f64_tv"]) <= F64_ALLOWANCE and F(r.extra["algorithmic_tv"]) == F(b["f64_tv"])
    assert "float32 rounding" in r.verdict_text and r.extra["float64_run"]["inputs"] == "float64"


def numpy_gumbel_f32(draft_ids, draft_probs, target_probs, rng):
    """Correct, numpy, computing in float32 whatever it is handed: the recovered token by Gumbel-max."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < p32[j, x] / q32[j, x]:
            out.append(int(x))
            continue
        with np.errstate(divide="ignore"):
            logw = np.log(np.maximum(p32[j] - q32[j], np.float32(0)))
        gumbel = -np.log(-np.log(rng.random(len(logw))))
        out.append(int(np.argmax(logw + gumbel)))
        return out
    out.append(int(rng.choice(p32.shape[1], p=p32[-1] / p32[-1].sum())))
    return out


def test_numpy_float32_gumbel_is_never_biased_and_lossless_where_its_rounding_can_be_measured():
    # numpy casts cannot be lifted: the bounds decide, against what rounding costs the correct reference here. On
    # ONE the reference rounds all but exactly (measured 3.7e-17) while the Gumbel race's float32 logs do not: no bias can be told
    # from that rounding, so undecided (a residual epsilon of the same size reads undecided there too, never lossless)
    r = es.audit_sampler(numpy_gumbel_f32, precision="float32", **ONE)
    b = r.extra["float_boundary"]
    assert r.verdict == "undecided" and b["forced"] is True and 0 < r.tv <= F(b["allowance"])
    assert r.extra["precision"] == "float32" and r.extra["precision_from"] == "given"
    assert F(r.extra["measured_rounding"]["reference_tv"]) < F64_ALLOWANCE      # the reference: all but exact
    # on an instance where float32 rounding costs the reference something, the race is within it: lossless
    p = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
    q = es.models.context_free((F(1, 5), F(1, 5), F(3, 5)))
    ok = es.audit_sampler(numpy_gumbel_f32, precision="float32", target=p, draft=q, proposer=es.drafts.chain(1),
                          tokens=1, progress=False)
    assert ok.verdict == "lossless" and F(ok.extra["measured_rounding"]["reference_tv"]) > 0
    assert ok.tv <= 4 * F(ok.extra["measured_rounding"]["reference_tv"])


@pytest.mark.parametrize("sampler, adapter", [(f, a) for f, a, claim in z.ZOO if claim == "lossless"])
def test_correct_float32_samplers_are_lossless_on_instances_with_and_without_rounding(sampler, adapter):
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    for kw in (ONE, dict(target=inst.target, draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt,
                         tokens=2)):
        r = es.audit_sampler(sampler, adapter=adapter, **kw)
        assert r.verdict == "lossless", (sampler.__name__, r.verdict_text)


# -- small algorithmic bias in float32 code is biased (the previous rule said "lossless") ----------------------
def test_a_1e9_residual_epsilon_is_biased_although_below_float32_rounding():
    p, q = es.models.context_free((F(1, 3), F(1, 3), F(1, 3))), es.models.context_free((F(1, 6), F(1, 2), F(1, 3)))
    r = es.audit_sampler(z.residual_epsilon, adapter="vllm", target=p, draft=q, proposer=es.drafts.chain(1),
                         tokens=1)
    b = r.extra["float_boundary"]
    assert not r.support_violations and r.verdict == "biased" and r.exit_code == 1
    assert F(1, 10 ** 10) < F(b["f64_tv"]) < F(1, 10 ** 7) and "algorithmic" in b["reason"]


def shaved(draft_ids, draft_probs, target_probs, rng):
    """Casts down; every acceptance ratio shaved by 2**-19: a bias between typical and worst float32 rounding."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    out = []
    for j, x in enumerate(draft_ids):
        if rng.random() < p32[j, x] / q32[j, x] * np.float32(1 - 2 ** -19):
            out.append(int(x))
            continue
        res = np.maximum(p32[j] - q32[j], np.float32(0))
        out.append(int(rng.choice(len(res), p=res / res.sum())))
        return out
    out.append(int(rng.choice(p32.shape[1], p=p32[-1] / p32[-1].sum())))
    return out


# p = (3/4, 1/4), q = (1/2, 1/2): draft 1 is accepted with probability 1/2 (1 - 2**-19) instead of 1/2, and a
# rejection emits token 0, so token 1 has probability 1/4 - 2**-21: TV 2**-21 exactly (every number dyadic,
# no rounding). For vocab 2 and 1 token of chain(1) (2 positions) float32 rounding typically costs
# 2 * 2 * 2**-24 = 2**-22 and at most 16 times that, 2**-18: in between, undecided.
SHAVE = dict(target=es.models.context_free((F(3, 4), F(1, 4))), draft=es.models.context_free((F(1, 2), F(1, 2))),
             proposer=es.drafts.chain(1), tokens=1)


def test_the_undecided_band_exits_3():
    r = es.audit_sampler(shaved, **SHAVE)
    b = r.extra["float_boundary"]
    assert r.tv == F(1, 2 ** 21) == F(b["f64_tv"]) and b["forced"] is True
    assert typical_rounding("float32", vocab=2, positions=2) == F(1, 2 ** 22)
    assert F(b["allowance"]) == rounding_allowance("float32", vocab=2, positions=2) == F(1, 2 ** 18)
    assert r.verdict == "undecided" and r.exit_code == 3 and not r.lossless and not r.claim_holds
    assert "UNDECIDED WITHIN FLOAT32 ROUNDING" in r.summary() and "undecided within float32 rounding" in r.verdict_text


def test_a_search_meeting_undecided_instances_is_incomplete_never_empty():
    from exactspec.counterexamples.space import Space
    from exactspec.samplers.search import search_instances
    space = Space(vocabs=(2,), shapes=((1,),), tokens=(1,), random_points=2, exhaustive_denominator=1)
    found = search_instances(lambda inst: es.audit_sampler(shaved, **SHAVE, budget=inst["budget"]), space=space,
                             name="shaved")
    assert isinstance(found, es.IncompleteSearch) and found.exit_code == 3
    assert f"undecided within float rounding on {found.audited} of {found.audited} instances" in found.reason


def test_cli_audit_sampler_precision_and_tolerance(capsys):
    ref = "exactspec.bugzoo.float32_samplers:residual_epsilon"
    base = ["audit-sampler", ref, "--adapter", "vllm", "--instance", "--vocab", "3", "--gamma", "1", "--json",
            "--no-timings"]
    assert cli.main(base) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["extra"]["float_boundary"]["verdict"] == "biased" and d["extra"]["tolerance"] != "0"
    # a tolerance above the epsilon's float64 bias accepts it: the flag reaches the float64 run's allowance
    assert cli.main(base + ["--tolerance", "1/1000"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["extra"]["float_boundary"]["allowance"] == "1/1000"
    assert cli.main(base + ["--precision", "float32", "--tolerance", "2**-40"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["extra"]["precision"] == "float32" and d["extra"]["precision_from"] == "given"
    assert cli.main(base + ["--tolerance", "-1"]) == 2
    assert "--tolerance must be >= 0" in capsys.readouterr().err


def cast_multinomial(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Correct, casting down before the draw: the float64 run must see the cast in the multinomial's weights."""
    def recover(p, q):
        residual = torch.clamp(p.float() - q.float(), min=0)
        return torch.multinomial(residual / residual.sum(), 1)[0]
    return z._chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)


def test_a_cast_before_torch_multinomial_is_seen_in_the_float64_run():
    # two positive residual entries whose float32 ratio is not exact: the float64 run keeps float32 rounding
    p, q = es.models.context_free((F(1, 2), F(3, 10), F(1, 5))), es.models.context_free((F(1, 5), F(1, 5), F(3, 5)))
    r = es.audit_sampler(cast_multinomial, adapter="vllm", target=p, draft=q, proposer=es.drafts.chain(1), tokens=1)
    b = r.extra["float_boundary"]
    # the float64 run lifts that cast as it goes (a float32 meeting float64 there was rounding, ~1e-8): it is the
    # algorithm at float64, within float64 rounding
    assert b["forced"] is True and r.verdict == "lossless" and r.tv > F64_ALLOWANCE
    assert F(b["f64_tv"]) <= F64_ALLOWANCE and "float32" in r.extra["lifted_run"]["casts_lifted"]


def test_a_float32_mask_among_the_adapters_tensors_is_not_a_cast():
    # the torch-tree adapter hands TreeBuffers with a float attention mask: not the sampler casting down
    p, q = es.models.context_free((F(1, 2), F(1, 3), F(1, 6))), es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
    r = es.audit_sampler(z.mss_from_logits, adapter="torch-tree", target=p, draft=q, tokens=2,
                         proposer=es.drafts.tree((2,), children="without_replacement", claim="renormalized"))
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and b["forced"] is False and F(b["f64_tv"]) <= F64_ALLOWANCE < r.tv


def test_a_wrong_position_bonus_shrinks_to_an_instance_that_shows_it():
    # the bonus token is drawn from the target law at the first position: invisible on context-free laws, where
    # the previous rule still read float32 rounding as "biased, not rounding" and shrank there
    from exactspec.counterexamples.space import Space
    from exactspec.samplers.search import search_sampler
    space = Space(vocabs=(2, 3), shapes=((1,),), tokens=(2,), random_points=3, exhaustive_denominator=2)
    ce = search_sampler(z.bonus_from_first_position, adapter="transformers", space=space, progress=False)
    assert ce.found and ce.instance.family != "context_free" and ce.instance.tokens == 2
    # what stays at float64 (the minimal instance has a zero where the bonus position's law has none)
    assert ce.extra["verdict_reason"] in ("a support violation at float32 and at float64: an outcome the expected "
                                          "law never emits",) or ce.extra["verdict_reason"].startswith(
                                              "algorithmic: the same code on float64 inputs")
    assert F(ce.extra["algorithmic_tv"]) > F(1, 100)
    # and the regression test it prints audits the sampler on that instance
    assert "bonus_from_first_position" in ce.to_pytest()


@pytest.mark.slow
@pytest.mark.parametrize("sampler, adapter", [(f, a) for f, a, claim in z.ZOO if claim == "lossless"]
                         + [(z.mss_from_logits, "torch-tree")])
def test_correct_float32_code_is_lossless_under_the_default_search(sampler, adapter):
    # issue 16: correct float32 code written in common ways came out "biased" from the default search
    from exactspec.samplers.search import search_sampler
    found = search_sampler(sampler, adapter=adapter, progress=False)
    assert isinstance(found, es.EmptySearch) and found.exit_code == 0, str(found)


# -- every dtype the code meets, and the run with its casts lifted (issue 35) -------------------------------------------
P5 = es.models.context_free((F(1, 2), F(3, 10), F(1, 5)))
Q5 = es.models.context_free((F(1, 5), F(1, 5), F(3, 5)))
AT5 = dict(adapter="vllm", target=P5, draft=Q5, proposer=es.drafts.chain(1), tokens=1, progress=False)


def _recovering(recover):
    def sampler(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        return z._chain(target_probs, draft_probs, draft_token_ids, bonus_token_ids, recover)
    sampler.__name__ = recover.__name__
    return sampler


def numpy_scalar_temperature(p, q):
    """Correct: the residual scaled by a temperature kept as a numpy float32 scalar, and back (torch treats the scalar
    as a Python float: no float32 tensor shows, yet the value is float32's)."""
    t = np.float32(0.7)
    residual = torch.clamp(p - q, min=0) / t * 0.7
    return torch.multinomial(residual, 1)[0]


def half_residual(p, q):
    """Correct: the residual computed in float16 and drawn from there."""
    return torch.multinomial(torch.clamp(p.half() - q.half(), min=0).double(), 1)[0]


def bf16_residual(p, q):
    """Correct: the residual computed in bfloat16, drawn in float64."""
    return torch.multinomial(torch.clamp(p.to(torch.bfloat16) - q.to(torch.bfloat16), min=0).double(), 1)[0]


def float32_residual_epsilon(p, q):
    """Biased: float32 code adding a 1e-6 "stability epsilon" to its residual."""
    residual = torch.clamp(p.float() - q.float(), min=0) + 1e-6
    return torch.multinomial(residual, 1)[0]


def test_a_numpy_float32_scalar_dividing_float64_is_rounding_not_bias():
    r = es.audit_sampler(_recovering(numpy_scalar_temperature), **AT5)
    assert r.verdict == "lossless" and F64_ALLOWANCE < r.tv            # it used to read "biased": float32 rounding
    low = r.extra["lowest_precision"]
    assert low["precision"] == "float32" and low["where"].startswith(__file__ + ":")
    assert r.extra["float_boundary"]["forced"] is True


@pytest.mark.parametrize("recover, precision", [(half_residual, "float16"), (bf16_residual, "bfloat16")])
def test_a_half_precision_residual_is_judged_at_its_own_precision(recover, precision):
    r = es.audit_sampler(_recovering(recover), **AT5)
    b = r.extra["float_boundary"]
    # the rounding is half precision's (far beyond float32's cap of 2**-12 for bfloat16): the lifted run decides
    assert r.verdict == "lossless" and b["precision"] == precision and r.extra["lowest_precision"]["precision"] == precision
    assert F(r.extra["lifted_run"]["tv"]) <= F64_ALLOWANCE and r.extra["lifted_run"]["still_coarse"] == "none"
    assert r.tv > 0 and precision in r.extra["lifted_run"]["casts_lifted"]


def test_a_residual_epsilon_below_the_size_derived_allowance_is_biased_once_the_cast_is_lifted():
    r = es.audit_sampler(_recovering(float32_residual_epsilon), **AT5)
    b = r.extra["float_boundary"]
    positions = 1
    # below what the old size-derived bound let pass as float32 rounding ...
    assert F(b["f64_tv"]) < rounding_allowance("float32", vocab=3, positions=positions)
    # ... but with its .float() lifted to float64 the epsilon is still there: algorithmic
    assert r.verdict == "biased" and "casts lifted to float64" in b["reason"]
    assert F(b["algorithmic_tv"]) == F(r.extra["lifted_run"]["tv"]) > 1000 * F64_ALLOWANCE


def numpy_float32_items(draft_ids, draft_probs, target_probs, rng):
    """Correct: laws stored in numpy float32 arrays, the acceptance test on ``.item()`` floats."""
    p32, q32 = target_probs.astype(np.float32), draft_probs.astype(np.float32)
    for j, x in enumerate(draft_ids):
        if rng.random() < (p32[j, x] / q32[j, x]).item():
            continue
        r = np.maximum(p32[j] - q32[j], 0).astype(np.float64)
        return [*draft_ids[:j], int(rng.choice(len(r), p=r / r.sum()))]
    w = p32[-1].astype(np.float64)
    return [*draft_ids, int(rng.choice(len(w), p=w / w.sum()))]


def numpy_float32_items_tilted(draft_ids, draft_probs, target_probs, rng):
    """Biased: as :func:`numpy_float32_items`, its bonus token 0 weighted 1 + 1e-7 (below float32 rounding)."""
    p32 = target_probs.astype(np.float32)
    w = p32[-1].astype(np.float64) * np.array([1 + 1e-7] + [1.0] * (p32.shape[1] - 1))
    if rng.random() < (p32[0, draft_ids[0]] / draft_probs.astype(np.float32)[0, draft_ids[0]]).item():
        return [int(draft_ids[0]), int(rng.choice(len(w), p=w / w.sum()))]
    r = np.maximum(p32[0] - draft_probs.astype(np.float32)[0], 0).astype(np.float64)
    return [int(rng.choice(len(r), p=r / r.sum()))]


def test_numpy_code_rounding_its_inputs_to_float32_where_no_dtype_shows_is_rounding():
    p = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
    q = es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))
    kw = dict(adapter="numpy", target=p, draft=q, proposer=es.drafts.chain(1), tokens=2, progress=False)
    r = es.audit_sampler(numpy_float32_items, **kw)
    # it used to read "biased, algorithmic" at TV 6.2e-9: all of it the rounding of p and q to float32, as the same
    # code on inputs already rounded to float32 is exactly the reference sampler's law there
    assert r.verdict == "lossless" and F64_ALLOWANCE < r.tv < F(1, 10 ** 7)
    assert F(r.extra["rounded_inputs_run"]["tv_to_reference"]) == 0
    assert r.extra["lowest_precision"]["precision"] == "float32"
    # a real bias smaller than the rounding is not explained by it: biased
    bad = es.audit_sampler(numpy_float32_items_tilted, **kw)
    assert bad.verdict == "biased" and F(bad.extra["rounded_inputs_run"]["tv_to_reference"]) > F64_ALLOWANCE
