"""A data directory's clean shutdown: one recovery-point checkpoint and one marker for every
log (storage.classic.clean_shutdown), and what a crash around them leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from storage import manager
from storage.classic.clean_shutdown import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINTS_FILE,
    parse_recovery_points,
)
from storage.classic.local_log import CLEAN_SHUTDOWN_FILE
from storage.config import LogConfig
from storage.manager import LogManager



def segment(data_dir, partition: int):
    return data_dir / f"t-{partition}" / f"{0:020d}.log"


def corrupt_last_batch(data_dir, partition: int) -> None:
    """A flipped byte in the records of the partition's last batch: a recovery (CRC check)
    cuts that batch, a clean open does not look."""
    path = segment(data_dir, partition)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_close_all_writes_one_checkpoint_and_one_marker_after_one_sync(
        tmp_path, produce, read_all, monkeypatch):
    """10,000 marker files were half of what closing 10,000 logs cost: close_all syncs the
    file system once, then writes one checkpoint and one marker for the directory; the next
    start trusts them (no recovery) and removes the marker before any log is opened."""
    logs = LogManager(tmp_path)
    for partition in range(20):
        await produce(logs.open("t", partition, LogConfig()), [b"a", b"b"])
    syncs = []
    monkeypatch.setattr(manager, "sync_file_system", syncs.append)
    await logs.close_all()
    monkeypatch.undo()
    assert syncs == [tmp_path]
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert parse_recovery_points((tmp_path / RECOVERY_POINTS_FILE).read_bytes()) \
        == {("t", partition): 2 for partition in range(20)}
    assert not any((tmp_path / f"t-{p}" / CLEAN_SHUTDOWN_FILE).exists() for p in range(20))

    corrupt_last_batch(tmp_path, 0)  # trusted as closed: a clean log is not CRC-checked
    reopened = LogManager(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()  # a crash from now on is unclean
    assert reopened.open("t", 0, LogConfig()).log_end_offset == 2
    assert [value for _, _, value in await read_all(reopened.open("t", 1, LogConfig()))] \
        == [b"a", b"b"]


async def test_logs_not_opened_keep_their_entries_and_deleted_ones_lose_them(
        tmp_path, produce):
    logs = LogManager(tmp_path)
    for partition in range(3):
        await produce(logs.open("t", partition, LogConfig()), [b"a"] * (partition + 1))
    await logs.close_all()

    restarted = LogManager(tmp_path)
    await produce(restarted.open("t", 0, LogConfig()), [b"b"])
    await restarted.delete_partition("t", 2)  # never opened in this run
    await restarted.close_all()
    assert parse_recovery_points((tmp_path / RECOVERY_POINTS_FILE).read_bytes()) \
        == {("t", 0): 2, ("t", 1): 2}

    again = LogManager(tmp_path)
    assert [again.open("t", p, LogConfig()).log_end_offset for p in range(3)] == [2, 2, 0]


def test_kill_9_between_the_checkpoint_and_the_marker_recovers_every_log(tmp_path):
    """The checkpoint is written and fsynced, the process is killed before the marker: the
    next start finds no marker, ignores the checkpoint and recovers each log from its own
    recovery point (CRC-checked: a corrupted batch is cut), every other record kept."""
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from storage.classic import clean_shutdown
        from storage.config import LogConfig
        from storage.manager import LogManager
        from tests.storage.conftest import _produce

        def write_atomically(path, content, **kwargs):
            if path.endswith(clean_shutdown.CLEAN_SHUTDOWN_MARKER):
                os.kill(os.getpid(), signal.SIGKILL)
            real(path, content, **kwargs)

        real = clean_shutdown.write_atomically
        clean_shutdown.write_atomically = write_atomically

        async def main():
            logs = LogManager({str(tmp_path)!r})
            for partition in range(5):
                await _produce(logs.open("t", partition, LogConfig()), [b"a", b"b", b"c"])
            await logs.close_all()

        asyncio.run(main())
    """)
    # The storage tests' helpers import tests/support.
    path = os.pathsep.join([os.getcwd(), os.path.join(os.getcwd(), "tests")])
    done = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), timeout=120,
                          env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == -signal.SIGKILL
    assert (tmp_path / RECOVERY_POINTS_FILE).exists()
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    corrupt_last_batch(tmp_path, 0)
    logs = LogManager(tmp_path)
    # Partition 0 was recovered (its one batch cut), the others kept every record.
    assert [logs.open("t", p, LogConfig()).log_end_offset for p in range(5)] == [0, 3, 3, 3, 3]


async def test_the_active_segment_of_a_clean_log_is_read_when_first_used(
        tmp_path, produce, read_all):
    """A restarting broker is asked the end of most of its logs (ListOffsets, its followers'
    fetches at the end) before anything else: a log the checkpoint says was closed cleanly
    takes its end from it, and its active segment's indexes are read on first use."""
    config = LogConfig(segment_bytes=400)
    logs = LogManager(tmp_path)
    log = logs.open("t", 0, config)
    for i in range(8):
        await produce(log, [b"x%d" % i] * 3, timestamps=[1000 + i] * 3)
    expected = await read_all(log)
    assert len(log._local.segments) > 1
    await logs.close_all()

    reopened = LogManager(tmp_path).open("t", 0, config)
    active = reopened._local.active
    assert (reopened.log_end_offset, active.indexes_loaded) == (24, False)
    assert await read_all(reopened) == expected
    assert (await reopened.max_timestamp()).offset == 21
    assert (await reopened.offset_for_timestamp(1006)).offset == 18
    assert (await produce(reopened, [b"y"])).base_offset == 24
    assert [value for _, _, value in await read_all(reopened, 24)] == [b"y"]
