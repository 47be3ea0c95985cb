"""Crashes (issue 16, section 5): the user's are findings, the tool's are bugs.

- code that runs in plain torch runs under the audit too (an ``expand`` of a pending draw, then read
  or written in place);
- the tool's own randomness (sympy's ``Dummy`` making a ``random.Random()`` when the exact
  arithmetic first imports sympy) is never intercepted, while the user's draws still are;
- a search that meets a crashing sampler or loop reports the crash as a counterexample.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import types
from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec.enumerate.rng import enumerate_program  # noqa: E402
from exactspec.fields import get_field  # noqa: E402
from exactspec.samplers.torch_draws import torch_rng  # noqa: E402,F401  (torch patched in audits)
from exactspec.samplers.randomness.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.loops.stand_in import stand_in  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FR = get_field(backend="python")
HALVES = es.models.context_free(("1/2", "1/2"))
P3 = es.models.context_free(("1/2", "1/4", "1/4"))


# -- 2. in-place writes and reads of expanded pending draws follow plain torch --------------------------------

def expand_then_read(target, draft, prompt):
    """One multinomial draw expanded to 3 entries (stride 0), then read whole: plain torch runs it."""
    tok = torch.multinomial(target(prompt)[0, -1].softmax(-1), 1).expand(3)
    return [int(prompt[0, 0]), tok.tolist()[2]]


def expand_then_write(target, draft, prompt):
    """An in-place write into an expanded draw: in plain torch every entry shares the one location, so entry 2 is 1."""
    tok = torch.multinomial(target(prompt)[0, -1].softmax(-1), 1).expand(3)
    tok[0] = 1
    return [int(prompt[0, 0]), int(tok[2])]


def broadcast_then_mask(target, draft, prompt):
    """``broadcast_to`` of a draw, a mask compared from it, and an in-place write into the mask."""
    tok = torch.broadcast_to(torch.multinomial(target(prompt)[0, -1].softmax(-1), 1), (2, 3))
    is_one = tok == 1
    is_one[:, 0] = False
    return [int(prompt[0, 0]), int(is_one[1, 2])]


def write_view_read_base(target, draft, prompt):
    """A write through an expanded view is seen through the tensor it views (plain torch: always 1)."""
    tok = torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)
    tok.expand(3)[0] = 1
    return [int(prompt[0, 0]), int(tok)]


def read_view_write_base_read_view(target, draft, prompt):
    """A view read first, then the base written: the view sees the write (plain torch: always 0)."""
    toks = torch.multinomial(target(prompt)[0, -1].softmax(-1), 2, replacement=True)
    tail = toks[1:]
    int(tail[0])
    toks[1] = 0
    return [int(prompt[0, 0]), int(tail[0])]


def fill_a_slice(target, draft, prompt):
    """``fill_`` on a slice (a view) of the draws writes into the draws (plain torch: always 1)."""
    toks = torch.multinomial(target(prompt)[0, -1].softmax(-1), 2, replacement=True)
    toks[1:].fill_(1)
    return [int(prompt[0, 0]), int(toks[1])]


def expanded_mask_written(target, draft, prompt):
    """A comparison of a uniform, expanded, written in place: every entry is the one location (plain torch: 1)."""
    coin = (torch.rand(1) < 0.5).expand(3)
    coin[0] = True
    return [int(prompt[0, 0]), int(coin[2])]


@pytest.mark.parametrize("loop, law", [
    (expand_then_read, {(0,): F(1, 2), (1,): F(1, 4), (2,): F(1, 4)}),      # the target's own law
    (expand_then_write, {(1,): F(1)}),                                      # the write lands in the shared entry
    (broadcast_then_mask, {(0,): F(3, 4), (1,): F(1, 4)}),                  # is_one[1, 2] reads the draw == 1
    # these ran under the audit on old code, but read the draws, not what was written: a wrong law, silently
    (write_view_read_base, {(1,): F(1)}),
    (read_view_write_base_read_view, {(0,): F(1)}),
    (fill_a_slice, {(1,): F(1)}),
    (expanded_mask_written, {(1,): F(1)}),
])
def test_expanded_pending_draws_run_under_the_audit_as_in_plain_torch(loop, law):
    torch.manual_seed(0)
    for _ in range(8):                                                     # plain torch runs it, within the law
        plain = loop(stand_in(P3), None, torch.tensor([[0]]))
        assert plain[0] == 0 and (plain[1],) in law
    r = es.audit_loop(loop, target=P3, tokens=1)                           # was: RuleError "more than one element
    assert r.output == law                                                 # of the written-to tensor ..."
    assert r.tv == es.laws.total_variation(law, {(0,): F(1, 2), (1,): F(1, 4), (2,): F(1, 4)})


# -- 3. the tool's own randomness is never intercepted --------------------------------------------------------

def test_a_library_called_by_exactspec_draws_real_numbers_inside_a_branch():
    """exactspec code (here a function whose globals say ``exactspec.laws``) calling a library that draws."""
    lib = types.ModuleType("some_library")
    exec("import random\ndef token():\n    return random.Random().randrange(10**6, 9 * 10**6)\n", lib.__dict__)
    own: dict = {"__name__": "exactspec.laws", "lib": lib}
    exec("def helper():\n    return lib.token()\n", own)

    def program(rng):
        with bind(rng):
            return 10**6 <= own["helper"]() < 9 * 10**6      # old code: a fork over 8000001 values, refused
    with intercepting():
        law = enumerate_program(program, FR, exact_floats=True)
    assert law == {True: F(1)}


def test_the_users_draws_through_a_helper_module_of_their_own_are_still_enumerated():
    helper = types.ModuleType("my_helpers")
    exec("import random\ndef coin():\n    return random.random() < 0.25\n", helper.__dict__)

    def program(rng):
        with bind(rng):
            return helper.coin()
    with intercepting():
        law = enumerate_program(program, FR, exact_floats=True)
    assert law == {True: F(1, 4), False: F(3, 4)}


def test_the_users_unenumerable_draw_through_a_library_is_still_refused():
    lib = types.ModuleType("some_library")
    exec("import random\ndef noise():\n    return random.gauss(0, 1)\n", lib.__dict__)

    def program(rng):
        with bind(rng):
            return lib.noise() > 0
    with intercepting(), pytest.raises(es.UnsupportedRandomness, match="gauss"):
        enumerate_program(program, FR, exact_floats=True)


_SYMPY_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import exactspec as es
    assert "sympy" not in sys.modules, "exactspec imported sympy at import"

    def squared_uniform(target, draft, prompt):
        # u ** 2 < 1/4 is decided exactly: the threshold is rational, confirmed with sympy (imported here, first)
        flip = bool((torch.rand(1) ** 2)[0] < 0.25)
        t = int(torch.multinomial(target(prompt)[0, -1].softmax(-1), 1))
        return [int(prompt[0, 0]), 1 - t if flip else t]

    r = es.audit_loop(squared_uniform, target=es.models.context_free(("1/2", "1/2")), tokens=1)
    print(r.verdict, r.tv, "sympy" in sys.modules)
""")


def test_sympy_first_imported_inside_an_audit_does_not_refuse_the_users_sampler():
    """Reported: UnsupportedRandomness "random.Random().randrange at .../sympy/core/symbol.py:488 in Dummy"."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _SYMPY_SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["lossless", "0", "True"]        # sympy was reached, inside the audit


def test_random_module_state_is_untouched_by_an_audit_of_exactspecs_own_draws():
    """The real draw made on exactspec's behalf advances the real generator (it is a real draw), nothing else."""
    state = random.getstate()
    test_a_library_called_by_exactspec_draws_real_numbers_inside_a_branch()
    assert random.getstate() == state        # random.Random() is a new generator: the module's own is untouched


# -- 1. a crash found by a search is a counterexample of kind "crash" ---------------------------------------------

from exactspec.counterexamples import Counterexample, IncompleteSearch  # noqa: E402
from exactspec.counterexamples.space import Space  # noqa: E402
from exactspec.samplers.search import sampler_space, search_sampler  # noqa: E402

USER_MODULE = "exactspec_test_user_crashes"
#: a user's file: Algorithm 1 in numpy, with a "residual" that crashes when a rejection leaves token 1 as its only
#: mass (the published litgpt top-p crash in miniature: a valid instance, a branch of positive probability)
CRASHING = textwrap.dedent('''
    import numpy as np
    import torch


    def sampler(draft_ids, draft_probs, target_probs, rng):
        out = []
        for j, x in enumerate(draft_ids):
            p, q = target_probs[j], draft_probs[j]
            if rng.random() < p[x] / q[x]:
                out.append(int(x))
                continue
            residual = np.maximum(p - q, 0.0)
            if residual[0] == 0:
                raise ValueError("no mass left on token 0")
            out.append(int(rng.choice(len(p), p=residual / residual.sum())))
            return out
        out.append(int(rng.choice(target_probs.shape[1], p=target_probs[-1])))
        return out


    def loop(target, draft, prompt):
        ids = prompt
        x = torch.multinomial(draft(ids)[0, -1].softmax(-1), 1).view(1, 1)
        p = target(torch.cat([ids, x], dim=1))[0, -2:].softmax(-1)
        q = draft(ids)[0, -1].softmax(-1)
        if bool(torch.rand(1) < p[0, int(x)] / q[int(x)]):
            return torch.cat([ids, x, torch.multinomial(p[1], 1).view(1, 1)], dim=1)
        residual = torch.clamp(p[0] - q, min=0)
        if float(residual[0]) == 0:
            raise ValueError("no mass left on token 0")
        return torch.cat([ids, torch.multinomial(residual / residual.sum(), 1).view(1, 1)], dim=1)
''')
#: the same file with the crash fixed: each ``if ...: raise`` pair dropped, the residual sampled whatever its first entry
_LINES = CRASHING.splitlines()
_DROP = {i + d for i, text in enumerate(_LINES) if 'raise ValueError("no mass' in text for d in (-1, 0)}
FIXED = "\n".join(text for i, text in enumerate(_LINES) if i not in _DROP) + "\n"
assert "raise" not in FIXED and FIXED.count("\n") == CRASHING.count("\n") - 4
_RAISE_LINES = [i for i, text in enumerate(CRASHING.splitlines(), 1) if 'raise ValueError("no mass' in text]
SMALL = sampler_space().with_(vocabs=(2,), shapes=((1,),), tokens=(1,), random_points=2)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The user's module written into tmp_path and imported from there; ``.fix()`` rewrites it without the crash."""
    path = tmp_path / f"{USER_MODULE}.py"
    path.write_text(CRASHING)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    mod = importlib.import_module(USER_MODULE)

    def fix():
        path.write_text(FIXED)
        importlib.reload(mod)
    mod.fix = fix
    try:
        yield mod
    finally:
        sys.modules.pop(USER_MODULE, None)


def run_rendered(text):
    """Run the one test function of a rendered regression test in this process."""
    ns: dict = {}
    exec(compile(text, "<rendered regression test>", "exec"), ns)
    (name,) = [k for k in ns if k.startswith("test_")]
    ns[name]()


def _rejection_crash(inst):
    """By hand, for gamma 1 and one token on a context-free (p, q): the draft x is rejected with probability
    q_x - min(p_x, q_x); the residual max(p - q, 0) has no mass on token 0 iff p_0 <= q_0, and then every rejection
    crashes."""
    (p,), (q,) = inst.target, inst.draft
    reject = sum(qx - min(px, qx) for px, qx in zip(p, q))
    return reject if p[0] <= q[0] else F(0)


def test_a_sampler_search_reports_the_minimal_crashing_instance_with_its_exact_probability(user_module):
    found = search_sampler(user_module.sampler, space=SMALL, progress=False)
    # before: IncompleteSearch "the rule raised on N of M instances" (exit 3)
    assert isinstance(found, Counterexample) and found.kind == "crash" and found.exit_code == 1
    assert found.sampler_ref == f"{USER_MODULE}:sampler" and found.adapter == "numpy"
    inst = found.instance
    prob = _rejection_crash(inst)
    assert prob > 0 and found.crash == {"of": "sampler", "probability": str(prob), "exception": "ValueError",
                                        "message": "no mass left on token 0",
                                        "where": f"{user_module.__file__}:{_RAISE_LINES[0]} in sampler"}
    # the output law holds the branches that returned: the accepted drafts, min(p_x, q_x) each
    (p,), (q,) = inst.target, inst.draft
    assert found.output == {(x,): min(px, qx) for x, (px, qx) in enumerate(zip(p, q)) if min(px, qx)}
    assert found.expected == {(x,): px for x, px in enumerate(p) if px}
    assert sum(found.output.values()) == 1 - prob
    # minimal: a smaller instance of the space has none (vocab 2, gamma 1, 1 token are the least); shrinking kept it
    # crashing, and its laws are the simplest that crash (every denominator at most 2)
    assert (inst.vocab, inst.shape, inst.tokens) == (2, (1,), 1)
    assert all(F(x).denominator <= 2 for law in inst.target + inst.draft for x in law)
    text = str(found)
    assert text.startswith("crash counterexample for sampler") and "raises ValueError: no mass left on token 0" in text
    assert f"{user_module.__file__}:{_RAISE_LINES[0]}" in text


def test_the_crash_regression_test_calls_the_users_code_and_fails_while_the_crash_remains(user_module):
    found = search_sampler(user_module.sampler, space=SMALL, progress=False)
    source = found.to_pytest()
    assert f"import {USER_MODULE} as sampler_module" in source and "on_error='record'" in source
    assert "assert report.error_probability == 0" in source
    with pytest.raises(AssertionError, match="this code crashes with probability"):
        run_rendered(source)
    user_module.fix()                      # the user fixes the crash: the same test passes (the fixed code is correct)
    run_rendered(source)
    # JSON round trip, validated on the way back
    again = Counterexample.from_json(found.to_json())
    assert again == found and again.to_pytest() == source


def test_a_loop_search_reports_the_crash_with_the_loops_line(user_module):
    found = es.search_loop(user_module.loop, tokens=1, progress=False,
                          space=Space(vocabs=(2,), shapes=((1,),), tokens=(1,), random_points=2,
                                      exhaustive_denominator=2))
    assert isinstance(found, Counterexample) and found.kind == "crash" and found.exit_code == 1
    assert found.crash["of"] == "loop" and found.loop["on_error"] == "record"
    assert found.crash["where"] == f"{user_module.__file__}:{_RAISE_LINES[1]} in loop"
    assert found.loop["error_probability"] == found.crash["probability"] == str(_rejection_crash(found.instance))
    source = found.to_pytest()
    assert f"import {USER_MODULE} as loop_module" in source and "on_error='record'" in source
    with pytest.raises(AssertionError, match="this code crashes with probability"):
        run_rendered(source)
    user_module.fix()
    run_rendered(source)
    assert Counterexample.from_json(found.to_json()) == found


def test_a_single_instance_audit_keeps_exit_2_on_a_crash_and_records_it_on_request(user_module):
    p, q = es.models.context_free(("1/2", "1/2")), es.models.context_free(("1", "0"))
    with pytest.raises(es.RuleError) as err:       # the instance the user gave: "user code failed", exit 2
        es.audit_sampler(user_module.sampler, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1)
    assert err.value.exit_code == 2 and "raised ValueError: no mass left on token 0" in str(err.value)
    assert f"at {user_module.__file__}:{_RAISE_LINES[0]} in sampler" in str(err.value)
    r = es.audit_sampler(user_module.sampler, target=p, draft=q, proposer=es.drafts.chain(1), tokens=1,
                         on_error="record")
    # by hand: the draft is always 0, accepted with probability (1/2)/1 = 1/2, else rejected and the residual
    # (0, 1/2) has no mass on token 0: a crash with probability 1/2
    assert r.error_probability == F(1, 2) and r.output == {(0,): F(1, 2)}
    assert r.verdict == "biased" and r.exit_code == 1 and not r.lossless
    assert r.extra["errors"] == {"ValueError: no mass left on token 0": "1/2"}
    assert "the sampler raised ValueError: no mass left on token 0 with probability 1/2" in " ".join(r.warnings)


def test_a_sampler_called_with_the_wrong_signature_is_no_crash_but_an_error():
    def two_args(draft_ids, draft_probs):
        return [0]
    p = es.models.context_free(("1/2", "1/2"))
    with pytest.raises(es.RuleError, match="TypeError"):
        es.audit_sampler(two_args, target=p, draft=p, proposer=es.drafts.chain(1), tokens=1, on_error="record")
    space = SMALL.with_(random_points=0)
    with pytest.raises(es.RuleError, match="raised on every one"):
        search_sampler(two_args, space=space, progress=False)


def test_cli_audit_sampler_exits_1_on_a_crash_found_by_the_search_and_2_on_one_given_instance(
        user_module, capsys, monkeypatch):
    from exactspec.cli import main
    monkeypatch.chdir(os.path.dirname(user_module.__file__))
    code = main(["audit-sampler", f"{USER_MODULE}:sampler", "--vocab", "2", "--gamma", "1"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("crash counterexample for sampler")
    assert "regression test (fails while the crash remains)" in out and f"import {USER_MODULE}" in out
    code = main(["audit-sampler", f"{USER_MODULE}:sampler", "--vocab", "2", "--gamma", "1", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 1 and d["kind"] == "crash" and d["crash"]["exception"] == "ValueError"
    assert Counterexample.from_json(json.dumps(d)).crash == d["crash"]


@pytest.mark.parametrize("field, value, match", [
    ("exception", "os.system('rm')", "crash.exception: .* is not an exception type's name"),
    ("probability", "0", r"crash.probability: must be a probability in \(0, 1\]"),
    ("of", "rule", "crash.of: must be one of sampler, loop, audit"),
    ("message", "a\nb", "crash.message: expected printable text"),
])
def test_a_crash_json_is_validated(user_module, field, value, match):
    found = search_sampler(user_module.sampler, space=SMALL, progress=False)
    d = json.loads(found.to_json())
    d["crash"][field] = value
    with pytest.raises(es.ExactSpecError, match=match):
        Counterexample.from_json(json.dumps(d))
