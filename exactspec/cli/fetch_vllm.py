"""``exactspec fetch-vllm``: download a vLLM wheel, check its published sha256, unpack its rejection sampler."""

from __future__ import annotations

from typing import Any

from .common import _print
from .parser import Options


def _cmd_fetch_vllm(args: Any) -> int:
    from ..published import fetch_vllm
    _print(fetch_vllm(args.release, args.dir, quiet=not args.verbose))
    return 0


def register(sub: Any, o: Options) -> None:
    """Add the ``fetch-vllm`` sub-command to ``sub`` (the parser's sub-parsers)."""
    from ..published import VLLM_RELEASES
    f = sub.add_parser("fetch-vllm", help="download a vLLM wheel (no dependencies), check its published sha256, "
                                          "unpack the files its v1 rejection sampler needs, print the directory")
    f.add_argument("--release", default="0.32.0", choices=VLLM_RELEASES,
                   help=f"the vLLM release, one of {', '.join(VLLM_RELEASES)} (default 0.32.0, the one the suite's "
                        "findings describe; a release whose v1 rejection sampler is gone is refused with the reason)")
    f.add_argument("--dir", default=None, help="where to unpack (default ~/.cache/exactspec/vllm-RELEASE)")
    f.add_argument("-v", "--verbose", action="store_true", help="show pip's download progress")


run = _cmd_fetch_vllm
