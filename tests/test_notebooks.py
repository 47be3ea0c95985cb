"""Every notebook in ``notebooks/`` runs top to bottom without an error.

Each notebook is executed with nbclient on the ``python3`` kernel that ipykernel installs into
the current environment (no ``ipykernel install --user`` needed), with the notebooks folder as
the working directory. A cell that raises (including a failed ``assert``) fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert PATHS, f"no notebooks found in {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Resolve "python3" to this environment's kernelspec before any user-level one, and keep
    # connection files and IPython's profile out of the home directory.
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env=env)  # raises CellExecutionError, naming the cell, if any cell raises
