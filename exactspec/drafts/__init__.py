"""Proposers: how a step's speculation is produced (a chain, a token tree, a merge of chains).

>>> import exactspec as es
>>> es.drafts.chain(gamma=2)
chain(gamma=2, sampling='sample', claim='draft')
>>> es.drafts.tree((2, 1), children="topk", claim="point_mass")
tree(expansion=(2, 1), children='topk', claim='point_mass')
"""

from .chain import ChainProposer, ChainStep, chain
from .tree import FixedTreeProposer, MergeProposer, TreeProposer, TreeStep, fixed, merge, tree

__all__ = ["chain", "tree", "merge", "fixed", "FixedTreeProposer", "ChainProposer", "ChainStep", "TreeProposer", "MergeProposer", "TreeStep"]
