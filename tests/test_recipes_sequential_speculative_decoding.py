"""Recipe: sequential-speculative-decoding 0.1.1 (``seqspecdecod.speculative_generate``), audited as published.

Its one generation entry point, ``speculative_generate(draft_model, target_model, tokenizer, prompt,
max_new_tokens, gamma, draft_temperature, target_temperature, method=...)``, runs one of three step
functions until ``max_new_tokens`` are generated: ``"standard"`` (``standard_sd.standard_speculative_step``,
Leviathan et al.), ``"naive_hsd"`` and ``"capped_hsd"`` (hierarchical speculative decoding, Zhou et al. 2026,
"lossless"; the README: "the same text you'd get from the target model alone"). The recipe hands it the
stand-ins wrapped as Hugging Face models (``model(ids).logits``, a parameter for ``.device``) and a
tokenizer whose chat template, ``__call__`` and ``decode`` pass the prompt ids and the generated ids
through, so ``speculative_generate`` runs unchanged, its loop included.

Verdicts (vocab 3, order-1 tables, prompt (0,), float64 stand-ins):

- ``standard`` and ``naive_hsd``: **lossless** (float64 rounding) at gamma 1 and 2, and 3 on vocab 2,
  temperature 1 and 1/2, a drafter at another temperature (1/2) or greedy (``draft_temperature=0``), and
  greedy decoding (both 0: the target's argmax, TV 0 exactly); a search over 135 small instances finds no
  counterexample to ``naive_hsd``.
- ``capped_hsd`` (the README's fastest method), gamma 2: **biased**, TV 11517/45220 (~0.2547) over 2 and
  3 tokens, algorithmic (41/160 at gamma 3 on a vocab-2 instance). ``seqspecdecod/capped_hsd.py`` indexes
  one position short in three places: l. 210 accepts the whole draft with
  ``compute_capped_prefix_ratio(ratios, gamma - 1)``, the capped ratio of the first gamma - 1 tokens (the
  last drafted token is never tested); l. 221-224 computes the next acceptance rate from the branch of the
  last *kept* token (``tau``) instead of the rejected one (``tau + 1``); l. 243-253 draws the replacement
  from ``q_dist = draft_probs[tau + 1]`` weighted by the ratios of position ``tau``. With those three
  indices moved by one the same code is lossless at gamma 2 and 3 (tests below). At gamma 1 the
  ``tau = -1`` indices wrap around (``ratios[-1]``, ``draft_probs[-1]``) onto the right position, so
  gamma 1 is lossless on tables without zeros.
- ``capped_hsd``, any gamma, a draft that gives a token probability 0 the target does not: ``ratio_branch =
  where(q_joint > 0, p_joint / q_joint, 0)`` (l. 132-136) leaves that token out of the residual: TV 1/4 on
  the instance below at gamma 1, one token, exactly. With ``draft_temperature=0`` (a one-hot draft) the
  residual is all zeros after every rejection and ``torch.multinomial`` raises: it crashes with
  probability 8/17 on the order-1 instance (gamma 1, two tokens).

The exact figures are also computed here without exactspec's interception, by a line-by-line rational
transliteration of ``capped_hsd_step`` (``_capped_step``). Plain-torch Monte Carlo (the same loop on the
float64 stand-ins, no interception, ``torch.manual_seed(0)``, 200,000 runs each) agreed: capped gamma 2,
2 tokens: TV 0.2531 +- 0.0011 (1 s.e.) against 11517/45220 = 0.2547, chi2 8.9 on 8 df against the
transliterated law; the q(2) = 0 instance: 0.2513 +- 0.0007 against 1/4; the greedy drafter: crashes in
0.4698 +- 0.0011 of the runs against 8/17 = 0.4706; standard and naive_hsd, gamma 2, 3 tokens: chi2 22.7 and
29.7 on 26 df against the target's law.

Install with ``pip install --no-deps sequential-speculative-decoding==0.1.1`` (``tests/published-nodeps.txt``):
it declares torch>=2.0 and transformers>=4.40 only, both already installed. With
``EXACTSPEC_REQUIRE_PUBLISHED`` set, a missing package fails this module.
"""

from __future__ import annotations

import inspect
import os
import textwrap
from fractions import Fraction as F
from importlib.metadata import version
from itertools import product
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("EXACTSPEC_REQUIRE_PUBLISHED"):
    import seqspecdecod.capped_hsd as capped_hsd
    import seqspecdecod.generation as generation
else:
    capped_hsd = pytest.importorskip("seqspecdecod.capped_hsd",
                                     reason="pip install --no-deps sequential-speculative-decoding==0.1.1")
    import seqspecdecod.generation as generation

import exactspec as es  # noqa: E402
from exactspec.laws import total_variation  # noqa: E402
from exactspec.samplers.loops.loop_audit import audit_loop  # noqa: E402
from exactspec.samplers.loops.loop_search import search_loop  # noqa: E402
from findings import observe, release, tv_text  # noqa: E402

PINNED = "0.1.1"
TARGET = es.models.random_table(vocab=3, order=1, seed=1)
DRAFT = es.models.random_table(vocab=3, order=1, seed=4)
TARGET2 = es.models.random_table(vocab=2, order=1, seed=1)    # gamma 3 on vocab 2 keeps the audits to seconds
DRAFT2 = es.models.random_table(vocab=2, order=1, seed=4)
TOL = F(1, 2 ** 40)     # audit_loop's default tolerance (float64 rounding)
FLOAT64_TEXT = "TV <= 2^-40 each (float64 rounding)"


def _lossless(r, instance="float64 stand-ins, ideal uniforms"):
    """Observe the lossless row: the float64 bound the row states when it holds (and nothing crashed), else the TV."""
    ok = r.tv <= TOL and not r.error_probability
    observe("sequential-speculative-decoding-lossless", r.verdict, FLOAT64_TEXT if ok else tv_text(r.tv),
            instance=instance, measured=float(r.tv))
CAPPED_GAMMA_2_TV = F(11517, 45220)
pytestmark = pytest.mark.filterwarnings("ignore::exactspec.HorizonWarning")


class _Ids(list):
    """What ``decode`` returns: the ids, with the one str method ``speculative_generate`` calls (``strip``)."""

    def strip(self):
        return self


class PassThrough:
    """A tokenizer that hands the prompt ids through the chat template and ``decode`` the ids back."""

    eos_token_id = None
    unk_token_id = -1

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        return messages[0]["content"]

    def __call__(self, texts, return_tensors=None):
        return SimpleNamespace(input_ids=texts[0])

    def convert_tokens_to_ids(self, token):
        return -1

    def decode(self, ids, skip_special_tokens=False):
        return _Ids(ids)


class HF(torch.nn.Module):
    """A stand-in as a Hugging Face causal LM: ``model(ids).logits``, and a parameter for ``.device``."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, ids):
        return SimpleNamespace(logits=self.lm(ids))


def seq_loop(method, gamma, new_tokens, **temperatures):
    """``speculative_generate`` on the stand-ins, at temperature 1 unless told."""
    kwargs = {"draft_temperature": 1.0, "target_temperature": 1.0, **temperatures}

    def loop(target_lm, draft_lm, ids):                                           # recipe
        result = generation.speculative_generate(HF(draft_lm), HF(target_lm), PassThrough(), ids,  # recipe
                                                 max_new_tokens=new_tokens, gamma=gamma,       # recipe
                                                 method=method, **kwargs)                      # recipe
        return list(result["text"])                                               # recipe: the ids, decoded
    return loop


def audit(method, gamma, tokens, target=TARGET, draft=DRAFT, **kwargs):
    temperatures = {k: kwargs.pop(k) for k in ("draft_temperature", "target_temperature") if k in kwargs}
    kwargs.setdefault("rng_model", "continuous")
    return audit_loop(seq_loop(method, gamma, tokens, **temperatures), target=target, draft=draft, prompt=(0,),
                      tokens=tokens, output="new", progress=False, **kwargs)


def argmax_model(model, name):
    def one_hot(ctx):
        law = model(ctx)
        best = max(range(len(law)), key=lambda i: (law[i], -i))
        return tuple(F(int(i == best)) for i in range(len(law)))
    return es.models.from_function(vocab=model.vocab, order=model.order, fn=one_hot, name=name)


# -- capped_hsd_step (seqspecdecod/capped_hsd.py), transliterated line by line into exact rationals -----------

def _max_prefix_index(ratios):                       # compute_maximum_prefix_ratio_index, l. 28-48
    m, best = 0, F(0)
    for i, r in enumerate(ratios):
        if r > 1 and r > best:
            best, m = r, i + 1
    return m


def _capped_prefix_ratio(ratios, t):                 # compute_capped_prefix_ratio, l. 51-75 (Python indices kept)
    m = _max_prefix_index(ratios[:t])
    return ratios[t - 1] if m == 0 else ratios[t - 1] / ratios[m - 1]


def _capped_branch(x, qs, ps, t, ratios):            # compute_capped_branch_divergences, l. 78-140
    m, divide, q_prefix, p_prefix = _max_prefix_index(ratios[:t]), F(1), F(1), F(1)
    for i in range(t):
        q_prefix *= qs[i][x[i]]
        p_prefix *= ps[i][x[i]]
        if m >= 0:
            m -= 1
        if m == 0:
            divide = p_prefix / q_prefix
    q_joint = [q_prefix * v for v in qs[t]]
    p_joint = [p_prefix * v for v in ps[t]]
    r_star = [(p_joint[i] / q_joint[i] if q_joint[i] > 0 else F(0)) / divide for i in range(len(q_joint))]
    d_pq = sum((r - 1 if r > 1 else 0) * qj for r, qj in zip(r_star, q_joint))
    d_qp = sum((1 - r if r <= 1 else 0) * qj for r, qj in zip(r_star, q_joint))
    return r_star, d_pq, d_qp


def _accept_probability(rate):                       # P(rate > u), u ~ U[0, 1); NaN (0/0) compares False
    if rate is None:
        return F(0)
    return min(max(rate, F(0)), F(1))


def _capped_step(target, draft, ctx, gamma):
    """{new ids (or "crash"): probability} of one published ``capped_hsd_step`` from ``ctx``, exactly."""
    vocab, out = len(target(ctx)), {}
    for x in product(range(vocab), repeat=gamma):
        qs, ps, pr, c = [], [], F(1), ctx
        for xi in x:
            qs.append(draft(c)), ps.append(target(c))
            pr *= qs[-1][xi]
            c += (xi,)
        if pr == 0:
            continue
        ratios, r = [], F(1)
        for t in range(gamma):                                                   # l. 202
            r *= ps[t][x[t]] / qs[t][x[t]]
            ratios.append(r)
        rate = min(_capped_prefix_ratio(ratios, gamma - 1), F(1))               # l. 210-211
        reach, ends = F(1), []
        for t in range(gamma - 1, -1, -1):                                       # l. 212-225
            a = _accept_probability(rate)
            ends.append((t, reach * a))
            reach *= 1 - a
            if t - 1 >= 0:
                _, d_pq, d_qp = _capped_branch(x, qs, ps, t - 1, ratios)
                rate = d_pq / d_qp if d_qp else (None if d_pq == 0 else F(1))
        ends.append((-1, reach))
        for tau, w in ends:
            if not w:
                continue
            w *= pr
            if tau == gamma - 1:                                                 # l. 230-234: the bonus token
                for y, py in enumerate(target(c)):
                    if py:
                        out[x + (y,)] = out.get(x + (y,), 0) + w * py
                continue
            r_star, _, _ = _capped_branch(x, qs, ps, tau, ratios)               # l. 243-255
            q_prefix = F(1)
            for i in range(tau):
                q_prefix *= qs[i][x[i]]
            residual = [max(qs[tau + 1][i] * q_prefix * (r_star[i] - 1), F(0)) for i in range(vocab)]
            total = sum(residual)
            if not total:                                  # 0/0: NaN weights, torch.multinomial raises
                out["crash"] = out.get("crash", 0) + w
                continue
            for y in range(vocab):
                if residual[y]:
                    key = x[:tau + 1] + (y,)
                    out[key] = out.get(key, 0) + w * residual[y] / total
    return out


def capped_loop_law(target, draft, gamma, n, prompt=(0,)):
    """The law of the first ``n`` tokens ``speculative_generate(method="capped_hsd")`` returns, exactly."""
    out = {}

    def run(generated, w):
        for new, pr in _capped_step(target, draft, tuple(prompt) + generated, gamma).items():
            if new == "crash":
                out["crash"] = out.get("crash", 0) + w * pr
            elif len(generated + new) >= n:
                out[(generated + new)[:n]] = out.get((generated + new)[:n], 0) + w * pr
            else:
                run(generated + new, w * pr)
    run((), F(1))
    return out


# -- tests ------------------------------------------------------------------------------------------------------

def test_the_recorded_version_is_installed():
    assert release("sequential-speculative-decoding") == PINNED
    assert version("sequential-speculative-decoding") == PINNED, (
        f"these findings are for sequential-speculative-decoding {PINNED}; "
        f"{version('sequential-speculative-decoding')} is installed")


@pytest.mark.parametrize("method, gamma", [("standard", 1), ("standard", 2), ("naive_hsd", 1), ("naive_hsd", 2),
                                           ("capped_hsd", 1)])
def test_lossless_methods(method, gamma):
    r = audit(method, gamma, gamma + 1)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= TOL and r.error_probability == 0


def test_standard_is_lossless_on_torchs_own_generator():
    # native: u = torch.rand(1) on its float32 grid; `u < acceptance_prob` is strict, so a token with p = 0 is
    # never accepted, and the float32 grid moves the law by no more than rounding
    r = audit("standard", 1, 2, rng_model="native")
    observe("sequential-speculative-decoding-lossless", r.verdict, "TV < 10^-6 (float32 grid)"
            if r.tv < F(1, 10 ** 6) else tv_text(r.tv), instance="standard, torch's generator", measured=float(r.tv))
    assert r.extra["rng_model"] == "native" and r.verdict == "lossless"


@pytest.mark.parametrize("method", ["standard", "naive_hsd"])
@pytest.mark.parametrize("temperatures, expected", [
    ({"draft_temperature": 0.5, "target_temperature": 0.5}, es.models.sharpen(TARGET, 2)),
    ({"draft_temperature": 0.0}, None),                       # a greedy drafter, a sampling target
], ids=["T0.5", "greedy_draft"])
def test_temperatures(method, temperatures, expected):
    r = audit(method, 2, 3, expected=expected, **temperatures)
    _lossless(r)
    assert r.verdict == "lossless" and r.tv <= TOL


def test_greedy_decoding_is_the_targets_argmax_exactly():
    r = audit("standard", 2, 3, draft_temperature=0.0, target_temperature=0.0,
              expected=argmax_model(TARGET, "argmax(target)"))
    observe("sequential-speculative-decoding-lossless", r.verdict, "0 (exact)" if r.tv == 0 else tv_text(r.tv),
            instance="greedy")
    assert r.verdict == "lossless" and r.tv == 0


def test_capped_hsd_is_biased_at_gamma_2():
    r = audit("capped_hsd", 2, 2)
    exact = capped_loop_law(TARGET, DRAFT, 2, 2)
    assert "crash" not in exact
    observe("sequential-speculative-decoding-capped-hsd", r.verdict, tv_text(total_variation(exact, r.expected))
            if total_variation(r.output, exact) <= TOL else tv_text(r.tv), instance="gamma 2, vocab 3, 2 tokens",
            measured=float(r.tv))
    assert r.verdict == "biased" and abs(r.tv - CAPPED_GAMMA_2_TV) <= TOL
    assert total_variation(r.output, exact) <= TOL              # the audit's law is the transliteration's
    assert total_variation(exact, r.expected) == CAPPED_GAMMA_2_TV


def test_capped_hsd_bias_over_a_second_step():
    # 3 tokens: the first step and the first token of a second; the whole bias is in the first 2 tokens
    r = audit("capped_hsd", 2, 3)
    assert r.verdict == "biased" and abs(r.tv - CAPPED_GAMMA_2_TV) <= TOL
    assert total_variation(r.output, capped_loop_law(TARGET, DRAFT, 2, 3)) <= TOL


def _capped_with_indices_fixed():
    """``capped_hsd_step`` with the three indices l. 210, l. 224 and l. 244/248 moved by one position."""
    src = inspect.getsource(capped_hsd.capped_hsd_step)
    for old, new in [("compute_capped_prefix_ratio(ratios, gamma - 1)", "compute_capped_prefix_ratio(ratios, gamma)"),
                     ("                    tau, ratios\n", "                    tau + 1, ratios\n"),
                     ("                                                         tau, ratios)",
                      "                                                         tau + 1, ratios)"),
                     ("for i in range(tau):", "for i in range(tau + 1):")]:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    namespace = dict(vars(capped_hsd))
    exec(compile(textwrap.dedent(src), capped_hsd.__file__, "exec"), namespace)
    return namespace["capped_hsd_step"]


@pytest.mark.slow
def test_capped_hsd_is_lossless_at_gamma_2_with_three_indices_moved(monkeypatch):
    # ~12 s: the bias is exactly those three off-by-one positions
    monkeypatch.setattr(generation, "capped_hsd_step", _capped_with_indices_fixed())
    r = audit("capped_hsd", 2, 3)
    assert r.verdict == "lossless" and r.tv <= TOL


def test_capped_hsd_is_biased_at_gamma_3():
    # vocab 2, 4 tokens (a whole first step and the first token of a second): 41/160, the transliteration's figure
    r = audit("capped_hsd", 3, 4, target=TARGET2, draft=DRAFT2)
    exact = capped_loop_law(TARGET2, DRAFT2, 3, 4)
    observe("sequential-speculative-decoding-capped-hsd", r.verdict, tv_text(total_variation(exact, r.expected))
            if total_variation(r.output, exact) <= TOL else tv_text(r.tv), instance="gamma 3, vocab 2, 4 tokens",
            measured=float(r.tv))
    assert total_variation(exact, r.expected) == F(41, 160)
    assert r.verdict == "biased" and abs(r.tv - F(41, 160)) <= TOL and total_variation(r.output, exact) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("method", ["standard", "naive_hsd", "capped_hsd with the three indices moved"])
def test_gamma_3_is_lossless(monkeypatch, method):
    # vocab 2, 4 tokens, ~5 s each
    if method.startswith("capped_hsd"):
        monkeypatch.setattr(generation, "capped_hsd_step", _capped_with_indices_fixed())
        method = "capped_hsd"
    r = audit(method, 3, 4, target=TARGET2, draft=DRAFT2)
    if method != "capped_hsd":                 # the fixed capped_hsd is not the published code
        _lossless(r)
    assert r.verdict == "lossless" and r.tv <= TOL


@pytest.mark.slow
def test_naive_hsd_search_finds_no_counterexample():
    # ~60 s: 135 instances (vocab 2-4; context-free, per-position and order-1 laws, including p == q cells, where
    # its 0/0 fallbacks would act), gamma 2, 3 tokens: none biased, none crashing
    found = search_loop(seq_loop("naive_hsd", 2, 3), tokens=3, output="new", rng_model="continuous",
                       progress=False, budget=600)
    assert isinstance(found, es.counterexamples.EmptySearch), found


def test_capped_hsd_never_emits_a_token_the_draft_cannot_propose():
    # q(2) = 0 < p(2) = 1/4: r_star(2) = 0 (l. 132-136), so the residual max(q * (r_star - 1), 0) is (0, 1/8, 0):
    # every rejection (probability 3/8) emits token 1. Law (1/8, 7/8, 0): TV 1/4, exactly (dyadic laws, torch's
    # float32 rand grid represents 1/4 exactly). standard and naive_hsd give p exactly.
    p = es.models.context_free((F(1, 8), F(5, 8), F(1, 4)))
    q = es.models.context_free((F(1, 2), F(1, 2), F(0)))
    r = audit("capped_hsd", 1, 1, target=p, draft=q, rng_model="native")
    observe("sequential-speculative-decoding-capped-hsd", r.verdict, tv_text(r.tv), instance="q(x) = 0 < p(x), gamma 1")
    assert r.output == {(0,): F(1, 8), (1,): F(7, 8)} and r.tv == F(1, 4) and r.verdict == "biased"
    assert capped_loop_law(p, q, 1, 1) == r.output
    for method in ("standard", "naive_hsd"):
        assert audit(method, 1, 1, target=p, draft=q, rng_model="native").tv == 0


def test_capped_hsd_crashes_with_a_greedy_drafter():
    # draft_temperature=0: q one-hot on argmax q = 1; p(1 | 0) = 9/17 accepts it, a rejection (8/17) leaves the
    # residual all zero, 0/0 = NaN, and torch.multinomial raises (l. 255)
    r = audit("capped_hsd", 1, 2, draft_temperature=0.0, on_error="record")
    (what, prob), = r.extra["errors"].items()
    observe("sequential-speculative-decoding-greedy-drafter", "crashes", "with probability 8/17"
            if abs(r.error_probability - F(8, 17)) <= TOL else f"with probability {r.error_probability}",
            measured=float(r.error_probability))
    assert what.startswith("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0")
    assert abs(r.error_probability - F(8, 17)) <= TOL and not r.lossless
    assert capped_loop_law(TARGET, argmax_model(DRAFT, "argmax(draft)"), 1, 2)["crash"] == F(8, 17)
