"""Audit third-party samplers exactly: a numpy ``Generator`` stand-in, adapters, ``audit_sampler``.

>>> import exactspec as es
>>> es.samplers.get_adapter("numpy").family
'chain'
"""

from .adapters import (ADAPTERS, NumpyChainAdapter, NumpyTreeAdapter, get_adapter, numpy_chain, numpy_tree,
                       reference_numpy_chain, reference_numpy_tree)
from .base import Adapter
from .numpy_rng import EnumGenerator
from .sampler_audit import ROUNDING_TOLERANCE, audit_sampler

__all__ = ["audit_sampler", "Adapter", "NumpyChainAdapter", "numpy_chain", "reference_numpy_chain", "get_adapter",
           "NumpyTreeAdapter", "numpy_tree", "reference_numpy_tree",
           "ADAPTERS", "EnumGenerator", "ROUNDING_TOLERANCE"]
