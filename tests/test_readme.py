"""The README's Python examples run as written and say what the README says they say."""

import pathlib
import re

import exactspec as es

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 2
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    printed = capsys.readouterr().out
    assert "rule stale_draft_probs (claim: biased) — BIASED" in printed
    assert "TV(output, expected) = ~0.21035" in printed
    assert "verdict: biased on this instance over the first 6 tokens" in printed
    # the user rule of "Writing your own rule" is lossless on the README's instance, by enumeration
    rep = es.audit(target=ns["target"], draft=ns["draft"], rule=ns["my_rule"], prompt=(0, 1))
    assert rep.tv == 0 and rep.paths > 0 and rep.claim == "lossless" and rep.scope["complete"]
    # the verdicts the "Token trees" section shows in comments
    kw = dict(target=ns["target"], rule=es.rules.mss, prompt=(0, 1))
    assert es.audit(draft=ns["draft"], proposer=ns["tree"], **kw).lossless
    assert es.audit(draft=ns["draft"], proposer=ns["topk_soft"], **kw).verdict == "biased"
    assert es.audit(proposer=ns["merged"], **kw).lossless
    assert ns["report"].ok
    # the counterexample section: what it prints, and its property test and fixture example run
    assert "the sequence (0, 0) is emitted with probability 1/4 but the target gives 1/2 (exact TV 1/4)" in printed
    assert "no counterexample for speculative_sampling: 21537 instances audited exactly" in printed
    from hypothesis import find
    inst = find(es.strategies.instances(), lambda i: i["tokens"] == 2 and len(i["prompt"]) == 1)
    ns["test_my_rule_is_lossless"].hypothesis.inner_test(inst)
    ns["test_my_rule"](es.assert_lossless)
    # the third-party section: transformers' sampler on the README's instance
    assert ns["r"].verdict == "lossless" and ns["r"].extra["algorithmic_tv"] == "0"


def test_readme_carries_the_two_setup_commands():
    text = README.read_text()
    assert "python -m pip install '.[fast]' && exactspec check" in text
    assert "python -m pip install -e '.[test,fast,audit]' && python -m pytest" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pip install -q -e '.[test,fast,audit]'" in ci and "python -m pytest" in ci
