"""Lazy random values real samplers compute with: uniforms, exponential races and lazy comparison results.

It is kept as one module: the lazy uniforms, the exponential races and the lazy comparison results are one
algebra whose operators return one another's types, and the exact race laws are read off those types.

Three kinds of values, shared by the numpy, Python and torch interception:

* :class:`LazyUniform` — a uniform draw (an affine function of one) known only through
  comparisons, as :class:`exactspec.enumerate.rng.Uniform`, which it extends: it can also be
  compared with another affine function of *the same* uniform (``np.searchsorted`` compares
  its key with itself), with an array of thresholds (one exact comparison per entry, in
  order), and it turns into a race value under ``log``, ``**`` and ``exp`` (below).
* :class:`RaceValue` — a strictly monotone function ``h(E / w)`` of an exponential draw ``E``
  (``E = -log(u)`` for a uniform ``u``) with an exact weight ``w``. Every spelling of the
  Gumbel-max and exponential races is such a value: ``-log(-log(u))`` is ``-log(E)``,
  ``log(p) + g`` is ``-log(E / p)``, ``log(u) / p`` is ``-E / p``, ``u ** (1 / p)`` is
  ``exp(-E / p)``, ``p / E`` is ``(E / p) ** -1``. When all values of a race share the same
  ``h`` and ``h`` decreases, their argmax is the smallest ``E_i / w_i``: a draw from
  ``w / sum(w)`` (:func:`race_winner`), and an argmax scan (``np.argmax``, ``max(..., key=)``)
  compares each new value with the running winner, which wins with probability
  ``w_new / (w_new + sum of the weights seen)`` (the minimum of exponentials is memoryless).
  A race value compared with a number, ``h(E / w) < t``, is decided on its uniform:
  ``u = exp(-E)`` against ``exp(-w * h^-1(t))`` (``log(u) < t`` is ``u < exp(t)``). On a
  lattice rng model that is exact (the lattice points below the threshold are counted with
  interval arithmetic at rising precision, a threshold on a lattice point is confirmed
  symbolically). A value compared with numbers cannot enter an argmax afterwards, nor the
  reverse. The arithmetic is ideal (real numbers, as for every lazy uniform); the thresholds and
  weights are the exact values of the floats the code hands over.

  Two probabilities are irrational in general, so they cannot be exact rationals: the weights
  ``exp(c)`` of a Gumbel race over float logits ``c`` and, on the continuous rng model, a
  threshold ``exp(t)``. They are rounded to :data:`RACE_PRECISION` (320) bits, far below any
  float32 or float64 rounding, exact whenever the value is a small rational, and each rounding
  is counted on the audit's session (``Session.approximations``). A transformation that leaves
  the family (``clamp``, ``log(u + eps)``, ``sin``) raises UnsupportedRandomness naming the
  operation and the sampler's line.
* :class:`LazyBit` — a comparison result (or a function of some) computed only when read, so
  a vector of comparisons forks only the entries the code reads, in the order it reads them.

>>> from fractions import Fraction as F
>>> from exactspec.enumerate.rng import enumerate_program
>>> from exactspec.fields import get_field
>>> def gumbel_max(rng):
...     g = [-((-lazy(rng.uniform()).log()).log()) for _ in range(3)]    # -log(-log(u))
...     scores = [g[0] + 0.0, g[1] + 0.0, g[2] + float("-inf")]          # logits log(1/2), log(1/2), log(0)
...     return max(range(3), key=lambda i: scores[i])                     # an argmax scan
>>> enumerate_program(gumbel_max, get_field(backend="python")) == {0: F(1, 2), 1: F(1, 2)}
True
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Sequence

import contextvars

from ...enumerate.rng import NATIVE, NATIVE64, Lattice, Uniform
from ...errors import UnsupportedRandomness
from ...fields import caller_site

__all__ = ["LazyUniform", "RaceValue", "LazyBit", "lazy", "exponential", "gumbel", "race_winner", "race_outcome",
           "race_law"]

_INF = math.inf
#: bits of precision for the irrational weights exp(c) of a race over float logits
RACE_PRECISION = 320


#: where an audit counts the probabilities it rounded (what -> count); set by the interception for each audit
APPROXIMATIONS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("exactspec_approximations",
                                                                              default=None)


def _refuse(what: str, why: str) -> UnsupportedRandomness:
    return UnsupportedRandomness(f"{what} (at {caller_site(2)}): {why}")


def _number(x: Any) -> Any:
    """A real operand as an exact Fraction, or the float ``inf``/``-inf``; NaN raises."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    try:
        f = float(x)
    except (TypeError, ValueError):
        raise _refuse(f"arithmetic between a random value and {type(x).__name__}",
                      "only numbers (or tensors/arrays of numbers) can be combined with a lazy random value") from None
    if f != f:
        raise _refuse("a NaN combined with a random value", "the result is NaN")
    if f in (_INF, -_INF):
        return f
    if not isinstance(x, float) and hasattr(x, "numerator") and hasattr(x, "denominator"):
        return Fraction(int(x.numerator), int(x.denominator))      # an exact rational (gmpy2 mpq, ...)
    hit = _EXACT.get(f)     # the same float operands come on every replay of a sampler call
    if hit is None:
        if len(_EXACT) > 1 << 16:
            _EXACT.clear()
        hit = _EXACT[f] = Fraction(f)
    return hit


#: float -> its exact rational (:func:`_number`)
_EXACT: dict = {}


def _sign(x: Any) -> int:
    return (x > 0) - (x < 0)


# -- lazy uniforms ----------------------------------------------------------------------------------------

class _RaceOwned:
    """Stands in for the rng of a uniform's cell once the uniform became a race value.

    Comparisons of the uniform still go to the real rng (they are exact), but mark its race value
    as read: a later argmax over it is refused; after an argmax, comparisons are refused.
    """

    __slots__ = ("rng", "source", "lattice")

    def __init__(self, rng: Any, source: "_Source") -> None:
        self.rng, self.source, self.lattice = rng, source, getattr(rng, "lattice", None)   # the run's rng model

    def number(self, x: Any, what: str) -> Any:
        return self.rng.number(x, what)

    def _compare(self, cell: Any, t: Any, strict: bool = True) -> bool:
        if self.source.raced:
            raise _refuse("comparing a uniform that also entered a race (an argmax over log, ** or exp of it)",
                          "its value and the race's outcome are dependent; the audit follows a uniform either "
                          "through comparisons or through one race, not both")
        self.source.read = True
        return self.rng._compare(cell, t, strict)


class LazyUniform(Uniform):
    """A lazy uniform that also compares with itself and with arrays, and enters races (see the module docstring).

    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> import numpy as np
    >>> law = enumerate_program(lambda rng: int(np.searchsorted(np.array([0.25, 1.0]), lazy(rng.uniform()))),
    ...                         get_field(backend="python"), exact_floats=True)
    >>> sorted(law.items())
    [(0, Fraction(1, 4)), (1, Fraction(3, 4))]
    """

    __slots__ = ()

    def __lt__(self, t: Any) -> Any:
        if _scan_pair(self, t):     # an argmin scan over uniforms (np.argmin(rng.random(n)), min(us))
            return self.race() < lazy(t).race()
        return _elementwise(t, lambda x: self < x) if _many(t) else self._cmp(t, True, "<")

    def __le__(self, t: Any) -> Any:
        if _scan_pair(self, t):
            return self.race() <= lazy(t).race()
        return _elementwise(t, lambda x: self <= x) if _many(t) else self._cmp(t, False, "<=")

    def __gt__(self, t: Any) -> Any:
        if _scan_pair(self, t):     # an argmax scan over uniforms (np.argmax(rng.random(n)), max(us))
            return self.race() > lazy(t).race()
        return _elementwise(t, lambda x: self > x) if _many(t) else not self._cmp(t, False, ">")

    def __ge__(self, t: Any) -> Any:
        if _scan_pair(self, t):
            return self.race() >= lazy(t).race()
        return _elementwise(t, lambda x: self >= x) if _many(t) else not self._cmp(t, True, ">=")

    def _cmp(self, t: Any, strict: bool, op: str) -> Any:
        if isinstance(t, Uniform):
            if t._cell is not self._cell:
                raise _refuse(f"{op} between two different uniforms", "only comparisons of a uniform with numbers "
                              "(or with an affine function of the same uniform) can be enumerated (the method "
                              "cdf.searchsorted(keys) compares its keys with each other: call np.searchsorted(cdf, "
                              "keys), which the audit follows, or search each uniform on its own)")
            return Uniform(self._cell, self._a - t._a, self._b - t._b)._cmp(0, strict, op)
        if isinstance(t, RaceValue):
            raise _refuse(f"{op} between a uniform and a race value", "a race value is compared with numbers or, in "
                          "an argmax scan, with values of its own race only")
        return super()._cmp(t, strict, op)

    def _new(self, a: Any, b: Any) -> "LazyUniform":
        return LazyUniform(self._cell, a, b)

    def __mul__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self * x, keep=True)
        c = self._num(c, "*")
        return self._new(self._a * c, self._b * c)

    __rmul__ = __mul__

    def __truediv__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self / x, keep=True)
        if isinstance(c, RaceValue):
            raise _refuse("dividing a uniform by a race value", "not a race")
        c = self._num(c, "/")
        if c == 0:
            raise ZeroDivisionError("uniform divided by 0")
        return self._new(self._a / c, self._b / c)

    def __add__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self + x, keep=True)
        c = self._num(c, "+")
        return self._new(self._a, self._b + c)

    __radd__ = __add__

    def __sub__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self - x, keep=True)
        c = self._num(c, "-")
        return self._new(self._a, self._b - c)

    def __rsub__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: x - self, keep=True)
        c = self._num(c, "-")
        return self._new(-self._a, c - self._b)

    def __neg__(self) -> "LazyUniform":
        return self._new(-self._a, -self._b)

    # -- into races: u = exp(-E) with E ~ Exp(1) --------------------------------------------------------------
    def race(self) -> "RaceValue":
        """This uniform as the race value ``exp(-E)`` (``E = -log u``).

        An argmax over it needs it fresh (never compared, continuous rng model); comparisons with
        numbers work either way.
        """
        if (self._a, self._b) not in ((1, 0), (-1, 1)):   # u and 1 - u are uniform; other affine images are not
            raise _refuse("log, ** or exp of an affine function of a uniform (u * a + b)",
                          "only u and 1 - u enter a race exactly (log(u + eps) changes the law by an amount of order "
                          "eps that the audit cannot neglect); compute the race on the uniform itself")
        flip = self._a != 1
        cell = self._cell
        owner = cell.rng
        if isinstance(owner, _RaceOwned):
            source = owner.source
            if source.flip != flip:
                raise _refuse("both u and 1 - u of one uniform in race values", "they are dependent draws")
        else:
            source = _Source(owner, cell, flip)
            source.fresh = _untouched(cell)
            cell.rng = _RaceOwned(owner, source)  # type: ignore[assignment]  # stands in for the cell's PathRng
        return RaceValue(source, ("X", Fraction(1), -1, Fraction(0)), Fraction(1), Fraction(0))

    def log(self) -> "RaceValue":
        return self.race().log()

    def exp(self) -> Any:
        return self._unsupported("exp")

    def __pow__(self, t: Any) -> Any:
        if _is_array(t):
            return _elementwise(t, lambda x: self ** x, keep=True)
        return self.race() ** t

    def log1p(self) -> Any:
        return self._unsupported("log1p")


def _scan_pair(a: Uniform, b: Any) -> bool:
    """Two different uniforms compared as race values: each u or 1 - u of a fresh cell (or one already in a race)."""
    if not isinstance(b, Uniform) or b._cell is a._cell:
        return False

    def ok(u: Uniform) -> bool:
        owner = u._cell.rng
        return (u._a, u._b) in ((1, 0), (-1, 1)) and (isinstance(owner, _RaceOwned) or _untouched(u._cell))
    return ok(a) and ok(b)


def _untouched(cell: Any) -> bool:
    """A uniform never compared yet, whose race law is the ideal one: a continuous draw, or under the ``native``
    rng model a draw on its generator's lattice (its race is taken as that of an ideal continuous draw; the
    lattice's own ties and its point 0 are not followed into an argmax, see docs/samplers.md)."""
    if getattr(cell, "cond", None) is not None:     # decided jointly with a pending draw: narrowed now
        cell.cond()
    lat = getattr(cell, "lat", None)
    if lat is None:
        return cell.lo == 0 and cell.hi == 1
    owner = cell.rng.rng if isinstance(cell.rng, _RaceOwned) else cell.rng
    return getattr(owner, "lattice", None) in (NATIVE, NATIVE64) and cell.lo == lat.kmin and cell.hi == lat.kmax


def lazy(u: Uniform) -> LazyUniform:
    """The :class:`LazyUniform` view of an engine uniform (same cell, same affine map).

    >>> from exactspec.enumerate.rng import PathRng
    >>> from exactspec.fields import get_field
    >>> u = lazy(PathRng((), 1, get_field(backend="python"), [], {}).uniform())
    >>> (u <= u, u < u)
    (True, False)
    """
    if isinstance(u, LazyUniform) or not isinstance(u, Uniform):
        return u    # already lazy, or a real float (a sampling rng, as the statistical audit uses)
    return LazyUniform(u._cell, u._a, u._b)


def _is_array(x: Any) -> bool:
    shape = getattr(x, "shape", None)      # an array or tensor with dimensions: the result has its shape
    return shape is not None and len(tuple(shape)) > 0 and not isinstance(x, (Uniform, RaceValue))


def _many(t: Any) -> bool:
    """A threshold that is an array, tensor or list of several numbers (compared entry by entry)."""
    return _is_array(t) or isinstance(t, (list, tuple))


def _elementwise(t: Any, f: Callable[[Any], Any], keep: bool = False) -> Any:
    """``f`` applied to each entry of an array or tensor ``t``, in row-major order."""
    import numpy as np
    torch = _torch()
    if torch is not None and isinstance(t, torch.Tensor):
        vals = t.detach().cpu().double().numpy()
        out = np.empty(vals.shape, dtype=object)
        for idx in np.ndindex(*vals.shape):
            out[idx] = f(float(vals[idx]))
        if keep:
            return out
        return torch.from_numpy(out.astype(bool))
    if isinstance(t, (list, tuple)):
        return [f(x) for x in t]
    arr = np.asarray(t)
    out = np.empty(arr.shape, dtype=object)
    for idx in np.ndindex(*arr.shape):
        out[idx] = f(arr[idx])
    return out if keep else out.astype(bool)


def _torch() -> Any:
    import sys
    return sys.modules.get("torch")


# -- races ------------------------------------------------------------------------------------------------

class _Source:
    """One exponential draw ``E``: of a uniform's cell (``E = -log u``, or ``-log(1 - u)`` with ``flip``), or
    of an ``exponential_()`` entry, a numpy exponential or Gumbel (a uniform cell is made for it when it is
    first compared with a number).

    ``fresh``: its whole law is still unknown (an argmax may use it); ``read``: compared with a
    number (no argmax may use it since); ``raced``: used in an argmax or a scan (nothing else may).
    """

    __slots__ = ("rng", "cell", "flip", "fresh", "read", "raced", "scan")

    def __init__(self, rng: Any, cell: Any = None, flip: bool = False) -> None:
        self.rng, self.cell, self.flip = rng, cell, flip
        self.fresh, self.read, self.raced = True, False, False
        self.scan: _Scan | None = None

    def usable(self) -> bool:
        return self.fresh and not self.read and not self.raced

    def below(self, threshold: Callable[[int], Any], strict: bool) -> bool:
        """Decide ``u < X`` (``<=`` when not ``strict``) for this draw's uniform ``u = exp(-E)``, forking.

        ``threshold(prec)`` encloses the (generally irrational) ``X`` in an mpmath interval at
        ``prec`` bits. On a lattice rng model the number of lattice points below ``X`` is decided
        exactly (rising precision; an ``X`` on a lattice point is confirmed by exact symbolic
        arithmetic, or the comparison is refused); on the continuous model the fork's
        probability is ``X`` rounded to :data:`RACE_PRECISION` bits.
        """
        if self.raced:
            raise _refuse("comparing a race value that was used in an argmax", "its value and the argmax are "
                          "dependent; the audit follows a race value either into comparisons or into one argmax")
        self.read = True
        if self.cell is None:
            self.cell = self.rng.uniform()._cell
        rng = self.cell.rng.rng if isinstance(self.cell.rng, _RaceOwned) else self.cell.rng
        lat = getattr(self.cell, "lat", None)
        if self.flip:               # u = 1 - U:  1 - U < X  <=>  not (U <= 1 - X)
            return not rng._compare(self.cell, _cut(lat, threshold, True, not strict), not strict)
        return rng._compare(self.cell, _cut(lat, threshold, False, strict), strict)


def _cut(lat: Any, threshold: Callable[[int], Any], flip: bool, strict: bool) -> Fraction:
    """A rational threshold deciding ``U < Y`` (``<=``) as the exact ``Y = X`` (``1 - X`` if ``flip``) does,
    for a uniform ``U`` on the lattice ``lat`` (None: continuous)."""
    if lat is not None and type(lat).cut is not Lattice.cut:
        raise _refuse("comparing log, ** or exp of a float16 / bfloat16 uniform with a number",
                      "the audit decides such comparisons on evenly spaced lattices only; compare the uniform "
                      "itself, or audit with rng_model='torch-float32' or 'continuous'")
    prec = RACE_PRECISION + 64 if lat is None else 64
    while True:
        from mpmath.libmp import to_rational
        a, b = (Fraction(*(int(n) for n in to_rational(v))) for v in threshold(prec)._mpi_)
        lo, hi = (1 - b, 1 - a) if flip else (a, b)
        if lat is None:                   # the continuous model: X exactly if it is a small rational, else rounded
            mid = (lo + hi) / 2
            cand = mid.limit_denominator(1 << 64)
            if abs(cand - mid) < Fraction(1, 1 << RACE_PRECISION):
                expr = threshold.symbolic()                   # type: ignore[attr-defined]
                if (1 - expr if flip else expr).equals(cand):
                    return cand
            _approximated("a comparison of a transformed uniform with a number (threshold exp(...))")
            return mid
        klo, khi = (lo - lat.offset) / lat.step, (hi - lat.offset) / lat.step
        if math.floor(klo) == math.floor(khi) and math.floor(khi) != khi:   # no lattice point inside: decided
            return lat.offset + (math.floor(klo) + Fraction(1, 2)) * lat.step
        if prec >= 1024:
            n = math.floor(khi)
            cand = lat.offset + n * lat.step
            expr = threshold.symbolic()                       # type: ignore[attr-defined]
            if (1 - expr if flip else expr).equals(cand):    # X on the lattice point exactly: ties count
                n = n - 1 if strict else n
                return lat.offset + (n + Fraction(1, 2)) * lat.step
        if prec >= 4096:
            break
        prec *= 2
    raise _refuse("comparing a transformed uniform with a number that lands on (or within 2**-4096 of) a point of "
                  "the generator's lattice", "exactspec cannot decide that comparison exactly")


class _Scan:
    """An argmax scan in progress: the values compared so far, their winner and total weight."""

    __slots__ = ("winner", "weights", "form")

    def __init__(self, winner: "RaceValue") -> None:
        self.winner, self.weights, self.form = winner, [winner._weight()], winner._form


#: the parameters of a fresh Exp(1) draw (``h(z) = z``, weight 1), shared by every one: a value holding these very
#: objects is a fresh draw (:func:`fresh_op` remembers what arithmetic makes of it)
_ONE, _ZERO = Fraction(1), Fraction(0)
_FRESH_FORM = ("P", _ONE, 1, _ZERO)


def exponential(rng: Any) -> "RaceValue":
    """A fresh Exp(1) draw as a race value (``h(z) = z``, weight 1).

    >>> (Fraction(1, 2) / exponential(None)).direction()     # w / E decreases with E / w: argmax wins
    -1
    """
    return RaceValue._raw(_Source(rng), _FRESH_FORM, _ONE, _ZERO)


#: (operation, float operand) -> the parameters ``(form, m, e)`` of ``op(E, c)`` for a fresh draw ``E`` and the
#: exact ``c`` of that float: a sampler replayed once per branch divides the same floats by fresh draws again
_FRESH_OPS: dict = {}


def fresh_op(v: "RaceValue", name: str, op: Callable[[Any, Any], Any], f: Any, c: Any) -> Any:
    """``op(v, c)``, where ``c`` is the exact value of the float (or inf) ``f``; for a fresh draw ``v`` the result's
    parameters are remembered by ``(name, f)`` (the result depends on nothing else: same law, same checks).

    >>> a = fresh_op(exponential(None), "div", lambda v, c: c / v, 0.25, Fraction(1, 4))
    >>> b = fresh_op(exponential(None), "div", lambda v, c: c / v, 0.25, Fraction(1, 4))
    >>> a._weight() == b._weight() == (Fraction(1, 4), 0), a._src is not b._src, a._m is b._m
    (True, True, True)
    """
    if type(v) is not RaceValue or v._form is not _FRESH_FORM or v._m is not _ONE or v._e is not _ZERO:
        return op(v, c)
    key = (name, f)
    hit = _FRESH_OPS.get(key)
    if hit is not None:
        return RaceValue._raw(v._src, *hit)
    r = op(v, c)
    if type(r) is RaceValue and r._src is v._src:
        if len(_FRESH_OPS) > 1 << 16:
            _FRESH_OPS.clear()
        _FRESH_OPS[key] = (r._form, r._m, r._e)
    return r


def gumbel(rng: Any) -> "RaceValue":
    """A fresh standard Gumbel draw ``-log(E)`` as a race value.

    >>> g = gumbel(None) + 0.5                                # log-weight 0.5: the weight is exp(0.5)
    >>> g._weight()
    (Fraction(1, 1), Fraction(1, 2))
    """
    return RaceValue(_Source(rng), ("L", Fraction(-1)), Fraction(1), Fraction(0))


class RaceValue:
    """``h(E / w)`` for an exponential draw ``E``, a strictly monotone ``h`` and an exact weight ``w = m * exp(e)``.

    ``h`` is one of ``A * z ** r + B`` (form ``P``), ``A * log(z)`` (form ``L``; a constant is
    moved into the weight) or ``A * exp(s * z) + B`` (form ``X``, ``s = +-1``), with exact
    rational parameters; ``|A|`` of ``P`` with ``r = +-1`` is moved into the weight too, so
    ``p_i / E_i`` for different ``p_i`` share one ``h``.

    >>> v = exponential(None) / Fraction(1, 4)               # E / (1/4) = E / w with w = 1/4
    >>> v._form, v._weight()
    (('P', Fraction(1, 1), 1, Fraction(0, 1)), (Fraction(1, 4), Fraction(0, 1)))
    """

    __slots__ = ("_src", "_form", "_m", "_e")

    def __init__(self, source: _Source, form: tuple, m: Any, e: Any) -> None:
        self._src, self._m, self._e = source, m, e
        self._form = form
        self._normalise()

    @classmethod
    def _raw(cls, source: _Source, form: tuple, m: Any, e: Any) -> "RaceValue":
        """A value of parameters already normalised (a fresh draw's, or ones :func:`fresh_op` remembered)."""
        v = object.__new__(cls)
        v._src, v._form, v._m, v._e = source, form, m, e
        return v

    def _normalise(self) -> None:
        f = self._form
        if f[0] == "P" and f[2] in (1, -1) and f[1] not in (1, -1):
            a, r = f[1], f[2]
            self._m = _scale(self._m, 1 / abs(a) if r == 1 else abs(a))      # w' = w |A|^(-1/r)
            self._form = ("P", Fraction(_sign(a)), r, f[3])

    def _weight(self) -> tuple:
        return (self._m, self._e)

    def _with(self, form: tuple, m: Any = None, e: Any = None) -> "RaceValue":
        return RaceValue(self._src, form, self._m if m is None else m, self._e if e is None else e)

    def direction(self) -> int:
        """+1 if the value increases with ``E / w``, -1 if it decreases."""
        f = self._form
        if f[0] == "P":
            return _sign(f[1]) * _sign(f[2])
        if f[0] == "L":
            return _sign(f[1])
        return _sign(f[1]) * f[2]

    # -- arithmetic ------------------------------------------------------------------------------------------
    def __neg__(self) -> "RaceValue":
        f = self._form
        if f[0] == "P":
            return self._with(("P", -f[1], f[2], -f[3]))
        if f[0] == "L":
            return self._with(("L", -f[1]))
        return self._with(("X", -f[1], f[2], -f[3]))

    def __add__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self + x, keep=True)
        if isinstance(c, (RaceValue, Uniform)):
            raise _refuse("adding two random values", "the audit follows one exponential draw per race entry")
        c = _number(c)
        f = self._form
        if f[0] == "L":            # A log z + c = A log(z e^(c/A)): the weight gains exp(-c/A)
            if c in (_INF, -_INF):
                wins = (c > 0) == (f[1] < 0)
                return self._with(f, m=_INF if wins else Fraction(0), e=Fraction(0))
            return self._with(f, e=self._e - c / f[1])
        if c in (_INF, -_INF):
            raise _refuse("adding an infinite number to a race value", "the value is then constant")
        return self._with((f[0], f[1], f[2], f[3] + c))

    __radd__ = __add__

    def __sub__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: self - x, keep=True)
        return self + (-_number(c) if not isinstance(c, (RaceValue, Uniform)) else c)

    def __rsub__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: x - self, keep=True)
        return (-self) + c

    def __mul__(self, k: Any) -> Any:
        if _is_array(k):
            return _elementwise(k, lambda x: self * x, keep=True)
        if isinstance(k, (RaceValue, Uniform)):
            raise _refuse("multiplying two random values", "not a race")
        k = _number(k)
        f = self._form
        if f[0] == "P" and f[2] in (1, -1):     # s z^r k = sign(k) (z |k|^(1/r))^r: the weight takes |k|^(-1/r)
            if f[3] != 0:
                raise _refuse("multiplying a shifted race value", "the family h(E / w) is left")
            s = Fraction(-1 if k < 0 else 1)
            mag = abs(k)
            if mag == _INF:
                m = Fraction(0) if f[2] == 1 else _INF
            elif mag == 0:
                m = _INF if f[2] == 1 else Fraction(0)
            else:
                m = _scale(self._m, 1 / mag if f[2] == 1 else mag)
            return self._with(("P", f[1] * s, f[2], Fraction(0)), m=m)
        if k in (_INF, -_INF) or k == 0:
            raise _refuse(f"multiplying a race value by {k}", "the value is then constant")
        if f[0] == "L":
            return self._with(("L", f[1] * k))
        return self._with((f[0], f[1] * k, f[2], f[3] * k))

    __rmul__ = __mul__

    def __truediv__(self, k: Any) -> Any:
        if _is_array(k):
            return _elementwise(k, lambda x: self / x, keep=True)
        if isinstance(k, (RaceValue, Uniform)):
            raise _refuse("dividing two random values", "not a race")
        k = _number(k)
        if k == 0:
            return self * _INF         # float semantics: x / 0 = +-inf, the sign of x
        return self * (0 if k in (_INF, -_INF) else 1 / k)

    def reciprocal(self) -> "RaceValue":
        f = self._form
        if f[0] == "P" and f[3] == 0:
            return self._with(("P", 1 / f[1], -f[2], Fraction(0)))
        if f[0] == "X" and f[3] == 0:
            return self._with(("X", 1 / f[1], -f[2], Fraction(0)))
        raise _refuse("1 / a race value of this form", "the family h(E / w) is left")

    def __rtruediv__(self, c: Any) -> Any:
        if _is_array(c):
            return _elementwise(c, lambda x: x / self, keep=True)
        return self.reciprocal() * c

    def log(self) -> "RaceValue":
        f = self._form
        if f[0] == "P" and f[3] == 0 and f[1] == 1:
            return self._with(("L", Fraction(f[2])))        # log(z^r) = r log z
        if f[0] == "X" and f[3] == 0 and f[1] == 1:
            return self._with(("P", Fraction(f[2]), 1, Fraction(0)))   # log(exp(s z)) = s z
        raise _refuse("log of a race value of this form (negative, shifted or scaled)",
                      "the result is NaN or leaves the family h(E / w)")

    def exp(self) -> "RaceValue":
        f = self._form
        if f[0] == "L":
            return self._with(("P", Fraction(1), f[1], Fraction(0)))   # exp(A log z) = z^A
        if f[0] == "P" and f[2] == 1 and f[3] == 0:
            return self._with(("X", Fraction(1), int(f[1]), Fraction(0)))
        raise _refuse("exp of a race value of this form", "the family h(E / w) is left")

    def __pow__(self, t: Any) -> Any:
        if _is_array(t):
            return _elementwise(t, lambda x: self ** x, keep=True)
        t = _number(t)
        f = self._form
        if t in (_INF, -_INF):
            raise _refuse("a race value to an infinite power", "the value is then constant")
        if f[0] == "X" and f[1] == 1 and f[3] == 0:     # exp(s z)^t = exp(sign(t) s z |t|): the weight takes 1/|t|
            if t == 0:
                return self._with(f, m=_INF)        # exp(s z)^0 = 1 = exp(s * 0): z = 0
            return self._with(("X", Fraction(1), f[2] * _sign(t), Fraction(0)), m=_scale(self._m, 1 / abs(t)))
        if f[0] == "P" and f[3] == 0 and f[1] == 1 and t != 0:
            return self._with(("P", Fraction(1), f[2] * t, Fraction(0)))
        raise _refuse("a power of a race value of this form", "the family h(E / w) is left")

    # -- comparisons: only an argmax scan --------------------------------------------------------------------
    def _beats(self, other: Any, op: str, smaller_wins: bool) -> bool:
        if not isinstance(other, RaceValue):
            raise _refuse(f"{op} between a race value and a number", "the audit follows race values (log of a "
                          "uniform, an exponential, Gumbel noise) into argmax only; compare the uniform itself")
        if self._form != other._form:
            raise _refuse(f"{op} between race values", "only an argmax scan over values of one race (same "
                          "transformation) is followed")
        memoryless = self.direction() == (-1 if smaller_wins else 1)
        scan0 = other._src.scan
        weights = [self._weight()] + (scan0.weights if scan0 is not None else [other._weight()])
        if not memoryless and len(set(weights)) != 1:
            # the smallest E / w is memoryless; the largest is not, unless every weight is equal (then each new
            # value is the extreme of those seen with probability 1 / (k + 1), by symmetry)
            raise _refuse(f"{op} between race values", "only a scan where the winner is the smallest E / w (argmax "
                          "of w / E, log w - log E, ...) or a scan over equal weights is followed")
        scan = other._src.scan
        if scan is None and other._src.usable() and other._src is not self._src:
            other._src.raced = True
            scan = other._src.scan = _Scan(other)
        if scan is None or scan.winner._src is not other._src or not self._src.usable():
            raise _refuse(f"{op} between race values", "only an argmax scan over fresh draws (each new value "
                          "compared with the running winner, as np.argmax and max() do) is followed")
        self._src.raced = True
        self._src.scan = scan
        law = race_law([self._weight(), _total(scan.weights)], self._src.rng)
        scan.weights.append(self._weight())
        if law is None:
            wins = False
        elif isinstance(law, int):
            wins = law == 0
        else:
            wins = self._src.rng.categorical(law) == 0
        if wins:
            scan.winner = self
        return wins

    def __gt__(self, other: Any) -> Any:
        if _many(other):
            return _elementwise(other, lambda x: self > x)
        if isinstance(other, RaceValue):
            return self._beats(other, ">", True)
        return not self._below(other, False, ">")

    def __ge__(self, other: Any) -> Any:
        if _many(other):
            return _elementwise(other, lambda x: self >= x)
        if isinstance(other, RaceValue):
            return self._beats(other, ">=", True)
        return not self._below(other, True, ">=")

    def __lt__(self, other: Any) -> Any:
        if _many(other):
            return _elementwise(other, lambda x: self < x)
        if isinstance(other, RaceValue):
            return self._beats(other, "<", False)
        return self._below(other, True, "<")

    def __le__(self, other: Any) -> Any:
        if _many(other):
            return _elementwise(other, lambda x: self <= x)
        if isinstance(other, RaceValue):
            return self._beats(other, "<=", False)
        return self._below(other, False, "<=")

    # -- comparisons with numbers: h(E / w) < t decided on the uniform u = exp(-E) -------------------------------
    def _below(self, t: Any, strict: bool, op: str) -> bool:
        """``self < t`` (``<=`` when not ``strict``): the set of ``z = E / w`` where it holds, mapped to ``u``."""
        if isinstance(t, Uniform):
            raise _refuse(f"{op} between a race value and a uniform", "not a comparison with a number")
        t = _number(t)
        if t in (_INF, -_INF):              # every value is finite
            return t > 0
        inc = self.direction() > 0
        lo, hi = self._limits()             # h at z -> 0 and at z -> infinity
        if self._m in (0, _INF):            # z = E / w is infinity or 0 whatever E: a constant
            value = hi if self._m == 0 else lo
            return value < t if strict else value <= t
        # {z : h(z) < t} is (0, zt) if h increases, (zt, inf) if it decreases
        if inc:
            if t <= lo:
                return False
            if t > hi:
                return True
        else:
            if t > lo:
                return True
            if t <= hi:
                return False
        ut = self._u_threshold(t)           # u = exp(-w zt), strictly inside (0, 1)
        # h < t: z < zt <=> u > ut (h increasing), z > zt <=> u < ut (decreasing); h <= t: the same with ties
        return (not self._src.below(ut, not strict)) if inc else self._src.below(ut, strict)

    def _limits(self) -> tuple:
        f = self._form
        inf = _INF
        if f[0] == "P":
            a, r, b = f[1], f[2], f[3]
            big = inf if a > 0 else -inf
            return (b, big + 0) if r > 0 else (big, b)
        if f[0] == "L":
            return (-inf, inf) if f[1] > 0 else (inf, -inf)
        a, s, b = f[1], f[2], f[3]
        return (a + b, b) if s < 0 else (a + b, inf if a > 0 else -inf)

    def _u_threshold(self, t: Any) -> Callable[[int], Any]:
        """``prec -> an mpmath interval enclosing exp(-w * h^-1(t))``, the threshold for the uniform ``u``."""
        from mpmath.ctx_iv import MPIntervalContext
        f, m, e = self._form, self._m, self._e

        def enclose(prec: int) -> Any:
            ctx = MPIntervalContext()
            ctx.prec = prec

            def q(x: Any) -> Any:
                x = Fraction(x)
                return ctx.mpf(x.numerator) / x.denominator
            if f[0] == "P":
                y = q((t - f[3]) / f[1])
                z = y if f[2] == 1 else (1 / y if f[2] == -1 else ctx.exp(ctx.log(y) / q(f[2])))
            elif f[0] == "L":
                z = ctx.exp(q(t) / q(f[1]))
            else:
                z = ctx.log(q((t - f[3]) / f[1])) / f[2]
            w = q(m) * (ctx.exp(q(e)) if e != 0 else 1)
            return ctx.exp(-w * z)

        def symbolic() -> Any:
            import sympy  # type: ignore[import-untyped]  # sympy ships no type information
            def q(x: Any) -> Any:
                x = Fraction(x)
                return sympy.Rational(x.numerator, x.denominator)
            if f[0] == "P":
                y = q((t - f[3]) / f[1])
                z = y ** (1 / q(f[2]))
            elif f[0] == "L":
                z = sympy.exp(q(t) / q(f[1]))
            else:
                z = sympy.log(q((t - f[3]) / f[1])) / f[2]
            return sympy.exp(-q(m) * sympy.exp(q(e)) * z)
        enclose.symbolic = symbolic  # type: ignore[attr-defined]
        return enclose

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        raise _refuse("== on a race value", "equality of a continuous value has probability 0")

    __ne__ = __eq__  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def _unsupported(self, op: str) -> Any:
        raise _refuse(f"{op} of a race value", "the audit follows race values (log of a uniform, an exponential, "
                      "Gumbel noise) through monotone arithmetic into argmax only")

    def __float__(self) -> float:
        return self._unsupported("float()")

    def __bool__(self) -> bool:
        return self._unsupported("truth value")

    def __abs__(self) -> Any:
        return self._unsupported("abs()")

    def sqrt(self) -> Any:
        return self._unsupported("sqrt")

    def __repr__(self) -> str:
        return f"<race value {self._form}, weight {self._m} * exp({self._e})>"


def _scale(m: Any, k: Any) -> Any:
    if m == _INF:
        return _INF if k != 0 else Fraction(0)   # pragma: no cover - k is never 0 here
    return m * k


def _total(weights: Sequence[tuple]) -> tuple:
    """One weight equal to the sum of ``weights`` (inf if any is)."""
    if any(m == _INF for m, _ in weights):
        return (_INF, Fraction(0))
    live = [(m, e) for m, e in weights if m != 0]
    if not live:
        return (Fraction(0), Fraction(0))
    if len({e for _, e in live}) == 1:
        return (sum(m for m, _ in live), live[0][1])
    return ("sum", tuple(live))


def _real(w: tuple, ctx: Any) -> Any:
    m, e = w
    if m == "sum":
        return sum((_real(x, ctx) for x in e), ctx.mpf(0))
    return ctx.mpf(m.numerator) / m.denominator * ctx.exp(ctx.mpf(e.numerator) / e.denominator)


def race_law(weights: Sequence[tuple], rng: Any) -> Any:
    """The winner's law of a race with weights ``(m, e)`` (``w = m * exp(e)``).

    Returns a tuple law for ``rng.categorical``, an ``int`` when the winner is certain (the first
    infinite weight, or the only positive one), or None when every weight is 0 (torch's and
    numpy's argmax then return the first index). Weights that differ in ``e`` are irrational:
    they are rounded to rationals at :data:`RACE_PRECISION` bits.

    >>> race_law([(Fraction(1), Fraction(0)), (Fraction(3), Fraction(0))], None)
    (Fraction(1, 4), Fraction(3, 4))
    >>> race_law([(Fraction(0), Fraction(0)), (math.inf, Fraction(0))], None)
    1
    """
    field = getattr(rng, "_field", None)
    # the same weight objects (a replayed call's race over the same floats, see fresh_op) give the same law; the
    # entry holds them, so no id in a key is reused while the entry lives
    key = (id(field), *(id(m) for m, _ in weights), *(id(e) for _, e in weights))
    hit = _RACE_LAWS.get(key)
    if hit is None:
        law, approximated = _race_law(weights, rng)
        if len(_RACE_LAWS) > 1 << 14:
            _RACE_LAWS.clear()
        hit = _RACE_LAWS[key] = (law, approximated, field, list(weights))
    if hit[1]:
        _approximated(_ROUNDED_RACE)
    return hit[0]


#: what the audit's session counts a rounded race law under (see :func:`_approximated`)
_ROUNDED_RACE = "a race over weights exp(c) (Gumbel noise added to float logits)"
#: ids of a field and of a race's weights -> (the race's law, whether it was rounded, the field, the weights)
_RACE_LAWS: dict = {}


def _race_law(weights: Sequence[tuple], rng: Any) -> tuple[Any, bool]:
    """:func:`race_law`, computed, and whether the law was rounded to :data:`RACE_PRECISION` bits."""
    for i, (m, _) in enumerate(weights):
        if m == _INF:
            return i, False
    live = [i for i, (m, _) in enumerate(weights) if m != 0]
    if not live:
        return None, False
    if len(live) == 1:
        return live[0], False
    approximated = False
    if all(weights[i][0] != "sum" for i in live) and len({weights[i][1] for i in live}) == 1:
        vals = [weights[i][0] if i in live else Fraction(0) for i in range(len(weights))]
    else:
        import mpmath
        approximated = True
        ctx = mpmath.MPContext()
        ctx.prec = RACE_PRECISION
        reals = [_real(w, ctx) if i in live else ctx.mpf(0) for i, w in enumerate(weights)]
        top = max(reals)
        vals = [_rational(x / top) if x else Fraction(0) for x in reals]
    total = sum(vals)
    field = getattr(rng, "_field", None)
    conv = field.convert if field is not None else (lambda x: x)
    return tuple(conv(v / total) for v in vals), approximated


def _uniform(n: int) -> tuple:
    return tuple(Fraction(1, n) for _ in range(n))


def _approximated(what: str) -> None:
    """Note on the audit's session that an irrational probability was rounded to :data:`RACE_PRECISION` bits."""
    counts = APPROXIMATIONS.get()
    if counts is not None:
        counts[what] = counts.get(what, 0) + 1


def _rational(x: Any) -> Fraction:
    man, exp = x.man_exp
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def race_winner(values: Sequence[RaceValue], smaller_wins: bool = True) -> int:
    """The index of the largest (``smaller_wins``: argmax) or smallest value of one race, drawn exactly.

    All values must be fresh entries of distinct draws sharing one transformation ``h``; they
    are consumed (any later use of them or of their uniforms raises).

    >>> from exactspec.enumerate.rng import enumerate_program
    >>> from exactspec.fields import get_field
    >>> race = lambda rng: race_winner([Fraction(1) / exponential(rng), Fraction(3) / exponential(rng)])
    >>> law = enumerate_program(race, get_field(backend="python"))
    >>> law == {0: Fraction(1, 4), 1: Fraction(3, 4)}
    True
    """
    rng, outcome = race_outcome(values, smaller_wins)
    return outcome if isinstance(outcome, int) else rng.categorical(outcome)


def race_outcome(values: Sequence[RaceValue], smaller_wins: bool = True, deferred: bool = False) -> tuple[Any, Any]:
    """``(rng, outcome)`` of one race, checked and consumed as :func:`race_winner` does, but not drawn yet.

    ``outcome`` is the winner's index when it is certain, else the law to hand to
    ``rng.categorical`` (drawing it is :func:`race_winner`'s last step; a lazy argmax makes it
    when its value is read). With ``deferred``, the law of a race of unequal weights is left to
    compute too: ``outcome`` is then a function returning the index or the law (a race never
    read costs no law).

    >>> race_outcome([Fraction(1) / exponential(None), Fraction(3) / exponential(None)])
    (None, (Fraction(1, 4), Fraction(3, 4)))
    """
    what = "argmax" if smaller_wins else "argmin"
    if not values:
        raise ValueError(f"{what} of an empty sequence")
    for v in values:
        if not isinstance(v, RaceValue):
            raise _refuse(f"{what} over a mix of race values and other numbers", "not a race")
    form = values[0]._form
    srcs = {id(v._src) for v in values}
    if len(srcs) != len(values):
        raise _refuse(f"{what} over a race that uses one draw twice (a broadcast or repeated entry)",
                      "the entries of a race must be independent draws")
    for v in values:
        src = v._src
        if src.raced or src.read:
            raise _refuse(f"{what} over race values already used in another argmax or comparison",
                          "the two outcomes are dependent: the audit follows each race into one argmax")
        if not src.fresh:
            lattice = src.cell is not None and getattr(src.cell, "lat", None) is not None
            raise _refuse(f"{what} over log, ** or exp of uniforms that were compared before, or under a lattice "
                          "rng model", "the race law w / sum(w) holds for fresh continuous uniforms"
                          + ("; use rng_model='native' (races over a generator's uniforms taken as ideal) or "
                             "'continuous'" if lattice else ""))
    if any(v._form != form for v in values):
        raise _refuse(f"{what} over race values transformed differently (e.g. a shift added to some entries of "
                      "p / E)", "the argmax of such values is not a race")
    direction = values[0].direction()
    if direction != (-1 if smaller_wins else 1) and len({v._weight() for v in values}) == 1 and \
            0 < values[0]._m < _INF:
        for v in values:              # equal weights: every entry is the extreme with probability 1 / n, by symmetry
            v._src.raced = True
        return values[0]._src.rng, (_uniform(len(values)) if len(values) > 1 else 0)
    if direction != (-1 if smaller_wins else 1):
        raise _refuse(f"{what} of a race taken in the direction where larger E / w wins",
                      "that is not a draw from w / sum(w); only argmax of -log E + log w, w / E, log(u) / w, "
                      "u ** (1 / w) and their monotone transforms (or argmin of E / w) are followed")
    for v in values:
        v._src.raced = True
    rng = values[0]._src.rng
    weights = [v._weight() for v in values]
    if deferred:
        return rng, lambda: _outcome(race_law(weights, rng))
    return rng, _outcome(race_law(weights, rng))


def _outcome(law: Any) -> Any:
    return 0 if law is None else law


# -- lazy comparison results -------------------------------------------------------------------------------

class LazyBit:
    """A value (bool, or a count of bools) computed on first read and then fixed: ``value()`` forks at most once.

    >>> b = LazyBit(lambda: True)
    >>> b.value(), (~b).value()
    (True, False)
    """

    __slots__ = ("_f", "_v")

    def __init__(self, f: Callable[[], Any] | None = None, v: Any = None) -> None:
        self._f, self._v = f, v

    def value(self) -> Any:
        if self._f is not None:
            f, self._f = self._f, None
            self._v = f()
        return self._v

    def __invert__(self) -> "LazyBit":
        return LazyBit(lambda: not self.value())

    @staticmethod
    def all_of(bits: Sequence["LazyBit"]) -> "LazyBit":
        """True when every bit is (read in order, stopping at the first False)."""
        return LazyBit(lambda: all(b.value() for b in bits))

    @staticmethod
    def any_of(bits: Sequence["LazyBit"]) -> "LazyBit":
        """True when some bit is (read in order, stopping at the first True)."""
        return LazyBit(lambda: any(b.value() for b in bits))

    @staticmethod
    def count_compare(bits: Sequence["LazyBit"], op: Callable[[Any, Any], bool], t: Any) -> "LazyBit":
        """``op(number of True bits, t)``, reading bits in order only until the answer is certain."""
        def decide() -> bool:
            done = 0
            n = len(bits)
            for i, b in enumerate(bits):
                lo, hi = done, done + n - i
                if _monotone(op) and op(lo, t) == op(hi, t):   # the same answer for every count still possible
                    return op(lo, t)
                done += int(b.value())
            return op(done, t)
        return LazyBit(decide)


def _monotone(op: Callable) -> bool:
    import operator
    return op in (operator.lt, operator.le, operator.gt, operator.ge)
