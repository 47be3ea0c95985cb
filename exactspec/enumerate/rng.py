"""The enumerating ``rng``: every draw forks the enumeration; paths are explored by replay.

A rule runs once per branch. On a new draw the rng takes the first option and pushes every
other option (with the exact probability of reaching it) on the engine's stack; a later run
replays the recorded choices up to that point and continues from the alternative. Draws that
cannot fork (a law with one token, a probability of 0 or 1, a comparison decided by the
uniform's current interval) consume no choice, so replays stay aligned.

Kept as one module: the path rng, the deferred token, the uniform and the rng lattices share one
replay protocol (the recorded choices, the stack of alternatives, the cells a uniform is cut into);
a change to any of them must keep replays aligned for all, and reads best beside the others.

>>> from fractions import Fraction as F
>>> from exactspec.fields import get_field
>>> law = enumerate_program(lambda rng: rng.categorical((F(1, 4), F(3, 4))), get_field(backend="python"))
>>> law == {0: F(1, 4), 1: F(3, 4)}
True
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import math
import numbers
from fractions import Fraction

from ..errors import InvalidDistribution, InvalidValue, ReplayDiverged, UnsupportedRandomness
from ..fields import Field, caller_site

__all__ = ["PathRng", "Uniform", "enumerate_program", "Lattice", "RoundedLattice", "LATTICES", "NATIVE", "NATIVE64",
           "RNG_MODELS", "DeferredToken", "lattice_for", "link_choices", "unwind_choices", "RngLattice"]


class _Nothing:
    """A type no number has (:attr:`PathRng._plain` when thresholds must be checked)."""


#: float -> its exact rational (:meth:`PathRng.number` with ``exact_floats``): samplers compare with the same floats
_EXACT: dict = {}


class PathRng:
    """The ``rng`` a rule sees on one branch: ``categorical``, ``bernoulli`` and lazy ``uniform``.

    >>> from exactspec.fields import get_field
    >>> stack = []
    >>> rng = PathRng((), 1, get_field(backend="python"), stack, {})
    >>> rng.bernoulli(__import__("fractions").Fraction(1, 3)), len(stack)
    (True, 1)
    """

    __slots__ = ("_prefix", "_n", "_pos", "_choices", "_kinds", "weight", "_field", "_stack", "_supports",
                 "_one", "_zero", "_exact", "_plain", "max_depth", "lattice", "exact_floats", "_head", "observe",
                 "defer", "deferred", "spreads")

    def __init__(self, prefix: Sequence[Any], weight: Any, field: Field, stack: list, supports: dict,
                 max_depth: int | None = None, lattice: RngLattice = None, exact_floats: bool = False) -> None:
        # ``prefix``: the choices to replay, as a tuple of choices or as a pushed node (see _fork)
        if prefix and type(prefix[0]) is tuple:
            self._head = prefix
            prefix = unwind_choices(prefix)
            self._choices: list = prefix   # shared: replay reads below len(prefix), forks append after it
        else:
            self._head = link_choices(prefix)
            self._choices = list(prefix)
        self._prefix = prefix
        self._n = len(prefix)
        self._pos = 0
        self._kinds: list[str] = []
        self.weight = weight
        self._field = field
        self._stack = stack
        self._supports = supports
        self._one = field.one
        self._zero = field.zero
        self._exact = field.exact
        #: the exact field's own number type (a threshold of this type needs no check nor conversion), else a type
        #: no number has; :class:`Uniform` compares such a threshold with the uniform itself directly
        self._plain = type(field.one) if field.exact and not exact_floats else _Nothing
        self.max_depth = max_depth
        self.lattice = lattice
        self.exact_floats = exact_floats
        #: called with every number compared with or combined with a uniform (None: nothing observes)
        self.observe: Callable[[Any], None] | None = None
        #: set by the engine while a rule's categorical draws may wait until something looks at them: a new
        #: categorical draw then returns a :class:`DeferredToken` instead of forking (see :meth:`categorical`)
        self.defer = False
        #: the deferred draws of this branch, in draw order
        self.deferred: list[DeferredToken] = []
        #: set by an engine that spreads a :class:`DeferredToken` a rule returns unread as its last token (the step
        #: enumerator): code that draws on the rule's behalf (a sampler adapter) may then hand one back
        self.spreads = False

    # -- bookkeeping -------------------------------------------------------------------------
    @property
    def trace(self) -> list[tuple[str, Any]]:
        """The draws made so far on this branch, as (kind, value) pairs."""
        return list(zip(self._kinds, self._choices))

    @property
    def choices(self) -> tuple:
        return tuple(self._choices[: self._pos])

    def _fork(self, kind: str, options: list) -> Any:
        """Take ``options[0]``; push the others. ``options`` holds (value, probability), all > 0.

        A pushed prefix is a node ``(parent node, choice)`` (the root is ``()``) shared with the
        current branch, so a branch of ``d`` draws pushes in O(d) memory, not O(d**2); the node
        is unwound into a list of choices once, when its branch is replayed.
        """
        pos = self._pos
        self._pos = pos + 1
        self._kinds.append(kind)
        if self.max_depth is not None and pos >= self.max_depth:
            from ..errors import BudgetExceeded
            raise BudgetExceeded("depth", self.max_depth, covered={"draws on this branch": pos})
        w = self.weight
        head = self._head
        push = self._stack.append
        for value, prob in options[1:]:
            push(((head, value), w * prob))
        value, prob = options[0]
        self._head = (head, value)
        self._choices.append(value)
        if prob != 1:
            self.weight = w * prob
        return value

    def _replayed(self, kind: str, expect: type) -> Any:
        pos = self._pos
        value = self._prefix[pos]
        if type(value) is not expect:
            raise ReplayDiverged(f"replay diverged at draw {pos}: the rule asked for a {kind} where it drew "
                            f"{value!r} before; rules must be deterministic functions of their draws")
        self._pos = pos + 1
        self._kinds.append(kind)
        return value

    def _support(self, law: Any) -> list:
        cache = self._supports
        key = id(law)
        hit = cache.get(key)
        if hit is not None and hit[0] is law:
            return hit[1]
        field = self._field
        where = "a law passed to rng.categorical"
        try:
            values = [field.check(x, where) for x in law]
        except TypeError:
            raise InvalidDistribution(f"{where} is {law!r}, not a sequence of probabilities "
                                      f"(from {caller_site(3)})") from None
        total = self._zero
        for i, x in enumerate(values):
            if not x >= 0:
                raise InvalidDistribution(f"{where} has entry {i} = {x} < 0 or NaN (from {caller_site(3)})")
            total += x
        if self._exact:
            if total != 1:
                raise InvalidDistribution(f"{where} sums to {total}, not exactly 1 (from {caller_site(3)})")
        elif not abs(total - 1) <= 1e-9:
            raise InvalidDistribution(f"{where} sums to {total}, not 1 (from {caller_site(3)})")
        support = [(i, x) for i, x in enumerate(values) if x > 0]
        if type(law) is tuple:  # immutable: safe to remember by identity
            cache[key] = (law, support)
        return support

    # -- the draws a rule makes ----------------------------------------------------------------
    def categorical(self, law: Any) -> int:
        """Draw a token from ``law`` (a sequence of probabilities summing to 1).

        >>> from fractions import Fraction as F
        >>> from exactspec.fields import get_field
        >>> PathRng((), 1, get_field(backend="python"), [], {}).categorical((0, F(1, 2), F(1, 2)))
        1
        """
        support = self._support(law)
        if len(support) == 1:
            return support[0][0]
        if self._pos < self._n:
            if self._prefix[self._pos] is UNSEEN:
                return self._defer(support)  # type: ignore[return-value]  # stands for the token it will be
            return self._replayed("categorical", int)
        if self.defer:
            return self._defer(support)  # type: ignore[return-value]  # stands for the token it will be
        return self._fork("categorical", support)

    def draw_now(self, law: Any) -> int:
        """:meth:`categorical`, never deferred: for a draw whose value the caller reads at once (a proposer's drafts).

        >>> from fractions import Fraction as F
        >>> from exactspec.fields import get_field
        >>> rng = PathRng((), 1, get_field(backend="python"), [], {})
        >>> rng.defer = True
        >>> rng.draw_now((F(1, 2), F(1, 2))), type(rng.categorical((F(1, 2), F(1, 2)))).__name__
        (0, 'DeferredToken')
        """
        hit = self._supports.get(id(law))
        support = hit[1] if hit is not None and hit[0] is law else self._support(law)
        if len(support) == 1:
            return support[0][0]
        pos = self._pos
        if pos < self._n:
            value = self._prefix[pos]
            if type(value) is not int:
                return self._replayed("categorical", int)   # raises: the replay diverged
            self._pos = pos + 1
            self._kinds.append("categorical")
            return value
        return self._fork("categorical", support)

    def _defer(self, support: list) -> "DeferredToken":
        """A categorical draw left undrawn: the token stands for every value of ``support`` at once.

        A new draw records the placeholder :data:`UNSEEN` as its choice, so the branches pushed after
        it replay it as deferred too; a replayed placeholder is deferred again. The token keeps what
        :meth:`redraw` needs to draw it for real: its position, the choices before it (those of the
        replayed prefix when it was replayed) and the weight and stack height when it was made.
        """
        pos = self._pos
        replayed = pos < self._n
        if not replayed:
            if self.max_depth is not None and pos >= self.max_depth:
                from ..errors import BudgetExceeded
                raise BudgetExceeded("depth", self.max_depth, covered={"draws on this branch": pos})
            self._head = (self._head, UNSEEN)
            self._choices.append(UNSEEN)
        self._pos = pos + 1
        self._kinds.append("categorical")
        tok = DeferredToken(support, pos, self._n if replayed else pos + 1, len(self._stack), self.weight, self)
        self.deferred.append(tok)
        return tok

    def _deferred_eq(self, tok: "DeferredToken", t: int) -> bool:
        """``tok == t`` for an int ``t``: decided without drawing ``tok`` when ``t`` is not (or is the only one)
        among the values it may still take; otherwise a two-way fork (equal: ``P(t)``; not: the rest), after
        which ``tok`` stands for ``t`` alone or for its other values."""
        sub = tok._es_sub
        pt = None
        for v, pv in sub:
            if v == t:
                pt = pv
                break
        if pt is None:
            return False
        if len(sub) == 1:
            return True
        pos = self._pos
        mass = tok._es_mass
        if pos < self._n:
            eq = self._replayed("deferred ==", bool)
        else:
            eq = self._fork("deferred ==", [(True, pt / mass), (False, (mass - pt) / mass)])
        tok._es_eqs.append((pos, t))
        if eq:
            tok._es_sub, tok._es_mass = [(t, pt)], pt
        else:
            tok._es_sub, tok._es_mass = [(v, pv) for v, pv in sub if v != t], mass - pt
        return eq

    def redraw(self, tok: "DeferredToken") -> None:
        """Draw the deferred ``tok`` for real: drop what this branch pushed after it and push its values instead.

        Each value ``v`` becomes a branch replaying this branch's choices up to ``tok`` (up to the end
        of the replayed prefix when ``tok`` was replayed) with ``v`` in its place, weighted by the weight
        when ``tok`` was made times ``P(v)``. Sound because nothing this branch did before it looked at
        ``tok`` depended on its value.
        """
        del self._stack[tok._es_height:]
        keep = tok._es_keep
        base = self._choices[:keep]
        push = self._stack.append
        w, pos = tok._es_weight, tok._es_pos
        values = tok._es_support
        eqs = [(e, t) for e, t in tok._es_eqs if e < keep]
        if eqs:   # replayed comparisons ``tok == t`` in the kept choices: the values they leave, their draws dropped
            mass = self._one
            for e, t in eqs:
                if base[e]:
                    values = [(v, pv) for v, pv in values if v == t]
                else:
                    values = [(v, pv) for v, pv in values if v != t]
            mass = sum((pv for _, pv in values), self._zero)
            w = w / mass                 # the kept choices weighed the comparisons: P(values left) = mass
            gone = {e for e, _ in eqs}
            for v, pv in values:
                base[pos] = v
                push((tuple(c for i, c in enumerate(base) if i not in gone), w * pv))
            return
        for v, pv in values:
            base[pos] = v
            push((tuple(base), w * pv))

    def bernoulli(self, prob: Any) -> bool:
        """Return True with probability ``prob``.

        >>> from exactspec.fields import get_field
        >>> PathRng((), 1, get_field(backend="python"), [], {}).bernoulli(1)
        True
        """
        prob = self._field.check(prob, "the probability passed to rng.bernoulli")
        if not (prob >= 0 and prob <= 1):
            raise InvalidDistribution(f"rng.bernoulli got probability {prob}, outside [0, 1] (from {caller_site(2)})")
        if prob == 1:
            return True
        if prob == 0:
            return False
        if self._pos < self._n:
            return self._replayed("bernoulli", bool)
        return self._fork("bernoulli", [(True, prob), (False, 1 - prob)])

    def number(self, x: Any, what: str) -> Any:
        """``x`` as a number of the field; floats become their exact rational when ``exact_floats``."""
        if self.observe is not None:   # e.g. a sampler audit noting the dtypes a sampler compares its uniforms with
            self.observe(x)
        if self.exact_floats and self._exact and not isinstance(x, (int, Fraction)):
            if type(x) is not float and isinstance(x, numbers.Rational):   # exact already (gmpy2's mpq): no float
                return self._field.convert(Fraction(int(x.numerator), int(x.denominator)))
            try:
                fx = float(x)
            except (TypeError, ValueError):
                return self._field.check(x, what)
            exact = _EXACT.get(fx)          # the float's exact rational, made once per value
            if exact is None:
                if fx != fx or fx in (float("inf"), float("-inf")):
                    raise InvalidDistribution(f"{what} is {fx} (from {caller_site(3)})")
                if len(_EXACT) > 1 << 16:
                    _EXACT.clear()
                exact = _EXACT[fx] = Fraction(fx)
            return self._field.convert(exact)
        return self._field.check(x, what)

    def uniform(self, lattice: "Lattice | None" = None) -> "Uniform":
        """A lazy uniform on [0, 1): compare it with thresholds; each comparison forks exactly.

        ``lattice`` is the lattice of the generator the draw comes from (the interception of
        numpy, Python's ``random`` and torch passes it); it applies under the ``native`` rng
        model. Under ``continuous`` or a named lattice model the run's model applies to every draw.

        >>> from fractions import Fraction as F
        >>> from exactspec.fields import get_field
        >>> stack = []
        >>> u = PathRng((), 1, get_field(backend="python"), stack, {}).uniform()
        >>> (u < F(1, 3)), stack[0][1]
        (True, Fraction(2, 3))
        """
        lat = self.lattice
        if lat is None:
            return Uniform(_Cell(self, self._zero, self._one, None), self._one, self._zero)
        if lat is NATIVE:
            lat = lattice
        elif lat is NATIVE64:
            lat = None if lattice is None else LATTICES["float64"]
        if lat is None:
            return Uniform(_Cell(self, self._zero, self._one, None), self._one, self._zero)
        assert isinstance(lat, Lattice)   # NATIVE and NATIVE64 were resolved above
        return Uniform(_Cell(self, lat.kmin, lat.kmax, lat), self._one, self._zero)

    random = uniform

    def _compare(self, cell: "_Cell", t: Any, strict: bool = True) -> bool:
        """Decide ``u < t`` (``u <= t`` when not ``strict``) for the uniform of ``cell``, forking when undecided.

        On a lattice (the cell's: each draw carries the lattice of its generator) ``u`` takes the
        values of the lattice's points, ties have positive probability, and branch probabilities
        are counts of lattice points.
        """
        if cell.cond is not None:       # a decision made on this uniform and a pending draw: that draw read first
            cell.cond()
        lat = cell.lat
        if lat is None:
            lo, hi = cell.lo, cell.hi
            if t <= lo:
                return False
            if t >= hi:
                return True
            pos = self._pos
            if pos < self._n:
                below = self._prefix[pos]
                if type(below) is not bool:
                    below = self._replayed("uniform", bool)   # raises: the replay diverged
                self._pos = pos + 1
                self._kinds.append("uniform")
            else:
                width = hi - lo
                below = self._fork("uniform", [(True, (t - lo) / width), (False, (hi - t) / width)])
            if below:
                cell.hi = t
            else:
                cell.lo = t
            return below
        klo, khi = cell.lo, cell.hi
        kcut = lat.cut(t, strict)   # the largest k with value below t
        kcut = min(max(kcut, klo - 1), khi)
        n_below, total = kcut - klo + 1, khi - klo + 1
        if n_below == 0:
            return False
        if n_below == total:
            return True
        if self._pos < self._n:
            below = self._replayed("uniform", bool)
        else:
            conv = self._field.convert
            below = self._fork("uniform", [(True, conv(Fraction(n_below, total))),
                                           (False, conv(Fraction(total - n_below, total)))])
        if below:
            cell.hi = kcut
        else:
            cell.lo = kcut + 1
        return below


    def _below_chance(self, cell: "_Cell", t: Any, strict: bool = True) -> Any:
        """The probability, on this branch, that the uniform of ``cell`` is below ``t`` (``<= t`` when not
        ``strict``), in the field; nothing drawn, nothing forked (what :meth:`_compare` would fork with).

        >>> from fractions import Fraction as F
        >>> from exactspec.fields import get_field
        >>> u = PathRng((), 1, get_field(backend="python"), [], {}).uniform()
        >>> u._cell.rng._below_chance(u._cell, F(1, 3))
        Fraction(1, 3)
        """
        if cell.cond is not None:
            cell.cond()
        lat = cell.lat
        if lat is None:
            lo, hi = cell.lo, cell.hi
            if t <= lo:
                return self._zero
            if t >= hi:
                return self._one
            return (t - lo) / (hi - lo)
        klo, khi = cell.lo, cell.hi
        kcut = min(max(lat.cut(t, strict), klo - 1), khi)
        return self._field.convert(Fraction(kcut - klo + 1, khi - klo + 1))

    def _narrow(self, cell: "_Cell", t: Any, strict: bool, below: bool) -> None:
        """Restrict the uniform of ``cell`` to where ``u < t`` (``<=`` when not ``strict``) is ``below``, with no fork
        and no weight: for a comparison whose probability a branch has already taken (:meth:`Uniform._narrow`)."""
        lat = cell.lat
        if lat is None:
            if below:
                cell.hi = min(cell.hi, t)
            else:
                cell.lo = max(cell.lo, t)
            return
        kcut = min(max(lat.cut(t, strict), cell.lo - 1), cell.hi)
        if below:
            cell.hi = kcut
        else:
            cell.lo = kcut + 1


class _Unseen:
    """The choice recorded for a deferred categorical draw (see :meth:`PathRng.categorical`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<deferred>"


#: the placeholder choice of a deferred draw
UNSEEN = _Unseen()


class _Touched(BaseException):
    """Code looked at a :class:`DeferredToken`: the engine draws it for real and runs the branch again.

    A ``BaseException``, so that a rule's ``except Exception`` does not swallow it (the token also
    remembers it was touched, for the engine to check after the branch).
    """

    def __init__(self, token: "DeferredToken") -> None:
        super().__init__("a deferred draw was looked at")
        self.token = token


class DeferredToken:
    """A categorical draw not yet drawn: what ``rng.categorical`` returns while the engine defers draws.

    The engine defers the categorical draws of a rule (not a proposer's drafts): a rule that emits
    one unread as the last token a step keeps (``yield rng.categorical(law)``: a residual, a bonus
    token) runs once for all its values, which the engine spreads over the outcome afterwards; one
    emitted unread before other kept tokens is drawn for real when the branch ends. ``tok == t`` and
    ``tok != t`` with an int ``t`` fork two ways (equal or not) and narrow the values it stands for. Any other
    use of its value (ordering, hashing, indexing, arithmetic, ``int()``, ``str()``, any attribute)
    raises :class:`_Touched`, and the engine redraws it for real; so does any exception raised while a
    branch holds one. Only code that tells it from an int by ``type()``, ``isinstance`` or ``is``
    without raising could see the difference.

    >>> from fractions import Fraction as F
    >>> from exactspec.fields import get_field
    >>> rng = PathRng((), 1, get_field(backend="python"), [], {})
    >>> rng.defer = True
    >>> tok = rng.categorical((F(1, 4), F(3, 4)))
    >>> tok < 1
    Traceback (most recent call last):
    ...
    exactspec.enumerate.rng._Touched: a deferred draw was looked at
    >>> tok.values()
    [(0, Fraction(1, 4)), (1, Fraction(3, 4))]
    """

    __slots__ = ("_es_support", "_es_pos", "_es_keep", "_es_height", "_es_weight", "_es_touched", "_es_rng",
                 "_es_sub", "_es_mass", "_es_eqs")
    _es_eqs: list[Any]

    def __init__(self, support: list, pos: int, keep: int, height: int, weight: Any, rng: Any = None) -> None:
        self._es_support, self._es_pos, self._es_keep = support, pos, keep
        self._es_height, self._es_weight, self._es_touched = height, weight, False
        #: the values it may still take (comparisons with ints narrow them), their mass, the comparisons' draws
        self._es_rng, self._es_sub, self._es_mass, self._es_eqs = rng, support, None, []

    def values(self) -> list:
        """The (token, probability) pairs the token stands for (for the engine; reading them is not a touch).

        After comparisons with ints narrowed it, the values left, with their probabilities given those
        comparisons (the branch's weight holds the probability of the comparisons' answers).
        """
        if not self._es_eqs:
            return self._es_support
        mass = self._es_mass
        return [(v, pv / mass) for v, pv in self._es_sub]

    def __eq__(self, t: Any) -> Any:
        if type(t) is not int or self._es_rng is None:
            return self._es_touch()
        if self._es_mass is None:
            self._es_mass = self._es_rng._one
        return self._es_rng._deferred_eq(self, t)

    def __ne__(self, t: Any) -> Any:
        return not self.__eq__(t)

    def _es_touch(self, *args: Any, **kwargs: Any) -> Any:
        self._es_touched = True
        raise _Touched(self)

    def __getattr__(self, name: str) -> Any:
        return self._es_touch()


def _touching(name: str) -> Any:
    def method(self: DeferredToken, *args: Any, **kwargs: Any) -> Any:
        return self._es_touch()
    method.__name__ = name
    return method


for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__int__",
              "__float__", "__complex__", "__index__", "__str__", "__repr__", "__format__", "__len__", "__iter__",
              "__contains__", "__getitem__", "__setitem__", "__call__", "__add__", "__radd__", "__sub__", "__rsub__",
              "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__divmod__", "__rdivmod__", "__pow__", "__rpow__", "__lshift__", "__rlshift__",
              "__rshift__", "__rrshift__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
              "__neg__", "__pos__", "__abs__", "__invert__", "__round__", "__trunc__", "__floor__", "__ceil__",
              "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__", "__getstate__", "__array__", "__bytes__",
              "__fspath__", "__enter__", "__exit__"):
    setattr(DeferredToken, _name, _touching(_name))
del _name


class Lattice:
    """The values a real generator's uniform takes: ``offset + k * step`` for ``k`` in ``kmin..kmax``, equally likely.

    >>> LATTICES["torch-float32"].kmax == 2 ** 24 - 1
    True
    """

    def __init__(self, name: str, offset: Fraction, step: Fraction, kmin: int, kmax: int, note: str) -> None:
        self.name, self.offset, self.step, self.kmin, self.kmax, self.note = name, offset, step, kmin, kmax, note
        # offset 0 and step 2**-m: the cut is integer arithmetic on t's numerator and denominator
        m = step.denominator.bit_length() - 1
        self._shift = m if offset == 0 and step.numerator == 1 and step.denominator == 1 << m else None

    def __reduce_ex__(self, protocol: Any) -> Any:
        """A named lattice (:data:`LATTICES`) travels by name, so a worker's comes back as the very same object."""
        if LATTICES.get(self.name) is self:
            return (lattice_for, (self.name,))
        return object.__reduce_ex__(self, protocol)

    def cut(self, t: Any, strict: bool) -> int:
        """The largest ``k`` whose value is below ``t`` (``<= t`` when not ``strict``); may fall outside ``kmin..kmax``.

        >>> LATTICES["torch-float32"].cut(Fraction(1, 2), True), LATTICES["torch-float32"].cut(Fraction(1, 2), False)
        (8388607, 8388608)
        """
        m = self._shift
        if m is not None and type(t) in (Fraction, int):   # t * 2**m, ceil(.) - 1 or floor(.), in integers
            n = t.numerator << m
            d = t.denominator
            return -(-n // d) - 1 if strict else n // d
        kt = (Fraction(t) - self.offset) / self.step
        return (math.ceil(kt) - 1) if strict else math.floor(kt)

    def value(self, k: int) -> Fraction:
        """The value of point ``k``.

        >>> LATTICES["curand"].value(2 ** 24)
        Fraction(1, 1)
        """
        return self.offset + k * self.step

    def __repr__(self) -> str:
        return f"<lattice {self.name}: {self.note}>"


class RoundedLattice(Lattice):
    """torch's float16 / bfloat16 uniforms on CPU: a float32 draw ``k * 2**-24`` rounded to nearest (even) in the
    narrow dtype, a result of 1.0 mapped to 0 (measured on torch 2.13: the frequencies of 16 million draws
    match this law within sampling noise).

    The point ``k`` for ``k >= 0`` has the value ``round(k * 2**-24)``; the points that round to 1.0 are
    renumbered ``-wrapped .. -1`` with the value 0, so values never decrease with ``k`` and the draw
    is still an interval of points. Each point has probability ``2**-24``.

    >>> lat = LATTICES["torch-bfloat16"]
    >>> lat.value(lat.kmin), lat.value(lat.kmax), lat.kmax - lat.kmin + 1 == 2 ** 24
    (Fraction(0, 1), Fraction(255, 256), True)
    >>> lat.cut(Fraction(1, 256), True) - lat.kmin + 1    # 2**24 * P(u < 2**-8): 2**15 wrapped points and k < 65408
    98176
    """

    def __init__(self, name: str, mantissa: int, note: str) -> None:
        self.mantissa = mantissa               # significand bits of the narrow dtype (11 half, 8 bfloat16)
        wrapped = 1 << (24 - mantissa - 1)      # k * 2**-24 >= 1 - 2**-(mantissa + 1) rounds to 1.0 (ties to even)
        super().__init__(name, Fraction(0), Fraction(1, 2 ** 24), -wrapped, 2 ** 24 - 1 - wrapped, note)

    def _round(self, k: int) -> Fraction:
        """``k * 2**-24`` rounded to nearest (ties to even) with ``mantissa`` significand bits (subnormals: never
        reached here, the narrow dtypes' exponent ranges hold every ``k * 2**-24``)."""
        if k <= 0:
            return Fraction(0)
        e = k.bit_length() - self.mantissa      # drop e low bits of k
        if e <= 0:
            return Fraction(k, 2 ** 24)
        q, r = divmod(k, 1 << e)
        half = 1 << (e - 1)
        if r > half or (r == half and q & 1):
            q += 1
        return Fraction(q << e, 2 ** 24)

    def value(self, k: int) -> Fraction:
        return self._round(k) if k >= 0 else Fraction(0)

    def cut(self, t: Any, strict: bool) -> int:
        t = Fraction(t)
        if t < 0 or (strict and t == 0):
            return self.kmin - 1
        # the values never decrease with k: bisect for the largest k with value(k) < t (<= t)
        lo, hi = self.kmin - 1, self.kmax      # value(lo) below t (lo may be kmin - 1: none), answer in lo..hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            v = self.value(mid)
            if (v < t) if strict else (v <= t):
                lo = mid
            else:
                hi = mid - 1
        return lo


class _Native:
    """The ``native`` rng model: each draw lies on the lattice of the generator it comes from (see RNG_MODELS).

    A draw that names no generator (``rng.uniform()`` in a rule, an ideal exponential) is continuous.
    """

    name = "native"
    note = ("each draw on its own generator's lattice: numpy and Python's random k * 2**-53 (0 included), "
            "torch CPU float32 k * 2**-24 (0 included), float64 k * 2**-53, float16 / bfloat16 a float32 draw "
            "rounded to the dtype (1.0 mapped to 0); a draw of no known generator continuous")

    def __repr__(self) -> str:
        return f"<rng model native: {self.note}>"


#: the ``native`` rng model (the default of sampler and loop audits)
NATIVE = _Native()


class _NativeFloat64(_Native):
    """``native`` at float64: each generator's draws on the 53-bit lattice, races over them taken as ideal, as
    :data:`NATIVE` takes them. The float64 run of a float32 sampler audit draws on it
    (:mod:`exactspec.samplers.rounding`): the same code, its generator at higher precision."""

    name = "native-float64"
    note = ("each generator's draws on k * 2**-53 (0 included): the native model at float64; a draw of no known "
            "generator continuous")

    def __repr__(self) -> str:
        return f"<rng model native-float64: {self.note}>"


#: the ``native`` model with every generator at float64 (internal: the float64 run of a sampler or loop audit)
NATIVE64 = _NativeFloat64()

#: what a branch's uniforms are drawn on: a generator's lattice, the ``native`` model (:data:`NATIVE`,
#: :data:`NATIVE64`: each generator's own lattice), or None (continuous)
RngLattice = Lattice | _Native | None

LATTICES = {
    "torch-float32": Lattice("torch-float32", Fraction(0), Fraction(1, 2 ** 24), 0, 2 ** 24 - 1,
                             "k * 2**-24 for k = 0 .. 2**24 - 1 (0 included), as torch.rand in float32"),
    "float64": Lattice("float64", Fraction(0), Fraction(1, 2 ** 53), 0, 2 ** 53 - 1,
                       "k * 2**-53 for k = 0 .. 2**53 - 1 (0 included), as numpy's, Python random's and torch's "
                       "float64 uniforms"),
    "curand": Lattice("curand", Fraction(0), Fraction(1, 2 ** 24), 1, 2 ** 24,
                      "k * 2**-24 for k = 1 .. 2**24: (0, 1], as curand_uniform (0 excluded, 1 included)"),
    "torch-float16": RoundedLattice("torch-float16", 11, "a float32 draw k * 2**-24 rounded to float16 (ties to "
                                    "even), 1.0 mapped to 0: P(0) = 4097 * 2**-24, as torch.rand in float16 on CPU"),
    "torch-bfloat16": RoundedLattice("torch-bfloat16", 8, "a float32 draw k * 2**-24 rounded to bfloat16 (ties to "
                                     "even), 1.0 mapped to 0: P(0) = 32769 * 2**-24, as torch.rand in bfloat16 on "
                                     "CPU"),
}
RNG_MODELS = ("continuous", "native") + tuple(LATTICES)


def lattice_for(rng_model: str) -> RngLattice:
    """The lattice of an rng model name (None for "continuous", :data:`NATIVE` for "native").

    >>> lattice_for("continuous") is None, lattice_for("curand").kmin, lattice_for("native") is NATIVE
    (True, 1, True)
    """
    if rng_model == "continuous":
        return None
    if rng_model == "native":
        return NATIVE
    if rng_model == "native-float64":
        return NATIVE64
    try:
        return LATTICES[rng_model]
    except (KeyError, TypeError):
        raise InvalidValue(f"unknown rng_model {rng_model!r}: choose one of {', '.join(RNG_MODELS)}") from None


def link_choices(choices: Any) -> tuple:
    """The node chain of a sequence of choices (``()`` for none): each node is ``(parent, choice)``.

    >>> link_choices((1, True))
    (((), 1), True)
    """
    node: tuple = ()
    for c in choices:
        node = (node, c)
    return node


def unwind_choices(node: Sequence[Any]) -> list:
    """The choices along a node chain, first to last (a loop: chains are as long as branches).

    >>> unwind_choices(link_choices((1, True, 0)))
    [1, True, 0]
    """
    out: list[Any] = []
    append = out.append
    while node:
        node, c = node
        append(c)
    out.reverse()
    return out


class _Cell:
    """The interval a uniform is known to lie in on the current branch."""

    __slots__ = ("rng", "lo", "hi", "lat", "cond")

    def __init__(self, rng: PathRng, lo: Any, hi: Any, lat: "Lattice | None" = None) -> None:
        # ``lat``: the lattice the draw lies on (None: continuous, lo/hi are numbers; else lo/hi are point indices)
        self.rng, self.lo, self.hi, self.lat = rng, lo, hi, lat
        # a comparison decided with a threshold that depends on a draw still pending: called before the interval is
        # used, it reads that draw and narrows the interval (Uniform._narrow)
        self.cond: Callable[[], None] | None = None


def _where() -> str:
    """``file:line`` of the rule's own code that used the uniform."""
    return caller_site(3)


class Uniform:
    """A uniform draw on [0, 1) (or an affine function ``a*u + b`` of one) known only by comparisons.

    Comparisons with numbers fork the enumeration; ``+ - * /`` by numbers stay affine. Anything
    else (``float(u)``, ``math.log(u)``, comparing two uniforms) raises UnsupportedRandomness.
    """

    __slots__ = ("_cell", "_a", "_b")

    def __init__(self, cell: _Cell, a: Any, b: Any) -> None:
        self._cell, self._a, self._b = cell, a, b

    def _num(self, x: Any, op: str) -> Any:
        if isinstance(x, Uniform):
            raise UnsupportedRandomness(f"{op} between two uniforms (at {_where()}): only comparisons of a uniform "
                                        "with numbers and affine arithmetic by numbers can be enumerated")
        return self._cell.rng.number(x, f"the number in uniform {op}")

    def _cmp(self, t: Any, strict: bool, op: str) -> bool:
        """``a*u + b < t`` (``<=`` when not ``strict``)."""
        t = self._num(t, op)
        a, b = self._a, self._b
        cell = self._cell
        rng = cell.rng
        if type(rng) is PathRng and a is rng._one and b is rng._zero and rng._exact:   # the uniform itself (exact)
            return rng._compare(cell, t, strict)
        if a == 0:
            return b < t if strict else b <= t
        bound = t if b == 0 and a == 1 else (t - b) / a     # the uniform itself (the common case): t
        rng = self._cell.rng
        if a > 0:
            return rng._compare(self._cell, bound, strict)
        return not rng._compare(self._cell, bound, not strict)

    def _cut(self, t: Any, strict: bool) -> Any:
        """``a*u + b < t`` (``<=`` when not ``strict``) as a comparison of ``u`` itself: ``(bound, strict, negated)``,
        or a bool where ``a == 0`` (no uniform left in it); ``t`` already a number of the field."""
        a, b = self._a, self._b
        if a == 0:
            return b < t if strict else b <= t
        bound = t if b == 0 and a == 1 else (t - b) / a
        return (bound, strict, False) if a > 0 else (bound, not strict, True)

    def _chance(self, t: Any, strict: bool) -> Any:
        """The probability, on this branch, that ``a*u + b < t`` (``<= t`` when not ``strict``); nothing forked.

        >>> from fractions import Fraction as F
        >>> from exactspec.fields import get_field
        >>> u = PathRng((), 1, get_field(backend="python"), [], {}).uniform()
        >>> (u * 2)._chance(F(1, 2), True), (-u)._chance(F(-1, 4), True)
        (Fraction(1, 4), Fraction(3, 4))
        """
        t = self._num(t, "<" if strict else "<=")
        cut = self._cut(t, strict)
        rng = self._cell.rng
        if type(cut) is bool:
            return rng._one if cut else rng._zero
        bound, st, negated = cut
        p = rng._below_chance(self._cell, bound, st)
        return rng._one - p if negated else p

    def _narrow(self, t: Any, strict: bool, below: bool) -> None:
        """Restrict this uniform to where ``a*u + b < t`` (``<=`` when not ``strict``) is ``below``, with no fork and
        no weight: the branch has already taken that comparison's probability (a decision made jointly with a draw
        that was pending, narrowed once that draw is read)."""
        t = self._num(t, "<" if strict else "<=")
        cut = self._cut(t, strict)
        if type(cut) is bool:
            return
        bound, st, negated = cut
        self._cell.rng._narrow(self._cell, bound, st, below != negated)

    def _direct(self, t: Any) -> Any:
        """The rng to decide a comparison with ``t`` on directly (the uniform itself, continuous, against a number
        of the exact field, nothing observing), else None: :meth:`_cmp` checks and converts first."""
        cell = self._cell
        rng = cell.rng
        if type(rng) is PathRng and type(t) is rng._plain and cell.lat is None and self._a is rng._one and \
                self._b is rng._zero and rng.observe is None:
            return rng
        return None

    def __lt__(self, t: Any) -> bool:
        cell = self._cell
        rng = cell.rng
        if type(rng) is PathRng and type(t) is rng._plain and cell.lat is None and self._a is rng._one and \
                self._b is rng._zero and rng.observe is None:   # as :meth:`_direct`, inline: the common case
            return rng._compare(cell, t, True)
        return self._cmp(t, True, "<")

    def __le__(self, t: Any) -> bool:
        rng = self._direct(t)
        return self._cmp(t, False, "<=") if rng is None else rng._compare(self._cell, t, False)

    def __gt__(self, t: Any) -> bool:
        rng = self._direct(t)
        return not (self._cmp(t, False, ">") if rng is None else rng._compare(self._cell, t, False))

    def __ge__(self, t: Any) -> bool:
        rng = self._direct(t)
        return not (self._cmp(t, True, ">=") if rng is None else rng._compare(self._cell, t, True))

    def __eq__(self, t: Any) -> bool:  # type: ignore[override]
        raise UnsupportedRandomness(f"== on a uniform (at {_where()}): equality of a continuous draw has probability 0")

    __ne__ = __eq__  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __mul__(self, c: Any) -> "Uniform":
        c = self._num(c, "*")
        return Uniform(self._cell, self._a * c, self._b * c)

    __rmul__ = __mul__

    def __truediv__(self, c: Any) -> "Uniform":
        c = self._num(c, "/")
        if c == 0:
            raise ZeroDivisionError("uniform divided by 0")
        return Uniform(self._cell, self._a / c, self._b / c)

    def __add__(self, c: Any) -> "Uniform":
        c = self._num(c, "+")
        return Uniform(self._cell, self._a, self._b + c)

    __radd__ = __add__

    def __sub__(self, c: Any) -> "Uniform":
        c = self._num(c, "-")
        return Uniform(self._cell, self._a, self._b - c)

    def __rsub__(self, c: Any) -> "Uniform":
        c = self._num(c, "-")
        return Uniform(self._cell, -self._a, c - self._b)

    def __neg__(self) -> "Uniform":
        return Uniform(self._cell, -self._a, -self._b)

    def _unsupported(self, op: str) -> Any:
        raise UnsupportedRandomness(f"{op} of a uniform (at {_where()}): the enumerator follows a uniform only "
                                    "through comparisons with numbers and affine arithmetic")

    def __float__(self) -> float:
        return self._unsupported("float()")

    def __int__(self) -> int:
        return self._unsupported("int()")

    def __bool__(self) -> bool:
        return self._unsupported("truth value")

    def __index__(self) -> int:
        return self._unsupported("use as an index")

    def __pow__(self, other: Any) -> Any:
        return self._unsupported("** (power)")

    def __rtruediv__(self, other: Any) -> Any:
        return self._unsupported("division by")

    def __abs__(self) -> Any:
        return self._unsupported("abs()")

    def __round__(self, n: Any = None) -> Any:
        return self._unsupported("round()")

    def __floor__(self) -> Any:
        return self._unsupported("floor()")

    # numpy applies ufuncs to object arrays by calling the method of the same name
    def log(self) -> Any:
        return self._unsupported("log")

    def exp(self) -> Any:
        return self._unsupported("exp")

    def sqrt(self) -> Any:
        return self._unsupported("sqrt")

    def log1p(self) -> Any:
        return self._unsupported("log1p")

    def __ceil__(self) -> Any:
        return self._unsupported("ceil()")

    def __repr__(self) -> str:
        return f"<lazy uniform: known range {self._cell.lo}..{self._cell.hi}, times {self._a} plus {self._b}>"


def enumerate_program(program: Callable[[PathRng], Any], field: Field, *, rng_model: str = "continuous",
                      exact_floats: bool = False) -> dict:
    """The exact law of ``program(rng)``'s return value over every branch of its draws.

    >>> from fractions import Fraction as F
    >>> from exactspec.fields import get_field
    >>> def two_coins(rng):
    ...     u = rng.uniform()
    ...     return (u < F(1, 2), u < F(3, 4))   # one shared uniform, compared twice
    >>> sorted(enumerate_program(two_coins, get_field(backend="python")).items())
    [((False, False), Fraction(1, 4)), ((False, True), Fraction(1, 4)), ((True, True), Fraction(1, 2))]
    """
    lattice = lattice_for(rng_model)
    law: dict = {}
    stack: list = [((), field.one)]
    supports: dict = {}
    while stack:
        prefix, w = stack.pop()
        rng = PathRng(prefix, w, field, stack, supports, lattice=lattice, exact_floats=exact_floats)
        out = program(rng)
        law[out] = law.get(out, field.zero) + rng.weight
    return law
