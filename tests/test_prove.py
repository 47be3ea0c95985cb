"""es.prove: the catalog's proofs and refutations; every refutation's witness replayed exactly."""

from __future__ import annotations

import random
from fractions import Fraction as F

import subprocess
import sys
import textwrap
import pytest

import exactspec as es
from exactspec.cli import main
from exactspec.prove import Proof, Refutation, UnsupportedSymbolic

pytest.importorskip("z3")

R = es.rules
chain, tree = es.drafts.chain, es.drafts.tree

PROVEN_CHAIN = [
    ("speculative_sampling", R.speculative_sampling, {}),
    ("no_bonus", R.no_bonus, {}),
    ("sample_and_match", R.sample_and_match, {}),
    ("argmax drafts, point-mass claims", R.speculative_sampling, {"sampling": "argmax", "claim": "point_mass"}),
]


def _grid(fast_vocab: int = 2) -> list:
    out = []
    for label, rule, kw in PROVEN_CHAIN:
        for vocab in (2, 3):
            for gamma in (1, 2):
                for tokens in (1, 2):
                    marks = [pytest.mark.slow] if vocab > fast_vocab else []
                    out.append(pytest.param(rule, kw, vocab, gamma, tokens, marks=marks,
                                            id=f"{label}-V{vocab}-g{gamma}-T{tokens}"))
    return out


@pytest.mark.parametrize("rule, kw, vocab, gamma, tokens", _grid())
def test_catalog_lossless_rules_are_proven(rule, kw, vocab, gamma, tokens):
    res = es.prove(rule, proposer=chain(gamma, **kw), vocab=vocab, tokens=tokens, family="context_free")
    assert isinstance(res, Proof) and res.proven and res.exit_code == 0, str(res)
    assert res.cells and res.assumptions["vocab"] == vocab and res.assumptions["tokens"] == tokens


def _check_refutation(res, rule) -> None:
    """A refutation rests on the exact engine: its witness is re-audited here, and its pytest fails."""
    assert isinstance(res, Refutation) and not res.proven and res.exit_code == 1, str(res)
    assert res.cell and res.difference and res.difference != "0"
    inst = res.counterexample.instance
    rep = es.audit(rule=rule, **inst.audit_kwargs())
    assert rep.tv > 0 and rep.tv == res.report.tv == res.counterexample.tv
    for who, law in res.witness.items():
        assert all(type(x) is F for x in law) and sum(law) == 1 and min(law) >= 0, who
    src = res.counterexample.to_pytest()
    ns: dict = {}
    exec(compile(src, "<prove regression>", "exec"), ns)
    # the test function (a rule defined in this file is imported as the module ``test_prove``: skip it)
    test = next(v for k, v in ns.items() if k.startswith("test_") and callable(v) and not isinstance(v, type(pytest)))
    with pytest.raises(AssertionError):
        test()


REFUTED = [
    ("greedy_match_sampled", R.greedy_match_sampled, chain(1), 2, 1, "context_free"),
    ("greedy_match_sampled-V3", R.greedy_match_sampled, chain(2), 3, 2, "context_free"),
    ("resample_from_target", R.resample_from_target, chain(1), 2, 1, "context_free"),
    ("resample_from_target-V3", R.resample_from_target, chain(2), 3, 2, "context_free"),
    ("unverified_first_draft", R.unverified_first_draft, chain(1), 2, 1, "context_free"),
    ("unverified_first_draft-V3", R.unverified_first_draft, chain(2), 3, 2, "context_free"),
    ("ensemble(1/2)", R.ensemble(F(1, 2)), chain(1), 2, 1, "context_free"),
    ("ensemble(1/2)-V3", R.ensemble(F(1, 2)), chain(2), 3, 2, "context_free"),
    ("argmax drafts, soft claims", R.speculative_sampling, chain(1, sampling="argmax"), 2, 1, "context_free"),
    ("argmax drafts, soft claims-V3", R.speculative_sampling, chain(2, sampling="argmax"), 3, 2, "context_free"),
    ("stale_draft_probs per_position", R.stale_draft_probs, chain(2), 2, 2, "per_position"),
    ("tiny_clamp_residual", R.tiny_clamp_residual, chain(1), 2, 1, "context_free"),
    ("tiny_clamp_residual-V3", R.tiny_clamp_residual, chain(2), 3, 2, "context_free"),
    ("mss topk children, draft claims", R.mss, tree((2,), children="topk"), 3, 2, "context_free"),
]


@pytest.mark.parametrize("rule, proposer, vocab, tokens, family", [pytest.param(*c[1:], id=c[0]) for c in REFUTED])
def test_catalog_biased_rules_are_refuted_with_exact_witnesses(rule, proposer, vocab, tokens, family):
    res = es.prove(rule, proposer=proposer, vocab=vocab, tokens=tokens, family=family)
    _check_refutation(res, rule)


def test_tiny_clamp_witness_needs_the_constant():
    res = es.prove(R.tiny_clamp_residual, proposer=chain(1), vocab=2, tokens=1, family="context_free")
    _check_refutation(res, R.tiny_clamp_residual)
    assert res.report.tv <= R.TINY   # a bias of about 1e-38, found exactly
    assert "1/85070591730234615865843651857942052864" in " ".join(res.cell)   # 2**-126 appears in the cell


def test_stale_draft_probs_is_proven_context_free():
    """The off-by-one is invisible when every position has the same law, as the catalog says."""
    res = es.prove(R.stale_draft_probs, proposer=chain(2), vocab=2, tokens=2, family="context_free")
    assert res.proven, str(res)


@pytest.mark.slow
def test_stale_draft_probs_is_proven_context_free_vocab3():
    assert es.prove(R.stale_draft_probs, proposer=chain(2), vocab=3, tokens=2, family="context_free").proven


def test_order1_table_family():
    """Order-1 tables (prompt (0,)): lossless rules stay proven, the stale-draft off-by-one shows."""
    res = es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2, family="table")
    assert res.proven and res.assumptions["prompt"] == [0], str(res)
    ref = es.prove(R.stale_draft_probs, proposer=chain(2), vocab=2, tokens=2, family="table")
    _check_refutation(ref, R.stale_draft_probs)
    assert ref.counterexample.instance.family == "table" and ref.counterexample.instance.prompt == (0,)


def test_mss_iid_children_proven_vocab2():
    assert es.prove(R.mss, proposer=tree((2,)), vocab=2, tokens=2, family="context_free").proven


@pytest.mark.slow
def test_mss_iid_children_proven_one_level_width2_vocab3():
    res = es.prove(R.mss, proposer=tree((2,)), vocab=3, tokens=2, family="context_free")
    assert res.proven, str(res)


@pytest.mark.parametrize("vocab, gamma, tokens", [(2, 1, 1), (2, 2, 2), pytest.param(3, 2, 2, marks=pytest.mark.slow)])
def test_greedy_match_proven_against_the_greedy_sequence(vocab, gamma, tokens):
    res = es.prove(R.greedy_match, proposer=chain(gamma), vocab=vocab, tokens=tokens, family="context_free")
    assert res.proven and res.assumptions["expected"] == "greedy-sequence"
    assert "lowest token id" in res.assumptions["ties"]
    # ties are cells of their own: p_0 == p_1 appears in some cell
    assert any("== 0" in c for cell in res.cells for c in cell)


@es.rule(claim="lossless")
def my_rule(step, rng):
    """The README's rule, unchanged."""
    for j in range(step.gamma):
        x, p, q = step.draft(j), step.target(j), step.claimed(j)
        if rng.uniform() < p[x] / q[x]:
            yield x
        else:
            yield rng.categorical(es.laws.residual(p, q))
            return
    yield rng.categorical(step.target(step.gamma))


def test_readme_user_rule_is_provable_unchanged():
    assert es.prove(my_rule, proposer=chain(2), vocab=2, tokens=2).proven


@pytest.mark.slow
def test_readme_user_rule_is_provable_unchanged_vocab3():
    assert es.prove(my_rule, proposer=chain(2), vocab=3, tokens=2, family="context_free").proven


def test_rng_form_and_closed_form_agree():
    a = es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2, closed_form=False, family="context_free")
    b = es.prove(R.speculative_sampling, proposer=chain(2), vocab=2, tokens=2, family="context_free")
    assert a.proven and b.proven and a.paths > 0


def _random_law(rnd: random.Random, vocab: int) -> tuple:
    w = [rnd.choice([0, 1, 2, 3, 5, 8]) for _ in range(vocab)]
    if not sum(w):
        w[0] = 1
    return tuple(F(x, sum(w)) for x in w)


@pytest.mark.parametrize("rule, kw", [(r, kw) for _, r, kw in PROVEN_CHAIN])
def test_proofs_hold_on_random_rational_instances(rule, kw):
    """Sanity property: what es.prove proves, the exact engine confirms on random instances (zeros included)."""
    proposer = chain(2, **kw)
    assert es.prove(rule, proposer=proposer, vocab=2, tokens=2, family="context_free").proven
    rnd = random.Random(11)
    for _ in range(15):
        p, q = es.models.context_free(_random_law(rnd, 3)), es.models.context_free(_random_law(rnd, 3))
        assert es.audit(target=p, draft=q, rule=rule, proposer=proposer, tokens=2).tv == 0


def test_refutation_region_matches_exact_audits():
    """Inside the refuted cell the exact engine sees the symbolic difference at other rational points too."""
    res = es.prove(R.greedy_match_sampled, proposer=chain(1), vocab=2, tokens=1, family="context_free")
    assert res.difference == "p_0*q_0 - p_0"
    for p0, q0 in [(F(1, 3), F(1, 2)), (F(1, 5), F(2, 3)), (F(2, 5), F(9, 10))]:   # p_0 < 1/2, 0 < q_0 < 1
        rep = es.audit(target=es.models.context_free((p0, 1 - p0)), draft=es.models.context_free((q0, 1 - q0)),
                       rule=R.greedy_match_sampled, proposer=chain(1), tokens=1)
        assert rep.output[(0,)] - rep.expected[(0,)] == p0 * q0 - p0


def test_unsupported_operations_are_typed_errors_naming_the_line():
    def floaty(step, rng):
        x, p, q = step.draft(0), step.target(0), step.claimed(0)
        if rng.uniform() < float(p[x]) / float(q[x]):
            return [x]
        return [rng.categorical(es.laws.residual(p, q))]

    with pytest.raises(UnsupportedSymbolic, match=r"float\(\).*test_prove.py:\d+ in floaty") as info:
        es.prove(floaty, proposer=chain(1), vocab=2, tokens=1)
    assert info.value.exit_code == 2
    # typical acceptance compares with exp(-H(p)): transcendental (the threshold 1 is never met, so it is reached)
    with pytest.raises(UnsupportedSymbolic, match="mpmath number.*exceeds_typical_threshold"):
        es.prove(R.typical_acceptance(1, F(3, 10)), proposer=tree((1,)), vocab=2, tokens=1)


def test_unbounded_loop_is_a_budget_error_not_a_verdict():
    # Run in a child process: the watchdog stops the busy loop with an asynchronous exception, which may land
    # inside sympy and leave its internal state unusable for the rest of that process (the CLI exits right
    # after; a long-lived process should not reuse sympy after a timed-out proof). Here it would leak into
    # the other tests of this session.
    code = textwrap.dedent("""
        import exactspec as es
        from exactspec.drafts import chain

        def spin(step, rng):
            x, p, q = step.draft(0), step.target(0), step.claimed(0)
            while p[x] < 2:   # always true: never ends
                pass
            return [x]

        try:
            es.prove(spin, proposer=chain(1), vocab=2, tokens=1, timeout=1.0)
        except es.BudgetExceeded as exc:
            print("budget", exc.exit_code)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "budget 3", res.stderr


def test_bad_input():
    with pytest.raises(es.ExactSpecError, match="vocab"):
        es.prove(R.speculative_sampling, vocab=1, tokens=1)
    with pytest.raises(es.ExactSpecError, match="family"):
        es.prove(R.speculative_sampling, vocab=2, tokens=1, family="order2")
    with pytest.raises(es.ExactSpecError, match="prompt"):
        es.prove(R.speculative_sampling, vocab=2, tokens=1, prompt=(5,))


def test_proof_json_and_summary():
    import json
    res = es.prove(R.speculative_sampling, proposer=chain(1), vocab=2, tokens=1)
    d = json.loads(res.to_json())
    assert d["verdict"] == "proven" and d["n_cells"] == len(res.cells) and "PROVEN" in res.summary()
    ref = es.prove(R.greedy_match_sampled, proposer=chain(1), vocab=2, tokens=1)
    d = json.loads(ref.to_json())
    assert d["verdict"] == "refuted" and d["tv"] == str(ref.report.tv)


def test_cli_exit_codes(capsys):
    assert main(["prove", "--rule", "speculative_sampling", "--vocab", "2", "--tokens", "2", "--gamma", "2",
                 "--family", "per_position"]) == 0
    # without --family the default family is narrower than every law: proven, but not exit 0
    assert main(["prove", "--rule", "speculative_sampling", "--vocab", "2", "--tokens", "2", "--gamma", "2"]) == 3
    assert main(["prove", "--rule", "greedy_match_sampled", "--vocab", "2", "--tokens", "1", "--json"]) == 1
    assert main(["prove", "--rule", "mss", "--vocab", "2", "--tokens", "1", "--gamma", "2"]) == 2
    assert main(["prove", "--rule", "mss", "--vocab", "2", "--tokens", "1", "--expansion", "2",
                 "--children", "topk"]) == 1
    out = capsys.readouterr().out
    assert "PROVEN" in out and "def test_" in out


def test_cli_workers_give_the_same_json_as_one_process(capsys):
    import json
    args = ["prove", "--rule", "greedy_match_sampled", "--vocab", "2", "--tokens", "1", "--json"]
    assert main(args + ["--workers", "1"]) == 1
    one = json.loads(capsys.readouterr().out)
    assert main(args + ["--workers", "2"]) == 1
    two = json.loads(capsys.readouterr().out)
    for d in (one, two):
        d.pop("seconds", None)
    assert one == two and one["verdict"] == "refuted"
    assert main(args + ["--workers", "-1"]) == 2
    assert "--workers must be >= 0" in capsys.readouterr().err


# -- the default family and the proof's scope in its headline (issue 16, section 3) ---------------------------

@es.rule(claim="lossless")
def bonus_from_position_0(step, rng):
    """Speculative sampling whose bonus token is drawn from the target law at position 0, not at gamma."""
    for j in range(step.gamma):
        x, p, q = step.draft(j), step.target(j), step.claimed(j)
        if rng.uniform() < p[x] / q[x]:
            yield x
        else:
            yield rng.categorical(es.laws.residual(p, q))
            return
    yield rng.categorical(step.target(0))   # the bug: the wrong position's law


def test_default_family_is_the_most_general_feasible_one():
    from exactspec.prove import default_family
    assert [default_family(2, t) for t in (1, 2, 3, 5)] == ["table", "per_position", "table", "table"]
    assert [default_family(v, t) for v, t in ((3, 1), (3, 2), (4, 1), (5, 3))] == ["context_free"] * 4


def test_position_bug_is_proven_only_for_context_free_laws_and_the_headline_says_so():
    res = es.prove(bonus_from_position_0, proposer=chain(1), vocab=2, tokens=2, family="context_free")
    assert res.proven and res.family == res.assumptions["family"] == "context_free"
    assert res.assumptions["family_source"] == "given"
    assert "for every context-free target and draft" in res.summary()


def test_position_bug_is_refuted_by_default_with_an_exact_witness():
    """A rule biased only when the law changes with position: the default family sees it (it used to be PROVEN)."""
    res = es.prove(bonus_from_position_0, proposer=chain(1), vocab=2, tokens=2)
    _check_refutation(res, bonus_from_position_0)
    assert res.assumptions["family"] == "per_position" and res.assumptions["family_source"] == "default"
    assert res.family == "per_position" and "for some per-position target and draft" in res.summary()
    inst = res.counterexample.instance
    assert inst.family == "per_position" and inst.target[0] != inst.target[1]   # the laws differ by position
    # the witness, replayed by hand: output(x0, x1) - target(x0, x1) from the exact engine equals the cell's
    # difference evaluated at the witness
    p0, p1 = res.witness["p0"], res.witness["p1"]
    rep = es.audit(target=es.models.from_function(vocab=2, fn=lambda ctx: p0 if len(ctx) == 0 else p1),
                   draft=es.models.from_function(vocab=2, fn=lambda ctx: res.witness["q0"] if len(ctx) == 0
                                                 else res.witness["q1"]),
                   rule=bonus_from_position_0, proposer=chain(1), tokens=2)
    assert rep.tv == res.report.tv > 0


def test_stale_draft_probs_at_gamma2_is_refuted_by_default():
    res = es.prove(R.stale_draft_probs, proposer=chain(2), vocab=2, tokens=2)
    _check_refutation(res, R.stale_draft_probs)
    assert res.assumptions["family"] == "per_position"


def test_readme_size_defaults_to_context_free_and_says_so():
    """From vocab 3 the default is context-free (per-position laws run past a minute there): the headline says it."""
    res = es.prove(R.speculative_sampling, proposer=chain(1), vocab=3, tokens=1)
    assert res.proven and res.assumptions["family"] == "context_free"
    text = res.summary()
    assert "for every context-free target and draft" in text and "Family: the default at this size" in text


def test_proof_and_refutation_json_carry_the_family():
    import json
    d = json.loads(es.prove(R.speculative_sampling, proposer=chain(1), vocab=2, tokens=1).to_json())
    assert d["family"] == "table" == d["assumptions"]["family"] and d["assumptions"]["family_source"] == "default"
    assert "for every order-1 table target and draft" in d["summary"]
    ref = es.prove(R.greedy_match_sampled, proposer=chain(1), vocab=2, tokens=1, family="context_free")
    d = json.loads(ref.to_json())
    assert d["family"] == "context_free" and d["verdict"] == "refuted"


def test_cli_default_family_refutes_a_position_bug(capsys):
    """`exactspec prove` on stale_draft_probs at gamma 2: exit 1 by default (it printed PROVEN, exit 0)."""
    assert main(["prove", "--rule", "stale_draft_probs", "--vocab", "2", "--gamma", "2", "--tokens", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUTED") and "per-position target and draft" in out and "def test_" in out
    assert main(["prove", "--rule", "stale_draft_probs", "--vocab", "2", "--gamma", "2", "--tokens", "2",
                 "--json"]) == 1
    import json
    d = json.loads(capsys.readouterr().out)
    assert d["family"] == "per_position" and d["verdict"] == "refuted"
    assert main(["prove", "--rule", "stale_draft_probs", "--vocab", "2", "--gamma", "2", "--tokens", "2",
                 "--family", "context_free"]) == 0
    out = capsys.readouterr().out
    assert "PROVEN" in out and "for every context-free target and draft" in out
