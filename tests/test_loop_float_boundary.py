"""Whole loops at the float boundary and over the loop's own horizon (issue 16, sections 1 and 4).

- A loop audited at a precision coarser than float64 (float32 stand-ins, a float32 generator lattice) runs
  twice: as asked, and on float64 stand-ins; the verdict is :func:`exactspec.samplers.rounding.decide`'s
  (algorithmic bias is what stays at float64).
- ``reference=`` is a figure, never a tolerance: a reference further than float rounding from the expected
  law is refused.
- Without ``tokens=``, the horizon comes from the loop: every token of a first step and the first of a second.
"""

import json
from fractions import Fraction
from fractions import Fraction as F

import numpy as np
import pytest
import torch

import exactspec as es
from exactspec.samplers.rounding import F64_ALLOWANCE, ROUNDING_CAP, rounding_allowance, typical_rounding
from exactspec.samplers.loops.loop_audit import audit_loop, reference_loop
from exactspec.samplers.loops.loop_search import search_loop

P = es.models.random_table(vocab=2, order=1, seed=5)
Q = es.models.random_table(vocab=2, order=1, seed=6)
#: a target whose law changes with the position (parity of the context length); a draft that always drafts 0
PARITY = es.models.from_function(vocab=2, fn=lambda c: (F(1, 3), F(2, 3)) if len(c) % 2 else (F(3, 4), F(1, 4)),
                                 name="parity")
ZERO = es.models.context_free((F(1), F(0)))


def spec(gamma, n, *, temperature=1.0, bonus_untempered=False, wrong_bonus=False, eps=0.0, cast=False, tilt=0.0):
    """Speculative sampling (Leviathan et al.) until ``n`` new tokens, optionally broken.

    ``bonus_untempered``: the bonus token ignores the temperature; ``wrong_bonus``: it is drawn from the law of
    the last draft's position instead of the position after it; ``eps``: a residual floor (a bias);
    ``cast``: the logits are cast to float32 whatever the stand-ins hand over (as transformers' generate does);
    ``"numpy"``: through a numpy float32 array, a cast the audit cannot lift to float64;
    ``tilt``: the bonus law's token 0 weighted ``1 + tilt`` (a bias that never leaves the support).
    """
    def probs(lm, x, temp=temperature):
        logits = lm(x)[0]
        if cast == "numpy":
            logits = torch.from_numpy(logits.detach().numpy().astype(np.float32))
        elif cast:
            logits = logits.float()
        return (logits / temp).softmax(-1)

    def loop(target, draft, prompt):
        ids = prompt
        while ids.shape[1] - prompt.shape[1] < n:
            x, qs = ids, []
            for _ in range(gamma):
                q = probs(draft, x)[-1]
                qs.append(q)
                x = torch.cat([x, torch.multinomial(q, 1)[None]], dim=1)
            ps = probs(target, x)[-(gamma + 1):]
            k = ids.shape[1]
            for i in range(gamma):
                tok = int(x[0, k + i])
                if torch.rand(1) < ps[i, tok] / qs[i][tok]:
                    ids = x[:, :k + i + 1]
                    continue
                resid = torch.clamp(ps[i] - qs[i], min=0) + eps
                ids = torch.cat([ids, torch.multinomial(resid / resid.sum(), 1)[None]], dim=1)
                break
            else:
                bonus = probs(target, x, 1.0)[-1] if bonus_untempered else ps[gamma - 1] if wrong_bonus else ps[gamma]
                if tilt:
                    bonus = bonus * torch.cat([bonus.new_ones(1) + tilt, bonus.new_ones(bonus.shape[0] - 1)])
                ids = torch.cat([x, torch.multinomial(bonus, 1)[None]], dim=1)
        return ids
    loop.__name__ = f"spec_gamma{gamma}"
    return loop


def greedy(target, draft, prompt):
    """A reference that forgot to sample (generate without do_sample=True): the argmax sequence."""
    ids = prompt
    for _ in range(4):
        ids = torch.cat([ids, target(ids)[:, -1:].argmax(-1)], dim=-1)
    return ids


# -- section 1: rounding versus bias, for whole loops ----------------------------------------------------------------

def test_a_tempered_loop_whose_bonus_ignores_the_temperature_is_never_lossless_at_float32():
    loop = spec(1, 2, temperature=0.5, bonus_untempered=True)
    kw = dict(target=P, draft=Q, tokens=2, dtype=torch.float32, expected=es.models.sharpen(P, 2))
    # the built-in reference does not apply the temperature: it is ~0.2 from the expected law, a broken
    # baseline, refused (it used to widen the tolerance to twice that and pass this loop)
    with pytest.raises(es.ExactSpecError, match=r"reference loop reference_loop\(gamma=1\) lands TV 0\.\d+ from the "
                                                r"expected law"):
        audit_loop(loop, reference=1, **kw)
    r = audit_loop(loop, **kw)
    b = r.extra["float_boundary"]
    assert r.verdict == "biased" and r.exit_code == 1 and b["forced"] is False
    assert F(b["f64_tv"]) > F(1, 100) and b["reason"].startswith("algorithmic")
    assert r.tv == F(r.extra["tv_own"]) and F(r.extra["tv_float64"]) == F(b["f64_tv"])


def test_a_wrong_user_reference_is_refused_never_a_tolerance():
    with pytest.raises(es.ExactSpecError, match="reference loop greedy lands TV .* greedy where sampling was meant"):
        audit_loop(spec(1, 2), target=P, draft=Q, tokens=2, dtype=torch.float32, reference=greedy)


def test_a_correct_loop_at_float32_is_lossless_up_to_float32_rounding():
    r = audit_loop(spec(1, 2), target=P, draft=Q, tokens=2, dtype=torch.float32, reference=1)
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and r.exit_code == 0 and b["precision"] == "float32" and b["forced"] is False
    own, f64 = F(b["own_tv"]), F(b["f64_tv"])
    assert own == r.tv and F(1, 10 ** 9) < own < ROUNDING_CAP        # float32 rounding, far above 2**-40 ...
    assert f64 <= F64_ALLOWANCE and F(b["allowance"]) == F64_ALLOWANCE    # ... but the float64 run is exact enough
    assert "UP TO ROUNDING" in r.summary() and r.tolerance == F64_ALLOWANCE   # the reference widened nothing
    assert r.extra["reference"] == "reference_loop(gamma=1)" and F(r.extra["rounding_tv"]) > 0


def test_a_tiny_algorithmic_bias_at_float32_is_biased_through_the_float64_run():
    # with the reference it used to read lossless (the tolerance was twice the reference's float32 rounding)
    r = audit_loop(spec(1, 2, eps=1e-9), target=P, draft=Q, tokens=2, dtype=torch.float32, reference=1)
    b = r.extra["float_boundary"]
    assert r.verdict == "biased" and r.exit_code == 1 and b["forced"] is False
    # below float32 rounding at float32 (the TV there is about what rounding costs a correct loop) ...
    correct = audit_loop(spec(1, 2), target=P, draft=Q, tokens=2, dtype=torch.float32)
    assert F(b["own_tv"]) < 10 * F(correct.extra["tv_own"])
    # ... far above float64 rounding on float64 stand-ins: algorithmic
    assert F(b["f64_tv"]) > 1000 * F64_ALLOWANCE and F(b["algorithmic_tv"]) == F(b["f64_tv"])


def test_a_loop_that_forces_float32_internally_is_decided_by_the_run_with_its_casts_lifted():
    r = audit_loop(spec(1, 2, cast=True), target=P, draft=Q, tokens=2, dtype=torch.float32)
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and b["forced"] is True and r.extra["forced_precision"] == "float32"
    # the float64 run computes in float32 too (its TV is float32 rounding) ...
    assert F64_ALLOWANCE < F(b["f64_tv"]) < ROUNDING_CAP
    # ... and with its .float() lifted to float64 it is the algorithm at float64, held to float64 rounding
    lifted = r.extra["lifted_run"]
    assert lifted["completed"] and lifted["still_coarse"] == "none" and F(lifted["tv"]) <= F64_ALLOWANCE
    assert F(b["algorithmic_tv"]) == F(lifted["tv"]) and F(b["allowance"]) == F64_ALLOWANCE
    assert lifted["casts_lifted"]["float32"].startswith(__file__)      # where the cast is, file:line
    assert r.extra["lowest_precision"]["precision"] == "float32"
    # the same code honouring the dtype is not "forced"
    honours = audit_loop(spec(1, 2), target=P, draft=Q, tokens=2, dtype=torch.float32)
    assert honours.extra["float_boundary"]["forced"] is False


def test_a_loop_casting_down_where_the_cast_cannot_be_lifted_is_held_to_the_float32_bounds():
    # a numpy float32 array in the middle: no run can lift it, so the size-derived bounds decide
    r = audit_loop(spec(1, 2, cast="numpy"), target=P, draft=Q, tokens=2, dtype=torch.float32)
    b = r.extra["float_boundary"]
    assert r.verdict == "lossless" and b["forced"] is True and r.extra["forced_precision"] == "float32"
    assert r.extra["lifted_run"]["still_coarse"] == "float32"
    assert F64_ALLOWANCE < F(b["f64_tv"]) <= F(b["allowance"])
    assert F(b["allowance"]) == typical_rounding("float32", vocab=2, positions=2 * (r.extra["largest_step"] + 1))


def test_a_forced_float32_loop_with_a_bias_between_typical_and_worst_rounding():
    # its cast lifted, the 5e-6 residual floor shows at float64: biased (the size-derived bounds read "undecided")
    lifted = audit_loop(spec(1, 2, eps=5e-6, cast=True), target=P, draft=Q, tokens=2, dtype=torch.float32)
    lb = lifted.extra["float_boundary"]
    assert lifted.verdict == "biased" and lb["forced"] is True and "casts lifted to float64" in lb["reason"]
    assert F(lb["algorithmic_tv"]) == F(lifted.extra["lifted_run"]["tv"]) > 1000 * F64_ALLOWANCE
    # where the cast cannot be lifted, rounding and bias are separated by bounds only: undecided
    r = audit_loop(spec(1, 2, eps=5e-6, cast="numpy"), target=P, draft=Q, tokens=2, dtype=torch.float32)
    b = r.extra["float_boundary"]
    positions = 2 * (r.extra["largest_step"] + 1)
    assert b["forced"] is True
    assert typical_rounding("float32", vocab=2, positions=positions) < F(b["f64_tv"]) <= F(b["allowance"])
    assert F(b["allowance"]) == rounding_allowance("float32", vocab=2, positions=positions)
    assert r.verdict == "undecided" and r.exit_code == 3 and "UNDECIDED WITHIN FLOAT32 ROUNDING" in r.summary()
    # beyond the most float32 rounding can cost: biased
    far = audit_loop(spec(1, 2, eps=5e-5, cast="numpy"), target=P, draft=Q, tokens=2, dtype=torch.float32)
    assert far.verdict == "biased" and F(far.extra["float_boundary"]["f64_tv"]) > F(b["allowance"])


def test_a_fixed_length_loop_is_observed_whole():
    def two(target, draft, prompt):         # plain sampling of exactly two tokens
        ids = prompt
        for _ in range(2):
            ids = torch.cat([ids, torch.multinomial(target(ids)[0, -1].softmax(-1), 1)[None]], dim=-1)
        return ids
    r = audit_loop(two, target=P)     # it used to be refused: fewer tokens than the default horizon 3
    assert r.scope["tokens"] == 2 and r.scope["complete"] and r.verdict == "lossless" and r.exit_code == 0


# -- the loop search uses the same verdict -----------------------------------------------------------------------------

def forced_float32_tilt(target, draft, prompt):
    """gamma 1 speculative sampling computing in float32 whatever it is handed (through numpy: a cast no run can
    lift), its bonus law tilted by 2e-5: a bias between what float32 rounding typically and at most costs, never
    outside the support."""
    return spec(1, 2, tilt=2e-5, cast="numpy")(target, draft, prompt)


def test_a_forced_float32_loop_reads_undecided_at_the_default_float64_stand_ins():
    r = audit_loop(forced_float32_tilt, target=P, draft=Q, tokens=2)
    b = r.extra["float_boundary"]
    assert b["forced"] is True and b["precision"] == "float32" and r.extra["forced_precision"] == "float32"
    assert r.verdict == "undecided" and r.exit_code == 3
    # the same loop without the tilt: lossless up to float32 rounding (it used to read "biased": float32 rounding
    # held to 2**-40)
    ok = audit_loop(spec(1, 2, cast="numpy"), target=P, draft=Q, tokens=2)
    assert ok.verdict == "lossless" and ok.extra["float_boundary"]["forced"] is True and ok.tv > F64_ALLOWANCE
    # the tilt with a cast the audit can lift: the lifted run shows it, biased
    lifted = audit_loop(spec(1, 2, tilt=2e-5, cast=True), target=P, draft=Q, tokens=2)
    assert lifted.verdict == "biased" and lifted.extra["lifted_run"]["still_coarse"] == "none"


def test_a_search_meeting_undecided_instances_is_incomplete_never_empty():
    from exactspec.counterexamples import IncompleteSearch
    from exactspec.counterexamples.space import Space
    space = Space(vocabs=(2,), shapes=((1,),), tokens=(2,), families=("context_free",), max_denominator=3,
                  random_points=0, exhaustive_denominator=3, exhaustive_limit=12)
    found = search_loop(forced_float32_tilt, space=space, progress=False)
    # the point masses come first and are exact; the tilt shows (undecided) on the others
    assert isinstance(found, IncompleteSearch) and found.exit_code == 3
    assert f"undecided within float rounding on 4 of {found.audited} instances" in found.reason


# -- the command line ------------------------------------------------------------------------------------------------

def test_cli_audit_loop_takes_precision_and_tolerance(capsys, tmp_path, monkeypatch):
    from exactspec import cli
    (tmp_path / "float_loops_16.py").write_text(
        "import torch\n\n"
        "def forced(target, draft, prompt):\n"
        "    ids = prompt\n"
        "    for _ in range(2):\n"
        "        probs = target(ids)[0, -1].float().softmax(-1)     # float32 whatever it is handed\n"
        "        ids = torch.cat([ids, torch.multinomial(probs, 1)[None]], dim=-1)\n"
        "    return ids\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(*argv):
        code = cli.main(["audit-loop", "float_loops_16:forced", "--instance", "--vocab", "3", "--json", *argv])
        out = capsys.readouterr().out
        return code, json.loads(out) if code in (0, 1, 3) else out
    code, rep = run("--precision", "float32")
    assert code == 0 and rep["instance"]["dtype"] == "float32" and rep["extra"]["float_boundary"]["forced"] is True
    assert rep["instance"]["tokens"] == 2 and rep["scope"]["complete"]      # the loop's whole output
    assert rep["extra"]["lifted_run"]["casts_lifted"]["float32"].endswith("float_loops_16.py:6")
    # tolerance 0 demands exactness: the cast lifted, the loop is float64 code, whose rounding is then bias
    code, rep = run("--precision", "float64", "--tolerance", "0")
    assert code == 1 and rep["extra"]["tolerance"] == "0" and rep["extra"]["float_boundary"]["precision"] == "float32"
    assert 0 < Fraction(rep["extra"]["lifted_run"]["tv"]) <= F64_ALLOWANCE
    assert cli.main(["audit-loop", "float_loops_16:forced", "--instance", "--tolerance=-1/2"]) == 2
    assert "--tolerance must be >= 0" in capsys.readouterr().err
    assert cli.main(["audit-loop", "float_loops_16:forced", "--instance", "--dtype", "float32",
                     "--precision", "float64"]) == 2
    assert "disagree" in capsys.readouterr().err


# -- a loop that goes through a coarser dtype and back: rounding, never bias -------------------------------------------
# The precision was seen only where numbers meet the randomness (multinomial's weights, the numbers compared with
# uniforms). These loops hand float64 to both and yet carry float32 rounding; each read "biased" (TV ~1e-8, beyond
# float64's 2**-40) before the watched rerun (exactspec.samplers.randomness.precision_watch).

def _sampling(transform):
    def loop(target, draft, prompt):
        ids = prompt
        for _ in range(2):
            probs = transform(target(ids)[0, -1])
            ids = torch.cat([ids, torch.multinomial(probs, 1)[None]], dim=1)
        return ids
    loop.__name__ = transform.__name__
    return loop


def logits_through_float32(logits):
    return logits.float().double().softmax(-1)


def softmax_in_float32_then_float64(logits):
    return logits.float().softmax(-1).double()


def float32_temperature_tensor(logits):
    t = torch.tensor(0.7)          # float32 by default
    return (logits / t.double() * 0.7).softmax(-1)


P3 = es.models.random_table(vocab=3, order=1, seed=1)


@pytest.mark.parametrize("transform", [logits_through_float32, softmax_in_float32_then_float64,
                                       float32_temperature_tensor])
def test_a_loop_rounding_through_float32_and_back_is_not_called_biased(transform):
    r = audit_loop(_sampling(transform), target=P3, tokens=2, workers=None)
    b = r.extra["float_boundary"]
    # not exact, beyond float64 rounding: the verdict used to be "biased" (algorithmic)
    assert F64_ALLOWANCE < r.tv < ROUNDING_CAP
    assert r.verdict == "lossless" and r.exit_code == 0 and b["forced"] is True and b["precision"] == "float32"
    assert r.extra["forced_precision"] == "float32" and "watched" in r.extra["forced_precision_from"]
    assert F(b["f64_tv"]) == r.tv and r.extra["lifted_run"]["still_coarse"] == "none"
    assert F(b["algorithmic_tv"]) == F(r.extra["lifted_run"]["tv"]) <= F(b["allowance"]) == F64_ALLOWANCE


def test_a_loop_biased_beyond_float32_rounding_is_biased_though_it_rounds_through_float32():
    def tilted(logits):
        probs = logits.float().double().softmax(-1)
        return probs * torch.tensor([1.0 + 1e-4, 1.0, 1.0], dtype=torch.float64)
    r = audit_loop(_sampling(tilted), target=P3, tokens=2, workers=None)
    b = r.extra["float_boundary"]
    assert r.verdict == "biased" and b["forced"] is True and F(b["f64_tv"]) > F(b["allowance"])


def test_a_float32_tensor_that_never_meets_float64_data_is_not_rounding():
    # a tiny mixing bias (TV ~1e-9: beyond 2**-40, below float32 rounding) next to a float32 counter that never
    # touches the probabilities: still biased (the watched rerun ran and saw no coarser dtype meet float64 data)
    def mixed(logits):
        counter = torch.zeros(1)
        counter += 1
        return logits.softmax(-1) * (1 - 1e-9) + 1e-9 / 3
    r = audit_loop(_sampling(mixed), target=P3, tokens=2, workers=None)
    b = r.extra["float_boundary"]
    assert F64_ALLOWANCE < r.tv < ROUNDING_CAP
    assert r.verdict == "biased" and b["forced"] is False and r.extra.get("forced_precision") is None
    assert b["reason"].startswith("algorithmic")
