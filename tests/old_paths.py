"""What the paths deleted in issue 36 returned, recorded, for the tests that compared them with today's path.

Until issue 36 the sampler audit, the whole-loop audit and the engine each kept an earlier, slower path behind
a switch (``legacy_paths()``, ``_fast_path.LOOPS``, ``DEFER_LAST``, ``DEFER_READS``, ``lazy_worlds.REFINE``,
``joint_draws.JOINT``, ``torch_rng._LAZY_RACES``), and the tests ran each case on both and asserted ``==``.
The switches and those paths are gone; what the old path gave in each such call was recorded from the last
commit that had them (``08a0884``) into ``tests/data/old_paths.json``, and the tests now compare today's
single path with that record: the same exact comparison (``==`` on Fraction laws, TVs, verdicts, extras),
against the same reference, without keeping the old code alive.

An entry is keyed by the test's node id and the call's number within the test; :func:`recorded` returns it
decoded (a report as a namespace of the attributes the tests read). ``tests/record_old_paths.py`` is the
pytest plugin that wrote the file (run against that commit's ``exactspec``); nothing here runs old code.

>>> decode(encode({(0, 1): Fraction(1, 3)})) == {(0, 1): Fraction(1, 3)}
True
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

FIXTURE = Path(__file__).resolve().parent / "data" / "old_paths.json"
#: the repository's root as recorded texts spell it (a file and line where a sampler raised, say); a line of a test
#: file is spelled by the hash of its text (``<repo>/tests/test_x.py:@0123456789ab``), found again wherever it
#: moved since
ROOT = "<repo>/"
_LINE = re.compile(r"<repo>/(tests/[\w/]+\.py):@([0-9a-f]{12})")


def line_hash(text: str) -> str:
    """The hash a recorded site gives a line of a test file (its text, stripped).

    >>> len(line_hash("raise ValueError"))
    12
    """
    return hashlib.sha1(text.strip().encode()).hexdigest()[:12]


def _line(match: "re.Match") -> str:
    path = Path(__file__).resolve().parent.parent / match.group(1)
    found = [i for i, text in enumerate(path.read_text().splitlines(), 1) if line_hash(text) == match.group(2)]
    if len(found) != 1:
        raise KeyError(f"the recorded line {match.group(0)} is in {path} {len(found)} times, not once")
    return f"{ROOT}{match.group(1)}:{found[0]}"

#: the attributes of a report (or search result) that are recorded
ATTRS = ("output", "expected", "tv", "verdict", "tolerance", "undecided", "extra", "paths", "lossless",
         "tokens_per_call", "accepted_per_call", "target_calls", "nodes_per_call", "audited", "instance", "kind",
         "scope", "warnings")

_counts: dict[str, int] = {}
_table: dict | None = None


class Repr:
    """A value recorded by its ``repr`` (an object the encoding does not spell out): equal to what prints alike."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return self.text == (other.text if isinstance(other, Repr) else repr(other))

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return self.text


def encode(x: Any) -> Any:
    """``x`` as JSON data that :func:`decode` turns back into an equal value (Fractions exact, floats bit for bit)."""
    import numpy as np
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, np.bool_):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        return {"f": float(x).hex()}
    if isinstance(x, Fraction):
        return {"F": str(x)}
    if isinstance(x, tuple):
        return {"T": [encode(v) for v in x]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        return {"D": [[encode(k), encode(v)] for k, v in x.items()]}
    if isinstance(x, (set, frozenset)):
        return {"S": [encode(v) for v in x]}
    mpmath = sys.modules.get("mpmath")
    if mpmath is not None and isinstance(x, mpmath.mpf):
        return {"m": [x._mpf_[0], str(x._mpf_[1]), x._mpf_[2], x._mpf_[3]]}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        values = torch.Tensor.tolist(x.detach().reshape(-1).to(torch.float64))
        return {"t": [str(x.dtype).removeprefix("torch."), list(x.shape), [float(v).hex() for v in values]]}
    if hasattr(x, "verdict") or hasattr(x, "audited"):
        out = {}
        for a in ATTRS:
            try:
                v = getattr(x, a)
            except Exception:          # a property that does not apply to this kind of result
                continue
            if not callable(v):
                out[a] = encode(v)
        return {"R": out, "type": type(x).__name__}
    return {"r": repr(x)}


def decode(x: Any) -> Any:
    """The value :func:`encode` wrote."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, str):
        return _LINE.sub(_line, x).replace(ROOT, f"{Path(__file__).resolve().parent.parent}/")
    if not isinstance(x, dict):
        return x
    if "f" in x:
        return float.fromhex(x["f"])
    if "F" in x:
        return Fraction(x["F"])
    if "T" in x:
        return tuple(decode(v) for v in x["T"])
    if "D" in x:
        return {decode(k): decode(v) for k, v in x["D"]}
    if "S" in x:
        return {decode(v) for v in x["S"]}
    if "R" in x:
        return SimpleNamespace(type=x["type"], **{k: decode(v) for k, v in x["R"].items()})
    if "m" in x:
        import mpmath
        sign, man, exp, bc = x["m"]
        value = mpmath.mpf.__new__(mpmath.mpf)
        value._mpf_ = (sign, mpmath.libmp.MPZ(int(man)), exp, bc)
        return value
    if "t" in x:
        import torch
        dtype, shape, values = x["t"]
        flat = torch.tensor([float.fromhex(v) for v in values], dtype=torch.float64)
        return flat.to(getattr(torch, dtype)).reshape(shape)
    return Repr(x["r"])


def _key() -> str:
    node = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    n = _counts[node] = _counts.get(node, 0) + 1
    return f"{node}#{n}"


def recorded(old: str, run: Callable[[], Any] | None = None) -> Any:
    """What the deleted path ``old`` returned for this call of this test (``run``: the call, for the recorder).

    ``old`` names the path: ``"sampler"`` (``legacy_paths()``), ``"loops"`` (``loop_audit._old_path()``),
    ``"reads"`` (``DEFER_READS`` off), ``"refine"`` (``lazy_worlds.REFINE`` off), ``"joint"``
    (``joint_draws.JOINT`` off), ``"defer_last"`` (``DEFER_LAST`` off), ``"races"`` (``_LAZY_RACES`` off),
    ``"engine"`` (the engine's earlier path, ``EXACTSPEC_LEGACY_ENGINE=1``).
    """
    global _table
    if _table is None:
        _table = json.loads(FIXTURE.read_text())
    key = _key()
    entry = _table.get(key)
    if entry is None:
        raise KeyError(f"no recorded result of the old path for {key} in {FIXTURE}")
    if entry["old"] != old:
        raise KeyError(f"{key} was recorded on the old path {entry['old']!r}, not {old!r}")
    return decode(entry["value"])
