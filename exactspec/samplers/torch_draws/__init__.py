"""torch's randomness, enumerated exactly: the modules of the randomness layer that need torch.

- :mod:`.torch_rng`: torch's random functions (``torch.rand``, ``multinomial``, ``Generator``, ...)
  patched to enumerate, with the exact laws of what they return;
- :mod:`.lazy_draws`: the pending categorical draws (``LazyCategoricalTensor``) a torch sampler holds
  before a value reaches Python;
- :mod:`.lazy_worlds`: values computed from pending draws (a stand-in's logits for a token it was fed),
  one per world of those draws, drawn only when a value reaches Python.

They stand on :mod:`exactspec.samplers.randomness` (the interception, the lazy values) and are imported
only where torch is: by the torch adapters, the torch stand-ins, and the interception once torch is
imported (:mod:`exactspec.samplers` registers :func:`.torch_rng.torch_specs` as torch's patch list).
Importing this package itself imports nothing.

>>> import exactspec.samplers.torch_draws as td
>>> td.__name__
'exactspec.samplers.torch_draws'
"""
