"""`exactspec check` imports only what it runs: no numpy, samplers, counterexamples or statistical module.

The public names of those modules stay where the docs put them (``es.audit_sampler``, ``es.Counterexample``,
...), imported on first use.
"""

import json
import subprocess
import sys

import exactspec as es

HEAVY = ("numpy", "mpmath", "exactspec.samplers", "exactspec.counterexamples", "exactspec.statistical",
         "exactspec.trees")


def _loaded_after(code: str) -> dict:
    probe = f"import sys, json\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {list(HEAVY)!r}}}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_exactspec_and_the_check_parser_import_no_heavy_module():
    code = ("import exactspec\nfrom exactspec import cli\n"
            "args = cli._parser('check').parse_args(['check', '--json', '--no-timings'])\nassert args.cmd == 'check'")
    assert _loaded_after(code) == {m: False for m in HEAVY}


def test_the_full_parser_and_the_lazy_names_still_load_them():
    loaded = _loaded_after("import exactspec as es\nfrom exactspec import cli\ncli._parser()\n"
                           "es.audit_statistically, es.trees")
    assert all(loaded.values()), loaded


def test_every_public_name_is_reachable_and_listed():
    assert set(es.__all__) <= set(dir(es))
    for name in es.__all__:
        assert getattr(es, name) is not None
    assert es.audit_sampler is es.samplers.audit_sampler and es.Counterexample is es.counterexamples.Counterexample
    assert callable(es.prove) and es.audit_statistically is es.statistical.audit_statistically


def test_a_command_named_first_parses_as_with_every_command_registered():
    from exactspec import cli
    for argv in (["check", "--workers", "1", "--json", "--no-timings"], ["rules", "--names"],
                 ["search", "--rule", "mss", "--max-vocab", "3"], ["audit-sampler", "m:f", "--adapter", "numpy"]):
        assert vars(cli._parser(argv[0]).parse_args(argv)) == vars(cli._parser().parse_args(argv))
