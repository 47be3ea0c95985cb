"""MkDocs hooks: pages generated from the package at build time, and a check of every name the pages use.

Loaded by ``mkdocs.yml`` (``hooks: [docs/hooks.py]``). Nothing here is hand-copied from the code:

- ``<!-- exactspec:catalog -->`` becomes the rule catalog, built from ``es.rules.catalog()``;
- ``<!-- exactspec:check-configurations -->`` the configurations ``exactspec check`` audits
  (``exactspec.instances.check_cases()``);
- ``<!-- exactspec:errors -->`` every public ``es.ExactSpecError`` subclass with its docstring and a
  message produced by running a small snippet that must raise exactly that type (``ERROR_EXAMPLES``);
  a new public error type without a snippet, or a snippet that stops raising it, fails the build;
- ``<!-- exactspec:cli-help -->`` the ``--help`` text of every ``exactspec`` command.

Every ``es.NAME`` / ``exactspec.NAME`` dotted name written on a page (prose or code) must resolve
(:func:`resolve`), so renaming a function without updating the docs fails ``mkdocs build --strict``;
mkdocstrings' ``::: exactspec.X`` blocks are checked by mkdocstrings itself.

This module imports mkdocs only inside the hooks, so ``tests/test_docs.py`` can use :func:`resolve`
and :func:`dotted_names` without mkdocs installed.
"""

from __future__ import annotations

import contextlib
import html
import importlib
import inspect
import io
import os
import re
import warnings
from fractions import Fraction
from typing import Any

MARKER = re.compile(r"<!--\s*exactspec:([\w-]+)\s*-->")
#: ``es.x.y`` or ``exactspec.x.y`` not preceded by a word character, a dot or a slash
NAME = re.compile(r"(?<![\w./-])(?:es|exactspec)(?:\.[A-Za-z_]\w*)+")


# -- names ---------------------------------------------------------------------------------------------

class Unverifiable(Exception):
    """The name lives in a module that needs an optional dependency which is not installed here."""


def resolve(dotted: str) -> Any:
    """The object ``dotted`` names (``es.`` stands for ``exactspec.``).

    Each part is looked up as an attribute first, then as a submodule: ``es.drafts.chain`` is the
    function, and ``exactspec.drafts.chain.chain`` still finds it through the module
    ``exactspec.drafts.chain`` that the function shadows. Raises ``LookupError`` when the name does
    not exist, :class:`Unverifiable` when a module on the way needs a third-party package that is
    not installed (torch for ``exactspec.tensor``).
    """
    parts = dotted.split(".")
    if parts[0] == "es":
        parts[0] = "exactspec"
    return _walk(importlib.import_module(parts[0]), parts[0], parts[1:], dotted)


def _walk(obj: Any, path: str, rest: list[str], dotted: str) -> Any:
    if not rest:
        return obj
    name, full = rest[0], f"{path}.{rest[0]}"
    candidates: list[Any] = []
    if hasattr(obj, name):
        candidates.append(getattr(obj, name))
    unverifiable = None
    if inspect.ismodule(obj):
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if not (missing == full or full.startswith(missing + ".")) and not missing.startswith("exactspec"):
                unverifiable = Unverifiable(f"{dotted}: importing {full} needs {missing!r}, which is not installed")
        except ImportError as exc:
            unverifiable = Unverifiable(f"{dotted}: importing {full} failed ({exc})")
        else:
            if not any(c is module for c in candidates):
                candidates.append(module)
    deeper: LookupError | None = None
    for candidate in candidates:
        try:
            return _walk(candidate, full, rest[1:], dotted)
        except LookupError as exc:  # try the next reading (the submodule behind a shadowing attribute)
            deeper = exc
    if unverifiable is not None:
        raise unverifiable
    raise deeper or LookupError(f"{dotted}: {path} has no attribute {name!r}")


def dotted_names(markdown: str) -> set[str]:
    """Every ``es.x.y`` / ``exactspec.x.y`` a page mentions, except in ``:::`` reference lines and URLs."""
    found: set[str] = set()
    for line in markdown.splitlines():
        if line.lstrip().startswith(":::"):
            continue
        line = re.sub(r"https?://\S+", "", line)
        found.update(m.group(0).rstrip(".") for m in NAME.finditer(line))
    return found


def check_names(markdown: str, page: str) -> list[str]:
    """The problems with the names ``markdown`` mentions (empty when every one resolves)."""
    problems = []
    for name in sorted(dotted_names(markdown)):
        try:
            resolve(name)
        except Unverifiable:
            continue
        except LookupError as exc:
            problems.append(f"{page}: `{name}` does not exist ({exc})")
    return problems


# -- generated content -----------------------------------------------------------------------------------

def _cell(text: str) -> str:
    """Plain text made safe for one Markdown table cell; issue and arXiv references become links."""
    text = html.escape(str(text), quote=False)
    text = re.sub(r"([\\`*_\[\]|])", r"\\\1", text)
    text = re.sub(r"arXiv:(\d{4}\.\d{4,5})", r"[arXiv:\1](https://arxiv.org/abs/\1)", text)
    # owner/repo#123 -> a GitHub link (GitHub redirects /issues/N to the pull request when N is one)
    return re.sub(r"(?<![\w/])([\w.\\-]+/[\w.\\-]+)#(\d+)",
                  lambda m: f"[{m.group(0)}](https://github.com/{m.group(1).replace(chr(92), '')}/issues/{m.group(2)})",
                  text)


def catalog_markdown() -> str:
    import exactspec as es

    rows = ["| rule | family | claim | what it does | reference |", "| --- | --- | --- | --- | --- |"]
    for r in es.rules.catalog():
        base = r.name.split("(")[0]
        name = f"`{r.name}`"
        if hasattr(es.rules, base):
            name = f"[{name}][exactspec.rules.{base}]"
        claim = r.claim_text + (f" (for `{r.proposer.describe()}`)" if r.proposer is not None else "")
        rows.append(f"| {name} | {r.family} | {claim} | {_cell(r.description)} | {_cell(r.reference)} |")
    factories = [n for n in es.rules.names() if n.endswith("(<args>)")]
    rows += ["", f"{len(es.rules.catalog())} rules, generated from `es.rules.catalog()` when these pages were "
             "built. Parameterised rules are listed at their default parameters; "
             + ", ".join(f"`{n}`" for n in factories)
             + " take others (`es.rules.get(\"ensemble(1/3)\")`, `exactspec audit --rule 'ensemble(1/3)'`)."]
    return "\n".join(rows)


def check_configurations_markdown() -> str:
    from exactspec.instances import check_cases, default_instance

    inst = default_instance()
    rows = [f"Default instance: vocab {inst.target.vocab}, order {inst.target.order} seeded tables "
            f"(`{inst.target.name}`), draft `{inst.draft.name}`, prompt `{inst.prompt}`.", "",
            "| rule | proposer | tokens | the claim it must bear out |", "| --- | --- | --- | --- |"]
    cases = list(check_cases(inst))
    for c in cases:
        rows.append(f"| `{c.rule.name}` | `{c.proposer.describe()}` | {c.tokens} | {c.claim} |")
    rows += ["", f"{len(cases)} configurations, generated from `exactspec.instances.check_cases()`."]
    conditional = {c.rule.name: c.rule.claim_text for c in cases if c.rule.condition is not None}
    if conditional:
        rows += ["", "Claims with a condition (the table gives the claim at each configuration): "
                 + "; ".join(f"`{name}`: {text}" for name, text in conditional.items()) + "."]
    return "\n".join(rows)


#: one snippet per public ExactSpecError subclass; it must raise exactly that type (the build fails otherwise)
ERROR_EXAMPLES: dict[str, str] = {
    "ExactSpecError": 'bool(es.counterexamples.search(es.rules.speculative_sampling, max_instances=3))   # stopped early',
    "InvalidDistribution": "es.models.context_free((1, 2))",
    "InexactArithmetic": '''\
def float_threshold(step, rng):
    x = step.draft(0)
    yield x if rng.uniform() < 0.5 else 1 - x     # 0.5 is a float: not exact

half = es.models.context_free(("1/2", "1/2"))
es.audit(target=half, draft=half, rule=float_threshold, tokens=1)''',
    # the argument errors' bases: until a call raises one of them as itself, a subclass stands for it (below)
    "InvalidArgument": 'es.models.context_free(("1/2", "1/3"))        # sums to 5/6',
    "InvalidValue": 'es.models.context_free(("1/2", "1/3"))           # sums to 5/6',
    "InvalidType": "es.models.context_free((0.5, 0.5))                # floats where exact numbers are needed",
    "ModelError": '''\
m = es.models.from_function(vocab=2, fn=lambda ctx: 1 / 0, order=0)
m(())''',
    "BudgetExceeded": '''\
target = es.models.random_table(vocab=3, order=1, seed=0)
es.audit(target=target, draft=es.models.perturbed(target, seed=1), rule=es.rules.speculative_sampling,
         prompt=(0,), closed_form=False, budget=es.Budget(paths=10))''',
    "RuleError": '''\
def broken(step, rng):
    if step.draft(0) == 1:
        raise ValueError("boom")
    yield step.draft(0)

half = es.models.context_free(("1/2", "1/2"))
es.audit(target=half, draft=half, rule=broken, tokens=1)''',
    "NotARule": '''\
def my_sampler(draft_ids, draft_probs, target_probs, rng):   # a sampler, not a rule fn(step, rng)
    ...

half = es.models.context_free(("1/2", "1/2"))
es.audit(target=half, draft=half, rule=my_sampler, tokens=1)''',
    "UnsupportedRandomness": '''\
def uses_float(step, rng):
    u = float(rng.uniform())       # only comparisons and affine arithmetic can be enumerated
    yield step.draft(0)

half = es.models.context_free(("1/2", "1/2"))
es.audit(target=half, draft=half, rule=uses_float, tokens=1)''',
    "UnsupportedRngModel": '''\
from exactspec.samplers.adapters.explicit_uniforms import reference_flashinfer_style
half = es.models.context_free(("1/2", "1/2"))      # a kernel takes its uniforms as float32 tensors: no ideal draws
es.audit_sampler(reference_flashinfer_style, adapter="flashinfer", target=half, draft=half, rng_model="continuous")''',
    "InterceptionError": '''\
import torch

def sampler(target_probs, draft_probs, draft_token_ids, bonus_token_ids):
    # torch takes multinomial(input=...); exactspec's interception does not (yet): exactspec's gap, not the sampler's
    return torch.multinomial(input=target_probs[0, 0], num_samples=1)[None].repeat(1, 2)

half = es.models.context_free(("1/2", "1/2"))
es.audit_sampler(sampler, adapter="vllm", target=half, draft=half, proposer=es.drafts.chain(1), tokens=1)''',
    "AdapterMismatch": '''\
from exactspec.bugzoo import torch_samplers    # vLLM-style: (target_probs, draft_probs, draft_token_ids, bonus_token_ids)

half = es.models.context_free(("1/2", "1/2"))
es.audit_sampler(torch_samplers.correct, target=half, draft=half, proposer=es.drafts.chain(1), tokens=1)  # no adapter=''',
    "ReleaseUnsupported": 'es.published.fetch_vllm("0.34.0")    # refused before any download',
    "UnsupportedSymbolic": '''\
def floaty(step, rng):
    x, p, q = step.draft(0), step.target(0), step.claimed(0)
    if rng.uniform() < float(p[x]) / float(q[x]):    # float() of a symbolic probability
        return [x]
    return [rng.categorical(es.laws.residual(p, q))]

es.prove(floaty, proposer=es.drafts.chain(1), vocab=2, tokens=1)''',
    "UnhashableSymbolic": '''\
def hashes(step, rng):
    x, p = step.draft(0), step.target(0)
    seen = {p[x]}                                     # a set of symbolic probabilities
    yield x

es.prove(hashes, proposer=es.drafts.chain(1), vocab=2, tokens=1)''',
    "SolverUnknown": '''\
from unittest import mock
import z3

with mock.patch.object(z3.Solver, "check", return_value=z3.unknown):    # as if z3 could decide nothing
    es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1, family="context_free")''',
    "AbstractionRefused": '''\
es.prove(es.rules.greedy_match, proposer=es.drafts.chain(1), vocab="all", tokens=1)''',
    "AbstractionDisagrees": '''\
def looks_at_the_token_type(step, rng):      # type(x) is invisible to the abstraction: the tripwire catches it
    p, q, x = step.target(0), step.claimed(0), step.draft(0)
    if type(x) is int:
        yield x
    elif p[x] >= q[x] or rng.bernoulli(p[x] / q[x]):
        yield x
    else:
        yield rng.categorical(es.laws.residual(p, q))

es.prove(looks_at_the_token_type, proposer=es.drafts.chain(1), vocab="all", tokens=1, family="context_free")''',
    "NotPicklable": '''\
import threading
lock = threading.Lock()

def locked(step, rng):          # holds a lock: cannot be sent to a worker process, even with cloudpickle
    with lock:
        yield step.draft(0)

es.counterexamples.search(locked, workers=2)''',
    "ReplayDiverged": '''\
from exactspec.enumerate import PathRng
from exactspec.fields import get_field
rng = PathRng((True,), 1, get_field(), [], {})       # replays a branch whose first draw was a coin
rng.categorical((F(1, 2), F(1, 2)))                    # internal: the engine reports it as a RuleError''',
    "WorkersLost": '''\
import os
from exactspec import parallel
run = parallel.run_on(os._exit, [1], workers=2)    # the chunk kills its worker process on every try
run.require_all("demo job")''',
}

#: base classes whose example may raise a subclass (``InvalidArgument`` is never raised as itself; the page
#: says which subclass the example raised)
RAISED_AS_SUBCLASS = frozenset({"InvalidArgument", "InvalidValue", "InvalidType"})


def public_error_types() -> list[type]:
    """``ExactSpecError`` and every public subclass (defined in ``exactspec.errors`` or anywhere in the package)."""
    import exactspec as es
    import exactspec.errors as errors

    for mod in ("counterexamples", "samplers", "statistical", "trees", "cli"):  # modules that may define more
        importlib.import_module(f"exactspec.{mod}")
    seen: list[type] = [es.ExactSpecError]
    for obj in vars(errors).values():
        if isinstance(obj, type) and issubclass(obj, es.ExactSpecError) and obj not in seen:
            seen.append(obj)
    stack = [es.ExactSpecError]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub not in seen and not sub.__name__.startswith("_") and sub.__module__.startswith("exactspec") \
                    and not any(p.startswith("_") for p in sub.__module__.split(".")[1:]):
                seen.append(sub)
    return seen


def _trigger(name: str, code: str) -> BaseException:
    import exactspec as es

    namespace = {"es": es, "F": Fraction, "__name__": "example"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, "example.py", "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - the example must raise; its type is checked by the caller
        return exc
    raise RuntimeError(f"errors page: the example for {name} raised nothing:\n{code}")


def errors_markdown() -> str:
    out = []
    for cls in public_error_types():
        code = ERROR_EXAMPLES.get(cls.__name__)
        if code is None:
            raise RuntimeError(f"errors page: {cls.__module__}.{cls.__qualname__} has no example; add one to "
                               "ERROR_EXAMPLES in docs/hooks.py")
        exc = _trigger(cls.__name__, code)
        if type(exc) is not cls and not (cls.__name__ in RAISED_AS_SUBCLASS and isinstance(exc, cls)):
            raise RuntimeError(f"errors page: the example for {cls.__name__} raised {type(exc).__name__}: {exc}")
        bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
        doc = inspect.getdoc(cls) or ""
        summary = doc.split("\n\n")[0].replace("\n", " ")
        summary = re.sub(r":(?:class|func|meth|attr):`~?([\w.]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`",
                         summary)
        out += [f"## {cls.__name__}", "",
                f"`{cls.__module__}.{cls.__qualname__}` (bases: {bases}); the CLI exits "
                f"**{getattr(cls, 'exit_code', 2)}** on it. "
                f"[API reference][{cls.__module__}.{cls.__qualname__}].", "",
                summary, "", "```python", code, "```", "",
                "raises" if type(exc) is cls else f"raises a `{cls.__name__}` (here its subclass "
                                                   f"`{type(exc).__name__}`)", "", "```text",
                f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}", "```", ""]
    return "\n".join(out)


def cli_help_markdown() -> str:
    from exactspec.cli import main

    def help_text(argv: list[str]) -> str:
        buf = io.StringIO()
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"
        try:
            with contextlib.redirect_stdout(buf):
                code = main(argv)
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
        if code != 0:
            raise RuntimeError(f"cli page: `exactspec {' '.join(argv)}` exited {code}")
        return buf.getvalue().rstrip()

    top = help_text(["--help"])
    m = re.search(r"\{([\w,-]+)\}", top)
    if not m:
        raise RuntimeError("cli page: cannot find the subcommands in `exactspec --help`")
    out = ["### exactspec --help", "", "```text", top, "```", ""]
    for cmd in m.group(1).split(","):
        out += [f"### exactspec {cmd}", "", "```text", help_text([cmd, "--help"]), "```", ""]
    return "\n".join(out)


GENERATORS = {
    "catalog": catalog_markdown,
    "check-configurations": check_configurations_markdown,
    "errors": errors_markdown,
    "cli-help": cli_help_markdown,
}


# -- MkDocs hooks ------------------------------------------------------------------------------------------

_cache: dict[str, str] = {}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    src = page.file.src_uri
    problems = check_names(markdown, src)
    if problems:
        raise PluginError("names that do not exist in exactspec:\n  " + "\n  ".join(problems))

    def generate(m: re.Match) -> str:
        what = m.group(1)
        if what not in GENERATORS:
            raise PluginError(f"{src}: unknown marker <!-- exactspec:{what} --> (known: {', '.join(GENERATORS)})")
        if what not in _cache:
            try:
                _cache[what] = GENERATORS[what]()
            except Exception as exc:  # any failure to generate a page is a failed build
                raise PluginError(f"{src}: generating <!-- exactspec:{what} --> failed: "
                                  f"{type(exc).__name__}: {exc}") from exc
        return _cache[what]

    return MARKER.sub(generate, markdown)


def on_pre_build(config: Any, **kwargs: Any) -> None:
    _cache.clear()  # each build (also each `mkdocs serve` rebuild) regenerates from the code
