"""The WAL writer against the in-memory control plane and the session S3 server: when a
buffer closes (also at the batches one commit record can name), the order of commits, and
that every waiting producer gets an answer."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode

from protocol.records import validate_produce_records
from storage.diskless.control_plane import (
    COMMIT_MAX_BATCHES,
    MAX_REQUEST_BYTES,
    CommitFile,
    wire_size,
)
from storage.diskless.memory_control_plane import InMemoryControlPlane
from storage.diskless.read_cache import ReadCache
from storage.diskless.wal_writer import CommitFailed, WalWriter
from storage.log import KafkaStorageError, RecordListTooLarge
from storage.objectstore import WAL_BUCKET

HOUR_MS = 3_600_000


@pytest.fixture
async def make_writer(store, control_plane, s3_prefix):
    writers = []

    def make(commit_interval_ms=HOUR_MS, buffer_max_bytes=1 << 20, plane=None, cache=None,
             hedge_after_s=None, commit_per_partition=False, max_batches=COMMIT_MAX_BATCHES):
        writer = WalWriter(store, plane or control_plane, s3_prefix, node_id=1,
                           commit_interval_ms=commit_interval_ms,
                           buffer_max_bytes=buffer_max_bytes, cache=cache,
                           hedge_after_s=hedge_after_s,
                           commit_per_partition=commit_per_partition, max_batches=max_batches)
        writers.append(writer)
        return writer
    yield make
    for writer in writers:
        await writer.close()


def append(writer, build_batch, *values, partition=0, topic_id="t"):
    records = build_batch(list(values))
    return writer.append(topic_id, partition, records, validate_produce_records(records), False)


async def test_buffer_closes_after_the_commit_interval(make_writer, build_batch, store,
                                                       control_plane):
    writer = make_writer(commit_interval_ms=100)
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = append(writer, build_batch, b"a", b"b")
    second = append(writer, build_batch, b"c", partition=1)
    third = append(writer, build_batch, b"d")
    results = await asyncio.wait_for(asyncio.gather(first, second, third), 10)
    assert loop.time() - started >= 0.09
    # One object, one commit, for every partition in the buffer.
    assert len(store.puts) == 1 and writer.stats.commits == 1 and writer.stats.batches == 3
    assert [[r.base_offset for r in rs] for rs in results] == [[0], [0], [2]]
    assert control_plane.log_info("t", 0).high_watermark == 3
    assert [c.object_key for c in control_plane.find_batches("t", 1, 0, 1 << 20)] == store.puts


async def test_buffer_closes_at_its_size_limit(make_writer, build_batch, store):
    writer = make_writer(buffer_max_bytes=1)  # every append fills the buffer
    first = await asyncio.wait_for(append(writer, build_batch, b"a"), 10)
    second = await asyncio.wait_for(append(writer, build_batch, b"bb"), 10)
    assert (first[0].base_offset, second[0].base_offset) == (0, 1)
    assert len(store.puts) == 2 and writer.stats.uploads == 2
    sizes = [len(build_batch([value])) for value in (b"a", b"bb")]
    assert writer.stats.upload_bytes == sum(sizes)


async def test_a_buffer_of_thousands_of_partitions_commits_in_records_that_fit(
        make_writer, build_batch, store, control_plane):
    """6,000 partitions' small batches in one commit interval: one CommitFile naming them
    all would be larger than a record of the coordinator's log, so the buffer closes at
    the batches one record can name, and every batch is committed."""
    writer = make_writer()  # closes after an hour or 1 MiB: neither happens here
    topic_id = str(uuid.uuid4())  # as long as a cluster's, as are the records' sizes
    pending = [append(writer, build_batch, f"{partition}".encode(), partition=partition,
                      topic_id=topic_id) for partition in range(6_000)]
    await writer.close()
    results = await asyncio.wait_for(asyncio.gather(*pending), 30)
    assert all(r.error_code == ErrorCode.none and r.base_offset == 0
               for (r,) in results)
    commits = control_plane.submitted(CommitFile)
    assert sum(map(wire_size, (b for c in commits for b in c.batches))) > MAX_REQUEST_BYTES
    assert [len(c.batches) for c in commits] == [COMMIT_MAX_BATCHES] * 2 + [
        6_000 - 2 * COMMIT_MAX_BATCHES]
    assert all(wire_size(c) <= MAX_REQUEST_BYTES for c in commits)
    assert len(store.puts) == len(commits)
    assert control_plane.log_info(topic_id, 5_999).high_watermark == 1


async def test_an_append_of_more_batches_than_a_commit_names_is_refused(
        make_writer, build_batch, store, control_plane):
    """An append is committed whole, in one object: one whose batches no commit record
    can name fails at once (RECORD_LIST_TOO_LARGE), and nothing of it is buffered."""
    writer = make_writer(max_batches=2)
    records = build_batch([b"a"]) + build_batch([b"b"]) + build_batch([b"c"])
    with pytest.raises(RecordListTooLarge, match="3 batches in one append exceed the 2"):
        writer.append("t", 0, records, validate_produce_records(records), False)
    fits = records[:len(records) * 2 // 3]
    results = writer.append("t", 0, fits, validate_produce_records(fits), False)
    assert [r.base_offset for r in await asyncio.wait_for(results, 10)] == [0, 1]
    assert len(store.puts) == 1 and len(control_plane.submitted(CommitFile)) == 1


async def test_commit_per_partition_sends_one_commit_per_partition_of_the_object(
        make_writer, build_batch, store, control_plane):
    writer = make_writer(commit_per_partition=True)
    pending = [append(writer, build_batch, b"a", partition=0),
               append(writer, build_batch, b"b", partition=1),
               append(writer, build_batch, b"c", b"d", partition=0),
               append(writer, build_batch, b"e", partition=2)]
    await writer.close()
    results = await asyncio.wait_for(asyncio.gather(*pending), 10)
    assert [rs[0].base_offset for rs in results] == [0, 0, 1, 0]
    assert (writer.stats.uploads, writer.stats.commits, writer.stats.batches) == (1, 3, 4)
    for partition, high_watermark in ((0, 3), (1, 1), (2, 1)):
        assert control_plane.log_info("t", partition).high_watermark == high_watermark
        assert {c.object_key for c in control_plane.find_batches("t", partition, 0, 1 << 20)
                } == set(store.puts)
    assert control_plane.stats().objects == 1


async def test_commits_follow_buffer_order_while_uploads_run_concurrently(
        make_writer, build_batch, store, control_plane):
    writer = make_writer(buffer_max_bytes=1)
    release_first, = store.hold_puts(1)
    first = append(writer, build_batch, b"first")
    second = append(writer, build_batch, b"second")
    # The second object is uploaded while the first upload hangs, but not committed.
    await asyncio.wait_for(_until(lambda: len(store.puts) == 1), 10)
    await asyncio.sleep(0.05)
    assert not second.done() and control_plane.log_info("t", 0).high_watermark == 0
    release_first.set()
    results = await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert [rs[0].base_offset for rs in results] == [0, 1]
    committed = [c.object_key for c in control_plane.find_batches("t", 0, 0, 1 << 20)]
    assert committed == list(reversed(store.puts))  # uploaded 2nd-then-1st, committed 1st-then-2nd


async def test_failed_upload_answers_every_producer_and_later_buffers_commit(
        make_writer, build_batch, store, control_plane):
    writer = make_writer(buffer_max_bytes=1 << 20, commit_interval_ms=50)
    store.fail_puts(1)
    failed = [append(writer, build_batch, b"a"), append(writer, build_batch, b"b", partition=1)]
    for future in failed:
        with pytest.raises(KafkaStorageError):
            await asyncio.wait_for(future, 10)
    assert writer.stats.upload_failures == 1 and writer.stats.commits == 0
    retried = await asyncio.wait_for(append(writer, build_batch, b"a"), 10)
    assert retried[0].base_offset == 0 and control_plane.log_info("t", 0).high_watermark == 1


class UnreachableControlPlane(InMemoryControlPlane):
    async def submit(self, request):
        raise ConnectionError("no coordinator")


async def test_failed_commit_answers_every_producer(make_writer, build_batch, store):
    writer = make_writer(commit_interval_ms=50, plane=UnreachableControlPlane())
    pending = [append(writer, build_batch, b"a"), append(writer, build_batch, b"b", partition=3)]
    for future in pending:
        with pytest.raises(CommitFailed):
            await asyncio.wait_for(future, 10)
    # The object was uploaded and becomes an orphan for the GC.
    assert writer.stats.commit_failures == 1 and len(store.puts) == 1


async def test_uploader_fills_the_read_cache_and_close_flushes(make_writer, build_batch, store,
                                                               control_plane):
    cache = ReadCache(store.store)
    writer = make_writer(cache=cache)
    pending = append(writer, build_batch, b"cached")
    await writer.close()  # closes the open buffer and waits for its commit
    assert pending.result()[0].base_offset == 0
    [coordinate] = control_plane.find_batches("t", 0, 0, 1 << 20)
    [data] = await cache.read([(coordinate.object_key, coordinate.byte_offset,
                                coordinate.byte_size)])
    assert (cache.hits, cache.misses) == (1, 0)
    assert data == await store.store.get_range(WAL_BUCKET, coordinate.object_key,
                                               coordinate.byte_offset, coordinate.byte_size)


async def test_hedged_put_completes_the_upload_when_the_first_put_hangs(
        make_writer, build_batch, store, control_plane):
    writer = make_writer(hedge_after_s=0.2)
    hung, = store.hold_puts(1)  # the first PUT never answers
    produced = [(partition, build_batch([f"value-{partition}".encode()]))
                for partition in range(3)]
    pending = [writer.append("t", partition, records, validate_produce_records(records), False)
               for partition, records in produced]
    await writer.close()
    results = await asyncio.wait_for(asyncio.gather(*pending), 10)
    assert [rs[0].base_offset for rs in results] == [0, 0, 0]
    assert (writer.stats.hedged_puts, writer.stats.hedged_put_wins) == (1, 1)
    assert writer.stats.uploads == 1 and writer.stats.upload_failures == 0
    # Every acknowledged batch reads back, byte for byte, from the object the hedge wrote.
    for partition, records in produced:
        [coordinate] = control_plane.find_batches("t", partition, 0, 1 << 20)
        assert [coordinate.object_key] == store.puts
        assert await store.store.get_range(WAL_BUCKET, coordinate.object_key,
                                           coordinate.byte_offset,
                                           coordinate.byte_size) == bytes(records)
    hung.set()  # the first PUT was cancelled: it writes nothing more
    await asyncio.sleep(0.05)
    assert len(store.puts) == 1


async def test_hedged_upload_survives_a_failed_hedge_and_fast_puts_are_not_hedged(
        make_writer, build_batch, store, control_plane):
    writer = make_writer(buffer_max_bytes=1, hedge_after_s=0.2)
    slow, = store.hold_puts(1)
    first = append(writer, build_batch, b"slow")
    await asyncio.wait_for(_until(lambda: not store.held), 10)  # the first PUT is waiting
    store.fail_puts(1)  # ... and the hedge will fail
    await asyncio.wait_for(_until(lambda: writer.stats.hedged_puts == 1), 10)
    await asyncio.sleep(0.05)
    assert not first.done()
    slow.set()
    assert (await asyncio.wait_for(first, 10))[0].base_offset == 0
    assert writer.stats.hedged_put_wins == 0 and writer.stats.upload_failures == 0
    writer.hedge_after_s = 30  # an ordinary PUT answers long before: one PUT
    assert (await asyncio.wait_for(append(writer, build_batch, b"fast"), 10))[0].base_offset == 1
    assert writer.stats.hedged_puts == 1 and len(store.puts) == 2


async def _until(predicate):
    while not predicate():
        await asyncio.sleep(0.01)
