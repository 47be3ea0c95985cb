"""The verdicts of ``es.prove``: :class:`Proof` (the rule keeps the law on every cell) and :class:`Refutation`.

>>> import exactspec as es
>>> res = es.prove(es.rules.speculative_sampling, proposer=es.drafts.chain(1), vocab=2, tokens=1,
...                family="context_free")
>>> isinstance(res, Proof), res.exit_code
(True, 0)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field
from typing import Any

from .families import FAMILIES

__all__ = ["Proof", "Refutation"]


def _family_words(a: dict) -> str:
    """The family as the headline states it: which targets and drafts the verdict is about."""
    fam = a["family"]
    if fam == "context_free":
        return "context-free target and draft (one law at every position)"
    if fam == "per_position":
        n = a["tokens"]
        return ("per-position target and draft (a law of its own at each of the first "
                f"{n} position(s), later positions sharing the last)")
    return f"order-1 table target and draft (a law per previous token, prompt {tuple(a['prompt'])})"


def _vocab_words(a: dict) -> str:
    """``vocab 3``, or ``every vocabulary size >= 2`` for an all-vocabulary proof."""
    if a["vocab"] == "all":
        return (f"every vocabulary size >= {a['min_vocab']} (the tokens outside the outcome as "
                f"{len(a['classes'])} class(es) of exchangeable unnamed tokens)")
    return f"vocab {a['vocab']}"


def _default_note(a: dict) -> str:
    if a.get("family_source") != "default":
        return ""
    others = [f for f in FAMILIES if f != a["family"]]
    return (f" Family: the default at this size, not the one asked for: the rule was not proven for "
            f"{' or '.join(others)} laws, so this proof exits 3 (not checked in full); name the family "
            f"(family='{a['family']}', --family {a['family']}) to accept this proof as the check, or prove the "
            "others at a vocab where they are feasible.")


@dataclass
class Proof:
    """The rule keeps the expected law on every cell: for every target and draft law of the family.

    ``cells``: the cells (each a list of readable constraints); ``paths``: branches enumerated
    over all cells; ``atoms``: distinct polynomials compared; ``assumptions``: the scope.
    """

    rule: str
    cells: list
    paths: int
    atoms: int
    assumptions: dict
    seconds: float
    stats: dict = dc_field(default_factory=dict)
    proven = True

    def __bool__(self) -> bool:
        return True

    @property
    def exit_code(self) -> int:
        """0 for a proof of the family the caller named; 3 for one of a default family (narrower than asked).

        A call without ``family=`` asks about the rule, not about one family of laws; the default family is
        the one feasible at the size, so the proof did not cover what was asked: never exit 0.
        """
        return 3 if self.assumptions.get("family_source") == "default" else 0

    @property
    def family(self) -> str:
        """The family of target and draft laws the proof covers (``context_free``, ``per_position``, ``table``)."""
        return self.assumptions["family"]

    def summary(self) -> str:
        a = self.assumptions
        if a["vocab"] == "all":
            trip = a.get("tripwire", {})
            return (f"PROVEN: {self.rule} emits exactly the {a['expected']} law for every {_family_words(a)} at "
                    f"{_vocab_words(a)}, {a['proposer']}, first {a['tokens']} token(s): {len(self.cells)} cell(s), "
                    f"{self.paths} enumerated path(s), {self.atoms} atom(s), {self.seconds:.2f} s. Theorem: "
                    f"{a.get('theorem', '')}. Scope: that family, proposer and horizon, every vocabulary size; the "
                    "abstraction and its soundness: docs/proofs-scale-out.md. Tripwire (a check on the prover, "
                    f"not part of the proof): {trip.get('audits', 0)} exact audits at vocab 2-6 and es.prove at "
                    f"vocab {', '.join(str(v) for v in trip.get('concrete_proofs', {})) or '-'} agree."
                    + _default_note(a))
        return (f"PROVEN: {self.rule} emits exactly the {a['expected']} law for every {_family_words(a)} at "
                f"{_vocab_words(a)}, {a['proposer']}, first {a['tokens']} "
                f"token(s), prompt {tuple(a['prompt'])}: {len(self.cells)} cell(s), "
                f"{self.stats.get('step laws', 0)} step law(s) ({self.paths} enumerated path(s), the rest closed "
                f"forms), {self.atoms} atom(s), "
                f"{self.seconds:.2f} s. Scope: that family, vocab, proposer and horizon only."
                + _default_note(a))

    __str__ = summary

    def to_dict(self) -> dict:
        return {"verdict": "proven", "rule": self.rule, "family": self.assumptions["family"],
                "family_named": self.assumptions.get("family_source") != "default", "exit_code": self.exit_code,
                "theorem": self.assumptions.get("theorem"), "assumptions": self.assumptions, "cells": self.cells,
                "n_cells": len(self.cells), "paths": self.paths, "atoms": self.atoms,
                "seconds": round(self.seconds, 3), "stats": self.stats, "summary": self.summary()}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)


@dataclass
class Refutation:
    """A cell where ``output(o) - expected(o)`` is not 0, and a rational witness replayed exactly.

    ``report`` is the exact :class:`~exactspec.AuditReport` at the witness (``tv > 0``) and
    ``counterexample`` the matching :class:`~exactspec.Counterexample` (``.to_pytest()``).
    """

    rule: str
    cell: list
    outcome: tuple
    difference: str
    witness: dict
    report: Any
    counterexample: Any
    assumptions: dict
    seconds: float
    cells_done: int = 0
    proven = False
    exit_code = 1

    def __bool__(self) -> bool:
        return False

    @property
    def family(self) -> str:
        """The family of target and draft laws the witness was found in."""
        return self.assumptions["family"]

    def summary(self) -> str:
        a = self.assumptions
        w = "; ".join(f"{k} = ({', '.join(str(x) for x in v)})" for k, v in self.witness.items())
        where = (f"every vocabulary size >= {a['min_vocab']} searched; the witness has vocab {len(self.witness['p'])}"
                 if a["vocab"] == "all" else f"vocab {a['vocab']}")
        return (f"REFUTED: {self.rule} does not emit the {a['expected']} law for some {_family_words(a)} "
                f"({where}, {a['proposer']}, {a['tokens']} token(s)). On the cell "
                f"{{{', '.join(self.cell)}}} output{self.outcome} - expected{self.outcome} = {self.difference}. "
                f"Witness {w}: the exact engine gives TV = {self.report.tv}.")

    __str__ = summary

    def to_dict(self) -> dict:
        return {"verdict": "refuted", "rule": self.rule, "family": self.assumptions["family"],
                "assumptions": self.assumptions, "cell": self.cell,
                "outcome": list(self.outcome), "difference": self.difference,
                "witness": {k: [str(x) for x in v] for k, v in self.witness.items()},
                "tv": str(self.report.tv), "seconds": round(self.seconds, 3),
                "counterexample": self.counterexample.to_dict(), "summary": self.summary()}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

