"""The ``exactspec`` argument parser: the top-level command and the options several commands share.

Each command module (:mod:`exactspec.cli.check`, ...) adds its own sub-command with
``register(sub, options)``, in the order of :data:`exactspec.cli.COMMANDS`; this module holds what
they share (:class:`Options`) and builds the whole parser from those modules.

>>> from exactspec.cli import COMMANDS
>>> build(COMMANDS).parse_args(["check", "--json"]).cmd
'check'
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from .. import __version__
from .common import DEFAULT_TIME_LIMIT, _seconds


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        self.exit(2, f"exactspec: error: {message} (see `{self.prog} --help`)\n")


def _lattice_text(lattice: Any) -> str:
    """A generator lattice in a few words: ``[0, 1) in steps of 2**-24`` (``[0, 1)`` for the continuous model).

    >>> from exactspec.enumerate.rng import LATTICES
    >>> _lattice_text(None), _lattice_text(LATTICES["curand"])
    ('[0, 1)', '(0, 1] in steps of 2**-24')
    """
    if lattice is None:
        return "[0, 1)"
    if getattr(lattice, "name", None) == "native":
        return ("each draw on its generator's lattice: numpy and random k * 2**-53, torch CPU float32 k * 2**-24, "
                "0 included")
    if hasattr(lattice, "mantissa"):   # torch float16 / bfloat16: a float32 draw rounded to the dtype
        return f"a float32 draw rounded to {lattice.name[6:]}, 1.0 mapped to 0"
    step = lattice.step
    lo, hi = lattice.offset + lattice.kmin * step, lattice.offset + lattice.kmax * step
    left = "[0" if lo == 0 else "(0"
    right = "1]" if hi == 1 else "1)"
    if step.numerator == 1 and step.denominator & (step.denominator - 1) == 0:
        step_text = f"2**-{step.denominator.bit_length() - 1}"
    else:
        step_text = str(step)
    return f"{left}, {right} in steps of {step_text}"


class Options:
    """The help texts and option groups several sub-commands share (one wording for every command)."""

    def __init__(self) -> None:
        from ..drafts.chain import SAMPLINGS
        from ..drafts.tree import CHILDREN
        from ..enumerate.rng import RNG_MODELS, lattice_for
        self.SAMPLINGS, self.CHILDREN, self.RNG_MODELS = SAMPLINGS, CHILDREN, RNG_MODELS
        self.claims = ["draft", "point_mass", "renormalized"]
        self.limit = (f"wall-clock seconds for the whole command (default {DEFAULT_TIME_LIMIT:g}); past it the "
                      "command stops and exits 3, saying what it covered")
        self.json_help = "print JSON instead of text (default: text; exact numbers as strings like '3/5')"
        self.no_timings = ("with --json: leave out every wall-clock field (\"seconds\"), so two runs print "
                           "byte-identical JSON (default: timings included)")
        models = ", ".join(f"{n} ({_lattice_text(lattice_for(n))})" for n in RNG_MODELS)
        self.rng_help = (f"what a uniform draw is, one of {models} (default native: bugs that live on an exact 0 "
                         "from the generator, such as u <= p/q or searchsorted(side='left'), show; continuous hides "
                         "them)")

    def common(self, sp: argparse.ArgumentParser) -> None:
        """``--field``, ``--precision``, ``--time-limit``, ``--json`` and ``--no-timings`` (check, audit)."""
        sp.add_argument("--field", choices=["fraction", "mpmath", "float"], default="fraction",
                        help="number system (default fraction: exact; float and mpmath only bound the TV by a "
                             "tolerance, and a lossless verdict there exits 3)")
        sp.add_argument("--precision", type=int, default=None, help="mpmath precision in bits (default 113)")
        sp.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT, help=self.limit)
        sp.add_argument("--json", action="store_true", help=self.json_help)
        sp.add_argument("--no-timings", action="store_true", help=self.no_timings)

    def parallel(self, sp: argparse.ArgumentParser) -> None:
        """``--workers`` and ``--scheduler`` (check, search, sweep)."""
        sp.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run in chunks on N local worker processes (0: every core; 1: in this process; "
                             "default: every core when the job is long enough to pay for starting them, in this "
                             "process otherwise); the output is the same for any N")
        sp.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run the chunks on a Dask cluster, e.g. tcp://10.0.0.1:8786 (needs exactspec[dask]; "
                             "default: none)")

    def drafting(self, sp: argparse.ArgumentParser) -> None:
        """``--sampling``, ``--children`` and ``--claim`` of a rule's proposer (search, prove)."""
        sp.add_argument("--sampling", choices=list(self.SAMPLINGS), default=None,
                        help=f"chain rules: how drafts are drawn, one of {', '.join(self.SAMPLINGS)} (default sample)")
        sp.add_argument("--children", choices=list(self.CHILDREN), default=None,
                        help=f"tree rules: how children are drafted, one of {', '.join(self.CHILDREN)} (default iid)")
        sp.add_argument("--claim", choices=self.claims, default=None,
                        help=f"the law the verifier is told each draft came from, one of {', '.join(self.claims)} "
                             "(default draft)")

    def code_search_output(self, sp: argparse.ArgumentParser) -> None:
        """``--time-limit``, ``--json``, ``--no-timings`` and ``--quiet`` of a search over user code (audit-sampler,
        audit-loop)."""
        sp.add_argument("--time-limit", type=_seconds, default=DEFAULT_TIME_LIMIT,
                        help=self.limit + "; a search stopped early is incomplete (exit 3), never 'no counterexample'")
        sp.add_argument("--json", action="store_true", help=self.json_help)
        sp.add_argument("--no-timings", action="store_true", help=self.no_timings)
        self.quiet(sp)

    def quiet(self, sp: argparse.ArgumentParser) -> None:
        """``--quiet`` / ``-q`` (the long-running commands)."""
        sp.add_argument("--quiet", "-q", action="store_true",
                        help="print no progress on stderr (default: past a second, a bar with an ETA on a terminal, "
                             "else a line every 10 s)")

    def instance(self, sp: argparse.ArgumentParser, vocab: int, order: int, what: str,
                 search: Mapping[str, str] | None = None) -> None:
        """The options of one seeded instance (audit, audit-sampler).

        ``search``: for a command that searches by default and audits one instance with ``--instance``
        (audit-sampler), what the search covers when an option is left out (``gamma``, ``tokens``,
        ``expansion``, ``models``, keys of :func:`search_words`): each help then states both defaults.
        """
        from .common import INSTANCE_EXPANSION, INSTANCE_GAMMA
        SAMPLINGS, CHILDREN, claims = self.SAMPLINGS, self.CHILDREN, self.claims
        horizon = ("a step's largest output + 1, i.e. gamma + 2 for chains and depth + 2 for trees, so every "
                   "position of a first and a second step is observed; a smaller horizon is reported as a warning")
        if search is None:
            sp.add_argument("--vocab", type=int, default=vocab, help=f"vocabulary size (default {vocab})")
            sp.add_argument("--order", type=int, default=order,
                            help=f"context length the seeded target tables read (default {order})")
            sp.add_argument("--gamma", type=int, default=None,
                            help=f"chain {what}: drafted tokens per step (default {INSTANCE_GAMMA})")
            sp.add_argument("--tokens", type=int, default=None,
                            help=f"horizon: tokens whose law is audited (default: {horizon})")
            sp.add_argument("--seed", type=int, default=0, help="seed of the target tables; the draft uses seed + 1 "
                                                                "(default 0)")
        else:
            sp.add_argument("--vocab", type=int, default=vocab,
                            help=f"vocabulary size: the search's largest (it covers 2..VOCAB), or the --instance's "
                                 f"(default {vocab})")
            sp.add_argument("--order", type=int, default=order,
                            help=f"with --instance: context length the seeded target tables read (default {order}; "
                                 f"the search covers {search['models']} models)")
            sp.add_argument("--gamma", type=int, default=None,
                            help=f"chain {what}: drafted tokens per step: the search's largest, or the --instance's "
                                 f"(default: the search covers gamma {search['gamma']}; --instance {INSTANCE_GAMMA})")
            sp.add_argument("--tokens", type=int, default=None,
                            help=f"horizon: tokens whose law is audited (default: the search audits each instance "
                                 f"at {search['tokens']}, its shorter horizons being marginals of it; --instance "
                                 f"{horizon})")
            sp.add_argument("--seed", type=int, default=0,
                            help="seed of the search's random part, or of the --instance's target tables (the draft "
                                 "uses seed + 1) (default 0)")
        sp.add_argument("--sampling", choices=list(SAMPLINGS), default=None,
                        help=f"chain {what}: how drafts are drawn, one of {', '.join(SAMPLINGS)} (default sample)")
        sp.add_argument("--claim", choices=claims, default="draft",
                        help=f"the law the verifier is told each draft came from, one of {', '.join(claims)} "
                             "(default draft; renormalized for trees only)")
        if search is None:
            sp.add_argument("--expansion", default=None,
                            help=f"tree {what}: children per depth, e.g. '2 1' or '3,2' (default "
                                 f"'{INSTANCE_EXPANSION}')")
        else:
            sp.add_argument("--expansion", default=None,
                            help=f"tree {what}: children per depth, e.g. '2 1' or '3,2': the largest shape the "
                                 f"search covers (every shape within it), or the --instance's (default: the search "
                                 f"covers {search['expansion']}; --instance '{INSTANCE_EXPANSION}')")
        sp.add_argument("--children", choices=list(CHILDREN), default=None,
                        help=f"tree {what}: how children are drafted, one of {', '.join(CHILDREN)} (default iid)")


def search_words(chain: Any, tree: Any) -> dict[str, str]:
    """What a sampler search covers by default, in the words of the help: from its real spaces ``chain`` and ``tree``.

    >>> from exactspec.samplers.search import sampler_space
    >>> words = search_words(sampler_space("chain"), sampler_space("tree"))
    >>> words["gamma"], words["tokens"]
    ('1..3', 'gamma + 1 (trees: depth + 1)')
    """
    def span(values: Any) -> str:
        values = sorted(values)
        return f"{values[0]}..{values[-1]}" if values == list(range(values[0], values[-1] + 1)) else \
            "{" + ", ".join(str(v) for v in values) + "}"
    return {"gamma": span(s[0] for s in chain.shapes),
            "tokens": f"gamma + {chain.extra_tokens} (trees: depth + {tree.extra_tokens})",
            "expansion": ", ".join("'" + " ".join(str(k) for k in s) + "'" for s in tree.shapes),
            "models": ", ".join(f.replace("table", "order-1").replace("_", "-") for f in chain.families)}


def build(commands: Mapping[str, Any], only: str | None = None) -> argparse.ArgumentParser:
    """The whole ``exactspec`` parser: the top-level options, then each of ``commands``' sub-parsers in order.

    ``only``: the command the arguments name first; the other commands get a bare sub-parser (their
    options are never read then), so ``exactspec check`` does not import what ``search`` or
    ``audit-sampler`` need for their defaults (the counterexample space, the sampler adapters: numpy).
    """
    p = _Parser(prog="exactspec", description="Prove or refute, exactly, that speculative-decoding rules keep "
                                               "the target's law. Exit codes: 0 holds / lossless (exactly), "
                                               "1 bias found or claim broken, 2 bad input or user code failed, "
                                               "3 incomplete check (budget spent, search stopped early, inexact "
                                               "field), 130 interrupted.")
    p.add_argument("--version", action="version", version=f"exactspec {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    options = Options()
    for name, module in commands.items():
        if only is None or name == only:
            module.register(sub, options)
        else:
            sub.add_parser(name)
    return p
