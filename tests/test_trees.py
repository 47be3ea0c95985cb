"""Tests for exactspec.trees: TokenTree construction, linearisation, attention mask, position ids, and
check_tree_attention on correct and buggy user builders."""

from __future__ import annotations

import numpy as np
import pytest

from exactspec.errors import ExactSpecError
from exactspec.trees import TokenTree, TreeAttentionReport, check_tree_attention

W = {"machine": 0, "learning": 1, "algorithm": 2, "system": 3, "design": 4, "translation": 5, "model": 6}
CHAINS = [["learning", "algorithm"], ["learning", "system", "design"], ["translation", "model"]]


def words(*ws: str) -> list[int]:
    return [W[w] for w in ws]


@pytest.fixture
def spec() -> TokenTree:
    """The SpecInfer worked example: three chains below ``machine`` merged into one tree."""
    return TokenTree.from_chains(W["machine"], [words(*c) for c in CHAINS])


def node_of(tree: TokenTree, word: str) -> int:
    (i,) = [i for i, t in enumerate(tree.tokens) if t == W[word]]
    return i


def sees(tree: TokenTree, word: str) -> set[str]:
    """The words node ``word`` attends to in the tree part of the mask."""
    row = tree.attention_mask()[node_of(tree, word)]
    return {w for w, tok in W.items() if tok in tree.tokens and row[node_of(tree, w)]}


# -- independent reference builders (no TokenTree methods beyond .parents / len) ------------------
def ref_mask_from_parents(parents) -> np.ndarray:
    n = len(parents)
    m = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j != -1:  # walk up to the root, marking i itself and every ancestor
            m[i, j] = True
            j = parents[j]
    return m


def ref_positions_from_parents(parents) -> list[int]:
    out = []
    for i in range(len(parents)):
        d, j = 0, i
        while parents[j] != -1:
            d, j = d + 1, parents[j]
        out.append(d)
    return out


def ref_mask_from_paths(paths) -> np.ndarray:
    full = [()] + list(paths)  # the root's path is ()
    return np.array([[a[:len(b)] == b for b in full] for a in full], dtype=bool)


# -- the worked example -----------------------------------------------------------------------------
def test_worked_example_merges_shared_prefix(spec):
    # 3 chains of 2 + 3 + 2 tokens, "learning" shared: 6 speculated nodes plus the root
    assert len(spec) == 7 and spec.n_speculated == 6
    assert spec.tokens == tuple(words("machine", "learning", "algorithm", "system", "design", "translation",
                                      "model"))
    assert spec.parents == (-1, 0, 1, 1, 3, 0, 5)
    assert spec.tokens.count(W["learning"]) == 1


def test_worked_example_mask(spec):
    assert sees(spec, "translation") == {"machine", "translation"}
    assert sees(spec, "design") == {"machine", "learning", "system", "design"}
    assert sees(spec, "algorithm") == {"machine", "learning", "algorithm"}
    assert sees(spec, "model") == {"machine", "translation", "model"}
    assert sees(spec, "machine") == {"machine"}
    m = spec.attention_mask()
    assert m.dtype == bool and m.shape == (7, 7)
    assert m.sum() == 1 + 2 + 3 + 3 + 4 + 2 + 3  # ancestors-or-self counts, node by node


def test_worked_example_positions_are_depths(spec):
    assert spec.depths == (0, 1, 2, 2, 3, 1, 2)
    assert spec.position_ids().tolist() == [0, 1, 2, 2, 3, 1, 2]
    assert spec.position_ids(prefix_len=5).tolist() == [5, 6, 7, 7, 8, 6, 7]
    assert spec.position_ids().dtype.kind == "i"


def test_worked_example_linearisation_is_depth_first(spec):
    assert spec.linearise() == list(range(7)) and spec.order() == list(range(7))
    # every ancestor precedes its descendants, and each subtree is one contiguous block
    for i in range(1, len(spec)):
        assert spec.parents[i] < i
    learning = node_of(spec, "learning")
    assert spec.children(learning) == (2, 3)
    assert spec.children(0) == (learning, node_of(spec, "translation"))
    assert spec.children(node_of(spec, "design")) == ()
    assert spec.path(node_of(spec, "design")) == tuple(words("learning", "system", "design"))
    assert spec.path(0) == ()
    assert spec.ancestors(node_of(spec, "design")) == (0, 1, 3)
    assert spec.ancestors(0) == ()
    assert spec.index_paths() == [(0,), (0, 0), (0, 1), (0, 1, 0), (1,), (1, 0)]


def test_prefix_columns_all_visible(spec):
    m = spec.attention_mask(prefix_len=3)
    assert m.shape == (7, 10)
    assert m[:, :3].all()
    assert (m[:, 3:] == spec.attention_mask()).all()


# -- construction and round trips ------------------------------------------------------------------
def test_from_parents_round_trip(spec):
    again = TokenTree.from_parents(spec.tokens, spec.parents)
    assert again == spec and hash(again) == hash(spec) and again.order() == list(range(7))
    assert eval(repr(spec), {"TokenTree": TokenTree}) == spec


def test_from_parents_relinearises_breadth_first_input():
    # Medusa lists nodes breadth-first: root, a, b, a's child x, b's child y
    tokens, parents = [9, 10, 20, 11, 21], [-1, 0, 0, 1, 2]
    t = TokenTree.from_parents(tokens, parents)
    assert t.tokens == (9, 10, 11, 20, 21) and t.parents == (-1, 0, 1, 0, 3)
    assert t.order() == [0, 1, 3, 2, 4]
    # the mask is the input's own ancestor mask, with rows and columns permuted by order()
    o = t.order()
    assert (t.attention_mask() == ref_mask_from_parents(parents)[np.ix_(o, o)]).all()
    assert [tokens[k] for k in o] == list(t.tokens)


def test_from_chains_round_trip_from_leaf_paths(spec):
    leaves = [i for i in range(len(spec)) if not spec.children(i)]
    assert TokenTree.from_chains(spec.tokens[0], [spec.path(i) for i in leaves]) == spec
    # chains that are prefixes of others, repeats and empty chains add nothing
    assert TokenTree.from_chains(0, [words(*c) for c in CHAINS] + [[], [1], [1, 3], [5, 6]]) == spec


def test_from_expansion_calls_tokens_fn_depth_first_and_round_trips():
    calls = []

    def tokens_fn(path):
        calls.append(path)
        return [10 * len(path) + k + (path[-1] if path else 0) for k in range(2)]

    t = TokenTree.from_expansion(7, (2, 2), tokens_fn)
    assert len(t) == 1 + 2 + 4 and t.depths == (0, 1, 2, 2, 1, 2, 2)
    assert calls == [(), (0,), (1,)]
    assert t.tokens == (7, 0, 10, 11, 1, 11, 12)
    assert TokenTree.from_parents(t.tokens, t.parents) == t
    assert TokenTree.from_chains(7, [t.path(i) for i in (2, 3, 5, 6)]) == t
    assert TokenTree.from_expansion(7, (), tokens_fn) == TokenTree.from_parents([7], [-1])


def test_duplicates_separate_in_expansion_merged_in_chains():
    t = TokenTree.from_expansion(0, (2, 2), lambda path: [5, 5])
    assert len(t) == 7 and t.tokens == (0, 5, 5, 5, 5, 5, 5)
    assert t.children(0) == (1, 4)
    m = t.attention_mask()
    assert not m[4, 1] and not m[2, 3]  # equal tokens, different nodes: no attention
    merged = TokenTree.from_chains(0, [t.path(i) for i in range(len(t))])
    assert len(merged) == 3 and merged.tokens == (0, 5, 5)


def test_expansion_wrong_count_names_the_path():
    with pytest.raises(ExactSpecError, match=r"tokens_fn\(\(4,\)\) returned 1 tokens.* 2 children at depth 2"):
        TokenTree.from_expansion(0, (1, 2), lambda path: [4] if not path else [8])
    with pytest.raises(ExactSpecError, match=r"expansion\[1\] must be an int >= 1"):
        TokenTree.from_expansion(0, (1, 0), lambda path: [4])


def test_tree_is_immutable_and_checks_node_ids(spec):
    with pytest.raises(AttributeError):
        spec.tokens = (1,)
    with pytest.raises(AttributeError):
        spec.extra = 1
    with pytest.raises(ExactSpecError, match="from_parents"):
        TokenTree([0], [-1])
    with pytest.raises(ExactSpecError, match=r"node 7 is not in this tree \(nodes 0..6\)"):
        spec.children(7)
    with pytest.raises(ExactSpecError, match=r"node -1 is not in this tree"):
        spec.path(-1)
    assert spec != TokenTree.from_chains(0, [[1, 2]]) and spec != "tree"


def test_long_chain_needs_no_recursion():
    t = TokenTree.from_chains(0, [list(range(1, 5001))])
    assert t.depths[-1] == 5000 and t.path(5000)[-1] == 5000
    # the same chain listed deepest first: input node k (k >= 1) holds token 5001 - k
    backwards = TokenTree.from_parents([0] + list(range(5000, 0, -1)), [-1] + list(range(2, 5001)) + [0])
    assert backwards == t and backwards.order() == [0] + list(range(5000, 0, -1))
    assert t.attention_mask(prefix_len=0)[4999, :5000].all() and not t.attention_mask()[4999, 5000]


BAD_PARENTS = [
    pytest.param([1, 2, 3], [-1, 0, -1], r"node 2 has parent -1 too \(two roots\)", id="two-roots"),
    pytest.param([1, 2, 3], [1, -1, 0], r"node 0 must be the root \(parent -1\), but its parent is 1", id="root-not-0"),
    pytest.param([1, 2, 3, 4], [-1, 0, 7, 1], r"node 2 has parent 7, outside the nodes 0..3", id="out-of-range"),
    pytest.param([1, 2, 3], [-1, -2, 0], r"node 1 has parent -2, outside", id="negative"),
    pytest.param([1, 2, 3], [-1, 0, 2], r"node 2 is its own parent", id="self-loop"),
    pytest.param([1, 2, 3, 4], [-1, 3, 1, 2], r"nodes 1 -> 3 -> 2 -> 1 form a cycle \(node 1's", id="cycle"),
    pytest.param([1, 2, 3, 4], [-1, 0, 3, 2], r"nodes 2 -> 3 -> 2 form a cycle", id="cycle-off-root"),
    pytest.param([1, 2], [-1], r"2 tokens but 1 parents", id="lengths"),
    pytest.param([], [], r"at least the root", id="empty"),
    pytest.param([1, "x"], [-1, 0], r"token of node 1 is 'x'", id="bad-token"),
    pytest.param([1, -3], [-1, 0], r"token of node 1 is -3; token ids must be non-negative", id="negative-token"),
    pytest.param([1, 2], [-1, 0.0], r"parent of node 1 is 0.0; expected an int", id="float-parent"),
    pytest.param([1, 2], [-1, True], r"parent of node 1 is the bool True", id="bool-parent"),
]


@pytest.mark.parametrize("tokens, parents, fragment", BAD_PARENTS)
def test_from_parents_rejects_bad_input_naming_the_node(tokens, parents, fragment):
    with pytest.raises(ExactSpecError, match=fragment):
        TokenTree.from_parents(tokens, parents)


def test_from_parents_accepts_numpy_input():
    t = TokenTree.from_parents(np.array([4, 5, 6]), np.array([-1, 0, 1]))
    assert t == TokenTree.from_chains(4, [[5, 6]]) and all(type(x) is int for x in t.tokens + t.parents)


# -- check_tree_attention: correct builders --------------------------------------------------------
def test_correct_builders_pass_for_every_input_form():
    r = check_tree_attention(lambda t: ref_mask_from_parents(t.parents),
                             lambda t: ref_positions_from_parents(t.parents))
    assert r.ok and r.trees_checked == 200 and r.what is None and r.tree is None
    r.assert_ok()
    assert "200 trees agree" in str(r)

    r = check_tree_attention(ref_mask_from_parents, ref_positions_from_parents, input="parents", trees=50)
    assert r.ok and r.trees_checked == 50 and r.input == "parents"

    r = check_tree_attention(ref_mask_from_paths, lambda paths: [0] + [len(p) for p in paths], input="paths",
                             trees=50, max_depth=5, max_width=2)
    assert r.ok and r.trees_checked == 50


def test_correct_builder_with_prefix_either_shape_and_any_array_like():
    p = 3

    def full(t):  # [n, prefix_len + n] as nested lists of 0/1
        return [[1] * p + [int(x) for x in row] for row in ref_mask_from_parents(t.parents)]

    class TensorLike:  # what torch tensors offer numpy
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return np.asarray(self.a, dtype=dtype)

    pos = lambda t: [p + d for d in ref_positions_from_parents(t.parents)]  # noqa: E731
    assert check_tree_attention(full, pos, prefix_len=p, trees=40).ok
    assert check_tree_attention(lambda t: TensorLike(ref_mask_from_parents(t.parents).astype(np.float32)),
                                lambda t: TensorLike(pos(t)), prefix_len=p, trees=40).ok
    # forgetting the prefix in the positions is caught at the root
    r = check_tree_attention(full, lambda t: ref_positions_from_parents(t.parents), prefix_len=p)
    assert (r.what, r.node, r.expected, r.got, r.trees_checked) == ("positions", 0, 3, 0, 1)
    # hiding the prefix is caught at column 0
    r = check_tree_attention(lambda t: np.hstack([np.zeros((len(t), p)), ref_mask_from_parents(t.parents)]),
                             prefix_len=p)
    assert (r.what, r.node, r.column, r.expected, r.got) == ("mask", 0, 0, True, False)
    assert "prefix token 0, which every node sees" in str(r)


def test_generated_trees_are_deterministic_and_cover_edge_cases():
    def record(seed, **kw):
        seen = []
        check_tree_attention(lambda t: seen.append(t) or t.attention_mask(), seed=seed, **kw)
        return seen

    a, b = record(1, trees=60), record(1, trees=60)
    assert a == b and len(a) == 60
    assert record(2, trees=60)[4:] != a[4:]
    root_only, chain, star, dups = a[:4]
    assert len(root_only) == 1
    assert chain.depths == (0, 1, 2, 3, 4) and chain.parents == (-1, 0, 1, 2, 3)
    assert star.depths == (0, 1, 1, 1)
    assert len(set(dups.tokens)) == 1 and len(dups) == 1 + 3 + 9
    for t in a:
        assert max(t.depths) <= 4
        assert all(len(t.children(i)) <= 3 for i in range(len(t)))
        assert all(t.parents[i] < i for i in range(1, len(t)))
    assert any(len(set(t.tokens[c] for c in t.children(i))) < len(t.children(i))
               for t in a[4:] for i in range(len(t)))  # random trees have duplicate siblings too
    assert len(record(0, trees=2)) == 2


# -- check_tree_attention: buggy builders and their first disagreement ----------------------------
STAR = TokenTree.from_parents([0, 1, 2, 3], [-1, 0, 0, 0])


def test_causal_mask_sees_siblings():
    r = check_tree_attention(lambda t: np.tril(np.ones((len(t), len(t)), dtype=bool)))
    assert not r.ok and (r.what, r.node, r.column, r.expected, r.got) == ("mask", 2, 1, False, True)
    assert r.tree == STAR and r.trees_checked == 3 and r.builder == "mask_fn"
    text = str(r)
    assert repr(STAR) in text and "node 2" in text and "column 1 is node 1 (token 1)" in text
    assert "expected row 2: 1010" in text and "got row 2:      1110" in text
    with pytest.raises(AssertionError, match="mask_fn disagrees at node 2, column 1") as info:
        r.assert_ok()
    assert str(info.value) == text


def test_mask_without_diagonal():
    r = check_tree_attention(lambda t: ref_mask_from_parents(t.parents) & ~np.eye(len(t), dtype=bool))
    assert (r.what, r.node, r.column, r.expected, r.got) == ("mask", 0, 0, True, False)
    assert len(r.tree) == 1 and "node 0 itself" in str(r)
    # with the root's own column forced on, the next miss is node 1's diagonal on the chain
    r = check_tree_attention(lambda t: ref_mask_from_parents(t.parents) & ~np.eye(len(t), dtype=bool)
                             | (np.arange(len(t)) == 0))
    assert (r.what, r.node, r.column, r.expected, r.got, r.trees_checked) == ("mask", 1, 1, True, False, 2)


def test_mask_with_parent_only_not_all_ancestors():
    def parent_only(t):
        m = np.eye(len(t), dtype=bool)
        for i, p in enumerate(t.parents):
            if p >= 0:
                m[i, p] = True
        return m

    r = check_tree_attention(parent_only)
    assert (r.what, r.node, r.column, r.expected, r.got) == ("mask", 2, 0, True, False)
    assert r.tree.parents == (-1, 0, 1, 2, 3)  # the chain edge case


def test_mask_matching_tokens_instead_of_nodes_caught_by_duplicates():
    def by_token(t):
        return np.array([[t.tokens[j] in {t.tokens[i], *t.path(i), t.tokens[0]} for j in range(len(t))]
                         for i in range(len(t))])

    r = check_tree_attention(by_token)
    assert (r.what, r.node, r.column, r.expected, r.got, r.trees_checked) == ("mask", 0, 1, False, True, 4)
    assert set(r.tree.tokens) == {3}


def test_positions_linear_index_instead_of_depth():
    r = check_tree_attention(lambda t: t.attention_mask(), lambda t: np.arange(len(t)))
    assert (r.what, r.node, r.expected, r.got, r.builder) == ("positions", 2, 1, 2, "positions_fn")
    assert r.tree == STAR and r.column is None
    assert "expected: [0, 1, 1, 1]" in str(r) and "got:      [0, 1, 2, 3]" in str(r)


def test_wrong_shape_reported_with_expected_shapes():
    r = check_tree_attention(lambda t: np.ones((len(t), len(t) + 1), dtype=bool))
    assert (r.what, r.expected, r.got, r.node, r.trees_checked) == ("shape", "(1, 1)", (1, 2), None, 1)
    assert "mask_fn returned the wrong shape" in str(r)

    r = check_tree_attention(lambda t: t.attention_mask(2)[None], prefix_len=2)
    assert (r.what, r.expected, r.got) == ("shape", "(1, 1) or (1, 3)", (1, 1, 3))
    assert "squeeze batch/head dimensions" in str(r)

    r = check_tree_attention(lambda t: t.attention_mask(), lambda t: [t.position_ids()])
    assert (r.what, r.builder, r.expected, r.got) == ("shape", "positions_fn", (1,), (1, 1))

    r = check_tree_attention(lambda t: [[1, 0], [1]] if len(t) > 1 else [[1]])
    assert r.what == "shape" and r.trees_checked == 2 and "could not be read as an array" in str(r)


def test_builder_that_raises_is_reported_with_its_tree():
    def fragile(parents):
        if len(parents) > 5:
            raise IndexError("row out of range")
        return ref_mask_from_parents(parents)

    r = check_tree_attention(fragile, input="parents")
    assert not r.ok and r.what == "error" and r.builder == "mask_fn"
    assert isinstance(r.error, IndexError) and r.got == "IndexError: row out of range"
    sizes = []
    check_tree_attention(lambda t: sizes.append(len(t)) or t.attention_mask())
    assert r.trees_checked == 1 + next(k for k, n in enumerate(sizes) if n > 5) and len(r.tree) > 5
    text = str(r)
    assert "mask_fn raised IndexError: row out of range" in text and repr(r.tree) in text
    assert f"input:    {list(r.tree.parents)!r}" in text
    with pytest.raises(AssertionError, match="raised IndexError"):
        r.assert_ok()

    r = check_tree_attention(lambda t: t.attention_mask(), lambda t: 1 / 0)
    assert (r.what, r.builder, r.trees_checked) == ("error", "positions_fn", 1)


def test_parents_and_paths_inputs_see_the_same_bugs():
    causal = lambda x: np.tril(np.ones((len(x), len(x))))  # noqa: E731
    r = check_tree_attention(causal, input="parents")
    assert (r.what, r.node, r.column) == ("mask", 2, 1) and r.tree == STAR

    # paths has one entry per speculated node: a builder sizing by len(paths) is off by the root
    r = check_tree_attention(lambda paths: np.ones((len(paths), len(paths))), input="paths")
    assert (r.what, r.expected, r.got, r.trees_checked) == ("shape", "(1, 1)", (0, 0), 1)

    r = check_tree_attention(lambda paths: causal([()] + list(paths)), input="paths")
    assert (r.what, r.node, r.column) == ("mask", 2, 1)
    assert "input:    [(0,), (1,), (2,)]" in str(r)


def test_additive_and_non_binary_masks_are_flagged():
    r = check_tree_attention(lambda t: np.where(t.attention_mask(), 2, 0))
    assert (r.what, r.node, r.column, r.expected, r.got) == ("mask", 0, 0, True, 2)
    assert "a mask holds bools or 0/1" in str(r)
    r = check_tree_attention(lambda t: np.where(t.attention_mask(), 0.0, -np.inf))
    assert (r.what, r.node, r.column, r.expected, r.got) == ("mask", 0, 0, True, False)
    r = check_tree_attention(lambda t: np.where(t.attention_mask(), 1.0, -np.inf))
    assert (r.what, r.node, r.column, r.expected, r.got, r.trees_checked) == ("mask", 0, 1, False, -np.inf, 2)
    assert "additive mask (0 / -inf) pass mask == 0" in str(r) and "got row 0:      1????" in str(r)
    assert check_tree_attention(lambda t: np.where(t.attention_mask(), 0.0, -np.inf) == 0).ok


def test_check_arguments_are_validated():
    ok = lambda t: t.attention_mask()  # noqa: E731
    with pytest.raises(ExactSpecError, match="input must be one of 'tree', 'parents', 'paths'"):
        check_tree_attention(ok, input="edges")
    with pytest.raises(ExactSpecError, match=r"trees must be an int >= 1, got 0"):
        check_tree_attention(ok, trees=0)
    with pytest.raises(ExactSpecError, match=r"prefix_len must be an int >= 0"):
        check_tree_attention(ok, prefix_len=-1)
    with pytest.raises(ExactSpecError, match="mask_fn must be callable"):
        check_tree_attention(np.eye(2))
    with pytest.raises(ExactSpecError, match="positions_fn must be callable or None"):
        check_tree_attention(ok, [0, 1])
    assert isinstance(check_tree_attention(ok, trees=1), TreeAttentionReport)
