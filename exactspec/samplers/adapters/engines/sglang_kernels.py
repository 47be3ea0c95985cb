"""SGLang's chain verification kernel, audited from the published wheel under Triton's interpreter.

``get_adapter("sglang")`` calls ``chain_speculative_sampling_triton`` (sglang 0.5.23,
``sglang/kernels/ops/speculative/reject_sampling.py``, the kernel EAGLE's ``eagle_sample`` runs
with ``--speculative-use-rejection-sampling``, and with ``block_verification=True`` under
``--speculative-use-block-verification``) with the keyword arguments ``eagle_sample`` passes, one
batch row per point of the uniforms: ``candidates [B, k + 1]`` (the root, then the ``k`` drafted
tokens), ``retrive_index`` (row-major slots), ``uniform_samples [B, k + 1]`` (the coins: column
``j`` decides drafted token ``j + 1``; column ``k``, which ``eagle_sample`` fills from
``torch.rand_like(candidates)`` too, is never read by the kernel),
``uniform_samples_for_final_sampling [B]``, ``target_probs [B, k + 1, V]``, ``draft_probs
[B, k, V]`` in float32; the emitted tokens are ``predicts[accept_index[b, :accept_token_num[b] + 1]]``.

The uniforms are concrete tensors whose values the audit chooses (the kernel reads raw memory,
so the lazy uniforms of the interception cannot reach it), on the lattice of the audit's rng
model (torch CPU ``torch.rand``: ``k * 2**-24``). The law is recovered from few rows, because
the interpreter runs each row in Python (tens of ms):

1. each coin's cut: the kernel's ``accept_token_num`` along one coin, the coins before it at 0
   and those after it at the lattice's top (so the coin is read in classic and in block
   verification), probed at the thresholds the laws suggest (``p/q``, block verification's
   ``h_i``; float32 and float64) and bisected where they miss;
2. one launch per threshold pattern (each coin below or above its cut), at both corners of the
   pattern's cell: the accept count must agree;
3. per accept count, the final coin's cuts (the cumulative sums of the residual or target law,
   probed, bisected where they miss), then every pattern checked at every final cell.

Assumptions, stated in the resolution: each coin is used through one threshold that does not move
with the other coins' values, the final coin through thresholds (no pattern A-B-A between two
probed points) that depend on the coins only through the accept count; a launch that contradicts
them raises :class:`~exactspec.UnsupportedRandomness`. Kernel rows are cached
(:class:`~exactspec.samplers.adapters.engines.triton_kernels.RowCache`) and each input's law is found
once.

>>> sglang_chain.name, sglang_chain.family, sglang_chain.precision
('sglang', 'chain', 'float32')
"""

from __future__ import annotations

import functools
import itertools
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from ....errors import ExactSpecError, UnsupportedRandomness
from ....protocols import Rng, Step
from ..base import Adapter
from ..explicit_uniforms import KernelAdapter, kernel_lattice, reference_flashinfer_style
from .triton_kernels import RowCache, interpreted, load_published_module

__all__ = ["SGLANG_VERSION", "CHAIN_FILE", "TREE_FILE", "TREE_STUBS", "sglang_chain_kernel", "published_chain",
           "published_chain_block", "reference_sglang_chain", "SglangChainAdapter", "sglang_chain",
           "sglang_tree_greedy_kernel", "published_tree_greedy", "reference_tree_greedy", "SglangTreeGreedyAdapter",
           "sglang_tree_greedy", "greedy_model", "sglang_rows", "chain_law"]

#: the release audited (tests/published-nodeps.txt pins it)
SGLANG_VERSION = "0.5.23"
#: the file of the wheel that holds the chain kernel; it imports triton alone
CHAIN_FILE = "sglang/kernels/ops/speculative/reject_sampling.py"
#: the file that holds the greedy tree verification kernel (``verify_tree_greedy_triton``, SGLang's XPU path)
TREE_FILE = "sglang/kernels/ops/speculative/spec_tree.py"
#: stand-ins for TREE_FILE's platform probes, its only imports besides torch and triton: every ``is_*`` false (so
#: it imports no CUDA, MUSA or CPU extension) and the out-of-tree guard its tree-building dispatchers call
TREE_STUBS: dict[str, dict[str, Any]] = {
    "sglang.srt.platforms": {"current_platform": None},
    "sglang.srt.platforms.interface": {"reject_out_of_tree_path": lambda *a, **k: None},
    "sglang.srt.utils": {name: (lambda: False) for name in ("is_cpu", "is_cuda", "is_hip", "is_musa", "is_npu",
                                                            "is_xpu")},
}


def sglang_chain_kernel(version: str | None = SGLANG_VERSION) -> Callable:
    """``chain_speculative_sampling_triton`` from the installed sglang wheel's own file, interpreted on CPU.

    ``version=None`` accepts any installed release. An :class:`~exactspec.ExactSpecError` says what to install
    when sglang is missing (``python -m pip install --no-deps sglang==0.5.23`` and ``triton``).

    >>> sglang_chain_kernel("0.0.0")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: ...
    """
    return load_published_module("sglang", CHAIN_FILE, version=version).chain_speculative_sampling_triton


def published_chain(**kwargs: Any) -> Any:
    """SGLang 0.5.23's chain kernel called as ``eagle_sample`` calls it (for ``exactspec audit-sampler``).

    >>> published_chain.__name__
    'published_chain'
    """
    return sglang_chain_kernel()(**kwargs)


def published_chain_block(**kwargs: Any) -> Any:
    """SGLang 0.5.23's chain kernel with ``block_verification=True`` (``--speculative-use-block-verification``).

    >>> published_chain_block.__name__
    'published_chain_block'
    """
    return sglang_chain_kernel()(**kwargs, block_verification=True)


def reference_sglang_chain(predicts: Any, accept_index: Any, accept_token_num: Any, candidates: Any,
                           retrive_index: Any, retrive_next_token: Any, retrive_next_sibling: Any,
                           uniform_samples: Any, uniform_samples_for_final_sampling: Any, target_probs: Any,
                           draft_probs: Any, threshold_single: float = 1.0, threshold_acc: float = 1.0,
                           deterministic: bool = True, **_: Any) -> None:
    """A correct chain verifier with SGLang's signature (own code: Leviathan et al.'s rule, written into the outputs).

    Position ``j`` accepts iff ``u_j * q(x) < p(x)``; the recovered or bonus token is the inverse CDF of the
    residual (or of the bonus law) at the final uniform.

    >>> import torch
    >>> pred, acc, num = torch.full((2,), -1), torch.full((1, 2), -1), torch.zeros(1, dtype=torch.int32)
    >>> p, q = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]]), torch.tensor([[[0.5, 0.5]]])
    >>> reference_sglang_chain(pred, acc, num, torch.tensor([[0, 1]]), torch.tensor([[0, 1]]), None, None,
    ...                        torch.tensor([[0.0, 0.0]]), torch.tensor([0.9]), p, q)
    >>> int(num[0]), pred.tolist()
    (1, [1, 1])
    """
    import torch
    k = candidates.shape[1] - 1
    u = torch.cat([uniform_samples[:, :k], uniform_samples_for_final_sampling[:, None]], dim=1)
    out = reference_flashinfer_style(draft_probs, candidates[:, 1:].long(), u, target_probs)
    for b in range(out.shape[0]):
        n = int((out[b] >= 0).sum()) - 1
        accept_token_num[b] = n
        for i in range(n + 1):
            accept_index[b, i] = retrive_index[b, i]
            predicts[int(retrive_index[b, i])] = out[b, i]


def _index(t: float, lat: Any) -> int:
    """The first lattice index whose value is >= t (may lie outside the lattice)."""
    if not np.isfinite(t):
        return lat.kmax + 2
    return lat.cut(Fraction(float(t)), True) + 1


def _coin_thresholds(p: np.ndarray, q: np.ndarray, drafts: list[int], j: int) -> tuple[list[float], list[float]]:
    """(primary, secondary) thresholds of coin j: the ratio p/q (float64, float32), block verification's h."""
    x = drafts[j]
    f32 = np.float32
    primary: list[float] = []
    with np.errstate(divide="ignore", invalid="ignore"):
        if q[j][x] > 0:
            primary += [p[j][x] / q[j][x], float(f32(p[j][x]) / f32(q[j][x]))]
        prefix = 1.0
        for i in range(j + 1):                     # block verification (arXiv 2403.10444, Algorithm 2)
            xi = drafts[i]
            prefix = min(prefix * p[i][xi] / q[i][xi], 1.0) if 0 < q[i][xi] <= 1 else 0.0
    secondary = [prefix]
    k = len(drafts)
    if j + 1 < k and 0 < prefix < 1:
        mass = float(np.maximum(prefix * p[j + 1] - q[j + 1], 0).sum())
        primary.append(mass / (mass + 1 - prefix))
    else:
        primary.append(prefix)
    return primary, secondary


def _final_thresholds(p: np.ndarray, q: np.ndarray, drafts: list[int], n: int) -> tuple[list[float], list[float]]:
    """(primary, secondary) cuts of the final coin after n accepted drafts: cumulative sums over their total."""
    k = len(drafts)
    laws: list[np.ndarray] = []
    if n == k:
        laws.append(p[k])
    else:
        qn = np.where((q[n] >= 0) & (q[n] <= 1), q[n], 0)
        laws.append(np.maximum(p[n] - qn, 0))
        prefix = 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in range(n):
                xi = drafts[i]
                prefix = min(prefix * p[i][xi] / q[i][xi], 1.0) if 0 < q[i][xi] <= 1 else 0.0
        if prefix != 1.0:
            laws.append(np.maximum(prefix * p[n] - qn, 0))
    primary: list[float] = []
    secondary: list[float] = []
    for law in laws:
        for dtype, into in ((np.float32, primary), (np.float64, secondary)):
            v = law.astype(dtype)
            total, cums = v.sum(), np.cumsum(v)
            if total > 0:
                into += [float(c) / float(total) for c in cums[:-1]]
    return primary, secondary


def _windows(thresholds: list[float], lat: Any, near: tuple[int, ...]) -> list[int]:
    out = set()
    for t in thresholds:
        c = _index(t, lat)
        out |= {c + d for d in near if lat.kmin <= c + d <= lat.kmax}
    return sorted(out)


def _line_search(lines: list[tuple[list[int], list[int]]], evaluate: Callable[[list[tuple[int, int]]], list[Any]],
                 lo: int, hi: int) -> list[dict[int, Any]]:
    """For each line (primary probes, secondary probes), its known points (index -> output) with every change
    between adjacent indices: ends and primary probes first, then in each gap whose ends differ the secondary
    probes inside it, else its midpoint (bisection). Every round is one batched evaluation."""
    known: list[dict[int, Any]] = [dict() for _ in lines]
    todo = [(li, c) for li, (prim, _) in enumerate(lines) for c in sorted({lo, hi} | set(prim))]
    while todo:
        for (li, c), out in zip(todo, evaluate(todo)):
            known[li][c] = out
        nxt: list[tuple[int, int]] = []
        for li, kn in enumerate(known):
            cs = sorted(kn)
            for a, b in zip(cs, cs[1:]):
                if kn[a] == kn[b] or b == a + 1:
                    continue
                inside = [c for c in lines[li][1] if a < c < b and c not in kn]
                nxt += [(li, c) for c in (inside or [(a + b) // 2])]
        todo = list(dict.fromkeys(nxt))
    return known


def _changes(known: dict[int, Any]) -> list[int]:
    cs = sorted(known)
    return [b for a, b in zip(cs, cs[1:]) if known[a] != known[b]]


def sglang_rows(sampler: Callable, drafts: list[int], p: Any, q: Any, lat: Any, root: int = 0) -> Callable:
    """``launch(rows)`` for a :class:`RowCache`: rows ``(coin indices, final index)`` -> ``(accept count, tokens)``,
    one kernel launch with the tensors ``eagle_sample`` builds (``p``, ``q``: torch tensors ``[k + 1, V]``, ``[k, V]``).

    >>> import torch
    >>> from exactspec.enumerate.rng import LATTICES
    >>> p, q = torch.tensor([[0.5, 0.5], [0.5, 0.5]]), torch.tensor([[0.25, 0.75]])
    >>> launch = sglang_rows(reference_sglang_chain, [1], p, q, LATTICES["torch-float32"])
    >>> launch([((0,), 0), ((2 ** 24 - 1,), 0)])         # coin 0 accepts token 1; the top coin rejects it
    [(1, (1, 0)), (0, (0,))]
    """
    import torch
    k = len(drafts)
    dt = p.dtype
    step, offset = float(lat.step), float(lat.offset)

    def launch(rows: list[tuple[tuple[int, ...], int]]) -> list[tuple[int, tuple[int, ...]]]:
        b = len(rows)
        coins = torch.tensor([[offset + c * step for c in cs] + [0.0] for cs, _ in rows], dtype=dt).reshape(b, k + 1)
        final = torch.tensor([offset + f * step for _, f in rows], dtype=dt)
        candidates = torch.tensor([[root] + list(drafts)] * b, dtype=torch.int64)
        retrive_index = torch.arange(b * (k + 1), dtype=torch.int64).reshape(b, k + 1)
        next_token = torch.tensor([list(range(1, k + 1)) + [-1]] * b, dtype=torch.int64)
        predicts = torch.zeros(b * (k + 1), dtype=torch.int32)
        accept_index = torch.full((b, k + 1), -1, dtype=torch.int32)
        accept_token_num = torch.empty((b,), dtype=torch.int32)
        with interpreted():
            sampler(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                    candidates=candidates, retrive_index=retrive_index, retrive_next_token=next_token,
                    retrive_next_sibling=torch.full((b, k + 1), -1, dtype=torch.int64), uniform_samples=coins,
                    uniform_samples_for_final_sampling=final, target_probs=p[None].expand(b, -1, -1).contiguous(),
                    draft_probs=q[None].expand(b, -1, -1).contiguous(), threshold_single=1.0, threshold_acc=1.0,
                    deterministic=True)
        out = []
        for r in range(b):
            n = int(accept_token_num[r])
            if not 0 <= n <= k:
                raise UnsupportedRandomness(f"the kernel reported {n} accepted drafts of {k}")
            out.append((n, tuple(int(predicts[int(accept_index[r, i])]) for i in range(n + 1))))
        return out
    return launch


def chain_law(launch: Callable | RowCache, drafts: list[int], p: np.ndarray, q: np.ndarray,
              lat: Any) -> dict[tuple, Fraction]:
    """The exact law of the emitted tokens of a chain kernel on the lattice ``lat``, from few rows (see the module).

    ``launch(rows)`` maps rows ``(coin indices, final index)`` to ``(accept count, tokens)``; ``p``, ``q``: float64
    arrays ``[k + 1, V]``, ``[k, V]`` (for the suggested thresholds only). Kernel-agnostic: any chain kernel whose
    accept count and tokens ``launch`` reports.

    >>> import torch
    >>> from exactspec.enumerate.rng import LATTICES
    >>> p, q = np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([[0.25, 0.75]])
    >>> lat = LATTICES["torch-float32"]
    >>> launch = sglang_rows(reference_sglang_chain, [1], torch.tensor(p), torch.tensor(q), lat)
    >>> law = chain_law(launch, [1], p, q, lat)     # u * 0.75 < 0.5 keeps token 1 on the points below 2/3
    >>> law[(0,)] == 1 - law[(1, 0)] - law[(1, 1)] == Fraction(2 ** 24 - 11184811, 2 ** 24), law[(1, 0)] == law[(1, 1)]
    (True, True)
    """
    k = len(drafts)
    lo, hi = lat.kmin, lat.kmax
    total = hi - lo + 1
    mid = (lo + hi) // 2
    cache = launch if isinstance(launch, RowCache) else RowCache(launch)

    # 1. each coin's cut, read from the accept count
    def coin_row(j: int, c: int) -> tuple[tuple[int, ...], int]:
        return tuple([lo] * j + [c] + [hi] * (k - j - 1)), mid

    lines = []
    for j in range(k):
        prim, sec = _coin_thresholds(p, q, drafts, j)
        lines.append((_windows(prim, lat, (-1, 0)), _windows(prim + sec, lat, (-2, -1, 0, 1))))
    known = _line_search(lines, lambda todo: [n for n, _ in cache.get([coin_row(j, c) for j, c in todo])], lo, hi)
    cells: list[list[tuple[int, int]]] = []
    for j, kn in enumerate(known):
        cuts = _changes(kn)
        if len(cuts) > 1:
            raise UnsupportedRandomness(f"coin {j} changes the accept count {len(cuts)} times along the lattice "
                                        f"(at indices {cuts}): not one threshold")
        cells.append([(lo, hi)] if not cuts else [(lo, cuts[0] - 1), (cuts[0], hi)])

    # 2. one launch per threshold pattern, at both corners of its cell
    patterns = list(itertools.product(*cells))
    corners = [(tuple(a for a, _ in pat), tuple(b for _, b in pat)) for pat in patterns]
    counts = cache.get([(c, mid) for pair in corners for c in pair])
    accepted: list[int] = []
    for i, pat in enumerate(patterns):
        if counts[2 * i] != counts[2 * i + 1]:
            raise UnsupportedRandomness(f"the accept count is not constant on the cell {pat} of the coins "
                                        f"({counts[2 * i]} and {counts[2 * i + 1]} at its corners): a coin's "
                                        "threshold moves with the other coins")
        accepted.append(counts[2 * i][0])

    # 3. per accept count, the final coin's cuts; then every pattern at every final cell
    groups = sorted(set(accepted))
    first = {n: corners[accepted.index(n)][0] for n in groups}
    flines = []
    for n in groups:
        prim, sec = _final_thresholds(p, q, drafts, n)
        flines.append((_windows(prim, lat, (-1, 0)), _windows(prim + sec, lat, (-2, -1, 0, 1))))
    fknown = _line_search(flines, lambda todo: [t for _, t in cache.get([(first[groups[li]], c) for li, c in todo])],
                          lo, hi)
    finals: dict[int, list[tuple[int, int, tuple]]] = {}
    for n, kn in zip(groups, fknown):
        edges = [lo] + _changes(kn) + [hi + 1]
        finals[n] = [(a, b - 1, kn[a]) for a, b in zip(edges, edges[1:])]
    checks = [(corners[i][1], (a + b) // 2) for i, n in enumerate(accepted) for a, b, _ in finals[n]]
    seen = iter(cache.get(checks))
    law: dict[tuple, Fraction] = {}
    for i, (pat, n) in enumerate(zip(patterns, accepted)):
        weight = Fraction(1)
        for a, b in pat:
            weight *= Fraction(b - a + 1, total)
        for a, b, tokens in finals[n]:
            got = next(seen)
            if got != (n, tokens):
                raise UnsupportedRandomness(f"the final coin's cell [{a}, {b}] gives {tokens} after {n} accepted "
                                            f"drafts on one threshold pattern and {got} on another: its thresholds "
                                            "depend on more than the accept count")
            law[tokens] = law.get(tokens, Fraction(0)) + weight * Fraction(b - a + 1, total)
    return law


class SglangChainAdapter(KernelAdapter):
    """SGLang's ``chain_speculative_sampling_triton(predicts=..., ...)`` signature (see the module docstring).

    The sampler is the published kernel (:func:`published_chain`, :func:`published_chain_block`, or
    ``functools.partial(sglang_chain_kernel(), block_verification=True)``) or any callable with its keyword
    arguments; it writes its outputs and returns None. ``stats`` counts the kernel rows launched.
    """

    name = "sglang"
    family = "chain"
    needs_torch = True
    precision = "float32"
    reference = staticmethod(reference_sglang_chain)
    reference_rule_name = "speculative_sampling"

    def __init__(self) -> None:
        self._memo: dict[tuple, dict[tuple, Fraction]] = {}
        self.stats = {"rows": 0, "launches": 0, "inputs": 0}

    def resolution(self, rng_model: str) -> str:
        return (f"uniform inputs on the lattice {self.lattice_note(rng_model)}; each coin's cut and the final coin's cuts located exactly "
                "on it by launches at suggested thresholds and bisection (assumes one threshold per coin, independent "
                "of the other coins, and final thresholds depending on the accept count only; see "
                "exactspec.samplers.adapters.engines.sglang_kernels)")

    def with_precision(self, precision: str) -> "SglangChainAdapter":
        """This adapter handing its laws and uniforms in ``precision`` (the float64 run of a float32 audit).

        >>> sglang_chain.with_precision("float64").precision
        'float64'
        """
        if precision == self.precision:
            return self
        return self._copy_at(precision, _memo={}, stats={"rows": 0, "launches": 0, "inputs": 0})

    def call(self, sampler: Callable, step: Step, rng: Rng) -> list[int]:
        import torch
        lat = kernel_lattice(rng, self.precision, self.name)
        drafts, q, p = self.chain_arrays(step)
        key = (sampler, lat.name, tuple(int(x) for x in drafts), p.tobytes(), q.tobytes())
        law = self._memo.get(key)
        if law is None:
            dt = getattr(torch, self.precision)
            cache = RowCache(sglang_rows(sampler, [int(x) for x in drafts], torch.tensor(p, dtype=dt),
                                         torch.tensor(q, dtype=dt), lat))
            law = chain_law(cache, [int(x) for x in drafts], p, q, lat)
            self.stats["rows"] += cache.rows_launched
            self.stats["launches"] += cache.launches
            self.stats["inputs"] += 1
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[key] = law
        outputs = sorted(law)
        pick = rng.categorical(tuple(rng._field.convert(law[o]) for o in outputs))  # type: ignore[attr-defined]
        return list(outputs[pick])


sglang_chain = SglangChainAdapter()


def sglang_tree_greedy_kernel(version: str | None = SGLANG_VERSION) -> Callable:
    """``verify_tree_greedy_triton`` from the installed sglang wheel's ``spec_tree.py``, interpreted on CPU.

    The file's platform probes are stand-ins (:data:`TREE_STUBS`); the kernel and its wrapper are the published
    code. SGLang runs this Triton path on XPU; on CUDA and HIP the same walk is a JIT CUDA kernel (``tree.cuh``).

    >>> sorted(TREE_STUBS)
    ['sglang.srt.platforms', 'sglang.srt.platforms.interface', 'sglang.srt.utils']
    """
    return load_published_module("sglang", TREE_FILE, version=version, stubs=TREE_STUBS).verify_tree_greedy_triton


def published_tree_greedy(**kwargs: Any) -> Any:
    """SGLang 0.5.23's greedy tree verification kernel (for ``exactspec audit-sampler --adapter sglang-tree-greedy``).

    >>> published_tree_greedy.__name__
    'published_tree_greedy'
    """
    return sglang_tree_greedy_kernel()(**kwargs)


def reference_tree_greedy(predicts: Any, accept_index: Any, accept_token_num: Any, candidates: Any,
                          retrieve_index: Any, retrieve_next_token: Any, retrieve_next_sibling: Any,
                          target_predict: Any) -> None:
    """A correct greedy tree walk with SGLang's signature (own code): follow the child equal to the target's argmax.

    >>> import torch
    >>> pred, acc, num = torch.zeros(3, dtype=torch.int32), torch.full((1, 3), -1), torch.zeros(1, dtype=torch.int32)
    >>> reference_tree_greedy(pred, acc, num, torch.tensor([[9, 1, 2]]), torch.tensor([[0, 1, 2]]),
    ...                       torch.tensor([[1, -1, -1]]), torch.tensor([[-1, 2, -1]]), torch.tensor([[2, 0, 1]]))
    >>> int(num[0]), acc.tolist(), pred.tolist()
    (1, [[0, 2, -1]], [2, 0, 1])
    """
    for b in range(candidates.shape[0]):
        node, n = 0, 0
        accept_index[b, 0] = retrieve_index[b, 0]
        while True:
            want = int(target_predict[b, node])
            child = int(retrieve_next_token[b, node])
            while child != -1 and int(candidates[b, child]) != want:
                child = int(retrieve_next_sibling[b, child])
            if child == -1 or n + 1 >= accept_index.shape[1]:
                break
            predicts[int(retrieve_index[b, node])] = want
            n += 1
            accept_index[b, n] = retrieve_index[b, child]
            node = child
        accept_token_num[b] = n
        predicts[int(retrieve_index[b, node])] = int(target_predict[b, node])


class SglangTreeGreedyAdapter(Adapter):
    """SGLang's ``verify_tree_greedy_triton(predicts, accept_index, accept_token_num, candidates, retrieve_index,
    retrieve_next_token, retrieve_next_sibling, target_predict)`` over a drafted tree (greedy verification).

    The tree is laid out as SGLang's verify step reads it, one row: node 0 the root (the last context token),
    the others in depth-first order, ``retrieve_next_token`` each node's first child, ``retrieve_next_sibling``
    its next sibling, ``target_predict`` ``torch.argmax`` of the target law after each node (as ``eagle_sample``
    takes it of the logits; ties to the lowest id), ``accept_index`` one column per tree level plus one. The
    emitted tokens are ``predicts[accept_index[0, :accept_token_num[0] + 1]]``. Greedy verification aims at the
    target's greedy sequence: audit it with ``expected=greedy_model(target)``.
    """

    name = "sglang-tree-greedy"
    family = "tree"
    needs_torch = True
    precision = "float32"
    reference = staticmethod(reference_tree_greedy)
    reference_rule_name = ""

    def __init__(self) -> None:
        self._rows: dict[Any, RowCache] = {}

    def with_precision(self, precision: str) -> "SglangTreeGreedyAdapter":
        """This adapter taking the argmax of the laws in ``precision``.

        >>> sglang_tree_greedy.with_precision("float64").precision
        'float64'
        """
        return self if precision == self.precision else self._copy_at(precision, _rows={})

    def call(self, sampler: Callable, step: Any, rng: Rng) -> list[int]:
        import torch
        order: list[int] = []

        def visit(node: int) -> None:             # draws the whole tree, depth first
            order.append(node)
            for c in step.children(node):
                visit(c)
        visit(step.root)
        index = {node: i for i, node in enumerate(order)}
        dt = getattr(torch, self.precision)
        tokens = tuple(int(step.token(node)) if node != step.root else -1 for node in order)
        parents = tuple(index[step.parent(node)] if node != step.root else -1 for node in order)
        argmax = tuple(int(torch.argmax(torch.tensor(self.floats(step.target(node)), dtype=dt))) for node in order)
        depth = max(step.depth(node) for node in order)
        cache = self._rows.get(sampler)
        if cache is None:
            cache = self._rows[sampler] = RowCache(functools.partial(_tree_launch, sampler))
        return list(cache.get([(tokens, parents, argmax, depth)])[0])


def _tree_launch(sampler: Callable, rows: list[tuple]) -> list[tuple[int, ...]]:
    """One launch per tree (the kernel's batch rows would need equal node counts)."""
    import torch
    out = []
    for tokens, parents, argmax, depth in rows:
        n = len(tokens)
        first = [-1] * n
        sibling = [-1] * n
        for i in range(n - 1, 0, -1):             # children in order: link each to the next one
            sibling[i] = first[parents[i]]
            first[parents[i]] = i
        predicts = torch.zeros(n, dtype=torch.int32)
        accept_index = torch.full((1, depth + 1), -1, dtype=torch.int32)
        accept_token_num = torch.zeros(1, dtype=torch.int32)
        with interpreted():
            sampler(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                    candidates=torch.tensor([[max(t, 0) for t in tokens]], dtype=torch.int64),
                    retrieve_index=torch.arange(n, dtype=torch.int64)[None],
                    retrieve_next_token=torch.tensor([first], dtype=torch.int64),
                    retrieve_next_sibling=torch.tensor([sibling], dtype=torch.int64),
                    target_predict=torch.tensor([argmax], dtype=torch.int64))
        k = int(accept_token_num[0])
        out.append(tuple(int(predicts[int(accept_index[0, i])]) for i in range(k + 1)))
    return out


def greedy_model(target: Any) -> Any:
    """The target's greedy decoding as a model: a point mass on its argmax (ties to the lowest id) in every context.

    >>> import exactspec as es
    >>> greedy_model(es.models.context_free(("1/4", "1/2", "1/4")))((0,))
    (Fraction(0, 1), Fraction(1, 1), Fraction(0, 1))
    """
    from ....models import from_function

    def point(context: tuple) -> tuple:
        law = target(context)
        best = max(range(len(law)), key=lambda t: (law[t], -t))
        return tuple(Fraction(int(t == best)) for t in range(len(law)))
    return from_function(vocab=target.vocab, fn=point, order=target.order, name=f"greedy {target.name}")


sglang_tree_greedy = SglangTreeGreedyAdapter()
