"""The adapters: one base class below the registry and every adapter module.

- :mod:`.base`: the :class:`~.base.Adapter` base class and the precision helpers;
- :mod:`.registry`: ``get_adapter``, ``ADAPTERS`` and the numpy adapters (this package re-exports
  its names, so ``exactspec.samplers.adapters.get_adapter`` is the registry's);
- :mod:`.torch_adapters` (transformers, vLLM), :mod:`.explicit_uniforms` (kernels taking explicit
  uniforms: FlashInfer, the declarative ``tensor_randomness``), :mod:`.torch_tree_adapter` and
  :mod:`.tree_buffers` (EAGLE/Medusa-style trees).

The adapters stand on the randomness layer and import nothing from the loop audit or the sampler audit.

>>> from exactspec.samplers import adapters
>>> adapters.get_adapter("numpy") is adapters.registry.numpy_chain
True
"""

from .registry import *  # noqa: F401,F403  (the registry's names, as the module exactspec.samplers.adapters had them)
from .registry import __all__  # noqa: F401
