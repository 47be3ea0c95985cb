"""The chain-rule catalog: each rule's rng form (the reference) and its closed-form step law.

Positions are 0-based: drafts ``x_0..x_{gamma-1}``, target laws ``p_0..p_gamma`` (``p_gamma`` is
the bonus position), claimed laws ``q_0..q_{gamma-1}``.

>>> import exactspec as es
>>> [r.name for r in CHAIN_RULES][:3]
['speculative_sampling', 'greedy_match', 'greedy_match_sampled']
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Iterator, cast

from ..laws import argmax, memoised, normalize, residual
from ..protocols import Law, Rng, Step
from .closed_form import chain_step_law
from .record import Rule

__all__ = ["speculative_sampling", "greedy_match", "greedy_match_sampled", "resample_from_target",
           "stale_draft_probs", "unverified_first_draft", "no_bonus", "tiny_clamp_residual",
           "sample_and_match", "ensemble", "TINY", "CHAIN_RULES"]

#: float32's smallest positive normal number, 2**-126, as an exact rational.
TINY = Fraction(1, 2 ** 126)

LEVIATHAN = ("Leviathan, Kalman, Matias. Fast Inference from Transformers via Speculative Decoding. "
             "ICML 2023 (arXiv:2211.17192), Algorithm 1; Chen et al. 2023 (arXiv:2302.01318)")


def _ratio(p: Law, q: Law, x: int) -> Any:
    """``min(1, p(x)/q(x))``; where ``q(x) == 0`` the ratio is infinite (accept) unless ``p(x) == 0`` too.

    That is what float code computes: ``p/q`` is ``inf`` or ``nan``, and ``u < nan`` is false.
    """
    qx = q[x]
    if not qx:
        return 1 if p[x] else 0
    r = p[x] / qx
    return r if r < 1 else 1


# -- speculative_sampling --------------------------------------------------------------------
def _speculative_sampling(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def _ss_accept(laws: Any, prefix: tuple[Any, ...], x: int) -> Any:
    return _ratio(laws.target(prefix), laws.claimed(prefix, x), x)


def _ss_reject(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return residual(laws.target(prefix), laws.claimed(prefix, x))


def _bonus_p(laws: Any, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", laws.target(prefix))


def _at_prefix(laws: Any, prefix: tuple[Any, ...]) -> Any:
    """The row key of a rule whose acceptance and rejection read only the laws at the current prefix."""
    return laws.row_key(prefix)


def _cf(accept: Any, reject: Any, bonus: Any, row_key: Any = _at_prefix) -> Any:
    def closed_form(laws: Any, horizon: int | None, lengths: bool = False) -> dict[Any, Any]:
        return chain_step_law(laws, horizon, accept, reject, bonus, lengths=lengths, row_key=row_key)
    return closed_form


speculative_sampling = Rule(
    _speculative_sampling, name="speculative_sampling", claim="lossless",
    description="accept x_j w.p. min(1, p_j(x_j)/q_j(x_j)); at the first rejection emit from "
                "norm(max(0, p_j - q_j)); all accepted: bonus from p_gamma",
    reference=LEVIATHAN, marks_accepted=True, closed_form=_cf(_ss_accept, _ss_reject, _bonus_p))


# -- greedy_match ------------------------------------------------------------------------------
def _greedy_match(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x, best = step.draft(j), argmax(step.target(j))
        if x == best:
            yield step.accept(j)
        else:
            yield best
            return
    yield argmax(step.target(step.gamma))


def _gm_accept(laws: Any, prefix: tuple[Any, ...], x: int) -> int:
    return 1 if x == laws.env.argmax(laws.target(prefix)) else 0


def _gm_reject(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", laws.env.point_mass(laws.env.argmax(laws.target(prefix))))


def _gm_bonus(laws: Any, prefix: tuple[Any, ...]) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", laws.env.point_mass(laws.env.argmax(laws.target(prefix))))


greedy_match = Rule(
    _greedy_match, name="greedy_match", claim="lossless-greedy",
    description="accept while x_j == argmax p_j; at the first mismatch emit argmax p_j; all accepted: "
                "argmax p_gamma",
    reference="greedy speculative decoding at temperature 0 (Leviathan et al. 2023; transformers assisted generation)",
    marks_accepted=True, closed_form=_cf(_gm_accept, _gm_reject, _gm_bonus))


# -- greedy_match_sampled -------------------------------------------------------------------------
def _greedy_match_sampled(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x, p = step.draft(j), step.target(j)
        if x == argmax(p):
            yield step.accept(j)
        else:
            yield rng.categorical(p)
            return
    yield rng.categorical(step.target(step.gamma))


def _target_law(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", laws.target(prefix))


greedy_match_sampled = Rule(
    _greedy_match_sampled, name="greedy_match_sampled", claim="biased",
    description="the greedy test while sampling: accept iff x_j == argmax p_j, else emit a sample of p_j; "
                "bonus from p_gamma",
    reference="argmax acceptance used at temperature > 0: lablup/mlxcel#902 (an MLX engine); SGLang's EAGLE "
              "verify taking the argmax branch under sampling, sgl-project/sglang#39253",
    marks_accepted=True, closed_form=_cf(_gm_accept, _target_law, _bonus_p))


# -- resample_from_target -----------------------------------------------------------------------
def _resample_from_target(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(p)
            return
    yield rng.categorical(step.target(step.gamma))


resample_from_target = Rule(
    _resample_from_target, name="resample_from_target", claim="biased",
    description="speculative_sampling, but a rejection emits a sample of p_j instead of the residual",
    reference="resampling from the target instead of the residual: ShopeeLLM/Spec-RL#14 (kept on purpose there); "
              "the pattern the issue attributes to an early vLLM draft (no public thread found)",
    marks_accepted=True, closed_form=_cf(_ss_accept, _target_law, _bonus_p))


# -- stale_draft_probs ----------------------------------------------------------------------------
def _stale_draft_probs(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x, p = step.draft(j), step.target(j)
        q = step.claimed(j - 1) if j >= 1 else step.claimed(0)   # the off-by-one
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def _stale_q(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", laws.claimed(prefix[:-1], prefix[-1]) if prefix else laws.claimed(prefix, x))


def _stale_accept(laws: Any, prefix: tuple[Any, ...], x: int) -> Any:
    return _ratio(laws.target(prefix), _stale_q(laws, prefix, x), x)


def _stale_reject(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return residual(laws.target(prefix), _stale_q(laws, prefix, x))


stale_draft_probs = Rule(
    _stale_draft_probs, name="stale_draft_probs", claim="biased",
    # position 0 always uses its own law: the off-by-one needs a second drafted position that is observed,
    # and a draft law that changes with the position (measured: exact audits at vocab 2 and 3, gamma 1-3)
    when="gamma >= 2 and tokens >= 2 and models == context_dependent", otherwise="lossless",
    description="off-by-one: position j >= 1 uses the claimed law of position j-1 in the ratio and the "
                "residual (invisible on context-free models)",
    reference="off-by-one indexing of draft probabilities (a classic refactor bug; no single public report)",
    marks_accepted=True, closed_form=_cf(_stale_accept, _stale_reject, _bonus_p, None))   # reads position j - 1 too


# -- unverified_first_draft ------------------------------------------------------------------------
def _unverified_first_draft(step: Step, rng: Rng) -> Iterator[int]:
    yield step.accept(0)
    for j in range(1, step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def _ufd_accept(laws: Any, prefix: tuple[Any, ...], x: int) -> Any:
    return 1 if not prefix else _ss_accept(laws, prefix, x)


def _ufd_key(laws: Any, prefix: tuple[Any, ...]) -> Any:
    return laws.row_key(prefix), not prefix


unverified_first_draft = Rule(
    _unverified_first_draft, name="unverified_first_draft", claim="biased",
    description="the first draft is always accepted; the rest are verified as in speculative_sampling",
    reference="a verification loop starting at the second draft position (illustrative misuse)",
    marks_accepted=True, closed_form=_cf(_ufd_accept, _ss_reject, _bonus_p, _ufd_key))


# -- no_bonus ------------------------------------------------------------------------------------
def _no_bonus(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(residual(p, q))
            return


def _no_bonus_law(laws: Any, prefix: tuple[Any, ...]) -> None:
    return None


no_bonus = Rule(
    _no_bonus, name="no_bonus", claim="lossless",
    description="speculative_sampling without the bonus token (lossless, fewer tokens per call)",
    reference=LEVIATHAN, marks_accepted=True, closed_form=_cf(_ss_accept, _ss_reject, _no_bonus_law))


# -- tiny_clamp_residual ---------------------------------------------------------------------------
def _tiny_residual(p: Law, q: Law, tiny: Any) -> tuple[Any, ...]:
    return cast("tuple[Any, ...]", memoised("tiny_residual", p, q, lambda: normalize([a - b if a - b > tiny else tiny for a, b in zip(p, q)])))


def _tiny_clamp_residual(step: Step, rng: Rng) -> Iterator[int]:
    tiny = step.number(TINY)
    for j in range(step.gamma):
        x = step.draft(j)
        p, q = step.target(j), step.claimed(j)
        if rng.bernoulli(_ratio(p, q, x)):
            yield step.accept(j)
        else:
            yield rng.categorical(_tiny_residual(p, q, tiny))
            return
    yield rng.categorical(step.target(step.gamma))


def _tiny_reject(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    return _tiny_residual(laws.target(prefix), laws.claimed(prefix, x), laws.env.number(TINY))


tiny_clamp_residual = Rule(
    _tiny_clamp_residual, name="tiny_clamp_residual", claim="biased",
    description="the residual is norm(max(tiny, p_j - q_j)) with tiny = 2**-126 (float32's smallest normal): "
                "biased by about 1e-38",
    reference="vLLM v0 vllm/model_executor/layers/rejection_sampler.py, _get_recovered_probs clamps "
              "target - draft at torch.finfo(float32).tiny (introduced in vllm-project/vllm#2336)",
    marks_accepted=True, closed_form=_cf(_ss_accept, _tiny_reject, _bonus_p))


# -- sample_and_match --------------------------------------------------------------------------------
def _sample_and_match(step: Step, rng: Rng) -> Iterator[int]:
    for j in range(step.gamma):
        x = step.draft(j)
        y = rng.categorical(step.target(j))
        if y == x:
            yield step.accept(j)
        else:
            yield y
            return
    yield rng.categorical(step.target(step.gamma))


def _sm_accept(laws: Any, prefix: tuple[Any, ...], x: int) -> Any:
    return laws.target(prefix)[x]


def _sm_reject(laws: Any, prefix: tuple[Any, ...], x: int) -> tuple[Any, ...]:
    p = laws.target(prefix)
    return cast("tuple[Any, ...]", memoised(f"without {x}", p, None, lambda: normalize([0 if i == x else v for i, v in enumerate(p)])))


sample_and_match = Rule(
    _sample_and_match, name="sample_and_match", claim="lossless",
    description="the target samples its own token at each position and keeps the draft while they match; "
                "at the first mismatch it emits its own token; bonus from p_gamma",
    reference="target-sample matching: argued lossless in lablup/mlxcel#992 and ml-explore/mlx-lm#1709, called "
              "biased in ml-explore/mlx-swift-lm#459; for one chain the exact engine finds it lossless",
    marks_accepted=True, closed_form=_cf(_sm_accept, _sm_reject, _bonus_p))


# -- ensemble(weight) ----------------------------------------------------------------------------------
def ensemble(weight: Any = Fraction(1, 2)) -> Rule:
    """The relaxed test ``min(1, 1 - w + w * p/q)`` with the standard residual and a bonus from ``p``.

    >>> ensemble("1/3").name
    'ensemble(1/3)'
    """
    from ..errors import InvalidValue
    from ..laws import to_rational
    w = to_rational(weight, "ensemble weight must be a rational in [0, 1]", floats=False)
    if not 0 <= w <= 1:
        raise InvalidValue(f"ensemble weight must be a rational in [0, 1], got {weight!r}")

    def _accept_prob(p: Law, q: Law, x: int, wf: Any) -> Any:
        if not q[x]:
            return 1
        a = 1 - wf + wf * p[x] / q[x]
        return a if a < 1 else 1

    def _ensemble(step: Step, rng: Rng) -> Iterator[int]:
        wf = step.number(w)
        for j in range(step.gamma):
            x = step.draft(j)
            p, q = step.target(j), step.claimed(j)
            if rng.bernoulli(_accept_prob(p, q, x, wf)):
                yield step.accept(j)
            else:
                yield rng.categorical(residual(p, q))
                return
        yield rng.categorical(step.target(step.gamma))

    def _accept(laws: Any, prefix: tuple[Any, ...], x: int) -> Any:
        return _accept_prob(laws.target(prefix), laws.claimed(prefix, x), x, laws.env.number(w))

    return Rule(
        _ensemble, name=f"ensemble({w})", claim="biased" if w != 1 else "lossless",
        description=f"relaxed acceptance min(1, 1 - w + w*p/q) with w = {w}, standard residual, bonus from p",
        reference="transformers _speculative_sampling with assistant_ensemble_weight "
                  "(huggingface/transformers#45865, PR #45979)",
        marks_accepted=True, closed_form=_cf(_accept, _ss_reject, _bonus_p), params={"weight": w})


CHAIN_RULES = [speculative_sampling, greedy_match, greedy_match_sampled, resample_from_target, stale_draft_probs,
               unverified_first_draft, no_bonus, tiny_clamp_residual, sample_and_match, ensemble()]
