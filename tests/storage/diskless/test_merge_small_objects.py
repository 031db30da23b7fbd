"""Merging of small WAL objects (KIP-1165, coordinator/diskless/housekeeping.py) against the
in-memory control plane and the session S3 server: it goes on however many merged objects
are already there, and reads of the merged log return what was appended."""

from __future__ import annotations

from coordinator.diskless.housekeeping import Housekeeping, HousekeepingSettings
from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs
from protocol.records import validate_produce_records
from storage.config import LogConfig
from storage.diskless.log import DisklessLog
from storage.diskless.read_cache import ReadCache
from storage.diskless.wal_writer import WalWriter

CONFIG = LogConfig(storage_mode="diskless")
ROUNDS = 12  # more merged objects than merging ever looked at (4 x merge_max_objects)


async def test_merging_goes_on_past_many_small_merged_objects(
        control_plane, store, s3_prefix, build_batch, decode):
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    log = DisklessLog("t", 0, CONFIG, "topic-id", control_plane, writer, ReadCache(store.store))
    image = MetadataImage()
    housekeeping = Housekeeping(
        control_plane, lambda: True, image, store, s3_prefix,
        DynamicConfigs(0, image, {}, {}),
        HousekeepingSettings(merge_min_objects=2, merge_max_objects=2))
    values = []
    try:
        for round_ in range(ROUNDS):
            # Two WAL objects, then one merge of them into one small merged object, which
            # is never merged again.
            for i in range(2):
                values.append(f"r{round_}-{i}".encode())
                records = build_batch([values[-1]])
                await log.append(records, validate_produce_records(records), -1)
            await housekeeping.merge_small_objects()
            assert housekeeping.stats.merges == round_ + 1
        merged = {key for key, _ in control_plane.merge_candidates(1 << 40, 100)}
        assert len(merged) == ROUNDS
        assert all(key.startswith(f"{s3_prefix}wal/merged-") for key in merged)
        read = [value for _, _, value in decode((await log.read(0, 1 << 20)).records)]
        assert read == values
        # Each round read its two WAL objects once, with one ranged GET each.
        assert [key for key, _ in store.range_reads[-2:]] == store.puts[-3:-1]
    finally:
        await writer.close()
