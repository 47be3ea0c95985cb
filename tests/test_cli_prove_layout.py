"""``exactspec prove``'s text fits a terminal: a ``--vocab all`` refutation once printed one line of thousands of characters.

Issue 36: the refutation's polynomial (and its cell) made the verdict one line of 1,000 to 7,000 characters. The text
now puts the witness on its own lines and elides a value too long to read, pointing at ``--json`` (which keeps every
value whole). The verdict, witness, TV and exit code are the result's own, unchanged.
"""

from __future__ import annotations

import json

import pytest

import exactspec as es
from exactspec.cli import main

pytest.importorskip("sympy")

ENSEMBLE = ["prove", "--rule", "ensemble(1/2)", "--vocab", "all", "--tokens", "2", "--gamma", "2",
            "--family", "context_free", "-q"]


def test_a_vocab_all_refutation_is_folded_with_the_witness_on_its_own_lines(capsys):
    assert main(ENSEMBLE) == 1
    out = capsys.readouterr().out
    res = es.prove(es.rules.as_rule("ensemble(1/2)"), proposer=es.drafts.chain(2), vocab="all", tokens=2,
                   family="context_free")
    assert not res.proven and len(res.summary()) > 1000          # the one line it used to print
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 200, max(lines, key=len)
    assert out.startswith("REFUTED: ensemble(1/2) does not emit the target law for some context-free target and draft")
    assert "every vocabulary size >= 2 searched" in out
    assert f"witness (the exact engine gives TV = {res.report.tv} there):" in lines
    for k, v in res.witness.items():                                # each law of the witness on a line of its own
        assert f"  {k} = ({', '.join(str(x) for x in v)})" in lines
    assert len(res.difference) > 500
    assert f"[the difference: {len(res.difference):,} characters; --json has it whole]" in out
    assert res.difference not in out
    for constraint in res.cell:                                     # the cell whole, no constraint cut in two
        assert any(constraint in line for line in lines)
    assert "regression test (fails while the bias exists):" in out and res.counterexample.to_pytest() in out
    # --json keeps every value whole
    assert main([*ENSEMBLE, "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["difference"] == res.difference and d["verdict"] == "refuted" and d["tv"] == str(res.report.tv)


def test_a_proof_and_a_short_refutation_keep_their_words(capsys):
    assert main(["prove", "--rule", "speculative_sampling", "--vocab", "all", "--tokens", "1", "--family",
                 "context_free", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PROVEN: speculative_sampling emits exactly the target law") and "Theorem: " in out
    assert "every vocabulary size >= 2" in out and max(len(line) for line in out.splitlines()) <= 200
    assert main(["prove", "--rule", "stale_draft_probs", "--vocab", "2", "--gamma", "2", "--tokens", "2", "-q"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUTED") and "per-position target and draft" in out
    assert "  p0 = (1/4, 3/4)" in out.splitlines() and "(-p0_0*p1_0*q0_0 + p0_0*p1_0*q1_0)/q0_0" in out
    assert max(len(line) for line in out.splitlines()) <= 200
