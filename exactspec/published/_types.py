"""The types of the findings data: an audited package, a finding (one row), its result on one release."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import InvalidValue

#: the verdicts a row may carry, in the README's words
VERDICTS = ("lossless", "biased", "crashes", "refused")


@dataclass(frozen=True)
class Package:
    """One audited package: its PyPI name, the release the suite pins and the newest release on PyPI.

    >>> Package("specdec", label="specdec", pinned="0.2.0", newest="0.2.0").pinned
    '0.2.0'
    """

    name: str
    label: str
    pinned: str
    newest: str


@dataclass(frozen=True)
class Result:
    """A finding's verdict and exact figure on one release; ``figures`` maps an instance label to its figure.

    >>> Result("biased", "3/8").figures
    {'': '3/8'}
    """

    verdict: str
    figure: str | Mapping[str, str]

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise InvalidValue(f"verdict {self.verdict!r}: expected one of {VERDICTS}")

    @property
    def figures(self) -> dict[str, str]:
        """The figure per instance (one instance, labelled ``''``, when the row states one figure)."""
        return dict(self.figure) if isinstance(self.figure, Mapping) else {"": self.figure}

    @property
    def text(self) -> str:
        """The figure as the table prints it: instances that share a figure listed once, before it.

        >>> Result("biased", {"a": "1/2", "b": "1/2", "c": "1/3"}).text
        'a, b: 1/2; c: 1/3'
        """
        by_figure: dict[str, list[str]] = {}
        for instance, figure in self.figures.items():
            by_figure.setdefault(figure, []).append(instance)
        return "; ".join(f"{', '.join(i for i in instances if i)}: {figure}" if any(instances) else figure
                         for figure, instances in by_figure.items())


@dataclass(frozen=True)
class Finding:
    """One row of the findings table: where in a package, in which setting, and its result per audited release.

    >>> f = Finding("x", "specdec", "`verify`", "T=1", "rounding", "tests/test_recipes_specdec.py",
    ...             {"0.2.0": Result("lossless", "TV <= 2^-40")})
    >>> f.result("0.2.0").verdict, f.result("0.1.0")
    ('lossless', None)
    """

    id: str
    package: str
    code: str
    setting: str
    kind: str
    test: str
    results: Mapping[str, Result] = field(default_factory=dict)
    #: releases that could not be audited, with the reason
    not_run: Mapping[str, str] = field(default_factory=dict)

    def selections(self) -> list[tuple[str, str | None]]:
        """The pytest selections ``test`` names, as (module, ``-k`` expression or None); ``; `` separates several.

        >>> Finding("x", "p", "c", "s", "k", 'tests/a.py -k "b or c"; tests/d.py').selections()
        [('tests/a.py', 'b or c'), ('tests/d.py', None)]
        """
        out: list[tuple[str, str | None]] = []
        for part in self.test.split("; "):
            words = shlex.split(part)
            out.append((words[0], words[words.index("-k") + 1] if "-k" in words else None))
        return out

    def result(self, release: str) -> Result | None:
        """The result recorded for ``release``, or None where that release was not audited."""
        return self.results.get(release)

    def fixed_in(self) -> str | None:
        """The first audited release where a finding that was not lossless becomes lossless, if any."""
        seen_bad = False
        for release in sorted(self.results, key=release_key):
            verdict = self.results[release].verdict
            if verdict != "lossless":
                seen_bad = True
            elif seen_bad:
                return release
        return None


def release_key(release: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key for release strings: numeric parts numerically (``0.5.9 < 0.5.13``).

    >>> sorted(["0.5.13", "0.5.9", "0.5.15.post1", "0.5.15"], key=release_key)
    ['0.5.9', '0.5.13', '0.5.15', '0.5.15.post1']
    """
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in release.split("."))
