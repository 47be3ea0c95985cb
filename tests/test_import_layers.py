"""The import layers: no cycle among exactspec's modules (module- or function-level imports), and the layering rules.

The graph is read from the source with ``ast``; every ``import`` / ``from ... import`` statement counts,
wherever it stands (module level, inside a function, under ``if TYPE_CHECKING:``), relative imports
resolved against the importing module's package. Importing ``a.b.c`` also runs ``a.b``'s ``__init__``,
but that implicit edge is left out: a package ``__init__`` that imports its own submodules is not a
cycle unless a real module-to-module cycle exists.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

import exactspec as es

PACKAGE = pathlib.Path(es.__file__).parent


def modules(package: pathlib.Path = PACKAGE) -> dict[str, tuple[pathlib.Path, bool]]:
    """Every module of ``package``: dotted name -> (file, is a package ``__init__``)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _runs_at_import(body: list[ast.stmt]):
    """The statements of a module body that run when it is imported: into ``if``/``try``/class bodies, never into
    a function body, nor into ``if TYPE_CHECKING:`` (which never runs)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            test = node.test
            if not (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                    or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                yield from _runs_at_import(node.body)
            yield from _runs_at_import(node.orelse)
        elif isinstance(node, ast.Try):
            for block in [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]:
                yield from _runs_at_import(block)
        elif isinstance(node, ast.ClassDef):   # a class body runs at import time
            yield from _runs_at_import(node.body)


def import_graph(package: pathlib.Path = PACKAGE, *, lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports.

    ``import a.b``, ``from . import x``, ``from .x import y`` and ``from ..x import y``; ``from m import name``
    is an edge to ``m.name`` when that is a module, else to ``m``. ``lazy`` (the default) reads every import
    statement of the module; ``lazy=False`` only those that run when the module is imported.
    """
    mods = modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        pkg = (name if is_pkg else name.rpartition(".")[0]).split(".")
        edges: set[str] = set()
        for node in (ast.walk(tree) if lazy else _runs_at_import(tree.body)):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    module = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module not in mods:
                    continue
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    edges.add(sub if sub in mods else module)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it is acyclic (iterative DFS)."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(graph: dict[str, set[str]], importers: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """``importer -> imported`` for every edge from a module under ``importers`` to one under ``forbidden``."""
    return sorted(f"{a} -> {b}" for a, bs in graph.items() if _in(a, importers) for b in bs if _in(b, forbidden))


# -- the checker can fail -----------------------------------------------------------------------------------

def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None      # a diamond is no cycle
    assert find_cycle({}) is None


def test_the_reader_sees_relative_function_level_and_type_checking_imports(tmp_path):
    # a tiny package: a -> b at module level, b -> a only inside a function, c -> a only under TYPE_CHECKING
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n    return x\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.a\n")
    lazy, eager = import_graph(pkg), import_graph(pkg, lazy=False)
    assert lazy == {"toy": {"toy.a"}, "toy.a": {"toy.sub.b"}, "toy.sub": set(), "toy.sub.b": {"toy.a"},
                    "toy.sub.c": {"toy.a"}}
    assert eager["toy.sub.b"] == set() and eager["toy.sub.c"] == set()
    assert find_cycle(lazy) == ["toy.a", "toy.sub.b", "toy.a"]
    assert find_cycle(eager) is None
    assert violations(lazy, ("toy.sub",), ("toy.a",)) == ["toy.sub.b -> toy.a", "toy.sub.c -> toy.a"]


def test_the_reader_sees_the_packages_own_imports():
    g = import_graph()
    assert "exactspec.samplers.adapters.base" in g["exactspec.samplers.adapters.registry"]   # from .base import Adapter
    assert "exactspec.drafts" in g["exactspec"]                                              # from . import drafts
    assert "exactspec.rules.record" in g["exactspec.rules.chain"]                            # from .record import Rule
    assert "exactspec.errors" in g["exactspec.rules.record"]                                 # from ..errors import ...
    assert "exactspec._device" in g["exactspec.samplers.loops.loop_audit"]                   # from ..._device import
    assert "exactspec.samplers.torch_draws.torch_rng" in g["exactspec.samplers"]              # in a function


# -- no cycle ------------------------------------------------------------------------------------------------

def test_the_module_level_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph(lazy=False))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: cycles that close only through a function-level import, still present. rules.record's ``as_rule("name")``
#: looks the name up in the catalog (the exactspec.rules package). Each must still be a cycle (a fixed one
#: leaves this list), and no other may appear.
KNOWN_LAZY_CYCLES = [("exactspec.rules.record", "exactspec.rules")]


def test_function_level_imports_close_no_cycle():
    g = import_graph()
    for a, b in KNOWN_LAZY_CYCLES:
        assert b in g[a], f"{a} no longer imports {b}: remove it from KNOWN_LAZY_CYCLES"
        g[a].discard(b)           # break the known cycle at its lazy edge, then look for any other
    cycle = find_cycle(g)
    assert cycle is None, "import cycle through a function-level import: " + " -> ".join(cycle)


def test_the_interception_and_the_generators_form_no_circle():
    g = import_graph()
    for gen in ("randomness.numpy_rng", "torch_draws.torch_rng"):
        assert f"exactspec.samplers.{gen}" not in g["exactspec.samplers.randomness.interception"]
        assert "exactspec.samplers.randomness.interception" in g[f"exactspec.samplers.{gen}"]


# -- the layers ----------------------------------------------------------------------------------------------

SAMPLERS = "exactspec.samplers"
RANDOMNESS, ADAPTERS, LOOPS = f"{SAMPLERS}.randomness", f"{SAMPLERS}.adapters", f"{SAMPLERS}.loops"
TORCH_DRAWS = f"{SAMPLERS}.torch_draws"
AUDIT = (f"{SAMPLERS}.audit", f"{SAMPLERS}.search", f"{SAMPLERS}.instance", f"{SAMPLERS}.rounding")

#: (who, must not import, why)
LAYERS = [
    (("exactspec.tensor", "exactspec.statistical"), (SAMPLERS,),
     "the tensor law engine and the statistical audit sit below the sampler layer"),
    ((RANDOMNESS,), (TORCH_DRAWS, ADAPTERS, LOOPS, *AUDIT),
     "the randomness layer sits below the torch draws, the adapters, the loop audit and the sampler audit"),
    ((TORCH_DRAWS,), (ADAPTERS, LOOPS, *AUDIT),
     "the torch draws sit below the adapters, the loop audit and the sampler audit"),
    ((ADAPTERS,), (LOOPS, *AUDIT), "the adapters sit below the loop audit and the sampler audit"),
    (AUDIT, (LOOPS,), "the sampler audit and search sit below the whole-loop audit (which uses them)"),
    ((f"{SAMPLERS}.instance", f"{SAMPLERS}.rounding"), (f"{SAMPLERS}.search", f"{SAMPLERS}.audit"),
     "the one-instance audit sits below the search and audit_sampler (which use it)"),
    ((f"{SAMPLERS}.search",), (f"{SAMPLERS}.audit",), "the search sits below audit_sampler (neither imports the other's layer above it)"),
    (("exactspec.protocols",), ("exactspec",), "the rule API protocols import nothing from exactspec"),
]


@pytest.mark.parametrize("importers, forbidden, why", LAYERS, ids=[layer[0][0] for layer in LAYERS])
def test_a_layer_imports_nothing_from_the_layers_above_it(importers, forbidden, why):
    bad = violations(import_graph(), importers, forbidden)
    assert not bad, f"{why}: " + "; ".join(bad)


def test_no_layer_below_the_samplers_package_imports_the_package_itself():
    # exactspec.samplers (the package __init__) imports every layer: importing it from below closes a circle
    g = import_graph()
    bad = sorted(f"{a} -> {SAMPLERS}" for a, bs in g.items() if _in(a, (RANDOMNESS, TORCH_DRAWS, ADAPTERS, LOOPS, *AUDIT))
                 and SAMPLERS in bs)
    assert not bad, "; ".join(bad)


def test_the_engine_imports_neither_rules_nor_samplers_nor_counterexamples_nor_the_cli():
    bad = violations(import_graph(), ("exactspec.enumerate",),
                     ("exactspec.rules", SAMPLERS, "exactspec.counterexamples", "exactspec.cli"))
    assert not bad, "the engine never knows which rule it runs: " + "; ".join(bad)


def test_the_adapter_base_sits_below_the_registry_and_the_adapters():
    g = import_graph()
    for module in ("registry", "torch_adapters", "explicit_uniforms", "torch_tree_adapter"):
        assert f"{ADAPTERS}.base" in g[f"{ADAPTERS}.{module}"]
        assert f"{ADAPTERS}.registry" not in g[f"{ADAPTERS}.{module}"] and ADAPTERS not in g[f"{ADAPTERS}.{module}"]
    assert es.samplers.Adapter is es.samplers.adapters.Adapter is es.samplers.adapters.base.Adapter


def test_statistical_imports_neither_the_tensor_package_nor_the_samplers():
    assert not {m for m in import_graph()["exactspec.statistical"] if _in(m, ("exactspec.tensor", SAMPLERS))}
    assert es.statistical._adapter_named("numpy") is es.samplers.get_adapter("numpy")   # the registry's, by name
    # and the samplers package does not import the statistical audit (the circle of a hand-down is gone)
    assert "exactspec.statistical" not in import_graph()[SAMPLERS]


# -- every module imports ------------------------------------------------------------------------------------

def test_every_module_imports_in_a_fresh_interpreter():
    names = [n for n in modules() if not n.endswith("__main__")]      # __main__ runs the CLI
    code = ("import importlib, json, sys\nbad = {}\n"
            f"for name in {names!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception as exc:\n        bad[name] = f'{type(exc).__name__}: {exc}'\n"
            "print(json.dumps(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def test_importing_exactspec_does_not_import_torch():
    # torch takes ~1 s to import: the CLI and the exact engine must not pay it (the torch-only names of
    # exactspec.samplers are imported on first use)
    code = "import sys, exactspec, exactspec.samplers as s; print('torch' in sys.modules, callable(s.stand_in))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


# -- the layout of issue 36 ---------------------------------------------------------------------------------

#: module paths of earlier layouts (issue 17's flat modules, issue 36's moves): none imports any more
OLD_PATHS = ["interception", "numpy_rng", "torch_rng", "lazy_values", "lazy_draws", "base", "torch_adapters",
             "explicit_uniforms", "torch_tree_adapter", "stand_in", "hf_stand_in", "loop_audit",
             "sampler_audit", "sampler_search", "float_boundary", "adapter_fit", "randomness.torch_rng",
             "randomness.lazy_draws", "randomness.lazy_worlds", "adapters.vllm_v1", "adapters.sglang_kernels",
             "adapters.triton_kernels"]


@pytest.mark.parametrize("old", OLD_PATHS)
def test_old_module_paths_no_longer_import(old):
    # no import hook keeps them: the code, the tests, the benchmarks and the docs name the modules where they are
    pytest.importorskip("torch")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{SAMPLERS}.{old}")


def test_the_package_names_stay_what_they_name():
    pytest.importorskip("torch")
    from exactspec import samplers
    stand_in_fn, tree_buffers_fn = samplers.stand_in, samplers.tree_buffers
    for module in ("loops.stand_in", "adapters.tree_buffers", "torch_draws.torch_rng", "adapters.engines.vllm_v1"):
        importlib.import_module(f"{SAMPLERS}.{module}")
    # the package's functions named like a module stay the functions once the modules are imported
    assert samplers.stand_in is stand_in_fn and samplers.tree_buffers is tree_buffers_fn and callable(stand_in_fn)
    # exactspec.samplers.adapters re-exports the registry
    assert set(samplers.adapters.registry.__all__) <= set(vars(samplers.adapters))
    assert samplers.adapters.get_adapter is samplers.adapters.registry.get_adapter
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{SAMPLERS}.no_such_module")


def _imports_torch_at_module_level(path: pathlib.Path) -> bool:
    for node in _runs_at_import(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def test_the_randomness_layer_imports_no_torch_at_module_level():
    # torch's randomness is in samplers/torch_draws (imported where torch is); the core below it runs without torch
    randomness = [n for n in modules() if _in(n, (RANDOMNESS,))]
    assert len(randomness) >= 6
    bad = [n for n in randomness if _imports_torch_at_module_level(modules()[n][0])]
    assert bad == []
    assert _imports_torch_at_module_level(modules()[f"{SAMPLERS}.adapters.tree_buffers"][0])   # the check can fail


def test_the_samplers_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import exactspec, exactspec.samplers as s, exactspec.samplers.randomness, exactspec.samplers.audit\n"
            "import exactspec.samplers.search, exactspec.samplers.loops.loop_audit, exactspec.samplers.adapters.fit\n"
            "print(s.get_adapter('numpy').family)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["chain"]


def test_the_interception_knows_its_own_files_and_modules_where_they_are():
    # the frames it skips in user_site (its own files, the engine, fields.py) and the modules that call
    # libraries on exactspec's behalf are named by path and module name: a move must carry them along
    from exactspec.samplers.randomness import interception as I
    assert all(pathlib.Path(f).is_file() for f in I._OWN)
    assert all(pathlib.Path(f).is_file() for f in es.fields._SAMPLER_LAYER) and len(es.fields._SAMPLER_LAYER) == 5
    assert pathlib.Path(I._ENGINE).is_dir() and pathlib.Path(I._ENGINE, "rng.py").is_file()
    assert pathlib.Path(I._FIELDS).is_file()
    assert all(importlib.util.find_spec(m) is not None for m in I._LIBRARY_CALLERS)
    assert sorted(I._PATCHES) == ["numpy", "torch"]
