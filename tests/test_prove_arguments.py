"""es.prove's argument errors are typed: InvalidType (a TypeError) or InvalidValue (a ValueError), exit 2."""

from __future__ import annotations

import pytest

import exactspec as es
from exactspec.errors import InvalidType, InvalidValue

pytest.importorskip("z3")

SS = es.rules.speculative_sampling


@pytest.mark.parametrize("kw, kind, words", [
    (dict(vocab=1, tokens=1), InvalidValue, "vocab must be an int >= 2, got 1"),
    (dict(vocab=2.0, tokens=1), InvalidType, "vocab must be an int >= 2, got 2.0"),
    (dict(vocab=2, tokens=0), InvalidValue, "tokens must be an int >= 1, got 0"),
    (dict(vocab=2, tokens=1, family="trees"), InvalidValue, "family must be one of"),
    (dict(vocab=2, tokens=1, timeout="soon"), InvalidType, "timeout must be a positive number"),
    (dict(vocab=2, tokens=1, timeout=0), InvalidValue, "timeout must be a positive number"),
    (dict(vocab=2, tokens=1, prompt=(5,)), InvalidValue, "prompt must be token ids in 0..1"),
    (dict(vocab=2, tokens=1, prompt=("a",)), InvalidType, "prompt must be token ids in 0..1"),
    (dict(vocab=2, tokens=1, proposer=es.drafts.tree((2,))), InvalidValue, "is a chain rule but the proposer"),
    (dict(vocab="all", tokens=True), InvalidType, "tokens must be an int >= 1"),
    (dict(vocab="all", tokens=1, family="table"), InvalidValue, "context_free family only"),
    (dict(vocab="all", tokens=1, workers=2), InvalidValue, "runs in this process"),
])
def test_argument_errors_are_typed_and_name_the_argument(kw, kind, words):
    with pytest.raises(kind, match=words) as info:
        es.prove(SS, **kw)
    assert info.value.exit_code == 2 and isinstance(info.value, es.ExactSpecError)
