"""Every notebook in ``notebooks/`` runs top to bottom, from any working directory, and its committed
outputs are current.

Each notebook is copied into a temporary directory and executed there with nbclient, on the ``python3``
kernel that ipykernel installs into the current environment (no ``ipykernel install --user`` needed). The
kernel's working directory is that temporary directory (outside the repository, outside ``notebooks/``),
and it imports ``exactspec`` from this checkout through a folder that holds nothing but a link to the
package: a notebook that imports anything else from the repository (``examples/``, ``tests/``) or reads a
relative path fails here. A cell that raises (including a failed ``assert``) fails the run.

The notebooks are committed *with* outputs (so plots show on a code host). The staleness check compares,
cell by cell, the committed text outputs with the fresh ones: ``stdout`` streams (consecutive chunks
joined; ``stderr`` ignored), and the ``text/plain`` and ``text/markdown`` parts of display data and
execute results. Images (and HTML) are compared by presence and count only, never by bytes. Before the
comparison, what legitimately varies run to run is normalised (see :func:`normalise`): durations
(``0.123 s``, ``12 ms``), rates (``21120/s``, ``5420 instances/s``), memory addresses (``0x7f...``), and
absolute paths (the temporary directory, the checkout, ``/tmp/ipykernel_.../...py``). A mismatch fails
with the notebook, the cell and a diff of the first differing lines.

Refresh the committed outputs after changing a notebook or the library (each notebook is executed the
same way, in a temporary directory, and written back in place)::

    python tests/test_notebooks.py --update                          # every notebook
    python tests/test_notebooks.py --update notebooks/02_audit_a_sampler.ipynb
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT = 600
UPDATE_COMMAND = "python tests/test_notebooks.py --update"


# -- execution -------------------------------------------------------------------------------------

@contextlib.contextmanager
def _jupyter_environment(scratch: Path) -> Iterator[dict]:
    """The kernel's environment, and the parent's Jupyter settings for the duration of a run.

    ``JUPYTER_PREFER_ENV_PATH`` resolves ``python3`` to this environment's kernelspec before any
    user-level one; connection files and IPython's profile stay out of the home directory.
    """
    site = scratch / "site"
    site.mkdir(parents=True, exist_ok=True)
    link = site / "exactspec"
    if not link.exists():
        try:
            link.symlink_to(ROOT / "exactspec", target_is_directory=True)
        except OSError:     # no symlinks (some Windows setups): fall back to the whole checkout
            site = ROOT
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and Path(p).resolve() != ROOT]
    env = dict(os.environ, IPYTHONDIR=str(scratch / "ipython"), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(site)] + inherited), PYTHONHASHSEED="0")
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PREFER_ENV_PATH", "JUPYTER_RUNTIME_DIR")}
    os.environ["JUPYTER_PREFER_ENV_PATH"] = "1"
    os.environ["JUPYTER_RUNTIME_DIR"] = str(scratch / "runtime")
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute(path: Path, scratch: Path) -> Any:
    """Execute a copy of the notebook at ``path`` in ``scratch/run`` (its working directory); return it.

    Raises ``nbclient.exceptions.CellExecutionError`` (naming the cell) if a cell raises.
    """
    import nbclient

    workdir = scratch / "run"
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / path.name
    shutil.copyfile(path, copy)
    nb = nbformat.read(copy, as_version=4)
    with _jupyter_environment(scratch) as env:
        client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", record_timing=False,
                                         resources={"metadata": {"path": str(workdir)}})
        client.execute(env=env)
    return nb


# -- comparison ------------------------------------------------------------------------------------

_RATE = re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)?(?:\s+[A-Za-z]+)?/s\b")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:s|ms|us|µs|ns|sec|seconds)\b")
_TIMING_FIELD = re.compile(r"""\b(seconds|elapsed|duration|wall_s|time_s)(["']?\s*[=:]\s*)\d+(?:\.\d+)?(?:e[-+]?\d+)?""")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
_PATH = re.compile(r"(?<![\w./:~-])/(?:[\w.~-]+/)+[\w.~-]*")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def normalise(text: str, paths: tuple[str, ...] = ()) -> str:
    """Replace what legitimately varies between runs by placeholders.

    >>> normalise("5000 samples, 21120/s; 21537 instances in 6.08 s = 5420 instances/s")
    '5000 samples, <rate>; 21537 instances in <duration> = <rate>'
    >>> normalise("Counterexample(..., audited=2, seconds=0.000480277000406204, shrink_steps=0)")
    'Counterexample(..., audited=2, seconds=<duration>, shrink_steps=0)'
    >>> normalise("<Foo object at 0x7f3a2b1c0d90> from /tmp/ipykernel_81/2301.py:11, TV 1/4, p/q")
    '<Foo object at 0x<address>> from <path>:11, TV 1/4, p/q'
    """
    for p in sorted(paths, key=len, reverse=True):
        if p:
            text = text.replace(p, "<path>")
    text = _ANSI.sub("", text)
    text = _TIMING_FIELD.sub(r"\1\2<duration>", text)
    text = _RATE.sub("<rate>", text)
    text = _DURATION.sub("<duration>", text)
    text = _ADDRESS.sub("0x<address>", text)
    text = _PATH.sub("<path>", text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def cell_text(cell: Any, paths: tuple[str, ...] = ()) -> str:
    """The outputs of a code cell that the staleness check compares, as one normalised text."""
    blocks: list[str] = []
    stdout: list[str] = []

    def flush() -> None:
        if stdout:
            blocks.append("[stdout]\n" + normalise("".join(stdout), paths))
            stdout.clear()

    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            if out.get("name") == "stdout":
                stdout.append(out.get("text", ""))
            continue
        flush()
        if kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            parts = [f"[{kind.replace('execute_result', 'display_data')}: {', '.join(sorted(data))}]"]
            for mime in ("text/markdown", "text/plain"):
                if mime in data:
                    value = data[mime]
                    parts.append(normalise(value if isinstance(value, str) else "".join(value), paths))
            blocks.append("\n".join(parts))
        elif kind == "error":
            blocks.append(f"[error: {out.get('ename')}: {out.get('evalue')}]")
    flush()
    return "\n".join(blocks)


def stale_cells(committed: Any, fresh: Any, paths: tuple[str, ...] = (), context_lines: int = 20) -> list[str]:
    """One message per code cell whose committed outputs differ from the fresh ones (empty: all current)."""
    problems = []
    if len(committed.cells) != len(fresh.cells):
        return [f"the notebook has {len(committed.cells)} cells, its fresh run {len(fresh.cells)}"]
    if all(not c.get("outputs") for c in committed.cells if c.cell_type == "code"):
        return ["committed without outputs"]
    for index, (old, new) in enumerate(zip(committed.cells, fresh.cells)):
        if old.cell_type != "code":
            continue
        a, b = cell_text(old, paths), cell_text(new, paths)
        if a == b:
            continue
        diff = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "committed", "fresh", lineterm="", n=1))
        shown = diff[:context_lines] + ([f"... ({len(diff) - context_lines} more diff lines)"]
                                        if len(diff) > context_lines else [])
        label = f"cell {index}" + (f" (In [{old.execution_count}])" if old.get("execution_count") else "")
        problems.append(f"{label}: committed outputs are stale\n" + "\n".join("    " + line for line in shown))
    return problems


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# -- the tests -------------------------------------------------------------------------------------

_FRESH: dict[Path, Any] = {}


def _fresh(path: Path, tmp_path_factory: Any) -> tuple[Any, tuple[str, ...]]:
    """Execute ``path`` once per session (both tests below share the run); re-raise its failure."""
    if path not in _FRESH:
        scratch = tmp_path_factory.mktemp(path.stem)
        try:
            _FRESH[path] = (execute(path, scratch), (str(scratch), str(scratch.resolve()), str(ROOT)))
        except Exception as exc:  # noqa: BLE001 - remembered, re-raised for both tests
            _FRESH[path] = exc
    result = _FRESH[path]
    if isinstance(result, Exception):
        raise result
    return result


try:
    import pytest
except ImportError:  # running as a script (--update) without pytest installed
    pytest = None

if pytest is not None:
    ids = [p.name for p in PATHS]

    def test_there_are_notebooks() -> None:
        assert PATHS, f"no notebooks found in {NOTEBOOKS}"

    @pytest.mark.parametrize("path", PATHS, ids=ids)
    def test_notebook_is_self_contained(path: Path) -> None:
        """No imports from the repository but exactspec, no relative paths, no sys.path or cwd tricks."""
        nb = nbformat.read(path, as_version=4)
        forbidden = re.compile(r"^\s*(from|import)\s+(examples|tests|benchmarks)\b|sys\.path|os\.chdir|\.\./",
                               re.MULTILINE)
        bad = [(i, m.group(0).strip()) for i, c in enumerate(nb.cells) if c.cell_type == "code"
               for m in forbidden.finditer(c.source)]
        assert not bad, f"{path.name}: cells depend on the repository layout or working directory: {bad}"

    @pytest.mark.slow   # executes the notebook (5-15 s each)
    @pytest.mark.parametrize("path", PATHS, ids=ids)
    def test_notebook_runs(path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        _fresh(path, tmp_path_factory)   # raises CellExecutionError, naming the cell, if any cell raises

    @pytest.mark.slow
    @pytest.mark.parametrize("path", PATHS, ids=ids)
    def test_notebook_outputs_are_current(path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        fresh, paths = _fresh(path, tmp_path_factory)
        problems = stale_cells(nbformat.read(path, as_version=4), fresh, paths)
        if problems:
            pytest.fail(f"{_rel(path)}: the committed outputs are not what the notebook prints "
                        f"today ({len(problems)} cell(s)); refresh them with `{UPDATE_COMMAND} "
                        f"{_rel(path)}` and review the diff.\n" + "\n".join(problems[:3]),
                        pytrace=False)


# -- refreshing the committed outputs --------------------------------------------------------------

def update(paths: list[Path]) -> int:
    """Execute each notebook in a temporary directory and write it back in place, with its outputs."""
    for path in paths:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="exactspec-nb-") as tmp:
            nb = execute(path, Path(tmp))
        nbformat.write(nb, path)
        print(f"{_rel(path)}: executed and written in {time.perf_counter() - started:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Refresh the committed outputs of exactspec's notebooks.")
    parser.add_argument("--update", action="store_true", help="execute the notebooks and write them back")
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to refresh (default: all)")
    args = parser.parse_args(argv)
    if not args.update:
        parser.error("nothing to do: pass --update (the checks themselves run under pytest)")
    paths = [p.resolve() for p in args.notebooks] or PATHS
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    return update(paths)


if __name__ == "__main__":
    sys.exit(main())
