"""Pytest plugin that wrote ``tests/data/old_paths.json``: each ``old_paths.recorded(old, run)`` runs ``run()`` on
the old path ``old`` and records its result. It needs an ``exactspec`` that still has those paths (commit 08a0884):

    git archive 08a0884 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python -m pytest -p record_old_paths tests/<the files that call recorded> -q

(with ``tests/`` of today on the path). Not used by the suite itself.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Callable, Iterator

import old_paths

_new: dict = {}


@contextlib.contextmanager
def _switched(old: str) -> Iterator[None]:
    """The old code's switch for ``old``, on for the block (restored after)."""
    from exactspec.samplers.randomness import _fast_path
    if old == "engine":
        import os
        before = os.environ.get("EXACTSPEC_LEGACY_ENGINE")
        os.environ["EXACTSPEC_LEGACY_ENGINE"] = "1"
        try:
            yield
        finally:
            os.environ.pop("EXACTSPEC_LEGACY_ENGINE") if before is None else \
                os.environ.__setitem__("EXACTSPEC_LEGACY_ENGINE", before)
        return
    if old == "sampler":
        with _fast_path.legacy_paths():
            yield
        return
    if old == "loops":
        from exactspec.samplers.loops.loop_audit import _old_path
        with _old_path():
            yield
        return
    if old == "reads":
        with _fast_path.reads_deferred(False):
            yield
        return
    module, name = {"refine": ("exactspec.samplers.randomness.lazy_worlds", "REFINE"),
                    "joint": ("exactspec.samplers.randomness.joint_draws", "JOINT"),
                    "defer_last": ("exactspec.samplers.randomness._fast_path", "DEFER_LAST"),
                    "races": ("exactspec.samplers.randomness.torch_rng", "_LAZY_RACES")}[old]
    import importlib
    mod = importlib.import_module(module)
    saved = getattr(mod, name)
    setattr(mod, name, False)
    try:
        yield
    finally:
        setattr(mod, name, saved)


def _record(old: str, run: Callable[[], Any] | None = None) -> Any:
    assert run is not None, "the recorder needs the call"
    key = old_paths._key()
    with _switched(old):
        value = run()
    _new[key] = {"old": old, "value": old_paths.encode(value)}
    return old_paths.decode(json.loads(json.dumps(_new[key]["value"])))


def pytest_configure(config: Any) -> None:
    old_paths.recorded = _record


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    table = json.loads(old_paths.FIXTURE.read_text()) if old_paths.FIXTURE.exists() else {}
    root = old_paths.FIXTURE.parent.parent.parent
    text = json.dumps(_new).replace(json.dumps(f"{root}/")[1:-1], old_paths.ROOT)

    def hashed(m: "re.Match") -> str:     # a line of a test file by its text, wherever it moves
        line = (root / m.group(1)).read_text().splitlines()[int(m.group(2)) - 1]
        return f"{old_paths.ROOT}{m.group(1)}:@{old_paths.line_hash(line)}"
    table.update(json.loads(re.sub(r"<repo>/(tests/[\w/]+\.py):(\d+)", hashed, text)))
    old_paths.FIXTURE.parent.mkdir(exist_ok=True)
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in sorted(table.items())]
    old_paths.FIXTURE.write_text("{\n" + ",\n".join(lines) + "\n}\n")
