"""``exactspec findings`` and ``exactspec fetch-vllm``: the findings on published code, and vLLM's sampler files."""

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
                   help="render the tables into each FILE's marked blocks (the README, docs/real-code.md)")


run = _cmd_findings


def _cmd_fetch_vllm(args: Any) -> int:
    from ..published import fetch_vllm
    _print(fetch_vllm(args.release, args.dir, quiet=not args.verbose))
    return 0


class FetchVllm:
    """The ``fetch-vllm`` sub-command: fetch, verify and unpack vLLM's rejection sampler files; print the path."""

    @staticmethod
    def register(sub: Any, o: Options) -> None:
        """Add the ``fetch-vllm`` sub-command to ``sub``."""
        from ..published import VLLM_RELEASES
        f = sub.add_parser("fetch-vllm", help="download a vLLM wheel (no dependencies), check its published sha256, "
                                              "unpack the files its v1 rejection sampler needs, print the directory")
        f.add_argument("--release", default="0.32.0", choices=sorted(VLLM_RELEASES),
                       help="the vLLM release (default 0.32.0, the one the suite's findings describe)")
        f.add_argument("--dir", default=None, help="where to unpack (default ~/.cache/exactspec/vllm-RELEASE)")
        f.add_argument("-v", "--verbose", action="store_true", help="show pip's download progress")

    run = staticmethod(_cmd_fetch_vllm)
