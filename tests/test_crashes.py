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
from exactspec.samplers import torch_rng  # noqa: E402,F401  (torch patched in audits)
from exactspec.samplers.interception import bind, intercepting  # noqa: E402
from exactspec.samplers.stand_in import stand_in  # noqa: E402

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


@pytest.mark.parametrize("loop, law", [
    (expand_then_read, {(0,): F(1, 2), (1,): F(1, 4), (2,): F(1, 4)}),      # the target's own law
    (expand_then_write, {(1,): F(1)}),                                      # the write lands in the shared entry
    (broadcast_then_mask, {(0,): F(3, 4), (1,): F(1, 4)}),                  # is_one[1, 2] reads the draw == 1
])
def test_expanded_pending_draws_run_under_the_audit_as_in_plain_torch(loop, law):
    torch.manual_seed(0)
    plain = loop(stand_in(P3), None, torch.tensor([[0]]))                  # plain torch runs it
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

