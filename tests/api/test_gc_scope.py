"""placer.gc_scope: the collection after a block frees the cycles it made and leaves the process as it was."""

from __future__ import annotations

import gc
import weakref

from placer.gc_scope import collected_after


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_the_cycles_a_block_made_are_collected_and_nothing_stays_frozen():
    gc.disable()  # no automatic collection may free it first: the block's own collection must
    try:
        with collected_after():
            made = _Node()
            alive = weakref.ref(made)
            del made
            assert alive() is not None  # a cycle outlives its last name until a collection
        assert alive() is None
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_older_objects_stay_tracked_and_their_garbage_goes_at_the_next_collection():
    gc.disable()
    try:
        older = _Node()
        old_ref = weakref.ref(older)
        with collected_after():
            del older  # made unreachable inside the block, but it existed before: not this block's
        assert old_ref() is not None
        gc.collect()  # given back to the collector
        assert old_ref() is None
    finally:
        gc.enable()


def test_a_process_that_froze_its_objects_keeps_them_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collected_after():
            made = _Node()
            alive = weakref.ref(made)
            del made
        assert alive() is None and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
