"""The diskless batch coordinator's state rebuilt from a checkpoint plus the tail of its log,
against a full replay of the log, back to back in one run (issue 17).

A log of ``--records`` coordinator records (WAL commits of idempotent producers over
``--partitions`` partitions, with a retention and an object-deletion record now and then),
JSON-encoded as ``__diskless-metadata`` holds them. Measured:
- full replay: decode and apply every record to an empty database;
- checkpoint: the online-backup copy of the state at ``--tail`` records before the end
  (what the writable coordinator uploads), its size;
- rebuild: check the checkpoint, swap it in, decode and apply the tail.
Both rebuilds must end in the same state. Run:

    python -m bench.coordinator_checkpoint_bench [--records 50000 --tail 5000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from coordinator.diskless import BatchCoordinatorState
from coordinator.diskless.checkpoints import copy_state, write_checkpoint
from protocol.records import decode_json_records, encode_json_records
from storage.diskless.control_plane import (
    CommitBatch,
    CommitFile,
    EnforceRetention,
    ObjectsDeleted,
    Request,
    RetentionLimits,
    decode_request,
)

RECORDS_PER_BATCH = 500


def coordinator_log(records: int, partitions: int, seed: int = 1) -> list[bytes]:
    """The records as the coordinator's log holds them, in batches of RECORDS_PER_BATCH."""
    rng = random.Random(seed)
    sequences: dict[int, int] = {}
    wire: list[dict] = []
    for i in range(records):
        now = 1_000_000 + i * 10
        request: Request
        if i % 1000 == 999:
            request = EnforceRetention(now, (RetentionLimits("t", 3_600_000, -1),))
        elif i % 500 == 499:
            request = ObjectsDeleted((f"wal/{i - 400}",))
        else:
            batches = []
            for _ in range(rng.randrange(1, 6)):
                producer = rng.randrange(50)
                sequence = sequences.get(producer, 0)
                sequences[producer] = sequence + 10
                batches.append(CommitBatch("t", rng.randrange(partitions), 0, 1_000, 10, now,
                                           False, producer, 0, sequence, sequence + 9))
            request = CommitFile(f"r{i}", f"wal/{i}", 5_000, i % 3, now, tuple(batches))
        wire.append(request.to_wire())
    log = []
    for start in range(0, len(wire), RECORDS_PER_BATCH):
        batch = encode_json_records(wire[start:start + RECORDS_PER_BATCH])
        batch[0:8] = start.to_bytes(8, "big")  # its base offset (outside the CRC)
        log.append(bytes(batch))
    return log


def replay(state: BatchCoordinatorState, log: list[bytes]) -> None:
    for batch in log:
        for offset, record in decode_json_records(batch):
            if offset > state.applied_offset:
                state.apply(offset, decode_request(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--tail", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=100)
    args = parser.parse_args()
    log = coordinator_log(args.records, args.partitions)
    head, tail = (log[:(args.records - args.tail) // RECORDS_PER_BATCH],
                  log[(args.records - args.tail) // RECORDS_PER_BATCH:])
    with tempfile.TemporaryDirectory(prefix="kipper-checkpoint-bench-") as scratch:
        work = Path(scratch)
        full = BatchCoordinatorState(work / "full.sqlite")
        started = time.perf_counter()
        replay(full, log)
        full_s = time.perf_counter() - started

        source = BatchCoordinatorState(work / "source.sqlite")
        replay(source, head)
        started = time.perf_counter()
        offset = copy_state(source.path, work / "checkpoint")
        copy_s = time.perf_counter() - started
        data = (work / "checkpoint").read_bytes()
        source.close()

        rebuilt = BatchCoordinatorState(work / "rebuilt.sqlite")
        started = time.perf_counter()
        write_checkpoint(data, work / "download")
        rebuilt.replace_with(work / "download")
        replay(rebuilt, tail)
        rebuild_s = time.perf_counter() - started
        assert rebuilt.applied_offset == full.applied_offset
        assert rebuilt.stats() == full.stats()
        assert rebuilt.logs() == full.logs()
        full.close()
        rebuilt.close()
    print(f"records {args.records}, checkpoint at offset {offset} (tail "
          f"{args.records - offset - 1} records), {args.partitions} partitions")
    print(f"full replay:              {full_s:7.2f} s")
    print(f"checkpoint + tail:        {rebuild_s:7.2f} s  ({full_s / rebuild_s:.1f}x faster)")
    print(f"checkpoint copy:          {copy_s:7.3f} s, {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
