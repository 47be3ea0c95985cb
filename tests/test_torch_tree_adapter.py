"""The torch tree adapter and the tree buffers it builds (EAGLE / Medusa layout), without the published packages."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate import PathRng  # noqa: E402
from exactspec.enumerate.env import Env  # noqa: E402
from exactspec.errors import ExactSpecError  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.laws import normalize, residual, total_variation  # noqa: E402
from exactspec.samplers.adapters.torch_tree_adapter import (TorchTreeAdapter, reference_torch_tree, torch_tree,  # noqa: E402
                                                   torch_tree_inputs)
from exactspec.samplers.adapters.tree_buffers import choices_of, tree_buffers  # noqa: E402
from exactspec.trees import TokenTree  # noqa: E402

P3 = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
Q3 = es.models.context_free((F(1, 8), F(1, 2), F(3, 8)))


# -- tree_buffers ---------------------------------------------------------------------------------------------
def test_buffers_of_an_expansion_by_hand():
    b = tree_buffers((2, 1))
    # linear order: root, [0], [1], [0, 0], [1, 0]
    assert b.choices == ((0,), (1,), (0, 0), (1, 0))
    assert b.parents.tolist() == [-1, 0, 0, 1, 2]
    assert b.position_ids.tolist() == [0, 1, 1, 2, 2]
    assert b.retrieve_indices.tolist() == [[0, 1, 3], [0, 2, 4]]
    # flat candidates [root, depth-1 slot 0, slot 1, depth-2 slot 0]: both grandchildren are slot 0 of depth 2
    assert b.tree_indices.tolist() == [0, 1, 2, 3, 3]
    assert b.attn_mask.shape == (1, 1, 5, 5)
    assert b.attn_mask[0, 0].int().tolist() == [[1, 0, 0, 0, 0],
                                                 [1, 1, 0, 0, 0],
                                                 [1, 0, 1, 0, 0],
                                                 [1, 1, 0, 1, 0],
                                                 [1, 0, 1, 0, 1]]
    assert (b.num_nodes, b.depth, b.num_paths) == (5, 2, 2)


def test_buffers_of_a_ragged_choices_list_pad_short_paths():
    b = tree_buffers([[1], [0], [0, 0], [0, 0, 1], [0, 0, 0]])    # any order in, sorted out
    assert b.choices == ((0,), (1,), (0, 0), (0, 0, 0), (0, 0, 1))
    assert b.retrieve_indices.tolist() == [[0, 1, 3, 4], [0, 1, 3, 5], [0, 2, -1, -1]]
    assert b.position_ids.tolist() == [0, 1, 1, 2, 3, 3]
    assert b.children(0) == [1, 2] and b.children(3) == [4, 5] and b.children(2) == []
    # with 10 slots per depth (EAGLE's and later Medusa's TOPK): 1 + 10 * (depth - 1) + last index
    assert tree_buffers([[0], [1], [0, 0], [0, 0, 1], [0, 0, 0]], topk=10).tree_indices.tolist() == \
        [0, 1, 2, 11, 21, 22]


def test_the_mask_is_the_token_tree_mask_in_another_order():
    # a second construction: exactspec.trees.TokenTree's mask is in depth-first order; permute it
    choices = [[0], [1], [2], [0, 0], [0, 1], [2, 0], [0, 1, 0]]
    b = tree_buffers(choices)
    linear = [()] + list(b.choices)
    dfs = sorted(linear)                                    # depth-first order of the paths
    parents = [-1] + [dfs.index(c[:-1]) for c in dfs[1:]]
    tree = TokenTree.from_parents(list(range(len(dfs))), parents)
    mask = tree.attention_mask().astype(int)
    perm = [dfs.index(c) for c in linear]
    assert b.attn_mask[0, 0].int().tolist() == mask[perm][:, perm].tolist()
    assert b.position_ids.tolist() == [len(c) for c in linear]


@pytest.mark.parametrize("shape, message", [
    ([[0, 1]], "no parent [0]"),
    ([[0], [0]], "twice"),
    ([], "expansion like"),
    ([[0], []], "is empty"),
    ([[0], [-1]], "holds -1"),
    ((2, 0), "0 children"),
    ("ab", "expansion like"),
    ([[0], [1.5]], "holds 1.5"),
])
def test_bad_tree_shapes_name_what_is_wrong(shape, message):
    with pytest.raises(ExactSpecError, match=__import__("re").escape(message)):
        tree_buffers(shape)


def test_topk_must_hold_every_choice():
    with pytest.raises(ExactSpecError, match="past topk=2"):
        tree_buffers([[0], [2]], topk=2)
    with pytest.raises(ExactSpecError, match="topk must be an int"):
        tree_buffers([[0]], topk=0)


def test_choices_of_parents():
    assert choices_of([-1, 0, 1, 0, 3, 3]) == [(0,), (0, 0), (1,), (1, 0), (1, 1)]
    with pytest.raises(ExactSpecError, match="parents come before"):
        choices_of([-1, 2, 0])


# -- the tensors handed to a sampler ----------------------------------------------------------------------------
def _first_branch_step():
    fld = get_field(backend="python")
    proposer = es.drafts.tree((2, 1), children="without_replacement", claim="renormalized")
    return proposer.step(Env(P3, Q3, fld), (2,), PathRng((), 1, fld, [], {}))


def test_inputs_follow_the_eagle_layout():
    step = _first_branch_step()
    t = torch_tree_inputs(step)
    kids = list(step.children(0))
    a, b = (step.token(c) for c in kids)
    ga, gb = (step.token(step.children(c)[0]) for c in kids)
    assert t.tree_candidates.tolist() == [[2, a, b, ga, gb]]
    assert t.candidates.tolist() == [[2, a, ga], [2, b, gb]]
    q = [F(1, 8), F(1, 2), F(3, 8)]
    # the second child was drawn without the first: its claimed probability is q(b) / (1 - q(a))
    assert t.draft_probs.tolist() == [[1.0, float(F(q[a])), float(F(q[ga]))],
                                      [1.0, float(torch.tensor(float(q[b] / (1 - q[a])))), float(F(q[gb]))]]
    assert [d.tolist() for d in t.draft_laws] == [[[float(x) for x in q]], [[float(x) for x in q]] * 2]
    assert t.p_indices == [[-1, 0, 0], [-1, 0, 1]]
    assert t.b_indices[0] == [[], [], []]
    assert t.b_indices[1][1].tolist() == [1] and t.b_indices[1][2] == []
    logp = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    assert t.logits.shape == (2, 3, 3) and all(torch.equal(row, logp) for row in t.logits.reshape(-1, 3))
    assert t.logits.dtype == torch.float32
    assert torch.equal(t.claimed[0], torch.zeros(3))


def _ragged():
    # root -> 0 -> 1, and root -> 1: paths of depth 2 and 1 (point-mass claims: the tree is given, not drawn)
    tree = TokenTree.from_chains(0, [[0, 1], [1]])
    mass = {0: (1, 0, 0), 1: (0, 1, 0)}
    return es.drafts.fixed(tree, {n: mass[tree.tokens[n]] for n in range(1, len(tree))})


def test_short_paths_are_padded_as_eagle_pads_them():
    fld = get_field(backend="python")
    p1 = es.models.table(vocab=3, order=1, table={(0,): (F(1, 2), F(1, 4), F(1, 4)), (1,): (F(1, 8), F(3, 8), F(1, 2)),
                                                  (2,): (F(1, 3), F(1, 3), F(1, 3))})
    step = _ragged().step(Env(p1, p1, fld), (2,), PathRng((), 1, fld, [], {}))
    t = torch_tree_inputs(step)
    assert t.buffers.choices == ((0,), (1,), (0, 0))
    assert t.tree_candidates.tolist() == [[2, 0, 1, 1]]
    assert t.candidates.tolist() == [[2, 0, 1], [2, 1, -1]]
    # a -1 index picks the last node, as tree_logits[0, retrieve_indices] does in EAGLE's tree_decoding
    assert torch.equal(t.logits[1, 2], t.tree_logits[0, 3])
    assert torch.equal(t.logits[0, 0], torch.log(torch.tensor([1 / 3, 1 / 3, 1 / 3])))   # after context (2,)
    assert torch.equal(t.logits[0, 1], torch.log(torch.tensor([0.5, 0.25, 0.25])))       # after token 0
    assert t.draft_probs.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert t.p_indices == [[-1, 0, 0], [-1, 0, -1]]
    assert t.b_indices[1][1].tolist() == [1] and t.b_indices[1][2] == []


def test_the_reference_is_exact_on_a_ragged_tree():
    kw = dict(target=P3, draft=P3, proposer=_ragged(), tokens=3, prompt=(2,))
    r = es.audit_sampler(reference_torch_tree, adapter=TorchTreeAdapter(torch.float64), reference=False, **kw)
    assert r.verdict == "lossless" and r.tv < F(1, 2 ** 45)


# -- audits through the adapter -------------------------------------------------------------------------------------
def test_get_adapter_finds_the_torch_tree_adapter():
    assert es.samplers.get_adapter("torch-tree") is torch_tree
    assert torch_tree.family == "tree" and torch_tree.reference_rule.name == "mss"
    with pytest.raises(ExactSpecError, match="torch floating dtype"):
        TorchTreeAdapter(dtype=torch.int64)


@pytest.mark.parametrize("children, claim", [("without_replacement", "renormalized"), ("topk", "point_mass"),
                                             ("iid", "draft")])
def test_the_reference_is_the_mss_law_up_to_float64_rounding(children, claim):
    prop = es.drafts.tree((2, 1), children=children, claim=claim)
    kw = dict(target=P3, draft=Q3, proposer=prop, tokens=3, prompt=(0,))
    # float64 arithmetic with ideal uniforms (its torch.rand(1) is float32: on torch's own grid the law moves by
    # up to 2**-24 a comparison, which the float64 run of the default audit separates)
    r = es.audit_sampler(reference_torch_tree, adapter=TorchTreeAdapter(torch.float64), reference=False,
                         rng_model="continuous", **kw)
    exact = es.audit(rule="mss", **kw)
    assert exact.tv == 0
    assert r.output.keys() == exact.output.keys()
    assert total_variation(r.output, exact.output) < F(1, 2 ** 45)
    assert r.verdict == "lossless"
    native = es.audit_sampler(reference_torch_tree, adapter=TorchTreeAdapter(torch.float64), reference=False, **kw)
    assert native.verdict == "lossless" and F(native.extra["float_boundary"]["f64_tv"]) < F(1, 2 ** 45)


def test_the_default_float32_pipeline_is_within_float32_rounding():
    prop = es.drafts.tree((2,), children="without_replacement", claim="renormalized")
    r = es.audit_sampler(reference_torch_tree, adapter="torch-tree", target=P3, draft=Q3, proposer=prop, tokens=2)
    assert 0 < r.tv < F(1, 2 ** 20)
    assert r.extra["adapter"] == "torch-tree" and r.extra["reference_tv"] == "0"


def _residual_forgotten(candidates, logits, tree):
    """A wrong tree verifier: after a rejected child it tries the next one against p, not the residual."""
    node, out = 0, []
    while True:
        p = tree.target[node]
        for c in tree.buffers.children(node):
            x, q = int(tree.tree_candidates[0, c]), tree.claimed[c]
            if torch.rand(1)[0] < p[x] / q[x]:
                out.append(x)
                node = c
                break
        else:
            out.append(int(torch.multinomial(p, 1)[0]))
            return torch.tensor(out)       # a tensor is fine too


def _residual_forgotten_exact(step, rng):
    node = step.root
    while True:
        p = step.target(node)
        for child, q in step.proposals(node):
            x = step.token(child)
            if rng.bernoulli(min(1, p[x] / q[x])):
                yield step.accept(child)
                node = child
                break
        else:
            yield rng.categorical(p)
            return


def test_a_biased_tree_verifier_is_caught_with_its_exact_law():
    prop = es.drafts.tree((2,), children="without_replacement", claim="renormalized")
    kw = dict(target=P3, draft=Q3, proposer=prop, tokens=2)
    r = es.audit_sampler(_residual_forgotten, adapter=TorchTreeAdapter(torch.float64), **kw)
    exact = es.audit(rule=es.Rule(_residual_forgotten_exact, name="forgot", family="tree", claim="biased",
                                  marks_accepted=True), **kw)
    assert r.verdict == "biased"
    assert exact.tv > F(1, 100)
    # float64 arithmetic with ideal uniforms is the exact law up to float64 rounding (its torch.rand(1) is float32:
    # on torch's own grid, the default, each comparison moves by up to 2**-24)
    ideal = es.audit_sampler(_residual_forgotten, adapter=TorchTreeAdapter(torch.float64), rng_model="continuous",
                             **kw)
    assert total_variation(ideal.output, exact.output) < F(1, 2 ** 45)
    assert total_variation(r.output, exact.output) < F(1, 2 ** 23)
    # by hand, first token: root children drawn without replacement from q = (1/8, 1/2, 3/8), p = (1/2, 1/4, 1/4);
    # a child x is accepted w.p. min(1, p(x) / q'(x)) with q' its claimed (renormalised) law
    q = (F(1, 8), F(1, 2), F(3, 8))
    p = (F(1, 2), F(1, 4), F(1, 4))
    first: dict[int, F] = {}
    for a in range(3):
        qa = q[a]
        acc_a = min(F(1), p[a] / qa)
        first[a] = first.get(a, 0) + qa * acc_a
        rest = normalize([0 if i == a else q[i] for i in range(3)])
        for b in range(3):
            if rest[b] == 0:
                continue
            acc_b = min(F(1), p[b] / rest[b])
            w = qa * (1 - acc_a) * rest[b]
            first[b] = first.get(b, 0) + w * acc_b
            for y in range(3):
                first[y] = first.get(y, 0) + w * (1 - acc_b) * p[y]
    law1: dict[int, F] = {}
    for out, w in exact.output.items():
        law1[out[0]] = law1.get(out[0], 0) + w
    assert law1 == first
    assert residual(p, q) != p    # the residual the verifier forgot is not p itself


def test_the_reference_does_not_divide_by_a_rounded_away_residual():
    # after context 0 the first child (token 1, p = 0) is rejected; the residual (1/3, 0, 2/3) equals the second
    # child's claimed law exactly, so it is accepted w.p. 1, but in float32 r(x) / q(x) can round below 1: the
    # rejection branch then left an all-zero residual and the reference raised (0/0 in multinomial)
    p = es.models.table(vocab=3, order=1, table={(0,): (F(1, 3), F(0), F(2, 3)), (1,): (F(0), F(1), F(0)),
                                                 (2,): (F(4, 7), F(2, 7), F(1, 7))})
    q = es.models.table(vocab=3, order=1, table={(0,): (F(1, 5), F(2, 5), F(2, 5)), (1,): (F(1), F(0), F(0)),
                                                 (2,): (F(0), F(1, 4), F(3, 4))})
    prop = es.drafts.tree((2,), children="without_replacement", claim="renormalized")
    r = es.audit_sampler(reference_torch_tree, adapter="torch-tree", target=p, draft=q, proposer=prop, tokens=2,
                         prompt=(0,), reference=False)
    assert r.tv < F(1, 2 ** 20)


def test_cli_audits_a_torch_tree_verifier_by_adapter_name(capsys):
    from exactspec import cli
    code = cli.main(["audit-sampler", "exactspec.samplers.adapters.torch_tree_adapter:reference_torch_tree",
                     "--adapter", "torch-tree", "--instance", "--vocab", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "LOSSLESS UP TO ROUNDING" in out and "float32 rounding" in out
