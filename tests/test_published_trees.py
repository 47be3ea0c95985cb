"""Published tree verifiers audited through the torch tree adapter: eagle-llm 1.2.1 and medusa-llm 0.1.

Install with ``pip install --no-deps eagle-llm==1.2.1 medusa-llm==0.1`` (their declared dependencies
pin old gradio / protobuf / accelerate; the verification functions need only torch and
transformers). With ``EXACTSPEC_REQUIRE_PUBLISHED`` set, a missing package fails this module
instead of skipping it. Neither module needs a shim: ``eagle/model/utils.py`` imports
transformers' logits warpers, which transformers 5 still has.

Verdicts recorded here (vocab 3-4, trees of depth 1-2 with 2-3 paths, order-1 seeded tables):

- eagle-llm 1.2.1 ``eagle/model/utils.py`` ``evaluate_posterior``: at temperature 1 lossless up to
  rounding (TV ~1e-17 with float64 laws, ~1e-8 with float32: float rounding); at temperature
  below 1 **biased, algorithmic**: after a path is accepted to its leaf the next token is drawn
  from ``softmax(logits)`` without the logits processor (temperature 1), not from the tempered
  law (TV 0.097 at temperature 1/2 on the instance below; the law equals that model's exact law
  to 1e-16). For the same reason ``top_p`` / ``top_k`` are ignored for that token: with top_p 0.6
  a token outside the top-p set is emitted with probability 7/40 on a vocab-3 instance.
- eagle-llm 1.2.1 ``eagle/modelbsne1/utils.py`` (the batched variant) ``evaluate_posterior``:
  **biased, algorithmic, at every temperature**: ``accept_length != candidates.shape[1]`` compares
  with the number of paths (``candidates`` is ``[batch, paths, depth + 1]``), so the residual is
  dropped or used at the wrong node whenever that count coincides (TV 0.229 at temperature 1 on
  expansion (3,)).
- medusa-llm 0.1 ``medusa/model/utils.py`` ``evaluate_posterior``: typical acceptance is lossy by
  design (claim ``biased``); its law equals the exact law of
  ``es.rules.typical_acceptance_medusa`` exactly (==, as Fractions) at temperature 1 and 1/2, and
  differs from the catalog's ``typical_acceptance`` (see :mod:`exactspec.rules.medusa`).
"""

from __future__ import annotations

import os
from fractions import Fraction as F
from importlib.metadata import version

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
    import eagle.model.utils as eagle_utils
    import eagle.modelbsne1.utils as eagle_bs_utils
    import medusa.model.utils as medusa_utils
    from eagle.model.choices import mc_sim_7b_63
else:
    eagle_utils = pytest.importorskip("eagle.model.utils", reason="pip install --no-deps eagle-llm==1.2.1")
    eagle_bs_utils = pytest.importorskip("eagle.modelbsne1.utils", reason="pip install --no-deps eagle-llm==1.2.1")
    medusa_utils = pytest.importorskip("medusa.model.utils", reason="pip install --no-deps medusa-llm==0.1")
    from eagle.model.choices import mc_sim_7b_63

import exactspec as es  # noqa: E402
from exactspec.laws import normalize, residual, total_variation  # noqa: E402
from exactspec.samplers.adapters.torch_tree_adapter import TorchTreeAdapter  # noqa: E402
from exactspec.samplers.adapters.tree_buffers import tree_buffers  # noqa: E402

#: the versions whose verdicts this module records
VERSIONS = {"eagle-llm": "1.2.1", "medusa-llm": "0.1"}

P = es.models.random_table(vocab=3, order=1, seed=1)
Q = es.models.random_table(vocab=3, order=1, seed=11)
WITHOUT = "without_replacement"


def test_the_recorded_versions_are_installed():
    assert {name: version(name) for name in VERSIONS} == VERSIONS


# -- buffers: ours against the published builders --------------------------------------------------------------------
@pytest.mark.parametrize("expansion", [(2,), (2, 1), (3, 2), (1, 3, 2)])
def test_buffers_equal_medusa_0_1_buffers(expansion):
    theirs = medusa_utils.generate_medusa_buffers([1, *expansion], device="cpu")
    ours = tree_buffers(expansion)
    assert torch.equal(theirs["medusa_attn_mask"], ours.attn_mask)
    assert theirs["tree_indices"].tolist() == ours.tree_indices.tolist()
    assert theirs["medusa_position_ids"].tolist() == ours.position_ids.tolist()
    assert torch.equal(theirs["retrieve_indices"], ours.retrieve_indices)


@pytest.mark.parametrize("choices", [mc_sim_7b_63, [[0], [1], [0, 0]],
                                     [[0], [1], [2], [0, 0], [1, 0], [1, 1], [0, 0, 0]]])
def test_buffers_equal_eagle_buffers(choices):
    theirs = eagle_utils.generate_tree_buffers(choices, device="cpu")
    ours = tree_buffers(choices)
    assert torch.equal(theirs["tree_attn_mask"], ours.attn_mask)
    assert theirs["tree_position_ids"].tolist() == ours.position_ids.tolist()
    assert torch.equal(theirs["retrieve_indices"], ours.retrieve_indices)


# -- Medusa ----------------------------------------------------------------------------------------------------------
def medusa_verifier(temperature: float, eps: float = 0.09, alpha: float = 0.3):
    """medusa-llm's evaluate_posterior, then the next step's root token: argmax of the logits after the prefix."""
    def medusa(candidates, logits, tree):
        best, n = medusa_utils.evaluate_posterior(logits, candidates, temperature, eps, alpha)
        return [*candidates[best, 1:n + 1].tolist(), int(logits[best, n].argmax())]
    return medusa


def test_medusa_on_a_hand_worked_instance():
    # q's top-2 are tokens 1 and 0; both pass (p > 0.09); equal accepted length 1, likelihood p(0) = 1/2 wins;
    # then argmax p = 0. No random draw anywhere: one outcome.
    p = es.models.context_free((F(1, 2), F(1, 3), F(1, 6)))
    q = es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
    r = es.audit_sampler(medusa_verifier(1.0), adapter="torch-tree", target=p, draft=q, tokens=2,
                         proposer=es.drafts.tree((2,), children="topk", claim="point_mass"))
    assert r.output == {(0, 0): F(1)}
    assert r.verdict == "biased" and r.tv == F(3, 4)


@pytest.mark.parametrize("temperature, power", [(1.0, 1), (0.5, 2)])
@pytest.mark.parametrize("expansion, children, vocab", [((2,), WITHOUT, 3), ((2, 1), WITHOUT, 3), ((2, 1), "topk", 4),
                                                        ((3,), WITHOUT, 4)])
def test_medusa_is_the_published_variant_rule_exactly(temperature, power, expansion, children, vocab):
    p = es.models.random_table(vocab=vocab, order=1, seed=2)
    q = es.models.random_table(vocab=vocab, order=1, seed=12)
    prop = es.drafts.tree(expansion, children=children, claim="point_mass" if children == "topk" else "renormalized")
    kw = dict(draft=q, proposer=prop, tokens=len(expansion) + 1, prompt=(0,))
    target = es.models.sharpen(p, power) if power > 1 else p
    r = es.audit_sampler(medusa_verifier(temperature), adapter="torch-tree", target=p, reference=False,
                         expected=target, **kw)
    exact = es.audit(rule=es.rules.get("typical_acceptance_medusa(9/100, 3/10)"), target=target, **kw)
    catalog = es.audit(rule=es.rules.typical_acceptance(F(9, 100), F(3, 10)), target=target, **kw)
    assert r.output == exact.output          # exact equality: the code's decisions are the rule's
    assert r.verdict == "biased" and r.tv == exact.tv > 0
    assert catalog.output != exact.output


def test_medusa_entropy_has_the_published_shift():
    # p = (1/2, 1/2), alpha just below 1: alpha * exp(-H) = 0.4999975 < 1/2 < alpha * prod (p_i + 1e-5) ** p_i
    # = 0.5000075. The catalog rule accepts the drafted token, medusa-llm (and the variant) rejects it.
    p = es.models.context_free((F(1, 2), F(1, 2)))
    q = es.models.context_free((F(0), F(1)))
    alpha = F(199999, 200000)
    kw = dict(target=p, draft=q, tokens=1, proposer=es.drafts.tree((1,), children="topk", claim="point_mass"))
    r = es.audit_sampler(medusa_verifier(1.0, eps=1.0, alpha=float(alpha)), adapter="torch-tree", reference=False, **kw)
    variant = es.audit(rule=es.rules.typical_acceptance_medusa(1, alpha), **kw)
    catalog = es.audit(rule=es.rules.typical_acceptance(1, alpha), **kw)
    assert r.output == variant.output == {(0,): F(1)}      # rejected: argmax p = 0 (ties to the lowest id)
    assert catalog.output == {(1,): F(1)}                  # accepted the drafted 1


def test_medusa_takes_the_longest_path_the_catalog_the_first_passing_child():
    # after 0 the target is uniform-ish, after 1 it is peaked: the first child 0 passes but its child does not;
    # the second child 1 passes and so does its child 1: medusa-llm emits (1, 1, argmax), the catalog (0, ...)
    p = es.models.table(vocab=3, order=1, table={(0,): (F(1, 2), F(1, 2), F(0)), (1,): (F(1, 20), F(9, 10), F(1, 20)),
                                                 (2,): (F(1, 2), F(1, 4), F(1, 4))})
    q = es.models.table(vocab=3, order=1, table={(0,): (F(1, 10), F(1, 10), F(4, 5)),
                                                 (1,): (F(1, 10), F(4, 5), F(1, 10)),
                                                 (2,): (F(1, 2), F(1, 3), F(1, 6))})
    kw = dict(target=p, draft=q, tokens=3, prompt=(2,), proposer=es.drafts.tree((2, 1), children="topk",
                                                                                claim="point_mass"))
    r = es.audit_sampler(medusa_verifier(1.0), adapter="torch-tree", reference=False, **kw)
    variant = es.audit(rule=es.rules.typical_acceptance_medusa(), **kw)
    catalog = es.audit(rule=es.rules.typical_acceptance(), **kw)
    # root (2,): top-2 of q(.|2) are 0, 1 (p(.|2) = 1/2, 1/4: both pass); under 0 the top-1 of q(.|0) is 2 with
    # p(2|0) = 0: fails; under 1 it is 1 with p(1|1) = 9/10: passes. Longest path: 1, 1, then argmax p(.|1) = 1.
    assert r.output == variant.output == {(1, 1, 1): F(1)}
    assert set(catalog.output) != {(1, 1, 1)}


# -- EAGLE -----------------------------------------------------------------------------------------------------------
def eagle_verifier(temperature: float, utils=None):
    """eagle-llm's evaluate_posterior (sampling branch), then the next token drawn from the law it returns."""
    utils = utils or eagle_utils
    processor = utils.prepare_logits_processor(temperature=temperature)

    def eagle(candidates, logits, tree):
        best, n, sample_p = utils.evaluate_posterior(logits, candidates, processor, tree.draft_probs, tree.draft_laws,
                                                     tree.p_indices, tree.tree_candidates, tree.b_indices)
        return [*candidates[best, 1:n + 1].tolist(), int(torch.multinomial(sample_p, 1))]
    return eagle


def eagle_batched_verifier(temperature: float):
    """The batched variant (eagle/modelbsne1/utils.py) called with one row."""
    processor = eagle_bs_utils.prepare_logits_processor(temperature=temperature)

    def eagle_bs(candidates, logits, tree):
        best, n, sample_p = eagle_bs_utils.evaluate_posterior(
            logits[None], candidates[None], processor, tree.draft_probs[None], [[op] for op in tree.draft_laws],
            tree.p_indices, tree.tree_candidates, tree.b_indices, [False])
        return [*candidates[best[0], 1:n[0] + 1].tolist(), int(torch.multinomial(sample_p[0], 1))]
    return eagle_bs


def _eagle_model(power: int, bonus_power: int, paths_bug: bool = False) -> es.Rule:
    """MSS at temperature 1/power, the token after an accepted leaf at temperature 1/bonus_power; with
    ``paths_bug``, the residual is used only if 1 + accepted != number of paths (else p at the current node)."""
    def sharp(law, k):
        return normalize([x ** k for x in law])

    def fn(step, rng):
        leaves = []

        def visit(n):
            kids = list(step.children(n))
            leaves.extend([] if kids else [n])
            for c in kids:
                visit(c)
        visit(step.root)
        node, accepted, adjusted = step.root, 0, False
        while True:
            r, adjusted = sharp(step.target(node), power), False
            proposals = list(step.proposals(node))
            if not proposals:
                break
            for child, q in proposals:
                x = step.token(child)
                if q[x] > 0 and rng.bernoulli(min(1, r[x] / q[x])):
                    yield step.accept(child)
                    node, accepted = child, accepted + 1
                    break
                r, adjusted = residual(r, q), True
            else:
                break
            if paths_bug and not list(step.children(node)):
                break
        at_leaf = not list(step.children(node))
        if paths_bug:
            use_residual = adjusted and 1 + accepted != len(leaves)
            yield rng.categorical(r if use_residual else sharp(step.target(node), power))
        elif at_leaf:
            yield rng.categorical(sharp(step.target(node), bonus_power))
        else:
            yield rng.categorical(r)
    return es.Rule(fn, name="eagle_model", family="tree", claim="biased", marks_accepted=True)


@pytest.mark.parametrize("expansion", [(2,), (2, 1)])
def test_eagle_at_temperature_1_is_lossless_up_to_float_rounding(expansion):
    prop = es.drafts.tree(expansion, children=WITHOUT, claim="renormalized")
    kw = dict(target=P, draft=Q, proposer=prop, tokens=len(expansion) + 1, prompt=(0,), reference=False)
    r64 = es.audit_sampler(eagle_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), **kw)
    assert r64.verdict == "lossless" and r64.tv < F(1, 2 ** 50)
    if expansion == (2,):
        # float32 laws: the same code lands ~1e-8 away: the float32 lattice, not the algorithm
        r32 = es.audit_sampler(eagle_verifier(1.0), adapter="torch-tree", **kw)
        assert F(1, 2 ** 35) < r32.tv < F(1, 2 ** 22)
        assert r32.output.keys() == r64.output.keys()


@pytest.mark.parametrize("expansion", [(2,), (2, 1)])
def test_eagle_below_temperature_1_draws_the_bonus_at_temperature_1(expansion):
    prop = es.drafts.tree(expansion, children=WITHOUT, claim="renormalized")
    tempered = es.models.sharpen(P, 2)
    kw = dict(target=P, draft=Q, proposer=prop, tokens=len(expansion) + 1, prompt=(0,), expected=tempered)
    r = es.audit_sampler(eagle_verifier(0.5), adapter=TorchTreeAdapter(torch.float64), reference=False, **kw)
    correct = es.audit(rule=_eagle_model(2, 2), **kw)
    published = es.audit(rule=_eagle_model(2, 1), **kw)
    assert correct.tv == 0                      # the model with a tempered bonus is the tempered target
    assert r.verdict == "biased" and r.tv > F(1, 20)
    assert total_variation(r.output, published.output) < F(1, 2 ** 50)   # the bias is exactly that bonus
    assert abs(r.tv - published.tv) < F(1, 2 ** 50)


def test_eagle_batched_variant_compares_accept_length_with_the_number_of_paths():
    prop = es.drafts.tree((3,), children=WITHOUT, claim="renormalized")
    kw = dict(target=P, draft=Q, proposer=prop, tokens=2, prompt=(0,))
    r = es.audit_sampler(eagle_batched_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), reference=False, **kw)
    model = es.audit(rule=_eagle_model(1, 1, paths_bug=True), **kw)
    assert r.verdict == "biased" and r.tv > F(1, 5)
    assert total_variation(r.output, model.output) < F(1, 2 ** 50)
    # with 2 paths of depth 1 the count coincides with depth + 1 and the same code is lossless
    two = dict(kw, proposer=es.drafts.tree((2,), children=WITHOUT, claim="renormalized"))
    assert es.audit_sampler(eagle_batched_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), reference=False,
                            **two).tv < F(1, 2 ** 50)


def test_eagle_with_top_p_emits_tokens_outside_the_top_p_set():
    # p = (1/2, 3/10, 1/5) with top_p = 0.6 keeps {0, 1}: the law (5/8, 3/8, 0). The draft (1/2, 1/2, 0) is accepted
    # w.p. sum min = 1/2 + 3/8 = 7/8, and then the token after the leaf comes from softmax(logits), unwarped:
    # token 2 w.p. 1/5. (A rejection emits from the residual (1/8, 0, 0): token 0.) So P(2 among 2 tokens) = 7/40.
    processor = eagle_utils.prepare_logits_processor(temperature=1.0, top_p=0.6)

    def eagle_top_p(candidates, logits, tree):
        best, n, sample_p = eagle_utils.evaluate_posterior(logits, candidates, processor, tree.draft_probs,
                                                           tree.draft_laws, tree.p_indices, tree.tree_candidates,
                                                           tree.b_indices)
        return [*candidates[best, 1:n + 1].tolist(), int(torch.multinomial(sample_p, 1))]
    p = es.models.context_free((F(1, 2), F(3, 10), F(1, 5)))
    q = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    r = es.audit_sampler(eagle_top_p, adapter=TorchTreeAdapter(torch.float64), target=p, draft=q, reference=False,
                         tokens=2, proposer=es.drafts.tree((1,), children=WITHOUT, claim="renormalized"))
    outside = sum(w for out, w in r.output.items() if 2 in out)
    assert abs(outside - F(7, 40)) < F(1, 2 ** 45)
    assert r.verdict == "biased"
