"""The line between float rounding and algorithmic bias: one decision for sampler and whole-loop audits.

*Algorithmic* bias is what stays when the same code runs at higher precision. An audit of code that
computes in float32 (or coarser) therefore runs it twice: at its own precision (the law its users
get) and on float64 inputs (float64 arrays and stand-ins, the generator on its float64 lattice).

- **Code that honours the dtype it is handed** (nothing coarser than float64 seen in the float64
  run): ``biased`` iff the float64 run is further from the expected law than float64 rounding can
  cost (``tolerance``, 2**-40 by default), or an outcome the expected law never emits appears at
  either precision; otherwise ``lossless up to <precision> rounding``. A run at its own precision
  further than :data:`ROUNDING_CAP` from the expected law while the float64 run is lossless is a
  precision defect (overflow, underflow, a dtype-dependent branch), reported ``biased``: no float
  rounding on the small instances audits run costs that much.
- **Code that forces float32 internally** (a cast down, a float32 constant: something coarser than
  float64 seen in the float64 run): the two cannot be separated by precision, so the float64 run is
  held to bounds derived from the unit roundoff and the size of the instance, which cannot collapse
  on a tidy instance: within :func:`typical_rounding` (one rounding per entry and position) it is
  ``lossless up to <precision> rounding``; beyond :func:`rounding_allowance` (sixteen) ``biased``;
  in between ``undecided`` (exit 3), never "biased" on rounding alone.

A support violation is always ``biased``, whatever its size.

>>> from fractions import Fraction as F
>>> b = decide(precision="float32", own_tv=F(1, 10 ** 8), own_violations=False, f64_tv=F(0),
...            f64_violations=False, forced=False, tolerance=F64_ALLOWANCE,
...            allowance=rounding_allowance("float32", vocab=3, positions=4))
>>> b.verdict, b.algorithmic_tv
('lossless', Fraction(0, 1))
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = ["F64_ALLOWANCE", "ROUNDING_CAP", "UNIT_ROUNDOFF", "Boundary", "decide", "rounding_allowance", "rounding_cap",
           "typical_rounding", "tolerance_text", "coarser_than_float64"]

#: what float64 rounding may cost a correct implementation on the small instances audits run (TV)
F64_ALLOWANCE = Fraction(1, 2 ** 40)

#: no float32 (or float64) rounding costs more than this on the small instances audits run: a TV above it is never
#: rounding (float16 and bfloat16: :func:`rounding_cap`)
ROUNDING_CAP = Fraction(1, 2 ** 12)

#: the most float16 or bfloat16 rounding may cost on the small instances audits run (their unit roundoffs are 2**-11
#: and 2**-8: a probability of 2/3 alone is off by 1.3e-3 in bfloat16)
_HALF_CAP = Fraction(1, 16)

#: unit roundoff (half an ulp of 1) of each precision
UNIT_ROUNDOFF = {"bfloat16": Fraction(1, 2 ** 8), "float16": Fraction(1, 2 ** 11),
                 "float32": Fraction(1, 2 ** 24), "float64": Fraction(1, 2 ** 53)}

#: the factor between the unit roundoff of one operation and what the allowance grants each (generous:
#: a softmax, a normalisation, a residual and a log/exp each cost a few roundings per entry)
_OPERATIONS_PER_ENTRY = 16


def coarser_than_float64(precision: str | None) -> bool:
    """Whether a precision name is coarser than float64 (None: no float seen, so no).

    >>> coarser_than_float64("float32"), coarser_than_float64("float64"), coarser_than_float64(None)
    (True, False, False)
    """
    return precision is not None and precision != "float64"


def rounding_cap(precision: str) -> Fraction:
    """The most rounding at ``precision`` may cost on any small instance: a TV above it is never that rounding.

    >>> rounding_cap("float32") == ROUNDING_CAP, rounding_cap("bfloat16")
    (True, Fraction(1, 16))
    """
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown precision {precision!r}")
    return ROUNDING_CAP if UNIT_ROUNDOFF[precision] <= UNIT_ROUNDOFF["float32"] else _HALF_CAP


def rounding_allowance(precision: str, *, vocab: int, positions: int) -> Fraction:
    """The most rounding at ``precision`` may cost a correct sampler on an instance of this size (a TV bound).

    Each emitted outcome's probability is built from at most ``positions`` per-position computations
    (a softmax, a ratio, a residual and its normalisation: O(``vocab``) float operations each, every
    one with relative error at most the unit roundoff ``u``), so its relative error is at most
    ``positions * vocab * 16 * u`` and the TV at most that, capped at :func:`rounding_cap`. The
    bound depends on the size of the instance only, never on how tidy its numbers are.

    >>> rounding_allowance("float32", vocab=3, positions=4) == Fraction(16 * 3 * 4, 2 ** 24)
    True
    >>> rounding_allowance("float64", vocab=3, positions=4) < F64_ALLOWANCE
    True
    """
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown precision {precision!r}")
    bound = _OPERATIONS_PER_ENTRY * max(1, vocab) * max(1, positions) * UNIT_ROUNDOFF[precision]
    return min(rounding_cap(precision), bound)


def typical_rounding(precision: str, *, vocab: int, positions: int) -> Fraction:
    """What rounding at ``precision`` typically costs a correct sampler on an instance of this size: one unit
    roundoff per entry and position (:func:`rounding_allowance` grants 16).

    >>> typical_rounding("float32", vocab=3, positions=4) * 16 == rounding_allowance("float32", vocab=3, positions=4)
    True
    """
    return rounding_allowance(precision, vocab=vocab, positions=positions) / _OPERATIONS_PER_ENTRY


def tolerance_text(tolerance: Fraction) -> str:
    """How a tolerance reads in a report: "the 2**-40 floor", "exactness (tolerance 0)", ...

    >>> tolerance_text(F64_ALLOWANCE), tolerance_text(Fraction(0)), tolerance_text(Fraction(1, 10))
    ('the 2**-40 floor', 'exactness (tolerance 0)', 'the tolerance 1/10')
    >>> tolerance_text(Fraction(3, 2 ** 23))
    'the 3 * 2**-23 floor'
    """
    if tolerance == 0:
        return "exactness (tolerance 0)"
    n = tolerance.denominator.bit_length() - 1
    if tolerance.denominator == 1 << n:
        return f"the 2**-{n} floor" if tolerance.numerator == 1 else f"the {tolerance.numerator} * 2**-{n} floor"
    return f"the tolerance {tolerance}"


def _e(x: Fraction) -> str:
    return "0" if x == 0 else f"{float(x):.3g}"


@dataclass(frozen=True)
class Boundary:
    """The float-boundary verdict of one audit: what was run, what each run showed, and why the verdict.

    ``verdict`` is ``"lossless"``, ``"biased"`` or ``"undecided"`` (exit 0, 1, 3); ``algorithmic_tv``
    is the TV of the run the verdict rests on (the float64 run when there is one); ``allowance`` the
    TV that run was held to; ``reason`` one sentence a report prints.
    """

    verdict: str
    reason: str
    precision: str
    forced: bool
    own_tv: Fraction
    f64_tv: Fraction | None
    algorithmic_tv: Fraction
    allowance: Fraction

    @property
    def exit_code(self) -> int:
        """0 lossless, 1 biased, 3 undecided."""
        return {"lossless": 0, "biased": 1}.get(self.verdict, 3)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: exact numbers as ``"p/q"`` strings.

        >>> decide(precision="float64", own_tv=Fraction(0), own_violations=False, f64_tv=None,
        ...        f64_violations=False, forced=False, tolerance=F64_ALLOWANCE,
        ...        allowance=F64_ALLOWANCE).to_dict()["verdict"]
        'lossless'
        """
        return {"verdict": self.verdict, "reason": self.reason, "precision": self.precision, "forced": self.forced,
                "own_tv": str(self.own_tv), "f64_tv": None if self.f64_tv is None else str(self.f64_tv),
                "algorithmic_tv": str(self.algorithmic_tv), "allowance": str(self.allowance)}


def decide(*, precision: str, own_tv: Fraction, own_violations: bool, f64_tv: Fraction | None,
           f64_violations: bool, forced: bool, tolerance: Fraction, allowance: Fraction,
           lifted_tv: Fraction | None = None, lifted_violations: bool = False,
           lifted_how: str | None = None, tolerance_from: str = "float64 rounding",
           measured: Fraction | None = None) -> Boundary:
    """The verdict from a run at the code's own precision and (when it is coarser) a run on float64 inputs.

    ``own_tv`` / ``own_violations``: the run at ``precision`` against the expected law; ``f64_tv`` /
    ``f64_violations``: the float64 run (None when ``precision`` is float64: one run only);
    ``forced``: something coarser than float64 was seen in the float64 run (the code casts down);
    ``tolerance``: what float64 rounding may cost (:data:`F64_ALLOWANCE` by default; 0 demands exactness);
    ``allowance``: :func:`rounding_allowance` at ``precision`` for this instance;
    ``lifted_tv`` / ``lifted_violations``: for code that casts down, a run with its casts lifted to float64 in which
    nothing coarser than float64 was met any more (None when there is none): the same algorithm at float64, which
    separates bias from rounding exactly, as the float64 run does for code that honours its dtype.
    ``lifted_how``: what ``lifted_tv`` measured instead, when it is not such a run (for code that rounds its inputs
    where no dtype shows it: its TV to the reference sampler on inputs already rounded to ``precision``). ``tolerance_from``: what
    ``measured``: what rounding at ``precision`` costs a correct reference sampler on this very instance (None: not
    measured); code whose casts cannot be lifted is then lossless only within four times that (0 on an instance
    exactly representable at ``precision``), never within the size-derived typical rounding alone.
    ``tolerance_from``: what ``tolerance`` stands for, in the reason (a floor the audit's own enumeration resolves to, when it is coarser
    than float64 rounding: :meth:`~exactspec.samplers.Adapter.resolution_floor`).

    >>> F = Fraction
    >>> decide(precision="float32", own_tv=F(1, 10**8), own_violations=False, f64_tv=F(3, 10**9),
    ...        f64_violations=False, forced=False, tolerance=F64_ALLOWANCE, allowance=F(1, 10**5)).verdict
    'biased'
    >>> decide(precision="float32", own_tv=F(1, 10**8), own_violations=False, f64_tv=F(1, 10**8),
    ...        f64_violations=False, forced=True, tolerance=F64_ALLOWANCE, allowance=F(1, 10**5)).verdict
    'lossless'
    >>> decide(precision="float32", own_tv=F(1, 10**6), own_violations=False, f64_tv=F(1, 10**6),
    ...        f64_violations=False, forced=True, tolerance=F64_ALLOWANCE, allowance=F(1, 10**5)).verdict
    'undecided'
    >>> decide(precision="float32", own_tv=F(1, 10**4), own_violations=False, f64_tv=F(1, 10**4),
    ...        f64_violations=False, forced=True, tolerance=F64_ALLOWANCE, allowance=F(1, 10**5)).verdict
    'biased'
    >>> decide(precision="float32", own_tv=F(1, 10**8), own_violations=False, f64_tv=F(3, 10**9),
    ...        f64_violations=False, forced=False, tolerance=F(1, 2**22), allowance=F(1, 10**5),
    ...        tolerance_from="what the adapter resolves").reason.split(";")[0]
    'the same code on float64 inputs is within what the adapter resolves (TV 3e-09 <= the 2**-22 floor)'
    """
    def out(verdict: str, reason: str, algorithmic: Fraction, allowed: Fraction) -> Boundary:
        return Boundary(verdict, reason, precision, forced, own_tv, f64_tv, algorithmic, allowed)

    if own_violations or f64_violations or lifted_violations:
        where = " and ".join(w for w, v in ((f"at {precision}", own_violations), ("at float64", f64_violations),
                                            ("with its casts lifted to float64", lifted_violations))
                             if v) if f64_tv is not None else f"at {precision}"
        return out("biased", f"a support violation {where}: an outcome the expected law never emits",
                   f64_tv if f64_tv is not None else own_tv, tolerance)
    if f64_tv is None:      # float64 code: one run, held to float64 rounding
        if own_tv <= tolerance:
            return out("lossless", "TV == 0 exactly" if own_tv == 0 else
                       f"within {tolerance_from}: TV {_e(own_tv)} <= {tolerance_text(tolerance)}", own_tv, tolerance)
        return out("biased", f"algorithmic: the float64 code is TV {_e(own_tv)} from the expected law, beyond "
                   f"{tolerance_from} ({tolerance_text(tolerance)})", own_tv, tolerance)
    cap = rounding_cap(precision)
    if not forced:
        if f64_tv > tolerance:
            return out("biased", f"algorithmic: the same code on float64 inputs is TV {_e(f64_tv)} from the expected "
                       f"law, beyond {tolerance_from} ({tolerance_text(tolerance)}); at {precision} TV {_e(own_tv)}",
                       f64_tv, tolerance)
        if own_tv > cap:
            return out("biased", f"precision defect: lossless on float64 inputs (TV {_e(f64_tv)}) but TV {_e(own_tv)} "
                       f"at {precision}, more than {precision} rounding can cost (at most {_e(cap)})",
                       own_tv, cap)
        return out("lossless", f"the same code on float64 inputs is within {tolerance_from} (TV {_e(f64_tv)} <= "
                   f"{tolerance_text(tolerance)}); the TV at {precision}, {_e(own_tv)}, is {precision} rounding",
                   f64_tv, tolerance)
    if lifted_tv is not None:   # the code's casts lifted: the same algorithm at float64 separates them exactly
        if lifted_how is not None and lifted_tv <= tolerance and max(own_tv, f64_tv) <= cap:
            return out("lossless", f"the code rounds what it is handed to {precision}: {lifted_how} (TV "
                       f"{_e(lifted_tv)} <= {tolerance_text(tolerance)}), so its TV as it runs, {_e(own_tv)}, is "
                       f"{precision} rounding of its inputs", lifted_tv, tolerance)
        if lifted_tv > tolerance:
            return out("biased", f"algorithmic: the code computes in {precision} whatever it is handed, and with its "
                       f"casts lifted to float64 it is TV {_e(lifted_tv)} from the expected law, beyond "
                       f"{tolerance_from} ({tolerance_text(tolerance)}); at {precision} TV {_e(own_tv)}", lifted_tv, tolerance)
        if max(own_tv, f64_tv) > cap:
            return out("biased", f"precision defect: lossless with its casts lifted to float64 (TV {_e(lifted_tv)}) "
                       f"but TV {_e(max(own_tv, f64_tv))} as it casts to {precision}, more than {precision} rounding "
                       f"can cost (at most {_e(cap)})", max(own_tv, f64_tv), cap)
        return out("lossless", f"the code computes in {precision} whatever it is handed; with its casts lifted to "
                   f"float64 it is within {tolerance_from} (TV {_e(lifted_tv)} <= {tolerance_text(tolerance)}), so "
                   f"its TV as it runs, {_e(own_tv)}, is {precision} rounding", lifted_tv, tolerance)
    # the code computes at `precision` whatever it is handed: rounding and bias separated by bounds only
    typical = allowance / _OPERATIONS_PER_ENTRY
    if measured is not None and 4 * measured < typical:
        typical = 4 * measured
        if max(own_tv, f64_tv) <= typical:
            return out("lossless", f"the code computes in {precision} whatever it is handed; its TV {_e(f64_tv)} on "
                       f"float64 inputs ({_e(own_tv)} as it runs) is within four times what {precision} rounding "
                       f"costs a correct reference sampler on this instance ({_e(measured)}, measured)",
                       f64_tv, typical)
        if own_tv > typical and f64_tv <= typical:     # the run as it ships is what rounding cannot explain
            f64_tv = own_tv
    if f64_tv <= typical:
        return out("lossless", f"the code computes in {precision} whatever it is handed; its TV {_e(f64_tv)} on "
                   f"float64 inputs is within what {precision} rounding typically costs on this instance "
                   f"({_e(typical)}); a bias smaller than that would not show", f64_tv, typical)
    if f64_tv > allowance:
        return out("biased", f"the code computes in {precision} whatever it is handed, and its TV {_e(f64_tv)} on "
                   f"float64 inputs is more than {precision} rounding can cost on this instance "
                   f"(at most {_e(allowance)})", f64_tv, allowance)
    return out("undecided", f"undecided within {precision} rounding: the code computes in {precision} whatever it "
               f"is handed, and its TV {_e(f64_tv)} lies between what {precision} rounding typically costs on this "
               f"instance ({_e(typical)}) and the most it can cost ({_e(allowance)})", f64_tv, allowance)
