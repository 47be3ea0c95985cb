"""Proofs for all distributions: ``es.prove`` runs a rule over symbolic target and draft laws.

The public names: :func:`prove`, its verdicts :class:`Proof` and :class:`Refutation`,
:func:`default_family`, and the errors a proof may end with (:class:`UnsupportedSymbolic`,
:class:`SolverUnknown`, :class:`AbstractionRefused`, :class:`AbstractionDisagrees`, all defined in
:mod:`exactspec.errors`).

The layout, by concept:

- :mod:`.api`: :func:`prove` (arguments, then the cells here or on worker processes);
  :mod:`.results`: the verdicts; :mod:`.families`: the families of symbolic laws and the default one;
- :mod:`.session`: a proof's state (:class:`~.session.ProofSession`: memos, the active cells), held in a
  context variable for the duration of one call;
- :mod:`.field`: the symbolic field (rational functions of the laws' entries, the decider of a cell and
  its z3 solver, the symbolic models);
- :mod:`.cells`: the engine run cell by cell, and a refutation's witness (always replayed through the
  exact engine); :mod:`.workers`: the cells split over worker processes, merged in order;
- :mod:`.all_vocab`: ``vocab="all"``, the abstraction of every vocabulary size.

Thread safety: :func:`prove` may be called from several threads at once. Each call runs in a copy of
its caller's context with a proof session of its own (memos, the active cells, the all-vocabulary
abstraction's session and ``es.laws``' hook are context variables), each symbolic space has its own z3
context, and nothing of the process (builtins, sympy, other modules' globals) is patched while a proof
runs. The one process-wide structure is the worker processes' table of proof setups
(:data:`.workers._WORKER_SETUPS`), keyed by each proof's unique nonce and guarded by a lock. A
:class:`Proof` or :class:`Refutation` is plain data once returned; symbolic numbers (``SymNum``) are
meaningful only inside the call that made them.

>>> import exactspec as es
>>> es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1,
...          family="context_free").exit_code
0
"""

from ..errors import AbstractionDisagrees, AbstractionRefused, SolverUnknown, UnsupportedSymbolic
from .api import prove
from .families import default_family
from .results import Proof, Refutation

__all__ = ["prove", "Proof", "Refutation", "default_family", "UnsupportedSymbolic", "SolverUnknown",
           "AbstractionRefused", "AbstractionDisagrees"]
