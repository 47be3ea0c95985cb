"""The house: rule-API protocols that match the engine's classes (the import graph: test_import_layers.py)."""

from fractions import Fraction as F

import exactspec as es
from exactspec.enumerate import PathRng
from exactspec.enumerate.env import Env
from exactspec.fields import get_field
from exactspec.protocols import Rng, Step, TreeStep, UniformLike


# -- the rule API protocols match the engine's classes ---------------------------------------------------

def _env_and_rng():
    field = get_field(backend="python")
    p = es.models.context_free((F(3, 5), F(2, 5)))
    q = es.models.context_free((F(1, 2), F(1, 2)))
    return Env(p, q, field), PathRng((), 1, field, [], {})


def test_a_chain_step_is_a_step_and_a_path_rng_is_an_rng():
    env, rng = _env_and_rng()
    step = es.drafts.chain(2).step(env, (0,), rng)
    assert isinstance(step, Step) and not isinstance(step, TreeStep)
    assert isinstance(rng, Rng) and isinstance(rng.uniform(), UniformLike)
    assert step.target(0) == (F(3, 5), F(2, 5))


def test_a_tree_step_is_a_tree_step():
    env, rng = _env_and_rng()
    step = es.drafts.tree((2, 1)).step(env, (0,), rng)
    assert isinstance(step, TreeStep) and not isinstance(step, Step)
    assert step.root == 0 and step.max_depth == 2


def test_every_protocol_member_exists_on_the_engine_classes():
    # isinstance only checks members exist; this also names the member that drifted
    from exactspec.drafts import ChainStep, TreeStep as EngineTreeStep
    from typing import get_type_hints
    for proto, cls in [(Step, ChainStep), (TreeStep, EngineTreeStep), (Rng, PathRng)]:
        members = {n for n in vars(proto) if not n.startswith("_")} | set(get_type_hints(proto))
        slots = set(getattr(cls, "__slots__", ()))
        missing = sorted(n for n in members if not hasattr(cls, n) and n not in slots
                         and n not in ("gamma", "vocab", "max_depth"))   # set in __init__
        assert not missing, f"{cls.__name__} lacks {missing} of {proto.__name__}"


def test_the_catalog_rules_are_typed_with_the_protocols():
    import inspect
    for r in es.rules.catalog():
        hints = inspect.signature(r.fn).parameters
        assert hints["step"].annotation == ("Step" if r.family == "chain" else "TreeStep"), r.name
        assert hints["rng"].annotation == "Rng", r.name


def test_the_protocols_are_public():
    assert (es.Step, es.TreeStep, es.Rng) == (Step, TreeStep, Rng)
    assert {"Step", "TreeStep", "Rng"} <= set(es.__all__)
