"""Large vocabularies: float64 per-step laws of the chain rules as torch tensor computations.

Needs torch (the ``audit`` extra). Runs on ``cuda`` when available, else on the CPU.

>>> from exactspec.tensor import TENSOR_CHAIN_RULES
>>> "speculative_sampling" in TENSOR_CHAIN_RULES
True
"""

from .chain_laws import TENSOR_CHAIN_RULES, TensorStepLaw, best_device, chain_step_laws
from .rowwise import BatchedAudit, audit_batched_sampler
from .tree_laws import tree_step_laws

__all__ = ["chain_step_laws", "tree_step_laws", "audit_batched_sampler", "BatchedAudit", "TensorStepLaw", "TENSOR_CHAIN_RULES", "best_device"]
