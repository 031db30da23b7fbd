"""Short full garbage collections on a broker of thousands of partitions.

CPython's full collection scans every object the collector tracks: with 10,000 partitions
that is millions of them and 100-200 ms during which the event loop stands still (no
heartbeat, no fetch answered; the event-loop lag P99 while 5,000 partitions were created was
0.25-2.5 s). Most of those objects live as long as their partition. So once a large metadata
change has been applied (topics created, a snapshot loaded), and once a batch of partitions'
logs has been opened, the heap is moved out of the collector's sight (``gc.freeze``, as
Instagram does after start-up), and the automatic full collections scan only what came since.
Opened logs count as metadata does: a log is opened after its metadata was applied (in the
background, or by its first request), and what it is made of lives as long as its partition
too; left unfrozen, 10,000 of them would be scanned by every full collection.

The price: an object frozen while alive and dropped later in a reference cycle is collected
only by a collection of everything. A dropped partition (its topic deleted, its replica moved
away) leaves nothing to the collector as a rule: deleting 2,000 opened, produced-to and
fetched partitions left no unreachable object, reference counting freed them all. So a
deletion does not give the heap back (that made the next collections scan everything: one
held the event loop 0.4 s after a 5,000-partition topic was deleted in a 20,000-partition
cluster); a full collection runs once as many partitions were dropped as are still hosted
(FULL_COLLECTION_AFTER_DROPS at least), which bounds what cycles could keep. Its pause grows
with the frozen heap, which grows with the partitions hosted, so it comes after drops in
proportion, as Python's own rule for its oldest generation waits for new objects in
proportion to the old: each one the bench set off after 10,000 drops, in a broker hosting
20,000-25,000 partitions, took 0.3-0.4 s and found 0-3 objects to free. Nothing else reaches
into the frozen heap: a connection frees its responses itself when it ends, and its
abandoned cycles are collected among the unfrozen objects (broker/response_memory.py).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time

log = logging.getLogger(__name__)
# Long-lived additions (a metadata record applied: a partition, mostly; a partition's log
# opened) between two freezes.
FREEZE_AFTER_ADDITIONS = 500
# Hosted partitions dropped between two full collections, at least (see the module's
# docstring).
FULL_COLLECTION_AFTER_DROPS = 10_000
# Net new objects the collector tracks before it collects the young ones (Python's default:
# 700; see collect_young_less_often).
YOUNG_COLLECTION_AFTER = 5_000

# glibc's mallopt parameters, and the largest mmap threshold it takes on 64-bit.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_LARGEST_MMAP_THRESHOLD = 32 << 20
# Free memory at the top of the heap that glibc keeps rather than gives back.
_TRIM_THRESHOLD = 128 << 20


def keep_freed_memory() -> bool:
    """Have glibc serve large blocks (up to 32 MiB) from the heap and keep what is freed,
    rather than map fresh pages for each and unmap them when freed. A broker allocates such
    blocks all the time: each request and follower fetch response of a megabyte or more
    (up to 16 MiB) is received into one. Fresh pages are zeroed by the kernel, one fault
    each: replicating 520 MB on three brokers took 270,000 page faults, and joining the
    received chunks into frames was a sixth of the brokers' time. With this, 50,000-85,000,
    and 8-10 % less CPU a request. It keeps at most 128 MiB free at the top of the heap.
    False where the C library has no mallopt (musl, macOS): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _LARGEST_MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def collect_young_less_often() -> None:
    """Collect the youngest objects after 5,000 net new ones rather than Python's 700. A
    broker under load makes and frees objects in bursts larger than 700 (a request's
    entities, a fetch response's entries), so at 700 young collections ran every few
    requests, traversed bursts still in use and moved them to the older generations, whose
    collections followed. 20,000 produce requests on three brokers, RF=3
    (bench/produce_pipeline_bench.py's method), per broker and round:

    - over 10 partitions: 155-235 young collections, 0.35-0.52 s collecting of a 6 s round;
      at 5,000: 3-4 and 0.01-0.07 s;
    - over 10,000: 334-392 young collections and 3 full ones of 90-150 ms each, 1.0-1.2 s
      of a 12 s round; at 5,000: 14-24 young ones, no full one, 0.3-0.6 s.

    A young collection then takes longer (over 10,000 partitions 1 ms -> 14-22 ms), well
    inside the event loop's 50 ms."""
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *gc.get_threshold()[1:])


class Heap:
    def __init__(self) -> None:
        self._added = 0
        self._dropped = 0

    def added(self) -> None:
        """Called when something that lives as long as its partition was made (a metadata
        record applied, a log opened)."""
        self._added += 1
        if self._added >= FREEZE_AFTER_ADDITIONS:
            self._added = 0
            gc.collect(1)  # young garbage is collected, not frozen with the rest
            gc.freeze()

    def dropped(self, still_hosted: int) -> None:
        """Called when a hosted partition was dropped (topic deleted, replica moved away),
        with how many partitions are still hosted."""
        self._dropped += 1
        if self._dropped >= max(FULL_COLLECTION_AFTER_DROPS, still_hosted):
            self._dropped = 0
            full_collection()


def collect_unfrozen() -> None:
    """Collect the unreachable objects that are not frozen (a full collection of them: with
    the heap frozen, a short one)."""
    gc.collect()


def full_collection() -> None:
    """Collect every unreachable object, frozen ones included (the others stay frozen)."""
    frozen = gc.get_freeze_count()
    started = time.monotonic()
    gc.unfreeze()
    unreachable = gc.collect()
    if frozen:
        gc.freeze()
    log.info("full garbage collection of %d objects: %d unreachable, %.0f ms", frozen,
             unreachable, (time.monotonic() - started) * 1000)
