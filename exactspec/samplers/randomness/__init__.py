"""The randomness layer: every generator a sampler can draw from, enumerated exactly.

- :mod:`.interception`: the thread-safe patching of Python's, numpy's and torch's global random
  functions, the branch each thread is bound to, and the detection of draws that escape the patches;
- :mod:`.numpy_rng` and :mod:`.torch_rng`: the enumerating ``numpy.random.Generator`` look-alike,
  numpy's legacy global functions, and torch's random functions;
- :mod:`.lazy_values` and :mod:`.lazy_draws`: the lazy uniforms, races and categorical draws they return.

This layer imports nothing from the adapters, the loop audit or the sampler audit above it.
"""
