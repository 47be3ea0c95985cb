"""CLI options given as lists (a tree's expansion, sweep's grids, rule names): an empty value is bad input.

Found: ``exactspec audit --rule mss --expansion ''`` audited the default tree ``(2, 1)`` and exited 0,
``prove --expansion ''`` proved the default ``(2,)``, and ``audit-sampler --instance --expansion ''``
audited the default tree: an empty string was taken for "not given". Every list option is now
parsed in one place (``cli._ints`` / ``cli._names``), which refuses an empty list with a one-line
error naming the flag, exit 2. ``--prompt ''`` stays the empty prompt (a real value, the API's default).
"""

from __future__ import annotations

import pytest

from exactspec import cli

EMPTY = ["", " ", ",", " , "]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CASES = [
    (["audit", "--rule", "mss", "--expansion", "{}"], "--expansion must be ints like '2 1'"),
    (["prove", "--rule", "mss", "--vocab", "2", "--tokens", "1", "--expansion", "{}"],
     "--expansion must be children per depth like '2' or '2 1'"),
    (["audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--adapter", "numpy-tree", "--instance",
      "--expansion", "{}"], "--expansion must be ints like '2 1'"),
    (["audit-sampler", "exactspec.bugzoo.numpy_samplers:correct", "--adapter", "numpy-tree", "--expansion", "{}"],
     "--expansion must be ints like '2 1'"),
    (["sweep", "--rules", "{}", "--vocabs", "2", "--gammas", "1"],
     "--rules must be catalog names like 'speculative_sampling,mss'"),
    (["sweep", "--proposers", "{}", "--vocabs", "2", "--gammas", "1"],
     "--proposers must be proposers like 'sample/draft argmax/point_mass'"),
    (["sweep", "--vocabs", "{}", "--gammas", "1"], "--vocabs must be ints like '2 3'"),
    (["sweep", "--vocabs", "2", "--gammas", "{}"], "--gammas must be ints like '1 2 4'"),
    (["sweep", "--vocabs", "2", "--gammas", "1", "--tokens", "{}"], "--tokens must be ints like '3 6'"),
]


@pytest.mark.parametrize("empty", EMPTY)
@pytest.mark.parametrize("argv, message", CASES, ids=[f"{a[0]} {a[a.index('{}') - 1]}" for a, _ in CASES])
def test_an_empty_list_option_is_a_one_line_error(capsys, argv, message, empty):
    code, out, err = run(capsys, *[empty if a == "{}" else a for a in argv])
    assert code == 2 and out == ""
    assert err == f"exactspec: error: {message}, got {empty!r} (empty)\n"


@pytest.mark.parametrize("flag", ["--gamma", "--vocab", "--tokens", "--order", "--seed"])
def test_an_empty_int_option_is_a_one_line_error(capsys, flag):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", flag, "")
    assert code == 2 and out == ""
    assert err == f"exactspec: error: argument {flag}: invalid int value: '' (see `exactspec audit --help`)\n"


def test_the_empty_prompt_is_a_prompt(capsys):
    code, out, err = run(capsys, "audit", "--rule", "speculative_sampling", "--vocab", "2", "--gamma", "1",
                         "--prompt", "")
    assert code == 0, err
    assert "prompt=[]," in out
