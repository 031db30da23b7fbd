"""The controller's copy of the cluster metadata log, ``__cluster_metadata-0``: a classic
log of JSON records, one per batch, appended and fsynced before they are applied."""

from __future__ import annotations

from pathlib import Path

from protocol.records import decode_json_records, encode_json_records, iter_batches
from replication.cluster_metadata import METADATA_TOPIC
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.log import KafkaStorageError


class MetadataLog:
    """The controller's copy of ``__cluster_metadata-0``."""

    def __init__(self, directory: Path) -> None:
        config = LogConfig(retention_ms=-1, segment_bytes=64 << 20)
        self.log = ClassicLog(METADATA_TOPIC, 0, config, directory / f"{METADATA_TOPIC}-0")

    async def load(self) -> list[tuple[int, dict]]:
        records = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            chunk = await self.log.read(offset, 1 << 20)
            decoded = decode_json_records(chunk.records)
            records += [(o, r) for o, r in decoded if o >= offset]
            offset = decoded[-1][0] + 1
        return records

    async def append(self, records: list[dict], leader_epoch: int = 0) -> int:
        """Append and fsync; return the offset of the first record."""
        data = encode_json_records(records)
        batches = list(iter_batches(data))
        result = await self.log.append(data, batches, leader_epoch)
        try:
            await self.log.flush()
        except KafkaStorageError:
            # Not durable, so not committed: the records must not be replayed on restart
            # (nor be followed by the next change) when the caller applies nothing.
            await self.log.truncate_to(result.base_offset)
            raise
        return result.base_offset
