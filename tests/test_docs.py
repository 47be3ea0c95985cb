"""The documentation site: every name it references exists, and ``mkdocs build --strict`` passes.

The fast tests need no mkdocs: every ``::: exactspec.X`` block of ``docs/`` and every
``es.X`` / ``exactspec.X`` the pages mention resolves by import, and the docstring converter
(``docs/griffe_docstrings.py``) does what the API pages rely on. The full strict build, run as the
README documents it (its log checked for warnings, its pages for unresolved cross-references),
runs when mkdocs is installed (``pip install -e '.[docs]'``) and is skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
from fractions import Fraction
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REFERENCE = re.compile(r"^\s*:::\s+(\S+)\s*$", re.M)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_exactspec_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load("hooks")   # imports mkdocs only inside the hook functions


def pages() -> list[pathlib.Path]:
    return sorted(DOCS.rglob("*.md"))


def references() -> list[tuple[str, str]]:
    return [(str(p.relative_to(DOCS)), m.group(1)) for p in pages() for m in REFERENCE.finditer(p.read_text())]


def test_the_docs_exist():
    names = {str(p.relative_to(DOCS)) for p in pages()}
    for page in ("index.md", "getting-started.md", "concepts.md", "catalog.md", "writing-rules.md", "trees.md",
                 "counterexamples-ci.md", "samplers.md", "large-vocabularies.md", "proofs-scale-out.md",
                 "errors.md", "cli.md", "reference/index.md"):
        assert page in names
    assert len(references()) >= 20


@pytest.mark.parametrize("page,target", references())
def test_every_reference_block_resolves(page, target):
    """``::: exactspec.X`` in docs/ names something importable (a rename fails here, and in the build)."""
    assert target.startswith("exactspec"), f"{page}: ::: {target} is outside the package"
    try:
        hooks.resolve(target)
    except hooks.Unverifiable as exc:  # e.g. exactspec.tensor without torch: the build itself needs no torch
        pytest.skip(str(exc))
    except LookupError as exc:
        pytest.fail(f"{page}: ::: {target} does not resolve: {exc}")


def test_every_name_the_pages_mention_exists():
    problems = [p for page in pages() for p in hooks.check_names(page.read_text(), str(page.relative_to(DOCS)))]
    assert not problems, "\n".join(problems)


def test_name_check_catches_a_renamed_function():
    assert hooks.check_names("call `es.audit(...)` and `es.drafts.chain(2)`", "x.md") == []
    assert hooks.check_names("call `es.audit_everything(...)`", "x.md") != []
    assert hooks.check_names("::: exactspec.not_checked_here", "x.md") == []   # mkdocstrings checks those
    assert hooks.resolve("exactspec.drafts.chain.chain") is hooks.resolve("es.drafts.chain")
    with pytest.raises(LookupError):
        hooks.resolve("es.drafts.chain.nope")


def test_generated_pages_come_from_the_code():
    import exactspec as es

    catalog = hooks.catalog_markdown()
    for r in es.rules.catalog():
        assert f"`{r.name}`" in catalog
    errors = hooks.errors_markdown()   # runs every snippet: each must raise exactly its type
    for cls in hooks.public_error_types():
        assert f"## {cls.__name__}" in errors
    assert set(hooks.ERROR_EXAMPLES) >= {c.__name__ for c in hooks.public_error_types()}
    assert "### exactspec audit-sampler" in hooks.cli_help_markdown()


def test_docstring_converter():
    pytest.importorskip("griffe", reason="the griffe extension needs griffe (the docs extra)")
    convert = _load("griffe_docstrings").convert
    text = "Sum.\n\n>>> 1 + 1\n2\n\nSee :func:`~a.b.f` and :class:`X`. Write::\n\n    x = 1\n\nDone."
    assert convert(text) == ("Sum.\n\n```pycon\n>>> 1 + 1\n2\n```\n\nSee `f` and `X`. Write:\n\n```python\nx = 1\n"
                             "```\n\nDone.")
    table = "=====  ====\n``a``  b\n=====  ====\n1      2\n=====  ===="
    assert convert(table).splitlines()[0] == "```text" and "a      b" in convert(table)
    assert "```python" in convert(".. code-block:: python\n\n    y = 2\n")


#: an autoref mkdocs could not resolve is left on the page as its Markdown source, ``[title][identifier]``
#: (the title may hold inline HTML such as ``<code>``); code blocks are left out, where ``a[i][j]`` is code
UNRESOLVED_AUTOREF = re.compile(r"\[[^\[\]]*\]\[([A-Za-z_][\w.\-]*)\]")


def unresolved_autorefs(html: str) -> list[str]:
    """The ``[title][identifier]`` brackets left as text on a rendered page (outside ``<pre>`` blocks).

    >>> unresolved_autorefs('<p>two ([<code>es.stand_in</code>][exactspec.samplers.loops.stand_in]) whose</p>')
    ['[es.stand_in][exactspec.samplers.loops.stand_in]']
    >>> unresolved_autorefs('<p><a href="x">stand_in</a></p><pre><code>p[i][j]</code></pre>')
    []
    """
    text = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    return [m.group(0) for m in UNRESOLVED_AUTOREF.finditer(text)]


def build_warnings(output: str) -> list[str]:
    r"""The ``WARNING`` lines of a ``mkdocs build`` log (what ``--strict`` counts; ``-q`` would hide them).

    >>> build_warnings("INFO    -  Building\nWARNING -  mkdocs_autorefs: errors.md: Could not find x\n")
    ['WARNING -  mkdocs_autorefs: errors.md: Could not find x']
    """
    return [line for line in output.splitlines() if re.match(r"\s*WARNING\b", line)]


def test_the_checks_of_the_build_catch_what_they_look_for():
    page = '<p>see [<code>es.stand_in</code>][exactspec.samplers.loops.stand_in] and [API reference][exactspec.x.Y].</p>'
    assert unresolved_autorefs(page) == ["[es.stand_in][exactspec.samplers.loops.stand_in]", "[API reference][exactspec.x.Y]"]
    assert unresolved_autorefs('<p><a href="../reference/x/#exactspec.x.Y">API reference</a></p>') == []
    assert build_warnings("WARNING -  a\nINFO    -  b\n  WARNING  -  c") == ["WARNING -  a", "  WARNING  -  c"]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
    """One ``mkdocs build --strict`` per test session, as the README documents it (no ``-q``: the log is checked)."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install -e '.[docs]' to build the site")
    site = tmp_path_factory.mktemp("mkdocs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc, site


@pytest.mark.slow   # the build takes 7 s on an idle machine, 20 s on a loaded one
def test_strict_build(built_site):
    """``mkdocs build --strict``: any warning (a broken link, an unresolvable reference) fails it."""
    proc, site = built_site
    log = proc.stdout + proc.stderr
    assert build_warnings(log) == [], log
    assert proc.returncode == 0, log
    assert (site / "catalog" / "index.html").read_text().count("speculative_sampling") >= 2
    assert "raises" in (site / "errors" / "index.html").read_text()


@pytest.mark.slow
def test_no_raw_cross_reference_on_the_rendered_pages(built_site):
    """No ``[title][identifier]`` autoref is left unresolved as text on any built page."""
    _, site = built_site
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 20
    raw = {str(p.relative_to(site)): found for p in pages if (found := unresolved_autorefs(p.read_text()))}
    assert raw == {}


def _nav_pages() -> list[pathlib.Path]:
    """The pages in the order of ``mkdocs.yml``'s nav (the order a reader meets them)."""
    names = re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    return [DOCS / n for n in names]


def _check_getting_started(ns: dict, printed: str) -> None:
    assert "rule stale_draft_probs (claim: biased) — BIASED" in printed
    assert "verdict: biased on this instance over the first 6 tokens: TV ~0.21035" in printed


def _check_writing_rules(ns: dict, printed: str) -> None:
    import exactspec as es
    # the user rule is lossless by enumeration, over a horizon that sees two steps
    rep = es.audit(target=ns["target"], draft=ns["draft"], rule=ns["my_rule"], prompt=(0, 1))
    assert rep.tv == 0 and rep.paths > 0 and rep.claim == "lossless" and rep.scope["complete"]


def _check_trees(ns: dict, printed: str) -> None:
    import exactspec as es
    kw = dict(target=ns["target"], rule=es.rules.mss, prompt=(0, 1))
    assert es.audit(draft=ns["draft"], proposer=ns["tree"], **kw).lossless
    assert es.audit(draft=ns["draft"], proposer=ns["topk_soft"], **kw).verdict == "biased"
    assert es.audit(proposer=ns["merged"], **kw).lossless


def _check_counterexamples(ns: dict, printed: str) -> None:
    import exactspec as es
    assert "the sequence (0, 0) is emitted with probability 1/4 but the target gives 1/2 (exact TV 1/4)" in printed
    assert "no counterexample for speculative_sampling in this space: 21537 instances audited exactly" in printed
    # the property test's body on one instance of the kind es.strategies.instances() draws
    half = es.models.context_free(("1/2", "1/2"))
    inst = dict(target=half, draft=es.models.context_free(("1/3", "2/3")), proposer=es.drafts.chain(1),
                prompt=(0,), tokens=2)
    ns["test_my_rule_is_lossless"].hypothesis.inner_test(inst)
    ns["test_my_rule"](es.assert_lossless)
    ns["test_sampler_is_lossless"]()      # the sampler CI assertion: a search that comes back empty
    assert ns["pytestmark"].kwargs == {"adapter": "numpy", "vocab": 3}


def _check_samplers(ns: dict, printed: str) -> None:
    # the bug zoo's shared uniform is biased; transformers' own sampler is lossless up to float32 rounding: on
    # torch's float32 grid (the default rng model) its r <= p/q accepts one grid point more than the strict
    # reference; with ideal uniforms its law is the reference's exactly (algorithmic TV 0)
    import exactspec as es
    assert "biased on this instance over the first 4 tokens" in printed
    r = ns["r"]
    assert r.verdict == "lossless" and r.extra["rng_model"] == "native"
    assert 0 < Fraction(r.extra["reference_tv"]) < Fraction(1, 10 ** 7)
    ideal = es.audit_sampler(ns["_speculative_sampling"], adapter="transformers", target=ns["target"],
                             draft=ns["draft"], proposer=es.drafts.chain(3), prompt=(0,), tokens=3,
                             rng_model="continuous")
    assert ideal.verdict == "lossless" and ideal.extra["reference_tv"] == "0"
    # the worked example of the float boundary: float32 rounding, decided by the float64 run
    assert "(TV 7.18e-18 <= the 2**-40 floor); the TV at float32, 1.37e-08, is float32 rounding" in printed
    assert ns["rep"].verdict == "lossless" and ns["rep"].extra["rounding_tv"] == "0"


def _check_real_code(ns: dict, printed: str) -> None:
    # the hand-written loop is lossless (its float64 run, torch's generator at float64, within float64 rounding),
    # the draft bonus is biased, generate is lossless
    r = ns["r"]
    assert r.verdict == "lossless" and Fraction(r.extra["float_boundary"]["algorithmic_tv"]) <= r.tolerance
    assert ns["bad"].verdict == "biased" and ns["bad"].tv > Fraction(1, 10)
    assert ns["hf"].verdict == "lossless" and ns["hf"].tv <= Fraction(1, 2 ** 20)
    assert "biased on this instance (one whole run of the loop" in printed


def _check_proofs(ns: dict, printed: str) -> None:
    assert ns["proof"].proven is True and ns["refutation"].proven is False
    assert printed.startswith("PROVEN: speculative_sampling emits exactly the target law")
    assert "biased on this instance" in printed


#: what each page's examples say, checked right after the page ran (later pages reuse names)
PAGE_CHECKS = {"getting-started.md": _check_getting_started, "writing-rules.md": _check_writing_rules,
               "trees.md": _check_trees, "counterexamples-ci.md": _check_counterexamples,
               "samplers.md": _check_samplers, "real-code.md": _check_real_code, "proofs-scale-out.md": _check_proofs}


@pytest.mark.slow
def test_docs_examples_run_and_say_what_the_pages_say(capsys):
    """Every ``python`` block of the pages runs, in nav order, in one namespace (as a reader types them)."""
    torch = pytest.importorskip("torch")   # the samplers page audits transformers' sampler
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ns: dict = {}
    checked = []
    try:
        for page in _nav_pages():
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)):
                try:
                    exec(compile(block, f"{page.name}[python block {i}]", "exec"), ns)
                except Exception as exc:  # name the page and the block
                    raise AssertionError(f"{page.relative_to(ROOT)}, python block {i}: {type(exc).__name__}: "
                                         f"{exc}") from exc
            name = str(page.relative_to(DOCS))
            if name in PAGE_CHECKS:
                PAGE_CHECKS[name](ns, capsys.readouterr().out)
                checked.append(name)
    finally:
        torch.set_num_threads(threads)
    assert sorted(checked) == sorted(PAGE_CHECKS)
