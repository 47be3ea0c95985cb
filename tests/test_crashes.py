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
