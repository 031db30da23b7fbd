"""Request records for the control plane tests (the contract suite and the SQLite-only
tests), with the defaults those tests share: topic "t", partition 0, 100-byte batches."""

from __future__ import annotations

from storage.diskless.control_plane import (
    BatchMove,
    BatchRewrite,
    CommitBatch,
    CommitFile,
    Compact,
    DeleteRecords,
    DeleteTopic,
    EnforceRetention,
    Merge,
    ObjectsDeleted,
    RetentionLimits,
)


def batch(topic="t", partition=0, size=100, count=1, ts=1_000, log_append_time=False,
          producer=-1, epoch=0, seq=-1, byte_offset=0, transactional=False) -> CommitBatch:
    return CommitBatch(topic, partition, byte_offset, size, count, ts, log_append_time,
                       producer, epoch, seq, -1 if seq < 0 else seq + count - 1, transactional)


def marker(producer, commit, epoch=0, coordinator_epoch=0, topic="t", partition=0, size=70,
           ts=1_000) -> CommitBatch:
    """A commit or abort marker's control batch, as the WAL writer describes it."""
    return CommitBatch(topic, partition, 0, size, 1, ts, False, producer, epoch, -1, -1, True,
                       commit, coordinator_epoch)


def commit_file(key, *batches, now=1_000, request_id=None, object_size=None,
                uploader=1, one_partition_of_object=False) -> CommitFile:
    return CommitFile(request_id or f"req-{key}", key,
                      object_size or sum(b.byte_size for b in batches), uploader, now, batches,
                      one_partition_of_object)


def delete_records(offset, now, topic="t", partition=0) -> DeleteRecords:
    return DeleteRecords(topic, partition, offset, now)


def retention(now, retention_ms=-1, retention_bytes=-1, topic="t") -> EnforceRetention:
    return EnforceRetention(now, (RetentionLimits(topic, retention_ms, retention_bytes),))


def live_bytes(control_plane, key):
    """The sizes of the live batches in object ``key`` (None: it holds none)."""
    return [b.byte_size for b in control_plane.object_batches(key)] or None


def random_batch(rng, now, epochs):
    """A data batch or a marker; producer 3 is transactional, 1 and 2 sometimes. Markers
    may bump a producer's epoch in ``epochs`` (fencing it) or come from an old producer or
    coordinator epoch; data batches sometimes come from a fenced (older) epoch."""
    topic, partition = rng.choice("xyz"), rng.randrange(3)
    producer = rng.choice([-1, 1, 2, 3])
    if producer >= 0 and rng.random() < 0.25:
        epochs[producer] += rng.random() < 0.2
        return marker(producer, rng.random() < 0.5,
                      epoch=epochs[producer] - (rng.random() < 0.1),
                      coordinator_epoch=rng.choice([0, 1, 1, 1]), topic=topic,
                      partition=partition, ts=now)
    return batch(topic=topic, partition=partition, size=rng.randrange(1, 500),
                 count=rng.randrange(1, 5), ts=now - rng.randrange(5_000),
                 log_append_time=rng.random() < 0.3, producer=producer,
                 epoch=epochs[producer] - (rng.random() < 0.1) if producer >= 0 else 0,
                 seq=rng.randrange(6), transactional=producer == 3 or rng.random() < 0.2)


def random_records(rng, state, count):
    """Records as a coordinator would write them; merges move what ``state`` proposes."""
    epochs = {1: 0, 2: 0, 3: 0}
    for i in range(count):
        kind = rng.choices(["commit", "delete", "retention", "gc", "merge", "compact",
                            "topic"], [60, 8, 8, 8, 8, 8, 1])[0]
        now = 1_000 * i
        if kind == "commit":
            batches = [random_batch(rng, now, epochs) for _ in range(rng.randrange(1, 6))]
            yield commit_file(f"o{i}", *batches, request_id=f"r{rng.randrange(i + 1)}",
                              object_size=3_000, uploader=0, now=now)
        elif kind == "delete":
            yield delete_records(rng.randrange(-1, 30), now, topic=rng.choice("xyz"),
                                 partition=rng.randrange(3))
        elif kind == "retention":
            yield EnforceRetention(now, tuple(
                RetentionLimits(t, rng.choice([-1, 20_000]), rng.choice([-1, 2_000]))
                for t in "xyz"))
        elif kind == "gc":
            yield ObjectsDeleted(tuple(f"o{rng.randrange(i + 1)}" for _ in range(3)))
        elif kind == "merge":
            moves = tuple(BatchMove(c.topic_id, c.partition, c.base_offset, key, 0, c.byte_size)
                          for key in state.merge_candidates(5_000, 3)
                          for c in state.object_batches(key))
            # The repeated first move is stale by then: it must be skipped.
            yield Merge(f"m{i}", 9_000, now, moves + moves[:1])
        elif kind == "compact" and state.logs():
            yield random_compaction(rng, state, f"c{i}", now)
        else:
            yield DeleteTopic("z", now)


def random_compaction(rng, state, key, now):
    """A cleaner's swap of one log: some batches rewritten smaller, some dropped; sometimes
    one of them as it was before a change (stale), or a replay of an earlier object key."""
    topic_id, partition = rng.choice(state.logs())
    coordinates = state.find_batches(topic_id, partition,
                                     state.log_info(topic_id, partition).log_start_offset, 1 << 30)
    chosen = rng.sample(coordinates, min(len(coordinates), rng.randrange(4)))
    rewrites, size = [], 0
    for c in sorted(chosen, key=lambda c: c.base_offset):
        new_size = rng.choice([0, max(1, c.byte_size // 2)])
        rewrites.append(BatchRewrite(c.base_offset, c.object_key, c.byte_offset,
                                     c.byte_size - (rng.random() < 0.1), size, new_size))
        size += new_size
    cleaned = max((c.last_offset + 1 for c in chosen), default=0)
    return Compact(topic_id, partition, key if rng.random() < 0.9 else "c0", size, now,
                   cleaned, tuple(rewrites))


def answers(control_plane):
    per_log = [(log, control_plane.log_info(*log), control_plane.find_batches(*log, 0, 1 << 30),
                control_plane.offset_for_timestamp(*log, 100_000),
                control_plane.max_timestamp_batch(*log), control_plane.last_stable_offset(*log),
                control_plane.aborted_transactions(*log, 0, 1 << 62),
                control_plane.active_producers(*log))
               for log in control_plane.logs()]
    return (per_log, control_plane.stats(), control_plane.files_to_delete(400_000, 10_000),
            [(key, control_plane.object_batches(key))
             for key in control_plane.merge_candidates(2_000, 10)])
