"""Statistical audits: sample a sampler with real randomness and test its law, with stated confidence.

For code whose randomness cannot be intercepted (compiled kernels), the best one can do is
sample it. :func:`audit_statistically` runs the sampler ``samples`` times through the same
adapters with real random draws, compares the empirical law of the first ``tokens`` tokens with
the exact expected law by a G-test (bins with expected count below 5 merged; the chi-square tail
computed with mpmath), and gives a confidence interval on the TV from the Bretagnolle-Huber-Carol
inequality: with probability at least ``confidence``,
``|TV(empirical, expected) - TV(sampler, expected)| <= r = sqrt((K ln 2 + ln(2 / (1 - confidence))) / (2 N))``
for K outcomes. ``r`` is also the smallest bias the run could detect, so a bias below it is
invisible: :func:`samples_needed` says how many samples a given bias would take.

>>> samples_needed(0.01, outcomes=2) > 10_000
True
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

import mpmath
import numpy as np

from . import parallel
from ._device import best_device
from .enumerate import target_law
from .enumerate.env import Env
from .errors import ExactSpecError, InvalidType, InvalidValue
from .fields import get_field
from .models import Model
from .protocols import Law
from .rules import Rule

__all__ = ["audit_statistically", "StatisticalReport", "samples_needed", "tv_radius"]


def _adapter_named(name: str) -> Any:
    """The adapter the samplers registry calls ``name`` (``adapter="numpy"``): its ``get_adapter(name)``.

    The registry sits above this module (its adapters import the interception of the randomness), so it
    is loaded by name when a name is given, as a plugin registry would be: nothing here imports from
    it and it imports nothing from here (no circle, no state handed down).

    >>> import exactspec as es
    >>> _adapter_named("numpy") is es.samplers.get_adapter("numpy")
    True
    """
    import importlib
    return importlib.import_module("exactspec.samplers.adapters.registry").get_adapter(name)


def tv_radius(samples: int, outcomes: int, confidence: float) -> float:
    """Half-width r of the TV confidence interval for ``samples`` draws over ``outcomes`` outcomes.

    >>> round(tv_radius(10_000, 2, 0.99), 4)   # sqrt((2 ln 2 + ln 200) / 20000)
    0.0183
    """
    return math.sqrt((outcomes * math.log(2) + math.log(2 / (1 - confidence))) / (2 * samples))


def samples_needed(tv: float, *, outcomes: int, confidence: float = 0.99) -> float:
    """Samples for the TV interval's half-width to shrink to ``tv`` (a bias of that size becomes visible).

    >>> f"{samples_needed(2 ** -126, outcomes=5):.1e}"   # tiny_clamp_residual's bias: never
    '3.2e+76'
    """
    if tv <= 0:
        return math.inf
    return (outcomes * math.log(2) + math.log(2 / (1 - confidence))) / (2 * tv * tv)


class _SamplingRng:
    """The rng interface (:class:`exactspec.protocols.Rng`) with real random draws (floats), for running steps
    and samplers natively."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(seed)
        self.lattice = None
        self._field = get_field("float")
        self._cdfs: dict[int, tuple[Law, Any, int]] = {}   # id(law) -> (law, its cdf, its last nonzero token)

    def uniform(self) -> float:
        return self._r.random()

    random = uniform

    def bernoulli(self, prob: Any) -> bool:
        return self._r.random() < float(prob)

    def categorical(self, law: Law) -> int:
        hit = self._cdfs.get(id(law))
        if hit is None or hit[0] is not law:
            w = np.array([float(x) for x in law])
            cdf = np.cumsum(w)
            hit = (law, cdf / cdf[-1], int(np.flatnonzero(w)[-1]))
            if type(law) is tuple:            # immutable: safe to remember by identity
                self._cdfs[id(law)] = hit
        i = int(np.searchsorted(hit[1], self._r.random(), side="right"))
        return min(i, hit[2])


@dataclass
class StatisticalReport:
    """What a statistical audit can say: a test, a TV interval, and the smallest visible bias."""

    sampler: str
    samples: int
    confidence: float
    g_statistic: float
    degrees_of_freedom: int
    p_value: float
    tv_estimate: float
    tv_interval: tuple[float, float]
    detectable_tv: float
    seconds: float
    counts: dict
    expected: dict

    @property
    def verdict(self) -> str:
        """``biased`` when the test rejects at ``1 - confidence``; otherwise no bias is *detected*."""
        return "biased" if self.p_value < 1 - self.confidence else "no bias detected"

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds else math.inf

    def __str__(self) -> str:
        lo, hi = self.tv_interval
        return (f"statistical audit of {self.sampler}: {self.verdict.upper()} ({self.samples} samples, "
                f"{self.samples_per_second:.0f}/s)\n"
                f"  G = {self.g_statistic:.3f} on {self.degrees_of_freedom} df, p = {self.p_value:.3g} "
                f"(reject below {1 - self.confidence:.3g})\n"
                f"  TV(sampler, expected) in [{lo:.4g}, {hi:.4g}] with probability >= {self.confidence}; "
                + (f"a bias below {self.detectable_tv:.3g} is invisible at this sample size" if self.detectable_tv < 1
                   else f"no TV resolution yet: {len(self.expected)} outcomes need far more samples "
                        "(the merged-bin G-test above still has power)"))


def _g_test(counts: dict, expected: dict, n: int) -> tuple[float, int, float]:
    bins, rest_o, rest_e = [], 0, 0.0
    for k, p in sorted(expected.items(), key=lambda kv: -float(kv[1])):
        e = float(p) * n
        if e >= 5:
            bins.append((counts.get(k, 0), e))
        else:
            rest_o += counts.get(k, 0)
            rest_e += e
    unexpected = sum(c for k, c in counts.items() if k not in expected)
    if unexpected:                      # an outcome the target never emits: the test is moot
        return math.inf, max(len(bins), 1), 0.0
    if rest_e > 0:
        bins.append((rest_o, rest_e))
    if len(bins) < 2:                   # every outcome expects < 5 counts: the test has no power yet
        return 0.0, 0, 1.0
    g = max(0.0, 2 * sum(o * math.log(o / e) for o, e in bins if o > 0))
    df = len(bins) - 1
    p = float(mpmath.gammainc(df / 2, g / 2, mpmath.inf, regularized=True))
    return g, df, p


def _batched_first_tokens(sampler: Callable, adapter: Any, proposer: Any, env: Any, rng: Any, prompt: tuple,
                          samples: int, batch: int, counts: dict, deadline: float | None, device: str | None) -> int:
    """Draw first emitted tokens ``batch`` rows per sampler call (vLLM-style batched samplers)."""
    import time

    import torch
    dev = device or best_device()
    drawn = 0
    while drawn < samples and (deadline is None or time.perf_counter() < deadline or not drawn):
        rows = min(batch, samples - drawn)
        steps = [proposer.step(env, prompt, rng) for _ in range(rows)]
        ids = torch.tensor([list(s.drafts) for s in steps], dtype=torch.long, device=dev)
        tp = torch.stack([torch.stack([adapter.probs(s.target(j)) for j in range(s.gamma)]) for s in steps]).to(dev)
        dp = torch.stack([torch.stack([adapter.probs(s.claimed(j)) for j in range(s.gamma)]) for s in steps]).to(dev)
        bonus = torch.tensor([[rng.categorical(s.target(s.gamma))] for s in steps], dtype=torch.long, device=dev)
        out = sampler(tp, dp, ids, bonus)
        for t in torch.as_tensor(out)[:, 0].tolist():
            counts[(int(t),)] = counts.get((int(t),), 0) + 1
        drawn += rows
    return drawn


#: samples per chunk of a parallel statistical audit (each chunk draws with a seed derived from the job's)
CHUNK_SAMPLES = 2000


def _stat_chunk(job: tuple) -> tuple[dict, int]:
    """Draw one chunk's samples in a worker: its own rng seeded from the job's seed and the chunk number."""
    import time
    bundle, tokens, n, chunk_seed, deadline = job
    sampler, adapter, target, draft, proposer, prompt = parallel.load_portable(bundle)
    env = Env(target, draft, get_field("float"))
    rng = _SamplingRng(chunk_seed)
    if getattr(adapter, "needs_torch", False):
        import torch
        torch.manual_seed(chunk_seed)
    counts: dict = {}
    drawn = 0
    for _ in range(n):
        if deadline is not None and not drawn % 32 and drawn and time.time() > deadline:
            break
        drawn += 1
        ctx, out = prompt, ()
        while len(out) < tokens:
            emitted = tuple(adapter.call(sampler, proposer.step(env, ctx, rng), rng))
            if not emitted:
                raise ExactSpecError(f"{getattr(sampler, '__name__', 'sampler')} emitted no token")
            ctx, out = ctx + emitted, out + emitted
        key = out[:tokens]
        counts[key] = counts.get(key, 0) + 1
    return counts, drawn


def _sample_chunked(sampler: Callable, adapter: Any, target: Model, draft: Model | None, proposer: Any,
                    prompt: tuple, tokens: int, samples: int, seed: int, seconds: float | None, counts: dict,
                    executor: Any, workers: Any, size: int) -> int:
    """Draw ``samples`` in chunks on an executor and add them to ``counts`` in chunk order; the number drawn."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise InvalidType(f"chunk_samples must be a positive int, got {size!r}")
    elif size < 1:
        raise InvalidValue(f"chunk_samples must be a positive int, got {size!r}")
    bundle = parallel.portable((sampler, adapter, target, draft, proposer, prompt), "sampler, adapter, models or "
                                                                                     "proposer")
    deadline = parallel.wall_deadline(seconds)
    sizes = [min(size, samples - i) for i in range(0, samples, size)]
    jobs = [(bundle, tokens, n, parallel.derive_seed(seed, "statistical", k), deadline) for k, n in enumerate(sizes)]
    run = parallel.run_on(_stat_chunk, jobs, executor=executor, workers=workers, deadline=deadline)
    lost = [k for k in range(len(jobs)) if k not in run.results and "time limit" not in run.lost.get(k, "time limit")]
    if lost:
        raise parallel.WorkersLost(f"statistical audit: {len(lost)} of {len(jobs)} sample chunks were not drawn (their "
                                   "workers died): " + "; ".join(f"chunk {k}: {run.lost[k]}" for k in lost),
                                   missing=[f"chunk {k}" for k in lost])
    drawn = 0
    for k in sorted(run.results):
        part, n = run.results[k]
        for key, c in part.items():
            counts[key] = counts.get(key, 0) + c
        drawn += n
    return drawn


def audit_statistically(sampler: Callable, *, adapter: Any = "numpy", target: Model,
                        draft: Model | None = None, proposer: Any = None, prompt: Sequence[int] = (), tokens: int = 1, samples: int = 10_000,
                        confidence: float = 0.99, seed: int = 0, expected: Model | None = None,
                        seconds: float | None = None, batch: int = 1, device: str | None = None,
                        executor: Any = None, workers: int | None = None,
                        chunk_samples: int | None = None) -> StatisticalReport:
    """Sample ``sampler`` (through an adapter, with real randomness) and test its law statistically.

    The expected law is computed exactly (the target's, or ``expected``'s); only the sampler's side
    is sampled. Torch samplers draw from torch's own global generator, which is seeded with ``seed``
    (``torch.manual_seed``: the one global state this touches); numpy samplers get a generator of
    their own. With
    ``seconds``, sampling stops when that time is up (or at ``samples``, whichever comes first).
    ``batch > 1`` (the ``vllm`` adapter, ``tokens=1``) calls the sampler on ``batch`` rows at once,
    with its tensors on ``device`` (default: the GPU when torch sees one). ``adapter`` is an adapter
    object (``es.samplers.get_adapter(name)``, an :class:`exactspec.samplers.Adapter`) or its name.

    ``executor`` (any :class:`concurrent.futures.Executor`) or ``workers`` (a local process pool;
    ``0``: every core; ``1``: this process) draw the samples in chunks of ``chunk_samples``
    (default :data:`CHUNK_SAMPLES`), chunk ``k`` with its own seed derived from ``seed`` and
    ``k``: the figures do not depend on the number of workers (they differ from the unchunked
    run's, which draws one stream from ``seed``). The sampler, models and proposer must pickle
    (module-level functions; lambdas and closures need cloudpickle). ``batch > 1`` runs unchunked.
    """
    import time
    from .drafts import chain
    if not 0 < confidence < 1:
        raise InvalidValue(f"confidence must lie in (0, 1), got {confidence!r}")
    if isinstance(samples, bool) or not isinstance(samples, int):
        raise InvalidType(f"samples must be a positive int, got {samples!r}")
    elif samples < 1:
        raise InvalidValue(f"samples must be a positive int, got {samples!r}")
    if isinstance(adapter, str):   # a name, for users: resolved by the samplers registry, which sits above this module
        adapter = _adapter_named(adapter)
    proposer = chain(4) if proposer is None else proposer
    field = get_field("float")
    env = Env(target, draft, field)
    rng = _SamplingRng(seed)
    if getattr(adapter, "needs_torch", False):
        import torch
        torch.manual_seed(seed)
    rule = Rule(lambda step, r: adapter.call(sampler, step, r), name=getattr(sampler, "__name__", "sampler"),
                family=adapter.family)
    counts: dict = {}
    t0 = time.perf_counter()
    deadline = None if seconds is None else t0 + seconds
    drawn = 0
    if batch == 1 and parallel.parallel_requested(executor, workers):
        drawn = _sample_chunked(sampler, adapter, target, draft, proposer, tuple(prompt), tokens, samples, seed,
                                seconds, counts, executor, workers,
                                CHUNK_SAMPLES if chunk_samples is None else chunk_samples)
        samples = 0
    if batch > 1:
        if adapter.name != "vllm" or tokens != 1:
            raise InvalidValue("batch > 1 needs the vllm adapter (rows of one call) and tokens=1")
        drawn = _batched_first_tokens(sampler, adapter, proposer, env, rng, tuple(prompt), samples, batch, counts,
                                      deadline, device)
        samples = 0
    for _ in range(samples):
        if deadline is not None and not drawn % 32 and time.perf_counter() > deadline and drawn:
            break
        drawn += 1
        ctx = tuple(prompt)
        out: tuple[int, ...] = ()
        while len(out) < tokens:
            emitted = tuple(rule.fn(proposer.step(env, ctx, rng), rng))
            if not emitted:
                raise ExactSpecError(f"{rule.name} emitted no token")
            ctx, out = ctx + emitted, out + emitted
        key = out[:tokens]
        counts[key] = counts.get(key, 0) + 1
    seconds = time.perf_counter() - t0
    ref = expected if expected is not None else target
    exp = {k: v for k, v in target_law(ref, tuple(prompt), tokens, get_field(backend="python"), [ref.order]).items()}
    samples = drawn
    g, df, p = _g_test(counts, exp, samples)
    emp_tv = 0.5 * sum(abs(counts.get(k, 0) / samples - float(exp.get(k, 0))) for k in set(counts) | set(exp))
    r = tv_radius(samples, len(exp) + 1, confidence)
    return StatisticalReport(sampler=rule.name, samples=samples, confidence=confidence, g_statistic=g,
                             degrees_of_freedom=df, p_value=p, tv_estimate=emp_tv,
                             tv_interval=(max(0.0, emp_tv - r), min(1.0, emp_tv + r)), detectable_tv=r,
                             seconds=seconds, counts=counts, expected={k: Fraction(v) for k, v in exp.items()})
