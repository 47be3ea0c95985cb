"""A plain reference for audits of torch samplers and whole loops: every draw enumerated eagerly.

It shares no code with exactspec's interception (no lazy or pending draws, no deferral, no joint draws, no
worlds, no caches): the sampler or loop runs under a ``torch`` function mode (per thread, nothing patched)
that follows a fixed list of choices and stops at the first draw past it, as
:mod:`benchmarks.plain_samplers` does for numpy, and the law is a plain recursion over every branch. Each
draw forks the moment it is made or compared:

- ``torch.multinomial`` (function and method): every sample of every row at once, from the exact law
  of its float weights normalised by their exact sum (without replacement: each next sample from what
  is left);
- ``torch.rand`` and ``torch.rand_like`` (float32: ``k * 2**-24``, float64: ``k * 2**-53``, ``k``
  uniform, 0 included, as torch's CPU generator makes them): a uniform tensor that can be indexed,
  reshaped, compared and read with ``item``/``tolist``; each comparison of an entry with a number splits
  the range of ``k`` still possible for it (the number cast to the dtype torch compares in);
- ``torch.searchsorted(cdf, u)`` of a 1-D ``cdf`` (left or right): each entry compared with the boundaries
  in turn, forking at each;
- ``Tensor.exponential_`` (as ``w / torch.empty_like(w).exponential_()`` then ``argmax``): the race
  ``argmax(w / E)``, a categorical draw from ``w / sum(w)``.

Anything else done with a uniform or an exponential, any other random function, and any draw from torch's
generator that escapes these (its state moved) raises :class:`Unsupported`: the plain reference covers
less than the audit, and says so rather than return a wrong law.

>>> import exactspec as es
>>> from fractions import Fraction as F
>>> from exactspec.bugzoo import loops
>>> p, q = es.models.context_free(("3/4", "1/4")), es.models.context_free(("1/2", "1/2"))
>>> plain_loop_law(loops.speculative_sampling, p, q, prompt=(0,), tokens=1) == {(0,): F(3, 4), (1,): F(1, 4)}
True
"""

from __future__ import annotations

import math
import pickle
import random
import time
from fractions import Fraction
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from benchmarks.plain_samplers import Branch, Choices, stream_law

#: torch's CPU uniforms: ``k * 2**-m`` for ``k = 0 .. 2**m - 1``
_LATTICE = {torch.float32: 2 ** 24, torch.float64: 2 ** 53}


class Unsupported(Exception):
    """The sampler or loop does something with its randomness that the plain reference does not follow."""


def _refuse(name: str, why: str) -> Any:
    """An attribute a draw does not have here: Unsupported, but AttributeError for protocol lookups (``__array__``)."""
    if name.startswith("__"):
        raise AttributeError(name)
    raise Unsupported(why)


class _Draw:
    """What torch sees in the draws: an object with ``__torch_function__``, so every torch function handed one
    reaches the mode (and not the argument parser's TypeError)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        raise Unsupported(f"{getattr(func, '__name__', func)} of a draw")


def _no_operator(name: str) -> Callable[..., Any]:
    def refuse(self: Any, *args: Any) -> Any:
        raise Unsupported(f"{name} of a draw: the plain reference compares, indexes and races draws only")
    return refuse


#: Python's operators on a draw (looked up on the type, never through __getattr__): Unsupported, not a TypeError
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__pow__", "__rpow__", "__neg__", "__abs__", "__float__", "__int__", "__index__",
              "__bool__", "__and__", "__or__", "__invert__"):
    setattr(_Draw, _name, _no_operator(_name))


def _exact(x: float) -> Fraction:
    return Fraction(float(x))


class _Entries:
    """The draws of one ``rand`` call: for entry ``i``, the range ``lo[i] <= k < hi[i]`` of lattice points still
    possible (``size`` points), or with ``size`` None the interval ``[lo[i], hi[i])`` of an ideal uniform."""

    def __init__(self, n: int, size: int | None, choices: Choices) -> None:
        top = 1 if size is None else size
        self.lo, self.hi, self.size, self.choices = [0] * n, [top] * n, size, choices

    def below(self, i: int, t: Fraction, strict: bool) -> bool:
        """Fork on ``u_i < t`` (``<=`` when not ``strict``)."""
        if self.size is None:
            cut: Any = t                       # an ideal uniform: ``u == t`` has probability 0
        else:
            x = t * self.size
            cut = math.ceil(x) if strict else math.floor(x) + 1
        lo, hi = self.lo[i], self.hi[i]
        cut = min(max(cut, lo), hi)
        yes = self.choices.pick([(True, Fraction(cut - lo) / (hi - lo)), (False, Fraction(hi - cut) / (hi - lo))])
        if yes:
            self.hi[i] = cut
        else:
            self.lo[i] = cut
        return yes


class _Scalar(_Draw):
    """One uniform read with ``item()``/``tolist()``: a Python number that compares by forking."""

    def __init__(self, entries: _Entries, i: int) -> None:
        self.entries, self.i = entries, i

    def __lt__(self, t: Any) -> bool:
        return self.entries.below(self.i, _exact(t), True)

    def __le__(self, t: Any) -> bool:
        return self.entries.below(self.i, _exact(t), False)

    def __gt__(self, t: Any) -> bool:
        return not self.entries.below(self.i, _exact(t), False)

    def __ge__(self, t: Any) -> bool:
        return not self.entries.below(self.i, _exact(t), True)

    def __getattr__(self, name: str) -> Any:
        _refuse(name, f"a uniform read as a number: only compared, not .{name}")

    def __float__(self) -> float:
        raise Unsupported("float() of a uniform")


class _Uniforms(_Draw):
    """A uniform tensor: entry ids into its draws, shaped as the code indexed and reshaped them."""

    def __init__(self, entries: _Entries, ids: np.ndarray, dtype: Any) -> None:
        self.entries, self.ids, self.dtype = entries, ids, dtype

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self.ids.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ids.ndim

    def numel(self) -> int:
        return int(self.ids.size)

    def __len__(self) -> int:
        return len(self.ids)

    def _like(self, ids: np.ndarray) -> "_Uniforms":
        return _Uniforms(self.entries, np.asarray(ids), self.dtype)

    def __getitem__(self, index: Any) -> "_Uniforms":
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        elif isinstance(index, tuple):
            index = tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in index)
        return self._like(self.ids[index])

    def __iter__(self) -> Iterator["_Uniforms"]:
        return (self._like(row) for row in self.ids)

    def view(self, *shape: Any) -> "_Uniforms":
        return self._like(self.ids.reshape(*shape))

    reshape = view

    def squeeze(self, dim: int | None = None) -> "_Uniforms":
        if dim is None:
            return self._like(self.ids.squeeze())
        return self._like(self.ids.squeeze(dim) if self.ids.shape[dim] == 1 else self.ids)

    def unsqueeze(self, dim: int) -> "_Uniforms":
        return self._like(np.expand_dims(self.ids, dim))

    def flatten(self) -> "_Uniforms":
        return self._like(self.ids.reshape(-1))

    def item(self) -> _Scalar:
        if self.ids.size != 1:
            raise RuntimeError("a Tensor with more than one element cannot be converted to Scalar")
        return _Scalar(self.entries, int(self.ids.reshape(-1)[0]))

    def tolist(self) -> Any:
        return np.vectorize(lambda i: _Scalar(self.entries, int(i)), otypes=[object])(self.ids).tolist()

    def _compare(self, other: Any, strict: bool, below: bool) -> torch.Tensor:
        # torch compares in the dtype of the promotion (a number or a 0-dim tensor takes the uniform's dtype)
        dtype = torch.result_type(torch.empty(self.shape, dtype=self.dtype), other)
        t = (other.to(dtype) if isinstance(other, torch.Tensor) else torch.tensor(other, dtype=dtype))
        ids, ts = np.broadcast_arrays(self.ids, t.detach().to(torch.float64).numpy())
        out = np.empty(ids.shape, dtype=bool)
        for idx in np.ndindex(*ids.shape):         # entry by entry, in row-major order
            yes = self.entries.below(int(ids[idx]), _exact(float(ts[idx])), strict)
            out[idx] = yes if below else not yes
        return torch.from_numpy(out)

    def __lt__(self, t: Any) -> torch.Tensor:
        return self._compare(t, True, True)

    def __le__(self, t: Any) -> torch.Tensor:
        return self._compare(t, False, True)

    def __gt__(self, t: Any) -> torch.Tensor:
        return self._compare(t, False, False)

    def __ge__(self, t: Any) -> torch.Tensor:
        return self._compare(t, True, False)

    def searched(self, cdf: torch.Tensor, right: bool) -> torch.Tensor:
        """``torch.searchsorted(cdf, u, right=)`` of a 1-D ``cdf``: each entry walks the boundaries, forking at each."""
        if cdf.dim() != 1:
            raise Unsupported("searchsorted of uniforms in a cdf of more than one dimension")
        dtype = torch.promote_types(cdf.dtype, self.dtype)
        bounds = [_exact(c) for c in cdf.detach().to(dtype).to(torch.float64).tolist()]
        out = np.empty(self.ids.shape, dtype=np.int64)
        for idx in np.ndindex(*self.ids.shape):
            i = int(self.ids[idx])
            # left: the first j with u <= cdf[j]; right: the first j with u < cdf[j]
            out[idx] = next((j for j, c in enumerate(bounds) if self.entries.below(i, c, right)), len(bounds))
        return torch.from_numpy(out)

    def __getattr__(self, name: str) -> Any:
        _refuse(name, f"uniform tensor .{name}: the plain reference indexes, reshapes and compares uniforms only")


class _Race(_Draw):
    """``w / E`` for fresh exponentials ``E``: its ``argmax`` over the last dimension is a draw from ``w / sum(w)``."""

    def __init__(self, weights: torch.Tensor, choices: Choices) -> None:
        self.weights, self.choices = weights, choices

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
        w = self.weights.detach().to(torch.float64)
        if dim is None:
            return torch.tensor(_categorical(w.reshape(-1).tolist(), self.choices))
        if dim not in (-1, w.dim() - 1):
            raise Unsupported("an exponential race's argmax over a dimension other than the last")
        rows = w.reshape(-1, w.shape[-1]).tolist()
        out = torch.tensor([_categorical(r, self.choices) for r in rows]).reshape(w.shape[:-1])
        return out.unsqueeze(-1) if keepdim else out

    def __getattr__(self, name: str) -> Any:
        _refuse(name, f"an exponential race .{name}: the plain reference takes its argmax only")


class _Exponentials(_Draw):
    """Fresh ``Exp(1)`` draws: only divided into weights (a race)."""

    def __init__(self, shape: torch.Size, choices: Choices) -> None:
        self.shape, self.choices = shape, choices

    def __rtruediv__(self, w: Any) -> _Race:
        if not isinstance(w, torch.Tensor) or torch.broadcast_shapes(w.shape, self.shape) != self.shape:
            raise Unsupported("exponentials divided into something other than a tensor of their shape")
        return _Race(w, self.choices)

    def __getattr__(self, name: str) -> Any:
        _refuse(name, f"exponentials .{name}: the plain reference follows w / E then argmax only")


def _categorical(weights: Sequence[float], choices: Choices) -> int:
    """One draw from the exact law of non-negative float weights, normalised by their exact sum."""
    w = [_exact(x) for x in weights]
    if any(not math.isfinite(x) for x in weights) or any(x < 0 for x in w):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = sum(w)
    if total == 0:
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    return choices.pick([(i, x / total) for i, x in enumerate(w)])


def _multinomial(probs: torch.Tensor, num_samples: int, replacement: bool = False, *, generator: Any = None,
                 choices: Choices) -> torch.Tensor:
    if generator is not None:
        raise Unsupported("multinomial with a generator=")
    w = probs.detach().to(torch.float64)
    rows = w.reshape(-1, w.shape[-1]).tolist()
    out = []
    for row in rows:
        picked: list[int] = []
        for _ in range(int(num_samples)):
            left = row if replacement else [0.0 if i in picked else x for i, x in enumerate(row)]
            picked.append(_categorical(left, choices))
        out.append(picked)
    return torch.tensor(out, dtype=torch.long).reshape(*w.shape[:-1], int(num_samples))


def _size(args: tuple) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


class _PlainDraws(TorchFunctionMode):
    """The torch function mode a branch runs under: the draws above follow ``choices``; others raise Unsupported."""

    def __init__(self, choices: Choices, rng_model: str = "native") -> None:
        super().__init__()
        if rng_model not in ("native", "continuous"):
            raise ValueError(f"rng_model must be 'native' or 'continuous', got {rng_model!r}")
        self.choices, self.continuous = choices, rng_model == "continuous"
        self.marked: dict[int, tuple[torch.Tensor, _Exponentials]] = {}   # in-place exponential_ targets, by id

    def _uniforms(self, shape: tuple[int, ...], dtype: Any) -> _Uniforms:
        dtype = dtype or torch.get_default_dtype()
        if dtype not in _LATTICE:
            raise Unsupported(f"uniforms of dtype {dtype}")
        n = int(np.prod(shape, dtype=np.int64))
        size = None if self.continuous else _LATTICE[dtype]
        return _Uniforms(_Entries(n, size, self.choices), np.arange(n).reshape(shape), dtype)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.rand:
            if kwargs.get("generator") is not None:
                raise Unsupported("torch.rand with a generator=")
            return self._uniforms(_size(args), kwargs.get("dtype"))
        if func is torch.rand_like:
            return self._uniforms(tuple(args[0].shape), kwargs.get("dtype") or args[0].dtype)
        if func in (torch.multinomial, torch.Tensor.multinomial):
            return _multinomial(*args, **kwargs, choices=self.choices)
        if func is torch.Tensor.exponential_:
            e = _Exponentials(args[0].shape, self.choices)
            with torch.no_grad():
                args[0].fill_(float("nan"))         # its values are not real draws: any use but the race shows NaN
            self.marked[id(args[0])] = (args[0], e)
            return e
        if func is torch.searchsorted and len(args) == 2 and isinstance(args[1], _Uniforms):
            if kwargs.get("sorter") is not None or kwargs.get("out") is not None:
                raise Unsupported("searchsorted with sorter= or out=")
            right = bool(kwargs.get("right", False)) or kwargs.get("side") == "right"
            return args[1].searched(args[0], right)
        loose = [a for a in list(args) + list(kwargs.values())
                 if isinstance(a, (_Uniforms, _Exponentials, _Race, _Scalar))]
        if loose:
            name = getattr(func, "__name__", "")
            if name in _REFLECTED and len(args) == 2 and isinstance(args[1], _Uniforms) and not kwargs:
                return _REFLECTED[name](args[1], args[0])
            if name in _DIV and len(args) == 2 and isinstance(args[1], _Exponentials) and not kwargs:
                return args[1].__rtruediv__(args[0])
            raise Unsupported(f"{getattr(func, '__name__', func)} of a draw")
        marked = [a for a in args if isinstance(a, torch.Tensor) and id(a) in self.marked]
        if marked:
            if getattr(func, "__name__", "") in _DIV and len(args) == 2 and not kwargs \
                    and args[1] is marked[0] and id(args[0]) not in self.marked:
                return self.marked[id(args[1])][1].__rtruediv__(args[0])
            raise Unsupported(f"{getattr(func, '__name__', func)} of a tensor filled by exponential_")
        if getattr(func, "__name__", "") in _RANDOM:
            raise Unsupported(f"torch.{func.__name__}")
        return func(*args, **kwargs)


#: ``t < u`` with the tensor on the left, by the name torch dispatches it under: what the uniform does
_REFLECTED: dict[str, Callable[[_Uniforms, Any], torch.Tensor]] = {
    **dict.fromkeys(("__lt__", "lt", "less"), _Uniforms.__gt__), **dict.fromkeys(("__le__", "le", "less_equal"), _Uniforms.__ge__),
    **dict.fromkeys(("__gt__", "gt", "greater"), _Uniforms.__lt__), **dict.fromkeys(("__ge__", "ge", "greater_equal"), _Uniforms.__le__),
}
#: the names a division dispatches under
_DIV = {"__truediv__", "div", "true_divide", "divide"}
#: the random functions the plain reference does not follow
_RANDOM = {"randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "bernoulli_", "normal",
           "normal_", "uniform_", "random_", "poisson", "geometric_", "cauchy_", "log_normal_", "manual_seed", "seed"}


def branches(run: Callable[[Choices], Any], choices: list | None = None, deadline: float | None = None,
             rng_model: str = "native") -> Iterator[tuple[Any, Fraction]]:
    """Every (result, probability) of ``run(choices)`` under the plain draws, by recursion over the choices.

    ``run`` is called with a :class:`Choices` and runs the code under :class:`_PlainDraws` of it (uniforms on
    torch's lattices, ``rng_model="native"``, or ideal, ``"continuous"``, as ``es.audit_loop`` names them); torch's
    default generator, numpy's global one and Python's must not move (a draw that escaped the mode raises
    Unsupported).
    """
    if deadline is not None and time.perf_counter() > deadline:
        raise TimeoutError("plain reference ran past its deadline")
    c = Choices(list(choices or []))
    state = _generators()
    try:
        with _PlainDraws(c, rng_model):
            out = run(c)
    except Branch as b:
        for v, _ in b.options:
            yield from branches(run, (choices or []) + [v], deadline, rng_model)
        return
    if _generators() != state:
        raise Unsupported("a draw from torch's, numpy's or Python's generator escaped the plain reference")
    yield out, c.w


def _generators() -> tuple:
    """The states of the generators code can draw from unseen: torch's default, numpy's global, Python's."""
    return bytes(torch.get_rng_state().numpy()), pickle.dumps(np.random.get_state()), random.getstate()


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else time.perf_counter() + seconds


def _chain_law(sampler: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple, tokens: int,
               rng_model: str, seconds: float | None,
               calls: Callable[[tuple, list, list], Iterator[tuple[tuple, Fraction, Callable[[Any], Any]]]]) -> dict:
    """The stream law of a chain sampler, each step's calls given by ``calls(drafts, claims, targets)``: every
    (arguments, probability, what the output's emitted tokens are)."""
    deadline = _deadline(seconds)

    def step(drafts: tuple, claims: list, targets: list) -> Iterator[tuple[tuple, Fraction]]:
        for args, wa, emitted in calls(drafts, claims, targets):
            def run(_: Choices) -> tuple:
                out = emitted(sampler(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
                return tuple(int(t) for t in torch.as_tensor(out).reshape(-1).tolist() if int(t) >= 0)
            for out, w in branches(run, deadline=deadline, rng_model=rng_model):
                yield out, wa * w
    return stream_law(target, draft, gamma=gamma, prompt=prompt, tokens=tokens, step=step)


def _float32(rows: list) -> torch.Tensor:
    """Laws as float32 rows ``[1, n, V]``, each probability the float of its exact value, then rounded."""
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float32)[None]


def plain_vllm_sampler_law(sampler: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple = (),
                           tokens: int, rng_model: str = "native", seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` tokens of a sampler with the ``vllm`` adapter's signature, every branch eagerly.

    Its arguments are built as that adapter's documentation says (docs/adapters.md): float32 laws
    ``[1, gamma, V]``, the drafted ids ``[1, gamma]`` and a bonus token ``[1, 1]`` drawn from the target
    at the bonus position before the call; the tokens a step emits are the output's non-negative ids. Uniforms lie
    on torch's lattices (``rng_model="native"``) or are ideal (``"continuous"``).
    Raises TimeoutError once ``seconds`` have passed, :class:`Unsupported` past the plain draws.

    >>> import exactspec as es
    >>> from exactspec.bugzoo import torch_samplers as tz
    >>> p, q = es.models.context_free(("3/4", "1/4")), es.models.context_free(("1/2", "1/2"))
    >>> law = plain_vllm_sampler_law(tz.correct, p, q, gamma=1, tokens=1)
    >>> law == {(0,): Fraction(3, 4), (1,): Fraction(1, 4)}
    True
    """
    def calls(drafts: tuple, claims: list, targets: list) -> Iterator[tuple[tuple, Fraction, Callable]]:
        tp, dp, ids = _float32(targets[:gamma]), _float32(claims), torch.tensor([list(drafts)], dtype=torch.long)
        for bonus, wb in enumerate(targets[gamma]):
            if wb:
                yield (tp, dp, ids, torch.tensor([[bonus]], dtype=torch.long)), Fraction(wb), lambda out: out
    return _chain_law(sampler, target, draft, gamma=gamma, prompt=prompt, tokens=tokens, rng_model=rng_model,
                      seconds=seconds, calls=calls)


def plain_transformers_sampler_law(sampler: Callable, target: Any, draft: Any, *, gamma: int, prompt: tuple = (),
                                   tokens: int, rng_model: str = "native", seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` tokens of a sampler with transformers' ``_speculative_sampling`` signature.

    Its arguments are built as the ``transformers`` adapter's documentation says (docs/adapters.md): the drafted
    ids ``[1, gamma]``, the draft's and the target's laws as float32 logits ``log p`` (``[1, gamma, V]`` and
    ``[1, gamma + 1, V]``), ``gamma``; the step emits the non-negative ids of the first value it returns.

    >>> import exactspec as es
    >>> from exactspec.samplers.adapters.torch_adapters import reference_transformers_style as ref
    >>> p = es.models.context_free(("1/2", "1/2"))
    >>> plain_transformers_sampler_law(ref, p, p, gamma=1, tokens=1) == {(0,): Fraction(1, 2), (1,): Fraction(1, 2)}
    True
    """
    def calls(drafts: tuple, claims: list, targets: list) -> Iterator[tuple[tuple, Fraction, Callable]]:
        ids = torch.tensor([list(drafts)], dtype=torch.long)
        yield (ids, torch.log(_float32(claims)), gamma, torch.log(_float32(targets))), Fraction(1), lambda out: out[0]
    return _chain_law(sampler, target, draft, gamma=gamma, prompt=prompt, tokens=tokens, rng_model=rng_model,
                      seconds=seconds, calls=calls)


def plain_loop_law(fn: Callable, target: Any, draft: Any, *, prompt: Sequence[int] = (0,), tokens: int,
                   dtype: Any = torch.float64, output: str = "full", kind: str = "torch-lm",
                   rng_model: str = "native", seconds: float | None = None) -> dict:
    """Law of the first ``tokens`` new tokens of a whole loop ``fn(target_lm, draft_lm, prompt_ids)``, every branch.

    The loop gets :func:`exactspec.stand_in` models of ``kind`` in ``dtype`` (the inputs ``es.audit_loop``
    hands it by default) and the prompt as a LongTensor ``[1, n]``; it returns prompt + continuation
    (``output="full"``) or the continuation (``"new"``). Each branch runs the loop from its start; its
    uniforms lie on torch's lattices (``rng_model="native"``) or are ideal (``"continuous"``).

    >>> import exactspec as es
    >>> from exactspec.bugzoo import loops
    >>> p, q = es.models.context_free(("3/4", "1/4")), es.models.context_free(("1/2", "1/2"))
    >>> law = plain_loop_law(loops.bonus_from_draft, p, q, tokens=2)
    >>> law[(0, 0)]   # draft 0 kept, bonus 0 from q: 1/2 * 1/2; draft 1 rejected to 0 (1/4), then 0 (3/4): 3/16
    Fraction(7, 16)
    """
    import exactspec as es
    t_lm = es.stand_in(target, kind=kind, dtype=dtype)
    d_lm = None if draft is None else es.stand_in(draft, kind=kind, dtype=dtype)
    ids = torch.tensor([list(prompt)], dtype=torch.long)
    skip = len(prompt) if output == "full" else 0

    def run(_: Choices) -> tuple:
        out = fn(t_lm, d_lm, ids.clone())
        flat = [int(t) for t in (torch.as_tensor(out).reshape(-1).tolist())]
        new = flat[skip:]
        if len(new) < tokens:
            raise ValueError(f"the loop returned {len(new)} new tokens, fewer than {tokens}")
        return tuple(new[:tokens])
    law: dict = {}
    for out, w in branches(run, deadline=_deadline(seconds), rng_model=rng_model):
        law[out] = law.get(out, 0) + w
    return law
