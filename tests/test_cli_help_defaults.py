"""Every ``--help`` states the default the command really uses (issue 36).

``exactspec audit-sampler --help`` said ``--gamma`` defaults to 4 while the default search covers gamma 1..3 (4 is
the ``--instance`` audit's). Here each "(default X)" of every sub-command is parsed and compared with the value the
command uses: the argparse default where it is stored, else the value the command computes when the option is
left out.
"""

from __future__ import annotations

import argparse
import json
import re
from fractions import Fraction

import pytest

import exactspec as es
from exactspec import cli
from exactspec.cli.common import _instance

COMMANDS = ["check", "audit", "search", "audit-sampler", "audit-loop", "rules", "prove", "sweep", "findings",
            "fetch-vllm"]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def helps(name: str) -> dict[str, str]:
    return {a.option_strings[0]: " ".join(a.help.split()) for a in subparsers()[name]._actions
            if a.option_strings and a.help}


def stated(help_text: str) -> str:
    """The first word of the help's "(default X" (the value, without what follows it)."""
    m = re.search(r"\(default:? ([^;,:) ]+)", help_text)
    assert m, help_text
    return m.group(1).strip("'")


@pytest.mark.parametrize("name", COMMANDS)
def test_a_stored_default_is_the_one_the_help_states(name):
    checked = 0
    for action in subparsers()[name]._actions:
        if not action.option_strings or action.help is None or action.default in (None, False, argparse.SUPPRESS):
            continue
        said = stated(" ".join(action.help.split()))
        real = action.default
        if isinstance(real, (int, float)) and not isinstance(real, bool):
            assert Fraction(said) == Fraction(real), (name, action.option_strings[0], said, real)
        else:
            assert said == str(real), (name, action.option_strings[0], said, real)
        checked += 1
    assert checked or name in ("rules", "findings")


def _parse(*argv: str) -> argparse.Namespace:
    return cli._parser().parse_args(list(argv))


def test_the_instance_defaults_are_the_ones_audit_and_audit_sampler_use():
    for name, target in (("audit", "--rule=speculative_sampling"), ("audit-sampler", "m:f")):
        h = helps(name)
        args = _parse(name, target)
        said_gamma = re.search(r"(?:--instance |\(default )(\d+)\)", h["--gamma"]).group(1)
        assert _instance(args, "chain", None)[1].gamma == int(said_gamma)
        said_expansion = re.search(r"(?:--instance |\(default )'([\d ]+)'\)", h["--expansion"]).group(1)
        assert _instance(args, "tree", None)[1].expansion == tuple(int(k) for k in said_expansion.split())


def test_audit_sampler_help_states_what_the_default_search_covers():
    from exactspec.cli.audit_sampler import _sampler_search_space
    h = helps("audit-sampler")
    args = _parse("audit-sampler", "m:f")
    chain = _sampler_search_space(args, "chain")
    tree = _sampler_search_space(args, "tree")
    # --gamma: the search covers gamma 1..3 by default (the help said "default 4", the --instance audit's)
    lo, hi = map(int, re.search(r"the search covers gamma (\d+)\.\.(\d+)", h["--gamma"]).groups())
    assert chain.shapes == tuple((g,) for g in range(lo, hi + 1))
    assert "--instance 4" in h["--gamma"] and not h["--gamma"].startswith("chain adapters: drafted tokens per step "
                                                                          "(default 4)")
    # --vocab: the search's largest vocabulary, chains and trees alike
    assert chain.vocabs == tree.vocabs == tuple(range(2, int(stated(h["--vocab"])) + 1))
    # --tokens: each instance at depth + 1, the shorter horizons its marginals
    extra = int(re.search(r"the search audits each instance at gamma \+ (\d+)", h["--tokens"]).group(1))
    assert chain.extra_tokens == tree.extra_tokens == extra and chain.only_longest and tree.only_longest
    # --expansion: the trees the search covers
    shapes = re.search(r"the search covers ((?:'[\d ]+'(?:, )?)+)", h["--expansion"]).group(1)
    assert tree.shapes == tuple(tuple(int(k) for k in s.split()) for s in re.findall(r"'([\d ]+)'", shapes))
    # --order: the search covers these model families
    models = re.search(r"the search covers ([\w\-, ]+) models", h["--order"]).group(1)
    assert [m.replace("-", "_").replace("order_1", "table") for m in models.split(", ")] == list(chain.families)


def test_audit_loop_and_tolerance_defaults():
    from exactspec.samplers.rounding import F64_ALLOWANCE
    from exactspec.samplers.loops.loop_search import loop_space as _loop_space
    from exactspec.samplers.audit import ROUNDING_TOLERANCE
    h = helps("audit-loop")
    lo, hi = map(int, re.search(r"default: (\d+)\.\.(\d+) in the search", h["--tokens"]).groups())
    assert _loop_space(None, None).tokens == tuple(range(lo, hi + 1))
    assert stated(h["--precision"]) == "float64"
    for name in ("audit-loop", "audit-sampler"):
        assert stated(helps(name)["--tolerance"]) == "2**-40" == "2**-%d" % (F64_ALLOWANCE.denominator.bit_length() - 1)
    assert ROUNDING_TOLERANCE == F64_ALLOWANCE
    # --precision of the mpmath field (check, audit)
    for name in ("check", "audit"):
        assert int(stated(helps(name)["--precision"])) == es.fields.get_field("mpmath").precision


def test_prove_defaults_are_the_proposers_it_builds(capsys):
    h = helps("prove")
    assert cli.main(["prove", "--rule", "speculative_sampling", "--vocab", "2", "--tokens", "1", "--family",
                     "context_free", "--json", "-q"]) == 0
    proposer = json.loads(capsys.readouterr().out)["assumptions"]["proposer"]
    assert proposer == f"chain(gamma={stated(h['--gamma'])}, sampling='{stated(h['--sampling'])}', " \
                       f"claim='{stated(h['--claim'])}')"
    assert cli.main(["prove", "--rule", "mss", "--vocab", "2", "--tokens", "1", "--family", "context_free",
                     "--json", "-q"]) in (0, 1)
    proposer = json.loads(capsys.readouterr().out)["assumptions"]["proposer"]
    assert proposer.startswith(f"tree(expansion=({stated(h['--expansion'])},), children='{stated(h['--children'])}'")
