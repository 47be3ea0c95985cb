"""exactspec: prove or refute, exactly, that a speculative-decoding rule keeps the target's law.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> r = es.audit(target=es.models.context_free((F(3, 5), F(2, 5))), draft=es.models.context_free((F(1, 2), F(1, 2))),
...              proposer=es.drafts.chain(gamma=1), rule=es.rules.greedy_match_sampled, tokens=1)
>>> r.output[(0,)], r.tv
(Fraction(4, 5), Fraction(1, 5))
"""

from typing import Any

from . import drafts, laws, models, rules, theory
from ._audit import audit
from .assertions import HorizonWarning, LossAssertionError, assert_lossless
from .assertions import IncompleteCheckError, assert_loop_lossless, assert_sampler_lossless
from .sweep import sweep
from .enumerate import Budget
from .errors import (BudgetExceeded, ExactSpecError, InexactArithmetic, InvalidDistribution, ModelError, RuleError,
                     UnsupportedRandomness, UnsupportedRngModel)
from .errors import InvalidArgument, InvalidType, InvalidValue, NotARule
from .fields import get_field
from .protocols import Rng, Step, TreeStep
from .report import AuditReport, Outcome
from .rules import Rule, rule
# eager: importing the sub-package exactspec.prove later would otherwise leave `es.prove` the module, not the function
from .prove import Proof, Refutation, prove  # z3 and sympy are imported only when prove() runs

__version__ = "0.1.0"


#: public names imported on first use (``exactspec check`` needs none of them): name -> (module, attribute or
#: None for the module itself). ``es.strategies`` imports hypothesis's strategies; the samplers, counterexamples
#: and statistical modules and ``trees`` import numpy
_LAZY = {"strategies": (".strategies", None), "trees": (".trees", None), "samplers": (".samplers", None),
         "counterexamples": (".counterexamples", None), "statistical": (".statistical", None),
         "published": (".published", None),
         "Counterexample": (".counterexamples", "Counterexample"), "EmptySearch": (".counterexamples", "EmptySearch"),
         "IncompleteSearch": (".counterexamples", "IncompleteSearch"), "audit_loop": (".samplers", "audit_loop"),
         "audit_sampler": (".samplers", "audit_sampler"), "stand_in": (".samplers", "stand_in"),
         "search_loop": (".samplers", "search_loop"), "search_sampler": (".samplers", "search_sampler"),
         "audit_statistically": (".statistical", "audit_statistically")}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'exactspec' has no attribute {name!r}")
    import importlib
    module = importlib.import_module(where[0], __name__)
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = ["audit", "prove", "Proof", "Refutation", "audit_sampler", "audit_loop", "search_sampler", "search_loop", "stand_in", "HorizonWarning", "Counterexample", "EmptySearch", "IncompleteSearch", "audit_statistically", "statistical", "samplers", "published", "assert_lossless", "LossAssertionError", "AuditReport", "Outcome", "Budget", "Rule", "rule", "Step", "TreeStep", "Rng", "models", "drafts", "rules", "laws",
           "theory", "trees", "counterexamples", "strategies", "get_field", "ExactSpecError", "InvalidDistribution", "InexactArithmetic", "BudgetExceeded",
           "RuleError", "ModelError", "UnsupportedRandomness", "UnsupportedRngModel", "__version__"]
__all__ += ["assert_sampler_lossless", "assert_loop_lossless", "IncompleteCheckError", "NotARule"]
__all__ += ["InvalidArgument", "InvalidValue", "InvalidType"]
