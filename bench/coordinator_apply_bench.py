"""CPU of applying one diskless commit, in-process: what every broker spends on the event
loop for each WAL object (each applies the batch coordinator's log to its own SQLite state,
storage/diskless and coordinator/diskless).

A commit of ``--batches`` batches, one per partition of one topic (a WAL object at
10,000 partitions holds one batch of most partitions; 2,352 is the WAL buffer's bound),
applied to ``BatchCoordinatorState``: the first round creates the logs, the later rounds
append to them. Reported: the first round, and the smallest and median of the others.

    python -m bench.coordinator_apply_bench                  # 2,352 batches, 8 rounds
    python -m bench.coordinator_apply_bench --batches 500 --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from coordinator.diskless import BatchCoordinatorState
from storage.diskless.control_plane import CommitBatch, CommitFile

BATCH_BYTES = 100


def commit(round_: int, batches: int) -> CommitFile:
    entries = tuple(CommitBatch("bench", partition, partition * BATCH_BYTES, BATCH_BYTES, 1,
                                1_000, False, -1, 0, -1, -1, False)
                    for partition in range(batches))
    return CommitFile(f"req-{round_}", f"wal-{round_}", batches * BATCH_BYTES, 1, 1 + round_,
                      entries, False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="coordinator_apply_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=2352)
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        state = BatchCoordinatorState(Path(tmp) / "state.db")
        try:
            times = []
            for round_ in range(args.rounds):
                request = commit(round_, args.batches)
                started = time.perf_counter()
                state.apply(round_ + 1, request)
                times.append(1000 * (time.perf_counter() - started))
        finally:
            state.close()
    later = times[1:] or times
    print(f"commit of {args.batches} batches: first (new logs) {times[0]:.1f} ms, then "
          f"min {min(later):.1f} ms, median {statistics.median(later):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
