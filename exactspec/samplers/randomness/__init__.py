"""The randomness layer: every generator a sampler can draw from, enumerated exactly.

- :mod:`.interception`: the thread-safe patching of Python's, numpy's and torch's global random
  functions, the branch each thread is bound to, and the detection of draws that escape the patches;
- :mod:`.numpy_rng` and :mod:`.torch_rng`: the enumerating ``numpy.random.Generator`` look-alike,
  numpy's legacy global functions, and torch's random functions;
- :mod:`.lazy_values` and :mod:`.lazy_draws`: the lazy uniforms, races and categorical draws they return;
- :mod:`.lazy_worlds`: values computed from pending draws (a stand-in's logits for a token it was fed),
  one per world of those draws, drawn only when a value reaches Python;
- :mod:`.joint_draws`: pending draws held jointly (their exact joint law), so that a decision on
  several of them forks on its answer, not on their values.

This layer imports nothing from the adapters, the loop audit or the sampler audit above it. Within
it, :mod:`.interception` sits below :mod:`.numpy_rng` and :mod:`.torch_rng` (they read the branch it
keeps); this package hands it their patch lists (:func:`.interception.register_patches`), torch's
only once torch is imported (:mod:`.torch_rng` imports torch).

>>> from exactspec.samplers.randomness import interception
>>> sorted(interception._PATCHES)
['numpy', 'torch']
"""

from . import interception, numpy_rng


def _torch_specs() -> list[tuple]:
    """torch's patch list; imports :mod:`.torch_rng` (and torch), so it is asked for only once torch is imported."""
    from .torch_rng import torch_specs
    return torch_specs()


interception.register_patches("numpy", numpy_rng.legacy_specs)
interception.register_patches("torch", _torch_specs)
