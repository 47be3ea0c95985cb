"""Findings on published speculative-decoding code, kept once as data, and the route to vLLM's sampler files.

Each finding is one row of the README's "Found in published code" table: a package, a code location, a setting,
and per audited release the verdict and exact figure that the test it names asserts. ``exactspec findings``
prints the tables (``--package`` for one package) and ``--write`` renders them into the README and
docs/real-code.md; ``python -m benchmarks.release_watch`` audits other releases.

>>> import exactspec as es
>>> f = es.published.finding("transformers-float32-lattice")
>>> f.result("5.24.0").verdict
'biased'
"""

from __future__ import annotations

import pathlib

from ..errors import InvalidValue
from . import _data, _vllm
from ._render import packages_table, replace_blocks, rows_table
from ._types import Finding, Package, Result, release_key

__all__ = ["Finding", "Package", "Result", "findings", "finding", "packages", "package", "tables", "write_tables",
           "release_key", "CHECKED", "fetch_vllm", "load_vllm", "VLLM_RELEASES", "ReleaseUnsupported"]

#: the vLLM releases :func:`fetch_vllm` knows (each with its wheel's published sha256)
VLLM_RELEASES = tuple(sorted(_vllm.RELEASES, key=release_key))
ReleaseUnsupported = _vllm.ReleaseUnsupported


def fetch_vllm(release: str = _vllm.DEFAULT_VERSION, directory: str | None = None, *, quiet: bool = True) -> str:
    """Download vLLM ``release``'s wheel once, check its published sha256, unpack its rejection sampler's files.

    Returns the directory to put on ``sys.path`` (``~/.cache/exactspec/vllm-<release>`` unless ``directory``);
    reused when already there. A release whose v1 rejection sampler is not in its wheel is refused:

    >>> import exactspec as es
    >>> es.published.fetch_vllm("0.34.0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    exactspec.errors.ReleaseUnsupported: vllm 0.34.0 removed the v1 GPU model runner ...
    """
    return _vllm.fetch(release, directory, quiet=quiet)


def load_vllm(release: str = _vllm.DEFAULT_VERSION, directory: str | None = None) -> object:
    """``vllm.v1.sample.rejection_sampler`` of ``release``, fetched and imported, its Triton kernels interpreted.

    Sets ``TRITON_INTERPRET=1`` in this process (Triton reads it when a kernel is defined); triton must not have
    been imported before.

    >>> import exactspec as es
    >>> es.published.load_vllm("0.1.0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: vllm '0.1.0': exactspec knows vllm 0.32.0, 0.33.0, 0.34.0 ...
    """
    return _vllm.load(release, directory)

#: the day the newest releases were read from PyPI
CHECKED = _data.CHECKED


def packages() -> tuple[Package, ...]:
    """The audited packages, in the table's order.

    >>> import exactspec as es
    >>> "transformers" in [p.name for p in es.published.packages()]
    True
    """
    return _data.PACKAGES


def package(name: str) -> Package:
    """One audited package by its PyPI name; ValueError naming the known ones otherwise.

    >>> import exactspec as es
    >>> es.published.package("specdec").pinned
    '0.2.0'
    """
    return _package(name)


def _package(name: str) -> Package:
    for p in _data.PACKAGES:
        if p.name == name:
            return p
    raise InvalidValue(f"no audited package {name!r}; known: {', '.join(p.name for p in _data.PACKAGES)}")


def findings(package: str | None = None) -> tuple[Finding, ...]:
    """Every finding, or those of one package (by PyPI name).

    >>> import exactspec as es
    >>> all(f.package == "specdec" for f in es.published.findings("specdec"))
    True
    """
    if package is None:
        return _data.FINDINGS
    _package(package)            # names the known packages when this one is not
    return tuple(f for f in _data.FINDINGS if f.package == package)


def finding(id: str) -> Finding:
    """One finding by its id; ValueError naming the close ones otherwise.

    >>> import exactspec as es
    >>> es.published.finding("transformers-uag-permuted").package
    'transformers'
    """
    for f in _data.FINDINGS:
        if f.id == id:
            return f
    prefix = id.split("-")[0]
    close = [f.id for f in _data.FINDINGS if f.id.startswith(prefix)] or [f.id for f in _data.FINDINGS]
    raise InvalidValue(f"no finding {id!r}; known: {', '.join(close)}")


def tables(package: str | None = None) -> dict[str, str]:
    """The two Markdown tables, ``{"packages": ..., "rows": ...}``, for every package or one.

    >>> import exactspec as es
    >>> es.published.tables("specdec")["packages"].splitlines()[2].startswith("| specdec | 0.2.0 |")
    True
    """
    mine = findings(package)
    chosen = _data.PACKAGES if package is None else (_package(package),)
    return {"packages": packages_table(mine, chosen, CHECKED), "rows": rows_table(mine, chosen)}


def write_tables(*paths: str | pathlib.Path) -> list[str]:
    """Render the tables into each document's marked blocks; return the paths whose text changed.

    >>> import exactspec as es, tempfile, pathlib
    >>> from exactspec.published._render import BLOCKS
    >>> doc = pathlib.Path(tempfile.mkdtemp()) / "t.md"
    >>> _ = doc.write_text(BLOCKS["packages"][0] + "\\nold\\n" + BLOCKS["packages"][1] + "\\n")
    >>> es.published.write_tables(doc) == [str(doc)] and "| specdec |" in doc.read_text()
    True
    """
    rendered = tables()
    changed = []
    for path in map(pathlib.Path, paths):
        text = path.read_text()
        present = {name: body for name, body in rendered.items() if f"findings:{name} begin" in text}
        new = replace_blocks(text, present, str(path)) if present else text
        if not present:
            raise InvalidValue(f"{path}: holds no findings block to render into")
        if new != text:
            path.write_text(new)
            changed.append(str(path))
    return changed
