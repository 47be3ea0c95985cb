"""The house rules of exactspec's source, read from the source with ``ast``.

One implementation per job (no module-level switch, no environment variable choosing a path, no
import hook for old module paths), no private name imported across packages, every public
exception class in ``exactspec/errors.py``, and no module over about 800 lines without the reason
in its docstring. The import cycles are checked by ``tests/test_import_layers.py``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import exactspec as es

PACKAGE = pathlib.Path(es.__file__).parent
#: a module longer than this says in its docstring why it is kept as one module
LONG_MODULE = 850
REASON = "kept as one module"


def _modules() -> list[tuple[str, pathlib.Path, bool]]:
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out.append((".".join(parts[:-1] if is_pkg else parts), f, is_pkg))
    return out


MODULES = _modules()


def _is_package(dotted: str) -> bool:
    return (PACKAGE.parent / dotted.replace(".", "/") / "__init__.py").exists()


def _top_level(body: list[ast.stmt]):
    """The statements that run when the module is imported, outside functions (into if/try blocks)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]:
                yield from _top_level(block)


def _code_nodes(tree: ast.AST):
    """Every node of the module except string constants (generated source held in a string is not code here)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            yield node


def test_no_module_level_switch():
    """No name is bound to True/False at module level: a switch between an old and a new path."""
    found = []
    for name, f, _ in MODULES:
        for node in _top_level(ast.parse(f.read_text()).body):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, bool):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.append(f"{name}:{node.lineno} {', '.join(ast.unparse(t) for t in targets)}")
    assert found == []


def test_no_legacy_path():
    """No function or parameter selects an older path (``legacy_path()``, ``legacy_paths()``, ``legacy=``)."""
    found = []
    for name, f, _ in MODULES:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # numpy's "legacy" generator (np.random.mtrand) is another sense of the word
                if node.name.lower().startswith("legacy_path"):
                    found.append(f"{name}:{node.lineno} def {node.name}")
                args = node.args
                for a in args.posonlyargs + args.args + args.kwonlyargs:
                    if a.arg.lower() in ("legacy", "old_path", "legacy_path"):
                        found.append(f"{name}:{node.lineno} {node.name}({a.arg}=...)")
    assert found == []


def test_no_environment_switch():
    """exactspec reads no EXACTSPEC_* environment variable to choose how it computes."""
    found = []
    for name, f, _ in MODULES:
        text = f.read_text()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "environ":
                line = text.splitlines()[node.lineno - 1]
                if "EXACTSPEC_" in line:
                    found.append(f"{name}:{node.lineno}")
    assert found == []


def test_no_import_hook():
    """No module adds a finder to ``sys.meta_path`` (old module paths are not kept importable by a hook)."""
    found = []
    for name, f, _ in MODULES:
        for node in _code_nodes(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("meta_path", "path_hooks"):
                found.append(f"{name}:{node.lineno} sys.{node.attr}")
    assert found == []


def _private_owner(dotted: str) -> str | None:
    """The package a dotted name is private to (the package holding its first private part), or None if public."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:i])
            return owner if _is_package(owner) else owner.rpartition(".")[0]
    return None


def cross_package_private_imports() -> list[str]:
    """``module:line name`` for each private name (or name in a private module) imported from outside its package."""
    found = []
    for name, f, is_pkg in MODULES:
        package = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != "exactspec" and not source.startswith("exactspec."):
                continue
            for alias in node.names:
                owner = _private_owner(f"{source}.{alias.name}")
                if owner is not None and not (name == owner or name.startswith(owner + ".")):
                    found.append(f"{name}:{node.lineno} {source}.{alias.name}")
    return found


def test_no_private_name_across_packages():
    """A private name (``_x``, or any name of a private module) is imported only inside the package that owns it."""
    assert cross_package_private_imports() == []


def test_the_private_import_check_can_fail(tmp_path, monkeypatch):
    """The check above sees a private name imported from a sibling package (it is not vacuous)."""
    pkg = tmp_path / "exactspec"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for p in (pkg, pkg / "a", pkg / "b"):
        (p / "__init__.py").write_text("")
    (pkg / "a" / "m.py").write_text("_secret = 1\n")
    (pkg / "b" / "n.py").write_text("from ..a.m import _secret\n")
    (pkg / "a" / "k.py").write_text("from .m import _secret\n")
    import sys
    me = sys.modules[__name__]
    monkeypatch.setattr(me, "PACKAGE", pkg)
    monkeypatch.setattr(me, "MODULES", _modules())
    assert cross_package_private_imports() == ["exactspec.b.n:1 exactspec.a.m._secret"]


def _exception_bases() -> set[str]:
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return names | {"Exception", "BaseException", "ValueError", "TypeError", "RuntimeError", "AssertionError",
                    "ArithmeticError", "LookupError", "KeyError", "IndexError", "NotImplementedError"}


def test_public_exceptions_live_in_errors():
    """Every public exception class is defined in ``exactspec/errors.py`` (private control-flow signals aside)."""
    bases = _exception_bases()
    found = []
    for name, f, _ in MODULES:
        if name == "exactspec.errors":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                named = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases}
                if named & bases:
                    found.append(f"{name}:{node.lineno} {node.name}")
    assert found == []


@pytest.mark.parametrize("name,f", [(n, f) for n, f, _ in MODULES], ids=[n for n, _, _ in MODULES])
def test_long_modules_say_why(name, f):
    """A module over about 800 lines says in its docstring why it is kept as one module."""
    text = f.read_text()
    lines = text.count("\n")
    if lines <= LONG_MODULE:
        return
    doc = ast.get_docstring(ast.parse(text)) or ""
    says_why = REASON in " ".join(doc.lower().split())
    assert says_why, f"{name} has {lines} lines and no '{REASON}: <why>' in its docstring"
