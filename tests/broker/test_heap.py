"""broker.heap: the heap is frozen after a large metadata change or many logs opened, and
collected whole once many partitions were dropped; young objects are collected after 5,000;
glibc keeps large freed blocks."""

from __future__ import annotations

import gc
import platform
import weakref

import pytest

from broker.heap import (
    FREEZE_AFTER_ADDITIONS,
    FULL_COLLECTION_AFTER_DROPS,
    YOUNG_COLLECTION_AFTER,
    Heap,
    collect_young_less_often,
    full_collection,
    keep_freed_memory,
)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _collected_during(action) -> int:
    collected = []
    gc.callbacks.append(lambda phase, info: collected.append(info.get("collected", 0)))
    try:
        action()
    finally:
        gc.callbacks.pop()
    return sum(collected)


def test_frozen_after_many_additions():
    heap = Heap()
    try:
        for _ in range(FREEZE_AFTER_ADDITIONS - 1):
            heap.added()
        assert gc.get_freeze_count() == 0
        heap.added()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("still_hosted", [0, 2 * FULL_COLLECTION_AFTER_DROPS])
def test_dropped_partitions_stay_frozen_until_enough_for_a_full_collection(still_hosted):
    """Enough: FULL_COLLECTION_AFTER_DROPS, or as many as are still hosted if more (the
    pause grows with them)."""
    heap = Heap()
    enough = max(FULL_COLLECTION_AFTER_DROPS, still_hosted)
    try:
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        gc.freeze()
        del cycle
        for _ in range(enough - 1):
            heap.dropped(still_hosted)
        gc.collect()  # an automatic collection leaves what is frozen alone
        assert alive() is not None
        heap.dropped(still_hosted)
        assert alive() is None
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_full_collection_reaches_frozen_cycles_and_keeps_the_rest_frozen():
    try:
        cycle = _Cycle()
        gc.freeze()
        del cycle
        assert _collected_during(full_collection) >= 1
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_allocator_settings():
    assert keep_freed_memory()


def test_young_objects_collected_less_often():
    """Only the youngest generation's threshold changes; the older ones keep Python's."""
    before = gc.get_threshold()
    try:
        collect_young_less_often()
        assert gc.get_threshold() == (YOUNG_COLLECTION_AFTER, *before[1:])
    finally:
        gc.set_threshold(*before)
