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
- eagle-llm 1.2.1 ``eagle/model/utils_alpha.py`` (the module of the acceptance-rate scripts
  ``eagle/evaluation/gen_ea_alpha_*.py``; the same file in 1.1.0 and 1.2.0) ``evaluate_posterior`` with
  its own ``generate_tree_buffers``: **biased, algorithmic, at temperature 1**, four ways, each shown
  alone on a hand-worked instance: token id 0 is taken for padding and never verified (TV 1/8); the
  token after an accepted leaf is drawn from the residual left by a rejected sibling (the guard
  ``accept_length != candidates.shape[1]`` of utils.py is missing: TV 1/4); a node on several paths
  is tried once per path, its residual subtracted again (TV 3/80); the paths come last first
  (``retrieve_indices`` unsorted), so a later sibling is verified first against a draft law that
  excludes its earlier siblings (TV 1/4). Its law equals an exact model of those four (and of the
  ``q.sum() + 1e-5`` renormalisation) to float64 rounding.
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
    import eagle.model.utils_alpha as eagle_alpha_utils
    import eagle.modelbsne1.utils as eagle_bs_utils
    import medusa.model.utils as medusa_utils
    from eagle.model.choices import mc_sim_7b_63
else:
    eagle_utils = pytest.importorskip("eagle.model.utils", reason="pip install --no-deps eagle-llm==1.2.1")
    eagle_alpha_utils = pytest.importorskip("eagle.model.utils_alpha", reason="pip install --no-deps eagle-llm==1.2.1")
    eagle_bs_utils = pytest.importorskip("eagle.modelbsne1.utils", reason="pip install --no-deps eagle-llm==1.2.1")
    medusa_utils = pytest.importorskip("medusa.model.utils", reason="pip install --no-deps medusa-llm==0.1")
    from eagle.model.choices import mc_sim_7b_63

import exactspec as es  # noqa: E402
from exactspec.laws import normalize, residual, total_variation  # noqa: E402
from exactspec.samplers.adapters.torch_tree_adapter import TorchTreeAdapter  # noqa: E402
from exactspec.samplers.adapters.tree_buffers import tree_buffers  # noqa: E402
from findings import observe, release, tv_text  # noqa: E402

#: the versions whose verdicts this module records
VERSIONS = {"eagle-llm": "1.2.1", "medusa-llm": "0.1"}

P = es.models.random_table(vocab=3, order=1, seed=1)
Q = es.models.random_table(vocab=3, order=1, seed=11)
WITHOUT = "without_replacement"


def test_the_recorded_versions_are_installed():
    assert {name: release(name) for name in VERSIONS} == VERSIONS == {name: version(name) for name in VERSIONS}


def _as_model(code, model, finding, instance, figure=None):
    """Observe a finding whose float64 law is an exact model's: the model's exact TV when the two agree to 2**-50."""
    same = total_variation(code.output, model.output) < F(1, 2 ** 50)
    observe(finding, code.verdict, (figure or tv_text(model.tv)) if same else f"TV {float(code.tv):.6g} (not the model)",
            instance=instance, measured=float(code.tv))


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
    observe("medusa-typical", r.verdict, tv_text(r.tv), instance="hand-worked, tree (2,) top-k, vocab 3")
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
    observe("medusa-typical", r.verdict, "the law of `typical_acceptance_medusa`, exactly (==)" if r.output ==
            exact.output else f"differs from `typical_acceptance_medusa` by TV {float(total_variation(r.output, exact.output)):.3g}",
            instance="8 configurations")
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
    observe("eagle-t1-lossless", r64.verdict, "TV < 2^-50 (float64)" if r64.tv < F(1, 2 ** 50) else tv_text(r64.tv),
            instance=f"tree {expansion}, float64", measured=float(r64.tv))
    assert r64.verdict == "lossless" and r64.tv < F(1, 2 ** 50)
    if expansion == (2,):
        # float32 laws: the same code lands ~1e-8 away: the float32 lattice, not the algorithm
        r32 = es.audit_sampler(eagle_verifier(1.0), adapter="torch-tree", **kw)
        observe("eagle-t1-lossless", r32.verdict, "2^-35 < TV < 2^-22 (float32)" if F(1, 2 ** 35) < r32.tv <
                F(1, 2 ** 22) else tv_text(r32.tv), instance="tree (2,), float32", measured=float(r32.tv))
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
    _as_model(r, published, "eagle-untempered-bonus", f"T=1/2, tree {expansion}")
    assert correct.tv == 0                      # the model with a tempered bonus is the tempered target
    assert r.verdict == "biased" and r.tv > F(1, 20)
    assert total_variation(r.output, published.output) < F(1, 2 ** 50)   # the bias is exactly that bonus
    assert abs(r.tv - published.tv) < F(1, 2 ** 50)


def test_eagle_batched_variant_compares_accept_length_with_the_number_of_paths():
    prop = es.drafts.tree((3,), children=WITHOUT, claim="renormalized")
    kw = dict(target=P, draft=Q, proposer=prop, tokens=2, prompt=(0,))
    r = es.audit_sampler(eagle_batched_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), reference=False, **kw)
    model = es.audit(rule=_eagle_model(1, 1, paths_bug=True), **kw)
    _as_model(r, model, "eagle-batched-paths", "tree (3,)")
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
    observe("eagle-untempered-bonus", r.verdict, "a token outside the top-p set with probability 7/40"
            if abs(outside - F(7, 40)) < F(1, 2 ** 45) else f"outside the top-p set: {float(outside):.6g}",
            instance="top_p 0.6, tree (1,)", measured=float(outside))
    assert abs(outside - F(7, 40)) < F(1, 2 ** 45)
    assert r.verdict == "biased"


# -- EAGLE utils_alpha (the acceptance-rate evaluation's verifier) -----------------------------------------------------
def eagle_alpha_verifier(temperature: float, expansion: tuple):
    """utils_alpha's evaluate_posterior on the buffers of utils_alpha's own generate_tree_buffers (paths in its
    order, short paths padded with token 0 as its generate_candidates pads them), then the next token drawn from
    the law it returns, as update_inference_inputs does."""
    processor = eagle_alpha_utils.prepare_logits_processor(temperature=temperature)
    buffers = eagle_alpha_utils.generate_tree_buffers([list(c) for c in tree_buffers(expansion).choices],
                                                      device="cpu")

    def eagle_alpha(candidates, logits, tree):
        candidates, logits, probs = tree.in_path_order(buffers["retrieve_indices"], pad=0)
        best, n, sample_p = eagle_alpha_utils.evaluate_posterior(
            logits, candidates, processor, probs, [0] * 4, [0] * 4, tree.draft_laws, buffers["p_indices"],
            tree.tree_candidates, buffers["b_indices"])
        return [*candidates[best, 1:n + 1].tolist(), int(torch.multinomial(sample_p, 1))]
    return eagle_alpha


ALPHA_FLAGS = ("last_path_first", "residual_after_leaf", "once_per_path", "token_0_is_padding")


def _eagle_alpha_model(power: int = 1, eps=F(1e-5), **flags: bool) -> es.Rule:
    """utils_alpha's verification in exact arithmetic, each deviation from MSS behind a flag (all on by default):
    siblings tried last first; the token after a leaf accepted after a rejection drawn from that residual; a
    child tried once per path through it; token 0 skipped; a later sibling's residual taken with
    ``q / (q.sum() + eps)``. Temperature ``1/power`` for the acceptance and residuals; a token drawn with no
    residual (after a leaf, or every child skipped) untempered, as ``softmax(logits)`` there."""
    on = {f: flags.get(f, True) for f in ALPHA_FLAGS}
    assert set(flags) <= set(ALPHA_FLAGS)

    def paths(step, n):
        kids = list(step.children(n))
        return sum(paths(step, k) for k in kids) if kids else 1

    def fn(step, rng):
        node = step.root
        while True:
            kids = list(step.children(node))
            if not kids:
                yield rng.categorical(step.target(node))
                return
            r = normalize([x ** power for x in step.target(node)])
            first = step.claimed(kids[0])
            order = range(len(kids) - 1, -1, -1) if on["last_path_first"] else range(len(kids))
            tries = [k for k in order for _ in range(paths(step, kids[k]) if on["once_per_path"] else 1)]
            adjusted, accepted = False, None
            for k in tries:
                x = step.token(kids[k])
                if on["token_0_is_padding"] and x == 0:
                    continue
                qx = step.claimed(kids[k])[x]
                if qx > 0 and rng.bernoulli(min(F(1), r[x] / qx)):
                    accepted = kids[k]
                    break
                earlier = {step.token(kids[i]) for i in range(k)}
                masked = [F(0) if t in earlier else v for t, v in enumerate(first)]
                q = [v / (sum(masked) + eps) for v in masked] if earlier else masked
                r, adjusted = normalize([max(F(0), a - b) for a, b in zip(r, q)]), True
            if accepted is None:
                yield rng.categorical(r if adjusted else step.target(node))
                return
            yield step.accept(accepted)
            node = accepted
            if adjusted and on["residual_after_leaf"] and not list(step.children(node)):
                yield rng.categorical(r)
                return
    return es.Rule(fn, name="eagle_alpha_model", family="tree", claim="biased", marks_accepted=True)


def _shift(model: es.Model) -> es.Model:
    """``model`` on tokens 1.. with token 0 never drawn (p = q = 0 there: LLaMA's ``<unk>``), order 1."""
    return es.models.from_function(vocab=model.vocab + 1, order=1,
                                   fn=lambda ctx: (F(0), *model.law((max(ctx[-1] - 1, 0),))))


def test_eagle_alpha_buffers_list_the_paths_last_first():
    for expansion, rows in [((2,), [[0, 2], [0, 1]]), ((1, 2), [[0, 1, 3], [0, 1, 2]]),
                            ((2, 1), [[0, 2, 4], [0, 1, 3]])]:
        choices = [list(c) for c in tree_buffers(expansion).choices]
        theirs = eagle_alpha_utils.generate_tree_buffers(choices, device="cpu")
        ours = tree_buffers(expansion)
        assert theirs["retrieve_indices"].tolist() == rows == ours.retrieve_indices.tolist()[::-1]
        assert torch.equal(theirs["tree_attn_mask"], ours.attn_mask)
        assert theirs["tree_position_ids"].tolist() == ours.position_ids.tolist()
    # utils.py sorts them (custom_sort) into our order
    assert eagle_utils.generate_tree_buffers([[0], [1]], device="cpu")["retrieve_indices"].tolist() == [[0, 1], [0, 2]]


def _alpha_audit(p, q, expansion, tokens, **kw):
    prop = es.drafts.tree(expansion, children=WITHOUT, claim="renormalized")
    kw = dict(target=p, draft=q, proposer=prop, tokens=tokens, **kw)
    code = es.audit_sampler(eagle_alpha_verifier(1.0, expansion), adapter=TorchTreeAdapter(torch.float64),
                            reference=False, **kw)
    return code, es.audit(rule=_eagle_alpha_model(), **kw), kw


@pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")
def test_eagle_alpha_takes_token_0_for_padding():
    # one child x ~ q = (1/4, 1/2, 1/4) under p = (1/2, 1/4, 1/4): x = 0 is skipped (no verification, no residual),
    # then a draw from p: 1/4 * p. x = 1, 2 accepted w.p. min(q, p) = 1/4 each; x = 1 rejected w.p. 1/4, residual
    # (p - q)+ = delta_0. First token: (1/8 + 1/4, 1/16 + 1/4, 1/16 + 1/4) = (3/8, 5/16, 5/16): TV 1/8
    cf = es.models.context_free
    code, model, _ = _alpha_audit(cf((F(1, 2), F(1, 4), F(1, 4))), cf((F(1, 4), F(1, 2), F(1, 4))), (1,), 1)
    _as_model(code, model, "eagle-alpha", "token 0 taken for padding, tree (1,)")
    assert model.output == {(0,): F(3, 8), (1,): F(5, 16), (2,): F(5, 16)} and model.tv == F(1, 8)
    assert code.verdict == "biased" and total_variation(code.output, model.output) < F(1, 2 ** 50)
    # (float64: random.random() <= acp accepts with probability acp + 2**-53 on Python's grid)
    assert abs(code.tv - F(1, 8)) < F(1, 2 ** 50)


def test_eagle_alpha_draws_the_token_after_the_leaf_from_the_residual():
    # tokens 1, 2 with p = (1/2, 1/2), q = (1/4, 3/4), two children (both tokens). The second child x1 is tried first
    # (q' = 1 on it): accepted w.p. 1/2, then the next token from p at the leaf. Rejected, the residual is delta_x0,
    # x0 is accepted with probability 1 and the next token is drawn from that residual: x0 again.
    # x0 = 1 (1/4): (2, .) 1/8 spread by p, (1, 1) 1/8; x0 = 2 (3/4): (1, .) 3/8 spread, (2, 2) 3/8.
    cf = es.models.context_free
    code, model, kw = _alpha_audit(cf((F(0), F(1, 2), F(1, 2))), cf((F(0), F(1, 4), F(3, 4))), (2,), 2)
    _as_model(code, model, "eagle-alpha", "the token after a leaf from a sibling's residual, tree (2,)")
    assert model.output == {(1, 1): F(5, 16), (1, 2): F(3, 16), (2, 1): F(1, 16), (2, 2): F(7, 16)}
    assert model.tv == F(1, 4)
    assert code.verdict == "biased" and total_variation(code.output, model.output) < F(1, 2 ** 50)
    # utils.py (with the guard accept_length != candidates.shape[1]) is lossless on the same instance
    assert es.audit_sampler(eagle_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), reference=False,
                            **kw).tv < F(1, 2 ** 50)


@pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")
def test_eagle_alpha_tries_a_node_once_per_path_through_it():
    # one child with two children: the child is on 2 paths and tried twice. p = (0, 3/5, 3/10, 1/10),
    # q = (0, 1/10, 1/10, 4/5): accepted w.p. min(p, q) = 1/10 each; rejected (7/10) the residual (5/7, 2/7) on
    # tokens 1, 2 has 0 at the child's token, so the second try rejects again and subtracts q once more:
    # (5/7 - 1/10, 2/7 - 1/10) -> (43/56, 13/56). First token: (51/80, 21/80, 8/80) against (48, 24, 8)/80: TV 3/80
    cf = es.models.context_free
    code, model, _ = _alpha_audit(cf((F(0), F(3, 5), F(3, 10), F(1, 10))), cf((F(0), F(1, 10), F(1, 10), F(4, 5))),
                                  (1, 2), 1)
    _as_model(code, model, "eagle-alpha", "a node tried once per path, tree (1, 2)")
    assert model.output == {(1,): F(51, 80), (2,): F(21, 80), (3,): F(1, 10)} and model.tv == F(3, 80)
    assert code.verdict == "biased" and total_variation(code.output, model.output) < F(1, 2 ** 50)


@pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")
def test_eagle_alpha_verifies_the_last_sibling_first():
    # tokens 1, 2, 3 with p = (1/4, 1/4, 1/2); q = (1/2, 1/2, 0) drafts both 1 and 2, x0 ~ q, x1 the other one,
    # told q' = delta_x1. utils_alpha tries x1 first: accepted w.p. p(x1) = 1/4; rejected, the residual is p without
    # x1, (1/3, 2/3) on (x0, 3); x0 accepted w.p. min(1, (1/3) / (1/2)) = 2/3, else token 3. First token
    # (3/8, 3/8, 1/4) against (1/4, 1/4, 1/2): TV 1/4. (In utils.py's order, x0 first, the same law is p exactly.)
    cf = es.models.context_free
    code, model, kw = _alpha_audit(cf((F(0), F(1, 4), F(1, 4), F(1, 2))), cf((F(0), F(1, 2), F(1, 2), F(0))),
                                   (2,), 1)
    _as_model(code, model, "eagle-alpha", "the last sibling verified first, tree (2,)")
    assert model.output == {(1,): F(3, 8), (2,): F(3, 8), (3,): F(1, 4)} and model.tv == F(1, 4)
    assert code.verdict == "biased" and total_variation(code.output, model.output) < F(1, 2 ** 50)
    assert es.audit_sampler(eagle_verifier(1.0), adapter=TorchTreeAdapter(torch.float64), reference=False,
                            **kw).tv < F(1, 2 ** 50)


@pytest.mark.parametrize("expansion", [(2,), (1, 2)])
def test_eagle_alpha_is_the_exact_model_on_order_1_tables(expansion):
    # vocab 4, order 1, token 0 never drawn (so the padding is not what shows): the code's float64 law is the
    # model's to float64 rounding; each deviation alone biases it; none of them leaves MSS, exactly lossless
    p, q = _shift(P), _shift(Q)
    code, model, kw = _alpha_audit(p, q, expansion, len(expansion) + 1, prompt=(1,))
    _as_model(code, model, "eagle-alpha", f"all together, order-1, vocab 4, tree {expansion}")
    assert code.verdict == "biased" and code.tv > F(1, 10)
    assert total_variation(code.output, model.output) < F(1, 2 ** 50)
    # the q / (q.sum() + 1e-5) renormalisation is in it too: without it the model is ~1e-6 away from the code
    assert total_variation(code.output, es.audit(rule=_eagle_alpha_model(eps=0), **kw).output) > F(1, 10 ** 7)
    off = dict.fromkeys(ALPHA_FLAGS, False)
    assert es.audit(rule=_eagle_alpha_model(eps=0, **off), **kw).tv == 0
    if expansion == (2,):
        # float32 laws (the adapter's default) move the TV by float32 rounding only: the bias is algorithmic
        code32 = es.audit_sampler(eagle_alpha_verifier(1.0, expansion), adapter="torch-tree", reference=False, **kw)
        assert abs(code32.tv - code.tv) < F(1, 2 ** 20)
    for flag in ("last_path_first", "residual_after_leaf"):
        assert es.audit(rule=_eagle_alpha_model(eps=0, **dict(off, **{flag: True})), **kw).tv > F(1, 50)


def test_eagle_alpha_at_temperature_one_half_is_the_model():
    p, q = _shift(P), _shift(Q)
    prop = es.drafts.tree((2,), children=WITHOUT, claim="renormalized")
    kw = dict(target=p, draft=q, proposer=prop, tokens=2, prompt=(1,), expected=es.models.sharpen(p, 2))
    code = es.audit_sampler(eagle_alpha_verifier(0.5, (2,)), adapter=TorchTreeAdapter(torch.float64),
                            reference=False, **kw)
    model = es.audit(rule=_eagle_alpha_model(power=2), **kw)
    assert code.verdict == "biased" and total_variation(code.output, model.output) < F(1, 2 ** 50)
