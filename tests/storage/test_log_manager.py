"""LogManager: engine registry, partition directories, lifecycle and background loops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from storage import manager

from storage.classic import ClassicLog
from storage.classic.directories import TRASH
from storage.config import InvalidConfig, LogConfig
from storage.manager import LogManager


async def test_open_uses_the_engine_of_the_storage_mode(tmp_path, produce):
    logs = LogManager(tmp_path)
    log = logs.open("orders", 3, LogConfig())
    assert isinstance(log, ClassicLog)
    assert log.directory == tmp_path / "orders-3"
    assert logs.open("orders", 3, LogConfig()) is log
    assert logs.get("orders", 3) is log and logs.get("orders", 4) is None
    assert logs.logs() == [log]
    await produce(log, [b"a", b"b"])
    await logs.close_all()
    assert logs.get("orders", 3) is None

    reopened = LogManager(tmp_path).open("orders", 3, LogConfig())
    assert reopened.log_end_offset == 2


async def test_unknown_mode_is_a_clear_error_and_engines_can_register(tmp_path):
    logs = LogManager(tmp_path)
    with pytest.raises(InvalidConfig, match="diskless"):
        logs.open("t", 0, LogConfig(storage_mode="diskless"))

    opened = []

    def fake_engine(topic, partition, config, directory, *, clean_recovery_point=None):
        opened.append((topic, partition, directory))
        return ClassicLog(topic, partition, config, directory)

    logs.register_engine("diskless", fake_engine)
    logs.open("t", 0, LogConfig(storage_mode="diskless"))
    assert opened == [("t", 0, tmp_path / "t-0")]


async def test_directories_made_ahead_of_the_open(tmp_path, produce):
    """make_directories makes what a new classic log's first open would, so that the open
    makes nothing; it leaves an existing log's directory, and other engines', alone."""
    logs = LogManager(tmp_path)
    old = logs.open("old", 0, LogConfig(segment_bytes=200))
    for _ in range(3):
        await produce(old, [b"x" * 100])  # a segment each
    await old.delete_records_before(2)
    assert old.log_start_offset == 2
    logs.register_engine("diskless", lambda *args, **kwargs: ClassicLog(*args, **kwargs))
    await logs.make_directories([("new", 0, "classic"), ("old", 0, "classic"),
                                 ("other", 0, "diskless")])
    made = sorted(p.name for p in (tmp_path / "new-0").iterdir())
    assert made == [f"{0:020d}.log"]
    assert f"{0:020d}.log" not in {p.name for p in (tmp_path / "old-0").iterdir()}
    assert not (tmp_path / "other-0").exists()

    new = logs.open("new", 0, LogConfig())
    assert sorted(p.name for p in (tmp_path / "new-0").iterdir()) == made
    await produce(new, [b"a", b"b"])
    await logs.close_all()
    reopened = LogManager(tmp_path)
    assert reopened.open("new", 0, LogConfig()).log_end_offset == 2
    assert reopened.open("old", 0, LogConfig()).log_start_offset == 2


async def test_delete_partition_open_or_not(tmp_path, produce):
    logs = LogManager(tmp_path)
    await produce(logs.open("a", 0, LogConfig()), [b"x"])
    await logs.delete_partition("a", 0)
    assert not (tmp_path / "a-0").exists() and logs.get("a", 0) is None

    await produce(logs.open("b", 0, LogConfig()), [b"x"])
    await logs.close_all()
    await LogManager(tmp_path).delete_partition("b", 0)
    assert not (tmp_path / "b-0").exists()


async def test_unopened_partitions_are_moved_aside_by_one_child_and_a_reopen_waits(
        tmp_path, produce, monkeypatch):
    """A deleted topic's partitions never opened here have their directories renamed aside
    by one child process, off the event loop; a partition of the same name opened meanwhile
    (the topic made again) waits for it, and starts empty."""
    logs = LogManager(tmp_path)
    for partition in range(3):
        await produce(logs.open("t", partition, LogConfig()), [b"old"])
    await logs.close_all()
    logs = LogManager(tmp_path)
    jobs, moved = [], threading.Event()

    def slow_move(moves):  # a busy file system
        jobs.append(moves)
        time.sleep(0.2)
        move_all(moves)
        moved.set()

    move_all = manager.move_log_dirs_aside
    monkeypatch.setattr(manager, "move_log_dirs_aside", slow_move)
    deleting = asyncio.create_task(logs.delete_unopened([("t", p) for p in range(4)]))
    while not jobs:
        await asyncio.sleep(0.01)
    assert len(jobs) == 1 and len(jobs[0]) == 4  # t-3 was never made: skipped by the child
    again = logs.open("t", 0, LogConfig())  # waits for the child
    assert moved.is_set() and again.log_end_offset == 0
    await deleting
    await TRASH.emptied()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("t-")) == ["t-0"]


async def test_a_detached_log_is_deleted_later_without_touching_its_successor(tmp_path,
                                                                              produce):
    """A deleted topic's logs are removed in the background; one recreated meanwhile under
    the same name keeps its own records, and an interrupted removal is finished at start."""
    logs = LogManager(tmp_path)
    await produce(logs.open("t", 0, LogConfig()), [b"old"])
    old = logs.detach("t", 0)
    assert logs.get("t", 0) is None
    new = logs.open("t", 0, LogConfig())
    await produce(new, [b"new", b"newer"])
    await logs.delete_detached(old)
    await TRASH.emptied()
    assert new.log_end_offset == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("t-")] == ["t-0"]
    logs.detach("t", 0).release_directory()  # a crash before its removal
    assert LogManager(tmp_path).open("t", 0, LogConfig()).log_end_offset == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("t-")] == ["t-0"]


async def test_retention_and_flush_loops(tmp_path, produce):
    logs = LogManager(tmp_path)
    expiring = logs.open("old", 0, LogConfig(retention_ms=1000, segment_ms=1))
    await produce(expiring, [b"x"], timestamps=[1])
    await produce(expiring, [b"y"], timestamps=[2])
    # flush.ms elapses after the append, so only the flush loop can flush this one.
    flushed = logs.open("flushed", 0, LogConfig(flush_ms=50))
    await produce(flushed, [b"z"])
    assert not (tmp_path / "flushed-0" / "recovery-point").exists()
    unflushed = logs.open("unflushed", 0, LogConfig())
    await produce(unflushed, [b"z"])

    tasks = [asyncio.create_task(logs.run_retention(0.01)),
             asyncio.create_task(logs.run_flush(0.01))]
    await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    assert expiring.log_start_offset == 2 == expiring.log_end_offset
    assert (tmp_path / "flushed-0" / "recovery-point").read_text().strip() == "1"
    assert not (tmp_path / "unflushed-0" / "recovery-point").exists()
    await logs.flush_all()
    assert (tmp_path / "unflushed-0" / "recovery-point").read_text().strip() == "1"
    await logs.close_all()


async def test_an_engines_own_retention_runs_on_the_logs_schedule(tmp_path):
    """An engine that applies retention to all its partitions at once (diskless) is called
    by the same loop, at the same interval, as every log's enforce_retention."""
    logs = LogManager(tmp_path)
    calls: list[int] = []

    async def retention(now_ms: int) -> int:
        calls.append(now_ms)
        return 0

    logs.register_engine("shared", ClassicLog, retention=retention)
    task = asyncio.create_task(logs.run_retention(0.05))
    await asyncio.sleep(0.18)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert 2 <= len(calls) <= 4
