"""Print the README's two set-up commands (the ```bash blocks of "Set up on a fresh machine"), one per line."""

import pathlib
import re
import sys

readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
section = readme.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
blocks = [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]
if len(blocks) != 2 or any("\n" in block for block in blocks):
    sys.exit(f"README.md: 'Set up on a fresh machine' must hold exactly two one-line bash blocks, found {blocks!r}")
print("\n".join(blocks))
