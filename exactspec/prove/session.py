"""A proof's session: the state of one ``es.prove`` call, held in a context variable while it runs.

A :class:`ProofSession` holds the symbolic field in use (sympy's ``K`` and ``QQ``), the memos of its
arithmetic (operations, gcds, atoms' signs and factors, reductions, constants: each bounded, cleared
past ``OPS_LIMIT`` entries) and the stack of deciders of the cells being run. Each
:class:`~exactspec.prove.field.Space` starts one (:func:`start`) in the current context, and
``es.prove`` runs in a copy of its caller's context: a proof never reads another proof's session,
another thread sees its own, and the session ends with the proof. Nothing of the process (builtins,
sympy, other modules' globals) is changed while a proof runs.

>>> s = start(None)
>>> current() is s, s.deciders
(True, [])
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

__all__ = ["ProofSession", "current", "start"]


class ProofSession:
    """One proof's symbolic field, its memos and the deciders of the cells being run (innermost last).

    >>> ProofSession().ops
    {}
    """

    __slots__ = ("K", "QQ", "deciders", "ops", "atoms", "gcds", "small_rings", "reduced", "substitutions",
                 "reduced_polys", "factors", "interned", "powers", "constants", "linear", "raw")

    def __init__(self, K: Any = None) -> None:
        from sympy import QQ  # type: ignore[import-untyped]  # sympy ships no type information
        self.K = K
        self.QQ: Any = QQ           # sympy's rationals (the same object for every proof)
        self.deciders: list = []    # the cells being run, innermost last (``field.decider.active``)
        self.ops: dict = {}
        self.atoms: dict = {}       # a rational function -> (its sign polynomial made monic, or None; the factor's sign)
        self.gcds: dict = {}        # ``cofactors`` results by the pair of polynomials (cleared with ``ops``)
        self.small_rings: dict = {}   # (ring, the generators kept) -> the ring of the variables that occur
        self.reduced: dict = {}     # ``Decider.reduce`` results by (rational function, the cell's equalities)
        self.substitutions: dict = {}   # the composed substitution of each set of equalities
        self.reduced_polys: dict = {}   # ``Decider.reduce_poly`` results
        self.factors: dict = {}     # factorisations of polynomials, products of factors
        self.interned: dict = {}    # one object for each factor met (dict lookups then hit by identity)
        self.powers: dict = {}      # powers of the affine functions substituted (``arith.compose``)
        self.constants: dict = {}   # rational constants as constant rational functions
        self.linear: dict = {}      # a polynomial -> whether its degree is at most 1
        self.raw: dict = {}         # ``a.numer * b.denom - b.numer * a.denom`` by (output, expected) probability

    def forget(self) -> None:
        """Drop every memo (after an interrupted computation: a half-built entry must never be read)."""
        self.K = None
        for name in self.__slots__[3:]:   # every memo (the field, QQ and the active cells stay)
            setattr(self, name, {})


_SESSION: ContextVar[ProofSession] = ContextVar("exactspec_proof_session")


def current() -> ProofSession:
    """The session of the proof running in this context (an empty one is started where none is)."""
    session = _SESSION.get(None)
    if session is None:
        session = start(None)
    return session


def start(K: Any) -> ProofSession:
    """Start a new session for the symbolic field ``K`` in this context (its memos empty) and return it."""
    session = ProofSession(K)
    _SESSION.set(session)
    return session
