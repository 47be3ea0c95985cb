"""Render the findings data as the Markdown tables of the README and docs/real-code.md."""

from __future__ import annotations

import re
from itertools import groupby

from ..errors import InvalidValue
from ._types import Finding, Package, Result, release_key

#: the marked blocks a document may hold: name -> (begin, end)
BLOCKS = {name: (f"<!-- findings:{name} begin (generated: exactspec findings --write) -->",
                 f"<!-- findings:{name} end -->") for name in ("packages", "rows")}


def _verdict(result: Result) -> str:
    return result.verdict if result.verdict == "lossless" else f"**{result.verdict}**"


def _groups(finding: Finding) -> list[tuple[str, Result]]:
    """Consecutive audited releases with the same result, as ('5.24.0, 5.25.0', result)."""
    ordered = sorted(finding.results.items(), key=lambda kv: release_key(kv[0]))
    out = []
    for _, group in groupby(ordered, key=lambda kv: kv[1]):
        run = list(group)
        out.append((", ".join(release for release, _ in run), run[0][1]))
    return out


def row(finding: Finding, packages: dict[str, Package]) -> str:
    """One Markdown row: code, setting, verdict per release, exact figure per release, kind, the test."""
    groups = _groups(finding)
    fixed = finding.fixed_in()
    if len(groups) == 1:
        releases, result = groups[0]
        verdict, figure = f"{_verdict(result)} ({releases})", result.text
    else:
        verdict = "; ".join(f"{releases}: {_verdict(result)}" for releases, result in groups)
        figure = "; ".join(f"{releases}: {result.text}" for releases, result in groups)
    if fixed:
        verdict += f"; fixed in {fixed}"
    for release in sorted(finding.not_run, key=release_key):
        verdict += f"; {release}: not audited (why: the packages table)"
    label = packages[finding.package].label
    cells = [f"{label} {finding.code}", finding.setting, verdict, figure, finding.kind, f"`{finding.test}`"]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def rows_table(findings: tuple[Finding, ...], packages: tuple[Package, ...]) -> str:
    """The findings table, one row per finding, packages in the order of ``packages``."""
    by_name = {p.name: p for p in packages}
    order = {p.name: i for i, p in enumerate(packages)}
    lines = ["| code | setting | verdict (audited releases) | exact figure | kind | pinned by |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [row(f, by_name) for f in sorted(findings, key=lambda f: order[f.package])]
    return "\n".join(lines)


def newest_summary(package: Package, findings: tuple[Finding, ...]) -> str:
    """What the findings say about a package's newest release: counts per verdict, fixes, or why not audited."""
    mine = [f for f in findings if f.package == package.name]
    missing = [f for f in mine if f.result(package.newest) is None]
    if missing:
        why = sorted({f.not_run.get(package.newest, "not yet audited") for f in missing})
        return f"{len(missing)} of {len(mine)} findings not audited: " + "; ".join(why)
    counts: dict[str, int] = {}
    for f in mine:
        verdict = f.results[package.newest].verdict
        counts[verdict] = counts.get(verdict, 0) + 1
    text = ", ".join(f"{n} {v}" if v == "lossless" else f"{n} **{v}**" for v, n in counts.items())
    fixed = [f.id for f in mine if f.fixed_in() == package.newest]
    return text + (f" ({len(fixed)} fixed in {package.newest})" if fixed else "")


def packages_table(findings: tuple[Finding, ...], packages: tuple[Package, ...], checked: str) -> str:
    """One row per audited package: the pinned release, the newest on PyPI and what the findings say about it."""
    lines = [f"| package | the suite's pin | newest on PyPI ({checked}) | releases audited | findings on the newest "
             "release |", "| --- | --- | --- | --- | --- |"]
    for p in packages:
        audited = sorted({r for f in findings if f.package == p.name for r in f.results}, key=release_key)
        lines.append(f"| {p.label} | {p.pinned} | {p.newest} | {', '.join(audited)} | {newest_summary(p, findings)} |")
    return "\n".join(lines)


def replace_blocks(text: str, blocks: dict[str, str], where: str) -> str:
    """``text`` with each marked block's body replaced; a document must hold the markers it is rendered into."""
    for name, body in blocks.items():
        begin, end = BLOCKS[name]
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), flags=re.S)
        if not pattern.search(text):
            raise InvalidValue(f"{where}: no block {begin!r} ... {end!r} to render the {name} table into")
        text = pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text)
    return text
