"""The rule catalog: correct and buggy verification rules, each with claim, description, reference.

A rule is a function ``fn(step, rng)`` that yields the tokens it emits (or returns them).
It reads the drafts and laws from ``step`` and makes random choices only through ``rng``:

- ``rng.categorical(law)``: a token drawn from a law (a sequence summing to 1);
- ``rng.bernoulli(prob)``: True with probability ``prob``;
- ``rng.uniform()``: a lazy uniform on [0, 1); compare it with numbers (``u < t``), scale or shift it.

The engine runs it once per branch of those draws, so it must be deterministic given them.

>>> import exactspec as es
>>> es.rules.get("greedy_match_sampled").claim
'biased'
>>> es.rules.get("ensemble(1/4)").params["weight"]
Fraction(1, 4)
"""

from __future__ import annotations

import re
from typing import Callable

from .._numbers import parse_rational
from ..errors import ExactSpecError, InvalidType, InvalidValue
from .chain import (CHAIN_RULES, TINY, ensemble, greedy_match, greedy_match_sampled, no_bonus, resample_from_target,
                    sample_and_match, speculative_sampling, stale_draft_probs, tiny_clamp_residual,
                    unverified_first_draft)
from .record import CLAIMS, CONDITION_KEYS, FAMILIES, Condition, Rule, as_rule, configuration, rule
from .medusa import typical_acceptance_medusa
from .tree import (TREE_RULES, greedy_tree, mss, multi_sample_match, naive_tree_sampling, shared_coin_tree,
                   typical_acceptance)

__all__ = ["Rule", "rule", "as_rule", "catalog", "get", "names", "CLAIMS", "FAMILIES", "TINY", "Condition",
           "CONDITION_KEYS", "configuration",
           "speculative_sampling", "greedy_match", "greedy_match_sampled", "resample_from_target",
           "stale_draft_probs", "unverified_first_draft", "no_bonus", "tiny_clamp_residual", "sample_and_match",
           "ensemble", "mss", "naive_tree_sampling", "greedy_tree", "multi_sample_match", "shared_coin_tree",
           "typical_acceptance", "typical_acceptance_medusa"]

_FACTORIES: dict[str, Callable[..., Rule]] = {"ensemble": ensemble, "shared_coin_tree": shared_coin_tree, "typical_acceptance": typical_acceptance,
                                               "typical_acceptance_medusa": typical_acceptance_medusa}


def catalog() -> list[Rule]:
    """Every catalog rule (parameterised rules at their default parameters).

    >>> len(catalog()) >= 10
    True
    """
    return list(CHAIN_RULES) + list(TREE_RULES)


def names() -> list[str]:
    """The catalog's rule names, as :func:`get` accepts them.

    >>> "speculative_sampling" in names()
    True
    """
    return [r.name for r in catalog()] + [f"{k}(<args>)" for k in _FACTORIES]


def get(name: str) -> Rule:
    """The catalog rule called ``name``; parameterised rules take arguments: ``"ensemble(1/3)"``.

    >>> get("speculative_sampling").name
    'speculative_sampling'
    >>> get("speculative")
    Traceback (most recent call last):
    ...
    exactspec.errors.InvalidValue: unknown rule 'speculative': did you mean speculative_sampling? (`exactspec rules` lists them)
    """
    if not isinstance(name, str):
        raise InvalidType(f"a rule name must be a string, got {name!r}")
    name = name.strip()
    for r in catalog():
        if r.name == name:
            return r
    if name in _FACTORIES:
        return _FACTORIES[name]()
    m = re.fullmatch(r"(\w+)\((.*)\)", name)
    if m and m.group(1) in _FACTORIES:
        args = [a.strip() for a in m.group(2).split(",") if a.strip()]
        try:
            # bounded parsing: Fraction("1e-999999999") would expand a billion digits
            values = [parse_rational(a, f"argument {i + 1}") for i, a in enumerate(args)]
        except ExactSpecError as exc:
            raise InvalidValue(f"bad arguments for rule {m.group(1)}: {exc}") from None
        try:
            return _FACTORIES[m.group(1)](*values)
        except ExactSpecError:   # the factory's own message names what was wrong (an InvalidValue is a ValueError)
            raise
        except (ValueError, ZeroDivisionError, TypeError) as exc:
            raise InvalidValue(f"bad arguments for rule {m.group(1)}: {m.group(2)!r} ({exc})") from None
    if name in _FACTORIES:
        return _FACTORIES[name]()
    import difflib
    close = difflib.get_close_matches(name, [r.name for r in catalog()] + list(_FACTORIES), n=1, cutoff=0.5)
    hint = f": did you mean {close[0]}?" if close else ""
    raise InvalidValue(f"unknown rule {name!r}{hint} (`exactspec rules` lists them)")
