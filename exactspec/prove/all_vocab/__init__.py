"""``es.prove(..., vocab="all")``: one proof for every vocabulary size, by exchangeable unnamed tokens.

The abstraction (the soundness argument is in ``docs/proofs-scale-out.md``, "Every vocabulary size"):

- ``tokens`` *named* tokens ``0 .. tokens - 1``, each with its own target and draft probability
  (``p_a``, ``q_a``): every outcome of the horizon is, up to renaming, a sequence over them (which
  of its tokens coincide is part of the outcome).
- every other token of the vocabulary is *unnamed*. The unnamed tokens are split into *classes*
  by the signs of a few predicates on a token's own probabilities (``p - q``, ``q``, ...). A class
  ``C`` carries its total masses ``P_C``, ``Q_C`` (any number of tokens, possibly none) and, for each
  token the rule draws from it, that token's probabilities ``p_C^k``, ``q_C^k``, constrained by the
  class's signs and by ``0 <= p_C^k <= P_C``, ``0 <= q_C^k <= Q_C``.
- the rule runs (its rng form, on an exact enumeration of its draws written for this abstraction) on
  laws whose class entries stand for *every* token of the class: arithmetic on them is per token
  (entry with entry of the same class, or with a number that is the same for every token: ``*``, ``/``;
  ``+``/``-`` with 0 only), a comparison on them must have the same answer for every token of the
  class (else the class is split by that predicate and the proof starts again), and vocabulary-wide
  sums go through ``es.laws`` (``normalize``, ``residual``), which add each class's total. A draw that
  lands in a class gives a token ``k`` of it, with weight its own entry; a branch's weight must then
  be linear and homogeneous in each drawn token's ``(p, q)``, so that its sum over the tokens of the
  class is the same expression in the totals.
- anything else (``len`` of a law, ``step.vocab``, indexing a law by a position of the unnamed part,
  argmax or max over the vocabulary, comparisons mixing an unnamed token's probability with another
  quantity, two drawn unnamed tokens whose equality matters to a named outcome, ``rng.uniform``) is
  refused with :class:`AbstractionRefused` (exit 2), never proven.

A cell where an output probability may differ from the target's is replayed exactly (``es.audit``)
at a concrete vocabulary: each class becomes one token with its totals. Only that replay refutes.

Modules: :mod:`.state` (limits, control flow, the proof's session), :mod:`.space` (layout, symbols,
solvers), :mod:`.decider` (answers that hold for a whole class), :mod:`.values` (class entries, tokens,
abstract laws, es.laws' hook), :mod:`.run` (the rule's run on one cell), :mod:`.proof` (the proof).
"""

from __future__ import annotations

from ...errors import AbstractionDisagrees, AbstractionRefused
from .proof import prove_all_vocab

__all__ = ["AbstractionRefused", "AbstractionDisagrees", "prove_all_vocab"]
