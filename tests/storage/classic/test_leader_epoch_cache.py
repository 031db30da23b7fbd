"""LeaderEpochCache against Kafka's LeaderEpochFileCache semantics."""

from __future__ import annotations

import pytest

from storage.classic.leader_epoch import EpochEntry, LeaderEpochCache
from storage.log import EpochEndOffset, KafkaStorageError


@pytest.fixture
def cache(tmp_path) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")


def test_assign_keeps_epochs_and_offsets_increasing(cache):
    assert cache.latest_epoch == -1
    cache.assign(2, 10)
    cache.assign(2, 15)  # same epoch, later offset: no change
    assert cache.entries == (EpochEntry(2, 10),)
    cache.assign(2, 5)  # same epoch, earlier offset: moves the start back
    assert cache.entries == (EpochEntry(2, 5),)
    cache.assign(4, 20)
    cache.assign(6, 30)
    # A smaller epoch, or one starting at or before a later entry, replaces those entries.
    cache.assign(5, 25)
    assert cache.entries == (EpochEntry(2, 5), EpochEntry(4, 20), EpochEntry(5, 25))
    cache.assign(7, 20)
    assert cache.entries == (EpochEntry(2, 5), EpochEntry(7, 20))
    assert cache.latest_epoch == 7
    with pytest.raises(ValueError):
        cache.assign(-1, 40)


def test_checkpoint_file_uses_kafkas_format(cache, tmp_path):
    cache.assign(0, 0)
    cache.assign(3, 150)
    # Appended epochs reach the file when the log saves them (flush, close), not per append.
    assert not cache.path.exists()
    cache.save(sync=True)
    assert cache.path.read_text() == "0\n2\n0 0\n3 150\n"
    assert LeaderEpochCache(cache.path).entries == cache.entries
    cache.clear()
    assert cache.path.read_text() == "0\n0\n"
    cache.path.write_text("0\n2\n1 5\n")
    with pytest.raises(KafkaStorageError):
        LeaderEpochCache(cache.path)


def test_end_offset_for(cache):
    assert cache.end_offset_for(0, 100) == EpochEndOffset(-1, -1)
    for epoch, start in [(1, 10), (3, 40), (5, 70)]:
        cache.assign(epoch, start)
    # The latest epoch ends at the log end offset.
    assert cache.end_offset_for(5, 100) == EpochEndOffset(5, 100)
    # A known older epoch ends where the next one starts.
    assert cache.end_offset_for(3, 100) == EpochEndOffset(3, 70)
    assert cache.end_offset_for(1, 100) == EpochEndOffset(1, 40)
    # An unknown epoch between known ones: the largest smaller epoch, with the start of the
    # next larger one.
    assert cache.end_offset_for(4, 100) == EpochEndOffset(3, 70)
    assert cache.end_offset_for(2, 100) == EpochEndOffset(1, 40)
    # Below every known epoch: the requested epoch ends where the first known one starts.
    assert cache.end_offset_for(0, 100) == EpochEndOffset(0, 10)
    # Above every known epoch, or undefined.
    assert cache.end_offset_for(6, 100) == EpochEndOffset(-1, -1)
    assert cache.end_offset_for(-1, 100) == EpochEndOffset(-1, -1)


def test_truncate_from_end(cache):
    for epoch, start in [(1, 10), (3, 40), (5, 70)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(71)
    assert cache.latest_epoch == 5
    cache.truncate_from_end(40)
    assert cache.entries == (EpochEntry(1, 10),)
    assert LeaderEpochCache(cache.path).entries == (EpochEntry(1, 10),)


def test_truncate_from_start(cache):
    for epoch, start in [(1, 10), (3, 40), (5, 70)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(5)
    assert cache.entries[0] == EpochEntry(1, 10)
    cache.truncate_from_start(50)
    assert cache.entries == (EpochEntry(3, 50), EpochEntry(5, 70))
    cache.truncate_from_start(70)
    assert cache.entries == (EpochEntry(5, 70),)
    assert LeaderEpochCache(cache.path).entries == (EpochEntry(5, 70),)
