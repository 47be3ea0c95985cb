"""The rounding baseline cannot excuse a bias: a reference that is not within rounding of its rule is refused.

A sampler's verdict allows ``max(tolerance, 2 * rounding_tv)``, where ``rounding_tv`` is how far
the adapter's reference sampler lands from its exact rule. A broken reference (a custom
adapter's, or one an interception change stops following) made that allowance as large as the
bias: the same biased sampler, used as its own reference, read "lossless" (a false pass seen
while auditing Medusa). Irrational quantities computed to 320 bits are stated in the report.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.bugzoo import numpy_samplers as zoo
from exactspec.samplers import NumpyChainAdapter


class _BrokenReference(NumpyChainAdapter):
    """A custom adapter whose "correct" reference is the biased shared-uniform sampler."""

    name = "broken-reference"
    reference = staticmethod(zoo.shared_uniform)


P = es.models.context_free((F(1, 2), F(1, 2)))
Q = es.models.context_free((F(0), F(1)))


def test_shared_uniform_is_biased_on_this_instance():
    r = es.audit_sampler(zoo.shared_uniform, target=P, draft=Q, proposer=es.drafts.chain(2), tokens=2)
    assert r.verdict == "biased" and r.tv == F(1, 4)


def test_a_reference_far_from_its_rule_is_refused_not_a_pass():
    with pytest.raises(es.ExactSpecError, match="more than float rounding can cost"):
        es.audit_sampler(zoo.shared_uniform, adapter=_BrokenReference(), target=P, draft=Q,
                         proposer=es.drafts.chain(2), tokens=2)


def test_without_a_reference_the_bias_shows():
    r = es.audit_sampler(zoo.shared_uniform, adapter=_BrokenReference(), target=P, draft=Q,
                         proposer=es.drafts.chain(2), tokens=2, reference=False)
    assert r.verdict == "biased" and r.tv == F(1, 4)


def test_irrational_weights_are_stated_in_the_report():
    np = pytest.importorskip("numpy")

    def gumbel_max(draft_ids, draft_probs, target_probs, rng):
        # the bonus token by Gumbel-max over float logits: the race weights exp(logit) are irrational
        out = []
        for j, x in enumerate(draft_ids):
            p, q = target_probs[j], draft_probs[j]
            if rng.random() < p[x] / q[x]:
                out.append(int(x))
                continue
            residual = np.maximum(p - q, 0.0)
            out.append(int(rng.choice(len(p), p=residual / residual.sum())))
            return out
        logits = np.log(target_probs[-1])
        out.append(int(np.argmax(logits + rng.gumbel(size=len(logits)))))
        return out

    p = es.models.context_free((F(1, 3), F(2, 3)))
    q = es.models.context_free((F(1, 2), F(1, 2)))
    r = es.audit_sampler(gumbel_max, target=p, draft=q, proposer=es.drafts.chain(1), tokens=2)
    assert r.verdict == "lossless"
    assert r.extra["approximations"] and all(n > 0 for n in r.extra["approximations"].values())
    assert any("320 bits" in w for w in r.warnings)
