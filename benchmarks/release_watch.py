"""Release watch: audit the findings of published packages on other releases, and say what changed.

    python -m benchmarks.release_watch                      # every package: pinned, newest, those in the data
    python -m benchmarks.release_watch transformers         # one package: pinned and newest
    python -m benchmarks.release_watch transformers==5.23.0 transformers==5.25.0 vllm

For each package and release, the release is installed into a throw-away environment: the current interpreter
(where the suite's pinned packages live) with an overlay folder in front of ``sys.path`` holding the release,
installed ``--no-deps``, and any of its declared dependencies the current environment does not satisfy (each at
the newest release that fits); the overlay is removed afterwards. vLLM is not pip-installed by the suite: its
release is fetched by ``exactspec.published.fetch_vllm`` (the wheel's published sha256 checked) and selected
with ``EXACTSPEC_VLLM_VERSION``. Where a
release cannot run here (it needs another torch than this environment's, or fails to import), the table says
why, exactly, from pip's or Python's own words.

The findings tests of the package (``exactspec.published.findings(package)``, each naming its test) then run
under pytest with ``EXACTSPEC_WATCH=package==release``: each test observes its finding on that release
(``tests/findings.py``), and the table prints per finding the verdict and exact figure per release, with what
changed ("fixed in 5.25.0", "new in ...") and whether the result is the one ``exactspec/published/_data.py``
records. Exit 0 when every release ran and every observation matches the data, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version

import exactspec as es
from exactspec.published import release_key

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: packages the suite does not pip-install: the environment variable that selects the release instead
SELECTED_BY_ENV = {"vllm": "EXACTSPEC_VLLM_VERSION"}


def newest_release(name: str) -> str:
    """The newest release on the package index, from ``pip index versions``."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True)
    found = re.search(rf"^{re.escape(name)} \(([^)]+)\)", out.stdout, flags=re.M | re.I)
    if not found:
        raise RuntimeError(f"pip index versions {name}: {out.stderr.strip() or out.stdout.strip()}")
    return found.group(1)


def _requirements(overlay: pathlib.Path, name: str) -> list[str]:
    """The declared dependencies (no extras, markers true here) of the release installed in the overlay."""
    from importlib.metadata import distributions
    from packaging.requirements import Requirement
    dist = next(d for d in distributions(path=[str(overlay)]) if d.metadata["Name"].lower() == name.lower())
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(text)
    return out


def _unsatisfied(requirements: list[str]) -> list[tuple[str, str | None]]:
    """Declared dependencies the current environment does not satisfy: (requirement, installed release or None)."""
    from packaging.requirements import Requirement
    out = []
    for text in requirements:
        req = Requirement(text)
        try:
            have: str | None = version(req.name)
        except PackageNotFoundError:
            have = None
        if have is None or (req.specifier and not req.specifier.contains(have, prereleases=True)):
            out.append((text, have))
    return out


def install(name: str, release: str, overlay: pathlib.Path) -> str | None:
    """Install ``name==release`` into ``overlay``; None when it can run here, else why not (pip's own words)."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(overlay)]
    done = subprocess.run(pip + [f"{name}=={release}"], capture_output=True, text=True)
    if done.returncode:
        return f"pip could not install {name}=={release}: {done.stderr.strip().splitlines()[-1]}"
    missing = _unsatisfied(_requirements(overlay, name))
    torch = [(req, have) for req, have in missing if req.split()[0].startswith("torch")]
    if torch:
        return "; ".join(f"requires {req} (this environment has torch {have})" for req, have in torch)
    for req, _ in missing:
        done = subprocess.run(pip + [req], capture_output=True, text=True)
        if done.returncode:
            return f"its dependency {req} does not install: {done.stderr.strip().splitlines()[-1]}"
    return None


def pytest_args(name: str) -> list[list[str]]:
    """One pytest argument list per test module holding the package's findings (their ``-k`` selections or-ed)."""
    by_module: dict[str, list[str]] = {}
    for f in es.published.findings(name):
        for module, selection in f.selections():
            by_module.setdefault(module, [])
            if selection is None:
                by_module[module].append("")
            elif "" not in by_module[module]:
                by_module[module].append(f"({selection})")
    return [[module] + (["-k", " or ".join(sel)] if "" not in sel else []) for module, sel in by_module.items()]


def run_findings(name: str, release: str, overlay: pathlib.Path | None, out: pathlib.Path) -> tuple[int, str]:
    """Run the package's findings tests on ``release``; the observations go to ``out``; (pytest's exit, summary)."""
    env = dict(os.environ, EXACTSPEC_WATCH=f"{name}=={release}", EXACTSPEC_FINDINGS_OUT=str(out),
               EXACTSPEC_REQUIRE_PUBLISHED="1", TRITON_INTERPRET="1")
    if overlay is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(overlay), env.get("PYTHONPATH", "")]))
    if name in SELECTED_BY_ENV:
        env[SELECTED_BY_ENV[name]] = release
    code, summary = 0, []
    for args in pytest_args(name):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", *args],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        code = max(code, done.returncode)
        summary += [line for line in done.stdout.splitlines()
                    if line.startswith(("FAILED", "ERROR", "SKIPPED")) or re.match(r"^=* ?\d+ (passed|failed)", line)
                    or re.match(r"^\d+ (passed|failed|error)", line)]
    return code, "\n".join(summary)


def table(name: str, releases: list[str], observed: dict, not_run: dict[str, str]) -> tuple[str, bool]:
    """The watch's table for one package, and whether every observation matches the findings data."""
    ok = True
    head = ["finding", "instance"] + releases + ["change", "vs the findings data"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for f in es.published.findings(name):
        instances = sorted({inst for (fid, _, inst) in observed if fid == f.id}) or [""]
        for inst in instances:
            cells: list[str] = []
            verdicts: list[str | None] = []
            mismatched: list[str] = []
            for rel in releases:
                seen = observed.get((f.id, rel, inst))
                if rel in not_run:
                    cells.append("not run")
                    verdicts.append(None)
                    continue
                if not seen:
                    cells.append("not observed (its test failed or skipped before observing)")
                    verdicts.append(None)
                    ok = False
                    continue
                cells.append("; ".join(f"{v}, {fig}" for v, fig in sorted(seen)))
                verdicts.append(sorted(seen)[0][0] if len(seen) == 1 else "mixed")
                recorded = f.result(rel)
                if recorded is not None and {(recorded.verdict, recorded.figures.get(inst))} != seen:
                    mismatched.append(rel)
            change = _change(releases, verdicts, cells)
            if mismatched:
                ok = False
            recorded_note = ("differs on " + ", ".join(mismatched)) if mismatched else "matches" + (
                "" if all(f.result(r) is not None for r in releases if r not in not_run) else
                " (releases not yet in the data: " + ", ".join(r for r in releases if f.result(r) is None
                                                                and r not in not_run) + ")")
            lines.append("| " + " | ".join([f.id, inst or "-"] + cells + [change, recorded_note]) + " |")
    return "\n".join(lines), ok


def _change(releases: list[str], verdicts: list[str | None], cells: list[str]) -> str:
    """'fixed in R' / 'new in R' / 'figure changed in R' between consecutive audited releases, or 'unchanged'."""
    notes = []
    prev = None
    for rel, verdict, cell in zip(releases, verdicts, cells):
        if verdict is None:
            continue
        if prev is not None:
            if prev[0] != "lossless" and verdict == "lossless":
                notes.append(f"fixed in {rel}")
            elif prev[0] == "lossless" and verdict != "lossless":
                notes.append(f"new in {rel}")
            elif prev[1] != cell:
                notes.append(f"figure changed in {rel}")
        prev = (verdict, cell)
    return ", ".join(notes) or "unchanged"


def watch(name: str, extra: list[str]) -> bool:
    """Audit one package's findings on its pinned release, its newest, those the data records and ``extra``."""
    pinned = es.published.package(name).pinned
    newest = newest_release(name)
    recorded = {r for f in es.published.findings(name) for r in (*f.results, *f.not_run)}
    releases = sorted({pinned, newest, *recorded, *extra}, key=release_key)
    print(f"\n## {name}: pinned {pinned}, newest on the index {newest}, audited here: {', '.join(releases)}\n")
    observed: dict = {}
    not_run: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix=f"release-watch-{name}-") as tmp:
        for rel in releases:
            overlay = None
            if name == "vllm":
                try:
                    es.published.fetch_vllm(rel)
                except (es.published.ReleaseUnsupported, ValueError) as exc:
                    not_run[rel] = str(exc)
                    continue
            else:
                try:
                    installed: str | None = version(name)
                except PackageNotFoundError:
                    installed = None
                if installed != rel:
                    overlay = pathlib.Path(tmp) / rel
                    why = install(name, rel, overlay)
                    if why:
                        not_run[rel] = why
                        continue
            out = pathlib.Path(tmp) / f"{rel}.jsonl"
            out.touch()
            code, summary = run_findings(name, rel, overlay, out)
            for line in out.read_text().splitlines():
                o = json.loads(line)
                observed.setdefault((o["finding"], rel, o["instance"]), set()).add((o["verdict"], o["figure"]))
            print(f"{name} {rel}: pytest exit {code}" + (f"\n{summary}" if summary else ""))
    text, ok = table(name, releases, observed, not_run)
    print()
    print(text)
    recorded_newest = es.published.package(name).newest
    if recorded_newest != newest:
        ok = False
        print(f"\nthe findings data says the newest {name} is {recorded_newest}, the index says {newest}: update "
              "exactspec/published/_data.py (Package.newest, CHECKED) with the results above")
    for rel, why in not_run.items():
        print(f"\n{name} {rel} not run: {why}")
    return ok and not not_run


def main(argv: list[str] | None = None) -> int:
    """Parse ``PACKAGE[==RELEASE]`` arguments, watch each package, return 0 when everything ran and matched."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.release_watch", description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="*", metavar="PACKAGE[==RELEASE]",
                        help="packages to watch (default: every audited package), with extra releases to audit")
    args = parser.parse_args(argv)
    wanted: dict[str, list[str]] = {}
    for item in args.packages or [p.name for p in es.published.packages()]:
        name, _, rel = item.partition("==")
        es.published.package(name)               # a clear error for an unknown package
        wanted.setdefault(name, [])
        if rel:
            wanted[name].append(rel)
    results = [watch(name, extra) for name, extra in wanted.items()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
