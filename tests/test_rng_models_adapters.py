"""Every rng model honoured by every adapter, or refused by name (issue 35): the law shows the lattice it says.

Each adapter's correct reference sampler is audited on one instance under each model of
``RNG_MODELS``. The instance makes the lattice visible: ``p = (1/2, 1/4, 1/4)``, ``q = (1/4, 1/2, 1/4)``,
one draft, one token, so the first token is 1 exactly when draft 1 (``q = 1/2``) is accepted, which
happens iff ``u < 1/2`` (or ``u <= 1/2``: a threshold every float holds exactly). ``P(first == 1) / q(1)`` is
then ``P(u < 1/2)`` or ``P(u <= 1/2)`` under the model the report names: ``1/2`` for an ideal draw,
``(2**23 - 1) / 2**24`` or ``1/2`` on curand's ``(0, 1]``, the rounded count on the float16 / bfloat16
lattices. Adapters that hand their kernels uniforms as tensors refuse ``continuous`` and the rounded
lattices with :class:`~exactspec.UnsupportedRngModel` (exit 2), naming themselves and the model.
A second instance (``p(2) = 0 < q(2)``) and a kernel accepting ``u * q <= p`` check the exact 0: its support
violation has the mass ``q(2) * P(u == 0)`` of the model, and none under ``continuous`` or ``curand``.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.bugzoo.torch_samplers import flashinfer_accept_at_zero, race_kernel  # noqa: E402
from exactspec.bugzoo.numpy_samplers import accept_at_zero  # noqa: E402
from exactspec.enumerate.rng import LATTICES, RNG_MODELS, lattice_for  # noqa: E402
from exactspec.samplers.adapters.explicit_uniforms import (KERNEL_RNG_MODELS, KernelAdapter,  # noqa: E402
                                                         reference_flashinfer_style, tensor_randomness)
from exactspec.samplers.adapters.registry import get_adapter  # noqa: E402

P = es.models.context_free((F(1, 2), F(1, 4), F(1, 4)))
Q = es.models.context_free((F(1, 4), F(1, 2), F(1, 4)))
RACE_ARGS = ("draft_probs", "draft_token_ids", "uniform_samples", "target_probs", "exponentials")


def declared():
    return tensor_randomness(RACE_ARGS[:4], {"uniform_samples": "uniform k+1"}), reference_flashinfer_style


def declared_race():
    return tensor_randomness(RACE_ARGS, {"uniform_samples": "uniform k", "exponentials": "exponential V"}), race_kernel


#: adapter -> (adapter, its reference sampler); the generator lattice its draws take under ``native``
ADAPTERS = {
    "numpy": (lambda: (get_adapter("numpy"), get_adapter("numpy").reference), "float64"),
    "numpy-tree": (lambda: (get_adapter("numpy-tree"), get_adapter("numpy-tree").reference), "float64"),
    "transformers": (lambda: (get_adapter("transformers"), get_adapter("transformers").reference), "torch-float32"),
    "vllm": (lambda: (get_adapter("vllm"), get_adapter("vllm").reference), "torch-float32"),
    "torch-tree": (lambda: (get_adapter("torch-tree"), get_adapter("torch-tree").reference), "torch-float32"),
    "flashinfer": (lambda: (get_adapter("flashinfer"), get_adapter("flashinfer").reference), "torch-float32"),
    "sglang": (lambda: (get_adapter("sglang"), get_adapter("sglang").reference), "torch-float32"),
    "tensor-randomness": (declared, "torch-float32"),
    "tensor-randomness-race": (declared_race, "torch-float32"),
}


def below_half(lattice):
    """``{P(u < 1/2), P(u <= 1/2)}`` on a lattice (an ideal draw: ``{1/2}``)."""
    if lattice is None:
        return {F(1, 2)}
    n = lattice.kmax - lattice.kmin + 1
    return {F(lattice.cut(F(1, 2), strict) - lattice.kmin + 1, n) for strict in (True, False)}


def audit(name, model, target=P, draft=Q, sampler=None):
    adapter, reference = ADAPTERS[name][0]()
    proposer = es.drafts.chain(1) if adapter.family == "chain" else es.drafts.tree((1,))
    return es.audit_sampler(sampler or reference, adapter=adapter, target=target, draft=draft, proposer=proposer,
                            tokens=1, rng_model=model, reference=False, progress=False), adapter


@pytest.mark.parametrize("model", RNG_MODELS)
@pytest.mark.parametrize("name", ADAPTERS)
def test_each_adapter_enumerates_the_model_its_report_names_or_refuses_it(name, model):
    adapter, _ = ADAPTERS[name][0]()
    # float32 uniform tensors cannot hold the float64 lattice: refused too (never rounded to another model)
    if isinstance(adapter, KernelAdapter) and (model not in KERNEL_RNG_MODELS or (
            model == "float64" and adapter.uniform_precision() != "float64")):
        with pytest.raises(es.UnsupportedRngModel) as info:
            audit(name, model)
        assert info.value.exit_code == 2 and info.value.adapter == adapter.name and info.value.rng_model == model
        assert f"the {adapter.name} adapter" in str(info.value) and repr(model) in str(info.value)
        return
    r, adapter = audit(name, model)
    assert r.extra["rng_model"] == model and r.scope["rng"] == r.extra["rng"]
    lattice = lattice_for(model)
    if model == "native":
        lattice = LATTICES[ADAPTERS[name][1]]
        assert lattice.note.split(", as ")[0] in r.extra["rng"]       # the report names the lattice enumerated
    elif model == "continuous":
        assert "ideal draw" in r.extra["rng"]
    else:
        assert lattice.note in r.extra["rng"]
    if isinstance(adapter, KernelAdapter):
        assert lattice.note in r.extra["resolution"]
    first = sum(w for out, w in r.output.items() if out[0] == 1)
    assert first / Q((0,))[1] in below_half(lattice), (first, below_half(lattice))


ZERO_P = es.models.context_free((F(1, 2), F(1, 2), F(0)))
ZERO_Q = es.models.context_free((F(1, 3), F(1, 3), F(1, 3)))


@pytest.mark.parametrize("model", ["continuous", "native", "torch-float32", "float64"])
@pytest.mark.parametrize("name, sampler", [("numpy", accept_at_zero), ("tensor-randomness", flashinfer_accept_at_zero)])
def test_an_exact_zero_uniform_shows_only_under_a_model_that_has_one(name, sampler, model):
    # (curand has no 0 but a 1, which other code paths meet: its lattice is checked above)
    if name == "tensor-randomness" and model in ("continuous", "float64"):
        with pytest.raises(es.UnsupportedRngModel, match=f"tensor-randomness adapter cannot audit under rng_model "
                                                         f"'{model}'"):
            audit(name, model, ZERO_P, ZERO_Q, sampler)
        return
    r, _ = audit(name, model, ZERO_P, ZERO_Q, sampler)
    lattice = LATTICES[ADAPTERS[name][1]] if model == "native" else lattice_for(model)
    zero = F(0) if lattice is None or lattice.kmin > 0 else F(1, lattice.kmax - lattice.kmin + 1)
    violation = sum(w for out, w in r.output.items() if out[0] == 2)
    assert violation == F(1, 3) * zero
    assert bool(r.support_violations) == (zero > 0)
