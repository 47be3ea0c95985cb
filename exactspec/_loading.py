"""Import the object a ``MODULE:NAME`` string names, as the command line and the sampler search do.

>>> load_object("exactspec.rules:speculative_sampling", "--rule").name
'speculative_sampling'
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Sequence

from .errors import ExactSpecError, InvalidType, InvalidValue

__all__ = ["load_object"]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def load_object(spec: str, what: str, preload: Sequence[str] = ()) -> Any:
    """The object ``MODULE:NAME`` names, imported with the current directory on ``sys.path`` for the import only.

    ``preload`` modules (the audit's own dependencies, e.g. torch) are imported first, so a file
    of the same name in the current directory cannot stand in for them. Anything the import
    raises (SyntaxError, an exception, ``sys.exit``) becomes one ExactSpecError line.
    """
    import importlib
    mod_name, _, name = spec.partition(":")
    if not _DOTTED.fullmatch(mod_name) or not _DOTTED.fullmatch(name):
        raise InvalidValue(f"{what} must be MODULE:FUNCTION (dotted Python names), got {spec!r}")
    for dep in preload:
        try:
            importlib.import_module(dep)
        except ImportError:
            pass
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # MODULE is looked up from the current directory too, as `python -m` does, for this import only
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(mod_name)
    except SystemExit as exc:
        raise ExactSpecError(f"cannot load {spec}: importing {mod_name} called sys.exit({exc.code!r})") from None
    except SyntaxError as exc:
        raise ExactSpecError(f"cannot load {spec}: syntax error in {exc.filename}, line {exc.lineno}: "
                             f"{exc.msg}") from None
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if isinstance(exc, ModuleNotFoundError) and missing and (mod_name + ".").startswith(missing + "."):
            # the module named in ``spec`` (or a package above it) does not exist: an unknown name
            raise InvalidValue(f"cannot load {spec}: {exc}") from None
        raise ExactSpecError(f"cannot load {spec}: {exc}") from None   # raised inside the user's module
    except Exception as exc:  # the user's module raised at import: one line naming it
        raise ExactSpecError(f"cannot load {spec}: importing {mod_name} raised {type(exc).__name__}: "
                             f"{exc}") from None
    finally:
        if added:
            try:
                sys.path.remove(cwd)
            except ValueError:
                pass
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidValue(f"cannot load {spec}: {mod_name} has no attribute {name!r}") from None
    if not callable(obj):
        raise InvalidType(f"{spec} is {type(obj).__name__}, not a function")
    return obj
