"""Keywords a public function refuses with a typed error saying what to call instead.

``audit_sampler`` and ``audit_loop`` audit one instance and ``search_sampler`` and ``search_loop`` search small
ones: a keyword that belongs to the other function (``search=True``, a search option given to the one-instance
audit, an instance given to the search) is an :class:`~exactspec.errors.InvalidType` naming the function to call,
never Python's bare "unexpected keyword argument" and never ignored. The refused keywords are not parameters: the
function's signature (``inspect.signature``, ``help``) shows only what it takes.

>>> @refusing({"search": "f(search=...) is g(...) now"})
... def f(*, x: int = 0) -> int:
...     return x
>>> f(x=2)
2
>>> f(search=True)
Traceback (most recent call last):
...
exactspec.errors.InvalidType: f(search=...) is g(...) now
"""

from __future__ import annotations

import functools
from typing import Callable, Mapping, ParamSpec, TypeVar

from ..errors import InvalidType

__all__ = ["refusing"]

P = ParamSpec("P")
R = TypeVar("R")


def refusing(refused: Mapping[str, str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a function so that each keyword of ``refused`` raises :class:`~exactspec.errors.InvalidType` with its message.

    A message may hold ``{names}``: the refused keywords given that share the message, as ``a= and b=``. The
    wrapped function keeps its name, docstring and signature (``functools.wraps``); it is thread-safe (the
    wrapper keeps no state).

    >>> @refusing({"target": "s: {names} do not apply", "draft": "s: {names} do not apply"})
    ... def s(fn: object) -> str:
    ...     return "searched"
    >>> s(print, target=1, draft=2)
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidType: s: target= and draft= do not apply
    """
    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            given = [k for k in kwargs if k in refused]
            if given:
                message = refused[given[0]]
                names = " and ".join(f"{k}=" for k in given if refused[k] == message)
                raise InvalidType(message.format(names=names))
            return fn(*args, **kwargs)
        return call
    return wrap
