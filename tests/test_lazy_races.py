"""Race argmaxes are lazy per entry: a vectorised race forks only on the entries the code reads.

``(w / q.exponential_()).argmax(-1)`` over a batch of rows (vLLM's recovered token at every
draft position, of which the code reads one) is a tensor of pending categorical draws, one per
row, each drawn from its row's exact law ``w / sum(w)`` when read. Expected laws are derived by
hand from the (dyadic, exactly representable) weights, or from the eager path (every race drawn at
the argmax, ``torch_rng._LAZY_RACES = False``), which earlier tests check against hand-derived laws.
"""

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo import batched_samplers as bz  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402
from exactspec.samplers.torch_draws.lazy_draws import LazyCategoricalTensor  # noqa: E402
from exactspec.samplers.adapters.torch_adapters import VllmChainAdapter, reference_vllm_style  # noqa: E402
from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch  # noqa: E402

FR = get_field(backend="python")
W = torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.5, 0.5], [0.125, 0.375, 0.5]], dtype=torch.float64)
# each row's race law w / sum(w), by hand (every row sums to 1)
ROW = [{0: F(1, 2), 1: F(1, 4), 2: F(1, 4)}, {1: F(1, 2), 2: F(1, 2)}, {0: F(1, 8), 1: F(3, 8), 2: F(1, 2)}]


def law_of(program):
    """(law, number of runs = branches) of a torch program under the enumerating interception."""
    runs = [0]

    def run(rng):
        runs[0] += 1
        with bind(rng):
            return program()
    with intercept_torch():
        law = enumerate_program(run, FR, exact_floats=True)
    return law, runs[0]


def product(*laws):
    out = {(): F(1)}
    for law in laws:
        out = {k + (t,): p * q for k, p in out.items() for t, q in law.items()}
    return out


def races():
    return (W / torch.empty_like(W).exponential_()).argmax(dim=-1)


def log_races():
    return (torch.log(torch.rand(3, 3, dtype=torch.float64)) / W).argmax(dim=-1)     # argmax(log(u) / w)


@pytest.mark.parametrize("make", [races, log_races], ids=["p / exponential_()", "log(u) / p"])
@pytest.mark.parametrize("row", [0, 1, 2])
def test_reading_one_entry_forks_on_that_entry_only(make, row):
    law, branches = law_of(lambda: int(make()[row]))
    assert law == ROW[row]
    assert branches == len(ROW[row])          # the entry's support, not 3 * 2 * 3 = 18


def test_a_gumbel_race_over_float_logits_reads_its_row_with_the_eager_law(monkeypatch):
    """log(W) is irrational: the law is rounded (RACE_PRECISION bits) as the eager argmax rounds it."""
    def program():
        g = -torch.log(-torch.log(torch.rand(3, 3, dtype=torch.float64)))
        return int((torch.log(W) + g).argmax(dim=-1)[2])
    lazy, branches = law_of(program)
    monkeypatch.setattr(torch_rng, "_LAZY_RACES", False)
    eager, eager_branches = law_of(program)
    assert lazy == eager and sum(lazy.values()) == 1
    assert branches == 3 and eager_branches == 18


def test_reading_every_entry_gives_the_product_law():
    law, branches = law_of(lambda: tuple(races().tolist()))
    assert law == product(*ROW) and branches == 18


def test_read_order_does_not_change_the_law():
    def forward():
        r = races()
        return int(r[0]), int(r[2])

    def backward():
        r = races()
        last = int(r[2])
        return int(r[0]), last
    expected = product(ROW[0], ROW[2])
    assert law_of(forward) == (expected, 9)
    assert law_of(backward) == (expected, 9)


def test_keepdim_and_whole_tensor_argmax_stay_pending():
    t = [None]

    def keep():
        t[0] = (W / torch.empty_like(W).exponential_()).argmax(dim=-1, keepdim=True)
        return int(t[0][1, 0])
    assert law_of(keep) == (ROW[1], 2)
    assert isinstance(t[0], LazyCategoricalTensor) and tuple(t[0].shape) == (3, 1)
    # argmax over the whole tensor: one race over 9 entries, a draw from W / sum(W) = W / 3
    flat, branches = law_of(lambda: int((W / torch.empty_like(W).exponential_()).argmax()))
    assert flat == {i: F(w) / 3 for i, w in enumerate(W.reshape(-1).tolist()) if w} and branches == 8


def test_picking_entries_keeps_the_others_pending():
    """cat with real tensors, gather / index_select with real indices, where with a real condition: only the
    entries picked and then read fork (vLLM's assembly of the output from the recovered tokens)."""
    def gathered():
        rec = torch.cat([races(), torch.zeros(1, dtype=torch.long)]).gather(0, torch.tensor([2]))
        return int(rec[0])
    assert law_of(gathered) == (ROW[2], 3)
    # a padding entry picked: nothing forks
    assert law_of(lambda: int(torch.cat([races(), torch.full((1,), 7)]).index_select(0, torch.tensor([3]))[0])) \
        == ({7: F(1)}, 1)

    def where():
        out = torch.where(torch.tensor([False, True, False]), races(), -1)
        return tuple(out.tolist())
    assert law_of(where) == ({(-1, t, -1): p for t, p in ROW[1].items()}, 2)
    stacked, branches = law_of(lambda: tuple(torch.stack([races(), races()])[:, 1].tolist()))
    assert stacked == product(ROW[1], ROW[1]) and branches == 4

    def moved():                       # three views of the same two draws: entry 1, entry 2, entry 1 again
        r = races()
        return int(torch.roll(r, -1)[0]), int(r.flip(0)[0]), int(r.repeat(2)[4])
    assert law_of(moved) == ({(a, b, a): p for (a, b), p in product(ROW[1], ROW[2]).items()}, 6)
    # the same entry picked twice is one draw, read once
    both, branches = law_of(lambda: tuple(races().gather(0, torch.tensor([1, 1])).tolist()))
    assert both == {(t, t): p for t, p in ROW[1].items()} and branches == 2


def test_where_on_a_lazy_mask_reads_the_mask_and_only_the_races_it_picks():
    def program():
        rec = races()
        accepted = torch.rand(3) < 0.5                # where reads the whole mask: 8 patterns
        return int(torch.where(accepted, torch.tensor([7, 7, 7]), rec)[1])
    # entry 1 is 7 when accepted (1/2), else row 1's race; it forks only on the 4 patterns that pick it
    assert law_of(program) == ({7: F(1, 2), 1: F(1, 4), 2: F(1, 4)}, 4 * 1 + 4 * 2)


def test_checks_stay_at_the_argmax():
    """A race the audit cannot follow is refused when it is taken, read or not."""
    def unread_broadcast():
        (W[0] / torch.empty(1).exponential_().expand(3)).argmax()
        return 0
    with pytest.raises(es.UnsupportedRandomness, match="uses one draw twice"):
        law_of(unread_broadcast)


def _sampler_audit(sampler, k, adapter="vllm", tokens=None):
    target = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
    draft = es.models.context_free((F(1, 8), F(1, 8), F(3, 4)))     # residual (3/8, 1/8, 0): a race of two
    return es.audit_sampler(sampler, adapter=adapter, target=target, draft=draft, proposer=es.drafts.chain(k),
                            tokens=tokens or k + 1)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("sampler", [bz.correct, reference_vllm_style], ids=["vectorised", "reference"])
def test_vllm_style_samplers_stay_lossless_with_the_eager_law(sampler, k, monkeypatch):
    runs = {}

    def audit(mode):
        count = [0]

        def counted(*args):
            count[0] += 1                        # one run of the sampler per branch of the enumeration
            return sampler(*args)
        report = _sampler_audit(counted, k)
        runs[mode] = count[0]
        return report
    lazy = audit("lazy")
    monkeypatch.setattr(torch_rng, "_LAZY_RACES", False)
    eager = audit("eager")
    assert lazy.verdict == eager.verdict == "lossless"
    assert lazy.output == eager.output
    # bz.correct races at all k positions and reads one: eager forks on every race; the reference races at the one
    # position it emits and only copies the winner into its output: lazy, one run stands for every winner (the
    # output's last token handed to the engine undrawn, issue 17), eager forks at the argmax
    assert runs["lazy"] < runs["eager"]


def wrong_row_recovered(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """Vectorised, but the token after the first rejection is the *next row's* recovered token."""
    accepted, recovered = bz._decide(target_probs, draft_probs, draft_token_ids)
    k = accepted.shape[1]
    rejected = ~accepted
    n = torch.where(rejected.any(1), rejected.int().argmax(1), torch.full_like(rejected[:, 0], k, dtype=torch.long))
    return bz._assemble(accepted, torch.roll(recovered, shifts=-1, dims=0), draft_token_ids, bonus_token_ids, n,
                        n == k)


def test_reading_the_wrong_rows_recovered_token_is_caught():
    two = VllmChainAdapter(batch=2)
    assert _sampler_audit(bz.correct, 1, adapter=two, tokens=1).verdict == "lossless"
    wrong = _sampler_audit(wrong_row_recovered, 1, adapter=two, tokens=1)
    assert wrong.verdict == "biased" and F(wrong.extra["algorithmic_tv"]) > F(1, 100)
