"""Third-party samplers: the numpy Generator stand-in, generator lattices, audit_sampler, the numpy bug zoo."""

from fractions import Fraction as F

import numpy as np
import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.enumerate.rng import enumerate_program
from exactspec.fields import get_field
from exactspec.instances import make_instance
from exactspec.samplers import EnumGenerator

FR = get_field(backend="python")


def law_of(program, rng_model="continuous"):
    return enumerate_program(lambda rng: program(EnumGenerator(rng)), FR, rng_model=rng_model, exact_floats=True)


# -- the Generator stand-in ---------------------------------------------------------------------------

def test_choice_follows_numpys_float64_cumulative_sum():
    p = np.array([0.1, 0.2, 0.7])
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    expected = {0: F(cdf[0]), 1: F(cdf[1]) - F(cdf[0]), 2: 1 - F(cdf[1])}
    assert law_of(lambda g: int(g.choice(3, p=p))) == expected
    # the float64 lattice k * 2**-53: counts of lattice points below each cumulative value
    on_lattice = law_of(lambda g: int(g.choice(3, p=p)), "float64")
    n0 = -(-F(cdf[0]) * 2 ** 53 // 1)      # ceil: the number of k with k * 2**-53 < cdf[0]
    assert on_lattice[0] == F(int(n0), 2 ** 53)


def test_random_uniform_integers_binomial():
    assert law_of(lambda g: g.random() < 0.25) == {True: F(1, 4), False: F(3, 4)}
    assert law_of(lambda g: g.uniform(2.0, 4.0) < 3.0) == {True: F(1, 2), False: F(1, 2)}
    assert law_of(lambda g: int(g.integers(1, 4))) == {1: F(1, 3), 2: F(1, 3), 3: F(1, 3)}
    assert law_of(lambda g: int(g.binomial(1, 0.5))) == {1: F(1, 2), 0: F(1, 2)}
    arr = law_of(lambda g: tuple(bool(b) for b in (g.random(2) < np.array([0.5, 0.5]))))
    assert arr == {(a, b): F(1, 4) for a in (True, False) for b in (True, False)}


def test_unsupported_uses_name_the_operation():
    with pytest.raises(es.UnsupportedRandomness, match="sqrt"):
        law_of(lambda g: np.sqrt(g.random()) < -1)
    with pytest.raises(es.UnsupportedRandomness, match="Generator.normal is not intercepted"):
        law_of(lambda g: g.normal())
    with pytest.raises(es.UnsupportedRandomness, match="replace=False"):
        law_of(lambda g: g.choice(3, replace=False))


# -- generator lattices --------------------------------------------------------------------------------

def test_lattices_give_ties_their_probability():
    # torch float32: k * 2**-24 with 0 included; curand: (0, 1]; continuous: ties have probability 0
    assert law_of(lambda g: g.random() <= 0.0, "torch-float32")[True] == F(1, 2 ** 24)
    assert law_of(lambda g: g.random() <= 0.0, "curand") == {False: 1}
    assert law_of(lambda g: g.random() <= 0.0) == {False: 1}
    assert law_of(lambda g: g.random() < 1.0, "curand")[False] == F(1, 2 ** 24)
    # u < 1/3 on float32: k < 2**24 / 3, i.e. 5592406 lattice points
    assert law_of(lambda g: g.random() < F(1, 3), "torch-float32")[True] == F(5592406, 2 ** 24)
    with pytest.raises(es.ExactSpecError, match="unknown rng_model 'mt19937'"):
        es.audit(target=es.models.context_free((1, 0)), draft=es.models.context_free((1, 0)),
                 rule=es.rules.speculative_sampling, rng_model="mt19937")


# -- audit_sampler and the zoo -----------------------------------------------------------------------

P0 = es.models.context_free((0, F(1, 2), F(1, 2)))          # token 0 has target probability 0
Q0 = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
ONE = dict(proposer=es.drafts.chain(1), tokens=1)


def test_reference_and_fixed_samplers_are_lossless_up_to_rounding():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    for sampler in (es.samplers.reference_numpy_chain, zoo.correct):
        r = es.audit_sampler(sampler, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                             prompt=inst.prompt, tokens=2)
        assert r.verdict == "lossless" and r.extra["reference_tv"] == "0"
        assert 0 < r.tv < F(1, 10 ** 15)     # float64 rounding of the laws handed to the sampler
        assert r.extra["sampler_calls"] == r.paths > 0


def test_shared_uniform_is_biased():
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit_sampler(zoo.shared_uniform, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                         prompt=inst.prompt, tokens=2)
    assert r.verdict == "biased" and F(r.extra["algorithmic_tv"]) > F(1, 100)


def test_zero_uniform_emits_the_draft_law_exactly():
    # u = 0 accepts every draft with p(x) > 0; with a full-support target the output is q itself:
    # TV = TV(p, q) = 1/10 for p = (3/5, 2/5), q = (1/2, 1/2)
    p, q = es.models.context_free((F(3, 5), F(2, 5))), es.models.context_free((F(1, 2), F(1, 2)))
    r = es.audit_sampler(zoo.zero_uniform, target=p, draft=q, **ONE)
    assert r.output == {(0,): F(1, 2), (1,): F(1, 2)} and r.tv == F(1, 10) and r.verdict == "biased"


def test_accept_at_zero_needs_a_generator_that_returns_zero():
    # draft 0 (q = 1/2) has p(0) = 0: p/q = 0.0 and u <= 0 holds only for u == 0, which torch's float32
    # generator returns with probability 2**-24: token 0 is emitted with probability 1/2 * 2**-24
    r = es.audit_sampler(zoo.accept_at_zero, target=P0, draft=Q0, rng_model="torch-float32", **ONE)
    assert r.output[(0,)] == F(1, 2 ** 25) and r.support_violations == [(0,)] and r.verdict == "biased"
    assert "SUPPORT VIOLATION" in r.summary()
    # a continuous uniform is never 0: that model hides the bug (it is no longer the default)
    assert es.audit_sampler(zoo.accept_at_zero, target=P0, draft=Q0, rng_model="continuous",
                            **ONE).support_violations == []
    # the default (native) puts numpy's uniform on its own lattice k * 2**-53: 0 with probability 2**-53
    native = es.audit_sampler(zoo.accept_at_zero, target=P0, draft=Q0, **ONE)
    assert native.output[(0,)] == F(1, 2 ** 54) and native.support_violations == [(0,)] and native.verdict == "biased"
    fixed = es.audit_sampler(zoo.correct, target=P0, draft=Q0, rng_model="torch-float32", **ONE)
    assert fixed.support_violations == [] and fixed.verdict == "lossless"


def test_tiny_clamp_gives_mass_to_a_token_the_target_never_emits():
    # draft 0 is always rejected; residual max(p - q, tiny) = (tiny, 1/4, 1/4) / sum in float64:
    # numpy's choice gives token 0 the float cdf[0], exactly, under the continuous model
    r = es.audit_sampler(zoo.tiny_clamp, target=P0, draft=Q0, rng_model="continuous", **ONE)
    p, q = np.array([0, 0.5, 0.5]), np.array([0.5, 0.25, 0.25])
    res = np.maximum(p - q, zoo.F32_TINY)
    cdf = np.cumsum(res / res.sum())
    assert r.output[(0,)] == F(1, 2) * F(cdf[0] / cdf[-1]) and r.support_violations == [(0,)]
    assert r.verdict == "biased" and 1e-39 < float(r.tv) < 1e-37
    # on numpy's own lattice (the default) u < cdf[0] ~ 2.4e-38 holds only for u == 0: probability 2**-53
    native = es.audit_sampler(zoo.tiny_clamp, target=P0, draft=Q0, **ONE)
    assert native.output[(0,)] == F(1, 2) * F(1, 2 ** 53) and native.support_violations == [(0,)]
    assert native.verdict == "biased"


def test_argmax_drafts_with_soft_claims_through_a_real_sampler():
    # transformers#32867: argmax drafts scored with the soft q; exact-rule value (5/6, 1/6), TV 1/3,
    # here through float64 arithmetic: within 1e-15 of it
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(3, 5), F(2, 5)))
    r = es.audit_sampler(es.samplers.reference_numpy_chain, target=p, draft=q, tokens=1,
                         proposer=es.drafts.chain(1, sampling="argmax", claim="draft"))
    assert abs(r.tv - F(1, 3)) < F(1, 10 ** 15) and r.verdict == "biased"


def test_zoo_table_entries_have_fixes_and_references():
    for bad, fix, ref in zoo.ZOO:
        assert callable(bad) and fix is zoo.correct and ref


def test_audit_sampler_argument_errors():
    with pytest.raises(es.ExactSpecError, match="unknown adapter 'vllm-v9'"):
        es.audit_sampler(zoo.correct, adapter="vllm-v9", target=P0, draft=Q0, **ONE)


def test_cli_audit_sampler(capsys, monkeypatch):
    from exactspec import cli
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:shared_uniform", "--vocab", "3",
                     "--instance"]) == 1
    out = capsys.readouterr().out
    assert "BIASED" in out and "rounding (a correct sampler through the same float pipeline" in out
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--vocab", "3", "--rng-model",
                     "torch-float32", "--json", "--instance"]) == 0
    import json
    d = json.loads(capsys.readouterr().out)
    assert d["lossless"] and d["extra"]["reference_tv"] == "0" and d["instance"]["rng_model"] == "torch-float32"
    assert cli.main(["audit-sampler", "no_such_module:f"]) == 2
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers"]) == 2
    err = capsys.readouterr().err
    assert "cannot load no_such_module:f" in err and "must be MODULE:FUNCTION" in err


# -- sampling law vs claimed law: bf16 drafting, temperature on one side ------------------------------------

def test_bf16_drafts_scored_in_fp32_are_biased():
    # deepseek-ai/DeepSpec#31: drafts sampled from bf16-rounded probabilities, accepted with fp32 ones.
    # q = (1/10, 9/10) rounds to (205/2048, 115/128), renormalised (41/409, 368/409)
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(1, 10), F(9, 10)))
    bf16 = es.drafts.chain(1, sampled_from=es.models.rounded(q, "bfloat16"))
    exact = es.audit(target=p, draft=q, proposer=bf16, rule=es.rules.speculative_sampling, tokens=1)
    # x = 0 (41/409) is always accepted; x = 1 (368/409) w.p. (1/2)/(9/10) = 5/9; the residual is (1, 0):
    # P(0) = 41/409 + 368/409 * 4/9 = 41/409 + 1472/3681 = 1841/3681
    assert exact.output[(0,)] == F(1841, 3681) and exact.tv == F(1841, 3681) - F(1, 2)
    r = es.audit_sampler(zoo.correct, target=p, draft=q, proposer=bf16, tokens=1)
    assert r.verdict == "biased" and abs(r.tv - exact.tv) < F(1, 10 ** 15)
    fixed = es.audit_sampler(zoo.correct, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1)
    assert fixed.verdict == "lossless"


def test_temperature_applied_to_one_side_only_is_biased():
    # vllm-project/vllm#9834: the target law and the drafts at temperature 1/2 (sharpen by 2), the verifier
    # told the draft's temperature-1 law
    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    hot_p, hot_q = es.models.sharpen(inst.target, 2), es.models.sharpen(inst.draft, 2)
    one_side = es.audit_sampler(zoo.correct, target=hot_p, draft=inst.draft, prompt=inst.prompt, tokens=2,
                                proposer=es.drafts.chain(2, sampled_from=hot_q))
    both = es.audit_sampler(zoo.correct, target=hot_p, draft=hot_q, prompt=inst.prompt, tokens=2,
                            proposer=es.drafts.chain(2))
    assert one_side.verdict == "biased" and both.verdict == "lossless"


# -- tree samplers through the numpy-tree adapter ----------------------------------------------------------

def test_tree_sampler_with_topk_children_and_renormalised_soft_claims_is_biased():
    # the verifier is a correct MSS; the claims are what is wrong. p = (1/2, 1/2), q = (3/5, 2/5), one top-1
    # child: told q renormalised over the tokens not yet drafted = q itself, the soft law: (5/6, 1/6) as in
    # the catalog (up to float64 rounding), while point-mass claims give p back
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((F(3, 5), F(2, 5)))
    soft = es.audit_sampler(zoo.mss_tree, adapter="numpy-tree", target=p, draft=q, tokens=1,
                            proposer=es.drafts.tree((1,), children="topk", claim="renormalized"))
    assert soft.verdict == "biased" and abs(soft.tv - F(1, 3)) < F(1, 10 ** 15)
    honest = es.audit_sampler(zoo.mss_tree, adapter="numpy-tree", target=p, draft=q, tokens=1,
                              proposer=es.drafts.tree((1,), children="topk", claim="point_mass"))
    assert honest.verdict == "lossless" and honest.extra["reference_tv"] == "0"


def test_multi_sample_matching_tree_sampler_and_its_fix():
    # q = (1, 0): two iid children, both token 0; p = (1/2, 1/2): two target samples, accept 0 if either is 0
    # (3/4), else emit the first (token 1): (3/4, 1/4), TV 1/4 - exactly, since 1/2 is a float
    p, q = es.models.context_free((F(1, 2), F(1, 2))), es.models.context_free((1, 0))
    prop = es.drafts.tree((2,), children="iid")
    bad = es.audit_sampler(zoo.multi_sample_match_tree, adapter="numpy-tree", target=p, draft=q, tokens=1,
                           proposer=prop)
    assert bad.output == {(0,): F(3, 4), (1,): F(1, 4)} and bad.tv == F(1, 4) and bad.verdict == "biased"
    inst = make_instance(vocab=3, order=1, gamma=1, tokens=2)
    fixed = es.audit_sampler(zoo.single_sample_tree, adapter="numpy-tree", target=inst.target, draft=inst.draft,
                             proposer=es.drafts.tree((2, 1)), prompt=inst.prompt, tokens=2)
    assert fixed.verdict == "lossless"


def test_cli_audit_sampler_with_a_tree_adapter(capsys):
    from exactspec import cli
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:multi_sample_match_tree", "--adapter",
                     "numpy-tree", "--vocab", "3", "--tokens", "1", "--instance"]) == 1
    assert "tree(expansion=(2, 1), children='iid'" in capsys.readouterr().out
    assert cli.main(["audit-sampler", "exactspec.bugzoo.numpy_samplers:mss_tree", "--adapter", "numpy-tree",
                     "--vocab", "3", "--tokens", "1", "--children", "topk", "--claim", "point_mass",
                     "--instance"]) == 0


def test_the_documented_way_to_write_an_adapter_works():
    # exactly the pattern in exactspec/samplers/adapters/registry.py's docstring, for a sampler with another signature
    class MyAdapter(es.samplers.Adapter):
        name, family = "mine", "chain"
        reference = staticmethod(lambda p, q, drafts, generator: zoo.correct(drafts, q, p, generator))

        @property
        def reference_rule(self):
            return es.rules.speculative_sampling

        def call(self, sampler, step, rng):
            drafts, q, p = self.chain_arrays(step)
            out = sampler(p, q, drafts, generator=es.samplers.EnumGenerator(rng))
            return self.tokens(out)

    def my_sampler(p, q, drafts, generator):          # target first, keyword generator
        return zoo.shared_uniform(drafts, q, p, generator)

    inst = make_instance(vocab=3, order=1, gamma=2, tokens=2)
    r = es.audit_sampler(my_sampler, adapter=MyAdapter(), target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    direct = es.audit_sampler(zoo.shared_uniform, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                              prompt=inst.prompt, tokens=2)
    assert r.output == direct.output and r.verdict == "biased" and r.extra["adapter"] == "mine"
