"""The wrong adapter is a usage error naming the adapters that fit, never a finding about the sampler (issue 35).

``exactspec audit-sampler my_torch_samplers:correct`` without ``--adapter`` (numpy by default) used to
report a crash counterexample of probability 1 and exit 1 on a correct vLLM-style torch sampler. Left
out, the adapter is now numpy *checked*: a sampler that raises on its first call there while another
registered adapter runs it raises :class:`~exactspec.errors.AdapterMismatch` (exit 2) naming those
adapters. An adapter given explicitly is never second-guessed: a crash under it is the sampler's.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import exactspec as es  # noqa: E402
from exactspec import cli  # noqa: E402
from exactspec.bugzoo import numpy_samplers as nzoo  # noqa: E402
from exactspec.bugzoo import torch_samplers as tzoo  # noqa: E402
from exactspec.errors import AdapterMismatch  # noqa: E402
from exactspec.samplers.adapters.fit import check_default_adapter, first_call  # noqa: E402

P, Q = es.models.context_free(("1/2", "1/4", "1/4")), es.models.context_free(("1/4", "1/4", "1/2"))
ONE = dict(target=P, draft=Q, proposer=es.drafts.chain(1), tokens=1)


def vllm_correct(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """A correct vLLM-style sampler (the user's code), recovering with torch.multinomial."""
    batch, k, _ = target_probs.shape
    out = torch.full((batch, k + 1), -1, dtype=torch.long)
    for b in range(batch):
        for j in range(k):
            x = int(draft_token_ids[b, j])
            if torch.rand(1) < target_probs[b, j, x] / draft_probs[b, j, x]:
                out[b, j] = x
                continue
            out[b, j] = torch.multinomial(torch.clamp(target_probs[b, j] - draft_probs[b, j], min=0), 1)[0]
            break
        else:
            out[b, k] = bonus_token_ids[b, 0]
    return out


def vllm_crashing(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    """A vLLM-style sampler with a bug of its own: it indexes past the drafts on its first call."""
    return draft_token_ids[0, 99]


def numpy_crashing(draft_ids, draft_probs, target_probs, rng):
    """A numpy sampler with a bug of its own: it indexes past the drafts on its first call."""
    return [int(draft_ids[99])]


# -- the API ---------------------------------------------------------------------------------------------------

def test_a_torch_sampler_under_the_default_adapter_is_a_usage_error_naming_the_adapters_that_fit():
    with pytest.raises(AdapterMismatch) as info:
        es.audit_sampler(tzoo.correct, **ONE)
    err = info.value
    assert isinstance(err, es.ExactSpecError) and not isinstance(err, es.RuleError) and err.exit_code == 2
    assert err.adapter == "numpy" and err.fits[0] == "vllm"         # the adapter its parameter names match first
    assert "pass adapter='vllm' (on the command line: --adapter vllm)" in str(err)
    assert "first call raised ValueError" in str(err)
    for on_error in ("raise", "record"):
        with pytest.raises(AdapterMismatch):
            es.audit_sampler(tzoo.correct, on_error=on_error, **ONE)
    with pytest.raises(AdapterMismatch):                           # a search: no crash counterexample either
        es.search_sampler(tzoo.correct)
    with pytest.raises(AdapterMismatch):
        es.samplers.search_sampler(vllm_correct, workers=None, max_instances=2)
    assert check_default_adapter.__module__ == "exactspec.samplers.adapters.fit"


def test_the_right_adapter_audits_it_and_an_explicit_numpy_is_not_second_guessed():
    assert es.audit_sampler(vllm_correct, adapter="vllm", **ONE).verdict == "lossless"
    with pytest.raises(AdapterMismatch):
        es.audit_sampler(vllm_correct, **ONE)
    with pytest.raises(es.RuleError, match="ValueError"):           # asked for: the crash is the sampler's
        es.audit_sampler(vllm_correct, adapter="numpy", **ONE)
    found = es.samplers.search_sampler(vllm_correct, adapter="numpy", workers=None, max_instances=2)
    assert isinstance(found, es.Counterexample) and found.kind == "crash"


def test_a_sampler_crashing_under_its_own_adapter_is_still_a_crash():
    # numpy is its adapter and the default: no other adapter runs it, so the crash is audited as before
    with pytest.raises(es.RuleError, match="IndexError"):
        es.audit_sampler(numpy_crashing, **ONE)
    rec = es.audit_sampler(numpy_crashing, on_error="record", **ONE)
    assert rec.verdict == "biased" and rec.extra["error_probability"] == "1"
    found = es.samplers.search_sampler(numpy_crashing, workers=None, max_instances=2)
    assert isinstance(found, es.Counterexample) and found.kind == "crash"
    # a torch sampler's own bug under its own adapter, given explicitly
    with pytest.raises(es.RuleError, match="IndexError"):
        es.audit_sampler(vllm_crashing, adapter="vllm", **ONE)
    found = es.samplers.search_sampler(vllm_crashing, adapter="vllm", workers=None, max_instances=2)
    assert isinstance(found, es.Counterexample) and found.kind == "crash"


def test_correct_numpy_samplers_pass_the_check_untouched():
    assert first_call(nzoo.correct, "numpy", **{k: v for k, v in ONE.items() if k != "tokens"}) is None
    check_default_adapter(nzoo.correct, "numpy")                    # nothing raised
    assert es.audit_sampler(nzoo.correct, **ONE).verdict == "lossless"


# -- the command line ------------------------------------------------------------------------------------------

@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "my_torch_samplers.py").write_text(textwrap.dedent('''
        from exactspec.bugzoo.torch_samplers import correct


        def crashing(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
            return draft_token_ids[0, 99]
    '''))
    return tmp_path


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SMALL = ["--vocab", "3", "--gamma", "1", "--time-limit", "120"]


def test_cli_without_adapter_exits_2_naming_the_adapter_that_fits(capsys, user_dir):
    for extra in ([], ["--instance"]):
        code, out, err = run(capsys, "audit-sampler", "my_torch_samplers:correct", *SMALL, *extra)
        assert code == 2 and out == "", (out, err)
        assert err.count("\n") == 1 and err.startswith("exactspec: ") and "Traceback" not in err
        assert "does not run under the numpy adapter" in err and "--adapter vllm" in err


def test_cli_with_the_adapter_given_audits_and_reports_crashes_as_the_samplers(capsys, user_dir):
    code, out, _ = run(capsys, "audit-sampler", "my_torch_samplers:correct", "--adapter", "vllm", "--instance",
                       *SMALL)
    assert code == 0, out
    code, out, _ = run(capsys, "audit-sampler", "my_torch_samplers:crashing", "--adapter", "vllm", *SMALL,
                       "--json", "--workers", "1")
    assert code == 1
    assert json.loads(out)["kind"] == "crash"
