"""Published Triton kernels on the CPU: one file of an installed wheel, loaded under Triton's interpreter.

Serving engines ship their samplers as Triton kernels inside wheels whose package ``__init__``
imports a GPU stack. :func:`load_published_module` runs the *file* that holds a kernel, from the
installed distribution, without running any ``__init__`` of its package, with
``TRITON_INTERPRET=1`` (so each kernel is an interpreted one: every program instance runs in Python
on CPU tensors; the variable stays set for the rest of the process, because Triton reads it again
at launch time, and a launch wrapped in :func:`interpreted` is safe where someone unsets it), and
with stand-in modules for the
imports a caller names (platform probes, never sampling math). Nothing is copied: the code that
runs is the published file.

The interpreter runs one program instance (one batch row) at a time, at tens of milliseconds
each, so rows are what an audit pays for: :class:`RowCache` launches a kernel only on rows it has
not seen (equal inputs, equal outputs), several rows to a launch.

Generic: nothing here knows SGLang or vLLM (the SGLang adapter, :mod:`.sglang_kernels`, uses it).

>>> RowCache(lambda rows: [sum(r) for r in rows]).get([(1, 2), (3, 4), (1, 2)])
[3, 7, 3]
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Callable, Hashable, Iterator, Sequence

from ....errors import ExactSpecError

__all__ = ["load_published_module", "published_version", "RowCache", "interpreted"]


def published_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (None when it is not installed).

    >>> published_version("no-such-distribution-exactspec") is None
    True
    """
    from importlib import metadata
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def interpreted() -> Iterator[None]:
    """``TRITON_INTERPRET=1`` inside the block (restored after): kernels decorated there are interpreted ones.

    >>> with interpreted():
    ...     os.environ["TRITON_INTERPRET"]
    '1'
    """
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


@contextlib.contextmanager
def _stand_ins(stubs: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Modules named in ``stubs`` (name -> attributes) in ``sys.modules`` inside the block, the real ones after."""
    saved = {name: sys.modules.get(name) for name in stubs}
    for name, attrs in stubs.items():
        mod = ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


_LOADED: dict[tuple, ModuleType] = {}


def _check_triton_interprets() -> None:
    """Refuse a triton imported without ``TRITON_INTERPRET=1``: its own ``@triton.jit`` helpers (``tl.sum``,
    ``tl.cumsum``) were then made compiled functions, which an interpreted kernel cannot call."""
    if "triton" not in sys.modules:
        return
    from triton.language import standard
    from triton.runtime.interpreter import InterpretedFunction
    if not isinstance(standard.sum, InterpretedFunction):
        raise ExactSpecError("triton was imported before TRITON_INTERPRET=1 was set, so its own @triton.jit helpers "
                             "(tl.sum, tl.cumsum) are compiled ones an interpreted kernel cannot call: set "
                             "TRITON_INTERPRET=1 in the environment, or load the published kernel before anything "
                             "imports triton")


def load_published_module(distribution: str, path: str, *, version: str | None = None,
                          stubs: dict[str, dict[str, Any]] | None = None) -> ModuleType:
    """The module in file ``path`` of the installed ``distribution``, run alone under Triton's interpreter.

    ``path`` is relative to the distribution's root (``"sglang/kernels/ops/speculative/reject_sampling.py"``).
    The file runs with ``TRITON_INTERPRET=1`` (left set: Triton reads it at every launch) and no package
    ``__init__`` above it; its imports resolve as
    usual except the modules in ``stubs`` (module name -> attributes), present only while it runs.
    ``version``: the release required (an :class:`~exactspec.ExactSpecError` otherwise, as when the
    distribution or the file is missing). Loaded once per (distribution, path, stubs).

    >>> load_published_module("no-such-distribution-exactspec", "x.py")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    exactspec.errors.ExactSpecError: no-such-distribution-exactspec is not installed (...): its file x.py cannot ...
    """
    from importlib import metadata
    have = published_version(distribution)
    if have is None:
        raise ExactSpecError(f"{distribution} is not installed (python -m pip install --no-deps {distribution}): "
                             f"its file {path} cannot be loaded")
    if version is not None and have != version:
        raise ExactSpecError(f"{distribution} {have} is installed, {version} is required (python -m pip install "
                             f"--no-deps {distribution}=={version})")
    key = (distribution, have, path, tuple(sorted(stubs or {})))
    if key in _LOADED:
        return _LOADED[key]
    where = metadata.distribution(distribution).locate_file(path)
    if not os.path.isfile(str(where)):
        raise ExactSpecError(f"{distribution} {have} has no file {path}")
    name = "exactspec_published." + distribution.replace("-", "_") + "." + path[:-3].replace("/", ".")
    spec = importlib.util.spec_from_file_location(name, str(where))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    _check_triton_interprets()
    os.environ["TRITON_INTERPRET"] = "1"
    sys.modules[name] = module           # under a private name: inspect and the interpreter find its source
    try:
        with _stand_ins(stubs or {}):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    module.__published__ = (distribution, have, path)     # type: ignore[attr-defined]
    _LOADED[key] = module
    return module


class RowCache:
    """Outputs of ``launch(rows) -> outputs`` (one per row, rows hashable), each distinct row launched once.

    ``get(rows)`` launches ``launch`` once on the rows not seen before (in first-seen order), and
    answers every row, repeated ones included, from the cache. ``launches`` and ``rows_launched``
    count the work done.

    >>> seen = []
    >>> cache = RowCache(lambda rows: seen.append(list(rows)) or [r * 2 for r in rows])
    >>> cache.get([1, 2, 1]), cache.get([2, 3]), seen, cache.rows_launched
    ([2, 4, 2], [4, 6], [[1, 2], [3]], 3)
    """

    def __init__(self, launch: Callable[[Sequence[Hashable]], Sequence[Any]]) -> None:
        self.launch = launch
        self.known: dict[Hashable, Any] = {}
        self.launches = 0
        self.rows_launched = 0

    def get(self, rows: Sequence[Hashable]) -> list[Any]:
        """The output of every row of ``rows``, launching the kernel once on those not cached."""
        todo = list(dict.fromkeys(r for r in rows if r not in self.known))
        if todo:
            outs = list(self.launch(todo))
            if len(outs) != len(todo):
                raise ExactSpecError(f"a kernel launch on {len(todo)} rows gave {len(outs)} outputs")
            self.known.update(zip(todo, outs))
            self.launches += 1
            self.rows_launched += len(todo)
        return [self.known[r] for r in rows]
