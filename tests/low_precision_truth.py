"""Independent ground truth for ``exactspec.bugzoo.low_precision``: exact output laws derived by hand, in Fractions.

Nothing here calls exactspec's audit machinery. For each zoo entry, a function computes the exact law
of its first tokens *as the code is written*, on small fixed instances, emulating every rounding
step of the code:

- ``rnd(x, fmt)``: round a Fraction to float16 / bfloat16 / float32 / float64, nearest, ties to even
  (checked against numpy's and torch's casts in the tests);
- torch's and numpy's 16-bit arithmetic computes in float32 and rounds the result to the 16-bit
  type (a division is rounded twice: ``rnd(rnd(a / b, float32), float16)``); their reductions
  (``sum``, ``cumsum``) of 16-bit values accumulate in float32 (checked against torch and numpy);
- a comparison ``u < x`` with ``u`` on the lattice ``k * 2**-b``, ``k = 0 .. 2**b - 1`` (torch CPU
  ``rand`` in float32: b = 24; numpy's and Python's generators: b = 53) holds with probability
  ``ceil(x * 2**b) / 2**b`` (clamped to [0, 1]), ``u <= x`` with ``(floor(x * 2**b) + 1) / 2**b``;
  ``torch.rand(..., dtype=torch.bfloat16)``: a float32 draw rounded to bfloat16, 1.0 mapped to 0
  (the rng model documented in docs/samplers.md), counted exactly;
- ``torch.multinomial``, ``Categorical.sample``, the exponential race ``argmax(w / E)`` and the race
  ``argmax(log(u) / w)`` draw token ``i`` with probability ``w_i / sum(w)`` for the float weights ``w``
  as they are (the rng model of docs/samplers.md: multinomial and races are exact laws of their
  weights); ``torch.bernoulli(c)`` is ``u < c`` with a float32 uniform;
- numpy's ``Generator.choice(V, p=w)``: ``w`` cast to float64, its float64 ``cumsum`` divided by its
  last entry, one 53-bit uniform searched into it (``side='right'``).

Transcendental functions (the transformers adapter's ``log`` of the laws, ``softmax`` in the
code) are not emulated: their float results are taken from torch itself (deterministic
arithmetic, no draw), and everything after them is emulated. The loops' stand-in logits are
``log(numerator) - log(denominator)`` in float64 rounded to the dtype (exactspec's stand-ins'
definition of their input).

Laws are dicts ``{token tuple: Fraction}``; the horizon is ``TOKENS`` tokens after the prompt
``PROMPT``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

Law = dict  # tuple[int, ...] -> Fraction
Vec = tuple  # tuple[Fraction, ...]

PROMPT: tuple = (0,)
TOKENS = 2

# -- rounding -------------------------------------------------------------------------------------------------

#: (significand bits including the implicit one, minimum normal exponent, maximum exponent)
FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127),
           "float64": (53, -1022, 1023)}
SIXTEEN = ("float16", "bfloat16")


def rnd(x: Fraction, fmt: str) -> Fraction:
    """``x`` rounded to the nearest value of ``fmt``, ties to even (subnormals included; overflow raises)."""
    x = Fraction(x)
    if x == 0:
        return Fraction(0)
    m, emin, emax = FORMATS[fmt]
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()     # 2**e <= a < 2**(e + 1) after the fix-up
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - m + 1)
    n, rem = divmod(a, ulp)
    n = int(n)
    if rem > ulp / 2 or (rem == ulp / 2 and n % 2 == 1):
        n += 1
    r = n * ulp
    if r > (2 - Fraction(2) ** (1 - m)) * Fraction(2) ** emax:
        raise OverflowError(f"{x} overflows {fmt}")
    return r if x > 0 else -r


def op(value: Fraction, fmt: str) -> Fraction:
    """The result of one arithmetic operation whose exact value is ``value``, in torch's / numpy's ``fmt``:
    16-bit types compute in float32 and round that to the 16-bit type."""
    return rnd(rnd(value, "float32"), fmt) if fmt in SIXTEEN else rnd(value, fmt)


def div(a: Fraction, b: Fraction, fmt: str) -> Fraction:
    """``a / b`` in ``fmt`` (``inf`` never arises on the instances: ``b > 0``)."""
    return op(Fraction(a) / Fraction(b), fmt)


def sub(a: Fraction, b: Fraction, fmt: str) -> Fraction:
    return op(Fraction(a) - Fraction(b), fmt)


def add(a: Fraction, b: Fraction, fmt: str) -> Fraction:
    return op(Fraction(a) + Fraction(b), fmt)


def acc(fmt: str) -> str:
    """The accumulator of a reduction over ``fmt`` values (torch CPU and numpy: float32 for 16-bit types)."""
    return "float32" if fmt in SIXTEEN else fmt


def total(xs: Sequence[Fraction], fmt: str) -> Fraction:
    """``xs.sum()`` in ``fmt``: a sequential sum in the accumulator, rounded once to ``fmt``."""
    s = Fraction(0)
    for x in xs:
        s = rnd(s + x, acc(fmt))
    return rnd(s, fmt)


def cumsum(xs: Sequence[Fraction], fmt: str, accumulator: str | None = None) -> list:
    """torch's ``cumsum(xs)`` in ``fmt``: a running sum in the accumulator (float32 for 16-bit types), each output
    rounded to ``fmt``. numpy's ``np.cumsum`` of float16 accumulates in float16 (``accumulator="float16"``)."""
    s, out = Fraction(0), []
    for x in xs:
        s = rnd(s + x, accumulator or acc(fmt))
        out.append(rnd(s, fmt))
    return out


def cast(xs: Sequence[Fraction], fmt: str) -> Vec:
    return tuple(rnd(x, fmt) for x in xs)


# -- comparisons with uniforms on a lattice ----------------------------------------------------------------------

def below(x: Fraction, bits: int) -> int:
    """How many lattice points ``k * 2**-bits`` (``k = 0 .. 2**bits - 1``) are ``< x``."""
    n = 1 << bits
    return min(n, max(0, math.ceil(Fraction(x) * n)))


def p_less(x: Fraction, bits: int) -> Fraction:
    """P(u < x), u on the lattice ``k * 2**-bits``."""
    return Fraction(below(x, bits), 1 << bits)


def p_less_equal(x: Fraction, bits: int) -> Fraction:
    """P(u <= x), u on the lattice ``k * 2**-bits``."""
    n = 1 << bits
    return Fraction(min(n, max(0, math.floor(Fraction(x) * n) + 1)) if x >= 0 else 0, n)


def _first_at_least(x: Fraction, fmt: str) -> int:
    """The first k in 0 .. 2**24 with rnd(k * 2**-24, fmt) >= x (rounding is monotone)."""
    lo, hi = 0, 1 << 24
    while lo < hi:
        mid = (lo + hi) // 2
        if rnd(Fraction(mid, 1 << 24), fmt) >= x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def p_less_rounded(x: Fraction, fmt: str) -> Fraction:
    """P(u < x) for torch's CPU ``rand`` in ``fmt`` (16-bit): a float32 draw ``k * 2**-24`` rounded to ``fmt``,
    a result of 1.0 mapped to 0."""
    n = 1 << 24
    if x <= 0:
        return Fraction(0)
    if x > 1:
        return Fraction(1)
    wrapped = n - _first_at_least(Fraction(1), fmt)
    return Fraction(_first_at_least(x, fmt) + wrapped, n)


def _first_above(x: Fraction, fmt: str) -> int:
    """The first k in 0 .. 2**24 with rnd(k * 2**-24, fmt) > x (rounding is monotone)."""
    lo, hi = 0, 1 << 24
    while lo < hi:
        mid = (lo + hi) // 2
        if rnd(Fraction(mid, 1 << 24), fmt) > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def p_less_equal_rounded(x: Fraction, fmt: str) -> Fraction:
    """P(u <= x) for torch's CPU ``rand`` in ``fmt`` (16-bit), as :func:`p_less_rounded` (1.0 mapped to 0)."""
    n = 1 << 24
    if x < 0:
        return Fraction(0)
    if x >= 1:
        return Fraction(1)
    wrapped = n - _first_at_least(Fraction(1), fmt)
    return Fraction(_first_above(x, fmt) + wrapped, n)


# -- laws ------------------------------------------------------------------------------------------------------

def normalize(w: Sequence[Fraction]) -> Law:
    """The law of a draw from weights ``w`` (multinomial, Categorical, races): ``{(i,): w_i / sum(w)}``."""
    s = sum(w, Fraction(0))
    return {(i,): Fraction(x) / s for i, x in enumerate(w) if x > 0}


def numpy_choice(w: Sequence[Fraction]) -> Law:
    """``Generator.choice(len(w), p=w)``: float64 cumsum divided by its last entry, a 53-bit uniform searched
    into it (``side='right'``)."""
    cdf = cumsum([rnd(x, "float64") for x in w], "float64")
    cdf = [div(c, cdf[-1], "float64") for c in cdf]
    out, prev = {}, 0
    for i, c in enumerate(cdf):
        n = below(c, 53)
        if n > prev:
            out[(i,)] = Fraction(n - prev, 1 << 53)
        prev = max(prev, n)
    return out


def inverse_cdf(cdf: Sequence[Fraction], bits: int) -> Law:
    """``min(searchsorted(cdf, u, right=True), V - 1)``, u on the lattice ``k * 2**-bits``."""
    out, prev = {}, 0
    v = len(cdf)
    for i, c in enumerate(cdf):
        n = below(c, bits) if i < v - 1 else 1 << bits
        if n > prev:
            out[(i,)] = Fraction(n - prev, 1 << bits)
        prev = max(prev, n)
    return out


def merge(into: Law, law: Law, prefix: tuple = (), weight: Fraction = Fraction(1)) -> None:
    for k, v in law.items():
        if v:
            into[prefix + k] = into.get(prefix + k, Fraction(0)) + weight * v


def tv(a: Law, b: Law) -> Fraction:
    """Total variation distance between two laws."""
    return sum((abs(a.get(k, Fraction(0)) - b.get(k, Fraction(0))) for k in set(a) | set(b)), Fraction(0)) / 2


# -- instances -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instance:
    """Target and draft laws as functions of the context (a tuple of token ids), vocabulary 3."""

    name: str
    target: Callable[[tuple], Vec]
    draft: Callable[[tuple], Vec]
    vocab: int = 3
    context_free: bool = True


def _cf(law: Sequence[Any]) -> Callable[[tuple], Vec]:
    fixed = tuple(Fraction(x) for x in law)
    return lambda ctx: fixed


F = Fraction
#: rounding shows: thirds, fifths, sixths
A = Instance("A", _cf((F(1, 2), F(1, 3), F(1, 6))), _cf((F(1, 5), F(1, 5), F(3, 5))))
#: dyadic: every probability exact in bfloat16, the draft's powers of two
D = Instance("D", _cf((F(1, 2), F(3, 8), F(1, 8))), _cf((F(1, 4), F(1, 4), F(1, 2))))
#: dyadic with a token the target never emits and the draft drafts half the time
Z = Instance("Z", _cf((F(1, 2), F(1, 2), F(0))), _cf((F(1, 4), F(1, 4), F(1, 2))))
_ODD, _EVEN = (F(1, 2), F(3, 8), F(1, 8)), (F(1, 8), F(3, 8), F(1, 2))
#: dyadic, the target's law depends on the parity of the context length (the prompt has length 1)
DP = Instance("DP", lambda ctx: _ODD if len(ctx) % 2 else _EVEN, _cf((F(1, 4), F(1, 4), F(1, 2))),
              context_free=False)
INSTANCES = {i.name: i for i in (A, D, Z, DP)}


def compose(step: Callable[[tuple], Law], prompt: tuple = PROMPT, tokens: int = TOKENS) -> Law:
    """The law of the first ``tokens`` tokens when ``step(ctx)`` (a law of non-empty emitted tuples) repeats."""
    out: Law = {}

    def go(ctx: tuple, emitted: tuple, pr: Fraction) -> None:
        if len(emitted) >= tokens:
            merge(out, {emitted[:tokens]: pr})
            return
        for toks, w in step(ctx).items():
            go(ctx + toks, emitted + toks, pr * w)
    go(prompt, (), Fraction(1))
    return out


def sharpen(law: Vec, power: int) -> Vec:
    w = [Fraction(x) ** power for x in law]
    s = sum(w, Fraction(0))
    return tuple(x / s for x in w)


def target_law(inst: Instance, power: int = 1) -> Law:
    """What a correct sampler emits: the target's own law (sharpened by ``power`` for a temperature 1/power)."""
    return compose(lambda ctx: {(i,): x for i, x in enumerate(sharpen(inst.target(ctx), power)) if x > 0})


# -- chain samplers ---------------------------------------------------------------------------------------------

@dataclass
class Laws:
    """What a verification step is handed, as exact values of the floats: ``p[j]`` the target row at draft
    position j (``p[k]`` the bonus position's), ``q[j]`` the draft row, ``exact_bonus`` the bonus law."""

    p: list
    q: list
    exact_bonus: Vec


def chain(drafts: tuple, accept: Callable[[int, int], Fraction], recover: Callable[[int], Law],
          bonus: Callable[[], Law]) -> Law:
    """Sequential verification: draft j accepted with probability ``accept(j, x_j)``, else ``recover(j)``
    emitted after the accepted prefix; ``bonus()`` after all k."""
    out: Law = {}
    pr = Fraction(1)
    for j, x in enumerate(drafts):
        a = accept(j, x)
        merge(out, recover(j), tuple(drafts[:j]), pr * (1 - a))
        pr *= a
        if not pr:
            return out
    merge(out, bonus(), tuple(drafts), pr)
    return out


def sampler_step(inst: Instance, gamma: int, convert: Callable[[Vec], Vec],
                 verify: Callable[[tuple, Laws], Law]) -> Callable[[tuple], Law]:
    """A step of an adapter-driven sampler: drafts drawn from the exact draft law, ``convert`` the float rows the
    adapter hands over, ``verify(drafts, laws)`` the sampler's law of emitted tokens."""
    def step(ctx: tuple) -> Law:
        out: Law = {}

        def draft(prefix: tuple, pr: Fraction) -> None:
            if len(prefix) == gamma:
                ctxs = [ctx + prefix[:j] for j in range(gamma + 1)]
                laws = Laws([convert(inst.target(c)) for c in ctxs], [convert(inst.draft(c)) for c in ctxs[:-1]],
                            inst.target(ctxs[-1]))
                merge(out, verify(prefix, laws), (), pr)
                return
            for x, w in enumerate(inst.draft(ctx + prefix)):
                if w:
                    draft(prefix + (x,), pr * w)
        draft((), Fraction(1))
        return out
    return step


def vllm_rows(law: Vec) -> Vec:
    """The vllm adapter's float32 probabilities: ``torch.tensor([float(x) ...], dtype=float32)``."""
    return tuple(rnd(rnd(x, "float64"), "float32") for x in law)


def numpy_rows(law: Vec) -> Vec:
    """The numpy adapter's float64 probabilities."""
    return tuple(rnd(x, "float64") for x in law)


def clamp0(xs: Sequence[Fraction]) -> Vec:
    return tuple(max(Fraction(0), x) for x in xs)


def residual(p: Vec, q: Vec, fmt: str) -> Vec:
    """``clamp(p - q, min=0)`` in ``fmt``."""
    return clamp0([sub(a, b, fmt) for a, b in zip(p, q)])


def exact(laws: Laws) -> Law:
    return {(i,): x for i, x in enumerate(laws.exact_bonus) if x > 0}


def _vllm_std(fmt: str, accept_fmt: Callable[[Fraction], Fraction] | None = None,
              weights: Callable[[Vec, Vec], Vec] | None = None, ratio_cmp: Callable[[Fraction], Fraction] | None = None,
              bonus: Callable[[Laws], Law] | None = None) -> Callable[[tuple, Laws], Law]:
    """The usual vLLM-style verification, with the laws cast to ``fmt``: accept with ``ratio_cmp(p(x)/q(x))``
    (default ``P(u < ratio)`` for a float32 uniform), recover from ``normalize(weights(p, q))``."""
    cmp = ratio_cmp or (lambda r: p_less(r, 24))
    wts = weights or (lambda p, q: residual(p, q, fmt))

    def verify(drafts: tuple, laws: Laws) -> Law:
        ps = [cast(r, fmt) for r in laws.p]
        qs = [cast(r, fmt) for r in laws.q]
        return chain(drafts, lambda j, x: cmp(div(ps[j][x], qs[j][x], fmt)),
                     lambda j: normalize(wts(ps[j], qs[j])), lambda: (bonus or exact)(laws))
    return verify


def _normalised(fmt: str) -> Callable[[Vec, Vec], Vec]:
    """``r = clamp(p - q, 0); r / r.sum()`` in ``fmt``."""
    def w(p: Vec, q: Vec) -> Vec:
        r = residual(p, q, fmt)
        s = total(r, fmt)
        return tuple(div(x, s, fmt) for x in r)
    return w


def _eps(fmt: str, eps: float, normalise: bool) -> Callable[[Vec, Vec], Vec]:
    """``clamp(p - q, 0) + eps`` in ``fmt`` (a Python float scalar: torch casts it to float32, then the 16-bit
    operation computes in float32 and rounds), optionally normalised by its sum."""
    c = rnd(Fraction(eps), "float32")

    def w(p: Vec, q: Vec) -> Vec:
        r = tuple(add(x, c, fmt) for x in residual(p, q, fmt))
        if not normalise:
            return r
        s = total(r, fmt)
        return tuple(div(x, s, fmt) for x in r)
    return w


def _f32_of_bf16_normalised(p: Vec, q: Vec) -> Vec:
    r = residual(p, q, "bfloat16")                 # exact in float32 after .float()
    s = total(r, "float32")
    return tuple(div(x, s, "float32") for x in r)


def _searchsorted_right_f32(laws_p: Vec, laws_q: Vec) -> Law:
    r = residual(laws_p, laws_q, "float32")
    s = total(r, "float32")
    cdf = cumsum([div(x, s, "float32") for x in r], "float32")
    cdf = [div(c, cdf[-1], "float32") for c in cdf]
    return inverse_cdf(cdf, 24)


def v_f32_searchsorted_right(drafts: tuple, laws: Laws) -> Law:
    ps, qs = laws.p, laws.q
    return chain(drafts, lambda j, x: p_less(div(ps[j][x], qs[j][x], "float32"), 24),
                 lambda j: _searchsorted_right_f32(ps[j], qs[j]), lambda: exact(laws))


def v_f16_residual_wrong_sum(drafts: tuple, laws: Laws) -> Law:
    ps = [cast(r, "float16") for r in laws.p]
    qs = [cast(r, "float16") for r in laws.q]

    def recover(j: int) -> Law:
        r = residual(ps[j], qs[j], "float16")
        s = total(ps[j], "float16")
        return inverse_cdf(cumsum([div(x, s, "float16") for x in r], "float16"), 24)
    return chain(drafts, lambda j, x: p_less(div(ps[j][x], qs[j][x], "float16"), 24), recover, lambda: exact(laws))


def v_f16_sum_not_cumprod(drafts: tuple, laws: Laws) -> Law:
    """Independent coins at every position; the prefix length is their count; recovered[n] or the bonus."""
    ps = [cast(r, "float16") for r in laws.p]
    qs = [cast(r, "float16") for r in laws.q]
    k = len(drafts)
    a = [p_less(div(ps[j][x], qs[j][x], "float16"), 24) for j, x in enumerate(drafts)]
    out: Law = {}

    def coins(j: int, n: int, pr: Fraction) -> None:
        if j == k:
            merge(out, exact(laws) if n == k else normalize(residual(ps[n], qs[n], "float16")), drafts[:n], pr)
            return
        coins(j + 1, n + 1, pr * a[j])
        coins(j + 1, n, pr * (1 - a[j]))
    coins(0, 0, Fraction(1))
    return out


def _bf16_bonus_last(laws: Laws) -> Law:
    return normalize(cast(laws.p[-2], "bfloat16"))


# numpy samplers -------------------------------------------------------------------------------------------------

def _np_choice_of(law: Vec, fmt: str) -> Law:
    """``rng.choice(V, p=law / law.sum())`` with ``law`` in numpy ``fmt``."""
    s = total(law, fmt)
    return numpy_choice([div(x, s, fmt) for x in law])


def _numpy_std(fmt: str, cmp: Callable[[Fraction], Fraction] = lambda r: p_less(r, 53),
               eps: float | None = None) -> Callable[[tuple, Laws], Law]:
    """The numpy samplers: laws ``astype(fmt)``, ratio compared with a 53-bit uniform, residual by choice."""
    def verify(drafts: tuple, laws: Laws) -> Law:
        ps = [cast(r, fmt) for r in laws.p]
        qs = [cast(r, fmt) for r in laws.q]

        def recover(j: int) -> Law:
            r = residual(ps[j], qs[j], fmt)
            if eps is not None:         # a Python float meets a float16 array: cast to float16 first (NEP 50)
                c = rnd(rnd(Fraction(eps), "float64"), fmt)
                r = tuple(add(x, c, fmt) for x in r)
            return _np_choice_of(r, fmt)
        return chain(drafts, lambda j, x: cmp(div(ps[j][x], qs[j][x], fmt)), recover,
                     lambda: _np_choice_of(ps[-1], fmt))
    return verify


def _tempered(rows: list, fmt: str) -> list:
    """``w = rows ** np.float32(2.0)`` (float32: a float16 array meets a float32 scalar) normalised in float32."""
    out = []
    for r in rows:
        w = tuple(rnd(rnd(x, "float32") ** 2, "float32") for x in r)
        s = total(w, "float32")
        out.append(tuple(div(x, s, "float32") for x in w))
    return out


def np_temperature(both: bool, fmt: str) -> Callable[[tuple, Laws], Law]:
    def verify(drafts: tuple, laws: Laws) -> Law:
        ps = _tempered([cast(r, fmt) for r in laws.p], fmt)
        qs = _tempered([cast(r, fmt) for r in laws.q], fmt) if both else [cast(r, "float32") for r in laws.q]
        return chain(drafts, lambda j, x: p_less(div(ps[j][x], qs[j][x], "float32"), 53),
                     lambda j: _np_choice_of(residual(ps[j], qs[j], "float32"), "float32"),
                     lambda: _np_choice_of(ps[-1], "float32"))
    return verify


def np32_shared_uniform(drafts: tuple, laws: Laws) -> Law:
    """One 53-bit uniform per position: accept iff u < ratio; else the residual's inverse CDF at the same u."""
    ps = [cast(r, "float32") for r in laws.p]
    qs = [cast(r, "float32") for r in laws.q]
    n = 1 << 53
    out: Law = {}
    pr = Fraction(1)
    for j, x in enumerate(drafts):
        k0 = below(div(ps[j][x], qs[j][x], "float32"), 53)       # the accepting points k < k0
        r = residual(ps[j], qs[j], "float32")
        s = total(r, "float32")
        cdf = cumsum([div(y, s, "float32") for y in r], "float32")
        prev = k0
        for i, c in enumerate(cdf):
            hi = below(c, 53) if i < len(cdf) - 1 else n
            if hi > prev:
                merge(out, {(i,): Fraction(hi - prev, n)}, drafts[:j], pr)
            prev = max(prev, hi)
        pr *= Fraction(k0, n)
    merge(out, _np_choice_of(ps[-1], "float32"), drafts, pr)
    return out


# transformers samplers -----------------------------------------------------------------------------------------

def torch_values(t: Any) -> Vec:
    return tuple(Fraction(float(v)) for v in t.double().reshape(-1).tolist())


def tf_step(inst: Instance, probs: Callable[[Any], Any], *, draw: Callable[[Vec], Law] = normalize,
            fmt: str, bonus_row: Callable[[list, list, tuple], Vec] | None = None, next_row: bool = False,
            tempered: bool = False) -> Callable[[tuple], Law]:
    """A step of a transformers-signature sampler, gamma 1 (``probs`` is the code's softmax, run in torch)."""
    import torch

    def softmax_of(law: Vec, temper: bool = False) -> Vec:
        logits = torch.log(torch.tensor([float(x) for x in law], dtype=torch.float32))
        return torch_values(probs(logits / 0.5 if temper else logits))

    def step(ctx: tuple) -> Law:
        out: Law = {}
        q = softmax_of(inst.draft(ctx))
        for x, w in enumerate(inst.draft(ctx)):
            if not w:
                continue
            p = [softmax_of(inst.target(ctx), tempered), softmax_of(inst.target(ctx + (x,)), tempered)]
            untempered_bonus = softmax_of(inst.target(ctx + (x,)))
            a = p_less(div(p[0][x], q[x], fmt), 24)
            row = p[1] if next_row else p[0]
            merge(out, draw(residual(row, q, fmt)), (), w * (1 - a))
            bonus = bonus_row(p, [untempered_bonus], (x,)) if bonus_row else p[1]
            merge(out, draw(bonus), (x,), w * a)
        return out
    return step


def categorical_f32(w: Vec) -> Law:
    """``Categorical(probs=w.float()).sample()``: probs normalised in float32, then drawn from."""
    s = total(w, "float32")
    return normalize([div(x, s, "float32") for x in w])


# loops --------------------------------------------------------------------------------------------------------

def stand_in_logits(law: Vec, dtype: Any) -> Any:
    """exactspec's stand-in logits row: ``log(num) - log(den)`` in float64 (``-inf`` for 0), cast to ``dtype``."""
    import torch
    return torch.tensor([float("-inf") if x == 0 else math.log(x.numerator) - math.log(x.denominator)
                         for x in law], dtype=dtype)


def loop_step(inst: Instance, dtype: Any, probs: Callable[[Any], Any], fmt: str, *,
              sample_probs: Callable[[Any], Any] | None = None,
              weights: Callable[[Vec, Vec], Vec] | None = None, bonus_from_draft: bool = False,
              cmp_fmt: str | None = None) -> Callable[[tuple], Law]:
    """A step of a gamma-1 loop: a draft drawn by multinomial from ``sample_probs`` (default ``probs``, run in
    torch on the stand-in logits), ``u < p(x) / q(x)`` with a float32 uniform, residual ``weights(p, q)``."""
    wts = weights or (lambda p, q: residual(p, q, fmt))

    def step(ctx: tuple) -> Law:
        out: Law = {}
        q = torch_values(probs(stand_in_logits(inst.draft(ctx), dtype)))
        qs = torch_values((sample_probs or probs)(stand_in_logits(inst.draft(ctx), dtype)))
        for (x,), w in normalize(qs).items():
            p0 = torch_values(probs(stand_in_logits(inst.target(ctx), dtype)))
            p1 = torch_values(probs(stand_in_logits(inst.target(ctx + (x,)), dtype)))
            a = p_less(div(p0[x], q[x], cmp_fmt or fmt), 24)
            merge(out, normalize(wts(p0, q)), (), w * (1 - a))
            bonus = torch_values(probs(stand_in_logits(inst.draft(ctx + (x,)), dtype))) if bonus_from_draft else p1
            merge(out, normalize(bonus), (x,), w * a)
        return out
    return step


# -- every entry: its exact law on an instance -------------------------------------------------------------------

def _s(verify: Callable[[tuple, Laws], Law], convert: Callable[[Vec], Vec] = vllm_rows,
       gamma: int = 1) -> Callable[[Instance], Law]:
    return lambda inst: compose(sampler_step(inst, gamma, convert, verify))


def _tf(probs_name: str, **kw: Any) -> Callable[[Instance], Law]:
    def law(inst: Instance) -> Law:
        import torch
        probs = {"f32": lambda t: t.softmax(-1), "bf16": lambda t: t.to(torch.bfloat16).softmax(-1),
                 "f16": lambda t: torch.softmax(t, -1, dtype=torch.float16)}[probs_name]
        return compose(tf_step(inst, probs, **kw))
    return law


def _lp(dtype_name: str, probs_name: str, fmt: str, **kw: Any) -> Callable[[Instance], Law]:
    def law(inst: Instance) -> Law:
        import torch
        dtype = getattr(torch, dtype_name)
        probs = {"plain": lambda t: t.softmax(-1), "float": lambda t: t.softmax(-1).float(),
                 "temp64": lambda t: (t.double() / torch.tensor([0.5], dtype=torch.float32)).softmax(-1)}[probs_name]
        extra = {k: v for k, v in kw.items() if k != "tempered_drafts"}
        if kw.get("tempered_drafts"):
            extra["sample_probs"] = lambda t: (t / 0.5).softmax(-1).float()
        return compose(loop_step(inst, dtype, probs, fmt, **extra))
    return law


TRUTH: dict = {
    "f32_multinomial": _s(_vllm_std("float32", weights=_normalised("float32"))),
    "f16_half_ratio": _s(_vllm_std("float16")),
    "bf16_multinomial": _s(_vllm_std("bfloat16", weights=_normalised("bfloat16"))),
    "bf16_exponential_race": _s(_vllm_std("bfloat16")),
    "bf16_compute_f32_accept": _s(_vllm_std("bfloat16", weights=_f32_of_bf16_normalised)),
    "f16_cumprod_argmax": _s(_vllm_std("float16"), gamma=2),
    "bf16_bernoulli": _s(_vllm_std("bfloat16", ratio_cmp=lambda r: p_less(min(r, Fraction(1)), 24))),
    "f32_categorical": _s(_vllm_std("float32", weights=_normalised("float32"))),
    "bf16_log_race": _s(_vllm_std("bfloat16")),
    "f32_searchsorted_right": _s(v_f32_searchsorted_right),
    "f32_residual_eps": _s(_vllm_std("float32", weights=_eps("float32", 1e-6, True))),
    "bf16_residual_eps": _s(_vllm_std("bfloat16", weights=_eps("bfloat16", 1e-4, False))),
    "f16_accept_le": _s(_vllm_std("float16", ratio_cmp=lambda r: p_less_equal(r, 24))),
    "bf16_residual_abs": _s(_vllm_std("bfloat16", weights=lambda p, q: tuple(abs(sub(a, b, "bfloat16"))
                                                                              for a, b in zip(p, q)))),
    "bf16_bonus_from_last_draft": _s(_vllm_std("bfloat16", bonus=_bf16_bonus_last)),
    "f16_residual_wrong_sum": _s(v_f16_residual_wrong_sum),
    "bf16_resample_target": _s(_vllm_std("bfloat16", weights=lambda p, q: p)),
    "bf16_uniforms": _s(_vllm_std("bfloat16", ratio_cmp=lambda r: p_less_rounded(r, "bfloat16"))),
    "bf16_uniforms_accept_le": _s(_vllm_std("bfloat16", ratio_cmp=lambda r: p_less_equal_rounded(r, "bfloat16"))),
    "f16_sum_not_cumprod": _s(v_f16_sum_not_cumprod, gamma=2),
    "np32_item_compare": _s(_numpy_std("float32"), numpy_rows),
    "np16_choice": _s(_numpy_std("float16"), numpy_rows),
    "np32_temperature": _s(np_temperature(False, "float32"), numpy_rows),
    "np32_shared_uniform": _s(np32_shared_uniform, numpy_rows),
    "np16_temperature_both": _s(np_temperature(True, "float16"), numpy_rows),
    "np32_accept_le": _s(_numpy_std("float32", cmp=lambda r: p_less_equal(r, 53)), numpy_rows),
    "np16_residual_eps": _s(_numpy_std("float16", eps=1e-4), numpy_rows),
    "tf_f32_softmax": _tf("f32", fmt="float32"),
    "tf_bf16_softmax": _tf("bf16", fmt="bfloat16"),
    "tf_f16_softmax_dtype": _tf("f16", fmt="float16", draw=categorical_f32),
    "tf_bf16_bonus_from_last_draft": _tf("bf16", fmt="bfloat16", bonus_row=lambda p, untempered, x: p[0]),
    "tf_f16_bonus_untempered": _tf("f16", fmt="float16", tempered=True,
                                   bonus_row=lambda p, untempered, x: untempered[0]),
    "tf_f32_residual_next_position": _tf("f32", fmt="float32", next_row=True),
    "loop_bf16_multinomial": _lp("bfloat16", "plain", "bfloat16"),
    "loop_f16_mixed": _lp("float16", "float", "float32"),
    "loop_f32_temperature_tensor": _lp("float32", "temp64", "float64"),
    "loop_bf16_residual_eps": _lp("bfloat16", "plain", "bfloat16", weights=_eps("bfloat16", 1e-4, False)),
    "loop_f16_temperature_draft_only": _lp("float16", "float", "float32", tempered_drafts=True),
    "loop_f32_bonus_from_draft": _lp("float32", "plain", "float32", bonus_from_draft=True),
}

#: the entries sampling at temperature 1/2: their claimed law is the target squared and renormalised
POWER = {"np32_temperature": 2, "np16_temperature_both": 2, "tf_f16_bonus_untempered": 2,
         "loop_f32_temperature_tensor": 2}

#: the instance each entry is audited on: correct entries where rounding shows, buggy ones where the bug does
SHOWCASE = {name: "A" for name in TRUTH}
SHOWCASE.update({n: "D" for n in ("f32_residual_eps", "bf16_residual_eps", "bf16_residual_abs",
                                  "f16_residual_wrong_sum", "bf16_resample_target",
                                  "f16_sum_not_cumprod", "np32_shared_uniform", "np16_temperature_both",
                                  "np16_residual_eps", "tf_f16_bonus_untempered", "loop_bf16_residual_eps",
                                  "loop_f16_temperature_draft_only", "loop_f32_bonus_from_draft")})
SHOWCASE.update({n: "Z" for n in ("f16_accept_le", "np32_accept_le", "bf16_uniforms_accept_le")})
SHOWCASE.update({n: "DP" for n in ("bf16_bonus_from_last_draft", "tf_bf16_bonus_from_last_draft",
                                   "tf_f32_residual_next_position")})

#: the gamma each sampler entry is audited with
GAMMA = {"f16_cumprod_argmax": 2, "f16_sum_not_cumprod": 2}


def law(name: str, instance: str) -> Law:
    """The exact law of entry ``name``'s first TOKENS tokens on an instance (``"A"``, ``"D"``, ``"Z"``, ``"DP"``)."""
    return TRUTH[name](INSTANCES[instance])


def truth_tv(name: str, instance: str) -> Fraction:
    """The exact TV between the entry's law and what a correct rule emits on the instance."""
    return tv(law(name, instance), target_law(INSTANCES[instance], POWER.get(name, 1)))
