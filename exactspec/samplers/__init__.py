"""Audit third-party samplers exactly: adapters, ``audit_sampler``, whole-loop audits with stand-in models.

The torch adapters (``TransformersChainAdapter``, ``VllmChainAdapter``, ``TorchTreeAdapter``,
``torch_tree``, ``reference_torch_tree``), the tree buffer helper (``tree_buffers``,
``TreeBuffers``) and the transformers stand-in (``transformers_stand_in``) need torch, so they
are imported on first use.

>>> import exactspec as es
>>> es.samplers.get_adapter("numpy").family
'chain'
"""

from .adapters import (ADAPTERS, NumpyChainAdapter, NumpyTreeAdapter, get_adapter, numpy_chain, numpy_tree,
                       reference_numpy_chain, reference_numpy_tree)
from .base import Adapter
from .explicit_uniforms import TensorRandomnessAdapter, tensor_randomness
from .numpy_rng import EnumGenerator
from .loop_audit import LoopReport, audit_loop, reference_loop
from .sampler_audit import ROUNDING_TOLERANCE, audit_sampler
from .sampler_search import sampler_space, search_instances, search_sampler
from .stand_in import stand_in

_NEEDS_TORCH = {"TorchTreeAdapter": "torch_tree_adapter", "torch_tree": "torch_tree_adapter",
                "reference_torch_tree": "torch_tree_adapter", "tree_buffers": "tree_buffers",
                "TreeBuffers": "tree_buffers", "transformers_stand_in": "hf_stand_in",
                "VllmChainAdapter": "torch_adapters", "TransformersChainAdapter": "torch_adapters"}


def __getattr__(name: str) -> object:
    """The torch-only names, imported when first asked for (``import exactspec`` needs no torch)."""
    module = _NEEDS_TORCH.get(name)
    if module is None:
        raise AttributeError(f"module 'exactspec.samplers' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["audit_sampler", "Adapter", "NumpyChainAdapter", "numpy_chain", "reference_numpy_chain", "get_adapter",
           "NumpyTreeAdapter", "numpy_tree", "reference_numpy_tree",
           "ADAPTERS", "EnumGenerator", "ROUNDING_TOLERANCE", "audit_loop", "stand_in", "LoopReport",
           "reference_loop", "search_sampler", "tensor_randomness", "TensorRandomnessAdapter", "search_instances", "sampler_space", *_NEEDS_TORCH]
