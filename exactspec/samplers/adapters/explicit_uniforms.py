"""Kernels that take explicit uniform samples: the law recovered by locating breakpoints by bisection.

Some kernels (FlashInfer's chain speculative sampling, compiled CUDA code) cannot be intercepted:
they take a ``uniform_samples`` tensor and return tokens. :class:`FlashinferChainAdapter` treats
such a kernel as a function of its uniforms and recovers its exact law on a lattice of uniform
values (float32's ``k * 2**-24`` unless the audit's ``rng_model`` names another): coordinate by
coordinate, it bisects over the lattice, batched over rows, to find where the kernel's output
changes, then weighs each cell by its count of lattice points.

Assumptions, stated in every report: each uniform is used through thresholds (the output is
piecewise constant in it, with no pattern A-B-A), and where a uniform's thresholds lie depends
only on the uniforms before it (a chain kernel uses one coin per position, then one uniform for
the recovered or bonus token). Each coordinate is probed with two settings of the later ones.

>>> flashinfer_chain.name
'flashinfer'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np

from ...enumerate.rng import LATTICES, NATIVE, NATIVE64, Lattice, lattice_for
from ...errors import InvalidValue, UnsupportedRngModel
from ...protocols import Step
from .base import Adapter

__all__ = ["FlashinferChainAdapter", "flashinfer_chain", "reference_flashinfer_style", "TensorRandomnessAdapter",
           "tensor_randomness", "ROLES", "KernelAdapter", "KERNEL_RNG_MODELS", "RACE_RATIO_RESOLUTION", "race_floor",
           "kernel_lattice_for", "kernel_lattice", "suggested_thresholds", "uniform_cells", "kernel_race_law"]

#: the rng models a kernel fed its uniforms as tensors is audited under: ``native`` (the grid of the dtype its uniforms
#: are handed in) and the evenly spaced lattices that dtype holds (``float64`` needs float64 uniforms); ``continuous``
#: and the rounded float16 / bfloat16 lattices are refused (:class:`~exactspec.UnsupportedRngModel`), never replaced
#: by another model
KERNEL_RNG_MODELS = ("native", "torch-float32", "float64", "curand")

#: how finely a race's weight ratio is resolved: its cut is located on float32 values, within one float32 ulp
#: (a relative ``2**-23``), so the law of one race is within TV ``2**-23`` of the kernel's
RACE_RATIO_RESOLUTION = Fraction(1, 2 ** 23)


def reference_flashinfer_style(draft_probs: Any, draft_token_ids: Any, uniform_samples: Any,
                               target_probs: Any) -> Any:
    """A correct chain kernel with FlashInfer's argument order (own code), batched over rows.

    ``draft_probs [B, k, V]``, ``draft_token_ids [B, k]``, ``uniform_samples [B, k + 1]``,
    ``target_probs [B, k + 1, V]`` -> ``[B, k + 1]`` ids padded with -1. Position j accepts iff
    ``u_j * q(x) < p(x)``; the recovered or bonus token is the inverse CDF of the residual (or of
    the bonus law) at ``u_k``.
    """
    import torch
    batch, k, _ = draft_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        u = uniform_samples[b]
        n = k
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if u[j] * draft_probs[b, j, x] < target_probs[b, j, x]:
                out[b, j] = x
                continue
            n = j
            break
        law = target_probs[b, n] if n == k else torch.clamp(target_probs[b, n] - draft_probs[b, n], min=0)
        cdf = torch.cumsum(law, 0)
        out[b, n] = min(int(torch.searchsorted(cdf, u[k] * cdf[-1], right=True)), law.shape[0] - 1)
    return out


def _resolve_lattice(lat: Any, precision: str, adapter: str) -> Lattice:
    """A model's lattice (:func:`~exactspec.enumerate.rng.lattice_for`) as a kernel's uniform tensors take it."""
    if lat is NATIVE64:
        return LATTICES["float64"]
    if lat is NATIVE:
        return LATTICES["float64" if precision == "float64" else "torch-float32"]
    if lat is None:
        raise UnsupportedRngModel(
            f"the {adapter} adapter cannot audit under rng_model 'continuous': it hands its kernel the uniforms as "
            f"{precision} tensors, so each is a value on a lattice, never an ideal draw on [0, 1) (and the law "
            "between lattice points is not enumerated); choose one of " + ", ".join(KERNEL_RNG_MODELS),
            adapter=adapter, rng_model="continuous")
    if type(lat).cut is not Lattice.cut:
        raise UnsupportedRngModel(
            f"the {adapter} adapter cannot audit under rng_model {lat.name!r}: kernels fed explicit uniforms are "
            "audited on evenly spaced lattices only; choose one of " + ", ".join(KERNEL_RNG_MODELS),
            adapter=adapter, rng_model=lat.name)
    if not _holds(lat, precision):
        raise UnsupportedRngModel(
            f"the {adapter} adapter cannot audit under rng_model {lat.name!r}: it hands its kernel the uniforms as "
            f"{precision} tensors, which cannot hold that lattice's values (they would be rounded: 1 - 2**-53 to 1.0 "
            f"in float32), so the kernel would not see the model's draws; choose a lattice {precision} holds "
            "(native: its own grid)", adapter=adapter, rng_model=lat.name)
    return lat


#: significand bits of each float dtype a kernel's uniform tensors may have
_SIGNIFICAND = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def _holds(lat: Lattice, precision: str) -> bool:
    """Whether every value of an evenly spaced lattice (offset 0, step ``2**-m``) is a ``precision`` float."""
    bits = _SIGNIFICAND.get(precision, 53)
    step = lat.step
    m = step.denominator.bit_length() - 1
    return lat.offset == 0 and step.numerator == 1 and step.denominator == 1 << m and m <= bits


def kernel_lattice_for(rng_model: str, precision: str = "float32", adapter: str = "explicit-uniforms") -> Lattice:
    """The lattice a kernel's uniform inputs take under ``rng_model`` when handed in ``precision`` (refused with
    :class:`~exactspec.UnsupportedRngModel` where none is: ``continuous``, the rounded lattices).

    >>> kernel_lattice_for("native").name, kernel_lattice_for("native", "float64").name
    ('torch-float32', 'float64')
    >>> kernel_lattice_for("continuous", adapter="flashinfer")
    Traceback (most recent call last):
    ...
    exactspec.errors.UnsupportedRngModel: the flashinfer adapter cannot audit under rng_model 'continuous': ...
    """
    return _resolve_lattice(lattice_for(rng_model), precision, adapter)


def kernel_lattice(rng: Any, precision: str = "float32", adapter: str = "explicit-uniforms",
                   source: str | None = None) -> Lattice:
    """The lattice of a kernel's uniform inputs on this branch (``rng``'s), noted on the audit's session.

    The rng model's; under ``native`` the grid of the uniform tensors the kernel takes (torch's float32
    one; the 53-bit one for float64, the float64 run of a float32 audit); ``continuous`` and a lattice
    that is not evenly spaced are refused (:func:`kernel_lattice_for`). The lattice is noted on the
    audit's session as drawn from by ``source`` (what the report's ``rng`` names).

    >>> from types import SimpleNamespace
    >>> from exactspec.enumerate.rng import lattice_for
    >>> kernel_lattice(SimpleNamespace(lattice=lattice_for("native")), "float32") == kernel_lattice_for("native")
    True
    """
    from ..randomness.interception import current_session
    lat = _resolve_lattice(getattr(rng, "lattice", None), precision, adapter)
    session = current_session()
    if session is not None:
        session.lattices.add((source or f"torch {precision} (the {adapter} kernel's uniform tensors)", lat))
    return lat


def race_floor(tokens: int) -> tuple[Fraction, str]:
    """What following an exponential race to float32 resolution may cost a law of ``tokens`` tokens, and why.

    Each race's weight ratios are found within one float32 ulp (:data:`RACE_RATIO_RESOLUTION`), so each
    race's law lies within TV ``2**-23`` of the kernel's, and a path of ``tokens`` tokens meets at most
    ``tokens`` races (one per step): the law is resolved to TV ``tokens * 2**-23``.

    >>> race_floor(2)[0] == Fraction(1, 2 ** 22)
    True
    """
    n = max(1, int(tokens))
    return n * RACE_RATIO_RESOLUTION, (
        "what the adapter resolves (the exponential race's weight ratios located on float32 values, each within one "
        f"float32 ulp: TV at most 2**-23 a race, {n} race{'s' if n > 1 else ''} on a path of {n} "
        f"token{'s' if n > 1 else ''})")


class KernelAdapter(Adapter):
    """An adapter handing its kernel the uniforms as tensors: audited on evenly spaced lattices only.

    ``uniform_precision`` is the dtype of the uniform tensors (the adapter's precision unless a
    subclass says otherwise: vLLM draws its uniforms in float64); under ``native`` they lie on that
    dtype's grid. Races (``argmax(w / E)``) followed to float32 resolution set ``races = True``: the
    float boundary then holds the float64 run to :func:`race_floor`.

    >>> flashinfer_chain.check_rng_model("curand") is None
    True
    """

    #: whether the kernel's law includes exponential races followed to float32 resolution
    races = False
    watch_operations = False
    #: the dtype the uniforms are handed in (None: the adapter's declared precision)
    uniform_dtype: str | None = None

    def uniform_precision(self) -> str:
        """The dtype of the uniform tensors handed to the kernel.

        >>> flashinfer_chain.uniform_precision()
        'float32'
        """
        return self.uniform_dtype or self.declared_precision() or "float32"

    def check_rng_model(self, rng_model: str) -> None:
        kernel_lattice_for(rng_model, self.uniform_precision(), self.name)

    def resolution_floor(self, rng_model: str, *, tokens: int) -> tuple[Fraction, str] | None:
        return race_floor(tokens) if self.races else None

    def lattice_note(self, rng_model: str) -> str:
        """The lattice the uniforms are enumerated on under ``rng_model``, in words, and the dtype they are handed in.

        >>> flashinfer_chain.lattice_note("native").startswith("k * 2**-24")
        True
        """
        lat = kernel_lattice_for(rng_model, self.uniform_precision(), self.name)
        return f"{lat.note} (handed to the kernel as {self.uniform_precision()} tensors)"


class FlashinferChainAdapter(KernelAdapter):
    """``kernel(draft_probs [B, k, V], draft_token_ids [B, k], uniform_samples [B, k + 1], target_probs
    [B, k + 1, V]) -> [B, k + 1]`` (padded with -1): the law is recovered from the breakpoints of the kernel's
    output over its uniforms (``method="guided"``: probes at the thresholds the laws suggest, one batched call
    per uniform, a search only where an unexpected change shows; ``"bisection"``: the former bisection)."""

    name = "flashinfer"
    family = "chain"
    needs_torch = True
    precision = "float32"
    reference = staticmethod(reference_flashinfer_style)

    def __init__(self, method: str = "guided") -> None:
        if method not in ("guided", "bisection"):
            raise InvalidValue(f"FlashinferChainAdapter method must be 'guided' or 'bisection', got {method!r}")
        self.method = method
        self._declared = TensorRandomnessAdapter(FLASHINFER_ARGUMENTS, {"uniform_samples": "uniform k+1"},
                                                 name="flashinfer")

    def resolution(self, rng_model: str) -> str:
        how = "by bisection" if self.method == "bisection" else "by probes at suggested thresholds and a search"
        return (f"uniform inputs on the lattice {self.lattice_note(rng_model)}; breakpoints located exactly on it {how} "
                f"(assumes threshold use, see exactspec.samplers.adapters.explicit_uniforms)")

    def with_precision(self, precision: str) -> "FlashinferChainAdapter":
        """This adapter handing its laws and uniforms in ``precision`` (the float64 run of a float32 audit).

        >>> flashinfer_chain.with_precision("float64").precision
        'float64'
        """
        if precision == self.precision:
            return self
        return self._copy_at(precision, _declared=self._declared.with_precision(precision))

    def call(self, sampler: Callable, step: Step, rng: Any) -> list[int]:
        if self.method == "guided":
            return self._declared.call(sampler, step, rng)
        return self._bisection(sampler, step, rng)

    def _bisection(self, sampler: Callable, step: Step, rng: Any) -> list[int]:
        import torch
        lat = kernel_lattice(rng, self.precision, self.name)
        k, dt = step.gamma, getattr(torch, self.precision)
        drafts = torch.tensor([list(step.drafts)], dtype=torch.long)
        q = torch.stack([torch.tensor(self.floats(step.claimed(j)), dtype=dt) for j in range(k)])[None]
        p = torch.stack([torch.tensor(self.floats(step.target(j)), dtype=dt)
                         for j in range(k + 1)])[None]
        m = k + 1
        value = np.vectorize(lambda kk: float(lat.offset + kk * lat.step))

        def run(points: np.ndarray) -> list[tuple]:
            """Outputs for a batch of lattice-index rows [R, m]."""
            rows = points.shape[0]
            u = torch.tensor(value(points), dtype=dt)
            out = sampler(q.expand(rows, -1, -1), drafts.expand(rows, -1), u, p.expand(rows, -1, -1))
            return [tuple(int(t) for t in r if int(t) >= 0) for r in np.asarray(out)]

        law: dict[tuple, Fraction] = {}
        total = lat.kmax - lat.kmin + 1

        def explore(cells: list[tuple[int, int]], weight: Fraction) -> None:
            j = len(cells)
            if j == m:
                point = np.array([[(a + b) // 2 for a, b in cells]])
                out = run(point)[0]
                law[out] = law.get(out, Fraction(0)) + weight
                return
            cuts: set[int] = set()
            for frac in (Fraction(1, 3), Fraction(2, 3)):
                rest = [lat.kmin + int((total - 1) * frac)] * (m - j - 1)
                cuts |= _breakpoints(lambda ks: run(np.array([[(a + b) // 2 for a, b in cells] + [kk] + rest
                                                              for kk in ks])), lat.kmin, lat.kmax)
            edges = [lat.kmin] + sorted(cuts) + [lat.kmax + 1]
            for a, b in zip(edges, edges[1:]):
                explore(cells + [(a, b - 1)], weight * Fraction(b - a, total))

        explore([], Fraction(1))
        outputs = sorted(law)
        conv = rng._field.convert
        pick = rng.categorical(tuple(conv(law[o]) for o in outputs))
        return list(outputs[pick])


def _breakpoints(g: Callable[[list[int]], list[tuple]], lo: int, hi: int) -> set[int]:
    """Lattice indices c where g(c - 1) != g(c), found by bisection batched over all open intervals."""
    ends = g([lo, hi])
    pending = [(lo, hi, ends[0], ends[1])] if ends[0] != ends[1] else []
    cuts: set[int] = set()
    while pending:
        mids = [(a + b) // 2 for a, b, _, _ in pending]
        vals = g(mids)
        nxt = []
        for (a, b, ga, gb), mid, gm in zip(pending, mids, vals):
            for x, y, gx, gy in ((a, mid, ga, gm), (mid, b, gm, gb)):
                if gx == gy or x == y:
                    continue
                if y == x + 1:
                    cuts.add(y)
                else:
                    nxt.append((x, y, gx, gy))
        pending = nxt
    return cuts


FLASHINFER_ARGUMENTS = ("draft_probs", "draft_token_ids", "uniform_samples", "target_probs")

#: the step inputs an argument can be declared as (anything else is declared randomness or an ``extra`` constant)
ROLES = {
    "draft_probs": "[B, k, V] the draft laws",
    "target_probs": "[B, k + 1, V] the target laws, the bonus position included",
    "target_probs_k": "[B, k, V] the target laws at the draft positions",
    "draft_token_ids": "[B, k] the drafted tokens (int64)",
    "bonus_token_ids": "[B, 1] the bonus token, drawn by the adapter from the target law at position k",
    "output_token_ids": "[B, k + 1] int64 filled with -1, for a kernel that writes its output (and returns None)",
}

_HUGE, _TINY = 3.0e38, 1.0e-30


def _count(expr: str, k: int, vocab: int) -> int:
    expr = expr.replace(" ", "")
    table = {"k": k, "k+1": k + 1, "V": vocab, "1": 1}
    if expr in table:
        return table[expr]
    if expr.isdigit():
        return int(expr)
    raise InvalidValue(f"tensor_randomness: cannot read the count {expr!r} (use k, k+1, V or a number)")


class TensorRandomnessAdapter(KernelAdapter):
    """A chain kernel that reads its randomness from tensor arguments, declared by name (see :func:`tensor_randomness`).

    The kernel is called with ``B`` rows, one per point at which it is evaluated; its output is
    ``[B, k + 1]`` token ids padded with -1 (or a tuple whose first item is, or the declared
    ``output_token_ids`` argument it filled when it returns None: the Triton launch idiom). Uniform arguments take
    values on the audit's lattice (``torch-float32`` unless ``rng_model`` names another); the law of
    the output is the number of lattice points of each cell between the kernel's breakpoints, found
    coordinate by coordinate: all cells of a coordinate are probed in one batched call, at the
    thresholds the step's laws suggest (``p_j(x) / q_j(x)``, cumulative sums of the target and residual
    laws, in float32 and float64, and their lattice neighbours), and a search (``fan`` points a call)
    runs only in a gap whose ends differ without a probed breakpoint. Assumptions, stated in the
    resolution: each uniform is used through thresholds (piecewise constant, no pattern A-B-A
    between two probes), and where a uniform's thresholds lie depends only on the uniforms before it.
    An exponential argument is followed as the race ``argmax(w / E)``: at each cell its participants
    are found by three batched calls and the ratio of their weights by the same breakpoint search over
    the exponential of one of them (float32 resolution: each ratio within one float32 ulp).
    """

    family = "chain"
    needs_torch = True

    def __init__(self, arguments: Sequence[str], randomness: dict[str, str], *, name: str = "tensor-randomness",
                 dtype: str = "float32", keywords: bool = False, extra: dict[str, Any] | None = None,
                 reference: Callable | None = None, fan: int = 64) -> None:
        self.arguments, self.keywords, self.extra = tuple(arguments), keywords, dict(extra or {})
        self.name, self.dtype, self.precision, self.fan = name, dtype, dtype, max(2, int(fan))
        self.reference = reference
        self.reference_rule_name = "speculative_sampling" if reference is not None else ""
        self._memo: dict[tuple, dict[tuple, Fraction]] = {}
        self.specs: dict[str, tuple[str, str]] = {}
        for arg, spec in dict(randomness).items():
            kind, _, count = str(spec).strip().partition(" ")
            if kind not in ("uniform", "exponential") or not count:
                raise InvalidValue(f"tensor_randomness: argument {arg!r}: declare 'uniform <count>' or "
                                   f"'exponential <count>' (count: k, k+1, V, a number; 'k+1,V' for a matrix), "
                                   f"got {spec!r}")
            if arg not in self.arguments:
                raise InvalidValue(f"tensor_randomness: {arg!r} is declared random but is not among the arguments "
                                   f"{self.arguments}")
            self.specs[arg] = (kind, count)
        if sum(kind == "exponential" for kind, _ in self.specs.values()) > 1:
            raise InvalidValue("tensor_randomness: at most one exponential argument (one race) is followed")
        self.races = any(kind == "exponential" for kind, _ in self.specs.values())
        unknown = [a for a in self.arguments if a not in ROLES and a not in self.specs and a not in self.extra]
        if unknown:
            raise InvalidValue(f"tensor_randomness: arguments {unknown} are neither step inputs "
                               f"({', '.join(ROLES)}), "
                               "declared randomness nor extra constants")

    def resolution(self, rng_model: str) -> str:
        return (f"uniform inputs on the lattice {self.lattice_note(rng_model)}; breakpoints located exactly on it by "
                "probes at suggested thresholds and a search (assumes threshold use, see "
                "exactspec.samplers.adapters.explicit_uniforms)"
                + ("; the exponential race's weight ratios to one float32 ulp (the float64 run is held to that: "
                   "TV 2**-23 a race)" if self.races else ""))

    def with_precision(self, precision: str) -> "TensorRandomnessAdapter":
        """This adapter handing its laws and random tensors in ``precision`` (the float64 run of a float32 audit).

        >>> tensor_randomness(["target_probs"], {}).with_precision("float64").dtype
        'float64'
        """
        if precision == self.precision:
            return self
        return self._copy_at(precision, dtype=precision, _memo={})

    def call(self, sampler: Callable, step: Step, rng: Any) -> list[int]:
        import torch
        lat = kernel_lattice(rng, self.dtype, self.name)
        k, dt = step.gamma, getattr(torch, self.dtype)
        vocab = len(step.target(0))
        p = [self.floats(step.target(j)) for j in range(k + 1)]
        q = [self.floats(step.claimed(j)) for j in range(k)]
        base: dict[str, Any] = {
            "draft_probs": torch.tensor(np.stack(q), dtype=dt)[None],
            "target_probs": torch.tensor(np.stack(p), dtype=dt)[None],
            "target_probs_k": torch.tensor(np.stack(p[:k]), dtype=dt)[None],
            "draft_token_ids": torch.tensor([list(step.drafts)], dtype=torch.long)}
        if "bonus_token_ids" in self.arguments:
            base["bonus_token_ids"] = torch.tensor([[rng.categorical(step.target(k))]], dtype=torch.long)
        uniforms = [(a, _count(c, k, vocab)) for a, (kind, c) in self.specs.items() if kind == "uniform"]
        race = [(a, [_count(x, k, vocab) for x in c.split(",")]) for a, (kind, c) in self.specs.items()
                if kind == "exponential"]
        m = sum(n for _, n in uniforms)
        if race and race[0][1][-1] != vocab:
            raise InvalidValue(f"tensor_randomness: the exponential argument {race[0][0]!r} must end with "
                               f"V = {vocab} "
                               "values (one per token)")

        def run(points: np.ndarray, exps: np.ndarray | None = None) -> list[tuple]:
            """Outputs for lattice-index rows ``[R, m]`` (and race exponentials ``[R, V]``, ones when None)."""
            rows = points.shape[0]
            values = float(lat.offset) + points.astype(np.float64) * float(lat.step) if m else points
            args: dict[str, Any] = {}
            for a in self.arguments:
                if a in base:
                    args[a] = base[a].expand(rows, *base[a].shape[1:]).contiguous()
                elif a in self.extra:
                    args[a] = self.extra[a]
            col = 0
            for a, n in uniforms:
                args[a] = torch.tensor(values[:, col:col + n], dtype=dt)
                col += n
            for a, shape in race:
                e = np.ones((rows, vocab)) if exps is None else exps
                t = torch.tensor(e, dtype=dt)
                args[a] = t.reshape(rows, *([1] * (len(shape) - 1)), vocab).expand(rows, *shape).contiguous()
            if "output_token_ids" in self.arguments:
                args["output_token_ids"] = torch.full((rows, k + 1), -1, dtype=torch.long)
            if self.keywords:
                out = sampler(**args)
            else:
                out = sampler(*[args[a] for a in self.arguments])
            if out is None and "output_token_ids" in args:
                out = args["output_token_ids"]
            if isinstance(out, (tuple, list)) and len(out) and hasattr(out[0], "shape"):
                out = out[0]
            return [tuple(int(t) for t in r if int(t) >= 0) for r in np.asarray(out).reshape(rows, -1)]

        # replay reruns this call once per outcome of its own draw: the law of an input is found once
        key = (sampler, lat.name, tuple(step.drafts), tuple(tuple(step.target(j)) for j in range(k + 1)),
               tuple(tuple(step.claimed(j)) for j in range(k)), int(base["bonus_token_ids"][0, 0])
               if "bonus_token_ids" in base else None)
        law = self._memo.get(key)
        if law is None:
            law = self._law(run, m, lat, p, q, step, race, vocab)
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[key] = law
        outputs = sorted(law)
        conv = rng._field.convert
        pick = rng.categorical(tuple(conv(law[o]) for o in outputs))
        return list(outputs[pick])

    def _law(self, run: Callable, m: int, lat: Any, p: list, q: list, step: Step, race: list,
             vocab: int) -> dict[tuple, Fraction]:
        guesses = suggested_thresholds(p, q, list(step.drafts), lat)
        cells = uniform_cells(run, m, lat, guesses, self.fan)
        points = np.array([[(a + b) // 2 for a, b in cell] for cell, _ in cells], dtype=np.int64).reshape(len(cells), m)
        law: dict[tuple, Fraction] = {}
        if race:
            for (cell, weight), point in zip(cells, points):
                for out, share in kernel_race_law(run, point, vocab, p, q, self.fan).items():
                    law[out] = law.get(out, Fraction(0)) + weight * share
        else:
            for (cell, weight), out in zip(cells, run(points)):
                law[out] = law.get(out, Fraction(0)) + weight
        return law


def tensor_randomness(arguments: Sequence[str], randomness: dict[str, str], *, name: str = "tensor-randomness",
                      dtype: str = "float32", keywords: bool = False, extra: dict[str, Any] | None = None,
                      reference: Callable | None = None) -> TensorRandomnessAdapter:
    """An adapter for a chain kernel that reads its randomness from tensors, declared argument by argument.

    ``arguments`` names the kernel's arguments in order: step inputs (:data:`ROLES`: ``draft_probs``,
    ``target_probs``, ``target_probs_k``, ``draft_token_ids``, ``bonus_token_ids``), declared randomness,
    or constants in ``extra``. ``randomness`` maps an argument to ``"uniform k+1"`` (k + 1 uniforms per
    row), ``"uniform k"``, ``"exponential V"`` (V exponentials per row, followed as a race) or
    ``"exponential k+1,V"``. Laws are handed over in ``dtype``. ``keywords=True`` calls the kernel with
    keyword arguments. ``reference``: a correct kernel with the same signature, for the rounding figure.

    >>> from exactspec.samplers.adapters.explicit_uniforms import reference_flashinfer_style
    >>> a = tensor_randomness(("draft_probs", "draft_token_ids", "uniform_samples", "target_probs"),
    ...                       {"uniform_samples": "uniform k+1"}, reference=reference_flashinfer_style)
    >>> a.specs
    {'uniform_samples': ('uniform', 'k+1')}
    """
    return TensorRandomnessAdapter(arguments, randomness, name=name, dtype=dtype, keywords=keywords, extra=extra,
                                   reference=reference)


def suggested_thresholds(p: list, q: list, drafts: list, lat: Any) -> dict[str, Any]:
    """Lattice indices where a chain kernel's uniforms likely change its output: per coin and for the last uniform.

    The coins' around each draft's ``p / q`` (in float64 and float32), the last uniform's around the
    cumulative sums of the target and residual laws (normalised or not), on ``lat``.

    >>> import numpy as np
    >>> t = suggested_thresholds([np.array([0.5, 0.5])] * 2, [np.array([0.25, 0.75])], [0],
    ...                          kernel_lattice_for("native"))
    >>> t["coins"], 2 ** 23 in t["final"]        # p / q = 2 is off the lattice; 1/2 = 2**23 * 2**-24
    ([[]], True)
    """
    f32 = np.float32
    coins: list[list[float]] = []
    for j, x in enumerate(drafts):
        pj, qj = p[j][x], q[j][x]
        vals = []
        if qj > 0:
            vals += [pj / qj, float(f32(pj) / f32(qj))]
        coins.append(vals)
    final: list[float] = []
    for j in range(len(p)):
        laws = [p[j]] + ([np.maximum(p[j] - q[j], 0)] if j < len(q) else [])
        for law in laws:
            for dtype in (np.float64, np.float32):
                c = np.cumsum(law.astype(dtype))
                if c[-1] > 0:
                    final += list((c / c[-1]).astype(np.float64))
                    final += list(c.astype(np.float64))

    def idx(values: list[float]) -> list[int]:
        out = set()
        for v in values:
            if not np.isfinite(v):
                continue
            c = int(np.ceil((v - float(lat.offset)) / float(lat.step)))
            for d in (-2, -1, 0, 1):
                if lat.kmin <= c + d <= lat.kmax:
                    out.add(c + d)
        return sorted(out)
    return {"coins": [idx(v) for v in coins], "final": idx(final)}


def _line_cuts(evaluate: Callable[[list[tuple[int, int]]], list[tuple]], n_lines: int, lo: int, hi: int,
               probes: list[int], fan: int, grid: int = 1) -> list[set[int]]:
    """For each line, the indices c in (lo, hi] with output(c - 1) != output(c).

    A coarse grid first; in a gap whose ends differ, the suggested probes inside it; where they do not
    settle it, ``fan`` evenly spaced points. Every round is one batched call over all lines.
    """
    import bisect
    probes = sorted(set(probes))
    known: list[dict[int, tuple]] = [dict() for _ in range(n_lines)]
    start = sorted({lo, hi} | {lo + (hi - lo) * i // grid for i in range(1, grid)})
    todo = [(li, c) for li in range(n_lines) for c in start]
    cuts: list[set[int]] = [set() for _ in range(n_lines)]
    while todo:
        for (li, c), out in zip(todo, evaluate(todo)):
            known[li][c] = out
        todo = []
        for li, kn in enumerate(known):
            cs = sorted(kn)
            for a, b in zip(cs, cs[1:]):
                if kn[a] == kn[b]:
                    continue
                if b == a + 1:
                    cuts[li].add(b)
                    continue
                inside = [c for c in probes[bisect.bisect_right(probes, a):bisect.bisect_left(probes, b)]
                          if c not in kn]
                if not inside:
                    n = min(fan, b - a - 1)
                    inside = sorted({a + (b - a) * i // (n + 1) for i in range(1, n + 1)} - set(kn))
                todo += [(li, c) for c in inside]
    return cuts


def uniform_cells(run: Callable, m: int, lat: Any, guesses: dict, fan: int) -> list[tuple[list, Fraction]]:
    """Cells (intervals of lattice indices, one per uniform) on which the kernel's output is constant, with weights.

    ``run`` maps rows of ``m`` lattice indices to the kernel's outputs; ``guesses`` is
    :func:`suggested_thresholds`'s, probed first; ``fan`` points split a gap the guesses do not settle.

    >>> from fractions import Fraction as F
    >>> from exactspec.enumerate.rng import Lattice
    >>> lat = Lattice("eighths", F(0), F(1, 8), 0, 7, "k / 8")
    >>> uniform_cells(lambda pts: [(int(row[0] >= 2),) for row in pts], 1, lat, {"coins": [[2]], "final": []}, 2)
    [([(0, 1)], Fraction(1, 4)), ([(2, 7)], Fraction(3, 4))]
    """
    total = lat.kmax - lat.kmin + 1
    cells: list[tuple[list, Fraction]] = [([], Fraction(1))]
    for j in range(m):
        lines = []
        for cell, _ in cells:
            mids = [(a + b) // 2 for a, b in cell]
            for frac in (Fraction(1, 3), Fraction(2, 3)):
                lines.append((mids, [lat.kmin + int((total - 1) * frac)] * (m - j - 1)))
        # the first k uniforms are the drafts' coins (their ratios), any later one draws a token (cumulative sums)
        probes = guesses["coins"][j] if j < len(guesses["coins"]) else guesses["final"]

        def evaluate(todo: list[tuple[int, int]], lines: list = lines) -> list[tuple]:
            pts = np.array([lines[li][0] + [c] + lines[li][1] for li, c in todo], dtype=np.int64).reshape(len(todo), m)
            return run(pts)

        cuts = _line_cuts(evaluate, len(lines), lat.kmin, lat.kmax, probes, fan)
        new = []
        for ci, (cell, weight) in enumerate(cells):
            edges = [lat.kmin] + sorted(cuts[2 * ci] | cuts[2 * ci + 1]) + [lat.kmax + 1]
            for a, b in zip(edges, edges[1:]):
                new.append((cell + [(a, b - 1)], weight * Fraction(b - a, total)))
        cells = new
    return cells


def kernel_race_law(run: Callable, point: np.ndarray, vocab: int, p: list, q: list,
                    fan: int) -> dict[tuple, Fraction]:
    """The law of the output at one uniform cell when an exponential vector E is raced: ``argmax(w / E)``.

    ``run(points, E)`` is the kernel at the cell's ``point`` with the exponentials ``E``; each racer's
    weight is read off the one cut where it starts to win against the first.

    >>> import numpy as np
    >>> race = lambda pts, e: [(int(np.argmax(np.array([1.0, 3.0]) / row)),) for row in e]
    >>> kernel_race_law(race, np.array([0]), 2, [np.array([0.25, 0.75])], [], 8)
    {(0,): Fraction(1, 4), (1,): Fraction(3, 4)}
    """
    from ...errors import UnsupportedRandomness
    pts = np.repeat(point[None], vocab, axis=0)
    ones = np.ones((1, vocab))
    base = run(point[None], ones)[0]
    alone = np.full((vocab, vocab), _HUGE)
    np.fill_diagonal(alone, 1.0)
    without = np.ones((vocab, vocab))
    np.fill_diagonal(without, _HUGE)
    only = run(pts, alone)                       # b alone in the race: b wins iff w_b > 0 (else the argmax of w)
    drop = run(pts, without)                     # b left out: the output changes iff b was the winner
    racers = [b for b in range(vocab) if only[b] != base or drop[b] != base]
    if len(racers) <= 1:
        return {base: Fraction(1)}
    ref = racers[0]
    if len({only[b] for b in racers}) != len(racers):
        raise UnsupportedRandomness("an exponential race whose participants give the same output: their weights "
                                    "cannot be told apart by the output")
    # E_ref = 1, E_b = x, the rest out of the race: b wins while w_b / x > w_ref, so the cut is x* = w_b / w_ref
    lo, hi = int(np.float32(1e-37).view(np.int32)), int(np.float32(1e37).view(np.int32))
    others = [b for b in racers if b != ref]
    probes = set()
    for law in [np.asarray(x) for x in p] + [np.maximum(np.asarray(p[j]) - np.asarray(q[j]), 0) for j in range(len(q))]:
        for b in others:
            if law[ref] > 0 and law[b] > 0:
                c = int(np.float32(law[b] / law[ref]).view(np.int32))
                probes |= {c + d for d in (-2, -1, 0, 1)}

    def evaluate(todo: list[tuple[int, int]]) -> list[tuple]:
        e = np.full((len(todo), vocab), _HUGE)
        for r, (li, c) in enumerate(todo):
            e[r, ref] = 1.0
            e[r, others[li]] = float(np.int32(c).view(np.float32))
        return run(np.repeat(point[None], len(todo), axis=0), e)

    cuts = _line_cuts(evaluate, len(others), lo, hi, sorted(probes), fan)
    weights = {ref: Fraction(1)}
    for li, b in enumerate(others):
        if len(cuts[li]) != 1:
            raise UnsupportedRandomness(f"the exponential race: token {b} against token {ref} changes the output "
                                        f"{len(cuts[li])} times as E_{b} grows (expected once: argmax(w / E))")
        weights[b] = Fraction(float(np.int32(min(cuts[li])).view(np.float32)))
    total = sum(weights.values())
    return {only[b]: w / total for b, w in weights.items()}


flashinfer_chain = FlashinferChainAdapter()
