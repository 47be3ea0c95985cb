"""Audit third-party samplers exactly: adapters, ``audit_sampler``, whole-loop audits with stand-in models.

The layers, each importing only from the ones before it (no circle between them):

- :mod:`exactspec.samplers.randomness`: the torch-free core of the interception of numpy's, Python's
  and torch's generators, and the lazy values they return;
- :mod:`exactspec.samplers.torch_draws`: torch's random functions and the lazy draws and values of
  torch code (imported only where torch is);
- :mod:`exactspec.samplers.adapters`: one base class below the registry and the adapters (numpy,
  torch, declarative, tree; the published engines' in :mod:`exactspec.samplers.adapters.engines`),
  and the check that an adapter fits a sampler (:mod:`exactspec.samplers.adapters.fit`);
- what a user calls: ``audit_sampler`` (:mod:`exactspec.samplers.audit`, one instance) and ``search_sampler``
  (:mod:`exactspec.samplers.search`, small instances), both over the audit of one instance
  (:mod:`exactspec.samplers.instance`), and the rounding-or-bias decision they share with the loop
  audit (:mod:`exactspec.samplers.rounding`);
- :mod:`exactspec.samplers.loops`: the stand-in models, the whole-loop audit (``audit_loop``) and search
  (``search_loop``), built on the sampler audit and search.

The torch adapters (``TransformersChainAdapter``, ``VllmChainAdapter``, ``TorchTreeAdapter``,
``torch_tree``, ``reference_torch_tree``), the tree buffer helper (``tree_buffers``,
``TreeBuffers``) and the transformers stand-in (``transformers_stand_in``) need torch, so they
are imported on first use (``import exactspec.samplers`` imports no torch).

>>> import exactspec as es
>>> es.samplers.get_adapter("numpy").family
'chain'
"""

import importlib

from .adapters.registry import (ADAPTERS, NumpyChainAdapter, NumpyTreeAdapter, get_adapter, numpy_chain, numpy_tree,
                                reference_numpy_chain, reference_numpy_tree)
from .adapters.base import Adapter
from .adapters.explicit_uniforms import TensorRandomnessAdapter, tensor_randomness
from .randomness.numpy_rng import EnumGenerator
from .loops.loop_audit import LoopReport, audit_loop, reference_loop
from .loops.loop_search import search_loop
from .audit import ROUNDING_TOLERANCE, audit_sampler
from .search import sampler_space, search_instances, search_sampler
from .loops.stand_in import stand_in
from .randomness import interception as _interception


def _torch_specs() -> list[tuple]:
    """torch's patch list; imports :mod:`.torch_draws.torch_rng` (and torch), so it is asked for only once torch is."""
    from .torch_draws.torch_rng import torch_specs
    return torch_specs()


_interception.register_patches("torch", _torch_specs)

_NEEDS_TORCH = {"TorchTreeAdapter": "adapters.torch_tree_adapter", "torch_tree": "adapters.torch_tree_adapter",
                "reference_torch_tree": "adapters.torch_tree_adapter", "tree_buffers": "adapters.tree_buffers",
                "TreeBuffers": "adapters.tree_buffers", "transformers_stand_in": "loops.hf_stand_in",
                "VllmChainAdapter": "adapters.torch_adapters", "TransformersChainAdapter": "adapters.torch_adapters",
                "VllmRejectionAdapter": "adapters.engines.vllm_v1"}


def __getattr__(name: str) -> object:
    """The torch-only names, imported when first asked for (``import exactspec`` needs no torch)."""
    module = _NEEDS_TORCH.get(name)
    if module is None:
        raise AttributeError(f"module 'exactspec.samplers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["audit_sampler", "Adapter", "NumpyChainAdapter", "numpy_chain", "reference_numpy_chain", "get_adapter",
           "NumpyTreeAdapter", "numpy_tree", "reference_numpy_tree",
           "ADAPTERS", "EnumGenerator", "ROUNDING_TOLERANCE", "audit_loop", "stand_in", "LoopReport",
           "reference_loop", "search_sampler", "search_loop", "tensor_randomness", "TensorRandomnessAdapter", "search_instances", "sampler_space", *_NEEDS_TORCH]
