"""The randomness layer: the torch-free core of the interception of every generator a sampler can draw from.

- :mod:`.interception`: the thread-safe patching of Python's, numpy's and torch's global random
  functions, the branch each thread is bound to, and the detection of draws that escape the patches;
- :mod:`.numpy_rng`: the enumerating ``numpy.random.Generator`` look-alike and numpy's legacy global functions;
- :mod:`.lazy_values`: the lazy uniforms, exponentials and races they return;
- :mod:`.joint_draws`: pending draws held jointly (their exact joint law), so that a decision on
  several of them forks on its answer, not on their values;
- :mod:`.planned`: planned draws, torch's uniform and exponential fills writing values the audit chose
  (for kernels that read raw memory);
- :mod:`.precision_watch`: the watch over torch operations that notes where audited code computes coarser
  than float64 (these two import torch only inside their functions, once the audited code has).

No module here imports torch at module level: torch's random functions, the lazy categorical draws and the
values computed from pending draws are in :mod:`exactspec.samplers.torch_draws`, above this layer. This layer
imports nothing from the torch draws, the adapters, the loop audit or the sampler audit. Within it,
:mod:`.interception` sits below :mod:`.numpy_rng` (it reads the branch the interception keeps); this package
hands the interception numpy's patch list (:func:`.interception.register_patches`); :mod:`exactspec.samplers`
hands it torch's.

>>> from exactspec.samplers.randomness import interception
>>> sorted(interception._PATCHES)
['numpy', 'torch']
"""

from . import interception, numpy_rng

interception.register_patches("numpy", numpy_rng.legacy_specs)
