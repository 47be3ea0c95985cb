"""``python -m exactspec ...``: the ``exactspec`` command, with the same options and exit codes."""

from .cli import entry

if __name__ == "__main__":
    entry()
