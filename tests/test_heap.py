"""The heap frozen out of the collector's walks while an audit runs (exactspec._heap)."""

from __future__ import annotations

import gc
import threading

import pytest

import exactspec as es
from exactspec._heap import frozen


@pytest.fixture(autouse=True)
def _unfrozen():
    assert gc.get_freeze_count() == 0, "a test before this one left the heap frozen"
    yield
    gc.unfreeze()


def test_the_objects_alive_at_the_start_are_frozen_until_the_end():
    before = object()      # noqa: F841 - alive at the start
    with frozen():
        n = gc.get_freeze_count()
        assert n > 0
    assert gc.get_freeze_count() == 0


def _collectable(objs):
    """How many of ``objs`` the collector can reach (gc.get_objects lists generations 0-2, not the frozen one)."""
    ids = {id(o) for o in objs}
    return sum(id(o) in ids for o in gc.get_objects())


def test_blocks_nest_and_the_outermost_hands_the_heap_back():
    # asserted on the objects themselves: the freeze count also drops when any frozen object dies, which
    # unrelated code (the collector, another test's leftovers) may make happen at any time
    with frozen():
        made = [[] for _ in range(1000)]       # tracked containers made inside the outer block
        assert _collectable(made) == len(made)
        with frozen():
            assert _collectable(made) == 0     # an inner block freezes what the outer one made since
        assert _collectable(made) == 0         # and leaves it frozen: the outer block is still open
    assert _collectable(made) == len(made)     # the outermost block hands it back
    assert gc.get_freeze_count() == 0


def test_a_heap_frozen_by_someone_else_is_left_as_it_is():
    gc.freeze()
    theirs = gc.get_freeze_count()
    with frozen():
        [[] for _ in range(100)]
        assert gc.get_freeze_count() == theirs   # nothing more frozen by the block
    assert gc.get_freeze_count() == theirs       # and their objects not handed back


def test_blocks_in_several_threads_end_with_the_heap_handed_back():
    start, done = threading.Barrier(4), []

    def work():
        start.wait()
        for _ in range(200):
            with frozen():
                with frozen():
                    pass
        done.append(True)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 4 and gc.get_freeze_count() == 0


def test_an_audit_runs_with_the_heap_frozen_and_hands_it_back():
    seen = []

    def loop(target, draft, prompt):
        import torch
        seen.append(gc.get_freeze_count())
        return torch.cat([prompt, torch.multinomial(target(prompt)[0, -1].softmax(-1), 1)[None]], dim=1)
    pytest.importorskip("torch")
    p = es.models.context_free(("1/2", "1/4", "1/4"))
    r = es.audit_loop(loop, target=p, tokens=1, progress=False, workers=None)
    assert r.verdict == "lossless"
    assert seen and all(n > 0 for n in seen)
    assert gc.get_freeze_count() == 0
