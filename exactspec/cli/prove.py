"""``exactspec prove``: a rule lossless for every target and draft law (exit 0), or refuted with a witness (1)."""

from __future__ import annotations

import re
import textwrap
from typing import Any

from .. import _progress
from ..errors import InvalidValue
from .common import DEFAULT_TIME_LIMIT, _ints, _print, _rule, _seconds
from .parser import Options


def _cmd_prove(args: Any) -> int:
    """``exactspec prove``: exit 0 proven, 1 refuted (with a witness replayed exactly), 2 bad input, 3 gave up."""
    from ..drafts import ChainProposer, TreeProposer, chain, tree
    from ..prove import Refutation, prove
    rule = _rule(args.rule)
    proposer: ChainProposer | TreeProposer
    if args.workers is not None and args.workers < 0:
        raise InvalidValue(f"--workers must be >= 0 (0: every core), got {args.workers}")
    if rule.family == "tree":
        if args.gamma is not None or args.sampling is not None:
            raise InvalidValue(f"--gamma and --sampling do not apply to rule {rule.name}, which verifies trees")
        exp = (2,) if args.expansion is None else _ints(args.expansion, "--expansion",
                                                          "children per depth like '2' or '2 1'")
        proposer = tree(tuple(exp), children=args.children or "iid", claim=args.claim or "draft")
    else:
        if args.expansion is not None or args.children is not None:
            raise InvalidValue(f"--expansion and --children do not apply to rule {rule.name}, which verifies chains")
        proposer = chain(1 if args.gamma is None else args.gamma, sampling=args.sampling or "sample",
                         claim=args.claim or "draft")
    shown = _progress.reporter("proving", unit="cells proven", enabled=not args.quiet)
    try:
        res = prove(rule, proposer=proposer, vocab=args.vocab, tokens=args.tokens, family=args.family,
                    timeout=args.time_limit, workers=args.workers, progress=shown)
    finally:
        _progress.close(shown)
    if args.json:
        _print(res.to_json())
    else:
        _print(readable(res))
        if isinstance(res, Refutation):   # a refutation is falsy, a proof truthy
            _print("\nregression test (fails while the bias exists):\n")
            _print(res.counterexample.to_pytest())
    return res.exit_code


#: the terminal layout of ``exactspec prove``: lines folded near ``WIDTH``; a value longer than ``LONGEST`` (a
#: polynomial of a vocab='all' refutation runs to thousands of characters) elided, ``--json`` having it whole
WIDTH, LONGEST = 100, 160


def _top_level(text: str, seps: tuple[str, ...]) -> list[str]:
    """``text`` cut after each separator in ``seps`` that lies outside brackets (the separator stays on the left)."""
    pieces, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        depth += c in "([{"
        depth -= c in ")]}"
        sep = next((x for x in seps if depth == 0 and text.startswith(x, i)), None)
        if sep is not None:
            pieces.append(text[start:i + len(sep)].rstrip())
            start = i = i + len(sep)
            continue
        if depth == 1 and c == "(" and i > start and text[i - 1] == " ":
            pieces.append(text[start:i].rstrip())     # a parenthesis group opens a new piece
            start = i
        i += 1
    pieces.append(text[start:])
    return [x.strip() for x in pieces if x.strip()]


def _fold(sentence: str, indent: str = "  ") -> list[str]:
    """One sentence as lines of about ``WIDTH``: cut outside brackets, words wrapped only where a piece is longer."""
    if len(sentence) <= WIDTH:
        return [sentence]
    lines: list[str] = []
    for piece in _top_level(sentence, ("; ", ": ")):
        first = not lines
        lead = "" if first else indent
        if not first and len(lines[-1]) + 1 + len(piece) <= WIDTH:
            lines[-1] += " " + piece
        elif len(lead) + len(piece) <= WIDTH:
            lines.append(lead + piece)
        else:
            lines += textwrap.wrap(piece, WIDTH, initial_indent=lead, subsequent_indent=indent,
                                   break_on_hyphens=False)
    return lines


def _elide(text: str, what: str) -> str:
    """``text`` whole when short, else its start and a pointer to ``--json``."""
    if len(text) <= LONGEST:
        return text
    return f"{text[:LONGEST - 60].rstrip()} ... [{what}: {len(text):,} characters; --json has it whole]"


def _sentences(text: str) -> list[str]:
    """``text`` cut after each sentence (a period, a space and a capital) outside brackets."""
    out: list[str] = []
    for piece in _top_level(text, (". ",)):
        if out and not piece[:1].isupper():
            out[-1] += " " + piece     # "e.g. x": not a sentence of its own
        else:
            out.append(piece)
    return out


def readable(res: Any) -> str:
    """``exactspec prove``'s text: the verdict's sentences on lines of about 100 characters, each on its own line.

    A refutation shows its witness on its own lines (``p = (...)``, ``q = (...)``) and its cell, one
    constraint list folded; a value too long to read (the polynomial of a ``--vocab all`` refutation)
    is elided with a pointer to ``--json``, which has every value whole.

    >>> class Refuted:
    ...     def __bool__(self): return False
    ...     def summary(self):
    ...         return ("REFUTED: r does not emit the target law for some context-free target and draft (vocab 2). "
    ...                 "On the cell {q_0 > 0} output(0,) - expected(0,) = " + " + ".join(["p_0*q_0"] * 30) +
    ...                 ". Witness p = (1/4, 3/4); q = (1/2, 1/2): the exact engine gives TV = 1/8.")
    ...     def to_dict(self):
    ...         return {"cell": ["q_0 > 0"], "outcome": [0], "difference": " + ".join(["p_0*q_0"] * 30),
    ...                 "witness": {"p": ["1/4", "3/4"], "q": ["1/2", "1/2"]}, "tv": "1/8"}
    >>> print(readable(Refuted()))
    REFUTED: r does not emit the target law for some context-free target and draft (vocab 2).
    witness (the exact engine gives TV = 1/8 there):
      p = (1/4, 3/4)
      q = (1/2, 1/2)
    on the cell: q_0 > 0
    output(0,) - expected(0,) =
      p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + p_0*q_0 + ... [the difference: 297 characters; --json has it whole]
    """
    text = res.summary()
    data = res.to_dict() if not res and hasattr(res, "to_dict") else {}
    head = text.split(" On the cell ", 1)[0]
    if not data or head == text or not {"cell", "outcome", "difference", "witness", "tv"} <= set(data):
        return "\n".join(line for sentence in _sentences(text) for line in _fold(sentence))
    outcome = "(" + ", ".join(str(t) for t in data["outcome"]) + ("," if len(data["outcome"]) == 1 else "") + ")"
    lines = [line for sentence in _sentences(head) for line in _fold(sentence)]
    lines.append(f"witness (the exact engine gives TV = {data['tv']} there):")
    lines += [_elide(f"  {k} = ({', '.join(str(x) for x in v)})", f"the witness's {k}")
              for k, v in data["witness"].items()]
    cell = ", ".join(data["cell"])
    cell = _elide(cell, "the cell") if len(cell) > 4 * WIDTH else cell
    packed = ["on the cell:"]
    for c in _top_level(cell, (", ",)):      # whole constraints on each line
        if len(packed[-1]) + 1 + len(c) > WIDTH and packed[-1].strip() not in ("", "on the cell:"):
            packed.append(" ")
        packed[-1] += " " + c
    lines += packed
    lines += [f"output{outcome} - expected{outcome} =", "  " + _elide(str(data["difference"]), "the difference")]
    rest = re.split(r": the exact engine gives TV = \S+\.", text.split(" On the cell ", 1)[1], maxsplit=1)
    tail = rest[1].strip() if len(rest) == 2 else ""
    lines += [line for sentence in _sentences(tail) for line in _fold(sentence)] if tail else []
    return "\n".join(lines)


def _vocab(text: str) -> "int | str":
    """``--vocab``: an int, or ``all`` (every vocabulary size)."""
    import argparse
    if text.strip().lower() == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a vocabulary size like 3, or 'all', got {text!r}") from None


def register(sub: Any, o: Options) -> None:
    """Add the ``prove`` sub-command to ``sub`` (the parser's sub-parsers)."""
    pr = sub.add_parser("prove", help="prove a rule lossless for every target and draft law, or refute it with a "
                                      "witness (needs exactspec[prove])")
    pr.add_argument("--rule", required=True, help="catalog name or MODULE:FUNCTION (required: no default)")
    pr.add_argument("--vocab", type=_vocab, required=True,
                    help="vocabulary size of the symbolic laws (required: no default; 2 to 4 is practical), or "
                         "'all': one proof for every vocabulary size (chain rules, sampled drafts, context-free "
                         "laws; the tokens outside the outcome as classes of exchangeable unnamed tokens)")
    pr.add_argument("--tokens", type=int, required=True, help="horizon: tokens whose law is proven (required: no "
                                                               "default)")
    pr.add_argument("--gamma", type=int, default=None, help="chain rules: drafted tokens per step (default 1)")
    pr.add_argument("--expansion", default=None, help="tree rules: children per depth, e.g. '2' (default '2')")
    o.drafting(pr)
    pr.add_argument("--family", choices=["context_free", "per_position", "table"], default=None,
                    help="context_free: one symbolic p and q at every position; per_position: one p and q per "
                         "position; table: order-1 tables, prompt (0,) (default: the most general one feasible at "
                         "the size, named in the verdict: per_position at vocab 2 and 2 tokens, table at vocab 2 "
                         "otherwise, context_free from vocab 3)")
    pr.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=o.limit)
    pr.add_argument("--workers", type=int, default=None, metavar="N",
                    help="processes that prove the cells (0: every core; 1: in this process; default: every core "
                         "from 6 free variables, e.g. context-free vocab 4, else one worker process under the time "
                         "limit); the verdict, cells and witness are the same for any N")
    pr.add_argument("--json", action="store_true", help=o.json_help)
    o.quiet(pr)


run = _cmd_prove
