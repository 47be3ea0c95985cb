"""Proposers: how a step's speculation is produced (a chain of ``gamma`` drafted tokens).

>>> import exactspec as es
>>> es.drafts.chain(gamma=2)
chain(gamma=2, sampling='sample', claim='draft')
"""

from .chain import ChainProposer, ChainStep, chain

__all__ = ["chain", "ChainProposer", "ChainStep"]
