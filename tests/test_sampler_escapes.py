"""Samplers that reach for randomness the adapter did not hand them, or end the process: never a verdict.

Every randomness source a sampler can reach is intercepted exactly (then the law equals the one
through the adapter's rng, exactly) or is a typed error; ``sys.exit`` is a RuleError.
"""

import random
import sys
from fractions import Fraction as F
from random import random as _captured_random      # a reference taken before any audit: escapes the patches

import numpy as np
import pytest

import exactspec as es
from exactspec.cli import main
from exactspec.enumerate.rng import enumerate_program
from exactspec.fields import get_field
from exactspec.instances import make_instance

FR = get_field(backend="python")
INST = make_instance(vocab=3, order=1, gamma=2, tokens=2)
_np_captured_random = np.random.random
_PRIVATE = np.random.default_rng(1)                 # a generator made at import, held by the sampler module


def audit(sampler, **kw):
    return es.audit_sampler(sampler, target=INST.target, draft=INST.draft, proposer=INST.proposer,
                            prompt=INST.prompt, tokens=2, **kw)


def _chain(draft_ids, draft_probs, target_probs, coin, pick):
    """Algorithm 1 with the draws taken from ``coin()`` (a uniform) and ``pick(n, p)`` (numpy's choice)."""
    out = []
    for j, x in enumerate(draft_ids):
        p, q = target_probs[j], draft_probs[j]
        if coin() < p[x] / q[x]:
            out.append(int(x))
            continue
        residual = np.maximum(p - q, 0.0)
        out.append(int(pick(len(p), residual / residual.sum())))
        return out
    out.append(int(pick(target_probs.shape[1], target_probs[-1])))
    return out


def via_random_module(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, random.random, lambda n, p: rng.choice(n, p=p))


def via_numpy_globals(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, np.random.random, lambda n, p: np.random.choice(n, p=p))


def via_private_default_rng(draft_ids, draft_probs, target_probs, rng):
    own = np.random.default_rng()                    # unseeded, made at every call: fresh draws, audited exactly
    return _chain(draft_ids, draft_probs, target_probs, own.random, lambda n, p: own.choice(n, p=p))


def via_numpy_random_state(draft_ids, draft_probs, target_probs, rng):
    own = np.random.RandomState()
    return _chain(draft_ids, draft_probs, target_probs, own.random_sample, lambda n, p: own.choice(n, p=p))


def test_draws_through_the_global_functions_at_call_time_give_the_reference_law_exactly():
    ref = audit(es.samplers.reference_numpy_chain, reference=False)
    for sampler in (via_random_module, via_numpy_globals, via_private_default_rng, via_numpy_random_state):
        r = audit(sampler, reference=False)
        assert r.output == ref.output, sampler.__name__          # exact Fractions, not approx
        assert r.verdict == "lossless"


# -- references taken before the audit, private generators, seeding: detected, never a verdict -----------------

def captured_python(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, _captured_random, lambda n, p: rng.choice(n, p=p))


def captured_numpy(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, _np_captured_random, lambda n, p: rng.choice(n, p=p))


def private_generator(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, _PRIVATE.random, lambda n, p: rng.choice(n, p=p))


def test_a_reference_taken_before_the_audit_is_detected():
    for _ in range(2):      # the same error every time: the verdict never depends on the real generator's draws
        with pytest.raises(es.UnsupportedRandomness, match="Python's global random generator"):
            audit(captured_python)
    with pytest.raises(es.UnsupportedRandomness, match="numpy's legacy global generator"):
        audit(captured_numpy)
    with pytest.raises(es.UnsupportedRandomness, match="_PRIVATE"):
        audit(private_generator)


def reseeded_numpy(draft_ids, draft_probs, target_probs, rng):
    own = np.random.default_rng(0)                   # the same numbers at every call: not random at all
    return _chain(draft_ids, draft_probs, target_probs, own.random, lambda n, p: own.choice(n, p=p))


def seeds_python(draft_ids, draft_probs, target_probs, rng):
    random.seed(0)
    return via_random_module(draft_ids, draft_probs, target_probs, rng)


def seeds_numpy(draft_ids, draft_probs, target_probs, rng):
    np.random.seed(0)
    return via_numpy_globals(draft_ids, draft_probs, target_probs, rng)


def test_seeding_inside_the_sampler_is_refused_not_audited_as_fresh_draws():
    with pytest.raises(es.UnsupportedRandomness, match=r"default_rng\(0\).*seeded inside the sampler"):
        audit(reseeded_numpy)
    with pytest.raises(es.UnsupportedRandomness, match=r"random.seed at .*test_sampler_escapes.py:\d+"):
        audit(seeds_python)
    with pytest.raises(es.UnsupportedRandomness, match=r"numpy.random.seed at .*test_sampler_escapes.py:\d+"):
        audit(seeds_numpy)


def gaussian_numpy(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, lambda: np.random.normal() > 0, lambda n, p: rng.choice(n, p=p))


def gaussian_python(draft_ids, draft_probs, target_probs, rng):
    return _chain(draft_ids, draft_probs, target_probs, lambda: random.gauss(0, 1), lambda n, p: rng.choice(n, p=p))


def test_draws_that_cannot_be_enumerated_name_the_function_and_the_line():
    with pytest.raises(es.UnsupportedRandomness, match=r"numpy.random.normal at .*test_sampler_escapes.py:\d+"):
        audit(gaussian_numpy)
    with pytest.raises(es.UnsupportedRandomness, match=r"random.gauss at .*test_sampler_escapes.py:\d+"):
        audit(gaussian_python)


# -- Python's random, enumerated exactly ---------------------------------------------------------------------

def law_of(program):
    from exactspec.samplers.randomness.interception import EnumRandom
    return enumerate_program(lambda rng: program(EnumRandom(rng)), FR, exact_floats=True)


def test_python_random_functions_have_their_exact_laws():
    assert law_of(lambda r: r.randint(1, 3)) == {1: F(1, 3), 2: F(1, 3), 3: F(1, 3)}
    assert law_of(lambda r: r.randrange(0, 10, 4)) == {0: F(1, 3), 4: F(1, 3), 8: F(1, 3)}
    assert law_of(lambda r: r.choice("xy")) == {"x": F(1, 2), "y": F(1, 2)}
    assert law_of(lambda r: r.uniform(2, 6) < 3) == {True: F(1, 4), False: F(3, 4)}

    def shuffled(r):
        x = [0, 1, 2]
        r.shuffle(x)
        return tuple(x)
    assert law_of(shuffled) == {p: F(1, 6) for p in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]}
    pairs = law_of(lambda r: tuple(r.sample("abc", 2)))
    assert len(pairs) == 6 and set(pairs.values()) == {F(1, 6)}
    # choices: the first cumulative weight above u * total, compared exactly (the floats are rationals)
    assert law_of(lambda r: r.choices("ab", weights=[1, 3])[0]) == {"a": F(1, 4), "b": F(3, 4)}
    assert law_of(lambda r: r.choices("abc")[0]) == {"a": F(1, 3), "b": F(1, 3), "c": F(1, 3)}
    assert law_of(lambda r: r.getrandbits(2)) == {k: F(1, 4) for k in range(4)}
    with pytest.raises(es.UnsupportedRandomness, match="expovariate"):
        law_of(lambda r: r.expovariate(1.0))


# -- sys.exit and KeyboardInterrupt in the sampler; the patches always come back off --------------------------

def exits(draft_ids, draft_probs, target_probs, rng):
    sys.exit(0)


def interrupted(draft_ids, draft_probs, target_probs, rng):
    raise KeyboardInterrupt


ORIGINALS = {"random.random": random.random, "random.choice": random.choice, "random.Random": random.Random,
             "np.random.random": np.random.random, "np.random.choice": np.random.choice,
             "np.random.default_rng": np.random.default_rng, "np.random.RandomState": np.random.RandomState}


def assert_restored():
    now = {"random.random": random.random, "random.choice": random.choice, "random.Random": random.Random,
           "np.random.random": np.random.random, "np.random.choice": np.random.choice,
           "np.random.default_rng": np.random.default_rng, "np.random.RandomState": np.random.RandomState}
    assert all(now[k] is ORIGINALS[k] for k in ORIGINALS), [k for k in ORIGINALS if now[k] is not ORIGINALS[k]]


def test_sys_exit_in_a_sampler_is_a_rule_error_and_interrupts_propagate_with_the_patches_undone():
    with pytest.raises(es.RuleError, match=r"sampler exits called sys.exit\(0\)") as info:
        audit(exits)
    assert info.value.exit_code == 2 and info.value.rule == "exits"
    assert_restored()
    with pytest.raises(KeyboardInterrupt):
        audit(interrupted)
    assert_restored()
    with pytest.raises(es.UnsupportedRandomness):
        audit(captured_python)
    assert_restored()
    audit(via_random_module, reference=False)
    assert_restored()


def test_cli_audit_sampler_that_calls_sys_exit_exits_2_with_a_message(capsys, tmp_path, monkeypatch):
    (tmp_path / "exiting_sampler.py").write_text("import sys\n\ndef sampler(d, q, p, rng):\n    sys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["audit-sampler", "exiting_sampler:sampler", "--vocab", "2", "--gamma", "1", "--tokens", "1"])
    assert code == 2
    assert "sys.exit(0)" in capsys.readouterr().err
    assert_restored()


# -- torch samplers ---------------------------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


def _transformers_style(ids, cand_logits, n, new_logits, coin):
    import torch
    drafts = ids[0, -n:]
    q = cand_logits.softmax(dim=-1)[0]
    p = new_logits.softmax(dim=-1)[0]
    out = []
    for j in range(n):
        x = int(drafts[j])
        if coin()[0] < p[j, x] / q[j, x]:
            out.append(x)
            continue
        residual = torch.clamp(p[j] - q[j], min=0)
        out.append(int(torch.multinomial(residual / residual.sum(), 1)[0]))
        return torch.tensor([out]), torch.tensor(j)
    out.append(int(torch.multinomial(p[n], 1)[0]))
    return torch.tensor([out]), torch.tensor(n)


def test_torch_randomness_outside_the_followed_draws_is_refused():
    torch = _torch()
    torch.set_num_threads(1)
    gen = torch.Generator()
    gen.manual_seed(5)

    def randn(ids, cand_logits, n, new_logits):
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.randn(1).abs())

    def own_generator(ids, cand_logits, n, new_logits):
        g = torch.Generator()
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.rand(1, generator=g))

    def long_lived_generator(ids, cand_logits, n, new_logits):
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.rand(1, generator=gen))

    def reseeded_generator(ids, cand_logits, n, new_logits):
        gen.manual_seed(0)                       # every call starts the stream over: the draws repeat
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.rand(1, generator=gen))

    held = {"gen": torch.Generator()}            # out of the scan's sight: caught by the repeated state

    def reseeded_held_generator(ids, cand_logits, n, new_logits):
        held["gen"].manual_seed(0)
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.rand(1, generator=held["gen"]))

    def seeds(ids, cand_logits, n, new_logits):
        torch.manual_seed(0)
        return _transformers_style(ids, cand_logits, n, new_logits, lambda: torch.rand(1))

    kw = dict(adapter="transformers", reference=False)
    with pytest.raises(es.UnsupportedRandomness, match="torch.randn at .*test_sampler_escapes.py"):
        audit(randn, **kw)
    with pytest.raises(es.UnsupportedRandomness, match=r"torch.Generator\(...\) at .*test_sampler_escapes.py"):
        audit(own_generator, **kw)
    with pytest.raises(es.UnsupportedRandomness, match="torch.manual_seed at"):
        audit(seeds, **kw)
    with pytest.raises(es.UnsupportedRandomness, match=r"generator gen \(a Generator\) changed .* or a re-seed"):
        audit(reseeded_generator, **kw)
    with pytest.raises(es.UnsupportedRandomness, match="came back to a state it had earlier"):
        audit(reseeded_held_generator, **kw)
    # a generator made once, outside the sampler: its draws are fresh and intercepted, the law is exact
    ref = audit(es.samplers.get_adapter("transformers").reference, **kw)
    assert audit(long_lived_generator, **kw).output == ref.output
    assert torch.rand is torch._C._VariableFunctions.rand and torch.Generator is torch._C.Generator
    assert_restored()


def test_torch_integer_draws_are_exact_uniforms():
    torch = _torch()
    from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch

    def torch_law(program):
        def run(rng):
            with bind(rng):
                return program()
        with intercept_torch():
            return enumerate_program(run, FR, exact_floats=True)
    assert torch_law(lambda: int(torch.randint(1, 4, (1,))[0])) == {1: F(1, 3), 2: F(1, 3), 3: F(1, 3)}
    assert torch_law(lambda: tuple(torch.randint(2, (2,)).tolist())) == {(a, b): F(1, 4) for a in (0, 1)
                                                                          for b in (0, 1)}
    perms = torch_law(lambda: tuple(torch.randperm(3).tolist()))
    assert len(perms) == 6 and set(perms.values()) == {F(1, 6)}
    assert torch_law(lambda: float(torch.zeros(1).bernoulli_(0.25)[0])) == {1.0: F(1, 4), 0.0: F(3, 4)}
    assert_restored()


# -- in-place random ops used as statements (issue 9: a silently wrong law is a false verdict) --------------

def _torch_law(program):
    torch = pytest.importorskip("torch")
    from exactspec.enumerate.rng import enumerate_program
    from exactspec.fields import get_field
    from exactspec.samplers.torch_draws.torch_rng import bind, intercept_torch

    def run(rng):
        with bind(rng):
            return program(torch)
    with intercept_torch():
        return enumerate_program(run, get_field(backend="python"), exact_floats=True)


def test_uniform_fill_as_a_statement_is_enumerated():
    def prog(torch):
        u = torch.empty(1)
        u.uniform_()              # the return value is dropped: u itself must hold the draw
        return bool(u[0] < torch.tensor([0.25])[0])
    assert _torch_law(prog) == {True: F(1, 4), False: F(3, 4)}


def test_uniform_fill_with_bounds_as_a_statement_is_enumerated():
    def prog(torch):
        u = torch.empty(1)
        u.uniform_(0.5, 1.0)      # u ~ U[1/2, 1): P(u < 3/4) = 1/2
        return bool(u[0] < 0.75)
    assert _torch_law(prog) == {True: F(1, 2), False: F(1, 2)}


def test_rand_into_out_is_enumerated():
    def prog(torch):
        u = torch.empty(2)
        torch.rand(2, out=u)
        return (bool(u[0] < 0.5), bool(u[1] < 0.25))
    assert _torch_law(prog) == {(True, True): F(1, 8), (True, False): F(3, 8),
                                (False, True): F(1, 8), (False, False): F(3, 8)}


def test_exponential_fill_as_a_statement_runs_the_race():
    def prog(torch):
        w = torch.tensor([0.25, 0.75])
        e = torch.empty_like(w)
        e.exponential_()          # vLLM's idiom: the race argmax(w / E) draws from w / sum(w)
        return int(torch.argmax(w / e, dim=-1))
    assert _torch_law(prog) == {0: F(1, 4), 1: F(3, 4)}


def test_random_fill_of_a_view_is_refused():
    def prog(torch):
        buf = torch.zeros(2, 2)
        buf[:, 0].uniform_()      # the base tensor cannot be filled with enumerated draws
        return bool(buf[0, 0] < 0.5)
    with pytest.raises(es.UnsupportedRandomness, match=r"on a view of another tensor at .*test_sampler_escapes"):
        _torch_law(prog)
