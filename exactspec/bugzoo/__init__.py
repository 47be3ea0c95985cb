"""A zoo of minimal samplers reproducing publicly reported speculative-decoding bugs, and their fixes.

``numpy_samplers`` (the ``numpy`` and ``numpy-tree`` adapters), ``torch_samplers`` (the
``vllm`` and ``flashinfer`` adapters), ``batched_samplers`` (vLLM-style batched samplers for
:func:`exactspec.tensor.audit_batched_sampler`) and ``loops`` (whole generation loops for
:func:`exactspec.audit_loop` and ``exactspec audit-loop``). Nothing is imported here: torch is needed only to call
the torch samplers. Installed with the package, so from any directory:

    exactspec audit-sampler exactspec.bugzoo.numpy_samplers:shared_uniform --vocab 3   # exit 1: biased

>>> from exactspec.bugzoo import numpy_samplers as zoo
>>> [f.__name__ for f, fix, where in zoo.ZOO][:2]
['shared_uniform', 'zero_uniform']
"""
