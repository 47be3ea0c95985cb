"""A thread of the user's that draws from ``random.random()`` while a torch audit runs.

Each case runs in a child process with a time limit, since the failure is a hang.

Found: ``exactspec audit-sampler MODULE:FUNCTION`` on a module that starts a (non-daemon) thread
drawing ``random.random()`` in a loop printed its error and then never exited: Python waits for
every non-daemon thread before the process ends, so the command's exit code never came and a CI
job hung. The command now waits a short grace for such threads, then says so and exits with its
code. In the library, the audit itself ends with a typed error naming the other thread (threads
without an audit get the real functions, and the audit does not guess whose draw changed the
global generator); that is checked here too, under a time limit.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[1]

MODULE = textwrap.dedent("""
    import random
    import threading

    import torch   # noqa: F401  (a torch sampler: the audit patches torch's random functions too)

    from exactspec.samplers.adapters.torch_adapters import reference_vllm_style

    DRAWN = []

    def _draw():
        while True:
            DRAWN.append(random.random())

    threading.Thread(target=_draw, name="user-drawer", daemon={daemon}).start()

    def sampler(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
        return reference_vllm_style(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
""")


def _run(args: list[str], cwd: pathlib.Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(cwd)]))
    try:
        return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: no exit within {timeout} s; stderr so far: {exc.stderr!r}")


@pytest.mark.slow   # imports torch in a child process and audits under a busy thread (~10 s on 2 loaded cores)
def test_the_cli_exits_with_its_code_when_user_code_leaves_a_drawing_thread_running(tmp_path):
    (tmp_path / "drawing_sampler.py").write_text(MODULE.format(daemon=False))
    proc = _run(["-m", "exactspec", "audit-sampler", "drawing_sampler:sampler", "--adapter", "vllm", "--instance",
                 "--vocab", "2", "--gamma", "1"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "and another thread drew from it meanwhile" in proc.stderr
    assert proc.stderr.rstrip().endswith("exactspec: note: 1 thread(s) started by user code still running after 2 s "
                                         "(user-drawer); exiting without waiting for them")


PROGRAM = textwrap.dedent("""
    import exactspec as es
    import drawing_sampler

    half = es.models.context_free(("1/2", "1/2"))
    third = es.models.context_free(("1/3", "2/3"))
    try:
        es.audit_sampler(drawing_sampler.sampler, adapter="vllm", target=half, draft=third, tokens=2)
    except es.UnsupportedRandomness as exc:
        print("UnsupportedRandomness:", exc)
    drawn = list(drawing_sampler.DRAWN)
    # the other thread, having no audit, got real numbers all along (never a lazy value, never an error)
    assert drawn and all(type(x) is float and 0.0 <= x < 1.0 for x in drawn), drawn[:5]
    print("drawn", len(drawn))
""")


@pytest.mark.slow
def test_an_audit_beside_a_drawing_thread_ends_with_a_typed_error(tmp_path):
    (tmp_path / "drawing_sampler.py").write_text(MODULE.format(daemon=True))
    proc = _run(["-c", PROGRAM], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "UnsupportedRandomness: Python's global random generator (random.random, ...) changed while sampler" \
        in proc.stdout
    assert "another thread drew from it meanwhile" in proc.stdout and "drawn " in proc.stdout
