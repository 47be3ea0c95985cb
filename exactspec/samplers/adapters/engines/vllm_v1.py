"""vLLM v1's own ``rejection_sample`` and ``RejectionSampler`` (``vllm.v1.sample.rejection_sampler``), kernels and all.

vLLM's rejection sampler draws its randomness in torch and hands it to Triton kernels
(``generate_uniform_probs``: ``torch.rand(num_tokens, dtype=float64)``, then
``uniform_(generator=)`` on the slices of requests with their own generator;
``sample_recovered_tokens``: ``q = torch.empty(batch, V); q.exponential_()``, then
``q[i].exponential_(generator=)``; the kernels read ``1 / q`` and the uniforms from memory). Lazy
uniforms cannot reach a kernel, so :class:`VllmRejectionAdapter` evaluates ``rejection_sample`` as
a function of those values (:mod:`exactspec.samplers.randomness.planned`: torch's fills write the
values the audit chose) and recovers the law by the breakpoint search of the declarative adapter
(:mod:`.explicit_uniforms`): the uniforms on their lattice (float64's ``k * 2**-53``, 0 included,
torch's CPU generator; or the rng model's lattice), each cell weighed by its count of lattice points;
the exponentials followed as the race ``argmax(w / E)`` with ideal (continuous) exponentials, each
weight ratio to one float32 ulp. Many probe points go into one call: each is one request of a
batch, so one launch of each kernel evaluates all of them, and every distinct probe row is
evaluated once (a cache of rows per input).

Settings (keyword arguments): ``requests`` the kinds of the requests in one batch
(``"random"``, ``"greedy"``; default one random request) and ``row`` the audited one (the others
are companions with the same drafts and laws, fixed randomness); ``generators`` the requests with
their own ``torch.Generator`` (``SamplingMetadata.generators``); ``draft_probs=False`` passes
``draft_probs=None`` (vLLM's n-gram path); ``temperature`` the random requests' temperature (a
``RejectionSampler`` applies it to the target and bonus logits; ``rejection_sample`` takes processed
logits and reads it only to tell greedy requests); ``use_fp64_gumbel`` is passed through. Bonus tokens are
drawn by the adapter for ``rejection_sample``, as the engine's sampler draws them before the call:
from the target law at position ``k`` for a random request, its argmax for a greedy one (drawn only
when the output uses it). A ``RejectionSampler`` module (``RejectionSampler(Sampler())``) is called
as the engine calls it, ``module(SpecDecodeMetadata, draft_probs, logits, SamplingMetadata)`` with the
bonus position's logits among ``logits``: its own ``Sampler`` draws the bonus tokens (temperature,
the PyTorch-native race of ``random_sample``), and the probe's exponentials go to both races.

>>> VllmRejectionAdapter(requests=("random", "greedy"), row=1).kinds
('random', 'greedy')
"""

from __future__ import annotations

import inspect
from fractions import Fraction
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np

from ....errors import InvalidType, InvalidValue
from ....protocols import Law, Step
from ...randomness.interception import bind
from ...randomness.planned import DrawPlan, planned_draws
from ..explicit_uniforms import (KernelAdapter, kernel_lattice, kernel_race_law, suggested_thresholds,
                                 uniform_cells)

__all__ = ["VllmRejectionAdapter", "vllm_rejection"]

#: the kinds of request a batch can hold (a greedy request has temperature 0)
KINDS = ("random", "greedy")
#: SamplingMetadata.logitsprocs: no logits processors (the engine's LogitsProcessors has these two lists)
_NO_PROCESSORS = SimpleNamespace(argmax_invariant=[], non_argmax_invariant=[])


def _greedy_law(law: Law) -> Law:
    """The point mass on the argmax of ``law`` (ties: the lowest id)."""
    best = max(range(len(law)), key=lambda t: (law[t], -t))
    return tuple(Fraction(int(t == best)) for t in range(len(law)))


class VllmRejectionAdapter(KernelAdapter):
    """``rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
    target_logits, bonus_token_ids, sampling_metadata, ...)`` as vLLM v1 defines it, or a ``RejectionSampler``
    module: a batch of requests with ``gamma`` drafts each, target laws as float32 logits (``log p``), draft
    laws as float32 probabilities (or None), output ``[batch, gamma + 1]`` padded with -1 (see the module). The
    ``bonus_token_ids`` handed to ``rejection_sample`` hold the placeholder id ``V``: where the output holds it, the
    adapter draws the bonus token (the target's law at position ``gamma``; its argmax for a greedy request).
    Shapes and dtypes of every argument: docs/adapters.md."""

    name = "vllm-v1"
    family = "chain"
    needs_torch = True
    precision = "float32"
    reference = None
    reference_rule_name = ""
    races = True                # the recovered (and the module's bonus) token: an ideal race to float32 resolution
    uniform_dtype = "float64"   # generate_uniform_probs: torch.rand(..., dtype=float64)

    def __init__(self, *, requests: Sequence[str] = ("random",), row: int = 0, generators: Sequence[int] = (),
                 draft_probs: bool = True, use_fp64_gumbel: bool = False, temperature: float = 1.0,
                 fan: int = 64) -> None:
        self.kinds = tuple(requests)
        if not self.kinds or any(k not in KINDS for k in self.kinds):
            raise InvalidValue(f"VllmRejectionAdapter requests must be a non-empty sequence of {KINDS}, got "
                               f"{requests!r}")
        if not isinstance(row, int):
            raise InvalidType(f"VllmRejectionAdapter row must be in 0 .. {len(self.kinds) - 1}, got {row!r}")
        if not 0 <= row < len(self.kinds):
            raise InvalidValue(f"VllmRejectionAdapter row must be in 0 .. {len(self.kinds) - 1}, got {row!r}")
        bad = [g for g in generators if not isinstance(g, int) or not 0 <= g < len(self.kinds)]
        if bad:
            raise InvalidValue(f"VllmRejectionAdapter generators must be request indices, got {bad}")
        self.row, self.generators, self.draft_probs = row, tuple(sorted(set(generators))), bool(draft_probs)
        if not float(temperature) > 0:
            raise InvalidValue(f"VllmRejectionAdapter temperature must be > 0 (greedy requests: requests=), got "
                               f"{temperature!r}")
        self.temperature = float(temperature)
        self.use_fp64_gumbel, self.fan, self.dtype = bool(use_fp64_gumbel), max(2, int(fan)), "float32"
        self._memo: dict = {}
        self._gens: dict[int, Any] = {}
        #: per input, how many rows and launches its law took (the cost of the interpreter)
        self.launches = 0
        self.rows = 0
        #: the generator that made the audited request's values, per kind, on the last launch (per-request seeds)
        self.filled_by: dict[str, set] = {}

    @property
    def greedy(self) -> bool:
        """Whether the audited request is greedy (temperature 0).

        >>> VllmRejectionAdapter(requests=("random", "greedy"), row=1).greedy
        True
        """
        return self.kinds[self.row] == "greedy"

    def resolution(self, rng_model: str) -> str:
        return (f"vLLM's uniforms on the lattice {self.lattice_note(rng_model)}, breakpoints located exactly; its "
                "exponentials as an ideal race, each weight ratio to one float32 ulp (the float64 run is held to that: "
                "TV 2**-23 a race; see exactspec.samplers.adapters.engines.vllm_v1)")

    def with_precision(self, precision: str) -> "VllmRejectionAdapter":
        """This adapter handing its logits and draft laws in ``precision`` (the float64 run of a float32 audit).

        >>> vllm_rejection.with_precision("float64").dtype
        'float64'
        """
        if precision == self.dtype:
            return self
        return self._copy_at(precision, dtype=precision, _memo={})

    # -- one batch ---------------------------------------------------------------------------------------------

    def _generator(self, index: int) -> Any:
        """The torch.Generator of batch request ``index`` (made once, seeded by its index, outside the audit)."""
        gen = self._gens.get(index)
        if gen is None:
            import torch
            gen = torch._C.Generator()      # the class itself: torch.Generator(...) is refused inside an audit
            gen.manual_seed(1000 + index)
            self._gens[index] = gen
        return gen

    def _runner(self, sampler: Callable, step: Step, lat: Any) -> Callable:
        """``run(points [R, k], exps [R, V] or None) -> outputs``: R replicas of the batch in one call."""
        import torch
        k, dt = step.gamma, getattr(torch, self.dtype)
        vocab = len(step.target(0))
        kinds, n = self.kinds, len(self.kinds)
        p = np.stack([self.floats(step.target(j)) for j in range(k)])
        q = np.stack([self.floats(step.claimed(j)) for j in range(k)])
        with np.errstate(divide="ignore"):
            logits = torch.tensor(np.log(p), dtype=dt)
        probs = torch.tensor(q, dtype=dt)
        drafts = torch.tensor(list(step.drafts), dtype=torch.int32)
        mid = float(lat.offset) + (lat.kmin + (lat.kmax - lat.kmin) // 2) * float(lat.step)
        fn = inspect.unwrap(sampler)
        module = isinstance(fn, torch.nn.Module)
        names = inspect.getmodule(type(fn) if module else fn).__dict__
        metadata_class, spec_class = names.get("SamplingMetadata"), names.get("SpecDecodeMetadata")
        if metadata_class is None or (module and spec_class is None):
            raise InvalidValue("the vllm-v1 adapter calls vllm.v1.sample.rejection_sampler's rejection_sample or a "
                               "RejectionSampler (their module's SamplingMetadata and SpecDecodeMetadata build the "
                               f"metadata); {getattr(fn, '__module__', fn)!r} has neither")
        with np.errstate(divide="ignore"):
            bonus_logits = torch.tensor(np.log(self.floats(step.target(k))), dtype=dt)[None]
        cache: dict[tuple, tuple] = {}

        def launch(rows: list[tuple]) -> list[tuple]:
            replicas = len(rows)
            batch = replicas * n
            uniform = np.full((batch, k), mid)
            expo = np.ones((batch, vocab))
            for r, (point, exps) in enumerate(rows):
                uniform[r * n + self.row] = float(lat.offset) + np.asarray(point, dtype=np.float64) * float(lat.step)
                if exps is not None:
                    expo[r * n + self.row] = exps
            greedy = [kinds[i % n] == "greedy" for i in range(batch)]
            gens = {i: self._generator(i) for i in range(batch) if i % n in self.generators}
            metadata = metadata_class(
                temperature=torch.tensor([0.0 if g else self.temperature for g in greedy], dtype=torch.float32),
                all_greedy=all(greedy), all_random=not any(greedy), top_p=None, top_k=None, generators=gens,
                max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=None,
                presence_penalties=None, repetition_penalties=None, output_token_ids=[], allowed_token_ids_mask=None,
                bad_words_token_ids={}, logitsprocs=_NO_PROCESSORS)
            # the module draws its bonus tokens first (Sampler: one race per request), then the recovered tokens'
            # race: both get the probe's exponentials, as no output reads both (the bonus follows k acceptances)
            plan = DrawPlan(uniform=uniform, exponential=[expo, expo] if module else expo)
            draft_probs = probs.repeat(batch, 1) if self.draft_probs else None
            with planned_draws(plan):
                if module:
                    assert spec_class is not None       # checked above: a RejectionSampler's module has one
                    at = torch.arange(batch * (k + 1), dtype=torch.int32).view(batch, k + 1)
                    spec = spec_class(
                        draft_token_ids=drafts.repeat(batch), num_draft_tokens=[k] * batch,
                        cu_num_draft_tokens=torch.arange(1, batch + 1, dtype=torch.int32) * k,
                        cu_num_sampled_tokens=torch.arange(1, batch + 1, dtype=torch.int32) * (k + 1),
                        target_logits_indices=at[:, :k].reshape(-1).contiguous(),
                        bonus_logits_indices=at[:, k].contiguous(), logits_indices=at.reshape(-1))
                    metadata.output_token_ids = [[] for _ in range(batch)]
                    out = sampler(spec, draft_probs, torch.cat([logits, bonus_logits]).repeat(batch, 1),
                                  metadata).sampled_token_ids
                else:
                    out = sampler(drafts.repeat(batch), [k] * batch, k,
                                  torch.arange(1, batch + 1, dtype=torch.int32) * k, draft_probs,
                                  logits.repeat(batch, 1), torch.full((batch, 1), vocab, dtype=torch.int64), metadata,
                                  use_fp64_gumbel=self.use_fp64_gumbel)
            self.launches += 1
            self.rows += replicas
            self.filled_by = {kind: {gen for kd, idx, gen in plan.fills if kd == kind
                                     and any(i // (k if kind == "uniform" else vocab) % n == self.row for i in idx)}
                              for kind in ("uniform", "exponential")}
            out = np.asarray(out).reshape(batch, -1)
            return [tuple(int(t) for t in out[r * n + self.row] if int(t) >= 0) for r in range(replicas)]

        def run(points: np.ndarray, exps: np.ndarray | None = None) -> list[tuple]:
            keys = [(tuple(int(x) for x in points[r]), None if exps is None else tuple(float(e) for e in exps[r]))
                    for r in range(points.shape[0])]
            todo = list(dict.fromkeys(key for key in keys if key not in cache))
            if todo:
                for key, out in zip(todo, launch(todo)):
                    cache[key] = out
            return [cache[key] for key in keys]
        return run

    def _law(self, sampler: Callable, step: Step, lat: Any) -> dict[tuple, Fraction]:
        k = step.gamma
        vocab = len(step.target(0))
        run = self._runner(sampler, step, lat)
        # the thresholds the kernels meet: vLLM's float32 softmax of the logits handed over, the float32 draft laws
        import torch
        dt = getattr(torch, self.dtype)
        with np.errstate(divide="ignore"):
            logits = torch.tensor(np.log(np.stack([self.floats(step.target(j)) for j in range(k)])), dtype=dt)
        if self.temperature != 1:          # what the module's apply_sampling_constraints hands the kernels
            logits = logits / torch.tensor(self.temperature, dtype=torch.float32)
        p32 = [row.astype(np.float64) for row in logits.softmax(dim=-1, dtype=torch.float32).numpy()]
        q32 = [self.floats(step.claimed(j)).astype(np.float32).astype(np.float64) if self.draft_probs else
               np.eye(vocab)[x] for j, x in enumerate(step.drafts)]
        guesses = suggested_thresholds(p32, q32, list(step.drafts), lat)
        cells = uniform_cells(run, k, lat, guesses, self.fan)
        law: dict[tuple, Fraction] = {}
        for cell, weight in cells:
            point = np.array([(a + b) // 2 for a, b in cell], dtype=np.int64)
            for out, share in kernel_race_law(run, point, vocab, p32, q32, self.fan).items():
                law[out] = law.get(out, Fraction(0)) + weight * share
        return law

    def call(self, sampler: Callable, step: Step, rng: Any) -> list[int]:
        # rng: the enumerating rng (its field converts the law's float weights);
        # vLLM draws its uniforms in float64 (generate_uniform_probs)
        lat = kernel_lattice(rng, "float64", self.name, "torch float64 (vLLM's uniform_probs)")
        key = (inspect.unwrap(sampler), lat.name, tuple(step.drafts), tuple(tuple(step.target(j))
               for j in range(step.gamma + 1)), tuple(tuple(step.claimed(j)) for j in range(step.gamma)))
        law = self._memo.get(key)
        if law is None:
            with bind(rng):
                law = self._law(sampler, step, lat)
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[key] = law
        outputs = sorted(law)
        conv = rng._field.convert
        out = list(outputs[rng.categorical(tuple(conv(law[o]) for o in outputs))])
        vocab = len(step.target(0))
        if vocab in out:        # the bonus token (handed as the id V): drawn now, as the engine drew it
            bonus_law = step.target(step.gamma)
            bonus = rng.categorical(_greedy_law(bonus_law) if self.greedy else bonus_law)
            out = [bonus if t == vocab else t for t in out]
        return out


vllm_rejection = VllmRejectionAdapter()
