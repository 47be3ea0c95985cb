"""The whole-loop audit: stand-in models with exact laws, and :func:`~.loop_audit.audit_loop` running a loop on them.

- :mod:`.stand_in` (``es.stand_in``), with the torch module behind it (``_torch_lm``) and the
  transformers ``PreTrainedModel`` stand-in (:mod:`.hf_stand_in`), both imported on first use;
- :mod:`.loop_audit`: ``audit_loop`` (one instance) and ``reference_loop``, built on the sampler audit
  (:mod:`exactspec.samplers.audit`);
- :mod:`.loop_search`: ``search_loop``, the loop audited over small instances, built on the sampler search
  (:mod:`exactspec.samplers.search`).

>>> from exactspec.samplers.loops import stand_in
>>> sorted(stand_in.KINDS)[0]
'torch-lm'
"""
