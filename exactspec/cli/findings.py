"""``exactspec findings``: the findings on published code, per package and release (Markdown tables)."""

from __future__ import annotations

from typing import Any

from .common import _print
from .parser import Options


def _cmd_findings(args: Any) -> int:
    from .. import published
    if args.write:
        changed = published.write_tables(*args.write)
        for path in args.write:
            _print(f"{path}: {'rendered' if path in changed else 'already current'}")
        return 0
    tables = published.tables(args.package)
    _print(tables["packages"])
    _print("")
    _print(tables["rows"])
    return 0


def register(sub: Any, o: Options) -> None:
    """Add the ``findings`` sub-command to ``sub`` (the parser's sub-parsers)."""
    f = sub.add_parser("findings", help="the findings on published speculative-decoding code, per package and "
                                        "release (Markdown tables)")
    f.add_argument("--package", metavar="NAME", help="one package by its PyPI name (default: every audited package)")
    f.add_argument("--write", nargs="+", metavar="FILE",
                   help="render the tables into each FILE's marked blocks, e.g. README.md docs/real-code.md (default: "
                        "print them)")


run = _cmd_findings
