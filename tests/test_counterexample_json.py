"""Counterexample JSON is untrusted input: every field is validated, and to_pytest renders only validated values."""

import ast
import copy
import json
import time
from fractions import Fraction as F

import pytest

import exactspec as es
from exactspec.counterexamples import Counterexample, SearchInstance

#: what ``search(es.rules.greedy_match_sampled).to_json()`` writes (fixed here: the tests do not depend on search)
VALID = {
    "rule": "greedy_match_sampled", "claim": "biased",
    "instance": {"vocab": 2, "family": "context_free", "target": [["1/2", "1/2"]], "draft": [["1/2", "1/2"]],
                 "shape": [1], "tokens": 1, "prompt": [], "decoding": "sample", "proposer_kind": "chain",
                 "sampling": "sample", "claim": "draft"},
    "output": [[[0], "3/4"], [[1], "1/4"]], "expected": [[[0], "1/2"], [[1], "1/2"]], "tv": "1/4",
    "space": "vocab 2..4", "audited": 7, "seconds": 0.0033, "shrink_steps": 0, "rule_ref": "",
    "explanation": "token 0 is emitted with probability 3/4 but the target gives 1/2 (exact TV 1/4)",
}


def changed(path: str, value):
    """VALID with the field at ``path`` (dotted; ``instance.tokens``) set to ``value``, as JSON text."""
    d = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = d
    for p in parents:
        node = node[p]
    node[last] = value
    return json.dumps(d)


def without(path: str):
    d = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = d
    for p in parents:
        node = node[p]
    del node[last]
    return json.dumps(d)


def constants(source: str) -> list:
    return [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)]


def imports(source: str) -> list[str]:
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            out += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            out.append(n.module)
    return out


NOT_DOCUMENTS = [
    (None, "expected a JSON string"),
    (5, "expected a JSON string"),
    (b"{}", "expected a JSON string"),
    ({"rule": "x"}, "expected a JSON string"),
    ("not json", "not valid JSON"),
    ("", "not valid JSON"),
    ('{"rule": NaN}', "not valid JSON"),
    ("[]", "expected an object, got a list"),
    ('"a string"', "expected an object, got a string"),
    ("{}", "missing field(s) rule, claim, instance, output, expected, tv"),
    ("[" * 100_000, "nested deeper than"),
    ('{"a": ' * 100_000, "nested deeper than"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
]


@pytest.mark.parametrize("text, message", NOT_DOCUMENTS, ids=range(len(NOT_DOCUMENTS)))
def test_what_is_not_a_counterexample_document_is_a_typed_error(text, message):
    with pytest.raises(es.ExactSpecError) as info:
        Counterexample.from_json(text)
    assert str(info.value).startswith("not a counterexample JSON: ") and message in str(info.value)


BAD_FIELDS = [
    # rule, claim, rule_ref: rendered into the regression test
    ("rule", 1, "rule: expected a rule name"),
    ("rule", "x')\nimport os\nos.system('echo pwned') #", "rule: "),
    ("rule", 'say "hi"', "rule: "),
    ("rule", "", "rule: "),
    ("rule", "ensemble(1e-999999999)", "rule argument: '1e-999999999' has an exponent"),
    ("claim", "trust me", "claim: must be one of lossless"),
    ("rule_ref", "os; os.system('echo pwned')", "rule_ref: "),
    ("rule_ref", "os\nimport sys", "rule_ref: "),
    ("rule_ref", "pkg.class.fn", "rule_ref: "),
    ("rule_ref", 3, "rule_ref: expected a dotted Python path"),
    # the instance: every field typed and in range
    ("instance", [], "instance: expected an object, got a list"),
    ("instance.tokens", "1); import os; os.system('echo pwned'); (", "instance.tokens: expected an int, got a string"),
    ("instance.tokens", True, "instance.tokens: expected an int, got a bool"),
    ("instance.tokens", 0, "instance.tokens: must be >= 1"),
    ("instance.tokens", 1.0, "instance.tokens: expected an int, got a float"),
    ("instance.prompt", ["0); import os; ("], "instance.prompt[0]: expected an int, got a string"),
    ("instance.prompt", "0); import os; (", "instance.prompt: expected a list of ints, got a string"),
    ("instance.prompt", [2], "instance.prompt[0]: must be <= 1"),
    ("instance.prompt", [-1], "instance.prompt[0]: must be >= 0"),
    ("instance.shape", "1); import os; (", "instance.shape: expected a list of ints, got a string"),
    ("instance.shape", [True], "instance.shape[0]: expected an int, got a bool"),
    ("instance.shape", [1.5], "instance.shape[0]: expected an int, got a float"),
    ("instance.shape", [], "instance.shape: expected a non-empty tuple"),
    ("instance.shape", [1, 1], "instance.shape: a chain's shape is (gamma,)"),
    ("instance.vocab", 1, "instance.vocab: must be >= 2"),
    ("instance.vocab", "2", "instance.vocab: expected an int, got a string"),
    ("instance.vocab", True, "instance.vocab: expected an int, got a bool"),
    ("instance.vocab", 3, "instance.target[0]: has 2 entries, expected vocab = 3"),
    ("instance.family", "markov", "instance.family: must be one of context_free"),
    ("instance.family", "table", "instance.target: table models need exactly vocab = 2 law(s), got 1"),
    ("instance.decoding", "beam", "instance.decoding: must be one of sample, greedy"),
    ("instance.proposer_kind", "dag", "instance.proposer_kind: must be one of chain, tree"),
    ("instance.sampling", "sample', claim='x'); import os; ('", "instance.sampling: must be one of sample, argmax"),
    ("instance.sampling", "iid", "instance.sampling: must be one of sample, argmax"),
    ("instance.claim", ["draft"], "instance.claim: expected one of draft, point_mass, got a list"),
    ("instance.evil", "import os", "instance: unknown field 'evil'"),
    ("instance.target", "x", "instance.target: expected a list of laws, got a string"),
    ("instance.target", [], "instance.target: context_free models need exactly 1 law(s), got 0"),
    ("instance.target", [["1/2", "1/2"], ["1/2", "1/2"]], "instance.target: context_free models need exactly 1"),
    ("instance.target", [[0.5, 0.5]], "instance.target[0][0]: the float 0.5 is not exact"),
    ("instance.target", [["-1/2", "3/2"]], "instance.target[0][0]: negative probability -1/2"),
    ("instance.target", [["1/3", "1/3"]], "instance.target[0]: sums to 2/3, not exactly 1"),
    ("instance.target", [["1/2", "1/4", "1/4"]], "instance.target[0]: has 3 entries, expected vocab = 2"),
    ("instance.target", [["1e-999999999", "1"]], "instance.target[0][0]: '1e-999999999' has an exponent"),
    ("instance.draft", [["1/2", None]], "instance.draft[0][1]: expected a rational"),
    ("instance.draft", [[True, "0"]], "instance.draft[0][0]: True is a bool"),
    # the laws and the TV
    ("output", "x", "output: expected a non-empty list"),
    ("output", [[[0], "3/4"], [["1"], "1/4"]], "output[1][0][0]: expected an int, got a string"),
    ("output", [[[0], "3/4"], [[7], "1/4"]], "output[1][0][0]: must be <= 1"),
    ("output", [[[0], "3/4"], [[1, 0], "1/4"]], "output[1][0]: has 2 tokens, expected instance.tokens = 1"),
    ("output", [[[0], "3/4"], [[0], "1/4"]], "output[1][0]: the sequence (0,) appears twice"),
    ("output", [[[0], "3/4"], [[1], "1/2"]], "output: sums to 5/4, not exactly 1"),
    ("output", [[[0], "3/4"], [[1], 0.25]], "output[1][1]: the float 0.25 is not exact"),
    ("expected", [[[0], "1/2"], [[1], "1e-999999999"]], "expected[1][1]: '1e-999999999' has an exponent"),
    ("tv", "1/5", "tv: 1/5 is not the (positive) exact TV"),
    ("tv", 0.25, "tv: expected a rational"),
    ("tv", "1e-999999999", "tv: '1e-999999999' has an exponent"),
    # bookkeeping fields
    ("audited", -1, "audited: must be >= 0"),
    ("audited", "7", "audited: expected an int, got a string"),
    ("shrink_steps", [0], "shrink_steps: expected an int, got a list"),
    ("seconds", "1", "seconds: expected a finite number >= 0, got a string"),
    ("space", 3, "space: expected a string, got an int"),
    ("explanation", {"x": 1}, "explanation: expected a string, got an object"),
    ("complete", "yes", "complete: expected a bool, got a string"),
    ("found", False, "found: a counterexample JSON has found = true"),
]


@pytest.mark.parametrize("path, value, message", BAD_FIELDS, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(BAD_FIELDS)])
def test_a_bad_field_is_a_typed_error_naming_it(path, value, message):
    t0 = time.perf_counter()
    with pytest.raises(es.ExactSpecError) as info:
        Counterexample.from_json(changed(path, value))
    assert time.perf_counter() - t0 < 1.0  # "1e-999999999" is refused, not expanded
    assert str(info.value).startswith("not a counterexample JSON: ") and message in str(info.value), str(info.value)


@pytest.mark.parametrize("path", ["rule", "claim", "instance", "output", "expected", "tv", "instance.vocab",
                                  "instance.family", "instance.target", "instance.draft", "instance.shape",
                                  "instance.tokens"])
def test_a_missing_required_field_is_named(path):
    with pytest.raises(es.ExactSpecError, match=r"missing field\(s\) " + path.rsplit(".", 1)[-1]):
        Counterexample.from_json(without(path))


def test_a_malicious_document_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    attacks = [
        changed("instance.tokens", f"1); {code}; ("),
        changed("instance.prompt", [f"0); {code}; ("]),
        changed("rule_ref", f"os; {code}"),
        changed("rule", f"x'); {code}; ('"),
        changed("rule", "x\n" + code),
        changed("instance.decoding", f"sample'); {code}; ('"),
        changed("instance.shape", f"1); {code}; ("),
    ]
    for text in attacks:
        with pytest.raises(es.ExactSpecError, match="not a counterexample JSON"):
            ce = Counterexample.from_json(text)
            exec(compile(ce.to_pytest(), "<regression>", "exec"), {})  # what a user of the old code would do
    assert not marker.exists()


def test_to_pytest_validates_fields_set_by_hand():
    ce = Counterexample.from_json(json.dumps(VALID))
    ce.rule_ref = "os; import sys"
    with pytest.raises(es.ExactSpecError, match="rule_ref"):
        ce.to_pytest()
    ce = Counterexample.from_json(json.dumps(VALID))
    ce.rule = "x')\nimport os\n#"  # an in-process name is only ever rendered through repr(): it stays a string
    source = ce.to_pytest()
    assert ce.rule in constants(source) and imports(source) == ["fractions", "exactspec"]
    ce.rule = 3
    with pytest.raises(es.ExactSpecError, match="rule: expected a rule name"):
        ce.to_pytest()
    ce = Counterexample.from_json(json.dumps(VALID))
    ce.instance = SearchInstance(vocab=2, family="context_free", target=((F(1, 2), F(1, 2)),),
                                 draft=((F(1, 2), F(1, 2)),), shape=(1,), tokens="1); import os; (")
    with pytest.raises(es.ExactSpecError, match="instance.tokens: expected an int, got a string"):
        ce.to_pytest()


def test_a_valid_round_trip_renders_a_regression_test_that_runs():
    ce = Counterexample.from_json(json.dumps(VALID))
    assert ce.tv == F(1, 4) and ce.output == {(0,): F(3, 4), (1,): F(1, 4)} and ce.complete and ce.found
    assert Counterexample.from_json(ce.to_json()) == ce
    source = ce.to_pytest()
    assert imports(source) == ["fractions", "exactspec"]
    ns: dict = {}
    exec(compile(source, "<regression>", "exec"), ns)
    with pytest.raises(AssertionError, match="BIASED"):
        next(v for k, v in ns.items() if k.startswith("test_"))()
    # any rule name built in-process renders through repr() only; a non-ASCII name also round-trips
    for name in ("règle_à_trous", "it's \"odd\"\n"):
        ce.rule = name
        assert name in constants(ce.to_pytest())
    ce.rule = "règle_à_trous"
    assert Counterexample.from_json(ce.to_json()).rule == "règle_à_trous"
    # a rule referred to by a dotted path is imported, and the test still runs
    d = copy.deepcopy(VALID)
    d["rule_ref"] = "exactspec.rules.greedy_match_sampled"
    source = Counterexample.from_json(json.dumps(d)).to_pytest()
    assert "import exactspec.rules\n" in source and "rule=exactspec.rules.greedy_match_sampled," in source
    ns = {}
    exec(compile(source, "<regression>", "exec"), ns)
    with pytest.raises(AssertionError, match="BIASED"):
        next(v for k, v in ns.items() if k.startswith("test_"))()


def test_search_instance_from_dict_names_the_field():
    good = VALID["instance"]
    assert SearchInstance.from_dict(good).to_dict() == good
    for bad, message in [([], "instance: expected an object, got a list"),
                         ({**good, "tokens": "2"}, "instance.tokens: expected an int, got a string"),
                         ({**good, "family": None}, "instance.family: expected one of context_free"),
                         ({k: v for k, v in good.items() if k != "draft"}, r"instance: missing field\(s\) draft")]:
        with pytest.raises(es.ExactSpecError, match=message):
            SearchInstance.from_dict(bad)
