"""Adapters for the published inference engines' own samplers, run from their released files.

- :mod:`.vllm_v1`: vLLM v1's ``RejectionSampler`` (``vllm-v1``);
- :mod:`.sglang_kernels`: SGLang's chain and tree verification kernels (``sglang``, ``sglang-tree-greedy``);
- :mod:`.triton_kernels`: loading a published kernel file and running its Triton kernels in the
  interpreter, which the SGLang adapter uses.

Each is found by name through :func:`exactspec.samplers.get_adapter` and imported on first use (they need
torch). They stand on the adapter base and the explicit-uniform kernels (:mod:`..explicit_uniforms`).

>>> import exactspec.samplers.adapters.engines as engines
>>> engines.__name__
'exactspec.samplers.adapters.engines'
"""
