"""Kernels that read their randomness from tensors: the guided breakpoint search against the former bisection.

Run:  python -m benchmarks.bench_declarative

A FlashInfer-style chain kernel (own code, ``reference_flashinfer_style``: a loop over rows, as an
interpreted kernel runs) is audited exactly through ``FlashinferChainAdapter(method=...)`` at
vocab 4, gamma 1..3, 1 token, on the float32 lattice, in the same run: ``bisection`` (the code path
before issue 10) and ``guided`` (probes at the thresholds the laws suggest, one batched call per
uniform, and the law of each input kept for the replays of the same step). The laws must be equal
(exact rationals); the figures are the time of the sampler's audit alone (``reference=False``), the
kernel calls and rows evaluated, and the ratio.
Also the declared adapter with an exponential race (``tensor_randomness``) at gamma 3.
"""

from __future__ import annotations

import time
from fractions import Fraction as F

import torch

import exactspec as es
from exactspec.bugzoo.torch_samplers import race_kernel
from exactspec.samplers.adapters.explicit_uniforms import FlashinferChainAdapter, reference_flashinfer_style, tensor_randomness


def counted(kernel):
    stats = {"calls": 0, "rows": 0}

    def wrapped(*args):
        stats["calls"] += 1
        stats["rows"] += int(args[0].shape[0])
        return kernel(*args)
    wrapped.__name__ = kernel.__name__
    return wrapped, stats


def audit(kernel, adapter, gamma):
    p = es.models.context_free((F(2, 5), F(3, 10), F(1, 5), F(1, 10)))
    q = es.models.context_free((F(1, 4), F(1, 4), F(1, 4), F(1, 4)))
    k, stats = counted(kernel)
    t0 = time.perf_counter()
    r = es.audit_sampler(k, adapter=adapter, target=p, draft=q, proposer=es.drafts.chain(gamma), tokens=1,
                         rng_model="torch-float32", reference=False)
    return r, time.perf_counter() - t0, stats


class NoMemo(dict):
    """The guided search without its memo of each input's law (replay reruns a step once per outcome)."""

    def __setitem__(self, key, value):
        pass


def guided_without_memo() -> FlashinferChainAdapter:
    a = FlashinferChainAdapter("guided")
    a._declared._memo = NoMemo()
    return a


def main() -> None:
    torch.set_num_threads(1)
    print(f"vocab 4, tokens 1, float32 lattice; torch threads {torch.get_num_threads()}")
    for gamma in (1, 2, 3):
        old, t_old, s_old = audit(reference_flashinfer_style, FlashinferChainAdapter("bisection"), gamma)
        bare, t_bare, s_bare = audit(reference_flashinfer_style, guided_without_memo(), gamma)
        new, t_new, s_new = audit(reference_flashinfer_style, FlashinferChainAdapter("guided"), gamma)
        assert old.output == new.output == bare.output, "the searches disagree"
        print(f"gamma {gamma}: bisection {t_old:6.2f} s ({s_old['calls']} calls, {s_old['rows']} rows); "
              f"guided without memo {t_bare:6.2f} s ({s_bare['calls']} calls, {s_bare['rows']} rows); "
              f"guided {t_new:6.2f} s ({s_new['calls']} calls, {s_new['rows']} rows); ratio {t_old / t_new:5.1f}x; "
              f"TV {float(new.tv):.2e}")
    adapter = tensor_randomness(("draft_probs", "draft_token_ids", "uniform_samples", "target_probs", "exponentials"),
                                {"uniform_samples": "uniform k", "exponentials": "exponential V"})
    r, t, s = audit(race_kernel, adapter, 3)
    print(f"declared race kernel, gamma 3: {t:6.2f} s ({s['calls']} calls, {s['rows']} rows); TV {float(r.tv):.2e}")


if __name__ == "__main__":
    main()
