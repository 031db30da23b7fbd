"""broker.heap: the heap is frozen after a large metadata change and given back on a deletion."""

from __future__ import annotations

import gc

from broker.heap import FREEZE_AFTER_ADDITIONS, Heap, collect_since, freezes, full_collection


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_frozen_after_many_records_and_given_back_on_a_deletion():
    heap = Heap()
    try:
        for index in range(FREEZE_AFTER_ADDITIONS):
            heap.applied({"type": "partition", "topic": "t", "partition": index})
        assert gc.get_freeze_count() > 0
        heap.applied({"type": "remove_topic", "name": "t"})
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_opened_logs_count_toward_a_freeze_as_records_do():
    heap = Heap()
    try:
        for _ in range(FREEZE_AFTER_ADDITIONS - 1):
            heap.applied({"type": "partition", "topic": "t", "partition": 0})
        assert gc.get_freeze_count() == 0
        heap.added()  # a log opened (ReplicaManager.opened_listeners)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_full_collection_reaches_frozen_cycles_and_keeps_the_rest_frozen():
    try:
        cycle = _Cycle()
        gc.freeze()
        collected = []
        del cycle
        gc.callbacks.append(lambda phase, info: collected.append(info.get("collected", 0)))
        try:
            full_collection()
        finally:
            gc.callbacks.pop()
        assert sum(collected) >= 1
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_collection_since_a_connection_began_reaches_frozen_cycles_only_after_a_freeze():
    heap = Heap()
    try:
        for index in range(FREEZE_AFTER_ADDITIONS):  # the heap frozen before the connection
            heap.applied({"type": "partition", "topic": "t", "partition": index})
        began = freezes()
        frozen = gc.get_freeze_count()
        collect_since(began)  # nothing frozen since: the frozen objects stay out of sight
        assert gc.get_freeze_count() == frozen
        for index in range(FREEZE_AFTER_ADDITIONS):  # frozen again while it was open
            heap.applied({"type": "partition", "topic": "t", "partition": index})
        cycle = _Cycle()
        gc.freeze()
        del cycle
        collected = []
        gc.callbacks.append(lambda phase, info: collected.append(info.get("collected", 0)))
        try:
            collect_since(began)
        finally:
            gc.callbacks.pop()
        assert sum(collected) >= 1
    finally:
        gc.unfreeze()
