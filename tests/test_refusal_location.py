"""A refusal names the user's file and line, also when the rule ran in a worker process.

Issue 36: a rule sent to a worker by value (a closure, a lambda, a ``__main__`` function: cloudpickle) ran there
with its code named ``<dynamic-code>``, so a refusal pointed to ``<dynamic-code>:51``. The code now keeps its file.
"""

from __future__ import annotations

import inspect
import pickle

import pytest

import exactspec as es
from exactspec.errors import AbstractionRefused
from exactspec.parallel import load_portable, portable

pytest.importorskip("sympy")
cloudpickle = pytest.importorskip("cloudpickle")


def _closure_rule():
    scale = 1     # a closure: pickle cannot send it by name, so it goes to workers by value

    def measures_the_vocabulary(step, rng):
        p = step.target(0)
        n = len(p) * scale          # refused under vocab="all": the vocabulary size is symbolic
        yield rng.categorical(p)
    line = inspect.getsourcelines(measures_the_vocabulary)[1] + 2
    return es.rules.rule(claim="lossless")(measures_the_vocabulary), line


def test_a_refusal_in_a_worker_points_at_the_users_file_and_line():
    rule, line = _closure_rule()
    assert isinstance(portable(rule), type(portable(lambda: 0)))      # sent by value, not by name
    with pytest.raises(AbstractionRefused) as info:     # timeout=: the proof runs in one worker process
        es.prove(rule, proposer=es.drafts.chain(1), vocab="all", tokens=1, family="context_free", timeout=120)
    text = str(info.value)
    assert "<dynamic-code>" not in text
    assert f"(at {__file__}:{line} in measures_the_vocabulary)" in text
    # the same words as the refusal in this process
    with pytest.raises(AbstractionRefused) as here:
        es.prove(rule, proposer=es.drafts.chain(1), vocab="all", tokens=1, family="context_free")
    assert str(here.value) == text


def test_code_sent_by_value_keeps_its_file_and_lines():
    rule, line = _closure_rule()
    sent = load_portable(pickle.loads(pickle.dumps(portable(rule))))
    code, mine = sent.fn.__code__, rule.fn.__code__
    assert (code.co_filename, code.co_firstlineno, list(code.co_lines())) == (
        mine.co_filename, mine.co_firstlineno, list(mine.co_lines()))
    assert pickle.loads(cloudpickle.dumps(rule.fn)).__code__.co_filename == "<dynamic-code>"   # what it replaces
