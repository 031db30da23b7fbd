"""storage.disk_space: the reserve data appends leave, and what an out-of-space error becomes."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from storage.classic.checkpoint import write_atomically
from storage.config import LogConfig
from storage.disk_space import (AUTO_RESERVE_MAX_BYTES, DiskFull, DiskSpace, storage_error)
from storage.log import KafkaStorageError
from storage.manager import LogManager


def test_appends_are_refused_below_the_reserve_until_twice_it_is_free(tmp_path, monkeypatch,
                                                                     caplog):
    free = 10_000
    monkeypatch.setattr(DiskSpace, "free_bytes", lambda self: free)
    space = DiskSpace(tmp_path, 3_000)
    with caplog.at_level(logging.WARNING, "storage.disk_space"):
        space.check_data_append(7_000, "t-0")
        with pytest.raises(DiskFull):
            space.check_data_append(7_001, "t-0")
        free = 5_000  # the disk filled on: small appends are refused too, not let through
        for size in (100, 1):
            with pytest.raises(DiskFull):
                space.check_data_append(size, "t-0")
        free = 6_000
        space.check_data_append(0, "t-0")
        space.check_data_append(3_000, "t-0")
    # One line when refusing starts, one when it ends: not one per append.
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "refused" in caplog.records[0].getMessage()
    assert "accepted" in caplog.records[1].getMessage()


def test_a_node_starting_with_less_than_twice_the_reserve_free_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(DiskSpace, "free_bytes", lambda self: 7_000)
    with pytest.raises(DiskFull):
        DiskSpace(tmp_path, 4_000).check_data_append(1, "t-0")


def test_the_default_reserve_is_a_share_of_the_file_system_capped(tmp_path):
    stats = os.statvfs(tmp_path)
    size = stats.f_blocks * stats.f_frsize
    assert DiskSpace(tmp_path).reserved_bytes == min(size // 20, AUTO_RESERVE_MAX_BYTES)
    DiskSpace(tmp_path, 0).check_data_append(1 << 40, "t-0")  # 0 reserves (checks) nothing


def test_out_of_space_becomes_disk_full_and_other_errors_a_storage_error():
    assert isinstance(storage_error("append", OSError(errno.ENOSPC, "full")), DiskFull)
    other = storage_error("read", OSError(errno.EIO, "I/O error"))
    assert isinstance(other, KafkaStorageError) and not isinstance(other, DiskFull)


async def test_the_reserve_applies_to_data_topics_not_internal_ones(tmp_path, produce,
                                                                    monkeypatch):
    monkeypatch.setattr(DiskSpace, "free_bytes", lambda self: 1_000)
    logs = LogManager(tmp_path, reserved_bytes=1_000)
    with pytest.raises(DiskFull):
        await produce(logs.open("orders", 0, LogConfig()), [b"a"])
    assert (await produce(logs.open("__consumer_offsets", 0, LogConfig()), [b"a"])).base_offset == 0
    await logs.close_all()


def test_a_failed_checkpoint_write_leaves_no_partial_copy(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError):
        write_atomically(tmp_path / "checkpoint", "42\n")
    assert list(tmp_path.iterdir()) == []
