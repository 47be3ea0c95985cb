"""The README: its example runs and prints what it shows, its two set-up commands, its links and its exit codes.

The manual lives in ``docs/`` (its examples run in ``tests/test_docs.py``); the README keeps the
pitch, the two commands, the five-line example, the feature table and the verdict/exit-code rule.
"""

import pathlib
import re
import subprocess
import sys

import exactspec as es
from exactspec import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_example_runs_and_prints_what_it_shows(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 1
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    printed = capsys.readouterr().out
    shown = re.search(r"```text\n(rule stale_draft_probs.*?)```", README.read_text(), flags=re.S).group(1)
    for line in shown.splitlines():
        line = line.rstrip()
        if line.endswith("...") or line.strip() == "...":   # elided in the README
            line = line.rstrip(".").rstrip(", ")
        assert line in printed, line
    assert ns["report"].verdict_text.startswith("biased on this instance over the first 6 tokens")


def test_readme_carries_the_two_setup_commands():
    text = README.read_text()
    assert "python -m pip install '.[fast]' && exactspec check" in text
    tests = ("python -m pip install -e '.[test,fast,audit,docs,dask]' -r tests/published.txt && "
             "python -m pip install --no-deps -r tests/published-nodeps.txt && "
             "EXACTSPEC_REQUIRE_PUBLISHED=1 python -m pytest -n 2")
    assert tests in text
    # CI runs exactly these two commands, read from the README, in a fresh virtual environment of its own
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and "rm -rf" in ci and "python .ci/readme_commands.py" in ci
    commands = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py")], capture_output=True,
                              text=True, check=True).stdout.splitlines()
    assert commands == ["python -m pip install '.[fast]' && exactspec check", tests]
    for name in ("published.txt", "published-nodeps.txt"):
        pins = [line for line in (ROOT / "tests" / name).read_text().splitlines() if line and not line.startswith("#")]
        assert pins and all("==" in line for line in pins), f"tests/{name} pins every package to one release"


def test_readme_links_point_to_existing_pages():
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert len(links) >= 8
    for link in links:
        assert (ROOT / link).is_file(), link


def test_readme_exit_code_table_matches_the_cli():
    text = README.read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
        assert code in text
    assert f"`--time-limit` seconds (default {cli.DEFAULT_TIME_LIMIT:g})" in text
    # the horizon the README states is the one es.audit uses
    assert es._audit.default_tokens(es.drafts.chain(4)) == 6 and "`gamma + 2` for a chain" in text


def test_getting_started_includes_the_readme_setup_commands():
    """The README is the one source of the set-up commands: docs/getting-started.md includes its sections."""
    readme = README.read_text()
    page = (ROOT / "docs" / "getting-started.md").read_text()
    commands = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py")], capture_output=True,
                              text=True, check=True).stdout.splitlines()
    for name, command in zip(("setup-main", "setup-tests"), commands, strict=True):
        section = re.search(rf"--8<-- \[start:{name}\][^\n]*\n(.*?)\n[^\n]*--8<-- \[end:{name}\]", readme, re.S)
        assert section is not None, f"README.md has no --8<-- [start:{name}] ... [end:{name}] section"
        assert f"```bash\n{command}\n```" in section.group(1), name
        assert f'--8<-- "README.md:{name}"' in page, f"docs/getting-started.md does not include README.md:{name}"
    # no command of its own that could drift from the README's
    assert "pip install" not in page.replace("python -m pip install -e '.[fast,notebook]'", "")
    assert "python -m pytest\n" not in page and "pytest &&" not in page
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert "pymdownx.snippets" in mkdocs and "check_paths: true" in mkdocs
