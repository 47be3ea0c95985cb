"""Symbolic probabilities: :class:`SymNum`, their field and the symbolic models that hand them out.

A :class:`SymNum` wraps a sympy rational function (``sympy.polys.fields.FracElement``) in the free
variables of a symbolic target and draft. Arithmetic stays symbolic (:mod:`.arith`); every comparison,
truth test or equality asks the active :class:`~.decider.Decider`. An operation the prover cannot follow
(``float()``, ``exp``, an index, a hash) raises :class:`~exactspec.errors.UnsupportedSymbolic` naming the
rule's line (:func:`where`).
"""

from __future__ import annotations

import os
import sys
from fractions import Fraction
from types import FrameType
from typing import Any

from ...errors import InexactArithmetic, UnhashableSymbolic, UnsupportedSymbolic
from ...fields import Field
from ...models import Model
from ..session import current
from . import arith
from .arith import constant
from .decider import active

__all__ = ["SymNum", "SymField", "SymbolicModel", "where", "nonzero", "unsupported"]

#: the prove package's folder, the engine's and the fields module: frames :func:`where` skips
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP = (_PKG, os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "enumerate") + os.sep,
         os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "fields.py"))


def where() -> str:
    """``file:line in function`` of the first frame outside the prover and the engine."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        lib = os.sep + "mpmath" + os.sep in name or os.sep + "sympy" + os.sep in name
        if not lib and not name.startswith(_SKIP[0]) and not name.startswith(_SKIP[1]) and name != _SKIP[2]:
            break
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    text = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    helpers = os.path.join(os.path.dirname(_PKG.rstrip(os.sep)), "laws.py")
    if os.path.abspath(frame.f_code.co_filename) == helpers:   # a helper of es.laws: name its caller too
        outer = frame.f_back
        while outer is not None and os.path.abspath(outer.f_code.co_filename) == helpers:
            frame, outer = outer, outer.f_back
        text += f" (es.laws.{frame.f_code.co_name})"
        if outer is not None:
            text += f", called from {outer.f_code.co_filename}:{outer.f_lineno} in {outer.f_code.co_name}"
    return text


def unsupported(op: str) -> Any:
    raise UnsupportedSymbolic(f"{op} on a symbolic probability (at {where()}): es.prove follows only rational "
                              "arithmetic (+ - * /, integer powers) and comparisons; use es.audit on instances")


def nonzero(f: Any) -> None:
    """Refuse a division by a quantity that is 0 on the cell (forking where it may be)."""
    if isinstance(f, int) or not hasattr(f, "numer"):
        if not f:
            raise ZeroDivisionError("division by zero")
        return
    if not active().decide(f, "!="):
        raise ZeroDivisionError(f"division by a symbolic quantity that is 0 on this cell (at {where()})")


class SymNum:
    """A probability that is a rational function of the symbolic laws' entries."""

    __slots__ = ("f",)

    def __init__(self, f: Any) -> None:
        self.f = f

    # conversion of the other operand
    @staticmethod
    def _other(x: Any, op: str) -> Any:
        t = type(x)
        if t is SymNum:
            return x.f
        if t is int or t is bool or t is Fraction:
            return constant(x)
        if isinstance(x, float):
            raise InexactArithmetic(f"a float ({x!r}) met a symbolic probability in {op} (at {where()}); "
                                    "es.prove is exact: use Fraction or int constants (step.number)")
        num, den = getattr(x, "numerator", None), getattr(x, "denominator", None)
        if num is not None and den is not None and not isinstance(x, float):
            try:
                session = current()
                return session.K(session.QQ(int(num), int(den)))
            except Exception:
                pass
        return NotImplemented

    def __add__(self, o: Any) -> Any:
        o = SymNum._other(o, "+")
        return NotImplemented if o is NotImplemented else SymNum(arith.op("+", self.f, o))

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        o = SymNum._other(o, "-")
        return NotImplemented if o is NotImplemented else SymNum(arith.op("-", self.f, o))

    def __rsub__(self, o: Any) -> Any:
        o = SymNum._other(o, "-")
        return NotImplemented if o is NotImplemented else SymNum(arith.op("-", o, self.f))

    def __mul__(self, o: Any) -> Any:
        o = SymNum._other(o, "*")
        return NotImplemented if o is NotImplemented else SymNum(arith.op("*", self.f, o))

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Any:
        o = SymNum._other(o, "/")
        if o is NotImplemented:
            return NotImplemented
        nonzero(o)
        return SymNum(arith.op("/", self.f, o))

    def __rtruediv__(self, o: Any) -> Any:
        o = SymNum._other(o, "/")
        if o is NotImplemented:
            return NotImplemented
        nonzero(self.f)
        return SymNum(arith.op("/", o, self.f))

    def __neg__(self) -> "SymNum":
        return SymNum(-self.f)

    def __pos__(self) -> "SymNum":
        return self

    def __abs__(self) -> "SymNum":
        return self if self >= 0 else -self

    def __pow__(self, k: Any) -> "SymNum":
        if type(k) is int:
            if k < 0:
                nonzero(self.f)
            return SymNum(self.f ** k)
        return unsupported(f"** {k!r} (a power that is not an integer)")

    # comparisons: each is a decision on the current cell
    def _cmp(self, o: Any, op: str) -> Any:
        o = SymNum._other(o, op)
        if o is NotImplemented:
            return NotImplemented
        return active().decide(arith.op("-", self.f, o), op)

    def __lt__(self, o: Any) -> Any:
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> Any:
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> Any:
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> Any:
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        if not isinstance(o, (SymNum, int, Fraction)):   # a subclass (an all-vocabulary class entry) compares too
            if isinstance(o, float):
                SymNum._other(o, "==")
            return False
        return self._cmp(o, "==")

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        r = self.__eq__(o)
        return r if r is NotImplemented else not r

    def __bool__(self) -> bool:
        return active().decide(self.f, "!=")

    def __hash__(self) -> int:
        raise UnhashableSymbolic(f"hash() of a symbolic probability, a set member or a dict key (at {where()}): "
                                 "whether two probabilities are equal depends on the cell; es.prove follows "
                                 "comparisons, not hashes; use es.audit on instances")

    # what the prover cannot follow
    def __float__(self) -> float:
        return unsupported("float()")

    def __int__(self) -> int:
        return unsupported("int()")

    def __index__(self) -> int:
        return unsupported("use as an index")

    def __round__(self, n: Any = None) -> Any:
        return unsupported("round()")

    def __floor__(self) -> Any:
        return unsupported("floor()")

    def __ceil__(self) -> Any:
        return unsupported("ceil()")

    def __complex__(self) -> Any:
        return unsupported("complex()")

    def exp(self) -> Any:
        return unsupported("exp (transcendental)")

    def log(self) -> Any:
        return unsupported("log (transcendental)")

    def sqrt(self) -> Any:
        return unsupported("sqrt")

    @property
    def _mpf_(self) -> Any:   # mpmath asks for this before converting: refuse, naming the rule's line
        return unsupported("conversion to an mpmath number (a transcendental or floating-point operation)")

    def __repr__(self) -> str:
        return f"SymNum({self.f.as_expr()})"

    __str__ = __repr__


class SymField(Field):
    """The field of :class:`SymNum`: exact; rational constants become constant rational functions."""

    name = "symbolic"
    exact = True
    native = True   # the symbolic models hand out SymNum tuples already

    def __init__(self, K: Any) -> None:
        self.K = K
        self.zero = SymNum(K(0))
        self.one = SymNum(K(1))

    def convert(self, x: Fraction) -> SymNum:
        return SymNum(self.K(current().QQ(x.numerator, x.denominator)))

    def check(self, x: Any, what: str) -> Any:
        t = type(x)
        if t is SymNum:
            return x
        if t is int:
            return SymNum(self.K(x))
        if t is Fraction:
            return self.convert(x)
        if isinstance(x, float):
            raise InexactArithmetic(f"{what} is the float {x!r} (at {where()}); es.prove is exact: use Fraction or int")
        if hasattr(x, "numerator") and hasattr(x, "denominator"):
            return self.convert(Fraction(int(x.numerator), int(x.denominator)))
        raise InexactArithmetic(f"{what} is {x!r} of type {t.__name__} (at {where()}); es.prove takes rationals")

    def describe(self) -> str:
        return "symbolic (rational functions of the laws' entries; sympy + z3)"


class SymbolicModel(Model):
    """A model whose laws are tuples of :class:`SymNum` (one law per position, the last one repeated)."""

    def __init__(self, vocab: int, laws: list, order: int | None, name: str, n0: int = 0) -> None:
        super().__init__(vocab, order, name)
        self._laws, self._n0 = laws, n0

    def __call__(self, context: Any = ()) -> tuple:
        if len(self._laws) == 1:
            return self._laws[0]
        if self.order == 1:   # the order-1 table family: one law per previous token
            return self._laws[context[-1]]
        return self._laws[min(len(context) - self._n0, len(self._laws) - 1)]

    law = __call__
