"""Audit third-party samplers exactly: adapters, ``audit_sampler``, whole-loop audits with stand-in models.

Four layers, each importing only from the ones before it (no circle between them):

- :mod:`exactspec.samplers.randomness`: the interception of numpy's, Python's and torch's generators,
  the lazy values and draws they return;
- :mod:`exactspec.samplers.adapters`: one base class below the registry and the adapters (numpy,
  torch, declarative, tree);
- the sampler audit and search: :mod:`exactspec.samplers.sampler_audit`,
  :mod:`exactspec.samplers.sampler_search`, and the rounding-or-bias decision they share with the
  loop audit (:mod:`exactspec.samplers.float_boundary`);
- :mod:`exactspec.samplers.loops`: the stand-in models and the whole-loop audit, built on the sampler audit.

The torch adapters (``TransformersChainAdapter``, ``VllmChainAdapter``, ``TorchTreeAdapter``,
``torch_tree``, ``reference_torch_tree``), the tree buffer helper (``tree_buffers``,
``TreeBuffers``) and the transformers stand-in (``transformers_stand_in``) need torch, so they
are imported on first use. The modules' paths from before the sub-packages
(``exactspec.samplers.torch_adapters``, ``exactspec.samplers.interception``, ...) still import, as the
same module objects.

>>> import exactspec as es
>>> es.samplers.get_adapter("numpy").family
'chain'
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

from .adapters.registry import (ADAPTERS, NumpyChainAdapter, NumpyTreeAdapter, get_adapter, numpy_chain, numpy_tree,
                                reference_numpy_chain, reference_numpy_tree)
from .adapters.base import Adapter
from .adapters.explicit_uniforms import TensorRandomnessAdapter, tensor_randomness
from .randomness.numpy_rng import EnumGenerator
from .loops.loop_audit import LoopReport, audit_loop, reference_loop
from .sampler_audit import ROUNDING_TOLERANCE, audit_sampler
from .sampler_search import sampler_space, search_instances, search_sampler
from .loops.stand_in import stand_in
from .. import statistical as _statistical

_statistical.resolve_adapters_with(get_adapter)   # the statistical audit, below this layer, resolves adapter names

_NEEDS_TORCH = {"TorchTreeAdapter": "adapters.torch_tree_adapter", "torch_tree": "adapters.torch_tree_adapter",
                "reference_torch_tree": "adapters.torch_tree_adapter", "tree_buffers": "adapters.tree_buffers",
                "TreeBuffers": "adapters.tree_buffers", "transformers_stand_in": "loops.hf_stand_in",
                "VllmChainAdapter": "adapters.torch_adapters", "TransformersChainAdapter": "adapters.torch_adapters",
                "VllmRejectionAdapter": "adapters.vllm_v1"}


def __getattr__(name: str) -> object:
    """The torch-only names, imported when first asked for (``import exactspec`` needs no torch)."""
    module = _NEEDS_TORCH.get(name)
    if module is None:
        raise AttributeError(f"module 'exactspec.samplers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


#: old module path (before the sub-packages, issue 17) -> its sub-package
_MOVED = {"interception": "randomness", "numpy_rng": "randomness", "torch_rng": "randomness",
          "lazy_values": "randomness", "lazy_draws": "randomness", "base": "adapters", "torch_adapters": "adapters",
          "explicit_uniforms": "adapters", "torch_tree_adapter": "adapters", "tree_buffers": "adapters",
          "stand_in": "loops", "hf_stand_in": "loops", "loop_audit": "loops"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module's old path (``exactspec.samplers.torch_adapters``) as the module at its new one."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> None:
        return None             # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module: Any) -> None:
        package, _, name = module.__name__.rpartition(".")
        # the import system returns what sys.modules holds under the old name once this returns: the module itself
        sys.modules[module.__name__] = importlib.import_module(f"{package}.{_MOVED[name]}.{name}")


class _Package(types.ModuleType):
    """This package's module type: importing a submodule by an old path that is also one of its functions' names
    (``exactspec.samplers.stand_in``) leaves the function in place (the import system would bind the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("stand_in", "tree_buffers") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())

__all__ = ["audit_sampler", "Adapter", "NumpyChainAdapter", "numpy_chain", "reference_numpy_chain", "get_adapter",
           "NumpyTreeAdapter", "numpy_tree", "reference_numpy_tree",
           "ADAPTERS", "EnumGenerator", "ROUNDING_TOLERANCE", "audit_loop", "stand_in", "LoopReport",
           "reference_loop", "search_sampler", "tensor_randomness", "TensorRandomnessAdapter", "search_instances", "sampler_space", *_NEEDS_TORCH]
