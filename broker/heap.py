"""Short full garbage collections on a broker of thousands of partitions.

CPython's full collection scans every object the collector tracks: with 10,000 partitions
that is millions of them and 100-200 ms during which the event loop stands still (no
heartbeat, no fetch answered; the event-loop lag P99 while 5,000 partitions were created was
0.25-2.5 s). Most of those objects live as long as their partition. So once a large metadata
change has been applied (topics created, a snapshot loaded) the heap is moved out of the
collector's sight (``gc.freeze``, as Instagram does after start-up), and the automatic full
collections scan only what came since.

The price: an object frozen while alive and dropped later in a reference cycle is collected
only by a collection of everything. A topic deletion gives everything back (``gc.unfreeze``:
its partitions' cycles must go), and ``full_collection`` (a connection that ended with
responses unread, see response_memory) collects frozen objects too.
"""

from __future__ import annotations

import gc

# Records applied (a partition each, mostly) between two freezes.
FREEZE_AFTER_RECORDS = 500


class Heap:
    def __init__(self) -> None:
        self._applied = 0

    def applied(self, record: dict) -> None:
        """Called with each metadata record once applied."""
        if record.get("type") == "remove_topic":
            gc.unfreeze()
            self._applied = 0
            return
        self._applied += 1
        if self._applied >= FREEZE_AFTER_RECORDS:
            self._applied = 0
            gc.collect(1)  # young garbage is collected, not frozen with the rest
            gc.freeze()


def full_collection() -> None:
    """Collect every unreachable object, frozen ones included (the others stay frozen)."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
