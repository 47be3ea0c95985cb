"""exactspec: prove or refute, exactly, that a speculative-decoding rule keeps the target's law.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> r = es.audit(target=es.models.context_free((F(3, 5), F(2, 5))), draft=es.models.context_free((F(1, 2), F(1, 2))),
...              proposer=es.drafts.chain(gamma=1), rule=es.rules.greedy_match_sampled, tokens=1)
>>> r.output[(0,)], r.tv
(Fraction(4, 5), Fraction(1, 5))
"""

from . import counterexamples, drafts, laws, models, rules, samplers, statistical, theory, trees
from ._audit import audit
from .assertions import HorizonWarning, LossAssertionError, assert_lossless
from .assertions import IncompleteCheckError, assert_loop_lossless, assert_sampler_lossless
from .counterexamples import Counterexample, EmptySearch, IncompleteSearch
from .samplers import audit_loop, audit_sampler, stand_in
from .statistical import audit_statistically
from .sweep import sweep
from .enumerate import Budget
from .errors import (BudgetExceeded, ExactSpecError, InexactArithmetic, InvalidDistribution, ModelError, RuleError,
                     UnsupportedRandomness)
from .errors import NotARule
from .fields import get_field
from .protocols import Rng, Step, TreeStep
from .report import AuditReport, Outcome
from .rules import Rule, rule
from .prove import Proof, Refutation, prove  # z3 and sympy are imported only when prove() runs

__version__ = "0.1.0"


def __getattr__(name: str):  # `es.strategies` imports hypothesis's strategies only when asked for
    if name == "strategies":
        import importlib
        return importlib.import_module(".strategies", __name__)
    raise AttributeError(f"module 'exactspec' has no attribute {name!r}")

__all__ = ["audit", "prove", "Proof", "Refutation", "audit_sampler", "audit_loop", "stand_in", "HorizonWarning", "Counterexample", "EmptySearch", "IncompleteSearch", "audit_statistically", "statistical", "samplers", "assert_lossless", "LossAssertionError", "AuditReport", "Outcome", "Budget", "Rule", "rule", "Step", "TreeStep", "Rng", "models", "drafts", "rules", "laws",
           "theory", "trees", "counterexamples", "strategies", "get_field", "ExactSpecError", "InvalidDistribution", "InexactArithmetic", "BudgetExceeded",
           "RuleError", "ModelError", "UnsupportedRandomness", "__version__"]
__all__ += ["assert_sampler_lossless", "assert_loop_lossless", "IncompleteCheckError", "NotARule"]
