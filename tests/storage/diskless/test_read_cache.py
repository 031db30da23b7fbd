"""The diskless read cache against the session S3 server: hits, coalesced misses, LRU
eviction by bytes."""

from __future__ import annotations

from storage.diskless.read_cache import ReadCache
from storage.objectstore import WAL_BUCKET

OBJECT = bytes(range(256)) * 4  # 1 KiB


async def put_object(store, s3_prefix, name="o"):
    key = f"{s3_prefix}{name}"
    await store.store.put(WAL_BUCKET, key, OBJECT)
    return key


async def test_misses_are_read_once_per_object_then_hit(store, s3_prefix):
    key = await put_object(store, s3_prefix)
    other = await put_object(store, s3_prefix, "p")
    cache = ReadCache(store)
    ranges = [(key, 0, 10), (key, 100, 20), (other, 5, 5)]
    assert await cache.read(ranges) == [OBJECT[0:10], OBJECT[100:120], OBJECT[5:10]]
    # One ranged read per object, with every range of that object in it.
    assert store.range_reads == [(key, [(0, 10), (100, 20)]), (other, [(5, 5)])]
    assert (cache.hits, cache.misses, cache.size_bytes) == (0, 3, 35)
    assert await cache.read([(other, 5, 5), (key, 0, 10)]) == [OBJECT[5:10], OBJECT[0:10]]
    assert len(store.range_reads) == 2 and (cache.hits, cache.misses) == (2, 3)
    assert cache.hit_rate == 2 / 5


async def test_least_recently_used_ranges_are_evicted_first(store, s3_prefix):
    key = await put_object(store, s3_prefix)
    cache = ReadCache(store, max_bytes=300)
    for offset in (0, 100, 200):
        await cache.read([(key, offset, 100)])
    await cache.read([(key, 0, 100)])  # now the most recently used
    await cache.read([(key, 300, 100)])  # evicts the range at 100
    reads = len(store.range_reads)
    await cache.read([(key, 0, 100), (key, 200, 100), (key, 300, 100)])
    assert len(store.range_reads) == reads and cache.size_bytes == 300
    await cache.read([(key, 100, 100)])
    assert store.range_reads[-1] == (key, [(100, 100)])


async def test_ranges_larger_than_the_cache_are_not_kept(store, s3_prefix):
    key = await put_object(store, s3_prefix)
    cache = ReadCache(store, max_bytes=50)
    assert await cache.read([(key, 0, 60)]) == [OBJECT[:60]]
    assert cache.size_bytes == 0
    cache.put(key, 0, 10, OBJECT[:10])
    cache.put(key, 0, 10, OBJECT[:10])  # already there: counted once
    assert cache.size_bytes == 10


async def test_prefetches_of_one_turn_are_read_together(store, s3_prefix):
    key = await put_object(store, s3_prefix)
    other = await put_object(store, s3_prefix, "p")
    missing = f"{s3_prefix}gone"
    cache = ReadCache(store)
    first = cache.prefetch([(key, 0, 10)])
    second = cache.prefetch([(other, 5, 5), (key, 100, 20)])
    assert first is second  # asked in the same turn: one read
    await first
    assert sorted(store.range_reads) == [(key, [(0, 10), (100, 20)]), (other, [(5, 5)])]
    assert cache.holds([(key, 0, 10), (key, 100, 20), (other, 5, 5)])
    # A range that cannot be read fails no prefetch: the read that wants it reports it.
    await cache.prefetch([(missing, 0, 10)])
    assert not cache.holds([(missing, 0, 10)])
