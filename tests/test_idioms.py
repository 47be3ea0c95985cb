"""The idioms real samplers use, followed exactly (issue 10, section 2).

Races written with logs and exponentials in every spelling (torch and numpy), ``.item()`` on a
lazy uniform, inverse-CDF draws by ``searchsorted`` over a float ``cumsum``, lazy comparison
masks (vLLM's and transformers' "first rejection" logic), a uniform compared with an array of
thresholds, randomness the audit cannot see, and error messages that name the sampler's line.

Every expected law is derived by hand (or from the exact values of the floats involved), never
copied from the code under test.
"""

import random
import textwrap
from fractions import Fraction as F

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.instances import make_instance  # noqa: E402
from exactspec.samplers.adapters import torch_adapters  # noqa: E402
from exactspec.samplers.randomness.numpy_rng import EnumGenerator  # noqa: E402
from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch  # noqa: E402

FR = get_field(backend="python")
P = torch.tensor([0.5, 0.25, 0.25])            # dyadic: float32 holds it exactly
P_LAW = {0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}


def law_of(program, rng_model="continuous"):
    """(law, number of runs = branches) of a torch program run under the enumerating interception."""
    runs = [0]

    def run(rng):
        runs[0] += 1
        with bind(rng):
            return program()
    with intercept_torch():
        law = enumerate_program(run, FR, rng_model=rng_model, exact_floats=True)
    return law, runs[0]


def np_law(program):
    return enumerate_program(lambda rng: program(EnumGenerator(rng)), FR, exact_floats=True)


# -- races: Gumbel-max and exponential races, every spelling ---------------------------------------------------

def _exponential_statement():
    q = torch.empty_like(P)
    q.exponential_()                           # a statement: q itself holds the draws
    return int((P / q).argmax(dim=-1))


RACES = {
    "-log(-log(rand)) + log p": lambda: int((torch.log(P) - torch.log(-torch.log(torch.rand(3)))).argmax()),
    "-log(-log(rand_like))": lambda: int((P.log() + -torch.log(-torch.log(torch.rand_like(P)))).argmax(dim=-1)),
    "-log(-log(uniform_()))": lambda: int((torch.log(P) - (-(torch.empty(3).uniform_()).log()).log()).argmax(-1)),
    "log(u) / p": lambda: int((torch.log(torch.rand(3)) / P).argmax()),
    "u ** (1 / p)": lambda: int((torch.rand(3) ** (1 / P)).argmax()),
    "p / q.exponential_() (statement)": _exponential_statement,
    "p / empty_like(p).exponential_()": lambda: int((P / torch.empty_like(P).exponential_()).argmax(dim=-1)),
    "keepdim": lambda: int((P / torch.empty_like(P).exponential_()).argmax(dim=-1, keepdim=True)[0]),
    "p / -log(u)": lambda: int((P / -torch.log(torch.rand_like(P))).argmax()),
    "argmin(-log(u) / p)": lambda: int((-torch.log(torch.rand(3)) / P).argmin()),
    "in-place div_": lambda: int(P.clone().div_(torch.empty(3).exponential_()).argmax()),
}


@pytest.mark.parametrize("spelling", list(RACES))
def test_every_spelling_of_the_race_is_a_draw_from_the_weights(spelling):
    law, runs = law_of(RACES[spelling])
    if spelling.startswith("-log(-log"):
        # weights exp(float32(log p_i)): irrational, the law is softmax of the float logits
        assert set(law) == {0, 1, 2} and sum(law.values()) == 1
        with mpmath.workprec(400):
            logits = [mpmath.mpf(float(x)) for x in torch.log(P)]
            total = sum(mpmath.exp(c) for c in logits)
            for i, c in enumerate(logits):
                got = mpmath.mpf(law[i].numerator) / law[i].denominator
                assert abs(got - mpmath.exp(c) / total) < mpmath.mpf(2) ** -250
    else:
        assert law == P_LAW
    assert runs == 3                           # one categorical draw: one branch per token


def test_gumbel_race_with_exactly_representable_weights_is_exact():
    logits = torch.tensor([0.0, 0.0, float("-inf"), 0.0])     # weights 1, 1, 0, 1
    law, _ = law_of(lambda: int((logits - torch.log(-torch.log(torch.rand(4)))).argmax()))
    assert law == {0: F(1, 3), 1: F(1, 3), 3: F(1, 3)}
    # temperature: (logits + g) / T keeps the race; logits / T + g too
    law, _ = law_of(lambda: int(((logits - torch.log(-torch.log(torch.rand(4)))) / 0.5).argmax()))
    assert law == {0: F(1, 3), 1: F(1, 3), 3: F(1, 3)}


def test_u_to_the_power_one_over_p_uses_the_float_exponent():
    p = torch.tensor([0.3, 0.7])
    t = (1 / p).tolist()                       # the exponents the code computes, in float32
    w = [1 / F(x) for x in t]
    law, _ = law_of(lambda: int((torch.rand(2) ** (1 / p)).argmax()))
    assert law == {0: w[0] / sum(w), 1: w[1] / sum(w)}


def test_batched_races_draw_one_token_per_row():
    probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    law, _ = law_of(lambda: tuple((probs / torch.empty_like(probs).exponential_()).argmax(dim=-1).tolist()))
    assert law == {(a, b): F(1, 2) * (F(1, 4) if b == 0 else F(3, 4)) for a in (0, 1) for b in (0, 1)}
    # a zero weight never wins; all-zero weights give torch's first index
    assert law_of(lambda: int((torch.tensor([0.0, 1.0]) / torch.empty(2).exponential_()).argmax()))[0] == {1: 1}
    assert law_of(lambda: int((torch.zeros(2) / torch.empty(2).exponential_()).argmax()))[0] == {0: 1}


def test_races_the_audit_cannot_follow_are_typed_errors():
    cases = {
        "larger E / w wins": lambda: int((torch.log(P) - torch.log(-torch.log(torch.rand(3)))).argmin()),
        "log(u + eps)": lambda: int(torch.log(torch.rand(3) + 1e-10).argmax()),
        "used twice": lambda: (lambda g: int((g + 1.0).argmax()) + int((g + 2.0).argmax()))(
            -torch.log(-torch.log(torch.rand(3)))),
        "compared after the race": lambda: (lambda u: (int(torch.log(u).argmax()), bool(u[0] < 0.5)))(
            torch.rand(3)),
        "broadcast draw": lambda: int((P / torch.empty(1).exponential_().expand(3)).argmax()),
        "clamp": lambda: int(torch.log(torch.rand(3)).clamp(min=-20).argmax()),
    }
    for what, program in cases.items():
        with pytest.raises(es.UnsupportedRandomness):
            law_of(program)
    with pytest.raises(es.UnsupportedRandomness, match="lattice"):
        law_of(lambda: int(torch.log(torch.rand(3)).argmax()), "torch-float32")
    # the clamped spelling log(u.clamp(min=eps)) has no exact categorical law: said so, not approximated
    with pytest.raises(es.UnsupportedRandomness, match="clamping a uniform"):
        law_of(lambda: int((-torch.log(-torch.log(torch.rand(3).clamp(min=1e-20)))).argmax()))


def _gumbel_recovery(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """A vLLM-style sampler whose recovered token is a Gumbel-max over log(residual)."""
    k = target_probs.shape[1]
    idx = draft_token_ids.unsqueeze(-1)
    accepted = torch.rand(1, k) < target_probs.gather(-1, idx).squeeze(-1) / draft_probs.gather(-1, idx).squeeze(-1)
    n = int(accepted.int().cumprod(-1).sum(-1)[0])
    out = torch.full((1, k + 1), -1, dtype=torch.long)
    out[0, :n] = draft_token_ids[0, :n]
    if n == k:
        out[0, k] = bonus_token_ids[0, 0]
    else:
        residual = torch.clamp(target_probs[0, n] - draft_probs[0, n], min=0)
        out[0, n] = (torch.log(residual) - torch.log(-torch.log(torch.rand_like(residual)))).argmax(-1)
    return out


def test_a_gumbel_max_sampler_audits_through_the_vllm_adapter():
    inst = make_instance(vocab=5, order=0, gamma=1, tokens=2)
    r = es.audit_sampler(_gumbel_recovery, adapter="vllm", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    # exp(float32(log r)) differs from r by float32 rounding of the log: a tiny algorithmic TV, read as rounding
    assert r.verdict == "lossless" and 0 < F(r.extra["algorithmic_tv"]) < F(1, 10 ** 6)


def test_numpy_races_every_spelling():
    p = np.array([0.5, 0.25, 0.25])
    exact = {
        "p / exponential": lambda g: int(np.argmax(p / g.exponential(size=3))),
        "log(u) / p": lambda g: int(np.argmax(np.log(g.random(3)) / p)),
        "u ** (1 / p)": lambda g: int(np.argmax(g.random(3) ** (1 / p))),
        "argmin E / p": lambda g: int(np.argmin(g.exponential(size=3) / p)),
        "max(key=) scan": lambda g: (lambda s: max(range(3), key=lambda i: s[i]))(p / g.standard_exponential(3)),
    }
    for what, program in exact.items():
        assert np_law(program) == P_LAW, what
    logits = np.array([0.0, 0.0, -np.inf])
    assert np_law(lambda g: int(np.argmax(logits + g.gumbel(size=3)))) == {0: F(1, 2), 1: F(1, 2)}
    assert np_law(lambda g: int(np.argmax(logits - np.log(-np.log(g.random(3)))))) == {0: F(1, 2), 1: F(1, 2)}
    with pytest.raises(es.UnsupportedRandomness):
        np_law(lambda g: int(np.argmax(-(logits + g.gumbel(size=3)))))


# -- .item(), searchsorted, lazy masks ------------------------------------------------------------------------

def test_item_is_a_lazy_scalar_that_compares_exactly():
    law, runs = law_of(lambda: torch.rand(1).item() < 0.25)
    assert law == {True: F(1, 4), False: F(3, 4)} and runs == 2
    ratio = torch.tensor(0.75)
    assert law_of(lambda: ratio > torch.rand(1).item())[0] == {True: F(3, 4), False: F(1, 4)}
    assert law_of(lambda: torch.rand(2).tolist()[1] >= 0.5)[0] == {True: F(1, 2), False: F(1, 2)}
    # drawn but never compared: no fork at all
    assert law_of(lambda: (torch.rand(1).item(), 7)[1]) == ({7: 1}, 1)
    with pytest.raises(es.UnsupportedRandomness, match="use u.item"):
        law_of(lambda: float(torch.rand(1)) < 0.5)


def test_searchsorted_over_a_float_cumsum_is_the_measure_of_its_intervals():
    p = np.array([0.1, 0.2, 0.7])
    c = np.cumsum(p)                           # float64: c[1] is 0.30000000000000004, c[2] may exceed 1
    expected = {0: F(c[0]), 1: F(c[1]) - F(c[0]), 2: 1 - F(c[1])}
    assert np_law(lambda g: int(np.searchsorted(np.cumsum(p), g.random()))) == expected
    pt = torch.tensor([0.1, 0.2, 0.7])
    ct = torch.cumsum(pt, -1)                  # float32 boundaries
    b = [F(float(x)) for x in ct]
    want = {0: b[0], 1: b[1] - b[0]}
    if b[2] < 1:
        want.update({2: b[2] - b[1], 3: 1 - b[2]})          # u above the last boundary: index V
    else:
        want[2] = 1 - b[1]
    got, _ = law_of(lambda: int(torch.searchsorted(torch.cumsum(pt, -1), torch.rand(1))[0]))
    assert got == want
    # side="right" and bucketize agree with searchsorted on a continuous uniform
    got, _ = law_of(lambda: int(torch.bucketize(torch.rand(1), torch.cumsum(P, -1))[0]))
    assert got == P_LAW


THRESH = torch.tensor([0.5, 0.5, 0.5])


def test_first_rejection_idioms_read_only_the_prefix_they_need():
    # vLLM: index of the first rejection (0 when none): rejections at 0, 1, 2 w.p. 1/2, 1/4, 1/8, none 1/8
    law, runs = law_of(lambda: int((~(torch.rand(3) < THRESH)).int().argmax(-1)))
    assert law == {0: F(1, 2) + F(1, 8), 1: F(1, 4), 2: F(1, 8)} and runs == 4
    accepted_prefix = {0: F(1, 2), 1: F(1, 4), 2: F(1, 8), 3: F(1, 8)}
    law, runs = law_of(lambda: int((torch.rand(3) < THRESH).cumprod(-1).sum(-1)))
    assert law == accepted_prefix and runs == 4
    # transformers' n_matches = ((~is_accepted).cumsum(-1) < 1).sum()
    law, runs = law_of(lambda: int(((~(torch.rand(3) <= THRESH)).cumsum(dim=-1) < 1).sum()))
    assert law == accepted_prefix and runs == 4
    law, runs = law_of(lambda: bool((torch.rand(3) < THRESH).all()))
    assert law == {True: F(1, 8), False: F(7, 8)} and runs == 4
    # reading one entry of a vector comparison forks that entry only
    law, runs = law_of(lambda: bool((torch.rand(5) < torch.full((5,), 0.25))[3]))
    assert law == {True: F(1, 4), False: F(3, 4)} and runs == 2


def test_where_and_other_reads_of_a_mask_see_every_entry():
    law, _ = law_of(lambda: tuple(torch.where(torch.rand(2) < 0.25, torch.tensor([1, 2]), torch.tensor([3, 4]))
                                  .tolist()))
    assert law == {(a, b): (F(1, 4) if a == 1 else F(3, 4)) * (F(1, 4) if b == 2 else F(3, 4))
                   for a in (1, 3) for b in (2, 4)}
    # an in-place op makes the mask an ordinary tensor holding its values
    def in_place():
        m = (torch.rand(2) < 0.5).int()
        m += 1
        return tuple(m.tolist())
    law, _ = law_of(in_place)
    assert law == {(a, b): F(1, 4) for a in (1, 2) for b in (1, 2)}
    law, _ = law_of(lambda: int((torch.rand(2) < 0.5).sum()))
    assert law == {0: F(1, 4), 1: F(1, 2), 2: F(1, 4)}


def test_the_vllm_reference_sampler_audit_is_unchanged_by_lazy_masks():
    inst = make_instance(vocab=3, order=0, gamma=2, tokens=2)
    r = es.audit_sampler(torch_adapters.reference_vllm_style, adapter="vllm", target=inst.target,
                         draft=inst.draft, proposer=inst.proposer, prompt=inst.prompt, tokens=2)
    assert r.verdict == "lossless" and r.extra["reference_tv"] == "0"


# -- a uniform against an array of thresholds (numpy) ------------------------------------------------------------

def test_numpy_uniform_against_an_array_entry_and_a_whole_array():
    ratios = np.array([0.25, 0.5])
    assert np_law(lambda g: bool(g.random() < ratios[1])) == {True: F(1, 2), False: F(1, 2)}
    # one uniform against the whole array: each entry an exact comparison of the same uniform
    law = np_law(lambda g: tuple(bool(x) for x in (g.random() < ratios)))
    assert law == {(True, True): F(1, 4), (False, True): F(1, 4), (False, False): F(1, 2)}
    law = np_law(lambda g: tuple(bool(x) for x in (ratios >= g.random())))
    assert law == {(True, True): F(1, 4), (False, True): F(1, 4), (False, False): F(1, 2)}


# -- randomness the audit cannot see: intercepted, or a typed error -----------------------------------------------

def _numpy_chain(coin):
    def sampler(draft_ids, draft_probs, target_probs, rng):
        out = []
        for j, x in enumerate(draft_ids):
            p, q = target_probs[j], draft_probs[j]
            if coin() < p[x] / q[x]:
                out.append(int(x))
                continue
            residual = np.maximum(p - q, 0.0)
            out.append(int(rng.choice(len(p), p=residual / residual.sum())))
            return out
        out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
        return out
    return sampler


def _audit(sampler, adapter="numpy"):
    inst = make_instance(vocab=3, order=0, gamma=1, tokens=2)
    return es.audit_sampler(sampler, adapter=adapter, target=inst.target, draft=inst.draft, proposer=inst.proposer,
                            prompt=inst.prompt, tokens=2)


def test_global_numpy_and_python_draws_read_lossless_whatever_the_seed():
    for seed in (0, 1):
        np.random.seed(seed)
        random.seed(seed)
        for coin in (lambda: np.random.random(), lambda: np.random.rand(), lambda: random.random(),
                     lambda: np.random.default_rng().random()):
            r = _audit(_numpy_chain(lambda c=coin: c()))
            assert r.verdict == "lossless" and r.extra["reference_tv"] == "0"


_OUTSIDE = np.random.default_rng(3)


def test_private_generators_and_torch_generators():
    with pytest.raises(es.UnsupportedRandomness):
        _audit(_numpy_chain(lambda: _OUTSIDE.random()))
    with pytest.raises(es.UnsupportedRandomness, match="seeded"):
        _audit(_numpy_chain(lambda: np.random.default_rng(5).random()))
    gen = torch.Generator().manual_seed(0)

    def with_generator(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return torch_adapters.reference_transformers_style(candidate_input_ids, candidate_logits,
                                                                        candidate_length, new_logits)
    inst = make_instance(vocab=2, order=0, gamma=1, tokens=1)

    def uses_gen(ids, cand, n, new):
        drafts = ids[0, -n:]
        q, p = cand.softmax(-1)[0], new.softmax(-1)[0]
        x = int(drafts[0])
        if torch.rand(1, generator=gen)[0] < p[0, x] / q[0, x]:
            return torch.tensor([[x, int(torch.multinomial(p[1], 1, generator=gen)[0])]]), torch.tensor(1)
        res = torch.clamp(p[0] - q[0], min=0)
        return torch.tensor([[int(torch.multinomial(res / res.sum(), 1, generator=gen)[0])]]), torch.tensor(0)
    r = es.audit_sampler(uses_gen, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=1)
    assert r.verdict == "lossless"

    def reseeds(ids, cand, n, new):
        gen.manual_seed(0)
        return uses_gen(ids, cand, n, new)
    with pytest.raises(es.UnsupportedRandomness):
        es.audit_sampler(reseeds, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=1)


# -- error messages name the sampler's file and line -----------------------------------------------------------------

def _load(tmp_path, source, name="sampler"):
    path = tmp_path / "my_sampler.py"
    path.write_text(textwrap.dedent(source))
    ns = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns[name], path


def test_errors_name_the_users_file_and_line(tmp_path):
    sampler, path = _load(tmp_path, """
        import torch

        def sampler(candidate_input_ids, candidate_logits, candidate_length, new_logits):
            r = torch.rand(1)
            if float(r) < 0.5:
                pass
            return candidate_input_ids[:, -candidate_length:], torch.tensor(candidate_length)
    """)
    inst = make_instance(vocab=2, order=0, gamma=1, tokens=1)
    with pytest.raises(es.UnsupportedRandomness) as err:
        es.audit_sampler(sampler, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=1)
    assert f"{path}:6 in sampler" in str(err.value)
    sampler, path = _load(tmp_path, """
        import torch

        def sampler(candidate_input_ids, candidate_logits, candidate_length, new_logits):
            u = torch.rand(1).item()
            v = torch.sin(torch.rand(1))
            return candidate_input_ids[:, -candidate_length:], torch.tensor(candidate_length)
    """)
    with pytest.raises(es.UnsupportedRandomness) as err:
        es.audit_sampler(sampler, adapter="transformers", target=inst.target, draft=inst.draft,
                         proposer=inst.proposer, prompt=inst.prompt, tokens=1)
    assert f"{path}:6 in sampler" in str(err.value) and "torch sin" in str(err.value)
    sampler, path = _load(tmp_path, """
        import numpy as np

        def sampler(draft_ids, draft_probs, target_probs, rng):
            u = rng.random()
            if np.sqrt(u) < 0.5:
                pass
            return [int(draft_ids[0])]
    """)
    with pytest.raises(es.UnsupportedRandomness) as err:
        _audit(sampler)
    assert f"{path}:6 in sampler" in str(err.value)


def test_iterating_over_uniforms_and_masks_stays_lazy():
    def loop():
        for j, ok in enumerate(torch.rand(3) < THRESH):
            if not ok:
                return j
        return 3
    law, runs = law_of(loop)
    assert law == {0: F(1, 2), 1: F(1, 4), 2: F(1, 8), 3: F(1, 8)} and runs == 4

    def per_uniform():
        for j, u in enumerate(torch.rand(3)):
            if u.item() >= 0.5:
                return j
        return 3
    assert law_of(per_uniform) == ({0: F(1, 2), 1: F(1, 4), 2: F(1, 8), 3: F(1, 8)}, 4)


class _Holder:
    def __init__(self):
        self.gen = np.random.default_rng(7)


_HOLDER = _Holder()


def _helper_coin():
    return _OUTSIDE.random()


def test_generators_reached_through_helpers_and_objects_are_watched():
    # draws from generators made before the audit cannot be intercepted: a typed error, never a seed-dependent verdict
    for coin in (_helper_coin, lambda: _HOLDER.gen.random()):
        with pytest.raises(es.UnsupportedRandomness, match="changed while sampler"):
            _audit(_numpy_chain(coin))


def test_numpy_searchsorted_with_several_uniform_keys():
    from exactspec.samplers.randomness.interception import bind, intercepting
    cdf = np.cumsum(np.array([0.25, 0.5, 0.25]))
    original = np.searchsorted

    def law(program):
        def run(rng):
            with bind(rng):
                return program(EnumGenerator(rng))
        with intercepting():
            return enumerate_program(run, FR, exact_floats=True)
    one = {0: F(1, 4), 1: F(1, 2), 2: F(1, 4)}
    # numpy's own search compares the two keys with each other; the audit searches each on its own
    assert law(lambda g: tuple(np.searchsorted(cdf, g.random(2)).tolist())) == {
        (a, b): one[a] * one[b] for a in one for b in one}
    assert law(lambda g: int(np.searchsorted(cdf, g.random(), side="right"))) == one
    assert law(lambda g: tuple(np.searchsorted(cdf, [0.3, 0.8]).tolist())) == {(1, 2): 1}   # plain numbers
    assert np.searchsorted is original


# -- monotone transforms of a uniform compared with numbers ------------------------------------------------------

def _hp(x):
    """An mpmath number at 400 bits (for expected values derived independently)."""
    with mpmath.workprec(400):
        return +x


def test_log_u_below_t_is_u_below_exp_t():
    with mpmath.workprec(400):
        e1 = mpmath.exp(-1)
        law, runs = law_of(lambda: bool(torch.log(torch.rand(1))[0] < -1))
        assert abs(mpmath.mpf(law[True].numerator) / law[True].denominator - e1) < mpmath.mpf(2) ** -300
        assert runs == 2
        law = np_law(lambda g: bool(-np.log(1 - g.random()) > 1))          # an exponential of 1 - u
        assert abs(mpmath.mpf(law[True].numerator) / law[True].denominator - e1) < mpmath.mpf(2) ** -300
    # rational thresholds stay exact: u ** 2 < 1/4 is u < 1/2; log(u) < 0 always
    assert np_law(lambda g: bool(g.random() ** 2 < 0.25)) == {True: F(1, 2), False: F(1, 2)}
    assert np_law(lambda g: bool(np.log(g.random()) < 0)) == {True: 1}
    # reading one entry of a vector comparison of race values forks that entry only
    assert law_of(lambda: bool((torch.log(torch.rand(4)) < 0.0)[2])) == ({True: 1}, 1)


def test_transformed_uniforms_on_a_lattice_are_decided_exactly():
    n = int(mpmath.floor(_hp(mpmath.exp(-1) * 2 ** 24)))                  # lattice points k * 2**-24 < exp(-1)
    law, _ = law_of(lambda: bool(torch.log(torch.rand(1))[0] < -1), "torch-float32")
    assert law[True] == F(n + 1, 2 ** 24)                                   # k = 0 .. n
    # on the lattice ties have a probability: u ** 2 <= 1/4 holds for k <= 2**23
    lat = "torch-float32"
    assert law_of(lambda: bool((torch.rand(1) ** 2 <= 0.25)[0]), lat)[0][True] == F(2 ** 23 + 1, 2 ** 24)
    assert law_of(lambda: bool((torch.rand(1) ** 2 < 0.25)[0]), lat)[0][True] == F(1, 2)
    # -log(1 - u) > 1  <=>  u > 1 - exp(-1): k >= ceil((1 - exp(-1)) * 2**24)
    m = int(mpmath.ceil(_hp((1 - mpmath.exp(-1)) * 2 ** 24)))
    law, _ = law_of(lambda: bool((-torch.log(1 - torch.rand(1)) > 1)[0]), lat)
    assert law[True] == F(2 ** 24 - m, 2 ** 24)


def test_race_values_go_to_comparisons_or_to_one_argmax_not_both():
    def compared_then_argmax():
        g = torch.log(torch.rand(3))
        bool(g[0] < -1)
        return int(g.argmax())

    def argmax_then_compared():
        g = torch.log(torch.rand(3))
        i = int(g.argmax())
        return i, bool(g[0] < -1)
    for program in (compared_then_argmax, argmax_then_compared):
        with pytest.raises(es.UnsupportedRandomness, match="comparison|argmax"):
            law_of(program)


def test_rounded_probabilities_are_recorded_on_the_audit_session():
    from exactspec.samplers.randomness.interception import intercepting

    def run(rng):
        with bind(rng):
            return bool(torch.log(torch.rand(1))[0] < -1)
    with intercepting() as session:
        enumerate_program(run, FR, exact_floats=True)
    assert list(session.approximations) == ["a comparison of a transformed uniform with a number (threshold exp(...))"]
    def exact(rng):
        with bind(rng):
            return bool(torch.rand(1)[0] < 0.5)
    with intercepting() as session:
        enumerate_program(exact, FR)
    assert session.approximations == {}


def test_argmax_and_argmin_over_plain_uniforms():
    third = {0: F(1, 3), 1: F(1, 3), 2: F(1, 3)}
    assert np_law(lambda g: int(np.argmax(g.random(3)))) == third
    assert np_law(lambda g: int(np.argmin(g.random(3)))) == third
    assert law_of(lambda: int(torch.rand(3).argmin()))[0] == third
    assert np_law(lambda g: (lambda u: bool(u[0] < u[1]))(g.random(2))) == {True: F(1, 2), False: F(1, 2)}
    # a uniform that was compared with a number is no longer a fresh draw for a scan, nor the reverse
    with pytest.raises(es.UnsupportedRandomness):
        np_law(lambda g: (lambda u: (bool(u[0] < 0.5), bool(u[0] < u[1])))(g.random(2)))
    with pytest.raises(es.UnsupportedRandomness):
        np_law(lambda g: (lambda u: (bool(u[0] < u[1]), bool(u[0] < 0.5)))(g.random(2)))


def test_max_with_dim_returns_the_race_draw_as_its_indices():
    law, _ = law_of(lambda: int((P / torch.empty_like(P).exponential_()).max(dim=-1).indices))
    assert law == P_LAW
    law, _ = law_of(lambda: int(torch.max(torch.log(P) - torch.log(-torch.log(torch.rand(3))), -1, keepdim=True)[1]
                                [0]))
    assert set(law) == {0, 1, 2}
    # the winning value itself is the race's: reading it is refused, not guessed
    with pytest.raises(es.UnsupportedRandomness):
        law_of(lambda: bool((P / torch.empty_like(P).exponential_()).max(dim=-1).values > 1.0))
