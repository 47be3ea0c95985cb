"""A griffe extension that lets exactspec's reST-flavoured docstrings render as Markdown.

The docstrings are written for ``help()`` and for doctest (``>>>`` examples, ``:func:`x```
roles, ``::`` literal blocks, one reST simple table). mkdocstrings renders docstrings as
Markdown, where a ``>>>`` line would become a nested block quote. This extension rewrites the
docstring *text griffe loaded* (never the source files):

- a run of ``>>>`` / ``...`` lines and their expected output becomes a ``pycon`` code block;
- a paragraph ending in ``::`` (or a ``.. code-block:: lang`` directive) followed by an indented
  block becomes a ``python`` (``lang``) code block;
- a reST simple table (rows framed by ``====  ====`` rules) becomes a plain code block;
- ``:func:`~a.b.c``` / ``:class:`x``` roles become code spans (``c``, ``x``);
- reST footnote markers (``[#]_``, ``.. [#]``) become ``(*)``.

Loaded by ``mkdocs.yml`` (``plugins: mkdocstrings: handlers: python: options: extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const|term|ref):`(~?)([^`]+)`")
_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")
_CODE = re.compile(r"^\.\. (?:code-block|code|sourcecode)::\s*(\w*)\s*$")


def _role(m: re.Match) -> str:
    target = m.group(2).strip()
    if m.group(1):  # ~a.b.c shows as c
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def convert(text: str) -> str:
    """The docstring ``text`` with doctests, literal blocks, simple tables and roles made Markdown.

    (Tested in ``tests/test_docs.py``; a doctest here would nest ``>>>`` prompts.)
    """
    lines = text.splitlines()
    out: list[str] = []
    i, fence = 0, False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):        # an existing Markdown fence: copy it untouched
            fence = not fence
            out.append(line)
            i += 1
            continue
        if fence:
            out.append(line)
            i += 1
            continue
        if stripped.startswith(">>>"):        # a doctest block runs to the next blank line
            pad = line[: _indent(line)]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(pad):] if lines[i].startswith(pad) else lines[i].strip())
                i += 1
            out += [f"{pad}```pycon", *(pad + b for b in block), f"{pad}```"]
            continue
        if _RULE.match(line):                 # a reST simple table: rule, rows, rule, rows, rule
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            # ``x`` -> x padded by the four backticks' width, so the columns stay aligned
            out += ["```text", *(re.sub(r"``([^`]*)``", r"\1    ", b).replace("[#]_", "(*) ") for b in block), "```"]
            continue
        directive = _CODE.match(stripped)
        if directive or (stripped.endswith("::") and not stripped.startswith("..")):
            # "text::" (or ".. code-block:: lang") then a blank line and an indented literal block
            lang = (directive.group(1) or "text") if directive else "python"
            if not directive:
                out.append(_ROLE.sub(_role, line[:-1] if stripped != "::" else ""))
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            base = _indent(line)
            if j < len(lines) and _indent(lines[j]) > base:
                block_indent = _indent(lines[j])
                k = j
                block: list[str] = []
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) >= block_indent):
                    block.append(lines[k][block_indent:])
                    k += 1
                while block and not block[-1].strip():
                    block.pop()
                pad = line[: _indent(line)]
                out += ["", f"{pad}```{lang}", *(pad + b if b else b for b in block), f"{pad}```", ""]
                i = k
                continue
            i += 1
            continue
        line = _ROLE.sub(_role, line)
        line = line.replace("[#]_", "(*)")
        if line.lstrip().startswith(".. [#]"):
            line = line.replace(".. [#]", "(*)", 1)
        out.append(line)
        i += 1
    return "\n".join(out)


class ReSTDocstrings(griffe.Extension):
    """Rewrite every loaded docstring with :func:`convert` before mkdocstrings renders it."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
